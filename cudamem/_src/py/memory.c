/* memory.c (py/): the MemoryPointer type (numba's MemoryPointer as an
 * array's gpu_data): device pointer, size, owner, views, own(), free(),
 * memset(), the buffer protocol for host-accessible (managed) memory; the
 * records it owns (cudamem's own allocations, IPC mappings, borrowed and
 * external memory); the ctypes handle objects (cudamem/_handles.py); and
 * the notes of stream work on a record that arrays share. Asking a
 * context's EMM plugin first is emm.c's. Allocation and release are
 * core/memory.c's, IPC mappings core/ipc.c's. */
#include "memory.h"

#include "../core/copy.h"
#include "../core/ipc.h"
#include "../core/stream.h"
#include "device.h"
#include "stream.h"

/* ------------------------------------------------------------------------
 * The records a MemoryPointer owns, and their arguments. */

static cmpy_MemoryPointer *
new_pointer(cmpy_state *st, cm_mem *mem, CUdeviceptr ptr, size_t size,
            PyObject *owner)
{
    cmpy_MemoryPointer *self;

    if (st->npointer_cache > 0) {
        self = (cmpy_MemoryPointer *)st->pointer_cache[--st->npointer_cache];
        (void)PyObject_Init((PyObject *)self,
                            (PyTypeObject *)st->MemoryPointerType);
    }
    else {
        self = PyObject_GC_New(cmpy_MemoryPointer,
                               (PyTypeObject *)st->MemoryPointerType);
        if (self == NULL) {
            return NULL;
        }
    }
    self->mem = mem;
    self->ptr = ptr;
    self->size = size;
    self->owner = Py_XNewRef(owner);
    self->managed = mem->kind == CM_FREE_MANAGED;
    self->weakreflist = NULL;
    /* Without an owner it refers to nothing but its type, and never will:
     * no cycle can hold it, so the collector need not see it (CPython's
     * tuples of atomic items are untracked alike). */
    if (owner != NULL) {
        PyObject_GC_Track(self);
    }
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
cmpy_memory_native_alloc(cmpy_state *st, cm_device *dev, size_t nbytes,
                         CUstream stream)
{
    cm_error err;
    cm_mem *mem = NULL;
    cm_alloc_from then;
    int made;

    /* Releasing the GIL costs as much as the rest of a stream-ordered
     * allocation outside the driver: only what can wait goes without it. */
    made = cm_mem_alloc_nowait(dev, nbytes, stream, &then, &mem, &err);
    if (made == 1) {
        Py_BEGIN_ALLOW_THREADS
        made = cm_mem_alloc_from(dev, nbytes, stream, then, &mem, &err);
        CMPY_END_ALLOW_THREADS
    }
    return own_record(st, made, mem, &err);
}

/* An address given as an int or as an object with an int `.value` (a
 * ctypes pointer; None for NULL, as c_void_p(0).value). 0, or -1 with
 * TypeError / ValueError naming `what` and the value. */
int
cmpy_address_arg(PyObject *arg, const char *what, CUdeviceptr *out)
{
    PyObject *value = NULL, *index;
    unsigned long long addr;

    if (!PyIndex_Check(arg) || PyBool_Check(arg)) {
        if (cmpy_optional_attr(arg, "value", &value) < 0) {
            return -1;
        }
        if (value == Py_None) {
            Py_DECREF(value);
            *out = 0;
            return 0;
        }
        if (value == NULL || !PyIndex_Check(value) || PyBool_Check(value)) {
            Py_XDECREF(value);
            PyErr_Format(PyExc_TypeError,
                         "%s must be an int or a pointer object with an int "
                         ".value, not %R",
                         what, arg);
            return -1;
        }
    }
    index = PyNumber_Index(value != NULL ? value : arg);
    Py_XDECREF(value);
    if (index == NULL) {
        return -1;
    }
    addr = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (addr == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s %R is not an address", what, arg);
        return -1;
    }
    *out = (CUdeviceptr)addr;
    return 0;
}

/* A byte count: an int >= 0. */
int
cmpy_size_arg(PyObject *arg, const char *what, size_t *out)
{
    Py_ssize_t n;

    if (!PyIndex_Check(arg) || PyBool_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %R", what, arg);
        return -1;
    }
    n = PyNumber_AsSsize_t(arg, NULL);
    if (n < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s %R is not a byte count", what, arg);
        return -1;
    }
    *out = (size_t)n;
    return 0;
}

/* A MemoryPointer owning an external record for `size` bytes at ptr on
 * dev (host-accessible when `managed`), whose release hook calls
 * `finalizer` (or None) and drops `keep` (or None). */
PyObject *
cmpy_memory_external(cmpy_state *st, cm_device *dev, CUdeviceptr ptr,
                     size_t size, int managed, PyObject *finalizer,
                     PyObject *keep, PyObject *owner)
{
    PyObject *pair = PyTuple_Pack(2, finalizer, keep);
    cmpy_MemoryPointer *self;
    cm_error err;
    cm_mem *mem;

    if (pair == NULL) {
        return NULL;
    }
    if (cm_mem_external(dev, ptr, size, pair, &mem, &err) < 0) {
        Py_DECREF(pair);
        return cmpy_raise(st, &err);
    }
    self = new_pointer(st, mem, ptr, size, owner);
    if (self == NULL) {
        /* Runs the release hook: the finalizer frees the memory. */
        (void)cm_mem_decref(mem, &err);
        return NULL;
    }
    self->managed = managed;
    return (PyObject *)self;
}

PyObject *
cmpy_memory_native_managed(cmpy_state *st, cm_device *dev, size_t nbytes,
                           int attach_global)
{
    cm_error err;
    cm_mem *mem = NULL;
    int made;

    Py_BEGIN_ALLOW_THREADS
    made = cm_mem_alloc_managed(dev, nbytes, attach_global, &mem, &err);
    CMPY_END_ALLOW_THREADS
    return own_record(st, made, mem, &err);
}

PyObject *
cmpy_memory_ipc_open(cmpy_state *st, cm_device *dev,
                     const CUipcMemHandle *handle)
{
    cm_error err;
    cm_mem *mem = NULL;
    int made;

    Py_BEGIN_ALLOW_THREADS
    made = cm_ipc_open(dev, handle, &mem, &err);
    CMPY_END_ALLOW_THREADS
    return own_record(st, made, mem, &err);
}

PyObject *
cmpy_memory_pool_open(cmpy_state *st, cm_device *dev, CUmemoryPool pool,
                      const CUmemPoolPtrExportData *data)
{
    cm_error err;
    cm_mem *mem = NULL;
    int made;

    Py_BEGIN_ALLOW_THREADS
    made = cm_ipc_open_pool_ptr(dev, pool, data, &mem, &err);
    CMPY_END_ALLOW_THREADS
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

/* ------------------------------------------------------------------------
 * The slots. */

static PyObject *
pointer_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"context", "pointer",   "size",
                            "owner",   "finalizer", NULL};
    cmpy_state *st = cmpy_state_of(type);
    PyObject *argv[5] = {NULL, NULL, NULL, NULL, NULL};

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OO:MemoryPointer", names,
                                     &argv[0], &argv[1], &argv[2], &argv[3],
                                     &argv[4])) {
        return NULL;
    }
    return cmpy_emm_external_new(st, "MemoryPointer", argv, 0);
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
    cmpy_state *st = cmpy_type_state((PyObject *)self);
    cm_error err;

    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    cmpy_release_begin();
    if (cmpy_release_end(cm_mem_decref(self->mem, &err), &err) < 0) {
        cmpy_warn_release(st, &err);
    }
    Py_CLEAR(self->owner);
    /* Kept for the next allocation (not a subclass's: its size and slots
     * differ; none once the module is cleared). */
    if (st != NULL && type == (PyTypeObject *)st->MemoryPointerType &&
        st->npointer_cache < CMPY_CACHE_USED) {
        st->pointer_cache[st->npointer_cache++] = (PyObject *)self;
    }
    else {
        type->tp_free(self);
    }
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

