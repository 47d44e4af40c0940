/* ctxsync.h: a context synchronize the caller can poll. cuCtxSynchronize
 * has no query form, so it runs on another thread while the caller polls
 * the job; a caller that stops waiting (Ctrl-C) releases its
 * reference and the thread frees the job when the synchronize returns.
 * An idle context needs neither: cuCtxRecordEvent and cuEventQuery say
 * so without a wait (cm_ctx_sync_idle). */
#ifndef CM_CTXSYNC_H
#define CM_CTXSYNC_H

#include <stdint.h>

#include "context.h"

typedef struct cm_ctx_sync cm_ctx_sync;

/* *idle 1 when every stream of dev's primary context (of `generation`)
 * has finished its work, by cuCtxRecordEvent into an event of the
 * device's and cuEventQuery, then, after cudamem's stream-ordered frees,
 * cuCtxSynchronize, which returns at once and gives back pool memory
 * over its threshold. *idle 0 when work is pending, when the driver has no
 * cuCtxRecordEvent (before CUDA 12.5), when another thread is probing
 * the device, or when the probe failed: the caller synchronizes, and
 * reports what that says. -1 only when the context cannot be entered.
 * Like cuCtxSynchronize, the probe invalidates any capture in the
 * context (and is refused). */
int cm_ctx_sync_idle(cm_device *dev, uint64_t generation, int *idle,
                     cm_error *err);
/* Makes the probe's event now if cudamem holds dev's primary context and
 * the driver has cuCtxRecordEvent, so that the first synchronize() does
 * not add a driver object: for callers that compare the driver's live
 * objects before and after (cudamem.testing.quiesce). The event lives as
 * long as the context. */
int cm_ctx_sync_prepare(cm_device *dev, cm_error *err);

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
