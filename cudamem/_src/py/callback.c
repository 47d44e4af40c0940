/* callback.c (py/): stream callbacks in Python (DESIGN rule 7). A payload
 * (callback, stream, arg) goes through core/callback.c's queue to the one
 * dispatcher thread, which runs _dispatch_loop() here; _dispatch_drain()
 * lets exit wait for the callbacks not run yet. The thread's lifetime
 * (start, exit, fork) is cudamem/_streams.py's, as are async_done() and
 * auto_synchronize(), which the LOAD_STREAMS hook gives on first use. */
#include "callback.h"

#include <stdlib.h>

#include "../core/callback.h"

/* How long the dispatcher waits for a payload before it looks again. */
#define CMPY_DISPATCH_POLL_MS 100

/* st->glue[fn], loaded by the LOAD_STREAMS hook on first use (it imports
 * cudamem._streams, which brings threading; `import cudamem` must not).
 * Borrowed, or NULL with an exception set. */
static PyObject *
glue(cmpy_state *st, cmpy_glue_fn fn)
{
    if (st->glue[fn] == NULL &&
        cmpy_hook_load(st, CMPY_HOOK_LOAD_STREAMS, st->glue, CMPY_GLUE_COUNT) <
            0) {
        return NULL;
    }
    return st->glue[fn];
}

PyObject *
cmpy_glue_call(cmpy_state *st, cmpy_glue_fn fn, PyObject *stream)
{
    PyObject *func = glue(st, fn);

    return func != NULL ? PyObject_CallOneArg(func, stream) : NULL;
}

int
cmpy_callback_add(cmpy_state *st, PyObject *stream, cm_device *dev,
                  CUstream handle, PyObject *callback, PyObject *arg)
{
    PyObject *payload, *started;
    cm_error err;

    if (!PyCallable_Check(callback)) {
        PyErr_Format(PyExc_TypeError, "callback must be callable, not %.200s",
                     Py_TYPE(callback)->tp_name);
        return -1;
    }
    started = cmpy_glue_call(st, CMPY_GLUE_ENSURE_DISPATCHER, Py_None);
    if (started == NULL) {
        return -1;
    }
    Py_DECREF(started);
    payload = PyTuple_Pack(3, callback, stream, arg);
    if (payload == NULL) {
        return -1;
    }
    /* The driver may call back before this returns: the payload is the
     * dispatcher's from here on, unless the add failed. */
    if (cm_callback_add(dev, handle, payload, &err) < 0) {
        Py_DECREF(payload);
        cmpy_raise(st, &err);
        return -1;
    }
    return 0;
}

/* Runs one payload: callback(stream, status, arg). What it raises becomes
 * a CudaWarning (or, when warnings are errors, goes to
 * sys.unraisablehook): the dispatcher goes on. */
static void
run_payload(cmpy_state *st, PyObject *payload, CUresult status)
{
    PyObject *callback = PyTuple_GET_ITEM(payload, 0);
    PyObject *args[3] = {PyTuple_GET_ITEM(payload, 1), NULL,
                         PyTuple_GET_ITEM(payload, 2)};
    PyObject *res = NULL, *exc;

    args[1] = PyLong_FromLong((long)status);
    if (args[1] != NULL) {
        res = PyObject_Vectorcall(callback, args, 3, NULL);
        Py_DECREF(args[1]);
    }
    if (res != NULL) {
        Py_DECREF(res);
        return;
    }
    exc = cmpy_exc_take();
    if (PyErr_WarnFormat(st->CudaWarning, 1, "stream callback %R raised %R",
                         callback, exc) < 0) {
        PyErr_Clear();
        cmpy_exc_put(Py_NewRef(exc));
        PyErr_WriteUnraisable(callback);
    }
    Py_DECREF(exc);
}

PyDoc_STRVAR(dispatch_loop_doc,
             "_dispatch_loop($module)\n--\n\n"
             "The body of the cudamem-callbacks thread: runs stream "
             "callbacks in\nthe order the driver reached them until "
             "_dispatch_stop() and the queue\nis empty. Waits with the GIL "
             "released.");

static PyObject *
dispatch_loop(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    cmpy_state *st = cmpy_get_state(module);
    void *payload = NULL;
    CUresult status = CUDA_SUCCESS;
    int rc;

    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        rc = cm_callback_next(CMPY_DISPATCH_POLL_MS, &payload, &status);
        CMPY_END_ALLOW_THREADS
        if (rc < 0) {
            Py_RETURN_NONE;
        }
        if (rc > 0) {
            CMPY_ASSERT_HANDED((PyObject *)payload, PyTuple_CheckExact);
            run_payload(st, (PyObject *)payload, status);
            cm_callback_done();
            /* The references to callback, stream and arg go now. */
            Py_DECREF((PyObject *)payload);
        }
    }
}

