/* graph.c: stream capture into graphs, and graphs launched on streams.
 * A capture records the ops a stream is given (copies, memsets, host
 * functions, prefetches) and external event records, in order, instead of
 * queueing them; an executable graph queues them again, in that order, on
 * the stream it is launched on. One stream per capture: fork and join
 * through events are not modelled. Streams hand ops here (stream.c);
 * the ops themselves are built by copy.c, memory.c and stream.c. */
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "simsched.h"

#define SIM_MAGIC_GRAPH 0x47524631u
#define SIM_MAGIC_GRAPH_EXEC 0x47455831u

enum { NODE_OP, NODE_EVENT };

typedef struct node {
    int kind;
    sim_op *op; /* NODE_OP: the captured op, never queued itself */
    CUevent ev; /* NODE_EVENT: recorded on the launch stream */
} node;

/* The nodes, shared by a graph, its executable graphs and their launches
 * in flight. Lock held for refs. */
typedef struct body {
    int refs;
    node *nodes;
    size_t n, cap;
} body;

struct sim_capture {
    uint64_t id;
    CUstreamCaptureMode mode;
    pthread_t thread; /* the thread that began it */
    int invalidated;
    body *b;
};

struct CUgraph_st {
    uint32_t magic;
    body *b;
};

struct CUgraphExec_st {
    uint32_t magic;
    body *b;
    CUcontext ctx;
    sim_dep last;  /* the last op of the latest launch */
    sim_vclock vc; /* what that op follows, for the hazard checker */
};

/* One node of a launch: runs the captured op as if it were queued. */
typedef struct node_op {
    sim_op op;
    sim_op *inner;
    body *b;
} node_op;

static uint64_t next_capture_id;

static body *
body_new(void)
{
    body *b = calloc(1, sizeof *b);

    if (b != NULL)
        b->refs = 1;
    return b;
}

/* Lock held. */
static void
body_unref(body *b)
{
    size_t i;

    if (--b->refs > 0)
        return;
    for (i = 0; i < b->n; i++) {
        if (b->nodes[i].kind == NODE_OP)
            sim__op_free(b->nodes[i].op);
        else
            sim__event_unref(b->nodes[i].ev);
    }
    free(b->nodes);
    free(b);
}

static int
body_add(body *b, node nd)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        node *p = realloc(b->nodes, cap * sizeof *p);

        if (p == NULL)
            return -1;
        b->nodes = p;
        b->cap = cap;
    }
    b->nodes[b->n++] = nd;
    return 0;
}

/* ------------------------------------------------------------------------
 * What stream.c and event.c ask of a capture (lock held). */

void
sim__capture_invalidate(sim_capture *c)
{
    c->invalidated = 1;
}

