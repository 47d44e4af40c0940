/* dlpackimport.c (py/): cudamem.from_dlpack, consuming DLPack capsules:
 * the producer handshake, taking a capsule over (its deleter then runs
 * once, when the last array over the memory goes), validating the tensor,
 * and the zero-copy or copying import. Building capsules is dlpack.c's. */
#include "array.h"
#include "cai.h"
#include "device.h"
#include "dlpack.h"
#include "memory.h"
#include "stream.h"

static const char NAME_LEGACY[] = "dltensor";
static const char NAME_VERSIONED[] = "dltensor_versioned";
static const char NAME_OWNER[] = "cudamem.dlpack_owner";

/* DLPack's float8 codes, in order from kDLFloat8_e3m4, and ml_dtypes'
 * names for them. */
#define CMPY_DL_FLOAT8_FIRST 7
static const char *const FLOAT8_NAMES[] = {
    "float8_e3m4",     "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",    "float8_e8m0fnu",
};
#define CMPY_DL_FLOAT8_COUNT                                                  \
    ((int)(sizeof(FLOAT8_NAMES) / sizeof(FLOAT8_NAMES[0])))

/* A tensor taken from a capsule. */
typedef struct taken {
    PyObject *owner; /* calls the deleter when it goes */
    cmpy_DLTensor *tensor;
    int readonly;
} taken;

/* The owner's destructor: the producer's deleter, once, with the GIL. */
static void
owner_destructor(PyObject *owner)
{
    void *t = PyCapsule_GetPointer(owner, NAME_OWNER);
    PyObject *exc = cmpy_exc_take();

    if (PyCapsule_GetContext(owner) != NULL) {
        cmpy_DLManagedTensorVersioned *v = t;
        if (v->deleter != NULL) {
            v->deleter(v);
        }
    }
    else {
        cmpy_DLManagedTensor *l = t;
        if (l->deleter != NULL) {
            l->deleter(l);
        }
    }
    cmpy_exc_put(exc);
}

/* Takes a producer's capsule over: the owner answers for the deleter
 * from here on, and the capsule is renamed "used_...". */
static int
take(PyObject *capsule, taken *out)
{
    const char *name;
    void *t;
    int versioned;

    if (!PyCapsule_CheckExact(capsule)) {
        PyErr_Format(PyExc_TypeError,
                     "__dlpack__() must return a PyCapsule, not %.200s",
                     Py_TYPE(capsule)->tp_name);
        return -1;
    }
    name = PyCapsule_GetName(capsule);
    if (name != NULL && (strcmp(name, "used_dltensor") == 0 ||
                         strcmp(name, "used_dltensor_versioned") == 0)) {
        PyErr_Format(PyExc_ValueError,
                     "the DLPack capsule was already consumed (named %s)",
                     name);
        return -1;
    }
    if (name == NULL || (strcmp(name, NAME_LEGACY) != 0 &&
                         strcmp(name, NAME_VERSIONED) != 0)) {
        PyErr_Format(PyExc_ValueError,
                     "not a DLPack capsule: its name is %s, not "
                     "'dltensor' or 'dltensor_versioned'",
                     name != NULL ? name : "NULL");
        return -1;
    }
    versioned = strcmp(name, NAME_VERSIONED) == 0;
    t = PyCapsule_GetPointer(capsule, name);
    if (t == NULL) {
        return -1;
    }
    if (versioned && ((cmpy_DLManagedTensorVersioned *)t)->version.major >
                         CMPY_DLPACK_MAJOR) {
        /* The layout after the version is unknown: not taken. */
        PyErr_Format(PyExc_BufferError,
                     "DLPack version %u.%u is newer than cudamem's %d.%d",
                     ((cmpy_DLManagedTensorVersioned *)t)->version.major,
                     ((cmpy_DLManagedTensorVersioned *)t)->version.minor,
                     CMPY_DLPACK_MAJOR, CMPY_DLPACK_MINOR);
        return -1;
    }
    out->owner = PyCapsule_New(t, NAME_OWNER, NULL);
    if (out->owner == NULL) {
        return -1;
    }
    if ((versioned && PyCapsule_SetContext(out->owner, t) < 0) ||
        PyCapsule_SetName(capsule, versioned ? "used_dltensor_versioned"
                                             : "used_dltensor") < 0) {
        Py_CLEAR(out->owner);
        return -1;
    }
    /* Only now: a failure above leaves the capsule the producer's. */
    PyCapsule_SetDestructor(out->owner, owner_destructor);
    if (versioned) {
        cmpy_DLManagedTensorVersioned *v = t;
        out->tensor = &v->dl_tensor;
        out->readonly = (v->flags & CMPY_DLPACK_FLAG_READ_ONLY) != 0;
    }
    else {
        out->tensor = &((cmpy_DLManagedTensor *)t)->dl_tensor;
        out->readonly = 0;
    }
    return 0;
}

