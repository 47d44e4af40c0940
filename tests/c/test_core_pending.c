/* test_core_pending.c: core/pending.c without a driver: thresholds and their
 * environment variables (each variant in a forked child, as they are read
 * once per process), deferral, failed frees, drop, shutdown, FIFO order and
 * a multithreaded stress under an owner's recursive lock, as release.c's. Who frees what (contexts, records) is not here. */
#include "check.h"
#include "pending.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LOG_MAX 20000

/* What the free function saw; `fail` makes that handle's free fail. */
typedef struct freelog {
    cm_pending *q;
    uint64_t fail;
    uint64_t handles[LOG_MAX];
    cm_free_kind kinds[LOG_MAX];
    size_t nbytes[LOG_MAX];
    size_t n;
    int calls;
    size_t queued_during; /* the queue's count seen by the last free */
    /* Freeing `chain_from` releases `chain_to`, as a release hook dropping
     * the last reference to another array would. */
    uint64_t chain_from;
    uint64_t chain_to;
} freelog;

static int
log_free(void *arg, cm_free_kind kind, uint64_t handle, size_t nbytes,
         cm_error *err)
{
    freelog *log = arg;

    log->calls++;
    /* A free function may call back into the queue it is flushed from. */
    if (log->q != NULL) {
        log->queued_during = cm__pending_count(log->q);
    }
    if (handle == log->fail) {
        err->kind = CM_ERR_DRIVER;
        err->code = CUDA_ERROR_INVALID_VALUE;
        err->call = "cuMemFree";
        err->msg = NULL;
        err->text[0] = '\0';
        return -1;
    }
    if (log->n < LOG_MAX) {
        log->handles[log->n] = handle;
        log->kinds[log->n] = kind;
        log->nbytes[log->n] = nbytes;
        log->n++;
    }
    if (log->q != NULL && handle == log->chain_from) {
        return cm__pending_add(log->q, CM_FREE_DEVICE, log->chain_to, 0, NULL,
                               err);
    }
    return 0;
}

static cm_pending *
new_queue(size_t device_memory, freelog *log)
{
    cm_error err;
    cm_pending *q;

    memset(log, 0, sizeof(*log));
    q = cm__pending_new(device_memory, log_free, log, &err);
    CHECK_NE(q, NULL);
    log->q = q;
    return q;
}

/* The log holds exactly handles first..last, in order. */
static int
freed_in_order(const freelog *log, uint64_t first, uint64_t last)
{
    size_t i;

    if (log->n != (size_t)(last - first + 1)) {
        return 0;
    }
    for (i = 0; i < log->n; i++) {
        if (log->handles[i] != first + i) {
            return 0;
        }
    }
    return 1;
}

/* ---- environment: each case runs in a child ---------------------------- */

typedef struct env_case {
    const char *count;       /* CUDAMEM_MAX_PENDING_DEALLOCS_COUNT */
    const char *ratio;       /* CUDAMEM_MAX_PENDING_DEALLOCS_RATIO */
    const char *numba_count; /* NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT */
    const char *numba_ratio; /* NUMBA_CUDA_MAX_PENDING_DEALLOCS_RATIO */
    size_t want_count;
    double want_ratio;
    const char *want_msg; /* NULL: the limits are valid */
} env_case;

#define CV "CUDAMEM_MAX_PENDING_DEALLOCS_COUNT"
#define RV "CUDAMEM_MAX_PENDING_DEALLOCS_RATIO"
#define NCV "NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT"
#define NRV "NUMBA_CUDA_MAX_PENDING_DEALLOCS_RATIO"
#define NOT_INT "' is not a non-negative integer"
#define NOT_RATIO "' is not a number between 0 and 1"

