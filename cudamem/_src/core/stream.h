/* stream.h: streams as core knows them: creating and destroying cudamem's
 * own (destruction goes through the device's object queue), and waiting on
 * or querying any handle in a device's context. The special handles 0,
 * CU_STREAM_LEGACY and CU_STREAM_PER_THREAD belong to no device. Owns no
 * record: the Python Stream object holds the handle and its generation. */
#ifndef CM_STREAM_H
#define CM_STREAM_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "context.h"

/* The handles that name a default stream in whatever context is current. */
static inline int
cm_stream_is_default(CUstream handle)
{
    return handle == NULL || handle == CU_STREAM_LEGACY ||
           handle == CU_STREAM_PER_THREAD;
}

/* The bucket of a stream handle in a table of n buckets (a power of two):
 * the live-stream table and the pool's per-stream free lists. Handles are
 * aligned pointers, so their bits are mixed (splitmix64's finalizer). */
static inline size_t
cm__stream_bucket(CUstream handle, size_t n)
{
    uint64_t h = (uint64_t)(uintptr_t)handle;

    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return (size_t)(h & (n - 1));
}

/* A new stream in dev's primary context. `flags` are cuStreamCreate's
 * (CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING); with `has_priority`,
 * cuStreamCreateWithPriority (the driver clamps the priority into its
 * range). Returns the device generation it was made in. */
int cm_stream_create(cm_device *dev, unsigned flags, int has_priority,
                     int priority, CUstream *out, uint64_t *generation,
                     cm_error *err);
/* Hands a stream made by cm_stream_create to dev's object queue
 * (cm__release); a stale generation drops it. Its record retires first:
 * when memory records still remember work on it, a cuStreamQuery says
 * whether that work is complete; if not, an event recorded after it
 * stands in for the handle (cm_mem_order_pending), which may be destroyed
 * and reused. On a failed query or event the stream is still released,
 * and its remembered work is ordered by a synchronize. */
int cm_stream_release(cm_device *dev, uint64_t generation, CUstream handle,
                      cm_error *err);
/* What a floor above must do first when one of dev's streams is released
 * (pool.c drops the stream's free list: cm__pool_stream_released), set
 * once before any such stream exists; NULL: nothing. */
typedef int (*cm_stream_release_hook)(cm_device *dev, uint64_t generation,
                                      CUstream stream, cm_error *err);
void cm__stream_set_release_hook(cm_stream_release_hook hook);

/* The record of one of cudamem's own streams, from cm_stream_create to
 * cm_stream_release, found by handle in a hash table: memory.c holds one
 * reference per remembered piece of work, so that a retired stream's work
 * is ordered by its own event, not by whether other streams died. */
typedef struct cm_stream_rec cm_stream_rec;
/* The live record of `handle` with a new reference, NULL for a default
 * handle or one cudamem did not make. O(1). */
cm_stream_rec *cm__stream_find(CUstream handle);
/* 1 while the stream is not released. Released: 0 with *ev the event
 * after its work, or NULL when that work was complete at the release
 * (or nothing remembered it); -1 (*ev NULL) when neither could be
 * learned (a failed query or event): only a synchronize of its context
 * orders it. */
int cm__stream_live(const cm_stream_rec *rec, CUevent *ev);
/* Drops a reference from cm__stream_find; the last one gives the event
 * back. */
int cm__stream_unref(cm_stream_rec *rec, cm_error *err);

/* cuStreamQuery in dev's context: *done 1 when all work is complete, 0 when
 * CUDA_ERROR_NOT_READY; any other code fails. */
int cm_stream_query(cm_device *dev, CUstream handle, int *done, cm_error *err);
/* cuStreamSynchronize in dev's context. Blocks without an end: py/ waits
 * with cm_stream_query so that Ctrl-C can interrupt. */
int cm_stream_synchronize(cm_device *dev, CUstream handle, cm_error *err);

/* The device whose primary context owns a foreign handle (cuStreamGetCtx);
 * CM_ERR_VALUE naming the handle when that context is not a primary one
 * cudamem knows. Default handles fail with CM_ERR_VALUE: they have none. */
int cm_stream_device(CUstream handle, cm_device **dev, cm_error *err);

/* cuCtxGetStreamPriorityRange in dev's context. */
int cm_stream_priority_range(cm_device *dev, int *least, int *greatest,
                             cm_error *err);

#endif
