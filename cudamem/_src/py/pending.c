/* pending.c (py/): Deallocations (numba's _PendingDeallocs surface: len,
 * clear, disable), the guard of defer_cleanup(), and the flush at
 * interpreter exit. The queues and their thresholds are core/release.c's
 * and core/pending.c's. */
#include "pending.h"

#include "../core/driver.h"
#include "../core/hostmem.h"

typedef struct cmpy_Deallocations {
    PyObject_HEAD
    cmpy_Context *ctx;
    cm_queue_id q;
} cmpy_Deallocations;

typedef struct cmpy_DeferGuard {
    PyObject_HEAD
    cmpy_Context *ctx;
    unsigned mask;
    unsigned depth; /* times entered and not left */
} cmpy_DeferGuard;

static const char *const queue_names[CM_QUEUE_COUNT] = {
    [CM_QUEUE_MEMORY] = "memory",
    [CM_QUEUE_OBJECTS] = "streams and events",
};

PyObject *
cmpy_deallocations_new(cmpy_state *st, cmpy_Context *ctx, cm_queue_id q)
{
    cmpy_Deallocations *self = PyObject_GC_New(
        cmpy_Deallocations, (PyTypeObject *)st->DeallocationsType);

    if (self == NULL) {
        return NULL;
    }
    self->ctx = (cmpy_Context *)Py_NewRef(ctx);
    self->q = q;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static int
shared_traverse(PyObject *self, visitproc visit, void *arg)
{
    /* Both types start with the Context after the header. */
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(((cmpy_Deallocations *)self)->ctx);
    return 0;
}

static int
shared_clear(PyObject *self)
{
    Py_CLEAR(((cmpy_Deallocations *)self)->ctx);
    return 0;
}

static void
deallocations_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    shared_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static Py_ssize_t
deallocations_len(PyObject *op)
{
    cmpy_Deallocations *self = (cmpy_Deallocations *)op;
    size_t count, bytes;
    int deferred;

    if (cmpy_context_check(cmpy_type_state(op), self->ctx) < 0) {
        return -1;
    }
    cm_queue_stats(self->ctx->device->dev, self->q, &count, &bytes, &deferred);
    return (Py_ssize_t)count;
}

static PyObject *
deallocations_repr(PyObject *op)
{
    cmpy_Deallocations *self = (cmpy_Deallocations *)op;
    size_t count, bytes;
    int deferred;

    cm_queue_stats(self->ctx->device->dev, self->q, &count, &bytes, &deferred);
    return PyUnicode_FromFormat(
        "<cudamem deallocations of %s on device %d: %zu pending, %zu bytes%s>",
        queue_names[self->q], self->ctx->device->dev->ordinal, count, bytes,
        deferred ? ", disabled" : "");
}

PyDoc_STRVAR(deallocations_clear_doc,
             "clear($self)\n--\n\n"
             "Frees everything pending now, unless disabled. A failed free "
             "is\nraised (CudaAPIError); the frees after it stay pending.");

static PyObject *
deallocations_clear(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    cmpy_Deallocations *self = (cmpy_Deallocations *)op;
    cmpy_state *st = cmpy_type_state(op);
    cm_device *dev;
    cm_error err;
    int rc;

    if (cmpy_context_check(st, self->ctx) < 0) {
        return NULL;
    }
    dev = self->ctx->device->dev;
    /* cuMemFree can wait for the device. */
    Py_BEGIN_ALLOW_THREADS
    rc = cm_queue_flush(dev, self->q, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(deallocations_disable_doc,
             "disable($self)\n--\n\n"
             "Inside the block nothing pending is freed (blocks nest). "
             "Leaving\nit does not free: the next release or clear() does.");

static PyObject *
deallocations_disable(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    cmpy_Deallocations *self = (cmpy_Deallocations *)op;

    return cmpy_defer_guard_new(cmpy_type_state(op), self->ctx, 1u << self->q);
}

static PyObject *
deallocations_stat(PyObject *op, void *closure)
{
    cmpy_Deallocations *self = (cmpy_Deallocations *)op;
    size_t count, bytes;
    int deferred;

    cm_queue_stats(self->ctx->device->dev, self->q, &count, &bytes, &deferred);
    if (closure != NULL) {
        return PyBool_FromLong(deferred);
    }
    return PyLong_FromSize_t(bytes);
}

static PyMethodDef deallocations_methods[] = {
    {"clear", deallocations_clear, METH_NOARGS, deallocations_clear_doc},
    {"disable", deallocations_disable, METH_NOARGS, deallocations_disable_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef deallocations_getset[] = {
    {"is_disabled", deallocations_stat, NULL,
     "Whether a disable() or defer_cleanup() block is open.", (void *)1},
    {"nbytes", deallocations_stat, NULL, "Bytes pending release.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(deallocations_doc,
             "Deallocations\n\n"
             "A context's queue of pending frees (numba's _PendingDeallocs): "
             "the\nmemory queue is ctx.memory_manager.deallocations, the "
             "streams and\nevents queue ctx.deallocations. It frees when "
             "more than\nCUDAMEM_MAX_PENDING_DEALLOCS_COUNT (10) items or "
             "more than\nCUDAMEM_MAX_PENDING_DEALLOCS_RATIO (0.2) of the "
             "device's memory\nare pending.");

static PyType_Slot deallocations_slots[] = {
    {Py_tp_doc, (void *)deallocations_doc},
    {Py_tp_dealloc, deallocations_dealloc},
    {Py_tp_traverse, shared_traverse},
    {Py_tp_clear, shared_clear},
    {Py_tp_repr, deallocations_repr},
    {Py_tp_methods, deallocations_methods},
    {Py_tp_getset, deallocations_getset},
    {Py_mp_length, deallocations_len},
    {Py_sq_length, deallocations_len},
    {0, NULL},
};

static PyType_Spec deallocations_spec = {
    .name = "cudamem.Deallocations",
    .basicsize = sizeof(cmpy_Deallocations),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = deallocations_slots,
};

PyObject *
cmpy_defer_guard_new(cmpy_state *st, cmpy_Context *ctx, unsigned mask)
{
    cmpy_DeferGuard *self;

    if (cmpy_context_check(st, ctx) < 0) {
        return NULL;
    }
    self = PyObject_GC_New(cmpy_DeferGuard,
                           (PyTypeObject *)st->DeferGuardType);
    if (self == NULL) {
        return NULL;
    }
    self->ctx = (cmpy_Context *)Py_NewRef(ctx);
    self->mask = mask;
    self->depth = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static void
guard_undefer(cmpy_DeferGuard *self, unsigned upto)
{
    for (unsigned q = 0; q < upto; q++) {
        if (self->mask & (1u << q)) {
            cm_queue_undefer(self->ctx->device->dev, (cm_queue_id)q);
        }
    }
}

static void
guard_dealloc(PyObject *op)
{
    cmpy_DeferGuard *self = (cmpy_DeferGuard *)op;
    PyTypeObject *type = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    /* A guard dropped while entered (a generator never resumed) must not
     * leave its queues deferred for ever. */
    for (; self->depth > 0 && self->ctx != NULL; self->depth--) {
        guard_undefer(self, CM_QUEUE_COUNT);
    }
    shared_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyObject *
guard_enter(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    cmpy_DeferGuard *self = (cmpy_DeferGuard *)op;
    cmpy_state *st = cmpy_type_state(op);
    cm_error err;

    if (cmpy_context_check(st, self->ctx) < 0) {
        return NULL;
    }
    for (unsigned q = 0; q < CM_QUEUE_COUNT; q++) {
        if ((self->mask & (1u << q)) &&
            cm_queue_defer(self->ctx->device->dev, (cm_queue_id)q, &err) < 0) {
            guard_undefer(self, q);
            return cmpy_raise(st, &err);
        }
    }
    self->depth++;
    return Py_NewRef(op);
}

static PyObject *
guard_exit(PyObject *op, PyObject *const *Py_UNUSED(args),
           Py_ssize_t Py_UNUSED(nargs))
{
    cmpy_DeferGuard *self = (cmpy_DeferGuard *)op;

    if (self->depth > 0) {
        self->depth--;
        guard_undefer(self, CM_QUEUE_COUNT);
    }
    Py_RETURN_FALSE;
}

static PyMethodDef guard_methods[] = {
    {"__enter__", guard_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))guard_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot guard_slots[] = {
    {Py_tp_doc, (void *)"Defers a context's pending frees inside a with "
                        "block (defer_cleanup(), Deallocations.disable())."},
    {Py_tp_dealloc, guard_dealloc},
    {Py_tp_traverse, shared_traverse},
    {Py_tp_clear, shared_clear},
    {Py_tp_methods, guard_methods},
    {0, NULL},
};

static PyType_Spec guard_spec = {
    .name = "cudamem._DeferCleanup",
    .basicsize = sizeof(cmpy_DeferGuard),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = guard_slots,
};

PyDoc_STRVAR(shutdown_doc,
             "_shutdown($module)\n--\n\n"
             "Frees every pending deallocation once, then stops the queues "
             "(run\nat interpreter exit; later releases leak on purpose). A "
             "failed\nfree is written to stderr.");

static PyObject *
shutdown(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cm_error err, later;
    int rc;

    /* Host memory waiting for its copies goes first: the queues stop. */
    Py_BEGIN_ALLOW_THREADS
    rc = cm_host_drain(&err);
    CMPY_END_ALLOW_THREADS
    if (cm_queues_shutdown(rc < 0 ? &later : &err) < 0 || rc < 0) {
        PyObject *exc;

        cmpy_raise(cmpy_get_state(module), &err);
        exc = cmpy_exc_take();
        PySys_FormatStderr("cudamem: a pending free failed at exit: %S\n",
                           exc);
        Py_XDECREF(exc);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(
    flush_pending_doc,
    "_flush_pending($module)\n--\n\n"
    "Waits for host memory whose release waits for copies and frees it,\n"
    "then frees what every device's queues hold (unless deferred); "
    "for\ntests that compare live allocations.");

static PyObject *
flush_pending(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_get_state(module);
    cm_error err;
    int rc;

    if (!cm_driver_ready()) {
        Py_RETURN_NONE;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_host_drain(&err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    if (cmpy_each_device(st, cm_queues_flush) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef cmpy_pending_methods[] = {
    {"_shutdown", shutdown, METH_NOARGS, shutdown_doc},
    {"_flush_pending", flush_pending, METH_NOARGS, flush_pending_doc},
    {NULL, NULL, 0, NULL},
};

int
cmpy_pending_type_init(PyObject *module, cmpy_state *st)
{
    PyObject *atexit, *func, *res;

    st->DeallocationsType = PyType_FromModuleAndSpec(
        module, &deallocations_spec, NULL);
    if (st->DeallocationsType == NULL ||
        PyModule_AddObjectRef(module, "Deallocations", st->DeallocationsType) <
            0) {
        return -1;
    }
    st->DeferGuardType = PyType_FromModuleAndSpec(module, &guard_spec, NULL);
    if (st->DeferGuardType == NULL) {
        return -1;
    }
    /* atexit runs before modules are torn down, while every object that
     * owns device memory can still be freed. */
    atexit = PyImport_ImportModule("atexit");
    if (atexit == NULL) {
        return -1;
    }
    func = PyObject_GetAttrString(module, "_shutdown");
    res = func != NULL ? PyObject_CallMethod(atexit, "register", "O", func)
                       : NULL;
    Py_XDECREF(func);
    Py_DECREF(atexit);
    if (res == NULL) {
        return -1;
    }
    Py_DECREF(res);
    return 0;
}
