/* arraycopy.c (py/): every DeviceNDArray operation that moves elements:
 * copy_to_host, copy_to_device, assignment, fill, copy, the copying
 * reshape and __array__, and the module's constructors that fill a new
 * array (to_device, and device_array beside it). It checks shapes, dtypes
 * and streams and hands layouts to core's copy engine (core/copy.h), which
 * decides how. */
#include "array.h"
#include "hostarray.h"
#include "hostbuf.h"

#include "../core/copy.h"
#include "../core/event.h"
#include "../core/hostpool.h"
#include "../core/stream.h"
#include "cai.h"
#include "device.h"
#include "stream.h"

/* ------------------------------------------------------------------------
 * Checks and streams. */

/* PyArray_FROM_O(obj) (new reference): an ndarray, a subclass too, is
 * returned as it is, without the dtype and shape discovery that costs
 * half of a small copy's own instructions. */
static PyArrayObject *
as_ndarray(PyObject *obj)
{
    return PyArray_Check(obj) ? (PyArrayObject *)Py_NewRef(obj)
                              : (PyArrayObject *)PyArray_FROM_O(obj);
}

int
cmpy_array_check_alive(cmpy_state *st, cmpy_DeviceNDArray *self)
{
    cm_error err;

    if (cm_mem_check(self->gpu_data->mem, &err) < 0) {
        PyObject *shape;

        /* Memory freed with free() says so itself. */
        if (err.kind != CM_ERR_STATE || self->gpu_data->mem->released ||
            (shape = cmpy_shape_tuple(CMPY_NDIM(self), CMPY_SHAPE(self))) ==
                NULL) {
            cmpy_raise(st, &err);
            return -1;
        }
        /* Name the array: the context's words would not say which. */
        PyErr_Format(
            st->CudaDriverError,
            "this device %s of shape %R and dtype %S on device %d "
            "cannot be used: the context was reset or closed since "
            "it was made, and its memory is gone",
            PyObject_TypeCheck(self, (PyTypeObject *)st->DeviceRecordType)
                ? "record"
                : "array",
            shape, (PyObject *)self->dtype, self->gpu_data->mem->dev->ordinal);
        Py_DECREF(shape);
        return -1;
    }
    return 0;
}

/* Writes into read-only memory (a producer's flag, or host memory that
 * is read-only) are refused, through every array and view over the
 * record, before anything is queued. */
static int
check_writable(cmpy_DeviceNDArray *self)
{
    int readonly = self->gpu_data->mem->readonly;
    PyObject *shape;

    if (!readonly) {
        return 0;
    }
    shape = cmpy_shape_tuple(CMPY_NDIM(self), CMPY_SHAPE(self));
    if (shape != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "assignment destination is read-only: this device "
                     "array of shape %R and dtype %S on device %d is over "
                     "memory %s",
                     shape, (PyObject *)self->dtype,
                     self->gpu_data->mem->dev->ordinal,
                     cmpy_memory_readonly_why(readonly));
        Py_DECREF(shape);
    }
    return -1;
}

/* The stream an operation uses: its stream= argument, or the array's own
 * when that is absent or 0 (numba's rule). */
static int
operation_stream(cmpy_state *st, cmpy_DeviceNDArray *self, PyObject *arg,
                 cmpy_stream_ref *ref)
{
    int overflow;

    /* AndOverflow: a huge int sets no exception here; the parser names it. */
    if (arg == NULL || arg == Py_None ||
        (PyLong_CheckExact(arg) &&
         PyLong_AsLongAndOverflow(arg, &overflow) == 0 && !overflow)) {
        ref->handle = self->stream_handle;
        ref->async = self->stream_async;
        ref->owned = self->stream_owned;
        ref->obj = NULL;
        return 0;
    }
    return cmpy_stream_arg(st, arg, self->gpu_data->mem->dev, ref);
}

