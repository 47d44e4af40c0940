/* test_sim_stream.c: the simulator's streams, events, callbacks, default
 * stream rules and hazard checker, through the driver API. Orders are
 * observed with host functions appending to a log under a delay. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "sim.h"

/* The per-thread variants the simulator exports (cuda.h names them only
 * under CUDA_API_PER_THREAD_DEFAULT_STREAM). */
CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *user);
CUresult cuStreamQuery_ptsz(CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);

static CUcontext ctx;
static CUdevice dev;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[64];
static size_t log_len;

typedef struct step {
    char c;
    unsigned sleep_ms;
} step;

static void
sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void
log_reset(void)
{
    pthread_mutex_lock(&log_mu);
    log_len = 0;
    log_buf[0] = '\0';
    pthread_mutex_unlock(&log_mu);
}

static void
log_step(void *arg)
{
    const step *s = arg;

    if (s->sleep_ms)
        sleep_ms(s->sleep_ms);
    pthread_mutex_lock(&log_mu);
    if (log_len + 1 < sizeof log_buf) {
        log_buf[log_len++] = s->c;
        log_buf[log_len] = '\0';
    }
    pthread_mutex_unlock(&log_mu);
}

static int
log_is(const char *want)
{
    int ok;

    pthread_mutex_lock(&log_mu);
    ok = strcmp(log_buf, want) == 0;
    if (!ok)
        fprintf(stderr, "log is \"%s\", expected \"%s\"\n", log_buf, want);
    pthread_mutex_unlock(&log_mu);
    return ok;
}

static void
test_errors(void)
{
    CUstream s;
    CUevent e;
    int least = 99, greatest = 99, prio;
    unsigned flags;
    CUcontext c;

    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuStreamCreate(&s, 2));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuStreamCreate(NULL, 0));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamDestroy(NULL));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamDestroy(CU_STREAM_LEGACY));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamDestroy(CU_STREAM_PER_THREAD));
    CHECK_OK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CHECK_TRUE(least == 0 && greatest == -5);
    CHECK_OK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -100));
    CHECK_OK(cuStreamGetPriority(s, &prio));
    CHECK_EQ(prio, -5);
    CHECK_OK(cuStreamGetFlags(s, &flags));
    CHECK_EQ(flags, CU_STREAM_NON_BLOCKING);
    CHECK_OK(cuStreamGetCtx(s, &c));
    CHECK_EQ(c, ctx);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuStreamAddCallback(s, NULL, NULL, 0));
    CHECK_OK(cuStreamDestroy(s));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamGetPriority(s, &prio));
    CHECK_OK(cuStreamCreateWithPriority(&s, 0, 7));
    CHECK_OK(cuStreamGetPriority(s, &prio));
    CHECK_EQ(prio, 0);
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuStreamGetPriority(NULL, &prio));
    CHECK_EQ(prio, 0);
    CHECK_OK(cuStreamGetCtx(CU_STREAM_PER_THREAD, &c));
    CHECK_EQ(c, ctx);

    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuEventCreate(&e, 8));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuEventCreate(&e, CU_EVENT_INTERPROCESS));
    CHECK_OK(
        cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuStreamWaitEvent(NULL, e, 1));
    CHECK_OK(cuStreamWaitEvent(NULL, e, 0)); /* never recorded: no wait */
    CHECK_OK(cuEventDestroy(e));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuEventDestroy(e));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuEventQuery(e));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamWaitEvent(NULL, e, 0));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuEventRecord(e, NULL));
}

static void
test_query_not_ready(void)
{
    static step quick = {'q', 0};
    CUdeviceptr d;
    CUstream s;

    cusim_set_delay_us(20000);
    CHECK_OK(cuMemAlloc(&d, 4096));
    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuStreamQuery(s));
    CHECK_OK(cuMemsetD8Async(d, 1, 4096, s));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(s));
    CHECK_OK(cuStreamSynchronize(s));
    CHECK_OK(cuStreamQuery(s));

    CHECK_OK(cuLaunchHostFunc(NULL, log_step, &quick));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(NULL));
    CHECK_OK(cuStreamSynchronize(NULL));
    CHECK_OK(cuStreamQuery(NULL));
    cusim_set_delay_us(0);
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuMemFree(d));
}

