/* callback.h (py/): what the Stream type gets from py/callback.c: stream
 * callbacks run by cudamem's dispatcher thread, and the Python glue of
 * cudamem/_streams.py (async_done, auto_synchronize). */
#ifndef CMPY_CALLBACK_H
#define CMPY_CALLBACK_H

#include "module.h"

#include "../core/context.h"

/* Stream.add_callback: `callback(stream, status, arg)` runs on the
 * dispatcher thread (started on first use) once the work queued on
 * `handle` (in dev's context) before this call is done. The stream,
 * callback and arg are kept alive until then. 0, or -1 with an exception
 * set (TypeError for a callback that is not callable, before anything is
 * queued). */
int cmpy_callback_add(cmpy_state *st, PyObject *stream, cm_device *dev,
                      CUstream handle, PyObject *callback, PyObject *arg);

/* Indexes of cmpy_state.glue (CMPY_GLUE_COUNT of them). */
typedef enum cmpy_glue_fn {
    CMPY_GLUE_ASYNC_DONE = 0,
    CMPY_GLUE_AUTO_SYNCHRONIZE,
    CMPY_GLUE_ENSURE_DISPATCHER
} cmpy_glue_fn;

/* cudamem._streams.<fn>(stream), loaded on first use. New reference. */
PyObject *cmpy_glue_call(cmpy_state *st, cmpy_glue_fn fn, PyObject *stream);

extern PyMethodDef cmpy_callback_methods[];

#endif
