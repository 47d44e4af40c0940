/* asyncpool.c (py/): the module functions behind AsyncMemoryManager:
 * switching a device's stream-ordered allocation on and off, its limit,
 * and trim, release threshold and attributes of the device's driver
 * pool. The allocator is core/asyncpool.c's; the class that calls these
 * lives in cudamem/pool.py. */
#include "device.h"

#include <stdint.h>

#include "../core/asyncpool.h"

PyDoc_STRVAR(asyncpool_enable_doc,
             "_asyncpool_enable($module, device, enabled)\n--\n\n"
             "Turns stream-ordered allocation on or off for *device* (a "
             "Device or an\nordinal). While on, device arrays come from the "
             "device's current memory\npool (cuMemAllocAsync on their "
             "stream) and their last reference\nfrees them with "
             "cuMemFreeAsync on it. Turning it on raises\nCudaSupportError "
             "on a device without memory pools.");

static PyObject *
asyncpool_enable(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    return cmpy_device_switch(module, "_asyncpool_enable", args, nargs,
                              kwnames, cm_asyncpool_enable);
}

PyDoc_STRVAR(asyncpool_set_ipc_doc,
             "_asyncpool_set_ipc($module, device, enabled)\n--\n\n"
             "Turns allocation from *device*'s exportable pool on or off. "
             "Turning it\non makes the pool (POSIX file descriptor "
             "handles, the current pool's\nrelease threshold) and exports "
             "its descriptor, once for the process;\nCudaSupportError on "
             "a device whose pools cannot be exported so.");

static PyObject *
asyncpool_set_ipc(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames)
{
    return cmpy_device_switch(module, "_asyncpool_set_ipc", args, nargs,
                              kwnames, cm_asyncpool_set_ipc);
}

PyDoc_STRVAR(asyncpool_trim_doc,
             "_asyncpool_trim($module, device, min_bytes_to_keep)\n--\n\n"
             "Waits for *device*'s work (queued frees give their memory "
             "back when\nthey run), then cuMemPoolTrimTo: the pool keeps "
             "at most\n*min_bytes_to_keep* of unused memory reserved.");

