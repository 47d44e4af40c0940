/* hazard.c: the stream-order hazard checker, the vector clocks it reads,
 * and the registry of live stream and event handles.
 * Does not order or run anything (stream.c); it only reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "simsched.h"

static const char *const entry_names[SIM_NENTRIES] = {
#define SIM_ENTRY_NAME(name) #name,
    SIM_ENTRIES(SIM_ENTRY_NAME)
#undef SIM_ENTRY_NAME
};

/* Written under the lock; read without it by the control API. */
static unsigned long long hazard_count;
static char hazard_text[512];
static int hazard_any;

/* ------------------------------------------------------------------------
 * Vector clocks. Allocation failures lose ordering facts, which can only
 * add reports, never hide one. */

static sim_dep *
vc_find(const sim_vclock *v, uint64_t uid)
{
    size_t i;

    for (i = 0; i < v->n; i++) {
        if (v->e[i].uid == uid)
            return &v->e[i];
    }
    return NULL;
}

uint64_t
sim__vc_get(const sim_vclock *v, uint64_t uid)
{
    const sim_dep *d = vc_find(v, uid);

    return d != NULL ? d->seq : 0;
}

void
sim__vc_put(sim_vclock *v, uint64_t uid, uint64_t seq)
{
    sim_dep *d = vc_find(v, uid);

    if (d != NULL) {
        if (d->seq < seq)
            d->seq = seq;
        return;
    }
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        sim_dep *e = realloc(v->e, cap * sizeof *e);
        if (e == NULL)
            return;
        v->e = e;
        v->cap = cap;
    }
    v->e[v->n].uid = uid;
    v->e[v->n].seq = seq;
    v->n++;
}

void
sim__vc_join(sim_vclock *dst, const sim_vclock *src)
{
    size_t i;

    for (i = 0; i < src->n; i++) {
        if (!sim__dep_done(src->e[i].uid, src->e[i].seq))
            sim__vc_put(dst, src->e[i].uid, src->e[i].seq);
    }
}

void
sim__vc_prune(sim_vclock *v)
{
    size_t i, j = 0;

    for (i = 0; i < v->n; i++) {
        if (!sim__dep_done(v->e[i].uid, v->e[i].seq))
            v->e[j++] = v->e[i];
    }
    v->n = j;
}

void
sim__vc_copy(sim_vclock *dst, const sim_vclock *src)
{
    dst->n = 0;
    sim__vc_join(dst, src);
}

void
sim__vc_free(sim_vclock *v)
{
    free(v->e);
    v->e = NULL;
    v->n = v->cap = 0;
}

/* ------------------------------------------------------------------------
 * Live handles: an open-addressing set of pointers. */

static const void **hset;
static size_t hset_cap, hset_n;

static size_t
hset_slot(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (hset_cap - 1);
}

static size_t
hset_find(const void *p)
{
    size_t i;

    if (hset_cap == 0)
        return SIZE_MAX;
    for (i = hset_slot(p); hset[i] != NULL; i = (i + 1) & (hset_cap - 1)) {
        if (hset[i] == p)
            return i;
    }
    return SIZE_MAX;
}

static int
hset_grow(void)
{
    size_t old_cap = hset_cap, i, j;
    const void **old = hset;
    size_t cap = old_cap ? old_cap * 2 : 64;
    const void **n = calloc(cap, sizeof *n);

    if (n == NULL)
        return -1;
    hset = n;
    hset_cap = cap;
    for (i = 0; i < old_cap; i++) {
        if (old[i] == NULL)
            continue;
        for (j = hset_slot(old[i]); hset[j] != NULL; j = (j + 1) & (cap - 1))
            ;
        hset[j] = old[i];
    }
    free(old);
    return 0;
}

int
sim__handle_add(void *h)
{
    size_t i;

    if ((hset_n + 1) * 2 > hset_cap && hset_grow() < 0)
        return -1;
    for (i = hset_slot(h); hset[i] != NULL; i = (i + 1) & (hset_cap - 1))
        ;
    hset[i] = h;
    hset_n++;
    return 0;
}

void
sim__handle_remove(void *h)
{
    size_t mask = hset_cap - 1, i = hset_find(h), j, k;

    if (i == SIZE_MAX)
        return;
    hset[i] = NULL;
    hset_n--;
    if (hset_n == 0) {
        free(hset);
        hset = NULL;
        hset_cap = 0;
        return;
    }
    /* Backward-shift deletion keeps every probe chain unbroken. */
    for (j = (i + 1) & mask; hset[j] != NULL; j = (j + 1) & mask) {
        k = hset_slot(hset[j]);
        if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
            hset[i] = hset[j];
            hset[j] = NULL;
            i = j;
        }
    }
}

