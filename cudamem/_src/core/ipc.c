/* ipc.c: exporting and opening IPC handles (ipc.h), importing pools and
 * their allocations, and the process-wide cache of open mappings that
 * makes every open of a handle (or of an allocation's export data) on a
 * device share one driver mapping. The mapping's close is release.c's
 * (queued as CM_FREE_IPC or CM_FREE_POOL_IMPORT); the record's layout is
 * memory.h's. */
#include "ipc.h"
#include "lockorder.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "release.h"

/* What a mapping is opened from: the 64 bytes of a cuIpcMemHandle
 * (pool NULL) or of an imported pool's export data. */
typedef struct ipc_key {
    CUmemoryPool pool;
    char bytes[CU_IPC_HANDLE_SIZE];
} ipc_key;

_Static_assert(sizeof(CUmemPoolPtrExportData) == CU_IPC_HANDLE_SIZE,
               "an allocation's export data is a key's 64 bytes");

/* One open mapping: what it was opened from and its record, which the
 * entry does not own (the record's references do). */
typedef struct cache_entry {
    struct cache_entry *next;
    ipc_key key;
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
cache_find(cm_device *dev, uint64_t generation, const ipc_key *key)
{
    for (cache_entry *e = cache; e != NULL; e = e->next) {
        if (e->mem->dev == dev && e->mem->generation == generation &&
            e->key.pool == key->pool &&
            memcmp(e->key.bytes, key->bytes, sizeof(key->bytes)) == 0) {
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

/* The kind of a mapping's record: how it is closed. */
static cm_free_kind
kind_of(const ipc_key *key)
{
    return key->pool != NULL ? CM_FREE_POOL_IMPORT : CM_FREE_IPC;
}

/* Maps key in the current context (dev's): cuIpcOpenMemHandle, or
 * cuMemPoolImportPointer from its pool; *ptr is the mapping. */
static int
map_key(const ipc_key *key, CUdeviceptr *ptr, cm_error *err)
{
    CUipcMemHandle handle;
    CUmemPoolPtrExportData data;

    if (key->pool != NULL) {
        memcpy(&data, key->bytes, sizeof(data));
        return CM_CALL(err, cuMemPoolImportPointer, ptr, key->pool, &data);
    }
    memcpy(handle.reserved, key->bytes, sizeof(handle.reserved));
    return CM_CALL(err, cuIpcOpenMemHandle, ptr, handle,
                   CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}

/* Maps key in the current context (dev's) and reads the mapping's size;
 * *ptr stays 0 unless the mapping was made and is still open. */
static int
map_in(const ipc_key *key, CUdeviceptr *ptr, size_t *size, cm_error *err)
{
    CUdeviceptr base;
    cm_error ignored;

    if (map_key(key, ptr, err) < 0) {
        *ptr = 0;
        return -1;
    }
    if (CM_CALL(err, cuMemGetAddressRange, &base, size, *ptr) < 0) {
        if (key->pool != NULL) {
            (void)CM_CALL(&ignored, cuMemFree, *ptr);
        }
        else {
            (void)CM_CALL(&ignored, cuIpcCloseMemHandle, *ptr);
        }
        *ptr = 0;
        return -1;
    }
    return 0;
}

/* Caller holds cache_lock: maps the handle and enters its record. */
static int
open_locked(cm_device *dev, uint64_t generation, const ipc_key *key,
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
    if (cm_ctx_leave(&guard, map_in(key, &ptr, &size, err), err) < 0) {
        /* Made, but the pop failed: closed from the queue, as a failed
         * allocation is freed. */
        if (ptr != 0) {
            (void)cm__release(dev, generation, kind_of(key), ptr, size,
                              &ignored);
        }
        goto done;
    }
    cm__mem_init(m, kind_of(key), &mapping_ops, dev, generation, ptr, size);
    e->key = *key;
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
open_cached(cm_device *dev, uint64_t generation, const ipc_key *key,
            cm_mem **out, cm_error *err)
{
    cache_entry *e;
    int rc = 0;

    /* Held across the driver calls: two threads opening one handle must
     * not both map it. */
    cm__lock(&cache_lock, CM_LOCK_IPC);
    e = cache_find(dev, generation, key);
    if (e != NULL) {
        cm_mem_incref(e->mem);
        *out = e->mem;
    }
    else {
        rc = open_locked(dev, generation, key, out, err);
    }
    cm__unlock(&cache_lock);
    return rc;
}

/* cm_ipc_open and cm_ipc_open_pool_ptr. */
static int
open_key(cm_device *dev, const ipc_key *key, cm_mem **out, cm_error *err)
{
    uint64_t generation;
    CUcontext ctx;

    if (cm_fork_check(err) < 0 ||
        cm_device_primary(dev, &ctx, &generation, err) < 0) {
        return -1;
    }
    if (open_cached(dev, generation, key, out, err) == 0) {
        return 0;
    }
    /* This process's own mapping, closed but still queued: flushed
     * without the cache lock (a queued free may need other locks). */
    if (err->kind != CM_ERR_DRIVER || err->code != CUDA_ERROR_ALREADY_MAPPED ||
        !cm__queue_relieve(dev, CM_QUEUE_MEMORY)) {
        return -1;
    }
    return open_cached(dev, generation, key, out, err);
}

int
cm_ipc_open(cm_device *dev, const CUipcMemHandle *handle, cm_mem **out,
            cm_error *err)
{
    ipc_key key = {.pool = NULL};

    memcpy(key.bytes, handle->reserved, sizeof(key.bytes));
    return open_key(dev, &key, out, err);
}

int
cm_ipc_import_pool(cm_device *dev, int fd, CUmemoryPool *out, cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_fork_check(err) < 0 || cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    /* A POSIX descriptor is passed as the handle's value. */
    return cm_ctx_leave(&guard,
                        CM_CALL(err, cuMemPoolImportFromShareableHandle, out,
                                (void *)(intptr_t)fd,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                        err);
}

int
cm_ipc_open_pool_ptr(cm_device *dev, CUmemoryPool pool,
                     const CUmemPoolPtrExportData *data, cm_mem **out,
                     cm_error *err)
{
    ipc_key key = {.pool = pool};

    memcpy(key.bytes, data, sizeof(key.bytes));
    return open_key(dev, &key, out, err);
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
