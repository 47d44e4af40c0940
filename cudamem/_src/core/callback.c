/* callback.c: the queue between the driver's callback threads and the one
 * dispatcher that runs Python, and the trampoline the driver calls. The
 * trampoline allocates nothing and cannot fail: the node it queues was
 * made by cm_callback_add. Payloads are opaque here. */
#include "callback.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "driver.h"

typedef struct cm_cb_node {
    struct cm_cb_node *next;
    void *payload;
    CUresult status;
} cm_cb_node;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t ready;
    cm_cb_node *head, *tail;
    int stopped;
} q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0};

/* On a driver thread: queue and wake, nothing else. */
static void CUDA_CB
trampoline(CUstream stream, CUresult status, void *user)
{
    cm_cb_node *node = user;

    (void)stream;
    node->status = status;
    node->next = NULL;
    pthread_mutex_lock(&q.lock);
    if (q.tail != NULL) {
        q.tail->next = node;
    }
    else {
        q.head = node;
    }
    q.tail = node;
    pthread_cond_signal(&q.ready);
    pthread_mutex_unlock(&q.lock);
}

int
cm_callback_add(cm_device *dev, CUstream stream, void *payload,
                cm_error *err)
{
    cm_ctx_guard guard;
    cm_cb_node *node;
    cm_error ignored;
    int rc;

    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    node = calloc(1, sizeof(*node));
    if (node == NULL) {
        cm_fail(err, CM_ERR_NOMEM, "out of host memory for a callback");
        return cm_ctx_leave(&guard, -1, err);
    }
    node->payload = payload;
    rc = CM_CALL(err, cuStreamAddCallback, stream, trampoline, (void *)node,
                 0u);
    if (rc < 0) {
        free(node);
        return cm_ctx_leave(&guard, -1, err);
    }
    /* Queued: the trampoline will run and the payload is no longer the
     * caller's, so a failed pop cannot be reported as a failed add. */
    cm_ctx_leave(&guard, 0, &ignored);
    return 0;
}

int
cm_callback_next(long timeout_ms, void **payload, CUresult *status)
{
    struct timespec until;
    cm_cb_node *node;
    int rc = 0;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&q.lock);
    while (q.head == NULL && !q.stopped && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&q.ready, &q.lock, &until);
    }
    node = q.head;
    if (node != NULL) {
        q.head = node->next;
        if (q.head == NULL) {
            q.tail = NULL;
        }
    }
    rc = node != NULL ? 1 : (q.stopped ? -1 : 0);
    pthread_mutex_unlock(&q.lock);
    if (node != NULL) {
        *payload = node->payload;
        *status = node->status;
        free(node);
    }
    return rc;
}

void
cm_callback_stop(void)
{
    pthread_mutex_lock(&q.lock);
    q.stopped = 1;
    pthread_cond_broadcast(&q.ready);
    pthread_mutex_unlock(&q.lock);
}
