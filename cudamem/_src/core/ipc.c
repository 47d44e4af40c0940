/* ipc.c: exporting and opening IPC handles (ipc.h), and the process-wide
 * cache of open mappings that makes every open of a handle on a device
 * share one driver mapping. The mapping's close is release.c's (queued as
 * CM_FREE_IPC); the record's layout is memory.h's. */
#include "ipc.h"
#include "lockorder.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "release.h"

/* One open mapping: the handle it was opened from and its record, which
 * the entry does not own (the record's references do). */
typedef struct cache_entry {
    struct cache_entry *next;
    CUipcMemHandle handle;
    cm_mem *mem;
} cache_entry;

/* Guards the list and the transition of an IPC record's count to zero.
 * Taken before a device's locks, never after them. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry *cache;

static int ipc_unref(cm_mem *m);

/* An IPC record's count reaches zero under cache_lock (memory.h). */
static const cm_mem_ops mapping_ops = {.unref = ipc_unref};

/* Caller holds cache_lock. Mappings of an older generation are gone with
 * their context (their records only wait for their last owner). */
static cache_entry *
cache_find(cm_device *dev, uint64_t generation, const CUipcMemHandle *handle)
{
    for (cache_entry *e = cache; e != NULL; e = e->next) {
        if (e->mem->dev == dev && e->mem->generation == generation &&
            memcmp(e->handle.reserved, handle->reserved,
                   sizeof(handle->reserved)) == 0) {
            return e;
        }
    }
    return NULL;
}

static int
export_in(CUdeviceptr ptr, cm_ipc_export *out, cm_error *err)
{
    if (CM_CALL(err, cuMemGetAddressRange, &out->base, &out->size, ptr) < 0) {
        return -1;
    }
    return CM_CALL(err, cuIpcGetMemHandle, &out->handle, out->base);
}

int
cm_ipc_export_ptr(cm_device *dev, CUdeviceptr ptr, cm_ipc_export *out,
                  cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_fork_check(err) < 0 || cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(&guard, export_in(ptr, out, err), err);
}

/* Maps handle in the current context (dev's) and reads the mapping's
 * size; *ptr stays 0 unless the mapping was made and is still open. */
static int
map_in(const CUipcMemHandle *handle, CUdeviceptr *ptr, size_t *size,
       cm_error *err)
{
    CUdeviceptr base;
    cm_error ignored;

    if (CM_CALL(err, cuIpcOpenMemHandle, ptr, *handle,
                CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) < 0) {
        *ptr = 0;
        return -1;
    }
    if (CM_CALL(err, cuMemGetAddressRange, &base, size, *ptr) < 0) {
        (void)CM_CALL(&ignored, cuIpcCloseMemHandle, *ptr);
        *ptr = 0;
        return -1;
    }
    return 0;
}

/* Caller holds cache_lock: maps the handle and enters its record. */
static int
open_locked(cm_device *dev, uint64_t generation, const CUipcMemHandle *handle,
            cm_mem **out, cm_error *err)
{
    cache_entry *e = malloc(sizeof(*e));
    cm_mem *m = malloc(sizeof(*m));
    CUdeviceptr ptr = 0;
    size_t size = 0;
    cm_ctx_guard guard;
    cm_error ignored;
    int rc = -1;

    if (e == NULL || m == NULL) {
        cm_fail(err, CM_ERR_NOMEM, "out of host memory");
        goto done;
    }
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        goto done;
    }
    if (cm_ctx_leave(&guard, map_in(handle, &ptr, &size, err), err) < 0) {
        /* Made, but the pop failed: closed from the queue, as a failed
         * allocation is freed. */
        if (ptr != 0) {
            (void)cm__release(dev, generation, CM_FREE_IPC, ptr, size,
                              &ignored);
        }
        goto done;
    }
    *m = (cm_mem){.refs = 1,
                  .ops = &mapping_ops,
                  .kind = CM_FREE_IPC,
                  .dev = dev,
                  .generation = generation,
                  .ptr = ptr,
                  .size = size};
    e->handle = *handle;
    e->mem = m;
    e->next = cache;
    cache = e;
    *out = m;
    e = NULL;
    m = NULL;
    rc = 0;
done:
    free(e);
    free(m);
    return rc;
}

/* One try: the cached mapping, or a new one. */
static int
open_cached(cm_device *dev, uint64_t generation, const CUipcMemHandle *handle,
            cm_mem **out, cm_error *err)
{
    cache_entry *e;
    int rc = 0;

    /* Held across the driver calls: two threads opening one handle must
     * not both map it. */
    cm__lock(&cache_lock, CM_LOCK_IPC);
    e = cache_find(dev, generation, handle);
    if (e != NULL) {
        cm_mem_incref(e->mem);
        *out = e->mem;
    }
    else {
        rc = open_locked(dev, generation, handle, out, err);
    }
    cm__unlock(&cache_lock);
    return rc;
}

int
cm_ipc_open(cm_device *dev, const CUipcMemHandle *handle, cm_mem **out,
            cm_error *err)
{
    uint64_t generation;
    CUcontext ctx;

    if (cm_fork_check(err) < 0 ||
        cm_device_primary(dev, &ctx, &generation, err) < 0) {
        return -1;
    }
    if (open_cached(dev, generation, handle, out, err) == 0) {
        return 0;
    }
    /* This process's own mapping, closed but still queued: flushed
     * without the cache lock (a queued free may need other locks). */
    if (err->kind != CM_ERR_DRIVER || err->code != CUDA_ERROR_ALREADY_MAPPED ||
        !cm__queue_relieve(dev, CM_QUEUE_MEMORY)) {
        return -1;
    }
    return open_cached(dev, generation, handle, out, err);
}

/* memory.c's decref of a mapping's record: drops one reference under
 * cache_lock, so that no open can take the record as it dies. 1 when it
 * was the last (the record has left the cache), else 0. */
static int
ipc_unref(cm_mem *m)
{
    int last;

    cm__lock(&cache_lock, CM_LOCK_IPC);
    last = __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0;
    for (cache_entry **p = &cache; last && *p != NULL; p = &(*p)->next) {
        if ((*p)->mem == m) {
            cache_entry *e = *p;

            *p = e->next;
            free(e);
            break;
        }
    }
    cm__unlock(&cache_lock);
    return last;
}
