/* stream.c: creating cudamem's own streams in a device's primary context,
 * handing them to the device's object queue, and querying, waiting on and
 * locating any stream handle. Holds no record of its own (the Python Stream
 * keeps the handle and its generation); the queue is release.c's. */
#include "stream.h"

#include "driver.h"
#include "release.h"

int
cm_stream_create(cm_device *dev, unsigned flags, int has_priority,
                 int priority, CUstream *out, uint64_t *generation,
                 cm_error *err)
{
    cm_ctx_guard guard;
    CUcontext ctx;
    CUstream handle = NULL;
    size_t max_count;
    double max_ratio;
    cm_error ignored;
    int rc;

    /* Malformed thresholds fail the first stream, not its destroy. The
     * generation is read before the retain (see cm_device_primary): a
     * reset in between makes the new stream stale at once. */
    if (cm__pending_limits(&max_count, &max_ratio, err) < 0 ||
        cm_device_primary(dev, &ctx, generation, err) < 0 ||
        cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    if (has_priority) {
        rc = CM_CALL(err, cuStreamCreateWithPriority, &handle, flags,
                     priority);
    }
    else {
        rc = CM_CALL(err, cuStreamCreate, &handle, flags);
    }
    if (rc < 0) {
        return cm_ctx_leave(&guard, rc, err);
    }
    if (cm_ctx_leave(&guard, 0, err) < 0) {
        /* The caller never sees it: do not leak it. */
        CM_CALL(&ignored, cuStreamDestroy, handle);
        return -1;
    }
    *out = handle;
    return 0;
}

int
cm_stream_release(cm_device *dev, uint64_t generation, CUstream handle,
                  cm_error *err)
{
    __atomic_add_fetch(&dev->streams_retired, 1, __ATOMIC_ACQ_REL);
    return cm__release(dev, generation, CM_FREE_STREAM,
                       (uint64_t)(uintptr_t)handle, 0, err);
}

int
cm_stream_query(cm_device *dev, CUstream handle, int *done, cm_error *err)
{
    cm_ctx_guard guard;
    int rc;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    rc = CM_CALL(err, cuStreamQuery, handle);
    *done = rc == 0;
    if (rc < 0 && err->code == CUDA_ERROR_NOT_READY) {
        rc = 0;
    }
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_stream_synchronize(cm_device *dev, CUstream handle, cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(&guard, CM_CALL(err, cuStreamSynchronize, handle),
                        err);
}

int
cm_stream_device(CUstream handle, cm_device **dev, cm_error *err)
{
    CUcontext ctx;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    if (cm_stream_is_default(handle)) {
        return cm__fail_fmt(
            err, CM_ERR_VALUE,
            "CUDA stream %zu is a default stream: it belongs to "
            "whichever context is current",
            (size_t)(uintptr_t)handle);
    }
    /* Needs no current context: the handle names its own. */
    if (CM_CALL(err, cuStreamGetCtx, handle, &ctx) < 0) {
        return -1;
    }
    if (cm__context_device(ctx, dev, err) < 0) {
        if (err->kind == CM_ERR_VALUE) {
            return cm__fail_fmt(err, CM_ERR_VALUE,
                                "cudamem cannot use CUDA stream %zu: %s",
                                (size_t)(uintptr_t)handle, cm_error_msg(err));
        }
        return -1;
    }
    return 0;
}

int
cm_stream_priority_range(cm_device *dev, int *least, int *greatest,
                         cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(
        &guard, CM_CALL(err, cuCtxGetStreamPriorityRange, least, greatest),
        err);
}