/* Indexes of cmpy_state.handles, in the LOAD_HANDLES hook's order. */
enum { HANDLE = 0, DEVICE_POINTER, LAUNCH_VIEW };

/* ------------------------------------------------------------------------
 * ctypes handles (cudamem/_handles.py). */

/* cudamem._handles.<type>(arg) of owner's module, consuming arg (a new
 * reference, or NULL after a failure); the LOAD_HANDLES hook imports the
 * module (and ctypes) on first use. */
static PyObject *
handles_call(PyObject *owner, int type, PyObject *arg)
{
    cmpy_state *st = arg != NULL ? cmpy_type_state(owner) : NULL;
    PyObject *out = NULL;

    if (st != NULL && (st->handles[type] != NULL ||
                       cmpy_hook_load(st, CMPY_HOOK_LOAD_HANDLES, st->handles,
                                      CMPY_HANDLES_COUNT) == 0)) {
        out = PyObject_CallOneArg(st->handles[type], arg);
    }
    Py_XDECREF(arg);
    return out;
}

PyObject *
cmpy_c_void_p(PyObject *owner, unsigned long long value)
{
    return handles_call(owner, HANDLE, PyLong_FromUnsignedLongLong(value));
}

PyObject *
cmpy_device_ctypes_pointer(PyObject *owner, unsigned long long value)
{
    return handles_call(owner, DEVICE_POINTER,
                        PyLong_FromUnsignedLongLong(value));
}

