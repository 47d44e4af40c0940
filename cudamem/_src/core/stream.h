/* stream.h: streams as core knows them: creating and destroying cudamem's
 * own (destruction goes through the device's object queue), and waiting on
 * or querying any handle in a device's context. The special handles 0,
 * CU_STREAM_LEGACY and CU_STREAM_PER_THREAD belong to no device. Owns no
 * record: the Python Stream object holds the handle and its generation. */
#ifndef CM_STREAM_H
#define CM_STREAM_H

#include <cuda.h>
#include <stdint.h>

#include "context.h"

/* The handles that name a default stream in whatever context is current. */
static inline int
cm_stream_is_default(CUstream handle)
{
    return handle == NULL || handle == CU_STREAM_LEGACY ||
           handle == CU_STREAM_PER_THREAD;
}

/* A new stream in dev's primary context. `flags` are cuStreamCreate's
 * (CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING); with `has_priority`,
 * cuStreamCreateWithPriority (the driver clamps the priority into its
 * range). Returns the device generation it was made in. */
int cm_stream_create(cm_device *dev, unsigned flags, int has_priority,
                     int priority, CUstream *out, uint64_t *generation,
                     cm_error *err);
/* Hands a stream made by cm_stream_create to dev's object queue
 * (cm__release); a stale generation drops it. Counted in
 * dev->streams_retired: memory records that remember the handle stop
 * trusting it (cm_mem_order_pending). */
int cm_stream_release(cm_device *dev, uint64_t generation, CUstream handle,
                      cm_error *err);

/* cuStreamQuery in dev's context: *done 1 when all work is complete, 0 when
 * CUDA_ERROR_NOT_READY; any other code fails. */
int cm_stream_query(cm_device *dev, CUstream handle, int *done, cm_error *err);
/* cuStreamSynchronize in dev's context. Blocks without an end: py/ waits
 * with cm_stream_query so that Ctrl-C can interrupt. */
int cm_stream_synchronize(cm_device *dev, CUstream handle, cm_error *err);

/* The device whose primary context owns a foreign handle (cuStreamGetCtx);
 * CM_ERR_VALUE naming the handle when that context is not a primary one
 * cudamem knows. Default handles fail with CM_ERR_VALUE: they have none. */
int cm_stream_device(CUstream handle, cm_device **dev, cm_error *err);

/* cuCtxGetStreamPriorityRange in dev's context. */
int cm_stream_priority_range(cm_device *dev, int *least, int *greatest,
                             cm_error *err);

#endif
