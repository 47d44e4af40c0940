/* layout.c: the layout algebra of strided copies and fills (layout.h):
 * checking and collapsing dims, extents and overlaps, packed temporaries,
 * the odometer and the 2-D / 3-D copy and memset plans. Calls no driver
 * and no other subsystem; choosing among plans by cost and issuing them
 * are copyarray.c's. */
#include "layout.h"

#include <stdio.h>
#include <stdlib.h>

static ptrdiff_t
absd(ptrdiff_t v)
{
    return v < 0 ? -v : v;
}

size_t
cm__layout_count(const cm__layout *L)
{
    size_t n = 1;

    for (int i = 0; i < L->nd; i++) {
        n *= (size_t)L->d[i].n;
    }
    return n;
}

/* ---------------------------------------------------------------------------
 * Building a layout. */

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
                         side->ndim == 1      ? ",)"
                         : i + 1 < side->ndim ? ","
                                              : ")");

        used += w > 0 ? (size_t)w : 0;
    }
    return side->ndim == 0 ? "()" : buf;
}

static int
check_no_overlap(const cm_side *dst, const cm__layout *L, size_t n,
                 size_t itemsize, cm_error *err)
{
    char text[256];
    ptrdiff_t step[CM_LAYOUT_MAXDIM], len[CM_LAYOUT_MAXDIM];
    ptrdiff_t span = (ptrdiff_t)itemsize;
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
        return cm__fail_fmt(err, CM_ERR_VALUE,
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
        return cm__fail_fmt(err, CM_ERR_VALUE,
                            "destination elements overlap: strides %s map "
                            "several elements to the same bytes",
                            strides_text(dst, text, sizeof(text)));
    }
    return 0;
}

