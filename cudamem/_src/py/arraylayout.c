/* arraylayout.c (py/): the layout math every array file shares, none of
 * it touching memory: NumPy's contiguity flags, the extent (size and byte
 * span) of a shape and strides with overflow checks, contiguous strides,
 * dtype checks and sub-array expansion, and the parsing of numpy.empty's
 * layout arguments (shape, dtype, strides, order). */
#include "array.h"

/* NumPy's contiguity rules: dimensions of length 1 do not count, and an
 * empty array is both C and F contiguous. */
int
cmpy_layout_flags(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                  Py_ssize_t itemsize)
{
    Py_ssize_t expect = itemsize;
    int flags = CMPY_CONTIGUOUS;

    /* Most arrays: the loops below cost more than the rest of making one. */
    if (ndim == 1) {
        return shape[0] <= 1 || strides[0] == itemsize ? CMPY_CONTIGUOUS : 0;
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            return CMPY_CONTIGUOUS;
        }
    }
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] != 1) {
            if (strides[i] != expect) {
                flags &= ~NPY_ARRAY_C_CONTIGUOUS;
                break;
            }
            expect *= shape[i];
        }
    }
    expect = itemsize;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 1) {
            if (strides[i] != expect) {
                flags &= ~NPY_ARRAY_F_CONTIGUOUS;
                break;
            }
            expect *= shape[i];
        }
    }
    return flags;
}

/* A dtype a device array can hold: no Python objects, a non-zero size. */
int
cmpy_check_dtype(PyArray_Descr *dtype)
{
    if (PyDataType_REFCHK(dtype)) {
        PyErr_Format(PyExc_TypeError,
                     "dtype %R holds Python objects, which cannot live in "
                     "device memory",
                     (PyObject *)dtype);
        return -1;
    }
    if (PyDataType_ELSIZE(dtype) == 0) {
        PyErr_Format(PyExc_ValueError, "dtype %R has no size",
                     (PyObject *)dtype);
        return -1;
    }
    return 0;
}

/* cmpy_expand_subarray's loop, apart: its frame (a shape of NPY_MAXDIMS)
 * costs every array more than the test that skips it. */
static __attribute__((noinline)) int
expand_subarray(PyArray_Descr **dtype, int *ndim, Py_ssize_t *shape,
                Py_ssize_t *strides)
{
    /* A sub-array's base may be one again: NumPy expands them all. */
    while (PyDataType_HASSUBARRAY(*dtype)) {
        PyArray_ArrayDescr *sub = PyDataType_SUBARRAY(*dtype);
        Py_ssize_t sub_shape[NPY_MAXDIMS];
        int nsub;

        if (cmpy_parse_ints(sub->shape, "sub-array shape", sub_shape, &nsub) <
            0) {
            return -1;
        }
        if (*ndim + nsub > NPY_MAXDIMS) {
            PyErr_Format(PyExc_ValueError,
                         "number of dimensions must be within [0, %d]: "
                         "dtype %R adds %d to %d",
                         NPY_MAXDIMS, (PyObject *)*dtype, nsub, *ndim);
            return -1;
        }
        memcpy(shape + *ndim, sub_shape, (size_t)nsub * sizeof(Py_ssize_t));
        if (strides != NULL) {
            cmpy_contiguous_strides(nsub, sub_shape,
                                    PyDataType_ELSIZE(sub->base), 'C',
                                    strides + *ndim);
        }
        *ndim += nsub;
        Py_SETREF(*dtype, (PyArray_Descr *)Py_NewRef(sub->base));
    }
    return 0;
}

int
cmpy_expand_subarray(PyArray_Descr **dtype, int *ndim, Py_ssize_t *shape,
                     Py_ssize_t *strides)
{
    return PyDataType_HASSUBARRAY(*dtype)
               ? expand_subarray(dtype, ndim, shape, strides)
               : 0;
}

/* Whether `item` counts as one int of a shape or strides: what has
 * __index__ (Python and NumPy integers, 0-d integer arrays), except bools,
 * which NumPy refuses too, and arrays of one or more dimensions. */
static int
is_int(PyObject *item)
{
    if (PyBool_Check(item) || PyArray_IsScalar(item, Bool)) {
        return 0;
    }
    if (PyArray_Check(item)) {
        PyArrayObject *a = (PyArrayObject *)item;

        return PyArray_NDIM(a) == 0 &&
               PyTypeNum_ISINTEGER(PyArray_DESCR(a)->type_num);
    }
    return PyIndex_Check(item);
}

/* One int `item` of argument `arg` (`what`; NULL: item is the whole
 * argument): TypeError naming both when it is not an int, ValueError when
 * it does not fit a Py_ssize_t. */
