/* arrayview.c (py/): the DeviceNDArray operations that make views, which
 * only compute a new layout over the same memory: indexing, reshape,
 * ravel, squeeze, view(dtype), transpose, split, bind. Where a view is
 * impossible (reshape of a non-contiguous layout), a copy is made through
 * arraycopy.c. The type itself is array.c's. */
#include "array.h"

#include "../core/copy.h"
#include "cai.h"
#include "stream.h"

/* ------------------------------------------------------------------------
 * Indexing: getitem, item, iteration, the layout of a key. */

/* An index that NumPy would take but a device array cannot. */
static int
refuse_fancy(PyObject *item)
{
    PyErr_Format(PyExc_TypeError,
                 "device arrays support only integer, slice, Ellipsis and "
                 "None indexes; integer-array and boolean indexes such as "
                 "%.200R are not supported (copy to the host first)",
                 item);
    return -1;
}

static PyObject *transpose_axes(PyObject *op, PyObject *const *args,
                                Py_ssize_t nargs);
static PyObject *view_dtype(PyObject *op, PyObject *arg);

/* Applies `key` to self's layout: the result's layout, its first element,
 * and whether every dimension was taken by an integer (a scalar). */
static int
apply_index(cmpy_DeviceNDArray *self, PyObject *key, int *ndim_out,
            Py_ssize_t *shape, Py_ssize_t *strides, CUdeviceptr *ptr,
            int *scalar)
{
    int ndim = CMPY_NDIM(self), nd = 0, dim = 0, consumed = 0, ellipsis = -1;
    Py_ssize_t nitems, k;
    PyObject *items[NPY_MAXDIMS * 2];
    PyObject *tuple;
    ptrdiff_t offset = 0;

    tuple = PyTuple_Check(key) ? Py_NewRef(key) : PyTuple_Pack(1, key);
    if (tuple == NULL) {
        return -1;
    }
    nitems = PyTuple_GET_SIZE(tuple);
    if (nitems > (Py_ssize_t)NPY_MAXDIMS * 2) {
        PyErr_Format(PyExc_IndexError, "too many indices for array: %zd",
                     nitems);
        goto error;
    }
    for (k = 0; k < nitems; k++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, k);

        items[k] = item;
        if (item == Py_Ellipsis) {
            if (ellipsis >= 0) {
                PyErr_SetString(PyExc_IndexError,
                                "an index can only have a single ellipsis "
                                "('...')");
                goto error;
            }
            ellipsis = (int)k;
        }
        else if (item != Py_None) {
            /* NumPy arrays (even 0-d) and sequences are fancy indexes. */
            if (PyArray_Check(item) || PyBool_Check(item) ||
                PyList_Check(item) || PyTuple_Check(item)) {
                refuse_fancy(item);
                goto error;
            }
            if (!PySlice_Check(item) && !PyIndex_Check(item)) {
                /* Device arrays are integer-array indexes too. */
                /* Named by type: a repr would read the device. */
                cmpy_state *st = cmpy_type_state((PyObject *)self);
                int cai = cmpy_is_array(st, item) ? 1
                                                  : cmpy_cai_check(st, item);

                if (cai < 0) {
                    goto error;
                }
                if (cai) {
                    PyErr_Format(PyExc_TypeError,
                                 "device arrays support only integer, "
                                 "slice, Ellipsis and None indexes; "
                                 "integer-array indexes such as a %.200s are "
                                 "not supported (copy to the host first)",
                                 Py_TYPE(item)->tp_name);
                    goto error;
                }
                PyErr_Format(PyExc_IndexError,
                             "only integers, slices (`:`), ellipsis (`...`) "
                             "and None are valid indices, not %.200s",
                             Py_TYPE(item)->tp_name);
                goto error;
            }
            consumed++;
        }
    }
    if (consumed > ndim) {
        PyErr_Format(PyExc_IndexError,
                     "too many indices for array: array is %d-dimensional, "
                     "but %d were indexed",
                     ndim, consumed);
        goto error;
    }
    for (k = 0; k < nitems; k++) {
        PyObject *item = items[k];

        if (item == Py_Ellipsis) {
            for (int fill = ndim - consumed; fill > 0; fill--, dim++) {
                shape[nd] = CMPY_SHAPE(self)[dim];
                strides[nd++] = CMPY_STRIDES(self)[dim];
            }
        }
        else if (item == Py_None) {
            if (nd == NPY_MAXDIMS) {
                PyErr_Format(PyExc_IndexError,
                             "the index makes more than %d dimensions",
                             NPY_MAXDIMS);
                goto error;
            }
            shape[nd] = 1;
            strides[nd++] = 0;
        }
        else if (PySlice_Check(item)) {
            Py_ssize_t start, stop, step, len;

            if (PySlice_Unpack(item, &start, &stop, &step) < 0) {
                goto error;
            }
            len = PySlice_AdjustIndices(CMPY_SHAPE(self)[dim], &start, &stop,
                                        step);
            if (nd == NPY_MAXDIMS) {
                PyErr_Format(PyExc_IndexError,
                             "the index makes more than %d dimensions",
                             NPY_MAXDIMS);
                goto error;
            }
            if (len > 0) {
                offset += start * CMPY_STRIDES(self)[dim];
            }
            else {
                step = 1; /* NumPy's empty slices have step 1 */
            }
            shape[nd] = len;
            strides[nd++] = step * CMPY_STRIDES(self)[dim];
            dim++;
        }
        else {
            /* Clipped: a huge index is out of bounds like any other. */
            Py_ssize_t i = PyNumber_AsSsize_t(item, NULL);
            Py_ssize_t n = CMPY_SHAPE(self)[dim];

            if (i == -1 && PyErr_Occurred()) {
                goto error;
            }
            if (i < -n || i >= n) {
                PyErr_Format(PyExc_IndexError,
                             "index %S is out of bounds for axis %d with "
                             "size %zd",
                             item, dim, n);
                goto error;
            }
            offset += (i < 0 ? i + n : i) * CMPY_STRIDES(self)[dim];
            dim++;
        }
    }
    /* Dimensions the key did not reach stay whole. */
    for (; dim < ndim; dim++) {
        shape[nd] = CMPY_SHAPE(self)[dim];
        strides[nd++] = CMPY_STRIDES(self)[dim];
    }
    Py_DECREF(tuple);
    *ndim_out = nd;
    *ptr = self->ptr + (CUdeviceptr)offset;
    *scalar = consumed == ndim && ellipsis < 0 && nd == 0 &&
              (nitems > 0 || ndim == 0);
    return 0;
