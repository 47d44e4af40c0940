/* module.h: the extension's module state and the helpers every py/ file
 * shares. Owns no driver object. */
#ifndef CMPY_MODULE_H
#define CMPY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h>
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_READONLY READONLY
#endif

#include "../core/status.h"

/* An object handed back by core as a void * (the payload of a stream
 * callback, an external record's (finalizer, keep) pair): in CUDAMEM_DEBUG
 * builds, asserts that py/ still owns a reference to it and that it is of
 * the type stored, which a dangling or twice-released pointer is not. */
#ifdef CUDAMEM_DEBUG
#define CMPY_ASSERT_HANDED(op, type_check)                                    \
    assert(Py_REFCNT(op) >= 1 && type_check(op))
#else
#define CMPY_ASSERT_HANDED(op, type_check) ((void)0)
#endif

/* The functions of cudamem/_streams.py that py/callback.c calls. */
#define CMPY_GLUE_COUNT 3
/* The ctypes types of cudamem/_handles.py that py/memory.c makes. */
#define CMPY_HANDLES_COUNT 3

/* The seam to the package's Python (docs/design.rst): the objects
 * cudamem/__init__.py hands over, by keyword, in its one call of
 * _install(). py/ imports nothing else of its package but cudamem.errors
 * (at module init). The two loaders are called on first use and return
 * the modules' objects, so their imports (threading, ctypes) stay lazy. */
#define CMPY_HOOKS(X)                                                         \
    X(MAKE_MEMORY_MANAGER, "make_memory_manager")     /* memory.py */         \
    X(ASSIGN_MEMORY_MANAGER, "assign_memory_manager") /* memory.py */         \
    X(PLUGIN_DEFER_CLEANUP, "plugin_defer_cleanup")   /* memory.py */         \
    X(UNIQUE_DICT, "UniqueDict")                      /* memory.py */         \
    X(MEMORY_INFO, "MemoryInfo")                      /* devices.py */        \
    X(MEMORY_STATS, "MemoryStats")                    /* devices.py */        \
    X(IPC_HANDLE, "IpcHandle")                        /* ipc.py */            \
    X(ARRAY_HANDLE, "array_handle")                   /* ipc.py */            \
    X(POOL_IPC_HANDLE, "PoolIpcHandle")               /* ipc.py */            \
    X(LOAD_STREAMS, "load_streams") /* -> CMPY_GLUE_COUNT */                  \
    X(LOAD_HANDLES, "load_handles") /* -> CMPY_HANDLES_COUNT */               \
    X(COMPLETE, "complete")         /* __init__.py, once the driver loads */

typedef enum cmpy_hook_id {
#define CMPY_HOOK_ENUM(id, name) CMPY_HOOK_##id,
    CMPY_HOOKS(CMPY_HOOK_ENUM)
#undef CMPY_HOOK_ENUM
        CMPY_HOOK_COUNT
} cmpy_hook_id;

/* How many freed MemoryPointers and 1-d DeviceNDArrays the state keeps
 * of each. None under ASan or in debug builds, so that every use after
 * free reaches the allocator. */
#define CMPY_CACHE 16
#if defined(__SANITIZE_ADDRESS__) || defined(CUDAMEM_DEBUG)
#define CMPY_CACHE_USED 0
#else
#define CMPY_CACHE_USED CMPY_CACHE
#endif

/* The module state, described here only (docs/design.rst and module.c
 * point here). One per module object (multi-phase init), reached from a
 * module function through its module (cmpy_get_state) and from an object
 * through its type's MRO (cmpy_type_state), so that a Python subclass's
 * instances work. module.c's exec slot fills the exception classes (from
 * cudamem.errors), sim_path and the types, each made by the file named
 * beside it; _install() fills hooks; the fields marked so are made on
 * first use (`registered` is register()'s registry, (address, nbytes) ->
 * HostBuffer, or None while one is being registered). Its objects are
 * listed once, in CMPY_STATE_OBJECTS, in the order module.c's clear drops
 * them (the devices before their types): the list declares them here and
 * module.c's traverse and clear walk it. Its free also frees sim_path and
 * uninstalls the process-wide hooks exec installed (core's release hook,
 * the GC and poll callbacks). */
