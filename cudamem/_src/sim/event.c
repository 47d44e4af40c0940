/* event.c: events (create, record as a stream op, query, synchronize,
 * elapsed time) and the bookkeeping that completes them.
 * Does not schedule anything itself: records are queued through stream.c;
 * IPC event handles are not supported. */
#include <stdlib.h>

#include "sim.h"
#include "simsched.h"

struct CUevent_st {
    uint32_t magic;
    CUcontext ctx;
    unsigned flags;
    int refs;      /* the handle, plus each record op in flight */
    int destroyed; /* handle given back */
    sim_dep rec;   /* the last record op; uid 0: never recorded */
    int stamped;   /* t_ns belongs to `rec` */
    uint64_t t_ns;
    sim_vclock vc; /* what the recorded work follows */
    struct CUevent_st *prev, *next;
};

static CUevent events; /* every live handle, for context release */

typedef struct record_op {
    sim_op op;
    CUevent ev;
    uint64_t t_ns;
} record_op;

void
sim__noop_run(sim_op *op)
{
    (void)op;
}

/* The timestamp is taken when the op runs, after the delay, so elapsed
 * times cover delayed work. */
static void
record_run(sim_op *op)
{
    ((record_op *)op)->t_ns = sim_now_ns();
}

static void
event_unref(CUevent ev)
{
    if (--ev->refs > 0)
        return;
    sim__vc_free(&ev->vc);
    ev->magic = 0;
    free(ev);
}

void
sim__event_op_done(sim_op *op)
{
    record_op *r = (record_op *)op;
    CUevent ev;

    if (op->run != record_run)
        return;
    ev = r->ev;
    /* A later record replaced this one: it does not complete the event. */
    if (ev->rec.uid == sim__stream_uid(op->stream) && ev->rec.seq == op->seq) {
        ev->t_ns = r->t_ns;
        ev->stamped = 1;
    }
    event_unref(ev);
}

static void
event_drop(CUevent ev)
{
    sim__handle_remove(ev);
    sim.live.events--;
    ev->destroyed = 1;
    if (ev->prev != NULL)
        ev->prev->next = ev->next;
    else
        events = ev->next;
    if (ev->next != NULL)
        ev->next->prev = ev->prev;
    event_unref(ev);
}

void
sim__events_release_ctx(CUcontext ctx)
{
    CUevent ev = events, next;

    for (; ev != NULL; ev = next) {
        next = ev->next;
        if (ev->ctx == ctx)
            event_drop(ev);
    }
}

static int
event_done(CUevent ev)
{
    return ev->rec.uid == 0 || sim__dep_done(ev->rec.uid, ev->rec.seq);
}

