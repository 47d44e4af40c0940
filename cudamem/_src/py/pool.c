/* pool.c (py/): the module functions behind PoolMemoryManager: switching
 * a device's pool on and off, and trim, limit and statistics of it and of
 * the host pool (with the host pool's round threshold), and the tunables
 * of the staging pipeline that borrows from it. The pools are
 * core/pool.c's and core/hostpool.c's; the class that calls these lives
 * in cudamem/pool.py. */
#include "device.h"

#include <stdint.h>

#include "../core/hostpool.h"
#include "../core/pool.h"
#include "../core/staging.h"

PyDoc_STRVAR(pool_enable_doc,
             "_pool_enable($module, device, enabled)\n--\n\n"
             "Turns cudamem's memory pool on or off for *device* (a Device "
             "or an\nordinal). While on, device arrays and temporaries are "
             "blocks of\ncuMemAlloc slabs kept by the pool, returned to it "
             "when their last\nreference goes (at once, in the order of "
             "the stream they were made\nfor; not through the pending "
             "deallocations). Turning it off keeps\nthe slabs: blocks "
             "still in use return to the pool, _pool_trim()\nfrees what "
             "is free.");

static PyObject *
pool_enable(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
            PyObject *kwnames)
{
    return cmpy_device_switch(module, "_pool_enable", args, nargs, kwnames,
                              cm_pool_enable);
}

PyDoc_STRVAR(pool_trim_doc,
             "_pool_trim($module, device)\n--\n\n"
             "Waits for the queued work of the streams that free blocks "
             "of *device*'s\npool were freed on, then frees every slab "
             "that is wholly free, and\nthe pool's spare events. Blocks "
             "in use stay.");

