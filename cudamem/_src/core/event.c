/* event.c: creating events in a device's primary context, handing them to
 * the device's object queue, and recording, querying, waiting on and timing
 * them. Holds no record of its own (the Python Event keeps the handle and
 * its generation); the queue is release.c's. */
#include "event.h"

#include "driver.h"
#include "release.h"

int
cm_event_create(cm_device *dev, unsigned flags, CUevent *out,
                uint64_t *generation, cm_error *err)
{
    cm_ctx_guard guard;
    CUcontext ctx;
    CUevent handle = NULL;
    size_t max_count;
    double max_ratio;
    cm_error ignored;

    /* As for streams: malformed thresholds fail the creation, not the
     * destroy, and the generation is read before the retain. */
    if (cm__pending_limits(&max_count, &max_ratio, err) < 0 ||
        cm_device_primary(dev, &ctx, generation, err) < 0 ||
        cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    if (cm_ctx_leave(&guard, CM_CALL(err, cuEventCreate, &handle, flags),
                     err) < 0) {
        /* The caller never sees it: do not leak it. */
        if (handle != NULL) {
            CM_CALL(&ignored, cuEventDestroy, handle);
        }
        return -1;
    }
    *out = handle;
    return 0;
}

int
cm_event_release(cm_device *dev, uint64_t generation, CUevent handle,
                 cm_error *err)
{
    return cm__release(dev, generation, CM_FREE_EVENT,
                       (uint64_t)(uintptr_t)handle, 0, err);
}

int
cm_event_check(cm_device *dev, uint64_t generation, CUevent handle,
               cm_error *err)
{
    if (cm_ctx_check(dev, generation, err) < 0) {
        if (err->kind != CM_ERR_STATE) {
            return -1;
        }
        return cm__fail_fmt(err, CM_ERR_STATE,
                            "CUDA event %zu of device %d cannot be used: its "
                            "context was reset or closed since the event "
                            "was made",
                            (size_t)(uintptr_t)handle, dev->ordinal);
    }
    return 0;
}

int
cm_event_record(cm_device *dev, CUevent handle, CUstream stream, cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(&guard, CM_CALL(err, cuEventRecord, handle, stream),
                        err);
}

int
cm_event_query(cm_device *dev, CUevent handle, int *done, cm_error *err)
{
    cm_ctx_guard guard;
    int rc;

    if (cm__ctx_enter_handle(dev, &guard, err) < 0) {
        return -1;
    }
    rc = CM_CALL(err, cuEventQuery, handle);
    *done = rc == 0;
    if (rc < 0 && err->code == CUDA_ERROR_NOT_READY) {
        rc = 0;
    }
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_event_synchronize(cm_device *dev, CUevent handle, cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(&guard, CM_CALL(err, cuEventSynchronize, handle), err);
}

int
cm_event_elapsed(cm_device *dev, CUevent start, CUevent end, float *ms,
                 cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(&guard,
                        CM_CALL(err, cuEventElapsedTime, ms, start, end), err);
}

int
cm_event_stream_wait(cm_device *dev, CUstream stream, CUevent handle,
                     cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(
        &guard, CM_CALL(err, cuStreamWaitEvent, stream, handle, 0u), err);
}

int
cm_event_order_across(cm_device *pdev, CUstream producer, cm_device *cdev,
                      CUstream consumer, cm_error *err)
{
    uint64_t generation;
    cm_error ignored;
    CUevent ev;
    int rc;

    if (cm_event_create(pdev, CU_EVENT_DISABLE_TIMING, &ev, &generation, err) <
        0) {
        return -1;
    }
    rc = cm_event_record(pdev, ev, producer, err) < 0 ||
                 cm_event_stream_wait(cdev, consumer, ev, err) < 0
             ? -1
             : 0;
    /* The driver keeps a waited-for event until the wait is done. */
    if (cm_event_release(pdev, generation, ev, rc < 0 ? &ignored : err) < 0) {
        rc = -1;
    }
    return rc;
}

int
cm_event_order(cm_device *dev, CUstream producer, CUstream consumer,
               cm_error *err)
{
    return cm_event_order_across(dev, producer, dev, consumer, err);
}
