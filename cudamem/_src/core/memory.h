/* memory.h: device allocations as refcounted records (DESIGN rule 4): the
 * device and generation they belong to, their kind and size. The last
 * decref hands the free to release.c, or to the record's own operations
 * (cm_mem_ops: a pooled block back to pool.c, an IPC mapping's count under
 * ipc.c's lock); borrowed memory is never freed; memory an EMM plugin owns
 * goes to py/'s release hook. Views are the owner's business (py/): a
 * record is the whole allocation. */
#ifndef CM_MEMORY_H
#define CM_MEMORY_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "context.h"
#include "pending.h"

/* How many streams a record remembers work on (cm_mem_note_stream). */
#define CM_MEM_PENDING 4

/* Work on a record: a stream cudamem knows the lifetime of, with a
 * reference to its record (stream.h; NULL for a default stream's handle,
 * or one made without a record), which says whether it was released since
 * (its handle can then be reused) and what orders its work; or an event
 * recorded after work on a stream that cudamem does not own. `dev` is the
 * stream's device, which a copy across devices makes another than the
 * record's. */
typedef struct cm_mem_work {
    cm_device *dev;
    CUstream stream; /* NULL for an event */
    CUevent event;
    struct cm_stream_rec *rec;
    uint64_t mark; /* the event's generation */
} cm_mem_work;

typedef struct cm_mem cm_mem;
struct cm_pool_block;

/* What a record does in place of its kind's default (cuMemAlloc, the
 * release.c queue, an atomic decref), set by the file that made it, so
 * that memory.c calls none of the files above it. Any member may be
 * NULL: the default. */
typedef struct cm_mem_ops {
    /* pool.c, asyncpool.c: fills m->ptr (and what else the record keeps
     * for its release) with at least m->size (> 0) bytes for work on
     * m->stream, in m->dev's primary context at m->generation;
     * out-of-memory as cuMemAlloc's (cm_mem_alloc_from recovers and
     * retries). `wait` 0: the caller holds the GIL, so 1, with nothing
     * made, where only a call that can wait would make it (a pool's new
     * slab). */
    int (*alloc)(cm_mem *m, int wait, cm_error *err);
    /* Gives back m's memory (m->ptr != 0): the last decref,
     * cm_mem_release_now, or the undo of a failed allocation. */
    int (*release)(cm_mem *m, cm_error *err);
    /* Drops one of m's references: 1 when it was the last. */
    int (*unref)(cm_mem *m);
    /* The bytes m's new memory occupies (stats.h), m->size being what
     * its caller asked for: pool.c's block. */
    size_t (*occupied)(const cm_mem *m);
} cm_mem_ops;

struct cm_mem {
    int refs;              /* atomic */
    const cm_mem_ops *ops; /* NULL: every default */
    cm_free_kind kind;
    cm_device *dev;
    uint64_t generation;
    uint64_t resets; /* the device's reset count (managed memory) */
    CUdeviceptr ptr; /* 0 for a zero-size allocation */
    size_t size;
    size_t occupies; /* counted in stats.h (ops->occupied), else size */
    void *external;  /* CM_FREE_EXTERNAL: what the release hook gets */
    /* CM_FREE_POOL: the pool's block and the stream it was allocated for,
     * which orders its reuse. */
    struct cm_pool_block *block;
    CUstream stream;
    /* CM_FREE_ASYNC: asyncpool.c's reference to the record of `stream`
     * (NULL for a default stream's handle or one cudamem did not make). */
    struct cm_stream_rec *srec;
    /* CM_FREE_ASYNC: the exportable pool it came from (asyncpool.h's
     * cm_asyncpool_set_ipc); NULL for the device's current pool. */
    CUmemoryPool mempool;
    /* Borrowed read-only (a producer's flag): writes through any array or
     * view over the record are refused. */
    int readonly;
    /* Freed by cm_mem_release_now while referenced (atomic). */
    int released;
    /* Asynchronous work queued on the memory that an export has not
     * ordered yet, oldest first (cm_mem_note_stream, cm_mem_note_event):
     * the first npending of `pending`, last so that a new record leaves
     * the rest unset (cm__mem_init); `plock` is a spin lock guarding
     * them. */
    int npending;
    char plock;
    cm_mem_work pending[CM_MEM_PENDING];
};

/* Sets every field of a new record but the work set, which npending 0
 * keeps unread, to one reference of `kind` and zero: a whole-record
 * initializer zeroed the set's 160 bytes too, with a `rep stos` whose
 * start-up cost more than these stores. tests/rules checks that every
 * field before the set is here. */