/* Two host functions, the first slow: the log shows whether the second
 * waited for it. */
static void
order_case(CUstream first, CUstream second, const char *want)
{
    static step slow[2] = {{'1', 60}, {'1', 60}};
    static step fast = {'2', 0};

    log_reset();
    CHECK_OK(cuLaunchHostFunc(first, log_step, &slow[0]));
    CHECK_OK(cuLaunchHostFunc(second, log_step, &fast));
    CHECK_OK(cuCtxSynchronize());
    CHECK_TRUE(log_is(want));
}

static void
test_legacy_rules(void)
{
    CUstream b, nb;

    CHECK_OK(cuStreamCreate(&b, CU_STREAM_DEFAULT));
    CHECK_OK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    order_case(b, NULL, "12");  /* blocking, then legacy */
    order_case(nb, NULL, "21"); /* non-blocking: no wait */
    order_case(NULL, b, "12");  /* legacy, then blocking */
    order_case(NULL, nb, "21");
    order_case(CU_STREAM_LEGACY, b, "12");
    order_case(b, nb, "21"); /* unrelated streams */
    CHECK_OK(cuStreamDestroy(b));
    CHECK_OK(cuStreamDestroy(nb));
}

/* Per-thread default streams: two threads' streams run concurrently (the
 * first waits for the second's host function), each ordered with the
 * legacy stream. */
static int flag_set, flag_seen;

static void
wait_for_flag(void *arg)
{
    double end = now_ms() + 3000;

    (void)arg;
    while (now_ms() < end) {
        if (__atomic_load_n(&flag_set, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&flag_seen, 1, __ATOMIC_RELEASE);
            return;
        }
        sleep_ms(1);
    }
}

static void
set_flag(void *arg)
{
    (void)arg;
    __atomic_store_n(&flag_set, 1, __ATOMIC_RELEASE);
}

/* Checked by the main thread: the counters in check.h are not shared. */
static CUresult thread_rc[3];

static void *
ptds_thread(void *arg)
{
    (void)arg;
    thread_rc[0] = cuCtxSetCurrent(ctx);
    thread_rc[1] = cuLaunchHostFunc_ptsz(NULL, set_flag, NULL);
    thread_rc[2] = cuStreamSynchronize_ptsz(NULL);
    return NULL;
}

static void
test_ptds(void)
{
    static step slow = {'p', 60};
    pthread_t t;

    flag_set = flag_seen = 0;
    CHECK_OK(cuLaunchHostFunc(CU_STREAM_PER_THREAD, wait_for_flag, NULL));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery_ptsz(NULL));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(CU_STREAM_PER_THREAD));
    CHECK_EQ(pthread_create(&t, NULL, ptds_thread, NULL), 0);
    pthread_join(t, NULL);
    CHECK_TRUE(thread_rc[0] == CUDA_SUCCESS && thread_rc[1] == CUDA_SUCCESS &&
               thread_rc[2] == CUDA_SUCCESS);
    CHECK_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK_TRUE(flag_seen);

    order_case(CU_STREAM_PER_THREAD, CU_STREAM_LEGACY, "12");
    order_case(CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, "12");

    /* Synchronizing the legacy stream covers blocking streams' work. */
    log_reset();
    CHECK_OK(cuLaunchHostFunc(CU_STREAM_PER_THREAD, log_step, &slow));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(NULL));
    CHECK_OK(cuStreamSynchronize(NULL));
    CHECK_TRUE(log_is("p"));
}

