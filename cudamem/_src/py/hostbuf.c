/* hostbuf.c (py/): HostBuffer, the Python owner of one core host buffer
 * (core/hostmem.h), exporting its bytes through the buffer protocol, numba's
 * PinnedMemory and MappedMemory constructors for EMM plugins, and the
 * functions that make host arrays over it (from a context's plugin when it
 * has one), register the caller's arrays (with register()'s registry of
 * them by address and size) and give mapped memory its device side.
 * MappedNDArray itself is hostarray.c's; the context managers are
 * cudamem/hostarrays.py's. */
#include "hostbuf.h"

#include "device.h"
#include "hostarray.h"
#include "memory.h"
#include "stream.h"

#include "../core/hostpool.h"
#include "../core/pool.h"

typedef struct cmpy_HostBuffer {
    PyObject_HEAD
    cm_host *host;
    PyObject *owner; /* registered: the array whose memory it is;
                        external: the plugin's owner */
    PyObject *finalizer; /* external: the plugin's, or NULL */
    PyObject *weakreflist;
} cmpy_HostBuffer;

/* Where a zero-size array points: NumPy allocates for NULL data. */
static char empty_data[1];

static void *
buffer_data(const cm_host *h)
{
    return h->ptr != NULL ? h->ptr : empty_data;
}

static PyObject *
new_buffer(cmpy_state *st, cm_host *host, PyObject *owner)
{
    cmpy_HostBuffer *self = PyObject_GC_New(
        cmpy_HostBuffer, (PyTypeObject *)st->HostBufferType);

    if (self == NULL) {
        return NULL;
    }
    self->host = host;
    self->owner = Py_XNewRef(owner);
    self->finalizer = NULL;
    self->weakreflist = NULL;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* Frees a host buffer no Python object owns yet. */
static void
discard(cmpy_state *st, cm_host *host)
{
    cm_error err;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = host->pooled ? cm_hostpool_free(host, &err)
                      : cm_host_free(host, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_warn_release(st, &err);
    }
}

static int
buffer_traverse(cmpy_HostBuffer *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->finalizer);
    return 0;
}

static void
buffer_dealloc(cmpy_HostBuffer *self)
{
    PyTypeObject *type = Py_TYPE(self);
    cmpy_state *st;

    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    /* At interpreter exit the type may have lost its module already. */
    st = cmpy_final_state((PyObject *)self);
    discard(st, self->host);
    /* The record first: the finalizer frees the memory it describes. */
    if (self->finalizer != NULL) {
        cmpy_memory_finalize(st, self->finalizer);
        Py_CLEAR(self->finalizer);
    }
    Py_CLEAR(self->owner);
    type->tp_free(self);
    Py_DECREF(type);
}

static const char *
kind_name(const cm_host *h)
{
    switch (h->kind) {
    case CM_HOST_PINNED:
        return "pinned";
    case CM_HOST_MAPPED:
        return "mapped";
    case CM_HOST_MAPPED_WC:
        return "mapped_wc";
    default:
        if (h->external) {
            return h->mapped ? "external_mapped" : "external";
        }
        return h->mapped ? "registered_mapped" : "registered";
    }
}

static PyObject *
buffer_repr(cmpy_HostBuffer *self)
{
    char addr[24];

    snprintf(addr, sizeof(addr), "%p", self->host->ptr);
    return PyUnicode_FromFormat("<cudamem.HostBuffer %s, %zu bytes at %s%s>",
                                kind_name(self->host), self->host->size,
                                addr,
                                self->host->reg != NULL ||
                                        self->host->external ||
                                        self->host->kind ==
                                            CM_HOST_MAPPED_WC ||
                                        self->host->size == 0
                                    ? ""
                                    : ", not page-locked");
}

static int
buffer_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    cmpy_HostBuffer *self = (cmpy_HostBuffer *)op;

    return PyBuffer_FillInfo(view, op, buffer_data(self->host),
                             (Py_ssize_t)self->host->size,
                             self->host->readonly, flags);
}

static PyObject *
get_host_pointer(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    return PyLong_FromVoidPtr(self->host->ptr);
}

static PyObject *
get_handle(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    return cmpy_c_void_p((PyObject *)self,
                         (unsigned long long)(uintptr_t)self->host->ptr);
}

static PyObject *
get_device_pointer(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    if (!self->host->mapped) {
        Py_RETURN_NONE;
    }
    return cmpy_c_void_p((PyObject *)self,
                         (unsigned long long)self->host->dptr);
}

static PyObject *
get_device_pointer_value(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    if (!self->host->mapped || self->host->dptr == 0) {
        Py_RETURN_NONE;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)self->host->dptr);
}