PyObject *
cmpy_array_rebind(cmpy_state *st, cmpy_DeviceNDArray *arr, PyObject *stream)
{
    cmpy_stream_ref ref;

    if (arr == NULL || stream == NULL) {
        return (PyObject *)arr;
    }
    if (cmpy_stream_arg(st, stream, arr->gpu_data->mem->dev, &ref) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    Py_SETREF(arr->stream,
              ref.obj != NULL ? Py_NewRef(stream) : PyLong_FromLong(0));
    arr->stream_handle = ref.handle;
    arr->stream_async = ref.async;
    arr->stream_owned = ref.owned;
    return (PyObject *)arr;
}

/* ------------------------------------------------------------------------
 * Sides and runs of a copy for core's copy engine. */

/* a as a copy's side, with the host address of its memory where the host
 * sees it (so that core catches a host side sharing its bytes). */
static void
device_side(cmpy_state *st, cmpy_DeviceNDArray *a, cm_side *side)
{
    *side = (cm_side){.on_device = 1,
                      .ptr = a->ptr,
                      .host = cmpy_host_address(st, a->gpu_data, a->ptr),
                      .ndim = CMPY_NDIM(a),
                      .shape = CMPY_SHAPE(a),
                      .strides = CMPY_STRIDES(a)};
}

/* `strides` of a source of shape (nd, shape, src_strides) seen with the
 * destination's shape: dimensions of length 1 are dropped or added (numba's
 * squeezed-shape rule); the shapes are known to match. */
static void
squeezed_strides(int nd, const Py_ssize_t *shape,
                 const Py_ssize_t *src_strides, int dnd,
                 const Py_ssize_t *dshape, Py_ssize_t *strides)
{
    int i = 0;

    for (int j = 0; j < dnd; j++) {
        if (dshape[j] == 1) {
            strides[j] = 0;
            continue;
        }
        while (shape[i] == 1) {
            i++;
        }
        strides[j] = src_strides[i++];
    }
    (void)nd;
}

/* NumPy's broadcasting of a source layout to the destination's shape:
 * the strides, or -1 with ValueError in NumPy's words. */
static int
broadcast_strides(int nd, const Py_ssize_t *shape,
                  const Py_ssize_t *src_strides, int dnd,
                  const Py_ssize_t *dshape, Py_ssize_t *strides)
{
    /* NumPy drops a value's extra leading dimensions of length 1. */
    for (int i = 0; i < nd - dnd; i++) {
        if (shape[i] != 1) {
            goto fail;
        }
    }
    for (int j = dnd - 1, i = nd - 1; j >= 0; j--, i--) {
        if (i < 0 || shape[i] == 1) {
            strides[j] = 0;
        }
        else if (shape[i] == dshape[j]) {
            strides[j] = src_strides[i];
        }
        else {
            goto fail;
        }
    }
    return 0;
fail: {
    PyObject *a, *b;

    if (nd > dnd) {
        /* numba's words for a value of more dimensions. */
        PyErr_Format(PyExc_ValueError, "Can't assign %d-D array to %d-D self",
                     nd, dnd);
        return -1;
    }
    a = cmpy_shape_tuple(nd, shape);
    b = cmpy_shape_tuple(dnd, dshape);

    if (a != NULL && b != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "could not broadcast input array from shape %R into "
                     "shape %R",
                     a, b);
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    return -1;
}
}

/* Remembers that work on `ref`, a stream of dev (the copy's device, which
 * a source on another device does not share), is about to be queued on
 * a's memory, which the CAI export orders into the exported stream
 * (core's cm_mem_note_stream). Synchronous work is complete on return; work on a
 * stream cudamem does not own is noted after it is queued (note_done). */
static int
note_work(cmpy_state *st, cmpy_DeviceNDArray *a, cm_device *dev,
          const cmpy_stream_ref *ref)
{
    return cmpy_memory_note_work(st, a->gpu_data->mem, dev, ref);
}

/* After work on a foreign stream of a's device was queued on the memory
 * of a and of b (or NULL): memory.h's cmpy_memory_note_done. */
static int
note_done(cmpy_state *st, cmpy_DeviceNDArray *a, cmpy_DeviceNDArray *b,
          const cmpy_stream_ref *ref, int status)
{
    return cmpy_memory_note_done(st, a->gpu_data->mem,
                                 b != NULL ? b->gpu_data->mem : NULL,
                                 a->gpu_data->mem->dev, ref, status);
}

/* One copy through the engine: dst and src have dst's shape. */
static int
run_copy(cmpy_state *st, cm_device *dev, const cm_side *dst,
         const cm_side *src, size_t itemsize, const cmpy_stream_ref *ref)
{
    cm_error err;
    int rc;

    /* Even async copies can wait: a temporary waits for its stream. */
    Py_BEGIN_ALLOW_THREADS
    rc = cm_copy_array(dev, dst, src, itemsize, ref->handle, ref->async, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Between the host and the device. */

/* numba's check for copies between arrays: the same dtype, and the same
 * shape once dimensions of length 1 are dropped. */
static int
check_compatible(PyArray_Descr *dtype, int nd, const Py_ssize_t *shape,
                 PyArray_Descr *other_dtype, int ond,
                 const Py_ssize_t *other_shape)
{
    PyObject *a, *b;
    int i = 0, j = 0;

    if (!PyArray_EquivTypes(dtype, other_dtype)) {
        PyErr_Format(PyExc_TypeError, "incompatible dtype: %R vs. %R",
                     (PyObject *)dtype, (PyObject *)other_dtype);
        return -1;
    }
    for (;;) {
        while (i < nd && shape[i] == 1) {
            i++;
        }
        while (j < ond && other_shape[j] == 1) {
            j++;
        }
        if (i == nd || j == ond) {
            if (i == nd && j == ond) {
                return 0;
            }
            break;
        }
        if (shape[i++] != other_shape[j++]) {
            break;
        }
    }
    a = cmpy_shape_tuple(nd, shape);
    b = cmpy_shape_tuple(ond, other_shape);
    if (a != NULL && b != NULL) {
        PyErr_Format(PyExc_ValueError, "incompatible shape: %R vs. %R", a, b);
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    return -1;
}

/* The side of a copy that a host array is: device memory when it is a
 * view of dev's managed memory (the copy is then a device copy, and a
 * synchronous one is waited for), else host memory. */
static cm_side
host_side(cmpy_state *st, cm_device *dev, PyArrayObject *host, int ndim,
          const Py_ssize_t *shape, const Py_ssize_t *strides)
{
    int managed = cmpy_host_is_managed_on(st, host, dev);

    return (cm_side){
        .on_device = managed,
        .ptr = managed ? (CUdeviceptr)(uintptr_t)PyArray_DATA(host) : 0,
        .host = PyArray_DATA(host),
        .ndim = ndim,
        .shape = shape,
        .strides = strides};
}

/* Host array -> device layout (same dtype, squeezed-equal or broadcast
 * shapes already resolved into `strides`) in mp's memory. */
static int
host_to_device(cmpy_state *st, int ndim, const Py_ssize_t *shape,
               CUdeviceptr ptr, const Py_ssize_t *dstrides,
               cmpy_MemoryPointer *mp, PyArrayObject *host,
               const Py_ssize_t *hstrides, const cmpy_stream_ref *ref)
{
    cm_device *dev = mp->mem->dev;
    cm_side dst = {.on_device = 1,
                   .ptr = ptr,
                   .host = cmpy_host_address(st, mp, ptr),
                   .ndim = ndim,
                   .shape = shape,
                   .strides = dstrides};
    cm_side src = host_side(st, dev, host, ndim, shape, hstrides);

    /* A synchronous HtoD from it is complete on return: known so, the
     * copy need not ask the registry. */
    src.locked = !src.on_device && cmpy_host_is_locked(st, host);
    return run_copy(st, dev, &dst, &src, (size_t)PyArray_ITEMSIZE(host), ref);
}

/* Device array -> host array (compatible, checked). */
static int
device_to_host(cmpy_state *st, cmpy_DeviceNDArray *self, PyArrayObject *host,
               const cmpy_stream_ref *ref)
{
    Py_ssize_t hstrides[NPY_MAXDIMS];
    cm_side src, dst;

    if (note_work(st, self, self->gpu_data->mem->dev, ref) < 0) {
        return -1;
    }
    squeezed_strides(PyArray_NDIM(host), PyArray_DIMS(host),
                     PyArray_STRIDES(host), CMPY_NDIM(self), CMPY_SHAPE(self),
                     hstrides);
    device_side(st, self, &src);
    dst = host_side(st, self->gpu_data->mem->dev, host, CMPY_NDIM(self),
                    CMPY_SHAPE(self), hstrides);
    return note_done(st, self, NULL, ref,
                     run_copy(st, self->gpu_data->mem->dev, &dst, &src,
                              (size_t)PyDataType_ELSIZE(self->dtype), ref));
}

/* ------------------------------------------------------------------------
 * Between devices, and device to device. */

static int device_to_device(cmpy_state *st, cmpy_DeviceNDArray *self,
                            cmpy_DeviceNDArray *src,
                            const Py_ssize_t *sstrides,
                            const cmpy_stream_ref *ref);

/* Whether a layout is C-contiguous (dimensions of length 1 aside). */
static int
is_c_layout(int nd, const Py_ssize_t *shape, const Py_ssize_t *strides,
            Py_ssize_t itemsize)
{
    Py_ssize_t expect = itemsize;

    for (int i = nd - 1; i >= 0; i--) {
        if (shape[i] == 0) {
            return 1;
        }
        if (shape[i] != 1) {
            if (strides[i] != expect) {
                return 0;
            }
            expect *= shape[i];
        }
    }
    return 1;
}

/* n contiguous bytes from src_dev to dev through page-locked host memory
 * (DMA both ways; no driver staging of pageable memory): device to host,
 * synchronous, then host to device on `ref`. The buffer goes only once
 * the stream is done with it, even after an interrupted wait. It is the
 * host pool's, whether or not a device pool is on: page-locking a buffer
 * per copy would cost more than many a copy. */
static int
staged_through_host(cmpy_state *st, cm_device *dev, CUdeviceptr to,
                    cm_device *src_dev, CUdeviceptr from, size_t n,
                    const cmpy_stream_ref *ref)
{
    cm_error err, free_err;
    cm_host *h = NULL;
    int rc, freed;

    if (n == 0) {
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_hostpool_alloc(src_dev, n, &h, &err);
    if (rc == 0) {
        rc = cm_copy_dtoh(src_dev, h->ptr, from, n, NULL, 0, &err);
    }
    if (rc == 0) {
        rc = cm_copy_htod(dev, to, h->ptr, n, ref->handle, ref->async, &err);
    }
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    else if (ref->async) {
        rc = cmpy_stream_wait(st, dev, ref->handle);
    }
    if (h == NULL) {
        return rc;
    }
    Py_BEGIN_ALLOW_THREADS
    if (rc < 0 && ref->async) {
        (void)cm_stream_synchronize(dev, ref->handle, &free_err);
    }
    freed = cm_hostpool_free(h, &free_err);
    CMPY_END_ALLOW_THREADS
    if (freed < 0 && rc == 0) {
        cmpy_raise(st, &free_err);
        return -1;
    }
    if (freed < 0) {
        cmpy_warn_release(st, &free_err);
    }
    return rc;
}

/* src (another device, layout (self's shape, sstrides)) into self: one
 * contiguous transfer between C-ordered layouts, with a C-ordered
 * temporary on the side that is not one (filled, or emptied, by the
 * device-local engine); the transfer is one cuMemcpyPeer with `peer`,
 * else staged through page-locked host memory. The source side is
 * synchronous, so that the transfer follows it whatever the streams. */
static int
cross_device(cmpy_state *st, cmpy_DeviceNDArray *self, cmpy_DeviceNDArray *src,
             const Py_ssize_t *sstrides, const cmpy_stream_ref *ref, int peer)
{
    cmpy_stream_ref sync = {NULL, 0, NULL, 1};
    size_t itemsize = (size_t)PyDataType_ELSIZE(self->dtype);
    cmpy_DeviceNDArray *stmp = NULL, *dtmp = NULL;
    cm_device *dev = self->gpu_data->mem->dev;
    CUdeviceptr from = src->ptr, to = self->ptr;
    int nd = CMPY_NDIM(self), rc = -1;
    cm_error err;

    if (!is_c_layout(nd, CMPY_SHAPE(self), sstrides, (Py_ssize_t)itemsize)) {
        cmpy_DeviceNDArray *view = cmpy_array_view(
            st, src, nd, CMPY_SHAPE(self), sstrides, src->ptr, src->dtype);

        stmp = view != NULL ? cmpy_array_empty(st, view, 'C') : NULL;
        if (stmp == NULL ||
            device_to_device(st, stmp, view, sstrides, &sync) < 0) {
            Py_XDECREF(view);
            goto done;
        }
        Py_DECREF(view);
        from = stmp->ptr;
    }
    if (!(self->flags & NPY_ARRAY_C_CONTIGUOUS)) {
        if ((dtmp = cmpy_array_empty(st, self, 'C')) == NULL) {
            goto done;
        }
        to = dtmp->ptr;
    }
    if (!peer) {
        rc = staged_through_host(st, dev, to, src->gpu_data->mem->dev, from,
                                 (size_t)self->nbytes, ref);
    }
    else {
        cm_device *src_dev = src->gpu_data->mem->dev;

        Py_BEGIN_ALLOW_THREADS
        rc = cm_copy_peer(dev, to, src_dev, from, (size_t)self->nbytes,
                          ref->handle, ref->async, &err);
        /* Still reading the source on this device's stream: the source's
         * device's legacy default stream waits for it, which the source's
         * own device's work (blocking streams, frees) then follows, and
         * the source remembers that stream for its exports. */
        if (rc == 0 && ref->async) {
            rc = cm_event_order_across(dev, ref->handle, src_dev,
                                       CU_STREAM_LEGACY, &err);
        }
        if (rc == 0 && ref->async) {
            rc = cm_mem_note_stream(src->gpu_data->mem, src_dev,
                                    CU_STREAM_LEGACY, &err);
        }
        CMPY_END_ALLOW_THREADS
        if (rc < 0) {
            cmpy_raise(st, &err);
        }
    }
    if (rc < 0) {
        goto done;
    }
    if (dtmp != NULL) {
        rc = device_to_device(st, self, dtmp, CMPY_STRIDES(dtmp), ref);
        /* The temporary goes only after the stream is done with it. */
        if (rc == 0 && ref->async) {
            rc = cmpy_stream_wait(st, dev, ref->handle);
        }
    }
done:
    Py_XDECREF(stmp);
    Py_XDECREF(dtmp);
    return rc;
}

/* Whether the pageable host source of a queued copy may be gone before
 * the stream reads it: a conversion made here (a list, a scalar, a cast),
 * or the right-hand side of an assignment, typically an expression's
 * value that dies with the statement. Page-locked and managed memory is
 * the caller's, as are copy_to_device()'s arrays (numba's rule). */
static int
is_transient(cmpy_state *st, cmpy_DeviceNDArray *self, PyObject *obj,
             PyArrayObject *host, int assignment)
{
    if ((PyObject *)host != obj && PyArray_CHKFLAGS(host, NPY_ARRAY_OWNDATA)) {
        return 1;
    }
    return assignment &&
           !cmpy_host_is_managed_on(st, host, self->gpu_data->mem->dev) &&
           !((PyArray_ISCARRAY_RO(host) || PyArray_ISFARRAY_RO(host)) &&
             cm_host_locked(PyArray_DATA(host), (size_t)PyArray_NBYTES(host)));
}

/* Orders `into` (a stream of m's device) after the work remembered on m
 * on other streams (core's pending set, which CAI exports honour), which
 * the set then forgets. No driver call when nothing is remembered. */
static int
order_pending(cmpy_state *st, cm_mem *m, CUstream into)
{
    int ordered, rc;
    cm_error err;

    if (__atomic_load_n(&m->npending, __ATOMIC_RELAXED) == 0) {
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_mem_order_pending(m, into, &ordered, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    return rc;
}

/* Before a copy from src on another device into self on `ref`: the work
 * remembered on either side ordered first, whatever context issues the
 * copy. The source's goes into its device's legacy default stream, which
 * the transfer follows (a peer copy waits for it, a staged one reads on
 * it; cross_device remembers that stream again while the copy runs); the
 * destination's into the issuing stream, which this copy's own work then
 * stands for (note_work, note_done). */
static int
order_cross_device(cmpy_state *st, cmpy_DeviceNDArray *self,
                   cmpy_DeviceNDArray *src, const cmpy_stream_ref *ref)
{
    return order_pending(st, src->gpu_data->mem, CU_STREAM_LEGACY) < 0 ||
                   order_pending(st, self->gpu_data->mem,
                                 ref->async && ref->handle != NULL
                                     ? ref->handle
                                     : CU_STREAM_LEGACY) < 0
               ? -1
               : 0;
}

/* src (any device) -> self, with src's strides already resolved to self's
 * shape. Across devices: peer to peer where the devices can, else through
 * the host. */
static int
device_to_device(cmpy_state *st, cmpy_DeviceNDArray *self,
                 cmpy_DeviceNDArray *src, const Py_ssize_t *sstrides,
                 const cmpy_stream_ref *ref)
{
    cm_device *dev = self->gpu_data->mem->dev;
    int cross = src->gpu_data->mem->dev != dev, can, rc;
    cm_error err;
    cm_side d, s;

    /* Ordered before this copy's own work is remembered. A source on
     * another device does not remember `ref`, of this device: cross_device
     * leaves work on its own device's stream in its place. */
    if (cmpy_array_check_alive(st, src) < 0 ||
        (cross && order_cross_device(st, self, src, ref) < 0) ||
        note_work(st, self, dev, ref) < 0 ||
        (!cross && note_work(st, src, dev, ref) < 0)) {
        return -1;
    }
    device_side(st, self, &d);
    s = (cm_side){.on_device = 1,
                  .ptr = src->ptr,
                  .ndim = CMPY_NDIM(self),
                  .shape = CMPY_SHAPE(self),
                  .strides = sstrides};
    if (!cross) {
        rc = run_copy(st, dev, &d, &s, (size_t)PyDataType_ELSIZE(self->dtype),
                      ref);
    }
    else if (cm_peer_can_access(dev, src->gpu_data->mem->dev, &can, &err) <
             0) {
        cmpy_raise(st, &err);
        return -1;
    }
    else {
        rc = cross_device(st, self, src, sstrides, ref, can);
    }
    return note_done(st, self, cross ? NULL : src, ref, rc);
}

/* ------------------------------------------------------------------------
 * copy_to_host. */

/* A new host array for a copy of self: self's layout when it is
 * contiguous, else C order. */
static PyArrayObject *
new_host_like(cmpy_DeviceNDArray *self)
{
    int fortran = (self->flags & NPY_ARRAY_F_CONTIGUOUS) &&
                  !(self->flags & NPY_ARRAY_C_CONTIGUOUS);

    Py_INCREF(self->dtype);
    return (PyArrayObject *)PyArray_NewFromDescr(
        &PyArray_Type, self->dtype, CMPY_NDIM(self), CMPY_SHAPE(self),
        (self->flags & (NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_F_CONTIGUOUS)) &&
                !fortran
            ? CMPY_STRIDES(self)
            : NULL,
        NULL, fortran, NULL);
}

const char cmpy_array_copy_to_host_doc[] = PyDoc_STR(
    "copy_to_host($self, ary=None, stream=0)\n--\n\n"
    "Copies the array to the host: into a new array (this array's "
    "layout\nwhen it is contiguous, else C order), or into *ary*, a "
    "writeable\nndarray of the same dtype and of any layout whose "
    "shape is equal\nafter dropping dimensions of length 1; only "
    "its elements are\nwritten. With stream 0 (and no stream bound "
    "to the array) the copy\nis complete on return; with a stream "
    "it is queued there.");

/* A new host array with self's elements, copied on `ref` and complete on
 * return. */
static PyArrayObject *
complete_host_copy(cmpy_state *st, cmpy_DeviceNDArray *self,
                   const cmpy_stream_ref *ref)
{
    PyArrayObject *host = new_host_like(self);

    if (host == NULL) {
        return NULL;
    }
    if (device_to_host(st, self, host, ref) < 0 ||
        (ref->async &&
         cmpy_stream_wait(st, self->gpu_data->mem->dev, ref->handle) < 0)) {
        Py_DECREF(host);
        return NULL;
    }
    return host;
}

PyObject *
cmpy_array_to_host(cmpy_state *st, cmpy_DeviceNDArray *self)
{
    cmpy_stream_ref ref = {self->stream_handle, self->stream_async, NULL,
                           self->stream_owned};

    if (cmpy_array_check_alive(st, self) < 0) {
        return NULL;
    }
    return (PyObject *)complete_host_copy(st, self, &ref);
}

/* copy_to_host into a numpy.void (numba's tests copy records into one):
 * written in place, as NumPy's field assignment would. */
static PyObject *
copy_to_void(cmpy_state *st, cmpy_DeviceNDArray *self, PyObject *ary,
             cmpy_stream_ref *ref)
{
    PyVoidScalarObject *v = (PyVoidScalarObject *)ary;
    PyArrayObject *host;

    if (CMPY_NDIM(self) != 0 || !PyArray_EquivTypes(v->descr, self->dtype)) {
        PyErr_Format(PyExc_TypeError,
                     "copy_to_host() into a numpy.void of dtype %R needs a "
                     "record of that dtype, not %R",
                     (PyObject *)v->descr, (PyObject *)self->dtype);
        return NULL;
    }
    if (!(v->flags & NPY_ARRAY_WRITEABLE)) {
        PyErr_SetString(PyExc_ValueError,
                        "copy_to_host destination is read-only");
        return NULL;
    }
    if ((host = complete_host_copy(st, self, ref)) == NULL) {
        return NULL;
    }
    memcpy(v->obval, PyArray_DATA(host), (size_t)PyArray_ITEMSIZE(host));
    Py_DECREF(host);
    return Py_NewRef(ary);
}

PyObject *
cmpy_array_copy_to_host(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames)
{
    static const char *const names[] = {"ary", "stream"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    PyArrayObject *host;
    PyObject *argv[2];
    cmpy_stream_ref ref;

    if (cmpy_parse_args("copy_to_host", names, 2, 0, args, nargs, kwnames,
                        argv) < 0 ||
        operation_stream(st, self, argv[1], &ref) < 0 ||
        cmpy_array_check_alive(st, self) < 0) {
        return NULL;
    }
    if (argv[0] != NULL && PyArray_IsScalar(argv[0], Void)) {
        return copy_to_void(st, self, argv[0], &ref);
    }
    if (argv[0] != NULL && argv[0] != Py_None) {
        if (!PyArray_Check(argv[0])) {
            PyErr_Format(PyExc_TypeError,
                         "copy_to_host() needs a numpy.ndarray for ary, not "
                         "%.200s",
                         Py_TYPE(argv[0])->tp_name);
            return NULL;
        }
        host = (PyArrayObject *)argv[0];
        if (check_compatible(self->dtype, CMPY_NDIM(self), CMPY_SHAPE(self),
                             PyArray_DESCR(host), PyArray_NDIM(host),
                             PyArray_DIMS(host)) < 0 ||
            PyArray_FailUnlessWriteable(host, "copy_to_host destination") <
                0) {
            return NULL;
        }
        Py_INCREF(host);
    }
    else if ((host = new_host_like(self)) == NULL) {
        return NULL;
    }
    if (device_to_host(st, self, host, &ref) < 0) {
        Py_DECREF(host);
        return NULL;
    }
    return (PyObject *)host;
}

/* ------------------------------------------------------------------------
 * copy_to_device, assignment and fill. */

/* Copies `obj` (a device array, an object with __cuda_array_interface__
 * or anything NumPy takes) into the layout (ndim, shape, strides, ptr) of
 * `self`'s memory. `broadcast`: NumPy's assignment rules (broadcasting,
 * casting); otherwise numba's copy rules (same dtype, squeezed shapes). */
static int
copy_into(cmpy_state *st, cmpy_DeviceNDArray *self, int ndim,
          const Py_ssize_t *shape, const Py_ssize_t *strides, CUdeviceptr ptr,
          PyObject *obj, int broadcast, const cmpy_stream_ref *ref)
{
    /* An exact ndarray has no __cuda_array_interface__ to look for. */
    int plain = PyArray_CheckExact(obj);
    Py_ssize_t sstrides[NPY_MAXDIMS];
    PyArrayObject *host;
    int rc;

    if (check_writable(self) < 0) {
        return -1;
    }
    if (!plain && !cmpy_is_array(st, obj) &&
        (rc = cmpy_cai_check(st, obj)) != 0) {
        PyObject *imported = rc > 0 ? cmpy_cai_import(st, obj, 1, NULL) : NULL;

        if (imported == NULL) {
            return -1;
        }
        rc = copy_into(st, self, ndim, shape, strides, ptr, imported,
                       broadcast, ref);
        Py_DECREF(imported);
        return rc;
    }
    if (!plain && cmpy_is_array(st, obj)) {
        cmpy_DeviceNDArray *src = (cmpy_DeviceNDArray *)obj;
        cmpy_DeviceNDArray *dst;

        if (broadcast && !PyArray_EquivTypes(self->dtype, src->dtype)) {
            PyErr_Format(PyExc_TypeError,
                         "cannot assign a device array of dtype %R to one of "
                         "dtype %R: device-to-device copies do not cast",
                         (PyObject *)src->dtype, (PyObject *)self->dtype);
            return -1;
        }
        if (broadcast
                ? broadcast_strides(CMPY_NDIM(src), CMPY_SHAPE(src),
                                    CMPY_STRIDES(src), ndim, shape, sstrides)
                : check_compatible(self->dtype, ndim, shape, src->dtype,
                                   CMPY_NDIM(src), CMPY_SHAPE(src))) {
            return -1;
        }
        if (!broadcast) {
            squeezed_strides(CMPY_NDIM(src), CMPY_SHAPE(src),
                             CMPY_STRIDES(src), ndim, shape, sstrides);
        }
        dst = cmpy_array_view(st, self, ndim, shape, strides, ptr,
                              self->dtype);
        if (dst == NULL) {
            return -1;
        }
        rc = device_to_device(st, dst, src, sstrides, ref);
        Py_DECREF(dst);
        return rc;
    }
    if (broadcast) {
        Py_INCREF(self->dtype);
        host = (PyArrayObject *)PyArray_FromAny(obj, self->dtype, 0, 0,
                                                NPY_ARRAY_FORCECAST, NULL);
    }
    else {
        host = as_ndarray(obj);
    }
    if (host == NULL) {
        return -1;
    }
    if (ref->async && is_transient(st, self, obj, host, broadcast) &&
        cmpy_hostbuf_pin_temporary(st, self->gpu_data->mem->dev, &host) < 0) {
        Py_DECREF(host);
        return -1;
    }
    rc = broadcast
             ? broadcast_strides(PyArray_NDIM(host), PyArray_DIMS(host),
                                 PyArray_STRIDES(host), ndim, shape, sstrides)
             : check_compatible(self->dtype, ndim, shape, PyArray_DESCR(host),
                                PyArray_NDIM(host), PyArray_DIMS(host));
    if (rc == 0 && !broadcast) {
        squeezed_strides(PyArray_NDIM(host), PyArray_DIMS(host),
                         PyArray_STRIDES(host), ndim, shape, sstrides);
    }
    if (rc == 0) {
        rc = note_work(st, self, self->gpu_data->mem->dev, ref);
    }
    if (rc == 0) {
        rc = note_done(st, self, NULL, ref,
                       host_to_device(st, ndim, shape, ptr, strides,
                                      self->gpu_data, host, sstrides, ref));
    }
    Py_DECREF(host);
    return rc;
}

const char cmpy_array_copy_to_device_doc[] = PyDoc_STR(
    "copy_to_device($self, ary, stream=0)\n--\n\n"
    "Copies *ary* (a host array of any layout, a device array, or "
    "array-like)\ninto this array. The dtype must be the same and "
    "the shape equal after\ndropping dimensions of length 1. "
    "Synchronous on stream 0, queued on\na stream.");

PyObject *
cmpy_array_copy_to_device(PyObject *op, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"ary", "stream"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    PyObject *argv[2];
    cmpy_stream_ref ref;

    if (cmpy_parse_args("copy_to_device", names, 2, 1, args, nargs, kwnames,
                        argv) < 0 ||
        operation_stream(st, self, argv[1], &ref) < 0 ||
        cmpy_array_check_alive(st, self) < 0 ||
        copy_into(st, self, CMPY_NDIM(self), CMPY_SHAPE(self),
                  CMPY_STRIDES(self), self->ptr, argv[0], 0, &ref) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Fills a device layout with one value cast to the array's dtype. */
static int
fill_layout(cmpy_state *st, cmpy_DeviceNDArray *self, int ndim,
            const Py_ssize_t *shape, const Py_ssize_t *strides,
            CUdeviceptr ptr, PyArrayObject *value, const cmpy_stream_ref *ref)
{
    cm_side dst = {.on_device = 1,
                   .ptr = ptr,
                   .ndim = ndim,
                   .shape = shape,
                   .strides = strides};
    cm_device *dev = self->gpu_data->mem->dev;
    size_t itemsize = (size_t)PyDataType_ELSIZE(self->dtype);
    cm_error err;
    int rc;

    if (check_writable(self) < 0 ||
        note_work(st, self, self->gpu_data->mem->dev, ref) < 0) {
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_fill(dev, &dst, PyArray_DATA(value), itemsize, ref->handle,
                 ref->async, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return note_done(st, self, NULL, ref, 0);
}

/* A scalar (anything NumPy makes a 0-d array of) as the array's dtype,
 * or NULL without an exception when `obj` is not a scalar. */
static PyArrayObject *
as_scalar(cmpy_DeviceNDArray *self, PyObject *obj)
{
    PyArrayObject *value;

    if (!PyArray_IsScalar(obj, Generic) && !PyLong_Check(obj) &&
        !PyFloat_Check(obj) && !PyComplex_Check(obj) && !PyBool_Check(obj) &&
        !(PyArray_Check(obj) && PyArray_NDIM((PyArrayObject *)obj) == 0)) {
        return NULL;
    }
    Py_INCREF(self->dtype);
    value = (PyArrayObject *)PyArray_FromAny(
        obj, self->dtype, 0, 0, NPY_ARRAY_FORCECAST | NPY_ARRAY_C_CONTIGUOUS,
        NULL);
    return value;
}

int
cmpy_array_copy_from(cmpy_state *st, cmpy_DeviceNDArray *self, PyObject *obj,
                     const cmpy_stream_ref *ref)
{
    return copy_into(st, self, CMPY_NDIM(self), CMPY_SHAPE(self),
                     CMPY_STRIDES(self), self->ptr, obj, 0, ref);
}

int
cmpy_array_setitem(PyObject *op, PyObject *key, PyObject *value)
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    cmpy_stream_ref ref;
    PyArrayObject *scalar;
    CUdeviceptr ptr;
    int ndim, rc;

    if (value == NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "cannot delete device array elements");
        return -1;
    }
    if (cmpy_array_index_layout(self, key, &ndim, shape, strides, &ptr) < 0 ||
        operation_stream(st, self, NULL, &ref) < 0 ||
        cmpy_array_check_alive(st, self) < 0) {
        return -1;
    }
    scalar = as_scalar(self, value);
    if (scalar != NULL) {
        rc = fill_layout(st, self, ndim, shape, strides, ptr, scalar, &ref);
        Py_DECREF(scalar);
        return rc;
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    return copy_into(st, self, ndim, shape, strides, ptr, value, 1, &ref);
}

const char cmpy_array_fill_doc[] = PyDoc_STR(
    "fill($self, value, stream=0)\n--\n\n"
    "Sets every element to *value*, cast to the array's dtype "
    "(beyond\nnumba). A memset where the bytes allow.");

PyObject *
cmpy_array_fill(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"value", "stream"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    PyArrayObject *scalar;
    PyObject *argv[2];
    cmpy_stream_ref ref;
    int rc;

    if (cmpy_parse_args("fill", names, 2, 1, args, nargs, kwnames, argv) < 0 ||
        operation_stream(st, self, argv[1], &ref) < 0 ||
        cmpy_array_check_alive(st, self) < 0) {
        return NULL;
    }
    scalar = as_scalar(self, argv[0]);
    if (scalar == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "fill() needs a scalar, not %.200s",
                         Py_TYPE(argv[0])->tp_name);
        }
        return NULL;
    }
    rc = fill_layout(st, self, CMPY_NDIM(self), CMPY_SHAPE(self),
                     CMPY_STRIDES(self), self->ptr, scalar, &ref);
    Py_DECREF(scalar);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------
 * copy, the copying reshape, and __array__. */

PyObject *
cmpy_array_copy_as(cmpy_state *st, cmpy_DeviceNDArray *self, char order,
                   int nd, const Py_ssize_t *dims)
{
    Py_ssize_t strides[NPY_MAXDIMS];
    cmpy_DeviceNDArray *out, *shaped;
    cmpy_stream_ref ref = {self->stream_handle, self->stream_async, NULL,
                           self->stream_owned};

    if (cmpy_array_check_alive(st, self) < 0) {
        return NULL;
    }
    out = cmpy_array_empty(st, self, order);
    if (out == NULL ||
        device_to_device(st, out, self, CMPY_STRIDES(self), &ref) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    if (dims == NULL) {
        return (PyObject *)out;
    }
    cmpy_contiguous_strides(nd, dims, PyDataType_ELSIZE(self->dtype), order,
                            strides);
    shaped = cmpy_array_view(st, out, nd, dims, strides, out->ptr,
                             self->dtype);
    Py_DECREF(out);
    return (PyObject *)shaped;
}

const char cmpy_array_copy_doc[] = PyDoc_STR(
    "copy($self, order='C')\n--\n\n"
    "A new device array with the same elements, contiguous in "
    "*order*\n('C', 'F', 'A' or 'K'; beyond numba), on this array's "
    "stream.");

PyObject *
cmpy_array_copy(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"order"};
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    PyObject *argv[1];
    const char *s = "C";

    if (cmpy_parse_args("copy", names, 1, 0, args, nargs, kwnames, argv) < 0) {
        return NULL;
    }
    if (argv[0] != NULL && argv[0] != Py_None) {
        s = PyUnicode_Check(argv[0]) ? PyUnicode_AsUTF8(argv[0]) : NULL;
        if (s == NULL || strlen(s) != 1 || strchr("CFAK", s[0]) == NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "order must be 'C', 'F', 'A' or 'K', not %R",
                         argv[0]);
            return NULL;
        }
    }
    return cmpy_array_copy_as(
        cmpy_type_state(op), self,
        s[0] == 'F' || ((s[0] == 'A' || s[0] == 'K') &&
                        (self->flags & NPY_ARRAY_F_CONTIGUOUS) &&
                        !(self->flags & NPY_ARRAY_C_CONTIGUOUS))
            ? 'F'
            : 'C',
        0, NULL);
}

const char cmpy_array_array_doc[] = PyDoc_STR(
    "__array__($self, dtype=None, copy=None)\n--\n\n"
    "A host copy, for numpy.asarray(). copy=False raises "
    "ValueError: the\nelements live on the device.");

PyObject *
cmpy_array_array(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {"dtype", "copy"};
    PyArray_Descr *dtype = NULL;
    PyObject *argv[2], *host, *out;

    if (cmpy_parse_args("__array__", names, 2, 0, args, nargs, kwnames, argv) <
        0) {
        return NULL;
    }
    if (argv[1] == Py_False) {
        PyErr_SetString(PyExc_ValueError,
                        "`copy=False` is not supported: a device array "
                        "cannot be viewed as a host array without a copy");
        return NULL;
    }
    /* The dtype is checked before anything is copied. */
    if (!PyArray_DescrConverter2(argv[0] != NULL ? argv[0] : Py_None,
                                 &dtype)) {
        return NULL;
    }
    host = cmpy_array_to_host(cmpy_type_state(op), (cmpy_DeviceNDArray *)op);
    if (host == NULL || dtype == NULL) {
        Py_XDECREF(dtype);
        return host;
    }
    out = PyArray_CastToType((PyArrayObject *)host, dtype, 0);
    Py_DECREF(host);
    return out;
}

/* ------------------------------------------------------------------------
 * Constructors: to_device, device_array. */

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
    cm_ctx_guard guard;
    cm_device *dev;
    int ndim;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("device_array", names, 5, 1, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_parse_layout(st, argv[0], argv[1], argv[2], argv[3], &ndim, shape,
                          strides, &dtype) < 0) {
        return NULL;
    }
    if (cmpy_current_enter(st, &dev, &guard) < 0) {
        goto done;
    }
    if (cmpy_stream_arg(st, argv[4] != NULL ? argv[4] : Py_None, dev, &ref) ==
        0) {
        result = (PyObject *)cmpy_array_alloc(
            st, st->DeviceNDArrayType, dev, ndim, shape, strides, dtype,
            cmpy_kept_stream(argv[4], &ref), &ref);
    }
    if (cmpy_ctx_leave(st, &guard, result != NULL ? 0 : -1) < 0) {
        Py_CLEAR(result);
    }
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
    cm_ctx_guard guard;
    cm_device *dev;
    int copy = 1, entered = 0;

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
    else if ((host = as_ndarray(argv[0])) == NULL ||
             cmpy_check_dtype(PyArray_DESCR(host)) < 0) {
        goto done;
    }
    if (cmpy_current_enter(st, &dev, &guard) < 0) {
        goto done;
    }
    entered = 1;
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
        layout = src->flags & CMPY_CONTIGUOUS ? CMPY_STRIDES(src) : NULL;
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
        layout = PyArray_FLAGS(host) & CMPY_CONTIGUOUS ? PyArray_STRIDES(host)
                                                       : NULL;
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
    arr = cmpy_array_alloc(st, type, dev, ndim, shape, strides, dtype,
                           cmpy_kept_stream(stream_arg, &ref), &ref);
    if (arr == NULL) {
        goto done;
    }
    /* A list or scalar converted here must outlive a queued copy. */
    if (copy && host != NULL && (PyObject *)host != argv[0] && ref.async &&
        cmpy_hostbuf_pin_temporary(st, dev, &host) < 0) {
        Py_DECREF(arr);
        goto done;
    }
    if (copy && cmpy_array_copy_from(
                    st, arr, src != NULL ? (PyObject *)src : (PyObject *)host,
                    &ref) < 0) {
        Py_DECREF(arr);
        goto done;
    }
    result = (PyObject *)arr;
done:
    if (entered && cmpy_ctx_leave(st, &guard, result != NULL ? 0 : -1) < 0) {
        Py_CLEAR(result);
    }
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
