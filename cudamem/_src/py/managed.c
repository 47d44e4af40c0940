/* managed.c (py/): managed_array() and ManagedNDArray, a NumPy subclass
 * over a managed allocation with a device side made on first use, and its
 * prefetch() and advise(). The type is made with the first managed array
 * (DESIGN rule 1). Records are core/memory.c's, hints core/managed.c's. */
#include "npy.h"

#include <stdalign.h>
#include <string.h>

#include "../core/managed.h"
#include "array.h"
#include "device.h"

/* What a ManagedNDArray adds to a NumPy array. It lives after the array's
 * fields as NumPy sizes them at run time, not as the headers cudamem was
 * built with say. */
typedef struct managed_extra {
    PyObject *device; /* the device side, made on first use, or NULL */
    PyObject *stream; /* the stream= it was made with, or NULL: 0 */
    CUstream handle;  /* ... parsed once */
    int async;
} managed_extra;

static Py_ssize_t extra_offset;

static managed_extra *
extra_of(PyObject *op)
{
    return (managed_extra *)((char *)op + extra_offset);
}

/* Zero-size arrays allocate nothing; NumPy still wants an address. */
static char empty_data[1];

static int
is_managed(cmpy_state *st, PyObject *obj)
{
    return st->ManagedNDArrayType != NULL &&
           PyObject_TypeCheck(obj, (PyTypeObject *)st->ManagedNDArrayType);
}

/* The MemoryPointer of the managed allocation under self's elements,
 * through NumPy's chain of bases. A ManagedNDArray that NumPy made with
 * memory of its own (a copy, an operation's result, an unpickled one) has
 * none: ValueError. Borrowed. */
static cmpy_MemoryPointer *
owner_of(cmpy_state *st, PyObject *self)
{
    PyArrayObject *arr = (PyArrayObject *)self;
    PyObject *base = self;
    cmpy_MemoryPointer *mp;
    Py_ssize_t size, low, high;
    uintptr_t data = (uintptr_t)PyArray_DATA(arr);

    while (PyArray_Check(base) &&
           !PyArray_CHKFLAGS((PyArrayObject *)base, NPY_ARRAY_OWNDATA)) {
        base = PyArray_BASE((PyArrayObject *)base);
        if (base == NULL) {
            break;
        }
    }
    if (base == NULL ||
        !Py_IS_TYPE(base, (PyTypeObject *)st->MemoryPointerType) ||
        ((cmpy_MemoryPointer *)base)->mem->kind != CM_FREE_MANAGED) {
        goto not_managed;
    }
    mp = (cmpy_MemoryPointer *)base;
    if (cmpy_layout_extent(PyArray_NDIM(arr), PyArray_DIMS(arr),
                           PyArray_STRIDES(arr), PyArray_ITEMSIZE(arr), &size,
                           &low, &high) < 0) {
        return NULL;
    }
    if (size == 0 ||
        (data + (uintptr_t)low >= (uintptr_t)mp->ptr &&
         data + (uintptr_t)high <= (uintptr_t)mp->ptr + mp->size)) {
        return mp;
    }
not_managed:
    PyErr_SetString(PyExc_ValueError,
                    "this ManagedNDArray is not in managed memory: NumPy "
                    "made it with memory of its own (a copy or the result "
                    "of an operation); use managed_array_like() for a "
                    "managed array");
    return NULL;
}

/* Whether the cached device side still has self's layout: NumPy lets
 * shape, strides and dtype be set in place. */
static int
device_matches(PyObject *self, cmpy_DeviceNDArray *d)
{
    PyArrayObject *arr = (PyArrayObject *)self;
    int ndim = PyArray_NDIM(arr);

    if (CMPY_NDIM(d) != ndim || d->dtype != PyArray_DESCR(arr) ||
        (d->size != 0 && d->ptr != (CUdeviceptr)PyArray_DATA(arr))) {
        return 0;
    }
    for (int i = 0; i < ndim; i++) {
        if (CMPY_SHAPE(d)[i] != PyArray_DIMS(arr)[i] ||
            CMPY_STRIDES(d)[i] != PyArray_STRIDES(arr)[i]) {
            return 0;
        }
    }
    return 1;
}

/* The device side: a DeviceNDArray over self's elements (the device
 * address of managed memory is its host address), bound to self's
 * stream. Borrowed. */
