/* context.c (py/): the Context type, a device's primary context as numba's
 * Context: memory info, push/pop, synchronize, reset, peer access, and
 * numba's methods that make memory, streams and events in it (delegated
 * to its memory manager when that is an EMM plugin). It records its
 * device's generation; core refuses it after a reset or close. Devices and
 * the current-context rules are py/device.c and core/; which manager a
 * context gets is cudamem/memory.py's, the memory_manager attribute and
 * its mode py/emm.c's. */
#include "device.h"
#include "stream.h"

#include "../core/device.h"
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
    ctx->manager_mode = CMPY_MANAGER_NATIVE;
    ctx->weakreflist = NULL;
    ctx->allocations = NULL;
    ctx->deallocations = NULL;
    PyObject_GC_Track(ctx);
    Py_XSETREF(device->context, Py_NewRef(ctx));
    return (PyObject *)ctx;
}

/* ------------------------------------------------------------------------
 * Slots and attributes. */

static int
context_traverse(cmpy_Context *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->device);
    Py_VISIT(self->memory_manager);
    Py_VISIT(self->allocations);
    Py_VISIT(self->deallocations);
    return 0;
}

static int
context_clear(cmpy_Context *self)
{
    Py_CLEAR(self->device);
    Py_CLEAR(self->memory_manager);
    Py_CLEAR(self->allocations);
    Py_CLEAR(self->deallocations);
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
    if (closure == NULL && self->deallocations != NULL) {
        return Py_NewRef(self->deallocations);
    }
    return cmpy_deallocations_new(cmpy_type_state((PyObject *)self), self,
                                  closure != NULL ? CM_QUEUE_MEMORY
                                                  : CM_QUEUE_OBJECTS);
}

/* numba's Context.deallocations is a plain attribute: code may replace
 * it; deleting the replacement gives the queue back. */
static int
context_set_deallocations(cmpy_Context *self, PyObject *value,
                          void *Py_UNUSED(closure))
{
    Py_XSETREF(self->deallocations, Py_XNewRef(value));
    return 0;
}

/* numba's Context.allocations: a UniqueDict made on first use (numba
 * itself keeps nothing there; code may). */
static PyObject *
context_get_allocations(cmpy_Context *self, void *Py_UNUSED(closure))
{
    PyObject *cls;

    if (self->allocations == NULL) {
        cls = cmpy_hook(cmpy_type_state((PyObject *)self),
                        CMPY_HOOK_UNIQUE_DICT);
        if (cls == NULL) {
            return NULL;
        }
        self->allocations = PyObject_CallNoArgs(cls);
        if (self->allocations == NULL) {
            return NULL;
        }
    }
    return Py_NewRef(self->allocations);
}

static int
context_set_allocations(cmpy_Context *self, PyObject *value,
                        void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError,
                        "Context.allocations cannot be deleted");
        return -1;
    }
    Py_XSETREF(self->allocations, Py_NewRef(value));
    return 0;
}

