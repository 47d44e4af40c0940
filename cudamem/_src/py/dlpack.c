/* dlpack.c: building DLPack capsules over memory cudamem can describe,
 * their deleters, and parsing __dlpack__'s arguments. Which device type a
 * memory kind exports as, and the stream handshake, belong to the callers;
 * consuming capsules is dlpackimport.c's. */
#include "dlpack.h"

static const char NAME_LEGACY[] = "dltensor";
static const char NAME_VERSIONED[] = "dltensor_versioned";

/* ml_dtypes registers bfloat16 as a kind 'V' dtype of its own. */
static int
is_bfloat16(PyArray_Descr *dtype)
{
    PyObject *name;
    int found;

    if (PyDataType_ELSIZE(dtype) != 2 || PyDataType_HASFIELDS(dtype) ||
        PyDataType_HASSUBARRAY(dtype)) {
        return 0;
    }
    name = PyObject_GetAttrString((PyObject *)dtype, "name");
    if (name == NULL) {
        return -1;
    }
    found = PyUnicode_Check(name) &&
            PyUnicode_CompareWithASCIIString(name, "bfloat16") == 0;
    Py_DECREF(name);
    return found;
}

int
cmpy_dlpack_dtype(PyArray_Descr *dtype, cmpy_DLDataType *out)
{
    Py_ssize_t itemsize = PyDataType_ELSIZE(dtype);
    int code = -1;

    switch (dtype->kind) {
    case 'b':
        code = CMPY_DL_BOOL;
        break;
    case 'i':
        code = CMPY_DL_INT;
        break;
    case 'u':
        code = CMPY_DL_UINT;
        break;
    case 'f':
        /* long double has no DLPack code. */
        if (itemsize <= 8) {
            code = CMPY_DL_FLOAT;
        }
        break;
    case 'c':
        if (itemsize <= 16) {
            code = CMPY_DL_COMPLEX;
        }
        break;
    case 'V':
        switch (is_bfloat16(dtype)) {
        case -1:
            return -1;
        case 1:
            code = CMPY_DL_BFLOAT;
            break;
        default:
            break;
        }
        break;
    default:
        break;
    }
    if (code < 0 || !PyArray_ISNBO(dtype->byteorder)) {
        PyErr_Format(PyExc_BufferError,
                     "DLPack cannot describe dtype %R: it has bool, integer, "
                     "float, complex and bfloat16 types in native byte "
                     "order",
                     (PyObject *)dtype);
        return -1;
    }
    out->code = (uint8_t)code;
    out->bits = (uint8_t)(itemsize * 8);
    out->lanes = 1;
    return 0;
}

int
cmpy_dlpack_copy_arg(PyObject *arg, int *copy)
{
    if (arg == NULL || arg == Py_None) {
        return 0;
    }
    /* NumPy's bools too: they are what comparisons give. */
    if (!PyBool_Check(arg) && !PyArray_IsScalar(arg, Bool)) {
        PyErr_Format(PyExc_TypeError,
                     "copy must be True, False or None, not %R", arg);
        return -1;
    }
    *copy = PyObject_IsTrue(arg);
    return 0;
}

int
cmpy_dlpack_wants_versioned(PyObject *max_version, int *versioned)
{
    long major;

    if (max_version == NULL || max_version == Py_None) {
        *versioned = 0;
        return 0;
    }
    if (!PyTuple_Check(max_version) || cmpy_tuple_size(max_version) != 2 ||
        !PyLong_Check(cmpy_tuple_item(max_version, 0)) ||
        !PyLong_Check(cmpy_tuple_item(max_version, 1))) {
        PyErr_Format(PyExc_TypeError,
                     "max_version must be None or a (major, minor) tuple of "
                     "ints, not %R",
                     max_version);
        return -1;
    }
    major = PyLong_AsLong(cmpy_tuple_item(max_version, 0));
    if (major == -1 && PyErr_Occurred()) {
        return -1;
    }
    *versioned = major >= 1;
    return 0;
}

/* stream=: see dlpack.h. */
static int
parse_stream(PyObject *arg, cmpy_dlpack_args *out)
{
    unsigned long long handle;

    out->wait = 1;
    out->stream = CU_STREAM_LEGACY;
    if (arg == NULL || arg == Py_None) {
        return 0;
    }
    if (!PyLong_Check(arg) || PyBool_Check(arg)) {
        PyErr_Format(PyExc_TypeError,
                     "__dlpack__() stream must be None or an int (a CUDA "
                     "stream handle, 1, 2 or -1), not %.200s %R",
                     cmpy_tp_name(Py_TYPE(arg)), arg);
        return -1;
    }
    if (PyLong_AsLong(arg) == -1 && !PyErr_Occurred()) {
        out->wait = 0;
        return 0;
    }
    PyErr_Clear();
    /* Handles go up to 2**64 - 1. */
    handle = PyLong_AsUnsignedLongLong(arg);
    if (handle == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        handle = 0;
    }
    if (handle == 0) {
        PyErr_Format(PyExc_ValueError,
                     "__dlpack__() stream %R is not a CUDA stream: use 1 "
                     "(legacy default), 2 (per-thread default), a stream "
                     "handle, None, or -1 for no synchronization (0 is "
                     "ambiguous for CUDA)",
                     arg);
        return -1;
    }
    out->stream = (CUstream)(uintptr_t)handle;
    return 0;
}

