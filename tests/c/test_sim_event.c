/* test_sim_event.c: event records on idle streams, which the simulator
 * completes at once on the calling thread (as a GPU completes a record
 * with nothing before it), and every rule that decides when a stream is
 * idle: ordering with later work, elapsed times, stream capture, the
 * legacy stream's implicit synchronization, per-thread default streams,
 * the delay, fault injection, the hazard checker and interprocess events.
 * Work is held up with a gate (a host function that waits for the test)
 * rather than with sleeps, so that "not ready" is certain. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "sim.h"

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);

static CUcontext ctx;
static CUdevice dev;

static int gate_open;

/* A host function that holds its stream until open_gate (or 10 s). */
static void
gate_wait(void *arg)
{
    struct timespec ts = {0, 1000000};
    int i;

    (void)arg;
    for (i = 0; i < 10000; i++) {
        if (__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE))
            return;
        nanosleep(&ts, NULL);
    }
}

static void
close_gate(CUstream s)
{
    __atomic_store_n(&gate_open, 0, __ATOMIC_RELEASE);
    CHECK_OK(cuLaunchHostFunc(s, gate_wait, NULL));
}

static void
open_gate(void)
{
    __atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
}

static void
sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* The simulator's stream workers in this process: a record that ran on a
 * worker started one. */
static int
nthreads(void)
{
    return check_threads_named(SIM_WORKER_NAME);
}

/* A record on an idle stream is complete when cuEventRecord returns and
 * needs no worker thread; so are queries and synchronizes of idle
 * streams, events and the context. Work on the stream starts its worker
 * (the count does move). */
static void
test_idle_inline(void)
{
    CUstream s, nb;
    CUevent e;
    int n0, i;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    n0 = nthreads();
    CHECK_TRUE(n0 >= 0); /* /proc/self/task was read */
    for (i = 0; i < 100; i++) {
        CHECK_OK(cuEventRecord(e, s));
        CHECK_OK(cuEventQuery(e));
        CHECK_OK(cuEventRecord(e, nb));
        CHECK_OK(cuEventQuery(e));
        CHECK_OK(cuEventRecord(e, NULL));
        CHECK_OK(cuEventQuery(e));
        CHECK_OK(cuEventRecord(e, CU_STREAM_PER_THREAD));
        CHECK_OK(cuEventQuery(e));
        CHECK_OK(cuEventRecord_ptsz(e, NULL));
        CHECK_OK(cuEventSynchronize(e));
        CHECK_OK(cuStreamWaitEvent(nb, e, 0));
        CHECK_OK(cuStreamQuery(s));
        CHECK_OK(cuStreamSynchronize(s));
        CHECK_OK(cuStreamSynchronize(NULL));
        CHECK_OK(cuCtxSynchronize());
    }
    CHECK_EQ(nthreads(), n0);

    close_gate(s);
    CHECK_EQ(nthreads(), n0 + 1);
    CHECK_OK(cuEventRecord(e, s)); /* behind the gate: queued */
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e));
    open_gate();
    CHECK_OK(cuEventSynchronize(e));
    CHECK_OK(cuEventQuery(e));
    CHECK_OK(cuEventDestroy(e));
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuStreamDestroy(nb));
}

/* The inline record takes its place in the stream's order: work queued
 * after it does not complete it, a record after that work waits for it,
 * and a stream that waits for the first record does not wait for the
 * work. */
static void
test_order_later_work(void)
{
    CUstream s, other;
    CUevent before, after;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuEventCreate(&before, 0));
    CHECK_OK(cuEventCreate(&after, 0));
    CHECK_OK(cuEventRecord(before, s));
    close_gate(s);
    CHECK_OK(cuEventRecord(after, s));
    CHECK_OK(cuEventQuery(before));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(after));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(s));
    CHECK_OK(cuStreamWaitEvent(other, before, 0));
    CHECK_OK(cuStreamQuery(other));
    CHECK_OK(cuStreamWaitEvent(other, after, 0));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(other));
    /* Recorded on a stream that now waits: not before the wait ends. */
    CHECK_OK(cuEventRecord(before, other));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(before));
    open_gate();
    CHECK_OK(cuStreamSynchronize(other));
    CHECK_OK(cuEventQuery(after));
    CHECK_OK(cuEventQuery(before));
    CHECK_OK(cuEventDestroy(before));
    CHECK_OK(cuEventDestroy(after));
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuStreamDestroy(other));
}