static PyGetSetDef context_getset[] = {
    {"deallocations", (getter)context_get_deallocations,
     (setter)context_set_deallocations,
     "Pending destroys of streams and events (numba's "
     "Context.deallocations),\nor what was assigned to it.",
     NULL},
    {"allocations", (getter)context_get_allocations,
     (setter)context_set_allocations,
     "numba's Context.allocations: a UniqueDict, empty unless code fills "
     "it.",
     NULL},
    {"_memory_deallocations", (getter)context_get_deallocations, NULL,
     "Pending frees of memory: memory_manager.deallocations.", (void *)1},
    {"memory_manager", (getter)cmpy_context_get_memory_manager,
     (setter)cmpy_context_assign_memory_manager,
     "The context's memory manager (numba's Context.memory_manager);\n"
     "assigning an instance made for this context installs it.",
     NULL},
    {"device", (getter)context_get_device, NULL, "The context's Device.",
     NULL},
    {"handle", (getter)context_get_handle, NULL, "The CUcontext, as an int.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ------------------------------------------------------------------------
 * Memory info, push and pop, synchronize, reset. */

/* Runs a blocking core call on this context with the GIL released. */
static PyObject *
blocking(PyObject *self, int (*fn)(cm_device *, uint64_t, cm_error *))
{
    cmpy_Context *ctx = (cmpy_Context *)self;
    cm_error err;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = fn(ctx->device->dev, ctx->generation, &err);
    CMPY_END_ALLOW_THREADS
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
    PyObject *info;
    size_t free_bytes, total_bytes;
    cm_error err;

    if (cm_ctx_meminfo(ctx->device->dev, ctx->generation, &free_bytes,
                       &total_bytes, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    info = cmpy_hook(st, CMPY_HOOK_MEMORY_INFO);
    if (info == NULL) {
        return NULL;
    }
    return PyObject_CallFunction(info, "nn", (Py_ssize_t)free_bytes,
                                 (Py_ssize_t)total_bytes);
}

PyDoc_STRVAR(context_get_memory_info_doc,
             "get_memory_info($self)\n--\n\n"
             "(free, total) device memory in bytes, as a namedtuple; with "
             "an EMM\nplugin, what its get_memory_info() returns.");

static PyObject *
context_get_memory_info(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *plugin = cmpy_context_plugin((cmpy_Context *)self,
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
    PyObject *plugin = cmpy_context_plugin((cmpy_Context *)self,
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

/* ------------------------------------------------------------------------
 * Peer access, and defer_cleanup. */

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
    PyObject *plugin = cmpy_context_plugin((cmpy_Context *)self, st), *defer,
             *guard;

    if (plugin == NULL) {
        return PyErr_Occurred()
                   ? NULL
                   : cmpy_defer_guard_new(st, (cmpy_Context *)self,
                                          (1u << CM_QUEUE_MEMORY) |
                                              (1u << CM_QUEUE_OBJECTS));
    }
    defer = cmpy_hook(st, CMPY_HOOK_PLUGIN_DEFER_CLEANUP);
    guard = defer != NULL
                ? PyObject_CallFunctionObjArgs(defer, self, plugin, NULL)
                : NULL;
    Py_DECREF(plugin);
    return guard;
}

/* ------------------------------------------------------------------------
 * numba's Context methods that make memory, streams and events: each calls
 * the memory manager's method (as numba's Context delegates to
 * self.memory_manager) or the module's function, with this context current
 * (pushed only when another one is). */

/* callable(*args) with this context current. */
static PyObject *
call_in(PyObject *self, PyObject *callable, PyObject *const *args,
        Py_ssize_t nargs)
{
    cmpy_Context *ctx = (cmpy_Context *)self;
    cmpy_state *st = cmpy_type_state(self);
    cm_device *dev = ctx->device->dev, *active;
    PyObject *res;
    cm_error err, ignored;
    int pushed;

    if (cmpy_context_check(st, ctx) < 0) {
        return NULL;
    }
    if (cm_active_device(&active, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    pushed = active != dev;
    if (pushed && cm_ctx_push(dev, ctx->generation, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    res = PyObject_Vectorcall(callable, args, (size_t)nargs, NULL);
    if (pushed &&
        cm_ctx_pop(dev, ctx->generation, res != NULL ? &err : &ignored) < 0 &&
        res != NULL) {
        Py_DECREF(res);
        return cmpy_raise(st, &err);
    }
    return res;
}

/* The memory manager's method `name` (or the module's function when
 * `module` is set) called with args in this context. */
static PyObject *
delegate(PyObject *self, int module, const char *name, PyObject *const *args,
         Py_ssize_t nargs)
{
    PyObject *owner, *fn, *res;

    if (module) {
        owner = Py_XNewRef(cmpy_type_module(Py_TYPE(self)));
    }
    else {
        owner = cmpy_context_get_memory_manager((cmpy_Context *)self, NULL);
    }
    if (owner == NULL) {
        return NULL;
    }
    fn = PyObject_GetAttrString(owner, name);
    Py_DECREF(owner);
    if (fn == NULL) {
        return NULL;
    }
    res = call_in(self, fn, args, nargs);
    Py_DECREF(fn);
    return res;
}

/* Parses numba's (name, defaults) signature into out, the absent
 * optional arguments replaced by their defaults; 0 or -1. */
static int
parse_with_defaults(const char *fname, const char *const *names, int nnames,
                    int required, PyObject *const *defaults,
                    PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    PyObject **out)
{
    if (cmpy_parse_args(fname, names, nnames, required, args, nargs, kwnames,
                        out) < 0) {
        return -1;
    }
    for (int i = required; i < nnames; i++) {
        if (out[i] == NULL) {
            out[i] = defaults[i - required];
        }
    }
    return 0;
}

PyDoc_STRVAR(context_memalloc_doc,
             "memalloc($self, bytesize)\n--\n\n"
             "A MemoryPointer to *bytesize* bytes of device memory from "
             "this\ncontext's memory manager (numba's Context.memalloc:\n"
             "memory_manager.memalloc(bytesize)).");

static PyObject *
context_memalloc(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {"bytesize"};
    PyObject *argv[1];

    if (cmpy_parse_args("memalloc", names, 1, 1, args, nargs, kwnames, argv) <
        0) {
        return NULL;
    }
    return delegate(self, 0, "memalloc", argv, 1);
}

PyDoc_STRVAR(context_memallocmanaged_doc,
             "memallocmanaged($self, bytesize, attach_global=True)\n--\n\n"
             "A MemoryPointer to *bytesize* bytes of managed memory "
             "(numba's "
             "Context.memallocmanaged):\nthe memory manager's "
             "memallocmanaged(), or cudamem's managed memory\nwhen the "
             "manager has none (as for managed arrays).");

static PyObject *
context_memallocmanaged(PyObject *self, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"bytesize", "attach_global"};
    PyObject *const defaults[] = {Py_True};
    PyObject *argv[3], *manager, *fn, *res;
    int has;

    if (parse_with_defaults("memallocmanaged", names, 2, 1, defaults, args,
                            nargs, kwnames, argv + 1) < 0) {
        return NULL;
    }
    manager = cmpy_context_get_memory_manager((cmpy_Context *)self, NULL);
    if (manager == NULL) {
        return NULL;
    }
    has = cmpy_optional_attr(manager, "memallocmanaged", &fn);
    Py_DECREF(manager);
    if (has < 0) {
        return NULL;
    }
    if (!has) {
        argv[0] = self;
        return delegate(self, 1, "_memallocmanaged", argv, 3);
    }
    res = call_in(self, fn, argv + 1, 2);
    Py_DECREF(fn);
    return res;
}

PyDoc_STRVAR(context_memhostalloc_doc,
             "memhostalloc($self, bytesize, mapped=False, portable=False, "
             "wc=False)\n--\n\n"
             "*bytesize* bytes of page-locked host memory, mapped into the "
             "device's\naddress space when *mapped* (numba's "
             "Context.memhostalloc:\nmemory_manager.memhostalloc(bytesize, "
             "mapped, portable, wc)).");

static PyObject *
context_memhostalloc(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames)
{
    static const char *const names[] = {"bytesize", "mapped", "portable",
                                        "wc"};
    PyObject *const defaults[] = {Py_False, Py_False, Py_False};
    PyObject *argv[4];

    if (parse_with_defaults("memhostalloc", names, 4, 1, defaults, args, nargs,
                            kwnames, argv) < 0) {
        return NULL;
    }
    return delegate(self, 0, "memhostalloc", argv, 4);
}

PyDoc_STRVAR(context_mempin_doc,
             "mempin($self, owner, pointer, size, mapped=False)\n--\n\n"
             "Page-locks the *size* bytes at *pointer* of *owner* (numba's "
             "\nContext.mempin: memory_manager.mempin(owner, pointer, size, "
             "mapped));\nCudaDriverError when *mapped* and the device cannot "
             "map host memory.");

static PyObject *
context_mempin(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    static const char *const names[] = {"owner", "pointer", "size", "mapped"};
    PyObject *const defaults[] = {Py_False};
    cmpy_Device *device = ((cmpy_Context *)self)->device;
    cmpy_state *st = cmpy_type_state(self);
    PyObject *argv[4];
    int mapped, can_map;
    cm_error err;

    if (parse_with_defaults("mempin", names, 4, 3, defaults, args, nargs,
                            kwnames, argv) < 0) {
        return NULL;
    }
    mapped = PyObject_IsTrue(argv[3]);
    if (mapped < 0) {
        return NULL;
    }
    if (mapped) {
        if (cm_device_attribute(device->dev->ordinal,
                                CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY,
                                &can_map, &err) < 0) {
            return cmpy_raise(st, &err);
        }
        if (!can_map) {
            return PyErr_Format(st->CudaDriverError,
                                "%R cannot map host memory", device);
        }
    }
    return delegate(self, 0, "mempin", argv, 4);
}

PyDoc_STRVAR(context_get_ipc_handle_doc,
             "get_ipc_handle($self, memory)\n--\n\n"
             "An IpcHandle for the device memory *memory* (numba's "
             "\nContext.get_ipc_handle: "
             "memory_manager.get_ipc_handle(memory)).");

static PyObject *
context_get_ipc_handle(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames)
{
    static const char *const names[] = {"memory"};
    PyObject *argv[1];

    if (cmpy_parse_args("get_ipc_handle", names, 1, 1, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    return delegate(self, 0, "get_ipc_handle", argv, 1);
}

PyDoc_STRVAR(context_open_ipc_handle_doc,
             "open_ipc_handle($self, handle, size)\n--\n\n"
             "A MemoryPointer mapping the *size* bytes another process "
             "exported\nas *handle* (a cuIpcMemHandle: bytes, a ctypes "
             "array, cuda.bindings'\nCUipcMemHandle) on this context's "
             "device (numba's\nContext.open_ipc_handle); the mapping "
             "closes once the memory is no\nlonger used.");

static PyObject *
context_open_ipc_handle(PyObject *self, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"handle", "size"};
    PyObject *argv[3], *cls, *handle, *res;

    if (cmpy_parse_args("open_ipc_handle", names, 2, 2, args, nargs, kwnames,
                        argv + 1) < 0 ||
        (cls = cmpy_hook(cmpy_type_state(self), CMPY_HOOK_IPC_HANDLE)) ==
            NULL) {
        return NULL;
    }
    /* IpcHandle(None, handle, size).open(self): an imported handle. */
    argv[0] = Py_None;
    handle = PyObject_Vectorcall(cls, argv, 3, NULL);
    if (handle == NULL) {
        return NULL;
    }
    res = PyObject_CallMethod(handle, "open", "O", self);
    Py_DECREF(handle);
    return res;
}

PyDoc_STRVAR(context_get_default_stream_doc,
             "get_default_stream($self)\n--\n\n"
             "This context's default stream (handle 0), as default_stream() "
             "(numba's\nContext.get_default_stream).");

static PyObject *
context_get_default_stream(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return delegate(self, 1, "default_stream", NULL, 0);
}

PyDoc_STRVAR(context_get_legacy_default_stream_doc,
             "get_legacy_default_stream($self)\n--\n\n"
             "This context's legacy default stream, as "
             "legacy_default_stream().");

static PyObject *
context_get_legacy_default_stream(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return delegate(self, 1, "legacy_default_stream", NULL, 0);
}

PyDoc_STRVAR(context_get_per_thread_default_stream_doc,
             "get_per_thread_default_stream($self)\n--\n\n"
             "This context's per-thread default stream, as "
             "per_thread_default_stream().");

static PyObject *
context_get_per_thread_default_stream(PyObject *self,
                                      PyObject *Py_UNUSED(ignored))
{
    return delegate(self, 1, "per_thread_default_stream", NULL, 0);
}

PyDoc_STRVAR(context_create_stream_doc,
             "create_stream($self)\n--\n\n"
             "A new stream in this context, as stream() (numba's "
             "Context.create_stream).");

static PyObject *
context_create_stream(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return delegate(self, 1, "stream", NULL, 0);
}

PyDoc_STRVAR(context_create_external_stream_doc,
             "create_external_stream($self, ptr)\n--\n\n"
             "A Stream wrapping the CUstream *ptr* (an int) made "
             "elsewhere, as\nexternal_stream() (numba's "
             "Context.create_external_stream: TypeError\nunless an int).");

static PyObject *
context_create_external_stream(PyObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"ptr"};
    PyObject *argv[1];

    if (cmpy_parse_args("create_external_stream", names, 1, 1, args, nargs,
                        kwnames, argv) < 0) {
        return NULL;
    }
    if (!PyLong_Check(argv[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "ptr for external stream must be an int");
        return NULL;
    }
    return delegate(self, 1, "external_stream", argv, 1);
}

PyDoc_STRVAR(context_create_event_doc,
             "create_event($self, timing=True)\n--\n\n"
             "A new event in this context, as event(timing) (numba's "
             "\nContext.create_event).");

static PyObject *
context_create_event(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames)
{
    static const char *const names[] = {"timing"};
    PyObject *const defaults[] = {Py_True};
    PyObject *argv[1];

    if (parse_with_defaults("create_event", names, 1, 0, defaults, args, nargs,
                            kwnames, argv) < 0) {
        return NULL;
    }
    return delegate(self, 1, "event", argv, 1);
}

/* ------------------------------------------------------------------------
 * _repr_html_ and the type. */

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
    {"memalloc", (PyCFunction)(void (*)(void))context_memalloc,
     METH_FASTCALL | METH_KEYWORDS, context_memalloc_doc},
    {"memallocmanaged", (PyCFunction)(void (*)(void))context_memallocmanaged,
     METH_FASTCALL | METH_KEYWORDS, context_memallocmanaged_doc},
    {"memhostalloc", (PyCFunction)(void (*)(void))context_memhostalloc,
     METH_FASTCALL | METH_KEYWORDS, context_memhostalloc_doc},
    {"mempin", (PyCFunction)(void (*)(void))context_mempin,
     METH_FASTCALL | METH_KEYWORDS, context_mempin_doc},
    {"get_ipc_handle", (PyCFunction)(void (*)(void))context_get_ipc_handle,
     METH_FASTCALL | METH_KEYWORDS, context_get_ipc_handle_doc},
    {"open_ipc_handle", (PyCFunction)(void (*)(void))context_open_ipc_handle,
     METH_FASTCALL | METH_KEYWORDS, context_open_ipc_handle_doc},
    {"get_default_stream", context_get_default_stream, METH_NOARGS,
     context_get_default_stream_doc},
    {"get_legacy_default_stream", context_get_legacy_default_stream,
     METH_NOARGS, context_get_legacy_default_stream_doc},
    {"get_per_thread_default_stream", context_get_per_thread_default_stream,
     METH_NOARGS, context_get_per_thread_default_stream_doc},
    {"create_stream", context_create_stream, METH_NOARGS,
     context_create_stream_doc},
    {"create_external_stream",
     (PyCFunction)(void (*)(void))context_create_external_stream,
     METH_FASTCALL | METH_KEYWORDS, context_create_external_stream_doc},
    {"create_event", (PyCFunction)(void (*)(void))context_create_event,
     METH_FASTCALL | METH_KEYWORDS, context_create_event_doc},
    {"get_memory_info", context_get_memory_info, METH_NOARGS,
     context_get_memory_info_doc},
    {"_device_memory_info", context_device_memory_info, METH_NOARGS,
     context_device_memory_info_doc},
    {"_repr_html_", context_repr_html, METH_NOARGS, context_repr_html_doc},
    {"_set_memory_manager",
     (PyCFunction)(void (*)(void))cmpy_context_set_memory_manager,
     METH_FASTCALL | METH_KEYWORDS, cmpy_context_set_memory_manager_doc},
    {"push", context_push, METH_NOARGS, context_push_doc},
    {"pop", context_pop, METH_NOARGS, context_pop_doc},
    {"synchronize", context_synchronize, METH_NOARGS, context_synchronize_doc},
    {"reset", context_reset, METH_NOARGS, context_reset_doc},
    {"can_access_peer", (PyCFunction)(void (*)(void))context_can_access_peer,
     METH_FASTCALL | METH_KEYWORDS, context_can_access_peer_doc},
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
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(cmpy_Context, weakreflist),
     Py_READONLY, NULL},
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