static const env_case env_cases[] = {
    {NULL, NULL, NULL, NULL, 10, 0.2, NULL},
    {"20", NULL, NULL, NULL, 20, 0.2, NULL},
    {"0", NULL, NULL, NULL, 0, 0.2, NULL},
    {"007", NULL, NULL, NULL, 7, 0.2, NULL},
    {"18446744073709551615", NULL, NULL, NULL, SIZE_MAX, 0.2, NULL},
    {NULL, "0.5", NULL, NULL, 10, 0.5, NULL},
    {NULL, "0", NULL, NULL, 10, 0.0, NULL},
    {NULL, "1", NULL, NULL, 10, 1.0, NULL},
    {NULL, "1.0", NULL, NULL, 10, 1.0, NULL},
    {NULL, ".25", NULL, NULL, 10, 0.25, NULL},
    {NULL, "5e-1", NULL, NULL, 10, 0.5, NULL},
    {NULL, "1E0", NULL, NULL, 10, 1.0, NULL},
    /* numba's variables when cudamem's are unset */
    {NULL, NULL, "30", NULL, 30, 0.2, NULL},
    {NULL, NULL, NULL, "0.7", 10, 0.7, NULL},
    {NULL, NULL, "3", "0.1", 3, 0.1, NULL},
    /* cudamem's win, even over a malformed numba value */
    {"20", NULL, "30", NULL, 20, 0.2, NULL},
    {NULL, "0.5", NULL, "0.7", 10, 0.5, NULL},
    {"5", "0.3", "abc", "2", 5, 0.3, NULL},
    /* malformed counts */
    {"abc", NULL, NULL, NULL, 0, 0, CV "='abc" NOT_INT},
    {"", NULL, NULL, NULL, 0, 0, CV "='" NOT_INT},
    {"10x", NULL, NULL, NULL, 0, 0, CV "='10x" NOT_INT},
    {"-1", NULL, NULL, NULL, 0, 0, CV "='-1" NOT_INT},
    {"+5", NULL, NULL, NULL, 0, 0, CV "='+5" NOT_INT},
    {" 10", NULL, NULL, NULL, 0, 0, CV "=' 10" NOT_INT},
    {"1.5", NULL, NULL, NULL, 0, 0, CV "='1.5" NOT_INT},
    {"18446744073709551616", NULL, NULL, NULL, 0, 0,
     CV "='18446744073709551616' is too large"},
    {NULL, NULL, "x", NULL, 0, 0, NCV "='x" NOT_INT},
    {NULL, NULL, "", NULL, 0, 0, NCV "='" NOT_INT},
    /* malformed ratios */
    {NULL, "abc", NULL, NULL, 0, 0, RV "='abc" NOT_RATIO},
    {NULL, "", NULL, NULL, 0, 0, RV "='" NOT_RATIO},
    {NULL, "0.5x", NULL, NULL, 0, 0, RV "='0.5x" NOT_RATIO},
    {NULL, "-0.1", NULL, NULL, 0, 0, RV "='-0.1" NOT_RATIO},
    {NULL, "1.5", NULL, NULL, 0, 0, RV "='1.5" NOT_RATIO},
    {NULL, "1e400", NULL, NULL, 0, 0, RV "='1e400" NOT_RATIO},
    {NULL, "nan", NULL, NULL, 0, 0, RV "='nan" NOT_RATIO},
    {NULL, "inf", NULL, NULL, 0, 0, RV "='inf" NOT_RATIO},
    {NULL, "0x0.8", NULL, NULL, 0, 0, RV "='0x0.8" NOT_RATIO},
    {NULL, " 0.5", NULL, NULL, 0, 0, RV "=' 0.5" NOT_RATIO},
    {NULL, ".", NULL, NULL, 0, 0, RV "='." NOT_RATIO},
    {NULL, "1e", NULL, NULL, 0, 0, RV "='1e" NOT_RATIO},
    {NULL, NULL, NULL, "nan", 0, 0, NRV "='nan" NOT_RATIO},
    /* the count is reported first; a bad ratio behind a good count */
    {"x", "y", NULL, NULL, 0, 0, CV "='x" NOT_INT},
    {"4", "y", NULL, NULL, 0, 0, RV "='y" NOT_RATIO},
};

