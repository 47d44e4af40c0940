/* copyarray.c: copies between strided layouts and fills of them (copy.h's
 * cm_copy_array and cm_fill): collapsing dimensions, choosing among 2-D /
 * 3-D copies, temporaries and doubling by an estimated cost, and issuing
 * the driver calls. Contiguous byte ranges are copy.c's; the memory on
 * either side belongs to its owner, the temporaries to this file. */
#include "copy.h"

#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "memory.h"

#define MAXDIM 64

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

/* One dimension of a copy: its length (> 1) and byte strides. */
typedef struct dim {
    ptrdiff_t n;
    ptrdiff_t ds, ss; /* destination, source; a fill has ss == ds */
} dim;

/* A copy between two layouts of the same shape. Dims of length 1 are
 * never stored; once normalized, the smallest destination stride comes
 * first. */
typedef struct layout {
    int nd;
    int ddev, sdev;     /* the side is device memory (1) or host memory */
    uintptr_t dst, src; /* element (0, ..., 0) of each side */
    dim d[MAXDIM];
} layout;

/* One cm_copy_array or cm_fill. */
typedef struct job {
    cm_device *dev;
    CUstream stream;
    int async;
    size_t itemsize;
    long long max_pitch;
    int early; /* synchronous calls issued that may still be running */
} job;

/* The calls of a copy: rows of `width` bytes (the elements of dim w, or
 * one element), Height from dim h and Depth from dim z (-1: none), one call
 * per index of the other dims. */
typedef struct plan {
    int w, h, z;
    size_t width;
    size_t rows, calls;
} plan;

/* The memsets of a fill: rows of `width` units of `u` bytes (the elements
 * of dim w, one element, or with `passes` > 1 one unit of an element per
 * pass), Height from dim h, one call per pass and index of the others. */
typedef struct setplan {
    unsigned u;
    size_t passes;
    int w, h;
    size_t width;
    size_t rows, calls;
} setplan;

enum {
    HOW_DIRECT,   /* the calls of plan_copy, straight between the sides */
    HOW_DOUBLE,   /* the source's unrepeated part, then doubling copies */
    HOW_HOST,     /* a host temporary: gather and copy, or copy and scatter */
    HOW_TEMP_SRC, /* a device temporary in the source's order */
    HOW_TEMP_DST, /* a device temporary in the destination's order */
    HOW_BOUNCE,   /* device to a host temporary, then host to device */
    HOW_COUNT
};
#define BIT(how) (1u << (how))

enum { SEED_SET, SEED_PASSES, SEED_COPY, FILL_HOST };

static ptrdiff_t
absd(ptrdiff_t v)
{
    return v < 0 ? -v : v;
}

static size_t
count(const layout *L)
{
    size_t n = 1;

    for (int i = 0; i < L->nd; i++) {
        n *= (size_t)L->d[i].n;
    }
    return n;
}

/* ---------------------------------------------------------------------------
 * Layouts. */

static int
cmp_offset(const void *a, const void *b)
{
    ptrdiff_t x = *(const ptrdiff_t *)a, y = *(const ptrdiff_t *)b;

    return (x > y) - (x < y);
}

/* Whether two elements of the destination share bytes (the result would
 * depend on the order of the writes, as for a zero stride). Each stride
 * clearing the span of the smaller ones proves they do not; otherwise the
 * element offsets are listed and compared, up to a bound. */
#define OVERLAP_LIST_MAX ((size_t)1 << 22)

/* "(s0, s1, ...)" of a side's strides, cut short to fit. */
static const char *
strides_text(const cm_side *side, char *buf, size_t size)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < side->ndim && used + 1 < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%td%s",
                         i == 0 ? "(" : " ", side->strides[i],
                         side->ndim == 1 ? ",)"
                         : i + 1 < side->ndim ? ","
                                              : ")");

        used += w > 0 ? (size_t)w : 0;
    }
    return side->ndim == 0 ? "()" : buf;
}

