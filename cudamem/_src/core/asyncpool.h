/* asyncpool.h: the stream-ordered allocator (AsyncMemoryManager): device
 * arrays from the device's current memory pool with cuMemAllocAsync on
 * their stream, freed with cuMemFreeAsync on it, and the pool's release
 * threshold, trim and attributes. Does not own the records (memory.c),
 * the pool (the driver's) nor any Python object. */
#ifndef CM_ASYNCPOOL_H
#define CM_ASYNCPOOL_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "context.h"
#include "memory.h"

typedef struct cm_asyncpool_stats {
    int enabled;
    size_t limit;               /* cm_asyncpool_set_limit's; SIZE_MAX: none */
    size_t held_bytes;          /* what the limit caps */
    uint64_t release_threshold; /* UINT64_MAX: keeps all it reserved */
    uint64_t reserved_current, reserved_high; /* the driver's reserve */
    uint64_t used_current, used_high;         /* handed out */
} cm_asyncpool_stats;

/* Turns stream-ordered allocation on or off for dev. Turning it on fails
 * with CM_ERR_SUPPORT when the device reports
 * CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 0. Memory allocated while on
 * is freed on its stream whenever it goes. A context teardown turns it
 * off: the next context's manager decides. Either way allocation starts
 * again from the device's current pool (cm_asyncpool_set_ipc off). */
int cm_asyncpool_enable(cm_device *dev, int enabled, cm_error *err);
/* Nonzero while dev allocates from its pool. */
int cm__asyncpool_active(cm_device *dev);
/* Waits for the context's work (frees still queued on streams give their
 * memory back to the pool only once they run), then cuMemPoolTrimTo
 * keeping min_bytes reserved. */
int cm_asyncpool_trim(cm_device *dev, size_t min_bytes, cm_error *err);
/* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD of dev's pool: the reserve the
 * driver keeps past a synchronization (UINT64_MAX: all of it). */
int cm_asyncpool_set_release_threshold(cm_device *dev, uint64_t nbytes,
                                       cm_error *err);
/* Caps the bytes dev's stream-ordered allocations hold from the pool,
 * counted by cudamem (the pool's own attributes count other libraries'
 * use too); SIZE_MAX: no cap. An allocation that would pass it fails,
 * without a driver call, as CUDA_ERROR_OUT_OF_MEMORY of the call
 * cm_asyncpool_limit, with oom_limit and oom_held (the bytes held) set;
 * memory.c's recovery (which trims the pool) and retry follow. Lowering
 * it frees nothing. */
extern const char cm_asyncpool_limit[];
void cm_asyncpool_set_limit(cm_device *dev, size_t limit);
/* The pool's attributes, and the limit with what it caps. */
int cm_asyncpool_get_stats(cm_device *dev, cm_asyncpool_stats *out,
                           cm_error *err);

/* IPC through an exportable pool. Turning it on makes dev's pool of
 * POSIX file descriptor handles (cuMemPoolCreate, with the current pool's
 * release threshold) and exports its descriptor, both once for the
 * process (the pool is the device's, not a context's), and from then on
 * dev's stream-ordered allocations come from it (cuMemAllocFromPoolAsync)
 * until it is turned off or a context teardown (as the switch of
 * cm_asyncpool_enable); trim, release threshold and attributes apply to
 * it meanwhile. Fails with CM_ERR_SUPPORT when the device reports no
 * POSIX descriptors in CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES.
 * Memory allocated before stays in the pool it came from. */
int cm_asyncpool_set_ipc(cm_device *dev, int enabled, cm_error *err);
/* Nonzero for a record of the exportable pool. */
int cm_asyncpool_exportable(const cm_mem *m);

typedef struct cm_asyncpool_export_data {
    CUmemPoolPtrExportData data; /* cuMemPoolExportPointer's */
    int fd; /* the pool's descriptor: dev's, not the caller's to close */
} cm_asyncpool_export_data;

/* Waits for m's context's work (the allocation and writes queued on it),
 * then exports m (cm_asyncpool_exportable) with cuMemPoolExportPointer.
 * Blocks. */
int cm_asyncpool_export(cm_mem *m, cm_asyncpool_export_data *out,
                        cm_error *err);

#endif