error:
    Py_DECREF(tuple);
    return -1;
}

PyObject *
cmpy_array_read_scalar(cmpy_state *st, cmpy_DeviceNDArray *self,
                       CUdeviceptr ptr, PyArray_Descr *dtype)
{
    cm_device *dev = self->gpu_data->mem->dev;
    PyArrayObject *host;
    PyObject *out = NULL;
    cm_error err;
    int rc;

    if (cmpy_array_check_alive(st, self) < 0) {
        return NULL;
    }
    Py_INCREF(dtype);
    host = (PyArrayObject *)PyArray_NewFromDescr(&PyArray_Type, dtype, 0, NULL,
                                                 NULL, NULL, 0, NULL);
    if (host == NULL) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_copy_dtoh(dev, PyArray_DATA(host), ptr,
                      (size_t)PyDataType_ELSIZE(dtype), self->stream_handle,
                      self->stream_async, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    else if (!self->stream_async ||
             cmpy_stream_wait(st, dev, self->stream_handle) == 0) {
        out = PyArray_Return(host);
        host = NULL;
    }
    Py_XDECREF(host);
    return out;
}

PyObject *
cmpy_array_getitem(PyObject *op, PyObject *key)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    CUdeviceptr ptr;
    int ndim, scalar;

    if (apply_index(self, key, &ndim, shape, strides, &ptr, &scalar) < 0) {
        return NULL;
    }
    if (scalar && PyDataType_HASFIELDS(self->dtype)) {
        return (PyObject *)cmpy_array_view_as(st, st->DeviceRecordType, self,
                                              0, NULL, NULL, ptr, self->dtype);
    }
    if (scalar) {
        return cmpy_array_read_scalar(st, self, ptr, self->dtype);
    }
    return (PyObject *)cmpy_array_view(st, self, ndim, shape, strides, ptr,
                                       self->dtype);
}

