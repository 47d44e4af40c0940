/* ctxsync.c: context synchronizes run on another thread so that the
 * caller can poll them (ctxsync.h), unless a probe finds the context
 * idle: the probe's event is the device's, made on first use in each
 * context and destroyed by the teardown (context.h's unmake). One worker
 * thread, made on first use, takes them one at a time (a hand-off costs
 * far less than a new thread); while it is busy a synchronize gets a
 * thread of its own, so that one device's long wait never holds up
 * another's. The thread keeps the context current between jobs (no push
 * and pop per call) and hands the driver's verdict to the caller, which
 * does not ask the driver again. */
#include "ctxsync.h"
#include "lockorder.h"

#include "driver.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

struct cm_ctx_sync {
    int refs; /* atomic: the caller's and the thread's */
    int done; /* atomic: rc and err are written before */
    int rc;
    cm_error err;
    cm_device *dev;
    uint64_t generation;
};

/* The worker: `job` is its next one; busy from hand-off until done. A
 * forked child never gets here (cm_ctx_check refuses it first). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    cm_ctx_sync *job;
    int started, busy;
} worker = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0};

void
cm_ctx_sync_release(cm_ctx_sync *job)
{
    if (__atomic_sub_fetch(&job->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(job);
    }
}

static void
run_job(cm_ctx_sync *job)
{
    /* A failure ends the wait too: the caller reports it. */
    job->rc = cm__ctx_synchronize_own(job->dev, job->generation, &job->err);
    __atomic_store_n(&job->done, 1, __ATOMIC_RELEASE);
    cm_ctx_sync_release(job);
}

static void *
one_shot_main(void *arg)
{
    run_job(arg);
    return NULL;
}

static void *
worker_main(void *arg)
{
    cm_ctx_sync *job;

    (void)arg;
    cm__lock(&worker.lock, CM_LOCK_CTXSYNC);
    for (;;) {
        while (worker.job == NULL) {
            pthread_cond_wait(&worker.wake, &worker.lock);
        }
        job = worker.job;
        worker.job = NULL;
        cm__unlock(&worker.lock);
        run_job(job);
        cm__lock(&worker.lock, CM_LOCK_CTXSYNC);
        worker.busy = 0;
    }
    return NULL;
}

/* A detached thread running `main`, with every signal blocked: signals go
 * to the interpreter's threads, never to this one. */
static int
spawn(void *(*main)(void *), void *arg)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t thread;
    int rc;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&thread, &attr, main, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int
cm_ctx_sync_start(cm_device *dev, uint64_t generation, cm_ctx_sync **out,
                  cm_error *err)
{
    cm_ctx_sync *job;
    int handed = 0;

    if (cm_ctx_check(dev, generation, err) < 0) {
        return -1;
    }
    job = calloc(1, sizeof(*job));
    if (job == NULL) {
        return cm_fail(err, CM_ERR_NOMEM, NULL);
    }
    job->refs = 2;
    job->dev = dev;
    job->generation = generation;
    cm__lock(&worker.lock, CM_LOCK_CTXSYNC);
    if (!worker.started && spawn(worker_main, NULL) == 0) {
        worker.started = 1;
    }
    if (worker.started && !worker.busy) {
        worker.job = job;
        worker.busy = 1;
        handed = 1;
    }
    cm__unlock(&worker.lock);
    /* After the unlock: a worker woken under the lock would block on it
     * at once (two more system calls). It reads `job` under the lock, so
     * the wake-up cannot be lost. */
    if (handed) {
        pthread_cond_signal(&worker.wake);
    }
    if (!handed && spawn(one_shot_main, job) != 0) {
        free(job);
        return cm_fail(err, CM_ERR_NOMEM, "no thread for a synchronize");
    }
    *out = job;
    return 0;
}

/* A teardown destroys the probe's event while its context is still
 * cudamem's: another retain may keep the context alive past the release,
 * and the next generation's probe makes an event of its own. */
static void
probe_unmake(cm_device *dev)
{
    cm_error ignored;

    if (__atomic_load_n(&dev->idle_made, __ATOMIC_ACQUIRE) == 0) {
        return;
    }
    __atomic_store_n(&dev->idle_made, 0, __ATOMIC_RELEASE);
    (void)CM_CALL(&ignored, cuEventDestroy, dev->idle_event);
    dev->idle_event = NULL;
}

static const cm_subsystem_ops probe_ops = {
    .unmake = probe_unmake,
};

/* dev's probe event, made on first use in each generation in the current
 * context (dev's, entered); NULL when it cannot be made. Probing set. */
