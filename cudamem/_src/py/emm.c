/* emm.c (py/): the EMM plugin dispatch, numba's External Memory
 * Management. A context's memory manager is cudamem's own (mode
 * CMPY_MANAGER_NATIVE: core allocates, no Python runs) or an EMM plugin
 * (CMPY_MANAGER_PLUGIN: a Python object whose methods allocate).
 * cudamem/memory.py makes the manager and says its mode through the
 * make_memory_manager hook, on a Context's first memory_manager read (or
 * _set_memory_manager); both are kept on the Context, and read here.
 * Until _enable_plugins() (memory.py, when a plugin may be in use) no
 * allocation looks further. After it, each asks cmpy_manager_plugin()
 * whether the manager is a plugin, and only then builds the arguments for
 * cmpy_manager_call(), the one place a plugin's method is called (its
 * context current):
 * memalloc (cmpy_memory_alloc), memallocmanaged
 * (cmpy_memory_alloc_managed), memhostalloc (hostalloc.c's host_buffer)
 * and get_ipc_handle (ipc.c); a native manager, or a plugin without an
 * optional method, falls through to core. What a plugin returns is
 * checked here. numba's constructors a plugin uses (MemoryPointer,
 * memory.c's tp_new; ManagedMemory here; PinnedMemory and MappedMemory,
 * hostalloc.c) record its memory with its finalizer, which core's release
 * hook (cmpy_emm_release_external) runs when the last view goes. The
 * Context methods that delegate to the manager (memalloc, mempin,
 * defer_cleanup, ...) are py/context.c's, and memory.py's Python classes
 * the base classes plugins derive from. */
#include "memory.h"

#include "device.h"
#include "hostbuf.h"

/* ------------------------------------------------------------------------
 * Plugin memory's finalizers. */

void
cmpy_memory_finalize(cmpy_state *st, PyObject *finalizer)
{
    PyObject *saved = cmpy_exc_take(), *res, *exc;

    res = PyObject_CallNoArgs(finalizer);
    if (res == NULL) {
        /* An unraisable error when warnings are errors or the module is
         * gone. */
        exc = cmpy_exc_take();
        if (st == NULL || st->CudaWarning == NULL ||
            PyErr_WarnFormat(st->CudaWarning, 1,
                             "the finalizer %R of an EMM plugin's memory "
                             "raised %R",
                             finalizer, exc) < 0) {
            PyErr_WriteUnraisable(exc);
        }
        Py_XDECREF(exc);
    }
    Py_XDECREF(res);
    cmpy_exc_put(saved);
}

/* The release hook of external records (core/memory.h): `external` is
 * (finalizer or None, the plugin's object or None). Runs with the GIL
 * held, in a deallocator. */
void
cmpy_emm_release_external(void *hook_arg, void *external)
{
    PyObject *pair = external, *finalizer;

    CMPY_ASSERT_HANDED(pair, PyTuple_CheckExact);
    finalizer = PyTuple_GET_ITEM(pair, 0);
    if (finalizer != Py_None) {
        cmpy_memory_finalize(hook_arg, finalizer);
    }
    Py_DECREF(pair);
}

/* ------------------------------------------------------------------------
 * Which manager a context has. */

/* Installs (manager, mode); 0, or -1 with ValueError naming a bad mode. */
static int
set_manager(cmpy_Context *self, PyObject *manager, PyObject *mode_arg)
{
    long mode = PyLong_Check(mode_arg) ? PyLong_AsLong(mode_arg) : -1;

    if (mode != CMPY_MANAGER_NATIVE && mode != CMPY_MANAGER_PLUGIN) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "invalid memory manager mode %R",
                     mode_arg);
        return -1;
    }
    Py_XSETREF(self->memory_manager, Py_NewRef(manager));
    self->manager_mode = (cmpy_manager_mode)mode;
    return 0;
}

/* Made once per Context by the make_memory_manager hook
 * (cudamem.memory._make_memory_manager), which returns (manager, mode). */
