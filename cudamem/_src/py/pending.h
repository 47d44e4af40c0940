/* pending.h (py/): numba's deallocation surface over core's per-device
 * queues: Deallocations objects (len, clear, disable) and the guard that
 * defer_cleanup() and disable() return. Core owns the queues. */
#ifndef CMPY_PENDING_H
#define CMPY_PENDING_H

#include "device.h"

#include "../core/release.h"

/* ctx.deallocations (CM_QUEUE_OBJECTS) and
 * ctx.memory_manager.deallocations (CM_QUEUE_MEMORY). New reference. */
PyObject *cmpy_deallocations_new(cmpy_state *st, cmpy_Context *ctx,
                                 cm_queue_id q);
/* A context manager that defers ctx's queues in `mask` (1 << queue id)
 * while inside it. New reference. */
PyObject *cmpy_defer_guard_new(cmpy_state *st, cmpy_Context *ctx,
                               unsigned mask);

#endif
