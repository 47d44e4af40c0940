/* hostalloc.c (py/): host memory for HostBuffers to own: cudamem's own
 * page-locked memory (pinned_array, mapped_array, _memhostalloc, and the
 * pool blocks that stage a temporary's asynchronous copy), or a context's
 * EMM plugin's (its memhostalloc() asked first when it has one, and
 * numba's PinnedMemory / MappedMemory recording what a plugin returns). */
#include "hostbuf.h"

#include "device.h"
#include "hostarray.h"
#include "memory.h"
#include "stream.h"

#include "../core/hostpool.h"
#include "../core/pool.h"

/* A HostBuffer owning new cudamem host memory of `kind` on dev. */
static PyObject *
native_buffer(cmpy_state *st, cm_device *dev, cm_host_kind kind, int portable,
              size_t nbytes)
{
    PyObject *buf;
    cm_host *host;
    cm_error err;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    /* While the device's pool is on, pinned memory is the host pool's:
     * the last reference gives it back there, still page-locked. */
    if (kind == CM_HOST_PINNED && cm_pool_active(dev) != NULL) {
        rc = cm_hostpool_alloc(dev, nbytes, &host, &err);
    }
    else {
        rc = cm_host_alloc(dev, kind, nbytes, portable, &host, &err);
    }
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    buf = cmpy_hostbuf_new(st, host, NULL);
    if (buf == NULL) {
        cmpy_hostbuf_discard(st, host);
    }
    return buf;
}

/* nbytes of host memory of `kind` for dev: from its context's plugin's
 * memhostalloc() when it has one (numba's arguments: the size alone for
 * pinned memory), else cudamem's. A new HostBuffer. */
static PyObject *
host_buffer(cmpy_state *st, cm_device *dev, cm_host_kind kind, int portable,
            size_t nbytes)
{
    int mapped = kind != CM_HOST_PINNED, rc;
    PyObject *args, *kwargs = NULL, *plugin, *got = NULL;

    /* As memalloc(): no plugin is asked for zero bytes. */
    rc = nbytes == 0 ? 0 : cmpy_manager_plugin(st, dev, &plugin);
    if (rc <= 0) {
        return rc == 0 ? native_buffer(st, dev, kind, portable, nbytes) : NULL;
    }
    args = Py_BuildValue("(n)", (Py_ssize_t)nbytes);
    if (args != NULL && mapped) {
        kwargs = Py_BuildValue("{s:O,s:O,s:O}", "mapped", Py_True, "portable",
                               portable ? Py_True : Py_False, "wc",
                               kind == CM_HOST_MAPPED_WC ? Py_True : Py_False);
    }
    if (cmpy_manager_call(st, dev, plugin, "memhostalloc", 0,
                          kwargs != NULL || !mapped ? args : NULL, kwargs,
                          &got) > 0 &&
        cmpy_emm_check_host_buffer(st, dev, plugin, got, nbytes, mapped) < 0) {
        Py_CLEAR(got);
    }
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_DECREF(plugin);
    return got;
}

/* A NumPy array of the given layout (dtype borrowed) over new host
 * memory of `kind` on dev, its .base the HostBuffer. */
static PyObject *
host_array(cmpy_state *st, cm_device *dev, cm_host_kind kind, int portable,
           PyArray_Descr *dtype, int ndim, const Py_ssize_t *shape,
           const Py_ssize_t *strides)
{
    Py_ssize_t size, low, high;
    PyObject *buf, *arr;

    if (cmpy_layout_extent(ndim, shape, strides, PyDataType_ELSIZE(dtype),
                           &size, &low, &high) < 0) {
        return NULL;
    }
    buf = host_buffer(st, dev, kind, portable, (size_t)(high - low));
    if (buf == NULL) {
        return NULL;
    }
    /* Steals a dtype reference. Negative strides: the first element is
     * -low in. */
    Py_INCREF(dtype);
    arr = PyArray_NewFromDescr(
        &PyArray_Type, dtype, ndim, shape, strides,
        (char *)cmpy_hostbuf_data(((cmpy_HostBuffer *)buf)->host) - low,
        NPY_ARRAY_WRITEABLE, NULL);
    if (arr == NULL) {
        Py_DECREF(buf);
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, buf) < 0) {
        Py_CLEAR(arr);
    }
    return arr;
}

