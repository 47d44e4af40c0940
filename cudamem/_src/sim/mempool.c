/* mempool.c: the stream-ordered allocator: memory pools (each device's
 * default pool and those cuMemPoolCreate makes), cuMemAllocAsync,
 * cuMemAllocFromPoolAsync, cuMemFreeAsync, pool attributes, access, trimming
 * and the current pool of each device. A pool allocation is a device record
 * of memory.c, so copies, memsets, pointer attributes and the freed-memory
 * checks see it; its block stays reserved in the pool once freed, for reuse,
 * until a trim or a synchronize point gives it back. IPC-capable pools keep
 * their blocks in one memory file, which another process imports by file
 * descriptor, and then its allocations one by one. */
#include "sim.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A block the pool holds and nobody uses: a completed free's. */
typedef struct pool_block {
    uintptr_t base;
    size_t len; /* rounded to SIM_ALIGN, as reserved */
    unsigned char *backing;
    size_t backing_size;
    uint64_t stream_uid;   /* the stream whose free returned it */
    uint64_t ticket;       /* its free's place among frees queued */
    CUcontext blocking_in; /* the context, when that stream is blocking */
    off_t off;             /* in the pool's file (IPC-capable pools) */
    struct pool_block *next;
} pool_block;

/* The REUSE_* attributes, in the order of their CUmemPool_attribute. */
enum { REUSE_EVENTS, REUSE_OPPORTUNISTIC, REUSE_INTERNAL, NREUSE };
#define REUSE_FIRST CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES

struct CUmemPoolHandle_st {
    sim_device *dev;
    int is_default;
    int destroyed; /* destroyed while allocations were outstanding */
    size_t max_size;
    cuuint64_t threshold;
    int reuse[NREUSE];
    size_t reserved, reserved_high, used, used_high;
    unsigned long long outstanding; /* allocations not yet returned */
    CUmemAccess_flags access[SIM_MAX_DEVICES];
    CUmemAllocationHandleType handle_types;
    int fd;       /* the pool's memory file, or -1 */
    off_t fd_end; /* file offsets below this were handed out */
    int imported; /* made by cuMemPoolImportFromShareableHandle */
    pool_block *cache;
    struct CUmemPoolHandle_st *next;
};

static CUmemoryPool pools; /* every live pool, default ones too */
static CUmemoryPool default_pool[SIM_MAX_DEVICES];
static CUmemoryPool current_pool[SIM_MAX_DEVICES];

/* A queued cuMemFreeAsync. */
typedef struct free_op {
    sim_op op;
    uintptr_t base;
    unsigned long long buffer_id;
    uint64_t ticket; /* frees_queued once it was queued */
} free_op;

/* Set by a stream-ordered free while it returns a block, so that the block
 * remembers which stream freed it, and when. */
static __thread const free_op *tls_freeing;

/* Stream-ordered frees queued so far (lock held). */
static uint64_t frees_queued;

static size_t
block_len(size_t size)
{
    return size > SIZE_MAX - (SIM_ALIGN - 1)
               ? 0
               : (size + SIM_ALIGN - 1) & ~(size_t)(SIM_ALIGN - 1);
}

static size_t
block_pages(size_t len)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    return (len + ps - 1) & ~(ps - 1);
}

static CUmemoryPool
pool_new(sim_device *dev, size_t max_size)
{
    CUmemoryPool p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->fd = -1;
    p->dev = dev;
    p->max_size = max_size;
    for (int i = 0; i < NREUSE; i++)
        p->reuse[i] = 1;
    p->access[dev->ordinal] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    p->next = pools;
    pools = p;
    return p;
}

/* Nonzero for a pool handle the application may use. */
static int
pool_live(CUmemoryPool p)
{
    for (CUmemoryPool q = pools; q; q = q->next)
        if (q == p)
            return !p->destroyed;
    return 0;
}

