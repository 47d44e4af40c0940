/* stats.c: the per-device memory counters of stats.h, in cm_device
 * under its spin lock, so that the records update them from any thread;
 * the held bytes and rejections are atomics. Calls nothing: the snapshot
 * that adds the queues' and pools' figures, and out-of-memory recovery,
 * are oom.c's. */
#include "stats.h"

#include <string.h>

#include "context.h"
#include "lockorder.h"

/* The counters change under the device's stats lock: one locked
 * instruction per update, where an atomic per field cost eight (a third of
 * a small allocation's time outside the driver), and a reader sees every
 * field of one instant. */
static void
counts_lock(cm_device *dev)
{
    cm__spin_lock(&dev->stats_lock, CM_LOCK_STATS);
}

static void
counts_unlock(cm_device *dev)
{
    cm__spin_unlock(&dev->stats_lock);
}

static void
raise_peaks(cm_counts *c)
{
    if (c->bytes > c->peak_bytes) {
        c->peak_bytes = c->bytes;
    }
    if (c->count > c->peak_count) {
        c->peak_count = c->count;
    }
    if (c->requested > c->peak_requested) {
        c->peak_requested = c->requested;
    }
}

void
cm__stats_add(cm_device *dev, cm_stat_kind kind, size_t nbytes,
              size_t requested)
{
    cm_counts *c = &dev->counts[kind];

    counts_lock(dev);
    c->bytes += nbytes;
    c->count++;
    c->requested += requested;
    c->allocations++;
    raise_peaks(c);
    counts_unlock(dev);
}

void
cm__stats_sub(cm_device *dev, cm_stat_kind kind, size_t nbytes,
              size_t requested)
{
    cm_counts *c = &dev->counts[kind];

    counts_lock(dev);
    c->bytes -= nbytes;
    c->count--;
    c->requested -= requested;
    c->frees++;
    counts_unlock(dev);
}

void
cm__stats_recount(cm_device *dev, cm_stat_kind kind, size_t nbytes,
                  size_t requested)
{
    cm_counts *c = &dev->counts[kind];

    counts_lock(dev);
    c->bytes += nbytes;
    c->count++;
    c->requested += requested;
    c->frees--;
    counts_unlock(dev);
}

void
cm__stats_read(cm_device *dev, cm_counts out[CM_STAT_KINDS])
{
    counts_lock(dev);
    memcpy(out, dev->counts, sizeof(dev->counts));
    counts_unlock(dev);
}

void
cm_stats_reset_peaks(cm_device *dev)
{
    counts_lock(dev);
    for (int k = 0; k < CM_STAT_KINDS; k++) {
        cm_counts *c = &dev->counts[k];

        c->peak_bytes = c->bytes;
        c->peak_count = c->count;
        c->peak_requested = c->requested;
    }
    counts_unlock(dev);
}

void
cm_stats_reset_accumulated(cm_device *dev)
{
    counts_lock(dev);
    for (int k = 0; k < CM_STAT_KINDS; k++) {
        dev->counts[k].allocations = 0;
        dev->counts[k].frees = 0;
    }
    counts_unlock(dev);
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
