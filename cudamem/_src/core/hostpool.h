/* hostpool.h: the process-wide pool of page-locked host blocks: pinned
 * buffers (hostmem.h's, registered portable) kept registered for reuse in
 * power-of-two size classes, a limit on the bytes cached, and trim. Does
 * not own the registry (hostmem.c) nor decide who uses it (py/). */
#ifndef CM_HOSTPOOL_H
#define CM_HOSTPOOL_H

#include <stddef.h>

#include "hostmem.h"

/* Requests up to this are rounded up to a power of two (at least a page)
 * and cached; larger ones bypass the pool. */
#define CM_HOSTPOOL_MAX_BLOCK ((size_t)64 << 20)
/* The bytes cached at most until cm_hostpool_set_limit. */
#define CM_HOSTPOOL_DEFAULT_LIMIT ((size_t)256 << 20)

typedef struct cm_hostpool_stats {
    size_t limit;         /* SIZE_MAX: none */
    size_t cached_blocks; /* page-locked blocks waiting for reuse */
    size_t cached_bytes;  /* their bytes (whole size classes) */
} cm_hostpool_stats;

/* A CM_HOST_PINNED buffer of nbytes for dev (the calling thread's current
 * device): a cached block of nbytes' class when one is still page-locked
 * (a block whose device was reset since is freed instead), else a new one
 * of the whole class from cm_host_alloc, with its out-of-memory recovery.
 * nbytes 0 or above CM_HOSTPOOL_MAX_BLOCK: cm_host_alloc's own buffer.
 * Give it back with cm_hostpool_free. While handed out a block counts in
 * stats.h's PINNED of the device that page-locked it; while cached, only
 * in cm_hostpool_stats. */
int cm_hostpool_alloc(cm_device *dev, size_t nbytes, cm_host **out,
                      cm_error *err);

/* Caches h (from cm_hostpool_alloc) for reuse, registered, unless the
 * limit would be passed, its registration is gone, or it bypassed the
 * pool: then cm_host_free. Either happens once the copies noted on it
 * are done (cm__host_retire): until then it is neither cached nor
 * handed out. */
int cm_hostpool_free(cm_host *h, cm_error *err);

/* Frees every cached block; the first failure is reported, the rest still
 * freed. Cached blocks retain the primary contexts of the devices that
 * registered them (hostmem.c): close() trims. */
int cm_hostpool_trim(cm_error *err);

/* Caps the bytes cached (SIZE_MAX: no cap), freeing cached blocks, largest
 * first, down to it. */
int cm_hostpool_set_limit(size_t limit, cm_error *err);

void cm_hostpool_get_stats(cm_hostpool_stats *out);

#endif