static PyObject *
get_size(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    return PyLong_FromSize_t(self->host->size);
}

static PyObject *
get_kind(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    return PyUnicode_FromString(kind_name(self->host));
}

static PyObject *
get_readonly(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(self->host->readonly);
}

static PyObject *
get_device(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    if (!self->host->mapped) {
        Py_RETURN_NONE;
    }
    return Py_NewRef(cmpy_device_of(cmpy_type_state((PyObject *)self),
                                    self->host->dev));
}

static PyObject *
get_registered(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(self->host->reg != NULL);
}

static PyObject *
get_device_ctypes_pointer(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    if (!self->host->mapped) {
        Py_RETURN_NONE;
    }
    return cmpy_device_ctypes_pointer((PyObject *)self,
                                      (unsigned long long)self->host->dptr);
}

static PyObject *
get_cuda_memory(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(self->host->mapped);
}

static PyObject *
get_context(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    cmpy_state *st = cmpy_type_state((PyObject *)self);

    if (self->host->dev == NULL) {
        Py_RETURN_NONE;
    }
    return cmpy_context_of(st, cmpy_device_of(st, self->host->dev));
}

static PyObject *
get_owned(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    return Py_NewRef(self->owner != NULL ? self->owner : Py_None);
}

static PyObject *
get_owner(cmpy_HostBuffer *self, void *Py_UNUSED(c))
{
    return Py_NewRef(self->owner != NULL ? self->owner : (PyObject *)self);
}

