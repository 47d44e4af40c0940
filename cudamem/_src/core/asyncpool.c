/* asyncpool.c: the stream-ordered allocator (asyncpool.h): memory.c's
 * operations of CM_FREE_ASYNC records (cuMemAllocAsync on the record's
 * stream, cuMemFreeAsync on it, or on the legacy default stream once that
 * stream is released), the per-device switch, the limit on what its
 * allocations hold, and trim, release threshold and attributes of the
 * device's current pool. Keeps no pool of its own: the driver's is the
 * cache. */
#include "asyncpool.h"
#include "lockorder.h"

#include "device.h"
#include "driver.h"
#include "event.h"
#include "memory.h"
#include "stats.h"
#include "stream.h"

static int async_alloc(cm_mem *m, int wait, cm_error *err);
static int async_free(cm_mem *m, cm_error *err);
static int async_drop(cm_device *dev, int reset, cm_error *err);
static int async_relieve(cm_device *dev, cm_error *err);

/* What memory.c's stream-ordered records do (memory.h). */
static const cm_mem_ops async_ops = {
    .alloc = async_alloc,
    .release = async_free,
};

/* A teardown forgets the switch: the pool belonged to the context's
 * memory manager, and the next context's manager decides. A
 * Context.reset() is numba's reset() of the manager: a trim. */
static const cm_subsystem_ops async_subsystem = {
    .drop = async_drop,
    .relieve = async_relieve,
};

static int
async_drop(cm_device *dev, int reset, cm_error *err)
{
    (void)reset;
    (void)err;
    __atomic_store_n(&dev->async_on, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&dev->async_ipc, 0, __ATOMIC_RELEASE);
    return 0;
}

static int
async_relieve(cm_device *dev, cm_error *err)
{
    return cm__asyncpool_active(dev) ? cm_asyncpool_trim(dev, 0, err) : 0;
}

int
cm_asyncpool_enable(cm_device *dev, int enabled, cm_error *err)
{
    int supported = 0;

    if (cm_fork_check(err) < 0 ||
        (enabled &&
         cm_device_attribute(dev->ordinal,
                             CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                             &supported, err) < 0)) {
        return -1;
    }
    if (enabled) {
        if (!supported) {
            return cm__fail_fmt(err, CM_ERR_SUPPORT,
                                "device %d does not support stream-ordered "
                                "memory pools "
                                "(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED "
                                "is 0)",
                                dev->ordinal);
        }
        /* Before the switch, so before any record needs them. */
        cm__mem_set_async_ops(&async_ops);
        cm__subsystem_register(CM_SUB_ASYNCPOOL, &async_subsystem);
    }
    /* A manager starts on the device's pool: cm_asyncpool_set_ipc
     * switches it. */
    __atomic_store_n(&dev->async_ipc, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&dev->async_on, enabled != 0, __ATOMIC_RELEASE);
    return 0;
}

int
cm__asyncpool_active(cm_device *dev)
{
    return __atomic_load_n(&dev->async_on, __ATOMIC_ACQUIRE);
}

/* ---------------------------------------------------------------------
 * Allocation and free. */

const char cm_asyncpool_limit[] = "the stream-ordered pool's limit";

void
cm_asyncpool_set_limit(cm_device *dev, size_t limit)
{
    __atomic_store_n(&dev->async_limit, limit, __ATOMIC_RELAXED);
}

/* nbytes counted in what dev's stream-ordered allocations hold, within
 * their limit, and in the held bytes (the memory limit sees them as
 * device memory); or the refusal of either. */
static int
async_hold(cm_device *dev, size_t nbytes, cm_error *err)
{
    size_t limit = __atomic_load_n(&dev->async_limit, __ATOMIC_RELAXED);
    size_t held;

    if (cm__count_within(&dev->async_held, nbytes, limit, &held) < 0) {
        return cm__mem_refuse(dev, cm_asyncpool_limit, nbytes, limit, held,
                              err);
    }
    if (cm__mem_hold(dev, nbytes, err) < 0) {
        __atomic_sub_fetch(&dev->async_held, nbytes, __ATOMIC_RELAXED);
        return -1;
    }
    return 0;
}

static void
async_unhold(cm_device *dev, size_t nbytes)
{
    __atomic_sub_fetch(&dev->async_held, nbytes, __ATOMIC_RELAXED);
    cm__stats_unhold(dev, nbytes);
}

/* m's memory from its pool on m->stream, in dev's context. */
static int
alloc_in(cm_mem *m, cm_error *err)
{
    if (m->mempool != NULL) {
        return CM_CALL(err, cuMemAllocFromPoolAsync, &m->ptr, m->size,
                       m->mempool, m->stream);
    }
    return CM_CALL(err, cuMemAllocAsync, &m->ptr, m->size, m->stream);
}

/* cuMemAllocAsync (or cuMemAllocFromPoolAsync from the exportable pool)
 * of m->size bytes on m->stream, counted (async_hold), and a reference to
 * the stream's record, which tells the free whether the handle is still
 * good. */

