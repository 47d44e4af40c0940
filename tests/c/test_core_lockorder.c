/* test_core_lockorder.c: core/lockorder.c's check of the lock order in a
 * CUDAMEM_DEBUG build (the C tests are built so): nesting by level and
 * taking dev->qlock again pass; a lock taken at or below a held level, or
 * another lock taken twice, aborts (each in a forked child). */
#include "check.h"
#include "lockorder.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t queues, pool, hold, plain;

/* Whether fn aborts in a child, its report sent to /dev/null. */
static int
aborts(void (*fn)(void))
{
    int status = 0;
    pid_t pid;

    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        if (freopen("/dev/null", "w", stderr) == NULL) {
            _exit(3);
        }
        fn();
        _exit(0);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        return -1;
    }
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

/* pool's level is below the hold's: taking pool under the hold inverts. */
static void
inverted(void)
{
    cm__lock(&hold, CM_LOCK_HOLD);
    cm__lock(&pool, CM_LOCK_POOL);
}

/* Two locks of one level (two devices' pools) do not nest either. */
static void
same_level(void)
{
    cm__lock(&pool, CM_LOCK_POOL);
    cm__lock(&plain, CM_LOCK_POOL);
}

/* A recursive qlock taken again under an inner lock inverts too. */
static void
reentered_under_inner(void)
{
    cm__lock(&queues, CM_LOCK_QUEUES);
    cm__lock(&pool, CM_LOCK_POOL);
    cm__lock(&queues, CM_LOCK_QUEUES);
}

/* The control for aborts(): nothing taken, nothing refused. */
static void
allowed_nothing(void)
{
    cm__lock(&pool, CM_LOCK_POOL);
    cm__unlock(&pool);
}

static void
unlock_unheld(void)
{
    pthread_mutex_lock(&plain);
    cm__unlock(&plain);
}

static void
setup(void)
{
    pthread_mutexattr_t recursive;

    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&queues, &recursive);
    pthread_mutex_init(&pool, NULL);
    pthread_mutex_init(&hold, NULL);
    pthread_mutex_init(&plain, NULL);
}

/* In order, qlock again, out-of-order release: all allowed. */
static void
allowed(void)
{
    cm__lock(&queues, CM_LOCK_QUEUES);
    cm__lock(&queues, CM_LOCK_QUEUES);
    cm__lock(&pool, CM_LOCK_POOL);
    cm__lock(&hold, CM_LOCK_HOLD);
    cm__unlock(&pool);
    cm__unlock(&hold);
    cm__unlock(&queues);
    cm__unlock(&queues);
    /* Released, a lock may be taken under a lower one again. */
    cm__lock(&pool, CM_LOCK_POOL);
    cm__unlock(&pool);
    cm__lock(&hold, CM_LOCK_HOLD);
    cm__unlock(&hold);
    CHECK_EQ(aborts(allowed_nothing), 0);
}

static void
refused(void)
{
    CHECK_EQ(aborts(inverted), 1);
    CHECK_EQ(aborts(same_level), 1);
    CHECK_EQ(aborts(reentered_under_inner), 1);
    CHECK_EQ(aborts(unlock_unheld), 1);
}

static const check_test tests[] = {
    {"allowed", allowed, 0},
    {"refused", refused, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, setup, NULL)
