/* array.c (py/): DeviceNDArray, numba's device array: its layout and
 * attributes, the CUDA Array Interface export, and the functions that make
 * and move whole contiguous arrays (to_device, device_array,
 * copy_to_host, copy_to_device). Copies are core/copy.c's; memory is the
 * gpu_data MemoryPointer's. */
#include "array.h"

#include "../core/copy.h"
#include "cai.h"
#include "hostbuf.h"
#include "device.h"
#include "html.h"
#include "stream.h"

#define LAYOUT (NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_F_CONTIGUOUS)

/* NumPy's contiguity rules: dimensions of length 1 do not count, and an
 * empty array is both C and F contiguous. */
static int
layout_flags(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
             Py_ssize_t itemsize)
{
    Py_ssize_t expect = itemsize;
    int flags = LAYOUT;

    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            return LAYOUT;
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

int
cmpy_expand_subarray(PyArray_Descr **dtype, int *ndim, Py_ssize_t *shape,
                     Py_ssize_t *strides)
{
    /* A sub-array's base may be one again: NumPy expands them all. */
    while (PyDataType_HASSUBARRAY(*dtype)) {
        PyArray_ArrayDescr *sub = PyDataType_SUBARRAY(*dtype);
        Py_ssize_t sub_shape[NPY_MAXDIMS];
        int nsub;

        if (cmpy_parse_ints(sub->shape, "sub-array shape", sub_shape,
                            &nsub) < 0) {
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
    if (!is_int(item)) {
        if (arg == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s must be an int or a sequence of ints, not "
                         "%.200s %R",
                         what, Py_TYPE(item)->tp_name, item);
        }
        else {
            PyErr_Format(PyExc_TypeError, "%s %R: %.200s is not an int",
                         what, arg, Py_TYPE(item)->tp_name);
        }
        return -1;
    }
    *out = PyNumber_AsSsize_t(item, PyExc_OverflowError);
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
    if (PyArray_Check(arg) ? PyArray_NDIM((PyArrayObject *)arg) == 0
                           : PyIndex_Check(arg) || PyBool_Check(arg)) {
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
                         "negative dimensions are not allowed: shape %R",
                         arg);
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
    Py_ssize_t count = 1, lo = 0, hi = itemsize, span;

    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 0 && count > PY_SSIZE_T_MAX / shape[i]) {
            goto overflow;
        }
        count *= shape[i];
    }
    if (count != 0 && itemsize > PY_SSIZE_T_MAX / count) {
        goto overflow;
    }
    for (int i = 0; count != 0 && i < ndim; i++) {
        /* PY_SSIZE_T_MIN has no negation: MAX spans too much as well. */
        Py_ssize_t step = strides[i] == PY_SSIZE_T_MIN ? PY_SSIZE_T_MAX
                          : strides[i] < 0           ? -strides[i]
                                                     : strides[i];

        if (shape[i] > 1 && step > PY_SSIZE_T_MAX / (shape[i] - 1)) {
            goto overflow;
        }
        span = (shape[i] - 1) * step;
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
overflow : {
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
        step = shape[i] > 1 && step > PY_SSIZE_T_MAX / shape[i]
                   ? PY_SSIZE_T_MAX
                   : step * (shape[i] > 0 ? shape[i] : 1);
    }
}

/* An array object of `type` over `mem` (a MemoryPointer, reference
 * stolen). */
static cmpy_DeviceNDArray *
array_make(PyObject *type, PyObject *mem, CUdeviceptr ptr, int ndim,
           const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t size,
           PyArray_Descr *dtype, PyObject *stream_obj,
           const cmpy_stream_ref *ref)
{
    Py_ssize_t itemsize = PyDataType_ELSIZE(dtype);
    cmpy_DeviceNDArray *self;

    /* tp_alloc zeroes (a Python subclass's __dict__ slot too) and
     * tracks; every field it leaves NULL is safe to traverse. */
    self = (cmpy_DeviceNDArray *)((PyTypeObject *)type)
               ->tp_alloc((PyTypeObject *)type, 2 * (Py_ssize_t)ndim);
    if (self == NULL) {
        Py_DECREF(mem);
        return NULL;
    }
    self->gpu_data = (cmpy_MemoryPointer *)mem;
    self->ptr = ptr;
    self->dtype = (PyArray_Descr *)Py_NewRef(dtype);
    self->size = size;
    self->nbytes = size * itemsize;
    /* NumPy passes NULL dims for 0-d arrays: no memcpy from NULL. */
    for (int i = 0; i < ndim; i++) {
        CMPY_SHAPE(self)[i] = shape[i];
        CMPY_STRIDES(self)[i] = strides[i];
    }
    self->flags = layout_flags(ndim, shape, strides, itemsize);
    /* Small ints are preallocated: PyLong_FromLong(0) cannot fail. */
    self->stream = stream_obj != NULL ? Py_NewRef(stream_obj)
                                      : PyLong_FromLong(0);
    self->stream_handle = ref->handle;
    self->stream_async = ref->async;
    self->stream_owned = ref->owned;
    return self;
}

/* A new array on dev over new memory. */
static cmpy_DeviceNDArray *
array_alloc(cmpy_state *st, PyObject *type, cm_device *dev, int ndim,
            const Py_ssize_t *shape, const Py_ssize_t *strides,
            PyArray_Descr *dtype, PyObject *stream_obj,
            const cmpy_stream_ref *ref)
{
    Py_ssize_t itemsize = PyDataType_ELSIZE(dtype), size, low, high;
    PyObject *mem;

    if (cmpy_layout_extent(ndim, shape, strides, itemsize, &size, &low,
                           &high) < 0) {
        return NULL;
    }
    mem = cmpy_memory_alloc(st, dev, (size_t)(high - low), ref->handle);
    if (mem == NULL) {
        return NULL;
    }
    return array_make(
        type, mem,
        size != 0 ? ((cmpy_MemoryPointer *)mem)->ptr - (CUdeviceptr)low : 0,
        ndim, shape, strides, size, dtype, stream_obj, ref);
}

/* ValueError unless the bytes [ptr + low, ptr + high) lie inside mp. */
static int
check_inside(const cmpy_MemoryPointer *mp, CUdeviceptr ptr, Py_ssize_t low,
             Py_ssize_t high)
{
    if (ptr + (CUdeviceptr)low < mp->ptr ||
        ptr + (CUdeviceptr)high > mp->ptr + mp->size) {
        PyErr_Format(PyExc_ValueError,
                     "the array's elements span %zd bytes outside the %zu "
                     "bytes of its memory",
                     high - low, mp->size);
        return -1;
    }
    return 0;
}

cmpy_DeviceNDArray *
cmpy_array_wrap(PyObject *type, PyObject *mem, CUdeviceptr ptr, int ndim,
                const Py_ssize_t *shape, const Py_ssize_t *strides,
                PyArray_Descr *dtype, PyObject *stream_obj,
                const cmpy_stream_ref *ref)
{
    Py_ssize_t size, low, high;

    if (cmpy_layout_extent(ndim, shape, strides, PyDataType_ELSIZE(dtype),
                           &size, &low, &high) < 0 ||
        (size != 0 &&
         check_inside((cmpy_MemoryPointer *)mem, ptr, low, high) < 0)) {
        Py_DECREF(mem);
        return NULL;
    }
    return array_make(type, mem, size != 0 ? ptr : 0, ndim, shape, strides,
                      size, dtype, stream_obj, ref);
}

/* A MemoryPointer over exactly the bytes of mp that the layout with its
 * first element at ptr touches (numba: a view's gpu_data covers its
 * extent), and the layout's element count. ValueError when they reach
 * outside mp. New reference. */
static PyObject *
extent_view(cmpy_state *st, cmpy_MemoryPointer *mp, CUdeviceptr ptr,
            int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
            PyArray_Descr *dtype, Py_ssize_t *size)
{
    Py_ssize_t low, high;
    size_t offset = 0;

    if (cmpy_layout_extent(ndim, shape, strides, PyDataType_ELSIZE(dtype),
                           size, &low, &high) < 0) {
        return NULL;
    }
    if (*size != 0) {
        if (check_inside(mp, ptr, low, high) < 0) {
            return NULL;
        }
        offset = (size_t)(ptr + (CUdeviceptr)low - mp->ptr);
    }
    return cmpy_memory_view(st, mp, offset, (size_t)(high - low));
}

cmpy_DeviceNDArray *
cmpy_array_over(cmpy_state *st, cmpy_MemoryPointer *owner, CUdeviceptr ptr,
                int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                PyArray_Descr *dtype, PyObject *stream_obj,
                const cmpy_stream_ref *ref)
{
    Py_ssize_t size;
    PyObject *mem = extent_view(st, owner, ptr, ndim, shape, strides, dtype,
                                &size);

    if (mem == NULL) {
        return NULL;
    }
    return array_make(st->DeviceNDArrayType, mem, size != 0 ? ptr : 0, ndim,
                      shape, strides, size, dtype, stream_obj, ref);
}

cmpy_DeviceNDArray *
cmpy_array_view_as(cmpy_state *st, PyObject *type, cmpy_DeviceNDArray *base,
                   int ndim, const Py_ssize_t *shape,
                   const Py_ssize_t *strides, CUdeviceptr ptr,
                   PyArray_Descr *dtype)
{
    cmpy_stream_ref bref = {base->stream_handle, base->stream_async, NULL,
                            base->stream_owned};
    Py_ssize_t size;
    PyObject *mem = extent_view(st, base->gpu_data, ptr, ndim, shape,
                                strides, dtype, &size);

    if (mem == NULL) {
        return NULL;
    }
    return array_make(type, mem, size != 0 ? ptr : 0, ndim, shape, strides,
                      size, dtype, base->stream, &bref);
}

cmpy_DeviceNDArray *
cmpy_array_view(cmpy_state *st, cmpy_DeviceNDArray *base, int ndim,
                const Py_ssize_t *shape, const Py_ssize_t *strides,
                CUdeviceptr ptr, PyArray_Descr *dtype)
{
    /* A view keeps a Python subclass's type, as numba's type(self)(...). */
    PyObject *type = PyObject_TypeCheck((PyObject *)base,
                                        (PyTypeObject *)st->DeviceNDArrayType)
                         ? (PyObject *)Py_TYPE(base)
                         : st->DeviceNDArrayType;

    return cmpy_array_view_as(st, type, base, ndim, shape, strides, ptr,
                              dtype);
}

int
cmpy_array_traverse(PyObject *op, visitproc visit, void *arg)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;

    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->gpu_data);
    Py_VISIT(self->dtype);
    Py_VISIT(self->stream);
    return 0;
}

