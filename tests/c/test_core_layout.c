/* test_core_layout.c: core/layout.c alone (with errors.c), against brute
 * force: every element of small shapes and strides enumerated, and what
 * the layout functions claim (the checks, the collapsed dims, extents,
 * overlaps, contiguity, packed temporaries, the odometer, the 2-D / 3-D
 * copy plans and the memset plans) compared with the elements' byte
 * offsets. Named cases first (0-d, zero-size and length-1 dims, negative
 * and zero strides), then thousands of random layouts. Addresses are
 * numbers here: nothing is read or written. */
#include "check.h"
#include "layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ND 4
#define MAXN 4096 /* elements of the largest layout drawn */

/* A copy as the caller gives it: one shape, strides of each side. */
typedef struct ref {
    int nd;
    ptrdiff_t shape[ND], ds[ND], ss[ND];
    size_t itemsize;
    uintptr_t dst, src;
} ref;

/* One element of a copy: its destination and source addresses. */
typedef struct pair {
    uintptr_t d, s;
} pair;

static int
cmp_pair(const void *a, const void *b)
{
    const pair *x = a, *y = b;

    if (x->d != y->d) {
        return x->d < y->d ? -1 : 1;
    }
    return (x->s > y->s) - (x->s < y->s);
}

static size_t
ref_count(const ref *r)
{
    size_t n = 1;

    for (int i = 0; i < r->nd; i++) {
        n *= (size_t)r->shape[i];
    }
    return n;
}

/* Every element of r in C order; with `skip` set, only those at index 0
 * along the dims whose source stride is 0. Returns the count. */
static size_t
ref_pairs(const ref *r, int skip, pair *out)
{
    size_t n = ref_count(r), k = 0;

    for (size_t e = 0; e < n; e++) {
        size_t rest = e;
        ptrdiff_t d = 0, s = 0;
        int keep = 1;

        /* Counted down from nd, not from nd - 1: the analyzer does not
         * know nd >= 0 and would wrap INT_MIN - 1. */
        for (int i = r->nd; i-- > 0;) {
            ptrdiff_t idx = (ptrdiff_t)(rest % (size_t)r->shape[i]);

            rest /= (size_t)r->shape[i];
            d += idx * r->ds[i];
            s += idx * r->ss[i];
            keep &= !(skip && r->ss[i] == 0 && idx != 0);
        }
        if (keep) {
            out[k++] = (pair){r->dst + (uintptr_t)d, r->src + (uintptr_t)s};
        }
    }
    return k;
}

/* Every element of a cm__layout, by its own odometer (not cm__walk). */
static size_t
layout_pairs(const cm__layout *L, pair *out)
{
    ptrdiff_t idx[CM_LAYOUT_MAXDIM] = {0};
    size_t k = 0;

    for (;;) {
        ptrdiff_t d = 0, s = 0;
        int i;

        for (i = 0; i < L->nd; i++) {
            d += idx[i] * L->d[i].ds;
            s += idx[i] * L->d[i].ss;
        }
        out[k++] = (pair){L->dst + (uintptr_t)d, L->src + (uintptr_t)s};
        for (i = 0; i < L->nd && ++idx[i] == L->d[i].n; i++) {
            idx[i] = 0;
        }
        if (i == L->nd) {
            return k;
        }
    }
}

static int
same_pairs(pair *a, size_t na, pair *b, size_t nb)
{
    qsort(a, na, sizeof(*a), cmp_pair);
    qsort(b, nb, sizeof(*b), cmp_pair);
    return na == nb && memcmp(a, b, na * sizeof(*a)) == 0;
}

/* Whether two destination elements of r share a byte. */
static int
ref_dst_overlaps(const ref *r, pair *scratch)
{
    size_t n = ref_pairs(r, 0, scratch);

    qsort(scratch, n, sizeof(*scratch), cmp_pair);
    for (size_t k = 1; k < n; k++) {
        if (scratch[k].d - scratch[k - 1].d < r->itemsize) {
            return 1;
        }
    }
    return 0;
}

/* The bytes one side of r spans: [lo, hi) from its element 0. */
static void
ref_extent(const ref *r, int side, ptrdiff_t *lo, ptrdiff_t *hi)
{
    *lo = 0;
    *hi = 0;
    for (int i = 0; i < r->nd; i++) {
        ptrdiff_t span = (r->shape[i] - 1) * (side ? r->ss[i] : r->ds[i]);

        if (r->shape[i] == 0) {
            continue;
        }
        *lo += span < 0 ? span : 0;
        *hi += span > 0 ? span : 0;
    }
    *hi += (ptrdiff_t)r->itemsize;
}

/* cm_sides of r. */
static void
sides(const ref *r, cm_side *dst, cm_side *src)
{
    *dst = (cm_side){.on_device = 1,
                     .ptr = (CUdeviceptr)r->dst,
                     .ndim = r->nd,
                     .shape = r->shape,
                     .strides = r->ds};
    *src = (cm_side){.on_device = 1,
                     .ptr = (CUdeviceptr)r->src,
                     .ndim = r->nd,
                     .shape = r->shape,
                     .strides = r->ss};
}