static void
set_var(const char *name, const char *value)
{
    if (value != NULL) {
        setenv(name, value, 1);
    }
    else {
        unsetenv(name);
    }
}

/* The queue flushes on the (max_count + 1)th add and not before, and on
 * exceeding floor(ratio * 1000) bytes but not on reaching it. */
static int
thresholds_hold(size_t max_count, double ratio)
{
    size_t max_bytes = (size_t)(ratio * 1000.0), i;
    cm_error err;
    freelog log;
    cm_pending *q;
    int bad = 0;

    if (max_count <= 100) {
        q = new_queue(1000, &log);
        for (i = 0; i < max_count; i++) {
            bad |= cm__pending_add(q, CM_FREE_DEVICE, i + 1, 0, NULL, &err) !=
                   0;
        }
        bad |= log.n != 0 || cm__pending_count(q) != max_count;
        bad |= cm__pending_add(q, CM_FREE_DEVICE, 999, 0, NULL, &err) != 0;
        bad |= log.n != max_count + 1 || cm__pending_count(q) != 0;
        cm__pending_delete(q);
    }
    if (max_count >= 2) {
        q = new_queue(1000, &log);
        bad |= cm__pending_add(q, CM_FREE_DEVICE, 1, max_bytes, NULL, &err) !=
               0;
        bad |= log.n != 0;
        bad |= cm__pending_add(q, CM_FREE_DEVICE, 2, 1, NULL, &err) != 0;
        bad |= log.n != 2;
        cm__pending_delete(q);
    }
    return bad;
}

static int
env_child(size_t index, const env_case *c)
{
    size_t count = 0;
    double ratio = -1;
    cm_error err;
    freelog log;
    int bad = 0, i;

    set_var(CV, c->count);
    set_var(RV, c->ratio);
    set_var(NCV, c->numba_count);
    set_var(NRV, c->numba_ratio);

    /* A malformed value fails every call, not only the first. */
    for (i = 0; i < 2; i++) {
        memset(&err, 0, sizeof(err));
        if (c->want_msg == NULL) {
            bad |= cm__pending_limits(&count, &ratio, &err) != 0;
            bad |= count != c->want_count || ratio != c->want_ratio;
        }
        else {
            bad |= cm__pending_limits(&count, &ratio, &err) != -1;
            bad |= err.kind != CM_ERR_VALUE || err.msg == NULL;
            bad |= err.msg != NULL && strcmp(err.msg, c->want_msg) != 0;
            if (err.msg != NULL && strcmp(err.msg, c->want_msg) != 0) {
                fprintf(stderr, "env case %zu: message \"%s\"\n", index,
                        err.msg);
            }
        }
    }
    if (c->want_msg == NULL) {
        bad |= thresholds_hold(count, ratio);
    }
    else {
        memset(&err, 0, sizeof(err));
        bad |= cm__pending_new(1000, log_free, &log, &err) != NULL;
        bad |= err.kind != CM_ERR_VALUE || err.msg == NULL;
        bad |= err.msg != NULL && strcmp(err.msg, c->want_msg) != 0;
    }
    if (bad) {
        fprintf(stderr, "env case %zu failed\n", index);
    }
    return bad;
}

