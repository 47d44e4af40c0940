/* copyarray.c: copies between strided layouts and fills of them (copy.h's
 * cm_copy_array and cm_fill): choosing among 2-D / 3-D copies, temporaries
 * and doubling by an estimated cost, and issuing the driver calls. The
 * layout algebra (collapsing dims, extents, plans) is layout.c's,
 * contiguous byte ranges copy.c's; the memory on either side belongs to
 * its owner, the temporaries to this file. */
#include "copy.h"

#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "layout.h"
#include "memory.h"

/* The cost model that picks a strategy, in nanoseconds. Estimates until
 * benchmarks/ measures them: a driver call costs about 4 us and a memset
 * (a kernel launch, nothing to stage) half that; bytes cross the bus at
 * about 20 GB/s and move within the device at about 1 TB/s; a pitched row
 * narrower than 64 bytes across the bus (32 on the device) costs as much
 * as one that wide; a host pass moves about 10 GB/s plus 1 ns per
 * contiguous run; a temporary costs about a call. An asynchronous copy
 * that has to wait for its stream (to scatter on the host, to release a
 * temporary) pays 20 us more. So, for example, 64 slices between host and
 * device go through a host temporary below about 2.5 MB, and one-element
 * rows across the bus do above about 5000 elements.
 *
 * Device-to-device copies bounce through the host only when every way on
 * the device costs more than 64 calls: the escape for layouts that only a
 * kernel copies well (a transpose or a reversal costs a call per row, and
 * there is no kernel yet, DESIGN section 4). */
#define COST_CALL 4000.0
#define COST_SET 2000.0
#define COST_TEMP 4000.0
#define COST_WAIT 20000.0
#define COST_BUS_BYTE 0.05
#define COST_DEV_BYTE 0.001
#define COST_HOST_BYTE 0.1
#define COST_HOST_RUN 1.0
#define ROW_BUS 64
#define ROW_DEV 32
#define BOUNCE_ABOVE (64 * COST_CALL)
#define NO_WAY DBL_MAX

/* One cm_copy_array or cm_fill. */
typedef struct job {
    cm_device *dev;
    CUstream stream;
    int async;
    size_t itemsize;
    long long max_pitch;
    int early; /* synchronous calls issued that may still be running */
} job;

enum {
    HOW_DIRECT,   /* the calls of a copy plan, straight between the sides */
    HOW_DOUBLE,   /* the source's unrepeated part, then doubling copies */
    HOW_HOST,     /* a host temporary: gather and copy, or copy and scatter */
    HOW_TEMP_SRC, /* a device temporary in the source's order */
    HOW_TEMP_DST, /* a device temporary in the destination's order */
    HOW_BOUNCE,   /* device to a host temporary, then host to device */
    HOW_COUNT
};
#define BIT(how) (1u << (how))

enum { SEED_SET, SEED_PASSES, SEED_COPY, FILL_HOST };

/* ---------------------------------------------------------------------------
 * Device attributes the plans need: CU_DEVICE_ATTRIBUTE_MAX_PITCH and
 * CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT of each device (by ordinal),
 * each read once, when first needed. */
#define ATTR_CACHE 64
static int max_pitches[ATTR_CACHE], pitch_aligns[ATTR_CACHE];

