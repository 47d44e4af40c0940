/* pool.c: the device memory pool of pool.h: slabs, blocks, free lists per
 * stream, the events that order reuse across streams, the limit, trim and
 * the drop with the context. The records that hold blocks are memory.c's;
 * slabs come from memory.c's cuMemAlloc with its out-of-memory recovery.
 *
 * Locks: dev->qlock, then pool->lock. Returns and trims run under qlock,
 * so the context cannot go while they record events or free slabs (as
 * release.c frees); pool->lock is held only for bookkeeping and calls that
 * do not block (cuEventQuery, cuStreamQuery). */
#include "pool.h"
#include "lockorder.h"

#include <stdlib.h>

#include "driver.h"
#include "event.h"
#include "history.h"
#include "memory.h"
#include "release.h"
#include "stats.h"
#include "stream.h"

typedef struct cm_pool_slab cm_pool_slab;
typedef struct cm_pool_list cm_pool_list;

struct cm_pool_block {
    cm_pool_block *prev, *next;   /* address neighbours in the slab */
    cm_pool_block *fprev, *fnext; /* its free list, while free */
    cm_pool_slab *slab;
    CUdeviceptr ptr;
    size_t size;
    cm_pool_list *list; /* the free list it is on; NULL while in use */
    CUevent event;      /* on a stream's list: recorded on that stream when
                           freed; NULL: wait for the whole stream */
    uint64_t seq;       /* when freed: a merge keeps the newer's event */
    cm_pool_block *qprev, *qnext; /* a stream's list: by seq */
};

struct cm_pool_slab {
    cm_pool_slab *prev, *next;
    CUdeviceptr ptr;
    size_t size;
    cm_pool_block *first;
};

/* Size classes of free blocks, by their size in CM_POOL_ALIGN units: the
 * power of two below it, split in CLASS_SPLIT classes (sizes within a
 * quarter of each other); units below CLASS_SPLIT have a class each. */
#define CLASS_BITS 2
#define CLASS_SPLIT (1 << CLASS_BITS)
#define CLASS_POWERS 64

/* The free blocks of one stream, or (stream NULL) those that any stream
 * may take at once, or (`retired`) those of streams released since, each
 * with an event of its own stream (or none: idle); binned by size class,
 * with bitmaps of the classes that hold any. */
struct cm_pool_list {
    cm_pool_list *prev, *next; /* the pool's stream lists */
    cm_pool_list *hnext;       /* in its hash bucket */
    CUstream stream;
    int retired;
    size_t count;
    uint64_t powers;                    /* bit p: some class of power p */
    unsigned char splits[CLASS_POWERS]; /* bit k: class (p, k) */
    cm_pool_block *bins[CLASS_POWERS][CLASS_SPLIT];
    cm_pool_block *oldest, *newest; /* a stream's list: by seq */
};

struct cm_pool {
    pthread_mutex_t lock;
    int enabled;
    uint64_t generation; /* the device's that the slabs belong to */
    size_t limit;
    size_t slab_bytes, reserved, used_bytes;
    size_t slabs, used_blocks, free_blocks;
    uint64_t seq;
    cm_pool_slab *slab_list;
    cm_pool_list ready;
    cm_pool_list retired;
    cm_pool_list *streams; /* and, by handle, in `buckets` */
    cm_pool_list **buckets;
    size_t nbuckets, nstreams;
    CUevent *spare; /* events not attached to a block */
    size_t nspare, nevents, cap;
};

static size_t
round_up(size_t n, size_t unit)
{
    return (n + unit - 1) / unit * unit;
}

static int
is_legacy(CUstream stream)
{
    return stream == NULL || stream == CU_STREAM_LEGACY;
}

/* ---------------------------------------------------------------------
 * Bookkeeping; callers hold pool->lock. */

/* The size class of a block of `size` bytes (a multiple of
 * CM_POOL_ALIGN, not 0): the power of two below its units, and which of
 * its CLASS_SPLIT parts. */
static void
size_class(size_t size, unsigned *power, unsigned *split)
{
    uint64_t units = size / CM_POOL_ALIGN;
    unsigned p = 63u - (unsigned)__builtin_clzll(units);

    *power = p;
    *split = (unsigned)(p >= CLASS_BITS ? units >> (p - CLASS_BITS)
                                        : units << (CLASS_BITS - p)) &
             (CLASS_SPLIT - 1);
}

/* The smallest size of class (p, k). */
static size_t
class_floor(unsigned p, unsigned k)
{
    uint64_t units = p >= CLASS_BITS
                         ? ((uint64_t)1 << p) +
                               ((uint64_t)k << (p - CLASS_BITS))
                         : ((uint64_t)1 << p) + (k >> (CLASS_BITS - p));

    return (size_t)units * CM_POOL_ALIGN;
}

/* The first class at or after (p, k) that holds a block; 0 if none. */
static int
class_next(const cm_pool_list *l, unsigned *p, unsigned *k)
{
    unsigned splits = *k < CLASS_SPLIT ? (unsigned)l->splits[*p] >> *k << *k
                                       : 0u;
    uint64_t powers;

    if (splits == 0) {
        powers = *p + 1 < CLASS_POWERS ? l->powers >> (*p + 1) << (*p + 1) : 0;
        if (powers == 0) {
            return 0;
        }
        *p = (unsigned)__builtin_ctzll(powers);
        splits = l->splits[*p];
    }
    *k = (unsigned)__builtin_ctz(splits);
    return 1;
}