static void
test_environment(void)
{
    size_t i;

    for (i = 0; i < sizeof(env_cases) / sizeof(env_cases[0]); i++) {
        int status = 0;
        pid_t pid;

        fflush(NULL);
        pid = fork();
        CHECK_GE(pid, 0);
        if (pid == 0) {
            exit(env_child(i, &env_cases[i]));
        }
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        CHECK_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

/* ---- the queue in this process (default limits) ------------------------ */

static void
test_defaults(void)
{
    size_t count;
    double ratio;
    cm_error err;
    freelog log;

    CHECK_EQ(cm__pending_limits(&count, &ratio, &err), 0);
    CHECK_TRUE(count == 10 && ratio == 0.2);

    memset(&err, 0, sizeof(err));
    CHECK_EQ(cm__pending_new(1000, NULL, &log, &err), NULL);
    CHECK_TRUE(err.kind == CM_ERR_VALUE && err.msg != NULL);
    cm__pending_delete(NULL);
}

static void
test_count_threshold(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue((size_t)1 << 40, &log);
    uint64_t h;

    for (h = 1; h <= 10; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 100, NULL, &err), 0);
    }
    CHECK_EQ(log.calls, 0);
    CHECK_TRUE(cm__pending_count(q) == 10 && cm__pending_bytes(q) == 1000);
    CHECK_EQ(cm__pending_add(q, CM_FREE_HOST, 11, 7, NULL, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 11));
    CHECK_TRUE(log.kinds[0] == CM_FREE_DEVICE && log.nbytes[0] == 100);
    CHECK_TRUE(log.kinds[10] == CM_FREE_HOST && log.nbytes[10] == 7);
    CHECK_TRUE(cm__pending_count(q) == 0 && cm__pending_bytes(q) == 0);
    /* each item leaves the queue before its free runs */
    CHECK_EQ(log.queued_during, 0);
    cm__pending_delete(q);
}

/* With `due`, a queue over its threshold is left for the caller to
 * flush (a finalizer holding the GIL): nothing freed, *due set; under
 * it, *due untouched. */
static void
test_due(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue((size_t)1 << 40, &log);
    int due = 0;

    for (uint64_t h = 1; h <= 10; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 100, &due, &err), 0);
    }
    CHECK_EQ(due, 0);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 11, 100, &due, &err), 0);
    CHECK_EQ(due, 1);
    CHECK_EQ(log.calls, 0);
    CHECK_TRUE(cm__pending_count(q) == 11);
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 11));
    /* A deferred queue is never due. */
    due = 0;
    cm__pending_defer(q);
    for (uint64_t h = 12; h <= 30; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 100, &due, &err), 0);
    }
    CHECK_EQ(due, 0);
    cm__pending_undefer(q);
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 30));
    cm__pending_delete(q);
}

static void
test_byte_threshold(void)
{
    cm_error err;
    freelog log;
    /* 0.2 * 1000: at most 200 bytes pending */
    cm_pending *q = new_queue(1000, &log);

    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 1, 100, NULL, &err), 0);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 2, 100, NULL, &err), 0);
    CHECK_TRUE(cm__pending_bytes(q) == 200 && log.calls == 0);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 3, 0, NULL, &err), 0);
    CHECK_EQ(log.calls, 0);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 4, 1, NULL, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 4));
    CHECK_TRUE(cm__pending_bytes(q) == 0 && cm__pending_count(q) == 0);

    /* one item larger than the limit on its own */
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 5, 201, NULL, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 5));
    cm__pending_delete(q);

    /* no device memory: only empty items may wait */
    q = new_queue(0, &log);
    CHECK_EQ(cm__pending_add(q, CM_FREE_STREAM, 1, 0, NULL, &err), 0);
    CHECK_TRUE(log.calls == 0 && cm__pending_count(q) == 1);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 2, 1, NULL, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 2));
    cm__pending_delete(q);

    /* the largest device cannot overflow the limit */
    q = new_queue(SIZE_MAX, &log);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 1, SIZE_MAX / 8, NULL, &err),
             0);
    CHECK_EQ(log.calls, 0);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 2, SIZE_MAX / 8, NULL, &err),
             0);
    CHECK_TRUE(freed_in_order(&log, 1, 2));
    cm__pending_delete(q);
}

/* A queue sized again keeps what it holds and its deferral, and flushes
 * by the new limit from the next add. */
static void
test_resize(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue(1000, &log);

    cm__pending_defer(q);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 1, 150, NULL, &err), 0);
    CHECK_EQ(cm__pending_resize(q, 500, &err), 0);
    CHECK_TRUE(cm__pending_bytes(q) == 150 && cm__pending_deferred(q));
    cm__pending_undefer(q);
    /* 0.2 * 500: 150 + 0 is already over, and the next add flushes */
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 2, 0, NULL, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 2));
    CHECK_EQ(cm__pending_resize(q, 10000, &err), 0);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 3, 2000, NULL, &err), 0);
    CHECK_TRUE(log.calls == 2 && cm__pending_bytes(q) == 2000);
    cm__pending_drop(q);
    cm__pending_delete(q);
}

