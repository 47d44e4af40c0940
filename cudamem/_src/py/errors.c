/* errors.c: core status to Python exceptions. The exception classes live in
 * cudamem/errors.py; this file only picks one and builds its arguments. */
#include "module.h"

#include <cuda.h>

#include "../core/asyncpool.h"
#include "../core/context.h"
#include "../core/memory.h"
#include "../core/oom.h"
#include "../core/pool.h"
#include "../core/release.h"

/* Tells set_oom_observer()'s observer of a refusal by the memory limit,
 * with exc built and no exception set; what the observer raises is
 * reported as unraisable. */
static void
tell_observer(cmpy_state *st, const cm_error *err)
{
    PyObject *observer = st->oom_observer, *info, *res = NULL;

    if (observer == NULL) {
        return;
    }
    Py_INCREF(observer);
    info = Py_BuildValue("{s:i,s:K,s:K,s:K}", "device", err->oom_dev->ordinal,
                         "requested", (unsigned long long)err->oom_bytes,
                         "held", (unsigned long long)err->oom_held, "limit",
                         (unsigned long long)err->oom_limit);
    if (info != NULL) {
        res = PyObject_CallFunctionObjArgs(observer, info, NULL);
        Py_DECREF(info);
    }
    if (res == NULL) {
        PyErr_WriteUnraisable(observer);
    }
    Py_XDECREF(res);
    Py_DECREF(observer);
}

/* CudaOutOfMemoryError for an allocation that recovery did not help,
 * with the numbers of its device as they are now; when a limit refused
 * it, no driver call failed: `call` is None, and the limit with the
 * pool's bytes in use (the pool's limit, or the stream-ordered pool's:
 * what its allocations hold) or the bytes held (the memory limit) say
 * why. */
static PyObject *
oom_error(cmpy_state *st, PyObject *cls, const cm_error *err, const char *name)
{
    int by_limit = err->call == cm_mem_limit_call;
    int by_async = err->call == cm_asyncpool_limit;
    int by_pool = by_async || err->call == cm_pool_limit;
    size_t free_bytes, total, pending, cached;
    cm_pool_stats pool;
    cm_error ignored;
    PyObject *args, *kwargs = NULL, *exc;

    if (cm_oom_info(err->oom_dev, &free_bytes, &total, &pending, &cached,
                    &ignored) < 0) {
        /* The device cannot say: the message keeps what was asked. */
        free_bytes = total = pending = cached = 0;
        if (!by_limit) {
            return PyObject_CallFunction(cls, "iszn", (int)err->code,
                                         err->call, name,
                                         (Py_ssize_t)err->oom_bytes);
        }
    }
    args = Py_BuildValue(
        "(izzKKKKK)", (int)err->code, by_pool || by_limit ? NULL : err->call,
        name, (unsigned long long)err->oom_bytes,
        (unsigned long long)free_bytes, (unsigned long long)total,
        (unsigned long long)pending, (unsigned long long)cached);
    if (args != NULL && by_async) {
        kwargs = Py_BuildValue("{s:K,s:K}", "limit",
                               (unsigned long long)err->oom_limit, "pool_used",
                               (unsigned long long)err->oom_held);
    }
    else if (args != NULL && by_pool) {
        cm_pool_get_stats(err->oom_dev, &pool);
        kwargs = Py_BuildValue("{s:K,s:K}", "limit",
                               (unsigned long long)pool.limit, "pool_used",
                               (unsigned long long)pool.used_bytes);
    }
    else if (args != NULL && by_limit) {
        kwargs = Py_BuildValue("{s:K,s:K}", "limit",
                               (unsigned long long)err->oom_limit, "held",
                               (unsigned long long)err->oom_held);
    }
    exc = args == NULL || (kwargs == NULL && (by_pool || by_limit))
              ? NULL
              : PyObject_Call(cls, args, kwargs);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    if (exc != NULL && by_limit) {
        tell_observer(st, err);
    }
    return exc;
}

/* CudaStickyError naming the poisoned device. Poisons the current
 * context's device when core did not say which: a path that runs in the
 * current context saw the error. */
