/* stream.c: creating cudamem's own streams in a device's primary context,
 * handing them to the device's object queue, and querying, waiting on and
 * locating any stream handle. Holds no record of its own (the Python Stream
 * keeps the handle and its generation); the queue is release.c's. */
#include "stream.h"

#include <stdlib.h>

#include "driver.h"
#include "event.h"
#include "lockorder.h"
#include "release.h"

struct cm_stream_rec {
    CUstream handle;
    cm_device *dev;
    int refs;    /* atomic: the table's, and one per remembered work */
    int retired; /* atomic: set once `event` and `done` are final */
    int done;    /* retired with its work complete: nothing to wait */
    CUevent event;
    uint64_t event_generation;
    cm_stream_rec *next; /* in its bucket */
};

/* Live records by handle: chained buckets, doubled when as many records as
 * buckets. Process-wide: a handle is unique among live streams. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static cm_stream_rec **buckets;
static size_t nbuckets, nrecs;

/* Adds rec (lock held); 0, or -1 when the table cannot grow. */
static int
table_add(cm_stream_rec *rec)
{
    if (nrecs >= nbuckets) {
        size_t n = nbuckets ? 2 * nbuckets : 64;
        cm_stream_rec **grown = calloc(n, sizeof(*grown));

        if (grown == NULL) {
            return -1;
        }
        for (size_t i = 0; i < nbuckets; i++) {
            while (buckets[i] != NULL) {
                cm_stream_rec *r = buckets[i];
                size_t b = cm__stream_bucket(r->handle, n);

                buckets[i] = r->next;
                r->next = grown[b];
                grown[b] = r;
            }
        }
        free(buckets);
        buckets = grown;
        nbuckets = n;
    }
    size_t b = cm__stream_bucket(rec->handle, nbuckets);

    rec->next = buckets[b];
    buckets[b] = rec;
    nrecs++;
    return 0;
}

/* The slot that points at handle's record (lock held), or NULL. */
static cm_stream_rec **
table_slot(CUstream handle)
{
    if (nbuckets == 0) {
        return NULL;
    }
    for (cm_stream_rec **p = &buckets[cm__stream_bucket(handle, nbuckets)];
         *p != NULL; p = &(*p)->next) {
        if ((*p)->handle == handle) {
            return p;
        }
    }
    return NULL;
}

cm_stream_rec *
cm__stream_find(CUstream handle)
{
    cm_stream_rec **slot, *rec = NULL;

    if (cm_stream_is_default(handle)) {
        return NULL;
    }
    cm__lock(&table_lock, CM_LOCK_STREAMS);
    slot = table_slot(handle);
    if (slot != NULL) {
        rec = *slot;
        __atomic_add_fetch(&rec->refs, 1, __ATOMIC_RELAXED);
    }
    cm__unlock(&table_lock);
    return rec;
}

int
cm__stream_live(const cm_stream_rec *rec, CUevent *ev)
{
    *ev = NULL;
    if (!__atomic_load_n(&rec->retired, __ATOMIC_ACQUIRE)) {
        return 1;
    }
    *ev = rec->event;
    return rec->event != NULL || rec->done ? 0 : -1;
}

int
cm__stream_unref(cm_stream_rec *rec, cm_error *err)
{
    int rc = 0;

    if (__atomic_sub_fetch(&rec->refs, 1, __ATOMIC_ACQ_REL) != 0) {
        return 0;
    }
    if (rec->event != NULL) {
        rc = cm_event_release(rec->dev, rec->event_generation, rec->event,
                              err);
    }
    free(rec);
    return rc;
}

/* Takes handle's record out of the table and retires it: work that
 * memory records remember and that is not complete yet gets an event
 * after it. */
static int
retire(cm_device *dev, uint64_t generation, CUstream handle, cm_error *err)
{
    cm_stream_rec **slot, *rec = NULL;
    CUevent ev = NULL;
    uint64_t evgen = 0;
    cm_error ignored;
    int rc = 0, done = 0;

    cm__lock(&table_lock, CM_LOCK_STREAMS);
    slot = table_slot(handle);
    if (slot != NULL) {
        rec = *slot;
        *slot = rec->next;
        nrecs--;
    }
    cm__unlock(&table_lock);
    if (rec == NULL) {
        return 0;
    }
    /* No new reference can come now; a stale stream's work is gone, and
     * so is that of a stream nothing remembers. Work already complete
     * (the usual case: its user waited for it) needs no event. */
    if (__atomic_load_n(&rec->refs, __ATOMIC_ACQUIRE) == 1 ||
        __atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE) != generation) {
        done = 1;
    }
    else if (cm_stream_query(dev, handle, &done, err) < 0) {
        rc = -1;
    }
    else if (!done) {
        if (cm_event_create(dev, CU_EVENT_DISABLE_TIMING, &ev, &evgen, err) <
            0) {
            rc = -1;
        }
        else if (cm_event_record(dev, ev, handle, err) < 0) {
            cm_event_release(dev, evgen, ev, &ignored);
            ev = NULL;
            rc = -1;
        }
    }
    rec->done = done;
    rec->event = ev;
    rec->event_generation = evgen;
    __atomic_store_n(&rec->retired, 1, __ATOMIC_RELEASE);
    if (cm__stream_unref(rec, rc < 0 ? &ignored : err) < 0) {
        rc = -1;
    }
    return rc;
}