/* A stream's list keeps its blocks in the order of their events too:
 * they complete in that order (settle). */
static int
in_free_order(const cm_pool_list *l)
{
    return l->stream != NULL && !l->retired;
}

/* Puts b after q (NULL: first) in l's free order. */
static void
order_insert(cm_pool_list *l, cm_pool_block *b, cm_pool_block *q)
{
    b->qprev = q;
    b->qnext = q != NULL ? q->qnext : l->oldest;
    if (b->qnext != NULL) {
        b->qnext->qprev = b;
    }
    else {
        l->newest = b;
    }
    if (q != NULL) {
        q->qnext = b;
    }
    else {
        l->oldest = b;
    }
}

/* Puts b in l's free order, from the newest end: a block is pushed on a
 * stream's list only when freed (the newest) or merged with one freed
 * then (coalesce), so the walk stops at once; a split (take) puts its
 * rest in place itself. */
static void
order_push(cm_pool_list *l, cm_pool_block *b)
{
    cm_pool_block *q = l->newest;

    while (q != NULL && q->seq > b->seq) {
        q = q->qprev;
    }
    order_insert(l, b, q);
}

static void
order_unlink(cm_pool_list *l, cm_pool_block *b)
{
    if (b->qprev != NULL) {
        b->qprev->qnext = b->qnext;
    }
    else {
        l->oldest = b->qnext;
    }
    if (b->qnext != NULL) {
        b->qnext->qprev = b->qprev;
    }
    else {
        l->newest = b->qprev;
    }
    b->qprev = b->qnext = NULL;
}

/* Bins b on list; its free order is the caller's. */
static void
list_bin(cm_pool *pool, cm_pool_list *list, cm_pool_block *b)
{
    unsigned p, k;
    cm_pool_block **head;

    size_class(b->size, &p, &k);
    head = &list->bins[p][k];
    b->list = list;
    b->fprev = NULL;
    b->fnext = *head;
    if (*head != NULL) {
        (*head)->fprev = b;
    }
    *head = b;
    list->splits[p] |= (unsigned char)(1u << k);
    list->powers |= (uint64_t)1 << p;
    list->count++;
    pool->free_blocks++;
}

static void
list_push(cm_pool *pool, cm_pool_list *list, cm_pool_block *b)
{
    list_bin(pool, list, b);
    if (in_free_order(list)) {
        order_push(list, b);
    }
}

static void
list_unlink(cm_pool *pool, cm_pool_block *b)
{
    cm_pool_list *list = b->list;
    unsigned p, k;

    size_class(b->size, &p, &k);
    if (b->fprev != NULL) {
        b->fprev->fnext = b->fnext;
    }
    else {
        list->bins[p][k] = b->fnext;
        if (b->fnext == NULL) {
            list->splits[p] &= (unsigned char)~(1u << k);
            if (list->splits[p] == 0) {
                list->powers &= ~((uint64_t)1 << p);
            }
        }
    }
    if (b->fnext != NULL) {
        b->fnext->fprev = b->fprev;
    }
    if (in_free_order(list)) {
        order_unlink(list, b);
    }
    b->list = NULL;
    list->count--;
    pool->free_blocks--;
}

/* The block after b on l (the first for NULL), class by class. */
static cm_pool_block *
list_next(const cm_pool_list *l, const cm_pool_block *b)
{
    unsigned p = 0, k = 0;

    if (b != NULL) {
        if (b->fnext != NULL) {
            return b->fnext;
        }
        size_class(b->size, &p, &k);
        k++;
    }
    return class_next(l, &p, &k) ? l->bins[p][k] : NULL;
}

/* The free list of `stream`, NULL if it has none. */
static cm_pool_list *
list_find(const cm_pool *pool, CUstream stream)
{
    cm_pool_list *l = NULL;

    if (pool->nbuckets > 0) {
        l = pool->buckets[cm__stream_bucket(stream, pool->nbuckets)];
    }
    while (l != NULL && l->stream != stream) {
        l = l->hnext;
    }
    return l;
}

/* Adds l to the pool's stream lists and their hash table, doubled when
 * as many lists as buckets (kept as it is when that fails); -1 when
 * there is no table at all. */
static int
list_add(cm_pool *pool, cm_pool_list *l)
{
    if (pool->nstreams >= pool->nbuckets) {
        size_t n = pool->nbuckets ? 2 * pool->nbuckets : 16;
        cm_pool_list **grown = calloc(n, sizeof(*grown));

        if (grown != NULL) {
            for (cm_pool_list *o = pool->streams; o != NULL; o = o->next) {
                size_t b = cm__stream_bucket(o->stream, n);

                o->hnext = grown[b];
                grown[b] = o;
            }
            free(pool->buckets);
            pool->buckets = grown;
            pool->nbuckets = n;
        }
        else if (pool->nbuckets == 0) {
            return -1;
        }
    }
    size_t b = cm__stream_bucket(l->stream, pool->nbuckets);

    l->hnext = pool->buckets[b];
    pool->buckets[b] = l;
    l->prev = NULL;
    l->next = pool->streams;
    if (pool->streams != NULL) {
        pool->streams->prev = l;
    }
    pool->streams = l;
    pool->nstreams++;
    return 0;
}

