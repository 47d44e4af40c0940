/* stats.h: what cudamem knows about its memory use per device: current and
 * peak bytes (occupied and requested) and counts of each kind of
 * allocation, and how many were made and given up. A leaf: does not
 * allocate, free or call anything; the records (memory.c, hostmem.c,
 * hostpool.c) report to it, and oom.h's snapshot adds what the queues
 * and pools hold. */
#ifndef CM_STATS_H
#define CM_STATS_H

#include <stddef.h>
#include <stdint.h>

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

/* One kind on one device; read and written whole, under its device's
 * lock. Bytes are what the allocation occupies (page-rounded for
 * cudamem's pages, the whole block for the pool's); requested is what its
 * caller asked for. An allocation counts from its record's creation until
 * its free is handed to a queue (a pinned block: until it goes back to the
 * host pool). */
typedef struct cm_counts {
    size_t bytes, count, requested;
    /* Maxima since the last cm_stats_reset_peaks. */
    size_t peak_bytes, peak_count, peak_requested;
    /* Made and given up since the last cm_stats_reset_accumulated. */
    size_t allocations, frees;
} cm_counts;

typedef struct cm_stats {
    cm_counts kinds[CM_STAT_KINDS];
    size_t pending_bytes, pending_count; /* the memory queue's */
    int pending_deferred;
    size_t pool_cached_bytes; /* held by the pool, free for reuse */
    /* hostpool.h's, process-wide: page-locked blocks kept for reuse (not
     * in PINNED while cached). */
    size_t pinned_pool_cached_bytes, pinned_pool_cached_count;
    /* Device and managed bytes the driver holds for cudamem, and the
     * allocations memory.h's limit refused. */
    size_t held_bytes, oom_rejections;
} cm_stats;

/* Adds nbytes to *counter unless that would take it past limit (SIZE_MAX:
 * none): then -1, *seen what it counts, and nothing added. The check and
 * the addition are one atomic step (a compare-and-swap loop), so threads
 * racing at the limit cannot pass it together. */
static inline int
cm__count_within(size_t *counter, size_t nbytes, size_t limit, size_t *seen)
{
    size_t now = __atomic_load_n(counter, __ATOMIC_RELAXED);

    do {
        if (nbytes > limit || now > limit - nbytes) {
            *seen = now;
            return -1;
        }
    } while (!__atomic_compare_exchange_n(counter, &now, now + nbytes, 1,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return 0;
}

/* dev's counters of every kind, each read atomically. */
void cm__stats_read(struct cm_device *dev, cm_counts out[CM_STAT_KINDS]);
/* Every peak of dev back to its current value. */
void cm_stats_reset_peaks(struct cm_device *dev);
/* dev's allocations, frees and oom_rejections back to 0. */
void cm_stats_reset_accumulated(struct cm_device *dev);

/* memory.c, hostmem.c and hostpool.c: an allocation of nbytes, of which
 * its caller asked for `requested`, made or given up. One atomic
 * operation a counter, and a compare-and-swap loop for a peak raised. */
void cm__stats_add(struct cm_device *dev, cm_stat_kind kind, size_t nbytes,
                   size_t requested);
void cm__stats_sub(struct cm_device *dev, cm_stat_kind kind, size_t nbytes,
                   size_t requested);
/* hostpool.c: a cached block counted back in, without touching the peaks
 * and undoing the free counted when it was cached, just before
 * cm_host_free counts it out. */
void cm__stats_recount(struct cm_device *dev, cm_stat_kind kind, size_t nbytes,
                       size_t requested);

/* What the driver holds for cudamem on dev: device and managed memory,
 * pool slabs whole, queued frees until freed. memory.c adds nbytes
 * before asking the driver, unless that would take it past limit (0:
 * none): then -1, *held what it holds, and nothing added. A check and
 * its addition are one atomic step. */
int cm__stats_hold(struct cm_device *dev, size_t nbytes, size_t limit,
                   size_t *held);
/* Memory the driver freed or will not return (release.c, pool.c, and
 * memory.c for an allocation that failed). */
void cm__stats_unhold(struct cm_device *dev, size_t nbytes);
/* memory.c: an allocation the limit refused after recovery. */
void cm__stats_reject(struct cm_device *dev);
/* The two figures above, read atomically. */
void cm__stats_read_held(struct cm_device *dev, size_t *held,
                         size_t *rejections);

#endif
