/* cai.c (py/): importing the CUDA Array Interface (v3), numba's
 * as_cuda_array / from_cuda_array_interface / is_cuda_array: validating a
 * producer's dict, finding the device from the pointer, binding and
 * waiting for its stream. The export is arraycai.c's; the borrowed memory
 * record is core/memory.c's. */
#include "cai.h"

#include <stdlib.h>

#include "../core/event.h"
#include "../core/memory.h"
#include "../core/stream.h"
#include "array.h"
#include "device.h"
#include "stream.h"

/* The newest version of the interface this file reads. */
#define CMPY_CAI_VERSION 3

/* What a valid interface dict says. */
typedef struct cai_desc {
    int ndim;
    Py_ssize_t shape[NPY_MAXDIMS];
    Py_ssize_t strides[NPY_MAXDIMS];
    PyArray_Descr *dtype; /* owned */
    CUdeviceptr ptr;      /* the first element */
    int readonly;
    int has_stream;
    CUstream stream;
    Py_ssize_t size;      /* elements */
    Py_ssize_t low, high; /* the extent, in bytes from ptr */
} cai_desc;

/* ------------------------------------------------------------------------
 * Parsing a producer's dict. */

/* The exception being handled becomes the cause of a new one. */
static void
raise_from(PyObject *type, PyObject *msg)
{
    PyObject *cause = cmpy_exc_take(), *exc;

    if (msg == NULL) {
        Py_XDECREF(cause);
        return;
    }
    PyErr_SetObject(type, msg);
    Py_DECREF(msg);
    exc = cmpy_exc_take();
    if (exc != NULL && cause != NULL) {
        PyException_SetContext(exc, Py_NewRef(cause));
        PyException_SetCause(exc, cause);
        cause = NULL;
    }
    Py_XDECREF(cause);
    cmpy_exc_put(exc);
}

/* desc.get(key), borrowed (desc is cudamem's own copy: nothing else can
 * change it); NULL when absent, or with an exception. */
static PyObject *
lookup(PyObject *desc, const char *key)
{
    PyObject *name = PyUnicode_FromString(key), *value;

    if (name == NULL) {
        return NULL;
    }
    value = PyDict_GetItemWithError(desc, name);
    Py_DECREF(name);
    return value;
}

/* desc[key]; a missing key is a KeyError, as in numba. */
static PyObject *
required(PyObject *desc, const char *key)
{
    PyObject *value = lookup(desc, key);

    if (value == NULL && !PyErr_Occurred()) {
        PyErr_Format(PyExc_KeyError,
                     "the CUDA Array Interface dict has no '%s'", key);
    }
    return value;
}

/* desc.get(key), and whether that failed. */
static PyObject *
optional(PyObject *desc, const char *key, int *failed)
{
    PyObject *value = lookup(desc, key);

    *failed = value == NULL && PyErr_Occurred();
    return value;
}

/* An int that is not a bool (NumPy's integers included) as a new int. */
static PyObject *
as_int(PyObject *value)
{
    if (PyBool_Check(value) || !PyIndex_Check(value)) {
        return NULL;
    }
    return PyNumber_Index(value);
}

static int
parse_version(PyObject *desc)
{
    PyObject *value = required(desc, "version"), *index;
    int overflow = 0;
    long v = -1;

    if (value == NULL) {
        return -1;
    }
    index = as_int(value);
    if (index != NULL) {
        v = PyLong_AsLongAndOverflow(index, &overflow);
        Py_DECREF(index);
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    if (index == NULL || overflow || v < 0 || v > CMPY_CAI_VERSION) {
        PyErr_Format(PyExc_ValueError,
                     "unsupported CUDA Array Interface version %R: cudamem "
                     "reads versions 0 to %d",
                     value, CMPY_CAI_VERSION);
        return -1;
    }
    return 0;
}

/* A tuple of at most NPY_MAXDIMS ints, named `key` in errors. */
static int
parse_ints(PyObject *value, const char *key, Py_ssize_t *out, int *n)
{
    Py_ssize_t len;

    if (!PyTuple_Check(value)) {
        PyErr_Format(PyExc_TypeError,
                     "the CUDA Array Interface's '%s' must be a tuple of "
                     "ints, not %R",
                     key, value);
        return -1;
    }
    len = PyTuple_GET_SIZE(value);
    if (len > NPY_MAXDIMS) {
        PyErr_Format(PyExc_ValueError,
                     "the CUDA Array Interface's '%s' %R has %zd "
                     "dimensions; at most %d are supported",
                     key, value, len, NPY_MAXDIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *index = as_int(PyTuple_GET_ITEM(value, i));

        if (index == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_TypeError,
                             "the CUDA Array Interface's '%s' %R holds "
                             "%R, which is not an int",
                             key, value, PyTuple_GET_ITEM(value, i));
            }
            return -1;
        }
        out[i] = PyLong_AsSsize_t(index);
        Py_DECREF(index);
        if (out[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "the CUDA Array Interface's '%s' %R holds a value "
                         "too large for an index",
                         key, value);
            return -1;
        }
    }
    *n = (int)len;
    return 0;
}