/* Takes l out of the stream lists and the hash table (not freed). */
static void
list_remove(cm_pool *pool, cm_pool_list *l)
{
    cm_pool_list *
        *p = &pool->buckets[cm__stream_bucket(l->stream, pool->nbuckets)];

    while (*p != l) {
        p = &(*p)->hnext;
    }
    *p = l->hnext;
    if (l->prev != NULL) {
        l->prev->next = l->next;
    }
    else {
        pool->streams = l->next;
    }
    if (l->next != NULL) {
        l->next->prev = l->prev;
    }
    pool->nstreams--;
}

/* The free list of `stream`, made on first use; NULL when out of host
 * memory. O(1): found by handle. */
static cm_pool_list *
list_for(cm_pool *pool, CUstream stream)
{
    cm_pool_list *l = list_find(pool, stream);

    if (l == NULL && (l = calloc(1, sizeof(*l))) != NULL) {
        l->stream = stream;
        if (list_add(pool, l) < 0) {
            free(l);
            l = NULL;
        }
    }
    return l;
}

/* The lists whose blocks may still be in use by a stream: the streams'
 * (the first for NULL), then the retired one; NULL after it. */
static cm_pool_list *
pending_next(cm_pool *pool, const cm_pool_list *l)
{
    if (l == &pool->retired) {
        return NULL;
    }
    l = l == NULL ? pool->streams : l->next;
    return l != NULL ? (cm_pool_list *)l : &pool->retired;
}

/* Never fails: the array has room for every event the pool made. */
static void
spare_push(cm_pool *pool, CUevent ev)
{
    if (ev != NULL) {
        pool->spare[pool->nspare++] = ev;
    }
}

/* Joins free b with its neighbours on the same list. A merge within a
 * stream's list keeps the newer free's event: recorded later on the same
 * stream, it orders the older block's work too. */
static void
coalesce(cm_pool *pool, cm_pool_block *b)
{
    cm_pool_list *list = b->list;
    cm_pool_block *n;
    int merged = 0;

    /* Blocks of released streams wait for events of different streams. */
    if (list->retired) {
        return;
    }
    for (int side = 0; side < 2; side++) {
        n = side == 0 ? b->prev : b->next;
        if (n == NULL || n->list != list) {
            continue;
        }
        if (!merged) {
            /* Its size class changes: binned again below. */
            list_unlink(pool, b);
            merged = 1;
        }
        list_unlink(pool, n);
        if (n->seq > b->seq) {
            spare_push(pool, b->event);
            b->event = n->event;
            b->seq = n->seq;
        }
        else {
            spare_push(pool, n->event);
        }
        if (side == 0) {
            b->ptr = n->ptr;
            b->prev = n->prev;
            if (b->prev != NULL) {
                b->prev->next = b;
            }
            else {
                b->slab->first = b;
            }
        }
        else {
            b->next = n->next;
            if (b->next != NULL) {
                b->next->prev = b;
            }
        }
        b->size += n->size;
        free(n);
    }
    if (merged) {
        list_push(pool, list, b);
    }
}

/* Whether free block b of a released stream (pool->retired) can be
 * used by any stream: its event has completed; polls without waiting.
 * Without one, its stream was synchronized, or could not be (the context
 * is then unusable). */
static int
retired_idle(const cm_pool_block *b)
{
    cm_error ignored;

    return b->event == NULL || CM_CALL(&ignored, cuEventQuery, b->event) == 0;
}

/* Moves b, idle, to the ready list. */
static void
make_ready(cm_pool *pool, cm_pool_block *b)
{
    list_unlink(pool, b);
    spare_push(pool, b->event);
    b->event = NULL;
    list_push(pool, &pool->ready, b);
    /* Merges only with ready blocks: those of b's list stay. */
    coalesce(pool, b);
}

/* Moves every idle block of the streams' lists to the ready list. A
 * stream's blocks are polled oldest first, and the first still in use
 * ends its walk: their events complete in that order (returns record them
 * under qlock), so a miss makes one query per stream beyond the blocks it
 * frees. A block without an event waits for its whole stream. */
static void
settle(cm_pool *pool)
{
    cm_pool_block *b, *next;
    cm_error ignored;

    for (cm_pool_list *l = pool->streams; l != NULL; l = l->next) {
        int idle = 0; /* the stream is: every block is */

        while ((b = l->oldest) != NULL) {
            if (!idle && b->event != NULL &&
                CM_CALL(&ignored, cuEventQuery, b->event) != 0) {
                break;
            }
            if (!idle && b->event == NULL &&
                !(idle = CM_CALL(&ignored, cuStreamQuery, l->stream) == 0)) {
                break;
            }
            make_ready(pool, b);
        }
    }
    for (b = list_next(&pool->retired, NULL); b != NULL; b = next) {
        next = list_next(&pool->retired, b);
        if (retired_idle(b)) {
            make_ready(pool, b);
        }
    }
}

