/* hostarray.c (py/): ManagedNDArray and MappedNDArray, NumPy subclasses
 * made at run time (DESIGN rule 1) over host-accessible memory cudamem
 * allocated: their fields, owner, cached device side, and what both
 * share, __dlpack__ included. Allocating each memory, and the managed
 * hints, are managed.c's and hostbuf.c's. */
#include "hostarray.h"

#include <stdalign.h>

#include "array.h"
#include "dlpack.h"
#include "hostbuf.h"
#include "memory.h"

/* What the types add to a NumPy array. It lives after the array's fields
 * as NumPy sizes them at run time, not as the headers cudamem was built
 * with say. */
typedef struct host_extra {
    PyObject *device; /* the device side, made on first use, or NULL */
    void *data;       /* ... for this first element */
    PyObject *stream; /* the stream= it was made with, or NULL: 0 */
    CUstream handle;  /* ... parsed once */
    int async;
    int owned;
} host_extra;

static Py_ssize_t extra_offset;

static host_extra *
extra_of(PyObject *op)
{
    return (host_extra *)((char *)op + extra_offset);
}

PyDoc_STRVAR(managed_doc,
             "ManagedNDArray\n\n"
             "A NumPy array in managed (unified) memory, made by "
             "managed_array():\nthe host reads and writes it as any "
             "array, and its device side (the\nCUDA Array Interface, "
             "copy_to_host(), copy_to_device(), device_array())\nis the "
             "same memory at the same address; __dlpack__ exports it as "
             "CUDA\nmanaged memory. NumPy's views of it are "
             "ManagedNDArrays of their own\nelements. The memory stays "
             "valid after close() while the array lives; a\ndevice "
             "reset() frees it: then repr, indexing, iteration and "
             "exports raise\nCudaDriverError (NumPy's methods and views "
             "taken earlier read freed\nmemory).");

PyDoc_STRVAR(mapped_doc,
             "MappedNDArray\n\n"
             "A NumPy array in page-locked host memory mapped into a "
             "device's\naddress space (numba's MappedNDArray), made by "
             "mapped_array(): the host\nreads and writes it as any array, "
             "and its device side (gpu_data, the\nCUDA Array Interface, "
             "copy_to_host(), copy_to_device(), device_array())\nis a "
             "device array over the same bytes at their device address; "
             "__dlpack__\nexports it as CUDA host memory. NumPy's views of "
             "it are MappedNDArrays\nwhose device side starts at their own "
             "first element (read-only when\nthe view is). cudamem's "
             "page-locked (mmap) memory stays valid\nwhatever happens to "
             "contexts (a Device.reset() ends its device side);\n"
             "write-combined memory (wc=True) is freed by "
             "Device.reset(), after\nwhich repr, indexing, iteration and "
             "exports raise CudaDriverError.");

static const struct {
    const char *name;     /* the type's */
    const char *qualname; /* ... with its module */
    const char *memory;   /* what messages call the memory */
    const char *doc;
    int dl_device; /* its DLPack device type */
} kinds[] = {
    [CMPY_HOSTARRAY_MANAGED] = {"ManagedNDArray", "cudamem.ManagedNDArray",
                                "managed", managed_doc, CMPY_DL_CUDA_MANAGED},
    [CMPY_HOSTARRAY_MAPPED] = {"MappedNDArray", "cudamem.MappedNDArray",
                               "mapped", mapped_doc, CMPY_DL_CUDA_HOST},
};

static PyObject **
type_slot(cmpy_state *st, cmpy_hostarray_kind kind)
{
    return kind == CMPY_HOSTARRAY_MAPPED ? &st->MappedNDArrayType
                                         : &st->ManagedNDArrayType;
}

/* Neither type can be subclassed: the type says the kind. */
static cmpy_hostarray_kind
kind_of(cmpy_state *st, PyObject *self)
{
    return (PyObject *)Py_TYPE(self) == st->MappedNDArrayType
               ? CMPY_HOSTARRAY_MAPPED
               : CMPY_HOSTARRAY_MANAGED;
}

/* The end of an array's chain of .base: the object whose memory it is
 * (the array itself when it owns its data). Borrowed. */