static CUevent
probe_event(cm_device *dev, uint64_t generation)
{
    cm_error ignored;
    CUevent ev;

    if (dev->idle_made == generation + 1) {
        return dev->idle_event;
    }
    /* Registered before the event is made: the hold keeps teardowns out
     * until it is recorded. */
    cm__subsystem_register(CM_SUB_CTXSYNC, &probe_ops);
    if (CM_CALL(&ignored, cuEventCreate, &ev, CU_EVENT_DISABLE_TIMING) < 0) {
        return NULL;
    }
    /* The event before its generation: a thread that reads this
     * generation finds this event. */
    __atomic_store_n(&dev->idle_event, ev, __ATOMIC_RELAXED);
    __atomic_store_n(&dev->idle_made, generation + 1, __ATOMIC_RELEASE);
    return ev;
}

/* Enters dev's context (by its handle when the event of `generation` is
 * made: nothing to make current) and takes the probe for this thread:
 * 1, or 0 when another thread has it or the context is not of
 * `generation` any more (then the guard is left), or -1. */
static int
probe_take(cm_device *dev, uint64_t generation, cm_ctx_guard *guard,
           cm_error *err)
{
    int made = __atomic_load_n(&dev->idle_made, __ATOMIC_ACQUIRE) ==
               generation + 1;

    if ((made ? cm__ctx_enter_handle(dev, guard, err)
              : cm_ctx_enter(dev, guard, err)) < 0) {
        return -1;
    }
    /* The hold keeps the context until leave; one torn down since the
     * caller's check is the caller's to report. */
    if (cm_device_generation(dev) != generation ||
        __atomic_exchange_n(&dev->idle_probing, 1, __ATOMIC_ACQUIRE) != 0) {
        return cm_ctx_leave(guard, 0, err);
    }
    return 1;
}

static int
probe_give(cm_device *dev, cm_ctx_guard *guard, cm_error *err)
{
    __atomic_store_n(&dev->idle_probing, 0, __ATOMIC_RELEASE);
    return cm_ctx_leave(guard, 0, err);
}

int
cm_ctx_sync_idle(cm_device *dev, uint64_t generation, int *idle, cm_error *err)
{
    cm_ctx_guard guard;
    cm_error ignored;
    CUevent ev;
    int rc;

    *idle = 0;
    if (cm__drv.cuCtxRecordEvent == NULL) {
        return 0;
    }
    if (cm_ctx_check(dev, generation, err) < 0) {
        return -1;
    }
    if ((rc = probe_take(dev, generation, &guard, err)) <= 0) {
        return rc;
    }
    /* Whatever fails here, cuCtxSynchronize fails too and says why. */
    ev = probe_event(dev, generation);
    *idle = ev != NULL &&
            CM_CALL(&ignored, cuCtxRecordEvent,
                    __atomic_load_n(&dev->primary, __ATOMIC_ACQUIRE),
                    ev) == 0 &&
            CM_CALL(&ignored, cuEventQuery, ev) == 0;
    /* A context synchronize is where the driver's pools give back what
     * cudamem freed into them over their release threshold; the probe's
     * event is not (its synchronize leaves them, seen on an H100:
     * tests/gpu/driver_facts.json, "pool_release"). Idle, it returns at
     * once (unless another thread queues work in the instant between,
     * which it then waits for uninterruptibly); only after cudamem's
     * stream-ordered frees is it needed. */
    if (*idle && __atomic_exchange_n(&dev->pool_frees, 0, __ATOMIC_ACQ_REL) &&
        CM_CALL0(&ignored, cuCtxSynchronize) < 0) {
        __atomic_store_n(&dev->pool_frees, 1, __ATOMIC_RELAXED);
        *idle = 0;
    }
    return probe_give(dev, &guard, err);
}

int
cm_ctx_sync_prepare(cm_device *dev, cm_error *err)
{
    cm_ctx_guard guard;
    uint64_t generation;
    int rc;

    if (cm__drv.cuCtxRecordEvent == NULL ||
        __atomic_load_n(&dev->primary, __ATOMIC_ACQUIRE) == NULL) {
        return 0;
    }
    generation = cm_device_generation(dev);
    if ((rc = probe_take(dev, generation, &guard, err)) <= 0) {
        return rc;
    }
    (void)probe_event(dev, generation);
    return probe_give(dev, &guard, err);
}

int
cm_ctx_sync_here(cm_device *dev, uint64_t generation, cm_error *err)
{
    return cm__ctx_synchronize(dev, generation, err);
}

int
cm_ctx_sync_query(cm_device *dev, void *job, int *done, cm_error *err)
{
    (void)dev;
    (void)err;
    *done = __atomic_load_n(&((cm_ctx_sync *)job)->done, __ATOMIC_ACQUIRE);
    return 0;
}

int
cm_ctx_sync_finish(cm_device *dev, void *job, cm_error *err)
{
    cm_ctx_sync *done = job;

    (void)dev;
    if (done->rc < 0) {
        *err = done->err;
    }
    return done->rc;
}