static PyObject *
asyncpool_trim(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    static const char *const names[] = {"device", "min_bytes_to_keep"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2];
    size_t keep;
    cm_device *dev;
    cm_error err;
    int rc;

    if (cmpy_parse_args("_asyncpool_trim", names, 2, 2, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_nbytes_arg(argv[1], "min_bytes_to_keep", 0, &keep) < 0 ||
        cmpy_device_arg(st, argv[0], 0, &dev) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_asyncpool_trim(dev, keep, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(asyncpool_set_release_threshold_doc,
             "_asyncpool_set_release_threshold($module, device, nbytes)\n"
             "--\n\n"
             "Sets CU_MEMPOOL_ATTR_RELEASE_THRESHOLD of *device*'s pool: "
             "the unused\nmemory it keeps reserved past a synchronization "
             "(None: all of it).");

static PyObject *
asyncpool_set_release_threshold(PyObject *module, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"device", "nbytes"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2];
    size_t nbytes;
    cm_device *dev;
    cm_error err;

    if (cmpy_parse_args("_asyncpool_set_release_threshold", names, 2, 2, args,
                        nargs, kwnames, argv) < 0 ||
        cmpy_nbytes_arg(argv[1], "nbytes", 1, &nbytes) < 0 ||
        cmpy_device_arg(st, argv[0], 0, &dev) < 0) {
        return NULL;
    }
    if (cm_asyncpool_set_release_threshold(
            dev, nbytes == SIZE_MAX ? UINT64_MAX : nbytes, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(asyncpool_set_limit_doc,
             "_asyncpool_set_limit($module, device, nbytes)\n--\n\n"
             "Caps the bytes *device*'s stream-ordered allocations hold "
             "from the pool\n(None: no cap). An allocation beyond it goes "
             "through out-of-memory\nrecovery (which trims the pool), then "
             "raises CudaOutOfMemoryError naming\nthe limit, without a "
             "driver call. Lowering it frees nothing.");

static PyObject *
asyncpool_set_limit(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames)
{
    static const char *const names[] = {"device", "nbytes"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2];
    size_t nbytes;
    cm_device *dev;

    if (cmpy_parse_args("_asyncpool_set_limit", names, 2, 2, args, nargs,
                        kwnames, argv) < 0 ||
        cmpy_nbytes_arg(argv[1], "nbytes", 1, &nbytes) < 0 ||
        cmpy_device_arg(st, argv[0], 0, &dev) < 0) {
        return NULL;
    }
    cm_asyncpool_set_limit(dev, nbytes);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(asyncpool_stats_doc,
             "_asyncpool_stats($module, device)\n--\n\n"
             "The attributes of *device*'s current pool: enabled, "
             "release_threshold\n(None: keeps all), reserved_bytes and "
             "reserved_bytes_high (what the\ndriver reserved), used_bytes "
             "and used_bytes_high (handed out); and\ncudamem's: limit "
             "(None: no cap) and held_bytes (what cudamem's\nallocations "
             "hold from the pool, which the limit caps).");

static PyObject *
asyncpool_stats(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    cmpy_state *st = cmpy_get_state(module);
    cm_asyncpool_stats s;
    PyObject *argv[1], *threshold, *limit;
    cm_device *dev;
    cm_error err;

    if (cmpy_parse_args("_asyncpool_stats", names, 1, 1, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_device_arg(st, argv[0], 0, &dev) < 0) {
        return NULL;
    }
    if (cm_asyncpool_get_stats(dev, &s, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    threshold = s.release_threshold == UINT64_MAX
                    ? Py_NewRef(Py_None)
                    : PyLong_FromUnsignedLongLong(s.release_threshold);
    if (threshold == NULL) {
        return NULL;
    }
    /* Py_BuildValue fails on a NULL "N" and drops the rest. */
    limit = s.limit == SIZE_MAX ? Py_NewRef(Py_None)
                                : PyLong_FromSize_t(s.limit);
    return Py_BuildValue(
        "{s:O,s:N,s:N,s:n,s:K,s:K,s:K,s:K}", "enabled",
        s.enabled ? Py_True : Py_False, "release_threshold", threshold,
        "limit", limit, "held_bytes", (Py_ssize_t)s.held_bytes,
        "reserved_bytes", (unsigned long long)s.reserved_current,
        "reserved_bytes_high", (unsigned long long)s.reserved_high,
        "used_bytes", (unsigned long long)s.used_current, "used_bytes_high",
        (unsigned long long)s.used_high);
}

PyMethodDef cmpy_asyncpool_methods[] = {
    {"_asyncpool_enable", (PyCFunction)(void (*)(void))asyncpool_enable,
     METH_FASTCALL | METH_KEYWORDS, asyncpool_enable_doc},
    {"_asyncpool_set_ipc", (PyCFunction)(void (*)(void))asyncpool_set_ipc,
     METH_FASTCALL | METH_KEYWORDS, asyncpool_set_ipc_doc},
    {"_asyncpool_trim", (PyCFunction)(void (*)(void))asyncpool_trim,
     METH_FASTCALL | METH_KEYWORDS, asyncpool_trim_doc},
    {"_asyncpool_set_release_threshold",
     (PyCFunction)(void (*)(void))asyncpool_set_release_threshold,
     METH_FASTCALL | METH_KEYWORDS, asyncpool_set_release_threshold_doc},
    {"_asyncpool_set_limit", (PyCFunction)(void (*)(void))asyncpool_set_limit,
     METH_FASTCALL | METH_KEYWORDS, asyncpool_set_limit_doc},
    {"_asyncpool_stats", (PyCFunction)(void (*)(void))asyncpool_stats,
     METH_FASTCALL | METH_KEYWORDS, asyncpool_stats_doc},
    {NULL, NULL, 0, NULL},
};