CUresult
sim__event_pending(CUevent ev, sim_dep *dep, const sim_vclock **vc)
{
    if (!sim__handle_live(ev, SIM_MAGIC_EVENT))
        return CUDA_ERROR_INVALID_HANDLE;
    dep->uid = 0;
    dep->seq = 0;
    *vc = NULL;
    if (!event_done(ev)) {
        *dep = ev->rec;
        *vc = &ev->vc;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult
cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                           CU_EVENT_INTERPROCESS;
    CUcontext ctx;
    CUevent ev;
    CUresult r;

    SIM_ENTER(cuEventCreate);
    if (phEvent == NULL || (Flags & ~known) ||
        ((Flags & CU_EVENT_INTERPROCESS) &&
         !(Flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    ev = calloc(1, sizeof *ev);
    if (ev == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ev->magic = SIM_MAGIC_EVENT;
    ev->ctx = ctx;
    ev->flags = Flags;
    ev->refs = 1;
    sim_lock();
    if (sim__handle_add(ev) < 0) {
        sim_unlock();
        free(ev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ev->next = events;
    if (events != NULL)
        events->prev = ev;
    events = ev;
    sim.live.events++;
    sim_unlock();
    *phEvent = ev;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult
cuEventDestroy(CUevent hEvent)
{
    SIM_ENTER(cuEventDestroy);
    sim_lock();
    if (!sim__handle_live(hEvent, SIM_MAGIC_EVENT)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* A record still queued keeps the memory until it has run. */
    event_drop(hEvent);
    sim_unlock();
    return CUDA_SUCCESS;
}

static CUresult
event_record(CUevent ev, CUstream h, int ptds)
{
    record_op *op;
    CUcontext ctx;
    CUstream s;
    CUresult r;

    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    op = calloc(1, sizeof *op);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->op.run = record_run;
    op->op.entry = SIM_cuEventRecord;
    sim_lock();
    if (!sim__handle_live(ev, SIM_MAGIC_EVENT)) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto fail;
    }
    r = sim__stream_resolve(h, ptds, ctx,
                            SIM_RESOLVE_CREATE | SIM_RESOLVE_SAME_CTX, &s);
    if (r != CUDA_SUCCESS)
        goto fail;
    /* cuEventRecord: event and stream must share a context. */
    if (sim__stream_ctx(s) != ev->ctx) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto fail;
    }
    op->ev = ev;
    r = sim__enqueue(s, &op->op, NULL, NULL, 0);
    if (r != CUDA_SUCCESS)
        goto fail;
    ev->refs++;
    ev->rec.uid = sim__stream_uid(s);
    ev->rec.seq = op->op.seq;
    ev->stamped = 0;
    sim__vc_copy(&ev->vc, sim__stream_vc(s));
    sim_unlock();
    return CUDA_SUCCESS;
fail:
    sim_unlock();
    free(op->op.sched);
    free(op);
    return r;
}

/* CU_EVENT_RECORD_EXTERNAL is for stream capture only (cuda.h), which the
 * simulator does not do: outside capture it is invalid. */
static CUresult
event_record_flags(CUevent ev, CUstream h, int ptds, unsigned flags)
{
    if (flags != CU_EVENT_RECORD_DEFAULT)
        return CUDA_ERROR_INVALID_VALUE;
    return event_record(ev, h, ptds);
}

SIM_EXPORT CUresult
cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    SIM_ENTER(cuEventRecordWithFlags);
    return event_record_flags(hEvent, hStream, 0, flags);
}

SIM_EXPORT CUresult
cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                            unsigned int flags)
{
    SIM_ENTER(cuEventRecordWithFlags);
    return event_record_flags(hEvent, hStream, 1, flags);
}

SIM_EXPORT CUresult
cuEventRecord(CUevent hEvent, CUstream hStream)
{
    SIM_ENTER(cuEventRecord);
    return event_record(hEvent, hStream, 0);
}

SIM_EXPORT CUresult
cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    SIM_ENTER(cuEventRecord);
    return event_record(hEvent, hStream, 1);
}

SIM_EXPORT CUresult
cuEventQuery(CUevent hEvent)
{
    CUresult r;

    SIM_ENTER(cuEventQuery);
    sim_lock();
    if (!sim__handle_live(hEvent, SIM_MAGIC_EVENT))
        r = CUDA_ERROR_INVALID_HANDLE;
    else
        r = event_done(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult
cuEventSynchronize(CUevent hEvent)
{
    sim_dep rec;

    SIM_ENTER(cuEventSynchronize);
    sim_lock();
    if (!sim__handle_live(hEvent, SIM_MAGIC_EVENT)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* What it captured now; a later record does not move the target. */
    rec = hEvent->rec;
    while (rec.uid != 0 && !sim__dep_done(rec.uid, rec.seq))
        pthread_cond_wait(&sim.progress, &sim.lock);
    sim_pool_sync();
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult
cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUresult r = CUDA_SUCCESS;

    SIM_ENTER(cuEventElapsedTime);
    if (pMilliseconds == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim__handle_live(hStart, SIM_MAGIC_EVENT) ||
        !sim__handle_live(hEnd, SIM_MAGIC_EVENT) || hStart->rec.uid == 0 ||
        hEnd->rec.uid == 0 || (hStart->flags & CU_EVENT_DISABLE_TIMING) ||
        (hEnd->flags & CU_EVENT_DISABLE_TIMING))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (!event_done(hStart) || !event_done(hEnd))
        r = CUDA_ERROR_NOT_READY;
    else
        *pMilliseconds = (float)((double)((int64_t)hEnd->t_ns -
                                          (int64_t)hStart->t_ns) /
                                 1e6);
    sim_unlock();
    return r;
}
