/* test_core_copy.c: core's copy engine (copyarray.c over copy.c) against
 * the simulated driver, loaded the way cudamem loads it (libcusim.so next
 * to this binary): random layouts of every kind (ndim 0 to 5, zero-size
 * and length-1 dims, gappy and negative steps, C, F and shuffled orders,
 * misaligned views, broadcast sources, overlapping views) in every
 * direction, synchronous and asynchronous, checked byte for byte against
 * strided loops on host buffers; fills of itemsizes 1 to 24; how copies
 * are made (calls and bytes per entry point); failures and bad input.
 * Runs the random copies again with the device's maximum pitch made
 * small, and every test again in a child with per-thread default streams
 * and in one with the simulator's strict pitches
 * (CUDAMEM_SIM_STRICT_PITCH), where a device-to-device cuMemcpy2D(Async)
 * at a pitch a driver may refuse fails. */
#include "check.h"
#include "copy.h"
#include "cusim.h"
#include "driver.h"
#include "memory.h"
#include "release.h"

#include <dlfcn.h>
#include <limits.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ND 12

extern char **environ;

static cm_device *dev;
static CUstream stream;

/* The simulator's control API, from the library core loaded. */
static struct {
    int (*entry_count)(void);
    const char *(*entry_stats)(int, unsigned long long *,
                               unsigned long long *);
    void (*reset_counters)(void);
    unsigned long long (*hazard_count)(void);
    void (*get_stats)(cusim_stats *);
    int (*inject)(const char *, int, unsigned, unsigned);
    void (*clear_faults)(void);
} sim;

/* ---------------------------------------------------------------------------
 * What each copy wrote: every copy and memset entry of the driver table is
 * wrapped to record the bytes it writes and where. */

static struct {
    uintptr_t lo, hi; /* the destination's buffer */
    unsigned long long calls, bytes, inside, largest;
    size_t pitch; /* the largest of a 2-D or 3-D call */
} seen;

/* What CU_DEVICE_ATTRIBUTE_MAX_PITCH answers, when > 0: set by a test
 * before its process's first copy reads it. */
static int pitch_limit;
static PFN_cuDeviceGetAttribute_v2000 real_attribute;

static CUresult CUDAAPI
w_attribute(int *value, CUdevice_attribute attr, CUdevice device)
{
    CUresult rc = real_attribute(value, attr, device);

    if (rc == CUDA_SUCCESS && attr == CU_DEVICE_ATTRIBUTE_MAX_PITCH &&
        pitch_limit > 0 && *value > pitch_limit) {
        *value = pitch_limit;
    }
    return rc;
}

static void
note_pitch(size_t pitch)
{
    if (pitch > seen.pitch) {
        seen.pitch = pitch;
    }
}

static void
note(uintptr_t dst, size_t bytes)
{
    seen.calls++;
    seen.bytes += bytes;
    if (bytes > seen.largest) {
        seen.largest = bytes;
    }
    if (dst >= seen.lo && dst < seen.hi) {
        seen.inside += bytes;
    }
}

static void
watch(uintptr_t lo, size_t size)
{
    memset(&seen, 0, sizeof(seen));
    seen.lo = lo;
    seen.hi = lo + size;
    sim.reset_counters();
}

#define WRAP_COPY(name, DT, ST)                                               \
    static PFN_##name##_v3020 real_##name;                                    \
    static CUresult CUDAAPI w_##name(DT d, ST s, size_t n)                    \
    {                                                                         \
        note((uintptr_t)d, n);                                                \
        return real_##name(d, s, n);                                          \
    }
#define WRAP_COPY_ASYNC(name, DT, ST)                                         \
    static PFN_##name##_v3020 real_##name;                                    \
    static CUresult CUDAAPI w_##name(DT d, ST s, size_t n, CUstream st)       \
    {                                                                         \
        note((uintptr_t)d, n);                                                \
        return real_##name(d, s, n, st);                                      \
    }
#define WRAP_SET(name, T)                                                     \
    static PFN_##name##_v3020 real_##name;                                    \
    static CUresult CUDAAPI w_##name(CUdeviceptr d, T v, size_t n)            \
    {                                                                         \
        note(d, n * sizeof(T));                                               \
        return real_##name(d, v, n);                                          \
    }
#define WRAP_SET_ASYNC(name, T)                                               \
    static PFN_##name##_v3020 real_##name;                                    \
    static CUresult CUDAAPI w_##name(CUdeviceptr d, T v, size_t n,            \
                                     CUstream st)                             \
    {                                                                         \
        note(d, n * sizeof(T));                                               \
        return real_##name(d, v, n, st);                                      \
    }
#define WRAP_SET2D(name, T)                                                   \
    static PFN_##name##_v3020 real_##name;                                    \
    static CUresult CUDAAPI w_##name(CUdeviceptr d, size_t pitch, T v,        \
                                     size_t w, size_t h)                      \
    {                                                                         \
        note(d, w * h * sizeof(T));                                           \
        note_pitch(h > 1 ? pitch : 0);                                        \
        return real_##name(d, pitch, v, w, h);                                \
    }
#define WRAP_SET2D_ASYNC(name, T)                                             \
    static PFN_##name##_v3020 real_##name;                                    \
    static CUresult CUDAAPI w_##name(CUdeviceptr d, size_t pitch, T v,        \
                                     size_t w, size_t h, CUstream st)         \
    {                                                                         \
        note(d, w * h * sizeof(T));                                           \
        note_pitch(h > 1 ? pitch : 0);                                        \
        return real_##name(d, pitch, v, w, h, st);                            \
    }

WRAP_COPY(cuMemcpyHtoD, CUdeviceptr, const void *)
WRAP_COPY(cuMemcpyDtoH, void *, CUdeviceptr)
WRAP_COPY(cuMemcpyDtoD, CUdeviceptr, CUdeviceptr)
WRAP_COPY_ASYNC(cuMemcpyHtoDAsync, CUdeviceptr, const void *)
WRAP_COPY_ASYNC(cuMemcpyDtoHAsync, void *, CUdeviceptr)
WRAP_COPY_ASYNC(cuMemcpyDtoDAsync, CUdeviceptr, CUdeviceptr)
WRAP_SET(cuMemsetD8, unsigned char)
WRAP_SET(cuMemsetD16, unsigned short)
WRAP_SET(cuMemsetD32, unsigned int)
WRAP_SET_ASYNC(cuMemsetD8Async, unsigned char)
WRAP_SET_ASYNC(cuMemsetD16Async, unsigned short)
WRAP_SET_ASYNC(cuMemsetD32Async, unsigned int)
WRAP_SET2D(cuMemsetD2D8, unsigned char)
WRAP_SET2D(cuMemsetD2D16, unsigned short)
WRAP_SET2D(cuMemsetD2D32, unsigned int)
WRAP_SET2D_ASYNC(cuMemsetD2D8Async, unsigned char)
WRAP_SET2D_ASYNC(cuMemsetD2D16Async, unsigned short)
WRAP_SET2D_ASYNC(cuMemsetD2D32Async, unsigned int)

static uintptr_t
dst_of(CUmemorytype type, CUdeviceptr d, void *h)
{
    return type == CU_MEMORYTYPE_HOST ? (uintptr_t)h : (uintptr_t)d;
}

static PFN_cuMemcpy2D_v3020 real_2d;
static PFN_cuMemcpy2DUnaligned_v3020 real_2d_unaligned;
static PFN_cuMemcpy2DAsync_v3020 real_2d_async;
static PFN_cuMemcpy3D_v3020 real_3d;
static PFN_cuMemcpy3DAsync_v3020 real_3d_async;