#define CMPY_STATE_OBJECTS(X)                                                 \
    X(CudaSupportError)                                                       \
    X(CudaDriverError)                                                        \
    X(CudaAPIError)                                                           \
    X(CudaOutOfMemoryError)                                                   \
    X(CudaStickyError)                                                        \
    X(CudaWarning)                                                            \
    X(devices)               /* tuple of Device, on first use, or NULL */     \
    X(DeviceType)            /* py/device.c */                                \
    X(ContextType)           /* py/device.c */                                \
    X(StreamType)            /* py/stream.c */                                \
    X(EventType)             /* py/event.c */                                 \
    X(MemoryPointerType)     /* py/memory.c */                                \
    X(DeviceNDArrayBaseType) /* py/array.c */                                 \
    X(DeviceNDArrayType)     /* py/array.c */                                 \
    X(DeviceRecordType)      /* py/record.c */                                \
    X(ManagedNDArrayType)    /* py/hostarray.c, made on first use */          \
    X(MappedNDArrayType)     /* py/hostarray.c, made on first use */          \
    X(DeallocationsType)     /* py/pending.c */                               \
    X(DeferGuardType)        /* py/pending.c */                               \
    X(HostBufferType)        /* py/hostbuf.c */                               \
    X(registered)            /* py/hostregister.c, made on first use */       \
    X(attr_ids)              /* {"WARP_SIZE": 10, ...}: every attribute */    \
    X(cai_keys)              /* py/arraycai.c, made on first use */           \
    X(cai_template)          /* py/arraycai.c, made on first use */           \
    X(cai_dtype)             /* py/arraycai.c: the last dtype exported */     \
    X(cai_typestr)           /* py/arraycai.c: cai_dtype's str */             \
    X(dtype_arg)             /* py/arraylayout.c: the last static type */     \
    X(dtype_descr)           /* py/arraylayout.c: dtype_arg's descr */        \
    X(stats_keys)            /* py/stats.c, made on first use */              \
    X(oom_observer)          /* py/stats.c: set_oom_observer()'s */

typedef struct cmpy_state {
#define CMPY_STATE_FIELD(name) PyObject *name;
    CMPY_STATE_OBJECTS(CMPY_STATE_FIELD)
#undef CMPY_STATE_FIELD
    PyObject *hooks[CMPY_HOOK_COUNT]; /* by cmpy_hook_id, from _install() */
    /* Set (for good) once a plugin memory manager may be in use: until
     * then allocations skip every memory-manager lookup. */
    int plugins;
    /* cudamem._streams' functions by cmpy_glue_fn, loaded lazily */
    PyObject *glue[CMPY_GLUE_COUNT];
    /* cudamem._handles' Handle, DevicePointer, LaunchView, loaded lazily */
    PyObject *handles[CMPY_HANDLES_COUNT];
    char *sim_path; /* the bundled simulator, next to this module's file */
    /* MemoryPointers (memory.c) and 1-d DeviceNDArrays (array.c) kept
     * for reuse, untracked, their type's reference dropped: every
     * allocation makes one of each and every free drops them, and
     * CPython's allocation and GC linking of the pointer alone were about
     * 9 ns of a stream-ordered allocation's 300 (benchmarks/NOTES.md). */
    PyObject *pointer_cache[CMPY_CACHE];
    int npointer_cache;
    PyObject *array_cache[CMPY_CACHE];
    int narray_cache;
} cmpy_state;

static inline cmpy_state *
cmpy_get_state(PyObject *module)
{
    return (cmpy_state *)PyModule_GetState(module);
}

extern struct PyModuleDef cmpy_module_def;

/* The module of a heap type made by this module (borrowed), else NULL. */
static inline PyObject *
cmpy_own_module(PyTypeObject *type)
{
    PyObject *module;

    if (!PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE)) {
        return NULL;
    }
    module = ((PyHeapTypeObject *)type)->ht_module;
    return module != NULL && PyModule_GetDef(module) == &cmpy_module_def
               ? module
               : NULL;
}

/* The module of `type`, one of the module's heap types or a Python
 * subclass of one (borrowed; NULL with TypeError for another type). The
 * type itself first: at interpreter exit a finalizer may run after its
 * type's MRO was cleared (PyType_GetModuleByDef would read it). */