static void
test_fifo_growth(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue((size_t)1 << 40, &log);
    uint64_t h;

    /* Many items behind a deferral: the queue grows past many chunks. */
    cm__pending_defer(q);
    for (h = 1; h <= 10000; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 1, NULL, &err), 0);
    }
    cm__pending_undefer(q);
    CHECK_TRUE(log.calls == 0 && cm__pending_count(q) == 10000);
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 10000));
    cm__pending_delete(q);

    /* A failed free leaves a partly drained ring whose items wrap around
     * when more are queued and then grow it: order must survive. */
    q = new_queue((size_t)1 << 40, &log);
    cm__pending_defer(q);
    for (h = 1; h <= 10; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 1, NULL, &err), 0);
    }
    cm__pending_undefer(q);
    log.fail = 5;
    CHECK_EQ(cm__pending_flush(q, &err), -1);
    CHECK_TRUE(freed_in_order(&log, 1, 4) && cm__pending_count(q) == 5);
    log.fail = 0;
    log.n = 0;
    cm__pending_defer(q);
    for (h = 11; h <= 40; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 1, NULL, &err), 0);
    }
    cm__pending_undefer(q);
    CHECK_TRUE(cm__pending_count(q) == 35 && cm__pending_bytes(q) == 35);
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 6, 40));
    cm__pending_delete(q);
}

static void
test_failed_free(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue((size_t)1 << 40, &log);
    uint64_t h;

    cm__pending_defer(q);
    for (h = 1; h <= 5; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, h, NULL, &err), 0);
    }
    cm__pending_undefer(q);
    log.fail = 3;
    memset(&err, 0, sizeof(err));
    CHECK_EQ(cm__pending_flush(q, &err), -1);
    CHECK_TRUE(err.kind == CM_ERR_DRIVER &&
               err.code == CUDA_ERROR_INVALID_VALUE);
    CHECK_TRUE(err.call != NULL && strcmp(err.call, "cuMemFree") == 0);
    /* 1 and 2 freed, 3 tried once and dropped, 4 and 5 still queued */
    CHECK_TRUE(freed_in_order(&log, 1, 2) && log.calls == 3);
    CHECK_TRUE(cm__pending_count(q) == 2 && cm__pending_bytes(q) == 4 + 5);
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(log.calls == 5 && log.n == 4);
    CHECK_TRUE(log.handles[2] == 4 && log.handles[3] == 5);
    CHECK_TRUE(cm__pending_count(q) == 0 && cm__pending_bytes(q) == 0);
    CHECK_TRUE(cm__pending_flush(q, &err) == 0 && log.calls == 5);
    cm__pending_delete(q);

    /* The add whose flush fails still queues its item. */
    q = new_queue((size_t)1 << 40, &log);
    log.fail = 1;
    for (h = 1; h <= 10; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 1, NULL, &err), 0);
    }
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 11, 1, NULL, &err), -1);
    CHECK_TRUE(err.kind == CM_ERR_DRIVER && log.calls == 1 && log.n == 0);
    CHECK_TRUE(cm__pending_count(q) == 10 && cm__pending_bytes(q) == 10);
    log.fail = 0;
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 2, 11));
    cm__pending_delete(q);
}

