/* staging.c: the staging pipeline of staging.h: two pooled pinned buffers
 * and an event each, so that the host copy of one chunk overlaps the DMA
 * of the other, the workers that split a host copy, and the poll hook
 * asked between chunks. Does not own the buffers' memory (hostpool.c) nor
 * choose when to stage (copy.c asks). */
#include "staging.h"
#include "lockorder.h"
#include "env.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"
#include "hostmem.h"
#include "hostpool.h"

#define MAX_THREADS 64
/* A worker's share of a host copy is at least this: below it, waking a
 * thread costs more than the copy it saves. */
#define MIN_PART ((size_t)1 << 20)
/* Devices whose attribute is cached; others read it every time. */
#define ATTR_CACHE 64

static struct {
    pthread_mutex_t lock;
    int loaded;
    cm_staging_config cfg;
    /* Per ordinal: 0 unread, 1 stages, 2 reads pageable memory itself. */
    int direct[ATTR_CACHE];
    /* Copies shorter than this never stage (0 until loaded), read without
     * the lock: most copies are small. */
    size_t unstaged_below;
} conf = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* One host copy split in parts: part 0 is the caller's, part i (i >= 1)
 * worker i's. `touch` writes one byte per page of dst instead (faulting
 * in a destination that is about to be written). */
typedef struct job {
    char *dst;
    const char *src;
    size_t n, part;
    int touch;
} job;

/* The workers, started on first need and never stopped; a child after
 * fork starts with none. One job at a time: a caller that finds them
 * busy copies alone. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t go, done;
    int started, busy, parts, left;
    unsigned long gen;
    job job;
} crew = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .go = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The poll hook of staging.h; each copy reads it once. */
static cm_staging_poll_fn poll_hook;

static size_t
page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Lock held. */
static void
load(void)
{
    size_t ps = page_size();
    size_t chunk = cm__env_size("CUDAMEM_STAGING_CHUNK", CM_STAGING_CHUNK);
    size_t threads = cm__env_size("CUDAMEM_STAGING_THREADS",
                                  CM_STAGING_THREADS);
    size_t prefault = cm__env_size("CUDAMEM_STAGING_PREFAULT",
                                   CM_STAGING_PREFAULT);

    if (chunk == 0) {
        chunk = CM_STAGING_CHUNK;
    }
    if (chunk > CM_HOSTPOOL_MAX_BLOCK) {
        chunk = CM_HOSTPOOL_MAX_BLOCK;
    }
    conf.cfg.chunk = (chunk + ps - 1) / ps * ps;
    conf.cfg.threshold = cm__env_size("CUDAMEM_STAGING_THRESHOLD",
                                      CM_STAGING_THRESHOLD);
    if (threads < 1 || threads > MAX_THREADS) {
        threads = CM_STAGING_THREADS;
    }
    conf.cfg.threads = (int)threads;
    conf.cfg.prefault = prefault > 1 ? CM_STAGING_PREFAULT : (int)prefault;
    memset(conf.direct, 0, sizeof(conf.direct));
    conf.loaded = 1;
    __atomic_store_n(&conf.unstaged_below,
                     conf.cfg.threshold == 0 ? SIZE_MAX : conf.cfg.threshold,
                     __ATOMIC_RELEASE);
}

void
cm_staging_reload(void)
{
    cm__lock(&conf.lock, CM_LOCK_STAGING_CONF);
    load();
    cm__unlock(&conf.lock);
}

void
cm_staging_set_poll(cm_staging_poll_fn poll)
{
    __atomic_store_n(&poll_hook, poll, __ATOMIC_RELEASE);
}

void
cm_staging_get_config(cm_staging_config *out)
{
    cm__lock(&conf.lock, CM_LOCK_STAGING_CONF);
    if (!conf.loaded) {
        load();
    }
    *out = conf.cfg;
    cm__unlock(&conf.lock);
}

/* The threads of a parent do not exist in a forked child. */
static void
crew_forget(void)
{
    pthread_mutex_init(&crew.lock, NULL);
    pthread_cond_init(&crew.go, NULL);
    pthread_cond_init(&crew.done, NULL);
    crew.started = crew.busy = crew.parts = crew.left = 0;
}