/* d[i] as the sequence protocol asks for it: what iteration yields. */
PyObject *
cmpy_array_item(PyObject *op, Py_ssize_t i)
{
    PyObject *key = PyLong_FromSsize_t(i), *out;

    if (key == NULL) {
        return NULL;
    }
    out = cmpy_array_getitem(op, key);
    Py_DECREF(key);
    return out;
}

/* NumPy's iteration: d[0], d[1], ... along the first axis; a 0-d array
 * has none. */
PyObject *
cmpy_array_iter(PyObject *op)
{
    if (CMPY_NDIM((cmpy_DeviceNDArray *)op) == 0) {
        PyErr_SetString(PyExc_TypeError, "iteration over a 0-d array");
        return NULL;
    }
    return PySeqIter_New(op);
}

PyObject *
cmpy_array_on_stream(cmpy_state *st, PyObject *op, PyObject *stream)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    int given = stream != NULL ? PyObject_IsTrue(stream) : 0;

    if (given <= 0) {
        return given < 0 ? NULL : Py_NewRef(op);
    }
    return cmpy_array_rebind(
        st,
        cmpy_array_view_as(st, (PyObject *)Py_TYPE(op), self, CMPY_NDIM(self),
                           CMPY_SHAPE(self), CMPY_STRIDES(self), self->ptr,
                           self->dtype),
        stream);
}

const char cmpy_array_getitem_doc[] =
    "getitem($self, item, stream=0)\n--\n\n"
    "self[item] with *stream* (default: the array's own): a view bound to "
    "it,\nor an element read after the work queued before it there.";

PyObject *
cmpy_array_getitem_method(PyObject *op, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"item", "stream"};
    cmpy_state *st = cmpy_type_state(op);
    PyObject *argv[2], *arr, *out;

    if (cmpy_parse_args("getitem", names, 2, 1, args, nargs, kwnames, argv) <
            0 ||
        (arr = cmpy_array_on_stream(st, op, argv[1])) == NULL) {
        return NULL;
    }
    out = cmpy_array_getitem(arr, argv[0]);
    Py_DECREF(arr);
    return out;
}

const char cmpy_array_setitem_doc[] =
    "setitem($self, key, value, stream=0)\n--\n\n"
    "self[key] = value on *stream* (default: the array's own; 0 for an "
    "array\nwithout one: synchronous).";

PyObject *
cmpy_array_setitem_method(PyObject *op, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"key", "value", "stream"};
    cmpy_state *st = cmpy_type_state(op);
    PyObject *argv[3], *arr;
    int rc;

    if (cmpy_parse_args("setitem", names, 3, 2, args, nargs, kwnames, argv) <
            0 ||
        (arr = cmpy_array_on_stream(st, op, argv[2])) == NULL) {
        return NULL;
    }
    rc = PyObject_SetItem(arr, argv[0], argv[1]);
    Py_DECREF(arr);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The layout `key` selects, for assignment. */
int
cmpy_array_index_layout(cmpy_DeviceNDArray *self, PyObject *key, int *ndim,
                        Py_ssize_t *shape, Py_ssize_t *strides,
                        CUdeviceptr *ptr)
{
    int scalar;

    return apply_index(self, key, ndim, shape, strides, ptr, &scalar);
}

/* ------------------------------------------------------------------------
 * reshape and ravel. */

/* NumPy's no-copy reshape (_attempt_nocopy_reshape): the strides that give
 * `self` the new shape without moving data, or 0 when there are none. */