static void
test_nested_defer(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue(1000, &log);
    uint64_t h;

    CHECK_TRUE(!cm__pending_deferred(q));
    cm__pending_defer(q);
    cm__pending_defer(q);
    CHECK_TRUE(cm__pending_deferred(q));
    for (h = 1; h <= 20; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 100, NULL, &err), 0);
    }
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(log.calls == 0 && cm__pending_count(q) == 20);

    cm__pending_undefer(q);
    CHECK_TRUE(cm__pending_deferred(q) && log.calls == 0);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 21, 100, NULL, &err), 0);
    CHECK_EQ(log.calls, 0);

    /* leaving the outermost block does not flush either */
    cm__pending_undefer(q);
    CHECK_TRUE(!cm__pending_deferred(q));
    CHECK_TRUE(log.calls == 0 && cm__pending_count(q) == 21);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 22, 0, NULL, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 22));

    /* an unbalanced undefer clamps at zero rather than going negative */
    cm__pending_undefer(q);
    CHECK_TRUE(!cm__pending_deferred(q));
    cm__pending_defer(q);
    CHECK_TRUE(cm__pending_deferred(q));
    cm__pending_undefer(q);
    CHECK_TRUE(!cm__pending_deferred(q));
    cm__pending_delete(q);
}

/* `with defer_cleanup(): ...` whose body raises after queueing some frees:
 * the exit path undefers exactly once. */
static int
deferred_block_that_fails(cm_pending *q, uint64_t first, int fail_after)
{
    cm_error err;
    uint64_t h;
    int rc = -1;

    cm__pending_defer(q);
    for (h = first; h < first + 15; h++) {
        if (cm__pending_add(q, CM_FREE_DEVICE, h, 1, NULL, &err) < 0) {
            goto done;
        }
        if ((int)(h - first) == fail_after) {
            goto done;
        }
    }
    rc = 0;

done:
    cm__pending_undefer(q);
    return rc;
}

static void
test_early_exit(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue((size_t)1 << 40, &log);

    CHECK_EQ(deferred_block_that_fails(q, 1, 11), -1);
    CHECK_TRUE(!cm__pending_deferred(q));
    CHECK_TRUE(log.calls == 0 && cm__pending_count(q) == 12);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 13, 1, NULL, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 13));

    /* a block nested in another that fails leaves the outer deferral */
    cm__pending_defer(q);
    CHECK_EQ(deferred_block_that_fails(q, 14, 2), -1);
    CHECK_TRUE(cm__pending_deferred(q));
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 17, 1, NULL, &err), 0);
    CHECK_TRUE(cm__pending_count(q) == 4 && log.n == 13);
    cm__pending_undefer(q);
    CHECK_TRUE(!cm__pending_deferred(q));
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 17));
    cm__pending_delete(q);
}

static void
test_drop(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue((size_t)1 << 40, &log);
    uint64_t h;

    cm__pending_defer(q);
    for (h = 1; h <= 2000; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_IPC, h, 3, NULL, &err), 0);
    }
    cm__pending_drop(q);
    CHECK_TRUE(cm__pending_count(q) == 0 && cm__pending_bytes(q) == 0);
    CHECK_EQ(log.calls, 0);
    cm__pending_undefer(q);
    CHECK_TRUE(cm__pending_flush(q, &err) == 0 && log.calls == 0);

    /* the queue is still usable afterwards */
    for (h = 1; h <= 11; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_EVENT, h, 0, NULL, &err), 0);
    }
    CHECK_TRUE(freed_in_order(&log, 1, 11));
    cm__pending_delete(q);
}

/* Salvage hands every item over in order, deferred or not, reports the
 * first failure and goes on; the queue is empty and usable afterwards. */