static int
build(const ref *r, cm__layout *L, size_t *n, cm_error *err)
{
    cm_side dst, src;

    sides(r, &dst, &src);
    return cm__layout_build(&dst, &src, r->itemsize, L, n, err);
}

static pair want[MAXN], got[MAXN];

/* ---------------------------------------------------------------------------
 * Named cases. */

static void
test_zero_d(void)
{
    ref r = {.nd = 0, .itemsize = 8, .dst = 0x10000, .src = 0x20000};
    ptrdiff_t lo, hi;
    cm__layout L;
    cm_error err;
    size_t n = 99;

    CHECK_EQ(build(&r, &L, &n, &err), 0);
    CHECK_UINT_EQ(n, 1);
    CHECK_INT_EQ(L.nd, 0);
    CHECK_UINT_EQ(L.dst, 0x10000);
    CHECK_UINT_EQ(L.src, 0x20000);
    cm__layout_normalize(&L);
    CHECK_INT_EQ(L.nd, 0);
    CHECK_UINT_EQ(cm__layout_count(&L), 1);
    CHECK_TRUE(cm__layout_contiguous(&L, 8));
    CHECK_TRUE(!cm__layout_repeats(&L));
    cm__layout_extent(&L, 0, 8, &lo, &hi);
    CHECK_INT_EQ(lo, 0);
    CHECK_INT_EQ(hi, 8);
}

/* A zero-size dim: no element, no dims, and no stride is checked. */
static void
test_zero_size(void)
{
    ref r = {2, {3, 0}, {0, 0}, {4, 0}, 4, 0x10000, 0x20000};
    cm__layout L;
    cm_error err;
    size_t n = 99;

    CHECK_EQ(build(&r, &L, &n, &err), 0);
    CHECK_UINT_EQ(n, 0);
    CHECK_INT_EQ(L.nd, 0);
}

/* Length-1 dims are dropped whatever their strides, a destination zero
 * stride included. */
static void
test_length_one(void)
{
    ref r = {3, {1, 5, 1}, {0, 8, -77}, {3, 4, 0}, 4, 0x10000, 0x20000};
    cm__layout L;
    cm_error err;
    size_t n;

    CHECK_EQ(build(&r, &L, &n, &err), 0);
    CHECK_UINT_EQ(n, 5);
    CHECK_INT_EQ(L.nd, 1);
    CHECK_INT_EQ(L.d[0].n, 5);
    CHECK_INT_EQ(L.d[0].ds, 8);
    CHECK_INT_EQ(L.d[0].ss, 4);
}

/* C and F orders collapse to one run; a transpose does not. */
static void
test_collapse(void)
{
    ref c = {3, {2, 3, 4}, {48, 16, 4}, {48, 16, 4}, 4, 0x10000, 0x20000};
    ref f = {3, {2, 3, 4}, {8, 16, 48}, {8, 16, 48}, 8, 0x10000, 0x20000};
    ref t = {2, {3, 2}, {8, 24}, {16, 8}, 8, 0x10000, 0x20000};
    cm__layout L;
    cm_error err;
    size_t n;

    CHECK_EQ(build(&c, &L, &n, &err), 0);
    cm__layout_normalize(&L);
    CHECK_INT_EQ(L.nd, 1);
    CHECK_INT_EQ(L.d[0].n, 24);
    CHECK_TRUE(cm__layout_contiguous(&L, 4));
    CHECK_EQ(build(&f, &L, &n, &err), 0);
    cm__layout_normalize(&L);
    CHECK_INT_EQ(L.nd, 1);
    CHECK_TRUE(cm__layout_contiguous(&L, 8));
    CHECK_EQ(build(&t, &L, &n, &err), 0);
    cm__layout_normalize(&L);
    CHECK_INT_EQ(L.nd, 2);
    CHECK_TRUE(!cm__layout_contiguous(&L, 8));
    /* Sorted by destination stride, innermost first. */
    CHECK_INT_EQ(L.d[0].ds, 8);
    CHECK_INT_EQ(L.d[0].ss, 16);
    CHECK_INT_EQ(L.d[1].ds, 24);
    CHECK_INT_EQ(L.d[1].ss, 8);
}

/* Both sides backwards: flipped to forwards from the last element, one
 * run. The destination alone backwards: left as it is. */
