/* record.c (py/): DeviceRecord, numba's one structured element in device
 * memory (to_device of a numpy.void, or a full integer index into a
 * structured array): field reads and writes. Layout, copies and the CAI
 * are DeviceNDArrayBase's (array.c); the element moves are arraycopy.c's. */
#include "array.h"

/* The field `key` (a name, a title, or a position as numpy.void takes)
 * of self's dtype: its dtype (borrowed) and byte offset. */
static int
find_field(cmpy_DeviceNDArray *self, PyObject *key, PyArray_Descr **dtype,
           Py_ssize_t *offset)
{
    PyObject *fields = PyDataType_FIELDS(self->dtype);
    PyObject *names = PyDataType_NAMES(self->dtype);
    PyObject *info, *name = key;

    if (PyIndex_Check(key) && !PyBool_Check(key)) {
        Py_ssize_t n = PyTuple_GET_SIZE(names);
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);

        if (i == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (i < -n || i >= n) {
            PyErr_Format(PyExc_IndexError,
                         "field index %zd is out of range for a record of "
                         "%zd fields",
                         i, n);
            return -1;
        }
        name = PyTuple_GET_ITEM(names, i < 0 ? i + n : i);
    }
    else if (!PyUnicode_Check(key)) {
        PyErr_Format(PyExc_TypeError,
                     "record fields are indexed by name or position, not "
                     "%.200s",
                     Py_TYPE(key)->tp_name);
        return -1;
    }
    info = PyDict_GetItemWithError(fields, name);
    if (info == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_KeyError, "no field of name %R in %R", name,
                         names);
        }
        return -1;
    }
    *dtype = (PyArray_Descr *)PyTuple_GET_ITEM(info, 0);
    *offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(info, 1));
    return *offset == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A view of one field: a sub-array field as its own shape, any other as a
 * 0-d object of `type` (NULL: DeviceNDArray). */
static cmpy_DeviceNDArray *
field_view(cmpy_state *st, cmpy_DeviceNDArray *self, PyArray_Descr *dtype,
           Py_ssize_t offset, PyObject *type)
{
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    CUdeviceptr ptr = self->ptr + (CUdeviceptr)offset;
    int nd = 0;

    if (type == NULL) {
        type = st->DeviceNDArrayType;
    }
    if (PyDataType_HASSUBARRAY(dtype)) {
        PyArray_ArrayDescr *sub = PyDataType_SUBARRAY(dtype);

        if (cmpy_parse_ints(sub->shape, "field shape", shape, &nd) < 0) {
            return NULL;
        }
        dtype = sub->base;
        cmpy_contiguous_strides(nd, shape, PyDataType_ELSIZE(dtype), 'C',
                                strides);
        type = st->DeviceNDArrayType;
    }
    return cmpy_array_view_as(st, type, self, nd, shape, strides, ptr, dtype);
}

static PyObject *
record_getitem(PyObject *op, PyObject *key)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    PyArray_Descr *dtype;
    Py_ssize_t offset;

    if (find_field(self, key, &dtype, &offset) < 0) {
        return NULL;
    }
    if (PyDataType_HASFIELDS(dtype)) {
        return (PyObject *)field_view(st, self, dtype, offset,
                                      st->DeviceRecordType);
    }
    if (PyDataType_HASSUBARRAY(dtype)) {
        return (PyObject *)field_view(st, self, dtype, offset, NULL);
    }
    return cmpy_array_read_scalar(st, self, self->ptr + (CUdeviceptr)offset,
                                  dtype);
}

/* Writes go through the field's view with NumPy's assignment rules. */
static int
record_setitem(PyObject *op, PyObject *key, PyObject *value)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    cmpy_DeviceNDArray *view;
    PyArray_Descr *dtype;
    Py_ssize_t offset;
    int rc;

    if (value == NULL) {
        PyErr_SetString(PyExc_ValueError, "cannot delete record fields");
        return -1;
    }
    if (find_field(self, key, &dtype, &offset) < 0) {
        return -1;
    }
    view = field_view(st, self, dtype, offset, NULL);
    if (view == NULL) {
        return -1;
    }
    rc = cmpy_array_setitem((PyObject *)view, Py_Ellipsis, value);
    Py_DECREF(view);
    return rc;
}