PyObject *
cmpy_context_get_memory_manager(cmpy_Context *self, void *Py_UNUSED(closure))
{
    PyObject *make, *made;
    int rc;

    if (self->memory_manager == NULL) {
        make = cmpy_hook(cmpy_type_state((PyObject *)self),
                         CMPY_HOOK_MAKE_MEMORY_MANAGER);
        if (make == NULL) {
            return NULL;
        }
        made = PyObject_CallOneArg(make, (PyObject *)self);
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

/* numba's Context.memory_manager is a plain attribute its tests assign:
 * the assign_memory_manager hook (cudamem.memory._assign_memory_manager)
 * installs the instance. */
int
cmpy_context_assign_memory_manager(cmpy_Context *self, PyObject *value,
                                   void *Py_UNUSED(closure))
{
    PyObject *assign, *out;

    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError,
                        "a Context's memory_manager cannot be deleted");
        return -1;
    }
    assign = cmpy_hook(cmpy_type_state((PyObject *)self),
                       CMPY_HOOK_ASSIGN_MEMORY_MANAGER);
    if (assign == NULL) {
        return -1;
    }
    out = PyObject_CallFunctionObjArgs(assign, (PyObject *)self, value, NULL);
    Py_XDECREF(out);
    return out == NULL ? -1 : 0;
}

/* The context's manager when it is a plugin (new reference); NULL without
 * an exception when cudamem allocates for it, with one on failure. */
PyObject *
cmpy_context_plugin(cmpy_Context *self, cmpy_state *st)
{
    PyObject *manager;

    if (!st->plugins) {
        return NULL;
    }
    manager = cmpy_context_get_memory_manager(self, NULL);
    if (manager != NULL && self->manager_mode != CMPY_MANAGER_PLUGIN) {
        Py_CLEAR(manager);
    }
    return manager;
}

int
cmpy_manager_plugin(cmpy_state *st, cm_device *dev, PyObject **plugin)
{
    cmpy_Context *known;
    cmpy_Device *device;
    PyObject *ctx;

    *plugin = NULL;
    if (!st->plugins) {
        return 0;
    }
    if ((device = cmpy_device_of(st, dev)) == NULL) {
        return -1;
    }
    /* The current context's manager made already, and one cudamem
     * allocates for (the pool, the stream-ordered allocator): nothing to
     * ask, nor a Context to look up. */
    known = (cmpy_Context *)device->context;
    if (known != NULL && known->memory_manager != NULL &&
        known->manager_mode == CMPY_MANAGER_NATIVE &&
        known->generation == cm_device_generation(dev)) {
        return 0;
    }
    if ((ctx = cmpy_context_of(st, device)) == NULL) {
        return -1;
    }
    *plugin = cmpy_context_plugin((cmpy_Context *)ctx, st);
    Py_DECREF(ctx);
    return *plugin != NULL ? 1 : PyErr_Occurred() != NULL ? -1 : 0;
}

const char cmpy_context_set_memory_manager_doc[] = PyDoc_STR(
    "_set_memory_manager($self, manager, mode)\n--\n\n"
    "Makes *manager* this context's memory manager; *mode* is "
    "MANAGER_NATIVE\nwhen cudamem allocates for it, MANAGER_PLUGIN "
    "for an EMM plugin\n(cudamem.memory decides).");