static int
async_alloc(cm_mem *m, int wait, cm_error *err)
{
    cm_device *dev = m->dev;
    cm_ctx_guard guard;

    (void)wait; /* cuMemAllocAsync returns at once */
    if (async_hold(dev, m->size, err) < 0) {
        return -1;
    }
    /* The exportable pool once cm_asyncpool_set_ipc made it current. */
    m->mempool = __atomic_load_n(&dev->async_ipc, __ATOMIC_ACQUIRE)
                     ? dev->ipc_pool
                     : NULL;
    if (cm_ctx_enter(dev, &guard, err) < 0 ||
        cm_ctx_leave(&guard, alloc_in(m, err), err) < 0) {
        /* Memory made but the context not left: its release unholds. */
        if (m->ptr == 0) {
            async_unhold(dev, m->size);
        }
        return -1;
    }
    m->srec = cm__stream_find(m->stream);
    return 0;
}

/* Orders `into` after the work a released stream left (its event, or the
 * whole context when nothing recorded it) and after every other stream's
 * work remembered on m, then queues the free on it. In dev's context. */
static int
free_ordered(cm_mem *m, int state, CUevent ev, CUstream into, cm_error *err)
{
    int ordered;

    if ((state == 0 && ev != NULL &&
         cm_event_stream_wait(m->dev, into, ev, err) < 0) ||
        (state < 0 && CM_CALL0(err, cuCtxSynchronize) < 0) ||
        cm_mem_order_pending(m, into, &ordered, err) < 0 ||
        CM_CALL(err, cuMemFreeAsync, m->ptr, into) < 0) {
        return -1;
    }
    __atomic_store_n(&m->dev->pool_frees, 1, __ATOMIC_RELAXED);
    return 0;
}

static int
current_generation(cm_device *dev, const cm_mem *m)
{
    return __atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE) ==
           m->generation;
}

/* The free of m's memory, ordered on its stream: cuMemFreeAsync there
 * while the stream lives (a default stream always does), else on the
 * legacy default stream after what the released stream's release
 * recorded. Memory of an older context went with it. A failed order or
 * free leaves the memory to the pool until the context goes. */
static int
async_free(cm_mem *m, cm_error *err)
{
    cm_device *dev = m->dev;
    struct cm_stream_rec *srec = m->srec;
    CUstream into = m->stream;
    cm_ctx_guard guard;
    cm_error later;
    CUevent ev = NULL;
    int state = 1, rc = 0;

    m->srec = NULL;
    async_unhold(dev, m->size);
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    if (srec != NULL) {
        state = cm__stream_live(srec, &ev);
    }
    if (state != 1) {
        into = CU_STREAM_LEGACY;
    }
    /* Memory of an older generation went with its context: no enter
     * (which would retain a context a close() released). The hold keeps
     * the generation from the enter to the leave, since a teardown waits
     * for every hold, so the check is made again inside. */
    if (current_generation(dev, m)) {
        if (cm_ctx_enter(dev, &guard, err) == 0) {
            rc = cm_ctx_leave(&guard,
                              current_generation(dev, m)
                                  ? free_ordered(m, state, ev, into, err)
                                  : 0,
                              err);
        }
        else if (err->kind != CM_ERR_STATE) {
            rc = -1;
        } /* else torn down meanwhile: the memory goes with the context */
    }
    if (srec != NULL && cm__stream_unref(srec, rc < 0 ? &later : err) < 0) {
        rc = -1;
    }
    return rc;
}

/* ---------------------------------------------------------------------
 * The pool: trim, release threshold, attributes. */

/* The pool dev's allocations draw from: the exportable one while
 * cm_asyncpool_set_ipc has it on, else the device's current pool (what
 * cuMemAllocAsync draws from). In dev's context. */
static int
current_pool(cm_device *dev, CUmemoryPool *pool, cm_error *err)
{
    if (__atomic_load_n(&dev->async_ipc, __ATOMIC_ACQUIRE)) {
        *pool = dev->ipc_pool;
        return 0;
    }
    return CM_CALL(err, cuDeviceGetMemPool, pool, dev->cudev);
}