static void
pool_unlink_free(CUmemoryPool p)
{
    CUmemoryPool *pp = &pools;
    while (*pp != p)
        pp = &(*pp)->next;
    *pp = p->next;
    if (p->fd >= 0)
        close(p->fd);
    free(p);
}

/* The default pool of dev, made on first use; NULL when out of memory. */
static CUmemoryPool
default_of(sim_device *dev)
{
    if (!default_pool[dev->ordinal]) {
        default_pool[dev->ordinal] = pool_new(dev, 0);
        if (default_pool[dev->ordinal])
            default_pool[dev->ordinal]->is_default = 1;
    }
    return default_pool[dev->ordinal];
}

static CUmemoryPool
current_of(sim_device *dev)
{
    return current_pool[dev->ordinal] ? current_pool[dev->ordinal]
                                      : default_of(dev);
}

/* Whether a synchronize that waited for `c` gives b back (NULL: a context
 * synchronize or a trim). A synchronous free's block (stream 0) is
 * ordered before everything. */
static int
covered(const pool_block *b, const sim_pool_cover *c)
{
    if (c == NULL || b->stream_uid == 0)
        return 1;
    if (b->ticket > c->frees)
        return 0;
    return b->stream_uid == c->stream_uid ||
           (c->legacy_of != NULL && b->blocking_in == c->legacy_of);
}

/* Gives back b's end, as much of it as takes the pool down to `keep`
 * and no further: a GPU's pool over its threshold gives back part of a
 * block (64 MiB freed, threshold 32 MiB: 32 MiB stay reserved, seen on
 * an H100). */
static void
block_shrink(CUmemoryPool p, pool_block *b, size_t keep)
{
    size_t gran = sim_mem_block_granularity();
    size_t cut = (p->reserved - keep) / gran * gran;
    size_t old_size = b->backing_size;

    if (cut == 0 || cut >= b->len || (b->len - cut) % gran != 0)
        return;
    sim_mem_block_shrink(p->dev, b->base, b->len, b->backing, &b->backing_size,
                         b->len - cut);
    if (p->fd >= 0)
        fallocate(p->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  b->off + (off_t)b->backing_size,
                  (off_t)(old_size - b->backing_size));
    b->len -= cut;
    p->reserved -= cut;
}

/* Gives unused blocks that `cover` covers back to the device while the
 * pool holds more than `keep` bytes, never going below it (as
 * cuMemPoolTrimTo guarantees). */
static void
pool_release_covered(CUmemoryPool p, size_t keep, const sim_pool_cover *cover)
{
    pool_block **bp = &p->cache;
    while (*bp && p->reserved > keep) {
        pool_block *b = *bp;
        if (!covered(b, cover)) {
            bp = &b->next;
            continue;
        }
        if (p->reserved - b->len < keep) {
            block_shrink(p, b, keep);
            bp = &b->next;
            continue;
        }
        *bp = b->next;
        sim_mem_block_delete(p->dev, b->base, b->len, b->backing,
                             b->backing_size);
        /* The file's pages go too (an importer may still map them). */
        if (p->fd >= 0)
            fallocate(p->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      b->off, (off_t)b->backing_size);
        p->reserved -= b->len;
        free(b);
    }
}

static void
pool_release(CUmemoryPool p, size_t keep)
{
    pool_release_covered(p, keep, NULL);
}

void
sim_pool_block_freed(sim_alloc *a)
{
    CUmemoryPool p = a->pool;
    size_t len = block_len(a->size);
    pool_block *b = NULL;

    p->outstanding--;
    if (p->imported) {
        /* The exporter's memory: only this process's mapping goes. */
        sim_mem_block_delete(p->dev, a->base, len, a->backing,
                             a->backing_size);
    }
    else {
        p->used -= len;
        b = calloc(1, sizeof(*b));
    }
    if (b) {
        b->base = a->base;
        b->len = len;
        b->backing = a->backing;
        b->backing_size = a->backing_size;
        if (tls_freeing != NULL) {
            b->stream_uid = sim_op_stream_uid(&tls_freeing->op);
            b->ticket = tls_freeing->ticket;
            b->blocking_in = sim_op_blocking_ctx(&tls_freeing->op);
        }
        b->off = a->pool_off;
        b->next = p->cache;
        p->cache = b;
    }
    else if (!p->imported) {
        /* Cannot keep it: give it back at once. */
        sim_mem_block_delete(p->dev, a->base, len, a->backing,
                             a->backing_size);
        p->reserved -= len;
    }
    if (p->destroyed && p->outstanding == 0) {
        pool_release(p, 0);
        pool_unlink_free(p);
    }
}