static void
test_events(void)
{
    CUdeviceptr d;
    CUstream s;
    CUevent e0, e1, never, notime;
    float ms = -1;

    CHECK_OK(cuMemAlloc(&d, 4096));
    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CHECK_OK(cuEventCreate(&e1, CU_EVENT_BLOCKING_SYNC));
    CHECK_OK(cuEventCreate(&never, 0));
    CHECK_OK(cuEventCreate(&notime, CU_EVENT_DISABLE_TIMING));
    CHECK_OK(cuEventQuery(never));
    CHECK_OK(cuEventSynchronize(never));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, never, e0));

    cusim_set_delay_us(20000);
    CHECK_OK(cuEventRecord(e0, s));
    CHECK_OK(cuMemsetD8Async(d, 0, 4096, s));
    CHECK_OK(cuEventRecord(e1, s));
    CHECK_OK(cuEventRecord(notime, s));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e1));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventElapsedTime(&ms, e0, e1));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, e0, never));
    CHECK_OK(cuEventSynchronize(e1));
    CHECK_OK(cuEventQuery(e1));
    CHECK_OK(cuEventElapsedTime(&ms, e0, e1));
    CHECK_GE(ms, 20.0f);
    CHECK_OK(cuEventSynchronize(notime));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, e0, notime));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuEventElapsedTime(NULL, e0, e1));

    /* An event destroyed while its record is queued. */
    CHECK_OK(cuEventRecord(e0, s));
    CHECK_OK(cuEventDestroy(e0));
    cusim_set_delay_us(0);
    CHECK_OK(cuStreamSynchronize(s));

    CHECK_OK(cuEventDestroy(e1));
    CHECK_OK(cuEventDestroy(never));
    CHECK_OK(cuEventDestroy(notime));
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuMemFree(d));
}

static void
test_wait_event(void)
{
    static step x = {'x', 60}, y = {'y', 0};
    CUstream s1, s2;
    CUevent e;

    CHECK_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));

    log_reset();
    CHECK_OK(cuLaunchHostFunc(s1, log_step, &x));
    CHECK_OK(cuEventRecord(e, s1));
    CHECK_OK(cuStreamWaitEvent(s2, e, 0));
    CHECK_OK(cuLaunchHostFunc(s2, log_step, &y));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(s2));
    CHECK_OK(cuStreamSynchronize(s2));
    CHECK_TRUE(log_is("xy"));

    /* The wait uses what the event held at the call: a later record on an
     * idle stream does not release it early. */
    log_reset();
    CHECK_OK(cuLaunchHostFunc(s1, log_step, &x));
    CHECK_OK(cuEventRecord(e, s1));
    CHECK_OK(cuStreamWaitEvent(s2, e, 0));
    CHECK_OK(cuEventRecord(e, s2));
    CHECK_OK(cuLaunchHostFunc(s2, log_step, &y));
    CHECK_OK(cuCtxSynchronize());
    CHECK_TRUE(log_is("xy"));

    log_reset();
    CHECK_OK(cuLaunchHostFunc(s1, log_step, &x));
    CHECK_OK(cuLaunchHostFunc(s2, log_step, &y));
    CHECK_OK(cuCtxSynchronize());
    CHECK_TRUE(log_is("yx"));

    CHECK_OK(cuEventDestroy(e));
    CHECK_OK(cuStreamDestroy(s1));
    CHECK_OK(cuStreamDestroy(s2));
}

typedef struct cb_seen {
    CUstream stream;
    CUresult status;
    void *user;
    pthread_t thread;
    CUresult inner;
} cb_seen;

static cb_seen seen[3];
static int nseen, slow_done, after_saw_slow;

static void CUDA_CB
record_cb(CUstream hStream, CUresult status, void *userData)
{
    int i = nseen++;

    if (i == 0) {
        sleep_ms(40);
        slow_done = 1;
    }
    if (i < 3) {
        seen[i].stream = hStream;
        seen[i].status = status;
        seen[i].user = userData;
        seen[i].thread = pthread_self();
        seen[i].inner = cuStreamQuery(hStream);
    }
}

static void
after_cb(void *arg)
{
    (void)arg;
    after_saw_slow = slow_done;
}

static void
test_callbacks(void)
{
    static int args[3];
    CUstream s;
    CUevent e;
    int i;

    CHECK_OK(cuStreamCreate(&s, 0));
    nseen = slow_done = after_saw_slow = 0;
    for (i = 0; i < 3; i++)
        CHECK_OK(cuStreamAddCallback(s, record_cb, &args[i], 0));
    CHECK_OK(cuLaunchHostFunc(s, after_cb, NULL));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuStreamAddCallback(s, record_cb, NULL, 1));
    CHECK_OK(cuStreamSynchronize(s));
    CHECK_EQ(nseen, 3);
    for (i = 0; i < 3; i++) {
        CHECK_EQ(seen[i].user, &args[i]);
        CHECK_EQ(seen[i].stream, s);
        CHECK_EQ(seen[i].status, CUDA_SUCCESS);
        CHECK_TRUE(!pthread_equal(seen[i].thread, pthread_self()));
        CHECK_EQ(seen[i].inner, CUDA_ERROR_NOT_PERMITTED);
    }
    CHECK_EQ(after_saw_slow, 1);

    /* Driver calls work again on the worker after the callback. */
    CHECK_OK(cuEventCreate(&e, 0));
    CHECK_OK(cuEventRecord(e, s));
    CHECK_OK(cuEventSynchronize(e));
    CHECK_OK(cuEventDestroy(e));
    CHECK_OK(cuStreamDestroy(s));
}

