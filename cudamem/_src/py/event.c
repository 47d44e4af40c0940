/* event.c (py/): the Event type (numba's Event: record, query, synchronize,
 * wait, elapsed_time) and the module's event() and event_elapsed_time().
 * Creating and destroying handles is core/event.c's; parsing stream=
 * arguments and polled waits are py/stream.c's. */
#include "event.h"

#include <stddef.h>
#include <stdio.h>

#include "../core/event.h"
#include "device.h"
#include "stream.h"

static unsigned long long
handle_value(CUevent handle)
{
    return (unsigned long long)(uintptr_t)handle;
}

/* 0 when `ev` can be used: made in this process and its context neither
 * reset nor closed since; -1 with an exception naming it. */
static int
event_check(cmpy_state *st, cmpy_Event *ev)
{
    cm_error err;

    if (cm_event_check(ev->dev, ev->generation, ev->handle, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return 0;
}

/* `obj` as an Event (borrowed), or NULL with TypeError naming `what`. */
static cmpy_Event *
event_arg(cmpy_state *st, const char *what, PyObject *obj)
{
    if (!Py_IS_TYPE(obj, (PyTypeObject *)st->EventType)) {
        PyErr_Format(PyExc_TypeError, "%s must be a cudamem Event, not %.200s",
                     what, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return (cmpy_Event *)obj;
}

/* cmpy_stream_arg for an operation of `ev` on a stream of its device, or
 * with `sdev` of any device (*sdev set to it); a stream it cannot use gets
 * a message that names both. */
static int
event_stream_arg(cmpy_state *st, cmpy_Event *ev, const char *what,
                 PyObject *arg, cm_device **sdev, cmpy_stream_ref *ref)
{
    PyObject *exc;

    if ((sdev != NULL ? cmpy_stream_arg_any(st, arg, sdev, ref)
                      : cmpy_stream_arg(st, arg, ev->dev, ref)) == 0) {
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_ValueError)) {
        return -1;
    }
    exc = cmpy_exc_take();
    PyErr_Format(PyExc_ValueError, "cannot %s %R on stream %R: %S", what,
                 (PyObject *)ev, arg, exc);
    Py_DECREF(exc);
    return -1;
}

static int
query_event(cm_device *dev, void *handle, int *done, cm_error *err)
{
    return cm_event_query(dev, (CUevent)handle, done, err);
}

static int
finish_event(cm_device *dev, void *handle, cm_error *err)
{
    return cm_event_synchronize(dev, (CUevent)handle, err);
}

int
cmpy_event_stream_wait(cmpy_state *st, PyObject *event, PyObject *stream_arg)
{
    cmpy_Event *ev = event_arg(st, "event", event);
    cmpy_stream_ref ref;
    cm_device *sdev;
    cm_error err;

    if (ev == NULL || event_check(st, ev) < 0) {
        return -1;
    }
    /* The driver takes an event of another context: the wait is queued
     * in the stream's (a default stream: the event's device's). */
    sdev = ev->dev;
    if (event_stream_arg(st, ev, "wait for", stream_arg, &sdev, &ref) < 0) {
        return -1;
    }
    if (cm_event_stream_wait(sdev, ref.handle, ev->handle, &err) < 0) {
        cmpy_raise(st, &err);
        return -1;
    }
    return 0;
}

/* Milliseconds from `start` to `end`. The driver answers
 * CUDA_ERROR_INVALID_HANDLE both for an event made with timing=False and
 * for one never recorded: the error says which. */
static PyObject *
elapsed_time(cmpy_state *st, PyObject *start_obj, PyObject *end_obj)
{
    cmpy_Event *start = event_arg(st, "evtstart", start_obj);
    cmpy_Event *end = event_arg(st, "evtend", end_obj);
    char hint[160];
    cm_error err;
    float ms;

    if (start == NULL || end == NULL || event_check(st, start) < 0 ||
        event_check(st, end) < 0) {
        return NULL;
    }
    if (start->dev != end->dev) {
        PyErr_Format(PyExc_ValueError,
                     "cannot time %R against %R: the events belong to "
                     "devices %d and %d",
                     start_obj, end_obj, start->dev->ordinal,
                     end->dev->ordinal);
        return NULL;
    }
    if (cm_event_elapsed(start->dev, start->handle, end->handle, &ms, &err) ==
        0) {
        return PyFloat_FromDouble((double)ms);
    }
    if (err.kind != CM_ERR_DRIVER) {
        return cmpy_raise(st, &err);
    }
    if (err.code == CUDA_ERROR_INVALID_HANDLE &&
        (!start->timing || !end->timing)) {
        snprintf(hint, sizeof(hint),
                 "%s was made with timing=False, so it records no time; "
                 "use cudamem.event(timing=True)",
                 !start->timing ? "evtstart" : "evtend");
    }
    else if (err.code == CUDA_ERROR_INVALID_HANDLE &&
             (!start->recorded || !end->recorded)) {
        snprintf(hint, sizeof(hint),
                 "%s was never recorded; call its record() first",
                 !start->recorded ? "evtstart" : "evtend");
    }
    else if (err.code == CUDA_ERROR_NOT_READY) {
        snprintf(hint, sizeof(hint),
                 "the work the events recorded is not complete; call "
                 "evtend.synchronize() first");
    }
    else {
        return cmpy_raise(st, &err);
    }
    return cmpy_raise_hint(st, &err, hint);
}

/* ------------------------------------------------------------------------
 * The Event type. */

static void
event_dealloc(cmpy_Event *self)
{
    PyTypeObject *type = Py_TYPE(self);
    cm_error err;

    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    /* A stale generation drops it; in a forked child nothing happens
     * (cmpy_warn_release stays silent there). */
    if (self->handle != NULL) {
        cmpy_release_begin();
        if (cmpy_release_end(cm_event_release(self->dev, self->generation,
                                              self->handle, &err),
                             &err) < 0) {
            cmpy_warn_release((cmpy_state *)PyType_GetModuleState(type), &err);
        }
    }
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *
event_repr(cmpy_Event *self)
{
    cmpy_state *st = cmpy_type_state((PyObject *)self);
    unsigned long long h = handle_value(self->handle);
    cmpy_Device *device;
    PyObject *ctx, *res;
    cm_error err;

    if (cm_ctx_check(self->dev, self->generation, &err) < 0) {
        if (err.kind != CM_ERR_STATE) {
            return cmpy_raise(st, &err);
        }
        return PyUnicode_FromFormat("<CUDA event %llu on device %d (its "
                                    "context was reset or closed)>",
                                    h, self->dev->ordinal);
    }
    device = cmpy_device_of(st, self->dev);
    if (device == NULL) {
        return NULL;
    }
    ctx = cmpy_context_of(st, device);
    if (ctx == NULL) {
        return NULL;
    }
    res = PyUnicode_FromFormat("<CUDA event %llu on %R>", h, ctx);
    Py_DECREF(ctx);
    return res;
}

static PyObject *
event_get_handle(cmpy_Event *self, void *Py_UNUSED(closure))
{
    return cmpy_c_void_p((PyObject *)self, handle_value(self->handle));
}

static PyObject *
event_get_timing(cmpy_Event *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->timing);
}

static PyGetSetDef event_getset[] = {
    {"handle", (getter)event_get_handle, NULL,
     "The CUevent as a ctypes.c_void_p, as numba's.", NULL},
    {"timing", (getter)event_get_timing, NULL,
     "True when the event records time (made with timing=True).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(event_record_doc,
             "record($self, stream=0)\n--\n\n"
             "Sets the event's record point to the current end of *stream* "
             "(0: the\ndefault stream): the event occurs once all work queued "
             "there before\nthis call is complete. The stream must belong to "
             "the event's device.");

static PyObject *
event_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    static const char *const names[] = {"stream"};
    cmpy_Event *ev = (cmpy_Event *)self;
    cmpy_state *st = cmpy_type_state(self);
    cmpy_stream_ref ref;
    PyObject *vals[1];
    cm_error err;

    if (cmpy_parse_args("record", names, 1, 0, args, nargs, kwnames, vals) <
            0 ||
        event_check(st, ev) < 0 ||
        event_stream_arg(st, ev, "record", vals[0] != NULL ? vals[0] : Py_None,
                         NULL, &ref) < 0) {
        return NULL;
    }
    if (cm_event_record(ev->dev, ev->handle, ref.handle, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    ev->recorded = 1;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(event_query_doc,
             "query($self)\n--\n\n"
             "True when all work before the most recent record() is "
             "complete (and\nfor an event never recorded). Does not wait.");

static PyObject *
event_query(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_Event *ev = (cmpy_Event *)self;
    cmpy_state *st = cmpy_type_state(self);
    cm_error err;
    int done;

    if (event_check(st, ev) < 0) {
        return NULL;
    }
    if (cm_event_query(ev->dev, ev->handle, &done, &err) < 0) {
        return cmpy_raise(st, &err);
    }
    return PyBool_FromLong(done);
}

PyDoc_STRVAR(event_synchronize_doc,
             "synchronize($self)\n--\n\n"
             "Waits until the event occurs, with the GIL released. Ctrl-C\n"
             "interrupts the wait (the work goes on).");

static PyObject *
event_synchronize(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    cmpy_Event *ev = (cmpy_Event *)self;
    cmpy_state *st = cmpy_type_state(self);

    if (event_check(st, ev) < 0 ||
        cmpy_wait_polled(st, ev->dev, (void *)ev->handle, query_event,
                         finish_event) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(event_wait_doc,
             "wait($self, stream=0)\n--\n\n"
             "Work queued on *stream* (0: the default stream of the "
             "event's device)\nafter this call waits, on the device, until "
             "the event occurs. The\nstream may be of another device, as "
             "the driver allows. The host does\nnot wait.");

static PyObject *
event_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
           PyObject *kwnames)
{
    static const char *const names[] = {"stream"};
    PyObject *vals[1];

    if (cmpy_parse_args("wait", names, 1, 0, args, nargs, kwnames, vals) < 0 ||
        cmpy_event_stream_wait(cmpy_type_state(self), self,
                               vals[0] != NULL ? vals[0] : Py_None) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(event_elapsed_time_doc,
             "elapsed_time($self, evtend)\n--\n\n"
             "Milliseconds from this event to *evtend*, both recorded, "
             "complete and\nmade with timing=True (CudaAPIError saying "
             "which is not).");

static PyObject *
event_elapsed_time(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames)
{
    static const char *const names[] = {"evtend"};
    PyObject *vals[1];

    if (cmpy_parse_args("elapsed_time", names, 1, 1, args, nargs, kwnames,
                        vals) < 0) {
        return NULL;
    }
    return elapsed_time(cmpy_type_state(self), self, vals[0]);
}

static PyMethodDef event_methods[] = {
    {"record", (PyCFunction)(void (*)(void))event_record,
     METH_FASTCALL | METH_KEYWORDS, event_record_doc},
    {"query", event_query, METH_NOARGS, event_query_doc},
    {"synchronize", event_synchronize, METH_NOARGS, event_synchronize_doc},
    {"wait", (PyCFunction)(void (*)(void))event_wait,
     METH_FASTCALL | METH_KEYWORDS, event_wait_doc},
    {"elapsed_time", (PyCFunction)(void (*)(void))event_elapsed_time,
     METH_FASTCALL | METH_KEYWORDS, event_elapsed_time_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef event_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(cmpy_Event, weakreflist),
     Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(event_type_doc,
             "Event\n\n"
             "A CUDA event (numba.cuda.cudadrv.driver.Event), made by "
             "event() in\nthe current device's primary context. It is "
             "destroyed, through its\ncontext's deallocations, when the last "
             "reference goes; after the\ncontext was reset or closed it "
             "raises CudaDriverError on use. Made\nby cudamem, not by user "
             "code.");

static PyType_Slot event_slots[] = {
    {Py_tp_doc, (void *)event_type_doc},
    {Py_tp_dealloc, event_dealloc},
    {Py_tp_repr, event_repr},
    {Py_tp_getset, event_getset},
    {Py_tp_methods, event_methods},
    {Py_tp_members, event_members},
    {0, NULL},
};

static PyType_Spec event_spec = {
    .name = "cudamem.Event",
    .basicsize = sizeof(cmpy_Event),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = event_slots,
};

int
cmpy_event_type_init(PyObject *module, cmpy_state *st)
{
    st->EventType = PyType_FromModuleAndSpec(module, &event_spec, NULL);
    if (st->EventType == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "Event", st->EventType);
}

/* ------------------------------------------------------------------------
 * Module functions. */

PyDoc_STRVAR(event_fn_doc,
             "event($module, timing=True)\n--\n\n"
             "A new event in the current device's primary context (numba's\n"
             "cuda.event()). Only with *timing* does it record time for\n"
             "elapsed_time(); without, it is cheaper\n"
             "(CU_EVENT_DISABLE_TIMING). Waits on it poll, so Ctrl-C "
             "interrupts them.");

static PyObject *
event_fn(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
         PyObject *kwnames)
{
    static const char *const names[] = {"timing"};
    cmpy_state *st = cmpy_get_state(module);
    PyObject *vals[1];
    cmpy_Event *self;
    cm_device *dev;
    cm_error err;
    int timing = 1;

    if (cmpy_parse_args("event", names, 1, 0, args, nargs, kwnames, vals) <
        0) {
        return NULL;
    }
    if (vals[0] != NULL && (timing = PyObject_IsTrue(vals[0])) < 0) {
        return NULL;
    }
    if (cmpy_current_device(st, &dev) < 0) {
        return NULL;
    }
    /* The object first, so that a failure cannot leak the handle. */
    self = PyObject_New(cmpy_Event, (PyTypeObject *)st->EventType);
    if (self == NULL) {
        return NULL;
    }
    self->dev = dev;
    self->generation = 0;
    self->handle = NULL;
    self->timing = timing;
    self->recorded = 0;
    self->weakreflist = NULL;
    if (cm_event_create(dev,
                        timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING,
                        &self->handle, &self->generation, &err) < 0) {
        Py_DECREF(self);
        return cmpy_raise(st, &err);
    }
    return (PyObject *)self;
}

PyDoc_STRVAR(event_elapsed_time_fn_doc,
             "event_elapsed_time($module, evtstart, evtend)\n--\n\n"
             "Milliseconds from *evtstart* to *evtend*: "
             "evtstart.elapsed_time(evtend).");

static PyObject *
event_elapsed_time_fn(PyObject *module, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"evtstart", "evtend"};
    PyObject *vals[2];

    if (cmpy_parse_args("event_elapsed_time", names, 2, 2, args, nargs,
                        kwnames, vals) < 0) {
        return NULL;
    }
    return elapsed_time(cmpy_get_state(module), vals[0], vals[1]);
}

PyMethodDef cmpy_event_methods[] = {
    {"event", (PyCFunction)(void (*)(void))event_fn,
     METH_FASTCALL | METH_KEYWORDS, event_fn_doc},
    {"event_elapsed_time", (PyCFunction)(void (*)(void))event_elapsed_time_fn,
     METH_FASTCALL | METH_KEYWORDS, event_elapsed_time_fn_doc},
    {NULL, NULL, 0, NULL},
};