/* dl_device=: see dlpack.h. */
static int
parse_target(PyObject *arg, int type, int id, int *to_cpu)
{
    long want_type, want_id;

    *to_cpu = 0;
    if (arg == NULL || arg == Py_None) {
        return 0;
    }
    if (!PyTuple_Check(arg) || cmpy_tuple_size(arg) != 2 ||
        !PyLong_Check(cmpy_tuple_item(arg, 0)) ||
        !PyLong_Check(cmpy_tuple_item(arg, 1))) {
        PyErr_Format(PyExc_TypeError,
                     "__dlpack__() dl_device must be None or a "
                     "(device_type, device_id) tuple of ints, not %R",
                     arg);
        return -1;
    }
    want_type = PyLong_AsLong(cmpy_tuple_item(arg, 0));
    want_id = PyLong_AsLong(cmpy_tuple_item(arg, 1));
    if ((want_type == -1 || want_id == -1) && PyErr_Occurred()) {
        return -1;
    }
    if (want_type == type && want_id == id) {
        return 0;
    }
    if (want_type == CMPY_DL_CPU && want_id == 0) {
        *to_cpu = 1;
        return 0;
    }
    PyErr_Format(PyExc_BufferError,
                 "cannot export to DLPack device %R: the memory is on "
                 "(%d, %d), and a copy can go to the CPU, (1, 0)",
                 arg, type, id);
    return -1;
}

int
cmpy_dlpack_parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  int type, int id, cmpy_dlpack_args *out)
{
    static const char *const names[] = {"stream", "max_version", "dl_device",
                                        "copy"};
    PyObject *argv[4];

    if (nargs > 0) {
        PyErr_SetString(PyExc_TypeError,
                        "__dlpack__() takes keyword arguments only");
        return -1;
    }
    out->copy = 0;
    if (cmpy_parse_args("__dlpack__", names, 4, 0, args, 0, kwnames, argv) <
            0 ||
        parse_stream(argv[0], out) < 0 ||
        cmpy_dlpack_wants_versioned(argv[1], &out->versioned) < 0 ||
        cmpy_dlpack_copy_arg(argv[3], &out->copy) < 0 ||
        parse_target(argv[2], type, id, &out->to_cpu) < 0) {
        return -1;
    }
    return 0;
}

/* The consumer may call a deleter on any thread, holding the GIL or not.
 * After shutdown began the owner leaks: decref then could run arbitrary
 * finalizers in a dying interpreter. */
static void
release_owner(PyObject *owner)
{
    int finalizing = cmpy_is_finalizing();
    PyGILState_STATE gil;

    if (!Py_IsInitialized() || finalizing) {
        return;
    }
    gil = PyGILState_Ensure();
    Py_DECREF(owner);
    PyGILState_Release(gil);
}

static void
delete_legacy(cmpy_DLManagedTensor *t)
{
    release_owner(t->manager_ctx);
    cmpy_raw_free(t);
}

static void
delete_versioned(cmpy_DLManagedTensorVersioned *t)
{
    release_owner(t->manager_ctx);
    cmpy_raw_free(t);
}

/* An unconsumed capsule deletes its tensor; a consumer renames the capsule
 * and takes the deleter over. */
static void
capsule_destructor(PyObject *capsule)
{
    PyObject *exc = cmpy_exc_take();

    if (PyCapsule_IsValid(capsule, NAME_LEGACY)) {
        cmpy_DLManagedTensor *t = PyCapsule_GetPointer(capsule, NAME_LEGACY);
        t->deleter(t);
    }
    else if (PyCapsule_IsValid(capsule, NAME_VERSIONED)) {
        cmpy_DLManagedTensorVersioned *t = PyCapsule_GetPointer(
            capsule, NAME_VERSIONED);
        t->deleter(t);
    }
    cmpy_exc_put(exc);
}

static int
fill_tensor(cmpy_DLTensor *t, const cmpy_dlpack_desc *desc, int64_t *dims)
{
    Py_ssize_t itemsize = PyDataType_ELSIZE(desc->dtype);

    if (cmpy_dlpack_dtype(desc->dtype, &t->dtype) < 0) {
        return -1;
    }
    for (int i = 0; i < desc->ndim; i++) {
        if (desc->strides[i] % itemsize != 0) {
            PyErr_Format(PyExc_BufferError,
                         "DLPack strides count elements: stride %zd of axis "
                         "%d is not a multiple of the item size %zd",
                         desc->strides[i], i, itemsize);
            return -1;
        }
        dims[i] = desc->shape[i];
        dims[desc->ndim + i] = desc->strides[i] / itemsize;
    }
    t->data = desc->data;
    t->device.device_type = desc->device_type;
    t->device.device_id = desc->device_id;
    t->ndim = desc->ndim;
    t->shape = dims;
    t->strides = dims + desc->ndim;
    t->byte_offset = 0;
    return 0;
}