static int
check_no_overlap(const cm_side *dst, const layout *L, size_t n,
                 size_t itemsize, cm_error *err)
{
    char text[256];
    ptrdiff_t step[MAXDIM], len[MAXDIM], span = (ptrdiff_t)itemsize;
    ptrdiff_t *offsets;
    int nd = L->nd, clear = 1;

    for (int i = 0; i < nd; i++) {
        int j = i;

        step[i] = L->d[i].ds < 0 ? -L->d[i].ds : L->d[i].ds;
        len[i] = L->d[i].n;
        for (; j > 0 && step[j - 1] > step[j]; j--) {
            ptrdiff_t t = step[j], u = len[j];

            step[j] = step[j - 1];
            len[j] = len[j - 1];
            step[j - 1] = t;
            len[j - 1] = u;
        }
    }
    for (int i = 0; i < nd && clear; i++) {
        clear = step[i] >= span;
        span += (len[i] - 1) * step[i];
    }
    if (clear) {
        return 0;
    }
    if (n > OVERLAP_LIST_MAX ||
        (offsets = malloc(n * sizeof(*offsets))) == NULL) {
        return cm_fail_fmt(err, CM_ERR_VALUE,
                           "destination strides %s interleave in a way whose "
                           "elements cannot be shown not to overlap",
                           strides_text(dst, text, sizeof(text)));
    }
    for (size_t k = 0; k < n; k++) {
        size_t rest = k;
        ptrdiff_t off = 0;

        for (int i = 0; i < nd; i++) {
            off += (ptrdiff_t)(rest % (size_t)len[i]) * step[i];
            rest /= (size_t)len[i];
        }
        offsets[k] = off;
    }
    qsort(offsets, n, sizeof(*offsets), cmp_offset);
    for (size_t k = 1; k < n && clear == 0; k++) {
        if (offsets[k] - offsets[k - 1] < (ptrdiff_t)itemsize) {
            clear = -1;
        }
    }
    free(offsets);
    if (clear < 0) {
        return cm_fail_fmt(err, CM_ERR_VALUE,
                           "destination elements overlap: strides %s map "
                           "several elements to the same bytes",
                           strides_text(dst, text, sizeof(text)));
    }
    return 0;
}

/* Checks the sides (numba's rules were py/'s; these keep core safe) and
 * builds the dims of length > 1; *n is the element count. A fill passes
 * src NULL. */
static int
build(const cm_side *dst, const cm_side *src, size_t itemsize, layout *L,
      size_t *n, cm_error *err)
{
    if (itemsize == 0) {
        return cm_fail(err, CM_ERR_VALUE, "copy of a zero itemsize");
    }
    if (dst->ndim < 0 || dst->ndim > MAXDIM) {
        return cm_fail_fmt(err, CM_ERR_VALUE,
                           "%d dimensions: at most %d are supported",
                           dst->ndim, MAXDIM);
    }
    if (src != NULL && src->ndim != dst->ndim) {
        return cm_fail_fmt(err, CM_ERR_VALUE,
                           "copy between %d and %d dimensions", src->ndim,
                           dst->ndim);
    }
    *n = 1;
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->shape[i] < 0) {
            return cm_fail_fmt(err, CM_ERR_VALUE,
                               "negative length %td in dimension %d",
                               dst->shape[i], i);
        }
        if (src != NULL && src->shape[i] != dst->shape[i]) {
            return cm_fail_fmt(err, CM_ERR_VALUE,
                               "shapes differ in dimension %d: %td and %td",
                               i, dst->shape[i], src->shape[i]);
        }
        *n *= (size_t)dst->shape[i];
    }
    L->nd = 0;
    L->ddev = dst->on_device;
    L->dst = dst->on_device ? (uintptr_t)dst->ptr : (uintptr_t)dst->host;
    L->sdev = src != NULL ? src->on_device : dst->on_device;
    L->src = src == NULL      ? L->dst
             : src->on_device ? (uintptr_t)src->ptr
                              : (uintptr_t)src->host;
    if (*n == 0) {
        return 0;
    }
    for (int i = 0; i < dst->ndim; i++) {
        ptrdiff_t len = dst->shape[i];

        if (len == 1) {
            continue;
        }
        /* Two elements in one place: the result would depend on order. */
        if (dst->strides[i] == 0) {
            return cm_fail_fmt(err, CM_ERR_VALUE,
                               "destination stride 0 in dimension %d of "
                               "length %td",
                               i, len);
        }
        L->d[L->nd++] = (dim){len, dst->strides[i],
                              src != NULL ? src->strides[i]
                                          : dst->strides[i]};
    }
    return check_no_overlap(dst, L, *n, itemsize, err);
}

/* Flips the dims where the destination runs backwards and the source does
 * too (or repeats), sorts by destination stride, innermost first, and
 * merges neighbours that are contiguous with each other on both sides. */
