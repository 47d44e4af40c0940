/* ctxsync.c: context synchronizes run on their own threads so that the
 * caller can poll them (ctxsync.h). A thread per call: a synchronize
 * waits for the device, which costs far more than starting a thread. The
 * thread only tells when the work is done; the caller's own synchronize
 * then returns at once and reports the driver's verdict on its thread. */
#include "ctxsync.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

struct cm_ctx_sync {
    int refs; /* atomic: the caller's and the thread's */
    int done; /* atomic */
    cm_device *dev;
    uint64_t generation;
};

void
cm_ctx_sync_release(cm_ctx_sync *job)
{
    if (__atomic_sub_fetch(&job->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(job);
    }
}

static void *
sync_main(void *arg)
{
    cm_ctx_sync *job = arg;
    cm_error ignored;

    /* A failure ends the wait too: the caller's synchronize reports it. */
    cm_ctx_synchronize(job->dev, job->generation, &ignored);
    __atomic_store_n(&job->done, 1, __ATOMIC_RELEASE);
    cm_ctx_sync_release(job);
    return NULL;
}

int
cm_ctx_sync_start(cm_device *dev, uint64_t generation, cm_ctx_sync **out,
                  cm_error *err)
{
    cm_ctx_sync *job;
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t thread;
    int rc;

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
    /* Signals go to the interpreter's threads, never to this one. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&thread, &attr, sync_main, job);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        free(job);
        return cm_fail(err, CM_ERR_NOMEM, "no thread for a synchronize");
    }
    *out = job;
    return 0;
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
    return cm_ctx_synchronize(dev, ((cm_ctx_sync *)job)->generation, err);
}
