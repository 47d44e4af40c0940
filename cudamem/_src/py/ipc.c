/* ipc.c (py/): the C side of IPC: DeviceNDArray.get_ipc_handle() (asking
 * the context's EMM plugin when it has one; through the exportable pool for
 * AsyncMemoryManager's arrays) and the private functions cudamem/ipc.py
 * builds on (_ipc_get, _ipc_open, _ipc_array, _ipc_pool_handle,
 * _ipc_import_pool, _ipc_open_pool). Where a
 * handle opens, staged copies and pickling are cudamem/ipc.py's; exports
 * and the cache of mappings are core/ipc.c's. */
#include "npy.h"

#include <string.h>

#include "../core/asyncpool.h"
#include "../core/ipc.h"
#include "array.h"
#include "device.h"
#include "memory.h"

/* An IPC handle argument: bytes of the driver's handle size. */
static int
parse_handle(PyObject *arg, CUipcMemHandle *out)
{
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError,
                     "an IPC handle must be bytes, not %.200s",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    if (PyBytes_GET_SIZE(arg) != CU_IPC_HANDLE_SIZE) {
        PyErr_Format(PyExc_ValueError,
                     "an IPC handle has %d bytes, not %zd: %R",
                     CU_IPC_HANDLE_SIZE, PyBytes_GET_SIZE(arg), arg);
        return -1;
    }
    memcpy(out->reserved, PyBytes_AS_STRING(arg), CU_IPC_HANDLE_SIZE);
    return 0;
}

/* core's export of the memory at ptr on dev, with the GIL released; 0,
 * or -1 with the exception set. */
