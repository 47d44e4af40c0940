/* array.h (py/): the DeviceNDArray object and what the array files
 * (array*.c) share. Layout facts (shape, strides, contiguity, sizes) are
 * computed once at creation; the memory is its gpu_data's. */
#ifndef CMPY_ARRAY_H
#define CMPY_ARRAY_H

#include "npy.h"

#include "memory.h"
#include "stream.h"

typedef struct cmpy_DeviceNDArray {
    PyObject_VAR_HEAD /* ob_size: 2 * ndim */
    cmpy_MemoryPointer *gpu_data;
    CUdeviceptr ptr; /* the first element */
    PyArray_Descr *dtype;
    Py_ssize_t size;        /* elements */
    Py_ssize_t nbytes;      /* size * itemsize */
    int flags;              /* NPY_ARRAY_{C,F}_CONTIGUOUS */
    PyObject *stream;       /* the stream= it was made with */
    CUstream stream_handle; /* ... parsed once */
    int stream_async;
    int stream_owned;
    PyObject *weakreflist;
    Py_ssize_t dims[1]; /* shape[ndim], then strides[ndim] */
} cmpy_DeviceNDArray;

#define CMPY_NDIM(a) ((int)(Py_SIZE(a) / 2))
#define CMPY_SHAPE(a) ((a)->dims)
#define CMPY_STRIDES(a) ((a)->dims + CMPY_NDIM(a))
/* Both contiguity flags: what `flags` holds. */
#define CMPY_CONTIGUOUS (NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_F_CONTIGUOUS)

/* array.c: the type and its objects. */
/* A new array of `type` on dev over new memory holding the layout's
 * extent, bound to `stream_obj` as parsed into `ref`. */
cmpy_DeviceNDArray *
cmpy_array_alloc(cmpy_state *st, PyObject *type, cm_device *dev, int ndim,
                 const Py_ssize_t *shape, const Py_ssize_t *strides,
                 PyArray_Descr *dtype, PyObject *stream_obj,
                 const cmpy_stream_ref *ref);

/* A new uninitialized array like `like` (device, shape, dtype, stream),
 * contiguous in `order`. */
cmpy_DeviceNDArray *cmpy_array_empty(cmpy_state *st, cmpy_DeviceNDArray *like,
                                     char order);

/* A view of `base`'s memory: the given layout with its first element at
 * `ptr` (inside base's allocation), base's stream. New reference. */
cmpy_DeviceNDArray *cmpy_array_view(cmpy_state *st, cmpy_DeviceNDArray *base,
                                    int ndim, const Py_ssize_t *shape,
                                    const Py_ssize_t *strides, CUdeviceptr ptr,
                                    PyArray_Descr *dtype);

/* The same as cmpy_array_view, as an object of `type` (DeviceNDArray or
 * DeviceRecord). */
cmpy_DeviceNDArray *cmpy_array_view_as(cmpy_state *st, PyObject *type,
                                       cmpy_DeviceNDArray *base, int ndim,
                                       const Py_ssize_t *shape,
                                       const Py_ssize_t *strides,
                                       CUdeviceptr ptr, PyArray_Descr *dtype);

/* An array of `type` over `mem` (a MemoryPointer, reference stolen, also
 * on failure) with its first element at `ptr`, bound to `stream_obj`
 * (NULL: 0) as parsed into `ref`. ValueError when the layout overflows or
 * reaches outside mem. */
cmpy_DeviceNDArray *cmpy_array_wrap(PyObject *type, PyObject *mem,
                                    CUdeviceptr ptr, int ndim,
                                    const Py_ssize_t *shape,
                                    const Py_ssize_t *strides,
                                    PyArray_Descr *dtype, PyObject *stream_obj,
                                    const cmpy_stream_ref *ref);

/* A DeviceNDArray (the device side of a host array over memory that both
 * can reach: managed, mapped) with the given layout and its first element
 * at device address `ptr` inside `owner`'s memory, bound to `stream_obj`
 * as parsed into `ref`. Its gpu_data is a view of owner covering exactly
 * the elements. New reference, or NULL with ValueError when the layout
 * reaches outside owner. */
cmpy_DeviceNDArray *cmpy_array_over(cmpy_state *st, cmpy_MemoryPointer *owner,
                                    CUdeviceptr ptr, int ndim,
                                    const Py_ssize_t *shape,
                                    const Py_ssize_t *strides,
                                    PyArray_Descr *dtype, PyObject *stream_obj,
                                    const cmpy_stream_ref *ref);

/* numba's DeviceNDArray(shape, strides, dtype, stream, gpu_data) and,
 * with `record` (shape and strides ()), DeviceRecord(dtype, stream,
 * gpu_data): an object of `type` over new memory from the current device's
 * manager, or over gpu_data's (a MemoryPointer holding the extent from its
 * pointer on). stream and gpu_data may be NULL. New reference. */
