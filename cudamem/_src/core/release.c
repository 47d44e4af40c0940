/* release.c: the per-device queues of release.h and the functions that
 * free what they hold. Owns the choice of queue, the generation check and
 * the shutdown stop; the queue mechanics are pending.c's. */
#include "release.h"

#include "driver.h"

/* Frees one handle of dev's primary context. Runs with dev->qlock held,
 * so the context cannot be released meanwhile: push it directly rather
 * than through cm_ctx_enter, which could need dev->lock. */
static int
free_one(void *arg, cm_free_kind kind, uint64_t handle, size_t nbytes,
         cm_error *err)
{
    cm_device *dev = arg;
    CUcontext ctx = __atomic_load_n(&dev->primary, __ATOMIC_ACQUIRE);
    CUcontext cur, popped;
    cm_error ignored;
    int rc;

    (void)nbytes;
    if (CM_CALL(err, cuCtxGetCurrent, &cur) < 0) {
        return -1;
    }
    if (cur != ctx && CM_CALL(err, cuCtxPushCurrent, ctx) < 0) {
        return -1;
    }
    switch (kind) {
    case CM_FREE_DEVICE:
    case CM_FREE_MANAGED:
        rc = CM_CALL(err, cuMemFree, (CUdeviceptr)handle);
        break;
    case CM_FREE_HOST:
        rc = CM_CALL(err, cuMemFreeHost, (void *)(uintptr_t)handle);
        break;
    case CM_FREE_STREAM:
        rc = CM_CALL(err, cuStreamDestroy, (CUstream)(uintptr_t)handle);
        break;
    case CM_FREE_EVENT:
        rc = CM_CALL(err, cuEventDestroy, (CUevent)(uintptr_t)handle);
        break;
    default:
        /* Kinds whose owners (IPC, plugins) are not built yet never reach
         * a queue. */
        rc = cm_fail(err, CM_ERR_STATE, "cudamem cannot free this kind");
        break;
    }
    if (cur != ctx &&
        CM_CALL(rc < 0 ? &ignored : err, cuCtxPopCurrent, &popped) < 0) {
        return -1;
    }
    return rc;
}

static cm_queue_id
queue_of(cm_free_kind kind)
{
    return kind == CM_FREE_STREAM || kind == CM_FREE_EVENT ? CM_QUEUE_OBJECTS
                                                           : CM_QUEUE_MEMORY;
}

/* Caller holds dev->qlock. */
static int
queues_ready(cm_device *dev, cm_error *err)
{
    size_t total;

    if (dev->queues[0] != NULL) {
        return 0;
    }
    if (CM_CALL(err, cuDeviceTotalMem, &total, dev->cudev) < 0) {
        return -1;
    }
    for (int q = 0; q < CM_QUEUE_COUNT; q++) {
        dev->queues[q] = cm_pending_new(total, free_one, dev, err);
        if (dev->queues[q] == NULL) {
            for (int i = 0; i < q; i++) {
                cm_pending_delete(dev->queues[i]);
                dev->queues[i] = NULL;
            }
            return -1;
        }
    }
    return 0;
}

int
cm_release(cm_device *dev, uint64_t generation, cm_free_kind kind,
           uint64_t handle, size_t nbytes, cm_error *err)
{
    int rc = 0;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    pthread_mutex_lock(&dev->qlock);
    if (__atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE) != generation) {
        goto done; /* freed by the driver with its context */
    }
    if (queues_ready(dev, err) < 0) {
        rc = -1;
        goto done;
    }
    rc = cm_pending_add(dev->queues[queue_of(kind)], kind, handle, nbytes,
                        err);
    if (rc < 0 && err->kind == CM_ERR_NOMEM) {
        /* Not queued: free it now rather than leak it. */
        rc = free_one(dev, kind, handle, nbytes, err);
    }
done:
    pthread_mutex_unlock(&dev->qlock);
    return rc;
}

int
cm_queue_flush(cm_device *dev, cm_queue_id q, cm_error *err)
{
    int rc = 0;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    pthread_mutex_lock(&dev->qlock);
    if (dev->queues[q] != NULL) {
        rc = cm_pending_flush(dev->queues[q], err);
    }
    pthread_mutex_unlock(&dev->qlock);
    return rc;
}

int
cm_queues_flush(cm_device *dev, cm_error *err)
{
    if (cm_queue_flush(dev, CM_QUEUE_OBJECTS, err) < 0) {
        return -1;
    }
    return cm_queue_flush(dev, CM_QUEUE_MEMORY, err);
}

int
cm_queue_defer(cm_device *dev, cm_queue_id q, cm_error *err)
{
    int rc;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    pthread_mutex_lock(&dev->qlock);
    rc = queues_ready(dev, err);
    if (rc == 0) {
        cm_pending_defer(dev->queues[q]);
    }
    pthread_mutex_unlock(&dev->qlock);
    return rc;
}

void
cm_queue_undefer(cm_device *dev, cm_queue_id q)
{
    pthread_mutex_lock(&dev->qlock);
    if (dev->queues[q] != NULL) {
        cm_pending_undefer(dev->queues[q]);
    }
    pthread_mutex_unlock(&dev->qlock);
}

void
cm_queue_stats(cm_device *dev, cm_queue_id q, size_t *count, size_t *bytes,
               int *deferred)
{
    pthread_mutex_lock(&dev->qlock);
    if (dev->queues[q] != NULL) {
        *count = cm_pending_count(dev->queues[q]);
        *bytes = cm_pending_bytes(dev->queues[q]);
        *deferred = cm_pending_deferred(dev->queues[q]);
    }
    else {
        *count = *bytes = 0;
        *deferred = 0;
    }
    pthread_mutex_unlock(&dev->qlock);
}

int
cm_queues_shutdown(cm_error *err)
{
    cm_error each;
    int count, rc = 0;

    /* Nothing to do in a forked child or before the driver was used. */
    if (!cm_driver_ready() || cm_fork_check(&each) < 0 ||
        cm_devices_count(&count, &each) < 0) {
        return 0;
    }
    for (int i = 0; i < count; i++) {
        cm_device *dev;

        if (cm_device_get(i, &dev, &each) < 0) {
            continue;
        }
        pthread_mutex_lock(&dev->qlock);
        for (int q = 0; q < CM_QUEUE_COUNT; q++) {
            if (dev->queues[q] != NULL &&
                cm_pending_shutdown(dev->queues[q], &each) < 0 && rc == 0) {
                *err = each;
                rc = -1;
            }
        }
        pthread_mutex_unlock(&dev->qlock);
    }
    return rc;
}

void
cm__queues_drop(cm_device *dev)
{
    pthread_mutex_lock(&dev->qlock);
    for (int q = 0; q < CM_QUEUE_COUNT; q++) {
        if (dev->queues[q] != NULL) {
            cm_pending_drop(dev->queues[q]);
        }
    }
    pthread_mutex_unlock(&dev->qlock);
}