static void
note_pitches(size_t a, size_t b)
{
    note_pitch(a);
    note_pitch(b);
}

static CUresult CUDAAPI
w_2d(const CUDA_MEMCPY2D *p)
{
    note_pitches(p->srcPitch, p->dstPitch);
    note(dst_of(p->dstMemoryType, p->dstDevice, p->dstHost),
         p->WidthInBytes * p->Height);
    return real_2d(p);
}

static CUresult CUDAAPI
w_2d_unaligned(const CUDA_MEMCPY2D *p)
{
    note_pitches(p->srcPitch, p->dstPitch);
    note(dst_of(p->dstMemoryType, p->dstDevice, p->dstHost),
         p->WidthInBytes * p->Height);
    return real_2d_unaligned(p);
}

static CUresult CUDAAPI
w_2d_async(const CUDA_MEMCPY2D *p, CUstream s)
{
    note_pitches(p->srcPitch, p->dstPitch);
    note(dst_of(p->dstMemoryType, p->dstDevice, p->dstHost),
         p->WidthInBytes * p->Height);
    return real_2d_async(p, s);
}

static CUresult CUDAAPI
w_3d(const CUDA_MEMCPY3D *p)
{
    note_pitches(p->srcPitch, p->dstPitch);
    note(dst_of(p->dstMemoryType, p->dstDevice, p->dstHost),
         p->WidthInBytes * p->Height * p->Depth);
    return real_3d(p);
}

static CUresult CUDAAPI
w_3d_async(const CUDA_MEMCPY3D *p, CUstream s)
{
    note_pitches(p->srcPitch, p->dstPitch);
    note(dst_of(p->dstMemoryType, p->dstDevice, p->dstHost),
         p->WidthInBytes * p->Height * p->Depth);
    return real_3d_async(p, s);
}

/* `cm__drv.name` expands the name as the table does (cuMemsetD8_v2). */
#define INSTALL(name) (real_##name = cm__drv.name, cm__drv.name = w_##name)

static void
install_wrappers(void)
{
    INSTALL(cuMemcpyHtoD);
    INSTALL(cuMemcpyDtoH);
    INSTALL(cuMemcpyDtoD);
    INSTALL(cuMemcpyHtoDAsync);
    INSTALL(cuMemcpyDtoHAsync);
    INSTALL(cuMemcpyDtoDAsync);
    INSTALL(cuMemsetD8);
    INSTALL(cuMemsetD16);
    INSTALL(cuMemsetD32);
    INSTALL(cuMemsetD8Async);
    INSTALL(cuMemsetD16Async);
    INSTALL(cuMemsetD32Async);
    INSTALL(cuMemsetD2D8);
    INSTALL(cuMemsetD2D16);
    INSTALL(cuMemsetD2D32);
    INSTALL(cuMemsetD2D8Async);
    INSTALL(cuMemsetD2D16Async);
    INSTALL(cuMemsetD2D32Async);
    real_2d = cm__drv.cuMemcpy2D;
    cm__drv.cuMemcpy2D = w_2d;
    real_2d_unaligned = cm__drv.cuMemcpy2DUnaligned;
    cm__drv.cuMemcpy2DUnaligned = w_2d_unaligned;
    real_2d_async = cm__drv.cuMemcpy2DAsync;
    cm__drv.cuMemcpy2DAsync = w_2d_async;
    real_3d = cm__drv.cuMemcpy3D;
    cm__drv.cuMemcpy3D = w_3d;
    real_3d_async = cm__drv.cuMemcpy3DAsync;
    cm__drv.cuMemcpy3DAsync = w_3d_async;
    real_attribute = cm__drv.cuDeviceGetAttribute;
    cm__drv.cuDeviceGetAttribute = w_attribute;
}

/* The counters right after an operation, before the test reads its
 * result back (which copies too): the wrappers' and the simulator's. */
#define MAX_ENTRIES 512
static struct {
    unsigned long long calls, bytes, inside, largest;
    size_t pitch;
    int n;
    const char *names[MAX_ENTRIES];
    unsigned long long entry_calls[MAX_ENTRIES], entry_bytes[MAX_ENTRIES];
    unsigned long long moved_calls, moved_bytes; /* cuMemcpy*, cuMemset* */
} done;

static void
snap(void)
{
    done.calls = seen.calls;
    done.bytes = seen.bytes;
    done.inside = seen.inside;
    done.largest = seen.largest;
    done.pitch = seen.pitch;
    done.n = sim.entry_count() < MAX_ENTRIES ? sim.entry_count() : MAX_ENTRIES;
    done.moved_calls = done.moved_bytes = 0;
    for (int i = 0; i < done.n; i++) {
        const char *n = sim.entry_stats(i, &done.entry_calls[i],
                                        &done.entry_bytes[i]);

        done.names[i] = n;
        if (n != NULL && (strncmp(n, "cuMemcpy", 8) == 0 ||
                          strncmp(n, "cuMemset", 8) == 0)) {
            done.moved_calls += done.entry_calls[i];
            done.moved_bytes += done.entry_bytes[i];
        }
    }
}

static unsigned long long
calls_of(const char *name)
{
    for (int i = 0; i < done.n; i++) {
        if (done.names[i] != NULL && strcmp(done.names[i], name) == 0) {
            return done.entry_calls[i];
        }
    }
    return ~0ULL;
}

static unsigned long long
bytes_of(const char *name)
{
    for (int i = 0; i < done.n; i++) {
        if (done.names[i] != NULL && strcmp(done.names[i], name) == 0) {
            return done.entry_bytes[i];
        }
    }
    return ~0ULL;
}

/* ---------------------------------------------------------------------------
 * Buffers and layouts. */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t
rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dULL;
}

static unsigned
rn(unsigned n)
{
    return n > 0 ? (unsigned)(rnd() % n) : 0;
}

/* A device buffer with its host shadow, or a host buffer. */
typedef struct buf {
    int on_device;
    cm_mem *mem;
    unsigned char *host;
    size_t size;
} buf;

static void
buf_new(buf *b, int on_device, size_t size)
{
    cm_error err;

    b->on_device = on_device;
    b->size = size;
    b->mem = NULL;
    b->host = malloc(size);
    for (size_t i = 0; i < size; i++) {
        b->host[i] = (unsigned char)rnd();
    }
    if (on_device) {
        CHECK_EQ(
            cm_mem_alloc_from(dev, size, NULL, CM_ALLOC_FIRST, &b->mem, &err),
            0);
        CHECK_EQ(cm_copy_htod(dev, b->mem->ptr, b->host, size, NULL, 0, &err),
                 0);
    }
}

static uintptr_t
buf_addr(const buf *b)
{
    return b->on_device ? (uintptr_t)b->mem->ptr : (uintptr_t)b->host;
}

/* The buffer's bytes now (read back from the device). */
static unsigned char *
buf_read(const buf *b)
{
    unsigned char *out = malloc(b->size);
    cm_error err;

    if (b->on_device) {
        CHECK_EQ(cm_copy_dtoh(dev, out, b->mem->ptr, b->size, NULL, 0, &err),
                 0);
    }
    else {
        memcpy(out, b->host, b->size);
    }
    return out;
}

static void
buf_free(buf *b)
{
    cm_error err;

    if (b->mem != NULL) {
        CHECK_EQ(cm_mem_decref(b->mem, &err), 0);
    }
    free(b->host);
}

