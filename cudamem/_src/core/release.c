/* release.c: the per-device queues of release.h and the functions that
 * free what they hold. Owns the choice of queue, the generation check and
 * the shutdown stop; the queue mechanics are pending.c's. */
#include "release.h"
#include "lockorder.h"

#include "driver.h"
#include "history.h"
#include "stats.h"

/* Whether the driver frees kind in its own context whatever context is
 * current, none included: a stream, an event, and memory from cuMemAlloc,
 * cuMemAllocManaged and cuMemHostAlloc (an H100 with driver 580 answers
 * so: tests/gpu/driver_facts.py). Imported pool and IPC memory were not
 * asked, and get their context pushed. */
static int
frees_in_own_context(cm_free_kind kind)
{
    return kind == CM_FREE_STREAM || kind == CM_FREE_EVENT ||
           kind == CM_FREE_DEVICE || kind == CM_FREE_MANAGED ||
           kind == CM_FREE_HOST;
}

/* Frees one handle in ctx. Runs with dev->qlock held, so the context
 * cannot be released meanwhile: push it directly rather than through
 * cm_ctx_enter, which could need dev->lock. */
static int
free_in(CUcontext ctx, cm_free_kind kind, uint64_t handle, cm_error *err)
{
    CUcontext cur = ctx, popped;
    cm_error ignored;
    int rc;

    if (!frees_in_own_context(kind) &&
        CM_CALL(err, cuCtxGetCurrent, &cur) < 0) {
        return -1;
    }
    if (cur != ctx && CM_CALL(err, cuCtxPushCurrent, ctx) < 0) {
        return -1;
    }
    switch (kind) {
    case CM_FREE_DEVICE:
    case CM_FREE_MANAGED:
    case CM_FREE_POOL_IMPORT: /* cuMemPoolImportPointer's docs */
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
    case CM_FREE_IPC:
        rc = CM_CALL(err, cuIpcCloseMemHandle, (CUdeviceptr)handle);
        break;
    default:
        /* External records go to py/'s release hook (memory.c) and
         * borrowed memory is never freed: neither reaches a queue. */
        rc = cm_fail(err, CM_ERR_STATE, "cudamem cannot free this kind");
        break;
    }
    if (cur != ctx &&
        CM_CALL(rc < 0 ? &ignored : err, cuCtxPopCurrent, &popped) < 0) {
        return -1;
    }
    return rc;
}

/* Memory whose record holds a retain of its device's primary context
 * (managed memory, write-combined host memory): freed in that context
 * (the last one cudamem retained: the retain kept it from being replaced)
 * unless a reset took it, then the retain is released, even after a
 * failed free: the context must not outlive every user. */
static int
free_retained(cm_device *dev, int alive, cm_free_kind kind, uint64_t handle,
              cm_error *err)
{
    CUcontext ctx = __atomic_load_n(&dev->last_primary, __ATOMIC_ACQUIRE);
    cm_error ignored;
    int rc = 0;

    if (alive) {
        rc = free_in(ctx, kind, handle, err);
    }
    if (CM_CALL(rc < 0 ? &ignored : err, cuDevicePrimaryCtxRelease,
                dev->cudev) < 0) {
        rc = -1;
    }
    return rc;
}

static int
is_retained(cm_free_kind kind)
{
    return kind == CM_FREE_MANAGED || kind == CM_FREE_HOST;
}

/* Device and managed memory leaves stats.h's held bytes when it is
 * freed, dropped after a failed free, or went with its context. */
static void
unhold(cm_device *dev, cm_free_kind kind, size_t nbytes)
{
    if (kind == CM_FREE_DEVICE || kind == CM_FREE_MANAGED) {
        cm__stats_unhold(dev, nbytes);
    }
}

/* The history's end of a queued free (history.h), behind the caller's
 * cm__history_on: the memory is the driver's again (or went with its
 * context) when this runs. */
static void
note_freed(cm_device *dev, cm_free_kind kind, uint64_t handle, size_t nbytes)
{
    cm_hist_memory memory = kind == CM_FREE_MANAGED ? CM_HIST_MANAGED
                            : kind == CM_FREE_HOST  ? CM_HIST_MAPPED
                                                    : CM_HIST_DEVICE;

    if (kind != CM_FREE_DEVICE && kind != CM_FREE_MANAGED &&
        kind != CM_FREE_HOST) {
        return;
    }
    cm__history_note(CM_HIST_FREE_COMPLETED, memory, dev->ordinal, handle,
                     nbytes, NULL);
    cm__history_note(CM_HIST_SEGMENT_FREE, memory, dev->ordinal, handle,
                     nbytes, NULL);
}