PyObject *
cmpy_context_set_memory_manager(PyObject *self, PyObject *const *args,
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

/* ------------------------------------------------------------------------
 * Calling a plugin, and what it returned. */

/* What a plugin's memalloc(nbytes) returned, as an array's gpu_data: a
 * cudamem MemoryPointer as it is; any other object with a
 * `device_pointer` (an int, or with `.value`) and a `size` wrapped in an
 * external record that keeps it alive. TypeError / ValueError naming the
 * plugin and the object otherwise. */
static PyObject *
adopt(cmpy_state *st, cm_device *dev, PyObject *plugin, PyObject *got,
      size_t nbytes)
{
    PyObject *ptr_obj = NULL, *size_obj = NULL, *out = NULL;
    CUdeviceptr ptr;
    size_t size;

    if (PyObject_TypeCheck(got, (PyTypeObject *)st->MemoryPointerType)) {
        cmpy_MemoryPointer *mp = (cmpy_MemoryPointer *)got;

        if (mp->mem->dev != dev || mp->size < nbytes) {
            PyErr_Format(PyExc_ValueError,
                         "%R.memalloc(%zu) returned %R, not %zu bytes on "
                         "device %d",
                         plugin, nbytes, got, nbytes, dev->ordinal);
            return NULL;
        }
        return Py_NewRef(got);
    }
    if (cmpy_optional_attr(got, "device_pointer", &ptr_obj) < 0 ||
        (ptr_obj != NULL && cmpy_optional_attr(got, "size", &size_obj) < 0)) {
        goto done;
    }
    if (ptr_obj == NULL || size_obj == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "%R.memalloc(%zu) returned %R, which is not a "
                     "MemoryPointer (it needs device_pointer and size)",
                     plugin, nbytes, got);
        goto done;
    }
    if (cmpy_address_arg(ptr_obj, "memalloc()'s device_pointer", &ptr) < 0 ||
        cmpy_size_arg(size_obj, "memalloc()'s size", &size) < 0) {
        goto done;
    }
    if (size < nbytes || (ptr == 0 && size != 0)) {
        PyErr_Format(PyExc_ValueError,
                     "%R.memalloc(%zu) returned %R, which is not %zu bytes "
                     "of memory",
                     plugin, nbytes, got, nbytes);
        goto done;
    }
    out = cmpy_memory_external(st, dev, ptr, size, 0, Py_None, got, NULL);
done:
    Py_XDECREF(ptr_obj);
    Py_XDECREF(size_obj);
    return out;
}

int
cmpy_manager_call(cmpy_state *st, cm_device *dev, PyObject *plugin,
                  const char *method, int optional, PyObject *args,
                  PyObject *kwargs, PyObject **got)
{
    PyObject *fn = NULL;
    cm_ctx_guard guard;
    cm_error err;

    *got = NULL;
    if (args == NULL ||
        (optional ? cmpy_optional_attr(plugin, method, &fn) < 0
                  : (fn = PyObject_GetAttrString(plugin, method)) == NULL)) {
        return -1;
    }
    if (fn == NULL) {
        return 0;
    }
    if (cm_ctx_enter(dev, &guard, &err) < 0) {
        Py_DECREF(fn);
        cmpy_raise(st, &err);
        return -1;
    }
    *got = PyObject_Call(fn, args, kwargs);
    Py_DECREF(fn);
    if (cm_ctx_leave(&guard, 0, &err) < 0 && *got != NULL) {
        Py_CLEAR(*got);
        cmpy_raise(st, &err);
    }
    return *got != NULL ? 1 : -1;
}

PyObject *
cmpy_memory_alloc(cmpy_state *st, cm_device *dev, size_t nbytes,
                  CUstream stream)
{
    PyObject *args, *plugin, *got, *out = NULL;
    int rc;

    /* numba asks no plugin for zero bytes: the pointer is NULL. */
    rc = nbytes == 0 ? 0 : cmpy_manager_plugin(st, dev, &plugin);
    if (rc <= 0) {
        return rc == 0 ? cmpy_memory_native_alloc(st, dev, nbytes, stream)
                       : NULL;
    }
    args = Py_BuildValue("(n)", (Py_ssize_t)nbytes);
    if (cmpy_manager_call(st, dev, plugin, "memalloc", 0, args, NULL, &got) >
        0) {
        out = adopt(st, dev, plugin, got, nbytes);
        Py_DECREF(got);
    }
    Py_XDECREF(args);
    Py_DECREF(plugin);
    return out;
}

/* What a plugin's memallocmanaged(nbytes, attach_global) returned: a
 * ManagedMemory (a managed MemoryPointer) of at least nbytes on dev. */
static PyObject *
adopt_managed(cmpy_state *st, cm_device *dev, PyObject *plugin, PyObject *got,
              size_t nbytes)
{
    cmpy_MemoryPointer *mp = (cmpy_MemoryPointer *)got;

    if (!PyObject_TypeCheck(got, (PyTypeObject *)st->MemoryPointerType) ||
        !mp->managed) {
        PyErr_Format(PyExc_TypeError,
                     "%R.memallocmanaged(%zu) returned %R, which is not a "
                     "ManagedMemory",
                     plugin, nbytes, got);
        return NULL;
    }
    if (mp->mem->dev != dev || mp->size < nbytes) {
        PyErr_Format(PyExc_ValueError,
                     "%R.memallocmanaged(%zu) returned %R, not %zu bytes "
                     "on device %d",
                     plugin, nbytes, got, nbytes, dev->ordinal);
        return NULL;
    }
    return Py_NewRef(got);
}