static inline PyObject *
cmpy_type_module(PyTypeObject *type)
{
    PyObject *module = cmpy_own_module(type), *mro = type->tp_mro;

    for (Py_ssize_t i = 1;
         module == NULL && mro != NULL && i < PyTuple_GET_SIZE(mro); i++) {
        module = cmpy_own_module((PyTypeObject *)PyTuple_GET_ITEM(mro, i));
    }
    if (module == NULL) {
        PyErr_Format(PyExc_TypeError, "%s is not a cudamem type",
                     type->tp_name);
    }
    return module;
}

/* The module state of `type` (cmpy_type_module), or NULL with an
 * exception. */
static inline cmpy_state *
cmpy_state_of(PyTypeObject *type)
{
    PyObject *module = cmpy_type_module(type);

    return module == NULL ? NULL : (cmpy_state *)PyModule_GetState(module);
}

/* The module state of one of the module's heap types' instances (or of
 * a Python subclass's). */
static inline cmpy_state *
cmpy_type_state(PyObject *self)
{
    return cmpy_state_of(Py_TYPE(self));
}

/* cudamem._handles.Handle(value) of the module of `owner` (an instance of
 * one of its types): a ctypes.c_void_p (numba's type for device pointers
 * and handles) that converts with int() and operator.index(); ctypes is
 * imported here, on first use (DESIGN rule 1). */
PyObject *cmpy_c_void_p(PyObject *owner, unsigned long long value);

/* cudamem._handles.DevicePointer(value): numba's device_ctypes_pointer, a
 * ctypes.c_size_t that also converts with int(). */
PyObject *cmpy_device_ctypes_pointer(PyObject *owner,
                                     unsigned long long value);

/* The getter of _strided_memory_view_shim: numba-cuda's kernel launch
 * reads it from every argument that has __cuda_memory__ (its own arrays'
 * protocol), so cudamem's arrays launch as numba's do. */
PyObject *cmpy_launch_view(PyObject *array, void *closure);

/* The getter of a protocol flag that is always True (__cuda_memory__). */
static inline PyObject *
cmpy_get_true(PyObject *Py_UNUSED(self), void *Py_UNUSED(closure))
{
    Py_RETURN_TRUE;
}

/* PyObject_GetOptionalAttrString before 3.13: 1 found, 0 not, -1 error.
 * Before 3.13 through _PyObject_LookupAttr, 3.13's function under its
 * 3.7 name: a type with the generic getattr raises no AttributeError
 * only to have it cleared. */
static inline int
cmpy_optional_attr(PyObject *obj, const char *name, PyObject **out)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttrString(obj, name, out);
#else
    PyObject *key = PyUnicode_FromString(name);
    int rc;

    if (key == NULL) {
        *out = NULL;
        return -1;
    }
    rc = _PyObject_LookupAttr(obj, key, out);
    Py_DECREF(key);
    return rc;
#endif
}

/* The exception being handled, taken out and put back (3.12's API, and
 * the deprecated triple before it). */
static inline PyObject *
cmpy_exc_take(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL) {
        PyException_SetTraceback(value, tb);
    }
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

