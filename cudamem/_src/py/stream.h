/* stream.h (py/): the Stream type and the one parser of every `stream=`
 * argument in cudamem (DESIGN rule 8). Core's view of streams is
 * core/stream.h; this file owns the Python objects. */
#ifndef CMPY_STREAM_H
#define CMPY_STREAM_H

#include "module.h"

#include <stdint.h>

#include "../core/context.h"

typedef enum cmpy_stream_kind {
    CMPY_STREAM_DEFAULT = 0,    /* handle 0; int(s) == 0 */
    CMPY_STREAM_LEGACY = 1,     /* CU_STREAM_LEGACY; int(s) == 1 */
    CMPY_STREAM_PER_THREAD = 2, /* CU_STREAM_PER_THREAD; int(s) == 2 */
    CMPY_STREAM_OWNED,          /* made by stream(); destroyed via queue */
    CMPY_STREAM_EXTERNAL        /* external_stream(ptr); never destroyed */
} cmpy_stream_kind;

typedef struct cmpy_Stream {
    PyObject_HEAD
    cm_device *dev;      /* the context's device it was made in */
    uint64_t generation; /* the device's at creation (owned, external) */
    CUstream handle;
    cmpy_stream_kind kind;
    PyObject *weakreflist;
} cmpy_Stream;

/* What a `stream=` argument means for an operation on `dev`. */
typedef struct cmpy_stream_ref {
    CUstream handle;
    int async;     /* 0 only for the int 0: synchronous (rule 8) */
    PyObject *obj; /* borrowed: the argument, or NULL for 0 / None */
    /* 0 for a stream cudamem does not own (external_stream(), a foreign
     * __cuda_stream__): it may be destroyed at any time, so memory
     * records remember an event after its work, never its handle. */
    int owned;
} cmpy_stream_ref;

/* Parses `arg` for an operation on `dev` (NULL: the calling thread's
 * current device): 0 (and None, as numba), a cudamem Stream, or any object
 * whose __cuda_stream__() returns (0, handle). A Stream or foreign handle
 * of another device, a stale Stream (its device reset or closed), a
 * non-zero int (pointing at external_stream()) and anything else raise
 * TypeError / ValueError / CudaDriverError naming the value. 0 or -1. */
int cmpy_stream_arg(cmpy_state *st, PyObject *arg, cm_device *dev,
                    cmpy_stream_ref *out);
/* The same for a stream of any device, for what the driver allows across
 * contexts (a wait for an event): *dev is the device a default stream
 * means (0, None, handles 1 and 2) on entry, the stream's on return. */
int cmpy_stream_arg_any(cmpy_state *st, PyObject *arg, cm_device **dev,
                        cmpy_stream_ref *out);

/* A Stream object of `kind` (not OWNED) for a handle in dev's primary
 * context that cudamem does not own, as external_stream() makes. New
 * reference. */
PyObject *cmpy_stream_wrap(cmpy_state *st, cm_device *dev,
                           cmpy_stream_kind kind, CUstream handle);
/* A wait that polls, for streams and events: `query` says whether the
 * work is done (without blocking), `finish` is the driver's own completion
 * point, called once it is. Runs with the GIL released between polls,
 * spinning briefly, then sleeping up to a millisecond; a pending signal
 * handler that raises (Ctrl-C) ends it. 0, or -1 with an exception set. */
typedef int (*cmpy_poll_fn)(cm_device *dev, void *handle, int *done,
                            cm_error *err);
typedef int (*cmpy_finish_fn)(cm_device *dev, void *handle, cm_error *err);
int cmpy_wait_polled(cmpy_state *st, cm_device *dev, void *handle,
                     cmpy_poll_fn query, cmpy_finish_fn finish);

/* Waits for `handle` on `dev` with the GIL released, polling so that
 * Ctrl-C (any pending signal handler raising) interrupts the wait. 0, or
 * -1 with an exception set. */
int cmpy_stream_wait(cmpy_state *st, cm_device *dev, CUstream handle);

/* Installs (on) or removes core's poll hook for long staged copies
 * (core/staging.h): pending signal handlers run between chunks, and one
 * that raises (Ctrl-C) ends the copy with that exception, reported as
 * CM_ERR_INTERRUPTED. */
void cmpy_poll_install(int on);

/* Waits for all work in dev's primary context (of `generation`). On the
 * main thread an idle context answers a probe at once; else its
 * cuCtxSynchronize runs on a thread of its own (core/ctxsync.h) while
 * this polls, so that Ctrl-C interrupts the wait. 0, or -1 with an
 * exception set. */
int cmpy_ctx_wait(cmpy_state *st, cm_device *dev, uint64_t generation);

/* py/stream.c: creates StreamType in the module state; 0 or -1. */
int cmpy_stream_type_init(PyObject *module, cmpy_state *st);
extern PyMethodDef cmpy_stream_methods[];

#endif