static PyGetSetDef buffer_getset[] = {
    {"device_ctypes_pointer", (getter)get_device_ctypes_pointer, NULL,
     "The device address as numba's ctypes.c_size_t, or None unless "
     "mapped.",
     NULL},
    {"__cuda_memory__", (getter)get_cuda_memory, NULL,
     "True for mapped memory, which the device addresses (numba's\n"
     "MappedMemory); False for pinned memory (numba's PinnedMemory).",
     NULL},
    {"context", (getter)get_context, NULL,
     "The Context of the device the memory was made for, or None for a\n"
     "registration that no device maps.",
     NULL},
    {"owned", (getter)get_owned, NULL,
     "The object whose memory it is (a registered array, a plugin's\n"
     "owner), or None for memory cudamem allocated.",
     NULL},
    {"owner", (getter)get_owner, NULL,
     "numba's MemoryPointer.owner: the owned object, else the buffer.",
     NULL},
    {"host_pointer", (getter)get_host_pointer, NULL,
     "The address of the first byte, an int (0 for a zero-size buffer).",
     NULL},
    {"handle", (getter)get_handle, NULL,
     "The host address as a ctypes.c_void_p (numba's PinnedMemory.handle).",
     NULL},
    {"device_pointer", (getter)get_device_pointer, NULL,
     "The device address of the first byte as a ctypes.c_void_p "
     "(numba's\nMappedMemory.device_pointer), or None unless mapped.",
     NULL},
    {"device_pointer_value", (getter)get_device_pointer_value, NULL,
     "The device address as an int, or None unless mapped (or zero-size).",
     NULL},
    {"size", (getter)get_size, NULL, "Bytes from the host pointer.", NULL},
    {"kind", (getter)get_kind, NULL,
     "'pinned', 'mapped', 'mapped_wc' (write-combined), 'registered' or\n"
     "'registered_mapped' (an existing array registered by pinned(),\n"
     "register() or mapped()), 'external' or 'external_mapped' (an EMM\n"
     "plugin's, from PinnedMemory() or MappedMemory()).",
     NULL},
    {"readonly", (getter)get_readonly, NULL,
     "Whether the memory is registered (and exported) read-only.", NULL},
    {"device", (getter)get_device, NULL,
     "The Device the memory is mapped for, or None unless mapped.", NULL},
    {"registered", (getter)get_registered, NULL,
     "Whether cudamem holds a page-locking registration for it now.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef buffer_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET,
     offsetof(cmpy_HostBuffer, weakreflist), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* A MemoryPointer over all of a mapped buffer's bytes at their device
 * address, owned by the buffer. */
static PyObject *
mapped_pointer(cmpy_HostBuffer *self)
{
    cmpy_state *st = cmpy_type_state((PyObject *)self);
    cm_host *host = self->host;
    PyObject *mem;
    cm_error err;

    if (!host->mapped) {
        return PyErr_Format(PyExc_TypeError,
                            "%s host memory has no device address: it is "
                            "not mapped",
                            kind_name(host));
    }
    if (cm_host_check(host, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    mem = cmpy_memory_borrow(st, host->dev, host->dptr, host->size,
                             (PyObject *)self);
    if (mem != NULL && host->readonly) {
        ((cmpy_MemoryPointer *)mem)->mem->readonly = CMPY_RO_REGISTERED;
    }
    return mem;
}

/* MemoryPointer.<name>(*args) on the mapped bytes: numba's MappedMemory
 * is a MemoryPointer. */
static PyObject *
as_pointer(PyObject *op, const char *name, PyObject *const *args,
           Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *mem = mapped_pointer((cmpy_HostBuffer *)op), *method, *out;

    if (mem == NULL) {
        return NULL;
    }
    method = PyObject_GetAttrString(mem, name);
    Py_DECREF(mem);
    if (method == NULL) {
        return NULL;
    }
    out = PyObject_Vectorcall(method, args, (size_t)nargs, kwnames);
    Py_DECREF(method);
    return out;
}

PyDoc_STRVAR(buffer_view_doc,
             "view($self, start, stop=None)\n--\n\n"
             "A MemoryPointer over bytes [start, stop) of mapped memory at "
             "their\ndevice address, keeping the buffer alive "
             "(MemoryPointer.view).\nTypeError for memory that is not "
             "mapped.");

static PyObject *
buffer_view(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
            PyObject *kwnames)
{
    return as_pointer(op, "view", args, nargs, kwnames);
}

PyDoc_STRVAR(buffer_memset_doc,
             "memset($self, byte, count=None, stream=0)\n--\n\n"
             "Sets the first *count* bytes (all by default) of mapped "
             "memory to\n*byte* through the device, on *stream* "
             "(MemoryPointer.memset).\nTypeError for memory that is not "
             "mapped.");

static PyObject *
buffer_memset(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    return as_pointer(op, "memset", args, nargs, kwnames);
}

PyDoc_STRVAR(buffer_own_doc,
             "own($self)\n--\n\n"
             "The buffer itself: holding it keeps the memory (numba's "
             "own()).");

static PyObject *
buffer_own(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(op);
}

static PyMethodDef buffer_methods[] = {
    {"view", (PyCFunction)(void (*)(void))buffer_view,
     METH_FASTCALL | METH_KEYWORDS, buffer_view_doc},
    {"memset", (PyCFunction)(void (*)(void))buffer_memset,
     METH_FASTCALL | METH_KEYWORDS, buffer_memset_doc},
    {"own", buffer_own, METH_NOARGS, buffer_own_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(buffer_doc,
             "HostBuffer\n\n"
             "Page-locked host memory as one object (numba's PinnedMemory "
             "and\nMappedMemory): the .base of the arrays pinned_array() "
             "and\nmapped_array() make, and what pinned(), register() and "
             "mapped()\nhold while an array is registered. Its bytes are "
             "exported through the\nbuffer protocol (read-only for a "
             "read-only registration). cudamem's own\npages stay valid as "
             "long as the buffer lives, whatever happens to\ncontexts, and "
             "are freed with it. Registrations and write-combined\nmemory "
             "retain their device's primary context: close() leaves "
             "them,\nDevice.reset() ends them (and frees write-combined "
             "memory). EMM plugins\nmake them with PinnedMemory() and "
             "MappedMemory().");

static PyType_Slot buffer_slots[] = {
    {Py_tp_doc, (void *)buffer_doc},
    {Py_tp_dealloc, buffer_dealloc},
    {Py_tp_traverse, buffer_traverse},
    {Py_tp_repr, buffer_repr},
    {Py_tp_getset, buffer_getset},
    {Py_tp_methods, buffer_methods},
    {Py_tp_members, buffer_members},
    {Py_bf_getbuffer, buffer_getbuffer},
    {0, NULL},
};

static PyType_Spec buffer_spec = {
    .name = "cudamem.HostBuffer",
    .basicsize = sizeof(cmpy_HostBuffer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = buffer_slots,
};

/* A HostBuffer owning new cudamem host memory of `kind` on dev. */
static PyObject *
native_buffer(cmpy_state *st, cm_device *dev, cm_host_kind kind,
              int portable, size_t nbytes)
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
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    buf = new_buffer(st, host, NULL);
    if (buf == NULL) {
        discard(st, host);
    }
    return buf;
}

/* What a plugin's memhostalloc() returned: a HostBuffer (PinnedMemory or
 * MappedMemory) of at least nbytes, mapped on dev when `mapped`. */
static int
check_plugin_buffer(cmpy_state *st, cm_device *dev, PyObject *plugin,
                    PyObject *got, size_t nbytes, int mapped)
{
    cm_host *host = cmpy_hostbuf_host(st, got);

    if (host == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "%R.memhostalloc(%zu) returned %R, which is not a "
                     "PinnedMemory or MappedMemory",
                     plugin, nbytes, got);
        return -1;
    }
    if (host->size < nbytes || (mapped && (!host->mapped ||
                                           host->dev != dev))) {
        PyErr_Format(PyExc_ValueError,
                     "%R.memhostalloc(%zu) returned %R, not %zu bytes%s",
                     plugin, nbytes, got, nbytes,
                     mapped ? " mapped on the current device" : "");
        return -1;
    }
    return 0;
}

/* nbytes of host memory of `kind` for dev: from its context's plugin's
 * memhostalloc() when it has one (numba's arguments: the size alone for
 * pinned memory), else cudamem's. A new HostBuffer. */
static PyObject *
host_buffer(cmpy_state *st, cm_device *dev, cm_host_kind kind,
            int portable, size_t nbytes)
{
    int mapped = kind != CM_HOST_PINNED, rc;
    PyObject *args, *kwargs = NULL, *plugin, *got;

    /* As memalloc(): no plugin is asked for zero bytes. */
    if (!st->plugins || nbytes == 0) {
        return native_buffer(st, dev, kind, portable, nbytes);
    }
    args = Py_BuildValue("(n)", (Py_ssize_t)nbytes);
    if (args != NULL && mapped) {
        kwargs = Py_BuildValue("{s:O,s:O,s:O}", "mapped", Py_True,
                               "portable", portable ? Py_True : Py_False,
                               "wc",
                               kind == CM_HOST_MAPPED_WC ? Py_True
                                                         : Py_False);
    }
    rc = args != NULL && (kwargs != NULL || !mapped)
             ? cmpy_manager_call(st, dev, "memhostalloc", 0, args, kwargs,
                                 &plugin, &got)
             : -1;
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    if (rc <= 0) {
        return rc == 0 ? native_buffer(st, dev, kind, portable, nbytes)
                       : NULL;
    }
    if (check_plugin_buffer(st, dev, plugin, got, nbytes, mapped) < 0) {
        Py_CLEAR(got);
    }
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
        (char *)buffer_data(((cmpy_HostBuffer *)buf)->host) - low,
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
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    buf = new_buffer(st, block, NULL);
    if (buf == NULL) {
        discard(st, block);
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

static const char *const layout_names[] = {"shape",  "dtype",    "strides",
                                           "order",  "stream",   "portable",
                                           "wc"};

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
        cmpy_parse_layout(argv[0], argv[1], argv[2], argv[3], &ndim, shape,
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
                      wc ? CM_HOST_MAPPED_WC : CM_HOST_MAPPED, portable,
                      dtype, ndim, shape, strides);
    if (host == NULL) {
        return NULL;
    }
    /* A view of the plain array: its .base is the HostBuffer's array. */
    return cmpy_hostarray_new(module, CMPY_HOSTARRAY_MAPPED, dtype, ndim,
                              shape, strides,
                              PyArray_DATA((PyArrayObject *)host), host,
                              ref);
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
        cmpy_parse_layout(argv[0], argv[1], argv[2], argv[3], &ndim, shape,
                          strides, &dtype) < 0) {
        return NULL;
    }
    /* A bad stream allocates nothing. */
    if ((argv[5] == NULL || (portable = PyObject_IsTrue(argv[5])) >= 0) &&
        (argv[6] == NULL || (wc = PyObject_IsTrue(argv[6])) >= 0) &&
        cmpy_current_device(st, &dev) == 0 &&
        cmpy_stream_arg(st, argv[4] != NULL ? argv[4] : Py_None, dev,
                        &ref) == 0) {
        arr = cmpy_mapped_empty(module, dev, wc, portable, dtype, ndim, shape,
                                strides, &ref);
    }
    Py_DECREF(dtype);
    return arr;
}

/* The bytes an array's elements touch: [*lo, *lo + *n). TypeError or
 * ValueError naming anything that cannot be registered. */
static int
array_extent(PyObject *obj, char **lo, size_t *n)
{
    PyArrayObject *a = (PyArrayObject *)obj;
    Py_ssize_t size, low, high;

    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "only NumPy arrays can be page-locked, not %.200s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyDataType_REFCHK(PyArray_DESCR(a))) {
        PyErr_Format(PyExc_TypeError,
                     "an array of dtype %R holds Python objects, which "
                     "cannot be page-locked for the device",
                     (PyObject *)PyArray_DESCR(a));
        return -1;
    }
    if (cmpy_layout_extent(PyArray_NDIM(a), PyArray_DIMS(a),
                           PyArray_STRIDES(a), PyArray_ITEMSIZE(a), &size,
                           &low, &high) < 0) {
        return -1;
    }
    *lo = PyArray_BYTES(a) + low;
    *n = (size_t)(high - low);
    return 0;
}

/* Drops the registrations of buffers[0:n]; the first failure is raised,
 * the others still dropped. */
static int
unregister_all(cmpy_state *st, PyObject *const *buffers, Py_ssize_t n)
{
    cm_error err, later;
    int rc = 0;

    for (Py_ssize_t i = 0; i < n; i++) {
        cm_host *host = ((cmpy_HostBuffer *)buffers[i])->host;
        int one;

        Py_BEGIN_ALLOW_THREADS
        one = cm_host_unregister(host, rc < 0 ? &later : &err);
        Py_END_ALLOW_THREADS
        if (one < 0) {
            rc = -1;
        }
    }
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    return rc;
}

PyDoc_STRVAR(host_register_doc,
             "_host_register($module, arrays, mapped=False)\n--\n\n"
             "Page-locks every array of the sequence (read-only ones "
             "read-only),\nwith a device address when *mapped*: all or "
             "none.");

/* HostBuffers page-locking the arrays of `seq` (a PySequence_Fast): a
 * list, or NULL with an exception and nothing registered. */
static PyObject *
register_seq(cmpy_state *st, PyObject *seq, int mapped)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i;
    PyObject *out = NULL;
    cm_device *dev;

    /* Every array is checked before anything is registered. */
    for (i = 0; i < n; i++) {
        char *lo;
        size_t size;

        if (array_extent(PySequence_Fast_GET_ITEM(seq, i), &lo, &size) < 0) {
            return NULL;
        }
    }
    if (cmpy_current_device(st, &dev) < 0 || (out = PyList_New(n)) == NULL) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        PyObject *obj = PySequence_Fast_GET_ITEM(seq, i), *buf;
        int readonly = !PyArray_ISWRITEABLE((PyArrayObject *)obj), rc;
        cm_host *host;
        cm_error err;
        size_t size;
        char *lo;

        (void)array_extent(obj, &lo, &size);
        Py_BEGIN_ALLOW_THREADS
        rc = cm_host_register(dev, lo, size, readonly, mapped, &host, &err);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            cmpy_raise(st, &err);
            goto fail;
        }
        buf = new_buffer(st, host, obj);
        if (buf == NULL) {
            discard(st, host);
            goto fail;
        }
        PyList_SET_ITEM(out, i, buf);
    }
    return out;
fail : {
    /* All or none: drop what this call registered. */
    PyObject *exc = cmpy_exc_take();

    if (unregister_all(st, PySequence_Fast_ITEMS(out), i) < 0) {
        PyErr_Clear();
    }
    cmpy_exc_put(exc);
    Py_DECREF(out);
    return NULL;
}
}

static PyObject *
host_register(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    static const char *const names[] = {"arrays", "mapped"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2], *seq, *out;
    int mapped = 0;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("_host_register", names, 2, 1, args, nargs, kwnames,
                        argv) < 0 ||
        (argv[1] != NULL && (mapped = PyObject_IsTrue(argv[1])) < 0)) {
        return NULL;
    }
    seq = PySequence_Fast(argv[0], "_host_register() needs a sequence");
    if (seq == NULL) {
        return NULL;
    }
    out = register_seq(st, seq, mapped);
    Py_DECREF(seq);
    return out;
}

