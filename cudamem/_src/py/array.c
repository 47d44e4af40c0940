/* array.c (py/): DeviceNDArrayBase and DeviceNDArray, numba's device
 * array: the object (made over new memory, over given memory, or as a view
 * of another array), its slots, attributes and method table, and numba's
 * DeviceNDArray(...) constructor. Its neighbours: layout math is
 * arraylayout.c's, the CAI export arraycai.c's, the reprs arrayrepr.c's,
 * views arrayview.c's, copies and to_device / device_array arraycopy.c's,
 * DLPack arraydlpack.c's; memory is the gpu_data MemoryPointer's. */
#include "array.h"

#include "device.h"
#include "stream.h"

/* ------------------------------------------------------------------------
 * Making arrays: over new memory, over given memory, as views. */

/* An array object of `type` over `mem` (a MemoryPointer, reference
 * stolen). */
static cmpy_DeviceNDArray *
array_make(PyObject *type, PyObject *mem, CUdeviceptr ptr, int ndim,
           const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t size,
           PyArray_Descr *dtype, PyObject *stream_obj,
           const cmpy_stream_ref *ref)
{
    Py_ssize_t itemsize = PyDataType_ELSIZE(dtype);
    cmpy_state *st = cmpy_state_of((PyTypeObject *)type);
    cmpy_DeviceNDArray *self;

    /* tp_alloc zeroes (a Python subclass's __dict__ slot too) and
     * tracks; every field it leaves NULL is safe to traverse. A kept
     * array is made the same way. */
    if (ndim == 1 && st != NULL && type == st->DeviceNDArrayType &&
        st->narray_cache > 0) {
        self = (cmpy_DeviceNDArray *)st->array_cache[--st->narray_cache];
        memset(self, 0,
               (size_t)(((PyTypeObject *)type)->tp_basicsize +
                        2 * ((PyTypeObject *)type)->tp_itemsize));
        (void)PyObject_InitVar((PyVarObject *)self, (PyTypeObject *)type, 2);
        PyObject_GC_Track(self);
    }
    else {
        self = (cmpy_DeviceNDArray *)((PyTypeObject *)type)
                   ->tp_alloc((PyTypeObject *)type, 2 * (Py_ssize_t)ndim);
        if (self == NULL) {
            Py_DECREF(mem);
            return NULL;
        }
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
    self->flags = cmpy_layout_flags(ndim, shape, strides, itemsize);
    /* Small ints are preallocated: PyLong_FromLong(0) cannot fail. */
    self->stream = stream_obj != NULL ? Py_NewRef(stream_obj)
                                      : PyLong_FromLong(0);
    self->stream_handle = ref->handle;
    self->stream_async = ref->async;
    self->stream_owned = ref->owned;
    return self;
}

/* A new array on dev over new memory. */
cmpy_DeviceNDArray *
cmpy_array_alloc(cmpy_state *st, PyObject *type, cm_device *dev, int ndim,
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
extent_view(cmpy_state *st, cmpy_MemoryPointer *mp, CUdeviceptr ptr, int ndim,
            const Py_ssize_t *shape, const Py_ssize_t *strides,
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
    PyObject *mem = extent_view(st, base->gpu_data, ptr, ndim, shape, strides,
                                dtype, &size);

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

/* ------------------------------------------------------------------------
 * The slots every array type shares, and empty arrays like another. */

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

/* The dealloc of every array type: a heap type made from a spec without
 * one would get subtype_dealloc, a generic walk for Python subclasses'
 * slots, dicts and finalizers that arrays pay on every release. */
void
cmpy_array_dealloc(PyObject *op)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    PyTypeObject *type = Py_TYPE(self);
    cmpy_state *st = cmpy_state_of(type);

    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    cmpy_array_clear((PyObject *)self);
    /* Kept for the next 1-d array (the exact type only: a subclass's
     * size and slots differ; none once the module is cleared). */
    if (st != NULL && type == (PyTypeObject *)st->DeviceNDArrayType &&
        Py_SIZE(self) == 2 && st->narray_cache < CMPY_CACHE_USED) {
        st->array_cache[st->narray_cache++] = op;
    }
    else {
        type->tp_free(self);
    }
    Py_DECREF(type);
}

cmpy_DeviceNDArray *
cmpy_array_empty(cmpy_state *st, cmpy_DeviceNDArray *like, char order)
{
    Py_ssize_t strides[NPY_MAXDIMS];
    cmpy_stream_ref ref = {like->stream_handle, like->stream_async, NULL,
                           like->stream_owned};

    cmpy_contiguous_strides(CMPY_NDIM(like), CMPY_SHAPE(like),
                            PyDataType_ELSIZE(like->dtype), order, strides);
    return cmpy_array_alloc(
        st, st->DeviceNDArrayType, like->gpu_data->mem->dev, CMPY_NDIM(like),
        CMPY_SHAPE(like), strides, like->dtype, like->stream, &ref);
}

/* ------------------------------------------------------------------------
 * Methods. */

PyDoc_STRVAR(is_c_contiguous_doc, "is_c_contiguous($self)\n--\n\n"
                                  "Whether the array is C-contiguous "
                                  "(NumPy's rule).");

static PyObject *
array_is_c_contiguous(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(((cmpy_DeviceNDArray *)op)->flags &
                           NPY_ARRAY_C_CONTIGUOUS);
}

PyDoc_STRVAR(is_f_contiguous_doc, "is_f_contiguous($self)\n--\n\n"
                                  "Whether the array is "
                                  "Fortran-contiguous (NumPy's rule).");

static PyObject *
array_is_f_contiguous(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(((cmpy_DeviceNDArray *)op)->flags &
                           NPY_ARRAY_F_CONTIGUOUS);
}

#define FASTKW(fn)                                                            \
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
PyDoc_STRVAR(bind_doc, "bind($self, stream=0)\n--\n\n"
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
    value = host != NULL && PyObject_TypeCheck(
                                op, (PyTypeObject *)st->DeviceRecordType)
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
static PyMethodDef base_methods[] = {
    {"copy_to_host", FASTKW(cmpy_array_copy_to_host),
     cmpy_array_copy_to_host_doc},
    {"copy_to_device", FASTKW(cmpy_array_copy_to_device),
     cmpy_array_copy_to_device_doc},
    {"bind", FASTKW(cmpy_array_bind), bind_doc},
    {"__reduce_ex__", array_reduce_ex, METH_O, reduce_ex_doc},
    {"__copy__", array_copy_here, METH_NOARGS, copy_doc},
    {"__deepcopy__", array_deepcopy, METH_O, deepcopy_doc},
    {"_repr_html_", cmpy_array_repr_html, METH_NOARGS,
     cmpy_array_repr_html_doc},
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

/* ------------------------------------------------------------------------
 * Attributes. */

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
    return Py_BuildValue(
        "{sOsO}", "C_CONTIGUOUS",
        self->flags & NPY_ARRAY_C_CONTIGUOUS ? Py_True : Py_False,
        "F_CONTIGUOUS",
        self->flags & NPY_ARRAY_F_CONTIGUOUS ? Py_True : Py_False);
}

static PyObject *
get_device_ctypes_pointer(cmpy_DeviceNDArray *self, void *Py_UNUSED(c))
{
    return cmpy_c_void_p((PyObject *)self, (unsigned long long)self->ptr);
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
    {"__cuda_array_interface__", cmpy_array_get_cai, NULL,
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

/* ------------------------------------------------------------------------
 * The types, and numba's DeviceNDArray(...) constructor. */

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

PyDoc_STRVAR(base_doc,
             "DeviceNDArrayBase\n\n"
             "What device arrays and records share (numba's "
             "DeviceNDArrayBase): layout\nattributes, copies to and from "
             "the host, the CUDA Array Interface.\nIts memory is freed "
             "through the context's pending deallocations when\nthe last "
             "reference goes.");

static PyType_Slot base_slots[] = {
    {Py_tp_doc, (void *)base_doc},         {Py_tp_dealloc, cmpy_array_dealloc},
    {Py_tp_traverse, cmpy_array_traverse}, {Py_tp_clear, cmpy_array_clear},
    {Py_tp_repr, cmpy_array_repr},         {Py_tp_methods, base_methods},
    {Py_tp_getset, array_getset},          {Py_tp_members, array_members},
    {Py_bf_getbuffer, refuse_buffer},      {0, NULL},
};

static PyType_Spec base_spec = {
    .name = "cudamem.DeviceNDArrayBase",
    .basicsize = offsetof(cmpy_DeviceNDArray, dims),
    .itemsize = sizeof(Py_ssize_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = base_slots,
};

static PyObject *array_new(PyTypeObject *type, PyObject *args, PyObject *kwds);

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
    {Py_tp_dealloc, cmpy_array_dealloc},
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
        cmpy_parse_layout(st, shape_arg, dtype_arg, strides_arg, NULL, &ndim,
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
        result = (PyObject *)cmpy_array_alloc(
            st, (PyObject *)type, dev, ndim, shape, strides, dtype,
            cmpy_kept_stream(stream, &ref), &ref);
    }
    /* The extent starts at gpu_data's pointer, as array_alloc lays it. */
    else if (cmpy_layout_extent(ndim, shape, strides, PyDataType_ELSIZE(dtype),
                                &size, &low, &high) == 0) {
        result = (PyObject *)cmpy_array_wrap(
            (PyObject *)type, Py_NewRef(gpu_data), mp->ptr - (CUdeviceptr)low,
            ndim, shape, strides, dtype, cmpy_kept_stream(stream, &ref), &ref);
    }
done:
    Py_DECREF(dtype);
    return result;
}

static PyObject *
array_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"shape",  "strides",  "dtype",
                            "stream", "gpu_data", NULL};
    PyObject *shape, *strides, *dtype, *stream = NULL, *gpu_data = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OO:DeviceNDArray", names,
                                     &shape, &strides, &dtype, &stream,
                                     &gpu_data)) {
        return NULL;
    }
    return cmpy_array_construct(type, shape, strides, dtype, stream, gpu_data,
                                0);
}

int
cmpy_array_type_init(PyObject *module, cmpy_state *st)
{
    st->DeviceNDArrayBaseType = PyType_FromModuleAndSpec(module, &base_spec,
                                                         NULL);
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