typedef struct view {
    int nd;
    ptrdiff_t shape[ND], strides[ND];
    size_t offset; /* of element (0, ..., 0) in its buffer */
    size_t size;   /* of the buffer */
} view;

static size_t
elements(int nd, const ptrdiff_t *shape)
{
    size_t n = 1;

    for (int i = 0; i < nd; i++) {
        n *= (size_t)shape[i];
    }
    return n;
}

static ptrdiff_t
random_len(void)
{
    unsigned r = rn(100);

    return r < 4 ? 0 : r < 20 ? 1 : r < 88 ? 2 + rn(5) : 7 + rn(60);
}

/* A view of `shape` into a buffer of its own: the buffer is contiguous
 * with its axes in C, F or a shuffled order, then sliced with steps of -3
 * to 3 and some slack; `misalign` moves it off the itemsize grid. */
static void
random_view(int nd, const ptrdiff_t *shape, size_t itemsize, int misalign,
            view *v)
{
    ptrdiff_t base[ND], step[ND], stride[ND], s = (ptrdiff_t)itemsize;
    int order[ND], kind = (int)rn(3);

    v->nd = nd;
    for (int i = 0; i < nd; i++) {
        /* Many dims: steps of 1, or the buffer grows too large. */
        step[i] = rn(3) || nd > 6 ? 1 : 2 + rn(2);
        if (rn(3) == 0) {
            step[i] = -step[i];
        }
        base[i] = shape[i] > 0
                      ? (shape[i] - 1) * (step[i] < 0 ? -step[i] : step[i]) +
                            1 + rn(nd > 6 ? 1 : 2)
                      : 1 + rn(2);
        order[i] = kind == 0 ? nd - 1 - i : i;
    }
    /* Fisher-Yates upwards: the analyzer cannot bound rn(6), so a loop
     * down from nd - 1 looked to it like one from INT_MAX. */
    for (int i = 1; kind == 2 && i < nd; i++) {
        int k = (int)rn((unsigned)i + 1), t = order[i];

        order[i] = order[k];
        order[k] = t;
    }
    for (int i = 0; i < nd; i++) {
        stride[order[i]] = s;
        s *= base[order[i]];
    }
    v->offset = misalign && itemsize > 1 ? 1 + rn((unsigned)itemsize - 1) : 0;
    v->size = (size_t)s + v->offset;
    for (int i = 0; i < nd; i++) {
        ptrdiff_t used = shape[i] > 0
                             ? (shape[i] - 1) *
                                       (step[i] < 0 ? -step[i] : step[i]) +
                                   1
                             : 1;
        ptrdiff_t start = rn((unsigned)(base[i] - used + 1));

        if (step[i] < 0 && shape[i] > 0) {
            start = base[i] - 1 - start;
        }
        v->offset += (size_t)(start * stride[i]);
        v->shape[i] = shape[i];
        v->strides[i] = stride[i] * step[i];
    }
}

static cm_side
side_of(const buf *b, const view *v)
{
    cm_side s = {.on_device = b->on_device,
                 .ndim = v->nd,
                 .shape = v->shape,
                 .strides = v->strides};

    if (b->on_device) {
        s.ptr = b->mem->ptr + v->offset;
    }
    else {
        s.host = b->host + v->offset;
    }
    return s;
}

/* The reference: dst[i] = src[i] for every index, or the pattern. */
static void
ref_copy(unsigned char *dst, const view *dv, const unsigned char *src,
         const view *sv, const unsigned char *pattern, size_t itemsize)
{
    size_t n = elements(dv->nd, dv->shape);
    ptrdiff_t idx[ND] = {0};

    for (size_t e = 0; e < n; e++) {
        ptrdiff_t doff = (ptrdiff_t)dv->offset, soff = 0;

        for (int i = 0; i < dv->nd; i++) {
            doff += idx[i] * dv->strides[i];
            if (sv != NULL) {
                soff += idx[i] * sv->strides[i];
            }
        }
        memcpy(dst + doff, sv != NULL ? src + sv->offset + soff : pattern,
               itemsize);
        for (int i = dv->nd - 1; i >= 0; i--) {
            if (++idx[i] < dv->shape[i]) {
                break;
            }
            idx[i] = 0;
        }
    }
}

static void
report(const char *what, const view *dv, const view *sv, size_t itemsize,
       int async, const cm_error *err)
{
    fprintf(stderr, "  %s itemsize %zu async %d shape (", what, itemsize,
            async);
    for (int i = 0; i < dv->nd; i++) {
        fprintf(stderr, "%td,", dv->shape[i]);
    }
    fprintf(stderr, ") dst strides (");
    for (int i = 0; i < dv->nd; i++) {
        fprintf(stderr, "%td,", dv->strides[i]);
    }
    if (sv != NULL) {
        fprintf(stderr, ") src strides (");
        for (int i = 0; i < sv->nd; i++) {
            fprintf(stderr, "%td,", sv->strides[i]);
        }
    }
    fprintf(stderr, ")");
    if (err != NULL) {
        fprintf(stderr, " error kind %d code %d call %s msg %s",
                (int)err->kind, (int)err->code, err->call ? err->call : "-",
                cm_error_msg(err));
    }
    fprintf(stderr, "\n");
}

/* ---------------------------------------------------------------------------
 * Random copies and fills. */

enum { HTOD, DTOH, DTOD, DTOD_SAME };
static const char *const dir_names[] = {"HtoD", "DtoH", "DtoD", "DtoD-same"};
static const size_t itemsizes[] = {1, 2, 4, 8, 16, 3, 12, 6, 24};
#define NITEMSIZES (sizeof(itemsizes) / sizeof(itemsizes[0]))

/* Waits for an asynchronous operation, then takes the counters. */
static int
finish(int async)
{
    int ok = !async || cm__drv.cuStreamSynchronize(stream) == CUDA_SUCCESS;

    snap();
    return ok;
}

/* Checks the destination's bytes and what the driver calls wrote: every
 * element once into a device destination, nothing bigger than the
 * elements in any call, the simulator's count equal to the wrappers'. */
static int
check_result(const buf *d, const unsigned char *expect, size_t nbytes,
             int exact)
{
    unsigned char *got = buf_read(d);
    int ok = memcmp(got, expect, d->size) == 0;

    ok = ok && done.largest <= nbytes && done.moved_bytes == done.bytes &&
         (pitch_limit == 0 || done.pitch <= (size_t)pitch_limit) &&
         done.moved_calls == done.calls &&
         (exact ? done.inside == nbytes : done.inside <= nbytes);
    free(got);
    return ok;
}

/* ndim 0 to 5 with lengths of random_len(), or with `many` 7 to 12 of
 * lengths 1 to 3. */
static int
random_shape(int many, ptrdiff_t *shape)
{
    int nd = many ? 7 + (int)rn(6) : (int)rn(6);

    for (int i = 0; i < nd; i++) {
        shape[i] = many ? 1 + rn(3) : random_len();
    }
    return nd;
}

