/* memory.c (py/): the MemoryPointer type (numba's MemoryPointer as an
 * array's gpu_data): device pointer, size, owner, views, and the buffer
 * protocol for host-accessible (managed) memory. Allocation and release
 * are core/memory.c's; this file only holds the reference. */
#include "memory.h"

#include "device.h"

static cmpy_MemoryPointer *
new_pointer(cmpy_state *st, cm_mem *mem, CUdeviceptr ptr, size_t size,
            PyObject *owner)
{
    cmpy_MemoryPointer *self = PyObject_GC_New(
        cmpy_MemoryPointer, (PyTypeObject *)st->MemoryPointerType);

    if (self == NULL) {
        return NULL;
    }
    self->mem = mem;
    self->ptr = ptr;
    self->size = size;
    self->owner = Py_XNewRef(owner);
    self->weakreflist = NULL;
    PyObject_GC_Track(self);
    return self;
}

/* A MemoryPointer owning a new record from `made` (0 or -1). */
static PyObject *
own_record(cmpy_state *st, int made, cm_mem *mem, const cm_error *made_err)
{
    cmpy_MemoryPointer *self;
    cm_error err;

    if (made < 0) {
        return cmpy_raise(st, made_err);
    }
    self = new_pointer(st, mem, mem->ptr, mem->size, NULL);
    if (self == NULL && cm_mem_decref(mem, &err) < 0) {
        cmpy_warn_release(st, &err);
    }
    return (PyObject *)self;
}

PyObject *
cmpy_memory_alloc(cmpy_state *st, cm_device *dev, size_t nbytes)
{
    cm_error err;
    cm_mem *mem = NULL;
    int made;

    /* The recovery on out-of-memory can wait for the device. */
    Py_BEGIN_ALLOW_THREADS
    made = cm_mem_alloc(dev, nbytes, &mem, &err);
    Py_END_ALLOW_THREADS
    return own_record(st, made, mem, &err);
}

PyObject *
cmpy_memory_alloc_managed(cmpy_state *st, cm_device *dev, size_t nbytes,
                          int attach_global)
{
    cm_error err;
    cm_mem *mem = NULL;
    int made;

    Py_BEGIN_ALLOW_THREADS
    made = cm_mem_alloc_managed(dev, nbytes, attach_global, &mem, &err);
    Py_END_ALLOW_THREADS
    return own_record(st, made, mem, &err);
}