static void
test_negative(void)
{
    ref both = {1, {10}, {-4}, {-4}, 4, 0x10000, 0x20000};
    ref one = {1, {10}, {-4}, {4}, 4, 0x10000, 0x20000};
    ref rep = {2, {3, 10}, {40, -4}, {0, -4}, 4, 0x10000, 0x20000};
    ptrdiff_t lo, hi;
    cm__layout L;
    cm_error err;
    size_t n;

    CHECK_EQ(build(&both, &L, &n, &err), 0);
    cm__layout_extent(&L, 0, 4, &lo, &hi);
    CHECK_INT_EQ(lo, -36);
    CHECK_INT_EQ(hi, 4);
    cm__layout_normalize(&L);
    CHECK_UINT_EQ(L.dst, 0x10000 - 36);
    CHECK_UINT_EQ(L.src, 0x20000 - 36);
    CHECK_TRUE(cm__layout_contiguous(&L, 4));
    CHECK_EQ(build(&one, &L, &n, &err), 0);
    cm__layout_normalize(&L);
    CHECK_UINT_EQ(L.dst, 0x10000);
    CHECK_INT_EQ(L.d[0].ds, -4);
    CHECK_TRUE(!cm__layout_contiguous(&L, 4));
    /* A repeating source flips with its destination: one run. */
    rep.nd = 1;
    rep.shape[0] = 10;
    rep.ds[0] = -4;
    rep.ss[0] = 0;
    CHECK_EQ(build(&rep, &L, &n, &err), 0);
    cm__layout_normalize(&L);
    CHECK_UINT_EQ(L.dst, 0x10000 - 36);
    CHECK_UINT_EQ(L.src, 0x20000);
    CHECK_INT_EQ(L.d[0].ds, 4);
    CHECK_INT_EQ(L.d[0].ss, 0);
    rep = (ref){2, {3, 10}, {40, -4}, {0, -4}, 4, 0x10000, 0x20000};
    CHECK_EQ(build(&rep, &L, &n, &err), 0);
    cm__layout_normalize(&L);
    CHECK_TRUE(cm__layout_repeats(&L));
    CHECK_UINT_EQ(L.dst, 0x10000 - 36);
    CHECK_INT_EQ(L.d[0].ds, 4);
    CHECK_INT_EQ(L.d[0].ss, 4);
    CHECK_INT_EQ(L.d[1].ss, 0);
}

/* What build refuses, with its words. */
static void
test_build_refuses(void)
{
    ptrdiff_t shape[65], strides[65];
    cm_side d, s;
    cm__layout L;
    cm_error err;
    size_t n;
    ref r;

    r = (ref){1, {3}, {4}, {4}, 0, 0x10000, 0x20000};
    CHECK_EQ(build(&r, &L, &n, &err), -1);
    CHECK_STR_EQ(cm_error_msg(&err), "copy of a zero itemsize");
    r = (ref){2, {3, -1}, {4, 4}, {4, 4}, 4, 0x10000, 0x20000};
    CHECK_EQ(build(&r, &L, &n, &err), -1);
    CHECK_STR_EQ(cm_error_msg(&err), "negative length -1 in dimension 1");
    r = (ref){2, {2, 3}, {12, 0}, {12, 4}, 4, 0x10000, 0x20000};
    CHECK_EQ(build(&r, &L, &n, &err), -1);
    CHECK_STR_EQ(cm_error_msg(&err),
                 "destination stride 0 in dimension 1 of length 3");
    r = (ref){2, {3, 3}, {4, 8}, {24, 8}, 8, 0x10000, 0x20000};
    CHECK_EQ(build(&r, &L, &n, &err), -1);
    CHECK_INT_EQ(err.kind, CM_ERR_VALUE);
    CHECK_STR_EQ(cm_error_msg(&err),
                 "destination elements overlap: strides (4, 8) map several "
                 "elements to the same bytes");
    /* Elements 4 bytes apart, 8 wide: a partial overlap. */
    r = (ref){2, {2, 2}, {4, 16}, {16, 32}, 8, 0x10000, 0x20000};
    CHECK_EQ(build(&r, &L, &n, &err), -1);
    CHECK_STR_EQ(cm_error_msg(&err),
                 "destination elements overlap: strides (4, 16) map several "
                 "elements to the same bytes");
    /* Interleaved without sharing a byte: accepted. */
    r = (ref){2, {3, 2}, {8, 12}, {8, 24}, 4, 0x10000, 0x20000};
    CHECK_EQ(build(&r, &L, &n, &err), 0);

    sides(&r, &d, &s);
    s.ndim = 1;
    CHECK_EQ(cm__layout_build(&d, &s, 4, &L, &n, &err), -1);
    CHECK_STR_EQ(cm_error_msg(&err), "copy between 1 and 2 dimensions");
    s.ndim = 2;
    s.shape = (const ptrdiff_t[]){3, 3};
    CHECK_EQ(cm__layout_build(&d, &s, 4, &L, &n, &err), -1);
    CHECK_STR_EQ(cm_error_msg(&err), "shapes differ in dimension 1: 2 and 3");
    for (int i = 0; i < 65; i++) {
        shape[i] = 1;
        strides[i] = 4;
    }
    d.ndim = 65;
    d.shape = shape;
    d.strides = strides;
    CHECK_EQ(cm__layout_build(&d, NULL, 4, &L, &n, &err), -1);
    CHECK_STR_EQ(cm_error_msg(&err),
                 "65 dimensions: at most 64 are supported");
    d.ndim = 64;
    CHECK_EQ(cm__layout_build(&d, NULL, 4, &L, &n, &err), 0);
    CHECK_UINT_EQ(n, 1);
}

/* Rows of a pitched 2-D array: one 2-D call; slices of them: one 3-D
 * call; a small maximum pitch: a call per row. */