PyObject *cmpy_array_construct(PyTypeObject *type, PyObject *shape_arg,
                               PyObject *strides_arg, PyObject *dtype_arg,
                               PyObject *stream, PyObject *gpu_data,
                               int record);

/* Whether obj is a cudamem device array or record (DeviceNDArrayBase). */
static inline int
cmpy_is_array(cmpy_state *st, PyObject *obj)
{
    return PyObject_TypeCheck(obj, (PyTypeObject *)st->DeviceNDArrayBaseType);
}

/* The `stream` object a new array keeps from a stream= argument `arg`
 * parsed into `ref`: None counts as 0 (NULL). */
static inline PyObject *
cmpy_kept_stream(PyObject *arg, const cmpy_stream_ref *ref)
{
    return ref->obj != NULL ? arg : NULL;
}

/* arraylayout.c: shared layout math. */
/* NumPy's contiguity rules (CMPY_CONTIGUOUS bits): dimensions of length 1
 * do not count, and an empty array is both C and F contiguous. ndim is an
 * array's, 0 to NPY_MAXDIMS, with as many shape and strides. */
int cmpy_layout_flags(int ndim, const Py_ssize_t *shape,
                      const Py_ssize_t *strides, Py_ssize_t itemsize);
/* The extent of a layout: its elements, and the lowest and one past the
 * highest byte offset any element touches, relative to the first element
 * (both 0 when there are none). ValueError naming the layout when it
 * overflows. */
int cmpy_layout_extent(int ndim, const Py_ssize_t *shape,
                       const Py_ssize_t *strides, Py_ssize_t itemsize,
                       Py_ssize_t *size, Py_ssize_t *low, Py_ssize_t *high);
int cmpy_check_dtype(PyArray_Descr *dtype);
/* NumPy's rule for a sub-array dtype (('f8', (2,))), which no array has:
 * its shape is appended to the *ndim dims of shape, and *dtype (a
 * reference, replaced) becomes its base. With `strides` (already holding
 * *ndim), the new axes get C-contiguous strides over the base. Nothing
 * for any other dtype. 0, or -1 with ValueError past NPY_MAXDIMS. */
int cmpy_expand_subarray(PyArray_Descr **dtype, int *ndim, Py_ssize_t *shape,
                         Py_ssize_t *strides);
int cmpy_parse_ints(PyObject *arg, const char *what, Py_ssize_t *out, int *n);
void cmpy_contiguous_strides(int ndim, const Py_ssize_t *shape,
                             Py_ssize_t itemsize, char order,
                             Py_ssize_t *strides);
PyObject *cmpy_shape_tuple(int ndim, const Py_ssize_t *dims);
/* numpy.empty's layout arguments, as device_array() and its kin take
 * them: shape, dtype (NULL or None: float64), strides (NULL or None:
 * contiguous in order), order (NULL or None: 'C'); a sub-array dtype is
 * expanded as cmpy_expand_subarray says, strides or order then covering
 * the whole shape. *dtype is a new reference. 0, or -1 with TypeError /
 * ValueError naming the value. */
int cmpy_parse_layout(cmpy_state *st, PyObject *shape_arg, PyObject *dtype_arg,
                      PyObject *strides_arg, PyObject *order_arg, int *ndim,
                      Py_ssize_t *shape, Py_ssize_t *strides,
                      PyArray_Descr **dtype);

/* arraycai.c: __cuda_array_interface__. */
PyObject *cmpy_array_get_cai(PyObject *op, void *closure);

/* arrayrepr.c: repr() and _repr_html_. */
PyObject *cmpy_array_repr(PyObject *op);
PyObject *cmpy_array_repr_html(PyObject *op, PyObject *ignored);
extern const char cmpy_array_repr_html_doc[];

/* arrayview.c: views. */
PyObject *cmpy_array_getitem(PyObject *op, PyObject *key);
/* The sequence protocol's d[i], and iteration over the first axis. */
PyObject *cmpy_array_item(PyObject *op, Py_ssize_t i);
PyObject *cmpy_array_iter(PyObject *op);
/* op (an array or record), or a view of all of it bound to `stream` when
 * that is given and true: numba's rule for getitem/setitem(stream=), where
 * 0 and None mean the object's own stream. New reference. */
PyObject *cmpy_array_on_stream(cmpy_state *st, PyObject *op, PyObject *stream);
PyObject *cmpy_array_getitem_method(PyObject *, PyObject *const *, Py_ssize_t,
                                    PyObject *);
