/* callback.h: stream callbacks with no Python on the driver's thread
 * (DESIGN rule 7). The driver calls a pure C trampoline that only queues
 * (payload, status); one consumer, py/'s dispatcher thread, takes them
 * off the queue. Owns the queue; never looks inside a payload. */
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
 * none came, -1 once stopped and empty. Blocks: call it without the GIL. */
int cm_callback_next(long timeout_ms, void **payload, CUresult *status);

/* Makes cm_callback_next return -1 once the queue is empty, and wakes it.
 * Later payloads stay queued for good (interpreter exit: they leak). */
void cm_callback_stop(void);

#endif
