/* staging.h: large contiguous copies between pageable host memory and the
 * device through pinned staging buffers (DESIGN section 4): chunked and
 * double-buffered, the host side copied by a few worker threads. Does not
 * own the buffers (hostpool.h lends them) nor decide strided layouts. */
#ifndef CM_STAGING_H
#define CM_STAGING_H

#include <cuda.h>
#include <stddef.h>

#include "context.h"

/* Defaults of the tunables; CUDAMEM_STAGING_THRESHOLD (bytes; 0 turns
 * staging off), CUDAMEM_STAGING_CHUNK (bytes, rounded up to a page, at
 * most hostpool.h's largest block), CUDAMEM_STAGING_THREADS (1 to 64) and
 * CUDAMEM_STAGING_PREFAULT (0 or 1: fault in a device-to-host copy's
 * destination pages while the chunk's DMA runs) override them, read on
 * first use and by cm_staging_reload. A value that does not parse keeps
 * the default. See benchmarks/NOTES.md. */
#define CM_STAGING_THRESHOLD ((size_t)4 << 20)
#define CM_STAGING_CHUNK ((size_t)4 << 20)
#define CM_STAGING_THREADS 4
#define CM_STAGING_PREFAULT 1

typedef struct cm_staging_config {
    size_t threshold, chunk;
    int threads, prefault;
} cm_staging_config;

/* Reads the environment again and forgets the cached device attributes
 * (tests). */
void cm_staging_reload(void);
void cm_staging_get_config(cm_staging_config *out);

/* The poll hook: called by the copying thread between chunks, at most
 * every CM_STAGING_POLL_NS, with no lock of core's held. Nonzero stops
 * the copy: no further chunk is issued, those queued are waited for, the
 * buffers go back to the pool and the copy fails with CM_ERR_INTERRUPTED,
 * its destination partly written. py/ installs one that runs pending
 * signal handlers, so that Ctrl-C interrupts a long copy (DESIGN rule 7);
 * NULL (the default) polls nothing. */
#define CM_STAGING_POLL_NS 20000000L
typedef int (*cm_staging_poll_fn)(void);
void cm_staging_set_poll(cm_staging_poll_fn poll);

/* Core-internal, in dev's current context: copies n bytes between host
 * memory `host` and device memory `dptr` (`to_dev`: host to device)
 * through the staging pipeline, or sets *staged to 0 and does nothing
 * when staging does not apply: n below the threshold, the host range
 * page-locked already (the registry of hostmem.h, or the driver's
 * pointer attributes), or a device that reads pageable memory through
 * the host's page tables. Whether synchronous or queued on `stream`, the
 * copy is complete on return (as the driver's own copies of pageable
 * memory are with respect to the host). On failure or interruption every
 * queued chunk is waited for before its buffer goes back to the pool. */
int cm__staging_copy(cm_device *dev, int to_dev, CUdeviceptr dptr, void *host,
                     size_t n, CUstream stream, int *staged, cm_error *err);

#endif
