/* memory.c: device address reserves and their allocator, the allocation
 * table, device / host / registered / managed memory, pointer attributes and
 * the entry points that make and query them. Not copies or memsets (copy.c),
 * nor the IPC entry points (ipc.c). */
#include "sim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Only the driver's internal build declares these older ABIs. */
typedef CUresult(CUDAAPI *PFN_cuMemHostRegister_v4000)(void *p,
                                                       size_t bytesize,
                                                       unsigned int Flags);

#define MIN_RESERVE ((size_t)1 << 30)

/* A record with what only this file needs; every sim_alloc is one. */
typedef struct sim_record {
    sim_alloc a;
    /* Managed memory: cuMemAdvise and cuMemPrefetchAsync state, kept for
     * the whole allocation (the driver keeps it per page). Location type
     * CU_MEM_LOCATION_TYPE_INVALID (0): none. */
    int read_mostly;
    CUmemLocation preferred;
    CUmemLocation last_prefetch;
    unsigned accessed_by; /* bit d: device d; bit SIM_MAX_DEVICES: host */
} sim_record;

#define ACCESSED_BY_HOST (1u << SIM_MAX_DEVICES)

typedef struct sim_span {
    size_t off, len;
} sim_span;

/* Free address ranges of a reserve, sorted by offset, never adjacent. */
struct sim_heap {
    sim_span *spans;
    size_t n, cap;
    size_t size;
};

/* Every live record by base; ranges never overlap. */
static addrtree table;

/* Every live record by exact base too, so that a free or unregister,
 * which names a base, finds it without a walk of the tree: chains through
 * sim_alloc.hnext, doubled when they average more than one record (a
 * failed doubling only lengthens them). */
#define BY_BASE_MIN 64
static sim_alloc *by_base_min[BY_BASE_MIN];
static struct {
    sim_alloc **chains;
    size_t mask, n;
} by_base = {by_base_min, BY_BASE_MIN - 1, 0};
static unsigned long long next_buffer_id = 1;

/* Cached with relaxed atomics: callers need not hold the lock, and
 * threads racing here all store the same value. */
