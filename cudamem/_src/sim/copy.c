/* copy.c: every cuMemcpy* and cuMemset* form: validation against the
 * allocation table and the pitch rules, the driver's synchronization of the
 * "synchronous" calls, and the stream operations that move the bytes. Not
 * the allocation table (memory.c) nor the streams themselves (stream.c). */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

/* One side of a copy, in the terms of CUDA_MEMCPY3D_PEER. */
typedef struct side {
    CUmemorytype type;
    uintptr_t addr;
    size_t x, y, z, pitch, height;
    CUcontext ctx; /* peer copies: the context owning the memory */
    int peer;
} side;

/* A validated copy: rows of `w` bytes, `h` per slice, `d` slices. */
typedef struct copy_op {
    sim_op op;
    sim_entry id;
    size_t w, h, d;
    unsigned char *dst, *src;
    size_t dpitch, spitch, dslice, sslice;
    unsigned char *snapshot; /* owned copy of a pageable source */
    unsigned char *scratch;  /* overlapping sides: the source, gathered */
} copy_op;

typedef struct set_op {
    sim_op op;
    sim_entry id;
    unsigned char *dst;
    size_t pitch, width, height; /* width in elements */
    unsigned elsize;
    unsigned value;
} set_op;

static int
device_side(const sim_alloc *a)
{
    return a && (a->kind == SIM_MEM_DEVICE || a->kind == SIM_MEM_IPC ||
                 a->kind == SIM_MEM_MANAGED);
}

/* Device memory the host cannot address (IPC mappings included). */
static int
device_kind_only(const sim_alloc *a)
{
    return a->kind == SIM_MEM_DEVICE || a->kind == SIM_MEM_IPC;
}

/* Lock held: the allocation a resolved range lies in, 0 for pageable. */
static unsigned long long
buffer_of(const sim_ref *ref)
{
    return ref->alloc ? ref->alloc->buffer_id : 0;
}

static int
mul_add(size_t a, size_t b, size_t c, size_t *out)
{
    size_t t;
    return __builtin_mul_overflow(a, b, &t) ||
           __builtin_add_overflow(t, c, out);
}