/* The smallest block of l's class (p, k) of at least `need` bytes
 * (NULL: none), stopping at one of `enough` bytes: none is smaller. */
static cm_pool_block *
best_in_class(const cm_pool_list *l, unsigned p, unsigned k, size_t need,
              size_t enough)
{
    cm_pool_block *best = NULL;

    for (cm_pool_block *b = l->bins[p][k]; b != NULL; b = b->fnext) {
        if (b->size >= need && (best == NULL || b->size < best->size)) {
            best = b;
            if (b->size == enough) {
                break;
            }
        }
    }
    return best;
}

/* The smallest block of l (NULL: none) of at least `need` bytes, or
 * `best` when that is no larger. Looks at need's class, then at the next
 * class that holds a block, whose every block fits: two classes at most,
 * each left at the first block of the smallest size it can hold. */
static cm_pool_block *
best_in(const cm_pool_list *l, size_t need, cm_pool_block *best)
{
    cm_pool_block *b = NULL;
    unsigned p, k;

    if (l == NULL) {
        return best;
    }
    size_class(need, &p, &k);
    if (l->bins[p][k] != NULL) {
        b = best_in_class(l, p, k, need, need);
    }
    if (b == NULL) {
        k++;
        if (class_next(l, &p, &k)) {
            b = best_in_class(l, p, k, need, class_floor(p, k));
        }
    }
    return b != NULL && (best == NULL || b->size < best->size) ? b : best;
}

/* The smallest free block that `stream` may take at once: its own, or a
 * ready one. The per-thread default stream's list is shared by every
 * thread's stream of that name: never its own. */
static cm_pool_block *
find_fit(cm_pool *pool, CUstream stream, size_t need)
{
    cm_pool_block *best = best_in(&pool->ready, need, NULL);
    cm_pool_list *own = NULL;

    if (!is_legacy(stream) && stream != CU_STREAM_PER_THREAD) {
        own = list_find(pool, stream);
    }
    return best_in(own, need, best);
}

/* Hands out the first `need` bytes of free block b; the rest stays free
 * on b's list with b's event. */
static void
take(cm_pool *pool, cm_pool_block *b, size_t need)
{
    cm_pool_list *list = b->list;
    cm_pool_block *rest, *before = b->qprev;

    list_unlink(pool, b);
    if (b->size - need >= CM_POOL_ALIGN &&
        (rest = malloc(sizeof(*rest))) != NULL) {
        *rest = (cm_pool_block){.prev = b,
                                .next = b->next,
                                .slab = b->slab,
                                .ptr = b->ptr + need,
                                .size = b->size - need,
                                .event = b->event,
                                .seq = b->seq};
        if (b->next != NULL) {
            b->next->prev = rest;
        }
        b->next = rest;
        b->size = need;
        /* The rest keeps b's event: its place in the free order too. */
        list_bin(pool, list, rest);
        if (in_free_order(list)) {
            order_insert(list, rest, before);
        }
    }
    else {
        spare_push(pool, b->event);
    }
    b->event = NULL;
    pool->used_blocks++;
    pool->used_bytes += b->size;
}

static size_t
slab_size(size_t need)
{
    return need <= CM_POOL_SMALL ? CM_POOL_SLAB : round_up(need, CM_POOL_SLAB);
}

/* Adds a slab as one ready block; -1 when out of host memory. */
static int
slab_add(cm_pool *pool, CUdeviceptr ptr, size_t size)
{
    cm_pool_slab *s = malloc(sizeof(*s));
    cm_pool_block *b = malloc(sizeof(*b));

    if (s == NULL || b == NULL) {
        free(s);
        free(b);
        return -1;
    }
    *b = (cm_pool_block){.slab = s, .ptr = ptr, .size = size};
    *s = (cm_pool_slab){
        .next = pool->slab_list, .ptr = ptr, .size = size, .first = b};
    if (pool->slab_list != NULL) {
        pool->slab_list->prev = s;
    }
    pool->slab_list = s;
    pool->slabs++;
    pool->slab_bytes += size;
    list_push(pool, &pool->ready, b);
    return 0;
}

static void
slab_unlink(cm_pool *pool, cm_pool_slab *s)
{
    if (s->prev != NULL) {
        s->prev->next = s->next;
    }
    else {
        pool->slab_list = s->next;
    }
    if (s->next != NULL) {
        s->next->prev = s->prev;
    }
    pool->slabs--;
    pool->slab_bytes -= s->size;
}

static void
slab_forget(cm_pool_slab *s)
{
    cm_pool_block *b, *next;

    for (b = s->first; b != NULL; b = next) {
        next = b->next;
        free(b);
    }
    free(s);
}

/* Empties the pool's bookkeeping: the slabs and events went with the
 * context, or trim took them. Keeps the limit and the counters of
 * blocks still out, which no longer come back. */
