/* stream.c: streams, their worker threads (held only while a stream has
 * work, parked in between) and the ordering rules (legacy and per-thread
 * default streams, cuStreamWaitEvent, callbacks).
 * Does not validate or move memory (copy.c builds the ops); events live in
 * event.c, vector clocks and hazard reports in hazard.c. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"
#include "simsched.h"

enum { KIND_USER, KIND_LEGACY, KIND_PTDS, KIND_RECORDER };

struct CUstream_st {
    uint32_t magic;
    int kind;
    CUcontext ctx;
    unsigned flags;
    int priority;
    uint64_t uid;   /* slot index and generation, outlives the struct */
    uint64_t owner; /* KIND_PTDS: the owning thread's id */
    /* On ctx->streams; on ctx->busy and on `queued` (pprev NULL: off). */
    struct CUstream_st *next, **pprev;
    struct CUstream_st *busy_next, **busy_pprev;
    struct CUstream_st *q_next, **q_pprev;
    int linked;            /* on ctx's lists */
    int destroyed;         /* closing: freed once its queue is empty */
    int has_worker;        /* has work; once closed, its worker frees it */
    sim_op *head, *tail;   /* queued ops; head may be running */
    const sim_op *running; /* head while its worker runs it, else NULL */
    uint64_t submitted, completed;
    sim_vclock vc; /* what the stream's next op is known to follow */
    /* cuStreamSetAttribute: hints a CPU has no use for, kept to answer. */
    CUsynchronizationPolicy sync_policy;
    CUaccessPolicyWindow window;
    CUlaunchMemSyncDomain domain;
    CUlaunchMemSyncDomainMap domain_map;
    sim_capture *capture;       /* between cuStreamBeginCapture and End */
    struct dep_waiter *waiters; /* workers waiting for its completions */
};

/* A worker whose next op waits for another stream's op: linked on that
 * stream, which wakes it when that op completes or the stream is freed.
 * Waiting on sim.progress instead, every completion woke every waiting
 * worker: n streams chained by cuStreamWaitEvent cost n^2 wake-ups. */
typedef struct dep_waiter {
    struct dep_waiter *next, **pprev; /* pprev NULL: not linked */
    uint64_t seq;
    pthread_cond_t wake;
} dep_waiter;

/* Every stream with ops queued, of any context: what a question about
 * memory in use walks, rather than every stream there is. */
static struct CUstream_st *queued;

/* Scheduling state of a queued op (sim_op.sched); NULL when it has none. */
typedef struct sched {
    int nodelay;
    size_t ndeps;
    sim_dep deps[];
} sched;

/* Streams by uid, so that a dependency on a freed stream reads as done. */
typedef struct slot {
    CUstream s;
    uint32_t gen;
    uint32_t next_free;
} slot;

static slot *slots;
static uint32_t nslots, slots_cap, slots_used, free_slot = UINT32_MAX;
/* The generation new slots start at: above every one handed out, so that
 * a uid outlives the table (an event's record of a stream gone with its
 * context must not name the next stream to take its slot). */
static uint32_t slots_gen = 1;

/* Workers are joinable: one that ended (its stream gone, or idle) leaves
 * its id here and the next worker_start (or the exit hook) joins it. */
static pthread_t *zombies;
static size_t nzombies, zombies_cap;
static int nclosing; /* workers of destroyed streams still running */

/* A stream holds a worker only while it has work: a worker whose stream
 * runs dry parks, and the next stream with work takes a parked worker
 * before it starts a thread, so that many live streams cost few threads.
 * At most WORKER_PARKED_MAX park; one parked WORKER_IDLE_MS exits. */
#define WORKER_IDLE_MS 500
#define WORKER_PARKED_MAX 16

typedef struct worker {
    struct worker *next; /* parked */
    pthread_cond_t wake;
    CUstream s; /* the stream it serves; NULL while parked */
} worker;

static worker *parked;
static int nparked;

static uint64_t next_thread_id;
static _Thread_local uint64_t tls_thread_id;
static _Thread_local CUcontext tls_ptds_ctx;
static _Thread_local uint64_t tls_ptds_uid;

/* ------------------------------------------------------------------------
 * Slot table. */

static int
slot_add(CUstream s)
{
    uint32_t i;

    if (free_slot != UINT32_MAX) {
        i = free_slot;
        free_slot = slots[i].next_free;
    }
    else {
        if (nslots == slots_cap) {
            uint32_t cap = slots_cap ? slots_cap * 2 : 16;
            slot *n = realloc(slots, cap * sizeof *n);
            if (n == NULL)
                return -1;
            slots = n;
            slots_cap = cap;
        }
        i = nslots++;
        slots[i].gen = slots_gen;
    }
    slots[i].s = s;
    slots_used++;
    s->uid = ((uint64_t)slots[i].gen << 32) | i;
    return 0;
}

static void
slot_remove(uint64_t uid)
{
    uint32_t i = (uint32_t)uid;

    slots[i].s = NULL;
    slots[i].gen++;
    slots[i].next_free = free_slot;
    free_slot = i;
    if (--slots_used == 0) {
        /* Nothing live: give the table back so that leak checks see none. */
        for (i = 0; i < nslots; i++) {
            if (slots[i].gen >= slots_gen)
                slots_gen = slots[i].gen + 1;
        }
        free(slots);
        slots = NULL;
        nslots = slots_cap = 0;
        free_slot = UINT32_MAX;
    }
}

static CUstream
slot_lookup(uint64_t uid)
{
    uint32_t i = (uint32_t)uid;

    if (i >= nslots || slots[i].gen != (uint32_t)(uid >> 32))
        return NULL;
    return slots[i].s;
}

int
sim__dep_done(uint64_t uid, uint64_t seq)
{
    CUstream s = slot_lookup(uid);

    return s == NULL || s->completed >= seq;
}

/* ------------------------------------------------------------------------
 * Stream objects. Caller holds the lock throughout. */

static CUstream
stream_new(CUcontext ctx, int kind, unsigned flags, int priority)
{
    CUstream s = calloc(1, sizeof *s);

    if (s == NULL)
        return NULL;
    if (slot_add(s) < 0) {
        free(s);
        return NULL;
    }
    s->magic = SIM_MAGIC_STREAM;
    s->kind = kind;
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority;
    s->sync_policy = CU_SYNC_POLICY_AUTO;
    s->domain_map.default_ = 0;
    s->domain_map.remote = 1;
    if (kind == KIND_LEGACY) {
        ctx->legacy = s;
    }
    else if (kind == KIND_RECORDER) {
        ctx->recorder = s;
    }
    else {
        s->next = ctx->streams;
        if (s->next != NULL)
            s->next->pprev = &s->next;
        s->pprev = &ctx->streams;
        ctx->streams = s;
    }
    s->linked = 1;
    return s;
}

/* s is on its context's `streams`: a user or per-thread default stream
 * whose context is alive. */
static int
stream_listed(CUstream s)
{
    return s->linked && s->kind != KIND_LEGACY && s->kind != KIND_RECORDER;
}

/* s, which is listed, has work queued: on ctx->busy until it runs dry. */
static void
busy_mark(CUstream s)
{
    if (s->busy_pprev != NULL || !stream_listed(s))
        return;
    s->busy_next = s->ctx->busy;
    if (s->busy_next != NULL)
        s->busy_next->busy_pprev = &s->busy_next;
    s->busy_pprev = &s->ctx->busy;
    s->ctx->busy = s;
}

static void
busy_clear(CUstream s)
{
    if (s->busy_pprev == NULL)
        return;
    *s->busy_pprev = s->busy_next;
    if (s->busy_next != NULL)
        s->busy_next->busy_pprev = s->busy_pprev;
    s->busy_pprev = NULL;
}

/* s's queue is no longer empty. */
static void
queued_add(CUstream s)
{
    s->q_next = queued;
    if (s->q_next != NULL)
        s->q_next->q_pprev = &s->q_next;
    s->q_pprev = &queued;
    queued = s;
}

/* s's queue ran dry. */
static void
queued_remove(CUstream s)
{
    *s->q_pprev = s->q_next;
    if (s->q_next != NULL)
        s->q_next->q_pprev = s->q_pprev;
    s->q_pprev = NULL;
}

static void
stream_unlink(CUstream s)
{
    if (!s->linked)
        return;
    if (s->ctx->legacy == s) {
        s->ctx->legacy = NULL;
    }
    else if (s->ctx->recorder == s) {
        s->ctx->recorder = NULL;
    }
    else {
        busy_clear(s);
        if (s->capture != NULL)
            s->ctx->ncapturing--;
        *s->pprev = s->next;
        if (s->next != NULL)
            s->next->pprev = s->pprev;
    }
    s->linked = 0;
}