int
cmpy_array_clear(PyObject *op)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;

    Py_CLEAR(self->gpu_data);
    Py_CLEAR(self->dtype);
    Py_CLEAR(self->stream);
    return 0;
}

static void
array_dealloc(cmpy_DeviceNDArray *self)
{
    PyTypeObject *type = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    cmpy_array_clear((PyObject *)self);
    type->tp_free(self);
    Py_DECREF(type);
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

cmpy_DeviceNDArray *
cmpy_array_empty(cmpy_state *st, cmpy_DeviceNDArray *like, char order)
{
    Py_ssize_t strides[NPY_MAXDIMS];
    cmpy_stream_ref ref = {like->stream_handle, like->stream_async, NULL,
                           like->stream_owned};

    cmpy_contiguous_strides(CMPY_NDIM(like), CMPY_SHAPE(like),
                            PyDataType_ELSIZE(like->dtype), order, strides);
    return array_alloc(st, st->DeviceNDArrayType, like->gpu_data->mem->dev,
                       CMPY_NDIM(like), CMPY_SHAPE(like), strides,
                       like->dtype, like->stream, &ref);
}

PyDoc_STRVAR(is_c_contiguous_doc,
             "is_c_contiguous($self)\n--\n\n"
             "Whether the array is C-contiguous "
             "(NumPy's rule).");

static PyObject *
array_is_c_contiguous(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(((cmpy_DeviceNDArray *)op)->flags &
                           NPY_ARRAY_C_CONTIGUOUS);
}

PyDoc_STRVAR(is_f_contiguous_doc,
             "is_f_contiguous($self)\n--\n\n"
             "Whether the array is "
             "Fortran-contiguous (NumPy's rule).");

static PyObject *
array_is_f_contiguous(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(((cmpy_DeviceNDArray *)op)->flags &
                           NPY_ARRAY_F_CONTIGUOUS);
}

#define FASTKW(fn)                                                             \
    (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS

PyDoc_STRVAR(reshape_doc,
             "reshape($self, *shape, order='C')\n--\n\n"
             "The same elements in a new shape (one dimension may be -1): a "
             "view\nwhen the layout allows, else a copy (numba raises).");
PyDoc_STRVAR(ravel_doc,
             "ravel($self, order='C', stream=0)\n--\n\n"
             "A 1-D view, or a copy when no view exists (numba raises); "
             "with a\n*stream*, the result is bound to it and a copy is "
             "made there.");
PyDoc_STRVAR(squeeze_doc,
             "squeeze($self, axis=None, stream=0)\n--\n\n"
             "A view without dimensions of length 1 (all, or those in "
             "*axis*).");
PyDoc_STRVAR(transpose_doc,
             "transpose($self, axes=None)\n--\n\n"
             "A view with the axes permuted (reversed by default); numba "
             "copies.");
PyDoc_STRVAR(view_doc,
             "view($self, dtype)\n--\n\n"
             "The same memory as *dtype* (numba's rules when the itemsize "
             "changes;\na sub-array dtype of the same itemsize appends its "
             "axes, as NumPy).");
PyDoc_STRVAR(split_doc,
             "split($self, section, stream=0)\n--\n\n"
             "Views of *section* elements each (the last may be shorter) of "
             "a 1-D\narray.");
PyDoc_STRVAR(bind_doc,
             "bind($self, stream=0)\n--\n\n"
             "A view whose operations default to *stream*.");

PyDoc_STRVAR(reduce_ex_doc,
             "__reduce_ex__($self, protocol)\n--\n\n"
             "Pickles a host copy (out of band with protocol 5); "
             "unpickling copies it\nto the current device. The stream is "
             "not kept.");

static PyObject *
array_reduce_ex(PyObject *op, PyObject *Py_UNUSED(protocol))
{
    cmpy_state *st = cmpy_type_state(op);
    PyObject *host, *value, *to_device;

    to_device = PyObject_GetAttrString(cmpy_type_module(Py_TYPE(op)),
                                       "to_device");
    if (to_device == NULL) {
        return NULL;
    }
    host = cmpy_array_to_host(st, (cmpy_DeviceNDArray *)op);
    /* A record travels as the numpy.void that to_device makes one of. */
    value = host != NULL &&
                    PyObject_TypeCheck(op,
                                       (PyTypeObject *)st->DeviceRecordType)
                ? PyArray_ToScalar(PyArray_DATA((PyArrayObject *)host),
                                   (PyArrayObject *)host)
                : Py_XNewRef(host);
    Py_XDECREF(host);
    if (value == NULL) {
        Py_DECREF(to_device);
        return NULL;
    }
    return Py_BuildValue("N(N)", to_device, value);
}

PyDoc_STRVAR(copy_doc,
             "__copy__($self)\n--\n\n"
             "copy.copy(): a new array on this array's device and stream, "
             "as copy('K')\n(a record gives a record); not through "
             "pickling, which would copy\nto the current device.");
PyDoc_STRVAR(deepcopy_doc,
             "__deepcopy__($self, memo)\n--\n\n"
             "copy.deepcopy(): as __copy__() (the elements hold no "
             "references).");

static PyObject *
array_copy_here(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_type_state(op);
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op, *out, *rec;

    out = (cmpy_DeviceNDArray *)cmpy_array_copy_as(
        st, self,
        (self->flags & NPY_ARRAY_F_CONTIGUOUS) &&
                !(self->flags & NPY_ARRAY_C_CONTIGUOUS)
            ? 'F'
            : 'C',
        0, NULL);
    if (out == NULL ||
        !PyObject_TypeCheck(op, (PyTypeObject *)st->DeviceRecordType)) {
        return (PyObject *)out;
    }
    rec = cmpy_array_view_as(st, st->DeviceRecordType, out, 0, NULL, NULL,
                             out->ptr, out->dtype);
    Py_DECREF(out);
    return (PyObject *)rec;
}

/* copy.deepcopy() files the result in the memo itself. */
static PyObject *
array_deepcopy(PyObject *op, PyObject *Py_UNUSED(memo))
{
    return array_copy_here(op, NULL);
}

/* numba's DeviceNDArrayBase: what records share with arrays. */
/* Defined with repr() below. */
static PyObject *array_repr_html(PyObject *op, PyObject *ignored);
PyDoc_STRVAR(repr_html_doc,
             "_repr_html_($self)\n--\n\n"
             "The array as an HTML table for Jupyter: shape, dtype, "
             "strides, bytes,\nlayout, device, stream and, for at most "
             "100 elements, the values.");

static PyMethodDef base_methods[] = {
    {"copy_to_host", FASTKW(cmpy_array_copy_to_host),
     cmpy_array_copy_to_host_doc},
    {"copy_to_device", FASTKW(cmpy_array_copy_to_device),
     cmpy_array_copy_to_device_doc},
    {"bind", FASTKW(cmpy_array_bind), bind_doc},
    {"__reduce_ex__", array_reduce_ex, METH_O, reduce_ex_doc},
    {"__copy__", array_copy_here, METH_NOARGS, copy_doc},
    {"__deepcopy__", array_deepcopy, METH_O, deepcopy_doc},
    {"_repr_html_", array_repr_html, METH_NOARGS, repr_html_doc},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef array_methods[] = {
    {"getitem", FASTKW(cmpy_array_getitem_method), cmpy_array_getitem_doc},
    {"setitem", FASTKW(cmpy_array_setitem_method), cmpy_array_setitem_doc},
    {"fill", FASTKW(cmpy_array_fill), cmpy_array_fill_doc},
    {"copy", FASTKW(cmpy_array_copy), cmpy_array_copy_doc},
    {"__array__", FASTKW(cmpy_array_array), cmpy_array_array_doc},
    {"reshape", FASTKW(cmpy_array_reshape), reshape_doc},
    {"ravel", FASTKW(cmpy_array_ravel), ravel_doc},
    {"squeeze", FASTKW(cmpy_array_squeeze), squeeze_doc},
    {"transpose", FASTKW(cmpy_array_transpose), transpose_doc},
    {"view", FASTKW(cmpy_array_view_dtype), view_doc},
    {"split", FASTKW(cmpy_array_split), split_doc},
    {"__dlpack__", FASTKW(cmpy_array_dlpack), cmpy_array_dlpack_doc},
    {"__dlpack_device__", cmpy_array_dlpack_device, METH_NOARGS,
     cmpy_array_dlpack_device_doc},
    {"get_ipc_handle", cmpy_array_get_ipc_handle, METH_NOARGS,
     cmpy_array_get_ipc_handle_doc},
    {"is_c_contiguous", array_is_c_contiguous, METH_NOARGS,
     is_c_contiguous_doc},
    {"is_f_contiguous", array_is_f_contiguous, METH_NOARGS,
     is_f_contiguous_doc},
    {NULL, NULL, 0, NULL},
};

static PyObject *
get_shape(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return cmpy_shape_tuple(CMPY_NDIM(self), CMPY_SHAPE(self));
}

static PyObject *
get_strides(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return cmpy_shape_tuple(CMPY_NDIM(self), CMPY_STRIDES(self));
}

static PyObject *
get_dtype(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return Py_NewRef(self->dtype);
}

static PyObject *
get_ndim(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(CMPY_NDIM(self));
}

static PyObject *
get_size(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return PyLong_FromSsize_t(self->size);
}

static PyObject *
get_itemsize(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return PyLong_FromSsize_t(PyDataType_ELSIZE(self->dtype));
}

static PyObject *
get_nbytes(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return PyLong_FromSsize_t(self->nbytes);
}

static PyObject *
get_alloc_size(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return PyLong_FromSize_t(self->gpu_data->size);
}

static PyObject *
get_stream(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return Py_NewRef(self->stream);
}

static PyObject *
get_gpu_data(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return Py_NewRef(self->gpu_data);
}

static PyObject *
get_flags(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return Py_BuildValue("{sOsO}", "C_CONTIGUOUS",
                         self->flags & NPY_ARRAY_C_CONTIGUOUS ? Py_True
                                                              : Py_False,
                         "F_CONTIGUOUS",
                         self->flags & NPY_ARRAY_F_CONTIGUOUS ? Py_True
                                                              : Py_False);
}

static PyObject *
get_device_ctypes_pointer(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return cmpy_c_void_p((PyObject *)self, (unsigned long long)self->ptr);
}

/* The stream a CAI export names: the array's, made to wait (events) for
 * the work queued on its memory on other streams; no driver call when
 * there is none. A stream-0 array exports None, whose consumers wait for
 * nothing: work on other streams is ordered into the legacy default
 * stream and waited for on the host first (synchronous, as the array).
 * New reference. */
static PyObject *
export_stream(cmpy_state *st, cmpy_DeviceNDArray *self)
{
    int own = self->stream_async && self->stream_handle != NULL, ordered, rc;
    CUstream into = own ? self->stream_handle : CU_STREAM_LEGACY;
    cm_mem *m = self->gpu_data->mem;
    cm_error err;

    /* Unlocked peek: memory with no work noted costs nothing; only the
     * array's own stream costs the set's lock and no driver call. */
    if (__atomic_load_n(&m->npending, __ATOMIC_RELAXED) == 0) {
        ordered = 0;
    }
    else {
        Py_BEGIN_ALLOW_THREADS
        rc = cm_mem_order_pending(m, into, &ordered, &err);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            return cmpy_raise(st, &err);
        }
    }
    if (own) {
        return PyLong_FromVoidPtr(self->stream_handle);
    }
    if (ordered > 0 &&
        cmpy_stream_wait(st, m->dev, CU_STREAM_LEGACY) < 0) {
        return NULL;
    }
    return Py_NewRef(Py_None);
}

/* CAI v3 (export). `stream` is None for the default stream's handle 0, as
 * the spec requires (numba emits 0); strides are None when C-contiguous.
 * Work queued on the memory on other streams is ordered into the exported
 * stream first (export_stream). */
static PyObject *
get_cai(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    cmpy_state *st = cmpy_type_state((PyObject *)self);
    PyObject *shape = NULL, *strides = NULL, *typestr = NULL, *stream = NULL;
    PyObject *descr = NULL, *cai = NULL;

    if (cmpy_array_check_alive(st, self) < 0) {
        return NULL;
    }
    shape = get_shape(self, NULL);
    strides = self->flags & NPY_ARRAY_C_CONTIGUOUS
                  ? Py_NewRef(Py_None)
                  : get_strides(self, NULL);
    typestr = PyObject_GetAttrString((PyObject *)self->dtype, "str");
    stream = export_stream(st, self);
    if (shape == NULL || strides == NULL || typestr == NULL ||
        stream == NULL) {
        goto done;
    }
    cai = Py_BuildValue("{sOsOs(KO)sOsOsi}", "shape", shape, "strides",
                        strides, "data", (unsigned long long)self->ptr,
                        self->gpu_data->mem->readonly ? Py_True : Py_False,
                        "typestr", typestr, "stream", stream,
                        "version", 3);
    if (cai != NULL && PyDataType_HASFIELDS(self->dtype)) {
        descr = PyObject_GetAttrString((PyObject *)self->dtype, "descr");
        if (descr == NULL || PyDict_SetItemString(cai, "descr", descr) < 0) {
            Py_CLEAR(cai);
        }
    }
done:
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(typestr);
    Py_XDECREF(stream);
    Py_XDECREF(descr);
    return cai;
}

static PyGetSetDef array_getset[] = {
    {"shape", (getter)get_shape, NULL, "Tuple of dimensions.", NULL},
    {"strides", (getter)get_strides, NULL, "Tuple of byte strides.", NULL},
    {"dtype", (getter)get_dtype, NULL, "The numpy.dtype of the elements.",
     NULL},
    {"ndim", (getter)get_ndim, NULL, "Number of dimensions.", NULL},
    {"size", (getter)get_size, NULL, "Number of elements.", NULL},
    {"itemsize", (getter)get_itemsize, NULL, "Bytes per element.", NULL},
    {"nbytes", (getter)get_nbytes, NULL, "size * itemsize.", NULL},
    {"alloc_size", (getter)get_alloc_size, NULL,
     "Bytes of the allocation behind the array.", NULL},
    {"stream", (getter)get_stream, NULL,
     "The stream given at creation (0: synchronous operations).", NULL},
    {"gpu_data", (getter)get_gpu_data, NULL,
     "The MemoryPointer that owns the memory.", NULL},
    {"flags", (getter)get_flags, NULL,
     "{'C_CONTIGUOUS': bool, 'F_CONTIGUOUS': bool}.", NULL},
    {"device_ctypes_pointer", (getter)get_device_ctypes_pointer, NULL,
     "The address of the first element as a ctypes.c_void_p.", NULL},
    {"__cuda_memory__", cmpy_get_true, NULL, "True: device memory.", NULL},
    {"_strided_memory_view_shim", cmpy_launch_view, NULL,
     "What numba-cuda's kernel launch reads from its own arrays.", NULL},
    {"__cuda_ndarray__", cmpy_get_true, NULL, "True: a device array.", NULL},
    {"__cuda_array_interface__", (getter)get_cai, NULL,
     "The CUDA Array Interface (version 3) of this array.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyGetSetDef ndarray_getset[] = {
    {"T", cmpy_array_get_T, NULL, "The transpose, as a view.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef array_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET,
     offsetof(cmpy_DeviceNDArray, weakreflist), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static int
refuse_buffer(PyObject *Py_UNUSED(self), Py_buffer *Py_UNUSED(view),
              int Py_UNUSED(flags))
{
    PyErr_SetString(PyExc_BufferError,
                    "device memory is not host-accessible; use "
                    "copy_to_host()");
    return -1;
}

static Py_ssize_t
array_len(PyObject *op)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;

    if (CMPY_NDIM(self) == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of unsized object");
        return -1;
    }
    return CMPY_SHAPE(self)[0];
}

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

static PyObject *
array_repr(PyObject *op)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    PyObject *shape = get_shape(self, NULL), *values, *out;

    if (shape == NULL) {
        return NULL;
    }
    values = repr_values(self);
    if (values == NULL && PyErr_Occurred()) {
        Py_DECREF(shape);
        return NULL;
    }
    if (values == NULL) {
        out = PyUnicode_FromFormat("<%s shape=%R dtype=%S on device %d>",
                                   Py_TYPE(op)->tp_name, shape,
                                   (PyObject *)self->dtype,
                                   self->gpu_data->mem->dev->ordinal);
    }
    else {
        int multiline = PyUnicode_FindChar(values, '\n', 0,
                                           PyUnicode_GET_LENGTH(values),
                                           1) >= 0;

        out = PyUnicode_FromFormat(
            "<%s shape=%R dtype=%S on device %d%s%U>", Py_TYPE(op)->tp_name,
            shape, (PyObject *)self->dtype, self->gpu_data->mem->dev->ordinal,
            multiline ? "\n" : ": ", values);
    }
    Py_DECREF(shape);
    Py_XDECREF(values);
    return out;
}

static const char *
layout_name(int flags)
{
    switch (flags & LAYOUT) {
    case LAYOUT:
        return "C and F contiguous";
    case NPY_ARRAY_C_CONTIGUOUS:
        return "C contiguous";
    case NPY_ARRAY_F_CONTIGUOUS:
        return "F contiguous";
    default:
        return "not contiguous";
    }
}

static PyObject *
array_repr_html(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    static const char *const labels[] = {"shape", "dtype", "strides",
                                         "bytes", "layout", "device",
                                         "stream"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    PyObject *values[7], *shown = repr_values(self), *out;

    if (shown == NULL && PyErr_Occurred()) {
        return NULL;
    }
    values[0] = get_shape(self, NULL);
    values[1] = Py_NewRef((PyObject *)self->dtype);
    values[2] = get_strides(self, NULL);
    values[3] = cmpy_html_size((unsigned long long)self->nbytes);
    values[4] = PyUnicode_FromString(layout_name(self->flags));
    values[5] = PyLong_FromLong(self->gpu_data->mem->dev->ordinal);
    values[6] = PyObject_Repr(self->stream);
    out = cmpy_html_table(Py_TYPE(op)->tp_name, 7, labels, values, shown);
    Py_XDECREF(shown);
    return out;
}

PyDoc_STRVAR(base_doc,
             "DeviceNDArrayBase\n\n"
             "What device arrays and records share (numba's "
             "DeviceNDArrayBase): layout\nattributes, copies to and from "
             "the host, the CUDA Array Interface.\nIts memory is freed "
             "through the context's pending deallocations when\nthe last "
             "reference goes.");

static PyType_Slot base_slots[] = {
    {Py_tp_doc, (void *)base_doc},
    {Py_tp_dealloc, array_dealloc},
    {Py_tp_traverse, cmpy_array_traverse},
    {Py_tp_clear, cmpy_array_clear},
    {Py_tp_repr, array_repr},
    {Py_tp_methods, base_methods},
    {Py_tp_getset, array_getset},
    {Py_tp_members, array_members},
    {Py_bf_getbuffer, refuse_buffer},
    {0, NULL},
};

static PyType_Spec base_spec = {
    .name = "cudamem.DeviceNDArrayBase",
    .basicsize = offsetof(cmpy_DeviceNDArray, dims),
    .itemsize = sizeof(Py_ssize_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = base_slots,
};

static PyObject *array_new(PyTypeObject *type, PyObject *args,
                           PyObject *kwds);

PyDoc_STRVAR(array_doc,
             "DeviceNDArray(shape, strides, dtype, stream=0, "
             "gpu_data=None)\n--\n\n"
             "An array in device memory (numba's DeviceNDArray), usually "
             "made by\nto_device(), device_array() and friends. Made "
             "directly, it allocates\nits extent from the current device's "
             "memory manager, or uses the memory\nof *gpu_data* (a "
             "MemoryPointer large enough for the extent).");

static PyType_Slot array_slots[] = {
    {Py_tp_doc, (void *)array_doc},
    {Py_tp_new, array_new},
    {Py_tp_traverse, cmpy_array_traverse},
    {Py_tp_clear, cmpy_array_clear},
    {Py_tp_methods, array_methods},
    {Py_tp_getset, ndarray_getset},
    {Py_mp_length, array_len},
    {Py_mp_subscript, cmpy_array_getitem},
    {Py_mp_ass_subscript, cmpy_array_setitem},
    {Py_sq_length, array_len},
    {Py_sq_item, cmpy_array_item},
    {Py_tp_iter, cmpy_array_iter},
    {0, NULL},
};

static PyType_Spec array_spec = {
    .name = "cudamem.DeviceNDArray",
    .basicsize = offsetof(cmpy_DeviceNDArray, dims),
    .itemsize = sizeof(Py_ssize_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .slots = array_slots,
};

/* The `stream` object kept by a new array: None counts as 0. */
static PyObject *
kept_stream(PyObject *arg, const cmpy_stream_ref *ref)
{
    return ref->obj != NULL ? arg : NULL;
}

int
cmpy_parse_layout(PyObject *shape_arg, PyObject *dtype_arg,
                  PyObject *strides_arg, PyObject *order_arg, int *ndim,
                  Py_ssize_t *shape, Py_ssize_t *strides,
                  PyArray_Descr **dtype)
{
    char order = 'C';
    int sndim;

    *dtype = NULL;
    if (parse_shape(shape_arg, shape, ndim) < 0 ||
        !PyArray_DescrConverter2(dtype_arg != NULL ? dtype_arg : Py_None,
                                 dtype)) {
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
        cmpy_contiguous_strides(*ndim, shape, PyDataType_ELSIZE(*dtype),
                                order, strides);
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

/* numba's DeviceNDArrayBase(shape, strides, dtype, stream, gpu_data):
 * over new memory from the current device's memory manager, as
 * device_array(), or over gpu_data's, whose bytes from its pointer must
 * hold the layout's extent. A record needs a structured dtype and no
 * dimensions. */
PyObject *
cmpy_array_construct(PyTypeObject *type, PyObject *shape_arg,
                     PyObject *strides_arg, PyObject *dtype_arg,
                     PyObject *stream, PyObject *gpu_data, int record)
{
    cmpy_state *st = cmpy_state_of(type);
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS], size, low, high;
    PyArray_Descr *dtype = NULL;
    cmpy_MemoryPointer *mp = NULL;
    PyObject *result = NULL;
    cmpy_stream_ref ref;
    cm_device *dev;
    int ndim;

    if (st == NULL || cmpy_numpy_init() < 0 ||
        cmpy_parse_layout(shape_arg, dtype_arg, strides_arg, NULL, &ndim,
                          shape, strides, &dtype) < 0) {
        return NULL;
    }
    if (record && (ndim != 0 || !PyDataType_HASFIELDS(dtype))) {
        PyErr_Format(PyExc_TypeError,
                     "a DeviceRecord needs a structured dtype, not %R",
                     (PyObject *)dtype);
        goto done;
    }
    if (gpu_data != NULL && gpu_data != Py_None) {
        if (!PyObject_TypeCheck(gpu_data,
                                (PyTypeObject *)st->MemoryPointerType)) {
            PyErr_Format(PyExc_TypeError,
                         "gpu_data must be a MemoryPointer, not %.200s",
                         Py_TYPE(gpu_data)->tp_name);
            goto done;
        }
        mp = (cmpy_MemoryPointer *)gpu_data;
        dev = mp->mem->dev;
    }
    else if (cmpy_current_device(st, &dev) < 0) {
        goto done;
    }
    if (cmpy_stream_arg(st, stream != NULL ? stream : Py_None, dev, &ref) <
        0) {
        goto done;
    }
    if (mp == NULL) {
        result = (PyObject *)array_alloc(st, (PyObject *)type, dev, ndim,
                                         shape, strides, dtype,
                                         kept_stream(stream, &ref), &ref);
    }
    /* The extent starts at gpu_data's pointer, as array_alloc lays it. */
    else if (cmpy_layout_extent(ndim, shape, strides,
                                PyDataType_ELSIZE(dtype), &size, &low,
                                &high) == 0) {
        result = (PyObject *)cmpy_array_wrap(
            (PyObject *)type, Py_NewRef(gpu_data), mp->ptr - (CUdeviceptr)low,
            ndim, shape, strides, dtype, kept_stream(stream, &ref), &ref);
    }
done:
    Py_DECREF(dtype);
    return result;
}

static PyObject *
array_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"shape", "strides", "dtype", "stream", "gpu_data",
                            NULL};
    PyObject *shape, *strides, *dtype, *stream = NULL, *gpu_data = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OO:DeviceNDArray",
                                     names, &shape, &strides, &dtype, &stream,
                                     &gpu_data)) {
        return NULL;
    }
    return cmpy_array_construct(type, shape, strides, dtype, stream,
                                gpu_data, 0);
}

PyDoc_STRVAR(device_array_doc,
             "device_array($module, shape, dtype=None, strides=None, "
             "order='C', stream=0)\n--\n\n"
             "An uninitialized array on the current device, as "
             "numpy.empty. *strides*\n(bytes, any sign) overrides *order*; "
             "a zero-size array allocates\nnothing.");

static PyObject *
device_array(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    static const char *const names[] = {"shape", "dtype", "strides", "order",
                                        "stream"};
    cmpy_state *st = cmpy_get_state(module);
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    PyArray_Descr *dtype = NULL;
    PyObject *argv[5], *result = NULL;
    cmpy_stream_ref ref;
    cm_device *dev;
    int ndim;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("device_array", names, 5, 1, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_parse_layout(argv[0], argv[1], argv[2], argv[3], &ndim, shape,
                          strides, &dtype) < 0) {
        return NULL;
    }
    if (cmpy_current_device(st, &dev) < 0 ||
        cmpy_stream_arg(st, argv[4] != NULL ? argv[4] : Py_None, dev, &ref) <
            0) {
        goto done;
    }
    result = (PyObject *)array_alloc(st, st->DeviceNDArrayType, dev, ndim,
                                     shape, strides, dtype,
                                     kept_stream(argv[4], &ref), &ref);
done:
    Py_XDECREF(dtype);
    return result;
}

PyDoc_STRVAR(to_device_doc,
             "to_device($module, obj, stream=0, copy=True, to=None)\n--\n\n"
             "Copies *obj* (anything numpy.asarray takes) to a new array on "
             "the\ncurrent device, keeping its layout when it is C- or "
             "F-contiguous and\nC order otherwise; a numpy.void becomes a "
             "DeviceRecord. A device array\n(or an object with "
             "__cuda_array_interface__, wrapped without a copy)\nis returned "
             "as it is when it lives on the current device, else copied\n"
             "here (peer to peer where the devices can). With *to*, copies "
             "into\nthat array and returns it; with copy=False, only "
             "allocates.\nSynchronous on stream 0, queued on a stream.");

static PyObject *
to_device(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
          PyObject *kwnames)
{
    static const char *const names[] = {"obj", "stream", "copy", "to"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[4], *stream_arg, *type, *result = NULL;
    const Py_ssize_t *shape, *layout;
    Py_ssize_t strides[NPY_MAXDIMS];
    cmpy_DeviceNDArray *arr, *src = NULL;
    PyArrayObject *host = NULL;
    PyArray_Descr *dtype;
    int ndim, cai;
    cmpy_stream_ref ref;
    cm_device *dev;
    int copy = 1;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("to_device", names, 4, 1, args, nargs, kwnames, argv) <
            0) {
        return NULL;
    }
    stream_arg = argv[1] != NULL ? argv[1] : Py_None;
    if (argv[2] != NULL && (copy = PyObject_IsTrue(argv[2])) < 0) {
        return NULL;
    }
    if (argv[3] != NULL && argv[3] != Py_None) {
        PyObject *kw[] = {argv[0], stream_arg};

        if (!cmpy_is_array(st, argv[3])) {
            PyErr_Format(PyExc_TypeError,
                         "to_device(): to= must be a device array, not "
                         "%.200s",
                         Py_TYPE(argv[3])->tp_name);
            return NULL;
        }
        result = cmpy_array_copy_to_device(argv[3], kw, 2, NULL);
        if (result == NULL) {
            return NULL;
        }
        Py_DECREF(result);
        return Py_NewRef(argv[3]);
    }
    if (cmpy_is_array(st, argv[0])) {
        src = (cmpy_DeviceNDArray *)Py_NewRef(argv[0]);
    }
    else if ((cai = cmpy_cai_check(st, argv[0])) != 0) {
        /* Wrapped without a copy (numba's as_cuda_array). */
        if (cai < 0 || (src = (cmpy_DeviceNDArray *)cmpy_cai_import(
                            st, argv[0], 1, NULL)) == NULL) {
            goto done;
        }
    }
    else if ((host = (PyArrayObject *)PyArray_FROM_O(argv[0])) == NULL ||
             cmpy_check_dtype(PyArray_DESCR(host)) < 0) {
        goto done;
    }
    if (cmpy_current_device(st, &dev) < 0) {
        goto done;
    }
    /* A device array on this device is returned as it is (numba); one on
     * another device is copied here. */
    if (src != NULL && src->gpu_data->mem->dev == dev) {
        result = Py_NewRef(src);
        goto done;
    }
    if (cmpy_stream_arg(st, stream_arg, dev, &ref) < 0) {
        goto done;
    }
    if (src != NULL) {
        type = (PyObject *)Py_TYPE(src);
        ndim = CMPY_NDIM(src);
        shape = CMPY_SHAPE(src);
        layout = src->flags & LAYOUT ? CMPY_STRIDES(src) : NULL;
        dtype = src->dtype;
    }
    else {
        /* numba: a numpy.void becomes a DeviceRecord. */
        type = PyArray_IsScalar(argv[0], Void) &&
                       PyDataType_HASFIELDS(PyArray_DESCR(host))
                   ? st->DeviceRecordType
                   : st->DeviceNDArrayType;
        ndim = PyArray_NDIM(host);
        shape = PyArray_DIMS(host);
        layout = PyArray_FLAGS(host) & LAYOUT ? PyArray_STRIDES(host) : NULL;
        dtype = PyArray_DESCR(host);
    }
    /* The source's layout when contiguous; otherwise C order, and the copy
     * moves exactly the elements (numba copies the extent). A loop: NumPy's
     * 0-d arrays have NULL strides. */
    for (int i = 0; layout != NULL && i < ndim; i++) {
        strides[i] = layout[i];
    }
    if (layout == NULL) {
        cmpy_contiguous_strides(ndim, shape, PyDataType_ELSIZE(dtype), 'C',
                                strides);
    }
    arr = array_alloc(st, type, dev, ndim, shape, strides, dtype,
                      kept_stream(stream_arg, &ref), &ref);
    if (arr == NULL) {
        goto done;
    }
    /* A list or scalar converted here must outlive a queued copy. */
    if (copy && host != NULL && (PyObject *)host != argv[0] && ref.async &&
        cmpy_hostbuf_pin_temporary(st, dev, &host) < 0) {
        Py_DECREF(arr);
        goto done;
    }
    if (copy && cmpy_array_copy_from(st, arr,
                                     src != NULL ? (PyObject *)src
                                                 : (PyObject *)host,
                                     &ref) < 0) {
        Py_DECREF(arr);
        goto done;
    }
    result = (PyObject *)arr;
done:
    Py_XDECREF(host);
    Py_XDECREF(src);
    return result;
}

PyMethodDef cmpy_array_methods[] = {
    {"to_device", (PyCFunction)(void (*)(void))to_device,
     METH_FASTCALL | METH_KEYWORDS, to_device_doc},
    {"device_array", (PyCFunction)(void (*)(void))device_array,
     METH_FASTCALL | METH_KEYWORDS, device_array_doc},
    {NULL, NULL, 0, NULL},
};

int
cmpy_array_type_init(PyObject *module, cmpy_state *st)
{
    st->DeviceNDArrayBaseType =
        PyType_FromModuleAndSpec(module, &base_spec, NULL);
    if (st->DeviceNDArrayBaseType == NULL ||
        PyModule_AddObjectRef(module, "DeviceNDArrayBase",
                              st->DeviceNDArrayBaseType) < 0) {
        return -1;
    }
    st->DeviceNDArrayType = PyType_FromModuleAndSpec(
        module, &array_spec, st->DeviceNDArrayBaseType);
    if (st->DeviceNDArrayType == NULL ||
        cmpy_record_type_init(module, st) < 0) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "DeviceNDArray",
                                 st->DeviceNDArrayType);
}