/* Elapsed times: an inline record is stamped when it is made, so the time
 * between two covers what the host did between them, and the time to a
 * queued record covers the work it waited for. Lower bounds only. */
static void
test_elapsed(void)
{
    CUstream s;
    CUevent a, b, c, untimed;
    float ms = -1.0f;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuEventCreate(&a, 0));
    CHECK_OK(cuEventCreate(&b, 0));
    CHECK_OK(cuEventCreate(&c, 0));
    CHECK_OK(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
    CHECK_OK(cuEventRecord(a, s));
    sleep_ms(20);
    CHECK_OK(cuEventRecord(b, s));
    CHECK_OK(cuEventElapsedTime(&ms, a, b));
    CHECK_TRUE(ms >= 20.0f);
    CHECK_OK(cuEventElapsedTime(&ms, b, a));
    CHECK_TRUE(ms <= -20.0f);
    CHECK_OK(cuEventElapsedTime(&ms, a, a));
    CHECK_TRUE(ms == 0.0f);

    close_gate(s);
    CHECK_OK(cuEventRecord(c, s));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventElapsedTime(&ms, b, c));
    sleep_ms(20);
    open_gate();
    CHECK_OK(cuEventSynchronize(c));
    CHECK_OK(cuEventElapsedTime(&ms, b, c));
    CHECK_TRUE(ms >= 20.0f);

    CHECK_OK(cuEventRecord(untimed, s));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, a, untimed));
    CHECK_OK(cuEventDestroy(a));
    CHECK_OK(cuEventDestroy(b));
    CHECK_OK(cuEventDestroy(c));
    CHECK_OK(cuEventDestroy(untimed));
    CHECK_OK(cuStreamDestroy(s));
}

/* A record in a capture is never run: the event answers CAPTURED_EVENT,
 * and an EXTERNAL record is an event record node, which a launch on an
 * idle stream completes. */
static void
test_capture(void)
{
    CUstream s;
    CUevent e, ext;
    CUgraph g;
    CUgraphExec x;
    CUgraphNode node;
    CUgraphNodeType type;
    size_t n = 0;

    CHECK_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuEventCreate(&e, 0));
    CHECK_OK(cuEventCreate(&ext, 0));
    CHECK_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_OK(cuEventRecord(e, s));
    CHECK_CU(CUDA_ERROR_CAPTURED_EVENT, cuEventQuery(e));
    CHECK_CU(CUDA_ERROR_CAPTURED_EVENT, cuEventSynchronize(e));
    CHECK_OK(cuEventRecordWithFlags(ext, s, CU_EVENT_RECORD_EXTERNAL));
    CHECK_OK(cuStreamEndCapture(s, &g));
    CHECK_OK(cuGraphGetNodes(g, NULL, &n));
    CHECK_EQ(n, 1);
    n = 1;
    CHECK_OK(cuGraphGetNodes(g, &node, &n));
    CHECK_OK(cuGraphNodeGetType(node, &type));
    CHECK_EQ(type, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    /* ext was never recorded outside the capture. */
    CHECK_OK(cuEventQuery(ext));
    CHECK_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK_OK(cuGraphLaunch(x, s));
    CHECK_OK(cuEventQuery(ext));
    close_gate(s);
    CHECK_OK(cuGraphLaunch(x, s));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(ext));
    open_gate();
    CHECK_OK(cuEventSynchronize(ext));
    /* Recorded again outside a capture, the event is an event again. */
    CHECK_OK(cuEventRecord(e, s));
    CHECK_OK(cuEventQuery(e));
    CHECK_OK(cuGraphExecDestroy(x));
    CHECK_OK(cuGraphDestroy(g));
    CHECK_OK(cuEventDestroy(e));
    CHECK_OK(cuEventDestroy(ext));
    CHECK_OK(cuStreamDestroy(s));
}