static int destroyed_ran;

static void
count_run(void *arg)
{
    (void)arg;
    __atomic_add_fetch(&destroyed_ran, 1, __ATOMIC_ACQ_REL);
}

static void
test_destroy_queued(void)
{
    CUdeviceptr d;
    CUstream s, never_used;
    cusim_stats st;

    CHECK_OK(cuMemAlloc(&d, 4096));
    CHECK_OK(cuStreamCreate(&never_used, 0));
    CHECK_OK(cuStreamDestroy(never_used));
    CHECK_OK(cuStreamCreate(&s, 0));
    cusim_get_stats(&st);
    CHECK_EQ(st.streams, 1);
    cusim_set_delay_us(20000);
    destroyed_ran = 0;
    CHECK_OK(cuMemsetD8Async(d, 7, 4096, s));
    CHECK_OK(cuLaunchHostFunc(s, count_run, NULL));
    CHECK_OK(cuStreamDestroy(s));
    CHECK_EQ(__atomic_load_n(&destroyed_ran, __ATOMIC_ACQUIRE), 0);
    cusim_get_stats(&st);
    CHECK_EQ(st.streams, 0);
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamQuery(s));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamDestroy(s));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuMemsetD8Async(d, 7, 4096, s));
    CHECK_OK(cuCtxSynchronize());
    CHECK_EQ(__atomic_load_n(&destroyed_ran, __ATOMIC_ACQUIRE), 1);
    cusim_set_delay_us(0);
    CHECK_OK(cuMemFree(d));
}

