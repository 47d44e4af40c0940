/* memory.c: device allocation records (memory.h): allocation with numba's
 * flush-and-retry on out-of-memory, records for borrowed memory, pointer
 * lookup, reference counts, and the hand-over to release.c at zero. Does
 * not know views, host memory or plugins. */
#include "memory.h"

#include <stdlib.h>

#include "driver.h"
#include "release.h"

/* cuMemAlloc in the current context; on out-of-memory the device's
 * memory queue is flushed (a no-op while deferred) and the call retried
 * once. A failed flush is not the caller's error: the allocation's is. */
static int
alloc_retry(cm_device *dev, size_t nbytes, CUdeviceptr *ptr, cm_error *err)
{
    size_t count, bytes;
    cm_error flush_err;
    int deferred;

    if (CM_CALL(err, cuMemAlloc, ptr, nbytes) == 0) {
        return 0;
    }
    if (err->kind != CM_ERR_DRIVER || err->code != CUDA_ERROR_OUT_OF_MEMORY) {
        return -1;
    }
    cm_queue_stats(dev, CM_QUEUE_MEMORY, &count, &bytes, &deferred);
    if (count == 0 || deferred) {
        return -1;
    }
    (void)cm_queue_flush(dev, CM_QUEUE_MEMORY, &flush_err);
    return CM_CALL(err, cuMemAlloc, ptr, nbytes);
}

int
cm_mem_alloc(cm_device *dev, size_t nbytes, cm_mem **out, cm_error *err)
{
    cm_ctx_guard guard;
    cm_error ignored;
    CUcontext ctx;
    CUdeviceptr ptr = 0;
    uint64_t generation;
    size_t max_count;
    double max_ratio;
    cm_mem *m;

    /* Malformed thresholds fail the first allocation, not its free. */
    if (cm_pending_limits(&max_count, &max_ratio, err) < 0 ||
        cm_device_primary(dev, &ctx, &generation, err) < 0) {
        return -1;
    }
    m = malloc(sizeof(*m));
    if (m == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    if (nbytes > 0) {
        if (cm_ctx_enter(dev, &guard, err) < 0 ||
            cm_ctx_leave(&guard, alloc_retry(dev, nbytes, &ptr, err), err) <
                0) {
            /* A failed pop after a good allocation leaves the memory in
             * a context cudamem cannot reach reliably: free it there. */
            if (ptr != 0) {
                (void)cm_release(dev, generation, CM_FREE_DEVICE, ptr,
                                 nbytes, &ignored);
            }
            free(m);
            return -1;
        }
    }
    *m = (cm_mem){.refs = 1,
                  .kind = CM_FREE_DEVICE,
                  .dev = dev,
                  .generation = generation,
                  .ptr = ptr,
                  .size = nbytes};
    *out = m;
    return 0;
}

int
cm_mem_borrow(cm_device *dev, CUdeviceptr ptr, size_t size, cm_mem **out,
              cm_error *err)
{
    uint64_t generation;
    CUcontext ctx;
    cm_mem *m;

    /* The generation ties the record to the context the memory lives in:
     * a reset frees it with the context, and stale use then raises. */
    if (cm_device_primary(dev, &ctx, &generation, err) < 0) {
        return -1;
    }
    m = malloc(sizeof(*m));
    if (m == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    *m = (cm_mem){.refs = 1,
                  .kind = CM_FREE_NONE,
                  .dev = dev,
                  .generation = generation,
                  .ptr = ptr,
                  .size = size};
    *out = m;
    return 0;
}

int
cm_pointer_device(CUdeviceptr ptr, cm_device **dev, cm_error *err)
{
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    unsigned int type = 0;
    int ordinal = -1;
    void *data[2] = {&type, &ordinal};
    cm_ctx_guard guard;
    cm_device *cur;

    /* The driver answers only with some context current. */
    if (cm_current_device(&cur, err) < 0 ||
        cm_ctx_enter(cur, &guard, err) < 0 ||
        cm_ctx_leave(&guard,
                     CM_CALL(err, cuPointerGetAttributes, 2, attrs, data,
                             ptr),
                     err) < 0) {
        return -1;
    }
    /* Unknown memory is not an error to the driver: it reports type 0. */
    if (type == 0) {
        return cm_fail_fmt(err, CM_ERR_VALUE,
                           "pointer %#llx is not memory the CUDA driver "
                           "knows",
                           (unsigned long long)ptr);
    }
    if (cm_device_get(ordinal, dev, err) < 0) {
        if (err->kind != CM_ERR_VALUE) {
            return -1;
        }
        return cm_fail_fmt(err, CM_ERR_VALUE,
                           "pointer %#llx belongs to device %d, which "
                           "cudamem cannot use: %s",
                           (unsigned long long)ptr, ordinal, err->msg);
    }
    return 0;
}

void
cm_mem_incref(cm_mem *m)
{
    __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
}

int
cm_mem_decref(cm_mem *m, cm_error *err)
{
    int rc = 0;

    if (__atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) != 0) {
        return 0;
    }
    if (m->ptr != 0 && m->kind != CM_FREE_NONE) {
        rc = cm_release(m->dev, m->generation, m->kind, m->ptr, m->size,
                        err);
    }
    free(m);
    return rc;
}

int
cm_mem_check(const cm_mem *m, cm_error *err)
{
    return cm_ctx_check(m->dev, m->generation, err);
}