void
sim_pool_sync(const sim_pool_cover *cover)
{
    for (CUmemoryPool p = pools; p; p = p->next)
        if (p->reserved > p->threshold)
            pool_release_covered(p, p->threshold, cover);
}

uint64_t
sim_pool_frees_queued(void)
{
    return frees_queued;
}

void
sim_pool_release_device(sim_device *dev)
{
    for (CUmemoryPool p = pools; p; p = p->next)
        if (p->dev == dev)
            pool_release(p, 0);
}

sim_device *
sim_pool_device(CUmemoryPool pool)
{
    return pool->dev;
}

/* ---------------------------------------------------------------------------
 * Allocating and freeing. */

/* A cached block of exactly len bytes this allocation may take: any
 * completed free may be reused (ALLOW_OPPORTUNISTIC); without it only one
 * freed on the allocating stream, which is ordered before it, or by a
 * synchronous free (stream_uid 0), which is ordered before everything. */
static pool_block *
take_cached(CUmemoryPool p, size_t len, uint64_t stream_uid)
{
    for (pool_block **bp = &p->cache; *bp; bp = &(*bp)->next) {
        pool_block *b = *bp;
        if (b->len != len)
            continue;
        if (!p->reuse[REUSE_OPPORTUNISTIC] && b->stream_uid != 0 &&
            b->stream_uid != stream_uid)
            continue;
        *bp = b->next;
        return b;
    }
    return NULL;
}

/* Lock held. A block of len bytes from p: reused, or new from the device
 * (after giving back p's unused blocks when the device is full). */