static void stream_free(CUstream s);

/* Joins the workers that have ended. `wait`: all of them (at exit);
 * else only those gone already, so that the lock is never held while a
 * thread that has let go of it waits for the CPU to finish exiting. */
static void
reap_zombies(int wait)
{
    size_t i, kept = 0;

    for (i = 0; i < nzombies; i++) {
        if (wait)
            pthread_join(zombies[i], NULL);
        else if (pthread_tryjoin_np(zombies[i], NULL) != 0)
            zombies[kept++] = zombies[i];
    }
    nzombies = kept;
    if (kept == 0) {
        free(zombies);
        zombies = NULL;
        zombies_cap = 0;
    }
}

/* The calling worker is about to return: someone joins it later. */
static void
zombie_add(void)
{
    if (nzombies == zombies_cap) {
        size_t cap = zombies_cap ? zombies_cap * 2 : 8;
        pthread_t *z = realloc(zombies, cap * sizeof *z);
        if (z == NULL) {
            pthread_detach(pthread_self());
            return;
        }
        zombies = z;
        zombies_cap = cap;
    }
    zombies[nzombies++] = pthread_self();
}

/* Wakes the workers waiting for s to complete what it has completed, or
 * with `all` every one (s is going: its ops read as done). Lock held. */
static void
waiters_wake(CUstream s, int all)
{
    dep_waiter **pp = &s->waiters, *w;

    while ((w = *pp) != NULL) {
        if (!all && w->seq > s->completed) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        if (w->next != NULL)
            w->next->pprev = pp;
        w->pprev = NULL;
        pthread_cond_signal(&w->wake);
    }
}

static void
stream_free(CUstream s)
{
    waiters_wake(s, 1);
    if (s->capture != NULL)
        sim__capture_drop(s->capture, s);
    stream_unlink(s);
    slot_remove(s->uid);
    sim__vc_free(&s->vc);
    s->magic = 0;
    free(s);
}

/* device.c poisons contexts without the lock. */
static CUresult
ctx_sticky(CUcontext ctx)
{
    return __atomic_load_n(&ctx->sticky, __ATOMIC_ACQUIRE);
}

/* The recorder is made non-blocking: the legacy rules pass it by. */
static int
stream_blocking(CUstream s)
{
    return s->kind != KIND_LEGACY && !(s->flags & CU_STREAM_NON_BLOCKING);
}

static int
stream_busy(CUstream s)
{
    return s->submitted > s->completed;
}

#ifdef CUDAMEM_DEBUG
/* Debug builds (the C tests, TSan's run): the walk over every stream that
 * ctx->busy, ctx->ncapturing and `queued` stand for must agree with them.
 * A disagreement is a bug here, so the process stops. Lock held. */
static void
lists_check(CUcontext ctx)
{
    int capturing = 0;
    CUstream s;

    for (s = ctx->streams; s != NULL; s = s->next) {
        capturing += s->capture != NULL;
        if ((s->busy_pprev != NULL) != stream_busy(s) ||
            (s->q_pprev != NULL) != (s->head != NULL)) {
            fprintf(stderr, "cusim: stream %p misfiled (busy %d, queued %d)\n",
                    (void *)s, stream_busy(s), s->head != NULL);
            abort();
        }
    }
    if (capturing != ctx->ncapturing) {
        fprintf(stderr, "cusim: %d streams capture, counted %d\n", capturing,
                ctx->ncapturing);
        abort();
    }
}
#else
static void
lists_check(CUcontext ctx)
{
    (void)ctx;
}
#endif

/* ------------------------------------------------------------------------
 * Workers. */

void
sim__op_free(sim_op *op)
{
    free(op->sched);
    op->sched = NULL;
    if (op->free != NULL)
        op->free(op);
    else
        free(op);
}

/* The first dependency of op not done yet, or NULL when op may run. */
static const sim_dep *
op_blocker(const sim_op *op)
{
    const sched *sc = op->sched;
    size_t i;

    for (i = 0; sc != NULL && i < sc->ndeps; i++) {
        if (!sim__dep_done(sc->deps[i].uid, sc->deps[i].seq))
            return &sc->deps[i];
    }
    return NULL;
}

static int
op_ready(const sim_op *op)
{
    return op_blocker(op) == NULL;
}

