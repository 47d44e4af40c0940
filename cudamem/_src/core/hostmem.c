/* hostmem.c: the registry of host registrations and the host buffers of
 * hostmem.h. Registrations are page-rounded nodes shared by reference, so
 * overlapping requests never reach the driver as overlapping
 * registrations. Does not know arrays, views or Python. */
#include "hostmem.h"
#include "addrtree.h"
#include "lockorder.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver.h"
#include "event.h"
#include "history.h"
#include "release.h"
#include "stats.h"

/* Every registration is pinned for all contexts and mappable, so that a
 * later mapped() over the same pages finds them usable. */
#define REG_FLAGS (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP)

/* How many streams a registration remembers work of; a full set orders
 * its oldest work before the next stream's. */
#define WORK_SLOTS 4

/* Queued work on a registration's pages: an event recorded after the
 * latest copy on `stream`, in dev's context at `generation`. */
typedef struct work {
    cm_device *dev;
    CUstream stream;
    CUevent event;
    uint64_t generation;
} work;

/* One driver registration: disjoint, page-aligned ([link.base,
 * link.base + link.size)), in the table while `linked`. It retains its
 * device's primary context, so that close() leaves it registered; only a
 * reset ends it. Write-combined memory has a node too (ctx NULL: the
 * driver allocated it page-locked), so that its work is noted like any
 * other's. */
typedef struct node {
    addrnode link;
    int refs;
    int linked;
    unsigned flags;
    cm_device *dev;
    CUcontext ctx;   /* retained by the node; NULL: cuMemHostAlloc's */
    uint64_t resets; /* dev's at registration */
    work work[WORK_SLOTS];
    int nwork;
} node;

struct cm_hostreg {
    size_t n;
    node *nodes[];
};

/* The nodes by base (n: how many, read without the lock), and the
 * records whose release waits for work on their pages; everything here
 * under `lock`. */
static struct {
    pthread_mutex_t lock;
    addrtree tree;
    size_t n;
    cm_host *retiring;
    size_t nretiring;
} table = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ------------------------------------------------------------------------
 * The registry: page-rounded nodes and the work noted on them. */

/* Cached with relaxed atomics: threads racing here all store the same
 * value. */
