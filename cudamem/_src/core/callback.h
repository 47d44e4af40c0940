/* callback.h: stream callbacks with no Python on the driver's thread
 * (DESIGN rule 7). The driver calls a pure C trampoline that only queues
 * (payload, status); one consumer, py/'s dispatcher thread, takes them
 * off the queue and says when each has run, so that exit can wait for
 * every callback added. Owns the queue; never looks inside a payload. */
#ifndef CM_CALLBACK_H
#define CM_CALLBACK_H

#include <cuda.h>

#include "context.h"

/* cuStreamAddCallback on `stream` (any handle of dev's context, default
 * ones included): once the work queued before it is done, `payload` and
 * the stream's status are queued for cm_callback_next. On failure nothing
 * was queued and the payload is still the caller's; on success it belongs
 * to whoever takes it off the queue. */
int cm_callback_add(cm_device *dev, CUstream stream, void *payload,
                    cm_error *err);

/* The next queued payload, in the order the driver ran the trampolines,
 * waiting up to timeout_ms for one: 1 with *payload and *status, 0 when
 * none came, -1 once stopped and empty. The payload taken counts as
 * running until cm_callback_done. Blocks: call it without the GIL. */
int cm_callback_next(long timeout_ms, void **payload, CUresult *status);

/* The dispatcher has run the payload it took last. */
void cm_callback_done(void);

/* Waits up to timeout_ms until every payload added has run (taken and
 * done): 0 once none is left, 1 when some still are. Blocks: call it
 * without the GIL. */
int cm_callback_drain(long timeout_ms);

typedef enum cm_callback_state {
    CM_CALLBACK_RUNNING,  /* taken by the dispatcher, not done */
    CM_CALLBACK_QUEUED,   /* its stream reached it; not taken yet */
    CM_CALLBACK_UNREACHED /* its stream has not reached it */
} cm_callback_state;

/* Calls visit(payload, state, ctx) for every payload that has not run:
 * the running one, then the queued and the unreached ones, each oldest
 * first. Under the queue's lock: `visit` must neither block nor add
 * callbacks (nor run code that might). */
void cm_callback_unfinished(void (*visit)(void *payload,
                                          cm_callback_state state, void *ctx),
                            void *ctx);

/* Makes cm_callback_next return -1 once the queue is empty, and wakes it.
 * Later payloads stay queued for good (interpreter exit: they leak). */
void cm_callback_stop(void);

#endif