PyDoc_STRVAR(dispatch_stop_doc,
             "_dispatch_stop($module)\n--\n\n"
             "Makes _dispatch_loop() return once what is queued has run. "
             "Callbacks\nthe driver reaches later are never run (exit).");

static PyObject *
dispatch_stop(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    cm_callback_stop();
    Py_RETURN_NONE;
}

/* The payloads not run, with new references, collected under core's
 * queue lock: nothing here may run Python code or take the GIL. */
typedef struct unfinished {
    struct {
        PyObject *payload;
        cm_callback_state state;
    } *items;
    size_t n, cap;
    int nomem;
} unfinished;

static void
collect(void *payload, cm_callback_state state, void *ctx)
{
    unfinished *u = ctx;

    if (u->n == u->cap) {
        size_t cap = u->cap ? 2 * u->cap : 8;
        void *items = realloc(u->items, cap * sizeof(*u->items));

        if (items == NULL) {
            u->nomem = 1;
            return;
        }
        u->items = items;
        u->cap = cap;
    }
    CMPY_ASSERT_HANDED((PyObject *)payload, PyTuple_CheckExact);
    u->items[u->n].payload = Py_NewRef((PyObject *)payload);
    u->items[u->n++].state = state;
}

/* [(callback, stream, state), ...] of the payloads in u, whose references
 * it takes; NULL with an exception set. */
static PyObject *
unfinished_list(unfinished *u)
{
    static const char *const names[] = {"running", "queued", "unreached"};
    PyObject *list = u->nomem ? PyErr_NoMemory() : PyList_New(0);

    for (size_t i = 0; i < u->n; i++) {
        PyObject *payload = u->items[i].payload, *item;

        if (list != NULL) {
            item = Py_BuildValue("(OOs)", PyTuple_GET_ITEM(payload, 0),
                                 PyTuple_GET_ITEM(payload, 1),
                                 names[u->items[i].state]);
            if (item == NULL || PyList_Append(list, item) < 0) {
                Py_CLEAR(list);
            }
            Py_XDECREF(item);
        }
        Py_DECREF(payload);
    }
    free(u->items);
    return list;
}

PyDoc_STRVAR(dispatch_drain_doc,
             "_dispatch_drain($module, timeout)\n--\n\n"
             "Waits up to `timeout` seconds, with the GIL released, until "
             "every\ncallback added has run; Ctrl-C ends the wait. Returns "
             "(callback,\nstream, state) for each that has not, state "
             "'running' (the\ndispatcher is in it), 'queued' or 'unreached' "
             "(its stream has not\nreached it).");

static PyObject *
dispatch_drain(PyObject *Py_UNUSED(module), PyObject *arg)
{
    unfinished u = {0};
    double seconds = PyFloat_AsDouble(arg);
    long left, slice;
    int busy;

    if (seconds == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (!(seconds >= 0.0 && seconds <= 1e6)) {
        PyErr_Format(PyExc_ValueError,
                     "timeout must be from 0 to 1e6 seconds, not %R", arg);
        return NULL;
    }
    /* In slices, so that Ctrl-C can end a long wait. */
    left = (long)(seconds * 1000.0);
    for (;;) {
        slice = left < CMPY_DISPATCH_POLL_MS ? left : CMPY_DISPATCH_POLL_MS;
        Py_BEGIN_ALLOW_THREADS
        busy = cm_callback_drain(slice);
        CMPY_END_ALLOW_THREADS
        left -= slice;
        if (!busy || left <= 0) {
            break;
        }
        if (PyErr_CheckSignals() < 0) {
            return NULL;
        }
    }
    if (busy) {
        cm_callback_unfinished(collect, &u);
    }
    return unfinished_list(&u);
}

PyMethodDef cmpy_callback_methods[] = {
    {"_dispatch_loop", dispatch_loop, METH_NOARGS, dispatch_loop_doc},
    {"_dispatch_stop", dispatch_stop, METH_NOARGS, dispatch_stop_doc},
    {"_dispatch_drain", dispatch_drain, METH_O, dispatch_drain_doc},
    {NULL, NULL, 0, NULL},
};