PyObject *cmpy_array_setitem_method(PyObject *, PyObject *const *, Py_ssize_t,
                                    PyObject *);
extern const char cmpy_array_getitem_doc[], cmpy_array_setitem_doc[];
/* The element of `dtype` at ptr (in self's memory) read to the host after
 * the work queued before it on self's stream: a NumPy scalar. */
PyObject *cmpy_array_read_scalar(cmpy_state *st, cmpy_DeviceNDArray *self,
                                 CUdeviceptr ptr, PyArray_Descr *dtype);
int cmpy_array_index_layout(cmpy_DeviceNDArray *self, PyObject *key, int *ndim,
                            Py_ssize_t *shape, Py_ssize_t *strides,
                            CUdeviceptr *ptr);
PyObject *cmpy_array_reshape(PyObject *, PyObject *const *, Py_ssize_t,
                             PyObject *);
PyObject *cmpy_array_ravel(PyObject *, PyObject *const *, Py_ssize_t,
                           PyObject *);
PyObject *cmpy_array_squeeze(PyObject *, PyObject *const *, Py_ssize_t,
                             PyObject *);
PyObject *cmpy_array_transpose(PyObject *, PyObject *const *, Py_ssize_t,
                               PyObject *);
PyObject *cmpy_array_get_T(PyObject *op, void *closure);
PyObject *cmpy_array_view_dtype(PyObject *, PyObject *const *, Py_ssize_t,
                                PyObject *);
PyObject *cmpy_array_split(PyObject *, PyObject *const *, Py_ssize_t,
                           PyObject *);
PyObject *cmpy_array_bind(PyObject *, PyObject *const *, Py_ssize_t,
                          PyObject *);

/* arraycopy.c: copies, and the module's to_device / device_array. */
int cmpy_array_check_alive(cmpy_state *st, cmpy_DeviceNDArray *self);
/* A new host array with self's elements (self's layout when contiguous,
 * else C order), complete on return: queued on self's stream, then
 * waited for. */
PyObject *cmpy_array_to_host(cmpy_state *st, cmpy_DeviceNDArray *self);
/* Sets arr's stream from a stream= argument (NULL: leave it); steals arr,
 * returns it or NULL. */
PyObject *cmpy_array_rebind(cmpy_state *st, cmpy_DeviceNDArray *arr,
                            PyObject *stream);
/* numba's copy_to_device rules, into the whole of self. */
int cmpy_array_copy_from(cmpy_state *st, cmpy_DeviceNDArray *self,
                         PyObject *obj, const struct cmpy_stream_ref *ref);
/* A contiguous copy in `order`, then viewed with (nd, dims) unless dims is
 * NULL. */
PyObject *cmpy_array_copy_as(cmpy_state *st, cmpy_DeviceNDArray *self,
                             char order, int nd, const Py_ssize_t *dims);
int cmpy_array_setitem(PyObject *op, PyObject *key, PyObject *value);
PyObject *cmpy_array_copy_to_host(PyObject *, PyObject *const *, Py_ssize_t,
                                  PyObject *);
PyObject *cmpy_array_copy_to_device(PyObject *, PyObject *const *, Py_ssize_t,
                                    PyObject *);
PyObject *cmpy_array_fill(PyObject *, PyObject *const *, Py_ssize_t,
                          PyObject *);
PyObject *cmpy_array_copy(PyObject *, PyObject *const *, Py_ssize_t,
                          PyObject *);
PyObject *cmpy_array_array(PyObject *, PyObject *const *, Py_ssize_t,
                           PyObject *);
extern const char cmpy_array_copy_to_host_doc[],
    cmpy_array_copy_to_device_doc[], cmpy_array_fill_doc[],
    cmpy_array_copy_doc[], cmpy_array_array_doc[];

/* ipc.c: DeviceNDArray.get_ipc_handle(). */
PyObject *cmpy_array_get_ipc_handle(PyObject *, PyObject *);
extern const char cmpy_array_get_ipc_handle_doc[];

/* arraydlpack.c: __dlpack__ and __dlpack_device__. */
PyObject *cmpy_array_dlpack(PyObject *, PyObject *const *, Py_ssize_t,
                            PyObject *);
PyObject *cmpy_array_dlpack_device(PyObject *, PyObject *);
extern const char cmpy_array_dlpack_doc[], cmpy_array_dlpack_device_doc[];

/* The slots every array type shares. */
int cmpy_array_traverse(PyObject *op, visitproc visit, void *arg);
int cmpy_array_clear(PyObject *op);
void cmpy_array_dealloc(PyObject *op);

/* record.c: DeviceRecord, made after DeviceNDArrayBase. */
int cmpy_record_type_init(PyObject *module, cmpy_state *st);

#endif