PyObject *
cmpy_memory_borrow(cmpy_state *st, cm_device *dev, CUdeviceptr ptr,
                   size_t size, PyObject *owner)
{
    cmpy_MemoryPointer *self;
    cm_error err;
    cm_mem *mem;

    if (cm_mem_borrow(dev, ptr, size, &mem, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    self = new_pointer(st, mem, ptr, size, owner == Py_None ? NULL : owner);
    if (self == NULL && cm_mem_decref(mem, &err) < 0) {
        cmpy_warn_release(st, &err);
    }
    return (PyObject *)self;
}

static int
pointer_traverse(cmpy_MemoryPointer *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    return 0;
}

static void
pointer_dealloc(cmpy_MemoryPointer *self)
{
    PyTypeObject *type = Py_TYPE(self);
    cm_error err;

    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    if (cm_mem_decref(self->mem, &err) < 0) {
        cmpy_warn_release(cmpy_type_state((PyObject *)self), &err);
    }
    Py_CLEAR(self->owner);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *
pointer_repr(cmpy_MemoryPointer *self)
{
    char addr[24];

    /* PyUnicode_FromFormat has no %llx. */
    snprintf(addr, sizeof(addr), "0x%llx", (unsigned long long)self->ptr);
    return PyUnicode_FromFormat("<cudamem.MemoryPointer %s, %zu bytes on "
                                "device %d>",
                                addr, self->size, self->mem->dev->ordinal);
}

PyObject *
cmpy_c_void_p(unsigned long long value)
{
    PyObject *ctypes = PyImport_ImportModule("ctypes");
    PyObject *out;

    if (ctypes == NULL) {
        return NULL;
    }
    out = PyObject_CallMethod(ctypes, "c_void_p", "K", value);
    Py_DECREF(ctypes);
    return out;
}

static PyObject *
pointer_get_device_pointer(cmpy_MemoryPointer *self, void *Py_UNUSED(c))
{
    return cmpy_c_void_p((unsigned long long)self->ptr);
}

static PyObject *
pointer_get_value(cmpy_MemoryPointer *self, void *Py_UNUSED(c))
{
    if (self->ptr == 0) {
        Py_RETURN_NONE; /* as numba's c_void_p(0).value */
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)self->ptr);
}

static PyObject *
pointer_get_size(cmpy_MemoryPointer *self, void *Py_UNUSED(c))
{
    return PyLong_FromSize_t(self->size);
}

static PyObject *
pointer_get_owner(cmpy_MemoryPointer *self, void *Py_UNUSED(c))
{
    return Py_NewRef(self->owner != NULL ? self->owner : (PyObject *)self);
}

static PyObject *
pointer_get_context(cmpy_MemoryPointer *self, void *Py_UNUSED(c))
{
    cmpy_state *st = cmpy_type_state((PyObject *)self);
    cm_error err;

    if (cm_mem_check(self->mem, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return cmpy_context_of(st, cmpy_device_of(st, self->mem->dev));
}

static PyGetSetDef pointer_getset[] = {
    {"device_pointer", (getter)pointer_get_device_pointer, NULL,
     "The address as a ctypes.c_void_p (numba's type).", NULL},
    {"handle", (getter)pointer_get_device_pointer, NULL,
     "The same as device_pointer.", NULL},
    {"device_pointer_value", (getter)pointer_get_value, NULL,
     "The address as an int (None for a zero-size allocation).", NULL},
    {"size", (getter)pointer_get_size, NULL, "Bytes from the address.", NULL},
    {"owner", (getter)pointer_get_owner, NULL,
     "The MemoryPointer that owns the allocation (itself unless a view), "
     "or\nthe object whose memory it borrows (as_cuda_array's *obj*).",
     NULL},
    {"context", (getter)pointer_get_context, NULL,
     "The Context the memory belongs to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(pointer_view_doc,
             "view(start, stop=None) -> MemoryPointer\n\n"
             "The bytes [start, stop) of this memory, sharing its "
             "allocation.");

static PyObject *
pointer_view(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    static const char *const names[] = {"start", "stop"};
    cmpy_MemoryPointer *self = (cmpy_MemoryPointer *)op;
    cmpy_state *st = cmpy_type_state(op);
    Py_ssize_t start, stop = (Py_ssize_t)self->size;
    PyObject *argv[2], *stop_arg;

    if (cmpy_parse_args("view", names, 2, 1, args, nargs, kwnames, argv) <
        0) {
        return NULL;
    }
    /* Clipped: a huge bound is outside the memory like any other. */
    start = PyNumber_AsSsize_t(argv[0], NULL);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    stop_arg = argv[1] != NULL && argv[1] != Py_None ? argv[1] : NULL;
    if (stop_arg != NULL) {
        stop = PyNumber_AsSsize_t(stop_arg, NULL);
        if (stop == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    if (start < 0 || stop < start || (size_t)stop > self->size) {
        PyObject *size = PyLong_FromSize_t(self->size);

        if (size != NULL) {
            PyErr_Format(PyExc_IndexError,
                         "view(%S, %S) is outside this memory of %S bytes",
                         argv[0], stop_arg != NULL ? stop_arg : size, size);
            Py_DECREF(size);
        }
        return NULL;
    }
    return cmpy_memory_view(st, self, (size_t)start, (size_t)(stop - start));
}

PyObject *
cmpy_memory_view(cmpy_state *st, cmpy_MemoryPointer *base, size_t offset,
                 size_t size)
{
    PyObject *owner = base->owner != NULL ? base->owner : (PyObject *)base;
    cmpy_MemoryPointer *view;
    cm_error err;

    cm_mem_incref(base->mem);
    view = new_pointer(st, base->mem,
                       base->ptr == 0 ? 0 : base->ptr + (CUdeviceptr)offset,
                       size, owner);
    if (view == NULL && cm_mem_decref(base->mem, &err) < 0) {
        cmpy_warn_release(st, &err);
    }
    return (PyObject *)view;
}

/* Zero-size memory has no address; a buffer still needs one. */
static char empty_buffer[1];

/* Managed memory is host-accessible at its device address; device memory
 * is not, and is refused with the way to a host copy. */
static int
pointer_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    cmpy_MemoryPointer *self = (cmpy_MemoryPointer *)op;
    cmpy_state *st = cmpy_type_state(op);
    cm_error err;

    if (self->mem->kind != CM_FREE_MANAGED) {
        char addr[24];

        snprintf(addr, sizeof(addr), "0x%llx", (unsigned long long)self->ptr);
        PyErr_Format(PyExc_BufferError,
                     "the MemoryPointer at %s is device memory, which the "
                     "host cannot read: get a host copy with the array's "
                     "copy_to_host()",
                     addr);
        return -1;
    }
    if (cm_mem_check(self->mem, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return PyBuffer_FillInfo(view, op,
                             self->ptr != 0 ? (void *)(uintptr_t)self->ptr
                                            : empty_buffer,
                             (Py_ssize_t)self->size, 0, flags);
}

static PyMethodDef pointer_methods[] = {
    {"view", (PyCFunction)(void (*)(void))pointer_view,
     METH_FASTCALL | METH_KEYWORDS, pointer_view_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pointer_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET,
     offsetof(cmpy_MemoryPointer, weakreflist), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(pointer_doc,
             "MemoryPointer\n\n"
             "Device memory owned by cudamem (numba's MemoryPointer), as an "
             "array's\ngpu_data. When the last reference to it and its "
             "views goes, the\nfree is queued in the context's pending "
             "deallocations. Memory imported\nthrough the CUDA Array "
             "Interface is never freed: the pointer keeps\nits owner "
             "alive instead. Managed memory is host-accessible and "
             "exports the\nbuffer protocol (memoryview(ptr)); device "
             "memory refuses it.");

static PyType_Slot pointer_slots[] = {
    {Py_tp_doc, (void *)pointer_doc},
    {Py_tp_dealloc, pointer_dealloc},
    {Py_tp_traverse, pointer_traverse},
    {Py_tp_repr, pointer_repr},
    {Py_tp_getset, pointer_getset},
    {Py_tp_methods, pointer_methods},
    {Py_tp_members, pointer_members},
    {Py_bf_getbuffer, pointer_getbuffer},
    {0, NULL},
};

static PyType_Spec pointer_spec = {
    .name = "cudamem.MemoryPointer",
    .basicsize = sizeof(cmpy_MemoryPointer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = pointer_slots,
};

int
cmpy_memory_type_init(PyObject *module, cmpy_state *st)
{
    st->MemoryPointerType =
        PyType_FromModuleAndSpec(module, &pointer_spec, NULL);
    if (st->MemoryPointerType == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "MemoryPointer",
                                 st->MemoryPointerType);
}
