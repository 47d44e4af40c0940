/* copy.h: the copy engine (DESIGN section 4): contiguous byte ranges
 * (copy.c), strided layouts and fills (copyarray.c). Every copy names its
 * stream: `async` 0 means synchronous and complete on return (DESIGN
 * rules 8 and 9), 1 means queued on `stream`. Owns no memory beyond its
 * own temporaries. */
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
int cm__copy_dtod(cm_device *dev, CUdeviceptr dst, CUdeviceptr src, size_t n,
                  CUstream stream, int async, cm_error *err);
/* cm_copy_htod (to_device) or cm_copy_dtoh between dptr and `host`;
 * `locked`: the host bytes are known page-locked (cm_side.locked). */
int cm__copy_host(cm_device *dev, int to_device, CUdeviceptr dptr, void *host,
                  size_t n, int locked, CUstream stream, int async,
                  cm_error *err);

/* A contiguous copy from src_dev's memory to dst_dev's (another device)
 * with cuMemcpyPeer, in dst_dev's context; `stream` is dst_dev's. Both
 * forms follow the work queued so far on src_dev's legacy default stream
 * and its blocking streams (an event waited for on `stream`, or on the
 * default stream when synchronous), as a copy within src_dev would; the
 * synchronous form is complete on return. */
int cm_copy_peer(cm_device *dst_dev, CUdeviceptr dst, cm_device *src_dev,
                 CUdeviceptr src, size_t n, CUstream stream, int async,
                 cm_error *err);

/* Core-internal: the one driver call of a contiguous copy in the current
 * context, no waiting (the *Async form on `stream` with `async`). Each
 * side is device (`dst`/`src`) or host (`hdst`/`hsrc`), not both host. */
int cm__memcpy(int dst_dev, CUdeviceptr dst, void *hdst, int src_dev,
               CUdeviceptr src, const void *hsrc, size_t n, CUstream stream,
               int async, cm_error *err);

/* Core-internal: after asynchronous work on `stream` touching the host
 * bytes [host, host + extent), in dev's current context: notes it on the
 * registrations there (hostmem.h's cm__host_note), so that their release
 * waits for it. When the work writes `to_host` pageable memory, waits for
 * it: the driver may return from such a copy before the bytes land (its
 * current synchronization rules), and nothing tracks pageable memory. On
 * failure the stream is waited for, and -1. */
int cm__copy_noted(cm_device *dev, CUstream stream, const void *host,
                   size_t extent, int to_host, cm_error *err);

/* One side of an array copy: its first element (device address or host
 * pointer) and its layout. Strides are in bytes, of any sign; a source may
 * have zero strides (broadcast). */
typedef struct cm_side {
    int on_device; /* 1: `ptr` is device memory; 0: `host` */
    CUdeviceptr ptr;
    /* A host side's memory; a device side's host address, where its
     * memory is host memory the device maps (or managed memory), else
     * NULL: a host side may then alias it. */
    void *host;
    int ndim;
    const ptrdiff_t *shape; /* elements per dimension */
    const ptrdiff_t *strides;
    /* A host side its caller knows is page-locked (cm_host_covers over
     * its extent): a copy then asks the registry nothing. 0: unknown. */
    int locked;
} cm_side;

/* Copies every element of `dst` from the element at the same index of
 * `src` (equal shapes, one itemsize), moving exactly those elements and
 * never the extent between them (DESIGN section 4): dimensions collapsed
 * and flipped where both sides have negative strides; one cuMemcpy* when
 * both are contiguous; otherwise the fewest cuMemcpy2D / cuMemcpy3D
 * calls, or a temporary where an estimated cost says it is cheaper (see
 * copyarray.c); broadcast sources expanded by doubling copies on the
 * device; overlapping device ranges through a temporary, and so a host
 * side sharing bytes with a device side's `host` (a host temporary). At
 * least one side is on the device; host memory may be pageable. The
 * destination has no zero stride along a dimension longer than 1
 * (CM_ERR_VALUE).
 * Synchronous copies are complete on return (rule 9); with `async` the
 * calls are queued on `stream` and host memory must stay valid until the
 * stream is done, except that a copy that needs the host after the
 * transfer (a scatter into a host layout, a temporary to release) waits
 * for the stream before returning. Enters dev's context once; blocks when
 * synchronous: py/ releases the GIL around it. */
int cm_copy_array(cm_device *dev, const cm_side *dst, const cm_side *src,
                  size_t itemsize, CUstream stream, int async, cm_error *err);

/* Writes the itemsize-byte `pattern` into every element of device side
 * `dst`: cuMemsetD8/16/32 when the pattern repeats a 1-, 2- or 4-byte
 * unit (cuMemsetD2D* per slice when strided), else one strided memset
 * pass per unit of the element (two cuMemsetD2D32 for 8 bytes), or part
 * of the layout written so and doubled by device copies, or a host
 * temporary copied in: whichever costs least. `pattern` is read before
 * this returns, even when asynchronous. */
int cm_fill(cm_device *dev, const cm_side *dst, const void *pattern,
            size_t itemsize, CUstream stream, int async, cm_error *err);

#endif