static void
test_hazards(void)
{
    CUdeviceptr a, b;
    CUstream s1, s2, s3, nb;
    CUevent e1, e2;
    unsigned long long n0;
    const char *last;

    CHECK_OK(cuMemAlloc(&a, 4096));
    CHECK_OK(cuMemAlloc(&b, 4096));
    CHECK_OK(cuStreamCreate(&s1, 0));
    CHECK_OK(cuStreamCreate(&s2, 0));
    CHECK_OK(cuStreamCreate(&s3, 0));
    CHECK_OK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
    CHECK_OK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
    cusim_reset();
    cusim_set_hazards(1);
    cusim_set_delay_us(20000);
    n0 = cusim_hazard_count();
    CHECK_EQ(n0, 0);
    CHECK_EQ(cusim_last_hazard(), NULL);

    /* Unordered write then read on two streams. */
    CHECK_OK(cuMemsetD8Async(a, 1, 4096, s1));
    CHECK_OK(cuMemcpyDtoDAsync(b, a, 4096, s2));
    CHECK_EQ(cusim_hazard_count(), 1);
    last = cusim_last_hazard();
    CHECK_TRUE(last != NULL && strstr(last, "cuMemcpyDtoDAsync") != NULL &&
               strstr(last, "cuMemsetD8Async") != NULL);
    CHECK_OK(cuCtxSynchronize());

    /* Ordered by an event. */
    CHECK_OK(cuMemsetD8Async(a, 2, 4096, s1));
    CHECK_OK(cuEventRecord(e1, s1));
    CHECK_OK(cuStreamWaitEvent(s2, e1, 0));
    CHECK_OK(cuMemcpyDtoDAsync(b, a, 4096, s2));
    CHECK_EQ(cusim_hazard_count(), 1);
    /* ... and transitively, through a second event. */
    CHECK_OK(cuEventRecord(e2, s2));
    CHECK_OK(cuStreamWaitEvent(s3, e2, 0));
    CHECK_OK(cuMemsetD8Async(a, 3, 4096, s3));
    CHECK_EQ(cusim_hazard_count(), 1);
    CHECK_OK(cuCtxSynchronize());

    /* Same stream; reads only; disjoint ranges. */
    CHECK_OK(cuMemsetD8Async(a, 4, 4096, s1));
    CHECK_OK(cuMemcpyDtoDAsync(b, a, 2048, s1));
    CHECK_EQ(cusim_hazard_count(), 1);
    CHECK_OK(cuCtxSynchronize());
    CHECK_OK(cuMemcpyDtoDAsync(b, a, 2048, s1));
    CHECK_OK(cuMemcpyDtoDAsync(b + 2048, a, 2048, s2));
    CHECK_EQ(cusim_hazard_count(), 1);
    CHECK_OK(cuCtxSynchronize());
    CHECK_OK(cuMemsetD8Async(a, 5, 2048, s1));
    CHECK_OK(cuMemsetD8Async(a + 2048, 5, 2048, s2));
    CHECK_EQ(cusim_hazard_count(), 1);
    CHECK_OK(cuCtxSynchronize());

    /* The legacy stream orders blocking streams, not non-blocking ones. */
    CHECK_OK(cuMemsetD8Async(a, 6, 4096, s1));
    CHECK_OK(cuMemsetD8Async(a, 6, 4096, NULL));
    CHECK_OK(cuMemsetD8Async(a, 6, 4096, s2));
    CHECK_EQ(cusim_hazard_count(), 1);
    CHECK_OK(cuMemsetD8Async(a, 7, 4096, nb));
    CHECK_EQ(cusim_hazard_count(), 2);
    CHECK_OK(cuCtxSynchronize());

    /* Work that finished is no hazard. */
    CHECK_OK(cuMemsetD8Async(a, 8, 4096, s1));
    CHECK_OK(cuStreamSynchronize(s1));
    CHECK_OK(cuMemsetD8Async(a, 8, 4096, s2));
    CHECK_EQ(cusim_hazard_count(), 2);
    CHECK_OK(cuCtxSynchronize());

    cusim_set_hazards(0);
    CHECK_OK(cuMemsetD8Async(a, 9, 4096, s1));
    CHECK_OK(cuMemsetD8Async(a, 9, 4096, s2));
    CHECK_EQ(cusim_hazard_count(), 2);
    cusim_set_delay_us(0);
    CHECK_OK(cuCtxSynchronize());
    cusim_reset();
    CHECK_EQ(cusim_hazard_count(), 0);

    CHECK_OK(cuEventDestroy(e1));
    CHECK_OK(cuEventDestroy(e2));
    CHECK_OK(cuStreamDestroy(s1));
    CHECK_OK(cuStreamDestroy(s2));
    CHECK_OK(cuStreamDestroy(s3));
    CHECK_OK(cuStreamDestroy(nb));
    CHECK_OK(cuMemFree(a));
    CHECK_OK(cuMemFree(b));
}

static void
test_attach(void)
{
    CUdeviceptr m, d;
    CUstream s;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    CHECK_OK(cuMemAlloc(&d, 4096));
    CHECK_OK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
    CHECK_OK(cuStreamAttachMemAsync(s, m, 4096, CU_MEM_ATTACH_GLOBAL));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuStreamAttachMemAsync(s, m + 256, 0, CU_MEM_ATTACH_GLOBAL));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuStreamAttachMemAsync(s, m, 100, CU_MEM_ATTACH_GLOBAL));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuStreamAttachMemAsync(s, d, 0, CU_MEM_ATTACH_GLOBAL));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuStreamAttachMemAsync(s, m, 0, 8));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuStreamAttachMemAsync(NULL, m, 0, CU_MEM_ATTACH_SINGLE));
    CHECK_OK(cuStreamSynchronize(s));
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuMemFree(m));
    CHECK_OK(cuMemFree(d));
}

/* Releasing the last reference to a context releases what is left of its
 * streams (user, legacy, per-thread) and events, queued work and all. */
static void
test_reset_releases(void)
{
    static step slow = {'r', 30};
    CUstream s;
    CUevent e;
    cusim_stats st;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuEventCreate(&e, 0));
    CHECK_OK(cuLaunchHostFunc(CU_STREAM_PER_THREAD, log_step, &slow));
    CHECK_OK(cuLaunchHostFunc(s, log_step, &slow));
    CHECK_OK(cuEventRecord(e, s));
    cusim_get_stats(&st);
    CHECK_TRUE(st.streams == 1 && st.events == 1);
    CHECK_OK(cuDevicePrimaryCtxRelease(dev));
    cusim_get_stats(&st);
    CHECK_TRUE(st.streams == 0 && st.events == 0 && st.contexts == 0);
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamQuery(s));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuEventQuery(e));
}