PyObject *
cmpy_launch_view(PyObject *array, void *Py_UNUSED(closure))
{
    return handles_call(array, LAUNCH_VIEW, Py_NewRef(array));
}

/* ------------------------------------------------------------------------
 * Attributes. */

static PyObject *
pointer_get_device_pointer(cmpy_MemoryPointer *self, void *Py_UNUSED(c))
{
    return cmpy_c_void_p((PyObject *)self, (unsigned long long)self->ptr);
}

static PyObject *
pointer_get_ctypes_pointer(cmpy_MemoryPointer *self, void *Py_UNUSED(c))
{
    return cmpy_device_ctypes_pointer((PyObject *)self,
                                      (unsigned long long)self->ptr);
}

static PyObject *
pointer_get_refct(cmpy_MemoryPointer *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong(
        __atomic_load_n(&self->mem->refs, __ATOMIC_RELAXED));
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
     "The address as a ctypes.c_void_p (numba's type) that converts "
     "with\nint() and operator.index().",
     NULL},
    {"handle", (getter)pointer_get_device_pointer, NULL,
     "The same as device_pointer.", NULL},
    {"device_ctypes_pointer", (getter)pointer_get_ctypes_pointer, NULL,
     "The address as a ctypes.c_size_t (numba's type; .value is 0 for\n"
     "zero-size memory) that converts with int().",
     NULL},
    {"refct", (getter)pointer_get_refct, NULL,
     "How many MemoryPointers share the allocation: this one, its views\n"
     "and owned pointers, and those of the arrays over it.",
     NULL},
    {"device_pointer_value", (getter)pointer_get_value, NULL,
     "The address as an int (None for a zero-size allocation).", NULL},
    {"size", (getter)pointer_get_size, NULL, "Bytes from the address.", NULL},
    {"owner", (getter)pointer_get_owner, NULL,
     "The MemoryPointer that owns the allocation (itself unless a view), "
     "or\nthe object whose memory it borrows (as_cuda_array's *obj*).",
     NULL},
    {"context", (getter)pointer_get_context, NULL,
     "The Context the memory belongs to.", NULL},
    {"__cuda_memory__", cmpy_get_true, NULL,
     "True: device memory (numba's MemoryPointer).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ------------------------------------------------------------------------
 * Views and the buffer protocol. */

PyDoc_STRVAR(pointer_view_doc,
             "view($self, start, stop=None)\n--\n\n"
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

    if (cmpy_parse_args("view", names, 2, 1, args, nargs, kwnames, argv) < 0) {
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
    if (view == NULL) {
        if (cm_mem_decref(base->mem, &err) < 0) {
            cmpy_warn_release(st, &err);
        }
        return NULL;
    }
    view->managed = base->managed;
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

    if (!self->managed) {
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
    return PyBuffer_FillInfo(
        view, op, self->ptr != 0 ? (void *)(uintptr_t)self->ptr : empty_buffer,
        (Py_ssize_t)self->size, 0, flags);
}

const char *
cmpy_memory_readonly_why(int readonly)
{
    static const char *const why[] = {
        [CMPY_RO_CAI] = "that a CUDA Array Interface exported read-only",
        [CMPY_RO_DLPACK] = "that a DLPack producer exported read-only",
        /* One message in two literals. */
        /* NOLINTNEXTLINE(bugprone-suspicious-missing-comma) */
        [CMPY_RO_REGISTERED] = "that is page-locked read-only (a "
                               "read-only host array)",
        [CMPY_RO_HOST_ARRAY] = "mapped from a read-only host array",
    };

    return why[readonly];
}

/* ------------------------------------------------------------------------
 * Notes of stream work on a record, which arrays share. */

int
cmpy_memory_note_work(cmpy_state *st, cm_mem *mem, cm_device *dev,
                      const cmpy_stream_ref *ref)
{
    cm_error err;
    int rc;

    if (!ref->async || ref->handle == NULL || !ref->owned) {
        return 0;
    }
    /* A full set orders its oldest work with an event. */
    Py_BEGIN_ALLOW_THREADS
    rc = cm_mem_note_stream(mem, dev, ref->handle, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    return rc;
}

int
cmpy_memory_note_done(cmpy_state *st, cm_mem *a, cm_mem *b, cm_device *dev,
                      const cmpy_stream_ref *ref, int status)
{
    cm_error err, ignored;
    int rc;

    if (status < 0 || !ref->async || ref->owned) {
        return status;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_mem_note_event(a, dev, ref->handle, &err);
    if (rc == 0 && b != NULL) {
        rc = cm_mem_note_event(b, dev, ref->handle, &err);
    }
    if (rc < 0) {
        cm_stream_synchronize(dev, ref->handle, &ignored);
    }
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        cmpy_raise(st, &err);
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * Methods and the type. */

PyDoc_STRVAR(pointer_own_doc,
             "own($self)\n--\n\n"
             "A new MemoryPointer to the same memory that keeps it alive "
             "(numba's\nOwnedPointer): refct counts it until it goes.");

static PyObject *
pointer_own(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    cmpy_MemoryPointer *self = (cmpy_MemoryPointer *)op;

    return cmpy_memory_view(cmpy_type_state(op), self, 0, self->size);
}

PyDoc_STRVAR(pointer_free_doc,
             "free($self)\n--\n\n"
             "Frees the memory now, as the last reference going would "
             "(numba's\nMemoryPointer.free()): cudamem's allocations go "
             "to the pending\ndeallocations, an EMM plugin's finalizer "
             "runs. This pointer, its\nviews and the arrays over it raise "
             "CudaDriverError on use from then on.\nMemory cudamem does "
             "not free (borrowed from another library, an IPC\nmapping, "
             "a plugin's without a finalizer) is left alone. A second "
             "free()\nraises RuntimeError.");

static PyObject *
pointer_free(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    cmpy_MemoryPointer *self = (cmpy_MemoryPointer *)op;
    cmpy_state *st = cmpy_type_state(op);
    cm_mem *mem = self->mem;
    cm_error err;

    /* Before `external`, which the release dropped. */
    if (mem->released) {
        PyErr_SetString(PyExc_RuntimeError, "Freeing dead memory");
        return NULL;
    }
    /* numba frees only what has a finalizer. */
    if (mem->kind == CM_FREE_EXTERNAL &&
        PyTuple_GET_ITEM((PyObject *)mem->external, 0) == Py_None) {
        Py_RETURN_NONE;
    }
    if (cm_mem_release_now(mem, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(pointer_memset_doc,
             "memset($self, byte, count=None, stream=0)\n--\n\n"
             "Sets the first *count* bytes (all by default) to *byte* "
             "(0 to 255):\nsynchronous and complete on return on stream "
             "0, queued on a Stream\n(numba's cuMemsetD8 / "
             "cuMemsetD8Async).");

static PyObject *
pointer_memset(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    static const char *const names[] = {"byte", "count", "stream"};
    cmpy_MemoryPointer *self = (cmpy_MemoryPointer *)op;
    cmpy_state *st = cmpy_type_state(op);
    cm_device *dev = self->mem->dev;
    PyObject *argv[3];
    cmpy_stream_ref ref;
    unsigned char byte;
    size_t count = self->size;
    Py_ssize_t shape[1], strides[1] = {1};
    cm_side dst = {.on_device = 1,
                   .ptr = self->ptr,
                   .ndim = 1,
                   .shape = shape,
                   .strides = strides};
    long value;
    cm_error err;
    int rc;

    if (cmpy_parse_args("memset", names, 3, 1, args, nargs, kwnames, argv) <
        0) {
        return NULL;
    }
    if (!PyIndex_Check(argv[0]) || PyBool_Check(argv[0])) {
        PyErr_Format(PyExc_TypeError, "memset byte must be an int, not %R",
                     argv[0]);
        return NULL;
    }
    value = PyLong_AsLong(argv[0]);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        value = -1;
    }
    if (value < 0 || value > 255) {
        PyErr_Format(PyExc_OverflowError,
                     "memset byte %R is not in 0..255 (an unsigned char)",
                     argv[0]);
        return NULL;
    }
    byte = (unsigned char)value;
    if (argv[1] != NULL && argv[1] != Py_None) {
        if (cmpy_size_arg(argv[1], "memset count", &count) < 0) {
            return NULL;
        }
        if (count > self->size) {
            PyErr_Format(PyExc_ValueError,
                         "memset count %R is more than the %zu bytes of "
                         "this memory",
                         argv[1], self->size);
            return NULL;
        }
    }
    if (cm_mem_check(self->mem, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    if (self->mem->readonly) {
        char addr[24];

        snprintf(addr, sizeof(addr), "0x%llx", (unsigned long long)self->ptr);
        PyErr_Format(PyExc_ValueError,
                     "memset destination is read-only: the memory at %s is "
                     "memory %s",
                     addr, cmpy_memory_readonly_why(self->mem->readonly));
        return NULL;
    }
    if (cmpy_stream_arg(st, argv[2] != NULL ? argv[2] : Py_None, dev, &ref) <
            0 ||
        cmpy_memory_note_work(st, self->mem, dev, &ref) < 0) {
        return NULL;
    }
    shape[0] = (Py_ssize_t)count;
    Py_BEGIN_ALLOW_THREADS
    rc = cm_fill(dev, &dst, &byte, 1, ref.handle, ref.async, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    if (cmpy_memory_note_done(st, self->mem, NULL, dev, &ref, 0) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef pointer_methods[] = {
    {"view", (PyCFunction)(void (*)(void))pointer_view,
     METH_FASTCALL | METH_KEYWORDS, pointer_view_doc},
    {"own", pointer_own, METH_NOARGS, pointer_own_doc},
    {"free", pointer_free, METH_NOARGS, pointer_free_doc},
    {"memset", (PyCFunction)(void (*)(void))pointer_memset,
     METH_FASTCALL | METH_KEYWORDS, pointer_memset_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pointer_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET,
     offsetof(cmpy_MemoryPointer, weakreflist), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(pointer_doc,
             "MemoryPointer(context, pointer, size, owner=None, "
             "finalizer=None)\n--\n\n"
             "Device memory as an array's gpu_data (numba's MemoryPointer). "
             "When\ncudamem allocated it, the free is queued in the "
             "context's pending\ndeallocations once the last reference to "
             "it and its views goes.\nMemory imported through the CUDA "
             "Array Interface is never freed: the\npointer keeps its owner "
             "alive instead. Managed memory is\nhost-accessible and "
             "exports the buffer protocol (memoryview(ptr));\ndevice "
             "memory refuses it.\n\n"
             "EMM plugins make one with numba's constructor: the *size* "
             "bytes at\n*pointer* (an int, or a ctypes pointer) in "
             "*context*, kept alive with\n*owner*; *finalizer* (no "
             "arguments) frees them when the pointer and\nall its views "
             "are gone. An exception in it becomes a CudaWarning.");

static PyType_Slot pointer_slots[] = {
    {Py_tp_doc, (void *)pointer_doc},     {Py_tp_new, pointer_new},
    {Py_tp_dealloc, pointer_dealloc},     {Py_tp_traverse, pointer_traverse},
    {Py_tp_repr, pointer_repr},           {Py_tp_getset, pointer_getset},
    {Py_tp_methods, pointer_methods},     {Py_tp_members, pointer_members},
    {Py_bf_getbuffer, pointer_getbuffer}, {0, NULL},
};

static PyType_Spec pointer_spec = {
    .name = "cudamem.MemoryPointer",
    .basicsize = sizeof(cmpy_MemoryPointer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = pointer_slots,
};

/* ------------------------------------------------------------------------
 * cudamem's own allocations, whatever the manager (memory.py's). */

PyDoc_STRVAR(memalloc_doc,
             "_memalloc($module, context, size)\n--\n\n"
             "*size* bytes from cudamem's own allocator in *context*, "
             "whatever its\nmemory manager (DefaultMemoryManager.memalloc).");

static PyObject *
memalloc(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
         PyObject *kwnames)
{
    static const char *const names[] = {"context", "size"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2];
    cm_device *dev;
    size_t size;

    if (cmpy_parse_args("_memalloc", names, 2, 2, args, nargs, kwnames, argv) <
            0 ||
        cmpy_memory_parse_sized(st, "memalloc", argv[0], argv[1], &dev,
                                &size) < 0) {
        return NULL;
    }
    /* A plugin's memalloc() serves the legacy default stream. */
    return cmpy_memory_native_alloc(st, dev, size, NULL);
}

PyDoc_STRVAR(memallocmanaged_doc,
             "_memallocmanaged($module, context, size, "
             "attach_global=True)\n--\n\n"
             "*size* bytes of cudamem's own managed memory in *context*, "
             "whatever its\nmemory manager "
             "(DefaultMemoryManager.memallocmanaged).");

static PyObject *
memallocmanaged(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"context", "size", "attach_global"};
    cmpy_state *st = cmpy_get_state(module);
    int attach_global = 1;
    PyObject *argv[3];
    cm_device *dev;
    size_t size;

    if (cmpy_parse_args("_memallocmanaged", names, 3, 2, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_memory_parse_sized(st, "memallocmanaged", argv[0], argv[1], &dev,
                                &size) < 0 ||
        (argv[2] != NULL && (attach_global = PyObject_IsTrue(argv[2])) < 0)) {
        return NULL;
    }
    return cmpy_memory_native_managed(st, dev, size, attach_global);
}

PyMethodDef cmpy_memory_methods[] = {
    {"_memalloc", (PyCFunction)(void (*)(void))memalloc,
     METH_FASTCALL | METH_KEYWORDS, memalloc_doc},
    {"_memallocmanaged", (PyCFunction)(void (*)(void))memallocmanaged,
     METH_FASTCALL | METH_KEYWORDS, memallocmanaged_doc},
    {NULL, NULL, 0, NULL},
};

int
cmpy_memory_type_init(PyObject *module, cmpy_state *st)
{
    st->MemoryPointerType = PyType_FromModuleAndSpec(module, &pointer_spec,
                                                     NULL);
    if (st->MemoryPointerType == NULL) {
        return -1;
    }
    /* The state lives as long as the module; module.c uninstalls the
     * hook when it goes. */
    cm_mem_set_release_hook(cmpy_emm_release_external, st);
    return PyModule_AddObjectRef(module, "MemoryPointer",
                                 st->MemoryPointerType);
}
