/* arrayrepr.c (py/): how a device array shows itself: repr(), with the
 * values of a small array, and _repr_html_ for Jupyter. */
#include "array.h"

#include "html.h"

const char cmpy_array_repr_html_doc[] = PyDoc_STR(
    "_repr_html_($self)\n--\n\n"
    "The array as an HTML table for Jupyter: shape, dtype, "
    "strides, bytes,\nlayout, device, stream and, for at most "
    "100 elements, the values.");

/* Arrays of at most this many elements show their values in repr(). */
#define REPR_VALUES 100

/* The values of a small array as NumPy prints them, or NULL with no
 * exception when there are none to show (too many, or unreadable: a repr
 * must not raise for a stale array). */
static PyObject *
repr_values(cmpy_DeviceNDArray *self)
{
    PyObject *host, *text;

    if (self->size == 0 || self->size > REPR_VALUES) {
        return NULL;
    }
    host = cmpy_array_to_host(cmpy_type_state((PyObject *)self), self);
    text = host != NULL ? PyObject_Str(host) : NULL;
    Py_XDECREF(host);
    if (text == NULL && !PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        PyErr_Clear();
    }
    return text;
}

PyObject *
cmpy_array_repr(PyObject *op)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    PyObject *shape = cmpy_shape_tuple(CMPY_NDIM(self), CMPY_SHAPE(self)),
             *values, *out;

    if (shape == NULL) {
        return NULL;
    }
    values = repr_values(self);
    if (values == NULL && PyErr_Occurred()) {
        Py_DECREF(shape);
        return NULL;
    }
    if (values == NULL) {
        out = PyUnicode_FromFormat(
            "<%s shape=%R dtype=%S on device %d>", cmpy_tp_name(Py_TYPE(op)),
            shape, (PyObject *)self->dtype, self->gpu_data->mem->dev->ordinal);
    }
    else {
        int multiline = PyUnicode_FindChar(values, '\n', 0,
                                           PyUnicode_GetLength(values),
                                           1) >= 0;

        out = PyUnicode_FromFormat("<%s shape=%R dtype=%S on device %d%s%U>",
                                   cmpy_tp_name(Py_TYPE(op)), shape,
                                   (PyObject *)self->dtype,
                                   self->gpu_data->mem->dev->ordinal,
                                   multiline ? "\n" : ": ", values);
    }
    Py_DECREF(shape);
    Py_XDECREF(values);
    return out;
}

static const char *
layout_name(int flags)
{
    switch (flags & CMPY_CONTIGUOUS) {
    case CMPY_CONTIGUOUS:
        return "C and F contiguous";
    case NPY_ARRAY_C_CONTIGUOUS:
        return "C contiguous";
    case NPY_ARRAY_F_CONTIGUOUS:
        return "F contiguous";
    default:
        return "not contiguous";
    }
}

PyObject *
cmpy_array_repr_html(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    static const char *const labels[] = {
        "shape", "dtype", "strides", "bytes", "layout", "device", "stream"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    PyObject *values[7], *shown = repr_values(self), *out;

    if (shown == NULL && PyErr_Occurred()) {
        return NULL;
    }
    values[0] = cmpy_shape_tuple(CMPY_NDIM(self), CMPY_SHAPE(self));
    values[1] = Py_NewRef((PyObject *)self->dtype);
    values[2] = cmpy_shape_tuple(CMPY_NDIM(self), CMPY_STRIDES(self));
    values[3] = cmpy_html_size((unsigned long long)self->nbytes);
    values[4] = PyUnicode_FromString(layout_name(self->flags));
    values[5] = PyLong_FromLong(self->gpu_data->mem->dev->ordinal);
    values[6] = PyObject_Repr(self->stream);
    out = cmpy_html_table(cmpy_tp_name(Py_TYPE(op)), 7, labels, values, shown);
    Py_XDECREF(shown);
    return out;
}