/* ------------------------------------------------------------------------
 * Workers: a stream holds a worker thread only while it has work. */

enum { PARKED_MAX = 16 }; /* workers the simulator keeps parked */

static int
workers(void)
{
    return check_threads_named(SIM_WORKER_NAME);
}

/* The worker count once it is at most `most` (a parked worker exits
 * after a while; an exiting one is gone soon), or as it is after 10 s. */
static int
workers_settle(int most)
{
    double until = now_ms() + 10000.0;
    int n;

    while ((n = workers()) > most && now_ms() < until)
        sleep_ms(10);
    return n;
}

/* Two steps per stream: each moves the stream's counter on by one only
 * from the value the step before it left, so a count of 2 means both ran,
 * in order. */
static void
step_first(void *arg)
{
    int *v = arg;

    if (*v == 0)
        *v = 1;
}

static void
step_second(void *arg)
{
    int *v = arg;

    if (*v == 1)
        *v = 2;
}

/* 2,000 live streams that all ran work leave no more threads than the
 * simulator parks; each stream's work ran in its order. The work is
 * queued BATCH streams at a time: a stream with work holds a worker, and
 * valgrind runs at most 500 threads, each slow to start
 * (tests/simulator/test_sim_idle.py has 10,000 streams). */
static void
test_many_streams_few_threads(void)
{
    enum { N = 2000, BATCH = 100 };
    CUstream *s = calloc(N, sizeof *s);
    int *v = calloc(N, sizeof *v);
    int i, done = 0;

    CHECK_TRUE(s != NULL && v != NULL);
    if (s == NULL || v == NULL)
        goto out;
    CHECK_EQ(workers(), 0);
    for (i = 0; i < N; i++)
        CHECK_OK(cuStreamCreate(&s[i], 0));
    for (i = 0; i < N; i++) {
        CHECK_OK(cuLaunchHostFunc(s[i], step_first, &v[i]));
        CHECK_OK(cuLaunchHostFunc(s[i], step_second, &v[i]));
        if (i % BATCH == BATCH - 1)
            CHECK_OK(cuCtxSynchronize());
    }
    CHECK_OK(cuCtxSynchronize());
    for (i = 0; i < N; i++)
        done += v[i] == 2;
    CHECK_EQ(done, N);
    /* Every stream is still alive. */
    CHECK_LE(workers_settle(PARKED_MAX), PARKED_MAX);
    for (i = 0; i < N; i++)
        CHECK_OK(cuStreamDestroy(s[i]));
out:
    free(s);
    free(v);
}

/* A stream whose worker parked and then exited gets one again for new
 * work, which runs in the order it was queued; another stream takes a
 * parked worker. */
static void
test_worker_returns(void)
{
    static const step a = {'a', 0}, b = {'b', 30}, c = {'c', 0}, d = {'d', 10},
                      e = {'e', 0};
    CUstream s, t;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    log_reset();
    CHECK_OK(cuLaunchHostFunc(s, log_step, (void *)&a));
    CHECK_OK(cuStreamSynchronize(s));
    CHECK_EQ(workers_settle(0), 0);
    CHECK_OK(cuLaunchHostFunc(s, log_step, (void *)&b));
    CHECK_OK(cuLaunchHostFunc(s, log_step, (void *)&c));
    CHECK_OK(cuLaunchHostFunc(s, log_step, (void *)&d));
    CHECK_OK(cuStreamSynchronize(s));
    CHECK_TRUE(log_is("abcd"));
    /* s's worker is parked now (or just gone): t runs on one. */
    CHECK_OK(cuLaunchHostFunc(t, log_step, (void *)&e));
    CHECK_OK(cuStreamSynchronize(t));
    CHECK_TRUE(log_is("abcde"));
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuStreamDestroy(t));
}

/* Destroying a stream whose worker is parked or gone frees it at once;
 * work queued on such a stream before it is destroyed still runs. */
