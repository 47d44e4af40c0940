/* event.c: events (create, record as a stream op, query, synchronize,
 * elapsed time), interprocess events, and the bookkeeping that completes
 * them. Does not schedule anything itself: records are queued through
 * stream.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"
#include "simsched.h"

struct CUevent_st {
    uint32_t magic;
    CUcontext ctx;
    unsigned flags;
    int refs;             /* the handle, plus each record op in flight */
    int destroyed;        /* handle given back */
    sim_dep rec;          /* the last record op; uid 0: never recorded */
    sim_pool_cover cover; /* the pool blocks its synchronize gives back */
    int stamped;          /* t_ns belongs to `rec` */
    uint64_t capture_id;  /* last recorded into this capture, 0: not */
    uint64_t t_ns;
    sim_vclock vc; /* what the recorded work follows */
    struct CUevent_st *prev, *next;
    /* Interprocess events: the state every process shares, once exported
     * or imported; the exporter owns (and unlinks) the name. */
    struct ipc_state *ipc;
    int ipc_owner;
    char ipc_name[40];
};

/* An interprocess event's shared state. Every record, in any process,
 * takes a ticket when it is made and publishes it when it has run; the
 * event is complete once the last ticket taken is published. */
typedef struct ipc_state {
    uint64_t magic;
    uint64_t taken;     /* tickets handed out */
    uint64_t published; /* highest ticket whose record has run */
} ipc_state;

#define IPC_EVENT_MAGIC 0x6375736965763031ull /* "cusiev01" */

/* What a CUipcEventHandle holds. */
typedef struct ipc_event_handle {
    uint64_t magic;
    char name[40];
} ipc_event_handle;

static CUevent events; /* every live handle, for context release */

typedef struct record_op {
    sim_op op;
    CUevent ev;
    uint64_t t_ns;
    uint64_t ticket; /* interprocess events: published when run */
} record_op;

/* ---------------------------------------------------------------------------
 * Completion and references. */

static uint64_t
ipc_published(const ipc_state *st)
{
    return __atomic_load_n(&st->published, __ATOMIC_ACQUIRE);
}

static uint64_t
ipc_taken(const ipc_state *st)
{
    return __atomic_load_n(&st->taken, __ATOMIC_ACQUIRE);
}