/* register()'s key of a NumPy array: (data address, nbytes), as numba's
 * ROC register() would see it. A new reference, or NULL with TypeError
 * for anything else. */
static PyObject *
registry_key(PyObject *obj)
{
    PyArrayObject *a = (PyArrayObject *)obj;

    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "only NumPy arrays can be page-locked, not %.200s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return Py_BuildValue("(Nn)", PyLong_FromVoidPtr(PyArray_DATA(a)),
                         PyArray_NBYTES(a));
}

/* ValueError: "the array of shape (3,) and dtype float64 at 0x... (24
 * bytes) is <what>". Returns -1. */
static int
registry_error(PyObject *obj, const char *what)
{
    PyArrayObject *a = (PyArrayObject *)obj;
    PyObject *shape = PyObject_GetAttrString(obj, "shape");
    char addr[32];

    /* PyUnicode_FromFormat has no %llx. */
    snprintf(addr, sizeof(addr), "0x%llx",
             (unsigned long long)(uintptr_t)PyArray_DATA(a));
    if (shape != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "the array of shape %S and dtype %S at %s (%zd bytes) "
                     "is %s",
                     shape, (PyObject *)PyArray_DESCR(a), addr,
                     PyArray_NBYTES(a), what);
        Py_DECREF(shape);
    }
    return -1;
}

