/* hostpool.h: the process-wide pool of page-locked host blocks: pinned
 * buffers (hostmem.h's, registered portable) kept registered for reuse:
 * power-of-two size classes for small requests, exact sizes reused within
 * a bound for large ones, a limit on the bytes cached, and trim. Does
 * not own the registry (hostmem.c) nor decide who uses it (py/). */
#ifndef CM_HOSTPOOL_H
#define CM_HOSTPOOL_H

#include <stddef.h>

#include "hostmem.h"

/* Requests up to the round threshold are rounded up to a power of two
 * (at least a page), their size class; larger ones get their exact
 * page-rounded size. The threshold is at most this, the largest class. */
#define CM_HOSTPOOL_MAX_BLOCK ((size_t)64 << 20)
/* The round threshold unless CUDAMEM_PINNED_ROUND_THRESHOLD says: above
 * it a class would waste up to half a megabyte a block. */
#define CM_HOSTPOOL_DEFAULT_THRESHOLD ((size_t)1 << 20)
/* The bytes cached at most unless CUDAMEM_PINNED_MAX_CACHED says. */
#define CM_HOSTPOOL_DEFAULT_LIMIT ((size_t)256 << 20)
/* A cached block of exact size serves a request of n page-rounded bytes
 * when it holds n to n + n / CM_HOSTPOOL_REUSE_DIV bytes (best fit). */
#define CM_HOSTPOOL_REUSE_DIV 8

typedef struct cm_hostpool_stats {
    size_t limit;           /* SIZE_MAX: none */
    size_t round_threshold; /* classes up to it, exact sizes above */
    size_t cached_blocks;   /* page-locked blocks waiting for reuse */
    size_t cached_bytes;    /* their bytes */
    size_t used_blocks;     /* handed out (until given back and idle) */
    size_t requested_bytes; /* what their callers asked for */
    size_t pinned_bytes;    /* what they hold page-locked */
} cm_hostpool_stats;

/* A CM_HOST_PINNED buffer of nbytes for dev (the calling thread's current
 * device): a cached block that fits (nbytes' class up to the round
 * threshold, else within the reuse bound) when one is still page-locked
 * (a block whose device was reset since is freed instead), else a new one
 * of the whole class or of nbytes page-rounded from cm_host_alloc, with
 * its out-of-memory recovery. nbytes 0: cm_host_alloc's own buffer.
 * Give it back with cm_hostpool_free. While handed out a block counts in
 * stats.h's PINNED of the device that page-locked it; while cached, only
 * in cm_hostpool_stats. The tunables come from the environment at the
 * first call of any cm_hostpool_ function. */
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

/* Requests of at most `threshold` bytes (at most CM_HOSTPOOL_MAX_BLOCK;
 * 0: none) are rounded to their class from now on. Cached blocks stay. */
void cm_hostpool_set_round_threshold(size_t threshold);

void cm_hostpool_get_stats(cm_hostpool_stats *out);

#endif