static PyObject *
sticky_error(cmpy_state *st, const cm_error *err, const char *name)
{
    cm_error noted = *err;
    PyObject *exc;

    cm_current_poison(&noted);
    if (noted.device >= 0) {
        exc = PyObject_CallFunction(st->CudaStickyError, "iszi",
                                    (int)err->code, err->call, name,
                                    noted.device);
    }
    else {
        exc = PyObject_CallFunction(st->CudaStickyError, "isz", (int)err->code,
                                    err->call, name);
    }
    if (exc != NULL) {
        PyErr_SetObject(st->CudaStickyError, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *
cmpy_raise(cmpy_state *st, const cm_error *err)
{
    return cmpy_raise_hint(st, err, NULL);
}

PyObject *
cmpy_raise_hint(cmpy_state *st, const cm_error *err, const char *hint)
{
    PyObject *cls, *exc;
    const char *name;

    switch (err->kind) {
    case CM_ERR_DRIVER:
        name = cm_error_name(err->code);
        if (err->code == CUDA_ERROR_OUT_OF_MEMORY) {
            cls = st->CudaOutOfMemoryError;
        }
        else if (cm_error_is_sticky(err->code)) {
            return sticky_error(st, err, name);
        }
        else {
            cls = st->CudaAPIError;
        }
        /* Only CudaAPIError itself takes a hint; its subclasses explain
         * themselves. */
        if (err->oom_dev != NULL) {
            exc = oom_error(st, cls, err, name);
        }
        else if (hint != NULL && cls == st->CudaAPIError) {
            exc = PyObject_CallFunction(cls, "iszs", (int)err->code, err->call,
                                        name, hint);
        }
        else {
            exc = PyObject_CallFunction(cls, "isz", (int)err->code, err->call,
                                        name);
        }
        if (exc != NULL) {
            PyErr_SetObject(cls, exc);
            Py_DECREF(exc);
        }
        return NULL;
    case CM_ERR_SUPPORT:
        PyErr_SetString(st->CudaSupportError, cm_error_msg(err));
        return NULL;
    case CM_ERR_FORK:
    case CM_ERR_STATE:
        PyErr_SetString(st->CudaDriverError, cm_error_msg(err));
        return NULL;
    case CM_ERR_NOMEM:
        return PyErr_NoMemory();
    case CM_ERR_VALUE:
        PyErr_SetString(PyExc_ValueError, cm_error_msg(err));
        return NULL;
    case CM_ERR_INTERRUPTED:
        /* Core's poll hook (cmpy_poll_install) left the exception of the
         * signal handler that stopped the work. */
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_SystemError, cm_error_msg(err));
        }
        return NULL;
    }
    PyErr_Format(PyExc_SystemError, "cudamem: unknown error kind %d",
                 (int)err->kind);
    return NULL;
}

void
cmpy_release_begin(void)
{
    cm_release_nowait_begin();
}

int
cmpy_release_end(int rc, cm_error *err)
{
    unsigned queues;
    cm_device *dev = cm_release_nowait_end(&queues);
    cm_error later;
    int flushed;

    if (dev == NULL) {
        return rc;
    }
    Py_BEGIN_ALLOW_THREADS
    flushed = cm_release_flush_due(dev, queues, rc < 0 ? &later : err);
    CMPY_END_ALLOW_THREADS
    return flushed < 0 ? -1 : rc;
}

void
cmpy_warn_release(cmpy_state *st, const cm_error *err)
{
    PyObject *saved, *exc;

    /* In a forked child a finalizer does nothing (DESIGN rule 10). In a
     * poisoned context every free fails: core kept the error, which the
     * next call raises, so one warning per object would be noise. */
    if (err->kind == CM_ERR_FORK ||
        (err->kind == CM_ERR_DRIVER && cm_error_is_sticky(err->code))) {
        return;
    }
    if (st == NULL || st->CudaWarning == NULL) {
        /* The module was torn down at exit: no warning class left. */
        const char *what = cm_error_msg(err);

        if (err->kind == CM_ERR_DRIVER && cm_error_name(err->code)) {
            what = cm_error_name(err->code);
        }
        fprintf(stderr, "cudamem: could not free a resource: %s\n",
                what[0] != '\0' ? what : "unknown error");
        return;
    }
    saved = cmpy_exc_take();
    cmpy_raise(st, err);
    exc = cmpy_exc_take();
    if (PyErr_WarnFormat(st->CudaWarning, 1,
                         "cudamem could not free a resource: %S", exc) < 0) {
        PyErr_WriteUnraisable(exc);
    }
    Py_XDECREF(exc);
    cmpy_exc_put(saved);
}

int
cmpy_nbytes_arg(PyObject *arg, const char *what, int none_ok, size_t *out)
{
    if (none_ok && arg == Py_None) {
        *out = SIZE_MAX;
        return 0;
    }
    if (PyBool_Check(arg) || !PyLong_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int%s, not %.200s", what,
                     none_ok ? " or None" : "", Py_TYPE(arg)->tp_name);
        return -1;
    }
    *out = PyLong_AsSize_t(arg);
    if (*out == (size_t)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "%s must be a byte count >= 0, not %R",
                     what, arg);
        return -1;
    }
    return 0;
}

int
cmpy_parse_args(const char *fname, const char *const *names, int nnames,
                int required, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames, PyObject **out)
{
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;

    if (nargs > nnames) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes at most %d arguments (%zd given)", fname,
                     nnames, nargs + nkw);
        return -1;
    }
    for (int i = 0; i < nnames; i++) {
        out[i] = i < nargs ? args[i] : NULL;
    }
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;

        while (i < nnames &&
               PyUnicode_CompareWithASCIIString(key, names[i]) != 0) {
            i++;
        }
        if (i == nnames) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got an unexpected keyword argument %R", fname,
                         key);
            return -1;
        }
        if (out[i] != NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got multiple values for argument '%s'", fname,
                         names[i]);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (int i = 0; i < required; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() missing required argument '%s'", fname,
                         names[i]);
            return -1;
        }
    }
    return 0;
}