static void
forget_all(cm_pool *pool)
{
    cm_pool_slab *s, *snext;
    cm_pool_list *l, *lnext;

    for (s = pool->slab_list; s != NULL; s = snext) {
        snext = s->next;
        slab_forget(s);
    }
    for (l = pool->streams; l != NULL; l = lnext) {
        lnext = l->next;
        free(l);
    }
    pool->slab_list = NULL;
    pool->streams = NULL;
    pool->nstreams = 0;
    for (size_t i = 0; i < pool->nbuckets; i++) {
        pool->buckets[i] = NULL;
    }
    pool->ready = (cm_pool_list){0};
    pool->retired = (cm_pool_list){.retired = 1};
    pool->slab_bytes = pool->used_bytes = 0;
    pool->slabs = pool->used_blocks = pool->free_blocks = 0;
    pool->nspare = pool->nevents = 0;
}

/* ---------------------------------------------------------------------
 * The pool's life. */

/* dev's pool, made (disabled, no limit) if there is none. */
static int pool_alloc(cm_mem *m, int wait, cm_error *err);
static int pool_return(cm_mem *m, cm_error *err);
static int pool_drop(cm_device *dev, int reset, cm_error *err);

/* memory_stats() counts a pooled record's whole block; its size is fixed
 * while the block is out. */
static size_t
pool_occupied(const cm_mem *m)
{
    return m->block->size;
}

/* What memory.c's pooled records do (memory.h). */
static const cm_mem_ops pooled_ops = {
    .alloc = pool_alloc,
    .release = pool_return,
    .occupied = pool_occupied,
};

/* What a teardown of a context does to its pool (context.h): a
 * Context.reset() is numba's reset() of the memory manager, for the pool
 * a trim. */
static const cm_subsystem_ops pool_subsystem = {
    .drop = pool_drop,
    .relieve = cm_pool_trim,
};

static int
pool_get(cm_device *dev, cm_pool **out, cm_error *err)
{
    cm_pool *pool;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    pool = dev->pool;
    if (pool == NULL) {
        pool = calloc(1, sizeof(*pool));
        if (pool == NULL) {
            cm__unlock(&dev->qlock);
            return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
        }
        /* Before the pool exists, so before it can be turned on. */
        cm__mem_set_pool_ops(&pooled_ops);
        cm__stream_set_release_hook(cm__pool_stream_released);
        cm__subsystem_register(CM_SUB_POOL, &pool_subsystem);
        pthread_mutex_init(&pool->lock, NULL);
        pool->limit = SIZE_MAX;
        pool->retired.retired = 1;
        pool->generation = __atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE);
        __atomic_store_n(&dev->pool, pool, __ATOMIC_RELEASE);
    }
    cm__unlock(&dev->qlock);
    *out = pool;
    return 0;
}

int
cm_pool_enable(cm_device *dev, int enabled, cm_error *err)
{
    cm_pool *pool;

    if (pool_get(dev, &pool, err) < 0) {
        return -1;
    }
    cm__lock(&pool->lock, CM_LOCK_POOL);
    pool->enabled = enabled != 0;
    __atomic_store_n(&dev->pool_on, enabled ? pool : NULL, __ATOMIC_RELEASE);
    cm__unlock(&pool->lock);
    return 0;
}

int
cm_pool_set_limit(cm_device *dev, size_t limit, cm_error *err)
{
    cm_pool *pool;

    if (pool_get(dev, &pool, err) < 0) {
        return -1;
    }
    cm__lock(&pool->lock, CM_LOCK_POOL);
    pool->limit = limit;
    cm__unlock(&pool->lock);
    return 0;
}

/* context.c's teardown, with dev->lock and dev->qlock held, before the
 * generation is bumped: forgets every slab, block and event (the driver
 * frees them with the context) and turns the pool off: it was the
 * context's memory manager's, and the next context's manager decides. */
static int
pool_drop(cm_device *dev, int reset, cm_error *err)
{
    cm_pool *pool = dev->pool;

    (void)reset;
    (void)err;
    if (pool == NULL) {
        return 0;
    }
    cm__lock(&pool->lock, CM_LOCK_POOL);
    /* The slabs go with the context. */
    cm__stats_unhold(dev, pool->slab_bytes);
    forget_all(pool);
    /* Blocks of the old context never come back: see pool_return. */
    pool->generation = dev->generation + 1;
    /* The pool belongs to the context's memory manager: the next
     * context's manager turns it on again if it is a pool. */
    pool->enabled = 0;
    __atomic_store_n(&dev->pool_on, NULL, __ATOMIC_RELEASE);
    cm__unlock(&pool->lock);
    return 0;
}

/* ---------------------------------------------------------------------
 * Allocation and return. */

const char cm_pool_limit[] = "the pool's limit";

/* What cuMemAlloc itself would say, so that callers (out-of-memory
 * recovery, CudaOutOfMemoryError) treat both alike; `call` says who
 * refused: the driver's size limit or the pool's own. */
static int
out_of_memory(cm_error *err, const char *call)
{
    err->kind = CM_ERR_DRIVER;
    err->code = CUDA_ERROR_OUT_OF_MEMORY;
    err->call = call;
    err->msg = NULL;
    err->oom_dev = NULL;
    err->oom_bytes = 0;
    err->device = -1;
    err->text[0] = '\0';
    return -1;
}

static int trim(cm_device *dev, int wait, cm_error *err);

static int
stale(cm_error *err, cm_device *dev)
{
    return cm__fail_fmt(err, CM_ERR_STATE,
                        "device %d was reset or its context closed during "
                        "a pooled allocation",
                        dev->ordinal);
}

