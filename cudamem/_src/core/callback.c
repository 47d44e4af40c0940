/* callback.c: the queue between the driver's callback threads and the one
 * dispatcher that runs Python, the trampoline the driver calls, and the
 * record of what has not run yet (exit waits for it). The trampoline
 * allocates nothing and cannot fail: the node it queues was made by
 * cm_callback_add. Payloads are opaque here. */
#include "callback.h"
#include "lockorder.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "driver.h"

/* A node is on one list at a time: the ring of those the driver has not
 * reached (`prev` only there), then the queue. */
typedef struct cm_cb_node {
    struct cm_cb_node *next, *prev;
    void *payload;
    CUresult status;
} cm_cb_node;

/* `unreached`: the ring's sentinel, oldest next; `running`: the payload
 * the dispatcher took, until done; `idle` is signalled when one is done
 * or an add failed (a drain looks again). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t ready, idle;
    cm_cb_node unreached;
    cm_cb_node *head, *tail;
    void *running;
    int stopped;
} q = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .ready = PTHREAD_COND_INITIALIZER,
       .idle = PTHREAD_COND_INITIALIZER,
       .unreached = {.next = &q.unreached, .prev = &q.unreached}};

/* Lock held. */
static void
unlink_unreached(cm_cb_node *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
}

/* The absolute time timeout_ms from now, for pthread_cond_timedwait. */
static struct timespec
deadline(long timeout_ms)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    return until;
}

/* On a driver thread: queue and wake, nothing else. */
static void CUDA_CB
trampoline(CUstream stream, CUresult status, void *user)
{
    cm_cb_node *node = user;

    (void)stream;
    node->status = status;
    cm__lock(&q.lock, CM_LOCK_CALLBACKS);
    unlink_unreached(node);
    node->next = NULL;
    if (q.tail != NULL) {
        q.tail->next = node;
    }
    else {
        q.head = node;
    }
    q.tail = node;
    pthread_cond_signal(&q.ready);
    cm__unlock(&q.lock);
}

int
cm_callback_add(cm_device *dev, CUstream stream, void *payload, cm_error *err)
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
    /* On the ring before the driver can run the trampoline. */
    cm__lock(&q.lock, CM_LOCK_CALLBACKS);
    node->prev = q.unreached.prev;
    node->next = &q.unreached;
    q.unreached.prev->next = node;
    q.unreached.prev = node;
    cm__unlock(&q.lock);
    rc = CM_CALL(err, cuStreamAddCallback, stream, trampoline, (void *)node,
                 0u);
    if (rc < 0) {
        cm__lock(&q.lock, CM_LOCK_CALLBACKS);
        unlink_unreached(node);
        pthread_cond_broadcast(&q.idle);
        cm__unlock(&q.lock);
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
    struct timespec until = deadline(timeout_ms);
    cm_cb_node *node;
    int rc = 0;

    cm__lock(&q.lock, CM_LOCK_CALLBACKS);
    while (q.head == NULL && !q.stopped && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&q.ready, &q.lock, &until);
    }
    node = q.head;
    if (node != NULL) {
        q.head = node->next;
        if (q.head == NULL) {
            q.tail = NULL;
        }
        q.running = node->payload;
    }
    rc = node != NULL ? 1 : (q.stopped ? -1 : 0);
    cm__unlock(&q.lock);
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
    cm__lock(&q.lock, CM_LOCK_CALLBACKS);
    q.stopped = 1;
    pthread_cond_broadcast(&q.ready);
    cm__unlock(&q.lock);
}

void
cm_callback_done(void)
{
    cm__lock(&q.lock, CM_LOCK_CALLBACKS);
    q.running = NULL;
    pthread_cond_broadcast(&q.idle);
    cm__unlock(&q.lock);
}

/* Lock held. */
static int
all_run(void)
{
    return q.running == NULL && q.head == NULL &&
           q.unreached.next == &q.unreached;
}

int
cm_callback_drain(long timeout_ms)
{
    struct timespec until = deadline(timeout_ms);
    int rc = 0, left;

    cm__lock(&q.lock, CM_LOCK_CALLBACKS);
    while (!all_run() && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&q.idle, &q.lock, &until);
    }
    left = !all_run();
    cm__unlock(&q.lock);
    return left;
}

void
cm_callback_unfinished(void (*visit)(void *payload, cm_callback_state state,
                                     void *ctx),
                       void *ctx)
{
    cm__lock(&q.lock, CM_LOCK_CALLBACKS);
    if (q.running != NULL) {
        visit(q.running, CM_CALLBACK_RUNNING, ctx);
    }
    for (cm_cb_node *node = q.head; node != NULL; node = node->next) {
        visit(node->payload, CM_CALLBACK_QUEUED, ctx);
    }
    for (cm_cb_node *node = q.unreached.next; node != &q.unreached;
         node = node->next) {
        visit(node->payload, CM_CALLBACK_UNREACHED, ctx);
    }
    cm__unlock(&q.lock);
}