static cmpy_DeviceNDArray *
device_side(cmpy_state *st, PyObject *self)
{
    managed_extra *ex = extra_of(self);
    PyArrayObject *arr = (PyArrayObject *)self;
    cmpy_stream_ref ref = {ex->handle, ex->async, ex->stream};
    cmpy_MemoryPointer *owner;
    cmpy_DeviceNDArray *d;

    if (ex->device != NULL &&
        device_matches(self, (cmpy_DeviceNDArray *)ex->device)) {
        return (cmpy_DeviceNDArray *)ex->device;
    }
    owner = owner_of(st, self);
    if (owner == NULL) {
        return NULL;
    }
    d = cmpy_array_over(st, owner, (CUdeviceptr)(uintptr_t)PyArray_DATA(arr),
                        PyArray_NDIM(arr), PyArray_DIMS(arr),
                        PyArray_STRIDES(arr), PyArray_DESCR(arr), ex->stream,
                        &ref);
    if (d == NULL) {
        return NULL;
    }
    Py_XSETREF(ex->device, (PyObject *)d);
    return d;
}

/* ------------------------------------------------------------------------
 * Attributes. */

static PyObject *
get_gpu_data(PyObject *self, void *Py_UNUSED(c))
{
    return Py_XNewRef((PyObject *)owner_of(cmpy_type_state(self), self));
}

static PyObject *
get_device_ctypes_pointer(PyObject *self, void *Py_UNUSED(c))
{
    cmpy_DeviceNDArray *d = device_side(cmpy_type_state(self), self);

    return d != NULL ? cmpy_c_void_p((unsigned long long)d->ptr) : NULL;
}

static PyObject *
get_stream(PyObject *self, void *Py_UNUSED(c))
{
    managed_extra *ex = extra_of(self);

    return ex->stream != NULL ? Py_NewRef(ex->stream) : PyLong_FromLong(0);
}

static PyObject *
get_cai(PyObject *self, void *Py_UNUSED(c))
{
    cmpy_DeviceNDArray *d = device_side(cmpy_type_state(self), self);

    return d != NULL ? PyObject_GetAttrString((PyObject *)d,
                                              "__cuda_array_interface__")
                     : NULL;
}

static PyObject *
get_true(PyObject *Py_UNUSED(self), void *Py_UNUSED(c))
{
    Py_RETURN_TRUE;
}