static void
random_copy(int dir, size_t itemsize, int async, int broadcast, int many)
{
    ptrdiff_t shape[ND], sshape[ND];
    view dv, sv;
    buf D, S;
    cm_side ds, ss;
    cm_error err;
    unsigned char *expect, *snapshot;
    int nd, misalign = rn(8) == 0, rc;
    size_t nbytes;

    do {
        nd = random_shape(many, shape);
        for (int i = 0; i < nd; i++) {
            sshape[i] = broadcast && rn(2) ? 1 : shape[i];
        }
        random_view(nd, shape, itemsize, misalign, &dv);
        random_view(nd, sshape, itemsize, misalign, &sv);
    } while (dv.size + sv.size > (1u << 20));
    for (int i = 0; i < nd; i++) {
        if (sshape[i] != shape[i]) {
            sv.shape[i] = shape[i];
            sv.strides[i] = 0;
        }
    }
    nbytes = elements(nd, shape) * itemsize;
    buf_new(&D, dir != DTOH, dir == DTOD_SAME ? dv.size + sv.size : dv.size);
    if (dir == DTOD_SAME) {
        /* Both views in one allocation, where they may overlap. */
        S = D;
        sv.offset += rn((unsigned)dv.size);
    }
    else {
        buf_new(&S, dir != HTOD, sv.size);
    }
    snapshot = malloc(S.size);
    memcpy(snapshot, S.host, S.size);
    expect = malloc(D.size);
    memcpy(expect, D.host, D.size);
    ref_copy(expect, &dv, snapshot, &sv, NULL, itemsize);

    ds = side_of(&D, &dv);
    ss = side_of(&S, &sv);
    watch(buf_addr(&D), D.size);
    rc = cm_copy_array(dev, &ds, &ss, itemsize, async ? stream : NULL, async,
                       &err);
    CHECK_TRUE(rc == 0 && finish(async));
    if (rc == 0) {
        int ok = check_result(&D, expect, nbytes, dir != DTOH);

        CHECK_TRUE(ok);
        if (!ok) {
            report(dir_names[dir], &dv, &sv, itemsize, async, NULL);
        }
    }
    else {
        report(dir_names[dir], &dv, &sv, itemsize, async, &err);
    }
    free(expect);
    free(snapshot);
    buf_free(&D);
    if (dir != DTOD_SAME) {
        buf_free(&S);
    }
}

static void
random_pattern(unsigned char *p, size_t itemsize)
{
    unsigned kind = rn(5);

    for (size_t i = 0; i < itemsize; i++) {
        p[i] = (unsigned char)rnd();
    }
    /* Zeros, and patterns repeating 1, 2 or 4 bytes. */
    if (kind == 0) {
        memset(p, 0, itemsize);
    }
    for (size_t i = 0; kind >= 1 && kind <= 3 && i < itemsize; i++) {
        size_t unit = (size_t)1 << (kind - 1);

        if (itemsize % unit == 0 && i >= unit) {
            p[i] = p[i - unit];
        }
    }
}

static void
random_fill(size_t itemsize, int async, int many)
{
    ptrdiff_t shape[ND];
    unsigned char pattern[32];
    view dv;
    buf D;
    cm_side ds;
    cm_error err;
    unsigned char *expect;
    int nd, rc;
    size_t nbytes;

    do {
        nd = random_shape(many, shape);
        random_view(nd, shape, itemsize, rn(8) == 0, &dv);
    } while (dv.size > (1u << 20));
    random_pattern(pattern, itemsize);
    nbytes = elements(nd, shape) * itemsize;
    buf_new(&D, 1, dv.size);
    expect = malloc(D.size);
    memcpy(expect, D.host, D.size);
    ref_copy(expect, &dv, NULL, NULL, pattern, itemsize);

    ds = side_of(&D, &dv);
    watch(buf_addr(&D), D.size);
    rc = cm_fill(dev, &ds, pattern, itemsize, async ? stream : NULL, async,
                 &err);
    /* The pattern is read before cm_fill returns, even when async. */
    memset(pattern, 0xee, sizeof(pattern));
    CHECK_TRUE(rc == 0 && finish(async));
    if (rc == 0) {
        int ok = check_result(&D, expect, nbytes, 1);

        CHECK_TRUE(ok);
        if (!ok) {
            report("fill", &dv, NULL, itemsize, async, NULL);
        }
    }
    else {
        report("fill", &dv, NULL, itemsize, async, &err);
    }
    free(expect);
    buf_free(&D);
}

static void
test_random(void)
{
    for (int i = 0; i < 1600; i++) {
        random_copy((int)rn(4), itemsizes[rn(NITEMSIZES)], (int)rn(2),
                    rn(4) == 0, i % 16 == 15);
    }
    for (int i = 0; i < 600; i++) {
        random_fill(itemsizes[rn(NITEMSIZES)], (int)rn(2), i % 16 == 15);
    }
}

/* ---------------------------------------------------------------------------
 * How copies are made. */

/* A C-ordered float32 (or other) view: shape, strides, offset. */
static view
c_view(int nd, const ptrdiff_t *base, const ptrdiff_t *start,
       const ptrdiff_t *stop, const ptrdiff_t *step, size_t itemsize)
{
    view v = {.nd = nd};
    ptrdiff_t s = (ptrdiff_t)itemsize;

    for (int i = nd - 1; i >= 0; i--) {
        v.shape[i] = (stop[i] - start[i] + step[i] - 1) / step[i];
        v.strides[i] = s * step[i];
        v.offset += (size_t)(start[i] * s);
        s *= base[i];
    }
    v.size = (size_t)s;
    return v;
}

static view
contiguous_view(int nd, const ptrdiff_t *shape, size_t itemsize)
{
    ptrdiff_t zero[ND] = {0}, one[ND] = {1, 1, 1, 1, 1, 1};

    return c_view(nd, shape, zero, shape, one, itemsize);
}

/* One copy between buffers made for the views; 0 when it worked and the
 * data is right. */
static int
one_copy(int dir, const view *dv, const view *sv, size_t itemsize, int async)
{
    buf D, S;
    cm_side ds, ss;
    cm_error err;
    unsigned char *expect;
    int ok;

    buf_new(&D, dir != DTOH,
            dir == DTOD_SAME ? dv->size + sv->size : dv->size);
    if (dir == DTOD_SAME) {
        S = D;
    }
    else {
        buf_new(&S, dir != HTOD, sv->size);
    }
    expect = malloc(D.size);
    memcpy(expect, D.host, D.size);
    ref_copy(expect, dv, S.host, sv, NULL, itemsize);
    ds = side_of(&D, dv);
    ss = side_of(&S, sv);
    watch(buf_addr(&D), D.size);
    ok = cm_copy_array(dev, &ds, &ss, itemsize, async ? stream : NULL, async,
                       &err) == 0 &&
         finish(async);
    /* Read back without disturbing the counters the caller checks. */
    if (ok) {
        unsigned char *got = buf_read(&D);

        ok = memcmp(got, expect, D.size) == 0;
        free(got);
    }
    else {
        report(dir_names[dir], dv, sv, itemsize, async, &err);
    }
    free(expect);
    buf_free(&D);
    if (dir != DTOD_SAME) {
        buf_free(&S);
    }
    return ok ? 0 : -1;
}