static int
read_attribute(job *j, CUdevice_attribute attr, int *cache, int *value,
               cm_error *err)
{
    int ordinal = j->dev->ordinal;

    if (ordinal < ATTR_CACHE) {
        *value = __atomic_load_n(&cache[ordinal], __ATOMIC_RELAXED);
        if (*value > 0) {
            return 0;
        }
    }
    if (CM_CALL(err, cuDeviceGetAttribute, value, attr, j->dev->cudev) < 0) {
        return -1;
    }
    if (ordinal < ATTR_CACHE && *value > 0) {
        __atomic_store_n(&cache[ordinal], *value, __ATOMIC_RELAXED);
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Plans and the calls that carry them out. */

static double
rows_cost(size_t rows, size_t width, int bus)
{
    size_t least = bus ? ROW_BUS : ROW_DEV;

    return (double)rows * (double)(width > least ? width : least) *
           (bus ? COST_BUS_BYTE : COST_DEV_BYTE);
}

static double
plan_cost(const cm__layout *L, const cm__plan *p)
{
    return (double)p->calls * COST_CALL +
           rows_cost(p->rows, p->width, !(L->ddev && L->sdev));
}

/* Waits for what this job queued: its stream when asynchronous, else the
 * default stream when synchronous calls may still be running (rule 9). */
static int
drain(job *j, cm_error *err)
{
    if (j->async) {
        return CM_CALL(err, cuStreamSynchronize, j->stream);
    }
    if (!j->early) {
        return 0;
    }
    j->early = 0;
    return CM_CALL(err, cuStreamSynchronize, (CUstream)NULL);
}

/* drain() before a temporary goes, even after a failure: the calls
 * already queued may still read or write it. */
static int
drain_after(job *j, int rc, cm_error *err)
{
    cm_error ignored;

    if (drain(j, rc < 0 ? &ignored : err) < 0) {
        return -1;
    }
    return rc;
}

static int
copy_bytes(job *j, int ddev, uintptr_t dst, int sdev, uintptr_t src, size_t n,
           cm_error *err)
{
    int rc = cm__memcpy(ddev, (CUdeviceptr)dst, (void *)dst, sdev,
                        (CUdeviceptr)src, (const void *)src, n, j->stream,
                        j->async, err);

    /* Device destinations: the synchronous forms may return early. */
    if (rc == 0 && ddev && !j->async) {
        j->early = 1;
    }
    return rc;
}

static CUmemorytype
memtype(int on_device)
{
    return on_device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
}

/* The memory types and first bytes of a CUDA_MEMCPY2D or _3D (the same
 * field names). */
#define SET_ENDS(m, L, dst, src)                                              \
    do {                                                                      \
        memset(&(m), 0, sizeof(m));                                           \
        (m).srcMemoryType = memtype((L)->sdev);                               \
        (m).dstMemoryType = memtype((L)->ddev);                               \
        (m).srcDevice = (L)->sdev ? (CUdeviceptr)(src) : 0;                   \
        (m).srcHost = (L)->sdev ? NULL : (const void *)(src);                 \
        (m).dstDevice = (L)->ddev ? (CUdeviceptr)(dst) : 0;                   \
        (m).dstHost = (L)->ddev ? NULL : (void *)(dst);                       \
    } while (0)

/* Whether cuMemcpy2DAsync takes the pitches of rows h between device
 * memory. cuda.h: on intra-device copies it may fail for pitches that
 * cuMemAllocPitch did not compute, and those are guaranteed multiples
 * of CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT (the alignment texture
 * binding requires); those are the pitches taken as safe. The start
 * addresses do not matter: cuMemcpy2D takes any srcXInBytes inside a
 * pitched allocation. */
static int
pitches_safe(job *j, const cm__dim *h, int *safe, cm_error *err)
{
    int align;

    if (read_attribute(j, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT,
                       pitch_aligns, &align, err) < 0) {
        return -1;
    }
    *safe = align > 0 && h->ds % align == 0 && h->ss % align == 0;
    return 0;
}

/* One call of plan p from these first elements: a plain copy for a single
 * row, a 2-D copy for rows, cuMemcpy3D for slices of rows. Between device
 * memory, rows are cuMemcpy2DUnaligned when synchronous (the form without
 * cuMemcpy2D's restriction on pitches, which the CUDA runtime's own 2-D
 * copies use) and cuMemcpy2DAsync only for pitches_safe; other
 * asynchronous rows are one slice of cuMemcpy3DAsync, whose documentation
 * restricts pitches only to the device's maximum. */
static int
issue(job *j, const cm__layout *L, const cm__plan *p, uintptr_t dst,
      uintptr_t src, cm_error *err)
{
    const cm__dim *h = p->h >= 0 ? &L->d[p->h] : NULL;
    const cm__dim *z = p->z >= 0 ? &L->d[p->z] : NULL;
    int dtod = L->ddev && L->sdev, flat = 1, rc;

    if (h == NULL) {
        return copy_bytes(j, L->ddev, dst, L->sdev, src, p->width, err);
    }
    if (z == NULL && dtod && j->async && pitches_safe(j, h, &flat, err) < 0) {
        return -1;
    }
    if (z == NULL && flat) {
        CUDA_MEMCPY2D m;

        SET_ENDS(m, L, dst, src);
        m.srcPitch = (size_t)h->ss;
        m.dstPitch = (size_t)h->ds;
        m.WidthInBytes = p->width;
        m.Height = (size_t)h->n;
        rc = j->async ? CM_CALL(err, cuMemcpy2DAsync, &m, j->stream)
             : dtod   ? CM_CALL(err, cuMemcpy2DUnaligned, &m)
                      : CM_CALL(err, cuMemcpy2D, &m);
    }
    else {
        CUDA_MEMCPY3D m;

        SET_ENDS(m, L, dst, src);
        m.srcPitch = (size_t)h->ss;
        m.srcHeight = z != NULL ? (size_t)(z->ss / h->ss) : (size_t)h->n;
        m.dstPitch = (size_t)h->ds;
        m.dstHeight = z != NULL ? (size_t)(z->ds / h->ds) : (size_t)h->n;
        m.WidthInBytes = p->width;
        m.Height = (size_t)h->n;
        m.Depth = z != NULL ? (size_t)z->n : 1;
        rc = j->async ? CM_CALL(err, cuMemcpy3DAsync, &m, j->stream)
                      : CM_CALL(err, cuMemcpy3D, &m);
    }
    if (rc == 0 && L->ddev && !j->async) {
        j->early = 1;
    }
    return rc;
}

static int
run_plan(job *j, const cm__layout *L, const cm__plan *p, cm_error *err)
{
    cm__walk w;

    cm__walk_init(&w, L, p->w, p->h, p->z);
    do {
        if (issue(j, L, p, L->dst + (uintptr_t)w.doff,
                  L->src + (uintptr_t)w.soff, err) < 0) {
            return -1;
        }
    } while (cm__walk_next(&w));
    return 0;
}

/* Moves n elements of `size` bytes at strides ds and ss on the host. */
static void
move_run(char *dst, const char *src, ptrdiff_t n, ptrdiff_t ds, ptrdiff_t ss,
         size_t size)
{
    /* Constant sizes let the compiler turn each memcpy into a move. */
#define MOVE(bytes)                                                           \
    for (ptrdiff_t i = 0; i < n; i++) {                                       \
        memcpy(dst + i * ds, src + i * ss, bytes);                            \
    }
    switch (size) {
    case 1:
        MOVE(1);
        break;
    case 2:
        MOVE(2);
        break;
    case 4:
        MOVE(4);
        break;
    case 8:
        MOVE(8);
        break;
    default:
        MOVE(size);
        break;
    }
#undef MOVE
}

/* A host-to-host layout change (normalized H): the gather or scatter of a
 * host temporary. Runs are the elements of a dim contiguous on both
 * sides; a source stride of 0 repeats. */
static void
host_pass(const cm__layout *H, size_t itemsize)
{
    static const cm__dim one = {1, 0, 0};
    int run = H->nd > 0 && H->d[0].ds == (ptrdiff_t)itemsize &&
              H->d[0].ss == (ptrdiff_t)itemsize;
    size_t size = run ? (size_t)H->d[0].n * itemsize : itemsize;
    /* The tight loop walks the dim after the runs. */
    const cm__dim *in = run < H->nd ? &H->d[run] : &one;
    char *dst = (char *)H->dst;
    const char *src = (const char *)H->src;
    cm__walk w;

    cm__walk_init(&w, H, run ? 0 : -1, run < H->nd ? run : -1, -1);
    do {
        move_run(dst + w.doff, src + w.soff, in->n, in->ds, in->ss, size);
    } while (cm__walk_next(&w));
}

static double
host_cost(const cm__layout *H, size_t itemsize)
{
    size_t n = cm__layout_count(H), runs = n;

    if (H->nd > 0 && H->d[0].ds == (ptrdiff_t)itemsize &&
        H->d[0].ss == (ptrdiff_t)itemsize) {
        runs = n / (size_t)H->d[0].n;
    }
    return (double)(n * itemsize) * COST_HOST_BYTE +
           (double)runs * COST_HOST_RUN;
}

/* ---------------------------------------------------------------------------
 * Doubling: the destination's first block copied onto the next, twice as
 * large each time, on the device. */

/* Doubling along dim k: adds its cost to *cost, or with cost NULL issues
 * its calls. The blocks never share an element, so source and destination
 * rows never overlap even where their extents interleave. */
static int
double_dim(job *j, const cm__layout *L, const unsigned char *full, int k,
           double *cost, cm_error *err)
{
    ptrdiff_t n = L->d[k].n, m;
    cm__layout S;
    cm__plan p;

    for (ptrdiff_t c = 1; c < n; c += m) {
        m = n - c < c ? n - c : c;
        cm__layout_double_step(L, full, k, c, m, &S);
        cm__layout_plan_copy(&S, j->itemsize, j->max_pitch, &p);
        if (cost != NULL) {
            *cost += plan_cost(&S, &p);
        }
        else if (run_plan(j, &S, &p, err) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Doubling along every dim the source repeats, innermost first. */
static int
double_repeats(job *j, const cm__layout *L, double *cost, cm_error *err)
{
    unsigned char full[CM_LAYOUT_MAXDIM];

    for (int i = 0; i < L->nd; i++) {
        full[i] = L->d[i].ss != 0;
    }
    for (int k = 0; k < L->nd; k++) {
        if (!full[k]) {
            if (double_dim(j, L, full, k, cost, err) < 0) {
                return -1;
            }
            full[k] = 1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Strategies: each one's estimated cost, and running it. */

static int best(job *j, const cm__layout *L, unsigned mask, double *cost);
static int run(job *j, const cm__layout *L, int how, cm_error *err);

static double
direct_cost(job *j, const cm__layout *L)
{
    cm__plan p;

    cm__layout_plan_copy(L, j->itemsize, j->max_pitch, &p);
    return plan_cost(L, &p);
}

/* What the doubling's first copy may be: host sources may be gathered. */
static unsigned
double_first(const cm__layout *L)
{
    return L->sdev ? BIT(HOW_DIRECT) : BIT(HOW_DIRECT) | BIT(HOW_HOST);
}

/* A host temporary is in the device side's order, so that the transfer
 * is as few calls as that side alone allows; the host does the rest. */
static void
host_legs(const cm__layout *L, uintptr_t base, const ptrdiff_t *ts,
          cm__layout *leg, cm__layout *pass)
{
    int key = L->ddev ? 0 : 1;

    cm__layout_with_temp(L, 1 - key, 0, base, ts, leg);
    cm__layout_with_temp(L, key, 0, base, ts, pass);
}

static double
estimate(job *j, const cm__layout *L, int how)
{
    ptrdiff_t ts[CM_LAYOUT_MAXDIM], origin;
    double cost = 0, wait = j->async ? COST_WAIT : 0;
    cm__layout a, b;

    switch (how) {
    case HOW_DIRECT:
        return direct_cost(j, L);
    case HOW_DOUBLE:
        if (!L->ddev || !cm__layout_repeats(L)) {
            return NO_WAY;
        }
        cm__layout_unique(L, &a);
        best(j, &a, double_first(L), &cost);
        double_repeats(j, L, &cost, NULL);
        return cost;
    case HOW_HOST:
        if (L->ddev == L->sdev) {
            return NO_WAY;
        }
        cm__layout_packed(L, L->ddev ? 0 : 1, j->itemsize, ts, &origin);
        host_legs(L, (uintptr_t)origin, ts, &a, &b);
        return direct_cost(j, &a) + host_cost(&b, j->itemsize) + COST_TEMP +
               wait;
    case HOW_TEMP_SRC:
    case HOW_TEMP_DST:
        if (!L->ddev || !L->sdev) {
            return NO_WAY;
        }
        cm__layout_packed(L, how == HOW_TEMP_SRC, j->itemsize, ts, &origin);
        cm__layout_with_temp(L, 0, 1, (uintptr_t)origin, ts, &a);
        cm__layout_with_temp(L, 1, 1, (uintptr_t)origin, ts, &b);
        if (how == HOW_TEMP_SRC) {
            best(j, &b, BIT(HOW_DIRECT) | BIT(HOW_DOUBLE), &cost);
            return cost + direct_cost(j, &a) + COST_TEMP + wait;
        }
        best(j, &a, BIT(HOW_DIRECT) | BIT(HOW_DOUBLE), &cost);
        return cost + direct_cost(j, &b) + COST_TEMP + wait;
    case HOW_BOUNCE:
        if (!L->ddev || !L->sdev) {
            return NO_WAY;
        }
        cm__layout_packed(L, 1, j->itemsize, ts, &origin);
        cm__layout_with_temp(L, 0, 0, (uintptr_t)origin, ts, &a);
        cm__layout_with_temp(L, 1, 0, (uintptr_t)origin, ts, &b);
        best(j, &b, BIT(HOW_DIRECT) | BIT(HOW_HOST) | BIT(HOW_DOUBLE), &cost);
        return cost + direct_cost(j, &a) + COST_TEMP + wait;
    default:
        return NO_WAY;
    }
}

/* The cheapest strategy in mask (the first on ties; the bounce last, and
 * only past BOUNCE_ABOVE); its cost added to *cost when not NULL. */
static int
best(job *j, const cm__layout *L, unsigned mask, double *cost)
{
    double least = NO_WAY;
    int how = HOW_DIRECT;

    for (int h = 0; h < HOW_COUNT; h++) {
        if ((mask & BIT(h)) && (h != HOW_BOUNCE || least > BOUNCE_ABOVE)) {
            double c = estimate(j, L, h);

            if (c < least) {
                least = c;
                how = h;
            }
        }
    }
    if (cost != NULL) {
        *cost += least;
    }
    return how;
}

static int
run_direct(job *j, const cm__layout *L, cm_error *err)
{
    cm__plan p;

    cm__layout_plan_copy(L, j->itemsize, j->max_pitch, &p);
    return run_plan(j, L, &p, err);
}

static int
run_double(job *j, const cm__layout *L, cm_error *err)
{
    cm__layout U;

    cm__layout_unique(L, &U);
    if (run(j, &U, best(j, &U, double_first(L), NULL), err) < 0) {
        return -1;
    }
    return double_repeats(j, L, NULL, err);
}

/* Gather on the host then copy, or copy then scatter on the host. The
 * temporary is freed only once the stream is done with it. */
static int
run_host(job *j, const cm__layout *L, cm_error *err)
{
    ptrdiff_t ts[CM_LAYOUT_MAXDIM], origin;
    size_t size = cm__layout_packed(L, L->ddev ? 0 : 1, j->itemsize, ts,
                                    &origin);
    cm__layout leg, pass;
    char *buf = malloc(size);
    int rc;

    if (buf == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    host_legs(L, (uintptr_t)(buf + origin), ts, &leg, &pass);
    if (L->ddev) {
        host_pass(&pass, j->itemsize);
        rc = drain_after(j, run_direct(j, &leg, err), err);
    }
    else {
        /* The scatter reads what the stream writes: wait for it. */
        rc = drain_after(j, run_direct(j, &leg, err), err);
        if (rc == 0) {
            host_pass(&pass, j->itemsize);
        }
    }
    free(buf);
    return rc;
}

/* Through a device temporary, packed in one side's order so that that
 * leg is as few calls as the other side alone allows. Synchronizes before
 * releasing it: the free is queued, and the stream must be done with the
 * memory before anything can reuse it. */
static int
run_temp(job *j, const cm__layout *L, int how, cm_error *err)
{
    ptrdiff_t ts[CM_LAYOUT_MAXDIM], origin;
    size_t size = cm__layout_packed(L, how == HOW_TEMP_SRC, j->itemsize, ts,
                                    &origin);
    unsigned legmask = BIT(HOW_DIRECT) | BIT(HOW_DOUBLE);
    cm_error ignored;
    cm__layout in, out;
    cm_mem *m;
    int rc;

    if (cm_mem_alloc_from(j->dev, size, j->stream, CM_ALLOC_FIRST, &m, err) <
        0) {
        return -1;
    }
    cm__layout_with_temp(L, 0, 1, (uintptr_t)(m->ptr + (CUdeviceptr)origin),
                         ts, &in);
    cm__layout_with_temp(L, 1, 1, (uintptr_t)(m->ptr + (CUdeviceptr)origin),
                         ts, &out);
    if (how == HOW_TEMP_SRC) {
        rc = run_direct(j, &in, err);
        if (rc == 0) {
            rc = run(j, &out, best(j, &out, legmask, NULL), err);
        }
    }
    else {
        rc = run(j, &in, best(j, &in, legmask, NULL), err);
        if (rc == 0) {
            rc = run_direct(j, &out, err);
        }
    }
    rc = drain_after(j, rc, err);
    if (cm_mem_decref(m, rc < 0 ? &ignored : err) < 0) {
        rc = -1;
    }
    return rc;
}

/* Device to a host temporary in the source's order, then host to device:
 * for layouts that only a kernel would copy well on the device. */
static int
run_bounce(job *j, const cm__layout *L, cm_error *err)
{
    ptrdiff_t ts[CM_LAYOUT_MAXDIM], origin;
    size_t size = cm__layout_packed(L, 1, j->itemsize, ts, &origin);
    cm__layout down, up;
    char *buf = malloc(size);
    int rc;

    if (buf == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    cm__layout_with_temp(L, 0, 0, (uintptr_t)(buf + origin), ts, &down);
    cm__layout_with_temp(L, 1, 0, (uintptr_t)(buf + origin), ts, &up);
    /* Between the legs too: a driver may stage pageable memory for an
     * asynchronous HtoD before the stream reached it. */
    rc = drain_after(j, run_direct(j, &down, err), err);
    if (rc == 0) {
        rc = run(j, &up,
                 best(j, &up,
                      BIT(HOW_DIRECT) | BIT(HOW_HOST) | BIT(HOW_DOUBLE), NULL),
                 err);
        rc = drain_after(j, rc, err);
    }
    free(buf);
    return rc;
}

static int
run(job *j, const cm__layout *L, int how, cm_error *err)
{
    switch (how) {
    case HOW_DOUBLE:
        return run_double(j, L, err);
    case HOW_HOST:
        return run_host(j, L, err);
    case HOW_TEMP_SRC:
    case HOW_TEMP_DST:
        return run_temp(j, L, how, err);
    case HOW_BOUNCE:
        return run_bounce(j, L, err);
    default:
        return run_direct(j, L, err);
    }
}

/* ---------------------------------------------------------------------------
 * Fills. */

static double
set_cost(const cm__setplan *p)
{
    return (double)p->calls * COST_SET +
           rows_cost(p->rows, p->width * p->u, 0);
}

static int
set_call(job *j, uintptr_t ptr, unsigned u, uint32_t value, size_t width,
         size_t pitch, size_t height, cm_error *err)
{
    CUdeviceptr d = (CUdeviceptr)ptr;
    unsigned char v8 = (unsigned char)value;
    unsigned short v16 = (unsigned short)value;
    unsigned int v32 = value;
    CUstream s = j->stream;
    int rc;

    if (height == 1) {
        switch (u) {
        case 1:
            rc = j->async ? CM_CALL(err, cuMemsetD8Async, d, v8, width, s)
                          : CM_CALL(err, cuMemsetD8, d, v8, width);
            break;
        case 2:
            rc = j->async ? CM_CALL(err, cuMemsetD16Async, d, v16, width, s)
                          : CM_CALL(err, cuMemsetD16, d, v16, width);
            break;
        default:
            rc = j->async ? CM_CALL(err, cuMemsetD32Async, d, v32, width, s)
                          : CM_CALL(err, cuMemsetD32, d, v32, width);
            break;
        }
    }
    else {
        switch (u) {
        case 1:
            rc = j->async
                     ? CM_CALL(err, cuMemsetD2D8Async, d, pitch, v8, width,
                               height, s)
                     : CM_CALL(err, cuMemsetD2D8, d, pitch, v8, width, height);
            break;
        case 2:
            rc = j->async ? CM_CALL(err, cuMemsetD2D16Async, d, pitch, v16,
                                    width, height, s)
                          : CM_CALL(err, cuMemsetD2D16, d, pitch, v16, width,
                                    height);
            break;
        default:
            rc = j->async ? CM_CALL(err, cuMemsetD2D32Async, d, pitch, v32,
                                    width, height, s)
                          : CM_CALL(err, cuMemsetD2D32, d, pitch, v32, width,
                                    height);
            break;
        }
    }
    /* Memsets return early even when "synchronous". */
    if (rc == 0 && !j->async) {
        j->early = 1;
    }
    return rc;
}

static int
run_set(job *j, const cm__layout *L, const cm__setplan *p,
        const unsigned char *pattern, cm_error *err)
{
    const cm__dim *h = p->h >= 0 ? &L->d[p->h] : NULL;
    cm__walk w;

    for (size_t pass = 0; pass < p->passes; pass++) {
        /* The unit as the driver stores it: the pattern's own bytes. */
        uint32_t v32 = 0;
        uint16_t v16 = 0;
        uint32_t value;

        if (p->u == 4) {
            memcpy(&v32, pattern + pass * 4, 4);
            value = v32;
        }
        else if (p->u == 2) {
            memcpy(&v16, pattern + pass * 2, 2);
            value = v16;
        }
        else {
            value = pattern[pass];
        }
        cm__walk_init(&w, L, p->w, p->h, -1);
        do {
            if (set_call(j, L->dst + (uintptr_t)w.doff + pass * p->u, p->u,
                         value, p->width,
                         h != NULL ? (size_t)h->ds : p->width * p->u,
                         h != NULL ? (size_t)h->n : 1, err) < 0) {
                return -1;
            }
        } while (cm__walk_next(&w));
    }
    return 0;
}

/* A host temporary holding the pattern over and over, copied in. */
static int
fill_host(job *j, const cm__layout *L, const unsigned char *pattern,
          cm_error *err)
{
    ptrdiff_t ts[CM_LAYOUT_MAXDIM], origin;
    size_t size = cm__layout_packed(L, 0, j->itemsize, ts, &origin);
    cm__layout leg;
    char *buf = malloc(size);
    int rc;

    if (buf == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    memcpy(buf, pattern, j->itemsize);
    for (size_t have = j->itemsize; have < size; have *= 2) {
        memcpy(buf + have, buf, have < size - have ? have : size - have);
    }
    cm__layout_with_temp(L, 1, 0, (uintptr_t)(buf + origin), ts, &leg);
    rc = drain_after(j, run_direct(j, &leg, err), err);
    free(buf);
    return rc;
}

/* A fill is written directly over dims [0, k) (memsets, or for k 0 when
 * synchronous a copy of the pattern) and doubled along the rest; k is
 * chosen by cost against a host temporary. The whole layout in one
 * memset is taken at once. */
static int
fill_layout(job *j, const cm__layout *L, const unsigned char *pattern,
            cm_error *err)
{
    double doubling[CM_LAYOUT_MAXDIM + 1], least = NO_WAY;
    unsigned char full[CM_LAYOUT_MAXDIM];
    int k_best = 0, how = FILL_HOST;
    unsigned u_best = 0;
    ptrdiff_t ts[CM_LAYOUT_MAXDIM], origin;
    cm__layout sub;
    cm__setplan sp;
    unsigned u;

    u = cm__layout_set_unit(L, j->itemsize, pattern);
    if (u != 0) {
        cm__layout_plan_set(L, j->itemsize, j->max_pitch, u, 1, &sp);
        if (sp.calls == 1) {
            return run_set(j, L, &sp, pattern, err);
        }
    }
    doubling[L->nd] = 0;
    for (int k = L->nd - 1; k >= 0; k--) {
        doubling[k] = doubling[k + 1];
        for (int i = 0; i < L->nd; i++) {
            full[i] = i < k;
        }
        double_dim(j, L, full, k, &doubling[k], NULL);
    }
    /* From the most dims written directly down, so that ties keep the
     * fewest doubling steps. */
    for (int k = L->nd; k >= 0; k--) {
        double c;

        sub = *L;
        sub.nd = k;
        for (int m = SEED_SET; m <= SEED_COPY; m++) {
            u = cm__layout_set_unit(&sub, j->itemsize,
                                    m == SEED_SET ? pattern : NULL);
            if (m == SEED_COPY) {
                if (k != 0 || j->async) {
                    continue;
                }
                c = COST_CALL;
            }
            else if (u == 0) {
                continue;
            }
            else {
                cm__layout_plan_set(&sub, j->itemsize, j->max_pitch, u,
                                    m == SEED_SET, &sp);
                c = set_cost(&sp);
            }
            if (c + doubling[k] < least) {
                least = c + doubling[k];
                k_best = k;
                how = m;
                u_best = u;
            }
        }
    }
    cm__layout_packed(L, 0, j->itemsize, ts, &origin);
    cm__layout_with_temp(L, 1, 0, (uintptr_t)origin, ts, &sub);
    if (direct_cost(j, &sub) + COST_TEMP +
            (double)(cm__layout_count(L) * j->itemsize) * COST_HOST_BYTE +
            (j->async ? COST_WAIT : 0) <
        least) {
        return fill_host(j, L, pattern, err);
    }

    sub = *L;
    sub.nd = k_best;
    if (how == SEED_COPY) {
        /* Synchronous only: the pattern is read before this returns. */
        if (copy_bytes(j, 1, L->dst, 0, (uintptr_t)pattern, j->itemsize, err) <
            0) {
            return -1;
        }
    }
    else {
        cm__layout_plan_set(&sub, j->itemsize, j->max_pitch, u_best,
                            how == SEED_SET, &sp);
        if (run_set(j, &sub, &sp, pattern, err) < 0) {
            return -1;
        }
    }
    for (int k = k_best; k < L->nd; k++) {
        for (int i = 0; i < L->nd; i++) {
            full[i] = i < k;
        }
        if (double_dim(j, L, full, k, NULL, err) < 0) {
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Entry points. */

static int
read_max_pitch(job *j, cm_error *err)
{
    int value;

    if (read_attribute(j, CU_DEVICE_ATTRIBUTE_MAX_PITCH, max_pitches, &value,
                       err) < 0) {
        return -1;
    }
    j->max_pitch = value;
    return 0;
}

/* The host bytes an asynchronous copy of L (one side on the host) may
 * still touch when this returns: the host side's whole extent. */
static int
note_host(job *j, const cm__layout *L, cm_error *err)
{
    int dst = !L->ddev;
    uintptr_t base = dst ? L->dst : L->src;
    ptrdiff_t lo, hi;

    cm__layout_extent(L, dst ? 0 : 1, j->itemsize, &lo, &hi);
    return cm__copy_noted(j->dev, j->stream,
                          (const void *)(base + (uintptr_t)lo),
                          (size_t)(hi - lo), dst, err);
}

/* Whether dst and src, one on the host and one on the device, are one
 * C-ordered run of the same elements, the device side mapping no host
 * memory that the host side could share: then *nbytes is the run, and
 * the layouts cm_copy_array would build come to one contiguous copy of
 * it. Built, they cost as much as the copy's driver call on the
 * simulator; anything else is left to them (errors included). */
static int
one_run(const cm_side *dst, const cm_side *src, size_t itemsize,
        size_t *nbytes)
{
    const cm_side *dev = dst->on_device ? dst : src;
    ptrdiff_t step = (ptrdiff_t)itemsize;

    if (dst->on_device == src->on_device || dev->host != NULL ||
        itemsize == 0 || itemsize > PTRDIFF_MAX || dst->ndim != src->ndim ||
        dst->ndim < 0 || dst->ndim > CM_LAYOUT_MAXDIM) {
        return 0;
    }
    for (int i = dst->ndim - 1; i >= 0; i--) {
        ptrdiff_t len = dst->shape[i];

        if (len <= 0 || src->shape[i] != len || step > PTRDIFF_MAX / len ||
            (len > 1 &&
             (dst->strides[i] != step || src->strides[i] != step))) {
            return 0;
        }
        step *= len;
    }
    *nbytes = (size_t)step;
    return 1;
}

int
cm_copy_array(cm_device *dev, const cm_side *dst, const cm_side *src,
              size_t itemsize, CUstream stream, int async, cm_error *err)
{
    job j = {
        .dev = dev, .stream = stream, .async = async, .itemsize = itemsize};
    cm_ctx_guard guard;
    cm__layout L;
    cm__plan p;
    size_t n;
    int overlap, rc;

    if (one_run(dst, src, itemsize, &n)) {
        const cm_side *host = dst->on_device ? src : dst;

        return cm__copy_host(dev, dst->on_device,
                             dst->on_device ? dst->ptr : src->ptr, host->host,
                             n, host->locked, stream, async, err);
    }
    if (cm__layout_build(dst, src, itemsize, &L, &n, err) < 0) {
        return -1;
    }
    if (!L.ddev && !L.sdev) {
        return cm_fail(err, CM_ERR_VALUE,
                       "a copy between two host layouts needs no device");
    }
    if (n == 0) {
        return cm_fork_check(err);
    }
    cm__layout_normalize(&L);
    overlap = cm__layout_shares_bytes(&L, dst, src, itemsize);
    if (cm__layout_contiguous(&L, itemsize) && !overlap) {
        n *= itemsize;
        if (L.ddev && L.sdev) {
            return cm__copy_dtod(dev, L.dst, L.src, n, stream, async, err);
        }
        if (L.ddev) {
            return cm__copy_host(dev, 1, L.dst, (void *)L.src, n, src->locked,
                                 stream, async, err);
        }
        return cm__copy_host(dev, 0, L.src, (void *)L.dst, n, dst->locked,
                             stream, async, err);
    }
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    rc = read_max_pitch(&j, err);
    if (rc == 0) {
        cm__layout_plan_copy(&L, itemsize, j.max_pitch, &p);
        /* One call of rows at least as wide as costs count: nothing
         * beats it, so skip the estimates. */
        if (!overlap && p.calls == 1 &&
            p.width >= (L.ddev && L.sdev ? ROW_DEV : ROW_BUS)) {
            rc = run_plan(&j, &L, &p, err);
        }
        else {
            unsigned mask = (1u << HOW_COUNT) - 1;

            /* Between host and device only a host temporary is left. */
            if (overlap) {
                mask &= ~(BIT(HOW_DIRECT) | BIT(HOW_DOUBLE));
            }
            rc = run(&j, &L, best(&j, &L, mask, NULL), err);
        }
    }
    if (rc == 0 && !async) {
        rc = drain(&j, err);
    }
    else if (rc == 0 && L.ddev != L.sdev) {
        rc = note_host(&j, &L, err);
    }
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_fill(cm_device *dev, const cm_side *dst, const void *pattern,
        size_t itemsize, CUstream stream, int async, cm_error *err)
{
    job j = {
        .dev = dev, .stream = stream, .async = async, .itemsize = itemsize};
    cm_ctx_guard guard;
    cm__layout L;
    size_t n;
    int rc;

    if (!dst->on_device) {
        return cm_fail(err, CM_ERR_VALUE, "a fill needs a device layout");
    }
    if (cm__layout_build(dst, NULL, itemsize, &L, &n, err) < 0) {
        return -1;
    }
    if (n == 0) {
        return cm_fork_check(err);
    }
    cm__layout_normalize(&L);
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    rc = read_max_pitch(&j, err);
    if (rc == 0) {
        rc = fill_layout(&j, &L, pattern, err);
    }
    if (rc == 0 && !async) {
        rc = drain(&j, err);
    }
    return cm_ctx_leave(&guard, rc, err);
}