/* ml_dtypes' dtype `name`, imported on first use. New reference. */
static PyArray_Descr *
ml_dtype(const char *name)
{
    PyObject *mod = PyImport_ImportModule("ml_dtypes"), *type;
    PyArray_Descr *dtype = NULL;

    if (mod == NULL) {
        return NULL;
    }
    type = PyObject_GetAttrString(mod, name);
    if (type != NULL) {
        PyArray_DescrConverter(type, &dtype);
        Py_DECREF(type);
    }
    Py_DECREF(mod);
    return dtype;
}

/* NumPy's dtype for a DLPack one. New reference. */
static PyArray_Descr *
to_dtype(cmpy_DLDataType t)
{
    int num = -1, bits = t.bits;

    if (t.lanes != 1) {
        PyErr_Format(PyExc_BufferError,
                     "DLPack dtype with %u lanes: cudamem imports 1",
                     (unsigned)t.lanes);
        return NULL;
    }
    switch (t.code) {
    case CMPY_DL_BOOL:
        num = bits == 8 ? NPY_BOOL : -1;
        break;
    case CMPY_DL_INT:
        num = bits == 8    ? NPY_INT8
              : bits == 16 ? NPY_INT16
              : bits == 32 ? NPY_INT32
              : bits == 64 ? NPY_INT64
                           : -1;
        break;
    case CMPY_DL_UINT:
        num = bits == 8    ? NPY_UINT8
              : bits == 16 ? NPY_UINT16
              : bits == 32 ? NPY_UINT32
              : bits == 64 ? NPY_UINT64
                           : -1;
        break;
    case CMPY_DL_FLOAT:
        num = bits == 16   ? NPY_FLOAT16
              : bits == 32 ? NPY_FLOAT32
              : bits == 64 ? NPY_FLOAT64
                           : -1;
        break;
    case CMPY_DL_COMPLEX:
        num = bits == 64 ? NPY_COMPLEX64 : bits == 128 ? NPY_COMPLEX128 : -1;
        break;
    case CMPY_DL_BFLOAT:
        if (bits == 16) {
            return ml_dtype("bfloat16");
        }
        break;
    default:
        if (t.code >= CMPY_DL_FLOAT8_FIRST &&
            t.code < CMPY_DL_FLOAT8_FIRST + CMPY_DL_FLOAT8_COUNT &&
            bits == 8) {
            return ml_dtype(FLOAT8_NAMES[t.code - CMPY_DL_FLOAT8_FIRST]);
        }
        break;
    }
    if (num < 0) {
        PyErr_Format(PyExc_BufferError,
                     "DLPack dtype (code %u, %u bits) has no NumPy "
                     "equivalent cudamem imports",
                     (unsigned)t.code, (unsigned)bits);
        return NULL;
    }
    return PyArray_DescrFromType(num);
}

/* A tensor's layout: shape, strides in bytes (C-contiguous when NULL) and
 * the first element's address. */
