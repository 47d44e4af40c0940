/* memory.c: device and managed allocation records (memory.h): allocation
 * (through the pool's cm_mem_ops when it is on) with out-of-memory
 * recovery and one retry (status.h), records for borrowed and
 * plugin-owned memory, pointer lookup, reference counts, and the
 * hand-over to release.c, the record's own operations or the release hook
 * at zero. Does not know views, host memory, pools, IPC or what a
 * plugin's object is. */
#include "memory.h"
#include "lockorder.h"

#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "driver.h"
#include "event.h"
#include "history.h"
#include "release.h"
#include "stream.h"
#include "stats.h"

/* py/'s, set once at module init with the GIL held; read with it held. */
static cm_release_hook release_hook;
static void *release_hook_arg;
/* pool.c's, set before any pool is on (cm__mem_set_pool_ops). */
static const cm_mem_ops *pool_ops;
/* asyncpool.c's, likewise. */
static const cm_mem_ops *async_ops;

void
cm__mem_set_pool_ops(const cm_mem_ops *ops)
{
    __atomic_store_n(&pool_ops, ops, __ATOMIC_RELEASE);
}

void
cm__mem_set_async_ops(const cm_mem_ops *ops)
{
    __atomic_store_n(&async_ops, ops, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------------
 * Allocation, with out-of-memory recovery and one retry. */

/* Pooled blocks are device memory in use; what the pool keeps free is
 * its cached bytes. */
static cm_stat_kind
stat_kind(cm_free_kind kind)
{
    return kind == CM_FREE_MANAGED ? CM_STAT_MANAGED : CM_STAT_DEVICE;
}

static int
is_counted(cm_free_kind kind)
{
    return kind == CM_FREE_DEVICE || kind == CM_FREE_MANAGED ||
           kind == CM_FREE_POOL || kind == CM_FREE_ASYNC;
}

/* The history's record of m (history.h), behind the caller's
 * cm__history_on: a driver allocation is a segment of its own, a pooled
 * block lives in the pool's slab. */
static void
note(const cm_mem *m, cm_hist_action action)
{
    cm_hist_memory memory = m->kind == CM_FREE_MANAGED ? CM_HIST_MANAGED
                                                       : CM_HIST_DEVICE;

    if (m->kind != CM_FREE_POOL && action == CM_HIST_ALLOC) {
        cm__history_note(CM_HIST_SEGMENT_ALLOC, memory, m->dev->ordinal,
                         m->ptr, m->size, m->stream);
    }
    cm__history_note(action, memory, m->dev->ordinal, m->ptr, m->size,
                     m->stream);
    if (m->kind == CM_FREE_ASYNC && action == CM_HIST_FREE_COMPLETED) {
        cm__history_note(CM_HIST_SEGMENT_FREE, memory, m->dev->ordinal, m->ptr,
                         m->size, m->stream);
    }
}

/* One allocation of `kind` in the current context. */
static int
alloc_once(cm_free_kind kind, unsigned flags, size_t nbytes, CUdeviceptr *ptr,
           cm_error *err)
{
    if (kind == CM_FREE_MANAGED) {
        return CM_CALL(err, cuMemAllocManaged, ptr, nbytes, flags);
    }
    return CM_CALL(err, cuMemAlloc, ptr, nbytes);
}

const char cm_mem_limit_call[] = "the memory limit";

/* nbytes counted in dev's held bytes, or the limit's refusal. */
static int
hold(cm_device *dev, size_t nbytes, cm_error *err)
{
    size_t limit = __atomic_load_n(&dev->mem_limit, __ATOMIC_RELAXED);
    size_t held;

    if (cm__stats_hold(dev, nbytes, limit, &held) == 0) {
        return 0;
    }
    return cm__mem_refuse(dev, cm_mem_limit_call, nbytes, limit, held, err);
}

int
cm__mem_refuse(cm_device *dev, const char *call, size_t nbytes, size_t limit,
               size_t held, cm_error *err)
{
    *err = (cm_error){.kind = CM_ERR_DRIVER,
                      .code = CUDA_ERROR_OUT_OF_MEMORY,
                      .call = call,
                      .oom_dev = dev,
                      .oom_bytes = nbytes,
                      .oom_limit = limit,
                      .oom_held = held,
                      .device = -1};
    return -1;
}

int
cm__mem_hold(cm_device *dev, size_t nbytes, cm_error *err)
{
    return hold(dev, nbytes, err);
}

/* One allocation in dev's primary context, within its limit. On failure
 * *ptr is nonzero when the driver made the memory but the context could
 * not be left: the memory stays held until its release frees it. */
static int
alloc_in(cm_device *dev, cm_free_kind kind, unsigned flags, size_t nbytes,
         CUdeviceptr *ptr, cm_error *err)
{
    cm_ctx_guard guard;

    if (hold(dev, nbytes, err) < 0) {
        return -1;
    }
    if (cm_ctx_enter(dev, &guard, err) == 0 &&
        cm_ctx_leave(&guard, alloc_once(kind, flags, nbytes, ptr, err), err) ==
            0) {
        return 0;
    }
    if (*ptr == 0) {
        cm__stats_unhold(dev, nbytes);
    }
    return -1;
}

/* After recovery did not help: err marked, and counted when the limit
 * refused. */
static void
give_up(cm_device *dev, size_t nbytes, cm_error *err)
{
    cm__oom_mark(dev, nbytes, err);
    if (err->kind == CM_ERR_DRIVER && err->call == cm_mem_limit_call) {
        cm__stats_reject(dev);
    }
}

int
cm_mem_set_limit(cm_device *dev, size_t bytes, double fraction, cm_error *err)
{
    size_t total;

    if (fraction > 0) {
        if (CM_CALL(err, cuDeviceTotalMem, &total, dev->cudev) < 0) {
            return -1;
        }
        bytes = (size_t)((double)total * fraction);
        if (bytes == 0) {
            bytes = 1;
        }
    }
    __atomic_store_n(&dev->mem_limit, bytes, __ATOMIC_RELAXED);
    return 0;
}

size_t
cm_mem_limit(cm_device *dev)
{
    return __atomic_load_n(&dev->mem_limit, __ATOMIC_RELAXED);
}

/* alloc_in, with status.h's recovery and one more try on out-of-memory
 * (outside the context: the recovery frees in contexts of its own). */
static int
alloc_retry(cm_device *dev, cm_free_kind kind, unsigned flags, size_t nbytes,
            cm_alloc_from from, CUdeviceptr *ptr, cm_error *err)
{
    if (from != CM_ALLOC_RECOVER &&
        alloc_in(dev, kind, flags, nbytes, ptr, err) == 0) {
        return 0;
    }
    if (*ptr != 0 || !cm__oom_recover(dev, err)) {
        return -1;
    }
    if (alloc_in(dev, kind, flags, nbytes, ptr, err) == 0) {
        return 0;
    }
    give_up(dev, nbytes, err);
    return -1;
}

int
cm__mem_alloc_device(cm_device *dev, size_t nbytes, CUdeviceptr *ptr,
                     cm_error *err)
{
    return alloc_in(dev, CM_FREE_DEVICE, 0, nbytes, ptr, err);
}

/* ops_retry under CM_ALLOC_NOWAIT: only a call that can wait would make
 * it; start again from CM_ALLOC_FIRST without the GIL. */
#define MUST_WAIT 2

/* A pooled block or stream-ordered allocation, with the same recovery as
 * alloc_retry around the whole of it: a slab the driver refused and the
 * pool's limit alike. From CM_ALLOC_RECOVER, err holds the first try's
 * failure; CM_ALLOC_NOWAIT stops before the recovery, returning 1, or
 * before a call that can wait, returning MUST_WAIT. */
static int
ops_retry(cm_mem *m, cm_alloc_from from, cm_error *err)
{
    cm_device *dev = m->dev;
    int rc;

    if (from != CM_ALLOC_RECOVER) {
        rc = m->ops->alloc(m, from != CM_ALLOC_NOWAIT, err);
        if (rc >= 0) {
            return rc == 0 ? 0 : MUST_WAIT;
        }
    }
    if (from == CM_ALLOC_NOWAIT) {
        return cm__oom_recoverable(err) ? 1 : -1;
    }
    if (!cm__oom_recover(dev, err)) {
        return -1;
    }
    if (m->ops->alloc(m, 1, err) == 0) {
        return 0;
    }
    give_up(dev, m->size, err);
    return -1;
}

/* Gives back what a failed allocation of m holds: the memory, if the
 * driver (or the pool) made it, and a managed allocation's retain. */
static void
alloc_undo(cm_mem *m)
{
    cm_device *dev = m->dev;
    cm_error ignored;

    if (m->ops != NULL && m->ptr != 0) {
        (void)m->ops->release(m, &ignored);
    }
    else if (m->kind == CM_FREE_MANAGED && m->ptr != 0) {
        (void)cm__release_retained(dev, m->generation, m->resets, m->kind,
                                   m->ptr, m->size, &ignored);
    }
    else if (m->kind == CM_FREE_MANAGED) {
        (void)CM_CALL(&ignored, cuDevicePrimaryCtxRelease, dev->cudev);
    }
    else if (m->ptr != 0) {
        (void)cm__release(dev, m->generation, m->kind, m->ptr, m->size,
                          &ignored);
    }
}

static int
mem_alloc(cm_device *dev, cm_free_kind kind, unsigned flags, size_t nbytes,
          CUstream stream, cm_alloc_from from, cm_mem **out, cm_error *err)
{
    CUcontext ctx;
    uint64_t generation, resets;
    size_t max_count;
    double max_ratio;
    cm_mem *m;
    int rc;

    /* Malformed thresholds fail the first allocation, not its free. */
    if (cm__pending_limits(&max_count, &max_ratio, err) < 0 ||
        cm_device_primary(dev, &ctx, &generation, err) < 0) {
        return -1;
    }
    /* Read before allocating: a reset racing with the allocation then
     * leaks it rather than letting its free hit someone else's memory. */
    resets = __atomic_load_n(&dev->resets, __ATOMIC_ACQUIRE);
    m = malloc(sizeof(*m));
    if (m == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    cm__mem_init(
        m, kind,
        kind == CM_FREE_POOL    ? __atomic_load_n(&pool_ops, __ATOMIC_ACQUIRE)
        : kind == CM_FREE_ASYNC ? __atomic_load_n(&async_ops, __ATOMIC_ACQUIRE)
                                : NULL,
        dev, generation, 0, nbytes);
    m->resets = resets;
    m->stream = stream;
    if (nbytes > 0) {
        /* Managed memory keeps its context alive past close(). */
        if (kind == CM_FREE_MANAGED &&
            CM_CALL(err, cuDevicePrimaryCtxRetain, &ctx, dev->cudev) < 0) {
            free(m);
            return -1;
        }
        if (m->ops != NULL) {
            rc = ops_retry(m, from, err);
        }
        else {
            rc = alloc_retry(dev, kind, flags, nbytes, from, &m->ptr, err);
        }
        if (rc != 0) {
            /* A failed pop after a good allocation leaves the memory in
             * a context cudamem cannot reach reliably: free it there. */
            alloc_undo(m);
            free(m);
            return rc;
        }
        m->occupies = m->ops != NULL && m->ops->occupied != NULL
                          ? m->ops->occupied(m)
                          : nbytes;
        cm__stats_add(dev, stat_kind(kind), m->occupies, nbytes);
        if (cm__history_on()) {
            note(m, CM_HIST_ALLOC);
        }
    }
    /* A new record is as good as checked (its first copy follows). */
    cm__ctx_note_checked(dev, generation);
    *out = m;
    return 0;
}

/* The kind of dev's next allocation for an array. */
static cm_free_kind
array_kind(cm_device *dev)
{
    /* pool.c and asyncpool.c switch on only after setting their
     * operations. */
    if (__atomic_load_n(&dev->async_on, __ATOMIC_ACQUIRE)) {
        return CM_FREE_ASYNC;
    }
    if (__atomic_load_n(&dev->pool_on, __ATOMIC_ACQUIRE) != NULL) {
        return CM_FREE_POOL;
    }
    return CM_FREE_DEVICE;
}

int
cm_mem_alloc_from(cm_device *dev, size_t nbytes, CUstream stream,
                  cm_alloc_from from, cm_mem **out, cm_error *err)
{
    return mem_alloc(dev, array_kind(dev), 0, nbytes, stream, from, out, err);
}

int
cm_mem_alloc_nowait(cm_device *dev, size_t nbytes, CUstream stream,
                    cm_alloc_from *then, cm_mem **out, cm_error *err)
{
    cm_free_kind kind = array_kind(dev);
    int rc;

    *then = CM_ALLOC_FIRST;
    /* cuMemAlloc can wait for the device, and so can the pool for a new
     * slab; cuMemAllocAsync returns at once. An empty allocation calls
     * nothing, whatever its kind. */
    if (kind == CM_FREE_DEVICE && nbytes != 0) {
        return 1;
    }
    rc = mem_alloc(dev, kind, 0, nbytes, stream, CM_ALLOC_NOWAIT, out, err);
    if (rc == 1) {
        *then = CM_ALLOC_RECOVER;
    }
    return rc == MUST_WAIT ? 1 : rc;
}

int
cm_mem_alloc_managed(cm_device *dev, size_t nbytes, int attach_global,
                     cm_mem **out, cm_error *err)
{
    int supported;

    if (cm_device_attribute(dev->ordinal, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
                            &supported, err) < 0) {
        return -1;
    }
    if (!supported) {
        return cm__fail_fmt(err, CM_ERR_SUPPORT,
                            "device %d does not support managed memory "
                            "(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is 0)",
                            dev->ordinal);
    }
    return mem_alloc(dev, CM_FREE_MANAGED,
                     attach_global ? CU_MEM_ATTACH_GLOBAL : CU_MEM_ATTACH_HOST,
                     nbytes, NULL, CM_ALLOC_FIRST, out, err);
}

/* ------------------------------------------------------------------------
 * Records of memory cudamem did not allocate, and lookup. */

/* A record of memory cudamem did not allocate, in dev's primary context. */
static int
mem_record(cm_device *dev, cm_free_kind kind, CUdeviceptr ptr, size_t size,
           void *external, cm_mem **out, cm_error *err)
{
    uint64_t generation;
    CUcontext ctx;
    cm_mem *m;

    /* The generation ties the record to the context the memory lives in:
     * a reset frees it with the context, and stale use then raises. */
    if (cm_device_primary(dev, &ctx, &generation, err) < 0) {
        return -1;
    }
    m = malloc(sizeof(*m));
    if (m == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, "out of host memory");
    }
    cm__mem_init(m, kind, NULL, dev, generation, ptr, size);
    m->external = external;
    *out = m;
    return 0;
}

int
cm_mem_borrow(cm_device *dev, CUdeviceptr ptr, size_t size, cm_mem **out,
              cm_error *err)
{
    return mem_record(dev, CM_FREE_NONE, ptr, size, NULL, out, err);
}

int
cm_mem_external(cm_device *dev, CUdeviceptr ptr, size_t size, void *external,
                cm_mem **out, cm_error *err)
{
    return mem_record(dev, CM_FREE_EXTERNAL, ptr, size, external, out, err);
}

void
cm_mem_set_release_hook(cm_release_hook hook, void *hook_arg)
{
    release_hook = hook;
    release_hook_arg = hook_arg;
}

/* cuPointerGetAttributes answers with no context current, and gives the
 * range as cuMemGetAddressRange does, for device, managed, mapped and
 * registered memory (an H100 with driver 580: tests/gpu/driver_facts.py),
 * so neither question enters a context. */
int
cm_pointer_device(CUdeviceptr ptr, cm_device **dev, CUdeviceptr *base,
                  size_t *size, cm_error *err)
{
    CUpointer_attribute attrs[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                    CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned int type = 0;
    int ordinal = -1;
    CUdeviceptr start = 0;
    size_t nbytes = 0;
    void *data[4] = {&type, &ordinal, &start, &nbytes};

    if (CM_CALL(err, cuPointerGetAttributes, base != NULL ? 4 : 2, attrs, data,
                ptr) < 0) {
        return -1;
    }
    /* Unknown memory is not an error to the driver: it reports type 0. */
    if (type == 0) {
        return cm__fail_fmt(err, CM_ERR_VALUE,
                            "pointer %#llx is not memory the CUDA driver "
                            "knows",
                            (unsigned long long)ptr);
    }
    if (cm_device_get(ordinal, dev, err) < 0) {
        if (err->kind != CM_ERR_VALUE) {
            return -1;
        }
        return cm__fail_fmt(err, CM_ERR_VALUE,
                            "pointer %#llx belongs to device %d, which "
                            "cudamem cannot use: %s",
                            (unsigned long long)ptr, ordinal,
                            cm_error_msg(err));
    }
    if (base != NULL) {
        *base = start;
        *size = nbytes;
    }
    return 0;
}

int
cm_pointer_range(CUdeviceptr ptr, CUdeviceptr *base, size_t *size,
                 cm_error *err)
{
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                    CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[2] = {base, size};

    *base = 0;
    *size = 0;
    return CM_CALL(err, cuPointerGetAttributes, 2, attrs, data, ptr);
}

/* ------------------------------------------------------------------------
 * Stream work noted on a record. */

/* The pending set's lock: held for a few loads and stores only, never
 * across a driver call. */
static void
pending_lock(cm_mem *m)
{
    cm__spin_lock(&m->plock, CM_LOCK_MEM_PENDING);
}

static void
pending_unlock(cm_mem *m)
{
    cm__spin_unlock(&m->plock);
}

static int
same_work(const cm_mem_work *a, const cm_mem_work *b)
{
    return a->dev == b->dev && a->stream == b->stream &&
           a->event == b->event && a->rec == b->rec && a->mark == b->mark;
}

/* Drops w from m's set (locked), keeping the order; 1 if it was there. */
static int
pending_drop(cm_mem *m, const cm_mem_work *w)
{
    for (int i = 0; i < m->npending; i++) {
        if (same_work(&m->pending[i], w)) {
            memmove(m->pending + i, m->pending + i + 1,
                    (size_t)(m->npending - i - 1) * sizeof(cm_mem_work));
            m->npending--;
            return 1;
        }
    }
    return 0;
}

/* 1 when w's stream can be used: a default stream's special handle,
 * which never dies, or one of cudamem's streams not released yet. 0 for a
 * released one whose release said what orders its work: *ev, the event
 * it recorded after it, or NULL (nothing: it was complete). -1 when only
 * a synchronize of its context orders it. */
static int
stream_state(const cm_mem_work *w, CUevent *ev)
{
    *ev = NULL;
    if (cm_stream_is_default(w->stream)) {
        return 1;
    }
    return w->rec != NULL ? cm__stream_live(w->rec, ev) : -1;
}

/* w is ordered by nothing but a synchronize of its context. */
static int
needs_synchronize(const cm_mem_work *w)
{
    CUevent ev;

    return w->event == NULL && stream_state(w, &ev) < 0;
}

/* w needs no wait at all: a released stream's work, complete when it was
 * released. */
static int
needs_nothing(const cm_mem_work *w)
{
    CUevent ev;

    return w->event == NULL && stream_state(w, &ev) == 0 && ev == NULL;
}

/* `into` of m's device waits for the work on w's live stream of another
 * device: an event of w's context, which cuStreamWaitEvent accepts. */
static int
order_across(cm_mem *m, const cm_mem_work *w, CUstream into, cm_error *err)
{
    uint64_t generation;
    cm_error ignored;
    CUevent ev;
    int rc;

    if (cm_event_create(w->dev, CU_EVENT_DISABLE_TIMING, &ev, &generation,
                        err) < 0) {
        return -1;
    }
    rc = cm_event_record(w->dev, ev, w->stream, err) < 0 ||
                 cm_event_stream_wait(m->dev, into, ev, err) < 0
             ? -1
             : 0;
    /* The driver keeps a waited-for event until the wait is done. */
    if (cm_event_release(w->dev, generation, ev, rc < 0 ? &ignored : err) <
        0) {
        rc = -1;
    }
    return rc;
}

/* Makes `into` wait for w: an event after a live stream's work, the
 * recorded event itself, the event a released stream recorded (nothing
 * when its work was complete), or, for a stream that may have been
 * destroyed without either, a synchronize of its whole context (which
 * covers its work). */
static int
order_work(cm_mem *m, const cm_mem_work *w, CUstream into, cm_error *err)
{
    CUevent ev;
    int state;

    if (w->event != NULL) {
        return cm_event_stream_wait(m->dev, into, w->event, err);
    }
    state = stream_state(w, &ev);
    if (state == 0) {
        return ev != NULL ? cm_event_stream_wait(m->dev, into, ev, err) : 0;
    }
    if (state < 0) {
        return cm__ctx_synchronize(
            w->dev, __atomic_load_n(&w->dev->generation, __ATOMIC_ACQUIRE),
            err);
    }
    if (w->dev != m->dev) {
        return order_across(m, w, into, err);
    }
    return cm_event_order(m->dev, w->stream, into, err);
}

/* Releases what w holds once it is ordered or forgotten. */
static int
forget_work(const cm_mem_work *w, cm_error *err)
{
    if (w->rec != NULL) {
        return cm__stream_unref(w->rec, err);
    }
    return w->event == NULL ? 0
                            : cm_event_release(w->dev, w->mark, w->event, err);
}

/* Adds w to m's set; a full set first orders its oldest work before
 * `stream`. On failure w is not added and the oldest stays. */
static int
pending_add(cm_mem *m, const cm_mem_work *w, CUstream stream, cm_error *err)
{
    cm_mem_work oldest;
    int full, again = 0;

    pending_lock(m);
    if (w->stream != NULL) {
        again = pending_drop(m, w);
    }
    full = m->npending == CM_MEM_PENDING;
    if (full) {
        oldest = m->pending[0];
    }
    else {
        m->pending[m->npending++] = *w;
    }
    pending_unlock(m);
    if (again && w->rec != NULL) {
        /* The same work noted again: one reference to its stream. */
        cm__stream_unref(w->rec, err);
    }
    if (!full) {
        return 0;
    }
    /* An event recorded before the wait would not cover the oldest. */
    if (order_work(m, &oldest, stream, err) < 0 ||
        (w->event != NULL &&
         cm_event_record(w->dev, w->event, stream, err) < 0)) {
        return -1;
    }
    pending_lock(m);
    if (pending_drop(m, &oldest)) {
        m->pending[m->npending++] = *w;
        full = 0;
    }
    pending_unlock(m);
    if (full) {
        /* A concurrent export took the oldest meanwhile: it waited for
         * it, so the new work alone remains; try again. */
        return pending_add(m, w, stream, err);
    }
    return forget_work(&oldest, err);
}

/* ------------------------------------------------------------------------
 * Reference counts and release. */

void
cm_mem_incref(cm_mem *m)
{
    __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
}

/* Frees m's memory (not the record) as its kind says. */
static int
release_memory(cm_mem *m, cm_error *err)
{
    int rc = 0;

    if (m->ptr != 0 && is_counted(m->kind)) {
        cm__stats_sub(m->dev, stat_kind(m->kind), m->occupies, m->size);
        if (cm__history_on()) {
            note(m, CM_HIST_FREE_REQUESTED);
        }
    }
    if (m->kind == CM_FREE_EXTERNAL) {
        /* Zero-size memory too: the plugin's object is released. */
        if (release_hook != NULL) {
            release_hook(release_hook_arg, m->external);
        }
    }
    else if (m->ptr != 0 && m->ops != NULL && m->ops->release != NULL) {
        rc = m->ops->release(m, err);
        /* A pooled block is back in the pool, reusable on its stream; a
         * stream-ordered free is the driver's from here on. */
        if (cm__history_on()) {
            note(m, CM_HIST_FREE_COMPLETED);
        }
    }
    else if (m->ptr != 0 && m->kind == CM_FREE_MANAGED) {
        rc = cm__release_retained(m->dev, m->generation, m->resets, m->kind,
                                  m->ptr, m->size, err);
    }
    else if (m->ptr != 0 && m->kind != CM_FREE_NONE) {
        rc = cm__release(m->dev, m->generation, m->kind, m->ptr, m->size, err);
    }
    return rc;
}

int
cm_mem_decref(cm_mem *m, cm_error *err)
{
    cm_error ignored;
    int rc = 0;

    /* An IPC mapping's count reaches zero under ipc.c's cache lock. A
     * count of 1 is the caller's own reference, which no other thread can
     * copy (memory.h): final without a locked instruction, as it is for
     * nearly every array's one record. */
    if (m->ops != NULL && m->ops->unref != NULL
            ? !m->ops->unref(m)
            : __atomic_load_n(&m->refs, __ATOMIC_ACQUIRE) != 1 &&
                  __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) != 0) {
        return 0;
    }
    if (!__atomic_load_n(&m->released, __ATOMIC_ACQUIRE)) {
        rc = release_memory(m, err);
    }
    for (int i = 0; i < m->npending; i++) {
        if (forget_work(&m->pending[i], rc < 0 ? &ignored : err) < 0) {
            rc = -1;
        }
    }
    free(m);
    return rc;
}

int
cm_mem_release_now(cm_mem *m, cm_error *err)
{
    if (m->kind == CM_FREE_NONE || m->kind == CM_FREE_IPC ||
        m->kind == CM_FREE_POOL_IMPORT) {
        return 0; /* never cudamem's to free, or shared (ipc.c) */
    }
    if (__atomic_exchange_n(&m->released, 1, __ATOMIC_ACQ_REL)) {
        return 0; /* freed already */
    }
    return release_memory(m, err);
}

int
cm_mem_check(const cm_mem *m, cm_error *err)
{
    if (__atomic_load_n(&m->released, __ATOMIC_ACQUIRE)) {
        return cm__fail_fmt(err, CM_ERR_STATE,
                            "the memory at %#llx cannot be used: it was "
                            "freed with free()",
                            (unsigned long long)m->ptr);
    }
    /* Managed memory lives on after close(): its record holds the
     * context. */
    if (m->kind == CM_FREE_MANAGED) {
        if (cm_fork_check(err) < 0) {
            return -1;
        }
        if (__atomic_load_n(&m->dev->resets, __ATOMIC_ACQUIRE) != m->resets) {
            return cm__fail_fmt(err, CM_ERR_STATE,
                                "the managed memory at %#llx cannot be used: "
                                "device %d was reset, which freed it",
                                (unsigned long long)m->ptr, m->dev->ordinal);
        }
        cm__ctx_note_checked(
            m->dev, __atomic_load_n(&m->dev->generation, __ATOMIC_ACQUIRE));
        return 0;
    }
    return cm_ctx_check(m->dev, m->generation, err);
}

int
cm_mem_note_stream(cm_mem *m, cm_device *dev, CUstream stream, cm_error *err)
{
    cm_mem_work w = {
        .dev = dev,
        .stream = stream,
        .event = NULL,
        .rec = cm__stream_find(stream),
    };
    cm_error ignored;

    if (pending_add(m, &w, stream, err) < 0) {
        if (w.rec != NULL) {
            cm__stream_unref(w.rec, &ignored);
        }
        return -1;
    }
    return 0;
}

int
cm_mem_note_event(cm_mem *m, cm_device *dev, CUstream stream, cm_error *err)
{
    cm_mem_work w = {.dev = dev, .stream = NULL, .rec = NULL};
    cm_error ignored;

    if (cm_event_create(dev, CU_EVENT_DISABLE_TIMING, &w.event, &w.mark, err) <
        0) {
        return -1;
    }
    if (cm_event_record(dev, w.event, stream, err) < 0 ||
        pending_add(m, &w, stream, err) < 0) {
        cm_event_release(dev, w.mark, w.event, &ignored);
        return -1;
    }
    return 0;
}

/* cm_mem_order_pending's work, called with m's pending lock held, which
 * it drops: apart, so that the frame of its copies is not made for the
 * many calls that find nothing. */
static __attribute__((noinline)) int
order_pending_locked(cm_mem *m, CUstream into, int *ordered, cm_error *err)
{
    cm_mem_work work[CM_MEM_PENDING], own = {.rec = NULL};
    cm_device *synced[CM_MEM_PENDING];
    int n = 0, done = 0, rc = 0, nsynced = 0;
    cm_error ignored;
    CUevent ev;

    for (int i = 0; i < m->npending; i++) {
        const cm_mem_work *w = &m->pending[i];

        if (w->event != NULL || w->stream != into || w->dev != m->dev ||
            stream_state(w, &ev) != 1) {
            work[n++] = *w;
        }
    }
    pending_unlock(m);
    for (; done < n; done++) {
        /* One synchronize covers every stale stream of its device. */
        if (needs_synchronize(&work[done])) {
            int seen = 0;

            for (int i = 0; i < nsynced; i++) {
                seen |= synced[i] == work[done].dev;
            }
            if (seen) {
                continue;
            }
            synced[nsynced++] = work[done].dev;
        }
        else if (!needs_nothing(&work[done])) {
            (*ordered)++;
        }
        if (order_work(m, &work[done], into, err) < 0) {
            rc = -1;
            break;
        }
    }
    /* Forgotten only once ordered: work noted meanwhile stays. */
    pending_lock(m);
    for (int i = 0; i < done; i++) {
        if (!pending_drop(m, &work[i])) {
            /* another export owns it now */
            work[i].event = NULL;
            work[i].rec = NULL;
        }
    }
    if (rc == 0) {
        for (int i = 0; i < m->npending; i++) {
            if (m->pending[i].stream == into && m->pending[i].event == NULL &&
                m->pending[i].dev == m->dev &&
                stream_state(&m->pending[i], &ev) == 1) {
                own = m->pending[i];
                pending_drop(m, &own);
                break;
            }
        }
    }
    pending_unlock(m);
    if (own.rec != NULL && cm__stream_unref(own.rec, err) < 0) {
        rc = -1;
    }
    for (int i = 0; i < done; i++) {
        if (forget_work(&work[i], rc < 0 ? &ignored : err) < 0) {
            rc = -1;
        }
    }
    return rc;
}

int
cm_mem_order_pending(cm_mem *m, CUstream into, int *ordered, cm_error *err)
{
    *ordered = 0;
    pending_lock(m);
    /* Most frees and exports find nothing remembered. */
    if (m->npending == 0) {
        pending_unlock(m);
        return 0;
    }
    return order_pending_locked(m, into, ordered, err);
}