/* The keys of the arrays of `seq`, checked against the registry: each
 * must be in it (`want` 1) or not (`want` 0), and no two alike. A tuple,
 * or NULL with TypeError or ValueError before anything changed. */
static PyObject *
registry_keys(cmpy_state *st, PyObject *seq, int want)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *keys = PyTuple_New(n);

    for (Py_ssize_t i = 0; keys != NULL && i < n; i++) {
        PyObject *obj = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *key = registry_key(obj), *have;
        int seen = 0;

        if (key == NULL) {
            Py_CLEAR(keys);
            break;
        }
        PyTuple_SET_ITEM(keys, i, key);
        have = PyDict_GetItemWithError(st->registered, key); /* borrowed */
        for (Py_ssize_t j = 0; j < i && seen == 0; j++) {
            seen = PyObject_RichCompareBool(PyTuple_GET_ITEM(keys, j), key,
                                            Py_EQ);
        }
        if ((have == NULL && PyErr_Occurred()) || seen < 0) {
            Py_CLEAR(keys);
        }
        /* A registration under way (None) counts as present for a new
         * one, absent for deregister(). */
        else if (want ? have == NULL || have == Py_None || seen
                      : have != NULL || seen) {
            registry_error(obj, want ? "not registered"
                                     : "registered already");
            Py_CLEAR(keys);
        }
    }
    return keys;
}