PyObject *
cmpy_memory_alloc_managed(cmpy_state *st, cm_device *dev, size_t nbytes,
                          int attach_global)
{
    PyObject *args = NULL, *kwargs = NULL, *plugin, *got = NULL, *out = NULL;
    int rc;

    /* A plugin's memallocmanaged() when it has one (beyond numba's
     * interface); never for zero bytes, as memalloc(). */
    rc = nbytes == 0 ? 0 : cmpy_manager_plugin(st, dev, &plugin);
    if (rc > 0) {
        args = Py_BuildValue("(n)", (Py_ssize_t)nbytes);
        if (args != NULL) {
            kwargs = Py_BuildValue("{s:O}", "attach_global",
                                   attach_global ? Py_True : Py_False);
        }
        rc = cmpy_manager_call(st, dev, plugin, "memallocmanaged", 1,
                               kwargs == NULL ? NULL : args, kwargs, &got);
        if (rc > 0) {
            out = adopt_managed(st, dev, plugin, got, nbytes);
            Py_DECREF(got);
        }
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
        Py_DECREF(plugin);
    }
    if (rc != 0) {
        return out;
    }
    return cmpy_memory_native_managed(st, dev, nbytes, attach_global);
}

/* What a plugin's memhostalloc() returned: a HostBuffer (PinnedMemory or
 * MappedMemory) of at least nbytes, mapped on dev when `mapped`. */