static void
test_contiguous(void)
{
    ptrdiff_t shape[2] = {30, 40};
    view v = contiguous_view(2, shape, 4);
    static const char *const names[2][3] = {
        {"cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD"},
        {"cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync"}};

    for (int async = 0; async < 2; async++) {
        for (int dir = HTOD; dir <= DTOD; dir++) {
            buf D, S;
            cm_side ds, ss;
            cm_error err;

            buf_new(&D, dir != DTOH, v.size);
            buf_new(&S, dir != HTOD, v.size);
            ds = side_of(&D, &v);
            ss = side_of(&S, &v);
            watch(buf_addr(&D), D.size);
            CHECK_TRUE(cm_copy_array(dev, &ds, &ss, 4, async ? stream : NULL,
                                     async, &err) == 0 &&
                       finish(async));
            CHECK_TRUE(done.moved_calls == 1 &&
                       calls_of(names[async][dir]) == 1);
            CHECK_TRUE(done.moved_bytes == v.size && done.inside == v.size);
            /* Synchronous copies to the device are complete on return;
             * an asynchronous one into pageable memory is waited for
             * (core/copy.h), then finish() waits. */
            CHECK_TRUE(
                calls_of("cuStreamSynchronize") ==
                (unsigned long long)(async ? 1 + (dir == DTOH) : dir != DTOH));
            buf_free(&D);
            buf_free(&S);
        }
    }
    /* Reversed on both sides is contiguous too, as are length-1 dims. */
    {
        ptrdiff_t base[3] = {1, 100, 1}, start[3] = {0, 99, 0},
                  stop[3] = {1, -1, 1}, step[3] = {1, -1, 1};
        view r = c_view(3, base, start, stop, step, 8);

        r.shape[1] = 100;
        CHECK_EQ(one_copy(DTOD, &r, &r, 8, 0), 0);
        CHECK_TRUE(calls_of("cuMemcpyDtoD") == 1 &&
                   calls_of("cuMemcpy2D") == 0);
    }
}

static void
test_2d_slice(void)
{
    /* [::2, 64:192] of a (64, 256) float32 array: rows of 512 bytes. */
    ptrdiff_t base[2] = {64, 256}, start[2] = {0, 64}, stop[2] = {64, 192},
              step[2] = {2, 1}, shape[2] = {32, 128};
    view slice = c_view(2, base, start, stop, step, 4);
    view packed = contiguous_view(2, shape, 4);
    size_t nbytes = 32 * 128 * 4;

    CHECK_TRUE(slice.shape[0] == 32 && slice.shape[1] == 128);
    for (int async = 0; async < 2; async++) {
        const char *name = async ? "cuMemcpy2DAsync" : "cuMemcpy2D";
        /* On the device: the form without cuMemcpy2D's pitch restriction
         * when synchronous; these pitches (2048 and 512 bytes) are
         * multiples of the texture pitch alignment, which
         * cuMemcpy2DAsync takes. */
        const char *dname = async ? "cuMemcpy2DAsync" : "cuMemcpy2DUnaligned";

        /* to_device into the slice, copy_to_host of it, and on device. */
        CHECK_EQ(one_copy(HTOD, &slice, &packed, 4, async), 0);
        CHECK_TRUE(done.calls == 1 && calls_of(name) == 1 &&
                   bytes_of(name) == nbytes && done.inside == nbytes);
        CHECK_EQ(one_copy(DTOH, &packed, &slice, 4, async), 0);
        CHECK_TRUE(done.calls == 1 && calls_of(name) == 1 &&
                   bytes_of(name) == nbytes);
        CHECK_EQ(one_copy(DTOD, &packed, &slice, 4, async), 0);
        CHECK_TRUE(done.calls == 1 && calls_of(dname) == 1 &&
                   bytes_of(dname) == nbytes);
        CHECK_EQ(one_copy(DTOD, &slice, &slice, 4, async), 0);
        CHECK_TRUE(done.calls == 1 && calls_of(dname) == 1 &&
                   bytes_of(dname) == nbytes);
    }
}

/* Device-to-device rows at pitches cuMemcpy2D(Async) may refuse: column 3
 * of a (100, 10) int8 array to a packed one (pitches 10 and 1), and
 * [:, 1:4] of a (100, 7) uint8 array (pitches 7 and 3, the source one byte
 * off alignment). Still one call each: cuMemcpy2DUnaligned, or one slice
 * of cuMemcpy3DAsync; never cuMemcpy2D or cuMemcpy2DAsync. */
static void
test_dtod_pitches(void)
{
    ptrdiff_t base[2] = {100, 10}, start[2] = {0, 3}, stop[2] = {100, 4},
              step[2] = {1, 1}, shape[2] = {100, 1};
    ptrdiff_t base7[2] = {100, 7}, start7[2] = {0, 1}, stop7[2] = {100, 4},
              shape7[2] = {100, 3};
    view col = c_view(2, base, start, stop, step, 1);
    view packed = contiguous_view(2, shape, 1);
    view sub = c_view(2, base7, start7, stop7, step, 1);
    view packed7 = contiguous_view(2, shape7, 1);

    for (int async = 0; async < 2; async++) {
        const char *name = async ? "cuMemcpy3DAsync" : "cuMemcpy2DUnaligned";

        CHECK_EQ(one_copy(DTOD, &packed, &col, 1, async), 0);
        CHECK_TRUE(done.calls == 1 && calls_of(name) == 1 &&
                   bytes_of(name) == 100 && done.inside == 100);
        CHECK_EQ(one_copy(DTOD, &col, &packed, 1, async), 0);
        CHECK_TRUE(done.calls == 1 && calls_of(name) == 1 &&
                   bytes_of(name) == 100);
        CHECK_EQ(one_copy(DTOD, &packed7, &sub, 1, async), 0);
        CHECK_TRUE(done.calls == 1 && calls_of(name) == 1 &&
                   bytes_of(name) == 300);
        CHECK_TRUE(calls_of("cuMemcpy2D") == 0 &&
                   calls_of("cuMemcpy2DAsync") == 0);
    }
}

static void
test_3d(void)
{
    /* [::2, :, 8:24] of (8, 16, 32): one cuMemcpy3D. */
    ptrdiff_t base[3] = {8, 16, 32}, start[3] = {0, 0, 8},
              stop[3] = {8, 16, 24}, step[3] = {2, 1, 1},
              shape[3] = {4, 16, 16};
    view sub = c_view(3, base, start, stop, step, 4);
    view packed = contiguous_view(3, shape, 4);

    CHECK_EQ(one_copy(HTOD, &sub, &packed, 4, 0), 0);
    CHECK_TRUE(done.calls == 1 && calls_of("cuMemcpy3D") == 1 &&
               bytes_of("cuMemcpy3D") == 4 * 16 * 16 * 4);
    CHECK_EQ(one_copy(DTOH, &packed, &sub, 4, 1), 0);
    CHECK_TRUE(done.calls == 1 && calls_of("cuMemcpy3DAsync") == 1);

    /* [::2, ::3, 8:24]: dim 0's stride is no multiple of dim 1's, so one
     * 2-D copy per slice (4 slices of 6 rows). */
    {
        ptrdiff_t st[3] = {2, 3, 1}, sh[3] = {4, 6, 16};
        view v = c_view(3, base, start, stop, st, 4);
        view p = contiguous_view(3, sh, 4);

        CHECK_EQ(v.shape[1], 6);
        CHECK_EQ(one_copy(DTOD, &v, &p, 4, 0), 0);
        CHECK_TRUE(done.calls == 4 && calls_of("cuMemcpy2DUnaligned") == 4 &&
                   done.inside == 4 * 6 * 16 * 4);
    }
}

/* A fill of a view in a fresh buffer; 0 when the data is right. */
static int
one_fill(const view *v, const void *pattern, size_t itemsize, int async)
{
    buf D;
    cm_side ds;
    cm_error err;
    unsigned char *expect, *got;
    int ok;

    buf_new(&D, 1, v->size);
    expect = malloc(D.size);
    memcpy(expect, D.host, D.size);
    ref_copy(expect, v, NULL, NULL, pattern, itemsize);
    ds = side_of(&D, v);
    watch(buf_addr(&D), D.size);
    ok = cm_fill(dev, &ds, pattern, itemsize, async ? stream : NULL, async,
                 &err) == 0 &&
         finish(async);
    if (ok) {
        got = buf_read(&D);
        ok = memcmp(got, expect, D.size) == 0;
        free(got);
    }
    else {
        report("fill", v, NULL, itemsize, async, &err);
    }
    free(expect);
    buf_free(&D);
    return ok ? 0 : -1;
}