/* A record on the legacy stream waits for every blocking stream's work
 * (inline only when all are idle), not for non-blocking streams'; a
 * record on a blocking stream or a per-thread default stream waits for
 * the legacy stream's. A capturing blocking stream makes a legacy record
 * fail, as it would if it were queued. */
static void
test_legacy_rules(void)
{
    CUstream b, nb;
    CUevent e;

    CHECK_OK(cuStreamCreate(&b, CU_STREAM_DEFAULT));
    CHECK_OK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));

    close_gate(nb);
    CHECK_OK(cuEventRecord(e, NULL));
    CHECK_OK(cuEventQuery(e));
    CHECK_OK(cuEventRecord(e, b));
    CHECK_OK(cuEventQuery(e));
    open_gate();
    CHECK_OK(cuStreamSynchronize(nb));

    close_gate(b);
    CHECK_OK(cuEventRecord(e, CU_STREAM_LEGACY));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e));
    CHECK_OK(cuEventRecord(e, nb));
    CHECK_OK(cuEventQuery(e));
    open_gate();
    CHECK_OK(cuStreamSynchronize(b));
    CHECK_OK(cuStreamSynchronize(NULL));

    close_gate(CU_STREAM_PER_THREAD);
    CHECK_OK(cuEventRecord(e, NULL));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e));
    open_gate();
    CHECK_OK(cuEventSynchronize(e));

    close_gate(NULL);
    CHECK_OK(cuEventRecord(e, b));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e));
    CHECK_OK(cuEventRecord(e, CU_STREAM_PER_THREAD));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e));
    CHECK_OK(cuEventRecord(e, nb));
    CHECK_OK(cuEventQuery(e));
    open_gate();
    CHECK_OK(cuCtxSynchronize());

    CHECK_OK(cuStreamBeginCapture(b, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_CU(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cuEventRecord(e, NULL));
    {
        CUgraph g = NULL;

        CHECK_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                 cuStreamEndCapture(b, &g));
        CHECK_EQ(g, NULL);
    }
    CHECK_OK(cuEventRecord(e, NULL));
    CHECK_OK(cuEventQuery(e));
    CHECK_OK(cuEventDestroy(e));
    CHECK_OK(cuStreamDestroy(b));
    CHECK_OK(cuStreamDestroy(nb));
}

/* The context keeps its busy streams and its count of capturing ones
 * rather than walk every stream: with many idle streams around, a legacy
 * record still waits for the one busy blocking stream (a destroyed one
 * too, whose queued work still runs), and is complete on return again
 * once a capture ends, however it ends. */