static void
test_salvage(void)
{
    cm_error err;
    freelog log, salvaged;
    cm_pending *q = new_queue((size_t)1 << 40, &log);
    uint64_t h;

    memset(&salvaged, 0, sizeof(salvaged));
    cm__pending_defer(q);
    for (h = 1; h <= 40; h++) {
        CHECK_EQ(cm__pending_add(q, h % 2 ? CM_FREE_MANAGED : CM_FREE_DEVICE,
                                 h, 2, NULL, &err),
                 0);
    }
    salvaged.fail = 7;
    memset(&err, 0, sizeof(err));
    CHECK_EQ(cm__pending_salvage(q, log_free, &salvaged, &err), -1);
    CHECK_EQ(err.kind, CM_ERR_DRIVER);
    CHECK_TRUE(salvaged.calls == 40 && salvaged.n == 39);
    CHECK_TRUE(salvaged.handles[5] == 6 && salvaged.handles[6] == 8);
    CHECK_TRUE(salvaged.kinds[0] == CM_FREE_MANAGED &&
               salvaged.kinds[1] == CM_FREE_DEVICE);
    CHECK_TRUE(cm__pending_count(q) == 0 && cm__pending_bytes(q) == 0);
    CHECK_EQ(log.calls, 0);
    CHECK_EQ(cm__pending_salvage(q, log_free, &salvaged, &err), 0);
    CHECK_EQ(salvaged.calls, 40);
    cm__pending_undefer(q);
    for (h = 1; h <= 11; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_EVENT, h, 0, NULL, &err), 0);
    }
    CHECK_TRUE(freed_in_order(&log, 1, 11));
    cm__pending_delete(q);
}

static void
test_shutdown(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue((size_t)1 << 40, &log);
    uint64_t h;

    /* flushed once even though deferred */
    cm__pending_defer(q);
    for (h = 1; h <= 3; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 1, NULL, &err), 0);
    }
    CHECK_EQ(cm__pending_shutdown(q, &err), 0);
    CHECK_TRUE(freed_in_order(&log, 1, 3) && cm__pending_count(q) == 0);

    /* later releases leak silently */
    for (h = 4; h <= 30; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 1000, NULL, &err), 0);
    }
    cm__pending_undefer(q);
    CHECK_TRUE(cm__pending_count(q) == 0 && cm__pending_bytes(q) == 0);
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_EQ(cm__pending_shutdown(q, &err), 0);
    CHECK_EQ(log.calls, 3);
    cm__pending_delete(q);

    /* a failed free at shutdown is reported; what follows it is not freed */
    q = new_queue((size_t)1 << 40, &log);
    for (h = 1; h <= 3; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, h, 1, NULL, &err), 0);
    }
    log.fail = 2;
    memset(&err, 0, sizeof(err));
    CHECK_EQ(cm__pending_shutdown(q, &err), -1);
    CHECK_EQ(err.kind, CM_ERR_DRIVER);
    CHECK_TRUE(freed_in_order(&log, 1, 1) && log.calls == 2);
    CHECK_EQ(cm__pending_count(q), 1);
    CHECK_EQ(cm__pending_add(q, CM_FREE_DEVICE, 4, 1, NULL, &err), 0);
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_EQ(cm__pending_shutdown(q, &err), 0);
    CHECK_TRUE(log.calls == 2 && cm__pending_count(q) == 1);
    cm__pending_drop(q);
    CHECK_EQ(cm__pending_count(q), 0);
    cm__pending_delete(q);
}

static void
test_reentrant_free(void)
{
    cm_error err;
    freelog log;
    cm_pending *q = new_queue((size_t)1 << 40, &log);
    uint64_t h;

    /* freeing 5 releases 100 into the same queue, from inside the flush */
    log.chain_from = 5;
    log.chain_to = 100;
    for (h = 1; h <= 10; h++) {
        CHECK_EQ(cm__pending_add(q, CM_FREE_EXTERNAL, h, 1, NULL, &err), 0);
    }
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(log.n == 11 && log.handles[10] == 100);
    CHECK_EQ(cm__pending_count(q), 0);
    cm__pending_delete(q);
}

/* ---- many threads ------------------------------------------------------ */

#define THREADS 8
#define PER_THREAD 4000

static atomic_int stress_freed[THREADS * PER_THREAD];
static atomic_int stress_bad;

static int
stress_free(void *arg, cm_free_kind kind, uint64_t handle, size_t nbytes,
            cm_error *err)
{
    (void)arg;
    (void)kind;
    (void)err;
    if (handle == 0 || handle > THREADS * PER_THREAD ||
        nbytes != handle % 97) {
        atomic_fetch_add(&stress_bad, 1);
        return 0;
    }
    atomic_fetch_add(&stress_freed[handle - 1], 1);
    return 0;
}

