/* managed.h: what managed memory can be told about a range of it: prefetch
 * to a device or the host, and cuMemAdvise hints. The allocation record is
 * memory.h's; this file checks the capabilities these need and calls the
 * optional (ABI 12020) entry points. */
#ifndef CM_MANAGED_H
#define CM_MANAGED_H

#include <cuda.h>
#include <stddef.h>

#include "context.h"

/* cuMemPrefetchAsync of [ptr, ptr + nbytes) (managed memory of dev) to
 * device `to`, or the host when `to` is NULL, queued on `stream` in dev's
 * context; the caller waits for a synchronous one. CM_ERR_SUPPORT when the
 * driver lacks the entry point or the device concurrent managed access. */
int cm_managed_prefetch(cm_device *dev, CUdeviceptr ptr, size_t nbytes,
                        cm_device *to, CUstream stream, cm_error *err);
/* cuMemAdvise of [ptr, ptr + nbytes) with `advice` about `to` (NULL: the
 * host; read-mostly hints ignore it), in dev's
 * context. The location hints (preferred location, accessed by) need
 * concurrent managed access (CM_ERR_SUPPORT otherwise). */
int cm_managed_advise(cm_device *dev, CUdeviceptr ptr, size_t nbytes,
                      CUmem_advise advice, cm_device *to, cm_error *err);

#endif
