/* stats.h: what cudamem knows about its memory use per device: current and
 * peak bytes and counts of each kind of allocation, and the out-of-memory
 * recovery that uses them. Does not allocate or free;
 * the records (memory.c, hostmem.c) report to it. */
#ifndef CM_STATS_H
#define CM_STATS_H

#include <stddef.h>

#include "status.h"

struct cm_device;

/* Allocations cudamem made. The caller's memory that cudamem page-locks
 * (registrations) is not an allocation and is not counted. */
typedef enum cm_stat_kind {
    CM_STAT_DEVICE = 0,     /* cuMemAlloc (arrays, temporaries) */
    CM_STAT_MANAGED,        /* cuMemAllocManaged */
    CM_STAT_PINNED,         /* cudamem's page-locked pages */
    CM_STAT_MAPPED,         /* the same, mapped to the device */
    CM_STAT_WRITE_COMBINED, /* cuMemHostAlloc, write-combined and mapped */
    CM_STAT_KINDS
} cm_stat_kind;

/* One kind on one device; read and written atomically. Bytes are what the
 * driver holds (page-rounded for cudamem's pages). An allocation counts
 * from its record's creation until its free is handed to a queue. */
typedef struct cm_counts {
    size_t bytes, count;
    size_t peak_bytes, peak_count; /* maxima since the last reset */
} cm_counts;

typedef struct cm_stats {
    cm_counts kinds[CM_STAT_KINDS];
    size_t pending_bytes, pending_count; /* the memory queue's */
    int pending_deferred;
    size_t pool_cached_bytes; /* held by the pool, free for reuse */
    /* hostpool.h's, process-wide: page-locked blocks kept for reuse (not
     * in PINNED while cached). */
    size_t pinned_pool_cached_bytes, pinned_pool_cached_count;
} cm_stats;

/* A snapshot of dev's counters, its memory queue, its pool and the host
 * pool. */
void cm_stats_get(struct cm_device *dev, cm_stats *out);
/* Every peak of dev back to its current value. */
void cm_stats_reset_peaks(struct cm_device *dev);

/* memory.c and hostmem.c: an allocation of nbytes made or given up. */
void cm__stats_add(struct cm_device *dev, cm_stat_kind kind, size_t nbytes);
void cm__stats_sub(struct cm_device *dev, cm_stat_kind kind, size_t nbytes);
/* hostpool.c: a cached block counted back in, without touching the peaks,
 * just before cm_host_free counts it out. */
void cm__stats_recount(struct cm_device *dev, cm_stat_kind kind,
                       size_t nbytes);

/* Out-of-memory recovery, DESIGN section 2's second sanctioned call into
 * Python: py/ installs a hook that runs the garbage collector, taking the
 * GIL itself (core may call it from code running without it); core holds
 * none of its locks and no pushed context when it calls it. */
typedef void (*cm_oom_hook)(void);
void cm_oom_set_hook(cm_oom_hook hook);

/* After a failed allocation on dev: when err is CUDA_ERROR_OUT_OF_MEMORY,
 * runs the recovery (the hook, a flush of dev's memory queue unless
 * deferred, a trim of dev's pool, which first waits for its free blocks
 * still pending on streams, and a trim of the host pool) and returns 1:
 * the caller tries once more, then calls cm__oom_mark. 0 for any other
 * error (err untouched). */
int cm__oom_recover(struct cm_device *dev, const cm_error *err);
/* Marks err, when it is out of memory, as the failure of an allocation
 * of nbytes on dev that recovery did not help (cm_error's oom fields). */
void cm__oom_mark(struct cm_device *dev, size_t nbytes, cm_error *err);

/* What an out-of-memory report gives: dev's free and total memory
 * (cuMemGetInfo in its primary context), bytes pending release and bytes
 * cached by the pool. */
int cm_oom_info(struct cm_device *dev, size_t *free_bytes,
                size_t *total_bytes, size_t *pending, size_t *pool_cached,
                cm_error *err);

#endif
