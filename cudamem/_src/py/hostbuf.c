/* hostbuf.c (py/): HostBuffer, the Python owner of one core host buffer
 * (core/hostmem.h): its buffer protocol, attributes and MemoryPointer
 * methods for mapped memory, and mapped memory's device side (the one
 * translation of a host address into its device address). Who makes them:
 * hostalloc.c (cudamem's host memory and a plugin's, numba's PinnedMemory
 * and MappedMemory) and hostregister.c (the caller's arrays, page-locked).
 * MappedNDArray itself is hostarray.c's; the context managers are
 * cudamem/hostarrays.py's. */
#include "hostbuf.h"

#include "device.h"
#include "memory.h"
#include "stream.h"

#include "../core/hostpool.h"

/* Where a zero-size array points: NumPy allocates for NULL data. */
static char empty_data[1];

void *
cmpy_hostbuf_data(const cm_host *h)
{
    return h->ptr != NULL ? h->ptr : empty_data;
}

PyObject *
cmpy_hostbuf_new(cmpy_state *st, cm_host *host, PyObject *owner)
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
void
cmpy_hostbuf_discard(cmpy_state *st, cm_host *host)
{
    cm_error err;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = host->pooled ? cm_hostpool_free(host, &err)
                      : cm_host_free(host, &err);
    CMPY_END_ALLOW_THREADS
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
    cmpy_hostbuf_discard(st, self->host);
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
    return PyUnicode_FromFormat(
        "<cudamem.HostBuffer %s, %zu bytes at %s%s>", kind_name(self->host),
        self->host->size, addr,
        self->host->reg != NULL || self->host->external ||
                self->host->kind == CM_HOST_MAPPED_WC || self->host->size == 0
            ? ""
            : ", not page-locked");
}

static int
buffer_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    cmpy_HostBuffer *self = (cmpy_HostBuffer *)op;

    return PyBuffer_FillInfo(view, op, cmpy_hostbuf_data(self->host),
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
    return Py_NewRef(
        cmpy_device_of(cmpy_type_state((PyObject *)self), self->host->dev));
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
     "numba's MemoryPointer.owner: the owned object, else the buffer.", NULL},
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
     "Whether cudamem holds a page-locking registration for it now.", NULL},
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
        char *base = cmpy_hostbuf_data(host);

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
host_device_array(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames)
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
        PyErr_Format(PyExc_TypeError,
                     "buffer must be a HostBuffer, not "
                     "%.200s",
                     Py_TYPE(argv[1])->tp_name);
        return NULL;
    }
    if (cmpy_stream_arg(st, argv[2] != NULL ? argv[2] : Py_None, host->dev,
                        &ref) < 0) {
        return NULL;
    }
    return (PyObject *)cmpy_hostbuf_device_array(
        st, argv[1], (PyArrayObject *)argv[0], &ref);
}

PyMethodDef cmpy_hostbuf_methods[] = {
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
