/* arraycai.c (py/): a device array's CUDA Array Interface (v3) export,
 * its __cuda_array_interface__, with the stream ordering that makes the
 * exported stream safe to use. The import is cai.c's. */
#include "array.h"

#include "../core/memory.h"
#include "stream.h"

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
    if (ordered > 0 && cmpy_stream_wait(st, m->dev, CU_STREAM_LEGACY) < 0) {
        return NULL;
    }
    return Py_NewRef(Py_None);
}

/* CAI v3 (export). `stream` is None for the default stream's handle 0, as
 * the spec requires (numba emits 0); strides are None when C-contiguous.
 * Work queued on the memory on other streams is ordered into the exported
 * stream first (export_stream). */
PyObject *
cmpy_array_get_cai(PyObject *op, void *Py_UNUSED(closure))
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state((PyObject *)self);
    PyObject *shape = NULL, *strides = NULL, *typestr = NULL, *stream = NULL;
    PyObject *descr = NULL, *cai = NULL;

    if (cmpy_array_check_alive(st, self) < 0) {
        return NULL;
    }
    shape = cmpy_shape_tuple(CMPY_NDIM(self), CMPY_SHAPE(self));
    strides = self->flags & NPY_ARRAY_C_CONTIGUOUS
                  ? Py_NewRef(Py_None)
                  : cmpy_shape_tuple(CMPY_NDIM(self), CMPY_STRIDES(self));
    typestr = PyObject_GetAttrString((PyObject *)self->dtype, "str");
    stream = export_stream(st, self);
    if (shape == NULL || strides == NULL || typestr == NULL ||
        stream == NULL) {
        goto done;
    }
    cai = Py_BuildValue("{sOsOs(KO)sOsOsi}", "shape", shape, "strides",
                        strides, "data", (unsigned long long)self->ptr,
                        self->gpu_data->mem->readonly ? Py_True : Py_False,
                        "typestr", typestr, "stream", stream, "version", 3);
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
