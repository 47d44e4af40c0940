/* context.c (py/): the Context type, a device's primary context as numba's
 * Context: memory info, push/pop, synchronize, reset, peer access, and its
 * memory manager (delegated to when it is an EMM plugin). It records its
 * device's generation; core refuses it after a reset or close. Devices and
 * the current-context rules are py/device.c and core/; which manager a
 * context gets is cudamem/memory.py's. */
#include "device.h"
#include "stream.h"

#include "../core/driver.h"
#include "html.h"
#include "pending.h"

int
cmpy_context_check(cmpy_state *st, cmpy_Context *ctx)
{
    cm_error err;

    if (cm_ctx_check(ctx->device->dev, ctx->generation, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return 0;
}

PyObject *
cmpy_context_of(cmpy_state *st, cmpy_Device *device)
{
    cmpy_Context *ctx = (cmpy_Context *)device->context;
    CUcontext handle;
    uint64_t generation;
    cm_error err;

    if (cm_device_context(device->dev, &handle, &generation, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    if (ctx != NULL && ctx->handle == handle &&
        ctx->generation == generation) {
        return Py_NewRef(ctx);
    }
    ctx = PyObject_GC_New(cmpy_Context, (PyTypeObject *)st->ContextType);
    if (ctx == NULL) {
        return NULL;
    }
    ctx->device = (cmpy_Device *)Py_NewRef(device);
    ctx->handle = handle;
    ctx->generation = generation;
    ctx->memory_manager = NULL;
    ctx->manager_mode = CMPY_MANAGER_DEFAULT;
    ctx->weakreflist = NULL;
    PyObject_GC_Track(ctx);
    Py_XSETREF(device->context, Py_NewRef(ctx));
    return (PyObject *)ctx;
}

static int
context_traverse(cmpy_Context *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->device);
    Py_VISIT(self->memory_manager);
    return 0;
}

static int
context_clear(cmpy_Context *self)
{
    Py_CLEAR(self->device);
    Py_CLEAR(self->memory_manager);
    return 0;
}

static void
context_dealloc(cmpy_Context *self)
{
    PyTypeObject *type = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    context_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *
context_repr(cmpy_Context *self)
{
    return PyUnicode_FromFormat("<CUDA context %p of device %d>",
                                (void *)self->handle,
                                self->device->dev->ordinal);
}

static Py_hash_t
context_hash(cmpy_Context *self)
{
    /* Handles are aligned: drop the low bits, as CPython's pointer hash. */
    Py_hash_t hash = (Py_hash_t)((uintptr_t)self->handle >> 4);

    return hash == -1 ? -2 : hash;
}

static PyObject *
context_richcompare(PyObject *self, PyObject *other, int op)
{
    int equal;

    if ((op != Py_EQ && op != Py_NE) || !Py_IS_TYPE(other, Py_TYPE(self))) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    equal = ((cmpy_Context *)self)->handle == ((cmpy_Context *)other)->handle;
    return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}

static PyObject *
context_get_device(cmpy_Context *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->device);
}

static PyObject *
context_get_handle(cmpy_Context *self, void *Py_UNUSED(closure))
{
    return PyLong_FromVoidPtr(self->handle);
}

static PyObject *
context_get_deallocations(cmpy_Context *self, void *closure)
{
    return cmpy_deallocations_new(cmpy_type_state((PyObject *)self), self,
                                  closure != NULL ? CM_QUEUE_MEMORY
                                                  : CM_QUEUE_OBJECTS);
}

/* Installs (manager, mode); 0, or -1 with ValueError naming a bad mode. */
static int
set_manager(cmpy_Context *self, PyObject *manager, PyObject *mode_arg)
{
    long mode = PyLong_Check(mode_arg) ? PyLong_AsLong(mode_arg) : -1;

    if (mode != CMPY_MANAGER_DEFAULT && mode != CMPY_MANAGER_PLUGIN) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "invalid memory manager mode %R",
                     mode_arg);
        return -1;
    }
    Py_XSETREF(self->memory_manager, Py_NewRef(manager));
    self->manager_mode = (cmpy_manager_mode)mode;
    return 0;
}

/* Made once per Context by cudamem.memory._make_memory_manager, which
 * returns (manager, mode). */
static PyObject *
context_get_memory_manager(cmpy_Context *self, void *Py_UNUSED(closure))
{
    PyObject *mod, *made;
    int rc;

    if (self->memory_manager == NULL) {
        mod = PyImport_ImportModule("cudamem.memory");
        if (mod == NULL) {
            return NULL;
        }
        made = PyObject_CallMethod(mod, "_make_memory_manager", "O",
                                   (PyObject *)self);
        Py_DECREF(mod);
        if (made == NULL) {
            return NULL;
        }
        if (!PyTuple_Check(made) || PyTuple_GET_SIZE(made) != 2) {
            PyErr_Format(PyExc_TypeError,
                         "_make_memory_manager() returned %R, not "
                         "(manager, mode)",
                         made);
            Py_DECREF(made);
            return NULL;
        }
        /* Another thread may have made one meanwhile: the first stays. */
        rc = self->memory_manager != NULL
                 ? 0
                 : set_manager(self, PyTuple_GET_ITEM(made, 0),
                               PyTuple_GET_ITEM(made, 1));
        Py_DECREF(made);
        if (rc < 0) {
            return NULL;
        }
    }
    return Py_NewRef(self->memory_manager);
}

PyObject *
cmpy_context_manager(cmpy_state *st, cm_device *dev, cmpy_manager_mode *mode)
{
    cmpy_Device *device = cmpy_device_of(st, dev);
    PyObject *ctx, *manager;

    if (device == NULL) {
        return NULL;
    }
    ctx = cmpy_context_of(st, device);
    if (ctx == NULL) {
        return NULL;
    }
    manager = context_get_memory_manager((cmpy_Context *)ctx, NULL);
    *mode = ((cmpy_Context *)ctx)->manager_mode;
    Py_DECREF(ctx);
    return manager;
}

/* The context's manager when it is a plugin (new reference); NULL without
 * an exception when cudamem allocates for it, with one on failure. */
static PyObject *
plugin_of(cmpy_Context *self, cmpy_state *st)
{
    PyObject *manager;

    if (!st->plugins) {
        return NULL;
    }
    manager = context_get_memory_manager(self, NULL);
    if (manager != NULL && self->manager_mode != CMPY_MANAGER_PLUGIN) {
        Py_CLEAR(manager);
    }
    return manager;
}

static PyGetSetDef context_getset[] = {
    {"deallocations", (getter)context_get_deallocations, NULL,
     "Pending destroys of streams and events (numba's "
     "Context.deallocations).",
     NULL},
    {"_memory_deallocations", (getter)context_get_deallocations, NULL,
     "Pending frees of memory: memory_manager.deallocations.", (void *)1},
    {"memory_manager", (getter)context_get_memory_manager, NULL,
     "The context's memory manager (numba's Context.memory_manager).",
     NULL},
    {"device", (getter)context_get_device, NULL, "The context's Device.",
     NULL},
    {"handle", (getter)context_get_handle, NULL,
     "The CUcontext, as an int.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* Runs a blocking core call on this context with the GIL released. */
static PyObject *
blocking(PyObject *self, int (*fn)(cm_device *, uint64_t, cm_error *))
{
    cmpy_Context *ctx = (cmpy_Context *)self;
    cm_error err;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = fn(ctx->device->dev, ctx->generation, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(cmpy_type_state(self), &err);
    }
    Py_RETURN_NONE;
}

static PyObject *
quick(PyObject *self, int (*fn)(cm_device *, uint64_t, cm_error *))
{
    cmpy_Context *ctx = (cmpy_Context *)self;
    cm_error err;

    if (fn(ctx->device->dev, ctx->generation, &err) < 0) {
        return cmpy_raise(cmpy_type_state(self), &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(context_device_memory_info_doc,
             "_device_memory_info($self)\n--\n\n"
             "(free, total) device memory in bytes from the driver, "
             "whatever the\nmemory manager.");

static PyObject *
context_device_memory_info(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_Context *ctx = (cmpy_Context *)self;
    cmpy_state *st = cmpy_type_state(self);
    size_t free_bytes, total_bytes;
    cm_error err;

    if (cm_ctx_meminfo(ctx->device->dev, ctx->generation, &free_bytes,
                       &total_bytes, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    if (st->MemoryInfo == NULL) {
        PyObject *mod = PyImport_ImportModule("cudamem.devices");

        if (mod == NULL) {
            return NULL;
        }
        st->MemoryInfo = PyObject_GetAttrString(mod, "MemoryInfo");
        Py_DECREF(mod);
        if (st->MemoryInfo == NULL) {
            return NULL;
        }
    }
    return PyObject_CallFunction(st->MemoryInfo, "nn", (Py_ssize_t)free_bytes,
                                 (Py_ssize_t)total_bytes);
}

PyDoc_STRVAR(context_get_memory_info_doc,
             "get_memory_info($self)\n--\n\n"
             "(free, total) device memory in bytes, as a namedtuple; with "
             "an EMM\nplugin, what its get_memory_info() returns.");

static PyObject *
context_get_memory_info(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *plugin = plugin_of((cmpy_Context *)self,
                                 cmpy_type_state(self));
    PyObject *info;

    if (plugin == NULL) {
        return PyErr_Occurred() ? NULL
                                : context_device_memory_info(self, NULL);
    }
    info = PyObject_CallMethod(plugin, "get_memory_info", NULL);
    Py_DECREF(plugin);
    return info;
}

PyDoc_STRVAR(context_push_doc,
             "push($self)\n--\n\n"
             "Pushes this context on the calling thread's context stack.");

static PyObject *
context_push(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return quick(self, cm_ctx_push);
}

PyDoc_STRVAR(context_pop_doc,
             "pop($self)\n--\n\n"
             "Pops this context off the calling thread. It must be the "
             "current\ncontext (the top of the stack), otherwise "
             "CudaDriverError.");

static PyObject *
context_pop(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return quick(self, cm_ctx_pop);
}

PyDoc_STRVAR(context_synchronize_doc,
             "synchronize($self)\n--\n\n"
             "Waits for all work in this context, with the GIL released; "
             "Ctrl-C\ninterrupts the wait (the work goes on).");

static PyObject *
context_synchronize(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_Context *ctx = (cmpy_Context *)self;

    if (cmpy_ctx_wait(cmpy_type_state(self), ctx->device->dev,
                      ctx->generation) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(context_reset_doc,
             "reset($self)\n--\n\n"
             "Waits for this context's work and frees every pending\n"
             "deallocation and the pool's free slabs (numba's "
             "Context.reset()),\nafter calling an EMM plugin's reset(); "
             "the context stays usable. To\ndestroy it, use "
             "Device.reset().");

static PyObject *
context_reset(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *plugin = plugin_of((cmpy_Context *)self,
                                 cmpy_type_state(self));
    PyObject *res;

    if (plugin != NULL) {
        res = PyObject_CallMethod(plugin, "reset", NULL);
        Py_DECREF(plugin);
        if (res == NULL) {
            return NULL;
        }
        Py_DECREF(res);
    }
    else if (PyErr_Occurred()) {
        return NULL;
    }
    return blocking(self, cm_ctx_reset);
}

PyDoc_STRVAR(context_can_access_peer_doc,
             "can_access_peer($self, peer_device)\n--\n\n"
             "Whether this context's device can access *peer_device*'s "
             "memory\n(an int ordinal or a Device).");

static PyObject *
context_can_access_peer_one(PyObject *self, PyObject *arg)
{
    cmpy_Context *ctx = (cmpy_Context *)self;
    cmpy_state *st = cmpy_type_state(self);
    cmpy_Device *peer;
    cm_error err;
    int can;

    if (cmpy_device_parse(st, arg, &peer) < 0) {
        return NULL;
    }
    if (cm_ctx_check(ctx->device->dev, ctx->generation, &err) < 0 ||
        cm_peer_can_access(ctx->device->dev, peer->dev, &can, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return PyBool_FromLong(can);
}

static PyObject *
context_can_access_peer(PyObject *self, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"peer_device"};
    PyObject *argv[1];

    if (cmpy_parse_args("can_access_peer", names, 1, 1, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    return context_can_access_peer_one(self, argv[0]);
}

PyDoc_STRVAR(context_enable_peer_access_doc,
             "enable_peer_access($self, peer, flags=0)\n--\n\n"
             "Lets this context access the memory of *peer* (a Context, a\n"
             "Device or an int ordinal). Enabling it twice is not an "
             "error.");

static PyObject *
context_enable_peer_access(PyObject *self, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    cmpy_Context *ctx = (cmpy_Context *)self;
    cmpy_state *st = cmpy_type_state(self);
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *peer_arg, *flags_arg = NULL;
    cmpy_Device *peer;
    unsigned long flags = 0;
    cm_error err;

    if (nargs < 1 || nargs + nkw > 2 ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(
                         PyTuple_GET_ITEM(kwnames, 0), "flags") != 0)) {
        PyErr_SetString(PyExc_TypeError,
                        "enable_peer_access() takes a peer and optional "
                        "flags");
        return NULL;
    }
    peer_arg = args[0];
    if (nargs + nkw == 2) {
        flags_arg = args[1];
    }
    if (Py_IS_TYPE(peer_arg, (PyTypeObject *)st->ContextType)) {
        cmpy_Context *other = (cmpy_Context *)peer_arg;

        if (cmpy_context_check(st, other) < 0) {
            return NULL;
        }
        peer = other->device;
    }
    else if (cmpy_device_parse(st, peer_arg, &peer) < 0) {
        return NULL;
    }
    if (flags_arg != NULL) {
        if (!PyLong_Check(flags_arg)) {
            PyErr_Format(PyExc_TypeError, "flags must be an int, not %.200s",
                         Py_TYPE(flags_arg)->tp_name);
            return NULL;
        }
        flags = PyLong_AsUnsignedLong(flags_arg);
        if ((flags == (unsigned long)-1 && PyErr_Occurred()) ||
            flags > UINT_MAX) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "invalid flags %R", flags_arg);
            return NULL;
        }
    }
    if (cm_ctx_enable_peer(ctx->device->dev, ctx->generation, peer->dev,
                           (unsigned)flags, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(context_defer_cleanup_doc,
             "defer_cleanup($self)\n--\n\n"
             "Inside the block no pending free of this context runs "
             "(blocks\nnest); leaving it does not free. numba's "
             "Context.defer_cleanup(): with\nan EMM plugin, its "
             "defer_cleanup() and the streams and events queue's.");

static PyObject *
context_defer_cleanup(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_type_state(self);
    PyObject *plugin = plugin_of((cmpy_Context *)self, st), *mod, *guard;

    if (plugin == NULL) {
        return PyErr_Occurred()
                   ? NULL
                   : cmpy_defer_guard_new(st, (cmpy_Context *)self,
                                          (1u << CM_QUEUE_MEMORY) |
                                              (1u << CM_QUEUE_OBJECTS));
    }
    mod = PyImport_ImportModule("cudamem.memory");
    guard = mod != NULL ? PyObject_CallMethod(mod, "_plugin_defer_cleanup",
                                              "OO", self, plugin)
                        : NULL;
    Py_XDECREF(mod);
    Py_DECREF(plugin);
    return guard;
}

PyDoc_STRVAR(context_set_memory_manager_doc,
             "_set_memory_manager($self, manager, mode)\n--\n\n"
             "Makes *manager* this context's memory manager; *mode* is "
             "0 when\ncudamem allocates for it, 1 for an EMM plugin "
             "(cudamem.memory\ndecides).");

static PyObject *
context_set_memory_manager(PyObject *self, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"manager", "mode"};
    PyObject *argv[2];

    if (cmpy_parse_args("_set_memory_manager", names, 2, 2, args, nargs,
                        kwnames, argv) < 0 ||
        set_manager((cmpy_Context *)self, argv[0], argv[1]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(context_repr_html_doc,
             "_repr_html_($self)\n--\n\n"
             "The context as an HTML table for Jupyter: handle, device and "
             "free and\ntotal device memory (the driver's, whatever the "
             "memory manager).");

static PyObject *
context_repr_html(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    static const char *const labels[] = {"handle", "device", "free memory",
                                         "total memory"};
    cmpy_Context *self = (cmpy_Context *)op;
    PyObject *values[4] = {NULL};
    size_t free_bytes, total_bytes;
    cm_error err;

    if (cm_ctx_meminfo(self->device->dev, self->generation, &free_bytes,
                       &total_bytes, &err) < 0) {
        return cmpy_raise(cmpy_type_state(op), &err);
    }
    values[0] = PyUnicode_FromFormat("%p", (void *)self->handle);
    values[1] = PyObject_Repr((PyObject *)self->device);
    values[2] = cmpy_html_size(free_bytes);
    values[3] = cmpy_html_size(total_bytes);
    return cmpy_html_table("cudamem.Context", 4, labels, values, NULL);
}

static PyMethodDef context_methods[] = {
    {"defer_cleanup", context_defer_cleanup, METH_NOARGS,
     context_defer_cleanup_doc},
    {"get_memory_info", context_get_memory_info, METH_NOARGS,
     context_get_memory_info_doc},
    {"_device_memory_info", context_device_memory_info, METH_NOARGS,
     context_device_memory_info_doc},
    {"_repr_html_", context_repr_html, METH_NOARGS, context_repr_html_doc},
    {"_set_memory_manager",
     (PyCFunction)(void (*)(void))context_set_memory_manager,
     METH_FASTCALL | METH_KEYWORDS, context_set_memory_manager_doc},
    {"push", context_push, METH_NOARGS, context_push_doc},
    {"pop", context_pop, METH_NOARGS, context_pop_doc},
    {"synchronize", context_synchronize, METH_NOARGS,
     context_synchronize_doc},
    {"reset", context_reset, METH_NOARGS, context_reset_doc},
    {"can_access_peer",
     (PyCFunction)(void (*)(void))context_can_access_peer,
     METH_FASTCALL | METH_KEYWORDS,
     context_can_access_peer_doc},
    {"enable_peer_access",
     (PyCFunction)(void (*)(void))context_enable_peer_access,
     METH_FASTCALL | METH_KEYWORDS, context_enable_peer_access_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(context_doc,
             "Context\n\n"
             "A device's primary context (numba.cuda.cudadrv.driver."
             "Context).\nCompares and hashes by handle. After its device is "
             "reset or\nclosed every method raises CudaDriverError. Made by "
             "cudamem, not\nby user code.");

static PyMemberDef context_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET,
     offsetof(cmpy_Context, weakreflist), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot context_slots[] = {
    {Py_tp_members, context_members},
    {Py_tp_doc, (void *)context_doc},
    {Py_tp_dealloc, context_dealloc},
    {Py_tp_traverse, context_traverse},
    {Py_tp_clear, context_clear},
    {Py_tp_repr, context_repr},
    {Py_tp_hash, context_hash},
    {Py_tp_richcompare, context_richcompare},
    {Py_tp_getset, context_getset},
    {Py_tp_methods, context_methods},
    {0, NULL},
};

static PyType_Spec context_spec = {
    .name = "cudamem.Context",
    .basicsize = sizeof(cmpy_Context),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = context_slots,
};

int
cmpy_context_type_init(PyObject *module, cmpy_state *st)
{
    st->ContextType = PyType_FromModuleAndSpec(module, &context_spec, NULL);
    if (st->ContextType == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "Context", st->ContextType);
}