static void
sleep_us(unsigned us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The first range of op whose allocation was freed since op was queued,
 * or NULL; *foreign gets a bit per range in registered memory, whose
 * pages the application owns and may unmap before unregistering them (a
 * GPU goes on writing the pinned pages; here the op faults). Lock held. */
static const sim_range *
op_check_ranges(const sim_op *op, unsigned *foreign)
{
    int i;

    *foreign = 0;
    for (i = 0; i < op->nranges; i++) {
        const sim_range *r = &op->ranges[i];
        const sim_alloc *a;

        if (r->buffer_id == 0)
            continue;
        a = sim_mem_find(r->addr);
        if (a == NULL || a->buffer_id != r->buffer_id)
            return r;
        if (a->kind == SIM_MEM_REGISTERED)
            *foreign |= 1u << i;
    }
    return NULL;
}

/* What a GPU does with work on memory that is gone: the op fails with
 * CUDA_ERROR_ILLEGAL_ADDRESS, which poisons its context and device (the
 * first sticky error stays until the process ends). `why` completes the
 * hazard report. Lock held. */
static void
op_fault(CUstream s, const sim_op *op, const sim_range *r, const char *why)
{
    if (s->linked)
        sim_ctx_poison(s->ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
    if (__atomic_load_n(&sim.hazards, __ATOMIC_RELAXED))
        sim__hazard_freed(s, op, r, why);
}

/* ------------------------------------------------------------------------
 * Crash reports. A fault on a worker thread prints what the worker was
 * running, then goes on to the handler installed before ours (or the
 * default action). Only async-signal-safe calls below; pthread_getspecific
 * reads the thread descriptor without locking or allocating in glibc. */

typedef struct worker_info {
    CUstream s;
    const sim_op *volatile op;
    /* op_check_ranges' bits for op: a fault in one of those ranges jumps
     * back to op_run instead of ending the process. */
    volatile unsigned foreign;
    volatile int caught; /* the range that faulted */
    volatile int signo;  /* and the signal it raised */
    int caller;          /* the thread is the op's caller (serve_inline) */
    sigjmp_buf resume;
} worker_info;

static pthread_key_t worker_key;
static pthread_once_t crash_once = PTHREAD_ONCE_INIT;
static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
#define NCRASH (sizeof crash_signals / sizeof crash_signals[0])
static struct sigaction crash_prev[NCRASH];
static volatile sig_atomic_t crash_ready;

typedef struct outbuf {
    char text[512];
    size_t n;
} outbuf;

static void
out_str(outbuf *b, const char *str)
{
    while (*str != '\0' && b->n < sizeof b->text)
        b->text[b->n++] = *str++;
}

static void
out_num(outbuf *b, unsigned long long v, unsigned base)
{
    char digits[24];
    int n = 0;

    if (base == 16)
        out_str(b, "0x");
    do {
        digits[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v != 0);
    while (n > 0 && b->n < sizeof b->text)
        b->text[b->n++] = digits[--n];
}

/* ") on the worker of " and s, for a crash report. */
static void
out_stream(outbuf *b, CUstream s, int caller)
{
    out_str(b, caller ? ") on the calling thread of " : ") on the worker of ");
    switch (s->kind) {
    case KIND_LEGACY:
        out_str(b, "the legacy default stream of context ");
        out_num(b, (uintptr_t)s->ctx, 16);
        break;
    case KIND_PTDS:
        out_str(b, "per-thread default stream #");
        out_num(b, s->owner, 10);
        break;
    case KIND_RECORDER:
        out_str(b, "the event recorder of context ");
        out_num(b, (uintptr_t)s->ctx, 16);
        break;
    default:
        out_str(b, "stream ");
        out_num(b, (uintptr_t)s, 16);
        break;
    }
}

static void
crash_report(int sig, const siginfo_t *info, const worker_info *w)
{
    const sim_op *op = w->op;
    CUstream s = w->s;
    outbuf b = {.n = 0};
    int i;

    out_str(&b, "cusim: fatal signal ");
    out_num(&b, (unsigned)sig, 10);
    out_str(&b, " (fault address ");
    out_num(&b, (uintptr_t)info->si_addr, 16);
    if (s == NULL)
        out_str(&b, ") on a parked stream worker");
    else
        out_stream(&b, s, w->caller);
    if (op == NULL) {
        out_str(&b, ", between operations\n");
    }
    else {
        out_str(&b, " while running ");
        out_str(&b, sim__entry_name(op->entry));
        out_str(&b, " (operation #");
        out_num(&b, op->seq, 10);
        out_str(&b, ")");
        for (i = 0; i < op->nranges && i < SIM_OP_RANGES; i++) {
            out_str(&b, op->ranges[i].write ? ", writes [" : ", reads [");
            out_num(&b, op->ranges[i].addr, 16);
            out_str(&b, ", +");
            out_num(&b, op->ranges[i].len, 10);
            out_str(&b, ")");
        }
        out_str(&b, "\n");
    }
    if (b.n == sizeof b.text)
        b.text[b.n - 1] = '\n';
    if (write(STDERR_FILENO, b.text, b.n) < 0)
        return;
}

/* The range of registered memory the fault at addr lies in, or -1. */
static int
foreign_range_at(const worker_info *w, uintptr_t addr)
{
    const sim_op *op = w->op;
    int i;

    for (i = 0; op != NULL && i < op->nranges && i < SIM_OP_RANGES; i++) {
        const sim_range *r = &op->ranges[i];

        if ((w->foreign & (1u << i)) && addr - r->addr < r->len)
            return i;
    }
    return -1;
}

static void
crash_handler(int sig, siginfo_t *info, void *uctx)
{
    worker_info *w = crash_ready ? pthread_getspecific(worker_key) : NULL;
    const struct sigaction *prev = NULL;
    size_t i;

    if (w != NULL && w->foreign != 0 && (sig == SIGSEGV || sig == SIGBUS)) {
        int r = foreign_range_at(w, (uintptr_t)info->si_addr);

        if (r >= 0) {
            w->caught = r;
            w->signo = sig;
            siglongjmp(w->resume, 1);
        }
    }
    if (w != NULL)
        crash_report(sig, info, w);
    for (i = 0; i < NCRASH; i++) {
        if (crash_signals[i] == sig)
            prev = &crash_prev[i];
    }
    if (prev != NULL && (prev->sa_flags & SA_SIGINFO) &&
        prev->sa_sigaction != NULL) {
        prev->sa_sigaction(sig, info, uctx);
        return;
    }
    if (prev != NULL && prev->sa_handler == SIG_IGN) {
        signal(sig, SIG_IGN); /* the kernel kills on a repeated fault */
        return;
    }
    if (prev != NULL && prev->sa_handler != SIG_DFL) {
        prev->sa_handler(sig);
        return;
    }
    /* The default action, as if we had never been here: a fault re-runs
     * the faulting instruction, a sent signal is raised again. */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void
crash_install(void)
{
    struct sigaction sa;
    size_t i;

    if (pthread_key_create(&worker_key, NULL) != 0)
        return;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (i = 0; i < NCRASH; i++)
        sigaction(crash_signals[i], &sa, &crash_prev[i]);
    crash_ready = 1;
}

/* Runs op on its worker; returns the range of registered memory that was
 * unmapped under it (the op stopped there), or NULL. The jump buffer does
 * not save the signal mask, which would cost a system call per op: the
 * handler's signal, the one signal the kernel blocked for it, is unblocked
 * again after a jump. */
static const sim_range *
op_run(worker_info *w, sim_op *op, unsigned foreign)
{
    if (foreign != 0 && sigsetjmp(w->resume, 0) != 0) {
        sigset_t caught;

        sigemptyset(&caught);
        sigaddset(&caught, w->signo);
        pthread_sigmask(SIG_UNBLOCK, &caught, NULL);
        w->foreign = 0;
        w->op = NULL;
        return &op->ranges[w->caught];
    }
    w->op = op;
    w->foreign = foreign;
    op->run(op);
    w->foreign = 0;
    w->op = NULL;
    return NULL;
}

/* Runs op, the head of s, and completes it (lock held but while it runs or
 * sleeps). */
static void
op_serve(worker_info *info, CUstream s, sim_op *op)
{
    const sim_range *stale, *unmapped = NULL;
    unsigned delay, foreign;

    /* Read per op: cusim_set_delay_us changes it at run time. */
    delay = op->sched && ((sched *)op->sched)->nodelay
                ? 0
                : __atomic_load_n(&sim.delay_us, __ATOMIC_RELAXED);
    if (delay) {
        sim_unlock();
        sleep_us(delay);
        sim_lock();
    }
    /* Frees wait for queued ops; a context reset only for running ones,
     * so memory may be gone by now. */
    stale = op_check_ranges(op, &foreign);
    if (stale != NULL)
        op_fault(s, op, stale, "memory freed before it ran");
    else
        s->running = op;
    sim_unlock();
    if (stale == NULL)
        unmapped = op_run(info, op, foreign);
    sim_lock();
    if (unmapped != NULL)
        op_fault(s, op, unmapped, "registered pages unmapped by their owner");
    s->running = NULL;
    s->head = op->next;
    if (s->head == NULL) {
        s->tail = NULL;
        queued_remove(s);
    }
    s->completed = op->seq;
    if (!stream_busy(s))
        busy_clear(s);
    sim__event_op_done(op);
    if (s->waiters != NULL)
        waiters_wake(s, 0);
    pthread_cond_broadcast(&sim.progress);
    sim_unlock();
    sim__op_free(op);
    sim_lock();
}

/* Waits until the stream of dep, which is not done, completes it or is
 * freed (lock held but while waiting). */
static void
dep_wait(const sim_dep *dep)
{
    CUstream on = slot_lookup(dep->uid);
    dep_waiter w = {.next = on->waiters,
                    .pprev = &on->waiters,
                    .seq = dep->seq,
                    .wake = PTHREAD_COND_INITIALIZER};

    if (w.next != NULL)
        w.next->pprev = &w.next;
    on->waiters = &w;
    pthread_cond_wait(&w.wake, &sim.lock);
    /* A spurious wake-up leaves w linked. */
    if (w.pprev != NULL) {
        *w.pprev = w.next;
        if (w.next != NULL)
            w.next->pprev = w.pprev;
    }
    pthread_cond_destroy(&w.wake);
}

/* Runs s's ops until it has none left (lock held throughout but while an
 * op runs, sleeps or waits). */
static void
worker_serve(worker_info *info, CUstream s)
{
    const sim_dep *dep;
    sim_op *op;

    while ((op = s->head) != NULL) {
        if ((dep = op_blocker(op)) != NULL)
            dep_wait(dep);
        else
            op_serve(info, s, op);
    }
}

/* w's stream has run dry: the next stream w serves, or NULL when w should
 * exit (enough are parked, or none wanted it for WORKER_IDLE_MS). */
static CUstream
worker_park(worker *w)
{
    struct timespec until;
    worker **pp;

    if (nparked >= WORKER_PARKED_MAX)
        return NULL;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += WORKER_IDLE_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    w->s = NULL;
    w->next = parked;
    parked = w;
    nparked++;
    while (w->s == NULL) {
        if (pthread_cond_timedwait(&w->wake, &sim.lock, &until) != ETIMEDOUT)
            continue;
        if (w->s != NULL)
            break;
        for (pp = &parked; *pp != w; pp = &(*pp)->next)
            ;
        *pp = w->next;
        nparked--;
        return NULL;
    }
    return w->s;
}

/* s has run dry and its worker leaves it: a closed stream is freed. */
static void
worker_leave(CUstream s)
{
    s->has_worker = 0;
    if (s->destroyed) {
        nclosing--;
        stream_free(s);
        pthread_cond_broadcast(&sim.progress);
    }
}

static void *
worker_main(void *arg)
{
    worker *w = arg;
    worker_info info = {.op = NULL};
    sigset_t faults;
    CUstream s;
    size_t i;

    /* Faults are delivered to the faulting thread: let ours be reported
     * (a blocked one kills the process without a word). */
    sigemptyset(&faults);
    for (i = 0; i < NCRASH; i++)
        sigaddset(&faults, crash_signals[i]);
    pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
    if (crash_ready)
        pthread_setspecific(worker_key, &info);
    sim_lock();
    for (s = w->s; s != NULL; s = worker_park(w)) {
        info.s = s;
        worker_serve(&info, s);
        info.s = NULL;
        worker_leave(s);
    }
    zombie_add();
    sim_unlock();
    pthread_cond_destroy(&w->wake);
    free(w);
    return NULL;
}

static int
worker_start(CUstream s)
{
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, old;
    worker *w = parked;
    int rc;

    if (w != NULL) {
        parked = w->next;
        nparked--;
        w->s = s;
        pthread_cond_signal(&w->wake);
        s->has_worker = 1;
        return 0;
    }
    reap_zombies(0);
    pthread_once(&crash_once, crash_install);
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return -1;
    if (pthread_cond_init(&w->wake, NULL) != 0) {
        free(w);
        return -1;
    }
    w->s = s;
    rc = pthread_attr_init(&attr);
    if (rc == 0) {
        /* Signals belong to the application's threads, not to ours. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = pthread_create(&thread, &attr, worker_main, w);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        pthread_cond_destroy(&w->wake);
        free(w);
        return -1;
    }
    /* Named, so that a debugger, top and the tests tell ours apart. */
    (void)pthread_setname_np(thread, SIM_WORKER_NAME);
    s->has_worker = 1;
    return 0;
}

/* Runs op, a synchronous call's op (or a SIM_ASYNC_INLINE one) just
 * queued on the idle stream s, on the calling thread, which serves as s's
 * worker meanwhile (the caller set s->has_worker): a hand-off to a worker
 * thread and back costs two wake-ups, tens of microseconds when the other
 * CPU sleeps. Work other threads queue on s meanwhile goes to a worker
 * afterwards, or is served here if none can start. */
static void
serve_inline(CUstream s, sim_op *op)
{
    worker_info info = {.s = s, .caller = 1};
    void *prev;

    pthread_once(&crash_once, crash_install);
    prev = crash_ready ? pthread_getspecific(worker_key) : NULL;
    if (crash_ready)
        pthread_setspecific(worker_key, &info);
    op_serve(&info, s, op);
    if (s->head == NULL || worker_start(s) < 0) {
        worker_serve(&info, s);
        worker_leave(s);
    }
    if (crash_ready)
        pthread_setspecific(worker_key, prev);
}

/* Closes s: queued work still runs, then its worker frees it. */
static void
stream_retire(CUstream s)
{
    s->destroyed = 1;
    if (s->has_worker) {
        nclosing++;
    }
    else {
        stream_free(s);
    }
}

/* At exit, wait a little for closing workers and join them, so that
 * streams destroyed just before exit leave no threads behind. */
__attribute__((destructor)) static void
streams_at_exit(void)
{
    struct timespec until;

    if (!sim.initialized || sim.init_pid != getpid())
        return;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    sim_lock();
    while (nclosing > 0) {
        if (pthread_cond_timedwait(&sim.progress, &sim.lock, &until) != 0)
            break;
    }
    reap_zombies(1);
    sim_unlock();
}

/* ------------------------------------------------------------------------
 * Resolving handles. */

CUresult
sim__current_ctx(CUcontext *out)
{
    return sim_ctx_get(out);
}

int
sim__is_special_stream(CUstream h)
{
    return h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

int
sim_names_legacy(CUstream h, int ptds)
{
    return h == CU_STREAM_LEGACY || (h == NULL && !ptds);
}

static CUstream
ptds_get(CUcontext ctx, int create)
{
    CUstream s;

    if (tls_ptds_ctx == ctx && tls_ptds_uid != 0) {
        s = slot_lookup(tls_ptds_uid);
        if (s != NULL && s->ctx == ctx && s->linked && !s->destroyed)
            return s;
    }
    if (tls_thread_id == 0)
        tls_thread_id = ++next_thread_id;
    for (s = ctx->streams; s != NULL; s = s->next) {
        if (s->kind == KIND_PTDS && s->owner == tls_thread_id && !s->destroyed)
            break;
    }
    if (s == NULL && create) {
        s = stream_new(ctx, KIND_PTDS, CU_STREAM_DEFAULT, 0);
        if (s != NULL)
            s->owner = tls_thread_id;
    }
    if (s != NULL) {
        tls_ptds_ctx = ctx;
        tls_ptds_uid = s->uid;
    }
    return s;
}

CUresult
sim__stream_resolve(CUstream h, int ptds, CUcontext ctx, int flags,
                    CUstream *out)
{
    CUstream s;

    *out = NULL;
    if (h == NULL)
        h = ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        if (ctx == NULL)
            return CUDA_ERROR_INVALID_CONTEXT;
        /* Released since the caller looked it up: make nothing there. */
        if (!__atomic_load_n(&ctx->active, __ATOMIC_ACQUIRE))
            return CUDA_ERROR_CONTEXT_IS_DESTROYED;
        if (h == CU_STREAM_PER_THREAD) {
            s = ptds_get(ctx, flags & SIM_RESOLVE_CREATE);
        }
        else {
            s = ctx->legacy;
            if (s == NULL && (flags & SIM_RESOLVE_CREATE))
                s = stream_new(ctx, KIND_LEGACY, CU_STREAM_DEFAULT, 0);
        }
        if (s == NULL && (flags & SIM_RESOLVE_CREATE))
            return CUDA_ERROR_OUT_OF_MEMORY;
        *out = s;
        return CUDA_SUCCESS;
    }
    if (!sim__handle_live(h, SIM_MAGIC_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    if ((flags & SIM_RESOLVE_SAME_CTX) && h->ctx != ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = h;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Queueing. */

static int
deps_add(sim_dep **deps, size_t *n, size_t *cap, uint64_t uid, uint64_t seq)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        sim_dep *d = realloc(*deps, c * sizeof *d);
        if (d == NULL)
            return -1;
        *deps = d;
        *cap = c;
    }
    (*deps)[*n].uid = uid;
    (*deps)[*n].seq = seq;
    (*n)++;
    return 0;
}

CUresult
sim__enqueue(CUstream s, sim_op *op, const sim_dep *extra, size_t nextra,
             const sim_vclock *extra_vc, int nodelay)
{
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    sim_dep *deps = NULL;
    size_t n = 0, cap = 0;
    CUstream b;
    sched *sc = NULL;

    /* The legacy stream's implicit synchronization with blocking
     * streams, both ways; non-blocking streams take no part in it. A
     * capturing stream cannot take part: the capture is invalidated. */
    if (s->kind == KIND_LEGACY) {
        sim_capture *c = sim__ctx_blocking_capture(s->ctx);

        if (c != NULL) {
            sim__capture_invalidate(c);
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
        for (b = s->ctx->busy; b != NULL; b = b->busy_next) {
            if (stream_blocking(b) &&
                deps_add(&deps, &n, &cap, b->uid, b->submitted) < 0)
                goto done;
        }
    }
    else if (stream_blocking(s) && s->ctx->legacy != NULL &&
             stream_busy(s->ctx->legacy)) {
        b = s->ctx->legacy;
        if (deps_add(&deps, &n, &cap, b->uid, b->submitted) < 0)
            goto done;
    }
    for (size_t i = 0; i < nextra; i++) {
        if (deps_add(&deps, &n, &cap, extra[i].uid, extra[i].seq) < 0)
            goto done;
    }
    if (n > 0 || nodelay) {
        sc = malloc(sizeof *sc + n * sizeof(sim_dep));
        if (sc == NULL)
            goto done;
        sc->nodelay = nodelay;
        sc->ndeps = n;
        if (n > 0)
            memcpy(sc->deps, deps, n * sizeof(sim_dep));
    }
    if (!s->has_worker && worker_start(s) < 0) {
        free(sc);
        goto done;
    }
    /* The new op follows everything its dependencies follow. */
    if (s->kind == KIND_LEGACY) {
        for (b = s->ctx->busy; b != NULL; b = b->busy_next) {
            if (stream_blocking(b))
                sim__vc_join(&s->vc, &b->vc);
        }
    }
    else if (stream_blocking(s) && s->ctx->legacy != NULL &&
             stream_busy(s->ctx->legacy)) {
        sim__vc_join(&s->vc, &s->ctx->legacy->vc);
    }
    if (extra_vc != NULL)
        sim__vc_join(&s->vc, extra_vc);
    op->sched = sc;
    op->stream = s;
    op->next = NULL;
    busy_mark(s);
    op->seq = ++s->submitted;
    if (s->tail != NULL) {
        s->tail->next = op;
    }
    else {
        s->head = op;
        queued_add(s);
    }
    s->tail = op;
    sim__vc_put(&s->vc, s->uid, op->seq);
    sim__vc_prune(&s->vc);
    if (op->nranges > 0 && __atomic_load_n(&sim.hazards, __ATOMIC_RELAXED))
        sim__hazard_check(s, op);
    r = CUDA_SUCCESS;
done:
    free(deps);
    return r;
}

int
sim__stream_idle(CUstream s)
{
    CUstream b;

    if (stream_busy(s) || s->capture != NULL ||
        __atomic_load_n(&sim.delay_us, __ATOMIC_RELAXED) != 0)
        return 0;
    /* The legacy stream's implicit synchronization (sim__enqueue): it
     * waits for every blocking stream, and may not join a capture (any
     * capture sends it there, which tells blocking ones apart). */
    if (s->kind == KIND_LEGACY) {
        lists_check(s->ctx);
        if (s->ctx->ncapturing > 0)
            return 0;
        for (b = s->ctx->busy; b != NULL; b = b->busy_next) {
            if (stream_blocking(b))
                return 0;
        }
        return 1;
    }
    return !stream_blocking(s) || s->ctx->legacy == NULL ||
           !stream_busy(s->ctx->legacy);
}

uint64_t
sim__stream_pass(CUstream s)
{
    uint64_t seq = ++s->submitted;

    s->completed = seq;
    sim__vc_put(&s->vc, s->uid, seq);
    sim__vc_prune(&s->vc);
    return seq;
}

uint64_t
sim__stream_submitted(CUstream s)
{
    return s->submitted;
}

sim_capture *
sim__stream_capture(CUstream s)
{
    return s->capture;
}

void
sim__stream_set_capture(CUstream s, sim_capture *c)
{
    if (stream_listed(s) && (s->capture != NULL) != (c != NULL))
        s->ctx->ncapturing += c != NULL ? 1 : -1;
    s->capture = c;
}

sim_capture *
sim__ctx_blocking_capture(CUcontext ctx)
{
    CUstream b;

    for (b = ctx->ncapturing > 0 ? ctx->streams : NULL; b != NULL;
         b = b->next) {
        if (b->capture != NULL && stream_blocking(b))
            return b->capture;
    }
    return NULL;
}

const sim_vclock *
sim__stream_vc(CUstream s)
{
    return &s->vc;
}

uint64_t
sim__stream_uid(CUstream s)
{
    return s->uid;
}

CUcontext
sim__stream_ctx(CUstream s)
{
    return s->ctx;
}

CUresult
sim_stream_submit(CUstream hStream, int ptds, sim_op *op, sim_sync mode)
{
    CUcontext ctx;
    CUstream s;
    CUresult r;
    uint64_t uid, seq;

    op->sched = NULL;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS) {
        sim__op_free(op);
        return r;
    }
    sim_lock();
    r = sim__stream_resolve(hStream, ptds, ctx,
                            SIM_RESOLVE_CREATE | SIM_RESOLVE_SAME_CTX, &s);
    if (r == CUDA_SUCCESS && s->capture != NULL) {
        /* Captured, not run. A synchronous call cannot be captured: it
         * would wait for work that does not run (cuda.h). */
        if (mode != SIM_ASYNC && mode != SIM_ASYNC_INLINE) {
            sim__capture_invalidate(s->capture);
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
        else {
            r = sim__capture_add(s->capture, s, op);
        }
        sim_unlock();
        if (r != CUDA_SUCCESS)
            sim__op_free(op);
        return r;
    }
    if (r == CUDA_SUCCESS && (mode == SIM_BLOCK || mode == SIM_ASYNC_INLINE) &&
        !s->has_worker && sim__stream_idle(s)) {
        s->has_worker = 1;
        r = sim__enqueue(s, op, NULL, 0, NULL, 0);
        if (r == CUDA_SUCCESS) {
            serve_inline(s, op);
            r = ctx_sticky(ctx);
            sim_unlock();
            return r;
        }
        s->has_worker = 0;
    }
    else if (r == CUDA_SUCCESS) {
        r = sim__enqueue(s, op, NULL, 0, NULL, 0);
    }
    if (r != CUDA_SUCCESS) {
        sim_unlock();
        sim__op_free(op);
        return r;
    }
    if (mode == SIM_BLOCK || mode == SIM_STAGED) {
        uid = s->uid;
        seq = op->seq;
        /* op lives until its stream completes it. SIM_STAGED: the stream
         * sync before the copy starts, so everything op waits for. */
        while (!sim__dep_done(uid, seq) &&
               (mode == SIM_BLOCK || !sim__dep_done(uid, seq - 1) ||
                !op_ready(op)))
            pthread_cond_wait(&sim.progress, &sim.lock);
        r = ctx_sticky(ctx);
    }
    sim_unlock();
    return r;
}

CUresult
sim_stream_check(CUstream hStream, int ptds, uint64_t *uid)
{
    CUcontext ctx;
    CUstream s;
    CUresult r;

    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    r = sim__stream_resolve(hStream, ptds, ctx, SIM_RESOLVE_SAME_CTX, &s);
    *uid = r == CUDA_SUCCESS && s != NULL ? s->uid : 0;
    sim_unlock();
    return r;
}

uint64_t
sim_op_stream_uid(const sim_op *op)
{
    return op->stream->uid;
}

CUcontext
sim_op_blocking_ctx(const sim_op *op)
{
    return stream_blocking(op->stream) ? op->stream->ctx : NULL;
}

void
sim__stream_pool_cover(CUstream s, sim_pool_cover *out)
{
    out->stream_uid = s->uid;
    out->legacy_of = s->kind == KIND_LEGACY ? s->ctx : NULL;
    out->frees = sim_pool_frees_queued();
}

/* Work a synchronize of s waits for: its own, and for the legacy stream
 * also that of every blocking stream (as if a marker were queued). */
static int
stream_targets(CUstream s, sim_dep **deps, size_t *n)
{
    size_t cap = 0;
    CUstream b;

    *deps = NULL;
    *n = 0;
    if (stream_busy(s) && deps_add(deps, n, &cap, s->uid, s->submitted) < 0)
        return -1;
    if (s->kind != KIND_LEGACY)
        return 0;
    for (b = s->ctx->busy; b != NULL; b = b->busy_next) {
        if (stream_blocking(b) &&
            deps_add(deps, n, &cap, b->uid, b->submitted) < 0)
            return -1;
    }
    return 0;
}

static int
deps_done(const sim_dep *deps, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (!sim__dep_done(deps[i].uid, deps[i].seq))
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------
 * Internal ops: callbacks, host functions, memory attachment. */

typedef struct cb_op {
    sim_op op;
    CUstream handle; /* as the caller named it */
    CUstreamCallback cb;
    CUhostFn fn;
    void *user;
} cb_op;

static void
cb_run(sim_op *op)
{
    cb_op *c = (cb_op *)op;
    CUresult status;

    sim_lock();
    status = op->stream->linked ? ctx_sticky(op->stream->ctx)
                                : CUDA_ERROR_CONTEXT_IS_DESTROYED;
    sim_unlock();
    sim_set_in_callback(1);
    if (c->cb != NULL)
        c->cb(c->handle, status, c->user);
    else
        c->fn(c->user);
    sim_set_in_callback(0);
}

typedef struct attach_op {
    sim_op op;
    uintptr_t addr;
    unsigned flags;
} attach_op;

static void
attach_run(sim_op *op)
{
    attach_op *a = (attach_op *)op;
    sim_alloc *m;

    sim_lock();
    m = sim_mem_find(a->addr);
    if (m != NULL && m->kind == SIM_MEM_MANAGED && m->base == a->addr)
        m->flags = a->flags;
    sim_unlock();
}

/* Resolves h for an operation, with the current context when h is one of
 * the special handles; lock not held on entry, held on success. */
static CUresult
lock_stream(CUstream h, int ptds, int flags, CUstream *out, CUcontext *ctx)
{
    CUresult r;

    *ctx = NULL;
    if ((flags & SIM_RESOLVE_SAME_CTX) || sim__is_special_stream(h)) {
        r = sim__current_ctx(ctx);
        if (r != CUDA_SUCCESS)
            return r;
    }
    sim_lock();
    r = sim__stream_resolve(h, ptds, *ctx, flags, out);
    if (r != CUDA_SUCCESS)
        sim_unlock();
    return r;
}

static CUresult
add_host_call(CUstream h, int ptds, CUstreamCallback cb, CUhostFn fn,
              void *user)
{
    cb_op *c = calloc(1, sizeof *c);

    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->op.run = cb_run;
    c->op.entry = cb != NULL ? SIM_cuStreamAddCallback : SIM_cuLaunchHostFunc;
    c->handle = h;
    c->cb = cb;
    c->fn = fn;
    c->user = user;
    return sim_stream_submit(h, ptds, &c->op, SIM_ASYNC);
}

/* ------------------------------------------------------------------------
 * Entry points. */

static CUresult
stream_create(CUstream *phStream, unsigned flags, int priority)
{
    CUcontext ctx;
    CUstream s;
    CUresult r;

    if (phStream == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    /* Clamped to cuCtxGetStreamPriorityRange, as the driver does. */
    if (priority < SIM_PRIORITY_GREATEST)
        priority = SIM_PRIORITY_GREATEST;
    if (priority > SIM_PRIORITY_LEAST)
        priority = SIM_PRIORITY_LEAST;
    sim_lock();
    s = stream_new(ctx, KIND_USER, flags, priority);
    if (s != NULL && sim__handle_add(s) < 0) {
        stream_free(s);
        s = NULL;
    }
    if (s != NULL)
        sim.live.streams++;
    sim_unlock();
    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = s;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult
cuStreamDestroy(CUstream hStream)
{
    SIM_ENTER(cuStreamDestroy);
    if (sim__is_special_stream(hStream))
        return CUDA_ERROR_INVALID_HANDLE;
    sim_lock();
    if (!sim__handle_live(hStream, SIM_MAGIC_STREAM)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    sim__handle_remove(hStream);
    sim.live.streams--;
    stream_retire(hStream);
    sim_unlock();
    return CUDA_SUCCESS;
}

/* Lock held. Waiting for (or asking about) a capturing stream is not
 * permitted and invalidates its capture; so is the legacy stream's
 * implicit wait for a capturing blocking stream. */
static CUresult
capture_wait_check(CUstream h, int ptds, CUstream s, CUcontext ctx)
{
    sim_capture *c = NULL;
    CUresult r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;

    if (s != NULL && s->capture != NULL) {
        c = s->capture;
    }
    else if (sim_names_legacy(h, ptds)) {
        c = sim__ctx_blocking_capture(ctx);
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    if (c == NULL)
        return CUDA_SUCCESS;
    sim__capture_invalidate(c);
    return r;
}

/* How a synchronize or query resolves h: the legacy stream is made when
 * not yet, since it still waits for the context's blocking streams. */
static int
legacy_resolve(CUstream h, int ptds)
{
    return sim_names_legacy(h, ptds) ? SIM_RESOLVE_CREATE : 0;
}

static CUresult
stream_synchronize(CUstream h, int ptds)
{
    CUstream s;
    CUcontext ctx;
    CUresult r;
    sim_dep *deps;
    sim_pool_cover cover;
    size_t n;

    r = lock_stream(h, ptds, legacy_resolve(h, ptds), &s, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    r = capture_wait_check(h, ptds, s, ctx);
    if (r != CUDA_SUCCESS || s == NULL) {
        sim_unlock();
        return r;
    }
    if (stream_targets(s, &deps, &n) < 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    sim__stream_pool_cover(s, &cover);
    while (!deps_done(deps, n))
        pthread_cond_wait(&sim.progress, &sim.lock);
    /* A destroyed context cannot have poisoned anything left here. */
    r = s->linked ? ctx_sticky(s->ctx) : CUDA_SUCCESS;
    sim_pool_sync(&cover);
done:
    free(deps);
    sim_unlock();
    return r;
}

static CUresult
stream_query(CUstream h, int ptds)
{
    CUstream s;
    CUcontext ctx;
    CUresult r;
    sim_dep *deps;
    size_t n;

    r = lock_stream(h, ptds, legacy_resolve(h, ptds), &s, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    r = capture_wait_check(h, ptds, s, ctx);
    if (r != CUDA_SUCCESS || s == NULL) {
        sim_unlock();
        return r;
    }
    if (stream_targets(s, &deps, &n) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (!deps_done(deps, n))
        r = CUDA_ERROR_NOT_READY;
    else
        r = s->linked ? ctx_sticky(s->ctx) : CUDA_SUCCESS;
    free(deps);
    sim_unlock();
    return r;
}

static CUresult
stream_wait_event(CUstream h, int ptds, CUevent ev, unsigned flags)
{
    CUstream s;
    CUcontext ctx;
    CUresult r;
    sim_op *op, *ipc_wait = NULL;
    sim_dep dep;
    const sim_vclock *vc;

    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    op = calloc(1, sizeof *op);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->run = sim__noop_run;
    op->entry = SIM_cuStreamWaitEvent;
    r = lock_stream(h, ptds, SIM_RESOLVE_CREATE | SIM_RESOLVE_SAME_CTX, &s,
                    &ctx);
    if (r != CUDA_SUCCESS) {
        free(op);
        return r;
    }
    r = sim__event_pending(ev, &dep, &vc);
    if (r == CUDA_SUCCESS)
        r = sim__event_capture_wait(ev, s, s->kind == KIND_LEGACY);
    if (r == CUDA_SUCCESS && s->capture != NULL) {
        /* A dependency of its next node, nothing to queue. */
        sim_unlock();
        sim__op_free(op);
        return CUDA_SUCCESS;
    }
    if (r == CUDA_SUCCESS)
        r = sim__event_ipc_wait(ev, &ipc_wait);
    /* Work captured by the event is already done (or there is none): the
     * stream has nothing to wait for. */
    if (r == CUDA_SUCCESS && dep.uid != 0) {
        r = sim__enqueue(s, op, &dep, 1, vc, 1);
        if (r == CUDA_SUCCESS)
            op = NULL;
    }
    /* Records of an interprocess event made in any process. */
    if (r == CUDA_SUCCESS && ipc_wait != NULL) {
        r = sim__enqueue(s, ipc_wait, NULL, 0, NULL, 1);
        if (r == CUDA_SUCCESS)
            ipc_wait = NULL;
    }
    sim_unlock();
    if (op != NULL)
        sim__op_free(op);
    if (ipc_wait != NULL)
        sim__op_free(ipc_wait);
    return r;
}

static CUresult
stream_add_callback(CUstream h, int ptds, CUstreamCallback cb, void *user,
                    unsigned flags)
{
    if (cb == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return add_host_call(h, ptds, cb, NULL, user);
}

SIM_EXPORT CUresult
cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    SIM_ENTER(cuLaunchHostFunc);
    if (fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return add_host_call(hStream, 0, NULL, fn, userData);
}

SIM_EXPORT CUresult
cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    SIM_ENTER(cuLaunchHostFunc);
    if (fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return add_host_call(hStream, 1, NULL, fn, userData);
}

/* Priority, flags and context of a stream; special handles read as a
 * default-priority blocking stream of the current context. */
static CUresult
stream_props(CUstream h, int ptds, int *priority, unsigned *flags,
             CUcontext *pctx)
{
    CUstream s;
    CUcontext ctx;
    CUresult r;

    r = lock_stream(h, ptds, 0, &s, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (sim__is_special_stream(h)) {
        *priority = 0;
        *flags = CU_STREAM_DEFAULT;
        *pctx = ctx;
    }
    else {
        *priority = s->priority;
        *flags = s->flags;
        *pctx = s->ctx;
    }
    sim_unlock();
    return CUDA_SUCCESS;
}

static CUresult
stream_get_priority(CUstream h, int ptds, int *priority)
{
    unsigned flags;
    CUcontext ctx;

    if (priority == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return stream_props(h, ptds, priority, &flags, &ctx);
}

static CUresult
stream_get_flags(CUstream h, int ptds, unsigned *flags)
{
    int priority;
    CUcontext ctx;

    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return stream_props(h, ptds, &priority, flags, &ctx);
}

static CUresult
stream_get_ctx(CUstream h, int ptds, CUcontext *pctx)
{
    int priority;
    unsigned flags;

    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return stream_props(h, ptds, &priority, &flags, pctx);
}

/* ------------------------------------------------------------------------
 * Stream ids and attributes. */

static CUresult
stream_get_id(CUstream h, int ptds, unsigned long long *id)
{
    CUstream s;
    CUcontext ctx;
    CUresult r;

    if (id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = lock_stream(h, ptds, SIM_RESOLVE_CREATE, &s, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    *id = s->uid;
    sim_unlock();
    return CUDA_SUCCESS;
}

/* The stream attributes a stream has (cuda.h lists five); any other id is
 * a launch attribute streams do not take. Lock held. */
static CUresult
stream_attr(CUstream s, int special, CUstreamAttrID attr,
            CUstreamAttrValue *get, const CUstreamAttrValue *set)
{
    int max_window = 0, domains = 0;

    switch (attr) {
    case CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        if (get != NULL) {
            get->accessPolicyWindow = s->window;
            return CUDA_SUCCESS;
        }
        sim_device_attribute(s->ctx->dev,
                             CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE,
                             &max_window);
        if (set->accessPolicyWindow.num_bytes > (size_t)max_window ||
            !(set->accessPolicyWindow.hitRatio >= 0.0f &&
              set->accessPolicyWindow.hitRatio <= 1.0f) ||
            set->accessPolicyWindow.hitProp > CU_ACCESS_PROPERTY_PERSISTING ||
            set->accessPolicyWindow.missProp > CU_ACCESS_PROPERTY_STREAMING)
            return CUDA_ERROR_INVALID_VALUE;
        s->window = set->accessPolicyWindow;
        return CUDA_SUCCESS;
    case CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY:
        if (get != NULL) {
            get->syncPolicy = s->sync_policy;
            return CUDA_SUCCESS;
        }
        if (set->syncPolicy < CU_SYNC_POLICY_AUTO ||
            set->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC)
            return CUDA_ERROR_INVALID_VALUE;
        s->sync_policy = set->syncPolicy;
        return CUDA_SUCCESS;
    case CU_STREAM_ATTRIBUTE_PRIORITY:
        if (get != NULL) {
            get->priority = special ? 0 : s->priority;
            return CUDA_SUCCESS;
        }
        /* A default stream's priority is fixed (cuStreamGetPriority). */
        if (special)
            return CUDA_ERROR_INVALID_VALUE;
        s->priority = set->priority < SIM_PRIORITY_GREATEST
                          ? SIM_PRIORITY_GREATEST
                      : set->priority > SIM_PRIORITY_LEAST ? SIM_PRIORITY_LEAST
                                                           : set->priority;
        return CUDA_SUCCESS;
    case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        if (get != NULL) {
            get->memSyncDomainMap = s->domain_map;
            return CUDA_SUCCESS;
        }
        sim_device_attribute(
            s->ctx->dev, CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT, &domains);
        if (set->memSyncDomainMap.default_ >= domains ||
            set->memSyncDomainMap.remote >= domains)
            return CUDA_ERROR_INVALID_VALUE;
        s->domain_map = set->memSyncDomainMap;
        return CUDA_SUCCESS;
    case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN:
        if (get != NULL) {
            get->memSyncDomain = s->domain;
            return CUDA_SUCCESS;
        }
        if (set->memSyncDomain != CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT &&
            set->memSyncDomain != CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
            return CUDA_ERROR_INVALID_VALUE;
        s->domain = set->memSyncDomain;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult
stream_attribute(CUstream h, int ptds, CUstreamAttrID attr,
                 CUstreamAttrValue *get, const CUstreamAttrValue *set)
{
    CUstream s;
    CUcontext ctx;
    CUresult r;

    if (get == NULL && set == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = lock_stream(h, ptds, SIM_RESOLVE_CREATE, &s, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    r = stream_attr(s, sim__is_special_stream(h), attr, get, set);
    sim_unlock();
    return r;
}

static CUresult
stream_attach(CUstream h, int ptds, CUdeviceptr dptr, size_t length,
              unsigned flags)
{
    attach_op *a;
    sim_alloc *m;
    int bad;

    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
        flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    /* A single-stream attachment needs a specific stream. */
    if (flags == CU_MEM_ATTACH_SINGLE && (h == NULL || h == CU_STREAM_LEGACY))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    m = sim_mem_find((uintptr_t)dptr);
    bad = m == NULL || m->kind != SIM_MEM_MANAGED ||
          m->base != (uintptr_t)dptr || (length != 0 && length != m->size);
    sim_unlock();
    if (bad)
        return CUDA_ERROR_INVALID_VALUE;
    a = calloc(1, sizeof *a);
    if (a == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->op.run = attach_run;
    a->op.entry = SIM_cuStreamAttachMemAsync;
    a->addr = (uintptr_t)dptr;
    a->flags = flags;
    return sim_stream_submit(h, ptds, &a->op, SIM_ASYNC);
}

SIM_EXPORT CUresult
cuCtxSynchronize(void)
{
    CUcontext ctx;
    CUstream s;
    CUresult r;

    SIM_ENTER(cuCtxSynchronize);
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    /* Not while any of its streams captures; the captures end invalid. */
    sim_lock();
    for (s = ctx->ncapturing > 0 ? ctx->streams : NULL; s != NULL;
         s = s->next) {
        if (s->capture != NULL) {
            sim__capture_invalidate(s->capture);
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    sim_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    r = sim_ctx_drain(ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    sim_pool_sync(NULL);
    sim_unlock();
    return ctx_sticky(ctx);
}

/* Lock held. The deps and joined clock of every busy stream of ctx but
 * the recorder: what a record behind all of them follows. */
static int
ctx_target(CUstream s, sim_dep **deps, size_t *n, size_t *cap, sim_vclock *vc)
{
    if (s == NULL || !stream_busy(s))
        return 0;
    sim__vc_join(vc, &s->vc);
    return deps_add(deps, n, cap, s->uid, s->submitted);
}

static int
ctx_targets(CUcontext ctx, sim_dep **deps, size_t *n, sim_vclock *vc)
{
    size_t cap = 0;
    CUstream s;

    *deps = NULL;
    *n = 0;
    if (ctx_target(ctx->legacy, deps, n, &cap, vc) < 0)
        return -1;
    for (s = ctx->busy; s != NULL; s = s->busy_next) {
        if (ctx_target(s, deps, n, &cap, vc) < 0)
            return -1;
    }
    return 0;
}

/* An event that completes once every stream of the context, non-blocking
 * and per-thread ones included, has run what it holds now. Refused while
 * any of them captures, whose captures end invalid (as cuCtxSynchronize;
 * both seen on an H100, tests/gpu/driver_facts.json). */
SIM_EXPORT CUresult
cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent)
{
    sim_vclock vc = {0};
    sim_dep *deps = NULL;
    size_t n = 0;
    CUstream s;
    CUresult r = CUDA_SUCCESS;

    SIM_ENTER(cuCtxRecordEvent);
    sim_lock();
    if (hCtx == NULL || !sim_ctx_valid(hCtx)) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto done;
    }
    if (!sim__handle_live(hEvent, SIM_MAGIC_EVENT) ||
        sim__event_ctx(hEvent) != hCtx) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto done;
    }
    r = ctx_sticky(hCtx);
    if (r != CUDA_SUCCESS)
        goto done;
    for (s = hCtx->ncapturing > 0 ? hCtx->streams : NULL; s != NULL;
         s = s->next) {
        if (s->capture != NULL) {
            sim__capture_invalidate(s->capture);
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    if (r != CUDA_SUCCESS)
        goto done;
    s = hCtx->recorder;
    if (s == NULL && (s = stream_new(hCtx, KIND_RECORDER,
                                     CU_STREAM_NON_BLOCKING, 0)) == NULL) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if (ctx_targets(hCtx, &deps, &n, &vc) < 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    r = sim__event_record_on(hEvent, s, deps, n, n > 0 ? &vc : NULL);
done:
    sim_unlock();
    free(deps);
    sim__vc_free(&vc);
    return r;
}

SIM_EXPORT CUresult
cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    CUcontext ctx;
    CUresult r;

    SIM_ENTER(cuCtxGetStreamPriorityRange);
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (leastPriority != NULL)
        *leastPriority = SIM_PRIORITY_LEAST;
    if (greatestPriority != NULL)
        *greatestPriority = SIM_PRIORITY_GREATEST;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Whole contexts. */

static int
ctx_busy(CUcontext ctx)
{
    lists_check(ctx);
    return (ctx->legacy != NULL && stream_busy(ctx->legacy)) ||
           (ctx->recorder != NULL && stream_busy(ctx->recorder)) ||
           ctx->busy != NULL;
}

CUresult
sim_ctx_drain(CUcontext ctx)
{
    sim_lock();
    while (ctx_busy(ctx))
        pthread_cond_wait(&sim.progress, &sim.lock);
    sim_unlock();
    return CUDA_SUCCESS;
}

static void
stream_close(CUstream s)
{
    if (s->kind == KIND_USER && !s->destroyed) {
        sim__handle_remove(s);
        sim.live.streams--;
    }
    stream_unlink(s);
    if (!s->destroyed)
        stream_retire(s);
}

void
sim_streams_release_ctx(CUcontext ctx)
{
    /* stream_close unlinks the head before it may free it (every stream
     * on ctx->streams has s->ctx == ctx and is linked), so the head moves
     * on; the analyzer cannot see that s->ctx is ctx. */
    while (ctx->streams != NULL)
        /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
        stream_close(ctx->streams);
    if (ctx->legacy != NULL)
        stream_close(ctx->legacy);
    if (ctx->recorder != NULL)
        stream_close(ctx->recorder);
    sim__events_release_ctx(ctx);
}

static int
range_overlaps(const sim_op *op, uintptr_t addr, size_t len)
{
    int i;

    for (i = 0; i < op->nranges; i++) {
        const sim_range *r = &op->ranges[i];

        if (r->len > 0 && len > 0 && r->addr < addr + len &&
            addr < r->addr + r->len)
            return 1;
    }
    return 0;
}

int
sim_range_busy(uintptr_t addr, size_t len, int queued_too)
{
    const sim_op *e;
    CUstream s;

    /* A running op is its stream's head. */
    for (s = queued; s != NULL; s = s->q_next) {
        if (!queued_too) {
            if (s->running != NULL && range_overlaps(s->running, addr, len))
                return 1;
            continue;
        }
        for (e = s->head; e != NULL; e = e->next) {
            if (range_overlaps(e, addr, len))
                return 1;
        }
    }
    return 0;
}

/* Every stream with ops queued, for the hazard checker. Lock held. */
void
sim__streams_each(void (*fn)(CUstream s, void *arg), void *arg)
{
    CUstream s;

    for (s = queued; s != NULL; s = s->q_next)
        fn(s, arg);
}

const sim_op *
sim__stream_head(CUstream s)
{
    return s->head;
}

void
sim__stream_label(CUstream s, char *buf, size_t size)
{
    switch (s->kind) {
    case KIND_LEGACY:
        snprintf(buf, size, "legacy default stream of context %p",
                 (void *)s->ctx);
        break;
    case KIND_PTDS:
        snprintf(buf, size, "per-thread default stream #%llu",
                 (unsigned long long)s->owner);
        break;
    case KIND_RECORDER:
        snprintf(buf, size, "event recorder of context %p", (void *)s->ctx);
        break;
    default:
        snprintf(buf, size, "stream %p", (void *)s);
        break;
    }
}

/* ---------------------------------------------------------------------------
 * Entry points: one row per exported ABI alias (see SIM_ALIAS_WRAPPER in
 * sim.h); the wrappers of the W rows, then the cuGetProcAddress rows. */

/* clang-format off */
#define STREAM_ALIASES(W, R)                                                  \
    W(cuStreamCreate, cuStreamCreate, 2000, , stream_create,                  \
      (CUstream *phStream, unsigned int Flags), (phStream, Flags, 0))         \
    W(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050, ,         \
      stream_create, (CUstream *phStream, unsigned int flags, int priority),  \
      (phStream, flags, priority))                                            \
    R(cuStreamDestroy_v2, cuStreamDestroy, 4000, )                            \
    W(cuStreamSynchronize, cuStreamSynchronize, 2000, , stream_synchronize,   \
      (CUstream hStream), (hStream, 0))                                       \
    W(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, _ptsz,             \
      stream_synchronize, (CUstream hStream), (hStream, 1))                   \
    W(cuStreamQuery, cuStreamQuery, 2000, , stream_query, (CUstream hStream), \
      (hStream, 0))                                                           \
    W(cuStreamQuery_ptsz, cuStreamQuery, 7000, _ptsz, stream_query,           \
      (CUstream hStream), (hStream, 1))                                       \
    W(cuStreamWaitEvent, cuStreamWaitEvent, 3020, , stream_wait_event,        \
      (CUstream hStream, CUevent hEvent, unsigned int Flags),                 \
      (hStream, 0, hEvent, Flags))                                            \
    W(cuStreamWaitEvent_ptsz, cuStreamWaitEvent, 7000, _ptsz,                 \
      stream_wait_event,                                                      \
      (CUstream hStream, CUevent hEvent, unsigned int Flags),                 \
      (hStream, 1, hEvent, Flags))                                            \
    W(cuStreamAddCallback, cuStreamAddCallback, 5000, , stream_add_callback,  \
      (CUstream hStream, CUstreamCallback callback, void *userData,           \
      unsigned int flags), (hStream, 0, callback, userData, flags))           \
    W(cuStreamAddCallback_ptsz, cuStreamAddCallback, 7000, _ptsz,             \
      stream_add_callback, (CUstream hStream, CUstreamCallback callback,      \
      void *userData, unsigned int flags),                                    \
      (hStream, 1, callback, userData, flags))                                \
    R(cuLaunchHostFunc, cuLaunchHostFunc, 10000, )                            \
    R(cuLaunchHostFunc_ptsz, cuLaunchHostFunc, 10000, _ptsz)                  \
    W(cuStreamGetPriority, cuStreamGetPriority, 5050, , stream_get_priority,  \
      (CUstream hStream, int *priority), (hStream, 0, priority))              \
    W(cuStreamGetPriority_ptsz, cuStreamGetPriority, 7000, _ptsz,             \
      stream_get_priority, (CUstream hStream, int *priority),                 \
      (hStream, 1, priority))                                                 \
    W(cuStreamGetFlags, cuStreamGetFlags, 5050, , stream_get_flags,           \
      (CUstream hStream, unsigned int *flags), (hStream, 0, flags))           \
    W(cuStreamGetFlags_ptsz, cuStreamGetFlags, 7000, _ptsz, stream_get_flags, \
      (CUstream hStream, unsigned int *flags), (hStream, 1, flags))           \
    W(cuStreamGetCtx, cuStreamGetCtx, 9020, , stream_get_ctx,                 \
      (CUstream hStream, CUcontext *pctx), (hStream, 0, pctx))                \
    W(cuStreamGetCtx_ptsz, cuStreamGetCtx, 9020, _ptsz, stream_get_ctx,       \
      (CUstream hStream, CUcontext *pctx), (hStream, 1, pctx))                \
    W(cuStreamAttachMemAsync, cuStreamAttachMemAsync, 6000, , stream_attach,  \
      (CUstream hStream, CUdeviceptr dptr, size_t length,                     \
      unsigned int flags), (hStream, 0, dptr, length, flags))                 \
    W(cuStreamAttachMemAsync_ptsz, cuStreamAttachMemAsync, 7000, _ptsz,       \
      stream_attach, (CUstream hStream, CUdeviceptr dptr, size_t length,      \
      unsigned int flags), (hStream, 1, dptr, length, flags))                 \
    W(cuStreamGetId, cuStreamGetId, 12000, , stream_get_id,                   \
      (CUstream hStream, unsigned long long *streamId),                       \
      (hStream, 0, streamId))                                                 \
    W(cuStreamGetId_ptsz, cuStreamGetId, 12000, _ptsz, stream_get_id,         \
      (CUstream hStream, unsigned long long *streamId),                       \
      (hStream, 1, streamId))                                                 \
    W(cuStreamGetAttribute, cuStreamGetAttribute, 11000, , stream_attribute,  \
      (CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out),  \
      (hStream, 0, attr, value_out, NULL))                                    \
    W(cuStreamGetAttribute_ptsz, cuStreamGetAttribute, 11000, _ptsz,          \
      stream_attribute,                                                       \
      (CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out),  \
      (hStream, 1, attr, value_out, NULL))                                    \
    W(cuStreamSetAttribute, cuStreamSetAttribute, 11000, , stream_attribute,  \
      (CUstream hStream, CUstreamAttrID attr,                                 \
      const CUstreamAttrValue *value), (hStream, 0, attr, NULL, value))       \
    W(cuStreamSetAttribute_ptsz, cuStreamSetAttribute, 11000, _ptsz,          \
      stream_attribute, (CUstream hStream, CUstreamAttrID attr,               \
      const CUstreamAttrValue *value), (hStream, 1, attr, NULL, value))       \
    R(cuCtxSynchronize, cuCtxSynchronize, 2000, )                             \
    R(cuCtxRecordEvent, cuCtxRecordEvent, 12050, )                            \
    R(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange, 5050, )

STREAM_ALIASES(SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP)

const sim_proc sim_procs_stream[] = {
    STREAM_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
};
/* clang-format on */
const size_t sim_nprocs_stream = sizeof sim_procs_stream /
                                 sizeof sim_procs_stream[0];
