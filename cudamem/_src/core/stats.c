/* stats.c: the per-device memory counters of stats.h and out-of-memory
 * recovery. Counters are atomics in cm_device, so that the
 * records update them from any thread without a lock. Does not know
 * Python: the garbage collector is the hook's business. */
#include "stats.h"

#include "context.h"
#include "driver.h"
#include "hostpool.h"
#include "pool.h"
#include "release.h"

static cm_oom_hook oom_hook;

void
cm_oom_set_hook(cm_oom_hook hook)
{
    __atomic_store_n(&oom_hook, hook, __ATOMIC_RELEASE);
}

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
cm__stats_add(cm_device *dev, cm_stat_kind kind, size_t nbytes)
{
    cm_counts *c = &dev->counts[kind];

    raise_peak(&c->peak_bytes,
               __atomic_add_fetch(&c->bytes, nbytes, __ATOMIC_RELAXED));
    raise_peak(&c->peak_count,
               __atomic_add_fetch(&c->count, 1, __ATOMIC_RELAXED));
}

void
cm__stats_sub(cm_device *dev, cm_stat_kind kind, size_t nbytes)
{
    cm_counts *c = &dev->counts[kind];

    __atomic_sub_fetch(&c->bytes, nbytes, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&c->count, 1, __ATOMIC_RELAXED);
}

void
cm__stats_recount(cm_device *dev, cm_stat_kind kind, size_t nbytes)
{
    cm_counts *c = &dev->counts[kind];

    __atomic_add_fetch(&c->bytes, nbytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->count, 1, __ATOMIC_RELAXED);
}

void
cm_stats_get(cm_device *dev, cm_stats *out)
{
    cm_hostpool_stats host;

    for (int k = 0; k < CM_STAT_KINDS; k++) {
        cm_counts *c = &dev->counts[k];

        out->kinds[k] = (cm_counts){
            .bytes = __atomic_load_n(&c->bytes, __ATOMIC_RELAXED),
            .count = __atomic_load_n(&c->count, __ATOMIC_RELAXED),
            .peak_bytes = __atomic_load_n(&c->peak_bytes, __ATOMIC_RELAXED),
            .peak_count = __atomic_load_n(&c->peak_count, __ATOMIC_RELAXED)};
    }
    cm_queue_stats(dev, CM_QUEUE_MEMORY, &out->pending_count,
                   &out->pending_bytes, &out->pending_deferred);
    out->pool_cached_bytes = cm_pool_cached_bytes(dev);
    cm_hostpool_get_stats(&host);
    out->pinned_pool_cached_bytes = host.cached_bytes;
    out->pinned_pool_cached_count = host.cached_blocks;
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
    }
}

static int
is_oom(const cm_error *err)
{
    return err->kind == CM_ERR_DRIVER &&
           err->code == CUDA_ERROR_OUT_OF_MEMORY;
}

int
cm__oom_recover(cm_device *dev, const cm_error *err)
{
    cm_oom_hook hook = __atomic_load_n(&oom_hook, __ATOMIC_ACQUIRE);
    cm_error ignored;

    if (!is_oom(err)) {
        return 0;
    }
    /* The collector first, so that the frees of what it finds are
     * flushed with the rest. A failed flush or trim is not the caller's
     * error: the allocation's is. */
    if (hook != NULL) {
        hook();
    }
    (void)cm_queue_flush(dev, CM_QUEUE_MEMORY, &ignored);
    /* Waits for blocks freed on streams with queued work: memory that
     * is only waiting is not out of reach (PyTorch's caching allocator
     * synchronizes too before it frees its cache on out-of-memory). */
    (void)cm_pool_trim(dev, &ignored);
    /* Cached page-locked blocks are host memory the driver holds. */
    (void)cm_hostpool_trim(&ignored);
    return 1;
}

void
cm__oom_mark(cm_device *dev, size_t nbytes, cm_error *err)
{
    if (is_oom(err)) {
        err->oom_dev = dev;
        err->oom_bytes = nbytes;
    }
}

int
cm_oom_info(cm_device *dev, size_t *free_bytes, size_t *total_bytes,
            size_t *pending, size_t *pool_cached_bytes, cm_error *err)
{
    uint64_t generation;
    CUcontext ctx;
    size_t count;
    int deferred;

    if (cm_device_primary(dev, &ctx, &generation, err) < 0 ||
        cm_ctx_meminfo(dev, generation, free_bytes, total_bytes, err) < 0) {
        return -1;
    }
    cm_queue_stats(dev, CM_QUEUE_MEMORY, &count, pending, &deferred);
    *pool_cached_bytes = cm_pool_cached_bytes(dev);
    return 0;
}
