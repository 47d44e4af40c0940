/* copy.h: the copy engine (DESIGN section 4). This version moves
 * contiguous byte ranges; strided layouts come with the full array. Every
 * copy names its stream: `async` 0 means synchronous and complete on
 * return (DESIGN rules 8 and 9), 1 means queued on `stream`. Owns no
 * memory. */
#ifndef CM_COPY_H
#define CM_COPY_H

#include <cuda.h>
#include <stddef.h>

#include "context.h"

/* Each enters dev's primary context if it is not current. Blocking when
 * synchronous: py/ releases the GIL around them for large sizes. */
int cm_copy_htod(cm_device *dev, CUdeviceptr dst, const void *src, size_t n,
                 CUstream stream, int async, cm_error *err);
int cm_copy_dtoh(cm_device *dev, void *dst, CUdeviceptr src, size_t n,
                 CUstream stream, int async, cm_error *err);
int cm_copy_dtod(cm_device *dev, CUdeviceptr dst, CUdeviceptr src, size_t n,
                 CUstream stream, int async, cm_error *err);

#endif
