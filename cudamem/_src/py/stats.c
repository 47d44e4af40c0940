/* stats.c (py/): memory_stats(), reset_peak_stats() and
 * reset_accumulated_memory_stats() over core's
 * counters (core/stats.h), the memory limit's functions (core/memory.h)
 * with the observer of its refusals, and the garbage-collector hook of
 * core's out-of-memory recovery. The counters, the limit's accounting and
 * the recovery sequence are core's; this file only builds the dict,
 * parses the limit and runs the collector. */
#include "module.h"

#include "../core/memory.h"
#include "../core/oom.h"
#include "device.h"

/* Names of cm_stat_kind in the dict's keys. */
static const char *const kind_names[CM_STAT_KINDS] = {
    [CM_STAT_DEVICE] = "device",
    [CM_STAT_MANAGED] = "managed",
    [CM_STAT_PINNED] = "pinned",
    [CM_STAT_MAPPED] = "mapped",
    [CM_STAT_WRITE_COMBINED] = "write_combined",
};

/* gc.collect(), with the GIL taken here: core may be running without it
 * (a copy's temporary). Through the gc module rather than PyGC_Collect,
 * which does nothing after gc.disable(): an allocation about to fail is
 * worth a collection. Not while the interpreter is finalizing. */
static void
collect_garbage(void)
{
    PyGILState_STATE gil;
    PyObject *saved, *gc, *done = NULL;

#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing()) {
#else
    if (_Py_IsFinalizing()) {
#endif
        return;
    }
    gil = PyGILState_Ensure();
    saved = cmpy_exc_take();
    gc = PyImport_ImportModule("gc");
    if (gc != NULL) {
        done = PyObject_CallMethod(gc, "collect", NULL);
        Py_DECREF(gc);
    }
    if (done == NULL) {
        PyErr_WriteUnraisable(NULL);
    }
    Py_XDECREF(done);
    cmpy_exc_put(saved);
    PyGILState_Release(gil);
}

void
cmpy_stats_install(int on)
{
    cm_oom_set_hook(on ? collect_garbage : NULL);
}

/* The dict's keys in the order memory_stats() fills them: per kind
 * (kind_names' order) those of kind_suffixes, then the totals. */
static const char *const kind_suffixes[] = {
    "bytes_in_use",    "bytes_peak",           "count",       "count_peak",
    "requested_bytes", "requested_bytes_peak", "allocations", "frees"};
static const char *const total_names[] = {
    "pending_free_bytes",       "pending_free_count",
    "pool_cached_bytes",        "pinned_pool_cached_bytes",
    "pinned_pool_cached_count", "oom_rejections"};
#define NSUFFIXES ((int)(sizeof(kind_suffixes) / sizeof(kind_suffixes[0])))
#define NTOTALS ((int)(sizeof(total_names) / sizeof(total_names[0])))
#define NSTATS (CM_STAT_KINDS * NSUFFIXES + NTOTALS)