static void
normalize(layout *L)
{
    int out = 0;

    for (int i = 0; i < L->nd; i++) {
        dim *d = &L->d[i];

        if (d->ds < 0 && d->ss <= 0) {
            L->dst += (uintptr_t)((d->n - 1) * d->ds);
            L->src += (uintptr_t)((d->n - 1) * d->ss);
            d->ds = -d->ds;
            d->ss = -d->ss;
        }
    }
    /* Insertion sort: a handful of dims, kept in order on ties. */
    for (int i = 1; i < L->nd; i++) {
        dim t = L->d[i];
        int k = i;

        while (k > 0 && absd(L->d[k - 1].ds) > absd(t.ds)) {
            L->d[k] = L->d[k - 1];
            k--;
        }
        L->d[k] = t;
    }
    for (int i = 1; i < L->nd; i++) {
        dim *prev = &L->d[out];

        if (L->d[i].ds == prev->n * prev->ds &&
            L->d[i].ss == prev->n * prev->ss) {
            prev->n *= L->d[i].n;
        }
        else {
            L->d[++out] = L->d[i];
        }
    }
    if (L->nd > 0) {
        L->nd = out + 1;
    }
}

static int
contiguous(const layout *L, size_t itemsize)
{
    ptrdiff_t size = (ptrdiff_t)itemsize;

    return L->nd == 0 ||
           (L->nd == 1 && L->d[0].ds == size && L->d[0].ss == size);
}

static int
repeats(const layout *L)
{
    for (int i = 0; i < L->nd; i++) {
        if (L->d[i].ss == 0) {
            return 1;
        }
    }
    return 0;
}

/* Whether the bytes L's sides span intersect, with its destination at
 * `dst` and source at `src` in one address space. */
static int
overlaps(const layout *L, uintptr_t dst, uintptr_t src, size_t itemsize)
{
    ptrdiff_t dlo = 0, dhi = 0, slo = 0, shi = 0;

    for (int i = 0; i < L->nd; i++) {
        ptrdiff_t dspan = (L->d[i].n - 1) * L->d[i].ds;
        ptrdiff_t sspan = (L->d[i].n - 1) * L->d[i].ss;

        *(dspan < 0 ? &dlo : &dhi) += dspan;
        *(sspan < 0 ? &slo : &shi) += sspan;
    }
    return dst + (uintptr_t)dlo < src + (uintptr_t)shi + itemsize &&
           src + (uintptr_t)slo < dst + (uintptr_t)dhi + itemsize;
}

/* Whether L's sides share bytes: two device ranges, or a host range and
 * a device range whose memory the host sees at the device side's `host`
 * (mapped, registered or managed memory; the driver does not check that
 * such a copy's sides are disjoint). Flips in normalize moved both of a
 * side's addresses alike. */
static int
shares_bytes(const layout *L, const cm_side *dst, const cm_side *src,
             size_t itemsize)
{
    const cm_side *dev = dst->on_device ? dst : src;
    uintptr_t shift = (uintptr_t)dev->host - (uintptr_t)dev->ptr;

    if (L->ddev && L->sdev) {
        return overlaps(L, L->dst, L->src, itemsize);
    }
    if (dev->host == NULL) {
        return 0;
    }
    return overlaps(L, L->dst + (L->ddev ? shift : 0),
                    L->src + (L->sdev ? shift : 0), itemsize);
}

/* L without the dims its source repeats: what the source holds once. */
static void
unique_part(const layout *L, layout *U)
{
    U->nd = 0;
    U->ddev = L->ddev;
    U->sdev = L->sdev;
    U->dst = L->dst;
    U->src = L->src;
    for (int i = 0; i < L->nd; i++) {
        if (L->d[i].ss != 0) {
            U->d[U->nd++] = L->d[i];
        }
    }
    normalize(U);
}

/* A packed temporary holding L's elements in the order of one side (`key`
 * 0: the destination, 1: the source): its stride for each dim, with that
 * side's sign, or 0 where the source repeats (the temporary holds it
 * once). Returns its size in bytes; *origin is the offset of element
 * (0, ..., 0) in it. */