static void
register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, crew_forget);
}

static void
run_part(const job *j, int i)
{
    size_t lo = (size_t)i * j->part, hi = lo + j->part;

    if (lo >= j->n) {
        return;
    }
    if (hi > j->n) {
        hi = j->n;
    }
    if (j->touch) {
        size_t ps = page_size();
        volatile char *d = (volatile char *)j->dst;

        for (size_t at = lo; at < hi; at += ps) {
            d[at] = 0;
        }
        return;
    }
    memcpy(j->dst + lo, j->src + lo, hi - lo);
}

static void *
worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    unsigned long seen = 0;

    cm__lock(&crew.lock, CM_LOCK_STAGING_CREW);
    for (;;) {
        while (crew.gen == seen) {
            pthread_cond_wait(&crew.go, &crew.lock);
        }
        seen = crew.gen;
        if (me < crew.parts) {
            job j = crew.job;

            cm__unlock(&crew.lock);
            run_part(&j, me);
            cm__lock(&crew.lock, CM_LOCK_STAGING_CREW);
            if (--crew.left == 0) {
                pthread_cond_signal(&crew.done);
            }
        }
    }
    return NULL;
}

/* Starts workers up to `want` (counting the caller) with every signal
 * blocked, so that Ctrl-C reaches the main thread. Lock held. A worker
 * that cannot start leaves the others to do its share. */