/* A queue's free function: one handle of dev's primary context. */
static int
free_one(void *arg, cm_free_kind kind, uint64_t handle, size_t nbytes,
         cm_error *err)
{
    cm_device *dev = arg;
    cm_error ignored;
    int alive = cm_device_poisoned(dev, &ignored) == 0;
    int rc;

    unhold(dev, kind, nbytes);
    if (cm__history_on()) {
        note_freed(dev, kind, handle, nbytes);
    }
    /* In a poisoned context every free fails: what it holds goes with the
     * process, so drop it quietly (but give back a record's retain). */
    if (is_retained(kind)) {
        rc = free_retained(dev, alive, kind, handle, err);
    }
    else {
        rc = alive ? free_in(__atomic_load_n(&dev->primary, __ATOMIC_ACQUIRE),
                             kind, handle, err)
                   : 0;
    }
    if (rc < 0) {
        cm__device_poison(dev, err);
    }
    return rc;
}

static cm_queue_id
queue_of(cm_free_kind kind)
{
    return kind == CM_FREE_STREAM || kind == CM_FREE_EVENT ? CM_QUEUE_OBJECTS
                                                           : CM_QUEUE_MEMORY;
}

static int queues_drop(cm_device *dev, int reset, cm_error *err);

/* What a teardown of a context does to its queues (context.h). */
static const cm_subsystem_ops queue_ops = {
    .drop = queues_drop,
    .relieve = cm_queues_flush,
};

/* Caller holds dev->qlock. numba sizes a context's queue from its
 * device's memory when the context is made: after a teardown the queues
 * are sized again on their next use (a deferral in force stays). That is
 * best effort: a failure keeps the old limit and is tried again next
 * time, rather than failing the free that asked. */
static void
queues_resize(cm_device *dev)
{
    cm_error ignored;
    size_t total;

    if (CM_CALL(&ignored, cuDeviceTotalMem, &total, dev->cudev) < 0) {
        return;
    }
    for (int q = 0; q < CM_QUEUE_COUNT; q++) {
        if (cm__pending_resize(dev->queues[q], total, &ignored) < 0) {
            return;
        }
    }
    dev->queues_stale = 0;
}

/* Caller holds dev->qlock. */
static int
queues_ready(cm_device *dev, cm_error *err)
{
    size_t total;

    if (dev->queues[0] != NULL) {
        if (dev->queues_stale) {
            queues_resize(dev);
        }
        return 0;
    }
    cm__subsystem_register(CM_SUB_QUEUES, &queue_ops);
    if (CM_CALL(err, cuDeviceTotalMem, &total, dev->cudev) < 0) {
        return -1;
    }
    for (int q = 0; q < CM_QUEUE_COUNT; q++) {
        dev->queues[q] = cm__pending_new(total, free_one, dev, err);
        if (dev->queues[q] == NULL) {
            for (int i = 0; i < q; i++) {
                cm__pending_delete(dev->queues[i]);
                dev->queues[i] = NULL;
            }
            return -1;
        }
    }
    return 0;
}

/* Between cm_release_nowait_begin and _end on this thread (nested: a
 * release hook can free more from inside a finalizer): the depth, and
 * the device and queues (a bit per cm_queue_id) whose flush is due. */
static _Thread_local struct {
    int on;
    cm_device *dev;
    unsigned queues;
} nowait;

void
cm_release_nowait_begin(void)
{
    nowait.on++;
}

cm_device *
cm_release_nowait_end(unsigned *queues)
{
    cm_device *dev = nowait.dev;

    *queues = 0;
    /* The outermost section flushes what the inner ones left due. */
    if (--nowait.on > 0) {
        return NULL;
    }
    *queues = nowait.queues;
    nowait.dev = NULL;
    nowait.queues = 0;
    return dev;
}

int
cm_release_flush_due(cm_device *dev, unsigned queues, cm_error *err)
{
    cm_error later;
    int rc = 0;

    for (int q = 0; q < CM_QUEUE_COUNT; q++) {
        if ((queues & (1u << q)) != 0 &&
            cm_queue_flush(dev, (cm_queue_id)q, rc < 0 ? &later : err) < 0) {
            rc = -1;
        }
    }
    return rc;
}

/* Caller holds dev->qlock and the generation is current. */
static int
queue_locked(cm_device *dev, cm_free_kind kind, uint64_t handle, size_t nbytes,
             cm_error *err)
{
    cm_queue_id q = queue_of(kind);
    /* One device's queues are left due at a time; another's flush now. */
    int leave = nowait.on && (nowait.dev == NULL || nowait.dev == dev);
    int due = 0, rc;

    if (queues_ready(dev, err) < 0) {
        return -1;
    }
    rc = cm__pending_add(dev->queues[q], kind, handle, nbytes,
                         leave ? &due : NULL, err);
    if (due) {
        nowait.dev = dev;
        nowait.queues |= 1u << q;
    }
    if (rc < 0 && err->kind == CM_ERR_NOMEM) {
        /* Not queued: free it now rather than leak it. */
        rc = free_one(dev, kind, handle, nbytes, err);
    }
    return rc;
}