static int
as_ssize(PyObject *item, const char *what, PyObject *arg, Py_ssize_t *out)
{
    /* An exact int, the usual case, needs none of is_int's type checks. */
    if (!PyLong_CheckExact(item) && !is_int(item)) {
        if (arg == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s must be an int or a sequence of ints, not "
                         "%.200s %R",
                         what, Py_TYPE(item)->tp_name, item);
        }
        else {
            PyErr_Format(PyExc_TypeError, "%s %R: %.200s is not an int", what,
                         arg, Py_TYPE(item)->tp_name);
        }
        return -1;
    }
    /* Both raise OverflowError; the first skips the __index__ call. */
    *out = PyLong_CheckExact(item)
               ? PyLong_AsSsize_t(item)
               : PyNumber_AsSsize_t(item, PyExc_OverflowError);
    if (*out == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s %R: %R is out of range", what,
                         arg != NULL ? arg : item, item);
        }
        return -1;
    }
    return 0;
}

/* An int or a sequence of ints (numpy.empty's shape and strides): at
 * most NPY_MAXDIMS of them. Ints are what NumPy takes: Python and NumPy
 * integers and 0-d integer arrays, not bools or floats; a sequence is any
 * iterable, a 1-d NumPy integer array included. `what` names the argument
 * in errors. */
int
cmpy_parse_ints(PyObject *arg, const char *what, Py_ssize_t *out, int *n)
{
    PyObject *seq;
    Py_ssize_t len;

    if (cmpy_numpy_init() < 0) {
        return -1;
    }
    /* A NumPy array has __index__ (0-d only) and is iterable (1-d and
     * more): its dimensions decide. */
    if (PyLong_CheckExact(arg) ||
        (PyArray_Check(arg) ? PyArray_NDIM((PyArrayObject *)arg) == 0
                            : PyIndex_Check(arg) || PyBool_Check(arg))) {
        *n = 1;
        return as_ssize(arg, what, NULL, &out[0]);
    }
    seq = PySequence_Fast(arg, "");
    if (seq == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
            return -1;
        }
        PyErr_Format(PyExc_TypeError,
                     "%s must be an int or a sequence of ints, not %.200s "
                     "%R",
                     what, Py_TYPE(arg)->tp_name, arg);
        return -1;
    }
    len = PySequence_Fast_GET_SIZE(seq);
    if (len > NPY_MAXDIMS) {
        PyErr_Format(PyExc_ValueError,
                     "%s %R has %zd dimensions; at most %d are supported",
                     what, arg, len, NPY_MAXDIMS);
        goto error;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        if (as_ssize(PySequence_Fast_GET_ITEM(seq, i), what, arg, &out[i]) <
            0) {
            goto error;
        }
    }
    Py_DECREF(seq);
    *n = (int)len;
    return 0;
error:
    Py_DECREF(seq);
    return -1;
}

static int
parse_shape(PyObject *arg, Py_ssize_t *shape, int *ndim)
{
    if (cmpy_parse_ints(arg, "shape", shape, ndim) < 0) {
        return -1;
    }
    for (int i = 0; i < *ndim; i++) {
        if (shape[i] < 0) {
            PyErr_Format(PyExc_ValueError,
                         "negative dimensions are not allowed: shape %R", arg);
            return -1;
        }
    }
    return 0;
}

int
cmpy_layout_extent(int ndim, const Py_ssize_t *shape,
                   const Py_ssize_t *strides, Py_ssize_t itemsize,
                   Py_ssize_t *size, Py_ssize_t *low, Py_ssize_t *high)
{
    Py_ssize_t count = 1, bytes = itemsize > 0 ? itemsize : 1, lo = 0;
    Py_ssize_t hi = itemsize, span;

    /* Most arrays, in one multiplication: 1-d and contiguous. */
    if (ndim == 1 && strides[0] == itemsize && itemsize > 0) {
        if (__builtin_mul_overflow(shape[0], itemsize, &span)) {
            goto overflow;
        }
        *size = shape[0];
        *low = 0;
        *high = span;
        return 0;
    }
    /* NumPy's rule: the nonzero extents times the itemsize must fit even
     * when another extent is 0 (np.empty((2**62, 0)) is too big). */
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            count = 0;
            continue;
        }
        /* No division: one costs as much as the rest of the loop. */
        if (__builtin_mul_overflow(bytes, shape[i], &bytes)) {
            goto overflow;
        }
        count *= shape[i];
    }
    for (int i = 0; count != 0 && i < ndim; i++) {
        /* PY_SSIZE_T_MIN has no negation: MAX spans too much as well. */
        Py_ssize_t step = strides[i] == PY_SSIZE_T_MIN ? PY_SSIZE_T_MAX
                          : strides[i] < 0             ? -strides[i]
                                                       : strides[i];

        if (__builtin_mul_overflow(shape[i] - 1, step, &span)) {
            goto overflow;
        }
        /* Checked before the sum: the build wraps signed overflow. */
        if (strides[i] < 0) {
            if (span > PY_SSIZE_T_MAX / 2 + lo) {
                goto overflow;
            }
            lo -= span;
        }
        else {
            if (span > PY_SSIZE_T_MAX / 2 - hi) {
                goto overflow;
            }
            hi += span;
        }
    }
    *size = count;
    *low = count != 0 ? lo : 0;
    *high = count != 0 ? hi : 0;
    return 0;
