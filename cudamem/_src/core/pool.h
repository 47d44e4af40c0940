/* pool.h: cudamem's device memory pool (PoolMemoryManager): per device, a
 * best-fit suballocator over whole cuMemAlloc slabs with split, coalesce,
 * per-stream free lists ordered across streams by events, a limit and
 * trim. Does not own the records (memory.c) nor any Python object. */
#ifndef CM_POOL_H
#define CM_POOL_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "context.h"

/* Blocks are multiples of this (cuMemAlloc's own guarantee). */
#define CM_POOL_ALIGN ((size_t)256)
/* Requests up to CM_POOL_SMALL bytes share slabs of CM_POOL_SLAB bytes;
 * larger ones get a slab of their own, rounded up to CM_POOL_SLAB (the
 * rest of it is split off for later requests). */
#define CM_POOL_SMALL ((size_t)1 << 20)
#define CM_POOL_SLAB ((size_t)2 << 20)

typedef struct cm_pool cm_pool;
typedef struct cm_pool_block cm_pool_block;

typedef struct cm_pool_stats {
    int enabled;
    size_t limit;          /* SIZE_MAX: none */
    size_t slabs;          /* cuMemAlloc allocations held */
    size_t slab_bytes;     /* their bytes */
    size_t used_blocks;    /* blocks handed out and not returned */
    size_t used_bytes;     /* their bytes (rounded to CM_POOL_ALIGN) */
    size_t free_blocks;    /* free blocks in the slabs */
    size_t cached_bytes;   /* slab_bytes - used_bytes */
    size_t pending_blocks; /* free blocks whose stream may still use them */
} cm_pool_stats;

/* Turns pooled allocation on or off for dev; the pool is made on the first
 * enable and kept (with its slabs) when disabled: blocks still in use
 * return to it, trim() frees what is free. */
int cm_pool_enable(cm_device *dev, int enabled, cm_error *err);

/* dev's pool while enabled, else NULL (py/'s pinned allocation asks). */
static inline cm_pool *
cm_pool_active(cm_device *dev)
{
    return __atomic_load_n(&dev->pool_on, __ATOMIC_ACQUIRE);
}

/* Waits for the stream work of every free block still pending on its
 * stream (its event, or the whole stream), then frees every slab that is
 * wholly free, and the pool's spare events. Blocks in use stay. A failed
 * wait is reported after what is idle is freed. */
int cm_pool_trim(cm_device *dev, cm_error *err);
/* Bytes free in the pool's slabs (0 without a pool). */
size_t cm__pool_cached_bytes(cm_device *dev);
/* Caps the pool's slab bytes (SIZE_MAX: no cap); a new slab beyond it
 * first frees the idle free slabs (without waiting), then fails with
 * CUDA_ERROR_OUT_OF_MEMORY whose call is cm_pool_limit (out-of-memory
 * recovery then waits and trims, and memory.c tries once more). Does not
 * shrink what is held. Makes the pool (disabled) if there is none. */
int cm_pool_set_limit(cm_device *dev, size_t limit, cm_error *err);
void cm_pool_get_stats(cm_device *dev, cm_pool_stats *out);
/* stream.c, when one of cudamem's streams made at `generation` is
 * released, before its handle goes to the object queue: drops the
 * stream's free list. Its blocks join the blocks of released streams,
 * each ordered by the event its free recorded (settled into the ready
 * list once complete); those without one wait for the stream first
 * (cuStreamSynchronize: its failure is reported, and they count as idle,
 * as the context is then unusable). O(1) without a list. */
int cm__pool_stream_released(cm_device *dev, uint64_t generation,
                             CUstream stream, cm_error *err);
/* The `call` of a request the limit refused: no driver call failed. */
extern const char cm_pool_limit[];

#endif