int
cmpy_emm_check_host_buffer(cmpy_state *st, cm_device *dev, PyObject *plugin,
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
    if (host->size < nbytes ||
        (mapped && (!host->mapped || host->dev != dev))) {
        PyErr_Format(PyExc_ValueError,
                     "%R.memhostalloc(%zu) returned %R, not %zu bytes%s",
                     plugin, nbytes, got, nbytes,
                     mapped ? " mapped on the current device" : "");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * numba's constructors for plugins' memory. */

/* A Context, or a weakref.proxy of one (numba's plugins pass those), as
 * `name`()'s. New reference, or NULL with TypeError naming the value. */
static cmpy_Context *
context_arg(cmpy_state *st, const char *name, PyObject *arg)
{
    PyObject *obj = arg;

    if (PyWeakref_CheckProxy(arg)) {
#if PY_VERSION_HEX >= 0x030D0000
        if (PyWeakref_GetRef(arg, &obj) < 0) {
            return NULL;
        }
#else
        obj = Py_NewRef(PyWeakref_GetObject(arg));
#endif
    }
    else {
        Py_INCREF(obj);
    }
    if (obj == NULL || !Py_IS_TYPE(obj, (PyTypeObject *)st->ContextType)) {
        PyErr_Format(PyExc_TypeError, "%s() needs a cudamem Context, not %R",
                     name, arg);
        Py_XDECREF(obj);
        return NULL;
    }
    return (cmpy_Context *)obj;
}

int
cmpy_memory_parse_sized(cmpy_state *st, const char *name, PyObject *context,
                        PyObject *size_obj, cm_device **dev, size_t *size)
{
    cmpy_Context *ctx = context_arg(st, name, context);
    char what[64];
    int rc;

    if (ctx == NULL) {
        return -1;
    }
    snprintf(what, sizeof(what), "%s()'s size", name);
    rc = cmpy_size_arg(size_obj, what, size);
    if (rc == 0) {
        rc = cmpy_context_check(st, ctx);
    }
    *dev = ctx->device->dev;
    Py_DECREF(ctx);
    return rc;
}

int
cmpy_memory_parse_external(cmpy_state *st, const char *name,
                           PyObject *const *argv, cm_device **dev,
                           CUdeviceptr *ptr, size_t *size)
{
    cmpy_Context *ctx = context_arg(st, name, argv[0]);
    char what[64];
    int rc = -1;

    if (ctx == NULL) {
        return -1;
    }
    snprintf(what, sizeof(what), "%s()'s pointer", name);
    if (cmpy_address_arg(argv[1], what, ptr) < 0) {
        goto done;
    }
    snprintf(what, sizeof(what), "%s()'s size", name);
    if (cmpy_size_arg(argv[2], what, size) < 0) {
        goto done;
    }
    if (argv[4] != NULL && argv[4] != Py_None && !PyCallable_Check(argv[4])) {
        PyErr_Format(PyExc_TypeError,
                     "%s()'s finalizer must be callable or None, not %R", name,
                     argv[4]);
        goto done;
    }
    if (cmpy_context_check(st, ctx) < 0) {
        goto done;
    }
    *dev = ctx->device->dev;
    rc = 0;
done:
    Py_DECREF(ctx);
    return rc;
}

/* numba's MemoryPointer(context, pointer, size, owner=None,
 * finalizer=None) and ManagedMemory(...) as `name`(): an external record
 * whose release hook calls the finalizer once the pointer and every view
 * of it are gone. */
PyObject *
cmpy_emm_external_new(cmpy_state *st, const char *name, PyObject *const *argv,
                      int managed)
{
    PyObject *owner = argv[3] != NULL && argv[3] != Py_None ? argv[3] : NULL;
    cm_device *dev;
    CUdeviceptr ptr;
    size_t size;

    if (cmpy_memory_parse_external(st, name, argv, &dev, &ptr, &size) < 0) {
        return NULL;
    }
    return cmpy_memory_external(st, dev, ptr, size, managed,
                                argv[4] != NULL ? argv[4] : Py_None, Py_None,
                                owner);
}

static const char *const external_names[] = {"context", "pointer", "size",
                                             "owner", "finalizer"};

PyDoc_STRVAR(managed_memory_doc,
             "ManagedMemory($module, context, pointer, size, owner=None, "
             "finalizer=None)\n--\n\n"
             "numba's ManagedMemory, for EMM plugins' memallocmanaged(): "
             "the *size*\nbytes of managed memory at *pointer* (an int, "
             "or a ctypes pointer) in\n*context*, as a host-accessible "
             "MemoryPointer (buffer protocol,\nManagedNDArray's memory) "
             "kept alive with *owner*. *finalizer* (no\narguments) frees "
             "them when the pointer and all its views are gone; an\n"
             "exception in it becomes a CudaWarning.");

static PyObject *
managed_memory(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    PyObject *argv[5];

    if (cmpy_parse_args("ManagedMemory", external_names, 5, 3, args, nargs,
                        kwnames, argv) < 0) {
        return NULL;
    }
    return cmpy_emm_external_new(cmpy_get_state(module), "ManagedMemory", argv,
                                 1);
}

/* ------------------------------------------------------------------------
 * The switch: whether allocations ask plugins. */

PyDoc_STRVAR(plugin_manager_doc,
             "_plugin_manager($module)\n--\n\n"
             "The current context's memory manager when it is an EMM "
             "plugin (cudamem's\nown managers: None).");

static PyObject *
plugin_manager(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *manager;
    cm_device *dev;
    int rc;

    if (!st->plugins) {
        Py_RETURN_NONE;
    }
    if (cmpy_current_device(st, &dev) < 0 ||
        (rc = cmpy_manager_plugin(st, dev, &manager)) < 0) {
        return NULL;
    }
    return rc > 0 ? manager : Py_NewRef(Py_None);
}

PyDoc_STRVAR(enable_plugins_doc,
             "_enable_plugins($module)\n--\n\n"
             "From now on allocations ask their context's memory manager "
             "(set when\nan EMM plugin may be in use; never unset).");

static PyObject *
enable_plugins(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_get_state(module)->plugins = 1;
    Py_RETURN_NONE;
}

PyMethodDef cmpy_emm_methods[] = {
    {"_enable_plugins", enable_plugins, METH_NOARGS, enable_plugins_doc},
    {"ManagedMemory", (PyCFunction)(void (*)(void))managed_memory,
     METH_FASTCALL | METH_KEYWORDS, managed_memory_doc},
    {"_plugin_manager", plugin_manager, METH_NOARGS, plugin_manager_doc},
    {NULL, NULL, 0, NULL},
};