int
cm__layout_build(const cm_side *dst, const cm_side *src, size_t itemsize,
                 cm__layout *L, size_t *n, cm_error *err)
{
    if (itemsize == 0) {
        return cm_fail(err, CM_ERR_VALUE, "copy of a zero itemsize");
    }
    if (dst->ndim < 0 || dst->ndim > CM_LAYOUT_MAXDIM) {
        return cm__fail_fmt(err, CM_ERR_VALUE,
                            "%d dimensions: at most %d are supported",
                            dst->ndim, CM_LAYOUT_MAXDIM);
    }
    if (src != NULL && src->ndim != dst->ndim) {
        return cm__fail_fmt(err, CM_ERR_VALUE,
                            "copy between %d and %d dimensions", src->ndim,
                            dst->ndim);
    }
    *n = 1;
    for (int i = 0; i < dst->ndim; i++) {
        if (dst->shape[i] < 0) {
            return cm__fail_fmt(err, CM_ERR_VALUE,
                                "negative length %td in dimension %d",
                                dst->shape[i], i);
        }
        if (src != NULL && src->shape[i] != dst->shape[i]) {
            return cm__fail_fmt(err, CM_ERR_VALUE,
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
            return cm__fail_fmt(err, CM_ERR_VALUE,
                                "destination stride 0 in dimension %d of "
                                "length %td",
                                i, len);
        }
        L->d[L->nd++] = (cm__dim){len, dst->strides[i],
                                  src != NULL ? src->strides[i]
                                              : dst->strides[i]};
    }
    return check_no_overlap(dst, L, *n, itemsize, err);
}

void
cm__layout_normalize(cm__layout *L)
{
    int out = 0;

    for (int i = 0; i < L->nd; i++) {
        cm__dim *d = &L->d[i];

        if (d->ds < 0 && d->ss <= 0) {
            L->dst += (uintptr_t)((d->n - 1) * d->ds);
            L->src += (uintptr_t)((d->n - 1) * d->ss);
            d->ds = -d->ds;
            d->ss = -d->ss;
        }
    }
    /* Insertion sort: a handful of dims, kept in order on ties. */
    for (int i = 1; i < L->nd; i++) {
        cm__dim t = L->d[i];
        int k = i;

        while (k > 0 && absd(L->d[k - 1].ds) > absd(t.ds)) {
            L->d[k] = L->d[k - 1];
            k--;
        }
        L->d[k] = t;
    }
    for (int i = 1; i < L->nd; i++) {
        cm__dim *prev = &L->d[out];

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

int
cm__layout_contiguous(const cm__layout *L, size_t itemsize)
{
    ptrdiff_t size = (ptrdiff_t)itemsize;

    return L->nd == 0 ||
           (L->nd == 1 && L->d[0].ds == size && L->d[0].ss == size);
}

int
cm__layout_repeats(const cm__layout *L)
{
    for (int i = 0; i < L->nd; i++) {
        if (L->d[i].ss == 0) {
            return 1;
        }
    }
    return 0;
}

void
cm__layout_extent(const cm__layout *L, int side, size_t itemsize,
                  ptrdiff_t *lo, ptrdiff_t *hi)
{
    *lo = 0;
    *hi = (ptrdiff_t)itemsize;
    for (int i = 0; i < L->nd; i++) {
        ptrdiff_t span = (L->d[i].n - 1) * (side ? L->d[i].ss : L->d[i].ds);

        *(span < 0 ? lo : hi) += span;
    }
}

/* Whether the bytes L's sides span intersect, with its destination at
 * `dst` and source at `src` in one address space. */
static int
overlaps(const cm__layout *L, uintptr_t dst, uintptr_t src, size_t itemsize)
{
    ptrdiff_t dlo, dhi, slo, shi;

    cm__layout_extent(L, 0, itemsize, &dlo, &dhi);
    cm__layout_extent(L, 1, itemsize, &slo, &shi);
    return dst + (uintptr_t)dlo < src + (uintptr_t)shi &&
           src + (uintptr_t)slo < dst + (uintptr_t)dhi;
}

int
cm__layout_shares_bytes(const cm__layout *L, const cm_side *dst,
                        const cm_side *src, size_t itemsize)
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

void
cm__layout_unique(const cm__layout *L, cm__layout *U)
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
    cm__layout_normalize(U);
}

size_t
cm__layout_packed(const cm__layout *L, int key, size_t itemsize, ptrdiff_t *ts,
                  ptrdiff_t *origin)
{
    int order[CM_LAYOUT_MAXDIM];
    ptrdiff_t s = (ptrdiff_t)itemsize;

    for (int i = 0; i < L->nd; i++) {
        ptrdiff_t k = absd(key ? L->d[i].ss : L->d[i].ds);
        int j = i;

        while (j > 0 &&
               absd(key ? L->d[order[j - 1]].ss : L->d[order[j - 1]].ds) > k) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    *origin = 0;
    for (int i = 0; i < L->nd; i++) {
        const cm__dim *d = &L->d[order[i]];
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

void
cm__layout_with_temp(const cm__layout *L, int side, int on_device,
                     uintptr_t base, const ptrdiff_t *ts, cm__layout *out)
{
    out->nd = 0;
    out->ddev = side == 0 ? on_device : L->ddev;
    out->sdev = side == 1 ? on_device : L->sdev;
    out->dst = side == 0 ? base : L->dst;
    out->src = side == 1 ? base : L->src;
    for (int i = 0; i < L->nd; i++) {
        cm__dim d = L->d[i];

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
    cm__layout_normalize(out);
}

void
cm__walk_init(cm__walk *w, const cm__layout *L, int a, int b, int c)
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

int
cm__walk_next(cm__walk *w)
{
    for (int k = 0; k < w->n; k++) {
        const cm__dim *d = w->d[k];

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
 * Plans. */

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

void
cm__layout_plan_copy(const cm__layout *L, size_t itemsize, long long max_pitch,
                     cm__plan *p)
{
    ptrdiff_t best = 1;

    p->w = p->h = p->z = -1;
    if (L->nd > 0 && L->d[0].ds == (ptrdiff_t)itemsize &&
        L->d[0].ss == (ptrdiff_t)itemsize) {
        p->w = 0;
    }
    p->width = p->w == 0 ? (size_t)L->d[0].n * itemsize : itemsize;
    p->rows = cm__layout_count(L) / (p->w == 0 ? (size_t)L->d[0].n : 1);
    for (int h = 0; h < L->nd; h++) {
        const cm__dim *dh = &L->d[h];

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
            const cm__dim *dz = &L->d[z];

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

void
cm__layout_double_step(const cm__layout *L, const unsigned char *full, int k,
                       ptrdiff_t c, ptrdiff_t m, cm__layout *S)
{
    S->nd = 0;
    S->ddev = S->sdev = 1;
    S->dst = L->dst + (uintptr_t)(c * L->d[k].ds);
    S->src = L->dst;
    for (int i = 0; i < L->nd; i++) {
        if (full[i]) {
            S->d[S->nd++] = (cm__dim){L->d[i].n, L->d[i].ds, L->d[i].ds};
        }
    }
    if (m > 1) {
        S->d[S->nd++] = (cm__dim){m, L->d[k].ds, L->d[k].ds};
    }
    cm__layout_normalize(S);
}

unsigned
cm__layout_set_unit(const cm__layout *L, size_t itemsize,
                    const unsigned char *pattern)
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

void
cm__layout_plan_set(const cm__layout *L, size_t itemsize, long long max_pitch,
                    unsigned u, int whole, cm__setplan *p)
{
    ptrdiff_t best = 1;
    size_t total = cm__layout_count(L), bytes;

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