static void
test_destroy_idle(void)
{
    CUstream parked_s, gone, queued;
    cusim_stats st;
    /* One each: two streams' workers may run their steps at once. */
    int ran[3] = {0, 0, 0};

    CHECK_OK(cuStreamCreate(&parked_s, 0));
    CHECK_OK(cuStreamCreate(&gone, 0));
    CHECK_OK(cuStreamCreate(&queued, 0));
    CHECK_OK(cuLaunchHostFunc(gone, step_first, &ran[0]));
    CHECK_OK(cuLaunchHostFunc(queued, step_first, &ran[1]));
    CHECK_OK(cuCtxSynchronize());
    CHECK_EQ(workers_settle(0), 0);
    CHECK_OK(cuStreamDestroy(gone));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamQuery(gone));
    CHECK_OK(cuLaunchHostFunc(parked_s, step_first, &ran[2]));
    CHECK_OK(cuStreamSynchronize(parked_s));
    CHECK_OK(cuStreamDestroy(parked_s));
    cusim_get_stats(&st);
    CHECK_EQ(st.streams, 1);
    cusim_set_delay_us(20000);
    destroyed_ran = 0;
    CHECK_OK(cuLaunchHostFunc(queued, count_run, NULL));
    CHECK_OK(cuStreamDestroy(queued));
    CHECK_EQ(__atomic_load_n(&destroyed_ran, __ATOMIC_ACQUIRE), 0);
    CHECK_OK(cuCtxSynchronize());
    CHECK_EQ(__atomic_load_n(&destroyed_ran, __ATOMIC_ACQUIRE), 1);
    cusim_set_delay_us(0);
    CHECK_EQ(ran[0] + ran[1] + ran[2], 3);
}

/* A synchronous copy on an idle stream runs on the calling thread: no
 * worker starts. Behind queued work it waits for that work, in order. */
static void
test_sync_copy_runs_here(void)
{
    static const step slow = {'q', 20};
    enum { N = 4096 };
    unsigned char src[N], dst[N];
    CUdeviceptr d;
    CUstream s;
    int i;

    for (i = 0; i < N; i++)
        src[i] = (unsigned char)(i * 7 + 1);
    CHECK_OK(cuMemAlloc(&d, N));
    CHECK_EQ(workers_settle(0), 0);
    CHECK_OK(cuMemcpyHtoD(d, src, N));
    memset(dst, 0, N);
    CHECK_OK(cuMemcpyDtoH(dst, d, N));
    CHECK_MEM_EQ(dst, src, N);
    CHECK_EQ(workers(), 0);
    /* The legacy stream waits for a blocking stream's queued work: the
     * copy goes to the worker, after it. */
    CHECK_OK(cuStreamCreate(&s, 0));
    log_reset();
    CHECK_OK(cuLaunchHostFunc(s, log_step, (void *)&slow));
    CHECK_OK(cuMemsetD8Async(d, 0x5a, N, s));
    memset(dst, 0, N);
    CHECK_OK(cuMemcpyDtoH(dst, d, N));
    CHECK_TRUE(log_is("q"));
    for (i = 0; i < N && dst[i] == 0x5a; i++)
        ;
    CHECK_EQ(i, N);
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuMemFree(d));
}

enum { BIG = 8 << 20 };
static volatile int queued_meanwhile, copier_done;
static CUresult copier_rc;

/* Synchronous copies on the legacy stream until the main thread has queued
 * its work during one of them, for a minute at most. Bounded by time, not
 * by a count: under valgrind, which runs one thread at a time, the main
 * thread may miss every copy of a fixed number. */