int
cmpy_dlpack_check_readonly(int readonly, int versioned)
{
    /* A legacy capsule cannot say read-only: its consumer would write. */
    if (readonly && !versioned) {
        PyErr_SetString(PyExc_BufferError,
                        "Cannot export readonly array since signalling "
                        "readonly is unsupported by DLPack (supported by "
                        "newer DLPack version): the consumer must pass "
                        "max_version=(1, 0) or later");
        return -1;
    }
    return 0;
}

PyObject *
cmpy_dlpack_capsule(PyObject *owner, const cmpy_dlpack_desc *desc,
                    int versioned)
{
    size_t head = versioned ? sizeof(cmpy_DLManagedTensorVersioned)
                            : sizeof(cmpy_DLManagedTensor);
    size_t ndim = (size_t)desc->ndim;
    void *block;
    cmpy_DLTensor *tensor;
    int64_t *dims;
    PyObject *capsule;

    if (cmpy_dlpack_check_readonly(desc->readonly, versioned) < 0) {
        return NULL;
    }
    /* Raw memory: the deleter may free it without the GIL. */
    block = cmpy_raw_calloc(1, head + 2 * ndim * sizeof(int64_t));
    if (block == NULL) {
        return PyErr_NoMemory();
    }
    dims = (int64_t *)((char *)block + head);
    if (versioned) {
        cmpy_DLManagedTensorVersioned *t = block;
        t->version.major = CMPY_DLPACK_MAJOR;
        t->version.minor = CMPY_DLPACK_MINOR;
        t->manager_ctx = owner;
        t->deleter = delete_versioned;
        t->flags = desc->readonly ? CMPY_DLPACK_FLAG_READ_ONLY : 0;
        tensor = &t->dl_tensor;
    }
    else {
        cmpy_DLManagedTensor *t = block;
        t->manager_ctx = owner;
        t->deleter = delete_legacy;
        tensor = &t->dl_tensor;
    }
    if (fill_tensor(tensor, desc, dims) < 0) {
        cmpy_raw_free(block);
        return NULL;
    }
    capsule = PyCapsule_New(block, versioned ? NAME_VERSIONED : NAME_LEGACY,
                            capsule_destructor);
    if (capsule == NULL) {
        cmpy_raw_free(block);
        return NULL;
    }
    Py_INCREF(owner);
    return capsule;
}

static int
int_arg(PyObject *arg, const char *what, int *out)
{
    long v = PyLong_AsLong(arg);

    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s %R does not fit in 32 bits", what,
                     arg);
        return -1;
    }
    *out = (int)v;
    return 0;
}

PyDoc_STRVAR(
    dlpack_export_doc,
    "_dlpack_export($module, array, device_type, device_id, max_version=None)\n\
--\n\
\n\
A DLPack capsule over a NumPy array's memory, described as device\n\
(device_type, device_id): how host arrays cudamem allocated (pinned,\n\
mapped, managed) implement __dlpack__. The capsule keeps the array\n\
alive; it is versioned when max_version allows, and read-only arrays\n\
are flagged so (BufferError without a versioned capsule, as NumPy).");

static PyObject *
dlpack_export(PyObject *Py_UNUSED(module), PyObject *const *args,
              Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"array", "device_type", "device_id",
                                        "max_version"};
    PyObject *argv[4];
    PyArrayObject *array;
    cmpy_dlpack_desc desc;
    int versioned;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("_dlpack_export", names, 4, 3, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    if (!PyArray_Check(argv[0])) {
        return PyErr_Format(PyExc_TypeError,
                            "_dlpack_export() needs a NumPy array, not %R",
                            argv[0]);
    }
    array = (PyArrayObject *)argv[0];
    if (int_arg(argv[1], "device_type", &desc.device_type) < 0 ||
        int_arg(argv[2], "device_id", &desc.device_id) < 0 ||
        cmpy_dlpack_wants_versioned(argv[3], &versioned) < 0) {
        return NULL;
    }
    desc.data = PyArray_DATA(array);
    desc.ndim = PyArray_NDIM(array);
    desc.shape = PyArray_DIMS(array);
    desc.strides = PyArray_STRIDES(array);
    desc.dtype = PyArray_DESCR(array);
    desc.readonly = !PyArray_ISWRITEABLE(array);
    return cmpy_dlpack_capsule(argv[0], &desc, versioned);
}

PyMethodDef cmpy_dlpack_methods[] = {
    {"_dlpack_export", (PyCFunction)(void (*)(void))dlpack_export,
     METH_FASTCALL | METH_KEYWORDS, dlpack_export_doc},
    {NULL, NULL, 0, NULL},
};