static inline void
cmpy_exc_put(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    if (exc == NULL) {
        return;
    }
    PyErr_Restore(Py_NewRef(Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

/* In a finalizer: the state of self's module, or NULL without an
 * exception once interpreter exit has cleared its type's module (the
 * release is then reported on stderr, cmpy_warn_release). */
static inline cmpy_state *
cmpy_final_state(PyObject *self)
{
    PyObject *saved = cmpy_exc_take();
    cmpy_state *st = cmpy_type_state(self);

    if (st == NULL) {
        PyErr_Clear();
    }
    cmpy_exc_put(saved);
    return st;
}

/* The object _install() gave for `id` (borrowed), or NULL with a
 * RuntimeError when it gave none (the package was not imported). */
PyObject *cmpy_hook(cmpy_state *st, cmpy_hook_id id);
/* Fills the `n` empty `slots` (new references) from the tuple the loader
 * hook `id` returns, once; 0, or -1 with an exception set. */
int cmpy_hook_load(cmpy_state *st, cmpy_hook_id id, PyObject **slots, int n);

/* Sets the Python exception for a core failure; returns NULL. */
PyObject *cmpy_raise(cmpy_state *st, const cm_error *err);
/* The same, with `hint` (or NULL) appended to a plain CudaAPIError's
 * message: why cudamem thinks the call failed. */
PyObject *cmpy_raise_hint(cmpy_state *st, const cm_error *err,
                          const char *hint);
/* A failed free in a finalizer: a CudaWarning (an unraisable error when
 * warnings are errors; stderr once the module is torn down), keeping any
 * exception already set. Nothing in a forked child. */
void cmpy_warn_release(cmpy_state *st, const cm_error *err);
/* Around a release in a finalizer, which holds the GIL: cmpy_release_begin
 * before it, then cmpy_release_end(rc, err) with its status, which runs
 * the flush that release made due without the GIL (cuMemFree can wait
 * for the device: DESIGN rule 7). Returns rc, or -1 when the flush
 * failed (err says why unless the release had failed already). */
void cmpy_release_begin(void);
int cmpy_release_end(int rc, cm_error *err);
/* The arguments of a METH_FASTCALL | METH_KEYWORDS function by name:
 * out[i] is the argument called names[i] (borrowed), or NULL when absent;
 * the first `required` must be given. 0, or -1 with TypeError naming
 * `fname`. */
int cmpy_parse_args(const char *fname, const char *const *names, int nnames,
                    int required, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames, PyObject **out);
/* A byte count argument called `what`: an int >= 0, or None (SIZE_MAX)
 * where `none_ok`; 0, or -1 with TypeError or ValueError naming it. */
int cmpy_nbytes_arg(PyObject *arg, const char *what, int none_ok, size_t *out);
/* Loads the driver (once per process); 0, or -1 with an exception set. */
int cmpy_ensure_driver(cmpy_state *st);

/* Method tables of the other py/ files, merged by module.c. */
extern PyMethodDef cmpy_driver_methods[];
extern PyMethodDef cmpy_device_methods[];
extern PyMethodDef cmpy_array_methods[];
extern PyMethodDef cmpy_pending_methods[];
extern PyMethodDef cmpy_managed_methods[];
extern PyMethodDef cmpy_hostbuf_methods[];
extern PyMethodDef cmpy_hostalloc_methods[];
extern PyMethodDef cmpy_hostregister_methods[];
extern PyMethodDef cmpy_hostarray_methods[];
extern PyMethodDef cmpy_memory_methods[];
extern PyMethodDef cmpy_emm_methods[];
extern PyMethodDef cmpy_pool_methods[];
extern PyMethodDef cmpy_asyncpool_methods[];
extern PyMethodDef cmpy_ipc_methods[];
extern PyMethodDef cmpy_stats_methods[];
extern PyMethodDef cmpy_history_methods[];

/* py/stats.c: installs (on) or removes the garbage-collector hook of
 * core's out-of-memory recovery (process-wide). */
void cmpy_stats_install(int on);

/* py/history.c: adds _history_annotation (the annotations' context
 * variable; 0, or -1 with an exception set); stops the memory history and
 * drops what it recorded (at module free); and, after a call that
 * released the GIL around core's allocations, gives the entries it
 * recorded meanwhile the calling thread's stack and annotation. */
int cmpy_history_init(PyObject *module);
void cmpy_history_uninstall(void);
void cmpy_history_adopt_now(void);
/* Set while an entry may wait for cmpy_history_adopt_now: the entry
 * points' check is this one load. */
extern int cmpy_history_adopting;

static inline void
cmpy_history_adopt(void)
{
    if (__atomic_load_n(&cmpy_history_adopting, __ATOMIC_RELAXED)) {
        cmpy_history_adopt_now();
    }
}

/* py/'s end of a GIL release: Python's, then the history's adoption. */
#define CMPY_END_ALLOW_THREADS                                                \
    Py_END_ALLOW_THREADS                                                      \
    cmpy_history_adopt();

/* py/device.c: creates the Device and Context types and the attribute
 * table in the module state; 0, or -1 with an exception set. */
int cmpy_device_types_init(PyObject *module, cmpy_state *st);
/* The same for py/memory.c, py/array.c, py/pending.c and py/hostbuf.c. */
int cmpy_memory_type_init(PyObject *module, cmpy_state *st);
int cmpy_array_type_init(PyObject *module, cmpy_state *st);
int cmpy_pending_type_init(PyObject *module, cmpy_state *st);
int cmpy_hostbuf_type_init(PyObject *module, cmpy_state *st);

#endif