static PyObject *
root_of(PyObject *self)
{
    PyObject *base = self;

    while (PyArray_Check(base) &&
           !PyArray_CHKFLAGS((PyArrayObject *)base, NPY_ARRAY_OWNDATA) &&
           PyArray_BASE((PyArrayObject *)base) != NULL) {
        base = PyArray_BASE((PyArrayObject *)base);
    }
    return base;
}

/* The managed MemoryPointer at the root of arr's chain of .base, or
 * NULL. Borrowed. */
static cmpy_MemoryPointer *
managed_root(cmpy_state *st, PyObject *arr)
{
    PyObject *base = root_of(arr);

    if (Py_IS_TYPE(base, (PyTypeObject *)st->MemoryPointerType) &&
        ((cmpy_MemoryPointer *)base)->managed) {
        return (cmpy_MemoryPointer *)base;
    }
    return NULL;
}

int
cmpy_host_is_managed_on(cmpy_state *st, PyArrayObject *arr, cm_device *dev)
{
    cmpy_MemoryPointer *mp = managed_root(st, (PyObject *)arr);

    return mp != NULL && mp->mem->dev == dev;
}

int
cmpy_host_is_locked(cmpy_state *st, PyArrayObject *arr)
{
    cm_host *host = cmpy_hostbuf_host(st, root_of((PyObject *)arr));

    /* Contiguous, its bytes are [data, data + nbytes). */
    return host != NULL &&
           (PyArray_IS_C_CONTIGUOUS(arr) || PyArray_IS_F_CONTIGUOUS(arr)) &&
           cm_host_covers(host, PyArray_DATA(arr),
                          (size_t)PyArray_NBYTES(arr));
}

void *
cmpy_host_address(cmpy_state *st, cmpy_MemoryPointer *mp, CUdeviceptr ptr)
{
    PyObject *owner = (PyObject *)mp;
    cm_host *host;

    if (mp->managed) {
        return (void *)(uintptr_t)ptr;
    }
    /* A view's pointer names the one that made the memory; borrowed
     * memory names the object it borrows from. */
    while (Py_IS_TYPE(owner, (PyTypeObject *)st->MemoryPointerType) &&
           ((cmpy_MemoryPointer *)owner)->owner != NULL) {
        owner = ((cmpy_MemoryPointer *)owner)->owner;
    }
    /* Memory made by a MemoryPointer, not borrowed, is device memory. */
    if (Py_IS_TYPE(owner, (PyTypeObject *)st->MemoryPointerType)) {
        return NULL;
    }
    host = cmpy_hostbuf_host(st, root_of(owner));
    if (host == NULL || !host->mapped || ptr < host->dptr ||
        ptr - host->dptr >= host->size) {
        return NULL;
    }
    return (char *)host->ptr + (ptr - host->dptr);
}

/* The root of self's chain of .base when it is memory of self's kind,
 * and *dev, its device; else NULL with ValueError. Borrowed. */
static PyObject *
owner_of(cmpy_state *st, PyObject *self, cm_device **dev)
{
    cmpy_hostarray_kind kind = kind_of(st, self);
    PyObject *base = root_of(self);
    cmpy_MemoryPointer *mp;
    cm_host *host;

    if (kind == CMPY_HOSTARRAY_MANAGED &&
        (mp = managed_root(st, self)) != NULL) {
        *dev = mp->mem->dev;
        return base;
    }
    if (kind == CMPY_HOSTARRAY_MAPPED &&
        (host = cmpy_hostbuf_host(st, base)) != NULL && host->mapped) {
        *dev = host->dev;
        return base;
    }
    if (PyArray_Check(base)) {
        PyErr_Format(PyExc_ValueError,
                     "this %s is not in %s memory: NumPy made it with "
                     "memory of its own (a copy or the result of an "
                     "operation); use %s_array_like() for a %s array",
                     kinds[kind].name, kinds[kind].memory, kinds[kind].memory,
                     kinds[kind].memory);
    }
    else {
        PyErr_Format(PyExc_ValueError,
                     "this %s is not in %s memory: its memory belongs to "
                     "%.200s",
                     kinds[kind].name, kinds[kind].memory,
                     Py_TYPE(base)->tp_name);
    }
    return NULL;
}