int
sim__capture_status(const sim_capture *c)
{
    if (c == NULL)
        return CU_STREAM_CAPTURE_STATUS_NONE;
    return c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                          : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

uint64_t
sim__capture_id(const sim_capture *c)
{
    return c->id;
}

void
sim__capture_drop(sim_capture *c)
{
    body_unref(c->b);
    free(c);
}

CUresult
sim__capture_add(sim_capture *c, sim_op *op)
{
    node nd = {NODE_OP, op, NULL};

    if (c->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    /* cuStreamAddCallback cannot be captured (cuLaunchHostFunc can), nor
     * can a copy that stages pageable memory at the call. Memory nodes
     * (stream-ordered allocations in a graph) are not modelled. */
    switch (op->entry) {
    case SIM_cuStreamAddCallback:
    case SIM_cuMemAllocAsync:
    case SIM_cuMemAllocFromPoolAsync:
    case SIM_cuMemFreeAsync:
    case SIM_cuStreamAttachMemAsync:
        c->invalidated = 1;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    default:
        break;
    }
    if (op->pageable) {
        c->invalidated = 1;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (body_add(c->b, nd) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

CUresult
sim__capture_event_node(sim_capture *c, CUevent ev)
{
    node nd = {NODE_EVENT, NULL, ev};

    if (c->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (body_add(c->b, nd) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim__event_ref(ev);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Capture entry points. */

static CUresult
begin_capture(CUstream h, int ptds, CUstreamCaptureMode mode)
{
    CUcontext ctx;
    CUstream s;
    sim_capture *c;
    CUresult r;

    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL &&
        mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    /* The legacy stream cannot be captured. */
    if (h == CU_STREAM_LEGACY || (h == NULL && !ptds))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    sim_lock();
    r = sim__stream_resolve(h, ptds, ctx,
                            SIM_RESOLVE_CREATE | SIM_RESOLVE_SAME_CTX, &s);
    if (r != CUDA_SUCCESS)
        goto done;
    if (sim__stream_capture(s) != NULL) {
        r = CUDA_ERROR_ILLEGAL_STATE;
        goto done;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL || (c->b = body_new()) == NULL) {
        free(c);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    c->id = ++next_capture_id;
    c->mode = mode;
    c->thread = pthread_self();
    sim__stream_set_capture(s, c);
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    SIM_ENTER(cuStreamBeginCapture);
    return begin_capture(hStream, 0, mode);
}

SIM_EXPORT CUresult CUDAAPI
cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    SIM_ENTER(cuStreamBeginCapture);
    return begin_capture(hStream, 1, mode);
}

static CUresult
end_capture(CUstream h, int ptds, CUgraph *phGraph)
{
    CUcontext ctx;
    CUstream s;
    sim_capture *c;
    CUgraph g = NULL;
    CUresult r;

    if (phGraph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    r = sim__stream_resolve(h, ptds, ctx, SIM_RESOLVE_SAME_CTX, &s);
    if (r != CUDA_SUCCESS)
        goto done;
    c = s != NULL ? sim__stream_capture(s) : NULL;
    if (c == NULL) {
        r = CUDA_ERROR_ILLEGAL_STATE;
        goto done;
    }
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        !pthread_equal(c->thread, pthread_self())) {
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
        goto done;
    }
    sim__stream_set_capture(s, NULL);
    if (c->invalidated) {
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    else if ((g = calloc(1, sizeof *g)) == NULL ||
             sim__handle_add(g) < 0) {
        free(g);
        g = NULL;
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    else {
        g->magic = SIM_MAGIC_GRAPH;
        g->b = c->b;
        c->b = NULL;
    }
    if (c->b != NULL)
        body_unref(c->b);
    free(c);
done:
    sim_unlock();
    *phGraph = g;
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    SIM_ENTER(cuStreamEndCapture);
    return end_capture(hStream, 0, phGraph);
}

SIM_EXPORT CUresult CUDAAPI
cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    SIM_ENTER(cuStreamEndCapture);
    return end_capture(hStream, 1, phGraph);
}

static CUresult
is_capturing(CUstream h, int ptds, CUstreamCaptureStatus *status)
{
    CUcontext ctx;
    CUstream s;
    CUresult r;

    if (status == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    r = sim__stream_resolve(h, ptds, ctx, SIM_RESOLVE_SAME_CTX, &s);
    if (r == CUDA_SUCCESS && (h == CU_STREAM_LEGACY || (h == NULL && !ptds)) &&
        sim__ctx_blocking_capture(ctx) != NULL)
        /* Asking would make the legacy stream wait on a capture. */
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (r == CUDA_SUCCESS)
        *status = (CUstreamCaptureStatus)sim__capture_status(
            s != NULL ? sim__stream_capture(s) : NULL);
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    SIM_ENTER(cuStreamIsCapturing);
    return is_capturing(hStream, 0, captureStatus);
}

SIM_EXPORT CUresult CUDAAPI
cuStreamIsCapturing_ptsz(CUstream hStream,
                         CUstreamCaptureStatus *captureStatus)
{
    SIM_ENTER(cuStreamIsCapturing);
    return is_capturing(hStream, 1, captureStatus);
}

/* ------------------------------------------------------------------------
 * Graphs and executable graphs. */

SIM_EXPORT CUresult CUDAAPI
cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    CUgraph g;

    SIM_ENTER(cuGraphCreate);
    if (phGraph == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    g = calloc(1, sizeof *g);
    if (g == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = SIM_MAGIC_GRAPH;
    sim_lock();
    if ((g->b = body_new()) == NULL || sim__handle_add(g) < 0) {
        free(g->b);
        free(g);
        sim_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_unlock();
    *phGraph = g;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuGraphDestroy(CUgraph hGraph)
{
    SIM_ENTER(cuGraphDestroy);
    sim_lock();
    if (!sim__handle_live(hGraph, SIM_MAGIC_GRAPH)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    sim__handle_remove(hGraph);
    hGraph->magic = 0;
    body_unref(hGraph->b);
    free(hGraph);
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                            unsigned long long flags)
{
    const unsigned long long known =
        CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
        CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
        CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
        CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    CUgraphExec e;
    CUcontext ctx;
    CUresult r;

    SIM_ENTER(cuGraphInstantiate);
    if (phGraphExec == NULL || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    /* Device launch needs kernels the simulator cannot run. */
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH)
        return CUDA_ERROR_NOT_SUPPORTED;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    e = calloc(1, sizeof *e);
    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    if (!sim__handle_live(hGraph, SIM_MAGIC_GRAPH)) {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    else if (sim__handle_add(e) < 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    else {
        e->magic = SIM_MAGIC_GRAPH_EXEC;
        e->ctx = ctx;
        e->b = hGraph->b;
        e->b->refs++;
    }
    sim_unlock();
    if (r != CUDA_SUCCESS) {
        free(e);
        return r;
    }
    *phGraphExec = e;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    SIM_ENTER(cuGraphExecDestroy);
    sim_lock();
    if (!sim__handle_live(hGraphExec, SIM_MAGIC_GRAPH_EXEC)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* Launches in flight keep the nodes until they have run. */
    sim__handle_remove(hGraphExec);
    hGraphExec->magic = 0;
    body_unref(hGraphExec->b);
    sim__vc_free(&hGraphExec->vc);
    free(hGraphExec);
    sim_unlock();
    return CUDA_SUCCESS;
}

static void
node_run(sim_op *op)
{
    node_op *w = (node_op *)op;

    w->inner->stream = op->stream;
    w->inner->seq = op->seq;
    w->inner->run(w->inner);
}

static void
node_free(sim_op *op)
{
    node_op *w = (node_op *)op;

    sim_lock();
    body_unref(w->b);
    sim_unlock();
    free(w);
}

static CUresult
graph_launch(CUgraphExec e, CUstream h, int ptds)
{
    CUcontext ctx;
    CUstream s;
    CUresult r;
    size_t i;
    int first = 1;

    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    if (!sim__handle_live(e, SIM_MAGIC_GRAPH_EXEC)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    r = sim__stream_resolve(h, ptds, ctx,
                            SIM_RESOLVE_CREATE | SIM_RESOLVE_SAME_CTX, &s);
    if (r != CUDA_SUCCESS)
        goto done;
    if (e->ctx != ctx) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto done;
    }
    /* Child graphs of a capture are not modelled. */
    if (sim__stream_capture(s) != NULL) {
        sim__capture_invalidate(sim__stream_capture(s));
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        goto done;
    }
    for (i = 0; i < e->b->n && r == CUDA_SUCCESS; i++) {
        const node *nd = &e->b->nodes[i];
        /* Each launch follows the previous launch of the same graph. */
        const sim_dep *after = first && e->last.uid != 0 ? &e->last : NULL;
        node_op *w;

        if (nd->kind == NODE_EVENT) {
            r = sim__event_record_on(nd->ev, s, after, after ? &e->vc : NULL);
            first = 0;
            continue;
        }
        w = calloc(1, sizeof *w);
        if (w == NULL) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        w->op.run = node_run;
        w->op.free = node_free;
        w->op.entry = nd->op->entry;
        memcpy(w->op.ranges, nd->op->ranges, sizeof w->op.ranges);
        w->op.nranges = nd->op->nranges;
        w->inner = nd->op;
        w->b = e->b;
        r = sim__enqueue(s, &w->op, after, after ? &e->vc : NULL, 0);
        if (r != CUDA_SUCCESS) {
            free(w->op.sched);
            free(w);
            break;
        }
        e->b->refs++;
        first = 0;
    }
    if (!first) {
        e->last.uid = sim__stream_uid(s);
        e->last.seq = sim__stream_submitted(s);
        sim__vc_copy(&e->vc, sim__stream_vc(s));
    }
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_ENTER(cuGraphLaunch);
    return graph_launch(hGraphExec, hStream, 0);
}

SIM_EXPORT CUresult CUDAAPI
cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_ENTER(cuGraphLaunch);
    return graph_launch(hGraphExec, hStream, 1);
}

const sim_proc sim_procs_graph[] = {
    SIM_PROC(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2),
    SIM_PROC_PTDS(cuStreamBeginCapture, 10010, ptsz,
                  cuStreamBeginCapture_v2_ptsz),
    SIM_PROC(cuStreamEndCapture, 10000, cuStreamEndCapture),
    SIM_PROC_PTDS(cuStreamEndCapture, 10000, ptsz, cuStreamEndCapture_ptsz),
    SIM_PROC(cuStreamIsCapturing, 10000, cuStreamIsCapturing),
    SIM_PROC_PTDS(cuStreamIsCapturing, 10000, ptsz,
                  cuStreamIsCapturing_ptsz),
    SIM_PROC(cuGraphCreate, 10000, cuGraphCreate),
    SIM_PROC(cuGraphDestroy, 10000, cuGraphDestroy),
    SIM_PROC(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
    /* From 12.0 cuGraphInstantiate is cuGraphInstantiateWithFlags. */
    {"cuGraphInstantiate", 12000, 0,
     (void *)(1 ? cuGraphInstantiateWithFlags
                : (PFN_cuGraphInstantiateWithFlags_v11040)0)},
    SIM_PROC(cuGraphExecDestroy, 10000, cuGraphExecDestroy),
    SIM_PROC(cuGraphLaunch, 10000, cuGraphLaunch),
    SIM_PROC_PTDS(cuGraphLaunch, 10000, ptsz, cuGraphLaunch_ptsz),
};
const size_t sim_nprocs_graph =
    sizeof sim_procs_graph / sizeof sim_procs_graph[0];
