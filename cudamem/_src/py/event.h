/* event.h (py/): the Event type (numba's Event) and what Stream needs of
 * it. Core's view of events is core/event.h; this file owns the Python
 * objects. */
#ifndef CMPY_EVENT_H
#define CMPY_EVENT_H

#include "module.h"

#include <stdint.h>

#include "../core/context.h"

typedef struct cmpy_Event {
    PyObject_HEAD
    cm_device *dev;      /* the device whose primary context made it */
    uint64_t generation; /* the device's at creation */
    CUevent handle;
    int timing;   /* made with timing=True */
    int recorded; /* record() succeeded at least once */
    PyObject *weakreflist;
} cmpy_Event;

/* Makes the stream `stream_arg` (a stream= argument, parsed for the
 * event's device) wait on the device for `event` (an Event, else
 * TypeError naming it): Event.wait() and Stream.wait_event(). 0, or -1
 * with an exception set. */
int cmpy_event_stream_wait(cmpy_state *st, PyObject *event,
                           PyObject *stream_arg);

/* py/event.c: creates EventType in the module state; 0 or -1. */
int cmpy_event_type_init(PyObject *module, cmpy_state *st);
extern PyMethodDef cmpy_event_methods[];

#endif
