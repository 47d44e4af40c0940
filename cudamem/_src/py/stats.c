/* stats.c (py/): memory_stats() and reset_peak_stats() over core's
 * counters (core/stats.h), and the garbage-collector hook of core's
 * out-of-memory recovery. The counters and the recovery sequence are
 * core's; this file only builds the dict and runs the collector. */
#include "module.h"

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

static int
set_size(PyObject *dict, const char *key, size_t value)
{
    PyObject *v = PyLong_FromSize_t(value);
    int rc;

    if (v == NULL) {
        return -1;
    }
    rc = PyDict_SetItemString(dict, key, v);
    Py_DECREF(v);
    return rc;
}

static int
set_kind(PyObject *dict, const char *kind, const cm_counts *c)
{
    char key[64];

    snprintf(key, sizeof(key), "%s_bytes_in_use", kind);
    if (set_size(dict, key, c->bytes) < 0) {
        return -1;
    }
    snprintf(key, sizeof(key), "%s_bytes_peak", kind);
    if (set_size(dict, key, c->peak_bytes) < 0) {
        return -1;
    }
    snprintf(key, sizeof(key), "%s_count", kind);
    if (set_size(dict, key, c->count) < 0) {
        return -1;
    }
    snprintf(key, sizeof(key), "%s_count_peak", kind);
    return set_size(dict, key, c->peak_count);
}

PyDoc_STRVAR(memory_stats_doc,
             "memory_stats($module, device=None)\n--\n\n"
             "cudamem's memory use on a device (an ordinal or a Device; "
             "None: the\ncurrent device), as a MemoryStats: a dict whose "
             "repr is a table. For\neach kind -- device, "
             "managed, pinned, mapped,\nwrite_combined -- "
             "<kind>_bytes_in_use and <kind>_count (live\nallocations "
             "whose frees are not yet queued; cudamem's pinned and\n"
             "mapped pages count whole pages) and <kind>_bytes_peak, "
             "<kind>_count_peak\n(their maxima since reset_peak_stats()); "
             "pending_free_bytes and\npending_free_count (frees queued in "
             "the device's pending\ndeallocations; the driver still holds "
             "that memory), pool_cached_bytes\n(freed memory the pool "
             "keeps for reuse) and pinned_pool_cached_bytes and\n"
             "pinned_pool_cached_count (page-locked blocks the host pool "
             "keeps for\nreuse, not in pinned_*; process-wide, the same "
             "for every device).\nThe caller's memory page-locked by "
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
    cm_device *dev;
    cm_stats stats;

    if (cmpy_parse_args("memory_stats", names, 1, 0, args, nargs, kwnames,
                        argv) < 0 ||
        cmpy_device_arg(st, argv[0], 1, &dev) < 0) {
        return NULL;
    }
    cm_stats_get(dev, &stats);
    out = new_stats(st, dev->ordinal);
    if (out == NULL) {
        return NULL;
    }
    for (int k = 0; k < CM_STAT_KINDS; k++) {
        if (set_kind(out, kind_names[k], &stats.kinds[k]) < 0) {
            goto fail;
        }
    }
    if (set_size(out, "pending_free_bytes", stats.pending_bytes) < 0 ||
        set_size(out, "pending_free_count", stats.pending_count) < 0 ||
        set_size(out, "pool_cached_bytes", stats.pool_cached_bytes) < 0 ||
        set_size(out, "pinned_pool_cached_bytes",
                 stats.pinned_pool_cached_bytes) < 0 ||
        set_size(out, "pinned_pool_cached_count",
                 stats.pinned_pool_cached_count) < 0) {
        goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
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

PyMethodDef cmpy_stats_methods[] = {
    {"memory_stats", (PyCFunction)(void (*)(void))memory_stats,
     METH_FASTCALL | METH_KEYWORDS, memory_stats_doc},
    {"reset_peak_stats", (PyCFunction)(void (*)(void))reset_peak_stats,
     METH_FASTCALL | METH_KEYWORDS, reset_peak_stats_doc},
    {NULL, NULL, 0, NULL},
};