static void
test_fills(void)
{
    ptrdiff_t n1000[1] = {1000};
    view flat4 = contiguous_view(1, n1000, 4),
         flat8 = contiguous_view(1, n1000, 8);
    view flat16 = contiguous_view(1, n1000, 16),
         flat3 = contiguous_view(1, n1000, 3);
    ptrdiff_t base[2] = {64, 256}, start[2] = {0, 64}, stop[2] = {64, 192},
              step[2] = {2, 1};
    view slice = c_view(2, base, start, stop, step, 4);
    float zero = 0.0f;
    int32_t seven = 7;
    double one = 1.0;
    double complex_[2] = {1.0, 2.0};

    /* float32 zeros: one memset. */
    CHECK_EQ(one_fill(&flat4, &zero, 4, 0), 0);
    CHECK_TRUE(done.moved_calls == 1 &&
               calls_of("cuMemsetD8") + calls_of("cuMemsetD32") == 1 &&
               done.moved_bytes == 4000 && done.inside == 4000);
    /* ... complete on return: memsets return early. */
    CHECK_EQ(calls_of("cuStreamSynchronize"), 1);
    CHECK_EQ(one_fill(&flat4, &zero, 4, 1), 0);
    CHECK_TRUE(done.moved_calls == 1 &&
               calls_of("cuMemsetD8Async") + calls_of("cuMemsetD32Async") ==
                   1);
    /* int32 7 into the 2-D slice: one strided memset. */
    CHECK_EQ(one_fill(&slice, &seven, 4, 0), 0);
    CHECK_TRUE(done.moved_calls == 1 && calls_of("cuMemsetD2D32") == 1 &&
               done.moved_bytes == 32 * 128 * 4);
    /* float64 1.0 repeats no 4-byte unit: two strided passes. */
    CHECK_EQ(one_fill(&flat8, &one, 8, 0), 0);
    CHECK_TRUE(done.moved_calls == 2 && calls_of("cuMemsetD2D32") == 2 &&
               done.moved_bytes == 8000);
    /* complex128: four. */
    CHECK_EQ(one_fill(&flat16, complex_, 16, 1), 0);
    CHECK_TRUE(done.moved_calls == 4 && calls_of("cuMemsetD2D32Async") == 4 &&
               done.moved_bytes == 16000);
    /* 3-byte records: three byte-wide passes. */
    CHECK_EQ(one_fill(&flat3, "abc", 3, 0), 0);
    CHECK_TRUE(done.moved_calls == 3 && calls_of("cuMemsetD2D8") == 3 &&
               done.moved_bytes == 3000);
    /* A single element, and zero-size (no call at all). */
    {
        ptrdiff_t n1[1] = {1}, n0[2] = {0, 5};
        view v1 = contiguous_view(1, n1, 12), v0 = contiguous_view(2, n0, 4);

        CHECK_TRUE(one_fill(&v1, "abcdefghijkl", 12, 0) == 0 &&
                   done.moved_calls >= 1);
        v0.size = 16;
        CHECK_TRUE(one_fill(&v0, &seven, 4, 0) == 0 && done.moved_calls == 0);
    }
    /* 12-byte records over many elements and a strided view: doubling
     * or memset passes, whichever costs less; only ever the elements. */
    {
        ptrdiff_t b3[2] = {300, 9}, s3[2] = {0, 1}, e3[2] = {300, 9},
                  p3[2] = {1, 2};
        view big = c_view(2, b3, s3, e3, p3, 12);

        CHECK_EQ(one_fill(&big, "abcdefghijkl", 12, 0), 0);
        CHECK_TRUE(done.inside == 300 * 4 * 12 &&
                   done.largest <= 300 * 4 * 12);
    }
}

static void
test_broadcast(void)
{
    ptrdiff_t n[1] = {1000}, big[1] = {1 << 20};
    view flat = contiguous_view(1, n, 4), scalar = flat;

    scalar.strides[0] = 0;
    scalar.size = 4;
    /* A scalar on the device to 1000 elements: one copy, then 10
     * doublings. */
    CHECK_EQ(one_copy(DTOD, &flat, &scalar, 4, 0), 0);
    CHECK_TRUE(done.calls == 11 && calls_of("cuMemcpyDtoD") == 11 &&
               done.inside == 4000 && done.bytes == 4000);
    /* From the host to a million: one HtoD and 20 doublings on the
     * device, rather than 4 MB across the bus. */
    {
        view v = contiguous_view(1, big, 4), s = v;

        s.strides[0] = 0;
        s.size = 4;
        CHECK_EQ(one_copy(HTOD, &v, &s, 4, 1), 0);
        CHECK_TRUE(calls_of("cuMemcpyHtoDAsync") == 1 &&
                   calls_of("cuMemcpyDtoDAsync") == 20 &&
                   done.inside == (1u << 22) && done.bytes == (1u << 22));
    }
    /* A row broadcast down a (300, 40) array, row-major: rows doubled. */
    {
        ptrdiff_t shape[2] = {300, 40};
        view v = contiguous_view(2, shape, 8), row = v;

        row.strides[0] = 0;
        row.size = 40 * 8;
        CHECK_EQ(one_copy(DTOD, &v, &row, 8, 0), 0);
        CHECK_TRUE(done.calls == 10 && done.inside == 300 * 40 * 8);
        /* From the host into a strided destination. */
        CHECK_EQ(one_copy(HTOD, &v, &row, 8, 1), 0);
        CHECK_EQ(done.inside, 300 * 40 * 8);
        /* A column broadcast across it, to the host. */
        row.strides[0] = 8;
        row.strides[1] = 0;
        row.size = 300 * 8;
        CHECK_EQ(one_copy(DTOH, &v, &row, 8, 0), 0);
        CHECK_LE(done.largest, 300 * 8);
    }
}

static void
test_overlap(void)
{
    /* d[1:] = d[:-1]: the same allocation, through a temporary. */
    ptrdiff_t base[1] = {1001}, a0[1] = {1}, a1[1] = {1001}, b0[1] = {0},
              b1[1] = {1000}, one[1] = {1};
    view dst = c_view(1, base, a0, a1, one, 4);
    view src = c_view(1, base, b0, b1, one, 4);
    cusim_stats before, after;
    buf D;
    cm_side ds, ss;
    cm_error err;
    unsigned char *got, *expect;

    src.size = 0; /* one_copy's DTOD_SAME allocates dst.size + src.size */
    CHECK_EQ(cm_queues_flush(dev, &err), 0);
    sim.get_stats(&before);
    for (int async = 0; async < 2; async++) {
        const char *dtod = async ? "cuMemcpyDtoDAsync" : "cuMemcpyDtoD";

        CHECK_EQ(one_copy(DTOD_SAME, &dst, &src, 4, async), 0);
        CHECK_TRUE(calls_of("cuMemAlloc") == 1 && calls_of(dtod) == 2 &&
                   done.inside == 4000 && done.bytes == 8000);
    }
    /* A reversal in place: d[::-1] = d. */
    buf_new(&D, 1, 4000);
    {
        ptrdiff_t shape[1] = {1000}, rstrides[1] = {-4}, strides[1] = {4};

        ds = (cm_side){.on_device = 1,
                       .ptr = D.mem->ptr + 3996,
                       .ndim = 1,
                       .shape = shape,
                       .strides = rstrides};
        ss = (cm_side){.on_device = 1,
                       .ptr = D.mem->ptr,
                       .ndim = 1,
                       .shape = shape,
                       .strides = strides};
        CHECK_EQ(cm_copy_array(dev, &ds, &ss, 4, NULL, 0, &err), 0);
        got = buf_read(&D);
        expect = malloc(4000);
        for (int i = 0; i < 1000; i++) {
            memcpy(expect + 4 * i, D.host + 4 * (999 - i), 4);
        }
        CHECK_MEM_EQ(got, expect, 4000);
        free(got);
        free(expect);
    }
    buf_free(&D);
    CHECK_EQ(cm_queues_flush(dev, &err), 0);
    sim.get_stats(&after);
    CHECK_EQ(after.device_allocations, before.device_allocations);
}