static inline void
cm__mem_init(cm_mem *m, cm_free_kind kind, const cm_mem_ops *ops,
             cm_device *dev, uint64_t generation, CUdeviceptr ptr, size_t size)
{
    m->refs = 1;
    m->ops = ops;
    m->kind = kind;
    m->dev = dev;
    m->generation = generation;
    m->resets = 0;
    m->ptr = ptr;
    m->size = size;
    m->occupies = 0;
    m->external = NULL;
    m->block = NULL;
    m->stream = NULL;
    m->srec = NULL;
    m->mempool = NULL;
    m->readonly = 0;
    m->released = 0;
    m->npending = 0;
    m->plock = 0;
}

/* Remembers that asynchronous work is about to be queued on m on
 * `stream` of `dev` (m's device, or another for a copy across devices), a
 * stream whose retirement cm_stream_release marks (cudamem's own, or a
 * default stream's CU_STREAM_LEGACY / CU_STREAM_PER_THREAD; not handle
 * 0). When the set is full the oldest work is ordered before `stream` at
 * once, so that waiting for `stream` covers it. 0, or -1 with err filled
 * (nothing remembered). */
int cm_mem_note_stream(cm_mem *m, cm_device *dev, CUstream stream,
                       cm_error *err);
/* The same for a stream cudamem does not own, which may be destroyed at
 * any time: called after the work is queued, it records an event on
 * `stream` (in dev's context) instead of remembering the handle. */
int cm_mem_note_event(cm_mem *m, cm_device *dev, CUstream stream,
                      cm_error *err);
/* Orders `into` (the exporter's stream on m's device; CU_STREAM_LEGACY
 * for the default one) after all remembered work but `into`'s own,
 * whichever device queued it, and forgets it: no
 * driver call when `into` is the only stream. A remembered stream released
 * since cannot be touched: `into` waits for the event its release
 * recorded, for nothing when its work was complete then (a synchronize of
 * its context when neither is known). *ordered
 * is how many waits were queued on `into`. On failure the work not yet
 * ordered stays remembered. */
int cm_mem_order_pending(cm_mem *m, CUstream into, int *ordered,
                         cm_error *err);

/* What the last decref of an external record runs: py/ installs it (the
 * one place core calls back into Python, DESIGN section 2), and external
 * records are only decref'd with the GIL held. `hook_arg` is the one given
 * to cm_mem_set_release_hook. */
typedef void (*cm_release_hook)(void *hook_arg, void *external);

/* Where an allocation starts (cm_mem_alloc_nowait says which). */
typedef enum cm_alloc_from {
    CM_ALLOC_FIRST,   /* the first try */
    CM_ALLOC_RECOVER, /* the first try failed, out of memory, as err says */
    CM_ALLOC_NOWAIT,  /* the first try, stopping before anything that waits */
} cm_alloc_from;

/* nbytes of device memory in dev's primary context for work on `stream`,
 * with one refcount: from dev's pool while it is enabled (kind
 * CM_FREE_POOL: the last decref returns the block to the pool at once,
 * not through the queue), else cuMemAlloc. On CUDA_ERROR_OUT_OF_MEMORY
 * oom.h's recovery runs (the garbage collector, a flush of the
 * device's memory queue unless deferred, a pool trim) and the allocation
 * is tried once more; a second failure is marked with cm__oom_mark.
 * Counted in stats.h's CM_STAT_DEVICE. nbytes 0 allocates nothing.
 * `from` is CM_ALLOC_FIRST, or what cm_mem_alloc_nowait left to do. */
int cm_mem_alloc_from(cm_device *dev, size_t nbytes, CUstream stream,
                      cm_alloc_from from, cm_mem **out, cm_error *err);
/* The same for a caller that must not wait for the device (it holds the
 * GIL): 0 with *out made, -1 with err filled, or 1 with nothing made when
 * the allocation can wait (cuMemAlloc, a pool's new slab, the recovery
 * from out-of-memory): then cm_mem_alloc_from(..., *then, ...), with the
 * same err, does the rest, where waiting is fine. Made here: a
 * stream-ordered allocation (cuMemAllocAsync returns at once, as
 * cuMemFreeAsync does), a pooled one from a free block, and an empty one
 * (no driver call). */
int cm_mem_alloc_nowait(cm_device *dev, size_t nbytes, CUstream stream,
                        cm_alloc_from *then, cm_mem **out, cm_error *err);
/* pool.c's slabs: one cuMemAlloc in dev's primary context (the recovery
 * on out-of-memory is cm_mem_alloc_from's, around the whole pool
 * allocation). */
int cm__mem_alloc_device(cm_device *dev, size_t nbytes, CUdeviceptr *ptr,
                         cm_error *err);
/* pool.c, when it makes a pool, before it can be turned on: the
 * operations of pooled records, whose alloc cm_mem_alloc_from uses while a
 * device's pool is on. */
void cm__mem_set_pool_ops(const cm_mem_ops *ops);
/* asyncpool.c's, the same for stream-ordered records (CM_FREE_ASYNC),
 * used while cm__asyncpool_active(dev). */
void cm__mem_set_async_ops(const cm_mem_ops *ops);
/* asyncpool.c: counts nbytes in dev's held bytes (stats.h), or fails as
 * the memory limit's refusal (cm_mem_limit_call); cm__stats_unhold gives
 * them back. */