static int
nocopy_strides(cmpy_DeviceNDArray *self, int nd, const Py_ssize_t *newdims,
               int fortran, Py_ssize_t *newstrides)
{
    Py_ssize_t olddims[NPY_MAXDIMS], oldstrides[NPY_MAXDIMS];
    int oldnd = 0, oi = 0, oj = 1, ni = 0, nj = 1;

    for (int i = 0; i < CMPY_NDIM(self); i++) {
        if (CMPY_SHAPE(self)[i] != 1) {
            olddims[oldnd] = CMPY_SHAPE(self)[i];
            oldstrides[oldnd++] = CMPY_STRIDES(self)[i];
        }
    }
    while (ni < nd && oi < oldnd) {
        Py_ssize_t np_ = newdims[ni], op = olddims[oi];

        /* Both products reach self->size (not 0 here) together, so the
         * bounds never end a walk; they let the analyzer see it. */
        while (np_ != op) {
            if (np_ < op && nj < nd) {
                np_ *= newdims[nj++];
            }
            else if (np_ > op && oj < oldnd) {
                op *= olddims[oj++];
            }
            else {
                return 0;
            }
        }
        for (int k = oi; k < oj - 1; k++) {
            if (fortran
                    ? oldstrides[k + 1] != olddims[k] * oldstrides[k]
                    : oldstrides[k] != olddims[k + 1] * oldstrides[k + 1]) {
                return 0;
            }
        }
        if (fortran) {
            newstrides[ni] = oldstrides[oi];
            for (int k = ni + 1; k < nj; k++) {
                newstrides[k] = newstrides[k - 1] * newdims[k - 1];
            }
        }
        else {
            newstrides[nj - 1] = oldstrides[oj - 1];
            for (int k = nj - 1; k > ni; k--) {
                newstrides[k - 1] = newstrides[k] * newdims[k];
            }
        }
        ni = nj++;
        oi = oj++;
    }
    /* Trailing dimensions of length 1 take the last stride. */
    for (int k = ni; k < nd; k++) {
        newstrides[k] = ni > 0
                            ? (fortran ? newstrides[ni - 1] * newdims[ni - 1]
                                       : newstrides[ni - 1])
                            : PyDataType_ELSIZE(self->dtype);
    }
    return 1;
}

/* 'C', 'F' or 'A' (F when the array is F- and not C-contiguous). */
static int
parse_order(cmpy_DeviceNDArray *self, PyObject *arg, char *order)
{
    const char *s;

    if (arg == NULL || arg == Py_None) {
        *order = 'C';
        return 0;
    }
    s = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (s == NULL || strlen(s) != 1 || strchr("CFA", s[0]) == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "order must be 'C', 'F' or 'A', not %R",
                     arg);
        return -1;
    }
    *order = s[0];
    if (*order == 'A') {
        *order = (self->flags & NPY_ARRAY_F_CONTIGUOUS) &&
                         !(self->flags & NPY_ARRAY_C_CONTIGUOUS)
                     ? 'F'
                     : 'C';
    }
    return 0;
}

static PyObject *
reshape_to(cmpy_state *st, cmpy_DeviceNDArray *self, int nd, Py_ssize_t *dims,
           char order, PyObject *shape_arg)
{
    Py_ssize_t strides[NPY_MAXDIMS], total = 1;
    int unknown = -1;

    for (int i = 0; i < nd; i++) {
        if (dims[i] == -1 && unknown < 0) {
            unknown = i;
        }
        else if (dims[i] < 0) {
            PyErr_Format(PyExc_ValueError, "invalid shape %R for reshape",
                         shape_arg);
            return NULL;
        }
        else if (total >= 0 &&
                 __builtin_mul_overflow(total, dims[i], &total)) {
            /* More elements than an array can have: never this size. */
            total = -1;
        }
    }
    if (total >= 0 && unknown >= 0) {
        if (total == 0 || self->size % total != 0) {
            PyErr_Format(PyExc_ValueError,
                         "cannot reshape array of size %zd into shape %R",
                         self->size, shape_arg);
            return NULL;
        }
        dims[unknown] = self->size / total;
        total = self->size;
    }
    if (total != self->size) {
        PyErr_Format(PyExc_ValueError,
                     "cannot reshape array of size %zd into shape %R",
                     self->size, shape_arg);
        return NULL;
    }
    if (self->size == 0 ||
        nocopy_strides(self, nd, dims, order == 'F', strides)) {
        if (self->size == 0) {
            cmpy_contiguous_strides(nd, dims, PyDataType_ELSIZE(self->dtype),
                                    order, strides);
        }
        return (PyObject *)cmpy_array_view(st, self, nd, dims, strides,
                                           self->ptr, self->dtype);
    }
    /* No view exists: a copy laid out in `order`, as NumPy does. */
    return cmpy_array_copy_as(st, self, order, nd, dims);
}

/* Shape arguments: reshape(2, 3) or reshape((2, 3)), any sequence of ints
 * (a NumPy integer array too: it has __index__, but refuses it unless
 * 0-d). */
