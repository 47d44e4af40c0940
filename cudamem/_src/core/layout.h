/* layout.h: the layout algebra of strided copies and fills (copyarray.c's),
 * driver-free: a copy's dims checked and collapsed, extents, overlaps,
 * packed temporaries, the odometer over dims and the plans of 2-D / 3-D
 * copies and memsets. Issues no call and allocates only for the overlap
 * check; what a plan costs and how it runs are copyarray.c's. */
#ifndef CM_LAYOUT_H
#define CM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "copy.h"
#include "status.h"

#define CM_LAYOUT_MAXDIM 64

/* One dimension of a copy: its length (> 1) and byte strides. */
typedef struct cm__dim {
    ptrdiff_t n;
    ptrdiff_t ds, ss; /* destination, source; a fill has ss == ds */
} cm__dim;

/* A copy between two layouts of the same shape. Dims of length 1 are
 * never stored; once normalized, the smallest destination stride comes
 * first. */
typedef struct cm__layout {
    int nd;
    int ddev, sdev;     /* the side is device memory (1) or host memory */
    uintptr_t dst, src; /* element (0, ..., 0) of each side */
    cm__dim d[CM_LAYOUT_MAXDIM];
} cm__layout;

/* The calls of a copy: rows of `width` bytes (the elements of dim w, or
 * one element), Height from dim h and Depth from dim z (-1: none), one call
 * per index of the other dims. */
typedef struct cm__plan {
    int w, h, z;
    size_t width;
    size_t rows, calls;
} cm__plan;

/* The memsets of a fill: rows of `width` units of `u` bytes (the elements
 * of dim w, one element, or with `passes` > 1 one unit of an element per
 * pass), Height from dim h, one call per pass and index of the others. */
typedef struct cm__setplan {
    unsigned u;
    size_t passes;
    int w, h;
    size_t width;
    size_t rows, calls;
} cm__setplan;

/* An odometer over some dims of a layout, inner first, tracking the byte
 * offset of the current index on each side. */
typedef struct cm__walk {
    int n;
    const cm__dim *d[CM_LAYOUT_MAXDIM];
    ptrdiff_t idx[CM_LAYOUT_MAXDIM];
    ptrdiff_t doff, soff;
} cm__walk;

/* Checks the sides (numba's rules were py/'s; these keep core safe) and
 * builds the dims of length > 1; *n is the element count. A fill passes
 * src NULL. CM_ERR_VALUE for a zero itemsize, too many dims, unequal
 * shapes, a negative length, or destination elements that share bytes. */
int cm__layout_build(const cm_side *dst, const cm_side *src, size_t itemsize,
                     cm__layout *L, size_t *n, cm_error *err);

/* Flips the dims where the destination runs backwards and the source does
 * too (or repeats), sorts by destination stride, innermost first, and
 * merges neighbours that are contiguous with each other on both sides. */
void cm__layout_normalize(cm__layout *L);

/* The number of elements of L. */
size_t cm__layout_count(const cm__layout *L);

/* Whether normalized L is one packed run on both sides. */
int cm__layout_contiguous(const cm__layout *L, size_t itemsize);

/* Whether L's source repeats elements (a zero stride). */
int cm__layout_repeats(const cm__layout *L);

/* The bytes one side (0: destination, 1: source) of L spans, as offsets
 * from its element (0, ..., 0): [*lo, *hi), *lo <= 0 < *hi. */
void cm__layout_extent(const cm__layout *L, int side, size_t itemsize,
                       ptrdiff_t *lo, ptrdiff_t *hi);

/* Whether L's sides share bytes: two device ranges, or a host range and
 * a device range whose memory the host sees at the device side's `host`
 * (mapped, registered or managed memory; the driver does not check that
 * such a copy's sides are disjoint). dst and src are the sides L was
 * built from; normalizing moved both of a side's addresses alike. */
int cm__layout_shares_bytes(const cm__layout *L, const cm_side *dst,
                            const cm_side *src, size_t itemsize);

/* L without the dims its source repeats: what the source holds once. */
void cm__layout_unique(const cm__layout *L, cm__layout *U);

/* A packed temporary holding L's elements in the order of one side (`key`
 * 0: the destination, 1: the source): its stride for each dim, with that
 * side's sign, or 0 where that side's stride is (in the source's order
 * the temporary holds a repeated element once). Returns its size in
 * bytes; *origin is the offset of element (0, ..., 0) in it. */
size_t cm__layout_packed(const cm__layout *L, int key, size_t itemsize,
                         ptrdiff_t *ts, ptrdiff_t *origin);

/* L with one side (0: destination, 1: source) replaced by a temporary at
 * `base` with strides ts, in device or host memory, normalized. As a
 * destination the temporary drops the dims it holds once. */
void cm__layout_with_temp(const cm__layout *L, int side, int on_device,
                          uintptr_t base, const ptrdiff_t *ts,
                          cm__layout *out);

/* The step of a doubling copy along dim k of L's destination: m blocks
 * from its start to c blocks further, over the dims in `full` (already
 * written), device to device, normalized. */
void cm__layout_double_step(const cm__layout *L, const unsigned char *full,
                            int k, ptrdiff_t c, ptrdiff_t m, cm__layout *S);

/* Starts an odometer over every dim of L but a, b and c (-1 for none). */
void cm__walk_init(cm__walk *w, const cm__layout *L, int a, int b, int c);

/* Steps to the next index; 0 after the last (the offsets back at 0). */
int cm__walk_next(cm__walk *w);

/* The fewest cuMemcpy2D / cuMemcpy3D calls for normalized L with pitches
 * up to max_pitch: the rows are the elements of the innermost dim when it
 * is contiguous on both sides (one element otherwise); of the other dims,
 * the pair that most rows per call admit as Height and Depth (any dim
 * qualifies, in any order). */
void cm__layout_plan_copy(const cm__layout *L, size_t itemsize,
                          long long max_pitch, cm__plan *p);

/* The widest unit (4, 2 or 1 bytes) dividing itemsize that L's first
 * element and strides are aligned to (the memsets' rule) and, given a
 * pattern, that the pattern repeats; 0 when none. */
unsigned cm__layout_set_unit(const cm__layout *L, size_t itemsize,
                             const unsigned char *pattern);

/* Memsets of unit u writing L: with `whole`, rows of whole elements (the
 * pattern repeats u); otherwise one pass per unit of the element, each row
 * one unit. Height: the dim that admits the most rows. */
void cm__layout_plan_set(const cm__layout *L, size_t itemsize,
                         long long max_pitch, unsigned u, int whole,
                         cm__setplan *p);

#endif