static void
test_plans(void)
{
    ref rows = {2, {16, 10}, {64, 4}, {40, 4}, 4, 0x10000, 0x20000};
    ref slices = {3, {5, 16, 10}, {64 * 20, 64, 4}, {40 * 16, 40, 4},
                  4, 0x10000,     0x20000};
    cm__layout L;
    cm__plan p;
    cm_error err;
    size_t n;

    CHECK_EQ(build(&rows, &L, &n, &err), 0);
    cm__layout_normalize(&L);
    cm__layout_plan_copy(&L, 4, 1 << 20, &p);
    CHECK_INT_EQ(p.w, 0);
    CHECK_UINT_EQ(p.width, 40);
    CHECK_INT_EQ(p.h, 1);
    CHECK_INT_EQ(p.z, -1);
    CHECK_UINT_EQ(p.rows, 16);
    CHECK_UINT_EQ(p.calls, 1);
    cm__layout_plan_copy(&L, 4, 48, &p);
    CHECK_INT_EQ(p.h, -1);
    CHECK_UINT_EQ(p.calls, 16);
    CHECK_EQ(build(&slices, &L, &n, &err), 0);
    cm__layout_normalize(&L);
    cm__layout_plan_copy(&L, 4, 1 << 20, &p);
    CHECK_INT_EQ(p.h, 1);
    CHECK_INT_EQ(p.z, 2);
    CHECK_UINT_EQ(p.rows, 80);
    CHECK_UINT_EQ(p.calls, 1);
}

/* The units of memsets: the widest that the address, the strides, the
 * itemsize and the pattern all allow. */
static void
test_set_unit(void)
{
    cm__layout L = {1, 1, 1, 0x10000, 0x10000, {{8, 8, 8}}};

    CHECK_EQ(cm__layout_set_unit(&L, 8, NULL), 4);
    CHECK_EQ(cm__layout_set_unit(&L, 8, (const unsigned char *)"abcdabcd"), 4);
    CHECK_EQ(cm__layout_set_unit(&L, 8, (const unsigned char *)"ababcdcd"), 0);
    CHECK_EQ(cm__layout_set_unit(&L, 8, (const unsigned char *)"aaaaaaaa"), 4);
    L.dst = 0x10002;
    CHECK_EQ(cm__layout_set_unit(&L, 8, NULL), 2);
    L.dst = 0x10000;
    L.d[0].ds = 6;
    CHECK_EQ(cm__layout_set_unit(&L, 6, NULL), 2);
    CHECK_EQ(cm__layout_set_unit(&L, 6, (const unsigned char *)"ababab"), 2);
    CHECK_EQ(cm__layout_set_unit(&L, 6, (const unsigned char *)"abcabc"), 0);
    CHECK_EQ(cm__layout_set_unit(&L, 3, NULL), 1);
}

/* ---------------------------------------------------------------------------
 * Random layouts against brute force. */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static unsigned
