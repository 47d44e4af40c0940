/* pending.h: numba's deferred deallocation, in C. A queue of frees that
 * flushes on numba's count and byte thresholds, can be deferred (nesting),
 * reports failed frees without losing the rest, and stops at shutdown.
 * Knows nothing of contexts or of how a handle is freed: the owner passes a
 * free function. Takes no lock: the owner serializes every call on a queue
 * with a recursive lock of its own (release.c: the device's qlock), held
 * across a flush, whose free function may call back into the queue. One
 * lock per release rather than two nested ones. */
#ifndef CM_PENDING_H
#define CM_PENDING_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum cm_free_kind {
    CM_FREE_DEVICE = 1,  /* cuMemFree */
    CM_FREE_HOST,        /* cuMemFreeHost */
    CM_FREE_MANAGED,     /* cuMemFree of managed memory */
    CM_FREE_IPC,         /* cuIpcCloseMemHandle */
    CM_FREE_STREAM,      /* cuStreamDestroy */
    CM_FREE_EVENT,       /* cuEventDestroy */
    CM_FREE_EXTERNAL,    /* memory owned by an EMM plugin: its release hook */
    CM_FREE_POOL,        /* a block of the device's pool: returned to it */
    CM_FREE_ASYNC,       /* the driver's pool: cuMemFreeAsync on its stream */
    CM_FREE_POOL_IMPORT, /* imported from another process's pool: cuMemFree */
    CM_FREE_NONE         /* memory another library owns: never freed here */
} cm_free_kind;

/* Frees one queued item; 0, or -1 with err filled. `arg` is the queue's. */
typedef int (*cm_free_fn)(void *arg, cm_free_kind kind, uint64_t handle,
                          size_t nbytes, cm_error *err);

typedef struct cm_pending cm_pending;

/* The thresholds, read once per process from CUDAMEM_MAX_PENDING_DEALLOCS_
 * COUNT (default 10) and CUDAMEM_MAX_PENDING_DEALLOCS_RATIO (default 0.2),
 * or numba's NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT / _RATIO when cudamem's
 * are unset. A malformed value fails with CM_ERR_VALUE naming it. */
int cm__pending_limits(size_t *max_count, double *max_ratio, cm_error *err);

/* A queue for a device with `device_memory` bytes. NULL on failure. */
cm_pending *cm__pending_new(size_t device_memory, cm_free_fn fn, void *arg,
                            cm_error *err);
/* Frees nothing: call cm__pending_flush or cm__pending_drop first. */
void cm__pending_delete(cm_pending *q);
/* The byte limit for a device with `device_memory` bytes, as
 * cm__pending_new sets it; what is queued and deferred stays. */
int cm__pending_resize(cm_pending *q, size_t device_memory, cm_error *err);

/* Queues a free; then flushes when the count or the bytes pending exceed
 * (strictly) the limits, unless deferred, or, when `due` is not NULL,
 * sets *due to 1 for the caller to flush. The item is queued even when that
 * flush fails (-1: a failed free was reported in err), except on
 * CM_ERR_NOMEM: then nothing was queued and the caller still owns the
 * handle. After
 * cm__pending_shutdown it frees nothing and returns 0: at interpreter exit
 * later releases leak on purpose. */
int cm__pending_add(cm_pending *q, cm_free_kind kind, uint64_t handle,
                    size_t nbytes, int *due, cm_error *err);
/* Frees every queued item, unless deferred. A failed free stops the flush:
 * that item is dropped (it cannot be retried safely) and reported, the rest
 * stay queued for the next flush. */
int cm__pending_flush(cm_pending *q, cm_error *err);
/* Forgets every queued item without freeing (their context is gone). */
void cm__pending_drop(cm_pending *q);
/* Empties the queue as cm__pending_drop does, handing each item in order
 * (unlocked, deferral or not) to `salvage`, which frees what outlives the
 * context and ignores the rest. Every item is handed over; the first
 * failure is reported. */
int cm__pending_salvage(cm_pending *q, cm_free_fn salvage, void *arg,
                        cm_error *err);

/* defer_cleanup(): nests; while deferred nothing flushes, and leaving does
 * not flush. */
void cm__pending_defer(cm_pending *q);
void cm__pending_undefer(cm_pending *q);
int cm__pending_deferred(const cm_pending *q);

size_t cm__pending_count(const cm_pending *q);
size_t cm__pending_bytes(const cm_pending *q);

/* Flushes once (failures reported through err), then stops queueing. */
int cm__pending_shutdown(cm_pending *q, cm_error *err);

#endif