static void
test_layout_changes(void)
{
    /* A transposed host array to a contiguous device array: gathered on
     * the host, then one plain copy, not 300 copies of 4-byte rows. */
    ptrdiff_t shape[2] = {300, 300};
    view c = contiguous_view(2, shape, 4), t = c;

    t.strides[0] = 4;
    t.strides[1] = 1200;
    CHECK_EQ(one_copy(HTOD, &c, &t, 4, 0), 0);
    CHECK_TRUE(done.calls == 1 && calls_of("cuMemcpyHtoD") == 1);
    /* And back: one copy, scattered on the host. */
    CHECK_EQ(one_copy(DTOH, &t, &c, 4, 1), 0);
    CHECK_TRUE(done.calls == 1 && calls_of("cuMemcpyDtoHAsync") == 1);
    /* A transpose on the device: through the host, two copies. */
    CHECK_EQ(one_copy(DTOD, &c, &t, 4, 0), 0);
    CHECK_TRUE(done.calls == 2 && calls_of("cuMemcpyDtoH") == 1 &&
               calls_of("cuMemcpyHtoD") == 1 && done.inside == 300 * 300 * 4);
    /* A few hundred 4-byte rows stay one 2-D copy: x[::3] to the device. */
    {
        ptrdiff_t b[1] = {1200}, s0[1] = {0}, s1[1] = {1200}, st[1] = {3},
                  n[1] = {400};
        view gappy = c_view(1, b, s0, s1, st, 4), a = contiguous_view(1, n, 4);

        CHECK_EQ(one_copy(HTOD, &a, &gappy, 4, 0), 0);
        CHECK_TRUE(done.calls == 1 && calls_of("cuMemcpy2D") == 1 &&
                   bytes_of("cuMemcpy2D") == 1600);
    }
}

/* Driver failures come back as errors and leave nothing behind. */
static void
test_faults(void)
{
    ptrdiff_t base[2] = {64, 256}, start[2] = {0, 64}, stop[2] = {64, 192},
              step[2] = {2, 1}, shape[2] = {32, 128}, base1[1] = {1001},
              a0[1] = {1}, a1[1] = {1001}, b0[1] = {0}, b1[1] = {1000},
              one[1] = {1};
    view slice = c_view(2, base, start, stop, step, 4);
    view packed = contiguous_view(2, shape, 4);
    view dst = c_view(1, base1, a0, a1, one, 4);
    view src = c_view(1, base1, b0, b1, one, 4);
    static const struct {
        const char *entry;
        int kind; /* 0: 2-D copy, 1: overlap via temp, 2: fill */
    } cases[] = {
        {"cuMemcpy2D", 0},         {"cuMemcpy2DAsync", 0},
        {"cuMemAlloc", 1},         {"cuMemcpyDtoD", 1},
        {"cuMemsetD2D32", 2},      {"cuStreamSynchronize", 2},
        {"cuMemsetD2D32Async", 2},
    };
    cusim_stats before, after;
    cm_error err;

    CHECK_EQ(cm_queues_flush(dev, &err), 0);
    sim.get_stats(&before);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int async = strstr(cases[i].entry, "Async") != NULL;
        buf D, S;
        cm_side ds, ss;
        double d1 = 1.0;
        int rc;

        buf_new(&D, 1, cases[i].kind == 1 ? dst.size + 4 : slice.size);
        buf_new(&S, 0, slice.size);
        CHECK_EQ(sim.inject(cases[i].entry, CUDA_ERROR_INVALID_VALUE, 0, 1),
                 0);
        if (cases[i].kind == 0) {
            ds = side_of(&D, &slice);
            ss = side_of(&S, &packed);
            rc = cm_copy_array(dev, &ds, &ss, 4, async ? stream : NULL, async,
                               &err);
        }
        else if (cases[i].kind == 1) {
            ds = side_of(&D, &dst);
            ss = side_of(&D, &src);
            rc = cm_copy_array(dev, &ds, &ss, 4, NULL, 0, &err);
        }
        else {
            ptrdiff_t n[1] = {100};
            view v = contiguous_view(1, n, 8);

            ds = side_of(&D, &v);
            rc = cm_fill(dev, &ds, &d1, 8, async ? stream : NULL, async, &err);
        }
        CHECK_TRUE(rc == -1 && err.kind == CM_ERR_DRIVER &&
                   err.code == CUDA_ERROR_INVALID_VALUE &&
                   strcmp(err.call, cases[i].entry) == 0);
        if (rc == 0 || err.call == NULL ||
            strcmp(err.call, cases[i].entry) != 0) {
            fprintf(stderr, "  fault in %s: rc %d call %s\n", cases[i].entry,
                    rc, err.call ? err.call : "-");
        }
        sim.clear_faults();
        CHECK_TRUE(finish(async));
        buf_free(&D);
        buf_free(&S);
    }
    CHECK_EQ(cm_queues_flush(dev, &err), 0);
    sim.get_stats(&after);
    CHECK_TRUE(after.device_allocations == before.device_allocations &&
               after.device_bytes == before.device_bytes);
}

static void
test_bad_input(void)
{
    ptrdiff_t shape[2] = {4, 5}, other[2] = {4, 6}, zero[2] = {0, 4},
              strides[2] = {20, 4};
    char host[80];
    cm_side h = {.on_device = 0,
                 .host = host,
                 .ndim = 2,
                 .shape = shape,
                 .strides = strides};
    cm_side d = h;
    cm_error err;

    /* Both on the host; a zero destination stride; shapes that differ;
     * too many dims: CM_ERR_VALUE before any driver call. */
    watch(0, 0);
    CHECK_TRUE(cm_copy_array(dev, &h, &h, 4, NULL, 0, &err) == -1 &&
               err.kind == CM_ERR_VALUE);
    d.on_device = 1;
    d.ptr = 256;
    d.strides = zero;
    CHECK_TRUE(cm_copy_array(dev, &d, &h, 4, NULL, 0, &err) == -1 &&
               err.kind == CM_ERR_VALUE &&
               strstr(cm_error_msg(&err), "stride 0") != NULL);
    CHECK_TRUE(cm_fill(dev, &d, host, 4, NULL, 0, &err) == -1 &&
               err.kind == CM_ERR_VALUE);
    d.strides = strides;
    d.shape = other;
    CHECK_TRUE(cm_copy_array(dev, &d, &h, 4, NULL, 0, &err) == -1 &&
               err.kind == CM_ERR_VALUE &&
               strstr(cm_error_msg(&err), "dimension 1"));
    d.shape = shape;
    d.ndim = h.ndim = 65;
    CHECK_TRUE(cm_copy_array(dev, &d, &h, 4, NULL, 0, &err) == -1 &&
               err.kind == CM_ERR_VALUE);
    CHECK_TRUE(cm_fill(dev, &h, host, 4, NULL, 0, &err) == -1 &&
               err.kind == CM_ERR_VALUE);
    /* Zero-size: nothing at all, whatever the strides. */
    d.ndim = h.ndim = 2;
    d.shape = h.shape = zero;
    d.strides = zero;
    CHECK_EQ(cm_copy_array(dev, &d, &h, 4, NULL, 0, &err), 0);
    CHECK_EQ(cm_fill(dev, &d, host, 4, stream, 1, &err), 0);
    CHECK_EQ(seen.calls, 0);
}