static void
crew_grow(int want)
{
    sigset_t all, old;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (crew.started + 1 < want) {
        pthread_attr_t attr;
        pthread_t t;
        int rc;

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &attr, worker,
                            (void *)(intptr_t)(crew.started + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            break;
        }
        crew.started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Copies (or touches) n bytes, split over up to `threads` threads in
 * parts of at least MIN_PART. */
static void
host_pass(char *dst, const char *src, size_t n, int touch, int threads)
{
    job j = {.dst = dst, .src = src, .n = n, .touch = touch};
    int parts = (int)(n / MIN_PART);

    if (parts > threads) {
        parts = threads;
    }
    if (parts > 1) {
        pthread_once(&atfork_once, register_atfork);
        cm__lock(&crew.lock, CM_LOCK_STAGING_CREW);
        if (!crew.busy) {
            crew_grow(parts);
            if (parts > crew.started + 1) {
                parts = crew.started + 1;
            }
        }
        else {
            parts = 1;
        }
        if (parts > 1) {
            /* Cache-line aligned parts. */
            j.part = ((n + (size_t)parts - 1) / (size_t)parts + 63) &
                     ~(size_t)63;
            crew.busy = 1;
            crew.job = j;
            crew.parts = parts;
            crew.left = parts - 1;
            crew.gen++;
            pthread_cond_broadcast(&crew.go);
        }
        cm__unlock(&crew.lock);
    }
    if (parts <= 1) {
        j.part = n;
        run_part(&j, 0);
        return;
    }
    run_part(&j, 0);
    cm__lock(&crew.lock, CM_LOCK_STAGING_CREW);
    while (crew.left > 0) {
        pthread_cond_wait(&crew.done, &crew.lock);
    }
    crew.busy = 0;
    crew.parts = 0;
    cm__unlock(&crew.lock);
}

/* 1 when the device reads pageable memory through the host's page
 * tables (Grace Hopper, ATS systems): its copies need no staging. */
static int
reads_pageable(cm_device *dev, int *out, cm_error *err)
{
    int cached = 0, value;

    cm__lock(&conf.lock, CM_LOCK_STAGING_CONF);
    if (dev->ordinal < ATTR_CACHE) {
        cached = conf.direct[dev->ordinal];
    }
    cm__unlock(&conf.lock);
    if (cached != 0) {
        *out = cached == 2;
        return 0;
    }
    if (CM_CALL(
            err, cuDeviceGetAttribute, &value,
            CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
            dev->cudev) < 0) {
        return -1;
    }
    *out = value != 0;
    if (dev->ordinal < ATTR_CACHE) {
        cm__lock(&conf.lock, CM_LOCK_STAGING_CONF);
        conf.direct[dev->ordinal] = value != 0 ? 2 : 1;
        cm__unlock(&conf.lock);
    }
    return 0;
}

/* 1 when the driver knows the byte at p as page-locked host memory
 * (another owner's: cuMemHostAlloc, another library's registration). */
static int
driver_locked(const char *p, int *out, cm_error *err)
{
    CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    unsigned int type = 0;
    void *data = &type;

    if (CM_CALL(err, cuPointerGetAttributes, 1, &attr, &data,
                (CUdeviceptr)(uintptr_t)p) < 0) {
        return -1;
    }
    *out = type == CU_MEMORYTYPE_HOST;
    return 0;
}

/* Whether to stage: see cm__staging_copy. */
static int
wanted(cm_device *dev, const char *host, size_t n,
       const cm_staging_config *cfg, int *out, cm_error *err)
{
    int direct, first, last;

    *out = 0;
    if (cfg->threshold == 0 || n < cfg->threshold || cm_host_locked(host, n)) {
        return 0;
    }
    if (reads_pageable(dev, &direct, err) < 0) {
        return -1;
    }
    if (direct) {
        return 0;
    }
    if (driver_locked(host, &first, err) < 0 ||
        driver_locked(host + n - 1, &last, err) < 0) {
        return -1;
    }
    *out = !(first && last);
    return 0;
}

/* Two buffers and their events; `queued`: some DMA was queued, `tail`:
 * the buffer whose event was recorded last; the poll hook and when it is
 * due next (CLOCK_MONOTONIC, ns). */
typedef struct stager {
    CUstream stream;
    cm_host *buf[2];
    CUevent ev[2];
    int queued, tail;
    cm_staging_poll_fn poll;
    uint64_t next_poll;
} stager;

static uint64_t
now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Between chunks: asks the poll hook, when due, whether to go on. */
static int
poll_due(stager *p, cm_error *err)
{
    uint64_t now;

    if (p->poll == NULL || (now = now_ns()) < p->next_poll) {
        return 0;
    }
    p->next_poll = now + CM_STAGING_POLL_NS;
    if (p->poll() == 0) {
        return 0;
    }
    return cm_fail(err, CM_ERR_INTERRUPTED, "the staged copy was interrupted");
}

static int
stager_open(cm_device *dev, stager *p, size_t chunk, cm_error *err)
{
    for (int i = 0; i < 2; i++) {
        if (cm_hostpool_alloc(dev, chunk, &p->buf[i], err) < 0 ||
            CM_CALL(err, cuEventCreate, &p->ev[i], CU_EVENT_DISABLE_TIMING) <
                0) {
            return -1;
        }
    }
    return 0;
}

/* Waits for everything queued, then gives the events and buffers back.
 * After success or an interruption every DMA queued was followed by its
 * event, so the last one recorded covers them all; after a failure (or if
 * that wait fails) the whole stream, so that no DMA still touches a
 * buffer. An interruption stays the error reported. */
static int
stager_close(stager *p, int rc, cm_error *err)
{
    int waited = !p->queued;
    cm_error ignored;

    if (!waited && (rc == 0 || err->kind == CM_ERR_INTERRUPTED)) {
        waited = CM_CALL(rc == 0 ? err : &ignored, cuEventSynchronize,
                         p->ev[p->tail]) == 0;
        if (!waited) {
            rc = -1;
        }
    }
    if (!waited) {
        (void)CM_CALL(&ignored, cuStreamSynchronize, p->stream);
    }
    for (int i = 0; i < 2; i++) {
        if (p->ev[i] != NULL &&
            CM_CALL(rc < 0 ? &ignored : err, cuEventDestroy, p->ev[i]) < 0) {
            rc = -1;
        }
        if (p->buf[i] != NULL &&
            cm_hostpool_free(p->buf[i], rc < 0 ? &ignored : err) < 0) {
            rc = -1;
        }
    }
    return rc;
}

/* Queues the DMA of one chunk through buffer b and records its event. */
static int
dma(stager *p, int b, int to_dev, CUdeviceptr d, size_t len, cm_error *err)
{
    int rc = to_dev ? CM_CALL(err, cuMemcpyHtoDAsync, d, p->buf[b]->ptr, len,
                              p->stream)
                    : CM_CALL(err, cuMemcpyDtoHAsync, p->buf[b]->ptr, d, len,
                              p->stream);

    if (rc == 0) {
        p->queued = 1;
        rc = CM_CALL(err, cuEventRecord, p->ev[b], p->stream);
    }
    if (rc == 0) {
        p->tail = b;
    }
    return rc;
}

/* Host to device: chunk k is copied into buffer k % 2 once the DMA of
 * chunk k - 2 from it is done (and the poll hook said go on), then its
 * DMA queued. */
static int
stage_in(stager *p, CUdeviceptr dst, const char *src, size_t n, size_t chunk,
         int threads, cm_error *err)
{
    size_t off = 0;

    for (int k = 0; off < n; k++) {
        size_t len = n - off < chunk ? n - off : chunk;
        int b = k & 1;

        if ((k >= 2 && CM_CALL(err, cuEventSynchronize, p->ev[b]) < 0) ||
            poll_due(p, err) < 0) {
            return -1;
        }
        host_pass(p->buf[b]->ptr, src + off, len, 0, threads);
        if (dma(p, b, 1, dst + off, len, err) < 0) {
            return -1;
        }
        off += len;
    }
    return 0;
}

/* Device to host: the DMA of chunk k + 1 is queued (once the poll hook
 * said go on) before the host waits for chunk k and copies it out; the
 * buffer it fills was emptied by the host copy of chunk k - 1. While
 * chunk k is in flight the workers fault in its destination pages
 * (`prefault`). */
static int
stage_out(stager *p, char *dst, CUdeviceptr src, size_t n, size_t chunk,
          int threads, int prefault, cm_error *err)
{
    size_t off = 0, len = n < chunk ? n : chunk;

    if (dma(p, 0, 0, src, len, err) < 0) {
        return -1;
    }
    for (int k = 0; off < n; k++) {
        size_t next = off + len;
        size_t nlen = n - next < chunk ? n - next : chunk;
        int b = k & 1;

        if (poll_due(p, err) < 0 ||
            (next < n && dma(p, b ^ 1, 0, src + next, nlen, err) < 0)) {
            return -1;
        }
        if (prefault) {
            host_pass(dst + off, NULL, len, 1, threads);
        }
        if (CM_CALL(err, cuEventSynchronize, p->ev[b]) < 0) {
            return -1;
        }
        host_pass(dst + off, p->buf[b]->ptr, len, 0, threads);
        off = next;
        len = nlen;
    }
    return 0;
}

int
cm__staging_copy(cm_device *dev, int to_dev, CUdeviceptr dptr, void *host,
                 size_t n, CUstream stream, int *staged, cm_error *err)
{
    cm_staging_config cfg;
    stager p = {.stream = stream,
                .poll = __atomic_load_n(&poll_hook, __ATOMIC_ACQUIRE)};
    size_t chunk, half, ps;
    int rc;

    if (n < __atomic_load_n(&conf.unstaged_below, __ATOMIC_ACQUIRE)) {
        *staged = 0;
        return 0;
    }
    ps = page_size();
    cm_staging_get_config(&cfg);
    if (wanted(dev, host, n, &cfg, staged, err) < 0) {
        return -1;
    }
    if (!*staged) {
        return 0;
    }
    /* At least two chunks, or nothing overlaps. */
    half = ((n + 1) / 2 + ps - 1) / ps * ps;
    chunk = cfg.chunk < half ? cfg.chunk : half;
    p.next_poll = now_ns() + CM_STAGING_POLL_NS;
    rc = stager_open(dev, &p, chunk, err);
    if (rc == 0) {
        rc = to_dev ? stage_in(&p, dptr, host, n, chunk, cfg.threads, err)
                    : stage_out(&p, host, dptr, n, chunk, cfg.threads,
                                cfg.prefault, err);
    }
    return stager_close(&p, rc, err);
}