static int
shape_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t *dims, int *nd,
           PyObject **shape_arg)
{
    if (nargs == 1 && (!PyIndex_Check(args[0]) || PyArray_Check(args[0]))) {
        *shape_arg = Py_NewRef(args[0]);
    }
    else {
        *shape_arg = PyTuple_New(nargs);
        if (*shape_arg == NULL) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < nargs; i++) {
            PyTuple_SET_ITEM(*shape_arg, i, Py_NewRef(args[i]));
        }
    }
    if (cmpy_parse_ints(*shape_arg, "shape", dims, nd) < 0) {
        Py_CLEAR(*shape_arg);
        return -1;
    }
    return 0;
}

PyObject *
cmpy_array_reshape(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    Py_ssize_t dims[NPY_MAXDIMS];
    PyObject *order_arg = NULL, *shape_arg, *out;
    char order;
    int nd;

    if (nkw > 1 || (nkw == 1 && PyUnicode_CompareWithASCIIString(
                                    PyTuple_GET_ITEM(kwnames, 0), "order"))) {
        PyErr_SetString(PyExc_TypeError,
                        "reshape() takes a shape and an optional order=");
        return NULL;
    }
    if (nkw == 1) {
        order_arg = args[nargs];
    }
    if (nargs == 0) {
        PyErr_SetString(PyExc_TypeError, "reshape() needs a shape");
        return NULL;
    }
    if (parse_order(self, order_arg, &order) < 0 ||
        shape_args(args, nargs, dims, &nd, &shape_arg) < 0) {
        return NULL;
    }
    out = reshape_to(st, self, nd, dims, order, shape_arg);
    Py_DECREF(shape_arg);
    return out;
}

PyObject *
cmpy_array_ravel(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {"order", "stream"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    Py_ssize_t dims[1] = {-1};
    PyObject *argv[2], *shape_arg, *out = NULL;
    char order;

    if (cmpy_parse_args("ravel", names, 2, 0, args, nargs, kwnames, argv) <
            0 ||
        parse_order(self, argv[0], &order) < 0) {
        return NULL;
    }
    /* numba: the result (a view, or a copy made there) is on *stream*. */
    if (argv[1] != NULL) {
        self = (cmpy_DeviceNDArray *)cmpy_array_rebind(
            st,
            cmpy_array_view(st, self, CMPY_NDIM(self), CMPY_SHAPE(self),
                            CMPY_STRIDES(self), self->ptr, self->dtype),
            argv[1]);
        if (self == NULL) {
            return NULL;
        }
    }
    else {
        Py_INCREF(self);
    }
    shape_arg = Py_BuildValue("(n)", self->size);
    if (shape_arg != NULL) {
        out = reshape_to(st, self, 1, dims, order, shape_arg);
        Py_DECREF(shape_arg);
    }
    Py_DECREF(self);
    return out;
}

/* ------------------------------------------------------------------------
 * squeeze and transpose. */

/* An axis argument in [-ndim, ndim), normalized; AxisError's wording. */
static int
parse_axis(PyObject *arg, int ndim, int *axis)
{
    /* Clipped: a huge axis is out of bounds like any other. */
    Py_ssize_t a = PyNumber_AsSsize_t(arg, NULL);

    if (a == -1 && PyErr_Occurred()) {
        if (!PyIndex_Check(arg)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "axis must be an int, not %.200s",
                         Py_TYPE(arg)->tp_name);
        }
        return -1;
    }
    if (a < -ndim || a >= ndim) {
        PyErr_Format(PyExc_ValueError,
                     "axis %S is out of bounds for array of dimension %d", arg,
                     ndim);
        return -1;
    }
    *axis = (int)(a < 0 ? a + ndim : a);
    return 0;
}