static size_t
page_size(void)
{
    static size_t ps;
    size_t v = __atomic_load_n(&ps, __ATOMIC_RELAXED);

    if (!v) {
        v = (size_t)sysconf(_SC_PAGESIZE);
        __atomic_store_n(&ps, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* Rounds n up to a multiple of the power of two `to`; 0 on overflow. */
static size_t
round_up(size_t n, size_t to)
{
    if (n > SIZE_MAX - (to - 1))
        return 0;
    return (n + to - 1) & ~(to - 1);
}

/* ---------------------------------------------------------------------------
 * Address heap: first fit, freed ranges coalesce with their neighbours. */

static struct sim_heap *
heap_new(size_t size)
{
    struct sim_heap *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->spans = malloc(sizeof(sim_span) * 8);
    if (!h->spans) {
        free(h);
        return NULL;
    }
    h->cap = 8;
    h->n = 1;
    h->spans[0].off = 0;
    h->spans[0].len = size;
    h->size = size;
    return h;
}

static void
heap_delete(struct sim_heap *h)
{
    if (h) {
        free(h->spans);
        free(h);
    }
}

static int
heap_alloc(struct sim_heap *h, size_t len, size_t *off)
{
    for (size_t i = 0; i < h->n; i++) {
        sim_span *s = &h->spans[i];
        if (s->len < len)
            continue;
        *off = s->off;
        s->off += len;
        s->len -= len;
        if (s->len == 0) {
            memmove(s, s + 1, (h->n - i - 1) * sizeof(*s));
            h->n--;
        }
        return 0;
    }
    return -1;
}

/* Returns -1 only when the span list cannot grow (the range is then lost
 * to the allocator, never handed out twice). */
static int
heap_free(struct sim_heap *h, size_t off, size_t len)
{
    size_t i = 0, lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->spans[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    i = lo;
    int join_prev = i > 0 && h->spans[i - 1].off + h->spans[i - 1].len == off;
    int join_next = i < h->n && off + len == h->spans[i].off;
    if (join_prev && join_next) {
        h->spans[i - 1].len += len + h->spans[i].len;
        memmove(&h->spans[i], &h->spans[i + 1],
                (h->n - i - 1) * sizeof(sim_span));
        h->n--;
    }
    else if (join_prev) {
        h->spans[i - 1].len += len;
    }
    else if (join_next) {
        h->spans[i].off = off;
        h->spans[i].len += len;
    }
    else {
        if (h->n == h->cap) {
            /* heap_new starts at 8; the fallback spells it out for the
             * analyzer, which cannot see that cap is never 0. */
            size_t cap = h->cap ? 2 * h->cap : 8;
            sim_span *s = realloc(h->spans, cap * sizeof(sim_span));
            if (!s)
                return -1;
            h->spans = s;
            h->cap = cap;
        }
        memmove(&h->spans[i + 1], &h->spans[i], (h->n - i) * sizeof(sim_span));
        h->spans[i].off = off;
        h->spans[i].len = len;
        h->n++;
    }
    return 0;
}

static int
heap_empty(const struct sim_heap *h)
{
    return !h ||
           (h->n == 1 && h->spans[0].off == 0 && h->spans[0].len == h->size);
}

/* ---------------------------------------------------------------------------
 * Allocation table (lib/addrtree): O(log n) per change and lookup. */

static sim_alloc *
record_of(addrnode *link)
{
    return link ? ADDRTREE_ENTRY(link, sim_alloc, link) : NULL;
}

static size_t
by_base_slot(uintptr_t base, size_t mask)
{
    /* Fibonacci hashing: bits 32 and up of the product mix every bit
     * of the (aligned) base. */
    return (size_t)(((uint64_t)base * 0x9e3779b97f4a7c15u) >> 32) & mask;
}

static void
by_base_grow(void)
{
    size_t mask = by_base.mask * 2 + 1;
    sim_alloc **chains = calloc(mask + 1, sizeof(*chains)), *a, *next;
    if (!chains)
        return;
    for (size_t i = 0; i <= by_base.mask; i++) {
        for (a = by_base.chains[i]; a; a = next) {
            size_t slot = by_base_slot(a->link.base, mask);
            next = a->hnext;
            a->hnext = chains[slot];
            chains[slot] = a;
        }
    }
    if (by_base.chains != by_base_min)
        free(by_base.chains);
    by_base.chains = chains;
    by_base.mask = mask;
}

static void
by_base_add(sim_alloc *a)
{
    if (by_base.n > by_base.mask)
        by_base_grow();
    sim_alloc **chain = &by_base
                             .chains[by_base_slot(a->link.base, by_base.mask)];
    a->hnext = *chain;
    *chain = a;
    by_base.n++;
}

static void
by_base_remove(sim_alloc *a)
{
    sim_alloc **p = &by_base.chains[by_base_slot(a->link.base, by_base.mask)];
    while (*p != a)
        p = &(*p)->hnext;
    *p = a->hnext;
    by_base.n--;
}

/* The record whose base is `base`, or NULL. */
static sim_alloc *
record_at(uintptr_t base)
{
    sim_alloc *a = by_base.chains[by_base_slot(base, by_base.mask)];
    while (a && a->link.base != base)
        a = a->hnext;
    return a;
}

static void
table_insert(sim_alloc *a)
{
    a->link.base = a->base;
    a->link.size = a->size;
    addrtree_insert(&table, &a->link);
    by_base_add(a);
}

/* table_insert before `next`, the first record ending after a's base,
 * which the caller found (NULL: none). */
static void
table_insert_before(sim_alloc *a, sim_alloc *next)
{
    a->link.base = a->base;
    a->link.size = a->size;
    addrtree_insert_before(&table, next ? &next->link : NULL, &a->link);
    by_base_add(a);
}

/* A record never entered (a failed creation) is left alone. */
static void
table_remove(sim_alloc *a)
{
    if (a->link.parent || table.root == &a->link) {
        addrtree_remove(&table, &a->link);
        by_base_remove(a);
    }
}

/* The first record overlapping [addr, addr + len), or NULL. */
static sim_alloc *
table_overlap(uintptr_t addr, size_t len)
{
    sim_alloc *a = record_of(addrtree_after(&table, addr));
    return a && a->base < addr + len ? a : NULL;
}

sim_alloc *
sim_mem_find(uintptr_t addr)
{
    return record_of(addrtree_find(&table, addr));
}

/* Nonzero when [addr, addr + len) touches a device address reserve. */
static int
in_reserve(uintptr_t addr, size_t len)
{
    for (int i = 0; i < sim.ndevices; i++) {
        sim_device *d = sim.devices[i];
        if (d && d->va_base && addr < d->va_base + d->va_size &&
            d->va_base < addr + len)
            return 1;
    }
    return 0;
}

static int
device_kind(sim_mem_kind k)
{
    return k == SIM_MEM_DEVICE || k == SIM_MEM_IPC;
}

CUresult
sim_mem_resolve(uintptr_t addr, size_t len, int want, sim_ref *out)
{
    if (addr == 0 || addr + len < addr)
        return CUDA_ERROR_INVALID_VALUE;
    sim_alloc *a = sim_mem_find(addr);
    if (a) {
        int fits = addr + len <= a->base + a->size;
        if (device_kind(a->kind) || a->kind == SIM_MEM_MANAGED) {
            if (!fits || (device_kind(a->kind) && !(want & SIM_WANT_DEVICE)))
                return CUDA_ERROR_INVALID_VALUE;
        }
        else if (!fits) {
            /* Host memory only partly page-locked is pageable to the
             * driver. */
            a = NULL;
        }
        if (a) {
            out->bytes = a->backing + (addr - a->base);
            out->alloc = a;
            return CUDA_SUCCESS;
        }
    }
    if (!(want & SIM_WANT_HOST) || in_reserve(addr, len))
        return CUDA_ERROR_INVALID_VALUE;
    sim_alloc *o = table_overlap(addr, len);
    if (o && (device_kind(o->kind) || o->kind == SIM_MEM_MANAGED))
        return CUDA_ERROR_INVALID_VALUE;
    out->bytes = (unsigned char *)addr;
    out->alloc = NULL;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Records. */

/* malloc, not calloc: glibc's calloc skips its per-thread cache, which
 * made every allocation and registration a few hundred instructions
 * dearer, by an amount that varied with the heap's state. */
static sim_alloc *
record_new(sim_mem_kind kind, CUcontext ctx)
{
    sim_record *r = malloc(sizeof(*r));
    if (!r)
        return NULL;
    *r = (sim_record){.a = {.kind = kind,
                            .ctx = ctx,
                            .ipc_fd = -1,
                            .buffer_id = next_buffer_id++}};
    return &r->a;
}

static size_t
used_size(const sim_alloc *a)
{
    return round_up(a->size, SIM_ALIGN);
}

/* Reserves device addresses (and device memory) for `size` bytes. */
static CUresult
reserve_device(sim_device *dev, size_t size, uintptr_t *addr)
{
    size_t len = round_up(size, SIM_ALIGN), off;
    if (len == 0 || !dev->heap || len > dev->total_mem - dev->used_mem)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (heap_alloc(dev->heap, len, &off) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    dev->used_mem += len;
    *addr = dev->va_base + off;
    return CUDA_SUCCESS;
}

static void
release_device(sim_device *dev, uintptr_t addr, size_t size)
{
    size_t len = round_up(size, SIM_ALIGN);
    heap_free(dev->heap, addr - dev->va_base, len);
    dev->used_mem -= len;
}

static unsigned char *
map_anon(size_t size, size_t *mapped)
{
    size_t len = round_up(size, page_size());
    if (len == 0)
        return NULL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    *mapped = len;
    return p;
}

/* A record over fresh host-accessible memory, whose address is the one the
 * API hands out, entered in the table; NULL when out of memory (lock
 * held). */
static sim_alloc *
host_record_new(sim_mem_kind kind, CUcontext ctx, size_t bytesize,
                unsigned flags)
{
    sim_alloc *a = record_new(kind, ctx);
    if (!a)
        return NULL;
    a->size = bytesize;
    a->flags = flags;
    a->backing = map_anon(bytesize, &a->backing_size);
    a->base = (uintptr_t)a->backing;
    if (!a->backing) {
        free((sim_record *)a);
        return NULL;
    }
    table_insert(a);
    return a;
}

/* Unlinks and frees a record and everything it owns (lock held). */
static void
record_free(sim_alloc *a)
{
    /* Every record has a context: its creators take it from sim_ctx_get
     * or check it (sim_mem_add). */
    sim_device *dev = a->ctx->dev;
    table_remove(a);
    switch (a->kind) {
    case SIM_MEM_DEVICE:
        if (a->ipc_name[0] || a->ipc_fd >= 0)
            sim_ipc_forget(a);
        if (a->pool) {
            sim_pool_block_freed(a);
        }
        else {
            munmap(a->backing, a->backing_size);
            release_device(dev, a->base, a->size);
        }
        sim.live.device_allocations--;
        sim.live.device_bytes -= a->size;
        break;
    case SIM_MEM_HOST:
        munmap(a->backing, a->backing_size);
        sim.live.host_allocations--;
        sim.live.host_bytes -= a->size;
        break;
    case SIM_MEM_REGISTERED:
        sim.live.registrations--;
        sim.live.registered_bytes -= a->size;
        break;
    case SIM_MEM_MANAGED:
        munmap(a->backing, a->backing_size);
        dev->used_mem -= used_size(a);
        sim.live.managed_allocations--;
        sim.live.managed_bytes -= a->size;
        break;
    case SIM_MEM_IPC:
        munmap(a->backing, a->backing_size);
        release_device(dev, a->base, a->size);
        sim.live.ipc_open--;
        break;
    }
    free((sim_record *)a);
}

void
sim_mem_free(sim_alloc *a)
{
    record_free(a);
}

void
sim_mem_release_ctx(CUcontext ctx)
{
    sim_alloc *next;
    for (sim_alloc *a = record_of(addrtree_first(&table)); a; a = next) {
        next = record_of(addrtree_next(&a->link));
        if (a->ctx == ctx)
            record_free(a);
    }
    /* Pool blocks kept for reuse go with the context's work. */
    sim_pool_release_device(ctx->dev);
}

int
sim_mem_ctx_busy(CUcontext ctx)
{
    for (addrnode *n = addrtree_first(&table); n; n = addrtree_next(n)) {
        sim_alloc *a = record_of(n);
        if (a->ctx == ctx && sim_range_busy(a->base, a->size, 0))
            return 1;
    }
    return 0;
}

sim_alloc *
sim_mem_quiesce(sim_alloc *a)
{
    uintptr_t base = a->base;
    size_t size = a->size; /* a may be freed while we wait */
    unsigned long long id = a->buffer_id;
    if (!sim_range_busy(base, size, 1))
        return a;
    do
        pthread_cond_wait(&sim.progress, &sim.lock);
    while (sim_range_busy(base, size, 1));
    a = record_at(base);
    return a && a->buffer_id == id ? a : NULL;
}

CUresult
sim_mem_add(sim_mem_kind kind, CUcontext ctx, unsigned char *backing,
            size_t size, sim_alloc **out)
{
    if (size == 0 || !ctx)
        return CUDA_ERROR_INVALID_VALUE;
    sim_alloc *a = record_new(kind, ctx);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->size = size;
    a->backing = backing;
    a->backing_size = size;
    a->base = (uintptr_t)backing;
    if (kind == SIM_MEM_IPC) {
        CUresult r = reserve_device(ctx->dev, size, &a->base);
        if (r != CUDA_SUCCESS) {
            free((sim_record *)a);
            return r;
        }
    }
    if (table_overlap(a->base, size)) {
        if (kind == SIM_MEM_IPC)
            release_device(ctx->dev, a->base, size);
        free((sim_record *)a);
        return CUDA_ERROR_INVALID_VALUE;
    }
    table_insert(a);
    *out = a;
    return CUDA_SUCCESS;
}

void
sim_mem_remove(sim_alloc *a)
{
    table_remove(a);
    if (a->kind == SIM_MEM_IPC)
        release_device(a->ctx->dev, a->base, a->size);
    free((sim_record *)a);
}

CUresult
sim_mem_block_new(sim_device *dev, size_t len, int fd, off_t off,
                  uintptr_t *base, unsigned char **backing,
                  size_t *backing_size)
{
    CUresult r = reserve_device(dev, len, base);
    if (r != CUDA_SUCCESS)
        return r;
    if (fd < 0) {
        *backing = map_anon(len, backing_size);
    }
    else {
        *backing_size = round_up(len, page_size());
        void *p = *backing_size == 0
                      ? MAP_FAILED
                      : mmap(NULL, *backing_size, PROT_READ | PROT_WRITE,
                             MAP_SHARED, fd, off);
        *backing = p == MAP_FAILED ? NULL : p;
    }
    if (!*backing) {
        release_device(dev, *base, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

void
sim_mem_block_delete(sim_device *dev, uintptr_t base, size_t len,
                     unsigned char *backing, size_t backing_size)
{
    munmap(backing, backing_size);
    release_device(dev, base, len);
}

size_t
sim_mem_block_granularity(void)
{
    return page_size() > SIM_ALIGN ? page_size() : SIM_ALIGN;
}

void
sim_mem_block_shrink(sim_device *dev, uintptr_t base, size_t len,
                     unsigned char *backing, size_t *backing_size, size_t keep)
{
    munmap(backing + keep, *backing_size - keep);
    *backing_size = keep;
    release_device(dev, base + keep, len - keep);
}

CUresult
sim_mem_pool_record(CUcontext ctx, CUmemoryPool pool, uintptr_t base,
                    size_t size, unsigned char *backing, size_t backing_size,
                    sim_alloc **out)
{
    sim_alloc *a = record_new(SIM_MEM_DEVICE, ctx);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->base = base;
    a->size = size;
    a->backing = backing;
    a->backing_size = backing_size;
    a->pool = pool;
    table_insert(a);
    sim.live.device_allocations++;
    sim.live.device_bytes += size;
    *out = a;
    return CUDA_SUCCESS;
}

CUresult
sim_mem_set_size(sim_device *dev, size_t nbytes)
{
    if (nbytes == 0 || dev->used_mem != 0 || !heap_empty(dev->heap))
        return CUDA_ERROR_INVALID_VALUE;
    size_t want = round_up(nbytes, page_size());
    if (want == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (want < MIN_RESERVE)
        want = MIN_RESERVE;
    void *va = mmap(NULL, want, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (va == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct sim_heap *h = heap_new(want);
    if (!h) {
        munmap(va, want);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (dev->va_base)
        munmap((void *)dev->va_base, dev->va_size);
    heap_delete(dev->heap);
    dev->va_base = (uintptr_t)va;
    dev->va_size = want;
    dev->heap = h;
    dev->total_mem = nbytes;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Entry points: device memory. */

SIM_EXPORT CUresult CUDAAPI
cuMemGetInfo(size_t *free_, size_t *total)
{
    SIM_ENTER(cuMemGetInfo);
    CUcontext ctx;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r == CUDA_SUCCESS && (!free_ || !total))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        *free_ = ctx->dev->total_mem - ctx->dev->used_mem;
        *total = ctx->dev->total_mem;
    }
    sim_unlock();
    return r;
}

static CUresult
device_alloc(CUdeviceptr *dptr, size_t bytesize)
{
    CUcontext ctx;
    sim_alloc *a = NULL;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    if (!dptr || bytesize == 0) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    a = record_new(SIM_MEM_DEVICE, ctx);
    if (!a) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    a->size = bytesize;
    r = reserve_device(ctx->dev, bytesize, &a->base);
    if (r != CUDA_SUCCESS)
        goto done;
    a->backing = map_anon(bytesize, &a->backing_size);
    if (!a->backing) {
        release_device(ctx->dev, a->base, bytesize);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    table_insert(a);
    sim.live.device_allocations++;
    sim.live.device_bytes += bytesize;
    *dptr = a->base;
    a = NULL;
done:
    free((sim_record *)a);
    sim_unlock();
    return r;
}

/* Pitches are multiples of 512 bytes, as a GPU's are; that is a multiple of
 * CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, so strict pitches accept
 * them. */
#define PITCH_ALIGN 512

SIM_EXPORT CUresult CUDAAPI
cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                size_t Height, unsigned int ElementSizeBytes)
{
    size_t pitch, bytes;
    CUresult r;

    SIM_ENTER(cuMemAllocPitch);
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 &&
         ElementSizeBytes != 16) ||
        WidthInBytes > SIM_MAX_PITCH)
        return CUDA_ERROR_INVALID_VALUE;
    pitch = (WidthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    if (__builtin_mul_overflow(pitch, Height, &bytes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = device_alloc(dptr, bytes);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

/* Finds the record a free names: `base` must be its base, of `kind` (or
 * managed too, for cuMemFree). */
static CUresult
find_base(uintptr_t base, sim_mem_kind kind, sim_alloc **out)
{
    sim_alloc *a = record_at(base);
    if (!a || (a->kind != kind &&
               !(kind == SIM_MEM_DEVICE && a->kind == SIM_MEM_MANAGED)))
        return CUDA_ERROR_INVALID_VALUE;
    *out = a;
    return CUDA_SUCCESS;
}

/* cuMemFree, cuMemFreeHost and cuMemHostUnregister work in the memory's
 * own context whatever is current, none included (an H100 with driver 580
 * answers so: tests/gpu/driver_facts.json); a current context is still
 * checked. */
static CUresult
free_ctx_check(void)
{
    return sim_ctx_current() != NULL ? sim_ctx_get(NULL) : CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuMemFree(CUdeviceptr dptr)
{
    SIM_ENTER(cuMemFree);
    CUcontext owner;
    sim_alloc *a;
    unsigned long long id;
    sim_lock();
    CUresult r = free_ctx_check();
    if (r != CUDA_SUCCESS || dptr == 0)
        goto done;
    r = find_base(dptr, SIM_MEM_DEVICE, &a);
    if (r != CUDA_SUCCESS)
        goto done;
    owner = a->ctx;
    id = a->buffer_id;
    /* cuMemFree does not wait for work on stream-ordered memory; the
     * simulator does, and the hazard checker says so. */
    if (a->pool && __atomic_load_n(&sim.hazards, __ATOMIC_RELAXED) &&
        sim_range_busy(a->base, a->size, 1))
        sim_hazard_unordered_free(SIM_cuMemFree, a->base, a->size);
    sim_unlock();
    /* The driver serializes frees against the owner's work. */
    r = sim_ctx_drain(owner);
    sim_lock();
    if (r != CUDA_SUCCESS)
        goto done;
    r = find_base(dptr, SIM_MEM_DEVICE, &a);
    if (r == CUDA_SUCCESS && a->buffer_id != id)
        r = CUDA_ERROR_INVALID_VALUE;
    /* And against any other context's work on it (peer copies). */
    if (r == CUDA_SUCCESS && !(a = sim_mem_quiesce(a)))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        record_free(a);
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    SIM_ENTER(cuMemGetAddressRange);
    CUcontext ctx;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r == CUDA_SUCCESS) {
        sim_alloc *a = sim_mem_find(dptr);
        if (!a) {
            r = CUDA_ERROR_NOT_FOUND;
        }
        else {
            if (pbase)
                *pbase = a->base;
            if (psize)
                *psize = a->size;
        }
    }
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Entry points: page-locked host memory. */

static CUresult
host_alloc(void **pp, size_t bytesize, unsigned flags)
{
    CUcontext ctx;
    sim_alloc *a = NULL;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    if (!pp || bytesize == 0 ||
        (flags &
         ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                     CU_MEMHOSTALLOC_WRITECOMBINED))) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    a = host_record_new(SIM_MEM_HOST, ctx, bytesize, flags);
    if (!a) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    sim.live.host_allocations++;
    sim.live.host_bytes += bytesize;
    *pp = a->backing;
    a = NULL;
done:
    free((sim_record *)a);
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemFreeHost(void *p)
{
    SIM_ENTER(cuMemFreeHost);
    sim_alloc *a;
    sim_lock();
    CUresult r = free_ctx_check();
    if (r == CUDA_SUCCESS)
        r = find_base((uintptr_t)p, SIM_MEM_HOST, &a);
    /* Queued copies into the pages finish before they are unmapped. */
    if (r == CUDA_SUCCESS && !(a = sim_mem_quiesce(a)))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        record_free(a);
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    SIM_ENTER(cuMemHostGetDevicePointer);
    CUcontext ctx;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r == CUDA_SUCCESS) {
        sim_alloc *a = sim_mem_find((uintptr_t)p);
        if (!pdptr || Flags != 0 || !a ||
            (a->kind != SIM_MEM_HOST && a->kind != SIM_MEM_REGISTERED))
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *pdptr = (CUdeviceptr)p; /* unified addressing */
    }
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    SIM_ENTER(cuMemHostGetFlags);
    CUcontext ctx;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r == CUDA_SUCCESS) {
        sim_alloc *a = sim_mem_find((uintptr_t)p);
        if (!pFlags || !a ||
            (a->kind != SIM_MEM_HOST && a->kind != SIM_MEM_REGISTERED))
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *pFlags = a->flags;
    }
    sim_unlock();
    return r;
}

static CUresult
host_register(void *p, size_t bytesize, unsigned flags)
{
    CUcontext ctx;
    uintptr_t addr = (uintptr_t)p;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    if (!p || bytesize == 0 || addr + bytesize < addr ||
        (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE |
                             CU_MEMHOSTREGISTER_DEVICEMAP |
                             CU_MEMHOSTREGISTER_IOMEMORY |
                             CU_MEMHOSTREGISTER_READ_ONLY)) ||
        in_reserve(addr, bytesize)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    /* The first record ending after addr: overlapping, or the one the new
     * record goes before. */
    sim_alloc *o = record_of(addrtree_after(&table, addr));
    if (o && o->base < addr + bytesize) {
        r = o->kind == SIM_MEM_HOST || o->kind == SIM_MEM_REGISTERED
                ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                : CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    sim_alloc *a = record_new(SIM_MEM_REGISTERED, ctx);
    if (!a) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    a->base = addr;
    a->size = bytesize;
    a->backing = p;
    a->backing_size = bytesize;
    a->flags = flags;
    table_insert_before(a, o);
    sim.live.registrations++;
    sim.live.registered_bytes += bytesize;
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemHostUnregister(void *p)
{
    SIM_ENTER(cuMemHostUnregister);
    sim_lock();
    CUresult r = free_ctx_check();
    if (r == CUDA_SUCCESS) {
        sim_alloc *a = record_at((uintptr_t)p);
        if (!p || !a || a->kind != SIM_MEM_REGISTERED ||
            !(a = sim_mem_quiesce(a)))
            r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
        else
            record_free(a);
    }
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Entry points: managed memory. */

SIM_EXPORT CUresult CUDAAPI
cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    SIM_ENTER(cuMemAllocManaged);
    CUcontext ctx;
    sim_alloc *a = NULL;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    if (!dptr || bytesize == 0 ||
        (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    sim_device *dev = ctx->dev;
    size_t len = round_up(bytesize, SIM_ALIGN);
    if (len == 0 || len > dev->total_mem - dev->used_mem) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    a = host_record_new(SIM_MEM_MANAGED, ctx, bytesize, flags);
    if (!a) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    dev->used_mem += len;
    sim.live.managed_allocations++;
    sim.live.managed_bytes += bytesize;
    *dptr = a->base;
    a = NULL;
done:
    free((sim_record *)a);
    sim_unlock();
    return r;
}

/* The managed allocation holding [addr, addr + count), or NULL. */
static sim_alloc *
find_managed(uintptr_t addr, size_t count)
{
    sim_alloc *a = sim_mem_find(addr);
    if (!a || a->kind != SIM_MEM_MANAGED || count == 0 ||
        addr + count < addr || addr + count > a->base + a->size)
        return NULL;
    return a;
}

static CUresult
check_location(CUmemLocation loc)
{
    switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return sim_device_get(loc.id) ? CUDA_SUCCESS
                                      : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        return loc.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUmemLocation
location_of(CUdevice dev)
{
    CUmemLocation loc;
    memset(&loc, 0, sizeof(loc));
    if (dev == CU_DEVICE_CPU) {
        loc.type = CU_MEM_LOCATION_TYPE_HOST;
    }
    else {
        loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
        loc.id = dev;
    }
    return loc;
}

static void
run_nothing(sim_op *op)
{
    (void)op;
}

static CUresult
prefetch(CUdeviceptr devPtr, size_t count, CUmemLocation loc, unsigned flags,
         CUstream hStream, int ptds)
{
    CUcontext ctx;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r == CUDA_SUCCESS && (!find_managed(devPtr, count) || flags != 0))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = check_location(loc);
    sim_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    sim_op *op = calloc(1, sizeof(*op));
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->run = run_nothing;
    op->entry = SIM_cuMemPrefetchAsync;
    op->ranges[0].addr = devPtr;
    op->ranges[0].len = count;
    op->nranges = 1;
    r = sim_stream_submit(hStream, ptds, op, SIM_ASYNC);
    if (r != CUDA_SUCCESS)
        return r;
    /* What LAST_PREFETCH_LOCATION answers: the request, not its state. */
    sim_lock();
    sim_alloc *a = find_managed(devPtr, count);
    if (a)
        ((sim_record *)a)->last_prefetch = loc;
    sim_unlock();
    return CUDA_SUCCESS;
}

static CUresult
advise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
       CUmemLocation loc)
{
    CUcontext ctx;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    sim_alloc *a = find_managed(devPtr, count);
    if (!a || advice < CU_MEM_ADVISE_SET_READ_MOSTLY ||
        advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    /* Read-mostly advice ignores the location. */
    if (advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
        advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY) {
        r = check_location(loc);
        if (r != CUDA_SUCCESS)
            goto done;
    }
    sim_record *rec = (sim_record *)a;
    unsigned bit = loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? 1u << loc.id
                                                           : ACCESSED_BY_HOST;
    switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
        rec->read_mostly = 1;
        break;
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
        rec->read_mostly = 0;
        break;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
        rec->preferred = loc;
        break;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
        memset(&rec->preferred, 0, sizeof(rec->preferred));
        break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
        rec->accessed_by |= bit;
        break;
    default:
        rec->accessed_by &= ~bit;
        break;
    }
done:
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Entry points: pointer attributes. */

static CUmemorytype
memory_type(const sim_alloc *a)
{
    return a->kind == SIM_MEM_HOST || a->kind == SIM_MEM_REGISTERED
               ? CU_MEMORYTYPE_HOST
               : CU_MEMORYTYPE_DEVICE;
}

/* Writes one attribute of ptr (a: its record, NULL when unknown, which
 * gives the zero values cuPointerGetAttributes documents). */
static CUresult
get_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr,
              const sim_alloc *a)
{
    int host_ok = a && !device_kind(a->kind);
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a ? a->ctx : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = a ? (unsigned)memory_type(a) : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (a && !sim_ctx_current())
            return CUDA_ERROR_INVALID_CONTEXT;
        *(CUdeviceptr *)data = a ? ptr : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = host_ok ? (void *)ptr : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned int *)data = a ? (unsigned)a->sync_memops : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = a ? a->buffer_id : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = a && a->kind == SIM_MEM_MANAGED;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = !a        ? -2
                       : a->pool ? sim_pool_device(a->pool)->ordinal
                                 : a->ctx->dev->ordinal;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned int *)data = a && a->kind == SIM_MEM_DEVICE && !a->pool;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = a ? a->base : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = a ? (void *)a->base : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = a ? a->size : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned int *)data = a != NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned int *)
            data = !a ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE
                   : (a->kind == SIM_MEM_REGISTERED &&
                      (a->flags & CU_MEMHOSTREGISTER_READ_ONLY))
                       ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ
                       : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = a ? a->pool : NULL;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_EXPORT CUresult CUDAAPI
cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                      CUdeviceptr ptr)
{
    SIM_ENTER(cuPointerGetAttribute);
    sim_lock();
    const sim_alloc *a = sim_mem_find(ptr);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (data && a) {
        if (attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER &&
            device_kind(a->kind))
            r = CUDA_ERROR_INVALID_VALUE;
        else if (attribute == CU_POINTER_ATTRIBUTE_P2P_TOKENS)
            r = CUDA_ERROR_NOT_SUPPORTED;
        else
            r = get_attribute(data, attribute, ptr, a);
    }
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuPointerGetAttributes(unsigned int numAttributes,
                       CUpointer_attribute *attributes, void **data,
                       CUdeviceptr ptr)
{
    SIM_ENTER(cuPointerGetAttributes);
    if (numAttributes == 0 || !attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes; i++)
        if (!data[i] || attributes[i] == CU_POINTER_ATTRIBUTE_P2P_TOKENS)
            return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    const sim_alloc *a = sim_mem_find(ptr);
    CUresult r = CUDA_SUCCESS;
    for (unsigned i = 0; i < numAttributes && r == CUDA_SUCCESS; i++)
        r = get_attribute(data[i], attributes[i], ptr, a);
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuPointerSetAttribute(const void *value, CUpointer_attribute attribute,
                      CUdeviceptr ptr)
{
    SIM_ENTER(cuPointerSetAttribute);
    if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned on = *(const unsigned int *)value;
    sim_lock();
    sim_alloc *a = sim_mem_find(ptr);
    CUresult r = CUDA_SUCCESS;
    if (!a)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (on) {
        /* cuda.h: returns once pending synchronous operations are done;
         * waiting for every operation on the range covers them. */
        a = sim_mem_quiesce(a);
        if (a)
            a->sync_memops = 1;
        else
            r = CUDA_ERROR_INVALID_VALUE;
    }
    else {
        a->sync_memops = 0;
    }
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Entry points: managed memory range attributes. */

/* A location as the 32-bit device answers read it: CU_DEVICE_CPU for the
 * host, CU_DEVICE_INVALID for none. */
static int
location_device(CUmemLocation loc)
{
    switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return loc.id;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return CU_DEVICE_CPU;
    default:
        return CU_DEVICE_INVALID;
    }
}

/* Lock held; rec is the managed allocation holding the range. */
static CUresult
range_attribute(void *data, size_t size, CUmem_range_attribute attr,
                const sim_record *rec)
{
    int *out = data;
    CUmemLocation loc;

    switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
        size_t n = size / sizeof(int), k = 0;
        if (size == 0 || size % sizeof(int))
            return CUDA_ERROR_INVALID_VALUE;
        for (int d = 0; d < sim.ndevices && k < n; d++)
            if (rec->accessed_by & (1u << d))
                out[k++] = d;
        if ((rec->accessed_by & ACCESSED_BY_HOST) && k < n)
            out[k++] = CU_DEVICE_CPU;
        while (k < n)
            out[k++] = CU_DEVICE_INVALID;
        return CUDA_SUCCESS;
    }
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
        if (size != sizeof(int))
            return CUDA_ERROR_INVALID_VALUE;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
        if (size != sizeof(CUmemLocationType))
            return CUDA_ERROR_INVALID_VALUE;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
        *out = rec->read_mostly;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
        *out = location_device(rec->preferred);
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
        *out = location_device(rec->last_prefetch);
        return CUDA_SUCCESS;
    default:
        break;
    }
    loc = attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE ||
                  attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID
              ? rec->preferred
              : rec->last_prefetch;
    /* The current NUMA node of the only host node is node 0. */
    if (loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
        loc.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        loc.id = 0;
    }
    if (attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE ||
        attr == CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE)
        *(CUmemLocationType *)data = loc.type;
    else
        *out = loc.id;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuMemRangeGetAttribute(void *data, size_t dataSize,
                       CUmem_range_attribute attribute, CUdeviceptr devPtr,
                       size_t count)
{
    SIM_ENTER(cuMemRangeGetAttribute);
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_alloc *a = find_managed(devPtr, count);
    CUresult r = a ? range_attribute(data, dataSize, attribute,
                                     (sim_record *)a)
                   : CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemRangeGetAttributes(void **data, size_t *dataSizes,
                        CUmem_range_attribute *attributes,
                        size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
    SIM_ENTER(cuMemRangeGetAttributes);
    if (!data || !dataSizes || !attributes || numAttributes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < numAttributes; i++)
        if (!data[i])
            return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    sim_alloc *a = find_managed(devPtr, count);
    CUresult r = a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < numAttributes && r == CUDA_SUCCESS; i++)
        r = range_attribute(data[i], dataSizes[i], attributes[i],
                            (sim_record *)a);
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Older ABIs, exported under the plain names the headers now redirect. */

#undef cuMemHostRegister
#undef cuMemPrefetchAsync
#undef cuMemAdvise

static CUresult
prefetch_v8000(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
               CUstream hStream, int ptds)
{
    if (dstDevice != CU_DEVICE_CPU && !sim_device_get(dstDevice))
        return CUDA_ERROR_INVALID_DEVICE;
    return prefetch(devPtr, count, location_of(dstDevice), 0, hStream, ptds);
}

SIM_EXPORT CUresult CUDAAPI
cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
            CUdevice device)
{
    SIM_ENTER(cuMemAdvise);
    if (advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
        advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY && device != CU_DEVICE_CPU &&
        !sim_device_get(device))
        return CUDA_ERROR_INVALID_DEVICE;
    return advise(devPtr, count, advice, location_of(device));
}

/* ---------------------------------------------------------------------------
 * Entry points: one row per exported ABI alias (see SIM_ALIAS_WRAPPER in
 * sim.h); the wrappers of the W rows, then the cuGetProcAddress rows. */

/* clang-format off */
#define MEMORY_ALIASES(W, R)                                                  \
    R(cuMemGetInfo_v2, cuMemGetInfo, 3020, )                                  \
    W(cuMemAlloc_v2, cuMemAlloc, 3020, , device_alloc,                        \
      (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize))                 \
    R(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, )                            \
    R(cuMemFree_v2, cuMemFree, 3020, )                                        \
    R(cuMemGetAddressRange_v2, cuMemGetAddressRange, 3020, )                  \
    W(cuMemAllocHost_v2, cuMemAllocHost, 3020, , host_alloc,                  \
      (void **pp, size_t bytesize), (pp, bytesize, 0))                        \
    W(cuMemHostAlloc, cuMemHostAlloc, 2020, , host_alloc,                     \
      (void **pp, size_t bytesize, unsigned int Flags),                       \
      (pp, bytesize, Flags))                                                  \
    R(cuMemFreeHost, cuMemFreeHost, 2000, )                                   \
    R(cuMemHostGetDevicePointer_v2, cuMemHostGetDevicePointer, 3020, )        \
    R(cuMemHostGetFlags, cuMemHostGetFlags, 2030, )                           \
    W(cuMemHostRegister, cuMemHostRegister, 4000, , host_register,            \
      (void *p, size_t bytesize, unsigned int Flags), (p, bytesize, Flags))   \
    W(cuMemHostRegister_v2, cuMemHostRegister, 6050, , host_register,         \
      (void *p, size_t bytesize, unsigned int Flags), (p, bytesize, Flags))   \
    R(cuMemHostUnregister, cuMemHostUnregister, 4000, )                       \
    R(cuMemAllocManaged, cuMemAllocManaged, 6000, )                           \
    W(cuMemPrefetchAsync, cuMemPrefetchAsync, 8000, , prefetch_v8000,         \
      (CUdeviceptr devPtr, size_t count, CUdevice dstDevice,                  \
      CUstream hStream), (devPtr, count, dstDevice, hStream, 0))              \
    W(cuMemPrefetchAsync_ptsz, cuMemPrefetchAsync, 8000, _ptsz,               \
      prefetch_v8000, (CUdeviceptr devPtr, size_t count, CUdevice dstDevice,  \
      CUstream hStream), (devPtr, count, dstDevice, hStream, 1))              \
    W(cuMemPrefetchAsync_v2, cuMemPrefetchAsync, 12020, , prefetch,           \
      (CUdeviceptr devPtr, size_t count, CUmemLocation location,              \
      unsigned int flags, CUstream hStream),                                  \
      (devPtr, count, location, flags, hStream, 0))                           \
    W(cuMemPrefetchAsync_v2_ptsz, cuMemPrefetchAsync, 12020, _ptsz, prefetch, \
      (CUdeviceptr devPtr, size_t count, CUmemLocation location,              \
      unsigned int flags, CUstream hStream),                                  \
      (devPtr, count, location, flags, hStream, 1))                           \
    R(cuMemAdvise, cuMemAdvise, 8000, )                                       \
    W(cuMemAdvise_v2, cuMemAdvise, 12020, , advise, (CUdeviceptr devPtr,      \
      size_t count, CUmem_advise advice, CUmemLocation location),             \
      (devPtr, count, advice, location))                                      \
    R(cuPointerGetAttribute, cuPointerGetAttribute, 4000, )                   \
    R(cuPointerGetAttributes, cuPointerGetAttributes, 7000, )                 \
    R(cuPointerSetAttribute, cuPointerSetAttribute, 6000, )                   \
    R(cuMemRangeGetAttribute, cuMemRangeGetAttribute, 8000, )                 \
    R(cuMemRangeGetAttributes, cuMemRangeGetAttributes, 8000, )

MEMORY_ALIASES(SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP)

const sim_proc sim_procs_memory[] = {
    MEMORY_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
};
/* clang-format on */
const size_t sim_nprocs_memory = sizeof(sim_procs_memory) /
                                 sizeof(sim_procs_memory[0]);