typedef struct layout {
    int ndim;
    Py_ssize_t shape[NPY_MAXDIMS];
    Py_ssize_t strides[NPY_MAXDIMS];
    PyArray_Descr *dtype; /* owned */
    uintptr_t ptr;
    Py_ssize_t size, low, high; /* elements; the extent in bytes */
} layout;

static int
read_layout(const cmpy_DLTensor *t, layout *l)
{
    Py_ssize_t itemsize;

    if (t->ndim < 0 || t->ndim > NPY_MAXDIMS) {
        PyErr_Format(PyExc_BufferError,
                     "DLPack tensor with ndim %d: cudamem takes 0 to %d",
                     (int)t->ndim, NPY_MAXDIMS);
        return -1;
    }
    if (t->ndim > 0 && t->shape == NULL) {
        PyErr_SetString(PyExc_BufferError, "DLPack tensor with a NULL shape");
        return -1;
    }
    if ((l->dtype = to_dtype(t->dtype)) == NULL) {
        return -1;
    }
    itemsize = PyDataType_ELSIZE(l->dtype);
    l->ndim = t->ndim;
    for (int i = 0; i < l->ndim; i++) {
        if (t->shape[i] < 0 || t->shape[i] > PY_SSIZE_T_MAX ||
            (t->strides != NULL &&
             (t->strides[i] > PY_SSIZE_T_MAX / itemsize ||
              t->strides[i] < -PY_SSIZE_T_MAX / itemsize))) {
            PyErr_Format(PyExc_BufferError,
                         "DLPack tensor axis %d has shape %lld and stride "
                         "%lld: out of range",
                         i, (long long)t->shape[i],
                         t->strides != NULL ? (long long)t->strides[i] : 0LL);
            return -1;
        }
        l->shape[i] = (Py_ssize_t)t->shape[i];
        if (t->strides != NULL) {
            l->strides[i] = (Py_ssize_t)t->strides[i] * itemsize;
        }
    }
    if (t->strides == NULL) {
        cmpy_contiguous_strides(l->ndim, l->shape, itemsize, 'C', l->strides);
    }
    if (cmpy_layout_extent(l->ndim, l->shape, l->strides, itemsize, &l->size,
                           &l->low, &l->high) < 0) {
        return -1;
    }
    if (t->data == NULL && l->size != 0) {
        PyErr_Format(PyExc_BufferError,
                     "DLPack tensor of %zd elements has NULL data", l->size);
        return -1;
    }
    l->ptr = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    return 0;
}

/* A NumPy array over a CPU tensor's memory, keeping `owner` alive. */
static PyObject *
host_view(const layout *l, PyObject *owner, int readonly)
{
    PyObject *arr;

    Py_INCREF(l->dtype);
    arr = PyArray_NewFromDescr(&PyArray_Type, l->dtype, l->ndim,
                               (npy_intp *)l->shape, (npy_intp *)l->strides,
                               (void *)l->ptr,
                               readonly ? 0 : NPY_ARRAY_WRITEABLE, NULL);
    if (arr != NULL &&
        PyArray_SetBaseObject((PyArrayObject *)arr, Py_NewRef(owner)) < 0) {
        Py_CLEAR(arr);
    }
    return arr;
}

/* A DeviceNDArray over a device-accessible tensor's memory on dev. */
static PyObject *
device_view(cmpy_state *st, cm_device *dev, const layout *l, PyObject *owner,
            int readonly, PyObject *stream, const cmpy_stream_ref *ref)
{
    CUdeviceptr ptr = (CUdeviceptr)l->ptr;
    PyObject *mem;

    mem = l->size != 0 ? cmpy_memory_borrow(st, dev, ptr + (CUdeviceptr)l->low,
                                            (size_t)(l->high - l->low), owner)
                       : cmpy_memory_borrow(st, dev, 0, 0, owner);
    if (mem == NULL) {
        return NULL;
    }
    ((cmpy_MemoryPointer *)mem)->mem->readonly = readonly ? CMPY_RO_DLPACK : 0;
    return (PyObject *)cmpy_array_wrap(st->DeviceNDArrayType, mem, ptr,
                                       l->ndim, l->shape, l->strides, l->dtype,
                                       stream, ref);
}

