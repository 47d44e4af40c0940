/* managed.c (py/): managed_array() and the methods only a ManagedNDArray
 * has, prefetch() and advise(). The type and all it shares with
 * MappedNDArray are hostarray.c's; records are core/memory.c's, hints
 * core/managed.c's. */
#include "npy.h"

#include "../core/managed.h"
#include "array.h"
#include "device.h"
#include "hostarray.h"

/* Zero-size arrays allocate nothing; NumPy still wants an address. */
static char empty_data[1];

/* A location argument: None (the memory's device), 'host' (*to* NULL),
 * an int ordinal or a Device. */
static int
parse_location(cmpy_state *st, PyObject *arg, cm_device *home, cm_device **to)
{
    cmpy_Device *device;

    if (arg == NULL || arg == Py_None) {
        *to = home;
        return 0;
    }
    if (PyUnicode_Check(arg)) {
        if (PyUnicode_CompareWithASCIIString(arg, "host") != 0) {
            PyErr_Format(PyExc_ValueError,
                         "device must be a device ordinal, a Device or "
                         "'host', not %R",
                         arg);
            return -1;
        }
        *to = NULL;
        return 0;
    }
    if (cmpy_device_parse(st, arg, &device) < 0) {
        return -1;
    }
    *to = device->dev;
    return 0;
}

/* The bytes self's elements span: [*ptr, *ptr + *nbytes); 0 bytes for an
 * empty array. */
static int
span_of(PyObject *self, CUdeviceptr *ptr, size_t *nbytes)
{
    PyArrayObject *arr = (PyArrayObject *)self;
    Py_ssize_t size, low, high;

    if (cmpy_layout_extent(PyArray_NDIM(arr), PyArray_DIMS(arr),
                           PyArray_STRIDES(arr), PyArray_ITEMSIZE(arr), &size,
                           &low, &high) < 0) {
        return -1;
    }
    *ptr = (CUdeviceptr)(uintptr_t)PyArray_DATA(arr) + (CUdeviceptr)low;
    *nbytes = (size_t)(high - low);
    return 0;
}

PyDoc_STRVAR(prefetch_doc,
             "prefetch(device=None, stream=0) -> None\n\n"
             "Migrates the bytes this array spans (a view: its own) to "
             "*device* (an\nordinal or a Device; None: the array's) or to "
             "'host' before they are\nused there (cuMemPrefetchAsync). "
             "Synchronous on stream 0, queued on a\nstream. Needs a "
             "device with concurrent managed access and a 12.2\ndriver "
             "(CudaSupportError otherwise).");