int
cm__release(cm_device *dev, uint64_t generation, cm_free_kind kind,
            uint64_t handle, size_t nbytes, cm_error *err)
{
    int rc = 0;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    /* Another generation: freed by the driver with its context. */
    if (__atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE) == generation) {
        rc = queue_locked(dev, kind, handle, nbytes, err);
    }
    else {
        unhold(dev, kind, nbytes);
        if (cm__history_on()) {
            note_freed(dev, kind, handle, nbytes);
        }
    }
    cm__unlock(&dev->qlock);
    return rc;
}

int
cm__release_retained(cm_device *dev, uint64_t generation, uint64_t resets,
                     cm_free_kind kind, uint64_t handle, size_t nbytes,
                     cm_error *err)
{
    int rc;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    if (__atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE) == generation) {
        rc = queue_locked(dev, kind, handle, nbytes, err);
    }
    else {
        /* Its queue is gone: free it now, unless a reset did. */
        unhold(dev, kind, nbytes);
        if (cm__history_on()) {
            note_freed(dev, kind, handle, nbytes);
        }
        rc = free_retained(
            dev, __atomic_load_n(&dev->resets, __ATOMIC_ACQUIRE) == resets,
            kind, handle, err);
    }
    cm__unlock(&dev->qlock);
    return rc;
}

int
cm_queue_flush(cm_device *dev, cm_queue_id q, cm_error *err)
{
    int rc = 0;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    if (dev->queues[q] != NULL) {
        rc = cm__pending_flush(dev->queues[q], err);
    }
    cm__unlock(&dev->qlock);
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
cm__queue_relieve(cm_device *dev, cm_queue_id q)
{
    size_t count, bytes;
    cm_error ignored;
    int deferred;

    cm_queue_stats(dev, q, &count, &bytes, &deferred);
    if (count == 0 || deferred) {
        return 0;
    }
    (void)cm_queue_flush(dev, q, &ignored);
    return 1;
}

int
cm_queue_defer(cm_device *dev, cm_queue_id q, cm_error *err)
{
    int rc;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    rc = queues_ready(dev, err);
    if (rc == 0) {
        cm__pending_defer(dev->queues[q]);
    }
    cm__unlock(&dev->qlock);
    return rc;
}

void
cm_queue_undefer(cm_device *dev, cm_queue_id q)
{
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    if (dev->queues[q] != NULL) {
        cm__pending_undefer(dev->queues[q]);
    }
    cm__unlock(&dev->qlock);
}

void
cm_queue_stats(cm_device *dev, cm_queue_id q, size_t *count, size_t *bytes,
               int *deferred)
{
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    if (dev->queues[q] != NULL) {
        *count = cm__pending_count(dev->queues[q]);
        *bytes = cm__pending_bytes(dev->queues[q]);
        *deferred = cm__pending_deferred(dev->queues[q]);
    }
    else {
        *count = *bytes = 0;
        *deferred = 0;
    }
    cm__unlock(&dev->qlock);
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
        cm__lock(&dev->qlock, CM_LOCK_QUEUES);
        for (int q = 0; q < CM_QUEUE_COUNT; q++) {
            if (dev->queues[q] != NULL &&
                cm__pending_shutdown(dev->queues[q], &each) < 0 && rc == 0) {
                *err = each;
                rc = -1;
            }
        }
        cm__unlock(&dev->qlock);
    }
    return rc;
}

typedef struct salvage_arg {
    cm_device *dev;
    int reset;
} salvage_arg;

/* What a dropped queue still owns: only memory whose own retain kept the
 * context alive. */
static int
salvage_one(void *arg, cm_free_kind kind, uint64_t handle, size_t nbytes,
            cm_error *err)
{
    salvage_arg *sa = arg;

    unhold(sa->dev, kind, nbytes);
    if (cm__history_on()) {
        note_freed(sa->dev, kind, handle, nbytes);
    }
    if (!is_retained(kind)) {
        return 0;
    }
    return free_retained(sa->dev, !sa->reset, kind, handle, err);
}

/* With dev->lock and qlock held, after releasing cudamem's retain and
 * before bumping the generation: forgets everything queued (the context
 * that owned it is going away), except managed memory, which keeps the
 * context alive: it is freed (`reset`: the reset frees it) and its retain
 * released. -1: a managed free failed (the first is reported; the rest
 * still run). */
static int
queues_drop(cm_device *dev, int reset, cm_error *err)
{
    salvage_arg sa = {dev, reset};
    cm_error later;
    int rc = 0;

    dev->queues_stale = 1;
    for (int q = 0; q < CM_QUEUE_COUNT; q++) {
        if (dev->queues[q] != NULL &&
            cm__pending_salvage(dev->queues[q], salvage_one, &sa,
                                rc < 0 ? &later : err) < 0) {
            rc = -1;
        }
    }
    return rc;
}