/* With the maximum pitch at 512 bytes: a (32, 128) float32 slice of rows
 * 1024 bytes apart cannot be one 2-D copy any more; rows 512 bytes apart
 * still can. */
static void
test_pitch_limit(void)
{
    ptrdiff_t base[2] = {64, 256}, start[2] = {0, 64}, stop[2] = {64, 192},
              step[2] = {2, 1}, shape[2] = {32, 128};
    view slice = c_view(2, base, start, stop, step, 4);
    view packed = contiguous_view(2, shape, 4);
    ptrdiff_t nbase[2] = {32, 128}, nstart[2] = {0, 0}, nstop[2] = {32, 64},
              nstep[2] = {1, 1}, nshape[2] = {32, 64};
    view narrow = c_view(2, nbase, nstart, nstop, nstep, 4);
    view npacked = contiguous_view(2, nshape, 4);

    CHECK_EQ(one_copy(HTOD, &slice, &packed, 4, 0), 0);
    CHECK_TRUE(done.pitch <= 512 && done.inside == 32 * 128 * 4 &&
               calls_of("cuMemcpy2D") == 0);
    CHECK_EQ(one_copy(DTOH, &packed, &slice, 4, 1), 0);
    CHECK_LE(done.pitch, 512);
    CHECK_EQ(one_copy(HTOD, &narrow, &npacked, 4, 0), 0);
    CHECK_TRUE(done.calls == 1 && calls_of("cuMemcpy2D") == 1 &&
               done.pitch == 512);
    CHECK_EQ(one_fill(&slice, "abcd", 4, 0), 0);
    CHECK_TRUE(done.pitch <= 512 && done.inside == 32 * 128 * 4);
}

/* Runs every test again in a child with `name` set to `value`. */
static int
run_child(const char *name, const char *value)
{
    char path[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", path, sizeof(path) - 1);
    char *argv[] = {path, NULL};
    int status = -1;
    pid_t pid;

    if (len <= 0) {
        return -1;
    }
    path[len] = '\0';
    printf("child with %s=%s:\n", name, value);
    fflush(stdout);
    setenv("CM_TEST_CHILD", "1", 1);
    setenv(name, value, 1);
    if (posix_spawn(&pid, path, NULL, NULL, argv, environ) == 0 &&
        waitpid(pid, &status, 0) != pid) {
        status = -1;
    }
    unsetenv(name);
    unsetenv("CM_TEST_CHILD");
    return status == 0 ? 0 : -1;
}

/* ---------------------------------------------------------------------------
 * Set-up: the simulator next to this binary, loaded by core. */

static int
load(void)
{
    char path[PATH_MAX], *slash;
    ssize_t len = readlink("/proc/self/exe", path, sizeof(path) - 32);
    cm_error err;
    void *lib;

    if (len <= 0) {
        return -1;
    }
    path[len] = '\0';
    slash = strrchr(path, '/');
    if (slash == NULL) {
        return -1;
    }
    snprintf(slash + 1, sizeof(path) - (size_t)(slash + 1 - path), "%s",
             "libcusim.so");
    setenv("CUDAMEM_SIMULATOR", "1", 1);
    if (cm_driver_load(path, &err) < 0) {
        fprintf(stderr, "cannot load %s: %s\n", path, cm_error_msg(&err));
        return -1;
    }
    lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL || !cm_driver_is_simulator()) {
        return -1;
    }
    *(void **)&sim.entry_count = dlsym(lib, "cusim_entry_count");
    *(void **)&sim.entry_stats = dlsym(lib, "cusim_entry_stats");
    *(void **)&sim.reset_counters = dlsym(lib, "cusim_reset_counters");
    *(void **)&sim.hazard_count = dlsym(lib, "cusim_hazard_count");
    *(void **)&sim.get_stats = dlsym(lib, "cusim_get_stats");
    *(void **)&sim.inject = dlsym(lib, "cusim_inject");
    *(void **)&sim.clear_faults = dlsym(lib, "cusim_clear_faults");
    /* dlopen's reference: the driver keeps its own. */
    dlclose(lib);
    return sim.entry_count && sim.entry_stats && sim.reset_counters &&
                   sim.hazard_count && sim.get_stats && sim.inject &&
                   sim.clear_faults
               ? 0
               : -1;
}

/* With the maximum pitch at 512 bytes, before any copy: the pitch-limit
 * checks, then the random copies. */
static void
test_max_pitch(void)
{
    pitch_limit = 512;
    test_pitch_limit();
    test_random();
}

/* The children: a child does not run its own. */
static void
test_child_per_thread_stream(void)
{
    if (getenv("CM_TEST_CHILD") == NULL) {
        CHECK_EQ(run_child("CUDAMEM_PER_THREAD_DEFAULT_STREAM", "1"), 0);
    }
}

static void
test_child_strict_pitch(void)
{
    if (getenv("CM_TEST_CHILD") == NULL) {
        CHECK_EQ(run_child("CUDAMEM_SIM_STRICT_PITCH", "1"), 0);
    }
}

static cusim_stats start;

static void
setup(void)
{
    const char *seed = getenv("CM_TEST_SEED");
    cm_error err;

    if (seed != NULL) {
        rng = strtoull(seed, NULL, 0) * 2 + 1;
    }
    CHECK_EQ(load(), 0);
    if (check_failed) {
        return;
    }
    /* Before any copy: the maximum pitch is read once per device. */
    install_wrappers();
    CHECK_EQ(cm_device_get(0, &dev, &err), 0);
    CHECK_EQ(cm_device_select(dev, &err), 0);
    /* Blocking: ordered against the legacy stream of the sync calls. */
    CHECK_EQ(cm__drv.cuStreamCreate(&stream, CU_STREAM_DEFAULT), 0);
    CHECK_EQ(cm_queues_flush(dev, &err), 0);
    sim.get_stats(&start);
}

static void
teardown(void)
{
    cusim_stats end;
    cm_error err;

    CHECK_EQ(cm_queues_flush(dev, &err), 0);
    sim.get_stats(&end);
    CHECK_EQ(end.device_allocations, start.device_allocations);
    CHECK_EQ(sim.hazard_count(), 0);
    CHECK_EQ(cm__drv.cuStreamDestroy(stream), 0);
    CHECK_EQ(cm_devices_close(1, &err), 0);
}

static const check_test tests[] = {
    {"contiguous", test_contiguous, 0},
    {"2d_slice", test_2d_slice, 0},
    {"dtod_pitches", test_dtod_pitches, 0},
    {"3d", test_3d, 0},
    {"fills", test_fills, 0},
    {"broadcast", test_broadcast, 0},
    {"overlap", test_overlap, 0},
    {"layout_changes", test_layout_changes, 0},
    {"faults", test_faults, 0},
    {"bad_input", test_bad_input, 0},
    {"random", test_random, 0},
    {"max_pitch", test_max_pitch, 0},
    {"child_per_thread_stream", test_child_per_thread_stream, 0},
    {"child_strict_pitch", test_child_strict_pitch, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, setup, teardown)