/* A C-contiguous copy of src (a NumPy or device array) on dev, queued on
 * the consumer's stream. */
static PyObject *
copy_to(cmpy_state *st, cm_device *dev, const layout *l, PyObject *src,
        PyObject *stream, const cmpy_stream_ref *ref)
{
    Py_ssize_t strides[NPY_MAXDIMS];
    size_t nbytes = (size_t)l->size * (size_t)PyDataType_ELSIZE(l->dtype);
    cmpy_DeviceNDArray *arr;
    PyObject *mem;

    cmpy_contiguous_strides(l->ndim, l->shape, PyDataType_ELSIZE(l->dtype),
                            'C', strides);
    mem = cmpy_memory_alloc(st, dev, nbytes, ref->handle);
    if (mem == NULL) {
        return NULL;
    }
    arr = cmpy_array_wrap(st->DeviceNDArrayType, mem,
                          ((cmpy_MemoryPointer *)mem)->ptr, l->ndim, l->shape,
                          strides, l->dtype, stream, ref);
    if (arr != NULL && cmpy_array_copy_from(st, arr, src, ref) < 0) {
        Py_CLEAR(arr);
    }
    return (PyObject *)arr;
}

/* What obj.__dlpack_device__() says: *type (0 without the method) and
 * *id. The standard passes CPU producers stream=None, and a CUDA
 * producer a stream of its own device. 0 or -1. */
static int
producer_device(PyObject *obj, long *type, long *id)
{
    PyObject *dev;
    int found = cmpy_optional_attr(obj, "__dlpack_device__", &dev);

    *type = *id = 0;
    if (found <= 0) {
        return found;
    }
    Py_SETREF(dev, PyObject_CallNoArgs(dev));
    if (dev == NULL) {
        return -1;
    }
    if (!PyTuple_Check(dev) || PyTuple_GET_SIZE(dev) != 2 ||
        !PyLong_Check(PyTuple_GET_ITEM(dev, 0)) ||
        !PyLong_Check(PyTuple_GET_ITEM(dev, 1))) {
        PyErr_Format(PyExc_TypeError,
                     "__dlpack_device__() must return a (device_type, "
                     "device_id) tuple of ints, not %R",
                     dev);
        Py_DECREF(dev);
        return -1;
    }
    /* Out of a C long's range: no DLPack device type or ordinal. */
    *type = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
    *id = PyLong_AsLong(PyTuple_GET_ITEM(dev, 1));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        *type = *id = -1;
    }
    Py_DECREF(dev);
    return 0;
}

/* The producer's capsule: obj itself, or obj.__dlpack__(stream=handle,
 * max_version=(1, 1)), retried without max_version for producers that
 * predate it. A CUDA producer on another device than `dev` (handle's;
 * NULL: any) gets its own device's legacy default stream instead: a copy
 * follows that stream (arraycopy.c), and a stream of the wrong device is
 * refused once the capsule is read. New reference. */