static void *
copier(void *arg)
{
    CUdeviceptr d = *(CUdeviceptr *)arg;
    unsigned char *src = calloc(1, BIG);
    double end = now_ms() + 60e3;

    copier_rc = src == NULL ? CUDA_ERROR_OUT_OF_MEMORY : cuCtxSetCurrent(ctx);
    while (copier_rc == CUDA_SUCCESS &&
           !__atomic_load_n(&queued_meanwhile, __ATOMIC_ACQUIRE) &&
           now_ms() < end)
        copier_rc = cuMemcpyHtoD(d, src, BIG);
    free(src);
    __atomic_store_n(&copier_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Work another thread queues on a stream while a synchronous copy runs on
 * its caller's thread still runs, after the copy. */
static void
test_work_queued_during_caller_copy(void)
{
    enum { N = 4096 };
    unsigned char dst[N];
    CUdeviceptr d, e;
    pthread_t t;
    int i, busy;

    CHECK_OK(cuMemAlloc(&d, BIG));
    CHECK_OK(cuMemAlloc(&e, N));
    queued_meanwhile = copier_done = 0;
    CHECK_EQ(pthread_create(&t, NULL, copier, &d), 0);
    while (!(busy = cuStreamQuery(CU_STREAM_LEGACY) == CUDA_ERROR_NOT_READY) &&
           !__atomic_load_n(&copier_done, __ATOMIC_ACQUIRE))
        sched_yield();
    CHECK_TRUE(busy);
    CHECK_OK(cuMemsetD8Async(e, 0x3c, N, CU_STREAM_LEGACY));
    __atomic_store_n(&queued_meanwhile, 1, __ATOMIC_RELEASE);
    CHECK_OK(cuStreamSynchronize(CU_STREAM_LEGACY));
    pthread_join(t, NULL);
    CHECK_OK(copier_rc);
    memset(dst, 0, N);
    CHECK_OK(cuMemcpyDtoH(dst, e, N));
    for (i = 0; i < N && dst[i] == 0x3c; i++)
        ;
    CHECK_EQ(i, N);
    CHECK_OK(cuMemFree(d));
    CHECK_OK(cuMemFree(e));
}

/* A fork with idle streams: the child has no workers and cannot use the
 * driver; the parent's streams go on working. */
static void
test_fork_idle_streams(void)
{
    static const step a = {'a', 0}, b = {'b', 10}, c = {'c', 0};
    CUstream s, t;
    int status = -1, v = 0;
    pid_t pid;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuStreamCreate(&t, 0));
    log_reset();
    CHECK_OK(cuLaunchHostFunc(s, log_step, (void *)&a));
    CHECK_OK(cuLaunchHostFunc(t, step_first, &v));
    CHECK_OK(cuCtxSynchronize());
    /* Until the workers have left: one between publishing its last op's
     * completion and freeing the op holds both on its stack only, which
     * the child, without the thread, would lose (valgrind's leak check
     * in the child found it, 1 run in many). */
    CHECK_EQ(workers_settle(0), 0);
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        int bad = workers() != 0 ||
                  cuLaunchHostFunc(s, step_first, &v) !=
                      CUDA_ERROR_NOT_INITIALIZED ||
                  cuStreamDestroy(t) != CUDA_ERROR_NOT_INITIALIZED;
        _exit(bad);
    }
    CHECK_TRUE(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_OK(cuLaunchHostFunc(s, log_step, (void *)&b));
    CHECK_OK(cuLaunchHostFunc(s, log_step, (void *)&c));
    CHECK_OK(cuLaunchHostFunc(t, step_second, &v));
    CHECK_OK(cuCtxSynchronize());
    CHECK_TRUE(log_is("abc"));
    CHECK_EQ(v, 2);
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuStreamDestroy(t));
}

static void
setup(void)
{
    CHECK_OK(cuInit(0));
    CHECK_OK(cuDeviceGet(&dev, 0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_OK(cuCtxSetCurrent(ctx));
}

static void
teardown(void)
{
    cusim_stats st;

    cusim_get_stats(&st);
    CHECK_EQ(st.streams, 0);
    CHECK_EQ(st.events, 0);
}

static const check_test tests[] = {
    {"errors", test_errors, 0},
    {"query_not_ready", test_query_not_ready, 0},
    {"legacy_rules", test_legacy_rules, 0},
    {"ptds", test_ptds, 0},
    {"events", test_events, 0},
    {"wait_event", test_wait_event, 0},
    {"callbacks", test_callbacks, 0},
    {"destroy_queued", test_destroy_queued, 0},
    {"hazards", test_hazards, 0},
    {"attach", test_attach, 0},
    {"reset_releases", test_reset_releases, 0},
    {"many_streams_few_threads", test_many_streams_few_threads, 0},
    {"worker_returns", test_worker_returns, 0},
    {"destroy_idle", test_destroy_idle, 0},
    {"fork_idle_streams", test_fork_idle_streams, 0},
    {"sync_copy_runs_here", test_sync_copy_runs_here, 0},
    {"work_queued_during_caller_copy", test_work_queued_during_caller_copy, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, setup, teardown)