int
cmpy_hostbuf_pin_temporary(cmpy_state *st, cm_device *dev,
                           PyArrayObject **host)
{
    PyArray_Descr *dtype = PyArray_DESCR(*host);
    size_t nbytes = (size_t)PyArray_NBYTES(*host);
    PyObject *buf, *arr;
    cm_host *block;
    cm_error err;
    int rc;

    if (nbytes == 0) {
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_hostpool_alloc(dev, nbytes, &block, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    buf = cmpy_hostbuf_new(st, block, NULL);
    if (buf == NULL) {
        cmpy_hostbuf_discard(st, block);
        return -1;
    }
    Py_INCREF(dtype);
    arr = PyArray_NewFromDescr(&PyArray_Type, dtype, PyArray_NDIM(*host),
                               PyArray_DIMS(*host), NULL, block->ptr,
                               NPY_ARRAY_CARRAY, NULL);
    if (arr == NULL || PyArray_SetBaseObject((PyArrayObject *)arr, buf) < 0) {
        Py_XDECREF(arr);
        Py_DECREF(buf);
        return -1;
    }
    if (PyArray_CopyInto((PyArrayObject *)arr, *host) < 0) {
        Py_DECREF(arr);
        return -1;
    }
    Py_SETREF(*host, (PyArrayObject *)arr);
    return 0;
}

static const char *const layout_names[] = {
    "shape", "dtype", "strides", "order", "stream", "portable", "wc"};

PyDoc_STRVAR(pinned_array_doc,
             "pinned_array($module, shape, dtype=None, strides=None, "
             "order='C')\n--\n\n"
             "An uninitialized NumPy array in page-locked host memory "
             "(numba's\npinned_array); its .base is the HostBuffer that "
             "frees the memory when\nthe last reference goes. *strides* "
             "(bytes, any sign) overrides\n*order*. The memory stays valid "
             "and page-locked after close(); after\nDevice.reset() it stays "
             "valid but is no longer page-locked.");

static PyObject *
pinned_array(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    cmpy_state *st = cmpy_get_state(module);
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    PyObject *argv[4], *arr = NULL;
    PyArray_Descr *dtype;
    cm_device *dev;
    int ndim;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("pinned_array", layout_names, 4, 1, args, nargs,
                        kwnames, argv) < 0 ||
        cmpy_parse_layout(st, argv[0], argv[1], argv[2], argv[3], &ndim, shape,
                          strides, &dtype) < 0) {
        return NULL;
    }
    if (cmpy_current_device(st, &dev) == 0) {
        arr = host_array(st, dev, CM_HOST_PINNED, 0, dtype, ndim, shape,
                         strides);
    }
    Py_DECREF(dtype);
    return arr;
}

PyObject *
cmpy_mapped_empty(PyObject *module, cm_device *dev, int wc, int portable,
                  PyArray_Descr *dtype, int ndim, const Py_ssize_t *shape,
                  const Py_ssize_t *strides, const cmpy_stream_ref *ref)
{
    PyObject *host;

    /* The type first: failing to make it allocates nothing. */
    if (cmpy_hostarray_type(module, CMPY_HOSTARRAY_MAPPED) == NULL) {
        return NULL;
    }
    host = host_array(cmpy_get_state(module), dev,
                      wc ? CM_HOST_MAPPED_WC : CM_HOST_MAPPED, portable, dtype,
                      ndim, shape, strides);
    if (host == NULL) {
        return NULL;
    }
    /* A view of the plain array: its .base is the HostBuffer's array. */
    return cmpy_hostarray_new(module, CMPY_HOSTARRAY_MAPPED, dtype, ndim,
                              shape, strides,
                              PyArray_DATA((PyArrayObject *)host), host, ref);
}

PyDoc_STRVAR(mapped_array_doc,
             "mapped_array($module, shape, dtype=None, strides=None, "
             "order='C', stream=0, portable=False, wc=False)\n--\n\n"
             "An uninitialized array in page-locked host memory mapped "
             "into the\ncurrent device's address space (numba's "
             "mapped_array): a NumPy array\non the host side, a device "
             "array (gpu_data, __cuda_array_interface__)\non the device "
             "side, over the same bytes. *portable* maps it for "
             "every\ncontext; *wc* allocates it write-combined (fast for "
             "the device to read,\nvery slow for the host to read), and "
             "such memory is freed by\nDevice.reset(). *stream* is the "
             "stream its device-side copies use by\ndefault.");

static PyObject *
mapped_array(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    cmpy_state *st = cmpy_get_state(module);
    Py_ssize_t shape[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    PyObject *argv[7], *arr = NULL;
    PyArray_Descr *dtype;
    cmpy_stream_ref ref;
    int ndim, portable = 0, wc = 0;
    cm_device *dev;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("mapped_array", layout_names, 7, 1, args, nargs,
                        kwnames, argv) < 0 ||
        cmpy_parse_layout(st, argv[0], argv[1], argv[2], argv[3], &ndim, shape,
                          strides, &dtype) < 0) {
        return NULL;
    }
    /* A bad stream allocates nothing. */
    if ((argv[5] == NULL || (portable = PyObject_IsTrue(argv[5])) >= 0) &&
        (argv[6] == NULL || (wc = PyObject_IsTrue(argv[6])) >= 0) &&
        cmpy_current_device(st, &dev) == 0 &&
        cmpy_stream_arg(st, argv[4] != NULL ? argv[4] : Py_None, dev, &ref) ==
            0) {
        arr = cmpy_mapped_empty(module, dev, wc, portable, dtype, ndim, shape,
                                strides, &ref);
    }
    Py_DECREF(dtype);
    return arr;
}

PyDoc_STRVAR(memhostalloc_doc,
             "_memhostalloc($module, context, size, mapped=False, "
             "portable=False, wc=False)\n--\n\n"
             "*size* bytes of cudamem's own page-locked memory for "
             "*context*'s device,\nwhatever its memory manager "
             "(HostOnlyCUDAMemoryManager.memhostalloc).");

static PyObject *
memhostalloc(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    static const char *const names[] = {"context", "size", "mapped",
                                        "portable", "wc"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[5];
    int flags[3] = {0, 0, 0};
    cm_device *dev;
    size_t n;

    if (cmpy_parse_args("_memhostalloc", names, 5, 2, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_memory_parse_sized(st, "memhostalloc", argv[0], argv[1], &dev,
                                &n) < 0) {
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (argv[i + 2] != NULL &&
            (flags[i] = PyObject_IsTrue(argv[i + 2])) < 0) {
            return NULL;
        }
    }
    return native_buffer(st, dev,
                         !flags[0]  ? CM_HOST_PINNED
                         : flags[2] ? CM_HOST_MAPPED_WC
                                    : CM_HOST_MAPPED,
                         flags[1], n);
}

/* numba's PinnedMemory() and MappedMemory(): a HostBuffer recording the
 * plugin's page-locked memory, whose finalizer runs when it goes. */
static PyObject *
external_buffer(PyObject *module, const char *name, int mapped,
                PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"context", "pointer", "size", "owner",
                                        "finalizer"};
    cmpy_state *st = cmpy_get_state(module);
    cmpy_HostBuffer *buf;
    PyObject *argv[5];
    cm_ctx_guard guard;
    cm_host *host = NULL;
    CUdeviceptr ptr;
    cm_device *dev;
    cm_error err;
    size_t size;

    if (cmpy_parse_args(name, names, 5, 3, args, nargs, kwnames, argv) < 0 ||
        cmpy_memory_parse_external(st, name, argv, &dev, &ptr, &size) < 0) {
        return NULL;
    }
    /* The device address is the context's. */
    if (cm_ctx_enter(dev, &guard, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    if (cm_ctx_leave(&guard,
                     cm_host_external(dev, (void *)(uintptr_t)ptr, size,
                                      mapped, &host, &err),
                     &err) < 0) {
        if (host != NULL) {
            cmpy_hostbuf_discard(st, host);
        }
        return cmpy_raise(st, &err);
    }
    buf = (cmpy_HostBuffer *)cmpy_hostbuf_new(
        st, host, argv[3] != NULL && argv[3] != Py_None ? argv[3] : NULL);
    if (buf == NULL) {
        cmpy_hostbuf_discard(st, host);
        return NULL;
    }
    if (argv[4] != NULL && argv[4] != Py_None) {
        buf->finalizer = Py_NewRef(argv[4]);
    }
    return (PyObject *)buf;
}

PyDoc_STRVAR(pinned_memory_doc,
             "PinnedMemory($module, context, pointer, size, owner=None, "
             "finalizer=None)\n--\n\n"
             "numba's PinnedMemory, for EMM plugins' memhostalloc() and "
             "mempin(): the\n*size* bytes of page-locked host memory at "
             "*pointer* (an int, or a\nctypes pointer) as a HostBuffer "
             "(kind 'external') kept alive with\n*owner*. *finalizer* (no "
             "arguments) unpins or frees them when the\nbuffer goes; an "
             "exception in it becomes a CudaWarning.");

static PyObject *
pinned_memory(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    return external_buffer(module, "PinnedMemory", 0, args, nargs, kwnames);
}

PyDoc_STRVAR(mapped_memory_doc,
             "MappedMemory($module, context, pointer, size, owner=None, "
             "finalizer=None)\n--\n\n"
             "numba's MappedMemory: PinnedMemory() for memory mapped into "
             "the\ndevice's address space, whose device address "
             "(cuMemHostGetDevicePointer\nin *context*) is the buffer's "
             "device_pointer (kind 'external_mapped').");

static PyObject *
mapped_memory(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    return external_buffer(module, "MappedMemory", 1, args, nargs, kwnames);
}

PyMethodDef cmpy_hostalloc_methods[] = {
    {"_memhostalloc", (PyCFunction)(void (*)(void))memhostalloc,
     METH_FASTCALL | METH_KEYWORDS, memhostalloc_doc},
    {"PinnedMemory", (PyCFunction)(void (*)(void))pinned_memory,
     METH_FASTCALL | METH_KEYWORDS, pinned_memory_doc},
    {"MappedMemory", (PyCFunction)(void (*)(void))mapped_memory,
     METH_FASTCALL | METH_KEYWORDS, mapped_memory_doc},
    {"pinned_array", (PyCFunction)(void (*)(void))pinned_array,
     METH_FASTCALL | METH_KEYWORDS, pinned_array_doc},
    {"mapped_array", (PyCFunction)(void (*)(void))mapped_array,
     METH_FASTCALL | METH_KEYWORDS, mapped_array_doc},
    {NULL, NULL, 0, NULL},
};