static int
export_ptr(cmpy_state *st, cm_device *dev, CUdeviceptr ptr, cm_ipc_export *ex)
{
    cm_error err;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = cm_ipc_export_ptr(dev, ptr, ex, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    return rc;
}

static PyObject *
handle_bytes(const cm_ipc_export *ex)
{
    return PyBytes_FromStringAndSize(ex->handle.reserved, CU_IPC_HANDLE_SIZE);
}

const char cmpy_array_get_ipc_handle_doc[] =
    "get_ipc_handle($self)\n--\n\n"
    "A picklable handle that shares this array's memory with another "
    "process\non the same machine (numba's): its open() there gives a "
    "DeviceNDArray\nof this shape, strides and dtype over the same bytes. "
    "Works for views\nand for memory imported through the CUDA Array "
    "Interface (the\nallocation around it is found with "
    "cuMemGetAddressRange). The handle\nkeeps the memory alive in this "
    "process. A zero-size array shares\nnothing: it opens as an empty "
    "array.";

/* The PoolIpcHandle (the POOL_IPC_HANDLE hook: cudamem.ipc's) of the
 * `size` (> 0) bytes at `lowest` in mp's memory, a record of the
 * stream-ordered allocator: its export data and its pool's descriptor.
 * NotImplementedError for memory of a pool that is not exportable. */
static PyObject *
pool_handle_of(cmpy_state *st, cmpy_MemoryPointer *mp, CUdeviceptr lowest,
               size_t size)
{
    cm_mem *mem = mp->mem;
    cm_asyncpool_export_data ex;
    PyObject *cls;
    cm_error err;
    int rc;

    if (!cm_asyncpool_exportable(mem)) {
        /* cuMemPoolExportPointer refuses it with a bare INVALID_VALUE. */
        PyErr_SetString(PyExc_NotImplementedError,
                        "this memory of the stream-ordered pool "
                        "(AsyncMemoryManager) cannot be shared with IPC: it "
                        "came from the device's default memory pool, which "
                        "is not exportable; call the manager's "
                        "set_ipc(True) before allocating arrays to share");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_asyncpool_export(mem, &ex, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    cls = cmpy_hook(st, CMPY_HOOK_POOL_IPC_HANDLE);
    if (cls == NULL) {
        return NULL;
    }
    return PyObject_CallFunction(cls, "Oy#nOni", (PyObject *)mp,
                                 (const char *)&ex.data,
                                 (Py_ssize_t)sizeof(ex.data), (Py_ssize_t)size,
                                 cmpy_device_of(st, mem->dev)->uuid,
                                 (Py_ssize_t)(lowest - mem->ptr), ex.fd);
}

/* The IpcHandle (the IPC_HANDLE hook: cudamem.ipc's) of the `size` bytes at
 * `lowest` in self's memory: numba's context.get_ipc_handle(), which asks
 * the context's plugin (with a MemoryPointer of those bytes) when it has
 * one; else exported here. A zero-size array shares nothing (no
 * handle) and asks no plugin. */
static PyObject *
ipc_handle_of(cmpy_state *st, cmpy_DeviceNDArray *self, CUdeviceptr lowest,
              size_t size)
{
    cm_device *dev = self->gpu_data->mem->dev;
    PyObject *view, *args, *plugin, *got = NULL, *handle, *cls;
    Py_ssize_t offset = 0;
    cm_ipc_export ex;
    int rc;

    rc = size == 0 ? 0 : cmpy_manager_plugin(st, dev, &plugin);
    if (rc != 0) {
        if (rc < 0) {
            return NULL;
        }
        view = cmpy_memory_view(st, self->gpu_data,
                                (size_t)(lowest - self->gpu_data->ptr), size);
        args = view != NULL ? PyTuple_Pack(1, view) : NULL;
        Py_XDECREF(view);
        cmpy_manager_call(st, dev, plugin, "get_ipc_handle", 0, args, NULL,
                          &got);
        Py_XDECREF(args);
        Py_DECREF(plugin);
        return got;
    }
    if (size == 0) {
        handle = Py_NewRef(Py_None);
    }
    else if (self->gpu_data->mem->kind == CM_FREE_ASYNC) {
        /* cuIpcGetMemHandle refuses it: shared through its pool. */
        return pool_handle_of(st, self->gpu_data, lowest, size);
    }
    else if (export_ptr(st, dev, lowest, &ex) < 0) {
        return NULL;
    }
    else {
        handle = handle_bytes(&ex);
        offset = (Py_ssize_t)(lowest - ex.base);
    }
    /* Looked up after the plugin ran: it may have replaced the hooks. */
    cls = handle != NULL ? cmpy_hook(st, CMPY_HOOK_IPC_HANDLE) : NULL;
    if (cls == NULL) {
        Py_XDECREF(handle);
        return NULL;
    }
    got = PyObject_CallFunction(cls, "OOnOn", self->gpu_data, handle,
                                (Py_ssize_t)size,
                                cmpy_device_of(st, dev)->uuid, offset);
    Py_DECREF(handle);
    return got;
}

PyObject *
cmpy_array_get_ipc_handle(PyObject *op, PyObject *Py_UNUSED(args))
{
    cmpy_DeviceNDArray *self = (cmpy_DeviceNDArray *)op;
    cmpy_state *st = cmpy_type_state(op);
    PyObject *handle = NULL, *shape = NULL, *strides = NULL, *make;
    PyObject *result = NULL;
    Py_ssize_t size, low, high;

    if (cmpy_array_check_alive(st, self) < 0 ||
        cmpy_layout_extent(CMPY_NDIM(self), CMPY_SHAPE(self),
                           CMPY_STRIDES(self), PyDataType_ELSIZE(self->dtype),
                           &size, &low, &high) < 0) {
        return NULL;
    }
    /* The handle covers the bytes the elements span, from the lowest. */
    handle = ipc_handle_of(st, self, self->ptr + (CUdeviceptr)low,
                           size == 0 ? 0 : (size_t)(high - low));
    shape = cmpy_shape_tuple(CMPY_NDIM(self), CMPY_SHAPE(self));
    strides = cmpy_shape_tuple(CMPY_NDIM(self), CMPY_STRIDES(self));
    if (handle != NULL && shape != NULL && strides != NULL &&
        (make = cmpy_hook(st, CMPY_HOOK_ARRAY_HANDLE)) != NULL) {
        result = PyObject_CallFunction(make, "OOOOn", handle, shape, strides,
                                       self->dtype, -low);
    }
    Py_XDECREF(handle);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return result;
}

PyDoc_STRVAR(ipc_get_doc,
             "_ipc_get($module, pointer, device)\n--\n\n"
             "The IPC handle (bytes) of the allocation around device "
             "address *pointer*\non *device* (an ordinal or a Device), "
             "with the allocation's base and\nsize (cuMemGetAddressRange, "
             "cuIpcGetMemHandle).");

static PyObject *
ipc_get(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
        PyObject *kwnames)
{
    static const char *const names[] = {"pointer", "device"};
    cmpy_state *st = cmpy_get_state(module);
    unsigned long long ptr;
    cmpy_Device *device;
    cm_ipc_export ex;
    PyObject *argv[2];

    if (cmpy_parse_args("_ipc_get", names, 2, 2, args, nargs, kwnames, argv) <
        0) {
        return NULL;
    }
    if (!PyLong_Check(argv[0]) || PyBool_Check(argv[0])) {
        PyErr_Format(PyExc_TypeError, "pointer must be an int, not %.200s",
                     Py_TYPE(argv[0])->tp_name);
        return NULL;
    }
    ptr = PyLong_AsUnsignedLongLong(argv[0]);
    if (ptr == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        ptr = 0;
    }
    if (ptr == 0) {
        PyErr_Format(PyExc_ValueError,
                     "pointer %R is not a device address that can have an "
                     "IPC handle",
                     argv[0]);
        return NULL;
    }
    if (cmpy_device_parse(st, argv[1], &device) < 0 ||
        export_ptr(st, device->dev, (CUdeviceptr)ptr, &ex) < 0) {
        return NULL;
    }
    return Py_BuildValue("(NKn)", handle_bytes(&ex),
                         (unsigned long long)ex.base, (Py_ssize_t)ex.size);
}

PyDoc_STRVAR(ipc_open_doc,
             "_ipc_open($module, handle, device)\n--\n\n"
             "The whole allocation behind IPC *handle* (bytes) mapped on "
             "*device* (an\nordinal or a Device), shared with every other "
             "open of it there in this\nprocess; None opens nothing (an "
             "empty MemoryPointer). The mapping\ncloses through the "
             "pending deallocations once no MemoryPointer uses it.");

static PyObject *
ipc_open(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
         PyObject *kwnames)
{
    static const char *const names[] = {"handle", "device"};
    cmpy_state *st = cmpy_get_state(module);
    CUipcMemHandle handle;
    cmpy_Device *device;
    PyObject *argv[2];

    if (cmpy_parse_args("_ipc_open", names, 2, 2, args, nargs, kwnames, argv) <
            0 ||
        (argv[0] != Py_None && parse_handle(argv[0], &handle) < 0) ||
        cmpy_device_parse(st, argv[1], &device) < 0) {
        return NULL;
    }
    if (argv[0] == Py_None) {
        return cmpy_memory_alloc(st, device->dev, 0, NULL);
    }
    return cmpy_memory_ipc_open(st, device->dev, &handle);
}

PyDoc_STRVAR(ipc_pool_handle_doc,
             "_ipc_pool_handle($module, memory)\n--\n\n"
             "A PoolIpcHandle of MemoryPointer *memory*, memory of "
             "AsyncMemoryManager's\nexportable pool (set_ipc(True)); "
             "NotImplementedError for other memory of\nthe "
             "stream-ordered allocator. Waits for the device's work "
             "first.");

static PyObject *
ipc_pool_handle(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"memory"};
    cmpy_state *st = cmpy_get_state(module);
    cmpy_MemoryPointer *mp;
    PyObject *argv[1];

    if (cmpy_parse_args("_ipc_pool_handle", names, 1, 1, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    if (!Py_IS_TYPE(argv[0], (PyTypeObject *)st->MemoryPointerType) ||
        ((cmpy_MemoryPointer *)argv[0])->mem->kind != CM_FREE_ASYNC ||
        ((cmpy_MemoryPointer *)argv[0])->size == 0) {
        PyErr_Format(PyExc_TypeError,
                     "memory must be a MemoryPointer of AsyncMemoryManager's "
                     "memory, not %R",
                     argv[0]);
        return NULL;
    }
    mp = (cmpy_MemoryPointer *)argv[0];
    return pool_handle_of(st, mp, mp->ptr, mp->size);
}

PyDoc_STRVAR(ipc_import_pool_doc,
             "_ipc_import_pool($module, fd, device)\n--\n\n"
             "The memory pool another process exported as the POSIX file "
             "descriptor\n*fd* (which stays the caller's), imported on "
             "*device* (a Device or an\nordinal), as an int handle "
             "(cuMemPoolImportFromShareableHandle). The\npool is kept "
             "for the process.");

static PyObject *
ipc_import_pool(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"fd", "device"};
    cmpy_state *st = cmpy_get_state(module);
    CUmemoryPool pool;
    PyObject *argv[2];
    cm_device *dev;
    cm_error err;
    int fd, rc;

    if (cmpy_parse_args("_ipc_import_pool", names, 2, 2, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    fd = PyObject_AsFileDescriptor(argv[0]);
    if (fd < 0 || cmpy_device_arg(st, argv[1], 0, &dev) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_ipc_import_pool(dev, fd, &pool, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    return PyLong_FromVoidPtr(pool);
}

PyDoc_STRVAR(ipc_open_pool_doc,
             "_ipc_open_pool($module, pool, data, device)\n--\n\n"
             "A MemoryPointer of the whole allocation that *data* (64 bytes "
             "of\ncuMemPoolExportPointer) names in *pool* "
             "(_ipc_import_pool's), mapped on\n*device*; every open of the "
             "same data shares one mapping, freed once\nnothing uses it.");

static PyObject *
ipc_open_pool(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    static const char *const names[] = {"pool", "data", "device"};
    cmpy_state *st = cmpy_get_state(module);
    CUmemPoolPtrExportData data;
    CUmemoryPool pool;
    PyObject *argv[3];
    cm_device *dev;

    if (cmpy_parse_args("_ipc_open_pool", names, 3, 3, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    pool = PyLong_Check(argv[0]) ? PyLong_AsVoidPtr(argv[0]) : NULL;
    if (pool == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "pool must be an imported pool's handle, not %R",
                     argv[0]);
        return NULL;
    }
    if (!PyBytes_Check(argv[1]) ||
        PyBytes_GET_SIZE(argv[1]) != (Py_ssize_t)sizeof(data)) {
        PyErr_Format(PyExc_ValueError,
                     "data must be the %zu bytes of an allocation's export "
                     "data, not %R",
                     sizeof(data), argv[1]);
        return NULL;
    }
    memcpy(&data, PyBytes_AS_STRING(argv[1]), sizeof(data));
    if (cmpy_device_arg(st, argv[2], 0, &dev) < 0) {
        return NULL;
    }
    return cmpy_memory_pool_open(st, dev, pool, &data);
}

PyDoc_STRVAR(ipc_array_doc,
             "_ipc_array($module, mem, shape, dtype, strides=None, "
             "offset=0)\n--\n\n"
             "An array over MemoryPointer *mem* with its first element "
             "*offset* bytes\nfrom mem's address (*strides* in bytes, "
             "default C-contiguous).\nValueError when the elements reach "
             "outside mem.");

static PyObject *
ipc_array(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
          PyObject *kwnames)
{
    static const char *const names[] = {"mem", "shape", "dtype", "strides",
                                        "offset"};
    cmpy_state *st = cmpy_get_state(module);
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS], offset = 0;
    PyArray_Descr *dtype = NULL;
    PyObject *argv[5], *result = NULL;
    cmpy_MemoryPointer *mp;
    cmpy_stream_ref ref;
    int ndim;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("_ipc_array", names, 5, 3, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    if (!Py_IS_TYPE(argv[0], (PyTypeObject *)st->MemoryPointerType)) {
        PyErr_Format(PyExc_TypeError,
                     "mem must be a cudamem MemoryPointer, not %.200s",
                     Py_TYPE(argv[0])->tp_name);
        return NULL;
    }
    mp = (cmpy_MemoryPointer *)argv[0];
    if (argv[4] != NULL) {
        offset = PyNumber_AsSsize_t(argv[4], PyExc_OverflowError);
        if (offset == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    if (offset < 0 || (size_t)offset > mp->size) {
        PyErr_Format(PyExc_ValueError,
                     "offset %zd is outside the %zu bytes of the memory",
                     offset, mp->size);
        return NULL;
    }
    if (cmpy_parse_layout(st, argv[1], argv[2], argv[3], NULL, &ndim, shape,
                          strides, &dtype) < 0) {
        return NULL;
    }
    if (cmpy_stream_arg(st, Py_None, mp->mem->dev, &ref) == 0) {
        result = (PyObject *)cmpy_array_over(
            st, mp, mp->ptr + (CUdeviceptr)offset, ndim, shape, strides, dtype,
            NULL, &ref);
    }
    Py_DECREF(dtype);
    return result;
}

#define FASTKW(fn)                                                            \
    (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS

PyMethodDef cmpy_ipc_methods[] = {
    {"_ipc_get", FASTKW(ipc_get), ipc_get_doc},
    {"_ipc_open", FASTKW(ipc_open), ipc_open_doc},
    {"_ipc_array", FASTKW(ipc_array), ipc_array_doc},
    {"_ipc_pool_handle", FASTKW(ipc_pool_handle), ipc_pool_handle_doc},
    {"_ipc_import_pool", FASTKW(ipc_import_pool), ipc_import_pool_doc},
    {"_ipc_open_pool", FASTKW(ipc_open_pool), ipc_open_pool_doc},
    {NULL, NULL, 0, NULL},
};