PyObject *
cmpy_hostarray_owner(cmpy_state *st, PyObject *self, cm_device **dev)
{
    PyObject *owner = owner_of(st, self, dev);
    cm_host *host;
    cm_error err;
    int rc;

    if (owner == NULL) {
        return NULL;
    }
    host = cmpy_hostbuf_host(st, owner);
    rc = host != NULL ? cm_host_check(host, &err)
                      : cm_mem_check(((cmpy_MemoryPointer *)owner)->mem, &err);
    return rc < 0 ? cmpy_raise(st, &err) : owner;
}

/* Whether the cached device side still has self's layout and, for
 * mapped memory, its writeability: NumPy lets shape, strides, dtype and
 * the writeable flag be set in place. */
static int
device_matches(cmpy_state *st, PyObject *self, host_extra *ex)
{
    PyArrayObject *arr = (PyArrayObject *)self;
    cmpy_DeviceNDArray *d = (cmpy_DeviceNDArray *)ex->device;
    int ndim = PyArray_NDIM(arr);

    if (CMPY_NDIM(d) != ndim || d->dtype != PyArray_DESCR(arr) ||
        ex->data != PyArray_DATA(arr) ||
        (kind_of(st, self) == CMPY_HOSTARRAY_MAPPED &&
         !PyArray_ISWRITEABLE(arr) != (d->gpu_data->mem->readonly != 0))) {
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

/* The device side: a DeviceNDArray over self's elements bound to self's
 * stream (managed memory: at the same address; mapped memory: at its
 * device address). Its own operations check the memory. Borrowed. */
static cmpy_DeviceNDArray *
device_side(cmpy_state *st, PyObject *self)
{
    host_extra *ex = extra_of(self);
    PyArrayObject *arr = (PyArrayObject *)self;
    cmpy_stream_ref ref = {ex->handle, ex->async, ex->stream, ex->owned};
    cmpy_DeviceNDArray *d;
    PyObject *owner;
    cm_device *dev;

    if ((owner = owner_of(st, self, &dev)) == NULL) {
        return NULL;
    }
    if (ex->device != NULL && device_matches(st, self, ex)) {
        return (cmpy_DeviceNDArray *)ex->device;
    }
    if (kind_of(st, self) == CMPY_HOSTARRAY_MAPPED) {
        d = cmpy_hostbuf_device_array(st, owner, arr, &ref);
    }
    else {
        d = cmpy_array_over(st, (cmpy_MemoryPointer *)owner,
                            (CUdeviceptr)(uintptr_t)PyArray_DATA(arr),
                            PyArray_NDIM(arr), PyArray_DIMS(arr),
                            PyArray_STRIDES(arr), PyArray_DESCR(arr),
                            ex->stream, &ref);
    }
    if (d == NULL) {
        return NULL;
    }
    Py_XSETREF(ex->device, (PyObject *)d);
    ex->data = PyArray_DATA(arr);
    return d;
}

/* ------------------------------------------------------------------------
 * Attributes. */

static PyObject *
get_gpu_data(PyObject *self, void *Py_UNUSED(c))
{
    cmpy_state *st = cmpy_type_state(self);
    cmpy_DeviceNDArray *d;
    cm_device *dev;

    if (kind_of(st, self) == CMPY_HOSTARRAY_MANAGED) {
        return Py_XNewRef(owner_of(st, self, &dev));
    }
    d = device_side(st, self);
    return d != NULL ? Py_NewRef((PyObject *)d->gpu_data) : NULL;
}

static PyObject *
get_device_ctypes_pointer(PyObject *self, void *Py_UNUSED(c))
{
    cmpy_DeviceNDArray *d = device_side(cmpy_type_state(self), self);

    return d != NULL ? cmpy_c_void_p(self, (unsigned long long)d->ptr) : NULL;
}

static PyObject *
get_stream(PyObject *self, void *Py_UNUSED(c))
{
    host_extra *ex = extra_of(self);

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

static PyGetSetDef host_getset[] = {
    {"gpu_data", get_gpu_data, NULL,
     "The MemoryPointer of the memory: for a ManagedNDArray the one that\n"
     "owns the managed allocation (the root of .base); for a "
     "MappedNDArray\none over the mapped bytes at their device address, "
     "owned by the\nHostBuffer.",
     NULL},
    {"device_ctypes_pointer", get_device_ctypes_pointer, NULL,
     "The device address of the first element as a ctypes.c_void_p.", NULL},
    {"stream", get_stream, NULL,
     "The stream given at creation (0: synchronous operations).", NULL},
    {"__cuda_array_interface__", get_cai, NULL,
     "The CUDA Array Interface (version 3) of the device side.", NULL},
    {"__cuda_memory__", cmpy_get_true, NULL, "True: device-accessible memory.",
     NULL},
    {"_strided_memory_view_shim", cmpy_launch_view, NULL,
     "What numba-cuda's kernel launch reads from its own arrays.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ------------------------------------------------------------------------
 * Methods. */

PyDoc_STRVAR(array_finalize_doc,
             "__array_finalize__(obj)\n\n"
             "NumPy's hook for new arrays of this type: views keep the "
             "stream of\nthe array they view.");

static PyObject *
host_array_finalize(PyObject *self, PyObject *obj)
{
    host_extra *ex = extra_of(self);

    if (obj != self && Py_IS_TYPE(obj, Py_TYPE(self))) {
        host_extra *from = extra_of(obj);

        Py_XSETREF(ex->stream, Py_XNewRef(from->stream));
        ex->handle = from->handle;
        ex->async = from->async;
        ex->owned = from->owned;
        Py_CLEAR(ex->device);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(copy_to_host_doc,
             "copy_to_host($self, ary=None, stream=0)\n--\n\n"
             "DeviceNDArray.copy_to_host() of the device side: a copy made "
             "by the\ndevice, into *ary* or a new host array.");

static PyObject *
host_copy_to_host(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames)
{
    cmpy_DeviceNDArray *d = device_side(cmpy_type_state(self), self);

    return d != NULL
               ? cmpy_array_copy_to_host((PyObject *)d, args, nargs, kwnames)
               : NULL;
}

PyDoc_STRVAR(copy_to_device_doc,
             "copy_to_device(ary, stream=0) -> None\n\n"
             "DeviceNDArray.copy_to_device() of the device side: copies "
             "*ary* (host\nor device) into this array through the "
             "device.");

static PyObject *
host_copy_to_device(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames)
{
    cmpy_DeviceNDArray *d = device_side(cmpy_type_state(self), self);

    return d != NULL
               ? cmpy_array_copy_to_device((PyObject *)d, args, nargs, kwnames)
               : NULL;
}

PyDoc_STRVAR(device_array_doc,
             "device_array() -> DeviceNDArray\n\n"
             "The device side: a DeviceNDArray over the same memory, bound "
             "to this\narray's stream.");

static PyObject *
host_device_array(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return Py_XNewRef((PyObject *)device_side(cmpy_type_state(self), self));
}

PyDoc_STRVAR(dlpack_device_doc,
             "__dlpack_device__($self)\n--\n\n"
             "The DLPack device of the memory: (13, ordinal), kDLCUDAManaged, "
             "for\na ManagedNDArray; (3, ordinal), kDLCUDAHost, for a "
             "MappedNDArray.");

static PyObject *
host_dlpack_device(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_type_state(self);
    cm_device *dev;

    if (owner_of(st, self, &dev) == NULL) {
        return NULL;
    }
    return Py_BuildValue("(ii)", kinds[kind_of(st, self)].dl_device,
                         dev->ordinal);
}

/* A capsule over `array`'s elements described as (type, id), keeping
 * `array` alive. */
static PyObject *export(PyObject *array, int type, int id, int versioned)
{
    PyArrayObject *a = (PyArrayObject *)array;
    cmpy_dlpack_desc desc = {
        .data = PyArray_DATA(a),
        .ndim = PyArray_NDIM(a),
        .shape = PyArray_DIMS(a),
        .strides = PyArray_STRIDES(a),
        .dtype = PyArray_DESCR(a),
        .device_type = type,
        .device_id = id,
        .readonly = !PyArray_ISWRITEABLE(a),
    };

    return cmpy_dlpack_capsule(array, &desc, versioned);
}

/* The copy a consumer asked for: a NumPy array for the CPU, else a new
 * array of self's kind on dev; self's layout order when it is contiguous,
 * else C order. New reference. */
static PyObject *
copy_of(PyObject *self, cmpy_hostarray_kind kind, cm_device *dev, int to_cpu)
{
    static const cmpy_stream_ref stream0 = {0, 0, NULL, 1};
    PyArrayObject *arr = (PyArrayObject *)self;
    PyObject *module = cmpy_type_module(Py_TYPE(self)), *out;
    Py_ssize_t strides[NPY_MAXDIMS];
    char order = PyArray_IS_F_CONTIGUOUS(arr) && !PyArray_IS_C_CONTIGUOUS(arr)
                     ? 'F'
                     : 'C';

    cmpy_contiguous_strides(PyArray_NDIM(arr), PyArray_DIMS(arr),
                            PyArray_ITEMSIZE(arr), order, strides);
    if (to_cpu) {
        out = PyArray_NewLikeArray(
            arr, order == 'F' ? NPY_FORTRANORDER : NPY_CORDER, NULL, 0);
    }
    else if (kind == CMPY_HOSTARRAY_MAPPED) {
        out = cmpy_mapped_empty(module, dev, 0, 0, PyArray_DESCR(arr),
                                PyArray_NDIM(arr), PyArray_DIMS(arr), strides,
                                &stream0);
    }
    else {
        out = cmpy_managed_empty(module, dev, PyArray_DESCR(arr),
                                 PyArray_NDIM(arr), PyArray_DIMS(arr), strides,
                                 1, &stream0);
    }
    if (out != NULL && PyArray_CopyInto((PyArrayObject *)out, arr) < 0) {
        Py_CLEAR(out);
    }
    return out;
}

PyDoc_STRVAR(
    dlpack_doc,
    "__dlpack__($self, *, stream=None, max_version=None, dl_device=None, "
    "copy=None)\n--\n\n"
    "The array API standard's DLPack export: a capsule over the elements "
    "at\ntheir host address, on the device __dlpack_device__() names, "
    "versioned\nwhen *max_version* is (1, x) or later, flagged read-only "
    "for a\nread-only array. *stream* is the consumer's: None, 1, 2 or a "
    "stream\nhandle, and the export waits on the host for the work queued "
    "on this\narray's stream (the memory is host memory, so the host "
    "waiting is\nenough); -1 waits for nothing; 0 raises ValueError. "
    "*dl_device* None or\n__dlpack_device__() exports the memory as it "
    "is, (1, 0) as CPU memory\n(so numpy.from_dlpack reads it in place); "
    "another device raises\nBufferError. *copy* True exports a copy (a "
    "NumPy array for the CPU,\nelse a new array of this kind on the same "
    "device); None or False never\ncopies.");

static PyObject *
host_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
            PyObject *kwnames)
{
    cmpy_state *st = cmpy_type_state(self);
    cmpy_hostarray_kind kind = kind_of(st, self);
    host_extra *ex = extra_of(self);
    cmpy_dlpack_args a;
    PyObject *copy, *out;
    int type;
    cm_device *dev;

    if (cmpy_hostarray_owner(st, self, &dev) == NULL ||
        cmpy_dlpack_parse(args, nargs, kwnames, kinds[kind].dl_device,
                          dev->ordinal, &a) < 0) {
        return NULL;
    }
    /* Copies are the consumer's to write; the array itself may not be. */
    if (!a.copy &&
        cmpy_dlpack_check_readonly(!PyArray_ISWRITEABLE((PyArrayObject *)self),
                                   a.versioned) < 0) {
        return NULL;
    }
    /* Work queued on the array's stream may still be writing it. */
    if (a.wait && ex->async && cmpy_stream_wait(st, dev, ex->handle) < 0) {
        return NULL;
    }
    type = a.to_cpu ? CMPY_DL_CPU : kinds[kind].dl_device;
    if (!a.copy) {
        return export(self, type, a.to_cpu ? 0 : dev->ordinal, a.versioned);
    }
    if ((copy = copy_of(self, kind, dev, a.to_cpu)) == NULL) {
        return NULL;
    }
    out = export(copy, type, a.to_cpu ? 0 : dev->ordinal, a.versioned);
    Py_DECREF(copy);
    return out;
}

#define FASTKW(fn)                                                            \
    (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS

static PyMethodDef host_methods[] = {
    {"__array_finalize__", host_array_finalize, METH_O, array_finalize_doc},
    {"copy_to_host", FASTKW(host_copy_to_host), copy_to_host_doc},
    {"copy_to_device", FASTKW(host_copy_to_device), copy_to_device_doc},
    {"device_array", host_device_array, METH_NOARGS, device_array_doc},
    {"__dlpack__", FASTKW(host_dlpack), dlpack_doc},
    {"__dlpack_device__", host_dlpack_device, METH_NOARGS, dlpack_device_doc},
    {NULL, NULL, 0, NULL},
};

#define N_HOST_METHODS ((int)(sizeof(host_methods) / sizeof(host_methods[0])))

/* ManagedNDArray's: host_methods then managed.c's, joined when the type
 * is made (a type has one method table). */
static PyMethodDef managed_methods[N_HOST_METHODS + 8];

static PyMethodDef *
methods_of(cmpy_hostarray_kind kind)
{
    int n = 0;

    if (kind == CMPY_HOSTARRAY_MAPPED) {
        return host_methods;
    }
    for (int i = 0; host_methods[i].ml_name != NULL; i++) {
        managed_methods[n++] = host_methods[i];
    }
    for (int i = 0; cmpy_managed_ndarray_methods[i].ml_name != NULL; i++) {
        if (n == N_HOST_METHODS + 7) {
            PyErr_SetString(PyExc_SystemError,
                            "ManagedNDArray has too many methods");
            return NULL;
        }
        managed_methods[n++] = cmpy_managed_ndarray_methods[i];
    }
    return managed_methods;
}

/* ------------------------------------------------------------------------
 * The types. */

static int
host_traverse(PyObject *self, visitproc visit, void *arg)
{
    host_extra *ex = extra_of(self);

    Py_VISIT(Py_TYPE(self));
    Py_VISIT(ex->device);
    Py_VISIT(ex->stream);
    return 0;
}

static int
host_clear(PyObject *self)
{
    host_extra *ex = extra_of(self);

    Py_CLEAR(ex->device);
    Py_CLEAR(ex->stream);
    return 0;
}

static void
host_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    host_clear(self);
    /* NumPy's dealloc drops the base and frees the object through this
     * type's tp_free. */
    PyArray_Type.tp_dealloc(self);
    Py_DECREF(type);
}

/* 0 while self's host memory exists; -1 with CudaDriverError naming the
 * reset once Device.reset() freed it (managed and write-combined memory:
 * the driver frees both with the context). An array NumPy made in memory
 * of its own is fine. */
static int
check_host(PyObject *self)
{
    cmpy_state *st = cmpy_type_state(self);
    PyObject *owner;
    cm_device *dev;
    cm_host *host;
    cm_error err;
    int rc = 0;

    owner = owner_of(st, self, &dev);
    if (owner == NULL) {
        PyErr_Clear();
        return 0;
    }
    host = cmpy_hostbuf_host(st, owner);
    if (host == NULL) {
        rc = cm_mem_check(((cmpy_MemoryPointer *)owner)->mem, &err);
    }
    else if (host->kind == CM_HOST_MAPPED_WC) {
        rc = cm_host_check(host, &err);
    }
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    return rc;
}

/* The NumPy entry points that read or write elements through the type
 * refuse freed memory; NumPy's own methods, ufuncs and views made
 * earlier do not ask the type (documented in the guide). */
static PyObject *
host_repr(PyObject *self)
{
    return check_host(self) < 0 ? NULL : PyArray_Type.tp_repr(self);
}

static PyObject *
host_str(PyObject *self)
{
    return check_host(self) < 0 ? NULL : PyArray_Type.tp_str(self);
}

static PyObject *
host_subscript(PyObject *self, PyObject *key)
{
    return check_host(self) < 0
               ? NULL
               : PyArray_Type.tp_as_mapping->mp_subscript(self, key);
}

static int
host_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    return check_host(self) < 0 ? -1
                                : PyArray_Type.tp_as_mapping->mp_ass_subscript(
                                      self, key, value);
}

static PyObject *
host_item(PyObject *self, Py_ssize_t i)
{
    return check_host(self) < 0
               ? NULL
               : PyArray_Type.tp_as_sequence->sq_item(self, i);
}

PyObject *
cmpy_hostarray_type(PyObject *module, cmpy_hostarray_kind kind)
{
    PyObject **slot = type_slot(cmpy_get_state(module), kind);
    PyType_Slot slots[] = {
        {Py_tp_doc, (void *)kinds[kind].doc},
        {Py_tp_dealloc, host_dealloc},
        {Py_tp_traverse, host_traverse},
        {Py_tp_clear, host_clear},
        {Py_tp_alloc, PyType_GenericAlloc},
        {Py_tp_free, PyObject_GC_Del},
        {Py_tp_methods, NULL},
        {Py_tp_getset, host_getset},
        {Py_tp_repr, host_repr},
        {Py_tp_str, host_str},
        {Py_mp_subscript, host_subscript},
        {Py_mp_ass_subscript, host_ass_subscript},
        {Py_sq_item, host_item},
        {0, NULL},
    };
    PyType_Spec spec = {
        .name = kinds[kind].qualname,
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
                 Py_TPFLAGS_DISALLOW_INSTANTIATION,
        .slots = slots,
    };
    Py_ssize_t align = alignof(host_extra);

    if (*slot != NULL) {
        return *slot;
    }
    if (cmpy_numpy_init() < 0 || (slots[6].pfunc = methods_of(kind)) == NULL) {
        return NULL;
    }
    extra_offset = (PyArray_Type.tp_basicsize + align - 1) / align * align;
    spec.basicsize = (int)(extra_offset + (Py_ssize_t)sizeof(host_extra));
    *slot = PyType_FromModuleAndSpec(module, &spec, (PyObject *)&PyArray_Type);
    return *slot;
}

PyObject *
cmpy_hostarray_new(PyObject *module, cmpy_hostarray_kind kind,
                   PyArray_Descr *dtype, int ndim, const Py_ssize_t *shape,
                   const Py_ssize_t *strides, void *data, PyObject *base,
                   const cmpy_stream_ref *ref)
{
    PyObject *type = cmpy_hostarray_type(module, kind), *arr = NULL;
    host_extra *ex;

    if (type == NULL) {
        goto fail;
    }
    /* NewFromDescr steals a dtype reference; SetBaseObject steals base,
     * also on failure. */
    Py_INCREF(dtype);
    arr = PyArray_NewFromDescr((PyTypeObject *)type, dtype, ndim, shape,
                               strides, data, NPY_ARRAY_WRITEABLE, NULL);
    if (arr == NULL) {
        goto fail;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, base) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    PyArray_UpdateFlags((PyArrayObject *)arr, NPY_ARRAY_UPDATE_ALL);
    ex = extra_of(arr);
    ex->stream = Py_XNewRef(ref->obj);
    ex->handle = ref->handle;
    ex->async = ref->async;
    ex->owned = ref->owned;
    return arr;
fail:
    Py_DECREF(base);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Module functions. */

PyDoc_STRVAR(host_ndarray_type_doc,
             "_host_ndarray_type($module, name)\n--\n\n"
             "ManagedNDArray or MappedNDArray, by name (made, with NumPy "
             "loaded, on\nfirst use).");

static PyObject *
host_ndarray_type(PyObject *module, PyObject *name)
{
    for (int i = 0; i < (int)(sizeof(kinds) / sizeof(kinds[0])); i++) {
        if (PyUnicode_Check(name) &&
            PyUnicode_CompareWithASCIIString(name, kinds[i].name) == 0) {
            return Py_XNewRef(
                cmpy_hostarray_type(module, (cmpy_hostarray_kind)i));
        }
    }
    return PyErr_Format(PyExc_ValueError, "no host array type is called %R",
                        name);
}

PyMethodDef cmpy_hostarray_methods[] = {
    {"_host_ndarray_type", host_ndarray_type, METH_O, host_ndarray_type_doc},
    {NULL, NULL, 0, NULL},
};