static PyGetSetDef managed_getset[] = {
    {"gpu_data", get_gpu_data, NULL,
     "The MemoryPointer that owns the managed allocation (the base of the\n"
     "array that managed_array() made).",
     NULL},
    {"device_ctypes_pointer", get_device_ctypes_pointer, NULL,
     "The address of the first element as a ctypes.c_void_p.", NULL},
    {"stream", get_stream, NULL,
     "The stream given at creation (0: synchronous operations).", NULL},
    {"__cuda_array_interface__", get_cai, NULL,
     "The CUDA Array Interface (version 3) of the device side: the data\n"
     "pointer is the host address of the first element.",
     NULL},
    {"__cuda_memory__", get_true, NULL, "True: device-accessible memory.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ------------------------------------------------------------------------
 * Methods. */

PyDoc_STRVAR(array_finalize_doc,
             "__array_finalize__(obj)\n\n"
             "NumPy's hook for new arrays of this type: views keep the "
             "stream of\nthe array they view.");

static PyObject *
managed_array_finalize(PyObject *self, PyObject *obj)
{
    managed_extra *ex = extra_of(self);

    if (obj != self && is_managed(cmpy_type_state(self), obj)) {
        managed_extra *from = extra_of(obj);

        Py_XSETREF(ex->stream, Py_XNewRef(from->stream));
        ex->handle = from->handle;
        ex->async = from->async;
        Py_CLEAR(ex->device);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(copy_to_host_doc,
             "copy_to_host(ary=None, stream=0) -> numpy.ndarray\n\n"
             "DeviceNDArray.copy_to_host() of the device side: a copy made "
             "by the\ndevice, into *ary* or a new host array.");

static PyObject *
managed_copy_to_host(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames)
{
    cmpy_DeviceNDArray *d = device_side(cmpy_type_state(self), self);

    return d != NULL ? cmpy_array_copy_to_host((PyObject *)d, args, nargs,
                                               kwnames)
                     : NULL;
}

PyDoc_STRVAR(copy_to_device_doc,
             "copy_to_device(ary, stream=0) -> None\n\n"
             "DeviceNDArray.copy_to_device() of the device side: copies "
             "*ary* (host\nor device) into this array through the "
             "device.");

static PyObject *
managed_copy_to_device(PyObject *self, PyObject *const *args,
                       Py_ssize_t nargs, PyObject *kwnames)
{
    cmpy_DeviceNDArray *d = device_side(cmpy_type_state(self), self);

    return d != NULL ? cmpy_array_copy_to_device((PyObject *)d, args, nargs,
                                                 kwnames)
                     : NULL;
}

/* A location argument: None (the memory's device), 'host' (*to* NULL),
 * an int ordinal or a Device. */
static int
parse_location(cmpy_state *st, PyObject *arg, cm_device *home,
               cm_device **to)
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

static int
check_alive(cmpy_state *st, cmpy_MemoryPointer *owner)
{
    cm_error err;

    if (cm_mem_check(owner->mem, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
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
    cmpy_MemoryPointer *owner;
    cmpy_stream_ref ref;
    cm_device *home, *to;
    CUdeviceptr ptr;
    size_t nbytes;
    cm_error err;
    int rc;

    if (cmpy_parse_args("prefetch", names, 2, 0, args, nargs, kwnames,
                        argv) < 0 ||
        (owner = owner_of(st, self)) == NULL) {
        return NULL;
    }
    home = owner->mem->dev;
    if (parse_location(st, argv[0], home, &to) < 0 ||
        cmpy_stream_arg(st, argv[1] != NULL ? argv[1] : Py_None, home,
                        &ref) < 0 ||
        span_of(self, &ptr, &nbytes) < 0 || check_alive(st, owner) < 0) {
        return NULL;
    }
    if (nbytes == 0) {
        Py_RETURN_NONE; /* the driver refuses an empty range */
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_managed_prefetch(home, ptr, nbytes, to, ref.handle, &err);
    Py_END_ALLOW_THREADS
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
            if (PyUnicode_CompareWithASCIIString(arg, advices[i].name) ==
                0) {
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
    cmpy_MemoryPointer *owner;
    cm_device *home, *to;
    CUdeviceptr ptr;
    size_t nbytes;
    cm_error err;
    int index, rc;

    if (cmpy_parse_args("advise", names, 2, 1, args, nargs, kwnames, argv) <
            0 ||
        parse_advice(argv[0], &index) < 0 ||
        (owner = owner_of(st, self)) == NULL) {
        return NULL;
    }
    home = owner->mem->dev;
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
    if (span_of(self, &ptr, &nbytes) < 0 || check_alive(st, owner) < 0) {
        return NULL;
    }
    if (nbytes == 0) {
        Py_RETURN_NONE; /* the driver refuses an empty range */
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_managed_advise(
        home, ptr, nbytes,
        (CUmem_advise)(index + CU_MEM_ADVISE_SET_READ_MOSTLY), to, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

#define FASTKW(fn) \
    (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS

static PyMethodDef managed_methods[] = {
    {"__array_finalize__", managed_array_finalize, METH_O,
     array_finalize_doc},
    {"copy_to_host", FASTKW(managed_copy_to_host), copy_to_host_doc},
    {"copy_to_device", FASTKW(managed_copy_to_device), copy_to_device_doc},
    {"prefetch", FASTKW(managed_prefetch), prefetch_doc},
    {"advise", FASTKW(managed_advise), advise_doc},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------------
 * The type. */

static int
managed_traverse(PyObject *self, visitproc visit, void *arg)
{
    managed_extra *ex = extra_of(self);

    Py_VISIT(Py_TYPE(self));
    Py_VISIT(ex->device);
    Py_VISIT(ex->stream);
    return 0;
}

static int
managed_clear(PyObject *self)
{
    managed_extra *ex = extra_of(self);

    Py_CLEAR(ex->device);
    Py_CLEAR(ex->stream);
    return 0;
}

static void
managed_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    managed_clear(self);
    /* NumPy's dealloc drops the base (the MemoryPointer) and frees the
     * object through this type's tp_free. */
    PyArray_Type.tp_dealloc(self);
    Py_DECREF(type);
}

PyDoc_STRVAR(managed_doc,
             "ManagedNDArray\n\n"
             "A NumPy array in managed (unified) memory, made by "
             "managed_array():\nthe host reads and writes it as any "
             "array, and its device side (the\nCUDA Array Interface, "
             "copy_to_host(), copy_to_device()) is the same\nmemory. "
             "NumPy's views of it are ManagedNDArrays of their own "
             "elements.\nThe memory stays valid after close() while the "
             "array lives; a device\nreset() frees it (reading the array "
             "afterwards crashes).");

static PyType_Slot managed_slots[] = {
    {Py_tp_doc, (void *)managed_doc},
    {Py_tp_dealloc, managed_dealloc},
    {Py_tp_traverse, managed_traverse},
    {Py_tp_clear, managed_clear},
    {Py_tp_alloc, PyType_GenericAlloc},
    {Py_tp_free, PyObject_GC_Del},
    {Py_tp_methods, managed_methods},
    {Py_tp_getset, managed_getset},
    {0, NULL},
};

/* The type, made on first use (NumPy must be loaded). Borrowed. */
static PyObject *
managed_type(cmpy_state *st, PyObject *module)
{
    PyType_Spec spec = {
        .name = "cudamem.ManagedNDArray",
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
                 Py_TPFLAGS_DISALLOW_INSTANTIATION |
                 Py_TPFLAGS_IMMUTABLETYPE,
        .slots = managed_slots,
    };
    Py_ssize_t align = alignof(managed_extra);

    if (st->ManagedNDArrayType != NULL) {
        return st->ManagedNDArrayType;
    }
    if (cmpy_numpy_init() < 0) {
        return NULL;
    }
    extra_offset = (PyArray_Type.tp_basicsize + align - 1) / align * align;
    spec.basicsize = (int)(extra_offset + (Py_ssize_t)sizeof(managed_extra));
    st->ManagedNDArrayType =
        PyType_FromModuleAndSpec(module, &spec, (PyObject *)&PyArray_Type);
    return st->ManagedNDArrayType;
}

/* ------------------------------------------------------------------------
 * Module functions. */

PyDoc_STRVAR(managed_ndarray_type_doc,
             "_managed_ndarray_type() -> type\n\n"
             "ManagedNDArray (made, with NumPy loaded, on first use).");

static PyObject *
managed_ndarray_type(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return Py_XNewRef(managed_type(cmpy_get_state(module), module));
}

PyDoc_STRVAR(managed_array_doc,
             "managed_array(shape, dtype=np.float64, strides=None, "
             "order='C', stream=0,\nattach_global=True) -> ManagedNDArray\n\n"
             "An uninitialized array in managed memory of the current "
             "device, as\nnumpy.empty: host and device use the same "
             "memory. With\nattach_global=False the memory is attached to "
             "the host\n(CU_MEM_ATTACH_HOST) until a stream attaches it. "
             "A zero-size array\nallocates nothing.");

static PyObject *
managed_array(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    static const char *const names[] = {"shape",  "dtype",  "strides",
                                        "order",  "stream", "attach_global"};
    cmpy_state *st = cmpy_get_state(module);
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS], size, low, high;
    PyArray_Descr *dtype = NULL;
    PyObject *argv[6], *type, *mem, *arr = NULL;
    cmpy_MemoryPointer *mp;
    cmpy_stream_ref ref;
    managed_extra *ex;
    cm_device *dev;
    int ndim, attach_global = 1;
    char *data;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("managed_array", names, 6, 1, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_parse_layout(argv[0], argv[1], argv[2], argv[3], &ndim, shape,
                          strides, &dtype) < 0) {
        return NULL;
    }
    if ((argv[5] != NULL && (attach_global = PyObject_IsTrue(argv[5])) < 0) ||
        cmpy_layout_extent(ndim, shape, strides, PyDataType_ELSIZE(dtype),
                           &size, &low, &high) < 0 ||
        (type = managed_type(st, module)) == NULL ||
        cmpy_current_device(st, &dev) < 0 ||
        cmpy_stream_arg(st, argv[4] != NULL ? argv[4] : Py_None, dev, &ref) <
            0) {
        goto done;
    }
    mem = cmpy_memory_alloc_managed(st, dev, (size_t)(high - low),
                                    attach_global);
    if (mem == NULL) {
        goto done;
    }
    mp = (cmpy_MemoryPointer *)mem;
    data = size != 0 ? (char *)(uintptr_t)mp->ptr - low : empty_data;
    /* NewFromDescr steals a dtype reference; SetBaseObject steals mem. */
    Py_INCREF(dtype);
    arr = PyArray_NewFromDescr((PyTypeObject *)type, dtype, ndim, shape,
                               strides, data, NPY_ARRAY_WRITEABLE, NULL);
    if (arr == NULL) {
        Py_DECREF(mem);
        goto done;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, mem) < 0) {
        Py_CLEAR(arr);
        goto done;
    }
    PyArray_UpdateFlags((PyArrayObject *)arr, NPY_ARRAY_UPDATE_ALL);
    ex = extra_of(arr);
    ex->stream = ref.obj != NULL ? Py_NewRef(argv[4]) : NULL;
    ex->handle = ref.handle;
    ex->async = ref.async;
done:
    Py_XDECREF(dtype);
    return arr;
}

PyMethodDef cmpy_managed_methods[] = {
    {"managed_array", (PyCFunction)(void (*)(void))managed_array,
     METH_FASTCALL | METH_KEYWORDS, managed_array_doc},
    {"_managed_ndarray_type", managed_ndarray_type, METH_NOARGS,
     managed_ndarray_type_doc},
    {NULL, NULL, 0, NULL},
};