static PyObject *
pool_trim(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
          PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[1];
    cm_device *dev;
    cm_error err;
    int rc;

    if (cmpy_parse_args("_pool_trim", names, 1, 1, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_device_arg(st, argv[0], 0, &dev) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_pool_trim(dev, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(pool_set_limit_doc,
             "_pool_set_limit($module, device, nbytes)\n--\n\n"
             "Caps the bytes of cuMemAlloc slabs *device*'s pool holds "
             "(None: no\ncap). An allocation that needs a slab beyond it "
             "goes through\nout-of-memory recovery (which trims the pool), "
             "then raises\nCudaOutOfMemoryError naming the limit. "
             "Lowering the cap frees nothing\nby itself.");

static PyObject *
pool_set_limit(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    static const char *const names[] = {"device", "nbytes"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2];
    cm_device *dev;
    cm_error err;
    size_t limit;

    if (cmpy_parse_args("_pool_set_limit", names, 2, 2, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_nbytes_arg(argv[1], "nbytes", 1, &limit) < 0 ||
        cmpy_device_arg(st, argv[0], 0, &dev) < 0) {
        return NULL;
    }
    if (cm_pool_set_limit(dev, limit, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(pool_stats_doc,
             "_pool_stats($module, device)\n--\n\n"
             "The state of *device*'s pool: enabled, limit (None: no cap), "
             "slabs and\nslab_bytes (cuMemAlloc allocations held), "
             "used_blocks and used_bytes\n(handed out), free_blocks and "
             "cached_bytes (free in the slabs), and\npending_blocks (free "
             "blocks whose stream may still be using them).");

static PyObject *
pool_stats(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
           PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[1], *limit;
    cm_pool_stats s;
    cm_device *dev;

    if (cmpy_parse_args("_pool_stats", names, 1, 1, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_device_arg(st, argv[0], 0, &dev) < 0) {
        return NULL;
    }
    cm_pool_get_stats(dev, &s);
    limit = s.limit == SIZE_MAX ? Py_NewRef(Py_None)
                                : PyLong_FromSize_t(s.limit);
    if (limit == NULL) {
        return NULL;
    }
    return Py_BuildValue(
        "{s:O,s:N,s:n,s:n,s:n,s:n,s:n,s:n,s:n}", "enabled",
        s.enabled ? Py_True : Py_False, "limit", limit, "slabs",
        (Py_ssize_t)s.slabs, "slab_bytes", (Py_ssize_t)s.slab_bytes,
        "used_blocks", (Py_ssize_t)s.used_blocks, "used_bytes",
        (Py_ssize_t)s.used_bytes, "free_blocks", (Py_ssize_t)s.free_blocks,
        "cached_bytes", (Py_ssize_t)s.cached_bytes, "pending_blocks",
        (Py_ssize_t)s.pending_blocks);
}

PyDoc_STRVAR(hostpool_trim_doc,
             "_hostpool_trim($module)\n--\n\n"
             "Frees every page-locked block the host pool keeps for reuse "
             "(pinned\narrays made while a device's pool is on, staging "
             "buffers of\ncross-device copies). The pool is process-wide.");

static PyObject *
hostpool_trim(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cm_error err;
    int rc;

    Py_BEGIN_ALLOW_THREADS
    rc = cm_hostpool_trim(&err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(cmpy_get_state(module), &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(hostpool_set_limit_doc,
             "_hostpool_set_limit($module, nbytes)\n--\n\n"
             "Caps the bytes of page-locked blocks the host pool keeps "
             "(None: no\ncap), freeing cached blocks, largest first, down "
             "to it; a block\ngiven back beyond it is freed.");

static PyObject *
hostpool_set_limit(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames)
{
    static const char *const names[] = {"nbytes"};
    PyObject *argv[1];
    size_t limit;
    cm_error err;
    int rc;

    if (cmpy_parse_args("_hostpool_set_limit", names, 1, 1, args, nargs,
                        kwnames, argv) < 0 ||
        cmpy_nbytes_arg(argv[0], "nbytes", 1, &limit) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cm_hostpool_set_limit(limit, &err);
    CMPY_END_ALLOW_THREADS
    if (rc < 0) {
        return cmpy_raise(cmpy_get_state(module), &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(hostpool_set_round_threshold_doc,
             "_hostpool_set_round_threshold($module, nbytes)\n--\n\n"
             "Requests of at most *nbytes* (0 to 64 MiB) are rounded up to "
             "a power of\ntwo from now on; larger ones get their exact "
             "page-rounded size.\nCached blocks stay.");

static PyObject *
hostpool_set_round_threshold(PyObject *Py_UNUSED(module),
                             PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    static const char *const names[] = {"nbytes"};
    PyObject *argv[1];
    size_t threshold;

    if (cmpy_parse_args("_hostpool_set_round_threshold", names, 1, 1, args,
                        nargs, kwnames, argv) < 0) {
        return NULL;
    }
    if (PyBool_Check(argv[0]) || !PyLong_Check(argv[0])) {
        PyErr_Format(PyExc_TypeError, "nbytes must be an int, not %.200s",
                     Py_TYPE(argv[0])->tp_name);
        return NULL;
    }
    threshold = PyLong_AsSize_t(argv[0]);
    if (threshold == (size_t)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError,
                     "nbytes must be a byte count >= 0, not %R", argv[0]);
        return NULL;
    }
    if (threshold > CM_HOSTPOOL_MAX_BLOCK) {
        PyErr_Format(PyExc_ValueError,
                     "nbytes must be at most %zu (the largest size class), "
                     "not %zu",
                     CM_HOSTPOOL_MAX_BLOCK, threshold);
        return NULL;
    }
    cm_hostpool_set_round_threshold(threshold);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(hostpool_stats_doc,
             "_hostpool_stats($module)\n--\n\n"
             "The host pool's limit (None: no cap), round_threshold, "
             "cached_blocks and\ncached_bytes (page-locked blocks waiting "
             "for reuse), and of the\nblocks handed out (until given back "
             "and idle): used_blocks,\nrequested_bytes (what was asked "
             "for) and pinned_bytes (what they hold\npage-locked).");

static PyObject *
hostpool_stats(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    cm_hostpool_stats s;
    PyObject *limit;

    cm_hostpool_get_stats(&s);
    limit = s.limit == SIZE_MAX ? Py_NewRef(Py_None)
                                : PyLong_FromSize_t(s.limit);
    if (limit == NULL) {
        return NULL;
    }
    return Py_BuildValue("{s:N,s:n,s:n,s:n,s:n,s:n,s:n}", "limit", limit,
                         "round_threshold", (Py_ssize_t)s.round_threshold,
                         "cached_blocks", (Py_ssize_t)s.cached_blocks,
                         "cached_bytes", (Py_ssize_t)s.cached_bytes,
                         "used_blocks", (Py_ssize_t)s.used_blocks,
                         "requested_bytes", (Py_ssize_t)s.requested_bytes,
                         "pinned_bytes", (Py_ssize_t)s.pinned_bytes);
}

PyDoc_STRVAR(staging_reload_doc,
             "_staging_reload($module)\n--\n\n"
             "Reads CUDAMEM_STAGING_THRESHOLD, CUDAMEM_STAGING_CHUNK,\n"
             "CUDAMEM_STAGING_THREADS and CUDAMEM_STAGING_PREFAULT again "
             "(tests) and\nreturns the tunables now in force: threshold, "
             "chunk (bytes), threads\nand prefault.");

static PyObject *
staging_reload(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    cm_staging_config cfg;

    cm_staging_reload();
    cm_staging_get_config(&cfg);
    return Py_BuildValue("{s:n,s:n,s:i,s:O}", "threshold",
                         (Py_ssize_t)cfg.threshold, "chunk",
                         (Py_ssize_t)cfg.chunk, "threads", cfg.threads,
                         "prefault", cfg.prefault ? Py_True : Py_False);
}

PyMethodDef cmpy_pool_methods[] = {
    {"_pool_enable", (PyCFunction)(void (*)(void))pool_enable,
     METH_FASTCALL | METH_KEYWORDS, pool_enable_doc},
    {"_pool_trim", (PyCFunction)(void (*)(void))pool_trim,
     METH_FASTCALL | METH_KEYWORDS, pool_trim_doc},
    {"_pool_set_limit", (PyCFunction)(void (*)(void))pool_set_limit,
     METH_FASTCALL | METH_KEYWORDS, pool_set_limit_doc},
    {"_pool_stats", (PyCFunction)(void (*)(void))pool_stats,
     METH_FASTCALL | METH_KEYWORDS, pool_stats_doc},
    {"_hostpool_trim", hostpool_trim, METH_NOARGS, hostpool_trim_doc},
    {"_hostpool_set_limit", (PyCFunction)(void (*)(void))hostpool_set_limit,
     METH_FASTCALL | METH_KEYWORDS, hostpool_set_limit_doc},
    {"_hostpool_set_round_threshold",
     (PyCFunction)(void (*)(void))hostpool_set_round_threshold,
     METH_FASTCALL | METH_KEYWORDS, hostpool_set_round_threshold_doc},
    {"_hostpool_stats", hostpool_stats, METH_NOARGS, hostpool_stats_doc},
    {"_staging_reload", staging_reload, METH_NOARGS, staging_reload_doc},
    {NULL, NULL, 0, NULL},
};