PyObject *
cmpy_array_squeeze(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames)
{
    static const char *const names[] = {"axis", "stream"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    int ndim = CMPY_NDIM(self), drop[NPY_MAXDIMS] = {0}, nd = 0, axis;
    PyObject *argv[2];

    if (cmpy_parse_args("squeeze", names, 2, 0, args, nargs, kwnames, argv) <
        0) {
        return NULL;
    }
    if (argv[0] == NULL || argv[0] == Py_None) {
        for (int i = 0; i < ndim; i++) {
            drop[i] = CMPY_SHAPE(self)[i] == 1;
        }
    }
    else {
        PyObject *axes = PyTuple_Check(argv[0]) ? Py_NewRef(argv[0])
                                                : PyTuple_Pack(1, argv[0]);

        if (axes == NULL) {
            return NULL;
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(axes); k++) {
            if (parse_axis(PyTuple_GET_ITEM(axes, k), ndim, &axis) < 0) {
                Py_DECREF(axes);
                return NULL;
            }
            if (CMPY_SHAPE(self)[axis] != 1) {
                PyErr_Format(PyExc_ValueError,
                             "cannot select an axis to squeeze out which "
                             "has size not equal to one (axis %d has size "
                             "%zd)",
                             axis, CMPY_SHAPE(self)[axis]);
                Py_DECREF(axes);
                return NULL;
            }
            drop[axis] = 1;
        }
        Py_DECREF(axes);
    }
    for (int i = 0; i < ndim; i++) {
        if (!drop[i]) {
            shape[nd] = CMPY_SHAPE(self)[i];
            strides[nd++] = CMPY_STRIDES(self)[i];
        }
    }
    return cmpy_array_rebind(cmpy_type_state(op),
                             cmpy_array_view(cmpy_type_state(op), self, nd,
                                             shape, strides, self->ptr,
                                             self->dtype),
                             argv[1]);
}

/* transpose(*axes) or transpose(axes=...), NumPy's forms. */
PyObject *
cmpy_array_transpose(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames)
{
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        static const char *const names[] = {"axes"};
        PyObject *argv[1];

        if (cmpy_parse_args("transpose", names, 1, 0, args, nargs, kwnames,
                            argv) < 0) {
            return NULL;
        }
        return transpose_axes(op, argv, 1);
    }
    return transpose_axes(op, args, nargs);
}

static PyObject *
transpose_axes(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    int ndim = CMPY_NDIM(self), perm[NPY_MAXDIMS], seen[NPY_MAXDIMS] = {0};
    PyObject *axes = NULL;

    if (nargs == 1 && args[0] != Py_None) {
        axes = PySequence_Check(args[0]) ? PySequence_Tuple(args[0])
                                         : PyTuple_Pack(1, args[0]);
    }
    else if (nargs > 1) {
        axes = PyTuple_New(nargs);
        for (Py_ssize_t i = 0; axes != NULL && i < nargs; i++) {
            PyTuple_SET_ITEM(axes, i, Py_NewRef(args[i]));
        }
    }
    else {
        for (int i = 0; i < ndim; i++) {
            perm[i] = ndim - 1 - i;
        }
    }
    if (axes == NULL && nargs > 0 && !(nargs == 1 && args[0] == Py_None)) {
        return NULL;
    }
    if (axes != NULL) {
        if (PyTuple_GET_SIZE(axes) != ndim) {
            PyErr_Format(PyExc_ValueError,
                         "axes %R don't match array of %d "
                         "dimensions",
                         axes, ndim);
            Py_DECREF(axes);
            return NULL;
        }
        for (int i = 0; i < ndim; i++) {
            if (parse_axis(PyTuple_GET_ITEM(axes, i), ndim, &perm[i]) < 0) {
                Py_DECREF(axes);
                return NULL;
            }
            if (seen[perm[i]]++) {
                /* numba's words (its tests match them), naming the axes. */
                PyErr_Format(PyExc_ValueError, "invalid axes list %R", axes);
                Py_DECREF(axes);
                return NULL;
            }
        }
        Py_DECREF(axes);
    }
    for (int i = 0; i < ndim; i++) {
        shape[i] = CMPY_SHAPE(self)[perm[i]];
        strides[i] = CMPY_STRIDES(self)[perm[i]];
    }
    return (PyObject *)cmpy_array_view(cmpy_type_state(op), self, ndim, shape,
                                       strides, self->ptr, self->dtype);
}

PyObject *
cmpy_array_get_T(PyObject *op, void *Py_UNUSED(closure))
{
    return transpose_axes(op, NULL, 0);
}

/* ------------------------------------------------------------------------
 * view, split and bind. */

PyObject *
cmpy_array_view_dtype(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames)
{
    static const char *const names[] = {"dtype"};
    PyObject *argv[1];

    if (cmpy_parse_args("view", names, 1, 1, args, nargs, kwnames, argv) < 0) {
        return NULL;
    }
    return view_dtype(op, argv[0]);
}

