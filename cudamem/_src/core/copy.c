/* copy.c: contiguous copies between host and device and within a device,
 * synchronous (complete on return, DESIGN rule 9) or queued on a stream.
 * Does not own the memory on either side or decide layouts. */
#include "copy.h"

#include "driver.h"

/* The driver's synchronous HtoD from pageable memory and its DtoD may
 * return before the copy ran: wait for the default stream (the per-thread
 * one when the table was resolved for it; NULL means either). */
static int
complete(cm_error *err)
{
    return CM_CALL(err, cuStreamSynchronize, (CUstream)NULL);
}

int
cm_copy_htod(cm_device *dev, CUdeviceptr dst, const void *src, size_t n,
             CUstream stream, int async, cm_error *err)
{
    cm_ctx_guard guard;
    int rc;

    if (n == 0) {
        return cm_fork_check(err);
    }
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    if (async) {
        rc = CM_CALL(err, cuMemcpyHtoDAsync, dst, src, n, stream);
    }
    else {
        rc = CM_CALL(err, cuMemcpyHtoD, dst, src, n);
        if (rc == 0) {
            rc = complete(err);
        }
    }
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_copy_dtoh(cm_device *dev, void *dst, CUdeviceptr src, size_t n,
             CUstream stream, int async, cm_error *err)
{
    cm_ctx_guard guard;
    int rc;

    if (n == 0) {
        return cm_fork_check(err);
    }
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    /* The synchronous DtoH is complete on return, to pageable and to
     * page-locked memory alike. */
    rc = async ? CM_CALL(err, cuMemcpyDtoHAsync, dst, src, n, stream)
               : CM_CALL(err, cuMemcpyDtoH, dst, src, n);
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_copy_dtod(cm_device *dev, CUdeviceptr dst, CUdeviceptr src, size_t n,
             CUstream stream, int async, cm_error *err)
{
    cm_ctx_guard guard;
    int rc;

    if (n == 0) {
        return cm_fork_check(err);
    }
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    if (async) {
        rc = CM_CALL(err, cuMemcpyDtoDAsync, dst, src, n, stream);
    }
    else {
        rc = CM_CALL(err, cuMemcpyDtoD, dst, src, n);
        if (rc == 0) {
            rc = complete(err);
        }
    }
    return cm_ctx_leave(&guard, rc, err);
}
