/* stream.c (py/): the Stream type (numba's Stream: cudamem's own streams,
 * the three default streams and external ones), the module's stream
 * functions, the waits that Ctrl-C interrupts, and the one parser of every
 * `stream=` argument. Creating and destroying handles is core/stream.c's. */
#include "stream.h"

#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../core/ctxsync.h"
#include "../core/driver.h"
#include "../core/staging.h"
#include "../core/stream.h"
#include "callback.h"
#include "device.h"
#include "event.h"
#include "html.h"

/* Polls of a wait before it starts sleeping, and its longest sleep. */
#define CMPY_WAIT_SPINS 64
#define CMPY_WAIT_MAX_NAP_NS 1000000L

static unsigned long long
handle_value(CUstream handle)
{
    return (unsigned long long)(uintptr_t)handle;
}

/* The kinds that own a handle of one context: they go stale. */
static int
is_bound(const cmpy_Stream *s)
{
    return (s->kind == CMPY_STREAM_OWNED || s->kind == CMPY_STREAM_EXTERNAL) &&
           !cm_stream_is_default(s->handle);
}

/* 0 when `s` can be used: never made before a fork, and (when bound to a
 * context) that context not reset or closed since; -1 with an exception. */
static int
stream_check(cmpy_state *st, cmpy_Stream *s)
{
    cm_error err;

    if (!is_bound(s)) {
        if (cm_fork_check(&err) < 0) {
            cmpy_raise(st, &err);
            return -1;
        }
        return 0;
    }
    if (cm_ctx_check(s->dev, s->generation, &err) < 0) {
        if (err.kind == CM_ERR_STATE) {
            PyErr_Format(st->CudaDriverError,
                         "CUDA stream %llu of device %d cannot be used: "
                         "its context was reset or closed since the "
                         "stream was made",
                         handle_value(s->handle), s->dev->ordinal);
        }
        else {
            cmpy_raise(st, &err);
        }
        return -1;
    }
    return 0;
}

/* A Stream object; the caller fills in what differs from a default
 * stream of `dev`. New reference. */
static cmpy_Stream *
stream_alloc(cmpy_state *st, cm_device *dev, cmpy_stream_kind kind,
             CUstream handle)
{
    cmpy_Stream *self = PyObject_New(cmpy_Stream,
                                     (PyTypeObject *)st->StreamType);

    if (self == NULL) {
        return NULL;
    }
    self->dev = dev;
    self->generation = 0;
    self->handle = handle;
    self->kind = kind;
    self->weakreflist = NULL;
    return self;
}

/* ------------------------------------------------------------------------
 * Waiting. */

int
cmpy_wait_polled(cmpy_state *st, cm_device *dev, void *handle,
                 cmpy_poll_fn query, cmpy_finish_fn finish)
{
    /* Each poll enters the context anew: one that a teardown on another
     * thread destroyed meanwhile is refused, not queried. */
    uint64_t generation = cm_device_generation(dev);
    struct timespec nap = {0, 0};
    cm_error err;
    int done = 0, rc;

    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        if (nap.tv_nsec > 0) {
            nanosleep(&nap, NULL);
        }
        rc = cm_ctx_unchanged(dev, generation, &err) < 0
                 ? -1
                 : query(dev, handle, &done, &err);
        /* Short work finishes within a few polls: spin before sleeping. */
        for (int spin = 0;
             nap.tv_nsec == 0 && rc == 0 && !done && spin < CMPY_WAIT_SPINS;
             spin++) {
            sched_yield();
            rc = cm_ctx_unchanged(dev, generation, &err) < 0
                     ? -1
                     : query(dev, handle, &done, &err);
        }
        /* End on the driver's own completion point: once the work is done
         * it returns at once, and whatever it reports is raised. */
        if (rc == 0 && done) {
            rc = finish(dev, handle, &err);
        }
        CMPY_END_ALLOW_THREADS
        if (rc < 0) {
            cmpy_raise(st, &err);
            return -1;
        }
        if (done) {
            return 0;
        }
        /* Ctrl-C (any signal handler that raises) ends the wait; the work
         * goes on. */
        if (PyErr_CheckSignals() < 0) {
            return -1;
        }
        nap.tv_nsec = nap.tv_nsec == 0 ? 1000 : nap.tv_nsec * 2;
        if (nap.tv_nsec > CMPY_WAIT_MAX_NAP_NS) {
            nap.tv_nsec = CMPY_WAIT_MAX_NAP_NS;
        }
    }
}