draw(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* Shapes of 0 to 4 dims of length 0 to 4; strides from a packed order
 * (C, F or shuffled), stretched, reversed, zeroed or overlapping. */
static void
draw_ref(ref *r)
{
    static const size_t sizes[] = {1, 2, 3, 4, 8};
    int order[ND];

    r->nd = (int)draw(5);
    r->itemsize = sizes[draw(5)];
    r->dst = 0x100000 + draw(4) * 2;
    r->src = draw(4) == 0 ? r->dst + (draw(64) - 32) * r->itemsize
                          : 0x200000 + draw(4);
    for (int side = 0; side < 2; side++) {
        ptrdiff_t *st = side ? r->ss : r->ds;
        ptrdiff_t step = (ptrdiff_t)r->itemsize * (1 + (draw(3) == 0));

        for (int i = 0; i < r->nd; i++) {
            order[i] = i;
            if (side == 0) {
                r->shape[i] = draw(6) == 0 ? (ptrdiff_t)draw(2) : 1 + draw(4);
            }
        }
        for (int i = r->nd - 1; i > 0; i--) {
            int j = (int)draw((unsigned)i + 1), t = order[i];

            order[i] = order[j];
            order[j] = t;
        }
        for (int i = 0; i < r->nd; i++) {
            int k = order[i];
            ptrdiff_t len = r->shape[k] > 0 ? r->shape[k] : 1;

            st[k] = step * (draw(5) == 0 ? -1 : 1);
            switch (draw(8)) {
            case 0:
                st[k] = 0; /* a repeat (refused on the destination) */
                break;
            case 1:
                st[k] = (ptrdiff_t)r->itemsize * (ptrdiff_t)draw(3);
                break; /* likely overlapping */
            case 2:
                st[k] = 1 + (ptrdiff_t)draw(2 * (unsigned)r->itemsize);
                break; /* maybe overlapping partly */
            default:
                break;
            }
            step *= len + (draw(4) == 0);
        }
    }
}

/* build accepts exactly the layouts whose destination elements share no
 * byte; the dims it keeps hold the same elements. */
static void
check_build(const ref *r, cm__layout *L, int *ok)
{
    size_t n = 99, nw;
    cm_error err;
    int rc = build(r, L, &n, &err);
    int overlap = ref_count(r) > 0 && ref_dst_overlaps(r, want);

    *ok = rc == 0;
    CHECK_INT_EQ(rc, overlap ? -1 : 0);
    if (rc < 0) {
        CHECK_INT_EQ(err.kind, CM_ERR_VALUE);
        return;
    }
    CHECK_UINT_EQ(n, ref_count(r));
    if (n == 0) {
        CHECK_INT_EQ(L->nd, 0);
        *ok = 0;
        return;
    }
    CHECK_UINT_EQ(cm__layout_count(L), n);
    nw = ref_pairs(r, 0, want);
    CHECK_TRUE(same_pairs(want, nw, got, layout_pairs(L, got)));
}

static void
check_extent(const ref *r, const cm__layout *L)
{
    for (int side = 0; side < 2; side++) {
        ptrdiff_t lo, hi, wlo, whi;

        uintptr_t at = side ? L->src : L->dst;
        uintptr_t want_at = side ? r->src : r->dst;

        /* The same bytes, from L's element 0 (normalizing moves it). */
        cm__layout_extent(L, side, r->itemsize, &lo, &hi);
        ref_extent(r, side, &wlo, &whi);
        CHECK_UINT_EQ(at + (uintptr_t)lo, want_at + (uintptr_t)wlo);
        CHECK_UINT_EQ(at + (uintptr_t)hi, want_at + (uintptr_t)whi);
    }
}

/* Normalizing keeps the elements, sorts the destination strides and
 * leaves no two neighbours that one dim could hold; contiguity is one
 * run of n elements in the same order on both sides. */
static void
check_normalize(const ref *r, cm__layout *L)
{
    size_t n = ref_count(r), nw = ref_pairs(r, 0, want);
    int run = 1;

    cm__layout_normalize(L);
    CHECK_TRUE(same_pairs(want, nw, got, layout_pairs(L, got)));
    for (int i = 1; i < L->nd; i++) {
        CHECK_TRUE(labs(L->d[i - 1].ds) <= labs(L->d[i].ds));
        CHECK_TRUE(L->d[i].ds != L->d[i - 1].n * L->d[i - 1].ds ||
                   L->d[i].ss != L->d[i - 1].n * L->d[i - 1].ss);
    }
    for (size_t k = 0; k < nw; k++) {
        uintptr_t off = want[k].d - L->dst;

        run &= want[k].s - L->src == off && off % r->itemsize == 0 &&
               off / r->itemsize < n;
    }
    CHECK_INT_EQ(cm__layout_contiguous(L, r->itemsize), run);
    check_extent(r, L);
}

/* Whether the sides share bytes, by brute force over their extents
 * (both sides' bytes, not only their elements): two device ranges, or a
 * host range and a device range the host sees at `host` (if anywhere). */
static void
check_shares(const ref *r, const cm__layout *L)
{
    ptrdiff_t dlo, dhi, slo, shi;
    intptr_t dat = (intptr_t)r->dst, sat = (intptr_t)r->src;
    int mode = (int)draw(3);
    cm__layout H;
    cm_side d, s;
    size_t n;
    cm_error err;

    ref_extent(r, 0, &dlo, &dhi);
    ref_extent(r, 1, &slo, &shi);
    sides(r, &d, &s);
    if (mode == 0) {
        CHECK_INT_EQ(cm__layout_shares_bytes(L, &d, &s, r->itemsize),
                     dat + dlo < sat + shi && sat + slo < dat + dhi);
        return;
    }
    /* One side on the host; the device side mapped near it, or not. */
    cm_side *host = mode == 1 ? &d : &s, *dev = mode == 1 ? &s : &d;
    intptr_t *hat = mode == 1 ? &dat : &sat, *vat = mode == 1 ? &sat : &dat;
    int mapped = draw(4) != 0;

    host->on_device = 0;
    host->host = (void *)(uintptr_t)*hat;
    host->ptr = 0;
    if (mapped) {
        *vat = *hat + ((intptr_t)draw(64) - 32) * (intptr_t)r->itemsize;
        dev->host = (void *)(uintptr_t)*vat;
    }
    CHECK_EQ(cm__layout_build(&d, &s, r->itemsize, &H, &n, &err), 0);
    cm__layout_normalize(&H);
    CHECK_INT_EQ(cm__layout_shares_bytes(&H, &d, &s, r->itemsize),
                 mapped && dat + dlo < sat + shi && sat + slo < dat + dhi);
}

/* Whether element k of L (in layout_pairs' order) has an index other
 * than 0 along a dim its source repeats. */
static int
repeated(const cm__layout *L, size_t k)
{
    for (int i = 0; i < L->nd; i++) {
        if (L->d[i].ss == 0 && k % (size_t)L->d[i].n != 0) {
            return 1;
        }
        k /= (size_t)L->d[i].n;
    }
    return 0;
}

/* L's elements with one side (0: destination, 1: source) moved to a
 * temporary at `base` with strides ts; a destination temporary only at
 * index 0 along the dims it holds once (ts 0). */
static size_t
temp_pairs(const cm__layout *L, int side, uintptr_t base, const ptrdiff_t *ts,
           pair *out)
{
    size_t n = layout_pairs(L, out), k = 0;
    ptrdiff_t idx[CM_LAYOUT_MAXDIM] = {0};

    for (size_t e = 0; e < n; e++) {
        ptrdiff_t d = 0, s = 0, t = 0;
        int keep = 1, i;

        for (i = 0; i < L->nd; i++) {
            d += idx[i] * L->d[i].ds;
            s += idx[i] * L->d[i].ss;
            t += idx[i] * ts[i];
            keep &= !(side == 0 && ts[i] == 0 && idx[i] != 0);
        }
        if (keep) {
            out[k++] = side
                           ? (pair){L->dst + (uintptr_t)d, base + (uintptr_t)t}
                           : (pair){base + (uintptr_t)t,
                                    L->src + (uintptr_t)s};
        }
        for (i = 0; i < L->nd && ++idx[i] == L->d[i].n; i++) {
            idx[i] = 0;
        }
    }
    return k;
}

/* The source's unrepeated part; the packed temporaries in either side's
 * order, and the layouts through them. */
static void
check_temps(const ref *r, const cm__layout *L)
{
    ptrdiff_t ts[CM_LAYOUT_MAXDIM], origin;
    size_t nu = ref_pairs(r, 1, want), ng, nw, bad;
    int repeats = 0;
    cm__layout U, T;

    for (int i = 0; i < r->nd; i++) {
        repeats |= r->ss[i] == 0 && r->shape[i] > 1;
    }
    CHECK_INT_EQ(cm__layout_repeats(L), repeats);
    /* From normalized L: its element 0 along the repeated dims, which
     * flipping may have moved to the original's last. */
    cm__layout_unique(L, &U);
    nw = layout_pairs(L, want);
    ng = 0;
    for (size_t k = 0; k < nw; k++) {
        if (!repeated(L, k)) {
            want[ng++] = want[k];
        }
    }
    nw = ng;
    CHECK_UINT_EQ(nw, nu);
    CHECK_TRUE(same_pairs(want, nw, got, layout_pairs(&U, got)));

    for (int key = 0; key < 2; key++) {
        size_t size = cm__layout_packed(L, key, r->itemsize, ts, &origin);
        /* In source order, what the source holds once; in destination
         * order, every element. */
        size_t slots = key ? nu : cm__layout_count(L);

        /* Each such element in a slot of its own, aligned, in range. */
        CHECK_UINT_EQ(size, slots * r->itemsize);
        nw = temp_pairs(L, 0, (uintptr_t)origin, ts, want);
        CHECK_UINT_EQ(nw, slots);
        qsort(want, nw, sizeof(*want), cmp_pair);
        bad = 0;
        for (size_t k = 0; k < nw; k++) {
            bad += want[k].d != k * r->itemsize;
        }
        CHECK_UINT_EQ(bad, 0);
        /* In the key side's order: strides of its signs, nested as its
         * magnitudes are; none where it repeats. */
        bad = 0;
        for (int i = 0; i < L->nd; i++) {
            ptrdiff_t ki = key ? L->d[i].ss : L->d[i].ds;

            bad += (ts[i] == 0) != (ki == 0);
            bad += ts[i] != 0 && (ts[i] < 0) != (ki < 0);
            for (int j = 0; j < L->nd; j++) {
                ptrdiff_t kj = key ? L->d[j].ss : L->d[j].ds;

                bad += ts[i] != 0 && ts[j] != 0 && labs(ki) < labs(kj) &&
                       labs(ts[i]) >= labs(ts[j]);
            }
        }
        CHECK_UINT_EQ(bad, 0);
        /* Each side replaced by the temporary: the same elements. */
        cm__layout_with_temp(L, 1, 1, 0x900000 + (uintptr_t)origin, ts, &T);
        nw = temp_pairs(L, 1, 0x900000 + (uintptr_t)origin, ts, want);
        ng = layout_pairs(&T, got);
        CHECK_TRUE(same_pairs(want, nw, got, ng));
        CHECK_TRUE(T.sdev && T.ddev == L->ddev);
        cm__layout_with_temp(L, 0, 0, 0x900000 + (uintptr_t)origin, ts, &T);
        nw = temp_pairs(L, 0, 0x900000 + (uintptr_t)origin, ts, want);
        ng = layout_pairs(&T, got);
        CHECK_TRUE(same_pairs(want, nw, got, ng));
        CHECK_TRUE(!T.ddev && T.sdev == L->sdev);
    }
}

/* The calls of a copy plan, carried out on paper: the elements they move
 * are exactly L's, within the pitch limits. */
static void
check_plan(const ref *r, const cm__layout *L, long long max_pitch)
{
    size_t item = r->itemsize, ng = 0, calls = 0, rows = 0;
    ptrdiff_t idx[CM_LAYOUT_MAXDIM] = {0};
    cm__plan p;
    int i;

    cm__layout_plan_copy(L, item, max_pitch, &p);
    if (p.h >= 0) {
        CHECK_TRUE(L->d[p.h].ds >= (ptrdiff_t)p.width &&
                   L->d[p.h].ss >= (ptrdiff_t)p.width &&
                   L->d[p.h].ds <= max_pitch && L->d[p.h].ss <= max_pitch);
    }
    if (p.z >= 0) {
        CHECK_TRUE(p.h >= 0 && L->d[p.z].ds % L->d[p.h].ds == 0 &&
                   L->d[p.z].ss % L->d[p.h].ss == 0 &&
                   L->d[p.z].ds / L->d[p.h].ds >= L->d[p.h].n &&
                   L->d[p.z].ss / L->d[p.h].ss >= L->d[p.h].n);
    }
    CHECK_TRUE(p.width == item ||
               (p.w == 0 && p.width == (size_t)L->d[0].n * item));
    for (;;) {
        ptrdiff_t d = 0, s = 0;
        ptrdiff_t depth = p.z >= 0 ? L->d[p.z].n : 1;
        ptrdiff_t height = p.h >= 0 ? L->d[p.h].n : 1;

        for (i = 0; i < L->nd; i++) {
            d += idx[i] * L->d[i].ds;
            s += idx[i] * L->d[i].ss;
        }
        calls++;
        for (ptrdiff_t z = 0; z < depth; z++) {
            for (ptrdiff_t h = 0; h < height; h++) {
                ptrdiff_t rd = d, rs = s;

                if (p.z >= 0) {
                    rd += z * L->d[p.z].ds;
                    rs += z * L->d[p.z].ss;
                }
                if (p.h >= 0) {
                    rd += h * L->d[p.h].ds;
                    rs += h * L->d[p.h].ss;
                }
                rows++;
                for (size_t b = 0; b < p.width; b += item) {
                    got[ng++] = (pair){L->dst + (uintptr_t)rd + b,
                                       L->src + (uintptr_t)rs + b};
                }
            }
        }
        for (i = 0; i < L->nd; i++) {
            if (i == p.w || i == p.h || i == p.z) {
                continue;
            }
            if (++idx[i] < L->d[i].n) {
                break;
            }
            idx[i] = 0;
        }
        if (i == L->nd) {
            break;
        }
    }
    CHECK_UINT_EQ(p.calls, calls);
    CHECK_UINT_EQ(p.rows, rows);
    CHECK_TRUE(same_pairs(want, layout_pairs(L, want), got, ng));
}

/* The memsets of a fill plan on paper: every byte of every element
 * written once, pass k writing the k-th unit of each element. */
static void
check_set_plan(const ref *r, const cm__layout *L, long long max_pitch)
{
    size_t item = r->itemsize, n = cm__layout_count(L);
    static unsigned char hits[1 << 16];
    static short phase[1 << 16]; /* a byte's place in its element */
    ptrdiff_t lo, hi;
    cm__layout F = *L;
    unsigned u;

    /* A fill: the destination on both sides, normalized as cm_fill's. */
    for (int i = 0; i < F.nd; i++) {
        F.d[i].ss = F.d[i].ds;
    }
    F.src = F.dst;
    cm__layout_normalize(&F);
    u = cm__layout_set_unit(&F, item, NULL);
    CHECK_TRUE(u == 4 || u == 2 || u == 1 || u == 0);
    if (u == 0) {
        return;
    }
    cm__layout_extent(&F, 0, item, &lo, &hi);
    if (hi - lo > (ptrdiff_t)sizeof(hits)) {
        return;
    }
    for (int whole = 0; whole < 2; whole++) {
        ptrdiff_t idx[CM_LAYOUT_MAXDIM] = {0};
        size_t calls = 0, bad = 0, written = 0;
        cm__setplan p;
        int i;

        memset(hits, 0, sizeof(hits));
        memset(phase, 0xff, sizeof(phase));
        for (size_t k = 0, m = layout_pairs(&F, got); k < m; k++) {
            for (size_t b = 0; b < item; b++) {
                phase[got[k].d - F.dst - (uintptr_t)lo + b] = (short)b;
            }
        }
        cm__layout_plan_set(&F, item, max_pitch, u, whole, &p);
        CHECK_UINT_EQ(p.passes, whole ? 1 : item / u);
        if (p.h >= 0) {
            CHECK_TRUE(F.d[p.h].ds > 0 && F.d[p.h].ds <= max_pitch &&
                       (size_t)F.d[p.h].ds >= p.width * u);
        }
        for (size_t pass = 0; pass < p.passes; pass++) {
            for (;;) {
                ptrdiff_t first = -lo + (ptrdiff_t)(pass * u);
                ptrdiff_t height = p.h >= 0 ? F.d[p.h].n : 1;

                for (i = 0; i < F.nd; i++) {
                    first += idx[i] * F.d[i].ds;
                }
                calls++;
                for (ptrdiff_t h = 0; h < height; h++) {
                    ptrdiff_t row = first + (p.h >= 0 ? h * F.d[p.h].ds : 0);

                    for (size_t b = 0; b < p.width * u; b++) {
                        ptrdiff_t o = row + (ptrdiff_t)b;
                        short at = -1;

                        if (o >= 0 && o < hi - lo) {
                            at = phase[o];
                        }
                        if (at < 0) {
                            bad++;
                            continue;
                        }
                        /* Pass k writes bytes [k u, k u + u) of each. */
                        bad += !whole && (size_t)at / u != pass;
                        hits[o]++;
                        written++;
                    }
                }
                for (i = 0; i < F.nd; i++) {
                    if (i == p.w || i == p.h) {
                        continue;
                    }
                    if (++idx[i] < F.d[i].n) {
                        break;
                    }
                    idx[i] = 0;
                }
                if (i == F.nd) {
                    break;
                }
            }
        }
        CHECK_UINT_EQ(p.calls, calls);
        CHECK_UINT_EQ(written, n * item);
        CHECK_UINT_EQ(bad, 0);
        /* Each element's bytes exactly once. */
        for (size_t k = 0, m = layout_pairs(&F, got); k < m; k++) {
            for (size_t b = 0; b < item; b++) {
                bad += hits[got[k].d - F.dst - (uintptr_t)lo + b] != 1;
            }
        }
        CHECK_UINT_EQ(bad, 0);
    }
}

/* The odometer visits the other dims in order, inner first, and ends
 * back at offset 0. */
static void
check_walk(const cm__layout *L)
{
    int a = L->nd > 0 ? (int)draw((unsigned)L->nd + 1) - 1 : -1;
    ptrdiff_t idx[CM_LAYOUT_MAXDIM] = {0};
    size_t steps = 0, bad = 0;
    cm__walk w;
    int i;

    cm__walk_init(&w, L, a, -1, -1);
    for (;;) {
        ptrdiff_t d = 0, s = 0;

        for (i = 0; i < L->nd; i++) {
            d += idx[i] * L->d[i].ds;
            s += idx[i] * L->d[i].ss;
        }
        bad += w.doff != d || w.soff != s;
        steps++;
        for (i = 0; i < L->nd; i++) {
            if (i != a) {
                if (++idx[i] < L->d[i].n) {
                    break;
                }
                idx[i] = 0;
            }
        }
        if (!cm__walk_next(&w)) {
            break;
        }
    }
    CHECK_INT_EQ(i, L->nd);
    CHECK_UINT_EQ(bad, 0);
    CHECK_UINT_EQ(steps * (a >= 0 ? (size_t)L->d[a].n : 1),
                  cm__layout_count(L));
    CHECK_INT_EQ(w.doff, 0);
    CHECK_INT_EQ(w.soff, 0);
}

/* Doubling steps: m blocks of the written part copied c blocks on. */
static void
check_double(const cm__layout *L)
{
    unsigned char full[CM_LAYOUT_MAXDIM];
    cm__layout S, B;
    int k;
    ptrdiff_t n, c, m;
    size_t nw = 0, ng;

    if (L->nd == 0) {
        return;
    }
    k = (int)draw((unsigned)L->nd);
    n = L->d[k].n;
    c = 1 + (ptrdiff_t)draw((unsigned)n - 1);
    m = c < n - c ? c : n - c;
    for (int i = 0; i < L->nd; i++) {
        full[i] = i < k;
    }
    cm__layout_double_step(L, full, k, c, m, &S);
    CHECK_TRUE(S.ddev && S.sdev);
    /* By hand: the dims in full, and m along k. */
    B.nd = 0;
    B.dst = L->dst + (uintptr_t)(c * L->d[k].ds);
    B.src = L->dst;
    for (int i = 0; i < k; i++) {
        B.d[B.nd++] = (cm__dim){L->d[i].n, L->d[i].ds, L->d[i].ds};
    }
    B.d[B.nd++] = (cm__dim){m, L->d[k].ds, L->d[k].ds};
    nw = layout_pairs(&B, want);
    ng = layout_pairs(&S, got);
    CHECK_TRUE(same_pairs(want, nw, got, ng));
}

static void
test_random(void)
{
    const char *seed = getenv("CM_TEST_SEED");
    size_t built = 0;

    if (seed != NULL) {
        rng = strtoull(seed, NULL, 0) * 2 + 1;
    }
    for (int iter = 0; iter < 20000; iter++) {
        int fails = check_failed, ok;
        cm__layout L;
        ref r;

        draw_ref(&r);
        if (ref_count(&r) > MAXN / 2) {
            continue;
        }
        check_build(&r, &L, &ok);
        if (ok) {
            built++;
            check_extent(&r, &L);
            check_normalize(&r, &L);
            check_shares(&r, &L);
            check_temps(&r, &L);
            check_plan(&r, &L, draw(2) ? 1 << 20 : 16 * (1 + draw(4)));
            check_set_plan(&r, &L, draw(2) ? 1 << 20 : 16 * (1 + draw(4)));
            check_walk(&L);
            check_double(&L);
        }
        if (check_failed != fails) {
            fprintf(stderr, "layout %d: nd %d itemsize %zu shape", iter, r.nd,
                    r.itemsize);
            for (int i = 0; i < r.nd; i++) {
                fprintf(stderr, " %td(%td,%td)", r.shape[i], r.ds[i], r.ss[i]);
            }
            fprintf(stderr, "\n");
            return;
        }
    }
    /* The draws reach the interesting part. */
    CHECK_GT(built, 5000);
}

static const check_test tests[] = {
    {"zero_d", test_zero_d, 0},
    {"zero_size", test_zero_size, 0},
    {"length_one", test_length_one, 0},
    {"collapse", test_collapse, 0},
    {"negative", test_negative, 0},
    {"build_refuses", test_build_refuses, 0},
    {"plans", test_plans, 0},
    {"set_unit", test_set_unit, 0},
    {"random", test_random, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, NULL, NULL)