int
cm_stream_create(cm_device *dev, unsigned flags, int has_priority,
                 int priority, CUstream *out, uint64_t *generation,
                 cm_error *err)
{
    cm_ctx_guard guard;
    CUcontext ctx;
    CUstream handle = NULL;
    cm_stream_rec *rec;
    size_t max_count;
    double max_ratio;
    cm_error ignored;
    int rc;

    /* Malformed thresholds fail the first stream, not its destroy. The
     * generation is read before the retain (see cm_device_primary): a
     * reset in between makes the new stream stale at once. */
    if (cm__pending_limits(&max_count, &max_ratio, err) < 0 ||
        cm_device_primary(dev, &ctx, generation, err) < 0 ||
        cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    if (has_priority) {
        rc = CM_CALL(err, cuStreamCreateWithPriority, &handle, flags,
                     priority);
    }
    else {
        rc = CM_CALL(err, cuStreamCreate, &handle, flags);
    }
    if (rc < 0) {
        return cm_ctx_leave(&guard, rc, err);
    }
    if (cm_ctx_leave(&guard, 0, err) < 0) {
        /* The caller never sees it: do not leak it. */
        CM_CALL(&ignored, cuStreamDestroy, handle);
        return -1;
    }
    /* Without a record (out of host memory) the stream still works: its
     * remembered work is ordered by a synchronize. */
    rec = calloc(1, sizeof(*rec));
    if (rec != NULL) {
        rec->handle = handle;
        rec->dev = dev;
        rec->refs = 1;
        cm__lock(&table_lock, CM_LOCK_STREAMS);
        rc = table_add(rec);
        cm__unlock(&table_lock);
        if (rc < 0) {
            free(rec);
        }
    }
    *out = handle;
    return 0;
}

static cm_stream_release_hook release_hook;

void
cm__stream_set_release_hook(cm_stream_release_hook hook)
{
    __atomic_store_n(&release_hook, hook, __ATOMIC_RELEASE);
}

int
cm_stream_release(cm_device *dev, uint64_t generation, CUstream handle,
                  cm_error *err)
{
    cm_stream_release_hook hook = __atomic_load_n(&release_hook,
                                                  __ATOMIC_ACQUIRE);
    cm_error ignored;
    int rc = 0;

    /* A forked child touches neither table: their locks may be held. */
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    if (hook != NULL) {
        rc = hook(dev, generation, handle, err);
    }
    if (retire(dev, generation, handle, rc < 0 ? &ignored : err) < 0) {
        rc = -1;
    }
    if (cm__release(dev, generation, CM_FREE_STREAM,
                    (uint64_t)(uintptr_t)handle, 0,
                    rc < 0 ? &ignored : err) < 0) {
        rc = -1;
    }
    return rc;
}

int
cm_stream_query(cm_device *dev, CUstream handle, int *done, cm_error *err)
{
    cm_ctx_guard guard;
    int rc;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    rc = CM_CALL(err, cuStreamQuery, handle);
    *done = rc == 0;
    if (rc < 0 && err->code == CUDA_ERROR_NOT_READY) {
        rc = 0;
    }
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_stream_synchronize(cm_device *dev, CUstream handle, cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(&guard, CM_CALL(err, cuStreamSynchronize, handle),
                        err);
}

int
cm_stream_device(CUstream handle, cm_device **dev, cm_error *err)
{
    CUcontext ctx;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    if (cm_stream_is_default(handle)) {
        return cm__fail_fmt(
            err, CM_ERR_VALUE,
            "CUDA stream %zu is a default stream: it belongs to "
            "whichever context is current",
            (size_t)(uintptr_t)handle);
    }
    /* Needs no current context: the handle names its own. */
    if (CM_CALL(err, cuStreamGetCtx, handle, &ctx) < 0) {
        return -1;
    }
    if (cm__context_device(ctx, dev, err) < 0) {
        if (err->kind == CM_ERR_VALUE) {
            return cm__fail_fmt(err, CM_ERR_VALUE,
                                "cudamem cannot use CUDA stream %zu: %s",
                                (size_t)(uintptr_t)handle, cm_error_msg(err));
        }
        return -1;
    }
    return 0;
}

int
cm_stream_priority_range(cm_device *dev, int *least, int *greatest,
                         cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(
        &guard, CM_CALL(err, cuCtxGetStreamPriorityRange, least, greatest),
        err);
}