/* Whether this thread is the process's first, the one that runs Python's
 * signal handlers (Ctrl-C): on Linux its thread id is the process id.
 * Asked once per thread. */
static int
on_main_thread(void)
{
    static _Thread_local int main_thread = -1;

    if (main_thread < 0) {
        main_thread = (pid_t)syscall(SYS_gettid) == getpid();
    }
    return main_thread;
}

/* Core's poll hook (staging.h), on the thread of a long copy that most
 * likely released the GIL: runs the pending signal handlers, and asks the
 * copy to stop when one raised (the exception stays set on the thread for
 * the caller to raise). Only the main thread runs signal handlers:
 * elsewhere this takes no GIL. */
static int
poll_signals(void)
{
    PyGILState_STATE gil;
    int rc;

    if (!on_main_thread()) {
        return 0;
    }
    gil = PyGILState_Ensure();
    rc = PyErr_CheckSignals();
    PyGILState_Release(gil);
    return rc < 0;
}

void
cmpy_poll_install(int on)
{
    cm_staging_set_poll(on ? poll_signals : NULL);
}

int
cmpy_ctx_wait(cmpy_state *st, cm_device *dev, uint64_t generation)
{
    cm_ctx_sync *job;
    cm_error err;
    int rc, idle;

    /* Off the main thread no signal handler can end the wait: synchronize
     * here, without the hand-off to ctxsync.c's worker. */
    if (!on_main_thread()) {
        Py_BEGIN_ALLOW_THREADS
        rc = cm_ctx_sync_here(dev, generation, &err);
        CMPY_END_ALLOW_THREADS
        if (rc < 0) {
            cmpy_raise(st, &err);
        }
        return rc;
    }
    /* An idle context answers at once, without a hand-off: calls that do
     * not block (the event synchronized is done), with the GIL held as
     * for an event query. */
    if (cm_ctx_sync_idle(dev, generation, &idle, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    if (idle) {
        return 0;
    }
    if (cm_ctx_sync_start(dev, generation, &job, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    rc = cmpy_wait_polled(st, dev, job, cm_ctx_sync_query, cm_ctx_sync_finish);
    cm_ctx_sync_release(job);
    return rc;
}

static int
query_stream(cm_device *dev, void *handle, int *done, cm_error *err)
{
    return cm_stream_query(dev, (CUstream)handle, done, err);
}

static int
finish_stream(cm_device *dev, void *handle, cm_error *err)
{
    return cm_stream_synchronize(dev, (CUstream)handle, err);
}

int
cmpy_stream_wait(cmpy_state *st, cm_device *dev, CUstream handle)
{
    return cmpy_wait_polled(st, dev, (void *)handle, query_stream,
                            finish_stream);
}

/* ------------------------------------------------------------------------
 * The stream= parser. */

/* An int stream argument (bool included): only 0 is valid. */
static int
int_arg(PyObject *arg, PyObject *value)
{
    int overflow;
    long v = PyLong_AsLongAndOverflow(value, &overflow);

    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (v == 0 && !overflow) {
        return 0;
    }
    PyErr_Format(PyExc_ValueError,
                 "invalid stream %R: an int stream must be 0 (the default "
                 "stream, synchronous); to use a CUDA stream handle, wrap "
                 "it with cudamem.external_stream(handle)",
                 arg);
    return -1;
}

/* The device an operation is on: `dev`, or the calling thread's. */
static int
operation_device(cmpy_state *st, cm_device **dev)
{
    return *dev != NULL ? 0 : cmpy_current_device(st, dev);
}

/* With `any`, a stream of any device is taken and *dev set to it;
 * otherwise one of another device than *dev is refused. */
static int
stream_obj_arg(cmpy_state *st, cmpy_Stream *s, cm_device **devp, int any,
               cmpy_stream_ref *out)
{
    cm_device *dev = *devp;

    if (stream_check(st, s) < 0) {
        return -1;
    }
    if (is_bound(s) && any) {
        *devp = s->dev;
    }
    else if (is_bound(s)) {
        if (operation_device(st, &dev) < 0) {
            return -1;
        }
        if (s->dev != dev) {
            PyErr_Format(PyExc_ValueError,
                         "%R belongs to device %d, but the operation is on "
                         "device %d",
                         (PyObject *)s, s->dev->ordinal, dev->ordinal);
            return -1;
        }
    }
    out->handle = s->handle;
    out->async = 1;
    out->owned = s->kind != CMPY_STREAM_EXTERNAL;
    out->obj = (PyObject *)s;
    return 0;
}

/* What __cuda_stream__ gave: (0, handle); `any` as for stream_obj_arg. */
static int
foreign_arg(cmpy_state *st, PyObject *arg, PyObject *proto, cm_device **devp,
            int any, cmpy_stream_ref *out)
{
    cm_device *dev = *devp;
    PyObject *version, *value;
    unsigned long long h;
    CUstream handle;
    cm_device *owner;
    cm_error err;
    int overflow;
    long v;

    if (!PyTuple_Check(proto) || PyTuple_GET_SIZE(proto) != 2) {
        PyErr_Format(PyExc_TypeError,
                     "__cuda_stream__() of %.200s must return a (version, "
                     "handle) tuple, not %R",
                     Py_TYPE(arg)->tp_name, proto);
        return -1;
    }
    version = PyTuple_GET_ITEM(proto, 0);
    value = PyTuple_GET_ITEM(proto, 1);
    if (!PyLong_Check(version) || PyBool_Check(version) ||
        !PyLong_Check(value) || PyBool_Check(value)) {
        PyErr_Format(PyExc_TypeError,
                     "__cuda_stream__() of %.200s must return two ints "
                     "(version, handle), not %R",
                     Py_TYPE(arg)->tp_name, proto);
        return -1;
    }
    v = PyLong_AsLongAndOverflow(version, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (v != 0 || overflow) {
        PyErr_Format(PyExc_ValueError,
                     "__cuda_stream__() of %.200s returned version %R: "
                     "cudamem understands version 0",
                     Py_TYPE(arg)->tp_name, version);
        return -1;
    }
    h = PyLong_AsUnsignedLongLong(value);
    if ((h == (unsigned long long)-1 && PyErr_Occurred()) || h > UINTPTR_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "__cuda_stream__() of %.200s returned an invalid "
                     "stream handle %R",
                     Py_TYPE(arg)->tp_name, value);
        return -1;
    }
    handle = (CUstream)(uintptr_t)h;
    /* 0, 1 and 2 name a default stream of whatever context is current. */
    if (!cm_stream_is_default(handle)) {
        if (cmpy_ensure_driver(st) < 0) {
            return -1;
        }
        if (cm_stream_device(handle, &owner, &err) < 0) {
            cmpy_raise(st, &err);
            return -1;
        }
        if (any) {
            *devp = owner;
        }
        else if (operation_device(st, &dev) < 0) {
            return -1;
        }
        else if (owner != dev) {
            PyErr_Format(PyExc_ValueError,
                         "stream %R (CUDA stream %llu) belongs to device "
                         "%d, but the operation is on device %d",
                         arg, h, owner->ordinal, dev->ordinal);
            return -1;
        }
    }
    else if (cm_fork_check(&err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    out->handle = handle;
    out->async = 1;
    out->owned = cm_stream_is_default(handle);
    out->obj = arg;
    return 0;
}

static int
stream_arg(cmpy_state *st, PyObject *arg, cm_device **dev, int any,
           cmpy_stream_ref *out)
{
    PyObject *attr, *proto, *index;
    int found, rc;

    out->handle = NULL;
    out->async = 0;
    out->owned = 1;
    out->obj = NULL;
    /* The common cases first: 0 and a cudamem Stream. */
    if (arg == Py_None) {
        return 0;
    }
    if (PyLong_Check(arg)) {
        return int_arg(arg, arg);
    }
    if (Py_IS_TYPE(arg, (PyTypeObject *)st->StreamType)) {
        return stream_obj_arg(st, (cmpy_Stream *)arg, dev, any, out);
    }
    found = cmpy_optional_attr(arg, "__cuda_stream__", &attr);
    if (found < 0) {
        return -1;
    }
    if (found) {
        /* A method (the protocol); cuda.core 0.1 made it a property. */
        proto = PyCallable_Check(attr) ? PyObject_CallNoArgs(attr)
                                       : Py_NewRef(attr);
        Py_DECREF(attr);
        if (proto == NULL) {
            return -1;
        }
        rc = foreign_arg(st, arg, proto, dev, any, out);
        Py_DECREF(proto);
        return rc;
    }
    if (PyIndex_Check(arg)) {
        /* NumPy's integers, as numba takes them. */
        index = PyNumber_Index(arg);
        if (index == NULL) {
            return -1;
        }
        rc = int_arg(arg, index);
        Py_DECREF(index);
        return rc;
    }
    PyErr_Format(PyExc_TypeError,
                 "stream must be 0, a cudamem Stream or an object with "
                 "__cuda_stream__, not %.200s",
                 Py_TYPE(arg)->tp_name);
    return -1;
}

int
cmpy_stream_arg(cmpy_state *st, PyObject *arg, cm_device *dev,
                cmpy_stream_ref *out)
{
    return stream_arg(st, arg, &dev, 0, out);
}

int
cmpy_stream_arg_any(cmpy_state *st, PyObject *arg, cm_device **dev,
                    cmpy_stream_ref *out)
{
    return stream_arg(st, arg, dev, 1, out);
}

/* ------------------------------------------------------------------------
 * The Stream type. */

static void
stream_dealloc(cmpy_Stream *self)
{
    PyTypeObject *type = Py_TYPE(self);
    cm_error err;

    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    /* A stale generation drops it; in a forked child nothing happens
     * (cmpy_warn_release stays silent there). */
    if (self->kind == CMPY_STREAM_OWNED) {
        cmpy_release_begin();
        if (cmpy_release_end(cm_stream_release(self->dev, self->generation,
                                               self->handle, &err),
                             &err) < 0) {
            cmpy_warn_release((cmpy_state *)PyType_GetModuleState(type), &err);
        }
    }
    type->tp_free(self);
    Py_DECREF(type);
}

/* The Context of the stream's device (new reference), or NULL without an
 * exception when the stream's context was reset or closed. */
static PyObject *
live_context(cmpy_state *st, cmpy_Stream *self)
{
    cmpy_Device *device;
    cm_error err;

    if (is_bound(self) &&
        cm_ctx_check(self->dev, self->generation, &err) < 0) {
        return err.kind != CM_ERR_STATE ? cmpy_raise(st, &err) : NULL;
    }
    device = cmpy_device_of(st, self->dev);
    return device != NULL ? cmpy_context_of(st, device) : NULL;
}

static PyObject *
stream_repr(cmpy_Stream *self)
{
    unsigned long long h = handle_value(self->handle);
    const char *external = self->kind == CMPY_STREAM_EXTERNAL ? "External "
                                                              : "";
    PyObject *ctx = live_context(cmpy_type_state((PyObject *)self), self);
    PyObject *res;

    if (ctx == NULL) {
        return PyErr_Occurred()
                   ? NULL
                   : PyUnicode_FromFormat("<%sCUDA stream %llu on device %d "
                                          "(its context was reset or "
                                          "closed)>",
                                          external, h, self->dev->ordinal);
    }
    if (self->handle == NULL) {
        res = PyUnicode_FromFormat("<Default CUDA stream on %R>", ctx);
    }
    else if (self->handle == CU_STREAM_LEGACY) {
        res = PyUnicode_FromFormat("<Legacy default CUDA stream on %R>", ctx);
    }
    else if (self->handle == CU_STREAM_PER_THREAD) {
        res = PyUnicode_FromFormat("<Per-thread default CUDA stream on %R>",
                                   ctx);
    }
    else {
        res = PyUnicode_FromFormat("<%sCUDA stream %llu on %R>", external, h,
                                   ctx);
    }
    Py_DECREF(ctx);
    return res;
}

static PyObject *
stream_int(cmpy_Stream *self)
{
    return PyLong_FromVoidPtr(self->handle);
}

PyDoc_STRVAR(stream_repr_html_doc,
             "_repr_html_($self)\n--\n\n"
             "The stream as an HTML table for Jupyter: kind, handle, "
             "device and\ncontext.");

static PyObject *
stream_repr_html(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    static const char *const labels[] = {"kind", "handle", "device",
                                         "context"};
    static const char *const kinds[] = {
        [CMPY_STREAM_DEFAULT] = "default stream",
        [CMPY_STREAM_LEGACY] = "legacy default stream",
        [CMPY_STREAM_PER_THREAD] = "per-thread default stream",
        [CMPY_STREAM_OWNED] = "made by stream()",
        [CMPY_STREAM_EXTERNAL] = "external: cudamem never destroys it",
    };
    cmpy_Stream *self = (cmpy_Stream *)op;
    cmpy_state *st = cmpy_type_state(op);
    PyObject *values[4] = {NULL};

    values[0] = PyUnicode_FromString(kinds[self->kind]);
    values[1] = PyLong_FromUnsignedLongLong(handle_value(self->handle));
    values[2] = PyLong_FromLong(self->dev->ordinal);
    if (!PyErr_Occurred()) {
        PyObject *ctx = live_context(st, self);

        if (ctx != NULL) {
            values[3] = PyObject_Repr(ctx);
            Py_DECREF(ctx);
        }
        else if (!PyErr_Occurred()) {
            values[3] = PyUnicode_FromString("reset or closed");
        }
    }
    return cmpy_html_table("cudamem.Stream", 4, labels, values, NULL);
}

static PyObject *
stream_get_handle(cmpy_Stream *self, void *Py_UNUSED(closure))
{
    return cmpy_c_void_p((PyObject *)self, handle_value(self->handle));
}

static PyObject *
stream_get_external(cmpy_Stream *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->kind == CMPY_STREAM_EXTERNAL);
}

static PyObject *
stream_get_context(cmpy_Stream *self, void *Py_UNUSED(closure))
{
    cmpy_state *st = cmpy_type_state((PyObject *)self);
    cmpy_Device *device;

    if (stream_check(st, self) < 0) {
        return NULL;
    }
    device = cmpy_device_of(st, self->dev);
    return device != NULL ? cmpy_context_of(st, device) : NULL;
}

static PyGetSetDef stream_getset[] = {
    {"handle", (getter)stream_get_handle, NULL,
     "The CUstream as a ctypes.c_void_p, as numba's (its value is None "
     "for\nthe default stream).",
     NULL},
    {"external", (getter)stream_get_external, NULL,
     "True for a stream made by external_stream(): cudamem never destroys "
     "it.",
     NULL},
    {"context", (getter)stream_get_context, NULL,
     "The Context of the stream's device. Raises CudaDriverError once "
     "that\ncontext was reset or closed (default streams excepted).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(stream_synchronize_doc,
             "synchronize($self)\n--\n\n"
             "Waits for all work queued on this stream, with the GIL "
             "released.\nCtrl-C interrupts the wait (the work goes on).");

static PyObject *
stream_synchronize(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_Stream *s = (cmpy_Stream *)self;
    cmpy_state *st = cmpy_type_state(self);

    if (stream_check(st, s) < 0 ||
        cmpy_stream_wait(st, s->dev, s->handle) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stream_query_doc,
             "query($self)\n--\n\n"
             "True when all work queued on this stream is complete. Does not "
             "wait.");

static PyObject *
stream_query(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_Stream *s = (cmpy_Stream *)self;
    cmpy_state *st = cmpy_type_state(self);
    cm_error err;
    int done;

    if (stream_check(st, s) < 0) {
        return NULL;
    }
    if (cm_stream_query(s->dev, s->handle, &done, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return PyBool_FromLong(done);
}

PyDoc_STRVAR(stream_cuda_stream_doc,
             "__cuda_stream__($self)\n--\n\n"
             "The CUDA stream protocol (version 0): the handle as an int.");

static PyObject *
stream_cuda_stream(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_Stream *s = (cmpy_Stream *)self;

    if (stream_check(cmpy_type_state(self), s) < 0) {
        return NULL;
    }
    return Py_BuildValue("(iN)", 0, PyLong_FromVoidPtr(s->handle));
}

PyDoc_STRVAR(stream_priority_range_doc,
             "priority_range($type)\n--\n\n"
             "The stream priorities of the current device, a class method\n"
             "(cuCtxGetStreamPriorityRange): *greatest* is the most urgent "
             "and\nnumerically the smallest. stream(priority=...) is "
             "clamped into it.");

static PyObject *
stream_priority_range(PyObject *cls, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_state_of((PyTypeObject *)cls);
    int least, greatest;
    cm_device *dev;
    cm_error err;

    if (cmpy_current_device(st, &dev) < 0) {
        return NULL;
    }
    if (cm_stream_priority_range(dev, &least, &greatest, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return Py_BuildValue("(ii)", least, greatest);
}

PyDoc_STRVAR(stream_wait_event_doc,
             "wait_event($self, event)\n--\n\n"
             "Work queued on this stream after this call waits, on the "
             "device, until\n*event* occurs: event.wait(stream=self). The "
             "event may be of another\ndevice, as the driver allows. The "
             "host does not wait.");

static PyObject *
stream_wait_event(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames)
{
    static const char *const names[] = {"event"};
    PyObject *vals[1];

    if (cmpy_parse_args("wait_event", names, 1, 1, args, nargs, kwnames,
                        vals) < 0 ||
        cmpy_event_stream_wait(cmpy_type_state(self), vals[0], self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stream_add_callback_doc,
             "add_callback($self, callback, arg=None)\n--\n\n"
             "Calls callback(stream, status, arg) once all work queued on "
             "this\nstream before this call is complete; *status* is the "
             "stream's\nCUresult as an int (0: success). Callbacks run in "
             "queue order on one\ncudamem thread (not a driver thread), so "
             "they may call cudamem; the\nstream does not wait for them. "
             "What a callback raises becomes a\nCudaWarning. The stream, "
             "callback and arg are kept alive until it\nran.");

static PyObject *
stream_add_callback(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames)
{
    static const char *const names[] = {"callback", "arg"};
    cmpy_Stream *s = (cmpy_Stream *)self;
    cmpy_state *st = cmpy_type_state(self);
    PyObject *vals[2];

    if (cmpy_parse_args("add_callback", names, 2, 1, args, nargs, kwnames,
                        vals) < 0 ||
        stream_check(st, s) < 0 ||
        cmpy_callback_add(st, self, s->dev, s->handle, vals[0],
                          vals[1] != NULL ? vals[1] : Py_None) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stream_async_done_doc,
             "async_done($self)\n--\n\n"
             "A future of the running event loop that resolves to this "
             "stream once\nall work queued on it before this call is "
             "complete (CudaAPIError\nnaming the status when the stream "
             "failed). Cancelling it is safe.");

static PyObject *
stream_async_done(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_type_state(self);

    if (stream_check(st, (cmpy_Stream *)self) < 0) {
        return NULL;
    }
    return cmpy_glue_call(st, CMPY_GLUE_ASYNC_DONE, self);
}

PyDoc_STRVAR(stream_auto_synchronize_doc,
             "auto_synchronize($self)\n--\n\n"
             "A context manager that yields this stream and synchronizes "
             "it on exit,\nalso when the block raises (the block's "
             "exception wins).");

static PyObject *
stream_auto_synchronize(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return cmpy_glue_call(cmpy_type_state(self), CMPY_GLUE_AUTO_SYNCHRONIZE,
                          self);
}

static PyMethodDef stream_methods[] = {
    {"synchronize", stream_synchronize, METH_NOARGS, stream_synchronize_doc},
    {"add_callback", (PyCFunction)(void (*)(void))stream_add_callback,
     METH_FASTCALL | METH_KEYWORDS, stream_add_callback_doc},
    {"async_done", stream_async_done, METH_NOARGS, stream_async_done_doc},
    {"auto_synchronize", stream_auto_synchronize, METH_NOARGS,
     stream_auto_synchronize_doc},
    {"wait_event", (PyCFunction)(void (*)(void))stream_wait_event,
     METH_FASTCALL | METH_KEYWORDS, stream_wait_event_doc},
    {"query", stream_query, METH_NOARGS, stream_query_doc},
    {"_repr_html_", stream_repr_html, METH_NOARGS, stream_repr_html_doc},
    {"__cuda_stream__", stream_cuda_stream, METH_NOARGS,
     stream_cuda_stream_doc},
    {"priority_range", stream_priority_range, METH_NOARGS | METH_CLASS,
     stream_priority_range_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef stream_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(cmpy_Stream, weakreflist),
     Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(stream_doc,
             "Stream\n\n"
             "A CUDA stream (numba.cuda.cudadrv.driver.Stream), made by "
             "stream(),\ndefault_stream(), legacy_default_stream(),\n"
             "per_thread_default_stream() or external_stream(). Pass it as\n"
             "stream= to make an operation asynchronous on it. int(s) is "
             "the\nhandle (0, 1 and 2 for the default, legacy and "
             "per-thread default\nstreams). A stream made by stream() is "
             "destroyed, through its\ncontext's deallocations, when the last "
             "reference goes. Made by\ncudamem, not by user code.");

static PyType_Slot stream_slots[] = {
    {Py_tp_doc, (void *)stream_doc}, {Py_tp_dealloc, stream_dealloc},
    {Py_tp_repr, stream_repr},       {Py_nb_int, stream_int},
    {Py_tp_getset, stream_getset},   {Py_tp_methods, stream_methods},
    {Py_tp_members, stream_members}, {0, NULL},
};

static PyType_Spec stream_spec = {
    .name = "cudamem.Stream",
    .basicsize = sizeof(cmpy_Stream),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = stream_slots,
};

int
cmpy_stream_type_init(PyObject *module, cmpy_state *st)
{
    st->StreamType = PyType_FromModuleAndSpec(module, &stream_spec, NULL);
    if (st->StreamType == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "Stream", st->StreamType);
}

/* ------------------------------------------------------------------------
 * Module functions. */

PyDoc_STRVAR(stream_doc_fn,
             "stream($module, priority=None, non_blocking=False)\n--\n\n"
             "A new stream in the current device's primary context (numba's\n"
             "cuda.stream()). *priority* (an int; lower is more urgent) is "
             "clamped\nby the driver into Stream.priority_range(). With "
             "*non_blocking*, the\nstream does not synchronize with the "
             "legacy default stream\n(CU_STREAM_NON_BLOCKING).");

static PyObject *
stream_fn(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
          PyObject *kwnames)
{
    static const char *const names[] = {"priority", "non_blocking"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *vals[2], *index;
    int has_priority = 0, priority = 0, overflow, nb = 0;
    cm_ctx_guard guard;
    cmpy_Stream *self;
    cm_device *dev;
    cm_error err;
    long value;

    if (cmpy_parse_args("stream", names, 2, 0, args, nargs, kwnames, vals) <
        0) {
        return NULL;
    }
    if (vals[0] != NULL && vals[0] != Py_None) {
        if (PyBool_Check(vals[0]) || !PyIndex_Check(vals[0])) {
            PyErr_Format(PyExc_TypeError,
                         "priority must be an int or None, not %.200s",
                         Py_TYPE(vals[0])->tp_name);
            return NULL;
        }
        index = PyNumber_Index(vals[0]);
        if (index == NULL) {
            return NULL;
        }
        value = PyLong_AsLongAndOverflow(index, &overflow);
        Py_DECREF(index);
        if (value == -1 && PyErr_Occurred()) {
            return NULL;
        }
        /* The driver clamps: so does cudamem, to what it can pass. */
        if (overflow != 0) {
            value = overflow < 0 ? INT_MIN : INT_MAX;
        }
        else if (value < INT_MIN || value > INT_MAX) {
            value = value < 0 ? INT_MIN : INT_MAX;
        }
        has_priority = 1;
        priority = (int)value;
    }
    if (vals[1] != NULL) {
        nb = PyObject_IsTrue(vals[1]);
        if (nb < 0) {
            return NULL;
        }
    }
    if (cmpy_current_enter(st, &dev, &guard) < 0) {
        return NULL;
    }
    /* The object first, so that a failure cannot leak the handle. */
    self = stream_alloc(st, dev, CMPY_STREAM_DEFAULT, NULL);
    if (self != NULL &&
        cm_stream_create(dev, nb ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT,
                         has_priority, priority, &self->handle,
                         &self->generation, &err) < 0) {
        Py_CLEAR(self);
        cmpy_raise(st, &err);
    }
    if (cmpy_ctx_leave(st, &guard, self != NULL ? 0 : -1) < 0) {
        Py_XDECREF(self);
        return NULL;
    }
    self->kind = CMPY_STREAM_OWNED;
    return (PyObject *)self;
}

/* A default stream object bound to the current device's context. */
static PyObject *
special_stream(PyObject *module, cmpy_stream_kind kind, CUstream handle)
{
    cmpy_state *st = cmpy_get_state(module);
    cm_device *dev;

    if (cmpy_current_device(st, &dev) < 0) {
        return NULL;
    }
    return (PyObject *)stream_alloc(st, dev, kind, handle);
}

PyDoc_STRVAR(default_stream_doc,
             "default_stream($module)\n--\n\n"
             "The default stream (handle 0) of the current context: the "
             "legacy\ndefault stream, or the per-thread one when cudamem "
             "runs with\nCUDAMEM_PER_THREAD_DEFAULT_STREAM=1. Passing it as "
             "stream= makes an\noperation asynchronous; stream=0 makes it "
             "synchronous.");

static PyObject *
default_stream(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return special_stream(module, CMPY_STREAM_DEFAULT, NULL);
}

PyDoc_STRVAR(legacy_default_stream_doc,
             "legacy_default_stream($module)\n--\n\n"
             "The legacy default stream (CU_STREAM_LEGACY) of the current "
             "context.");

static PyObject *
legacy_default_stream(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return special_stream(module, CMPY_STREAM_LEGACY, CU_STREAM_LEGACY);
}

PyDoc_STRVAR(per_thread_default_stream_doc,
             "per_thread_default_stream($module)\n--\n\n"
             "The per-thread default stream (CU_STREAM_PER_THREAD) of the "
             "current\ncontext.");

static PyObject *
per_thread_default_stream(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return special_stream(module, CMPY_STREAM_PER_THREAD,
                          CU_STREAM_PER_THREAD);
}

PyDoc_STRVAR(external_stream_doc,
             "external_stream($module, ptr)\n--\n\n"
             "Wraps a CUstream made elsewhere (an int handle) for the "
             "current\ndevice. cudamem never destroys it: it must outlive "
             "the Stream\nobject and every operation queued on it.");

static PyObject *
external_stream_one(PyObject *module, PyObject *arg)
{
    cmpy_state *st = cmpy_get_state(module);
    unsigned long long h;
    PyObject *index;
    cm_device *dev;

    if (PyBool_Check(arg) || !PyIndex_Check(arg)) {
        PyErr_Format(PyExc_TypeError,
                     "external_stream() needs an int stream handle, not "
                     "%.200s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    index = PyNumber_Index(arg);
    if (index == NULL) {
        return NULL;
    }
    h = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if ((h == (unsigned long long)-1 && PyErr_Occurred()) || h > UINTPTR_MAX ||
        h == 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "invalid stream handle %R for external_stream()%s", arg,
                     h == 0 ? ": 0 is the default stream, use "
                              "default_stream()"
                            : "");
        return NULL;
    }
    if (cmpy_current_device(st, &dev) < 0) {
        return NULL;
    }
    return cmpy_stream_wrap(st, dev, CMPY_STREAM_EXTERNAL,
                            (CUstream)(uintptr_t)h);
}

static PyObject *
external_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"ptr"};
    PyObject *argv[1];

    if (cmpy_parse_args("external_stream", names, 1, 1, args, nargs, kwnames,
                        argv) < 0) {
        return NULL;
    }
    return external_stream_one(self, argv[0]);
}

PyObject *
cmpy_stream_wrap(cmpy_state *st, cm_device *dev, cmpy_stream_kind kind,
                 CUstream handle)
{
    uint64_t generation = 0;
    cmpy_Stream *self;
    CUcontext ctx;
    cm_error err;

    if (!cm_stream_is_default(handle) &&
        cm_device_primary(dev, &ctx, &generation, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    self = stream_alloc(st, dev, kind, handle);
    if (self != NULL) {
        self->generation = generation;
    }
    return (PyObject *)self;
}

PyDoc_STRVAR(parse_stream_doc,
             "_parse_stream($module, arg, device=None)\n--\n\n"
             "What cudamem makes of stream=*arg* for an operation on "
             "*device*\n(None: the current one; else an ordinal or a "
             "Device). For tests.");

static PyObject *
parse_stream(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    static const char *const names[] = {"arg", "device"};
    cmpy_state *st = cmpy_get_state(module);
    cmpy_stream_ref ref;
    cmpy_Device *device;
    cm_device *dev = NULL;
    PyObject *vals[2];

    if (cmpy_parse_args("_parse_stream", names, 2, 1, args, nargs, kwnames,
                        vals) < 0) {
        return NULL;
    }
    if (vals[1] != NULL && vals[1] != Py_None) {
        if (cmpy_device_parse(st, vals[1], &device) < 0) {
            return NULL;
        }
        dev = device->dev;
    }
    if (cmpy_stream_arg(st, vals[0], dev, &ref) < 0) {
        return NULL;
    }
    return Py_BuildValue("(NO)", PyLong_FromVoidPtr(ref.handle),
                         ref.async ? Py_True : Py_False);
}

PyMethodDef cmpy_stream_methods[] = {
    {"stream", (PyCFunction)(void (*)(void))stream_fn,
     METH_FASTCALL | METH_KEYWORDS, stream_doc_fn},
    {"default_stream", default_stream, METH_NOARGS, default_stream_doc},
    {"legacy_default_stream", legacy_default_stream, METH_NOARGS,
     legacy_default_stream_doc},
    {"per_thread_default_stream", per_thread_default_stream, METH_NOARGS,
     per_thread_default_stream_doc},
    {"external_stream", (PyCFunction)(void (*)(void))external_stream,
     METH_FASTCALL | METH_KEYWORDS, external_stream_doc},
    {"_parse_stream", (PyCFunction)(void (*)(void))parse_stream,
     METH_FASTCALL | METH_KEYWORDS, parse_stream_doc},
    {NULL, NULL, 0, NULL},
};