static int
parse_shape(PyObject *desc, cai_desc *out)
{
    PyObject *value = required(desc, "shape");

    if (value == NULL ||
        parse_ints(value, "shape", out->shape, &out->ndim) < 0) {
        return -1;
    }
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] < 0) {
            PyErr_Format(PyExc_ValueError,
                         "negative dimensions are not allowed: the CUDA "
                         "Array Interface's shape is %R",
                         value);
            return -1;
        }
    }
    return 0;
}

/* 'descr' as a dtype, when it describes fields: the typestr of a
 * structured dtype is only its size ('|V16'). New reference, NULL (no
 * exception) when descr says nothing more, or NULL with an exception. */
static PyArray_Descr *
descr_dtype(PyObject *descr)
{
    PyObject *format, *result, *names;
    Py_ssize_t nfields;

    format = PyImport_ImportModule("numpy.lib.format");
    if (format == NULL) {
        return NULL;
    }
    /* NumPy's own inverse of dtype.descr: padding entries become offsets,
     * so aligned structures round trip. */
    result = PyObject_CallMethod(format, "descr_to_dtype", "O", descr);
    Py_DECREF(format);
    if (result == NULL) {
        raise_from(PyExc_ValueError,
                   PyUnicode_FromFormat("invalid 'descr' %R in the CUDA "
                                        "Array Interface",
                                        descr));
        return NULL;
    }
    /* [('', '|V16')] gives a structure without fields: no better than
     * the typestr's plain bytes. */
    names = PyArray_DescrCheck(result)
                ? PyObject_GetAttrString(result, "names")
                : Py_NewRef(Py_None);
    if (names == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    nfields = PyTuple_Check(names) ? PyTuple_GET_SIZE(names) : 0;
    Py_DECREF(names);
    if (nfields == 0) {
        Py_DECREF(result);
        return NULL;
    }
    return (PyArray_Descr *)result;
}

static int
parse_dtype(PyObject *desc, cai_desc *out)
{
    PyObject *typestr = required(desc, "typestr"), *descr;
    PyArray_Descr *fields;
    int failed;

    if (typestr == NULL) {
        return -1;
    }
    if (!PyUnicode_Check(typestr)) {
        PyErr_Format(PyExc_TypeError,
                     "the CUDA Array Interface's typestr must be a str, not "
                     "%R",
                     typestr);
        return -1;
    }
    if (!PyArray_DescrConverter(typestr, &out->dtype)) {
        out->dtype = NULL;
        raise_from(PyExc_ValueError,
                   PyUnicode_FromFormat("the CUDA Array Interface's typestr "
                                        "%R is not a NumPy dtype",
                                        typestr));
        return -1;
    }
    descr = optional(desc, "descr", &failed);
    if (failed) {
        return -1;
    }
    if (out->dtype->type_num != NPY_VOID || PyDataType_HASFIELDS(out->dtype) ||
        descr == NULL || descr == Py_None) {
        return 0;
    }
    fields = descr_dtype(descr);
    if (fields == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (PyDataType_ELSIZE(fields) != PyDataType_ELSIZE(out->dtype)) {
        PyErr_Format(PyExc_ValueError,
                     "the CUDA Array Interface's descr %R describes %zd "
                     "bytes, but its typestr %R has %zd",
                     descr, (Py_ssize_t)PyDataType_ELSIZE(fields), typestr,
                     (Py_ssize_t)PyDataType_ELSIZE(out->dtype));
        Py_DECREF(fields);
        return -1;
    }
    Py_SETREF(out->dtype, fields);
    return 0;
}

static int
parse_strides(PyObject *desc, cai_desc *out)
{
    PyObject *value;
    int failed, n;

    value = optional(desc, "strides", &failed);
    if (failed) {
        return -1;
    }
    if (value == NULL || value == Py_None) {
        cmpy_contiguous_strides(out->ndim, out->shape,
                                PyDataType_ELSIZE(out->dtype), 'C',
                                out->strides);
        return 0;
    }
    if (parse_ints(value, "strides", out->strides, &n) < 0) {
        return -1;
    }
    if (n != out->ndim) {
        PyErr_Format(PyExc_ValueError,
                     "the CUDA Array Interface's strides %R do not match "
                     "the %d dimensions of its shape %R",
                     value, out->ndim, lookup(desc, "shape"));
        return -1;
    }
    return 0;
}

static int
parse_data(PyObject *desc, cai_desc *out)
{
    PyObject *value = required(desc, "data"), *index;
    unsigned long long p;

    if (value == NULL) {
        return -1;
    }
    if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) {
        PyErr_Format(PyExc_TypeError,
                     "the CUDA Array Interface's data must be a tuple "
                     "(ptr, readonly), not %R",
                     value);
        return -1;
    }
    index = as_int(PyTuple_GET_ITEM(value, 0));
    if (index == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError,
                         "the CUDA Array Interface's data pointer must be "
                         "an int, not %R",
                         PyTuple_GET_ITEM(value, 0));
        }
        return -1;
    }
    p = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (p == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "the CUDA Array Interface's data pointer %R is not an "
                     "address",
                     PyTuple_GET_ITEM(value, 0));
        return -1;
    }
    if (!PyBool_Check(PyTuple_GET_ITEM(value, 1))) {
        PyErr_Format(PyExc_TypeError,
                     "the CUDA Array Interface's readonly flag must be a "
                     "bool, not %R",
                     PyTuple_GET_ITEM(value, 1));
        return -1;
    }
    out->ptr = (CUdeviceptr)p;
    out->readonly = PyTuple_GET_ITEM(value, 1) == Py_True;
    if (cmpy_layout_extent(out->ndim, out->shape, out->strides,
                           PyDataType_ELSIZE(out->dtype), &out->size,
                           &out->low, &out->high) < 0) {
        return -1;
    }
    if (out->size == 0) {
        return 0;
    }
    if (p == 0) {
        PyErr_Format(PyExc_ValueError,
                     "the CUDA Array Interface's data pointer is 0 for an "
                     "array of %zd elements: only a zero-size array may "
                     "have no memory",
                     out->size);
        return -1;
    }
    /* Negative strides put the extent below the first element. */
    if (p < (unsigned long long)-out->low ||
        p + (unsigned long long)out->high < p) {
        PyErr_Format(PyExc_ValueError,
                     "the CUDA Array Interface's array at %R spans bytes "
                     "%zd to %zd around it, outside the address space",
                     PyTuple_GET_ITEM(value, 0), out->low, out->high);
        return -1;
    }
    return 0;
}