static size_t
page_size(void)
{
    static size_t ps;
    size_t v = __atomic_load_n(&ps, __ATOMIC_RELAXED);

    if (v == 0) {
        v = (size_t)sysconf(_SC_PAGESIZE);
        __atomic_store_n(&ps, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* A reset since the registration took it from the driver. */
static int
stale(const node *n)
{
    return __atomic_load_n(&n->dev->resets, __ATOMIC_ACQUIRE) != n->resets;
}

static node *
node_of(addrnode *link)
{
    return link != NULL ? ADDRTREE_ENTRY(link, node, link) : NULL;
}

/* The first node ending after addr. */
static node *
first_after(uintptr_t addr)
{
    return node_of(addrtree_after(&table.tree, addr));
}

static node *
next_node(node *n)
{
    return node_of(addrtree_next(&n->link));
}

/* Links n before `next` (NULL: last), the first node ending after n's
 * base, which its caller found; n's pages are in no node. */
static void
table_insert(node *n, node *next)
{
    addrtree_insert_before(&table.tree, next != NULL ? &next->link : NULL,
                           &n->link);
    /* Atomic: cm__host_note reads the count without the lock. */
    __atomic_store_n(&table.n, table.n + 1, __ATOMIC_RELAXED);
    n->linked = 1;
}

static void
table_unlink(node *n)
{
    addrtree_remove(&table.tree, &n->link);
    __atomic_store_n(&table.n, table.n - 1, __ATOMIC_RELAXED);
    n->linked = 0;
}

/* A slot's event still belongs to a live context. */
static int
work_live(const work *w)
{
    return __atomic_load_n(&w->dev->generation, __ATOMIC_ACQUIRE) ==
           w->generation;
}

/* Drops slot i, keeping the order, and gives its event back (a stale one
 * went with its context). Lock held. */
static void
work_forget(node *n, int i)
{
    work w = n->work[i];
    cm_error ignored;

    memmove(n->work + i, n->work + i + 1,
            (size_t)(n->nwork - i - 1) * sizeof(work));
    n->nwork--;
    if (work_live(&w)) {
        (void)cm_event_release(w.dev, w.generation, w.event, &ignored);
    }
}

/* Whether slot w's work is still queued. A query that fails (not
 * NOT_READY) says nothing of the work: wait for it instead. */
static int
work_pending(const work *w)
{
    cm_error err;

    if (!work_live(w) || CM_CALL(&err, cuEventQuery, w->event) == 0) {
        return 0;
    }
    if (err.kind == CM_ERR_DRIVER && err.code == CUDA_ERROR_NOT_READY) {
        return 1;
    }
    (void)CM_CALL(&err, cuEventSynchronize, w->event);
    return 0;
}

/* Remembers work just queued on `stream` (dev's context current) on n's
 * pages: the stream's slot is recorded again; a new stream takes a free
 * slot, or the oldest, whose work the stream is first made to wait for
 * (cuStreamWaitEvent takes an event of another context). Lock held. */
static int
node_note(node *n, cm_device *dev, CUstream stream, cm_error *err)
{
    work *w = NULL;
    uint64_t generation;
    CUevent event;

    for (int i = 0; i < n->nwork; i++) {
        if (!work_live(&n->work[i])) {
            work_forget(n, i--);
        }
        else if (n->work[i].dev == dev && n->work[i].stream == stream) {
            w = &n->work[i];
            break;
        }
    }
    if (w == NULL) {
        if (n->nwork == WORK_SLOTS) {
            if (CM_CALL(err, cuStreamWaitEvent, stream, n->work[0].event, 0) <
                0) {
                return -1;
            }
            work_forget(n, 0);
        }
        if (cm_event_create(dev, CU_EVENT_DISABLE_TIMING, &event, &generation,
                            err) < 0) {
            return -1;
        }
        w = &n->work[n->nwork++];
        *w = (work){dev, stream, event, generation};
    }
    return CM_CALL(err, cuEventRecord, w->event, stream);
}

/* ------------------------------------------------------------------------
 * Registrations. */

/* Whether any page of r has queued work. Lock held. */
static int
reg_busy(node *const *nodes, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        for (int k = 0; k < nodes[i]->nwork; k++) {
            if (work_pending(&nodes[i]->work[k])) {
                return 1;
            }
        }
    }
    return 0;
}

/* Drops a reference; the last one unregisters the pages, unless the
 * driver already dropped them with their context. Lock held. */
static int
node_drop(node *n, cm_error *err)
{
    cm_error ignored;
    int rc = 0;

    if (--n->refs > 0) {
        return 0;
    }
    if (n->linked) {
        table_unlink(n);
    }
    while (n->nwork > 0) {
        work_forget(n, 0);
    }
    if (n->ctx == NULL) {
        free(n);
        return 0;
    }
    /* The driver unregisters in the pages' own context whatever is
     * current, none included (tests/gpu/driver_facts.json): no push. The
     * node's retain keeps that context alive until here. */
    if (!stale(n)) {
        rc = CM_CALL(err, cuMemHostUnregister, (void *)n->link.base);
    }
    if (CM_CALL(rc < 0 ? &ignored : err, cuDevicePrimaryCtxRelease,
                n->dev->cudev) < 0) {
        rc = -1;
    }
    free(n);
    return rc;
}

/* Drops every reference of r and frees it; the first failure is
 * reported, the rest still dropped. Lock held. */
static int
reg_drop(cm_hostreg *r, cm_error *err)
{
    cm_error later;
    int rc = 0;

    for (size_t i = 0; i < r->n; i++) {
        if (node_drop(r->nodes[i], rc < 0 ? &later : err) < 0) {
            rc = -1;
        }
    }
    free(r);
    return rc;
}

/* Forgets the nodes in [lo, hi) whose registration died with its context
 * (their holders still drop them); returns the first node ending after lo
 * that is left. Lock held. */
static node *
unlink_stale(uintptr_t lo, uintptr_t hi)
{
    node *first = first_after(lo), *n = first, *next;

    for (; n != NULL && n->link.base < hi; n = next) {
        next = next_node(n);
        if (stale(n)) {
            first = n == first ? next : first;
            table_unlink(n);
        }
    }
    return first;
}

/* Registers the gap [lo, hi) as a new node of the table, before `next`
 * (the first node above it, or NULL). *made is NULL when another owner
 * already page-locked it. Lock held, dev's context current. */
static int
register_gap(uintptr_t lo, uintptr_t hi, node *next, unsigned flags,
             cm_device *dev, uint64_t resets, node **made, cm_error *err)
{
    node *n = malloc(sizeof(*n));
    cm_error ignored;

    *made = NULL;
    if (n == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    *n = (node){.link = {.base = lo, .size = hi - lo},
                .flags = flags,
                .dev = dev,
                .resets = resets};
    if (CM_CALL(err, cuDevicePrimaryCtxRetain, &n->ctx, dev->cudev) < 0) {
        free(n);
        return -1;
    }
    if (CM_CALL(err, cuMemHostRegister, (void *)lo, hi - lo, flags) < 0) {
        (void)CM_CALL(&ignored, cuDevicePrimaryCtxRelease, dev->cudev);
        free(n);
        /* Pinned by someone else (cuMemHostAlloc memory, another
         * library): already what was asked for. */
        return err->kind == CM_ERR_DRIVER &&
                       err->code == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                   ? 0
                   : -1;
    }
    table_insert(n, next);
    *made = n;
    return 0;
}

/* References on nodes covering the pages of [lo, hi), registering the
 * gaps. Lock held, dev's context current. */
static int
reg_acquire(uintptr_t lo, uintptr_t hi, unsigned flags, cm_device *dev,
            uint64_t resets, cm_hostreg **out, cm_error *err)
{
    size_t count = 0;
    uintptr_t cur = lo;
    cm_error ignored;
    cm_hostreg *r;
    node *first = unlink_stale(lo, hi), *n;

    for (n = first; n != NULL && n->link.base < hi; n = next_node(n)) {
        if (!(flags & CU_MEMHOSTREGISTER_READ_ONLY) &&
            (n->flags & CU_MEMHOSTREGISTER_READ_ONLY)) {
            return cm__fail_fmt(err, CM_ERR_VALUE,
                                "host memory at %#lx (%zu bytes) is "
                                "registered read-only (by a read-only "
                                "array): a writable array sharing its "
                                "pages cannot be registered meanwhile",
                                (unsigned long)n->link.base, n->link.size);
        }
        count++;
    }
    /* At most one gap before each node and one after the last. */
    r = malloc(sizeof(*r) + (2 * count + 1) * sizeof(r->nodes[0]));
    if (r == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    r->n = 0;
    /* A gap registered goes in before n, which stays the next node. */
    n = first;
    while (cur < hi) {
        if (n != NULL && n->link.base <= cur) {
            n->refs++;
            r->nodes[r->n++] = n;
            cur = n->link.base + n->link.size;
            n = next_node(n);
            continue;
        }
        uintptr_t end = n != NULL && n->link.base < hi ? n->link.base : hi;
        node *made;

        if (register_gap(cur, end, n, flags, dev, resets, &made, err) < 0) {
            (void)reg_drop(r, &ignored);
            return -1;
        }
        if (made != NULL) {
            made->refs = 1;
            r->nodes[r->n++] = made;
        }
        cur = end;
    }
    *out = r;
    return 0;
}

/* The device address of ptr in dev's (current) context. */
static int
device_pointer(void *ptr, CUdeviceptr *out, cm_error *err)
{
    return CM_CALL(err, cuMemHostGetDevicePointer, out, ptr, 0);
}

/* Registers [ptr, ptr + size) on the current device, with a device
 * address when `mapped`; fills h's registration fields. */
static int
host_register(cm_device *dev, cm_host *h, int readonly, int mapped,
              cm_error *err)
{
    uintptr_t lo, hi, ps = page_size();
    unsigned flags = REG_FLAGS;
    cm_ctx_guard guard;
    cm_error ignored;
    CUdeviceptr last;
    CUcontext ctx;
    int rc, supported = 1;

    if (cm_device_primary(dev, &ctx, &h->generation, err) < 0) {
        return -1;
    }
    h->dev = dev;
    h->resets = __atomic_load_n(&dev->resets, __ATOMIC_ACQUIRE);
    h->readonly = readonly;
    h->mapped = mapped;
    if (h->size == 0) {
        return 0;
    }
    if (readonly) {
        if (CM_CALL(err, cuDeviceGetAttribute, &supported,
                    CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
                    dev->cudev) < 0) {
            return -1;
        }
        if (!supported) {
            return cm__fail_fmt(err, CM_ERR_SUPPORT,
                                "device %d cannot page-lock read-only host "
                                "memory (no READ_ONLY_HOST_REGISTER_"
                                "SUPPORTED): make the array writable",
                                dev->ordinal);
        }
        flags |= CU_MEMHOSTREGISTER_READ_ONLY;
    }
    lo = (uintptr_t)h->ptr & ~(ps - 1);
    hi = ((uintptr_t)h->ptr + h->size + ps - 1) & ~(ps - 1);
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    cm__lock(&table.lock, CM_LOCK_HOSTMEM);
    rc = reg_acquire(lo, hi, flags, dev, h->resets, &h->reg, err);
    cm__unlock(&table.lock);
    if (rc == 0 && mapped) {
        /* Several registrations need not be contiguous on the device. */
        rc = device_pointer(h->ptr, &h->dptr, err);
        if (rc == 0 && h->size > 1) {
            rc = device_pointer((char *)h->ptr + h->size - 1, &last, err);
        }
        if (rc == 0 && h->size > 1 && last - h->dptr != h->size - 1) {
            rc = cm__fail_fmt(err, CM_ERR_VALUE,
                              "host memory at %p (%zu bytes) spans "
                              "registrations that are not contiguous on "
                              "device %d: it cannot be mapped as one array",
                              h->ptr, h->size, dev->ordinal);
        }
    }
    /* A failed pop fails a registration made before it as well: the
     * caller unmaps the pages, so nothing may stay registered over them
     * (each node pushes its own context to drop). */
    rc = cm_ctx_leave(&guard, rc, err);
    if (rc < 0 && h->reg != NULL) {
        cm__lock(&table.lock, CM_LOCK_HOSTMEM);
        (void)reg_drop(h->reg, &ignored);
        cm__unlock(&table.lock);
        h->reg = NULL;
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * Host buffers: allocation, registration, external memory. */

/* A node of the table for h's write-combined pages (the driver's, fresh
 * and page-aligned), so that work on them is noted like any other's. */
static int
wc_node(cm_host *h, cm_error *err)
{
    uintptr_t lo = (uintptr_t)h->ptr, ps = page_size();
    cm_hostreg *r = malloc(sizeof(*r) + sizeof(r->nodes[0]));
    node *n = malloc(sizeof(*n));

    if (r == NULL || n == NULL) {
        free(r);
        free(n);
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    *n = (node){.link = {.base = lo, .size = (h->size + ps - 1) & ~(ps - 1)},
                .refs = 1,
                .dev = h->dev,
                .resets = h->resets};
    cm__lock(&table.lock, CM_LOCK_HOSTMEM);
    table_insert(n, unlink_stale(lo, lo + n->link.size));
    cm__unlock(&table.lock);
    r->n = 1;
    r->nodes[0] = n;
    h->reg = r;
    return 0;
}

/* cuMemHostAlloc'd write-combined memory under its own retain of the
 * current device's primary context, so that close() cannot free it (see
 * cm__release_retained). */
static int
alloc_wc(cm_device *dev, cm_host *h, int portable, cm_error *err)
{
    unsigned flags = CU_MEMHOSTALLOC_WRITECOMBINED |
                     CU_MEMHOSTALLOC_DEVICEMAP |
                     (portable ? CU_MEMHOSTALLOC_PORTABLE : 0);
    cm_ctx_guard guard;
    cm_error ignored;
    CUcontext ctx;
    void *p = NULL;
    int rc;

    if (cm_device_primary(dev, &ctx, &h->generation, err) < 0) {
        return -1;
    }
    h->dev = dev;
    h->mapped = 1;
    if (h->size == 0) {
        return 0;
    }
    h->resets = __atomic_load_n(&dev->resets, __ATOMIC_ACQUIRE);
    if (CM_CALL(err, cuDevicePrimaryCtxRetain, &ctx, dev->cudev) < 0) {
        return -1;
    }
    rc = cm_ctx_enter(dev, &guard, err);
    if (rc == 0) {
        rc = CM_CALL(err, cuMemHostAlloc, &p, h->size, flags);
        if (rc == 0) {
            rc = device_pointer(p, &h->dptr, err);
            if (rc < 0) {
                (void)CM_CALL(&ignored, cuMemFreeHost, p);
            }
        }
        rc = cm_ctx_leave(&guard, rc, err);
    }
    if (rc < 0) {
        /* A pop that failed after a good allocation: the memory is
         * unreachable; freeing it with the context is the best left. */
        (void)CM_CALL(&ignored, cuDevicePrimaryCtxRelease, dev->cudev);
        return -1;
    }
    h->ptr = p;
    if (wc_node(h, err) < 0) {
        (void)cm__release_retained(dev, h->generation, h->resets, CM_FREE_HOST,
                                   (uint64_t)(uintptr_t)p, h->size, &ignored);
        return -1;
    }
    return 0;
}

/* A zeroed record of `kind`, or NULL. malloc, not calloc: glibc's calloc
 * skips its per-thread cache, which cost each registration a few hundred
 * instructions that varied with the heap's state. */
static cm_host *
host_new(cm_host_kind kind)
{
    cm_host *h = malloc(sizeof(*h));

    if (h != NULL) {
        *h = (cm_host){.kind = kind};
    }
    return h;
}

/* One try at cm_host_alloc. */
static int
host_alloc(cm_device *dev, cm_host_kind kind, size_t nbytes, int portable,
           cm_host **out, cm_error *err)
{
    size_t ps = page_size();
    cm_host *h;
    void *p;

    h = host_new(kind);
    if (h == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    h->size = nbytes;
    if (kind == CM_HOST_MAPPED_WC) {
        if (alloc_wc(dev, h, portable, err) < 0) {
            free(h);
            return -1;
        }
        *out = h;
        return 0;
    }
    if (nbytes > SIZE_MAX - (ps - 1)) {
        free(h);
        return cm__fail_fmt(err, CM_ERR_NOMEM,
                            "cannot map %zu bytes of host memory", nbytes);
    }
    if (nbytes > 0) {
        h->maplen = (nbytes + ps - 1) & ~(ps - 1);
        p = mmap(NULL, h->maplen, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            free(h);
            return cm__fail_fmt(err, CM_ERR_NOMEM,
                                "cannot map %zu bytes of host memory", nbytes);
        }
        h->ptr = p;
    }
    if (host_register(dev, h, 0, kind == CM_HOST_MAPPED, err) < 0) {
        if (h->ptr != NULL) {
            munmap(h->ptr, h->maplen);
        }
        free(h);
        return -1;
    }
    *out = h;
    return 0;
}

/* stats.h's kind and bytes of cudamem's own host memory: what the driver
 * holds, whole pages for cudamem's mmap pages. */
static cm_stat_kind
stat_kind(cm_host_kind kind)
{
    return kind == CM_HOST_PINNED   ? CM_STAT_PINNED
           : kind == CM_HOST_MAPPED ? CM_STAT_MAPPED
                                    : CM_STAT_WRITE_COMBINED;
}

static size_t
stat_bytes(const cm_host *h)
{
    return h->kind == CM_HOST_MAPPED_WC ? h->size : h->maplen;
}

/* The history's record of h (history.h), behind the caller's
 * cm__history_on: each allocation is a segment of its own, the pages the
 * driver holds. */
static void
note(const cm_host *h, cm_hist_action action)
{
    cm_hist_memory memory = h->kind == CM_HOST_PINNED ? CM_HIST_PINNED
                                                      : CM_HIST_MAPPED;
    uint64_t addr = (uint64_t)(uintptr_t)h->ptr;

    if (h->kind == CM_HOST_REGISTERED || h->ptr == NULL) {
        return;
    }
    if (action == CM_HIST_ALLOC) {
        cm__history_note(CM_HIST_SEGMENT_ALLOC, memory, h->dev->ordinal, addr,
                         stat_bytes(h), NULL);
    }
    cm__history_note(action, memory, h->dev->ordinal, addr, h->size, NULL);
    if (action == CM_HIST_FREE_COMPLETED) {
        cm__history_note(CM_HIST_SEGMENT_FREE, memory, h->dev->ordinal, addr,
                         stat_bytes(h), NULL);
    }
}

int
cm_host_alloc(cm_device *dev, cm_host_kind kind, size_t nbytes, int portable,
              cm_host **out, cm_error *err)
{
    return cm__host_alloc_for(dev, kind, nbytes, nbytes, portable, out, err);
}

int
cm__host_alloc_for(cm_device *dev, cm_host_kind kind, size_t nbytes,
                   size_t requested, int portable, cm_host **out,
                   cm_error *err)
{
    int rc;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    if (kind != CM_HOST_PINNED && kind != CM_HOST_MAPPED &&
        kind != CM_HOST_MAPPED_WC) {
        return cm_fail(err, CM_ERR_VALUE, "not a kind of host allocation");
    }
    /* Where the driver reports out-of-memory for page-locked memory, the
     * same recovery as for device memory can give some back. */
    rc = host_alloc(dev, kind, nbytes, portable, out, err);
    if (rc < 0 && cm__oom_recover(dev, err)) {
        rc = host_alloc(dev, kind, nbytes, portable, out, err);
        if (rc < 0) {
            cm__oom_mark(dev, nbytes, err);
        }
    }
    if (rc == 0 && (*out)->ptr != NULL) {
        cm__stats_add(dev, stat_kind(kind), stat_bytes(*out), requested);
        if (cm__history_on()) {
            note(*out, CM_HIST_ALLOC);
        }
    }
    return rc;
}

int
cm_host_register(cm_device *dev, void *ptr, size_t size, int readonly,
                 int mapped, cm_host **out, cm_error *err)
{
    cm_host *h;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    h = host_new(CM_HOST_REGISTERED);
    if (h == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    h->ptr = size > 0 ? ptr : NULL;
    h->size = size;
    if (host_register(dev, h, readonly, mapped, err) < 0) {
        free(h);
        return -1;
    }
    *out = h;
    return 0;
}

int
cm_host_external(cm_device *dev, void *ptr, size_t size, int mapped,
                 cm_host **out, cm_error *err)
{
    cm_host *h;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    h = host_new(CM_HOST_REGISTERED);
    if (h == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    h->external = 1;
    h->ptr = size > 0 ? ptr : NULL;
    h->size = size;
    h->dev = dev;
    h->resets = __atomic_load_n(&dev->resets, __ATOMIC_ACQUIRE);
    if (mapped && h->ptr != NULL &&
        device_pointer(h->ptr, &h->dptr, err) < 0) {
        free(h);
        return -1;
    }
    h->mapped = mapped;
    *out = h;
    return 0;
}

/* ------------------------------------------------------------------------
 * Release, and the retiring of buffers with work queued. */

/* Drops h's registration now. */
static int
reg_release(cm_host *h, cm_error *err)
{
    int rc;

    if (h->reg == NULL) {
        return 0;
    }
    cm__lock(&table.lock, CM_LOCK_HOSTMEM);
    rc = reg_drop(h->reg, err);
    cm__unlock(&table.lock);
    h->reg = NULL;
    return rc;
}

/* The release of a record whose pages are idle: cm_host_free's. */
static int
host_free_now(cm_host *h, cm_error *err)
{
    cm_error later;
    int rc;

    if (h->kind != CM_HOST_REGISTERED && h->ptr != NULL) {
        cm__stats_sub(h->dev, stat_kind(h->kind), stat_bytes(h), h->size);
    }
    rc = reg_release(h, err);
    if (h->kind == CM_HOST_MAPPED_WC) {
        if (h->ptr != NULL &&
            cm__release_retained(h->dev, h->generation, h->resets,
                                 CM_FREE_HOST, (uint64_t)(uintptr_t)h->ptr,
                                 h->size, rc < 0 ? &later : err) < 0) {
            rc = -1;
        }
    }
    /* After a failed unregister the driver still holds the pages: leave
     * them mapped. */
    else if (rc == 0 && h->kind != CM_HOST_REGISTERED && h->ptr != NULL) {
        if (cm__history_on()) {
            note(h, CM_HIST_FREE_COMPLETED);
        }
        munmap(h->ptr, h->maplen);
    }
    free(h);
    return rc;
}

int
cm_host_unregister(cm_host *h, cm_error *err)
{
    cm_host *shell;

    if (h->reg == NULL) {
        return 0;
    }
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    /* The registration alone retires: a record that owns no memory. */
    shell = host_new(CM_HOST_REGISTERED);
    if (shell == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    shell->dev = h->dev;
    shell->reg = h->reg;
    h->reg = NULL;
    return cm__host_retire(shell, host_free_now, err);
}

int
cm_host_free(cm_host *h, cm_error *err)
{
    if (cm_fork_check(err) < 0) {
        free(h);
        return -1;
    }
    if (cm__history_on()) {
        note(h, CM_HIST_FREE_REQUESTED);
    }
    return cm__host_retire(h, host_free_now, err);
}

int
cm__host_note(cm_device *dev, CUstream stream, const void *ptr, size_t size,
              cm_error *err)
{
    uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
    int rc = 1;

    /* Most copies with no registration at all take no lock. */
    if (__atomic_load_n(&table.n, __ATOMIC_RELAXED) == 0) {
        return 1;
    }
    cm__lock(&table.lock, CM_LOCK_HOSTMEM);
    for (node *n = first_after(lo); rc >= 0 && n != NULL && n->link.base < hi;
         n = next_node(n)) {
        if (!stale(n)) {
            rc = node_note(n, dev, stream, err);
        }
    }
    cm__unlock(&table.lock);
    return rc;
}

/* Takes the retiring records whose pages are idle (all of them with
 * `all`), in the order they retired. Lock held. */
static cm_host *
take_idle(int all)
{
    cm_host *idle = NULL, **link = &table.retiring, **tail = &idle;

    while (*link != NULL) {
        cm_host *h = *link;

        if (all || h->reg == NULL || !reg_busy(h->reg->nodes, h->reg->n)) {
            *link = h->next;
            h->next = NULL;
            *tail = h;
            tail = &h->next;
            table.nretiring--;
        }
        else {
            link = &h->next;
        }
    }
    return idle;
}

/* Runs the releases of a chain; the first failure is reported. */
static int
run_releases(cm_host *chain, cm_error *err)
{
    cm_error later;
    int rc = 0;

    while (chain != NULL) {
        cm_host *h = chain;

        chain = h->next;
        h->next = NULL;
        if (h->then(h, rc < 0 ? &later : err) < 0) {
            rc = -1;
        }
    }
    return rc;
}

int
cm__host_reap(cm_error *err)
{
    cm_host *idle;

    if (__atomic_load_n(&table.nretiring, __ATOMIC_RELAXED) == 0) {
        return 0;
    }
    cm__lock(&table.lock, CM_LOCK_HOSTMEM);
    idle = take_idle(0);
    cm__unlock(&table.lock);
    return run_releases(idle, err);
}

/* Retiring records may retain a context: close() and
 * release_primary_context() wait for them first (context.h). */
static const cm_subsystem_ops retiring_ops = {
    .before_release = cm_host_drain,
};

int
cm__host_retire(cm_host *h, cm_host_fn then, cm_error *err)
{
    cm_error later;
    int busy, rc;

    cm__lock(&table.lock, CM_LOCK_HOSTMEM);
    busy = h->reg != NULL && reg_busy(h->reg->nodes, h->reg->n);
    if (busy) {
        cm__subsystem_register(CM_SUB_HOSTMEM, &retiring_ops);
        h->then = then;
        h->next = table.retiring;
        table.retiring = h;
        table.nretiring++;
    }
    cm__unlock(&table.lock);
    rc = cm__host_reap(err);
    if (!busy && then(h, rc < 0 ? &later : err) < 0) {
        rc = -1;
    }
    return rc;
}

int
cm_host_drain(cm_error *err)
{
    cm_host *all = NULL;
    cm_error later;
    int rc = 0;

    if (__atomic_load_n(&table.nretiring, __ATOMIC_RELAXED) == 0) {
        return 0;
    }
    /* Each pending event waited for outside the lock would be freed under
     * a concurrent note; wait under it, as a driver's free would. */
    cm__lock(&table.lock, CM_LOCK_HOSTMEM);
    for (cm_host *h = table.retiring; h != NULL; h = h->next) {
        for (size_t i = 0; h->reg != NULL && i < h->reg->n; i++) {
            node *n = h->reg->nodes[i];

            for (int k = 0; k < n->nwork; k++) {
                if (work_live(&n->work[k]) &&
                    CM_CALL(rc < 0 ? &later : err, cuEventSynchronize,
                            n->work[k].event) < 0) {
                    rc = -1;
                }
            }
        }
    }
    all = take_idle(1);
    cm__unlock(&table.lock);
    if (run_releases(all, rc < 0 ? &later : err) < 0) {
        rc = -1;
    }
    return rc;
}

size_t
cm__host_retiring(void)
{
    return __atomic_load_n(&table.nretiring, __ATOMIC_RELAXED);
}

int
cm_host_check(const cm_host *h, cm_error *err)
{
    int gone;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    gone = __atomic_load_n(&h->dev->resets, __ATOMIC_ACQUIRE) != h->resets;
    if (gone) {
        return cm__fail_fmt(err, CM_ERR_STATE,
                            "the mapped host memory at %p cannot be used "
                            "on device %d: the device was reset since it was "
                            "mapped",
                            h->ptr, h->dev->ordinal);
    }
    return 0;
}

int
cm_host_covers(const cm_host *h, const void *ptr, size_t size)
{
    uintptr_t at = (uintptr_t)ptr, base = (uintptr_t)h->ptr;

    if (h->kind == CM_HOST_REGISTERED || h->ptr == NULL || at < base ||
        size > h->size || at - base > h->size - size) {
        return 0;
    }
    return __atomic_load_n(&h->dev->resets, __ATOMIC_ACQUIRE) == h->resets;
}

int
cm_host_locked(const void *ptr, size_t size)
{
    uintptr_t cur = (uintptr_t)ptr, hi = cur + size;

    cm__lock(&table.lock, CM_LOCK_HOSTMEM);
    for (node *n = first_after(cur); n != NULL && cur < hi; n = next_node(n)) {
        if (n->link.base > cur || stale(n)) {
            break;
        }
        cur = n->link.base + n->link.size;
    }
    cm__unlock(&table.lock);
    return cur >= hi;
}