static void
test_legacy_rules_amid_idle_streams(void)
{
    enum { N = 64 };
    CUstream idle[N], b, nb;
    CUevent e;
    CUgraph g;

    for (int i = 0; i < N; i++) {
        CHECK_OK(cuStreamCreate(&idle[i], i % 2 ? CU_STREAM_NON_BLOCKING
                                                : CU_STREAM_DEFAULT));
    }
    CHECK_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    for (int i = 0; i < N; i++) {
        CHECK_OK(cuEventRecord(e, idle[i]));
    }
    CHECK_OK(cuStreamCreate(&b, CU_STREAM_DEFAULT));
    CHECK_OK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));

    /* The busy one amid the idle ones, then destroyed while busy. */
    close_gate(idle[N / 2]);
    CHECK_OK(cuEventRecord(e, NULL));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e));
    CHECK_OK(cuStreamDestroy(idle[N / 2]));
    CHECK_OK(cuEventRecord(e, NULL));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e));
    open_gate();
    CHECK_OK(cuEventSynchronize(e));

    /* A non-blocking stream's capture does not involve the legacy one. */
    CHECK_OK(cuStreamBeginCapture(nb, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_OK(cuEventRecord(e, NULL));
    CHECK_OK(cuEventSynchronize(e));
    g = NULL;
    CHECK_OK(cuStreamEndCapture(nb, &g));
    CHECK_OK(cuGraphDestroy(g));
    for (int i = 0; i < 100; i++) {
        CHECK_OK(cuEventRecord(e, NULL));
        CHECK_OK(cuEventQuery(e));
    }

    /* A blocking one's, ended by the invalid record or by its stream's
     * destruction. */
    CHECK_OK(cuStreamBeginCapture(b, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_CU(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cuEventRecord(e, NULL));
    CHECK_CU(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(b, &g));
    for (int i = 0; i < 100; i++) {
        CHECK_OK(cuEventRecord(e, NULL));
        CHECK_OK(cuEventQuery(e));
    }
    CHECK_OK(cuStreamBeginCapture(b, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_OK(cuStreamDestroy(b));
    for (int i = 0; i < 100; i++) {
        CHECK_OK(cuEventRecord(e, NULL));
        CHECK_OK(cuEventQuery(e));
    }

    CHECK_OK(cuEventDestroy(e));
    CHECK_OK(cuStreamDestroy(nb));
    for (int i = 0; i < N; i++) {
        if (i != N / 2) {
            CHECK_OK(cuStreamDestroy(idle[i]));
        }
    }
}

/* With a delay every operation waits it out before it runs, a record on
 * an idle stream too: the stream is not idle early. */
static void
test_delay(void)
{
    CUstream s;
    CUevent e;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuEventCreate(&e, 0));
    cusim_set_delay_us(200000);
    CHECK_OK(cuEventRecord(e, s));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(s));
    cusim_set_delay_us(0);
    CHECK_OK(cuEventSynchronize(e));
    CHECK_OK(cuEventRecord(e, s));
    CHECK_OK(cuEventQuery(e));
    CHECK_OK(cuEventDestroy(e));
    CHECK_OK(cuStreamDestroy(s));
}

/* An injected fault fails the record before anything is recorded: the
 * event keeps its previous state and the stream its order. */
static void
test_fault(void)
{
    CUstream s;
    CUevent e, never;
    float ms;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuEventCreate(&e, 0));
    CHECK_OK(cuEventCreate(&never, 0));
    CHECK_EQ(cusim_inject("cuEventRecord", CUDA_ERROR_INVALID_VALUE, 0, 1), 0);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuEventRecord(never, s));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, never, never));
    CHECK_OK(cuEventRecord(never, s));
    CHECK_OK(cuEventElapsedTime(&ms, never, never));

    close_gate(s);
    CHECK_OK(cuEventRecord(e, s));
    open_gate();
    CHECK_OK(cuStreamSynchronize(s));
    CHECK_EQ(cusim_inject("cuEventRecord", CUDA_ERROR_OUT_OF_MEMORY, 0, 1), 0);
    close_gate(s);
    CHECK_CU(CUDA_ERROR_OUT_OF_MEMORY, cuEventRecord(e, s));
    CHECK_OK(cuEventQuery(e)); /* still the record before the gate */
    open_gate();
    CHECK_OK(cuStreamSynchronize(s));
    cusim_clear_faults();
    CHECK_OK(cuEventDestroy(e));
    CHECK_OK(cuEventDestroy(never));
    CHECK_OK(cuStreamDestroy(s));
}

/* The hazard checker sees an inline record as what it is: it orders what
 * came before it on its stream, not what is queued after it. */