static int
registry_ready(cmpy_state *st)
{
    if (st->registered == NULL) {
        st->registered = PyDict_New();
    }
    return st->registered != NULL ? 0 : -1;
}

PyDoc_STRVAR(register_doc,
             "_register($module, arrays)\n--\n\n"
             "register(*arrays): page-locks every NumPy array of the "
             "sequence, all or\nnone, and enters each in the registry by "
             "(address, nbytes); one\nregistered already raises "
             "ValueError first. The list of HostBuffers.");

static PyObject *
register_named(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *seq = NULL, *keys = NULL, *out = NULL, *exc;
    Py_ssize_t n = 0, i;

    if (cmpy_numpy_init() < 0 || registry_ready(st) < 0 ||
        (seq = PySequence_Fast(arg, "_register() needs a sequence")) ==
            NULL ||
        (keys = registry_keys(st, seq, 0)) == NULL) {
        goto done;
    }
    n = PyTuple_GET_SIZE(keys);
    /* Reserved while the GIL is released to register them. */
    for (i = 0; i < n; i++) {
        if (PyDict_SetItem(st->registered, PyTuple_GET_ITEM(keys, i),
                           Py_None) < 0) {
            break;
        }
    }
    out = i == n ? register_seq(st, seq, 0) : NULL;
    exc = cmpy_exc_take();
    for (Py_ssize_t j = 0; j < i; j++) {
        PyObject *key = PyTuple_GET_ITEM(keys, j);
        int rc = out != NULL
                     ? PyDict_SetItem(st->registered, key,
                                      PyList_GET_ITEM(out, j))
                     : PyDict_DelItem(st->registered, key);

        if (rc < 0) {
            /* Out of memory on a dict that holds the key: not seen. */
            PyErr_WriteUnraisable(module);
        }
    }
    cmpy_exc_put(exc);
done:
    Py_XDECREF(keys);
    Py_XDECREF(seq);
    return out;
}

PyDoc_STRVAR(deregister_doc,
             "_deregister($module, arrays)\n--\n\n"
             "deregister(*arrays): ends register()'s page-locking of every "
             "NumPy array\nof the sequence; one not registered raises "
             "ValueError before anything\nis deregistered.");

static PyObject *
deregister_named(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *seq = NULL, *keys = NULL, *buffers = NULL, *out = NULL;
    Py_ssize_t n;

    if (cmpy_numpy_init() < 0 || registry_ready(st) < 0 ||
        (seq = PySequence_Fast(arg, "_deregister() needs a sequence")) ==
            NULL ||
        (keys = registry_keys(st, seq, 1)) == NULL) {
        goto done;
    }
    n = PyTuple_GET_SIZE(keys);
    if ((buffers = PyList_New(n)) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);

        PyList_SET_ITEM(buffers, i,
                        Py_NewRef(PyDict_GetItem(st->registered, key)));
        (void)PyDict_DelItem(st->registered, key);
    }
    if (unregister_all(st, PySequence_Fast_ITEMS(buffers), n) == 0) {
        out = Py_NewRef(Py_None);
    }
done:
    Py_XDECREF(buffers);
    Py_XDECREF(keys);
    Py_XDECREF(seq);
    return out;
}