static int
parse_stream(PyObject *desc, cai_desc *out)
{
    PyObject *value, *index;
    unsigned long long h;
    int failed;

    value = optional(desc, "stream", &failed);
    out->has_stream = 0;
    out->stream = NULL;
    if (failed) {
        return -1;
    }
    if (value == NULL || value == Py_None) {
        return 0;
    }
    index = as_int(value);
    if (index == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError,
                         "the CUDA Array Interface's stream must be None or "
                         "an int, not %R",
                         value);
        }
        return -1;
    }
    h = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if ((h == (unsigned long long)-1 && PyErr_Occurred()) || h == 0 ||
        h > UINTPTR_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "invalid stream %R in the CUDA Array Interface%s", value,
                     h == 0 ? ": 0 is ambiguous and not allowed (v3); None "
                              "means no synchronization, 1 the legacy and 2 "
                              "the per-thread default stream"
                            : "");
        return -1;
    }
    out->has_stream = 1;
    out->stream = (CUstream)(uintptr_t)h;
    return 0;
}

static int
parse_mask(PyObject *desc)
{
    int failed;
    PyObject *mask = optional(desc, "mask", &failed);

    if (failed) {
        return -1;
    }
    if (mask != NULL && mask != Py_None) {
        PyErr_SetString(PyExc_NotImplementedError,
                        "Masked arrays are not supported");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * The device and the stream. */

/* Whether an import waits for its stream: CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC
 * when set, else numba's variable; only an integer 0 turns it off, as in
 * numba's config. Read at each import, so that it can change at run
 * time. */
static int
sync_enabled(void)
{
    const char *v = getenv("CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC");
    char *end;
    long n;

    if (v == NULL || v[0] == '\0') {
        v = getenv("NUMBA_CUDA_ARRAY_INTERFACE_SYNC");
    }
    if (v == NULL || v[0] == '\0') {
        return 1;
    }
    n = strtol(v, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n') {
        end++;
    }
    return end == v || *end != '\0' || n != 0;
}

/* The device the memory is on: the pointer's owner, with the allocation
 * it lies in (*base, *size); for a zero-size array (no memory) the
 * stream's, or else the current one. */
static int
find_device(cmpy_state *st, const cai_desc *d, cm_device **dev,
            CUdeviceptr *base, size_t *size)
{
    cm_error err;
    int rc;

    if (cmpy_ensure_driver(st) < 0) {
        return -1;
    }
    if (d->size != 0) {
        rc = cm_pointer_device(d->ptr, dev, base, size, &err);
    }
    else if (d->has_stream && !cm_stream_is_default(d->stream)) {
        /* The stream's own device: it then matches by construction. */
        rc = cm_stream_device(d->stream, dev, &err);
    }
    else {
        return cmpy_current_device(st, dev);
    }
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    return rc;
}

/* cmpy_check_extent's test, against the allocation [base, base + size). */
static int
extent_within(CUdeviceptr ptr, Py_ssize_t low, Py_ssize_t high,
              CUdeviceptr base, size_t size, const char *what)
{
    /* PyErr_Format has no %llx. */
    char msg[200];

    if (low == high || (ptr + (CUdeviceptr)low >= base &&
                        ptr + (CUdeviceptr)high <= base + size)) {
        return 0;
    }
    PyOS_snprintf(msg, sizeof(msg),
                  "%s at %#llx spans bytes %zd to %zd around it, outside "
                  "its allocation of %zu bytes at %#llx",
                  what, (unsigned long long)ptr, low, high, size,
                  (unsigned long long)base);
    PyErr_SetString(PyExc_ValueError, msg);
    return -1;
}

int
cmpy_check_extent(cmpy_state *st, CUdeviceptr ptr, Py_ssize_t low,
                  Py_ssize_t high, const char *what)
{
    CUdeviceptr base;
    size_t size;
    cm_error err;
    int rc;

    if (low == high) {
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_pointer_range(ptr, &base, &size, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return extent_within(ptr, low, high, base, size, what);
}

/* A foreign stream must be one of the memory's device: cudamem uses it in
 * that device's context. */
static int
check_stream_device(cmpy_state *st, const cai_desc *d, cm_device *dev)
{
    cm_device *owner;
    cm_error err;

    if (d->size == 0 || !d->has_stream || cm_stream_is_default(d->stream)) {
        return 0;
    }
    if (cm_stream_device(d->stream, &owner, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    if (owner != dev) {
        PyErr_Format(PyExc_ValueError,
                     "the CUDA Array Interface's stream %llu belongs to "
                     "device %d, but its data is on device %d",
                     (unsigned long long)(uintptr_t)d->stream, owner->ordinal,
                     dev->ordinal);
        return -1;
    }
    return 0;
}

/* Orders the consumer after the producer's stream: with `consumer` (a
 * stream= argument other than 0) an event wait on the device, else numba's
 * one host synchronize; nothing without a producer stream, or when sync is
 * off. */
static int
order_streams(cmpy_state *st, const cai_desc *d, cm_device *dev, int sync,
              const cmpy_stream_ref *consumer)
{
    cm_error err;
    int rc;

    if (!d->has_stream || !sync || !sync_enabled()) {
        return 0;
    }
    if (consumer->obj == NULL) {
        return cmpy_stream_wait(st, dev, d->stream);
    }
    if (consumer->handle == d->stream) {
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_event_order(dev, d->stream, consumer->handle, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * The import. */

PyObject *
cmpy_cai_from_desc(cmpy_state *st, PyObject *desc, PyObject *owner, int sync,
                   PyObject *consumer)
{
    cai_desc d = {.dtype = NULL};
    PyObject *stream = NULL, *mem, *result = NULL;
    cmpy_stream_ref ref = {NULL, 0, NULL, 1}, cref = {NULL, 0, NULL, 1};
    cm_device *dev;
    CUdeviceptr base = 0;
    size_t size = 0;

    if (cmpy_numpy_init() < 0) {
        return NULL;
    }
    if (!PyDict_Check(desc)) {
        PyErr_Format(PyExc_TypeError,
                     "a CUDA Array Interface must be a dict, not %.200s",
                     Py_TYPE(desc)->tp_name);
        return NULL;
    }
    /* A private copy: the checks run Python code (__index__, NumPy), which
     * must not change the values under them. */
    desc = PyDict_Copy(desc);
    if (desc == NULL) {
        return NULL;
    }
    /* Everything is checked before anything is made or waited for. */
    if (parse_version(desc) < 0 || parse_mask(desc) < 0 ||
        parse_shape(desc, &d) < 0 || parse_dtype(desc, &d) < 0 ||
        cmpy_check_dtype(d.dtype) < 0 || parse_strides(desc, &d) < 0 ||
        parse_data(desc, &d) < 0 || parse_stream(desc, &d) < 0 ||
        find_device(st, &d, &dev, &base, &size) < 0 ||
        (d.size != 0 &&
         extent_within(d.ptr, d.low, d.high, base, size,
                       "the CUDA Array Interface's array") < 0) ||
        check_stream_device(st, &d, dev) < 0 ||
        (consumer != NULL && consumer != Py_None &&
         cmpy_stream_arg(st, consumer, dev, &cref) < 0)) {
        goto done;
    }
    /* 0 names no stream: numba's rule, as for every stream= argument. */
    if (!cref.async) {
        cref.obj = NULL;
    }
    if (order_streams(st, &d, dev, sync, &cref) < 0) {
        goto done;
    }
    if (cref.obj != NULL) {
        stream = Py_NewRef(cref.obj);
        ref = cref;
    }
    else if (d.has_stream &&
             ((stream = cmpy_stream_wrap(
                   st, dev,
                   d.stream == CU_STREAM_LEGACY       ? CMPY_STREAM_LEGACY
                   : d.stream == CU_STREAM_PER_THREAD ? CMPY_STREAM_PER_THREAD
                                                      : CMPY_STREAM_EXTERNAL,
                   d.stream)) == NULL ||
              cmpy_stream_arg(st, stream, dev, &ref) < 0)) {
        goto done;
    }
    mem = d.size != 0 ? cmpy_memory_borrow(st, dev, d.ptr + (CUdeviceptr)d.low,
                                           (size_t)(d.high - d.low), owner)
                      : cmpy_memory_borrow(st, dev, 0, 0, owner);
    if (mem != NULL) {
        ((cmpy_MemoryPointer *)mem)->mem->readonly = d.readonly ? CMPY_RO_CAI
                                                                : 0;
        result = (PyObject *)cmpy_array_wrap(st->DeviceNDArrayType, mem, d.ptr,
                                             d.ndim, d.shape, d.strides,
                                             d.dtype, stream, &ref);
    }
done:
    Py_XDECREF(stream);
    Py_XDECREF(d.dtype);
    Py_DECREF(desc);
    return result;
}

int
cmpy_cai_check(cmpy_state *st, PyObject *obj)
{
    PyObject *attr;
    int found;

    /* A NumPy array, the common source of a copy, has no interface: no
     * lookup (before NumPy's API is loaded, no array exists). */
    if (cmpy_is_array(st, obj) ||
        (PyArray_API != NULL && PyArray_CheckExact(obj))) {
        return 0;
    }
    found = cmpy_optional_attr(obj, "__cuda_array_interface__", &attr);
    Py_XDECREF(attr);
    return found;
}

PyObject *
cmpy_cai_import(cmpy_state *st, PyObject *obj, int sync, PyObject *consumer)
{
    PyObject *desc, *result;
    int found;

    /* Named a stream, a cudamem array is imported like anyone's: its
     * export orders its pending work, the import orders the consumer. */
    if (cmpy_is_array(st, obj) && (consumer == NULL || consumer == Py_None)) {
        return Py_NewRef(obj);
    }
    found = cmpy_optional_attr(obj, "__cuda_array_interface__", &desc);
    if (found < 0) {
        return NULL;
    }
    if (!found) {
        PyErr_SetString(PyExc_TypeError,
                        "*obj* doesn't implement the cuda array interface.");
        return NULL;
    }
    result = cmpy_cai_from_desc(st, desc, obj, sync, consumer);
    Py_DECREF(desc);
    return result;
}

/* ------------------------------------------------------------------------
 * Module functions. */

/* A `sync=` argument: absent is true. 1, 0, or -1 with an exception. */
static int
sync_arg(PyObject *arg)
{
    return arg == NULL ? 1 : PyObject_IsTrue(arg);
}

PyDoc_STRVAR(from_cai_doc,
             "from_cuda_array_interface($module, desc, owner=None, sync=True, "
             "stream=None)\n--\n\n"
             "A DeviceNDArray over the device memory that *desc* (a CUDA "
             "Array\nInterface dict, versions 0 to 3) describes, sharing "
             "it: on the device\nthat owns the pointer, never freed by "
             "cudamem. A structured dtype's\n'descr' is honoured. *owner* "
             "is kept alive as long as the array or\nany view of it (its "
             "gpu_data.owner). When *desc* names a stream, the\narray is "
             "bound to external_stream(stream) and, with *sync*, the\n"
             "stream is waited for once, unless\n"
             "CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC (or numba's\n"
             "NUMBA_CUDA_ARRAY_INTERFACE_SYNC) is 0. With *stream* (beyond "
             "numba;\na Stream or an object with __cuda_stream__), the "
             "array is bound to\nit instead and ordered after desc's stream "
             "on the device (an event\nrecorded there and waited for by "
             "*stream*): the host does not wait.\nA read-only dict gives an "
             "array that refuses every write.");

static PyObject *
from_cuda_array_interface(PyObject *module, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"desc", "owner", "sync", "stream"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[4];
    int sync;

    if (cmpy_parse_args("from_cuda_array_interface", names, 4, 1, args, nargs,
                        kwnames, argv) < 0 ||
        (sync = sync_arg(argv[2])) < 0) {
        return NULL;
    }
    return cmpy_cai_from_desc(st, argv[0], argv[1], sync, argv[3]);
}

PyDoc_STRVAR(as_cuda_array_doc,
             "as_cuda_array($module, obj, sync=True, stream=None)\n--\n\n"
             "A DeviceNDArray sharing the memory of *obj*, any object with\n"
             "__cuda_array_interface__ (CuPy, PyTorch, JAX, numba arrays), "
             "that keeps\n*obj* alive; a cudamem array is returned as it is "
             "unless *stream* is\ngiven. See from_cuda_array_interface() "
             "for *sync* and *stream*. "
             "TypeError when\n*obj* has no __cuda_array_interface__.");

static PyObject *
as_cuda_array(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    static const char *const names[] = {"obj", "sync", "stream"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[3];
    int sync;

    if (cmpy_parse_args("as_cuda_array", names, 3, 1, args, nargs, kwnames,
                        argv) < 0 ||
        (sync = sync_arg(argv[1])) < 0) {
        return NULL;
    }
    return cmpy_cai_import(st, argv[0], sync, argv[2]);
}

PyDoc_STRVAR(is_cuda_array_doc,
             "is_cuda_array($module, obj)\n--\n\n"
             "True when *obj* has __cuda_array_interface__ (cudamem's "
             "arrays do).");

static PyObject *
is_cuda_array(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    static const char *const names[] = {"obj"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[1];
    int found;

    if (cmpy_parse_args("is_cuda_array", names, 1, 1, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    if (cmpy_is_array(st, argv[0])) {
        Py_RETURN_TRUE;
    }
    found = cmpy_cai_check(st, argv[0]);
    return found < 0 ? NULL : PyBool_FromLong(found);
}

PyMethodDef cmpy_cai_methods[] = {
    {"from_cuda_array_interface",
     (PyCFunction)(void (*)(void))from_cuda_array_interface,
     METH_FASTCALL | METH_KEYWORDS, from_cai_doc},
    {"as_cuda_array", (PyCFunction)(void (*)(void))as_cuda_array,
     METH_FASTCALL | METH_KEYWORDS, as_cuda_array_doc},
    {"is_cuda_array", (PyCFunction)(void (*)(void))is_cuda_array,
     METH_FASTCALL | METH_KEYWORDS, is_cuda_array_doc},
    {NULL, NULL, 0, NULL},
};
