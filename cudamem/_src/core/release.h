/* release.h: where cudamem's driver objects go when their last owner lets
 * go (DESIGN rule 5). Each device has numba's two queues for its primary
 * context: one for memory, one for streams and events. A generation that is
 * no longer the device's drops the free: the driver freed it with the
 * context (memory holding its own retain excepted: see
 * cm__release_retained). Owns the free
 * functions; does not own the records. */
#ifndef CM_RELEASE_H
#define CM_RELEASE_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"
#include "pending.h"

typedef enum cm_queue_id {
    CM_QUEUE_MEMORY = 0, /* memory_manager.deallocations */
    CM_QUEUE_OBJECTS,    /* context.deallocations: streams, events */
    CM_QUEUE_COUNT
} cm_queue_id;

/* Hands the free of `handle`, made in dev's primary context at
 * `generation`, to its queue (by kind), which may flush. The caller never
 * owns the handle afterwards: when the queue cannot grow the handle is
 * freed at once. -1: a free failed (this one or a queued one), reported
 * in err. */
int cm__release(cm_device *dev, uint64_t generation, cm_free_kind kind,
                uint64_t handle, size_t nbytes, cm_error *err);

/* cm__release for memory whose record holds a retain of dev's primary
 * context (managed memory; write-combined host memory, CM_FREE_HOST), so
 * that the memory outlives cudamem's own retain (close()). `resets` is
 * the device's reset count when it was made. While `generation` is the
 * device's, the free is queued (the queue frees, then releases the
 * retain); after a close it runs at once; after a reset the memory is gone
 * and only the retain is released. */
int cm__release_retained(cm_device *dev, uint64_t generation, uint64_t resets,
                         cm_free_kind kind, uint64_t handle, size_t nbytes,
                         cm_error *err);

/* For a caller that must not wait for the device (a finalizer, holding
 * the GIL): between cm_release_nowait_begin and cm_release_nowait_end on
 * this thread, a release that takes its queue over the limits leaves the
 * flush due rather than running it. Sections nest; the outermost _end
 * returns the device whose queues are due (NULL: none) and in *queues
 * which (a bit per cm_queue_id), for cm_release_flush_due, called where
 * waiting is fine. */
void cm_release_nowait_begin(void);
cm_device *cm_release_nowait_end(unsigned *queues);
int cm_release_flush_due(cm_device *dev, unsigned queues, cm_error *err);

/* numba's deallocations.clear(): frees what the queue holds unless it is
 * deferred. The first failed free stops the flush and is reported; the
 * rest stay queued. */
int cm_queue_flush(cm_device *dev, cm_queue_id q, cm_error *err);
/* Both queues (Context.reset(), out-of-memory). */
int cm_queues_flush(cm_device *dev, cm_error *err);
/* Flushes q so that a failed call can be retried (out-of-memory; a
 * mapping whose close is still queued): 1 when q held something and was
 * not deferred, else 0. A failed flush is not the caller's error (the
 * retry's is): it is dropped. */
int cm__queue_relieve(cm_device *dev, cm_queue_id q);

/* numba's deallocations.disable() on one queue (nests); defer_cleanup()
 * is both. Leaving does not flush. */
int cm_queue_defer(cm_device *dev, cm_queue_id q, cm_error *err);
void cm_queue_undefer(cm_device *dev, cm_queue_id q);

/* Count and bytes pending, and whether the queue is deferred; zeros for a
 * device whose queues were never made. */
void cm_queue_stats(cm_device *dev, cm_queue_id q, size_t *count,
                    size_t *bytes, int *deferred);

/* Interpreter exit: flushes every queue once, then stops them; releases
 * after that leak on purpose. The first failure is reported in err; the
 * other queues are still flushed. */
int cm_queues_shutdown(cm_error *err);

#endif