/* A new slab of `size` bytes for a request of `need`, within the limit
 * (trimming once to make room). Called and returns with pool->lock held;
 * drops it around the driver. */
static int
grow(cm_device *dev, cm_pool *pool, uint64_t generation, size_t size,
     cm_error *err)
{
    CUdeviceptr ptr = 0;
    cm_error ignored;
    int rc;

    if (pool->slab_bytes + pool->reserved > pool->limit ||
        size > pool->limit - pool->slab_bytes - pool->reserved) {
        cm__unlock(&pool->lock);
        /* Without waiting: out-of-memory recovery waits, then retries. */
        rc = trim(dev, 0, err);
        cm__lock(&pool->lock, CM_LOCK_POOL);
        if (rc < 0) {
            return -1;
        }
        if (pool->slab_bytes + pool->reserved > pool->limit ||
            size > pool->limit - pool->slab_bytes - pool->reserved) {
            return out_of_memory(err, cm_pool_limit);
        }
    }
    /* Counted against the limit while the lock is dropped. */
    pool->reserved += size;
    cm__unlock(&pool->lock);
    rc = cm__mem_alloc_device(dev, size, &ptr, err);
    cm__lock(&pool->lock, CM_LOCK_POOL);
    pool->reserved -= size;
    if (rc < 0) {
        return -1;
    }
    if (pool->generation != generation) {
        cm__unlock(&pool->lock);
        (void)cm__release(dev, generation, CM_FREE_DEVICE, ptr, size,
                          &ignored);
        cm__lock(&pool->lock, CM_LOCK_POOL);
        return stale(err, dev);
    }
    if (slab_add(pool, ptr, size) < 0) {
        cm__unlock(&pool->lock);
        (void)cm__release(dev, generation, CM_FREE_DEVICE, ptr, size,
                          &ignored);
        cm__lock(&pool->lock, CM_LOCK_POOL);
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    cm__history_note(CM_HIST_SEGMENT_ALLOC, CM_HIST_DEVICE, dev->ordinal, ptr,
                     size, NULL);
    return 0;
}

/* A block of at least nbytes (> 0) for work on `stream`, made with dev's
 * primary context current (memory.c enters it) at `generation`. Reuses a
 * free block of `stream`, one that needs no ordering, or one whose
 * stream's work is complete (event or stream query); otherwise a new slab
 * (within the limit, with memory.c's out-of-memory recovery). Without
 * `wait`, 1 when no free block is ready: the caller does it all again
 * where it may wait. */
static int
pool_alloc(cm_mem *m, int wait, cm_error *err)
{
    cm_device *dev = m->dev;
    uint64_t generation = m->generation;
    CUstream stream = m->stream;
    size_t nbytes = m->size;
    cm_pool_block **block = &m->block;
    CUdeviceptr *ptr = &m->ptr;
    cm_pool *pool = dev->pool;
    size_t need = round_up(nbytes, CM_POOL_ALIGN);
    cm_pool_block *b;
    int rc = -1;

    if (need < nbytes) {
        return out_of_memory(err, "cuMemAlloc");
    }
    cm__lock(&pool->lock, CM_LOCK_POOL);
    if (pool->generation != generation) {
        stale(err, dev);
        goto done;
    }
    b = find_fit(pool, stream, need);
    if (b == NULL && !wait) {
        /* The rest (settle's queries, a new slab) once, where it may. */
        rc = 1;
        goto done;
    }
    if (b == NULL) {
        settle(pool);
        b = find_fit(pool, stream, need);
    }
    if (b == NULL) {
        if (grow(dev, pool, generation, slab_size(need), err) < 0) {
            goto done;
        }
        /* The new slab, or a block freed meanwhile. */
        b = find_fit(pool, stream, need);
    }
    take(pool, b, need);
    *block = b;
    *ptr = b->ptr;
    rc = 0;
done:
    cm__unlock(&pool->lock);
    return rc;
}

/* An event for a free on `stream`: a spare one, or a new one (when the
 * spare array has room for it). NULL when none can be had. Caller holds
 * qlock with the generation current. */
static CUevent
event_get(cm_device *dev, cm_pool *pool)
{
    CUevent ev = NULL, *grown;
    uint64_t generation;
    cm_error ignored;
    int make = 0;

    cm__lock(&pool->lock, CM_LOCK_POOL);
    if (pool->nspare > 0) {
        ev = pool->spare[--pool->nspare];
    }
    else if (pool->nevents < pool->cap) {
        make = 1;
    }
    else {
        grown = realloc(pool->spare, (pool->cap * 2 + 8) * sizeof(*grown));
        if (grown != NULL) {
            pool->spare = grown;
            pool->cap = pool->cap * 2 + 8;
            make = 1;
        }
    }
    cm__unlock(&pool->lock);
    if (make && cm_event_create(dev, CU_EVENT_DISABLE_TIMING, &ev, &generation,
                                &ignored) == 0) {
        cm__lock(&pool->lock, CM_LOCK_POOL);
        pool->nevents++;
        cm__unlock(&pool->lock);
    }
    return ev;
}

/* Returns a block made at `generation` for work on `stream`: reusable at
 * once on that stream; on others once an event recorded on it now has
 * completed (the legacy default stream needs none: its operations are
 * synchronous). If the event cannot be made or recorded, the block waits
 * for the whole stream to be idle instead. A stale generation forgets
 * the block: its slab went with the context. */
static int
pool_return(cm_mem *m, cm_error *err)
{
    cm_device *dev = m->dev;
    cm_pool_block *b = m->block;
    CUstream stream = m->stream;
    cm_pool *pool = __atomic_load_n(&dev->pool, __ATOMIC_ACQUIRE);
    cm_pool_list *list;
    cm_error ignored;
    CUevent ev = NULL;
    int rc = 0;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    /* Only a drop (under qlock) changes the generation of a pool with
     * blocks out. */
    if (pool->generation != m->generation) {
        goto done;
    }
    if (!is_legacy(stream)) {
        ev = event_get(dev, pool);
        if (ev != NULL && cm_event_record(dev, ev, stream, &ignored) < 0) {
            /* The block then waits for its whole stream (block_idle). */
            cm__lock(&pool->lock, CM_LOCK_POOL);
            spare_push(pool, ev);
            cm__unlock(&pool->lock);
            ev = NULL;
        }
    }
    cm__lock(&pool->lock, CM_LOCK_POOL);
    list = is_legacy(stream) ? &pool->ready : list_for(pool, stream);
    if (list == NULL) {
        /* The block stays out until the context goes. */
        spare_push(pool, ev);
        rc = cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    else {
        pool->used_blocks--;
        pool->used_bytes -= b->size;
        b->event = ev;
        b->seq = ++pool->seq;
        list_push(pool, list, b);
        coalesce(pool, b);
    }
    cm__unlock(&pool->lock);
done:
    cm__unlock(&dev->qlock);
    return rc;
}

int
cm__pool_stream_released(cm_device *dev, uint64_t generation, CUstream stream,
                         cm_error *err)
{
    cm_pool *pool = __atomic_load_n(&dev->pool, __ATOMIC_ACQUIRE);
    cm_pool_block *b, *next;
    cm_pool_list *l = NULL;
    int unordered = 0, rc = 0;

    if (pool == NULL) {
        return 0;
    }
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    cm__lock(&pool->lock, CM_LOCK_POOL);
    /* A drop (under qlock) forgot the lists of an older generation. */
    if (pool->generation == generation) {
        l = list_find(pool, stream);
    }
    if (l != NULL) {
        list_remove(pool, l);
        for (b = list_next(l, NULL); b != NULL; b = list_next(l, b)) {
            unordered |= b->event == NULL;
        }
    }
    cm__unlock(&pool->lock);
    if (l == NULL) {
        goto done;
    }
    /* Blocks whose free recorded no event wait for the stream now, while
     * its handle is still valid (qlock keeps the context). */
    if (unordered) {
        rc = cm_stream_synchronize(dev, stream, err);
    }
    cm__lock(&pool->lock, CM_LOCK_POOL);
    for (b = list_next(l, NULL); b != NULL; b = next) {
        next = list_next(l, b);
        list_unlink(pool, b);
        if (b->event == NULL && rc == 0) {
            list_push(pool, &pool->ready, b);
            coalesce(pool, b);
        }
        else {
            list_push(pool, &pool->retired, b);
        }
    }
    cm__unlock(&pool->lock);
    free(l);
done:
    cm__unlock(&dev->qlock);
    return rc;
}

/* ---------------------------------------------------------------------
 * Trim and statistics. */

/* Takes every wholly free, idle slab and the spare events out of the
 * pool, into *slabs and *events (the caller frees them). Caller holds
 * pool->lock. */
static void
collect(cm_pool *pool, cm_pool_slab **slabs, CUevent **events, size_t *nevents)
{
    cm_pool_slab *s, *next;
    cm_pool_list *l, *lnext;

    settle(pool);
    *slabs = NULL;
    for (s = pool->slab_list; s != NULL; s = next) {
        next = s->next;
        if (s->first->list != &pool->ready || s->first->size != s->size) {
            continue;
        }
        list_unlink(pool, s->first);
        slab_unlink(pool, s);
        s->next = *slabs;
        *slabs = s;
    }
    /* Lists of streams with nothing free: the streams may be gone. */
    for (l = pool->streams; l != NULL; l = lnext) {
        lnext = l->next;
        if (l->count == 0) {
            list_remove(pool, l);
            free(l);
        }
    }
    *events = malloc(pool->nspare * sizeof(**events) + 1);
    *nevents = 0;
    if (*events != NULL) {
        for (size_t i = 0; i < pool->nspare; i++) {
            (*events)[i] = pool->spare[i];
        }
        *nevents = pool->nspare;
        pool->nevents -= pool->nspare;
        pool->nspare = 0;
    }
}

/* What makes a pending free block idle: its event, or (none) its
 * stream. */
typedef struct pool_wait {
    CUevent event;
    CUstream stream;
} pool_wait;

/* The waits of every free block that a stream may still use, into *waits
 * (the caller frees it); -1 when out of host memory. Caller holds
 * pool->lock. */
static int
pending_waits(cm_pool *pool, pool_wait **waits, size_t *n)
{
    size_t count = 0;
    cm_pool_block *b;

    *waits = NULL;
    *n = 0;
    for (cm_pool_list *l = pending_next(pool, NULL); l != NULL;
         l = pending_next(pool, l)) {
        count += l->count;
    }
    if (count == 0) {
        return 0;
    }
    *waits = malloc(count * sizeof(**waits));
    if (*waits == NULL) {
        return -1;
    }
    for (cm_pool_list *l = pending_next(pool, NULL); l != NULL;
         l = pending_next(pool, l)) {
        for (b = list_next(l, NULL); b != NULL; b = list_next(l, b)) {
            /* A retired block without an event is idle (retired_idle). */
            if (b->event != NULL || !l->retired) {
                (*waits)[(*n)++] = (pool_wait){b->event, l->stream};
            }
        }
    }
    return 0;
}

/* Waits for the stream work of every pending free block (PyTorch's
 * caching allocator does the same before it empties its cache). Caller
 * holds qlock, which keeps the events alive (only a trim destroys them),
 * and is in dev's context; pool->lock is not held while waiting, so
 * allocations go on meanwhile. The first failure is reported. */
static int
wait_pending(cm_pool *pool, cm_error *err)
{
    pool_wait *waits;
    cm_error later;
    size_t n;
    int rc = 0;

    cm__lock(&pool->lock, CM_LOCK_POOL);
    rc = pending_waits(pool, &waits, &n);
    cm__unlock(&pool->lock);
    if (rc < 0) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    for (size_t i = 0; i < n; i++) {
        cm_error *e = rc < 0 ? &later : err;

        if ((waits[i].event != NULL
                 ? CM_CALL(e, cuEventSynchronize, waits[i].event)
                 : CM_CALL(e, cuStreamSynchronize, waits[i].stream)) < 0) {
            rc = -1;
        }
    }
    free(waits);
    return rc;
}

/* cm_pool_trim; `wait`: first waits for the blocks pending on streams. */
static int
trim(cm_device *dev, int wait, cm_error *err)
{
    cm_pool *pool = __atomic_load_n(&dev->pool, __ATOMIC_ACQUIRE);
    cm_pool_slab *slabs = NULL, *next;
    CUevent *events = NULL;
    size_t nevents = 0;
    cm_ctx_guard guard;
    cm_error later;
    int rc = 0;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    if (pool == NULL) {
        return 0;
    }
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    cm__lock(&pool->lock, CM_LOCK_POOL);
    /* An empty pool may belong to a released context: touch nothing.
     * Otherwise the context is retained, and entering it cannot need
     * dev->lock. */
    if (pool->slab_list == NULL && pool->nspare == 0) {
        cm__unlock(&pool->lock);
        goto done;
    }
    cm__unlock(&pool->lock);
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        rc = -1;
        goto done;
    }
    /* A failed wait is reported; what is idle is still freed. */
    if (wait) {
        rc = wait_pending(pool, err);
    }
    cm__lock(&pool->lock, CM_LOCK_POOL);
    collect(pool, &slabs, &events, &nevents);
    cm__unlock(&pool->lock);
    /* The first failure is reported; the rest are still freed. */
    for (; slabs != NULL; slabs = next) {
        next = slabs->next;
        if (CM_CALL(rc < 0 ? &later : err, cuMemFree, slabs->ptr) < 0) {
            rc = -1;
        }
        cm__stats_unhold(dev, slabs->size);
        cm__history_note(CM_HIST_SEGMENT_FREE, CM_HIST_DEVICE, dev->ordinal,
                         slabs->ptr, slabs->size, NULL);
        slab_forget(slabs);
    }
    for (size_t i = 0; i < nevents; i++) {
        if (CM_CALL(rc < 0 ? &later : err, cuEventDestroy, events[i]) < 0) {
            rc = -1;
        }
    }
    free(events);
    rc = cm_ctx_leave(&guard, rc, err);
done:
    cm__unlock(&dev->qlock);
    return rc;
}

int
cm_pool_trim(cm_device *dev, cm_error *err)
{
    return trim(dev, 1, err);
}

size_t
cm__pool_cached_bytes(cm_device *dev)
{
    cm_pool_stats st;

    cm_pool_get_stats(dev, &st);
    return st.cached_bytes;
}

void
cm_pool_get_stats(cm_device *dev, cm_pool_stats *out)
{
    cm_pool *pool = __atomic_load_n(&dev->pool, __ATOMIC_ACQUIRE);

    *out = (cm_pool_stats){.limit = SIZE_MAX};
    if (pool == NULL) {
        return;
    }
    cm__lock(&pool->lock, CM_LOCK_POOL);
    *out = (cm_pool_stats){.enabled = pool->enabled,
                           .limit = pool->limit,
                           .slabs = pool->slabs,
                           .slab_bytes = pool->slab_bytes,
                           .used_blocks = pool->used_blocks,
                           .used_bytes = pool->used_bytes,
                           .free_blocks = pool->free_blocks,
                           .cached_bytes = pool->slab_bytes - pool->used_bytes,
                           .pending_blocks = pool->free_blocks -
                                             pool->ready.count};
    cm__unlock(&pool->lock);
}