static void
ipc_publish(ipc_state *st, uint64_t ticket)
{
    uint64_t cur = ipc_published(st);

    while (cur < ticket &&
           !__atomic_compare_exchange_n(&st->published, &cur, ticket, 1,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
}

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
    if (ev->ipc != NULL) {
        if (ev->ipc_owner)
            shm_unlink(ev->ipc_name);
        munmap(ev->ipc, sizeof(ipc_state));
    }
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
    if (r->ticket != 0)
        ipc_publish(ev->ipc, r->ticket);
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
    if (ev->ipc != NULL && ipc_published(ev->ipc) < ipc_taken(ev->ipc))
        return 0;
    return ev->rec.uid == 0 || sim__dep_done(ev->rec.uid, ev->rec.seq);
}

/* A stream's wait for an interprocess event's records up to `ticket`,
 * which may run in another process: the worker polls the shared state. */
typedef struct ipc_wait_op {
    sim_op op;
    CUevent ev;
    uint64_t ticket;
} ipc_wait_op;

static void
ipc_poll_pause(void)
{
    struct timespec ts = {0, 200000};

    nanosleep(&ts, NULL);
}

static void
ipc_wait_run(sim_op *op)
{
    ipc_wait_op *w = (ipc_wait_op *)op;

    while (ipc_published(w->ev->ipc) < w->ticket)
        ipc_poll_pause();
}

static void
ipc_wait_free(sim_op *op)
{
    ipc_wait_op *w = (ipc_wait_op *)op;

    sim_lock();
    event_unref(w->ev);
    sim_unlock();
    free(w);
}

CUresult
sim__event_ipc_wait(CUevent ev, sim_op **out)
{
    ipc_wait_op *w;
    uint64_t ticket;

    *out = NULL;
    if (ev->ipc == NULL)
        return CUDA_SUCCESS;
    ticket = ipc_taken(ev->ipc);
    if (ipc_published(ev->ipc) >= ticket)
        return CUDA_SUCCESS;
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    w->op.run = ipc_wait_run;
    w->op.free = ipc_wait_free;
    w->op.entry = SIM_cuStreamWaitEvent;
    w->ev = ev;
    w->ticket = ticket;
    ev->refs++;
    *out = &w->op;
    return CUDA_SUCCESS;
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

/* ---------------------------------------------------------------------------
 * The driver entry points. */

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

CUcontext
sim__event_ctx(CUevent ev)
{
    return ev->ctx;
}

void
sim__event_ref(CUevent ev)
{
    ev->refs++;
}

void
sim__event_unref(CUevent ev)
{
    event_unref(ev);
}

/* Lock held. ev now stands for s's op `seq`. */
static void
record_set(CUevent ev, CUstream s, uint64_t seq)
{
    ev->rec.uid = sim__stream_uid(s);
    ev->rec.seq = seq;
    sim__stream_pool_cover(s, &ev->cover);
    ev->capture_id = 0;
    sim__vc_copy(&ev->vc, sim__stream_vc(s));
}

/* Lock held; ev and s checked. Queues the record of ev on s, or, when s
 * is idle, completes it at once as a GPU does: nothing precedes it, so its
 * time is now, and no worker is woken for it. */
CUresult
sim__event_record_on(CUevent ev, CUstream s, const sim_dep *after,
                     size_t nafter, const sim_vclock *after_vc)
{
    record_op *op;
    CUresult r;

    if (nafter == 0 && after_vc == NULL && sim__stream_idle(s)) {
        record_set(ev, s, sim__stream_pass(s));
        ev->t_ns = sim_now_ns();
        ev->stamped = 1;
        if (ev->ipc != NULL)
            ipc_publish(ev->ipc, __atomic_add_fetch(&ev->ipc->taken, 1,
                                                    __ATOMIC_ACQ_REL));
        return CUDA_SUCCESS;
    }
    op = calloc(1, sizeof *op);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->op.run = record_run;
    op->op.entry = SIM_cuEventRecord;
    op->ev = ev;
    r = sim__enqueue(s, &op->op, after, nafter, after_vc, 0);
    if (r != CUDA_SUCCESS) {
        free(op->op.sched);
        free(op);
        return r;
    }
    if (ev->ipc != NULL)
        op->ticket = __atomic_add_fetch(&ev->ipc->taken, 1, __ATOMIC_ACQ_REL);
    ev->refs++;
    ev->stamped = 0;
    record_set(ev, s, op->op.seq);
    return CUDA_SUCCESS;
}

/* In a capture, a record is not queued: the event stands for the work
 * captured so far (CU_EVENT_RECORD_EXTERNAL makes it a graph node). */
static CUresult
record_captured(CUevent ev, CUstream s, unsigned flags)
{
    int external = (flags & CU_EVENT_RECORD_EXTERNAL) != 0;
    CUresult r = sim__capture_record(sim__stream_capture(s), s, ev, external);

    if (r != CUDA_SUCCESS || external)
        return r;
    ev->capture_id = sim__capture_id(sim__stream_capture(s));
    ev->rec.uid = 0;
    ev->rec.seq = 0;
    memset(&ev->cover, 0, sizeof ev->cover);
    return CUDA_SUCCESS;
}

static CUresult
event_record(CUevent ev, CUstream h, int ptds, unsigned flags)
{
    CUcontext ctx;
    CUstream s;
    CUresult r;

    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    if (!sim__handle_live(ev, SIM_MAGIC_EVENT)) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto done;
    }
    r = sim__stream_resolve(h, ptds, ctx,
                            SIM_RESOLVE_CREATE | SIM_RESOLVE_SAME_CTX, &s);
    if (r != CUDA_SUCCESS)
        goto done;
    /* cuEventRecord: event and stream must share a context. */
    if (sim__stream_ctx(s) != ev->ctx) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto done;
    }
    if (sim__stream_capture(s) != NULL)
        r = record_captured(ev, s, flags);
    /* EXTERNAL "is invalid outside of stream capture" (cuda.h). */
    else if (flags & CU_EVENT_RECORD_EXTERNAL)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        r = sim__event_record_on(ev, s, NULL, 0, NULL);
done:
    sim_unlock();
    return r;
}