static PyObject *
managed_prefetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {"device", "stream"};
    cmpy_state *st = cmpy_type_state(self);
    PyObject *argv[2];
    cmpy_stream_ref ref;
    cm_device *home, *to;
    CUdeviceptr ptr;
    size_t nbytes;
    cm_error err;
    int rc;

    if (cmpy_parse_args("prefetch", names, 2, 0, args, nargs, kwnames, argv) <
            0 ||
        cmpy_hostarray_owner(st, self, &home) == NULL) {
        return NULL;
    }
    if (parse_location(st, argv[0], home, &to) < 0 ||
        cmpy_stream_arg(st, argv[1] != NULL ? argv[1] : Py_None, home, &ref) <
            0 ||
        span_of(self, &ptr, &nbytes) < 0) {
        return NULL;
    }
    if (nbytes == 0) {
        Py_RETURN_NONE; /* the driver refuses an empty range */
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_managed_prefetch(home, ptr, nbytes, to, ref.handle, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    if (!ref.async && cmpy_stream_wait(st, home, ref.handle) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The advice names, in CUmem_advise order (1 to 6), and whether 'host'
 * is a location for them (the others ignore the location). */
static const struct {
    const char *name;
    int host;
} advices[] = {
    {"read_mostly", 0},        {"unset_read_mostly", 0},
    {"preferred_location", 1}, {"unset_preferred_location", 0},
    {"accessed_by", 1},        {"unset_accessed_by", 1},
};

#define N_ADVICES ((int)(sizeof(advices) / sizeof(advices[0])))

/* An advice name or its CUmem_advise number: the index in advices. */
static int
parse_advice(PyObject *arg, int *index)
{
    if (PyUnicode_Check(arg)) {
        for (int i = 0; i < N_ADVICES; i++) {
            if (PyUnicode_CompareWithASCIIString(arg, advices[i].name) == 0) {
                *index = i;
                return 0;
            }
        }
    }
    else if (PyLong_Check(arg) && !PyBool_Check(arg)) {
        int overflow;
        long v = PyLong_AsLongAndOverflow(arg, &overflow);

        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (!overflow && v >= CU_MEM_ADVISE_SET_READ_MOSTLY &&
            v <= CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
            *index = (int)(v - CU_MEM_ADVISE_SET_READ_MOSTLY);
            return 0;
        }
    }
    else {
        PyErr_Format(PyExc_TypeError,
                     "advice must be a str or an int, not %.200s",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    PyErr_Format(PyExc_ValueError,
                 "unknown advice %R: use 'read_mostly', "
                 "'unset_read_mostly', 'preferred_location', "
                 "'unset_preferred_location', 'accessed_by', "
                 "'unset_accessed_by' or their CUmem_advise values 1 to 6",
                 arg);
    return -1;
}

PyDoc_STRVAR(advise_doc,
             "advise(advice, device=None) -> None\n\n"
             "cuMemAdvise for the bytes this array spans: *advice* is "
             "'read_mostly',\n'unset_read_mostly', 'preferred_location', "
             "'unset_preferred_location',\n'accessed_by' or "
             "'unset_accessed_by' (or its CUmem_advise value); "
             "*device*\n(an ordinal or a Device; None: the array's) is "
             "the location, 'host'\nfor the preferred location and "
             "accessed-by hints. The location hints\nneed a device with "
             "concurrent managed access and a 12.2 driver\n"
             "(CudaSupportError otherwise).");

static PyObject *
managed_advise(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    static const char *const names[] = {"advice", "device"};
    cmpy_state *st = cmpy_type_state(self);
    PyObject *argv[2];
    cm_device *home, *to;
    CUdeviceptr ptr;
    size_t nbytes;
    cm_error err;
    int index, rc;

    if (cmpy_parse_args("advise", names, 2, 1, args, nargs, kwnames, argv) <
            0 ||
        parse_advice(argv[0], &index) < 0 ||
        cmpy_hostarray_owner(st, self, &home) == NULL) {
        return NULL;
    }
    if (parse_location(st, argv[1], home, &to) < 0) {
        return NULL;
    }
    if (to == NULL && !advices[index].host) {
        PyErr_Format(PyExc_ValueError,
                     "'host' is not a location for advice %R: only "
                     "'preferred_location', 'accessed_by' and "
                     "'unset_accessed_by' take it",
                     argv[0]);
        return NULL;
    }
    if (span_of(self, &ptr, &nbytes) < 0) {
        return NULL;
    }
    if (nbytes == 0) {
        Py_RETURN_NONE; /* the driver refuses an empty range */
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_managed_advise(
        home, ptr, nbytes,
        (CUmem_advise)(index + CU_MEM_ADVISE_SET_READ_MOSTLY), to, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

#define FASTKW(fn)                                                            \
    (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef cmpy_managed_ndarray_methods[] = {
    {"prefetch", FASTKW(managed_prefetch), prefetch_doc},
    {"advise", FASTKW(managed_advise), advise_doc},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------------
 * Module functions. */

PyObject *
cmpy_managed_empty(PyObject *module, cm_device *dev, PyArray_Descr *dtype,
                   int ndim, const Py_ssize_t *shape,
                   const Py_ssize_t *strides, int attach_global,
                   const cmpy_stream_ref *ref)
{
    Py_ssize_t size, low, high;
    cmpy_MemoryPointer *mp;
    PyObject *mem;

    /* The type first: failing to make it allocates nothing. */
    if (cmpy_layout_extent(ndim, shape, strides, PyDataType_ELSIZE(dtype),
                           &size, &low, &high) < 0 ||
        cmpy_hostarray_type(module, CMPY_HOSTARRAY_MANAGED) == NULL) {
        return NULL;
    }
    mem = cmpy_memory_alloc_managed(cmpy_get_state(module), dev,
                                    (size_t)(high - low), attach_global);
    if (mem == NULL) {
        return NULL;
    }
    mp = (cmpy_MemoryPointer *)mem;
    return cmpy_hostarray_new(
        module, CMPY_HOSTARRAY_MANAGED, dtype, ndim, shape, strides,
        size != 0 ? (char *)(uintptr_t)mp->ptr - low : empty_data, mem, ref);
}

PyDoc_STRVAR(managed_array_doc,
             "managed_array($module, shape, dtype=None, strides=None, "
             "order='C', stream=0, attach_global=True)\n--\n\n"
             "An uninitialized array in managed memory of the current "
             "device, as\nnumpy.empty: host and device use the same "
             "memory. With\nattach_global=False the memory is attached to "
             "the host\n(CU_MEM_ATTACH_HOST) until a stream attaches it. "
             "A zero-size array\nallocates nothing.");

static PyObject *
managed_array(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    static const char *const names[] = {"shape", "dtype",  "strides",
                                        "order", "stream", "attach_global"};
    cmpy_state *st = cmpy_get_state(module);
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    PyArray_Descr *dtype = NULL;
    PyObject *argv[6], *arr = NULL;
    cmpy_stream_ref ref;
    cm_device *dev;
    int ndim, attach_global = 1;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("managed_array", names, 6, 1, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_parse_layout(st, argv[0], argv[1], argv[2], argv[3], &ndim, shape,
                          strides, &dtype) < 0) {
        return NULL;
    }
    if ((argv[5] == NULL || (attach_global = PyObject_IsTrue(argv[5])) >= 0) &&
        cmpy_current_device(st, &dev) == 0 &&
        cmpy_stream_arg(st, argv[4] != NULL ? argv[4] : Py_None, dev, &ref) ==
            0) {
        arr = cmpy_managed_empty(module, dev, dtype, ndim, shape, strides,
                                 attach_global, &ref);
    }
    Py_DECREF(dtype);
    return arr;
}

PyMethodDef cmpy_managed_methods[] = {
    {"managed_array", (PyCFunction)(void (*)(void))managed_array,
     METH_FASTCALL | METH_KEYWORDS, managed_array_doc},
    {NULL, NULL, 0, NULL},
};