int
sim__handle_live(const void *h, uint32_t magic)
{
    return h != NULL && hset_find(h) != SIZE_MAX &&
           *(const uint32_t *)h == magic;
}

/* ------------------------------------------------------------------------
 * The checker. */

typedef struct hazard_scan {
    CUstream s;
    const sim_op *op;
    int found;
} hazard_scan;

static int
ranges_conflict(const sim_range *a, const sim_range *b)
{
    return (a->write || b->write) && a->len > 0 && b->len > 0 &&
           a->addr < b->addr + b->len && b->addr < a->addr + a->len;
}

/* Counts and prints the report just written to hazard_text. */
static void
publish(void)
{
    hazard_any = 1;
    __atomic_add_fetch(&hazard_count, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "cusim hazard: %s\n", hazard_text);
}

static void
report(hazard_scan *h, CUstream other, const sim_op *prior,
       const sim_range *mine, const sim_range *theirs)
{
    char here[96], there[96];

    sim__stream_label(h->s, here, sizeof here);
    sim__stream_label(other, there, sizeof there);
    snprintf(hazard_text, sizeof hazard_text,
             "%s on %s %s [0x%llx, +%zu) while %s on %s (not ordered "
             "before it, not finished) %s [0x%llx, +%zu)",
             entry_names[h->op->entry], here, mine->write ? "writes" : "reads",
             (unsigned long long)mine->addr, mine->len,
             entry_names[prior->entry], there,
             theirs->write ? "writes" : "reads",
             (unsigned long long)theirs->addr, theirs->len);
    publish();
    h->found = 1;
}

static void
scan_stream(CUstream other, void *arg)
{
    hazard_scan *h = arg;
    uint64_t known;
    const sim_op *e;
    int i, j;

    if (h->found || other == h->s)
        return;
    known = sim__vc_get(sim__stream_vc(h->s), sim__stream_uid(other));
    for (e = sim__stream_head(other); e != NULL; e = e->next) {
        if (e->seq <= known)
            continue;
        for (i = 0; i < h->op->nranges; i++) {
            for (j = 0; j < e->nranges; j++) {
                if (ranges_conflict(&h->op->ranges[i], &e->ranges[j])) {
                    report(h, other, e, &h->op->ranges[i], &e->ranges[j]);
                    return;
                }
            }
        }
    }
}

/* Called as op is queued on s, with s's clock already covering op. One
 * report per op: the first unordered conflict found. */
void
sim__hazard_check(CUstream s, const sim_op *op)
{
    hazard_scan h = {s, op, 0};

    sim__streams_each(scan_stream, &h);
}

void
sim__hazard_freed(CUstream s, const sim_op *op, const sim_range *r,
                  const char *why)
{
    char here[96];

    sim__stream_label(s, here, sizeof here);
    snprintf(hazard_text, sizeof hazard_text,
             "%s on %s %s [0x%llx, +%zu), %s: CUDA_ERROR_ILLEGAL_ADDRESS",
             entry_names[op->entry], here, r->write ? "writes" : "reads",
             (unsigned long long)r->addr, r->len, why);
    publish();
}

void
sim_hazard_unordered_free(sim_entry id, uintptr_t addr, size_t len)
{
    snprintf(hazard_text, sizeof hazard_text,
             "%s of stream-ordered memory [0x%llx, +%zu) while work on it "
             "is queued or running (the driver does not wait for it)",
             entry_names[id], (unsigned long long)addr, len);
    publish();
}

void
sim_hazard_overlap(sim_entry id, uintptr_t dst, size_t dlen, uintptr_t src,
                   size_t slen)
{
    snprintf(hazard_text, sizeof hazard_text,
             "%s writes [0x%llx, +%zu) overlapping its source [0x%llx, "
             "+%zu) (undefined on the driver; copied as by memmove)",
             entry_names[id], (unsigned long long)dst, dlen,
             (unsigned long long)src, slen);
    publish();
}

const char *
sim__entry_name(sim_entry id)
{
    return (unsigned)id < SIM_NENTRIES ? entry_names[id] : "?";
}

unsigned long long
sim_hazard_count(void)
{
    return __atomic_load_n(&hazard_count, __ATOMIC_RELAXED);
}

const char *
sim_last_hazard(void)
{
    return hazard_any ? hazard_text : NULL;
}

void
sim_hazards_reset(void)
{
    __atomic_store_n(&hazard_count, 0, __ATOMIC_RELAXED);
    hazard_any = 0;
    hazard_text[0] = '\0';
}