static void
test_hazards(void)
{
    CUdeviceptr a, b, c;
    CUstream s1, s2, s3;
    CUevent e1, e2;

    CHECK_OK(cuMemAlloc(&a, 4096));
    CHECK_OK(cuMemAlloc(&b, 4096));
    CHECK_OK(cuMemAlloc(&c, 4096));
    CHECK_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
    CHECK_OK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
    cusim_reset();
    cusim_set_hazards(1);

    CHECK_OK(cuMemsetD8Async(a, 1, 4096, s1));
    CHECK_OK(cuStreamSynchronize(s1));
    CHECK_OK(cuEventRecord(e1, s1)); /* idle: inline */
    CHECK_OK(cuEventQuery(e1));
    close_gate(s1);
    CHECK_OK(cuMemsetD8Async(a, 2, 4096, s1));
    CHECK_OK(cuStreamWaitEvent(s2, e1, 0));
    CHECK_OK(cuMemcpyDtoDAsync(b, a, 4096, s2));
    CHECK_EQ(cusim_hazard_count(), 1);
    CHECK_TRUE(strstr(cusim_last_hazard(), "cuMemsetD8Async") != NULL);
    /* A queued record after the write does order it. */
    CHECK_OK(cuEventRecord(e2, s1));
    CHECK_OK(cuStreamWaitEvent(s3, e2, 0));
    CHECK_OK(cuMemcpyDtoDAsync(c, a, 4096, s3));
    CHECK_EQ(cusim_hazard_count(), 1);
    open_gate();
    CHECK_OK(cuCtxSynchronize());
    cusim_set_hazards(0);
    cusim_reset();
    CHECK_OK(cuEventDestroy(e1));
    CHECK_OK(cuEventDestroy(e2));
    CHECK_OK(cuStreamDestroy(s1));
    CHECK_OK(cuStreamDestroy(s2));
    CHECK_OK(cuStreamDestroy(s3));
    CHECK_OK(cuMemFree(a));
    CHECK_OK(cuMemFree(b));
    CHECK_OK(cuMemFree(c));
}

/* An interprocess event's shared state sees an inline record as run: a
 * second handle to it (as another process would open) is complete, and a
 * record held up by work is not. */
static void
test_ipc(void)
{
    const unsigned flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    CUipcEventHandle h;
    CUstream s, other;
    CUevent e, peer;

    CHECK_OK(cuStreamCreate(&s, 0));
    CHECK_OK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuEventCreate(&e, flags));
    CHECK_OK(cuIpcGetEventHandle(&h, e));
    CHECK_OK(cuIpcOpenEventHandle(&peer, h));
    CHECK_OK(cuEventRecord(e, s));
    CHECK_OK(cuEventQuery(peer));
    CHECK_OK(cuEventQuery(e));
    close_gate(s);
    CHECK_OK(cuEventRecord(e, s));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuEventQuery(peer));
    CHECK_OK(cuStreamWaitEvent(other, peer, 0));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(other));
    open_gate();
    CHECK_OK(cuEventSynchronize(peer));
    CHECK_OK(cuStreamSynchronize(other));
    CHECK_OK(cuEventRecord(peer, other)); /* idle: published at once */
    CHECK_OK(cuEventQuery(e));
    CHECK_OK(cuEventDestroy(peer));
    CHECK_OK(cuEventDestroy(e));
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuStreamDestroy(other));
}

static void
nothing(void *arg)
{
    (void)arg;
}

/* An event recorded on a stream that is gone is complete, even once every
 * stream is gone and a new one takes the first slot of the stream table:
 * the record names its stream by a uid that no later stream gets. */
static void
test_record_outlives_streams(void)
{
    CUstream s, t;
    CUevent e;
    int i;

    CHECK_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (i = 0; i < 3; i++)
        CHECK_OK(cuLaunchHostFunc(s, nothing, NULL));
    CHECK_OK(cuEventRecord(e, s));
    CHECK_OK(cuStreamSynchronize(s));
    CHECK_OK(cuStreamDestroy(s));
    CHECK_OK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CHECK_OK(cuEventQuery(e));
    CHECK_OK(cuStreamDestroy(t));
    CHECK_OK(cuEventDestroy(e));
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
    {"idle_inline", test_idle_inline, 0},
    {"order_later_work", test_order_later_work, 0},
    {"elapsed", test_elapsed, 0},
    {"capture", test_capture, 0},
    {"legacy_rules", test_legacy_rules, 0},
    {"legacy_rules_amid_idle_streams", test_legacy_rules_amid_idle_streams, 0},
    {"delay", test_delay, 0},
    {"fault", test_fault, 0},
    {"hazards", test_hazards, 0},
    {"ipc", test_ipc, 0},
    {"record_outlives_streams", test_record_outlives_streams, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, setup, teardown)
