/* hostpool.c: the pool of page-locked host blocks of hostpool.h: one LIFO
 * free list per power-of-two class, under one lock held only for the
 * lists (never across a driver call). The blocks are hostmem.c's pinned
 * buffers; registering and freeing them stays there. */
#include "hostpool.h"
#include "lockorder.h"

#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "driver.h"
#include "stats.h"

/* Classes are indexed by their size's log2, up to CM_HOSTPOOL_MAX_BLOCK. */
#define MAX_SHIFT 26
_Static_assert(CM_HOSTPOOL_MAX_BLOCK == (size_t)1 << MAX_SHIFT,
               "MAX_SHIFT must match CM_HOSTPOOL_MAX_BLOCK");

static struct {
    pthread_mutex_t lock;
    cm_host *free[MAX_SHIFT + 1];
    size_t limit, blocks, bytes;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .limit = CM_HOSTPOOL_DEFAULT_LIMIT};

/* The class of nbytes (0 < nbytes <= CM_HOSTPOOL_MAX_BLOCK): the log2 of
 * the smallest power of two that holds it and is at least a page. */
static int
class_of(size_t nbytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int shift = 0;

    if (nbytes < page) {
        nbytes = page;
    }
    while (((size_t)1 << shift) < nbytes) {
        shift++;
    }
    return shift;
}

/* Its registration died with a reset of its device: no longer
 * page-locked. */
static int
stale(const cm_host *h)
{
    return __atomic_load_n(&h->dev->resets, __ATOMIC_ACQUIRE) != h->resets;
}

/* Takes the head of class c. Lock held. */
static cm_host *
pop(int c)
{
    cm_host *h = pool.free[c];

    if (h != NULL) {
        pool.free[c] = h->next;
        h->next = NULL;
        pool.blocks--;
        pool.bytes -= h->maplen;
    }
    return h;
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
        cm__stats_recount(h->dev, CM_STAT_PINNED, h->maplen);
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

    for (int c = MAX_SHIFT; c >= 0 && pool.bytes > keep; c--) {
        cm_host *h;

        while (pool.bytes > keep && (h = pop(c)) != NULL) {
            h->next = chain;
            chain = h;
        }
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
    cm_host *h, *dead = NULL;
    cm_error ignored;
    int c;

    if (nbytes == 0 || nbytes > CM_HOSTPOOL_MAX_BLOCK) {
        return cm_host_alloc(dev, CM_HOST_PINNED, nbytes, 0, out, err);
    }
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    c = class_of(nbytes);
    cm__subsystem_register(CM_SUB_HOSTPOOL, &hostpool_ops);
    cm__lock(&pool.lock, CM_LOCK_HOSTPOOL);
    while ((h = pop(c)) != NULL && stale(h)) {
        h->next = dead;
        dead = h;
    }
    cm__unlock(&pool.lock);
    /* Not page-locked any more: not worth keeping. */
    (void)free_chain(dead, &ignored);
    if (h != NULL) {
        cm__stats_add(h->dev, CM_STAT_PINNED, h->maplen);
    }
    else if (cm_host_alloc(dev, CM_HOST_PINNED, (size_t)1 << c, 0, &h, err) <
             0) {
        return -1;
    }
    h->pooled = 1;
    h->size = nbytes;
    *out = h;
    return 0;
}

/* Caches h, whose pages are idle, unless it must go. */
static int
keep(cm_host *h, cm_error *err)
{
    cm_error forked;
    int kept = 0;

    /* In a forked child cm_host_free reports the fork. */
    if (!h->pooled || h->reg == NULL || stale(h) ||
        cm_fork_check(&forked) < 0) {
        return cm_host_free(h, err);
    }
    cm__lock(&pool.lock, CM_LOCK_HOSTPOOL);
    if (pool.limit >= h->maplen && pool.bytes <= pool.limit - h->maplen) {
        int c = class_of(h->maplen); /* what it was made for */

        h->next = pool.free[c];
        pool.free[c] = h;
        pool.blocks++;
        pool.bytes += h->maplen;
        kept = 1;
    }
    cm__unlock(&pool.lock);
    if (!kept) {
        return cm_host_free(h, err);
    }
    cm__stats_sub(h->dev, CM_STAT_PINNED, h->maplen);
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
    pool.limit = limit;
    chain = shrink_to(limit);
    cm__unlock(&pool.lock);
    return free_chain(chain, err);
}

void
cm_hostpool_get_stats(cm_hostpool_stats *out)
{
    cm__lock(&pool.lock, CM_LOCK_HOSTPOOL);
    *out = (cm_hostpool_stats){.limit = pool.limit,
                               .cached_blocks = pool.blocks,
                               .cached_bytes = pool.bytes};
    cm__unlock(&pool.lock);
}