static PyObject *
view_dtype(PyObject *op, PyObject *arg)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    int ndim = CMPY_NDIM(self);
    PyArray_Descr *dtype = NULL;
    Py_ssize_t old, new_;
    PyObject *out = NULL;

    if (!PyArray_DescrConverter(arg, &dtype)) {
        return NULL;
    }
    if (cmpy_check_dtype(dtype) < 0) {
        goto done;
    }
    old = PyDataType_ELSIZE(self->dtype);
    new_ = PyDataType_ELSIZE(dtype);
    for (int i = 0; i < ndim; i++) {
        shape[i] = CMPY_SHAPE(self)[i];
        strides[i] = CMPY_STRIDES(self)[i];
    }
    if (PyDataType_HASSUBARRAY(dtype)) {
        /* NumPy's rule: the sub-array's axes are appended. */
        if (old != new_) {
            PyErr_SetString(PyExc_ValueError,
                            "Changing the dtype to a subarray type is only "
                            "supported if the total itemsize is unchanged");
            goto done;
        }
        if (cmpy_expand_subarray(&dtype, &ndim, shape, strides) < 0) {
            goto done;
        }
    }
    else if (old != new_) {
        Py_ssize_t last;

        /* `< 1`, not `== 0`: ndim is never negative, and the analyzer
         * then sees shape[ndim - 1] in range. */
        if (ndim < 1) {
            PyErr_SetString(PyExc_ValueError,
                            "Changing the dtype of a 0d array is only "
                            "supported if the itemsize is unchanged");
            goto done;
        }
        last = shape[ndim - 1];
        if (last != 1 && strides[ndim - 1] != old) {
            PyErr_SetString(PyExc_ValueError,
                            "To change to a dtype of a different size, the "
                            "last axis must be contiguous");
            goto done;
        }
        if ((last * old) % new_ != 0) {
            PyErr_SetString(PyExc_ValueError,
                            "When changing to a larger dtype, its size must "
                            "be a divisor of the total size in bytes of the "
                            "last axis of the array.");
            goto done;
        }
        shape[ndim - 1] = last * old / new_;
        strides[ndim - 1] = new_;
    }
    out = (PyObject *)cmpy_array_view(cmpy_type_state(op), self, ndim, shape,
                                      strides, self->ptr, dtype);
done:
    Py_DECREF(dtype);
    return out;
}

PyObject *
cmpy_array_split(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {"section", "stream"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    Py_ssize_t section, n, stride;
    PyObject *argv[2], *out;

    if (cmpy_parse_args("split", names, 2, 1, args, nargs, kwnames, argv) <
        0) {
        return NULL;
    }
    /* Clipped: a huge section is one part, as any longer than the array. */
    section = PyNumber_AsSsize_t(argv[0], NULL);
    if (section == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (CMPY_NDIM(self) != 1) {
        PyErr_Format(PyExc_ValueError,
                     "only support split on 1D array (this one has %d "
                     "dimensions)",
                     CMPY_NDIM(self));
        return NULL;
    }
    if (section <= 0) {
        PyErr_Format(PyExc_ValueError,
                     "split section must be positive, not %S", argv[0]);
        return NULL;
    }
    n = CMPY_SHAPE(self)[0];
    stride = CMPY_STRIDES(self)[0];
    out = PyList_New(0);
    for (Py_ssize_t begin = 0; out != NULL && begin < n; begin += section) {
        Py_ssize_t len = n - begin < section ? n - begin : section;
        PyObject *part = (PyObject *)cmpy_array_view(
            st, self, 1, &len, &stride,
            self->ptr + (CUdeviceptr)(begin * stride), self->dtype);

        part = cmpy_array_rebind(st, (cmpy_DeviceNDArray *)part, argv[1]);
        if (part == NULL || PyList_Append(out, part) < 0) {
            Py_XDECREF(part);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(part);
    }
    return out;
}

PyObject *
cmpy_array_bind(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"stream"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    PyObject *argv[1];

    if (cmpy_parse_args("bind", names, 1, 0, args, nargs, kwnames, argv) < 0) {
        return NULL;
    }
    return cmpy_array_rebind(
        st,
        cmpy_array_view_as(st, (PyObject *)Py_TYPE(self), self,
                           CMPY_NDIM(self), CMPY_SHAPE(self),
                           CMPY_STRIDES(self), self->ptr, self->dtype),
        argv[0] != NULL ? argv[0] : Py_None);
}
