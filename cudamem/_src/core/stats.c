/* stats.c: the per-device memory counters of stats.h, atomics in
 * cm_device, so that the records update them from any thread without a
 * lock. Calls nothing: the snapshot that adds the queues' and pools'
 * figures, and out-of-memory recovery, are oom.c's. */
#include "stats.h"

#include "context.h"

/* Raises *peak to at least value. */
static void
raise_peak(size_t *peak, size_t value)
{
    size_t seen = __atomic_load_n(peak, __ATOMIC_RELAXED);

    while (seen < value &&
           !__atomic_compare_exchange_n(peak, &seen, value, 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

void
cm__stats_add(cm_device *dev, cm_stat_kind kind, size_t nbytes,
              size_t requested)
{
    cm_counts *c = &dev->counts[kind];

    raise_peak(&c->peak_bytes,
               __atomic_add_fetch(&c->bytes, nbytes, __ATOMIC_RELAXED));
    raise_peak(&c->peak_count,
               __atomic_add_fetch(&c->count, 1, __ATOMIC_RELAXED));
    raise_peak(&c->peak_requested,
               __atomic_add_fetch(&c->requested, requested, __ATOMIC_RELAXED));
    __atomic_add_fetch(&c->allocations, 1, __ATOMIC_RELAXED);
}

void
cm__stats_sub(cm_device *dev, cm_stat_kind kind, size_t nbytes,
              size_t requested)
{
    cm_counts *c = &dev->counts[kind];

    __atomic_sub_fetch(&c->bytes, nbytes, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&c->count, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&c->requested, requested, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->frees, 1, __ATOMIC_RELAXED);
}

void
cm__stats_recount(cm_device *dev, cm_stat_kind kind, size_t nbytes,
                  size_t requested)
{
    cm_counts *c = &dev->counts[kind];

    __atomic_add_fetch(&c->bytes, nbytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->count, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->requested, requested, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&c->frees, 1, __ATOMIC_RELAXED);
}

void
cm__stats_read(cm_device *dev, cm_counts out[CM_STAT_KINDS])
{
    for (int k = 0; k < CM_STAT_KINDS; k++) {
        cm_counts *c = &dev->counts[k];

        out[k] = (cm_counts){
            .bytes = __atomic_load_n(&c->bytes, __ATOMIC_RELAXED),
            .count = __atomic_load_n(&c->count, __ATOMIC_RELAXED),
            .requested = __atomic_load_n(&c->requested, __ATOMIC_RELAXED),
            .peak_bytes = __atomic_load_n(&c->peak_bytes, __ATOMIC_RELAXED),
            .peak_count = __atomic_load_n(&c->peak_count, __ATOMIC_RELAXED),
            .peak_requested = __atomic_load_n(&c->peak_requested,
                                              __ATOMIC_RELAXED),
            .allocations = __atomic_load_n(&c->allocations, __ATOMIC_RELAXED),
            .frees = __atomic_load_n(&c->frees, __ATOMIC_RELAXED)};
    }
}

void
cm_stats_reset_peaks(cm_device *dev)
{
    for (int k = 0; k < CM_STAT_KINDS; k++) {
        cm_counts *c = &dev->counts[k];

        __atomic_store_n(&c->peak_bytes,
                         __atomic_load_n(&c->bytes, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&c->peak_count,
                         __atomic_load_n(&c->count, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&c->peak_requested,
                         __atomic_load_n(&c->requested, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
    }
}

void
cm_stats_reset_accumulated(cm_device *dev)
{
    for (int k = 0; k < CM_STAT_KINDS; k++) {
        __atomic_store_n(&dev->counts[k].allocations, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&dev->counts[k].frees, 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&dev->oom_rejections, 0, __ATOMIC_RELAXED);
}

int
cm__stats_hold(cm_device *dev, size_t nbytes, size_t limit, size_t *held)
{
    return cm__count_within(&dev->held_bytes, nbytes,
                            limit != 0 ? limit : SIZE_MAX, held);
}

void
cm__stats_unhold(cm_device *dev, size_t nbytes)
{
    __atomic_sub_fetch(&dev->held_bytes, nbytes, __ATOMIC_RELAXED);
}

void
cm__stats_reject(cm_device *dev)
{
    __atomic_add_fetch(&dev->oom_rejections, 1, __ATOMIC_RELAXED);
}

void
cm__stats_read_held(cm_device *dev, size_t *held, size_t *rejections)
{
    *held = __atomic_load_n(&dev->held_bytes, __ATOMIC_RELAXED);
    *rejections = __atomic_load_n(&dev->oom_rejections, __ATOMIC_RELAXED);
}