CUresult
sim__event_capture_wait(CUevent ev, CUstream s, int legacy)
{
    sim_capture *c = sim__stream_capture(s);

    if (ev->capture_id != 0)
        return sim__capture_join(s, legacy, ev, ev->capture_id);
    /* Work outside the capture: only in-stream order crosses into it. */
    if (c != NULL && ev->rec.uid != 0) {
        sim__capture_invalidate(c);
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult
cuEventQuery(CUevent hEvent)
{
    CUresult r;

    SIM_ENTER(cuEventQuery);
    sim_lock();
    if (!sim__handle_live(hEvent, SIM_MAGIC_EVENT))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (hEvent->capture_id != 0)
        r = CUDA_ERROR_CAPTURED_EVENT;
    else
        r = event_done(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult
cuEventSynchronize(CUevent hEvent)
{
    sim_pool_cover cover;
    sim_dep rec;

    SIM_ENTER(cuEventSynchronize);
    sim_lock();
    if (!sim__handle_live(hEvent, SIM_MAGIC_EVENT)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (hEvent->capture_id != 0) {
        sim_unlock();
        return CUDA_ERROR_CAPTURED_EVENT;
    }
    /* What it captured now; a later record does not move the target. */
    rec = hEvent->rec;
    cover = hEvent->cover;
    while (rec.uid != 0 && !sim__dep_done(rec.uid, rec.seq))
        pthread_cond_wait(&sim.progress, &sim.lock);
    /* Records in another process signal nothing here: poll. */
    if (hEvent->ipc != NULL) {
        ipc_state *st = hEvent->ipc;
        uint64_t ticket = ipc_taken(st);

        hEvent->refs++;
        while (ipc_published(st) < ticket) {
            sim_unlock();
            ipc_poll_pause();
            sim_lock();
        }
        event_unref(hEvent);
    }
    sim_pool_sync(&cover);
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
        !sim__handle_live(hEnd, SIM_MAGIC_EVENT))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (hStart->capture_id != 0 || hEnd->capture_id != 0)
        r = CUDA_ERROR_CAPTURED_EVENT;
    else if (hStart->rec.uid == 0 || hEnd->rec.uid == 0 ||
             (hStart->flags & CU_EVENT_DISABLE_TIMING) ||
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

/* ---------------------------------------------------------------------------
 * Interprocess events. The shared state is a POSIX shared memory object
 * named in the handle; records and waits in any process go through it. */

static ipc_state *
ipc_map(int fd)
{
    void *p = mmap(NULL, sizeof(ipc_state), PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);

    return p == MAP_FAILED ? NULL : p;
}

/* The names of events still exported go with the process. */
static void
ipc_unlink_at_exit(void)
{
    CUevent ev;

    for (ev = events; ev != NULL; ev = ev->next) {
        if (ev->ipc_owner)
            shm_unlink(ev->ipc_name);
    }
}

/* Lock held. Gives ev its shared state, as of its local record. */
static CUresult
ipc_export(CUevent ev)
{
    static unsigned long long next_export;
    static int at_exit;
    ipc_state *st;
    int fd;

    if (!at_exit && atexit(ipc_unlink_at_exit) == 0)
        at_exit = 1;

    snprintf(ev->ipc_name, sizeof(ev->ipc_name), "/cusim-ev.%ld.%llu",
             (long)getpid(), ++next_export);
    fd = shm_open(ev->ipc_name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return CUDA_ERROR_MAP_FAILED;
    if (ftruncate(fd, sizeof(ipc_state)) != 0 || (st = ipc_map(fd)) == NULL) {
        close(fd);
        shm_unlink(ev->ipc_name);
        return CUDA_ERROR_MAP_FAILED;
    }
    close(fd);
    st->magic = IPC_EVENT_MAGIC;
    ev->ipc = st;
    ev->ipc_owner = 1;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult
cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    const unsigned need = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    ipc_event_handle h;
    CUresult r = CUDA_SUCCESS;

    SIM_ENTER(cuIpcGetEventHandle);
    if (pHandle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim__handle_live(event, SIM_MAGIC_EVENT))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if ((event->flags & need) != need)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (event->ipc == NULL)
        r = ipc_export(event);
    if (r == CUDA_SUCCESS) {
        memset(&h, 0, sizeof h);
        h.magic = IPC_EVENT_MAGIC;
        memcpy(h.name, event->ipc_name, sizeof h.name);
        memset(pHandle, 0, sizeof *pHandle);
        memcpy(pHandle->reserved, &h, sizeof h);
    }
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult
cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    ipc_event_handle h;
    ipc_state *st;
    CUcontext ctx;
    CUevent ev;
    CUresult r;
    int fd;

    SIM_ENTER(cuIpcOpenEventHandle);
    if (phEvent == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    memcpy(&h, handle.reserved, sizeof h);
    if (h.magic != IPC_EVENT_MAGIC || memchr(h.name, 0, sizeof h.name) == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Gone with its exporter's cuEventDestroy (or never made). */
    fd = shm_open(h.name, O_RDWR, 0);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    st = ipc_map(fd);
    close(fd);
    if (st == NULL)
        return CUDA_ERROR_MAP_FAILED;
    if (st->magic != IPC_EVENT_MAGIC) {
        munmap(st, sizeof *st);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    ev = calloc(1, sizeof *ev);
    if (ev == NULL) {
        munmap(st, sizeof *st);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ev->magic = SIM_MAGIC_EVENT;
    ev->ctx = ctx;
    /* "Behaves like a locally created event with DISABLE_TIMING." */
    ev->flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    ev->refs = 1;
    ev->ipc = st;
    memcpy(ev->ipc_name, h.name, sizeof h.name);
    sim_lock();
    if (sim__handle_add(ev) < 0) {
        sim_unlock();
        munmap(st, sizeof *st);
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

/* ---------------------------------------------------------------------------
 * Entry points: one row per exported ABI alias (see SIM_ALIAS_WRAPPER in
 * sim.h); the wrappers of the W rows, then the cuGetProcAddress rows. */

/* clang-format off */
#define EVENT_ALIASES(W, R)                                                   \
    R(cuEventCreate, cuEventCreate, 2000, )                                   \
    R(cuEventDestroy_v2, cuEventDestroy, 4000, )                              \
    W(cuEventRecord, cuEventRecord, 2000, , event_record,                     \
      (CUevent hEvent, CUstream hStream),                                     \
      (hEvent, hStream, 0, CU_EVENT_RECORD_DEFAULT))                          \
    W(cuEventRecord_ptsz, cuEventRecord, 7000, _ptsz, event_record,           \
      (CUevent hEvent, CUstream hStream),                                     \
      (hEvent, hStream, 1, CU_EVENT_RECORD_DEFAULT))                          \
    W(cuEventRecordWithFlags, cuEventRecordWithFlags, 11010, , event_record,  \
      (CUevent hEvent, CUstream hStream, unsigned int flags),                 \
      (hEvent, hStream, 0, flags))                                            \
    W(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags, 11010, _ptsz,      \
      event_record, (CUevent hEvent, CUstream hStream, unsigned int flags),   \
      (hEvent, hStream, 1, flags))                                            \
    R(cuEventSynchronize, cuEventSynchronize, 2000, )                         \
    R(cuIpcGetEventHandle, cuIpcGetEventHandle, 4010, )                       \
    R(cuIpcOpenEventHandle, cuIpcOpenEventHandle, 4010, )                     \
    R(cuEventQuery, cuEventQuery, 2000, )                                     \
    R(cuEventElapsedTime_v2, cuEventElapsedTime, 2000, )                      \
    R(cuEventElapsedTime_v2, cuEventElapsedTime, 12080, )

EVENT_ALIASES(SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP)

const sim_proc sim_procs_event[] = {
    EVENT_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
};
/* clang-format on */
const size_t sim_nprocs_event = sizeof sim_procs_event /
                                sizeof sim_procs_event[0];
