/* hostpool.c: the pool of page-locked host blocks of hostpool.h: one LIFO
 * free list per power-of-two class and one list of other sizes, largest
 * first, under one lock held only for the lists (never across a driver
 * call), with the tunables read from the environment once. The blocks
 * are hostmem.c's pinned buffers; registering and freeing them stays
 * there. */
#include "hostpool.h"
#include "lockorder.h"
#include "env.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "driver.h"
#include "stats.h"

/* Classes are indexed by their size's log2, up to CM_HOSTPOOL_MAX_BLOCK. */
#define MAX_SHIFT 26
_Static_assert(CM_HOSTPOOL_MAX_BLOCK == (size_t)1 << MAX_SHIFT,
               "MAX_SHIFT must match CM_HOSTPOOL_MAX_BLOCK");

static struct {
    pthread_mutex_t lock;
    cm_host *free[MAX_SHIFT + 1]; /* blocks of a power-of-two size */
    cm_host *exact;               /* the others, largest first */
    int loaded;                   /* the environment was read */
    size_t limit, threshold, blocks, bytes;
    /* Handed out; atomic, not under the lock. */
    size_t used_blocks, used_requested, used_pinned;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t
page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* The tunables, once: later changes come from the setters. Lock held. */
static void
load(void)
{
    size_t t;

    if (pool.loaded) {
        return;
    }
    t = cm__env_size("CUDAMEM_PINNED_ROUND_THRESHOLD",
                     CM_HOSTPOOL_DEFAULT_THRESHOLD);
    pool.threshold = t < CM_HOSTPOOL_MAX_BLOCK ? t : CM_HOSTPOOL_MAX_BLOCK;
    pool.limit = cm__env_size("CUDAMEM_PINNED_MAX_CACHED",
                              CM_HOSTPOOL_DEFAULT_LIMIT);
    pool.loaded = 1;
}

/* The class of nbytes (0 < nbytes <= CM_HOSTPOOL_MAX_BLOCK): the log2 of
 * the smallest power of two that holds it and is at least a page. */
static int
class_of(size_t nbytes)
{
    size_t page = page_size();
    int shift = 0;

    if (nbytes < page) {
        nbytes = page;
    }
    while (((size_t)1 << shift) < nbytes) {
        shift++;
    }
    return shift;
}

/* The class list a cached block of maplen bytes goes on, or -1: the
 * list of other sizes. */
static int
list_of(size_t maplen)
{
    if (maplen > CM_HOSTPOOL_MAX_BLOCK || (maplen & (maplen - 1)) != 0) {
        return -1;
    }
    return class_of(maplen);
}

/* Its registration died with a reset of its device: no longer
 * page-locked. */
static int
stale(const cm_host *h)
{
    return __atomic_load_n(&h->dev->resets, __ATOMIC_ACQUIRE) != h->resets;
}

/* Takes the block at *link off its list. Lock held. */
static cm_host *
unlink_at(cm_host **link)
{
    cm_host *h = *link;

    *link = h->next;
    h->next = NULL;
    pool.blocks--;
    pool.bytes -= h->maplen;
    return h;
}

/* Takes the head of class c, if any. Lock held. */
static cm_host *
pop(int c)
{
    return pool.free[c] != NULL ? unlink_at(&pool.free[c]) : NULL;
}

/* Takes a live block of class c; stale ones go on *dead. Lock held. */
static cm_host *
take_class(int c, cm_host **dead)
{
    cm_host *h;

    while ((h = pop(c)) != NULL && stale(h)) {
        h->next = *dead;
        *dead = h;
    }
    return h;
}

/* Takes the smallest live cached block of need (page-rounded) to need +
 * need / CM_HOSTPOOL_REUSE_DIV bytes, if any; stale ones met on the way
 * go on *dead. Lock held. */
static cm_host *
take_fit(size_t need, cm_host **dead)
{
    size_t slack = need / CM_HOSTPOOL_REUSE_DIV;
    size_t most = need > SIZE_MAX - slack ? SIZE_MAX : need + slack;
    cm_host **link = &pool.exact, **best = NULL, *h;

    while ((h = *link) != NULL && h->maplen >= need) {
        if (stale(h)) {
            h = unlink_at(link);
            h->next = *dead;
            *dead = h;
            continue;
        }
        if (h->maplen <= most) {
            best = link; /* largest first: the last one fits best */
        }
        link = &h->next;
    }
    /* A block of a power-of-two size within the bound fits too. */
    if (need <= CM_HOSTPOOL_MAX_BLOCK) {
        int c = class_of(need);

        if (((size_t)1 << c) <= most &&
            (best == NULL || ((size_t)1 << c) < (*best)->maplen) &&
            (h = take_class(c, dead)) != NULL) {
            return h;
        }
    }
    return best != NULL ? unlink_at(best) : NULL;
}

/* Frees a chain of blocks taken from the lists. The first failure is
 * reported, the rest still freed. */
static int
free_chain(cm_host *chain, cm_error *err)
{
    cm_error later;
    int rc = 0;

    while (chain != NULL) {
        cm_host *h = chain;

        chain = h->next;
        /* cm_host_free counts it out of PINNED: it was counted out when
         * cached. */
        cm__stats_recount(h->dev, CM_STAT_PINNED, h->maplen, h->size);
        if (cm_host_free(h, rc < 0 ? &later : err) < 0) {
            rc = -1;
        }
    }
    return rc;
}

/* Takes cached blocks, largest first, until at most `keep` bytes stay.
 * Lock held; returns the chain to free. */
static cm_host *
shrink_to(size_t keep)
{
    cm_host *chain = NULL;
    int c = MAX_SHIFT;

    while (pool.bytes > keep) {
        cm_host *h;

        while (c >= 0 && pool.free[c] == NULL) {
            c--;
        }
        if (pool.exact != NULL &&
            (c < 0 || pool.exact->maplen > (size_t)1 << c)) {
            h = unlink_at(&pool.exact);
        }
        else {
            h = pop(c); /* bytes left: some list is not empty */
        }
        h->next = chain;
        chain = h;
    }
    return chain;
}

/* Cached blocks retain the contexts of the devices that registered them:
 * close() and release_primary_context() free them first (context.h). */
static const cm_subsystem_ops hostpool_ops = {
    .before_release = cm_hostpool_trim,
};

int
cm_hostpool_alloc(cm_device *dev, size_t nbytes, cm_host **out, cm_error *err)
{
    size_t page = page_size(), size;
    cm_host *h, *dead = NULL;
    cm_error ignored;

    /* Too large to round: cm_host_alloc reports it. */
    if (nbytes == 0 || nbytes > SIZE_MAX - page) {
        return cm_host_alloc(dev, CM_HOST_PINNED, nbytes, 0, out, err);
    }
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    cm__subsystem_register(CM_SUB_HOSTPOOL, &hostpool_ops);
    cm__lock(&pool.lock, CM_LOCK_HOSTPOOL);
    load();
    if (nbytes <= pool.threshold) {
        int c = class_of(nbytes);

        size = (size_t)1 << c;
        h = take_class(c, &dead);
    }
    else {
        size = (nbytes + page - 1) & ~(page - 1);
        h = take_fit(size, &dead);
    }
    cm__unlock(&pool.lock);
    /* Not page-locked any more: not worth keeping. */
    (void)free_chain(dead, &ignored);
    if (h != NULL) {
        cm__stats_add(h->dev, CM_STAT_PINNED, h->maplen, nbytes);
    }
    else if (cm__host_alloc_for(dev, CM_HOST_PINNED, size, nbytes, 0, &h,
                                err) < 0) {
        return -1;
    }
    h->pooled = 1;
    h->size = nbytes;
    __atomic_add_fetch(&pool.used_blocks, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pool.used_requested, nbytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pool.used_pinned, h->maplen, __ATOMIC_RELAXED);
    *out = h;
    return 0;
}

/* Caches h, whose pages are idle, unless it must go. */
static int
keep(cm_host *h, cm_error *err)
{
    /* Read before the block is cached: another thread may take it, and
     * set its size, as soon as the lock is released. */
    cm_device *dev = h->dev;
    size_t maplen = h->maplen, requested = h->size;
    cm_error forked;
    int kept = 0;

    if (h->pooled) {
        __atomic_sub_fetch(&pool.used_blocks, 1, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&pool.used_requested, h->size, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&pool.used_pinned, h->maplen, __ATOMIC_RELAXED);
    }
    /* In a forked child cm_host_free reports the fork. */
    if (!h->pooled || h->reg == NULL || stale(h) ||
        cm_fork_check(&forked) < 0) {
        return cm_host_free(h, err);
    }
    cm__lock(&pool.lock, CM_LOCK_HOSTPOOL);
    load();
    if (pool.limit >= h->maplen && pool.bytes <= pool.limit - h->maplen) {
        int c = list_of(h->maplen);
        cm_host **link = c >= 0 ? &pool.free[c] : &pool.exact;

        while (c < 0 && *link != NULL && (*link)->maplen > h->maplen) {
            link = &(*link)->next;
        }
        h->next = *link;
        *link = h;
        pool.blocks++;
        pool.bytes += h->maplen;
        kept = 1;
    }
    cm__unlock(&pool.lock);
    if (!kept) {
        return cm_host_free(h, err);
    }
    cm__stats_sub(dev, CM_STAT_PINNED, maplen, requested);
    return 0;
}

/* A block goes back only once the copies queued on it are done: the next
 * user would otherwise overwrite what a stream still reads. */
int
cm_hostpool_free(cm_host *h, cm_error *err)
{
    return cm__host_retire(h, keep, err);
}

int
cm_hostpool_trim(cm_error *err)
{
    cm_error later;
    cm_host *chain;
    int rc;

    /* Blocks still in use by a stream come back first. */
    rc = cm_host_drain(err);
    cm__lock(&pool.lock, CM_LOCK_HOSTPOOL);
    chain = shrink_to(0);
    cm__unlock(&pool.lock);
    return free_chain(chain, rc < 0 ? &later : err) < 0 ? -1 : rc;
}

int
cm_hostpool_set_limit(size_t limit, cm_error *err)
{
    cm_host *chain;

    cm__lock(&pool.lock, CM_LOCK_HOSTPOOL);
    load();
    pool.limit = limit;
    chain = shrink_to(limit);
    cm__unlock(&pool.lock);
    return free_chain(chain, err);
}

void
cm_hostpool_set_round_threshold(size_t threshold)
{
    cm__lock(&pool.lock, CM_LOCK_HOSTPOOL);
    load();
    pool.threshold = threshold < CM_HOSTPOOL_MAX_BLOCK ? threshold
                                                       : CM_HOSTPOOL_MAX_BLOCK;
    cm__unlock(&pool.lock);
}

void
cm_hostpool_get_stats(cm_hostpool_stats *out)
{
    cm__lock(&pool.lock, CM_LOCK_HOSTPOOL);
    load();
    *out = (cm_hostpool_stats){
        .limit = pool.limit,
        .round_threshold = pool.threshold,
        .cached_blocks = pool.blocks,
        .cached_bytes = pool.bytes,
        .used_blocks = __atomic_load_n(&pool.used_blocks, __ATOMIC_RELAXED),
        .requested_bytes = __atomic_load_n(&pool.used_requested,
                                           __ATOMIC_RELAXED),
        .pinned_bytes = __atomic_load_n(&pool.used_pinned, __ATOMIC_RELAXED),
    };
    cm__unlock(&pool.lock);
}