typedef struct stress_arg {
    cm_pending *q;
    int id;
} stress_arg;

/* The owner's lock: the queue takes none (pending.h); release.c holds its
 * device's qlock, recursive, around every call. */
static pthread_mutex_t stress_owner;

static int
stress_add(cm_pending *q, uint64_t h)
{
    cm_error err;
    int rc;

    pthread_mutex_lock(&stress_owner);
    rc = cm__pending_add(q, CM_FREE_DEVICE, h, h % 97, NULL, &err);
    pthread_mutex_unlock(&stress_owner);
    return rc;
}

static void *
stress_thread(void *p)
{
    stress_arg *a = p;
    cm_error err;
    int i;

    for (i = 0; i < PER_THREAD; i++) {
        uint64_t h = (uint64_t)a->id * PER_THREAD + (uint64_t)i + 1;

        pthread_mutex_lock(&stress_owner);
        /* thread 2 queues in deferred blocks of 50 */
        if (a->id == 2 && i % 50 == 0) {
            cm__pending_defer(a->q);
        }
        if (stress_add(a->q, h) != 0) {
            atomic_fetch_add(&stress_bad, 1);
        }
        if (a->id == 2 && i % 50 == 49) {
            cm__pending_undefer(a->q);
        }
        if (a->id < 2 && i % 100 == 0 && cm__pending_flush(a->q, &err)) {
            atomic_fetch_add(&stress_bad, 1);
        }
        if (a->id == 3 && i % 10 == 0) {
            (void)cm__pending_count(a->q);
            (void)cm__pending_bytes(a->q);
        }
        pthread_mutex_unlock(&stress_owner);
    }
    return NULL;
}

static void
test_stress(void)
{
    pthread_t threads[THREADS];
    stress_arg args[THREADS];
    cm_error err;
    pthread_mutexattr_t recursive;
    cm_pending *q;
    int i, once = 1;

    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&stress_owner, &recursive);
    pthread_mutexattr_destroy(&recursive);
    /* 0.2 * 20000 bytes: both thresholds trip during the run */
    q = cm__pending_new(20000, stress_free, NULL, &err);
    CHECK_NE(q, NULL);
    if (q == NULL) {
        return;
    }
    for (i = 0; i < THREADS; i++) {
        args[i].q = q;
        args[i].id = i;
        CHECK_EQ(pthread_create(&threads[i], NULL, stress_thread, &args[i]),
                 0);
    }
    for (i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
    }
    CHECK_TRUE(!cm__pending_deferred(q));
    CHECK_EQ(cm__pending_flush(q, &err), 0);
    CHECK_TRUE(cm__pending_count(q) == 0 && cm__pending_bytes(q) == 0);
    for (i = 0; i < THREADS * PER_THREAD; i++) {
        if (atomic_load(&stress_freed[i]) != 1) {
            once = 0;
        }
    }
    CHECK_TRUE(once);
    CHECK_EQ(atomic_load(&stress_bad), 0);
    cm__pending_delete(q);
    pthread_mutex_destroy(&stress_owner);
}

/* The limits must be the defaults whatever the caller set. */
static void
setup(void)
{
    unsetenv(CV);
    unsetenv(RV);
    unsetenv(NCV);
    unsetenv(NRV);
}

static const check_test tests[] = {
    {"environment", test_environment, 0},
    {"defaults", test_defaults, 0},
    {"count_threshold", test_count_threshold, 0},
    {"byte_threshold", test_byte_threshold, 0},
    {"due", test_due, 0},
    {"resize", test_resize, 0},
    {"fifo_growth", test_fifo_growth, 0},
    {"failed_free", test_failed_free, 0},
    {"nested_defer", test_nested_defer, 0},
    {"early_exit", test_early_exit, 0},
    {"drop", test_drop, 0},
    {"salvage", test_salvage, 0},
    {"shutdown", test_shutdown, 0},
    {"reentrant_free", test_reentrant_free, 0},
    {"stress", test_stress, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, setup, NULL)
