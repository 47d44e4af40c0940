/* copy.c: contiguous copies between host and device and within a device,
 * synchronous (complete on return, DESIGN rule 9) or queued on a stream.
 * Does not own the memory on either side or decide layouts. */
#include "copy.h"

#include "driver.h"
#include "event.h"
#include "hostmem.h"
#include "staging.h"

/* The driver's synchronous HtoD from pageable memory and its DtoD may
 * return before the copy ran: wait for the default stream (the per-thread
 * one when the table was resolved for it; NULL means either). */
static int
complete(cm_error *err)
{
    return CM_CALL(err, cuStreamSynchronize, (CUstream)NULL);
}

int
cm__memcpy(int dst_dev, CUdeviceptr dst, void *hdst, int src_dev,
           CUdeviceptr src, const void *hsrc, size_t n, CUstream stream,
           int async, cm_error *err)
{
    if (dst_dev && src_dev) {
        return async ? CM_CALL(err, cuMemcpyDtoDAsync, dst, src, n, stream)
                     : CM_CALL(err, cuMemcpyDtoD, dst, src, n);
    }
    if (dst_dev) {
        return async ? CM_CALL(err, cuMemcpyHtoDAsync, dst, hsrc, n, stream)
                     : CM_CALL(err, cuMemcpyHtoD, dst, hsrc, n);
    }
    return async ? CM_CALL(err, cuMemcpyDtoHAsync, hdst, src, n, stream)
                 : CM_CALL(err, cuMemcpyDtoH, hdst, src, n);
}

int
cm__copy_noted(cm_device *dev, CUstream stream, const void *host,
               size_t extent, int to_host, cm_error *err)
{
    cm_error ignored;
    int rc = cm__host_note(dev, stream, host, extent, err);

    if (rc == 1 && to_host) {
        return CM_CALL(err, cuStreamSynchronize, stream);
    }
    if (rc >= 0) {
        return 0;
    }
    /* Unnoted work would let its memory go under it: wait instead. */
    (void)CM_CALL(&ignored, cuStreamSynchronize, stream);
    return -1;
}

/* One contiguous copy in dev's context. The synchronous DtoH is complete
 * on return, to pageable and page-locked memory alike, as is the HtoD
 * from page-locked memory; the others may return early when the
 * destination is on the device. `locked`: the host side is known
 * page-locked, so neither staging nor completion asks the registry. */
static int
copy_contiguous(cm_device *dev, int dst_dev, CUdeviceptr dst, void *hdst,
                int src_dev, CUdeviceptr src, const void *hsrc, size_t n,
                int locked, CUstream stream, int async, cm_error *err)
{
    cm_ctx_guard guard;
    int staged = 0, rc;

    if (n == 0) {
        return cm_fork_check(err);
    }
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    /* Large pageable host memory goes through pinned staging buffers,
     * complete on return whether asynchronous or not. */
    if (dst_dev != src_dev && !locked) {
        rc = cm__staging_copy(dev, dst_dev, dst_dev ? dst : src,
                              dst_dev ? (void *)hsrc : hdst, n,
                              async ? stream : NULL, &staged, err);
        if (rc < 0 || staged) {
            return cm_ctx_leave(&guard, rc, err);
        }
    }
    rc = cm__memcpy(dst_dev, dst, hdst, src_dev, src, hsrc, n, stream, async,
                    err);
    /* From page-locked memory the driver's HtoD is complete on return
     * ("synchronous with respect to the host"): only pageable memory's
     * and a DtoD may not be. */
    if (rc == 0 && dst_dev && !async &&
        (src_dev || (!locked && !cm_host_locked(hsrc, n)))) {
        rc = complete(err);
    }
    if (rc == 0 && async && dst_dev != src_dev) {
        rc = cm__copy_noted(dev, stream, dst_dev ? hsrc : hdst, n, !dst_dev,
                            err);
    }
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_copy_htod(cm_device *dev, CUdeviceptr dst, const void *src, size_t n,
             CUstream stream, int async, cm_error *err)
{
    return copy_contiguous(dev, 1, dst, NULL, 0, 0, src, n, 0, stream, async,
                           err);
}

int
cm_copy_dtoh(cm_device *dev, void *dst, CUdeviceptr src, size_t n,
             CUstream stream, int async, cm_error *err)
{
    return copy_contiguous(dev, 0, 0, dst, 1, src, NULL, n, 0, stream, async,
                           err);
}

int
cm__copy_dtod(cm_device *dev, CUdeviceptr dst, CUdeviceptr src, size_t n,
              CUstream stream, int async, cm_error *err)
{
    return copy_contiguous(dev, 1, dst, NULL, 1, src, NULL, n, 0, stream,
                           async, err);
}

int
cm__copy_host(cm_device *dev, int to_device, CUdeviceptr dptr, void *host,
              size_t n, int locked, CUstream stream, int async, cm_error *err)
{
    return to_device ? copy_contiguous(dev, 1, dptr, NULL, 0, 0, host, n,
                                       locked, stream, async, err)
                     : copy_contiguous(dev, 0, 0, host, 1, dptr, NULL, n,
                                       locked, stream, async, err);
}

int
cm_copy_peer(cm_device *dst_dev, CUdeviceptr dst, cm_device *src_dev,
             CUdeviceptr src, size_t n, CUstream stream, int async,
             cm_error *err)
{
    CUcontext dctx, sctx;
    cm_ctx_guard guard;
    uint64_t generation;
    int rc;

    if (n == 0) {
        return cm_fork_check(err);
    }
    /* Queued in dst_dev's context, the copy follows that context's work
     * alone: it waits for src_dev's legacy default stream too, which
     * follows the work of src_dev's blocking streams. */
    if (cm_device_primary(dst_dev, &dctx, &generation, err) < 0 ||
        cm_device_primary(src_dev, &sctx, &generation, err) < 0 ||
        cm_event_order_across(src_dev, CU_STREAM_LEGACY, dst_dev,
                              async ? stream : NULL, err) < 0 ||
        cm_ctx_enter(dst_dev, &guard, err) < 0) {
        return -1;
    }
    rc = async
             ? CM_CALL(err, cuMemcpyPeerAsync, dst, dctx, src, sctx, n, stream)
             : CM_CALL(err, cuMemcpyPeer, dst, dctx, src, sctx, n);
    if (rc == 0 && !async) {
        rc = complete(err);
    }
    return cm_ctx_leave(&guard, rc, err);
}