static size_t
packed(const layout *L, int key, size_t itemsize, ptrdiff_t *ts,
       ptrdiff_t *origin)
{
    int order[MAXDIM];
    ptrdiff_t s = (ptrdiff_t)itemsize;

    for (int i = 0; i < L->nd; i++) {
        ptrdiff_t k = absd(key ? L->d[i].ss : L->d[i].ds);
        int j = i;

        while (j > 0 && absd(key ? L->d[order[j - 1]].ss
                                 : L->d[order[j - 1]].ds) > k) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    *origin = 0;
    for (int i = 0; i < L->nd; i++) {
        const dim *d = &L->d[order[i]];
        ptrdiff_t k = key ? d->ss : d->ds;

        if (k == 0) {
            ts[order[i]] = 0;
            continue;
        }
        ts[order[i]] = k > 0 ? s : -s;
        if (k < 0) {
            *origin += (d->n - 1) * s;
        }
        s *= d->n;
    }
    return (size_t)s;
}

/* L with one side (0: destination, 1: source) replaced by a temporary at
 * `base` with strides ts, in device or host memory. As a destination the
 * temporary drops the dims it holds once. */
static void
with_temp(const layout *L, int side, int on_device, uintptr_t base,
          const ptrdiff_t *ts, layout *out)
{
    out->nd = 0;
    out->ddev = side == 0 ? on_device : L->ddev;
    out->sdev = side == 1 ? on_device : L->sdev;
    out->dst = side == 0 ? base : L->dst;
    out->src = side == 1 ? base : L->src;
    for (int i = 0; i < L->nd; i++) {
        dim d = L->d[i];

        if (side == 0) {
            if (ts[i] == 0) {
                continue;
            }
            d.ds = ts[i];
        }
        else {
            d.ss = ts[i];
        }
        out->d[out->nd++] = d;
    }
    normalize(out);
}

/* An odometer over some dims of a layout, inner first, tracking the byte
 * offset of the current index on each side. */
typedef struct walk {
    int n;
    const dim *d[MAXDIM];
    ptrdiff_t idx[MAXDIM];
    ptrdiff_t doff, soff;
} walk;

/* Every dim of L but a, b and c (-1 for none). */
static void
walk_init(walk *w, const layout *L, int a, int b, int c)
{
    w->n = 0;
    w->doff = w->soff = 0;
    for (int i = 0; i < L->nd; i++) {
        if (i != a && i != b && i != c) {
            w->idx[w->n] = 0;
            w->d[w->n++] = &L->d[i];
        }
    }
}

/* Steps to the next index; 0 after the last. */
static int
walk_next(walk *w)
{
    for (int k = 0; k < w->n; k++) {
        const dim *d = w->d[k];

        if (++w->idx[k] < d->n) {
            w->doff += d->ds;
            w->soff += d->ss;
            return 1;
        }
        w->doff -= (d->n - 1) * d->ds;
        w->soff -= (d->n - 1) * d->ss;
        w->idx[k] = 0;
    }
    return 0;
}

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

static int
pitch_ok(ptrdiff_t s, size_t width, long long max_pitch)
{
    return s > 0 && (size_t)s >= width && s <= max_pitch;
}

/* A 3-D slice stride: the pitch times a height that admits the rows. */
static int
slice_ok(ptrdiff_t slice, ptrdiff_t pitch, ptrdiff_t rows)
{
    return slice > 0 && slice % pitch == 0 && slice / pitch >= rows;
}

/* The fewest cuMemcpy2D / cuMemcpy3D calls for L: the rows are the
 * elements of the innermost dim when it is contiguous on both sides (one
 * element otherwise); of the other dims, the pair that most rows per call
 * admit as Height and Depth (any dim qualifies, in any order). */
static void
plan_copy(const layout *L, size_t itemsize, long long max_pitch, plan *p)
{
    ptrdiff_t best = 1;

    p->w = p->h = p->z = -1;
    if (L->nd > 0 && L->d[0].ds == (ptrdiff_t)itemsize &&
        L->d[0].ss == (ptrdiff_t)itemsize) {
        p->w = 0;
    }
    p->width = p->w == 0 ? (size_t)L->d[0].n * itemsize : itemsize;
    p->rows = count(L) / (p->w == 0 ? (size_t)L->d[0].n : 1);
    for (int h = 0; h < L->nd; h++) {
        const dim *dh = &L->d[h];

        if (h == p->w || !pitch_ok(dh->ds, p->width, max_pitch) ||
            !pitch_ok(dh->ss, p->width, max_pitch)) {
            continue;
        }
        if (dh->n > best) {
            best = dh->n;
            p->h = h;
            p->z = -1;
        }
        for (int z = 0; z < L->nd; z++) {
            const dim *dz = &L->d[z];

            if (z != p->w && z != h && dh->n * dz->n > best &&
                slice_ok(dz->ds, dh->ds, dh->n) &&
                slice_ok(dz->ss, dh->ss, dh->n)) {
                best = dh->n * dz->n;
                p->h = h;
                p->z = z;
            }
        }
    }
    p->calls = p->rows / (size_t)best;
}

static double
rows_cost(size_t rows, size_t width, int bus)
{
    size_t least = bus ? ROW_BUS : ROW_DEV;

    return (double)rows * (double)(width > least ? width : least) *
           (bus ? COST_BUS_BYTE : COST_DEV_BYTE);
}

static double
plan_cost(const layout *L, const plan *p)
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
copy_bytes(job *j, int ddev, uintptr_t dst, int sdev, uintptr_t src,
           size_t n, cm_error *err)
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
#define SET_ENDS(m, L, dst, src)                                               \
    do {                                                                       \
        memset(&(m), 0, sizeof(m));                                            \
        (m).srcMemoryType = memtype((L)->sdev);                                \
        (m).dstMemoryType = memtype((L)->ddev);                                \
        (m).srcDevice = (L)->sdev ? (CUdeviceptr)(src) : 0;                    \
        (m).srcHost = (L)->sdev ? NULL : (const void *)(src);                  \
        (m).dstDevice = (L)->ddev ? (CUdeviceptr)(dst) : 0;                    \
        (m).dstHost = (L)->ddev ? NULL : (void *)(dst);                        \
    } while (0)

/* Whether cuMemcpy2DAsync takes the pitches of rows h between device
 * memory. cuda.h: on intra-device copies it may fail for pitches that
 * cuMemAllocPitch did not compute, and those are guaranteed multiples
 * of CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT (the alignment texture
 * binding requires); those are the pitches taken as safe. The start
 * addresses do not matter: cuMemcpy2D takes any srcXInBytes inside a
 * pitched allocation. */
static int
pitches_safe(job *j, const dim *h, int *safe, cm_error *err)
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
issue(job *j, const layout *L, const plan *p, uintptr_t dst, uintptr_t src,
      cm_error *err)
{
    const dim *h = p->h >= 0 ? &L->d[p->h] : NULL;
    const dim *z = p->z >= 0 ? &L->d[p->z] : NULL;
    int dtod = L->ddev && L->sdev, flat = 1, rc;

    if (h == NULL) {
        return copy_bytes(j, L->ddev, dst, L->sdev, src, p->width, err);
    }
    if (z == NULL && dtod && j->async &&
        pitches_safe(j, h, &flat, err) < 0) {
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
run_plan(job *j, const layout *L, const plan *p, cm_error *err)
{
    walk w;

    walk_init(&w, L, p->w, p->h, p->z);
    do {
        if (issue(j, L, p, L->dst + (uintptr_t)w.doff,
                  L->src + (uintptr_t)w.soff, err) < 0) {
            return -1;
        }
    } while (walk_next(&w));
    return 0;
}

/* Moves n elements of `size` bytes at strides ds and ss on the host. */
static void
move_run(char *dst, const char *src, ptrdiff_t n, ptrdiff_t ds, ptrdiff_t ss,
         size_t size)
{
    /* Constant sizes let the compiler turn each memcpy into a move. */
#define MOVE(bytes)                                                            \
    for (ptrdiff_t i = 0; i < n; i++) {                                        \
        memcpy(dst + i * ds, src + i * ss, bytes);                             \
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
host_pass(const layout *H, size_t itemsize)
{
    static const dim one = {1, 0, 0};
    int run = H->nd > 0 && H->d[0].ds == (ptrdiff_t)itemsize &&
              H->d[0].ss == (ptrdiff_t)itemsize;
    size_t size = run ? (size_t)H->d[0].n * itemsize : itemsize;
    /* The tight loop walks the dim after the runs. */
    const dim *in = run < H->nd ? &H->d[run] : &one;
    char *dst = (char *)H->dst;
    const char *src = (const char *)H->src;
    walk w;

    walk_init(&w, H, run ? 0 : -1, run < H->nd ? run : -1, -1);
    do {
        move_run(dst + w.doff, src + w.soff, in->n, in->ds, in->ss, size);
    } while (walk_next(&w));
}

static double
host_cost(const layout *H, size_t itemsize)
{
    size_t n = count(H), runs = n;

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

/* The step copying m blocks along dim k from the start of L's destination
 * to c blocks further, over the dims in `full` (already written). */
static void
double_step(const layout *L, const unsigned char *full, int k, ptrdiff_t c,
            ptrdiff_t m, layout *S)
{
    S->nd = 0;
    S->ddev = S->sdev = 1;
    S->dst = L->dst + (uintptr_t)(c * L->d[k].ds);
    S->src = L->dst;
    for (int i = 0; i < L->nd; i++) {
        if (full[i]) {
            S->d[S->nd++] = (dim){L->d[i].n, L->d[i].ds, L->d[i].ds};
        }
    }
    if (m > 1) {
        S->d[S->nd++] = (dim){m, L->d[k].ds, L->d[k].ds};
    }
    normalize(S);
}

/* Doubling along dim k: adds its cost to *cost, or with cost NULL issues
 * its calls. The blocks never share an element, so source and destination
 * rows never overlap even where their extents interleave. */
static int
double_dim(job *j, const layout *L, const unsigned char *full, int k,
           double *cost, cm_error *err)
{
    ptrdiff_t n = L->d[k].n, m;
    layout S;
    plan p;

    for (ptrdiff_t c = 1; c < n; c += m) {
        m = n - c < c ? n - c : c;
        double_step(L, full, k, c, m, &S);
        plan_copy(&S, j->itemsize, j->max_pitch, &p);
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
double_repeats(job *j, const layout *L, double *cost, cm_error *err)
{
    unsigned char full[MAXDIM];

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

static int best(job *j, const layout *L, unsigned mask, double *cost);
static int run(job *j, const layout *L, int how, cm_error *err);

static double
direct_cost(job *j, const layout *L)
{
    plan p;

    plan_copy(L, j->itemsize, j->max_pitch, &p);
    return plan_cost(L, &p);
}

/* What the doubling's first copy may be: host sources may be gathered. */
static unsigned
double_first(const layout *L)
{
    return L->sdev ? BIT(HOW_DIRECT) : BIT(HOW_DIRECT) | BIT(HOW_HOST);
}

/* A host temporary is in the device side's order, so that the transfer
 * is as few calls as that side alone allows; the host does the rest. */
static void
host_legs(const layout *L, uintptr_t base, const ptrdiff_t *ts,
          layout *leg, layout *pass)
{
    int key = L->ddev ? 0 : 1;

    with_temp(L, 1 - key, 0, base, ts, leg);
    with_temp(L, key, 0, base, ts, pass);
}

static double
estimate(job *j, const layout *L, int how)
{
    ptrdiff_t ts[MAXDIM], origin;
    double cost = 0, wait = j->async ? COST_WAIT : 0;
    layout a, b;

    switch (how) {
    case HOW_DIRECT:
        return direct_cost(j, L);
    case HOW_DOUBLE:
        if (!L->ddev || !repeats(L)) {
            return NO_WAY;
        }
        unique_part(L, &a);
        best(j, &a, double_first(L), &cost);
        double_repeats(j, L, &cost, NULL);
        return cost;
    case HOW_HOST:
        if (L->ddev == L->sdev) {
            return NO_WAY;
        }
        packed(L, L->ddev ? 0 : 1, j->itemsize, ts, &origin);
        host_legs(L, (uintptr_t)origin, ts, &a, &b);
        return direct_cost(j, &a) + host_cost(&b, j->itemsize) + COST_TEMP +
               wait;
    case HOW_TEMP_SRC:
    case HOW_TEMP_DST:
        if (!L->ddev || !L->sdev) {
            return NO_WAY;
        }
        packed(L, how == HOW_TEMP_SRC, j->itemsize, ts, &origin);
        with_temp(L, 0, 1, (uintptr_t)origin, ts, &a);
        with_temp(L, 1, 1, (uintptr_t)origin, ts, &b);
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
        packed(L, 1, j->itemsize, ts, &origin);
        with_temp(L, 0, 0, (uintptr_t)origin, ts, &a);
        with_temp(L, 1, 0, (uintptr_t)origin, ts, &b);
        best(j, &b, BIT(HOW_DIRECT) | BIT(HOW_HOST) | BIT(HOW_DOUBLE), &cost);
        return cost + direct_cost(j, &a) + COST_TEMP + wait;
    default:
        return NO_WAY;
    }
}

/* The cheapest strategy in mask (the first on ties; the bounce last, and
 * only past BOUNCE_ABOVE); its cost added to *cost when not NULL. */
static int
best(job *j, const layout *L, unsigned mask, double *cost)
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
run_direct(job *j, const layout *L, cm_error *err)
{
    plan p;

    plan_copy(L, j->itemsize, j->max_pitch, &p);
    return run_plan(j, L, &p, err);
}

static int
run_double(job *j, const layout *L, cm_error *err)
{
    layout U;

    unique_part(L, &U);
    if (run(j, &U, best(j, &U, double_first(L), NULL), err) < 0) {
        return -1;
    }
    return double_repeats(j, L, NULL, err);
}

/* Gather on the host then copy, or copy then scatter on the host. The
 * temporary is freed only once the stream is done with it. */
static int
run_host(job *j, const layout *L, cm_error *err)
{
    ptrdiff_t ts[MAXDIM], origin;
    size_t size = packed(L, L->ddev ? 0 : 1, j->itemsize, ts, &origin);
    layout leg, pass;
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
run_temp(job *j, const layout *L, int how, cm_error *err)
{
    ptrdiff_t ts[MAXDIM], origin;
    size_t size = packed(L, how == HOW_TEMP_SRC, j->itemsize, ts, &origin);
    unsigned legmask = BIT(HOW_DIRECT) | BIT(HOW_DOUBLE);
    cm_error ignored;
    layout in, out;
    cm_mem *m;
    int rc;

    if (cm_mem_alloc(j->dev, size, j->stream, &m, err) < 0) {
        return -1;
    }
    with_temp(L, 0, 1, (uintptr_t)(m->ptr + (CUdeviceptr)origin), ts, &in);
    with_temp(L, 1, 1, (uintptr_t)(m->ptr + (CUdeviceptr)origin), ts, &out);
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
run_bounce(job *j, const layout *L, cm_error *err)
{
    ptrdiff_t ts[MAXDIM], origin;
    size_t size = packed(L, 1, j->itemsize, ts, &origin);
    layout down, up;
    char *buf = malloc(size);
    int rc;

    if (buf == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    with_temp(L, 0, 0, (uintptr_t)(buf + origin), ts, &down);
    with_temp(L, 1, 0, (uintptr_t)(buf + origin), ts, &up);
    /* Between the legs too: a driver may stage pageable memory for an
     * asynchronous HtoD before the stream reached it. */
    rc = drain_after(j, run_direct(j, &down, err), err);
    if (rc == 0) {
        rc = run(j, &up,
                 best(j, &up,
                      BIT(HOW_DIRECT) | BIT(HOW_HOST) | BIT(HOW_DOUBLE),
                      NULL),
                 err);
        rc = drain_after(j, rc, err);
    }
    free(buf);
    return rc;
}

static int
run(job *j, const layout *L, int how, cm_error *err)
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

/* The widest unit (4, 2 or 1 bytes) dividing itemsize that L's first
 * element and strides are aligned to (the memsets' rule) and, given a
 * pattern, that the pattern repeats; 0 when none. */
static unsigned
set_unit(const layout *L, size_t itemsize, const unsigned char *pattern)
{
    for (unsigned u = 4; u > 0; u /= 2) {
        int ok = itemsize % u == 0 && L->dst % u == 0;

        for (int i = 0; ok && i < L->nd; i++) {
            ok = L->d[i].ds % (ptrdiff_t)u == 0;
        }
        for (size_t i = u; ok && pattern != NULL && i < itemsize; i++) {
            ok = pattern[i] == pattern[i - u];
        }
        if (ok) {
            return u;
        }
    }
    return 0;
}

/* Memsets of unit u writing L: with `whole`, rows of whole elements (the
 * pattern repeats u); otherwise one pass per unit of the element, each row
 * one unit. Height: the dim that admits the most rows. */
static void
plan_set(const layout *L, size_t itemsize, long long max_pitch, unsigned u,
         int whole, setplan *p)
{
    ptrdiff_t best = 1;
    size_t total = count(L), bytes;

    p->u = u;
    p->passes = whole ? 1 : itemsize / u;
    p->w = p->h = -1;
    if (whole && L->nd > 0 && L->d[0].ds == (ptrdiff_t)itemsize) {
        p->w = 0;
        total /= (size_t)L->d[0].n;
    }
    bytes = p->w == 0 ? (size_t)L->d[0].n * itemsize : whole ? itemsize : u;
    p->width = bytes / u;
    for (int h = 0; h < L->nd; h++) {
        if (h != p->w && L->d[h].n > best &&
            pitch_ok(L->d[h].ds, bytes, max_pitch)) {
            best = L->d[h].n;
            p->h = h;
        }
    }
    p->rows = total * p->passes;
    p->calls = total / (size_t)best * p->passes;
}

static double
set_cost(const setplan *p)
{
    return (double)p->calls * COST_SET + rows_cost(p->rows, p->width * p->u,
                                                   0);
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
            rc = j->async ? CM_CALL(err, cuMemsetD2D8Async, d, pitch, v8,
                                    width, height, s)
                          : CM_CALL(err, cuMemsetD2D8, d, pitch, v8, width,
                                    height);
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
run_set(job *j, const layout *L, const setplan *p,
        const unsigned char *pattern, cm_error *err)
{
    const dim *h = p->h >= 0 ? &L->d[p->h] : NULL;
    walk w;

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
        walk_init(&w, L, p->w, p->h, -1);
        do {
            if (set_call(j, L->dst + (uintptr_t)w.doff + pass * p->u, p->u,
                         value, p->width,
                         h != NULL ? (size_t)h->ds : p->width * p->u,
                         h != NULL ? (size_t)h->n : 1, err) < 0) {
                return -1;
            }
        } while (walk_next(&w));
    }
    return 0;
}

/* A host temporary holding the pattern over and over, copied in. */
static int
fill_host(job *j, const layout *L, const unsigned char *pattern,
          cm_error *err)
{
    ptrdiff_t ts[MAXDIM], origin;
    size_t size = packed(L, 0, j->itemsize, ts, &origin);
    layout leg;
    char *buf = malloc(size);
    int rc;

    if (buf == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    memcpy(buf, pattern, j->itemsize);
    for (size_t have = j->itemsize; have < size; have *= 2) {
        memcpy(buf + have, buf, have < size - have ? have : size - have);
    }
    with_temp(L, 1, 0, (uintptr_t)(buf + origin), ts, &leg);
    rc = drain_after(j, run_direct(j, &leg, err), err);
    free(buf);
    return rc;
}

/* A fill is written directly over dims [0, k) (memsets, or for k 0 when
 * synchronous a copy of the pattern) and doubled along the rest; k is
 * chosen by cost against a host temporary. The whole layout in one
 * memset is taken at once. */
static int
fill_layout(job *j, const layout *L, const unsigned char *pattern,
            cm_error *err)
{
    double doubling[MAXDIM + 1], least = NO_WAY;
    unsigned char full[MAXDIM];
    int k_best = 0, how = FILL_HOST;
    unsigned u_best = 0;
    ptrdiff_t ts[MAXDIM], origin;
    layout sub;
    setplan sp;
    unsigned u;

    u = set_unit(L, j->itemsize, pattern);
    if (u != 0) {
        plan_set(L, j->itemsize, j->max_pitch, u, 1, &sp);
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
            u = set_unit(&sub, j->itemsize, m == SEED_SET ? pattern : NULL);
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
                plan_set(&sub, j->itemsize, j->max_pitch, u, m == SEED_SET,
                         &sp);
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
    packed(L, 0, j->itemsize, ts, &origin);
    with_temp(L, 1, 0, (uintptr_t)origin, ts, &sub);
    if (direct_cost(j, &sub) + COST_TEMP +
            (double)(count(L) * j->itemsize) * COST_HOST_BYTE +
            (j->async ? COST_WAIT : 0) <
        least) {
        return fill_host(j, L, pattern, err);
    }

    sub = *L;
    sub.nd = k_best;
    if (how == SEED_COPY) {
        /* Synchronous only: the pattern is read before this returns. */
        if (copy_bytes(j, 1, L->dst, 0, (uintptr_t)pattern, j->itemsize,
                       err) < 0) {
            return -1;
        }
    }
    else {
        plan_set(&sub, j->itemsize, j->max_pitch, u_best, how == SEED_SET,
                 &sp);
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
note_host(job *j, const layout *L, cm_error *err)
{
    int dst = !L->ddev;
    uintptr_t lo = dst ? L->dst : L->src, hi = lo + j->itemsize;

    for (int i = 0; i < L->nd; i++) {
        ptrdiff_t span = (L->d[i].n - 1) * (dst ? L->d[i].ds : L->d[i].ss);

        if (span < 0) {
            lo -= (uintptr_t)-span;
        }
        else {
            hi += (uintptr_t)span;
        }
    }
    return cm__copy_noted(j->dev, j->stream, (const void *)lo, hi - lo, dst,
                          err);
}

int
cm_copy_array(cm_device *dev, const cm_side *dst, const cm_side *src,
              size_t itemsize, CUstream stream, int async, cm_error *err)
{
    job j = {.dev = dev, .stream = stream, .async = async,
             .itemsize = itemsize};
    cm_ctx_guard guard;
    layout L;
    plan p;
    size_t n;
    int overlap, rc;

    if (build(dst, src, itemsize, &L, &n, err) < 0) {
        return -1;
    }
    if (!L.ddev && !L.sdev) {
        return cm_fail(err, CM_ERR_VALUE,
                       "a copy between two host layouts needs no device");
    }
    if (n == 0) {
        return cm_fork_check(err);
    }
    normalize(&L);
    overlap = shares_bytes(&L, dst, src, itemsize);
    if (contiguous(&L, itemsize) && !overlap) {
        n *= itemsize;
        if (L.ddev && L.sdev) {
            return cm_copy_dtod(dev, L.dst, L.src, n, stream, async, err);
        }
        if (L.ddev) {
            return cm_copy_htod(dev, L.dst, (const void *)L.src, n, stream,
                                async, err);
        }
        return cm_copy_dtoh(dev, (void *)L.dst, L.src, n, stream, async,
                            err);
    }
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    rc = read_max_pitch(&j, err);
    if (rc == 0) {
        plan_copy(&L, itemsize, j.max_pitch, &p);
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
    job j = {.dev = dev, .stream = stream, .async = async,
             .itemsize = itemsize};
    cm_ctx_guard guard;
    layout L;
    size_t n;
    int rc;

    if (!dst->on_device) {
        return cm_fail(err, CM_ERR_VALUE, "a fill needs a device layout");
    }
    if (build(dst, NULL, itemsize, &L, &n, err) < 0) {
        return -1;
    }
    if (n == 0) {
        return cm_fork_check(err);
    }
    normalize(&L);
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
