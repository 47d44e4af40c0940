/* arraydlpack.c: DeviceNDArray's DLPack export, __dlpack__ and
 * __dlpack_device__, with the stream handshake (an event, never a host
 * wait). Capsules and the argument parser are dlpack.c's. */
#include "array.h"
#include "dlpack.h"

#include "../core/event.h"

/* The device type: managed memory is kDLCUDAManaged, the rest kDLCUDA. */
static int
device_type(const cmpy_DeviceNDArray *self)
{
    return self->gpu_data->managed ? CMPY_DL_CUDA_MANAGED : CMPY_DL_CUDA;
}

const char cmpy_array_dlpack_device_doc[] =
    "__dlpack_device__($self)\n--\n\n"
    "The DLPack device of the memory: (2, ordinal), kDLCUDA, or (13,\n"
    "ordinal), kDLCUDAManaged, for managed memory.";

PyObject *
cmpy_array_dlpack_device(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;

    return Py_BuildValue("(ii)", device_type(self),
                         self->gpu_data->mem->dev->ordinal);
}

/* A capsule over `owner`'s elements: a DeviceNDArray's, or a host copy's
 * (a NumPy array) as kDLCPU. */
static PyObject *export(cmpy_state *st, PyObject *owner, int versioned)
{
    cmpy_dlpack_desc desc = {.readonly = 0};

    if (cmpy_is_array(st, owner)) {
        cmpy_DeviceNDArray *a = (cmpy_DeviceNDArray *)owner;

        desc.data = (void *)(uintptr_t)a->ptr;
        desc.ndim = CMPY_NDIM(a);
        desc.shape = CMPY_SHAPE(a);
        desc.strides = CMPY_STRIDES(a);
        desc.dtype = a->dtype;
        desc.device_type = device_type(a);
        desc.device_id = a->gpu_data->mem->dev->ordinal;
        desc.readonly = a->gpu_data->mem->readonly != 0;
    }
    else {
        PyArrayObject *a = (PyArrayObject *)owner;

        desc.data = PyArray_DATA(a);
        desc.ndim = PyArray_NDIM(a);
        desc.shape = PyArray_DIMS(a);
        desc.strides = PyArray_STRIDES(a);
        desc.dtype = PyArray_DESCR(a);
        desc.device_type = CMPY_DL_CPU;
        desc.device_id = 0;
    }
    return cmpy_dlpack_capsule(owner, &desc, versioned);
}

/* Whether two handles name the same stream: 0 is the legacy default. */
static int
same_stream(CUstream a, CUstream b)
{
    a = a == NULL ? CU_STREAM_LEGACY : a;
    b = b == NULL ? CU_STREAM_LEGACY : b;
    return a == b;
}

const char cmpy_array_dlpack_doc[] =
    "__dlpack__($self, *, stream=None, max_version=None, dl_device=None, "
    "copy=None)\n--\n\n"
    "The array API standard's DLPack export: a capsule over the device\n"
    "memory, on the device __dlpack_device__() names, versioned when\n"
    "*max_version* is (1, x) or later. *stream* is the consumer's: None\n"
    "(the legacy default stream), 1, 2 or a stream handle, which is made\n"
    "to wait on the device (an event) for the work queued on this\n"
    "array's stream; the host does not wait. -1 orders nothing; 0 raises\n"
    "ValueError. *dl_device* (1, 0) with *copy* True exports a host copy\n"
    "(NumPy reads it), without it raises BufferError. *copy* True on the\n"
    "device exports a device copy; None or False never copies. Read-only\n"
    "memory is flagged so, and needs a versioned capsule (BufferError\n"
    "otherwise, as NumPy); copies are writable.";

PyObject *
cmpy_array_dlpack(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames)
{
    cmpy_state *st = cmpy_type_state(op);
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cm_device *dev = self->gpu_data->mem->dev;
    PyObject *owner, *out = NULL;
    cmpy_dlpack_args a;
    cm_error err;

    if (cmpy_dlpack_parse(args, nargs, kwnames, device_type(self),
                          dev->ordinal, &a) < 0 ||
        cmpy_array_check_alive(st, self) < 0) {
        return NULL;
    }
    if (a.to_cpu && !a.copy) {
        PyErr_SetString(PyExc_BufferError,
                        "__dlpack__(): device memory is not readable by "
                        "the CPU: dl_device=(1, 0) needs copy=True");
        return NULL;
    }
    /* Copies are the consumer's to write; the memory itself may not be. */
    if (!a.copy && cmpy_dlpack_check_readonly(self->gpu_data->mem->readonly,
                                              a.versioned) < 0) {
        return NULL;
    }
    if (a.to_cpu) {
        /* The host copy is complete on return: nothing left to order. */
        if ((owner = cmpy_array_to_host(st, self)) == NULL) {
            return NULL;
        }
        out = export(st, owner, a.versioned);
        Py_DECREF(owner);
        return out;
    }
    /* A copy is queued on self's stream, like the work it follows. */
    owner = a.copy ? cmpy_array_copy_as(st, self, 'C', 0, NULL)
                   : Py_NewRef(op);
    if (owner == NULL) {
        return NULL;
    }
    if (a.wait && !same_stream(self->stream_handle, a.stream) &&
        cm_event_order(dev, self->stream_handle, a.stream, &err) < 0) {
        cmpy_raise(st, &err);
        goto done;
    }
    out = export(st, owner, a.versioned);
done:
    Py_DECREF(owner);
    return out;
}