PyDoc_STRVAR(getitem_doc,
             "getitem($self, item, stream=0)\n--\n\n"
             "The field *item* (a name or a position): a NumPy scalar read "
             "after the\nwork queued before it on *stream* (default: the "
             "record's), a\nDeviceRecord for a nested record, a "
             "DeviceNDArray for a sub-array.");

PyDoc_STRVAR(setitem_doc,
             "setitem($self, key, value, stream=0)\n--\n\n"
             "Sets the field *key* to *value* (cast to the field's dtype, "
             "broadcast\nover a sub-array), on *stream* (default: the "
             "record's).");

static PyObject *
record_getitem_method(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames)
{
    static const char *const names[] = {"item", "stream"};
    cmpy_state *st = cmpy_type_state(op);
    PyObject *argv[2], *rec, *out;

    if (cmpy_parse_args("getitem", names, 2, 1, args, nargs, kwnames, argv) <
            0 ||
        (rec = cmpy_array_on_stream(st, op, argv[1])) == NULL) {
        return NULL;
    }
    out = record_getitem(rec, argv[0]);
    Py_DECREF(rec);
    return out;
}

static PyObject *
record_setitem_method(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames)
{
    static const char *const names[] = {"key", "value", "stream"};
    cmpy_state *st = cmpy_type_state(op);
    PyObject *argv[3], *rec;
    int rc;

    if (cmpy_parse_args("setitem", names, 3, 2, args, nargs, kwnames, argv) <
            0 ||
        (rec = cmpy_array_on_stream(st, op, argv[2])) == NULL) {
        return NULL;
    }
    rc = record_setitem(rec, argv[0], argv[1]);
    Py_DECREF(rec);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef record_methods[] = {
    {"getitem", (PyCFunction)(void (*)(void))record_getitem_method,
     METH_FASTCALL | METH_KEYWORDS, getitem_doc},
    {"setitem", (PyCFunction)(void (*)(void))record_setitem_method,
     METH_FASTCALL | METH_KEYWORDS, setitem_doc},
    {NULL, NULL, 0, NULL},
};

static PyObject *
record_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"dtype", "stream", "gpu_data", NULL};
    PyObject *dtype, *stream = NULL, *gpu_data = NULL, *none;
    PyObject *out;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO:DeviceRecord", names,
                                     &dtype, &stream, &gpu_data) ||
        (none = PyTuple_New(0)) == NULL) {
        return NULL;
    }
    out = cmpy_array_construct(type, none, none, dtype, stream, gpu_data, 1);
    Py_DECREF(none);
    return out;
}

PyDoc_STRVAR(record_doc,
             "DeviceRecord(dtype, stream=0, gpu_data=None)\n--\n\n"
             "One structured element in device memory (numba's "
             "DeviceRecord), made by\nto_device() of a numpy.void or by "
             "indexing a structured array with\nintegers. rec['f'] reads a "
             "field, rec['f'] = v writes one.");

static PyType_Slot record_slots[] = {
    {Py_tp_doc, (void *)record_doc},
    {Py_tp_new, record_new},
    {Py_tp_dealloc, cmpy_array_dealloc},
    {Py_tp_traverse, cmpy_array_traverse},
    {Py_tp_clear, cmpy_array_clear},
    {Py_tp_methods, record_methods},
    {Py_mp_subscript, record_getitem},
    {Py_mp_ass_subscript, record_setitem},
    {0, NULL},
};

static PyType_Spec record_spec = {
    .name = "cudamem.DeviceRecord",
    .basicsize = offsetof(cmpy_DeviceNDArray, dims),
    .itemsize = sizeof(Py_ssize_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .slots = record_slots,
};

int
cmpy_record_type_init(PyObject *module, cmpy_state *st)
{
    st->DeviceRecordType = PyType_FromModuleAndSpec(module, &record_spec,
                                                    st->DeviceNDArrayBaseType);
    if (st->DeviceRecordType == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "DeviceRecord", st->DeviceRecordType);
}
