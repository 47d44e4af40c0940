/* module.c: the cudamem._cudamem module: multi-phase init, the life of
 * its module state (cmpy_state, whose fields module.h describes: filled
 * at exec, traversed, cleared and freed here), the Python hooks
 * _install() hands over and the merged method tables. Importing it
 * touches no driver (DESIGN rule 1). */
#define CMPY_NPY_IMPORT
#include "cai.h"
#include "callback.h"
#include "device.h"
#include "dlpack.h"
#include "event.h"
#include "memory.h"
#include "npy.h"
#include "stream.h"

#include <string.h>

#include <cuda.h>

static int
load_exceptions(cmpy_state *st)
{
    PyObject *errors = PyImport_ImportModule("cudamem.errors");

    if (errors == NULL) {
        return -1;
    }
#define CMPY_LOAD(name)                                                       \
    if ((st->name = PyObject_GetAttrString(errors, #name)) == NULL) {         \
        goto error;                                                           \
    }
    CMPY_LOAD(CudaSupportError)
    CMPY_LOAD(CudaDriverError)
    CMPY_LOAD(CudaAPIError)
    CMPY_LOAD(CudaOutOfMemoryError)
    CMPY_LOAD(CudaStickyError)
    CMPY_LOAD(CudaWarning)
#undef CMPY_LOAD
    Py_DECREF(errors);
    return 0;
error:
    Py_DECREF(errors);
    return -1;
}

/* The simulator is built as libcusim.so in this module's directory. */
static int
find_simulator(PyObject *module, cmpy_state *st)
{
    PyObject *file = PyModule_GetFilenameObject(module);
    const char *path;
    const char *slash;
    size_t dirlen;

    if (file == NULL) {
        /* A module without __file__ (embedded) has no bundled simulator. */
        PyErr_Clear();
        return 0;
    }
    path = PyUnicode_AsUTF8(file);
    if (path == NULL) {
        Py_DECREF(file);
        return -1;
    }
    slash = strrchr(path, '/');
    dirlen = slash != NULL ? (size_t)(slash - path) + 1 : 0;
    st->sim_path = PyMem_Malloc(dirlen + sizeof("libcusim.so"));
    if (st->sim_path == NULL) {
        Py_DECREF(file);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(st->sim_path, path, dirlen);
    memcpy(st->sim_path + dirlen, "libcusim.so", sizeof("libcusim.so"));
    Py_DECREF(file);
    return 0;
}

static const char *const hook_names[CMPY_HOOK_COUNT] = {
#define CMPY_HOOK_NAME(id, name) name,
    CMPY_HOOKS(CMPY_HOOK_NAME)
#undef CMPY_HOOK_NAME
};

PyObject *
cmpy_hook(cmpy_state *st, cmpy_hook_id id)
{
    if (st->hooks[id] == NULL) {
        PyErr_Format(PyExc_RuntimeError,
                     "cudamem._cudamem has no '%s' hook: import cudamem, "
                     "whose __init__ installs it",
                     hook_names[id]);
    }
    return st->hooks[id];
}

int
cmpy_hook_load(cmpy_state *st, cmpy_hook_id id, PyObject **slots, int n)
{
    PyObject *loader = cmpy_hook(st, id), *got;

    if (loader == NULL || (got = PyObject_CallNoArgs(loader)) == NULL) {
        return -1;
    }
    if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != n) {
        PyErr_Format(PyExc_TypeError,
                     "the '%s' hook returned %R, not a "
                     "tuple of %d",
                     hook_names[id], got, n);
        Py_DECREF(got);
        return -1;
    }
    /* Another thread may have loaded them meanwhile: the first stay. */
    for (int i = 0; i < n; i++) {
        if (slots[i] == NULL) {
            slots[i] = Py_NewRef(PyTuple_GET_ITEM(got, i));
        }
    }
    Py_DECREF(got);
    return 0;
}

PyDoc_STRVAR(install_doc,
             "_install($module, *, make_memory_manager, "
             "assign_memory_manager, plugin_defer_cleanup, UniqueDict, "
             "MemoryInfo, MemoryStats, IpcHandle, array_handle, "
             "PoolIpcHandle, load_streams, load_handles, complete)\n--\n\n"
             "Hands the extension the Python objects it calls (the seam in "
             "docs/design.rst).\ncudamem/__init__.py calls it at import "
             "(stand-ins for the hooks of modules\nnot yet imported) and "
             "again on the first call into a stand-in; every keyword\nis "
             "required. A second call replaces them all.");

static PyObject *
install(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
        PyObject *kwnames)
{
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[CMPY_HOOK_COUNT];

    if (nargs != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "_install() takes keyword arguments only");
        return NULL;
    }
    if (cmpy_parse_args("_install", hook_names, CMPY_HOOK_COUNT,
                        CMPY_HOOK_COUNT, args, nargs, kwnames, argv) < 0) {
        return NULL;
    }
    for (int i = 0; i < CMPY_HOOK_COUNT; i++) {
        Py_XSETREF(st->hooks[i], Py_NewRef(argv[i]));
    }
    /* What the old loaders gave is loaded again from the new ones. */
    for (int i = 0; i < CMPY_GLUE_COUNT; i++) {
        Py_CLEAR(st->glue[i]);
    }
    for (int i = 0; i < CMPY_HANDLES_COUNT; i++) {
        Py_CLEAR(st->handles[i]);
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"_install", (PyCFunction)(void (*)(void))install,
     METH_FASTCALL | METH_KEYWORDS, install_doc},
    {NULL, NULL, 0, NULL},
};

int
cmpy_numpy_init(void)
{
    /* NumPy (and the ctypes it imports) loads with the first array, not
     * with cudamem (DESIGN rule 1). One interpreter per process. */
    if (PyArray_API != NULL) {
        return 0;
    }
    import_array1(-1);
    return 0;
}

static int
cudamem_exec(PyObject *module)
{
    cmpy_state *st = cmpy_get_state(module);

    if (load_exceptions(st) < 0 || find_simulator(module, st) < 0) {
        return -1;
    }
    if (PyModule_AddFunctions(module, module_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_driver_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_device_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_stream_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_event_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_callback_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_array_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_cai_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_dlpack_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_dlpack_import_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_pending_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_managed_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_hostbuf_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_hostalloc_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_hostregister_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_hostarray_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_memory_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_emm_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_pool_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_asyncpool_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_ipc_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_stats_methods) < 0 ||
        PyModule_AddFunctions(module, cmpy_history_methods) < 0 ||
        cmpy_history_init(module) < 0 ||
        cmpy_device_types_init(module, st) < 0 ||
        cmpy_stream_type_init(module, st) < 0 ||
        cmpy_event_type_init(module, st) < 0 ||
        cmpy_memory_type_init(module, st) < 0 ||
        cmpy_array_type_init(module, st) < 0 ||
        cmpy_pending_type_init(module, st) < 0 ||
        cmpy_hostbuf_type_init(module, st) < 0) {
        return -1;
    }
    cmpy_stats_install(1);
    cmpy_poll_install(1);
    /* The CUDA version of the headers cudamem was built with. */
    if (PyModule_AddIntConstant(module, "CUDA_VERSION", CUDA_VERSION) < 0) {
        return -1;
    }
    /* The modes of Context._set_memory_manager (memory.py names them). */
    if (PyModule_AddIntConstant(module, "MANAGER_NATIVE",
                                CMPY_MANAGER_NATIVE) < 0 ||
        PyModule_AddIntConstant(module, "MANAGER_PLUGIN",
                                CMPY_MANAGER_PLUGIN) < 0) {
        return -1;
    }
    if (st->sim_path != NULL &&
        PyModule_AddStringConstant(module, "_simulator_path", st->sim_path) <
            0) {
        return -1;
    }
    return 0;
}

static int
cudamem_traverse(PyObject *module, visitproc visit, void *arg)
{
    cmpy_state *st = cmpy_get_state(module);
#define CMPY_STATE_VISIT(name) Py_VISIT(st->name);
    CMPY_STATE_OBJECTS(CMPY_STATE_VISIT)
#undef CMPY_STATE_VISIT
    for (int i = 0; i < CMPY_HOOK_COUNT; i++) {
        Py_VISIT(st->hooks[i]);
    }
    for (int i = 0; i < CMPY_GLUE_COUNT; i++) {
        Py_VISIT(st->glue[i]);
    }
    for (int i = 0; i < CMPY_HANDLES_COUNT; i++) {
        Py_VISIT(st->handles[i]);
    }
    return 0;
}

static int
cudamem_clear(PyObject *module)
{
    cmpy_state *st = cmpy_get_state(module);

    while (st->npointer_cache > 0) {
        PyObject_GC_Del(st->pointer_cache[--st->npointer_cache]);
    }
    while (st->narray_cache > 0) {
        PyObject_GC_Del(st->array_cache[--st->narray_cache]);
    }
#define CMPY_STATE_CLEAR(name) Py_CLEAR(st->name);
    CMPY_STATE_OBJECTS(CMPY_STATE_CLEAR)
#undef CMPY_STATE_CLEAR
    for (int i = 0; i < CMPY_HOOK_COUNT; i++) {
        Py_CLEAR(st->hooks[i]);
    }
    for (int i = 0; i < CMPY_GLUE_COUNT; i++) {
        Py_CLEAR(st->glue[i]);
    }
    for (int i = 0; i < CMPY_HANDLES_COUNT; i++) {
        Py_CLEAR(st->handles[i]);
    }
    return 0;
}

static void
cudamem_free(void *module)
{
    cmpy_state *st = cmpy_get_state((PyObject *)module);
    /* Plugin memory released after this leaks, as after shutdown. */
    cm_mem_set_release_hook(NULL, NULL);
    cmpy_stats_install(0);
    cmpy_poll_install(0);
    cmpy_history_uninstall();
    cudamem_clear((PyObject *)module);
    PyMem_Free(st->sim_path);
    st->sim_path = NULL;
}

static PyModuleDef_Slot cudamem_slots[] = {
    {Py_mod_exec, cudamem_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* Core state (the driver, its queues) is per process, not per
     * interpreter. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

PyDoc_STRVAR(cudamem_doc,
             "cudamem's C extension. Use the cudamem package, not this "
             "module.");

struct PyModuleDef cmpy_module_def = {
    PyModuleDef_HEAD_INIT,    .m_name = "cudamem._cudamem",
    .m_doc = cudamem_doc,     .m_size = sizeof(cmpy_state),
    .m_slots = cudamem_slots, .m_traverse = cudamem_traverse,
    .m_clear = cudamem_clear, .m_free = cudamem_free,
};

/* Python finds it by name; declared for -Wmissing-prototypes. */
PyMODINIT_FUNC PyInit__cudamem(void);

PyMODINIT_FUNC
PyInit__cudamem(void)
{
    return PyModuleDef_Init(&cmpy_module_def);
}