PyDoc_STRVAR(release_doc,
             "_release($module, buffers)\n--\n\n"
             "The end of a register() block: deregisters those of "
             "_register()'s\n*buffers* the registry still holds (not those "
             "deregister() ended).");

static PyObject *
release_named(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *seq = PySequence_Fast(arg, "_release() needs a sequence");
    PyObject *mine = NULL, *key, *value, *out = NULL;
    Py_ssize_t pos = 0;

    if (seq == NULL || registry_ready(st) < 0 ||
        (mine = PyList_New(0)) == NULL) {
        goto done;
    }
    /* The keys whose entry is one of these buffers, then their removal. */
    while (PyDict_Next(st->registered, &pos, &key, &value)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            if (PySequence_Fast_GET_ITEM(seq, i) == value &&
                PyList_Append(mine, key) < 0) {
                goto done;
            }
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(mine); i++) {
        key = PyList_GET_ITEM(mine, i);
        value = Py_NewRef(PyDict_GetItem(st->registered, key));
        (void)PyDict_DelItem(st->registered, key);
        PyList_SET_ITEM(mine, i, value);
        Py_DECREF(key);
    }
    if (unregister_all(st, PySequence_Fast_ITEMS(mine),
                       PyList_GET_SIZE(mine)) == 0) {
        out = Py_NewRef(Py_None);
    }
done:
    Py_XDECREF(mine);
    Py_XDECREF(seq);
    return out;
}

PyDoc_STRVAR(host_unregister_doc,
             "_host_unregister($module, buffers)\n--\n\n"
             "Drops the registrations of a sequence of HostBuffers now; the "
             "first\nfailure is raised after all are dropped.");