/* st->stats_keys: the keys, interned once, so that a call makes none. */
static int
stats_keys(cmpy_state *st)
{
    PyObject *keys, *key;
    int i = 0;

    if (st->stats_keys != NULL) {
        return 0;
    }
    if ((keys = PyTuple_New(NSTATS)) == NULL) {
        return -1;
    }
    for (int k = 0; k < CM_STAT_KINDS; k++) {
        for (int j = 0; j < NSUFFIXES; j++) {
            key = PyUnicode_FromFormat("%s_%s", kind_names[k],
                                       kind_suffixes[j]);
            if (key == NULL) {
                goto fail;
            }
            PyUnicode_InternInPlace(&key);
            PyTuple_SET_ITEM(keys, i++, key);
        }
    }
    for (int j = 0; j < NTOTALS; j++) {
        if ((key = PyUnicode_InternFromString(total_names[j])) == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(keys, i++, key);
    }
    st->stats_keys = keys;
    return 0;
fail:
    Py_DECREF(keys);
    return -1;
}

PyDoc_STRVAR(
    memory_stats_doc,
    "memory_stats($module, device=None)\n--\n\n"
    "cudamem's memory use on a device (an ordinal or a Device; "
    "None: the\ncurrent device), as a MemoryStats: a dict whose "
    "repr is a table. For\neach kind -- device, "
    "managed, pinned, mapped,\nwrite_combined -- "
    "<kind>_bytes_in_use and <kind>_count (live\nallocations "
    "whose frees are not yet queued; cudamem's pinned and\n"
    "mapped pages count whole pages, the pools' blocks and size classes\n"
    "whole),\n"
    "<kind>_requested_bytes (what their callers asked for), "
    "<kind>_bytes_peak,\n<kind>_count_peak and "
    "<kind>_requested_bytes_peak (their maxima since\n"
    "reset_peak_stats()), <kind>_allocations and <kind>_frees "
    "(allocations\nmade and given up since "
    "reset_accumulated_memory_stats()); pending_free_bytes "
    "and\npending_free_count (frees queued in "
    "the device's pending\ndeallocations; the driver still holds "
    "that memory), pool_cached_bytes\n(freed memory the pool "
    "keeps for reuse) and pinned_pool_cached_bytes and\n"
    "pinned_pool_cached_count (page-locked blocks the host pool "
    "keeps for\nreuse, not in pinned_*; process-wide, the same "
    "for every device),\noom_rejections (allocations that "
    "set_memory_limit()'s limit refused, since\n"
    "reset_accumulated_memory_stats()).\nThe caller's memory page-locked by "
    "register() or pinned() is not\ncounted.");

/* An empty cudamem.devices.MemoryStats (the MEMORY_STATS hook) of the
 * device `ordinal`: a dict whose repr is a table. */
static PyObject *
new_stats(cmpy_state *st, int ordinal)
{
    PyObject *cls = cmpy_hook(st, CMPY_HOOK_MEMORY_STATS);

    return cls != NULL ? PyObject_CallFunction(cls, "i", ordinal) : NULL;
}

static PyObject *
memory_stats(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[1], *out;
    size_t values[NSTATS], *v = values;
    cm_device *dev;
    cm_stats stats;

    if (cmpy_parse_args("memory_stats", names, 1, 0, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_device_arg(st, argv[0], 1, &dev) < 0) {
        return NULL;
    }
    cm_stats_get(dev, &stats);
    if (stats_keys(st) < 0 || (out = new_stats(st, dev->ordinal)) == NULL) {
        return NULL;
    }
    for (int k = 0; k < CM_STAT_KINDS; k++) {
        const cm_counts *c = &stats.kinds[k];

        *v++ = c->bytes;
        *v++ = c->peak_bytes;
        *v++ = c->count;
        *v++ = c->peak_count;
        *v++ = c->requested;
        *v++ = c->peak_requested;
        *v++ = c->allocations;
        *v++ = c->frees;
    }
    *v++ = stats.pending_bytes;
    *v++ = stats.pending_count;
    *v++ = stats.pool_cached_bytes;
    *v++ = stats.pinned_pool_cached_bytes;
    *v++ = stats.pinned_pool_cached_count;
    *v = stats.oom_rejections;
    for (int i = 0; i < NSTATS; i++) {
        PyObject *value = PyLong_FromSize_t(values[i]);

        if (value == NULL ||
            PyDict_SetItem(out, PyTuple_GET_ITEM(st->stats_keys, i), value) <
                0) {
            Py_XDECREF(value);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(value);
    }
    return out;
}

PyDoc_STRVAR(reset_peak_stats_doc,
             "reset_peak_stats($module, device=None)\n--\n\n"
             "Sets every peak of memory_stats(device) to its current "
             "value.");

static PyObject *
reset_peak_stats(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[1];
    cm_device *dev;

    if (cmpy_parse_args("reset_peak_stats", names, 1, 0, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_device_arg(st, argv[0], 1, &dev) < 0) {
        return NULL;
    }
    cm_stats_reset_peaks(dev);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(reset_accumulated_memory_stats_doc,
             "reset_accumulated_memory_stats($module, device=None)\n--\n\n"
             "Sets the <kind>_allocations, <kind>_frees and oom_rejections "
             "of\nmemory_stats(device) to 0.");

static PyObject *
reset_accumulated_memory_stats(PyObject *module, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[1];
    cm_device *dev;

    if (cmpy_parse_args("reset_accumulated_memory_stats", names, 1, 0, args,
                        nargs, kwnames, argv) < 0 ||
        cmpy_device_arg(st, argv[0], 1, &dev) < 0) {
        return NULL;
    }
    cm_stats_reset_accumulated(dev);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(
    set_memory_limit_doc,
    "set_memory_limit($module, limit, device=None)\n--\n\n"
    "Caps the device memory cudamem holds from the driver on a device (an\n"
    "ordinal or a Device; None: the current device): device arrays and\n"
    "temporaries, the pool's slabs whole (PoolMemoryManager) and managed\n"
    "memory, with frees still pending until they run. `limit` is a\n"
    "number of bytes (an int above 0), a fraction in (0, 1] of the\n"
    "device's total memory (a float), or None for no limit. An allocation\n"
    "that would pass it runs the out-of-memory recovery (pending frees\n"
    "flushed, the pool trimmed), then raises CudaOutOfMemoryError without\n"
    "calling the driver. Memory held already is kept. Memory of EMM\n"
    "plugins, IPC mappings and host memory are not counted.");

/* `limit` as bytes or a fraction for cm_mem_set_limit: None is no limit
 * (both 0). */
static int
limit_arg(PyObject *limit, size_t *bytes, double *fraction)
{
    *bytes = 0;
    *fraction = 0;
    if (limit == Py_None) {
        return 0;
    }
    if (PyBool_Check(limit) ||
        (!PyLong_Check(limit) && !PyFloat_Check(limit))) {
        PyErr_Format(PyExc_TypeError,
                     "set_memory_limit: limit must be an int (bytes), a "
                     "float (a fraction of the device's memory) or None, "
                     "not %.100s",
                     Py_TYPE(limit)->tp_name);
        return -1;
    }
    if (PyFloat_Check(limit)) {
        *fraction = PyFloat_AS_DOUBLE(limit);
        /* Written so that NaN fails too. */
        if (!(*fraction > 0 && *fraction <= 1)) {
            PyErr_Format(PyExc_ValueError,
                         "set_memory_limit: a fraction must be in (0, 1], "
                         "not %R",
                         limit);
            return -1;
        }
        return 0;
    }
    *bytes = PyLong_AsSize_t(limit);
    if ((*bytes == (size_t)-1 && PyErr_Occurred()) || *bytes == 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "set_memory_limit: a limit in bytes must be between 1 "
                     "and %zu (None: no limit), not %R",
                     (size_t)-1, limit);
        return -1;
    }
    return 0;
}

static PyObject *
set_memory_limit(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {"limit", "device"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[2];
    cm_device *dev;
    size_t bytes;
    double fraction;
    cm_error err;

    if (cmpy_parse_args("set_memory_limit", names, 2, 1, args, nargs, kwnames,
                        argv) < 0 ||
        limit_arg(argv[0], &bytes, &fraction) < 0 ||
        cmpy_device_arg(st, argv[1], 1, &dev) < 0) {
        return NULL;
    }
    if (cm_mem_set_limit(dev, bytes, fraction, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(get_memory_limit_doc,
             "get_memory_limit($module, device=None)\n--\n\n"
             "The limit set_memory_limit() set on a device, in bytes (a "
             "fraction\nas the bytes it came to), or None when there is "
             "none.");

static PyObject *
get_memory_limit(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *argv[1];
    cm_device *dev;
    size_t limit;

    if (cmpy_parse_args("get_memory_limit", names, 1, 0, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_device_arg(st, argv[0], 1, &dev) < 0) {
        return NULL;
    }
    limit = cm_mem_limit(dev);
    if (limit == 0) {
        Py_RETURN_NONE;
    }
    return PyLong_FromSize_t(limit);
}

PyDoc_STRVAR(
    set_oom_observer_doc,
    "set_oom_observer($module, observer)\n--\n\n"
    "Calls observer(info) on each allocation that set_memory_limit()'s\n"
    "limit refuses, from the allocating thread, once the\n"
    "CudaOutOfMemoryError is built; info is a dict of device (its\n"
    "ordinal), requested, held and limit (bytes). What it raises is\n"
    "reported as unraisable and the CudaOutOfMemoryError is raised.\n"
    "None removes the observer.");

static PyObject *
set_oom_observer(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    static const char *const names[] = {"observer"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *observer, *old;

    if (cmpy_parse_args("set_oom_observer", names, 1, 1, args, nargs, kwnames,
                        &observer) < 0) {
        return NULL;
    }
    if (observer != Py_None && !PyCallable_Check(observer)) {
        return PyErr_Format(PyExc_TypeError,
                            "set_oom_observer: observer must be callable or "
                            "None, not %.100s",
                            Py_TYPE(observer)->tp_name);
    }
    old = st->oom_observer;
    st->oom_observer = observer == Py_None ? NULL : Py_NewRef(observer);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

PyMethodDef cmpy_stats_methods[] = {
    {"set_memory_limit", (PyCFunction)(void (*)(void))set_memory_limit,
     METH_FASTCALL | METH_KEYWORDS, set_memory_limit_doc},
    {"get_memory_limit", (PyCFunction)(void (*)(void))get_memory_limit,
     METH_FASTCALL | METH_KEYWORDS, get_memory_limit_doc},
    {"set_oom_observer", (PyCFunction)(void (*)(void))set_oom_observer,
     METH_FASTCALL | METH_KEYWORDS, set_oom_observer_doc},
    {"memory_stats", (PyCFunction)(void (*)(void))memory_stats,
     METH_FASTCALL | METH_KEYWORDS, memory_stats_doc},
    {"reset_peak_stats", (PyCFunction)(void (*)(void))reset_peak_stats,
     METH_FASTCALL | METH_KEYWORDS, reset_peak_stats_doc},
    {"reset_accumulated_memory_stats",
     (PyCFunction)(void (*)(void))reset_accumulated_memory_stats,
     METH_FASTCALL | METH_KEYWORDS, reset_accumulated_memory_stats_doc},
    {NULL, NULL, 0, NULL},
};