static PyObject *
get_capsule(PyObject *obj, cm_device *dev, CUstream handle)
{
    PyObject *method, *kwargs, *capsule = NULL, *empty, *stream;
    long type, id;

    if (PyCapsule_CheckExact(obj)) {
        return Py_NewRef(obj);
    }
    method = PyObject_GetAttrString(obj, "__dlpack__");
    if (method == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "from_dlpack() needs an object with __dlpack__ or "
                         "a DLPack capsule, not %.200s",
                         Py_TYPE(obj)->tp_name);
        }
        return NULL;
    }
    if (producer_device(obj, &type, &id) < 0) {
        Py_DECREF(method);
        return NULL;
    }
    if (type == CMPY_DL_CUDA && dev != NULL && id != dev->ordinal) {
        handle = CU_STREAM_LEGACY;
    }
    stream = type == CMPY_DL_CPU ? Py_NewRef(Py_None)
                                 : PyLong_FromUnsignedLongLong(
                                       (unsigned long long)(uintptr_t)handle);
    kwargs = stream == NULL ? NULL
                            : Py_BuildValue("{s:O,s:(ii)}", "stream", stream,
                                            "max_version", CMPY_DLPACK_MAJOR,
                                            CMPY_DLPACK_MINOR);
    Py_XDECREF(stream);
    empty = PyTuple_New(0);
    if (kwargs != NULL && empty != NULL) {
        capsule = PyObject_Call(method, empty, kwargs);
        if (capsule == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            if (PyDict_DelItemString(kwargs, "max_version") == 0) {
                capsule = PyObject_Call(method, empty, kwargs);
            }
        }
    }
    Py_XDECREF(empty);
    Py_XDECREF(kwargs);
    Py_DECREF(method);
    return capsule;
}

/* The device a tensor's memory is imported to or copied to, the device
 * that reads it (another only for a CUDA tensor copied across devices),
 * and whether that copies. */
static int
target(cmpy_state *st, const cmpy_DLTensor *t, PyObject *device_arg,
       cm_device **dev, cm_device **src_dev, int *must_copy)
{
    cmpy_Device *want = NULL, *own = NULL;
    PyObject *id;
    int type = t->device.device_type;

    if (type != CMPY_DL_CPU && type != CMPY_DL_CUDA &&
        type != CMPY_DL_CUDA_HOST && type != CMPY_DL_CUDA_MANAGED) {
        PyErr_Format(PyExc_BufferError,
                     "DLPack device type %d is not one cudamem imports: "
                     "kDLCPU (1), kDLCUDA (2), kDLCUDAHost (3) or "
                     "kDLCUDAManaged (13)",
                     type);
        return -1;
    }
    if (device_arg != NULL && device_arg != Py_None &&
        cmpy_device_parse(st, device_arg, &want) < 0) {
        return -1;
    }
    *must_copy = type == CMPY_DL_CPU;
    if (type == CMPY_DL_CUDA) {
        if ((id = PyLong_FromLong(t->device.device_id)) == NULL) {
            return -1;
        }
        if (cmpy_device_parse(st, id, &own) < 0) {
            Py_DECREF(id);
            return -1;
        }
        Py_DECREF(id);
        *must_copy = want != NULL && want != own;
    }
    if (want != NULL) {
        *dev = want->dev;
    }
    else if (own != NULL) {
        *dev = own->dev;
    }
    else if (cmpy_current_device(st, dev) < 0) {
        return -1;
    }
    *src_dev = own != NULL ? own->dev : *dev;
    return 0;
}

PyDoc_STRVAR(
    from_dlpack_doc,
    "from_dlpack($module, obj, *, device=None, copy=None, stream=None)\n\
--\n\
\n\
A DeviceNDArray from *obj*, an object with __dlpack__ (CuPy, PyTorch,\n\
JAX, NumPy, cudamem arrays) or a DLPack capsule. CUDA memory (kDLCUDA,\n\
pinned kDLCUDAHost, kDLCUDAManaged) is shared, not copied, and kept\n\
alive until the last array over it goes; CPU data is copied to the\n\
device. *device* (a Device or an ordinal; None: the data's own device,\n\
or the current one for CPU data) receives a copy when the data is\n\
elsewhere. *copy*: True always copies, False raises BufferError where a\n\
copy is needed. The producer orders its work before *stream* (a Stream;\n\
None: the legacy default stream), which the array is bound to.\n\
Read-only tensors give read-only arrays. bfloat16 and float8 need\n\
ml_dtypes.");

