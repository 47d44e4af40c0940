/* ctxsync.c: context synchronizes run on another thread so that the
 * caller can poll them (ctxsync.h). One worker thread, made on first use,
 * takes them one at a time (a hand-off costs far less than a new thread);
 * while it is busy a synchronize gets a thread of its own, so that one
 * device's long wait never holds up another's. The thread keeps the
 * context current between jobs (no push and pop per call) and hands the
 * driver's verdict to the caller, which does not ask the driver again. */
#include "ctxsync.h"
#include "lockorder.h"

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