int cm__mem_hold(cm_device *dev, size_t nbytes, cm_error *err);
/* Fills err with a limit's refusal of nbytes on dev: CUDA_ERROR_OUT_OF_MEMORY
 * of `call` (which limit), with the limit and the bytes it held; -1. */
int cm__mem_refuse(cm_device *dev, const char *call, size_t nbytes,
                   size_t limit, size_t held, cm_error *err);
/* cuMemAllocManaged of nbytes (CU_MEM_ATTACH_GLOBAL, or CU_MEM_ATTACH_HOST
 * without `attach_global`) in dev's primary context, with cm_mem_alloc_from's
 * recovery and retry (CM_STAT_MANAGED). The record (kind CM_FREE_MANAGED)
 * retains the primary context until its free has run, so the memory
 * outlives close(); a reset still frees it. CM_ERR_SUPPORT when the
 * device has no managed memory. */
int cm_mem_alloc_managed(cm_device *dev, size_t nbytes, int attach_global,
                         cm_mem **out, cm_error *err);
/* The memory limit of dev: device and managed memory the driver holds for
 * cudamem (stats.h's held bytes: pool slabs whole, frees still queued)
 * may not pass it. An allocation of cm_mem_alloc, cm_mem_alloc_managed or
 * a pool slab that would pass it fails, without a driver call, as
 * CUDA_ERROR_OUT_OF_MEMORY of the call cm_mem_limit_call, with the oom
 * fields, oom_limit and oom_held set; the usual recovery and retry
 * follow, and a second refusal counts in stats.h's rejections. Memory of
 * EMM plugins, borrowed memory and IPC mappings are not counted. */
extern const char cm_mem_limit_call[];
/* Sets dev's limit to `bytes`, or when `fraction` is above 0 to that
 * fraction (at most 1) of cuDeviceTotalMem rounded down, at least one
 * byte; bytes 0 and fraction 0: no limit. Memory held already stays. */
int cm_mem_set_limit(cm_device *dev, size_t bytes, double fraction,
                     cm_error *err);
/* dev's limit in bytes, 0 when none. */
size_t cm_mem_limit(cm_device *dev);
/* A record (one refcount, kind CM_FREE_NONE) for the `size` bytes at ptr
 * that another library allocated in dev's primary context: its last decref
 * frees the record only. Retains dev's primary context. */
int cm_mem_borrow(cm_device *dev, CUdeviceptr ptr, size_t size, cm_mem **out,
                  cm_error *err);
/* A record (one refcount, kind CM_FREE_EXTERNAL) for the `size` bytes at
 * ptr that an EMM plugin allocated in dev's primary context: its last
 * decref hands `external` to the release hook, which frees it. */
int cm_mem_external(cm_device *dev, CUdeviceptr ptr, size_t size,
                    void *external, cm_mem **out, cm_error *err);
/* Installs the release hook of external records (NULL: none, their
 * `external` then leaks, as releases do after shutdown). */
void cm_mem_set_release_hook(cm_release_hook hook, void *hook_arg);
/* The device that owns ptr and, when base is not NULL, the allocation it
 * lies in (base and size), from one cuPointerGetAttributes call in
 * whatever context is current, none included. Memory the driver does not
 * know fails with CM_ERR_VALUE naming the pointer. */
int cm_pointer_device(CUdeviceptr ptr, cm_device **dev, CUdeviceptr *base,
                      size_t *size, cm_error *err);
/* The allocation ptr lies in: its base and size (one
 * cuPointerGetAttributes call, in any context); 0 and 0 for memory the
 * driver does not know. */
int cm_pointer_range(CUdeviceptr ptr, CUdeviceptr *base, size_t *size,
                     cm_error *err);

/* Adds a reference to m, for a holder of one: a reference is only ever
 * made from another, which cm_mem_decref relies on. */
void cm_mem_incref(cm_mem *m);
/* Drops a reference; the last one queues the free (none for borrowed
 * memory; for an IPC mapping, its close: see ipc.h) and frees the
 * record.
 * -1: a queued free failed (reported in err); the record is gone anyway. */
int cm_mem_decref(cm_mem *m, cm_error *err);
/* Frees m's memory now, as its last decref would, while references
 * remain (numba's MemoryPointer.free()): from then on cm_mem_check
 * fails, and the last decref frees only the record. Nothing to do for
 * memory cudamem never frees (borrowed, IPC mappings) or freed already.
 * -1 for a failed free (its memory is gone anyway). */
int cm_mem_release_now(cm_mem *m, cm_error *err);
/* Fails with CM_ERR_STATE when the device was reset or closed since the
 * allocation (its memory is gone); for managed memory, only a reset;
 * and when cm_mem_release_now freed it. */
int cm_mem_check(const cm_mem *m, cm_error *err);

#endif
