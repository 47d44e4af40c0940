/* oom.c: memory pressure across the subsystems (oom.h): the snapshot of
 * stats.h's counters with the queues' and pools' figures, and
 * out-of-memory recovery, which it installs for the records below when
 * the library loads. Does not know Python: the garbage collector is the
 * hook's business. */
#include "oom.h"

#include "asyncpool.h"
#include "context.h"
#include "hostpool.h"
#include "pool.h"
#include "release.h"

static cm_oom_hook oom_hook;

void
cm_oom_set_hook(cm_oom_hook hook)
{
    __atomic_store_n(&oom_hook, hook, __ATOMIC_RELEASE);
}

void
cm_stats_get(cm_device *dev, cm_stats *out)
{
    cm_hostpool_stats host;

    cm__stats_read(dev, out->kinds);
    cm_queue_stats(dev, CM_QUEUE_MEMORY, &out->pending_count,
                   &out->pending_bytes, &out->pending_deferred);
    out->pool_cached_bytes = cm__pool_cached_bytes(dev);
    cm_hostpool_get_stats(&host);
    out->pinned_pool_cached_bytes = host.cached_bytes;
    out->pinned_pool_cached_count = host.cached_blocks;
    cm__stats_read_held(dev, &out->held_bytes, &out->oom_rejections);
}

static void
recover(cm_device *dev)
{
    cm_oom_hook hook = __atomic_load_n(&oom_hook, __ATOMIC_ACQUIRE);
    cm_error ignored;

    /* The collector first, so that the frees of what it finds are
     * flushed with the rest. */
    if (hook != NULL) {
        hook();
    }
    (void)cm_queue_flush(dev, CM_QUEUE_MEMORY, &ignored);
    /* Waits for blocks freed on streams with queued work: memory that
     * is only waiting is not out of reach (PyTorch's caching allocator
     * synchronizes too before it frees its cache on out-of-memory). */
    (void)cm_pool_trim(dev, &ignored);
    /* The driver's pool keeps freed memory reserved for reuse. */
    if (cm__asyncpool_active(dev)) {
        (void)cm_asyncpool_trim(dev, 0, &ignored);
    }
    /* Cached page-locked blocks are host memory the driver holds. */
    (void)cm_hostpool_trim(&ignored);
}

/* Whatever links oom.c recovers: installed before any allocation can
 * run, without a call from above. */
__attribute__((constructor)) static void
install_recovery(void)
{
    cm__oom_set_recovery(recover);
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
    *pool_cached_bytes = cm__pool_cached_bytes(dev);
    return 0;
}
