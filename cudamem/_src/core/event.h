/* event.h: events as core knows them: creating them in a device's primary
 * context (destruction goes through the device's object queue), recording,
 * querying, waiting and timing. Owns no record: the Python Event object
 * holds the handle and the generation it was made in. */
#ifndef CM_EVENT_H
#define CM_EVENT_H

#include <cuda.h>
#include <stdint.h>

#include "context.h"

/* A new event in dev's primary context with cuEventCreate's `flags`
 * (cudamem's own events pass CU_EVENT_DISABLE_TIMING). Returns the device
 * generation it was made in. */
int cm_event_create(cm_device *dev, unsigned flags, CUevent *out,
                    uint64_t *generation, cm_error *err);
/* Hands an event made by cm_event_create to dev's object queue
 * (cm__release); a stale generation drops it. */
int cm_event_release(cm_device *dev, uint64_t generation, CUevent handle,
                     cm_error *err);
/* 0 when an event made at `generation` can still be used; CM_ERR_STATE
 * naming the event once its context was reset or closed, CM_ERR_FORK in a
 * forked child. */
int cm_event_check(cm_device *dev, uint64_t generation, CUevent handle,
                   cm_error *err);

/* The operations, in dev's context; `stream` is any handle of it (the
 * default ones included). */
int cm_event_record(cm_device *dev, CUevent handle, CUstream stream,
                    cm_error *err);
/* cuEventQuery: *done 1 when the recorded work is complete (or nothing
 * was recorded), 0 when CUDA_ERROR_NOT_READY; any other code fails. */
int cm_event_query(cm_device *dev, CUevent handle, int *done, cm_error *err);
/* cuEventSynchronize. Blocks: py/ waits with cm_event_query first so that
 * Ctrl-C can interrupt. */
int cm_event_synchronize(cm_device *dev, CUevent handle, cm_error *err);
/* cuEventElapsedTime: milliseconds from `start` to `end`. */
int cm_event_elapsed(cm_device *dev, CUevent start, CUevent end, float *ms,
                     cm_error *err);
/* cuStreamWaitEvent, in dev's context, the stream's: work queued on
 * `stream` after this waits for the event's recorded work, on the device;
 * the host does not wait. The event may be of any device's context (the
 * driver allows it). */
int cm_event_stream_wait(cm_device *dev, CUstream stream, CUevent handle,
                         cm_error *err);
/* Orders `consumer` after the work queued so far on `producer` (both of
 * dev's context), on the device: a timing-less event recorded on producer
 * and waited for by consumer, then released. The host does not wait. */
int cm_event_order(cm_device *dev, CUstream producer, CUstream consumer,
                   cm_error *err);
/* The same across devices: `producer` of pdev's context, `consumer` of
 * cdev's (a default stream's handle means that device's). */
int cm_event_order_across(cm_device *pdev, CUstream producer, cm_device *cdev,
                          CUstream consumer, cm_error *err);

#endif