overflow: {
    PyObject *a = cmpy_shape_tuple(ndim, shape);
    PyObject *b = cmpy_shape_tuple(ndim, strides);

    if (a != NULL && b != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "array is too big: shape %R with strides %R and "
                     "itemsize %zd spans more bytes than the maximum "
                     "possible size",
                     a, b, itemsize);
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    return -1;
}
}

/* Strides of a contiguous layout in `order` ('C' or 'F'). */
void
cmpy_contiguous_strides(int ndim, const Py_ssize_t *shape, Py_ssize_t itemsize,
                        char order, Py_ssize_t *strides)
{
    Py_ssize_t step = itemsize;

    for (int k = 0; k < ndim; k++) {
        int i = order == 'F' ? k : ndim - 1 - k;

        strides[i] = step;
        /* Saturates: the extent check then reports the size as too big. */
        if (__builtin_mul_overflow(step, shape[i] > 0 ? shape[i] : 1, &step)) {
            step = PY_SSIZE_T_MAX;
        }
    }
}

PyObject *
cmpy_shape_tuple(int ndim, const Py_ssize_t *dims)
{
    PyObject *t = PyTuple_New(ndim);

    for (int i = 0; t != NULL && i < ndim; i++) {
        PyObject *v = PyLong_FromSsize_t(dims[i]);

        if (v == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* PyArray_DescrConverter2 (None gives NULL), remembering the last
 * conversion of a static type (numpy.float32, float): NumPy's converter
 * costs about 200 instructions, a whole device_array() of 8 B about 4,000
 * of cudamem's own, and code passes the same type call after call. A
 * static type cannot change; a heap type may gain a `dtype` attribute and
 * a str may convert with a warning, so those are converted every time. */
static int
convert_dtype(cmpy_state *st, PyObject *arg, PyArray_Descr **dtype)
{
    if (arg == st->dtype_arg) {
        *dtype = (PyArray_Descr *)Py_NewRef(st->dtype_descr);
        return 0;
    }
    if (!PyArray_DescrConverter2(arg, dtype)) {
        return -1;
    }
    if (*dtype != NULL && PyType_Check(arg) &&
        !PyType_HasFeature((PyTypeObject *)arg, Py_TPFLAGS_HEAPTYPE)) {
        Py_XSETREF(st->dtype_descr, Py_NewRef(*dtype));
        Py_XSETREF(st->dtype_arg, Py_NewRef(arg));
    }
    return 0;
}

int
cmpy_parse_layout(cmpy_state *st, PyObject *shape_arg, PyObject *dtype_arg,
                  PyObject *strides_arg, PyObject *order_arg, int *ndim,
                  Py_ssize_t *shape, Py_ssize_t *strides,
                  PyArray_Descr **dtype)
{
    char order = 'C';
    int sndim;

    *dtype = NULL;
    if (parse_shape(shape_arg, shape, ndim) < 0 ||
        convert_dtype(st, dtype_arg != NULL ? dtype_arg : Py_None, dtype) <
            0) {
        return -1;
    }
    if (*dtype == NULL) {
        *dtype = PyArray_DescrFromType(NPY_DOUBLE);
    }
    if (cmpy_check_dtype(*dtype) < 0) {
        goto error;
    }
    if (order_arg != NULL && order_arg != Py_None) {
        const char *s = PyUnicode_Check(order_arg)
                            ? PyUnicode_AsUTF8(order_arg)
                            : NULL;

        if (s == NULL || (strcmp(s, "C") != 0 && strcmp(s, "F") != 0)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "order must be 'C' or 'F', not %R",
                         order_arg);
            goto error;
        }
        order = s[0];
    }
    if (strides_arg == NULL || strides_arg == Py_None) {
        if (cmpy_expand_subarray(dtype, ndim, shape, NULL) < 0) {
            goto error;
        }
        cmpy_contiguous_strides(*ndim, shape, PyDataType_ELSIZE(*dtype), order,
                                strides);
        return 0;
    }
    if (cmpy_parse_ints(strides_arg, "strides", strides, &sndim) < 0) {
        goto error;
    }
    if (sndim != *ndim) {
        PyErr_Format(PyExc_ValueError,
                     "strides %R do not match the %d dimensions of the "
                     "shape %R",
                     strides_arg, *ndim, shape_arg);
        goto error;
    }
    if (cmpy_expand_subarray(dtype, ndim, shape, strides) == 0) {
        return 0;
    }
error:
    Py_CLEAR(*dtype);
    return -1;
}