static PyObject *
host_unregister(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *seq = PySequence_Fast(arg, "_host_unregister() needs a "
                                         "sequence of HostBuffers");
    int rc;

    if (seq == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        if (!Py_IS_TYPE(PySequence_Fast_GET_ITEM(seq, i),
                        (PyTypeObject *)st->HostBufferType)) {
            PyErr_Format(PyExc_TypeError,
                         "_host_unregister() needs HostBuffers, not %.200s",
                         Py_TYPE(PySequence_Fast_GET_ITEM(seq, i))->tp_name);
            Py_DECREF(seq);
            return NULL;
        }
    }
    rc = unregister_all(st, PySequence_Fast_ITEMS(seq),
                        PySequence_Fast_GET_SIZE(seq));
    Py_DECREF(seq);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(host_extent_doc,
             "_host_extent($module, ary)\n--\n\n"
             "The address of the lowest byte NumPy array *ary*'s elements "
             "touch and\nthe bytes from it to the highest (what pinned() "
             "asks mempin() to lock).");

static PyObject *
host_extent(PyObject *Py_UNUSED(module), PyObject *arg)
{
    size_t size;
    char *lo;

    if (cmpy_numpy_init() < 0 || array_extent(arg, &lo, &size) < 0) {
        return NULL;
    }
    return Py_BuildValue("(Nn)", PyLong_FromVoidPtr(lo), (Py_ssize_t)size);
}

cm_host *
cmpy_hostbuf_host(cmpy_state *st, PyObject *obj)
{
    return Py_IS_TYPE(obj, (PyTypeObject *)st->HostBufferType)
               ? ((cmpy_HostBuffer *)obj)->host
               : NULL;
}

cmpy_DeviceNDArray *
cmpy_hostbuf_device_array(cmpy_state *st, PyObject *buf, PyArrayObject *ary,
                          const cmpy_stream_ref *ref)
{
    cm_host *host = ((cmpy_HostBuffer *)buf)->host;
    Py_ssize_t size, low, high;
    CUdeviceptr first = 0;
    PyObject *mem;
    cm_error err;
    char *data;

    if (!host->mapped) {
        PyErr_Format(PyExc_TypeError,
                     "%s host memory has no device address: it is not "
                     "mapped",
                     kind_name(host));
        return NULL;
    }
    if (cm_host_check(host, &err) < 0) {
        cmpy_raise(st, &err);
        return NULL;
    }
    if (cmpy_layout_extent(PyArray_NDIM(ary), PyArray_DIMS(ary),
                           PyArray_STRIDES(ary), PyArray_ITEMSIZE(ary), &size,
                           &low, &high) < 0) {
        return NULL;
    }
    data = PyArray_BYTES(ary);
    if (size != 0) {
        char *base = buffer_data(host);

        if (data + low < base || data + high > base + host->size) {
            PyErr_Format(PyExc_ValueError,
                         "the array's elements reach outside the %zu "
                         "mapped bytes of its HostBuffer",
                         host->size);
            return NULL;
        }
        /* The one translation: the same offset on both sides. */
        first = host->dptr + (CUdeviceptr)(data - base);
    }
    mem = cmpy_memory_borrow(st, host->dev, host->dptr, host->size, buf);
    if (mem == NULL) {
        return NULL;
    }
    /* The device must not write what the host may not. */
    if (host->readonly) {
        ((cmpy_MemoryPointer *)mem)->mem->readonly = CMPY_RO_REGISTERED;
    }
    else if (!PyArray_ISWRITEABLE(ary)) {
        ((cmpy_MemoryPointer *)mem)->mem->readonly = CMPY_RO_HOST_ARRAY;
    }
    return cmpy_array_wrap(st->DeviceNDArrayType, mem, first,
                           PyArray_NDIM(ary), PyArray_DIMS(ary),
                           PyArray_STRIDES(ary), PyArray_DESCR(ary), ref->obj,
                           ref);
}

PyDoc_STRVAR(host_device_array_doc,
             "_host_device_array($module, ary, buffer, stream=0)\n--\n\n"
             "The device side of *ary*, whose memory the mapped HostBuffer "
             "*buffer*\nholds: a DeviceNDArray over the same bytes, whose "
             "first element is\nary's.");

static PyObject *
host_device_array(PyObject *module, PyObject *const *args,
                  Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"ary", "buffer", "stream"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[3];
    cmpy_stream_ref ref;
    cm_host *host;

    if (cmpy_numpy_init() < 0 ||
        cmpy_parse_args("_host_device_array", names, 3, 2, args, nargs,
                        kwnames, argv) < 0) {
        return NULL;
    }
    if (!PyArray_Check(argv[0])) {
        PyErr_Format(PyExc_TypeError, "a NumPy array is needed, not %.200s",
                     Py_TYPE(argv[0])->tp_name);
        return NULL;
    }
    if ((host = cmpy_hostbuf_host(st, argv[1])) == NULL) {
        PyErr_Format(PyExc_TypeError, "buffer must be a HostBuffer, not "
                     "%.200s", Py_TYPE(argv[1])->tp_name);
        return NULL;
    }
    if (cmpy_stream_arg(st, argv[2] != NULL ? argv[2] : Py_None, host->dev,
                        &ref) < 0) {
        return NULL;
    }
    return (PyObject *)cmpy_hostbuf_device_array(
        st, argv[1], (PyArrayObject *)argv[0], &ref);
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
                         !flags[0]   ? CM_HOST_PINNED
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
    static const char *const names[] = {"context", "pointer", "size",
                                        "owner", "finalizer"};
    cmpy_state *st = cmpy_get_state(module);
    cmpy_HostBuffer *buf;
    PyObject *argv[5];
    cm_ctx_guard guard;
    cm_host *host = NULL;
    CUdeviceptr ptr;
    cm_device *dev;
    cm_error err;
    size_t size;

    if (cmpy_parse_args(name, names, 5, 3, args, nargs, kwnames, argv) <
            0 ||
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
            discard(st, host);
        }
        return cmpy_raise(st, &err);
    }
    buf = (cmpy_HostBuffer *)new_buffer(
        st, host, argv[3] != NULL && argv[3] != Py_None ? argv[3] : NULL);
    if (buf == NULL) {
        discard(st, host);
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
    return external_buffer(module, "PinnedMemory", 0, args, nargs,
                           kwnames);
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
    return external_buffer(module, "MappedMemory", 1, args, nargs,
                           kwnames);
}

PyMethodDef cmpy_hostbuf_methods[] = {
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
    {"_host_register", (PyCFunction)(void (*)(void))host_register,
     METH_FASTCALL | METH_KEYWORDS, host_register_doc},
    {"_host_unregister", (PyCFunction)host_unregister, METH_O,
     host_unregister_doc},
    {"_host_extent", (PyCFunction)host_extent, METH_O, host_extent_doc},
    {"_register", (PyCFunction)register_named, METH_O, register_doc},
    {"_deregister", (PyCFunction)deregister_named, METH_O, deregister_doc},
    {"_release", (PyCFunction)release_named, METH_O, release_doc},
    {"_host_device_array", (PyCFunction)(void (*)(void))host_device_array,
     METH_FASTCALL | METH_KEYWORDS, host_device_array_doc},
    {NULL, NULL, 0, NULL},
};

int
cmpy_hostbuf_type_init(PyObject *module, cmpy_state *st)
{
    st->HostBufferType = PyType_FromModuleAndSpec(module, &buffer_spec, NULL);
    if (st->HostBufferType == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "HostBuffer", st->HostBufferType);
}
