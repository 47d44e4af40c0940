/* ctxsync.h: a context synchronize the caller can poll. cuCtxSynchronize
 * has no query form, so it runs on another thread while the caller polls
 * the job; a caller that stops waiting (Ctrl-C) releases its
 * reference and the thread frees the job when the synchronize returns. */
#ifndef CM_CTXSYNC_H
#define CM_CTXSYNC_H

#include <stdint.h>

#include "context.h"

typedef struct cm_ctx_sync cm_ctx_sync;

/* Starts cuCtxSynchronize of dev's primary context (of `generation`,
 * checked here first) on a thread that has every signal blocked. */
int cm_ctx_sync_start(cm_device *dev, uint64_t generation, cm_ctx_sync **out,
                      cm_error *err);
/* *done 1 once the synchronize has returned. `job` is a cm_ctx_sync (the
 * signature is py/'s polled-wait callback's). */
int cm_ctx_sync_query(cm_device *dev, void *job, int *done, cm_error *err);
/* Once done: the synchronize's result, its error in err (a sticky one has
 * poisoned the device already). */
int cm_ctx_sync_finish(cm_device *dev, void *job, cm_error *err);
/* Gives up the caller's reference. */
void cm_ctx_sync_release(cm_ctx_sync *job);

/* cuCtxSynchronize of dev's primary context (of `generation`) on the
 * calling thread, for a caller that has nothing to poll for (a thread
 * that runs no signal handler): no hand-off, and no way to stop early. */
int cm_ctx_sync_here(cm_device *dev, uint64_t generation, cm_error *err);

#endif