static CUresult
pool_block_get(CUmemoryPool p, size_t len, uint64_t stream_uid,
               pool_block *out)
{
    pool_block *b = take_cached(p, len, stream_uid);
    CUresult r;

    if (b) {
        *out = *b;
        free(b);
        return CUDA_SUCCESS;
    }
    if (p->max_size && (len > p->max_size || p->reserved > p->max_size - len))
        pool_release(p, p->max_size > len ? p->max_size - len : 0);
    if (p->max_size && (len > p->max_size || p->reserved > p->max_size - len))
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* An IPC-capable pool's blocks each get pages of its file. */
    out->off = p->fd_end;
    if (p->fd >= 0 && ftruncate(p->fd, out->off + (off_t)block_pages(len)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = sim_mem_block_new(p->dev, len, p->fd, out->off, &out->base,
                          &out->backing, &out->backing_size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && p->cache) {
        pool_release(p, 0);
        r = sim_mem_block_new(p->dev, len, p->fd, out->off, &out->base,
                              &out->backing, &out->backing_size);
    }
    if (r != CUDA_SUCCESS)
        return r;
    if (p->fd >= 0)
        p->fd_end += (off_t)out->backing_size;
    out->len = len;
    p->reserved += len;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    return CUDA_SUCCESS;
}

static void
run_nothing(sim_op *op)
{
    (void)op;
}

/* pool NULL: the current pool of the stream's device. */
static CUresult
alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
            CUstream hStream, int ptds, sim_entry entry)
{
    CUcontext ctx;
    uint64_t uid;
    pool_block b;
    sim_alloc *a;
    CUresult r = sim_stream_check(hStream, ptds, &uid);

    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    /* Imported pools only map the exporter's allocations. */
    if (!dptr || bytesize == 0 ||
        (entry == SIM_cuMemAllocFromPoolAsync &&
         (!pool_live(pool) || pool->imported))) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (!pool && !(pool = current_of(ctx->dev))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    size_t len = block_len(bytesize);
    if (len == 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    r = pool_block_get(pool, len, uid, &b);
    if (r != CUDA_SUCCESS)
        goto done;
    r = sim_mem_pool_record(ctx, pool, b.base, bytesize, b.backing,
                            b.backing_size, &a);
    if (r != CUDA_SUCCESS) {
        sim_mem_block_delete(pool->dev, b.base, len, b.backing,
                             b.backing_size);
        pool->reserved -= len;
        goto done;
    }
    a->pool_off = b.off;
    pool->used += len;
    pool->outstanding++;
    if (pool->used > pool->used_high)
        pool->used_high = pool->used;
    sim_op *op = calloc(1, sizeof(*op));
    if (!op) {
        sim_mem_free(a);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    /* The allocation is an operation of the stream that writes the range:
     * work on it not ordered after it is a race. */
    op->run = run_nothing;
    op->entry = entry;
    op->ranges[0].addr = a->base;
    op->ranges[0].len = bytesize;
    op->ranges[0].write = 1;
    op->ranges[0].buffer_id = a->buffer_id;
    op->nranges = 1;
    CUdeviceptr base = a->base;
    unsigned long long id = a->buffer_id;
    sim_unlock();
    r = sim_stream_submit(hStream, ptds, op, SIM_ASYNC_INLINE);
    sim_lock();
    if (r == CUDA_SUCCESS) {
        *dptr = base;
    }
    else {
        a = sim_mem_find(base);
        if (a && a->base == base && a->buffer_id == id)
            sim_mem_free(a);
    }
done:
    sim_unlock();
    return r;
}

/* The stream reached the free: the block goes back to its pool. */
static void
free_run(sim_op *op)
{
    free_op *f = (free_op *)op;
    sim_alloc *a;

    sim_lock();
    a = sim_mem_find(f->base);
    if (a && a->base == f->base && a->buffer_id == f->buffer_id) {
        tls_freeing = f;
        sim_mem_free(a);
        tls_freeing = NULL;
    }
    sim_unlock();
}

static CUresult
free_async(CUdeviceptr dptr, CUstream hStream, int ptds)
{
    CUcontext ctx;
    free_op *f;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    sim_alloc *a = r == CUDA_SUCCESS ? sim_mem_find(dptr) : NULL;
    if (r == CUDA_SUCCESS && (!a || a->base != dptr || !a->pool))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS) {
        sim_unlock();
        return r;
    }
    f = calloc(1, sizeof(*f));
    if (!f) {
        sim_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    f->base = a->base;
    f->buffer_id = a->buffer_id;
    f->ticket = ++frees_queued;
    f->op.run = free_run;
    f->op.entry = SIM_cuMemFreeAsync;
    f->op.ranges[0].addr = a->base;
    f->op.ranges[0].len = a->size;
    f->op.ranges[0].write = 1;
    f->op.ranges[0].buffer_id = a->buffer_id;
    f->op.nranges = 1;
    sim_unlock();
    return sim_stream_submit(hStream, ptds, &f->op, SIM_ASYNC_INLINE);
}

/* ---------------------------------------------------------------------------
 * Pools. */

SIM_EXPORT CUresult CUDAAPI
cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    SIM_ENTER(cuMemPoolCreate);
    CUresult r = CUDA_SUCCESS;
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->win32SecurityAttributes)
        return CUDA_ERROR_INVALID_VALUE;
    switch (props->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        /* HOST_MEMORY_POOLS_SUPPORTED and its NUMA twin are 0. */
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* MEMPOOL_SUPPORTED_HANDLE_TYPES: POSIX file descriptors. */
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
        props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int fd = -1;
    if (props->handleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
        (fd = memfd_create("cusim-pool", MFD_CLOEXEC)) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    sim_device *dev = sim_device_get(props->location.id);
    if (!dev)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!(*pool = pool_new(dev, props->maxSize)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        (*pool)->handle_types = props->handleTypes;
        (*pool)->fd = fd;
    }
    else if (fd >= 0) {
        close(fd);
    }
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemPoolDestroy(CUmemoryPool pool)
{
    SIM_ENTER(cuMemPoolDestroy);
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    if (!pool_live(pool) || pool->is_default) {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    else {
        if (current_pool[pool->dev->ordinal] == pool)
            current_pool[pool->dev->ordinal] = NULL;
        /* Outstanding allocations keep it until they are freed. */
        pool->destroyed = 1;
        if (pool->outstanding == 0) {
            pool_release(pool, 0);
            pool_unlink_free(pool);
        }
    }
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    SIM_ENTER(cuMemPoolSetAttribute);
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    if (!pool_live(pool) || !value) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attr - REUSE_FIRST] = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        /* Only a reset to the current value: setting nonzero is illegal. */
        if (*(cuuint64_t *)value != 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            pool->reserved_high = pool->reserved;
        else
            pool->used_high = pool->used;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    SIM_ENTER(cuMemPoolGetAttribute);
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    if (!pool_live(pool) || !value) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = pool->reuse[attr - REUSE_FIRST];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = pool->threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        *(cuuint64_t *)value = pool->reserved;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = pool->reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = pool->used;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = pool->used_high;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    SIM_ENTER(cuMemPoolTrimTo);
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    if (!pool_live(pool))
        r = CUDA_ERROR_INVALID_VALUE;
    else
        pool_release(pool, minBytesToKeep);
    sim_unlock();
    return r;
}

/* Lock held. The device a location names, for access: devices only. */
static sim_device *
access_device(const CUmemLocation *loc)
{
    return loc && loc->type == CU_MEM_LOCATION_TYPE_DEVICE
               ? sim_device_get(loc->id)
               : NULL;
}

SIM_EXPORT CUresult CUDAAPI
cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    SIM_ENTER(cuMemPoolSetAccess);
    CUresult r = CUDA_SUCCESS;
    size_t i;
    sim_lock();
    if (!pool_live(pool) || (!map && count > 0)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    /* All or nothing: check every descriptor first. */
    for (i = 0; i < count; i++) {
        sim_device *d = access_device(&map[i].location);
        if (!d || (map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
                   map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto done;
        }
        /* The pool's own device always has access. */
        if (d == pool->dev &&
            map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto done;
        }
    }
    for (i = 0; i < count; i++)
        pool->access[map[i].location.id] = map[i].flags;
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                   CUmemLocation *location)
{
    SIM_ENTER(cuMemPoolGetAccess);
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    sim_device *d = access_device(location);
    if (!flags || !pool_live(memPool) || !d)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = memPool->access[d->ordinal];
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Pool IPC: the pool's file by descriptor, then each allocation by its
 * offset in the file. */

#define POOL_PTR_MAGIC 0x50505043u /* "CPPP" */

typedef struct pool_ptr_wire {
    uint32_t magic;
    uint32_t pid;
    uint64_t off;
    uint64_t size;
} pool_ptr_wire;

_Static_assert(sizeof(pool_ptr_wire) <= sizeof(CUmemPoolPtrExportData),
               "export data layout");

SIM_EXPORT CUresult CUDAAPI
cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                 CUmemAllocationHandleType handleType,
                                 unsigned long long flags)
{
    SIM_ENTER(cuMemPoolExportToShareableHandle);
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    if (!handle_out || !pool_live(pool) || flags != 0 || pool->imported ||
        handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        !(pool->handle_types & handleType))
        r = CUDA_ERROR_INVALID_VALUE;
    else if ((*(int *)handle_out = fcntl(pool->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                   CUmemAllocationHandleType handleType,
                                   unsigned long long flags)
{
    SIM_ENTER(cuMemPoolImportFromShareableHandle);
    /* A POSIX descriptor is passed as the handle's value. */
    int fd = (int)(intptr_t)handle, dup_fd;
    CUcontext ctx;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    if (!pool_out || flags != 0 ||
        handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        (dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    CUmemoryPool p = pool_new(ctx->dev, 0);
    if (!p) {
        close(dup_fd);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    p->imported = 1;
    p->handle_types = handleType;
    p->fd = dup_fd;
    *pool_out = p;
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    SIM_ENTER(cuMemPoolExportPointer);
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    sim_alloc *a = sim_mem_find(ptr);
    if (!shareData_out || !a || a->base != ptr || !a->pool ||
        a->pool->fd < 0 || a->pool->imported) {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    else {
        pool_ptr_wire w = {POOL_PTR_MAGIC, (uint32_t)getpid(),
                           (uint64_t)a->pool_off, a->size};
        memset(shareData_out, 0, sizeof(*shareData_out));
        memcpy(shareData_out, &w, sizeof(w));
    }
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                       CUmemPoolPtrExportData *shareData)
{
    SIM_ENTER(cuMemPoolImportPointer);
    pool_ptr_wire w;
    CUcontext ctx;
    uintptr_t base;
    unsigned char *backing;
    size_t backing_size;
    sim_alloc *a;
    struct stat st;
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        goto done;
    if (shareData)
        memcpy(&w, shareData, sizeof(w));
    if (!ptr_out || !shareData || !pool_live(pool) || !pool->imported ||
        w.magic != POOL_PTR_MAGIC || w.size == 0 ||
        fstat(pool->fd, &st) != 0 || w.off > (uint64_t)st.st_size ||
        w.size > (uint64_t)st.st_size - w.off) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    size_t len = block_len(w.size);
    r = sim_mem_block_new(pool->dev, len, pool->fd, (off_t)w.off, &base,
                          &backing, &backing_size);
    if (r != CUDA_SUCCESS)
        goto done;
    r = sim_mem_pool_record(ctx, pool, base, w.size, backing, backing_size,
                            &a);
    if (r != CUDA_SUCCESS) {
        sim_mem_block_delete(pool->dev, base, len, backing, backing_size);
        goto done;
    }
    pool->outstanding++;
    *ptr_out = base;
done:
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Default and current pools. */

SIM_EXPORT CUresult CUDAAPI
cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    SIM_ENTER(cuDeviceGetDefaultMemPool);
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    sim_device *d = sim_device_get(dev);
    if (!pool_out)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!d)
        r = CUDA_ERROR_INVALID_DEVICE;
    else if (!(*pool_out = default_of(d)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    SIM_ENTER(cuDeviceGetMemPool);
    CUresult r = CUDA_SUCCESS;
    sim_lock();
    sim_device *d = sim_device_get(dev);
    if (!pool || !d)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!(*pool = current_of(d)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    sim_unlock();
    return r;
}

/* Lock held. */
static CUresult
set_pool(sim_device *d, CUmemoryPool pool)
{
    if (!d || !pool_live(pool) || pool->dev != d)
        return CUDA_ERROR_INVALID_VALUE;
    current_pool[d->ordinal] = pool;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    SIM_ENTER(cuDeviceSetMemPool);
    sim_lock();
    CUresult r = set_pool(sim_device_get(dev), pool);
    sim_unlock();
    return r;
}

/* The device of a (location, type) pair of the cuMem*MemPool calls: only
 * pinned device memory has pools here; host and managed pools are not
 * supported (their device attributes are 0). */
static CUresult
location_device(const CUmemLocation *loc, CUmemAllocationType type,
                sim_device **out)
{
    if (!loc)
        return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_MEM_ALLOCATION_TYPE_MANAGED)
        return loc->type == CU_MEM_LOCATION_TYPE_DEVICE ||
                       loc->type == CU_MEM_LOCATION_TYPE_HOST ||
                       loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
                       loc->type == CU_MEM_LOCATION_TYPE_NONE
                   ? CUDA_ERROR_NOT_SUPPORTED
                   : CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (loc->type == CU_MEM_LOCATION_TYPE_HOST ||
        loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    *out = sim_device_get(loc->id);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIM_EXPORT CUresult CUDAAPI
cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location,
                       CUmemAllocationType type)
{
    SIM_ENTER(cuMemGetDefaultMemPool);
    sim_device *d;
    sim_lock();
    CUresult r = location_device(location, type, &d);
    if (r == CUDA_SUCCESS && !pool_out)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && !(*pool_out = default_of(d)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location,
                CUmemAllocationType type)
{
    SIM_ENTER(cuMemGetMemPool);
    sim_device *d;
    sim_lock();
    CUresult r = location_device(location, type, &d);
    if (r == CUDA_SUCCESS && !pool)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && !(*pool = current_of(d)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type,
                CUmemoryPool pool)
{
    SIM_ENTER(cuMemSetMemPool);
    sim_device *d;
    sim_lock();
    CUresult r = location_device(location, type, &d);
    if (r == CUDA_SUCCESS)
        r = set_pool(d, pool);
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Entry points: one row per exported ABI alias (see SIM_ALIAS_WRAPPER in
 * sim.h); the wrappers of the W rows, then the cuGetProcAddress rows. */

/* clang-format off */
#define MEMPOOL_ALIASES(W, R)                                                 \
    W(cuMemAllocAsync, cuMemAllocAsync, 11020, , alloc_async,                 \
      (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),                 \
      (dptr, bytesize, NULL, hStream, 0, SIM_cuMemAllocAsync))                \
    W(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, _ptsz, alloc_async,       \
      (CUdeviceptr *dptr, size_t bytesize, CUstream hStream),                 \
      (dptr, bytesize, NULL, hStream, 1, SIM_cuMemAllocAsync))                \
    W(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, , alloc_async, \
      (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,                 \
      CUstream hStream),                                                      \
      (dptr, bytesize, pool, hStream, 0, SIM_cuMemAllocFromPoolAsync))        \
    W(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, _ptsz,    \
      alloc_async, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,    \
      CUstream hStream),                                                      \
      (dptr, bytesize, pool, hStream, 1, SIM_cuMemAllocFromPoolAsync))        \
    W(cuMemFreeAsync, cuMemFreeAsync, 11020, , free_async,                    \
      (CUdeviceptr dptr, CUstream hStream), (dptr, hStream, 0))               \
    W(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, _ptsz, free_async,          \
      (CUdeviceptr dptr, CUstream hStream), (dptr, hStream, 1))               \
    R(cuMemPoolCreate, cuMemPoolCreate, 11020, )                              \
    R(cuMemPoolDestroy, cuMemPoolDestroy, 11020, )                            \
    R(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020, )                  \
    R(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020, )                  \
    R(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, )                              \
    R(cuMemPoolSetAccess, cuMemPoolSetAccess, 11020, )                        \
    R(cuMemPoolGetAccess, cuMemPoolGetAccess, 11020, )                        \
    R(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, )          \
    R(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, )                        \
    R(cuDeviceSetMemPool, cuDeviceSetMemPool, 11020, )                        \
    R(cuMemPoolExportToShareableHandle, cuMemPoolExportToShareableHandle,     \
      11020, )                                                                \
    R(cuMemPoolImportFromShareableHandle, cuMemPoolImportFromShareableHandle, \
      11020, )                                                                \
    R(cuMemPoolExportPointer, cuMemPoolExportPointer, 11020, )                \
    R(cuMemPoolImportPointer, cuMemPoolImportPointer, 11020, )                \
    R(cuMemGetDefaultMemPool, cuMemGetDefaultMemPool, 13000, )                \
    R(cuMemGetMemPool, cuMemGetMemPool, 13000, )                              \
    R(cuMemSetMemPool, cuMemSetMemPool, 13000, )

MEMPOOL_ALIASES(SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP)

const sim_proc sim_procs_mempool[] = {
    MEMPOOL_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
};
/* clang-format on */
const size_t sim_nprocs_mempool = sizeof(sim_procs_mempool) /
                                  sizeof(sim_procs_mempool[0]);