int
cm_asyncpool_trim(cm_device *dev, size_t min_bytes, cm_error *err)
{
    CUmemoryPool pool;
    cm_ctx_guard guard;
    int rc;

    if (cm_fork_check(err) < 0 || cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    /* Frees still queued on streams return their memory only once they
     * run. */
    rc = CM_CALL0(err, cuCtxSynchronize) < 0 ||
                 current_pool(dev, &pool, err) < 0 ||
                 CM_CALL(err, cuMemPoolTrimTo, pool, min_bytes) < 0
             ? -1
             : 0;
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_asyncpool_set_release_threshold(cm_device *dev, uint64_t nbytes,
                                   cm_error *err)
{
    cuuint64_t value = nbytes;
    CUmemoryPool pool;
    cm_ctx_guard guard;
    int rc;

    if (cm_fork_check(err) < 0 || cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    rc = current_pool(dev, &pool, err) < 0 ||
                 CM_CALL(err, cuMemPoolSetAttribute, pool,
                         CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value) < 0
             ? -1
             : 0;
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_asyncpool_get_stats(cm_device *dev, cm_asyncpool_stats *out, cm_error *err)
{
    static const CUmemPool_attribute attrs[] = {
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
        CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
        CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
        CU_MEMPOOL_ATTR_USED_MEM_HIGH};
    cuuint64_t values[5] = {0};
    CUmemoryPool pool;
    cm_ctx_guard guard;
    int rc = 0;

    if (cm_fork_check(err) < 0 || cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    if (current_pool(dev, &pool, err) < 0) {
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < sizeof(attrs) / sizeof(*attrs); i++) {
        if (CM_CALL(err, cuMemPoolGetAttribute, pool, attrs[i], &values[i]) <
            0) {
            rc = -1;
        }
    }
    if (cm_ctx_leave(&guard, rc, err) < 0) {
        return -1;
    }
    *out = (cm_asyncpool_stats){
        .enabled = cm__asyncpool_active(dev),
        .limit = __atomic_load_n(&dev->async_limit, __ATOMIC_RELAXED),
        .held_bytes = __atomic_load_n(&dev->async_held, __ATOMIC_RELAXED),
        .release_threshold = values[0],
        .reserved_current = values[1],
        .reserved_high = values[2],
        .used_current = values[3],
        .used_high = values[4]};
    return 0;
}

/* ---------------------------------------------------------------------
 * The exportable pool (IPC). */

/* Caller holds dev->qlock, in dev's context, async_ipc off: makes dev's
 * exportable pool, gives it the current pool's release threshold and
 * exports its descriptor. A pool made is kept whatever fails after, and
 * the rest tried again next time. */
static int
ipc_pool_make(cm_device *dev, cm_error *err)
{
    CUmemPoolProps props = {
        .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
        .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev->ordinal}};
    CUmemoryPool pool, current;
    cuuint64_t threshold;
    int fd;

    if (dev->ipc_pool == NULL) {
        if (CM_CALL(err, cuMemPoolCreate, &pool, &props) < 0) {
            return -1;
        }
        dev->ipc_pool = pool;
    }
    if (current_pool(dev, &current, err) < 0 ||
        CM_CALL(err, cuMemPoolGetAttribute, current,
                CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) < 0 ||
        CM_CALL(err, cuMemPoolSetAttribute, dev->ipc_pool,
                CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) < 0 ||
        CM_CALL(err, cuMemPoolExportToShareableHandle, &fd, dev->ipc_pool,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) < 0) {
        return -1;
    }
    dev->ipc_fd = fd;
    dev->ipc_ready = 1;
    return 0;
}

int
cm_asyncpool_set_ipc(cm_device *dev, int enabled, cm_error *err)
{
    cm_ctx_guard guard;
    int types = 0, rc = 0;

    if (cm_fork_check(err) < 0 ||
        (enabled &&
         cm_device_attribute(
             dev->ordinal, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
             &types, err) < 0)) {
        return -1;
    }
    if (!enabled) {
        __atomic_store_n(&dev->async_ipc, 0, __ATOMIC_RELEASE);
        return 0;
    }
    if (!(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        return cm__fail_fmt(err, CM_ERR_SUPPORT,
                            "device %d's memory pools cannot be shared with "
                            "other processes: "
                            "CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_"
                            "TYPES is %d, without POSIX file descriptors",
                            dev->ordinal, types);
    }
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    /* qlock: two threads must not both make the pool. */
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    if (!dev->ipc_ready) {
        rc = ipc_pool_make(dev, err);
    }
    cm__unlock(&dev->qlock);
    if (cm_ctx_leave(&guard, rc, err) < 0) {
        return -1;
    }
    __atomic_store_n(&dev->async_ipc, 1, __ATOMIC_RELEASE);
    return 0;
}

int
cm_asyncpool_exportable(const cm_mem *m)
{
    return m->kind == CM_FREE_ASYNC && m->mempool != NULL;
}

int
cm_asyncpool_export(cm_mem *m, cm_asyncpool_export_data *out, cm_error *err)
{
    cm_ctx_guard guard;
    int rc;

    if (cm_fork_check(err) < 0 || cm_ctx_enter(m->dev, &guard, err) < 0) {
        return -1;
    }
    /* The allocation and the writes queued on it are done before another
     * process can use them. */
    rc = CM_CALL0(err, cuCtxSynchronize) < 0 ||
                 CM_CALL(err, cuMemPoolExportPointer, &out->data, m->ptr) < 0
             ? -1
             : 0;
    out->fd = m->dev->ipc_fd;
    return cm_ctx_leave(&guard, rc, err);
}