static PyObject *
from_dlpack(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
            PyObject *kwnames)
{
    static const char *const names[] = {"obj", "device", "copy", "stream"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[4], *capsule, *stream, *src = NULL, *result = NULL;
    cmpy_stream_ref ref = {NULL, 0, NULL, 1};
    taken tk = {NULL, NULL, 0};
    layout l = {.dtype = NULL};
    cmpy_Device *want = NULL;
    cm_device *dev, *src_dev, *sdev = NULL;
    int copy = -1, must_copy;
    CUstream handle;

    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError,
                        "from_dlpack() takes one positional argument");
        return NULL;
    }
    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("from_dlpack", names, 4, 1, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_dlpack_copy_arg(argv[2], &copy) < 0 ||
        (argv[1] != NULL && argv[1] != Py_None &&
         cmpy_device_parse(st, argv[1], &want) < 0)) {
        return NULL;
    }
    /* A stream of the device asked for; without one, of any device: it
     * is checked against the data's once the capsule says which. */
    if (want != NULL) {
        sdev = want->dev;
    }
    if ((want != NULL
             ? cmpy_stream_arg(st, argv[3] != NULL ? argv[3] : Py_None, sdev,
                               &ref)
             : cmpy_stream_arg_any(st, argv[3] != NULL ? argv[3] : Py_None,
                                   &sdev, &ref)) < 0) {
        return NULL;
    }
    /* No stream, 0 or a default Stream: the legacy default stream, 1. */
    handle = ref.obj != NULL && ref.handle != NULL ? ref.handle
                                                   : CU_STREAM_LEGACY;
    if ((capsule = get_capsule(argv[0], sdev, handle)) == NULL) {
        return NULL;
    }
    if (take(capsule, &tk) < 0) {
        Py_DECREF(capsule);
        return NULL;
    }
    Py_DECREF(capsule);
    /* From here the owner's destructor calls the deleter on failure. */
    if (read_layout(tk.tensor, &l) < 0 ||
        target(st, tk.tensor, argv[1], &dev, &src_dev, &must_copy) < 0 ||
        cmpy_stream_arg(st, argv[3] != NULL ? argv[3] : Py_None, dev, &ref) <
            0) {
        goto done;
    }
    if (must_copy && copy == 0) {
        PyErr_Format(PyExc_BufferError,
                     "from_dlpack(copy=False): the data is on DLPack device "
                     "(%d, %d), not device %d, and only a copy can bring it "
                     "there",
                     (int)tk.tensor->device.device_type,
                     (int)tk.tensor->device.device_id, dev->ordinal);
        goto done;
    }
    /* Device memory is checked as a CAI import is: a tensor that leaves
     * its allocation is refused before a kernel faults on it. */
    if (tk.tensor->device.device_type == CMPY_DL_CUDA && l.size != 0 &&
        cmpy_check_extent(st, (CUdeviceptr)l.ptr, l.low, l.high,
                          "the DLPack tensor") < 0) {
        goto done;
    }
    stream = ref.async ? ref.obj : NULL;
    if (tk.tensor->device.device_type == CMPY_DL_CPU) {
        src = host_view(&l, tk.owner, tk.readonly);
    }
    else if (src_dev != dev) {
        /* Read on its own device, unbound: the copy is queued on ref. */
        cmpy_stream_ref none = {NULL, 0, NULL, 1};
        src = device_view(st, src_dev, &l, tk.owner, tk.readonly, NULL, &none);
    }
    else {
        src = device_view(st, dev, &l, tk.owner, tk.readonly, stream, &ref);
    }
    if (src == NULL) {
        goto done;
    }
    if (must_copy || copy == 1) {
        result = copy_to(st, dev, &l, src, stream, &ref);
    }
    else {
        result = Py_NewRef(src);
    }
done:
    Py_XDECREF(src);
    Py_XDECREF(l.dtype);
    Py_XDECREF(tk.owner);
    return result;
}

PyMethodDef cmpy_dlpack_import_methods[] = {
    {"from_dlpack", (PyCFunction)(void (*)(void))from_dlpack,
     METH_FASTCALL | METH_KEYWORDS, from_dlpack_doc},
    {NULL, NULL, 0, NULL},
};