/* Resolves one side: its first byte and the span of bytes it touches. */
static CUresult
resolve_side(const side *s, size_t w, size_t h, size_t d, int write,
             sim_ref *ref, uintptr_t *start, size_t *span)
{
    int want;
    switch (s->type) {
    case CU_MEMORYTYPE_HOST:
        want = SIM_WANT_HOST;
        break;
    case CU_MEMORYTYPE_DEVICE:
        want = SIM_WANT_DEVICE;
        break;
    case CU_MEMORYTYPE_UNIFIED:
        want = SIM_WANT_ANY;
        break;
    case CU_MEMORYTYPE_ARRAY:
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t off, rows, len;
    if (s->pitch > SIM_MAX_PITCH || s->x > s->pitch || w > s->pitch - s->x ||
        s->y > s->height || h > s->height - s->y)
        return CUDA_ERROR_INVALID_VALUE;
    if (mul_add(s->z, s->height, s->y, &rows) ||
        mul_add(rows, s->pitch, s->x, &off) ||
        mul_add(d - 1, s->height, h - 1, &rows) ||
        mul_add(rows, s->pitch, w, &len) || s->addr + off < s->addr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_mem_resolve(s->addr + off, len, want, ref);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->peer) {
        if (!sim_ctx_valid(s->ctx))
            return CUDA_ERROR_INVALID_CONTEXT;
        if (device_side(ref->alloc) && ref->alloc->ctx->dev != s->ctx->dev)
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (write && ref->alloc && ref->alloc->kind == SIM_MEM_REGISTERED &&
        (ref->alloc->flags & CU_MEMHOSTREGISTER_READ_ONLY))
        return CUDA_ERROR_INVALID_VALUE;
    *start = s->addr + off;
    *span = len;
    return CUDA_SUCCESS;
}

static int
on_device(const side *s, const sim_ref *ref)
{
    return s->type == CU_MEMORYTYPE_DEVICE ||
           (s->type == CU_MEMORYTYPE_UNIFIED && device_side(ref->alloc));
}

/* Strict pitches (CUDAMEM_SIM_STRICT_PITCH): cuda.h lets cuMemcpy2D and
 * cuMemcpy2DAsync fail "on intra-device memory copies" for pitches not
 * computed by cuMemAllocPitch, whose pitches are multiples of the texture
 * pitch alignment (cuMemAllocPitch's guarantee). cuMemcpy2DUnaligned and
 * the 3-D copies carry no such restriction. A side is device memory when
 * the call says so, or when a unified address resolves to it. */
static int
pitch_refused(sim_entry id, CUcontext ctx, const side *dst,
              const sim_ref *dref, const side *src, const sim_ref *sref)
{
    int align;

    if ((id != SIM_cuMemcpy2D && id != SIM_cuMemcpy2DAsync) ||
        !__atomic_load_n(&sim.strict_pitch, __ATOMIC_RELAXED))
        return 0;
    if (!on_device(dst, dref) || !on_device(src, sref))
        return 0;
    if (sim_device_attribute(ctx->dev,
                             CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT,
                             &align) != 0 ||
        align <= 0)
        return 1;
    return dst->pitch % (size_t)align != 0 || src->pitch % (size_t)align != 0;
}

static size_t
row_offset(size_t k, size_t h, size_t pitch, size_t slice)
{
    return (k / h) * slice + (k % h) * pitch;
}

/* Nonzero when any destination row shares a byte with a source row. Rows
 * of each side ascend without overlapping, so one merge pass decides. */
static int
rows_overlap(const copy_op *c, size_t dspan, size_t sspan)
{
    if (c->dst >= c->src + sspan || c->src >= c->dst + dspan)
        return 0;
    size_t n = c->h * c->d, i = 0, j = 0;
    while (i < n && j < n) {
        const unsigned char *a = c->dst +
                                 row_offset(i, c->h, c->dpitch, c->dslice);
        const unsigned char *b = c->src +
                                 row_offset(j, c->h, c->spitch, c->sslice);
        if (a < b + c->w && b < a + c->w)
            return 1;
        if (a < b)
            i++;
        else
            j++;
    }
    return 0;
}

/* Gathers rows k of h * d rows into one packed buffer. */
static void
gather(unsigned char *to, const unsigned char *from, size_t w, size_t n,
       size_t h, size_t pitch, size_t slice)
{
    for (size_t k = 0; k < n; k++)
        memcpy(to + k * w, from + row_offset(k, h, pitch, slice), w);
}

static void
copy_run(sim_op *op)
{
    copy_op *c = (copy_op *)op;
    const unsigned char *src = c->src;
    size_t spitch = c->spitch, sslice = c->sslice;
    if (c->scratch) {
        /* Overlapping sides: read the whole source first, as memmove. */
        gather(c->scratch, c->src, c->w, c->h * c->d, c->h, c->spitch,
               c->sslice);
        src = c->scratch;
        spitch = c->w;
        sslice = c->w * c->h;
    }
    for (size_t z = 0; z < c->d; z++)
        for (size_t y = 0; y < c->h; y++)
            memcpy(c->dst + z * c->dslice + y * c->dpitch,
                   src + z * sslice + y * spitch, c->w);
    sim_count_bytes(c->id, c->w * c->h * c->d);
}

static void
copy_free(sim_op *op)
{
    copy_op *c = (copy_op *)op;
    free(c->snapshot);
    free(c->scratch);
    free(c);
}

/* The driver's behaviour for a copy: see DESIGN rule 9. An async copy
 * from device memory into pageable memory "might be synchronous" (API
 * synchronization behavior): it is, unless CUDAMEM_SIM_STRICT_DTOH asks
 * for the other answer the documentation allows. A synchronous copy from
 * pageable memory to the device returns once the source is staged, "but
 * the DMA to final destination may not have completed" (after "a stream
 * sync"): it has, as on a driver whose DMA is faster than the caller's
 * next call, unless CUDAMEM_SIM_STRICT_HTOD asks for the copy still
 * queued. */
static sim_sync
copy_mode(const sim_alloc *dst, const sim_alloc *src, int async)
{
    if (async && !dst && src && device_kind_only(src) &&
        __atomic_load_n(&sim.strict_dtoh, __ATOMIC_RELAXED))
        return SIM_ASYNC;
    if (async)
        return dst ? SIM_ASYNC : SIM_BLOCK;
    /* cuPointerSetAttribute(SYNC_MEMOPS): always fully synchronous. */
    if ((dst && dst->sync_memops) || (src && src->sync_memops))
        return SIM_BLOCK;
    if (!device_side(dst))
        return SIM_BLOCK;
    if (src && !(src->kind == SIM_MEM_DEVICE || src->kind == SIM_MEM_IPC))
        return SIM_BLOCK;
    if (!src)
        return __atomic_load_n(&sim.strict_htod, __ATOMIC_RELAXED) ? SIM_STAGED
                                                                   : SIM_BLOCK;
    return SIM_RETURN_EARLY;
}

/* do_copy's `async`: 0 a synchronous call, 1 an *Async call, or
 * COPY_SRC_AT_CALL an async copy whose source is read before the call
 * returns (cuMemcpyBatchAsync's SRC_ACCESS_ORDER_DURING_API_CALL). */
#define COPY_SRC_AT_CALL 2

static CUresult
do_copy(sim_entry id, const side *dst, const side *src, size_t w, size_t h,
        size_t d, CUstream hStream, int ptds, int async)
{
    CUcontext ctx;
    sim_ref dref, sref;
    uintptr_t daddr = 0, saddr = 0;
    size_t dspan = 0, sspan = 0;
    copy_op *c = NULL;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS || w == 0 || h == 0 || d == 0)
        goto done;
    r = resolve_side(dst, w, h, d, 1, &dref, &daddr, &dspan);
    if (r == CUDA_SUCCESS)
        r = resolve_side(src, w, h, d, 0, &sref, &saddr, &sspan);
    if (r == CUDA_SUCCESS && pitch_refused(id, ctx, dst, &dref, src, &sref))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        goto done;
    c = calloc(1, sizeof(*c));
    if (!c) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    c->id = id;
    c->w = w;
    c->h = h;
    c->d = d;
    c->dst = dref.bytes;
    c->src = sref.bytes;
    c->dpitch = dst->pitch;
    c->spitch = src->pitch;
    c->dslice = dst->pitch * dst->height;
    c->sslice = src->pitch * src->height;
    if (rows_overlap(c, dspan, sspan)) {
        /* Undefined on the driver, not an error: copy as memmove does. */
        c->scratch = malloc(w * h * d);
        if (!c->scratch) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto done;
        }
        if (__atomic_load_n(&sim.hazards, __ATOMIC_RELAXED))
            sim_hazard_overlap(id, daddr, dspan, saddr, sspan);
    }
    sim_sync mode = copy_mode(dref.alloc, sref.alloc, async);
    /* CUDAMEM_SIM_STRICT_STAGING: an async copy from pageable memory to
     * the device may stage the source when the stream runs ("the driver
     * may synchronize with the stream and stage the copy"), so it reads
     * the source then; the synchronous forms stage before returning. */
    int pageable_src = sref.alloc == NULL &&
                       !(async && device_side(dref.alloc) &&
                         __atomic_load_n(&sim.strict_staging,
                                         __ATOMIC_RELAXED));
    unsigned long long did = buffer_of(&dref), sid = buffer_of(&sref);
    sim_unlock();

    c->op.run = copy_run;
    c->op.free = copy_free;
    c->op.entry = id;
    c->op.pageable = pageable_src || dref.alloc == NULL;
    c->op.ranges[0] = (sim_range){daddr, dspan, 1, did};
    c->op.nranges = 1;
    if ((pageable_src || async == COPY_SRC_AT_CALL) && mode != SIM_BLOCK) {
        /* The driver copies pageable memory to staging at call time. */
        c->snapshot = malloc(w * h * d);
        if (!c->snapshot) {
            copy_free(&c->op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        gather(c->snapshot, c->src, w, h * d, h, c->spitch, c->sslice);
        c->src = c->snapshot;
        c->spitch = w;
        c->sslice = w * h;
    }
    else {
        c->op.ranges[1] = (sim_range){saddr, sspan, 0, sid};
        c->op.nranges = 2;
    }
    return sim_stream_submit(hStream, ptds, &c->op, mode);
done:
    sim_unlock();
    free(c);
    return r;
}

static void
linear(side *s, CUmemorytype type, uintptr_t addr, size_t n)
{
    memset(s, 0, sizeof(*s));
    s->type = type;
    s->addr = addr;
    s->pitch = n;
    s->height = 1;
}

static CUresult
copy1d(sim_entry id, int dtype, uintptr_t dst, int stype, uintptr_t src,
       size_t n, CUstream hStream, int ptds, int async)
{
    side ds, ss;
    linear(&ds, (CUmemorytype)dtype, dst, n);
    linear(&ss, (CUmemorytype)stype, src, n);
    return do_copy(id, &ds, &ss, n, 1, 1, hStream, ptds, async);
}

static CUresult
copy_peer(sim_entry id, CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
          CUcontext sctx, size_t n, CUstream hStream, int ptds, int async)
{
    side ds, ss;
    linear(&ds, CU_MEMORYTYPE_DEVICE, dst, n);
    linear(&ss, CU_MEMORYTYPE_DEVICE, src, n);
    ds.peer = ss.peer = 1;
    ds.ctx = dctx;
    ss.ctx = sctx;
    return do_copy(id, &ds, &ss, n, 1, 1, hStream, ptds, async);
}

static CUresult
copy2d(sim_entry id, const CUDA_MEMCPY2D *p, CUstream hStream, int ptds,
       int async)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    /* One slice: the slice height only has to admit the rows. */
    side ds = {.type = p->dstMemoryType,
               .addr = p->dstMemoryType == CU_MEMORYTYPE_HOST
                           ? (uintptr_t)p->dstHost
                           : (uintptr_t)p->dstDevice,
               .x = p->dstXInBytes,
               .y = p->dstY,
               .pitch = p->dstPitch,
               .height = p->dstY + p->Height};
    side ss = {.type = p->srcMemoryType,
               .addr = p->srcMemoryType == CU_MEMORYTYPE_HOST
                           ? (uintptr_t)p->srcHost
                           : (uintptr_t)p->srcDevice,
               .x = p->srcXInBytes,
               .y = p->srcY,
               .pitch = p->srcPitch,
               .height = p->srcY + p->Height};
    return do_copy(id, &ds, &ss, p->WidthInBytes, p->Height, 1, hStream, ptds,
                   async);
}

static CUresult
copy3d(sim_entry id, const CUDA_MEMCPY3D *p, CUstream hStream, int ptds,
       int async)
{
    if (!p || p->srcLOD || p->dstLOD || p->reserved0 || p->reserved1)
        return CUDA_ERROR_INVALID_VALUE;
    side ds = {.type = p->dstMemoryType,
               .addr = p->dstMemoryType == CU_MEMORYTYPE_HOST
                           ? (uintptr_t)p->dstHost
                           : (uintptr_t)p->dstDevice,
               .x = p->dstXInBytes,
               .y = p->dstY,
               .z = p->dstZ,
               .pitch = p->dstPitch,
               .height = p->dstHeight};
    side ss = {.type = p->srcMemoryType,
               .addr = p->srcMemoryType == CU_MEMORYTYPE_HOST
                           ? (uintptr_t)p->srcHost
                           : (uintptr_t)p->srcDevice,
               .x = p->srcXInBytes,
               .y = p->srcY,
               .z = p->srcZ,
               .pitch = p->srcPitch,
               .height = p->srcHeight};
    return do_copy(id, &ds, &ss, p->WidthInBytes, p->Height, p->Depth, hStream,
                   ptds, async);
}

static CUresult
copy3d_peer(sim_entry id, const CUDA_MEMCPY3D_PEER *p, CUstream hStream,
            int ptds, int async)
{
    if (!p || p->srcLOD || p->dstLOD)
        return CUDA_ERROR_INVALID_VALUE;
    side ds = {.type = p->dstMemoryType,
               .addr = p->dstMemoryType == CU_MEMORYTYPE_HOST
                           ? (uintptr_t)p->dstHost
                           : (uintptr_t)p->dstDevice,
               .x = p->dstXInBytes,
               .y = p->dstY,
               .z = p->dstZ,
               .pitch = p->dstPitch,
               .height = p->dstHeight,
               .ctx = p->dstContext,
               .peer = 1};
    side ss = {.type = p->srcMemoryType,
               .addr = p->srcMemoryType == CU_MEMORYTYPE_HOST
                           ? (uintptr_t)p->srcHost
                           : (uintptr_t)p->srcDevice,
               .x = p->srcXInBytes,
               .y = p->srcY,
               .z = p->srcZ,
               .pitch = p->srcPitch,
               .height = p->srcHeight,
               .ctx = p->srcContext,
               .peer = 1};
    return do_copy(id, &ds, &ss, p->WidthInBytes, p->Height, p->Depth, hStream,
                   ptds, async);
}

/* ---------------------------------------------------------------------------
 * Memsets. */

static void
set_run(sim_op *op)
{
    set_op *s = (set_op *)op;
    for (size_t y = 0; y < s->height; y++) {
        unsigned char *row = s->dst + y * s->pitch;
        if (s->elsize == 1) {
            memset(row, (int)s->value, s->width);
        }
        else if (s->elsize == 2) {
            uint16_t v = (uint16_t)s->value;
            for (size_t i = 0; i < s->width; i++)
                memcpy(row + 2 * i, &v, 2);
        }
        else {
            uint32_t v = s->value;
            for (size_t i = 0; i < s->width; i++)
                memcpy(row + 4 * i, &v, 4);
        }
    }
    sim_count_bytes(s->id, s->width * s->elsize * s->height);
}

static CUresult
do_set(sim_entry id, CUdeviceptr dst, size_t pitch, unsigned value,
       unsigned elsize, size_t width, size_t height, CUstream hStream,
       int ptds, int async)
{
    CUcontext ctx;
    sim_ref ref;
    size_t wbytes, span = 0;
    set_op *s = NULL;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    if (dst % elsize || __builtin_mul_overflow(width, elsize, &wbytes)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (width == 0 || height == 0)
        goto done;
    if (height > 1) {
        /* The pitch is unused for a single row. */
        if (pitch % elsize || pitch < wbytes || pitch > SIM_MAX_PITCH ||
            mul_add(height - 1, pitch, wbytes, &span)) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto done;
        }
    }
    else {
        span = wbytes;
    }
    r = sim_mem_resolve(dst, span, SIM_WANT_DEVICE, &ref);
    if (r == CUDA_SUCCESS && ref.alloc->kind == SIM_MEM_REGISTERED &&
        (ref.alloc->flags & CU_MEMHOSTREGISTER_READ_ONLY))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        goto done;
    s = calloc(1, sizeof(*s));
    if (!s) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    /* The synchronous forms are fully synchronous when the target is
     * pinned host memory or unified memory, asynchronous otherwise. */
    sim_sync mode = async ? SIM_ASYNC
                    : device_kind_only(ref.alloc) && !ref.alloc->sync_memops
                        ? SIM_RETURN_EARLY
                        : SIM_BLOCK;
    unsigned long long buffer_id = buffer_of(&ref);
    sim_unlock();
    s->id = id;
    s->dst = ref.bytes;
    s->pitch = pitch;
    s->width = width;
    s->height = height;
    s->elsize = elsize;
    s->value = value;
    s->op.run = set_run;
    s->op.entry = id;
    s->op.ranges[0] = (sim_range){dst, span, 1, buffer_id};
    s->op.nranges = 1;
    return sim_stream_submit(hStream, ptds, &s->op, mode);
done:
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Entry points. Each has its per-thread default stream twin (ptds = 1). */

enum {
    H = CU_MEMORYTYPE_HOST,
    D = CU_MEMORYTYPE_DEVICE,
    U = CU_MEMORYTYPE_UNIFIED
};

/* ---------------------------------------------------------------------------
 * cuMemcpyBatchAsync (the CUDA 13 ABI). Every copy is checked before any is
 * queued; each is then queued in order on the stream, which the batch's
 * "no order within a batch" allows. */

static CUresult
batch_copy(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
           CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
           CUstream hStream, int ptds)
{
    side ds, ss;
    sim_ref ref;
    uintptr_t start;
    size_t i, k, span;
    CUresult r = CUDA_SUCCESS;

    if (!dsts || !srcs || !sizes || count == 0 || !attrs || !attrsIdxs ||
        numAttrs == 0 || numAttrs > count || attrsIdxs[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* "Must not be legacy NULL stream." */
    if (sim_names_legacy(hStream, ptds))
        return CUDA_ERROR_INVALID_VALUE;
    for (k = 0; k < numAttrs; k++) {
        if ((k > 0 && attrsIdxs[k] <= attrsIdxs[k - 1]) ||
            attrsIdxs[k] >= count ||
            attrs[k].srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
            attrs[k].srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY ||
            (attrs[k].flags &
             ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE))
            return CUDA_ERROR_INVALID_VALUE;
    }
    sim_lock();
    for (i = 0; i < count && r == CUDA_SUCCESS; i++) {
        if (sizes[i] == 0)
            continue;
        linear(&ds, CU_MEMORYTYPE_UNIFIED, dsts[i], sizes[i]);
        linear(&ss, CU_MEMORYTYPE_UNIFIED, srcs[i], sizes[i]);
        r = resolve_side(&ds, sizes[i], 1, 1, 1, &ref, &start, &span);
        if (r == CUDA_SUCCESS)
            r = resolve_side(&ss, sizes[i], 1, 1, 0, &ref, &start, &span);
    }
    sim_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    for (i = 0, k = 0; i < count && r == CUDA_SUCCESS; i++) {
        while (k + 1 < numAttrs && attrsIdxs[k + 1] <= i)
            k++;
        linear(&ds, CU_MEMORYTYPE_UNIFIED, dsts[i], sizes[i]);
        linear(&ss, CU_MEMORYTYPE_UNIFIED, srcs[i], sizes[i]);
        r = do_copy(SIM_cuMemcpyBatchAsync, &ds, &ss, sizes[i], 1, 1, hStream,
                    ptds,
                    attrs[k].srcAccessOrder ==
                            CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL
                        ? COPY_SRC_AT_CALL
                        : 1);
    }
    return r;
}

/* ---------------------------------------------------------------------------
 * Entry points: one row per exported ABI alias (see SIM_ALIAS_WRAPPER in
 * sim.h); the wrappers of the W rows, then the cuGetProcAddress rows. */

/* clang-format off */
#define COPY_ALIASES(W, R)                                                    \
    W(cuMemcpy, cuMemcpy, 4000, , copy1d,                                     \
      (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount),                   \
      (SIM_cuMemcpy, U, dst, U, src, ByteCount, NULL, 0, 0))                  \
    W(cuMemcpy_ptds, cuMemcpy, 7000, _ptds, copy1d,                           \
      (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount),                   \
      (SIM_cuMemcpy, U, dst, U, src, ByteCount, NULL, 1, 0))                  \
    W(cuMemcpyAsync, cuMemcpyAsync, 4000, , copy1d,                           \
      (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), \
      (SIM_cuMemcpyAsync, U, dst, U, src, ByteCount, hStream, 0, 1))          \
    W(cuMemcpyAsync_ptsz, cuMemcpyAsync, 7000, _ptsz, copy1d,                 \
      (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream), \
      (SIM_cuMemcpyAsync, U, dst, U, src, ByteCount, hStream, 1, 1))          \
    W(cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, , copy1d,                          \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),         \
      (SIM_cuMemcpyHtoD, D, dstDevice, H, (uintptr_t)srcHost, ByteCount,      \
      NULL, 0, 0))                                                            \
    W(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 7000, _ptds, copy1d,                \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),         \
      (SIM_cuMemcpyHtoD, D, dstDevice, H, (uintptr_t)srcHost, ByteCount,      \
      NULL, 1, 0))                                                            \
    W(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, , copy1d,                \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,          \
      CUstream hStream), (SIM_cuMemcpyHtoDAsync, D, dstDevice, H,             \
      (uintptr_t)srcHost, ByteCount, hStream, 0, 1))                          \
    W(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 7000, _ptsz, copy1d,      \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,          \
      CUstream hStream), (SIM_cuMemcpyHtoDAsync, D, dstDevice, H,             \
      (uintptr_t)srcHost, ByteCount, hStream, 1, 1))                          \
    W(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, , copy1d,                          \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),               \
      (SIM_cuMemcpyDtoH, H, (uintptr_t)dstHost, D, srcDevice, ByteCount,      \
      NULL, 0, 0))                                                            \
    W(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 7000, _ptds, copy1d,                \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),               \
      (SIM_cuMemcpyDtoH, H, (uintptr_t)dstHost, D, srcDevice, ByteCount,      \
      NULL, 1, 0))                                                            \
    W(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, , copy1d,                \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,                \
      CUstream hStream), (SIM_cuMemcpyDtoHAsync, H, (uintptr_t)dstHost, D,    \
      srcDevice, ByteCount, hStream, 0, 1))                                   \
    W(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 7000, _ptsz, copy1d,      \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,                \
      CUstream hStream), (SIM_cuMemcpyDtoHAsync, H, (uintptr_t)dstHost, D,    \
      srcDevice, ByteCount, hStream, 1, 1))                                   \
    W(cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, , copy1d,                          \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),       \
      (SIM_cuMemcpyDtoD, D, dstDevice, D, srcDevice, ByteCount, NULL, 0, 0))  \
    W(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 7000, _ptds, copy1d,                \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),       \
      (SIM_cuMemcpyDtoD, D, dstDevice, D, srcDevice, ByteCount, NULL, 1, 0))  \
    W(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, , copy1d,                \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,        \
      CUstream hStream), (SIM_cuMemcpyDtoDAsync, D, dstDevice, D, srcDevice,  \
      ByteCount, hStream, 0, 1))                                              \
    W(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 7000, _ptsz, copy1d,      \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,        \
      CUstream hStream), (SIM_cuMemcpyDtoDAsync, D, dstDevice, D, srcDevice,  \
      ByteCount, hStream, 1, 1))                                              \
    W(cuMemcpyPeer, cuMemcpyPeer, 4000, , copy_peer, (CUdeviceptr dstDevice,  \
      CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,      \
      size_t ByteCount), (SIM_cuMemcpyPeer, dstDevice, dstContext, srcDevice, \
      srcContext, ByteCount, NULL, 0, 0))                                     \
    W(cuMemcpyPeer_ptds, cuMemcpyPeer, 7000, _ptds, copy_peer,                \
      (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,    \
      CUcontext srcContext, size_t ByteCount), (SIM_cuMemcpyPeer, dstDevice,  \
      dstContext, srcDevice, srcContext, ByteCount, NULL, 1, 0))              \
    W(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000, , copy_peer,                \
      (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,    \
      CUcontext srcContext, size_t ByteCount, CUstream hStream),              \
      (SIM_cuMemcpyPeerAsync, dstDevice, dstContext, srcDevice, srcContext,   \
      ByteCount, hStream, 0, 1))                                              \
    W(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync, 7000, _ptsz, copy_peer,      \
      (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,    \
      CUcontext srcContext, size_t ByteCount, CUstream hStream),              \
      (SIM_cuMemcpyPeerAsync, dstDevice, dstContext, srcDevice, srcContext,   \
      ByteCount, hStream, 1, 1))                                              \
    W(cuMemcpy2D_v2, cuMemcpy2D, 3020, , copy2d,                              \
      (const CUDA_MEMCPY2D *pCopy), (SIM_cuMemcpy2D, pCopy, NULL, 0, 0))      \
    W(cuMemcpy2D_v2_ptds, cuMemcpy2D, 7000, _ptds, copy2d,                    \
      (const CUDA_MEMCPY2D *pCopy), (SIM_cuMemcpy2D, pCopy, NULL, 1, 0))      \
    W(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned, 3020, , copy2d,            \
      (const CUDA_MEMCPY2D *pCopy),                                           \
      (SIM_cuMemcpy2DUnaligned, pCopy, NULL, 0, 0))                           \
    W(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned, 7000, _ptds, copy2d,  \
      (const CUDA_MEMCPY2D *pCopy),                                           \
      (SIM_cuMemcpy2DUnaligned, pCopy, NULL, 1, 0))                           \
    W(cuMemcpy2DAsync_v2, cuMemcpy2DAsync, 3020, , copy2d,                    \
      (const CUDA_MEMCPY2D *pCopy, CUstream hStream),                         \
      (SIM_cuMemcpy2DAsync, pCopy, hStream, 0, 1))                            \
    W(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync, 7000, _ptsz, copy2d,          \
      (const CUDA_MEMCPY2D *pCopy, CUstream hStream),                         \
      (SIM_cuMemcpy2DAsync, pCopy, hStream, 1, 1))                            \
    W(cuMemcpy3D_v2, cuMemcpy3D, 3020, , copy3d,                              \
      (const CUDA_MEMCPY3D *pCopy), (SIM_cuMemcpy3D, pCopy, NULL, 0, 0))      \
    W(cuMemcpy3D_v2_ptds, cuMemcpy3D, 7000, _ptds, copy3d,                    \
      (const CUDA_MEMCPY3D *pCopy), (SIM_cuMemcpy3D, pCopy, NULL, 1, 0))      \
    W(cuMemcpy3DAsync_v2, cuMemcpy3DAsync, 3020, , copy3d,                    \
      (const CUDA_MEMCPY3D *pCopy, CUstream hStream),                         \
      (SIM_cuMemcpy3DAsync, pCopy, hStream, 0, 1))                            \
    W(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync, 7000, _ptsz, copy3d,          \
      (const CUDA_MEMCPY3D *pCopy, CUstream hStream),                         \
      (SIM_cuMemcpy3DAsync, pCopy, hStream, 1, 1))                            \
    W(cuMemcpy3DPeer, cuMemcpy3DPeer, 4000, , copy3d_peer,                    \
      (const CUDA_MEMCPY3D_PEER *pCopy),                                      \
      (SIM_cuMemcpy3DPeer, pCopy, NULL, 0, 0))                                \
    W(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer, 7000, _ptds, copy3d_peer,          \
      (const CUDA_MEMCPY3D_PEER *pCopy),                                      \
      (SIM_cuMemcpy3DPeer, pCopy, NULL, 1, 0))                                \
    W(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync, 4000, , copy3d_peer,          \
      (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream),                    \
      (SIM_cuMemcpy3DPeerAsync, pCopy, hStream, 0, 1))                        \
    W(cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync, 7000, _ptsz,             \
      copy3d_peer, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream),       \
      (SIM_cuMemcpy3DPeerAsync, pCopy, hStream, 1, 1))                        \
    W(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync, 13000, , batch_copy,         \
      (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,     \
      CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,          \
      CUstream hStream),                                                      \
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, 0))     \
    W(cuMemcpyBatchAsync_v2_ptsz, cuMemcpyBatchAsync, 13000, _ptsz,           \
      batch_copy, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,       \
      size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs,             \
      size_t numAttrs, CUstream hStream),                                     \
      (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, 1))     \
    W(cuMemsetD8_v2, cuMemsetD8, 3020, , do_set,                              \
      (CUdeviceptr dstDevice, unsigned char uc, size_t N),                    \
      (SIM_cuMemsetD8, dstDevice, 0, uc, 1, N, 1, NULL, 0, 0))                \
    W(cuMemsetD8_v2_ptds, cuMemsetD8, 7000, _ptds, do_set,                    \
      (CUdeviceptr dstDevice, unsigned char uc, size_t N),                    \
      (SIM_cuMemsetD8, dstDevice, 0, uc, 1, N, 1, NULL, 1, 0))                \
    W(cuMemsetD16_v2, cuMemsetD16, 3020, , do_set,                            \
      (CUdeviceptr dstDevice, unsigned short us, size_t N),                   \
      (SIM_cuMemsetD16, dstDevice, 0, us, 2, N, 1, NULL, 0, 0))               \
    W(cuMemsetD16_v2_ptds, cuMemsetD16, 7000, _ptds, do_set,                  \
      (CUdeviceptr dstDevice, unsigned short us, size_t N),                   \
      (SIM_cuMemsetD16, dstDevice, 0, us, 2, N, 1, NULL, 1, 0))               \
    W(cuMemsetD32_v2, cuMemsetD32, 3020, , do_set,                            \
      (CUdeviceptr dstDevice, unsigned int ui, size_t N),                     \
      (SIM_cuMemsetD32, dstDevice, 0, ui, 4, N, 1, NULL, 0, 0))               \
    W(cuMemsetD32_v2_ptds, cuMemsetD32, 7000, _ptds, do_set,                  \
      (CUdeviceptr dstDevice, unsigned int ui, size_t N),                     \
      (SIM_cuMemsetD32, dstDevice, 0, ui, 4, N, 1, NULL, 1, 0))               \
    W(cuMemsetD8Async, cuMemsetD8Async, 3020, , do_set,                       \
      (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),  \
      (SIM_cuMemsetD8Async, dstDevice, 0, uc, 1, N, 1, hStream, 0, 1))        \
    W(cuMemsetD8Async_ptsz, cuMemsetD8Async, 7000, _ptsz, do_set,             \
      (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),  \
      (SIM_cuMemsetD8Async, dstDevice, 0, uc, 1, N, 1, hStream, 1, 1))        \
    W(cuMemsetD16Async, cuMemsetD16Async, 3020, , do_set,                     \
      (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream), \
      (SIM_cuMemsetD16Async, dstDevice, 0, us, 2, N, 1, hStream, 0, 1))       \
    W(cuMemsetD16Async_ptsz, cuMemsetD16Async, 7000, _ptsz, do_set,           \
      (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream), \
      (SIM_cuMemsetD16Async, dstDevice, 0, us, 2, N, 1, hStream, 1, 1))       \
    W(cuMemsetD32Async, cuMemsetD32Async, 3020, , do_set,                     \
      (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),   \
      (SIM_cuMemsetD32Async, dstDevice, 0, ui, 4, N, 1, hStream, 0, 1))       \
    W(cuMemsetD32Async_ptsz, cuMemsetD32Async, 7000, _ptsz, do_set,           \
      (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),   \
      (SIM_cuMemsetD32Async, dstDevice, 0, ui, 4, N, 1, hStream, 1, 1))       \
    W(cuMemsetD2D8_v2, cuMemsetD2D8, 3020, , do_set, (CUdeviceptr dstDevice,  \
      size_t dstPitch, unsigned char uc, size_t Width, size_t Height),        \
      (SIM_cuMemsetD2D8, dstDevice, dstPitch, uc, 1, Width, Height, NULL, 0,  \
      0))                                                                     \
    W(cuMemsetD2D8_v2_ptds, cuMemsetD2D8, 7000, _ptds, do_set,                \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,              \
      size_t Width, size_t Height), (SIM_cuMemsetD2D8, dstDevice, dstPitch,   \
      uc, 1, Width, Height, NULL, 1, 0))                                      \
    W(cuMemsetD2D16_v2, cuMemsetD2D16, 3020, , do_set,                        \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,             \
      size_t Width, size_t Height), (SIM_cuMemsetD2D16, dstDevice, dstPitch,  \
      us, 2, Width, Height, NULL, 0, 0))                                      \
    W(cuMemsetD2D16_v2_ptds, cuMemsetD2D16, 7000, _ptds, do_set,              \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,             \
      size_t Width, size_t Height), (SIM_cuMemsetD2D16, dstDevice, dstPitch,  \
      us, 2, Width, Height, NULL, 1, 0))                                      \
    W(cuMemsetD2D32_v2, cuMemsetD2D32, 3020, , do_set,                        \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, \
      size_t Height), (SIM_cuMemsetD2D32, dstDevice, dstPitch, ui, 4, Width,  \
      Height, NULL, 0, 0))                                                    \
    W(cuMemsetD2D32_v2_ptds, cuMemsetD2D32, 7000, _ptds, do_set,              \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, \
      size_t Height), (SIM_cuMemsetD2D32, dstDevice, dstPitch, ui, 4, Width,  \
      Height, NULL, 1, 0))                                                    \
    W(cuMemsetD2D8Async, cuMemsetD2D8Async, 3020, , do_set,                   \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,              \
      size_t Width, size_t Height, CUstream hStream), (SIM_cuMemsetD2D8Async, \
      dstDevice, dstPitch, uc, 1, Width, Height, hStream, 0, 1))              \
    W(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async, 7000, _ptsz, do_set,         \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,              \
      size_t Width, size_t Height, CUstream hStream), (SIM_cuMemsetD2D8Async, \
      dstDevice, dstPitch, uc, 1, Width, Height, hStream, 1, 1))              \
    W(cuMemsetD2D16Async, cuMemsetD2D16Async, 3020, , do_set,                 \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,             \
      size_t Width, size_t Height, CUstream hStream),                         \
      (SIM_cuMemsetD2D16Async, dstDevice, dstPitch, us, 2, Width, Height,     \
      hStream, 0, 1))                                                         \
    W(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async, 7000, _ptsz, do_set,       \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,             \
      size_t Width, size_t Height, CUstream hStream),                         \
      (SIM_cuMemsetD2D16Async, dstDevice, dstPitch, us, 2, Width, Height,     \
      hStream, 1, 1))                                                         \
    W(cuMemsetD2D32Async, cuMemsetD2D32Async, 3020, , do_set,                 \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, \
      size_t Height, CUstream hStream), (SIM_cuMemsetD2D32Async, dstDevice,   \
      dstPitch, ui, 4, Width, Height, hStream, 0, 1))                         \
    W(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async, 7000, _ptsz, do_set,       \
      (CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, \
      size_t Height, CUstream hStream), (SIM_cuMemsetD2D32Async, dstDevice,   \
      dstPitch, ui, 4, Width, Height, hStream, 1, 1))

COPY_ALIASES(SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP)

const sim_proc sim_procs_copy[] = {
    COPY_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
};
/* clang-format on */
const size_t sim_nprocs_copy = sizeof(sim_procs_copy) /
                               sizeof(sim_procs_copy[0]);
