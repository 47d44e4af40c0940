/* graph.c: stream capture into graphs, and graphs launched on streams.
 * A capture turns the ops its streams are given (copies, memsets, host
 * functions, prefetches) and external event records into nodes of a graph,
 * each depending on what its stream depended on; streams fork into a
 * capture by waiting for an event recorded in it, and join back the same
 * way. An executable graph queues the nodes again, in the order they were
 * captured (an order in which every node follows its dependencies), on the
 * stream it is launched on. Streams hand ops here (stream.c, event.c); the
 * ops themselves are built by copy.c, memory.c and stream.c. */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "simsched.h"

/* The first ABIs of these are exported too, as libcuda does; cuda.h maps
 * the plain names to the newest. */
#undef cuStreamGetCaptureInfo
#undef cuStreamUpdateCaptureDependencies
#undef cuGraphGetEdges
#undef cuGraphNodeGetDependencies
#undef cuGraphNodeGetDependentNodes
SIM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo(
    CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
    cuuint64_t *id_out);
SIM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(
    CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
    cuuint64_t *id_out);
SIM_EXPORT CUresult CUDAAPI
cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies,
                                  size_t numDependencies, unsigned int flags);
SIM_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(
    CUstream hStream, CUgraphNode *dependencies, size_t numDependencies,
    unsigned int flags);
SIM_EXPORT CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from,
                                            CUgraphNode *to, size_t *numEdges);
SIM_EXPORT CUresult CUDAAPI cuGraphNodeGetDependencies(
    CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies);
SIM_EXPORT CUresult CUDAAPI cuGraphNodeGetDependentNodes(
    CUgraphNode hNode, CUgraphNode *dependentNodes, size_t *numDependentNodes);

#define SIM_MAGIC_GRAPH 0x47524631u
#define SIM_MAGIC_GRAPH_EXEC 0x47455831u
#define SIM_MAGIC_GRAPH_NODE 0x474e4431u
#define SIM_MAGIC_USER_OBJECT 0x55534f31u

enum { NODE_OP, NODE_EVENT };

/* A set of nodes, in the order they were added, without repeats. */
typedef struct nodeset {
    CUgraphNode *v;
    size_t n, cap;
} nodeset;

struct CUgraphNode_st {
    uint32_t magic;
    int kind;
    sim_op *op;     /* NODE_OP: the captured op, never queued itself */
    CUevent ev;     /* NODE_EVENT: recorded on the launch stream */
    struct body *b; /* the graph's nodes it belongs to */
    nodeset deps;   /* the nodes it runs after */
    nodeset outs;   /* the nodes that run after it */
    unsigned mark;  /* scratch for walks (lock held) */
};

/* A user object: the destructor runs once the last reference goes. */
struct CUuserObject_st {
    uint32_t magic;
    unsigned refs;
    void *ptr;
    CUhostFn destroy;
};

/* References to a user object that a graph holds. */
typedef struct uref {
    CUuserObject obj;
    unsigned count;
} uref;

/* The nodes and user object references, shared by a graph, its
 * executable graphs and their launches in flight, so that what a launch
 * uses outlives the graph. Lock held for refs. Nodes are only ever added,
 * each after its dependencies, so `nodes` is always a valid order to run
 * them in. */
typedef struct body {
    int refs;
    nodeset nodes;
    uref *urefs;
    size_t nurefs;
} body;

/* One stream of a capture and what its next node will depend on. */
typedef struct cap_stream {
    CUstream s;
    nodeset deps;
} cap_stream;

/* An event recorded in the capture and the nodes it stands for. */
typedef struct cap_event {
    CUevent ev;
    nodeset deps;
} cap_event;

struct sim_capture {
    uint64_t id;
    CUstreamCaptureMode mode;
    pthread_t thread; /* the thread that began it */
    int invalidated;
    CUgraph g;           /* captured into; handed over at the end */
    cap_stream *streams; /* [0]: the origin stream */
    size_t nstreams;
    cap_event *events;
    size_t nevents;
    CUgraphEdgeData *zeros; /* edge data for cuStreamGetCaptureInfo_v3 */
    size_t nzeros;
    sim_capture *next; /* the live captures */
};

struct CUgraph_st {
    uint32_t magic;
    body *b;
    sim_capture *capture; /* the capture it is being built by, if any */
};

struct CUgraphExec_st {
    uint32_t magic;
    body *b;
    CUgraphNode *nodes; /* the graph's nodes when it was instantiated */
    size_t n;
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
static sim_capture *captures;
static unsigned next_mark;

static int
set_has(const nodeset *set, CUgraphNode nd)
{
    size_t i;

    for (i = 0; i < set->n; i++) {
        if (set->v[i] == nd)
            return 1;
    }
    return 0;
}

static int
set_add(nodeset *set, CUgraphNode nd)
{
    if (set_has(set, nd))
        return 0;
    if (set->n == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 4;
        CUgraphNode *p = realloc(set->v, cap * sizeof *p);

        if (p == NULL)
            return -1;
        set->v = p;
        set->cap = cap;
    }
    set->v[set->n++] = nd;
    return 0;
}

static int
set_copy(nodeset *dst, const nodeset *src)
{
    size_t i;

    dst->n = 0;
    for (i = 0; i < src->n; i++) {
        if (set_add(dst, src->v[i]) < 0)
            return -1;
    }
    return 0;
}

static void
set_free(nodeset *set)
{
    free(set->v);
    set->v = NULL;
    set->n = set->cap = 0;
}

static body *
body_new(void)
{
    body *b = calloc(1, sizeof *b);

    if (b != NULL)
        b->refs = 1;
    return b;
}

static void *
uobj_destroy_run(void *arg)
{
    CUuserObject o = arg;

    o->destroy(o->ptr);
    free(o);
    return NULL;
}

/* Lock held. The destructor runs on a thread of its own, as the driver's
 * does: it may not call CUDA, but may wait for a lock (the GIL) that a
 * thread holding ours waits on. */
static void
uobj_release(CUuserObject o, unsigned count)
{
    pthread_attr_t attr;
    pthread_t t;
    int rc;

    o->refs -= count;
    if (o->refs > 0)
        return;
    sim__handle_remove(o);
    o->magic = 0;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &attr, uobj_destroy_run, o);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        uobj_destroy_run(o);
}

/* Lock held. */
static void
body_unref(body *b)
{
    size_t i;

    if (--b->refs > 0)
        return;
    for (i = 0; i < b->nurefs; i++)
        uobj_release(b->urefs[i].obj, b->urefs[i].count);
    free(b->urefs);
    for (i = 0; i < b->nodes.n; i++) {
        CUgraphNode nd = b->nodes.v[i];

        if (nd->kind == NODE_OP)
            sim__op_free(nd->op);
        else
            sim__event_unref(nd->ev);
        set_free(&nd->deps);
        set_free(&nd->outs);
        free(nd);
    }
    set_free(&b->nodes);
    free(b);
}

/* Lock held. A new graph of no nodes, its handle live. */
static CUgraph
graph_new(void)
{
    CUgraph g = calloc(1, sizeof *g);

    if (g == NULL)
        return NULL;
    g->magic = SIM_MAGIC_GRAPH;
    if ((g->b = body_new()) == NULL || sim__handle_add(g) < 0) {
        free(g->b);
        free(g);
        return NULL;
    }
    return g;
}

/* Lock held. The graph and its node handles go; an executable graph
 * instantiated from it keeps the nodes. */
static void
graph_free(CUgraph g)
{
    size_t i;

    for (i = 0; i < g->b->nodes.n; i++)
        sim__handle_remove(g->b->nodes.v[i]);
    sim__handle_remove(g);
    g->magic = 0;
    body_unref(g->b);
    free(g);
}

/* Lock held. A node of b after `deps`, its handle live; takes op or ev
 * (an event reference) only on success. */
static CUresult
node_add(body *b, const nodeset *deps, int kind, sim_op *op, CUevent ev,
         CUgraphNode *out)
{
    CUgraphNode nd = calloc(1, sizeof *nd);
    size_t i;

    if (nd == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    nd->magic = SIM_MAGIC_GRAPH_NODE;
    nd->kind = kind;
    nd->b = b;
    if (set_copy(&nd->deps, deps) < 0 || set_add(&b->nodes, nd) < 0)
        goto fail;
    for (i = 0; i < deps->n; i++) {
        if (set_add(&deps->v[i]->outs, nd) < 0)
            break;
    }
    if (i < deps->n || sim__handle_add(nd) < 0) {
        while (i-- > 0)
            deps->v[i]->outs.n--;
        b->nodes.n--;
        goto fail;
    }
    nd->op = op;
    nd->ev = ev;
    *out = nd;
    return CUDA_SUCCESS;
fail:
    set_free(&nd->deps);
    free(nd);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* ------------------------------------------------------------------------
 * What stream.c and event.c ask of a capture (lock held). */

static cap_stream *
cap_find_stream(sim_capture *c, CUstream s)
{
    size_t i;

    for (i = 0; i < c->nstreams; i++) {
        if (c->streams[i].s == s)
            return &c->streams[i];
    }
    return NULL;
}

static cap_stream *
cap_add_stream(sim_capture *c, CUstream s)
{
    cap_stream *p = realloc(c->streams, (c->nstreams + 1) * sizeof *p);

    if (p == NULL)
        return NULL;
    c->streams = p;
    p = &c->streams[c->nstreams++];
    memset(p, 0, sizeof *p);
    p->s = s;
    return p;
}

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

/* Every stream leaves the capture, which is freed; its graph too unless
 * handed over. */
static void
capture_end(sim_capture *c)
{
    sim_capture **pp;
    size_t i;

    for (pp = &captures; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    for (i = 0; i < c->nstreams; i++) {
        sim__stream_set_capture(c->streams[i].s, NULL);
        set_free(&c->streams[i].deps);
    }
    for (i = 0; i < c->nevents; i++)
        set_free(&c->events[i].deps);
    if (c->g != NULL)
        graph_free(c->g);
    free(c->streams);
    free(c->events);
    free(c->zeros);
    free(c);
}

void
sim__capture_drop(sim_capture *c, CUstream s)
{
    cap_stream *cs = cap_find_stream(c, s);

    /* Without its origin stream the capture cannot end. */
    if (cs == NULL || cs == &c->streams[0]) {
        capture_end(c);
        return;
    }
    set_free(&cs->deps);
    *cs = c->streams[--c->nstreams];
}

/* A node for op or ev on s; s now depends on it alone. */
static CUresult
capture_node(sim_capture *c, CUstream s, int kind, sim_op *op, CUevent ev)
{
    cap_stream *cs = cap_find_stream(c, s);
    CUgraphNode nd;
    CUresult r;

    if (c->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (cs == NULL)
        return CUDA_ERROR_ILLEGAL_STATE;
    r = node_add(c->g->b, &cs->deps, kind, op, ev, &nd);
    if (r != CUDA_SUCCESS)
        return r;
    /* Cannot fail: the set has room for at least one. */
    cs->deps.n = 0;
    set_add(&cs->deps, nd);
    return CUDA_SUCCESS;
}

CUresult
sim__capture_add(sim_capture *c, CUstream s, sim_op *op)
{
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
    return capture_node(c, s, NODE_OP, op, NULL);
}

CUresult
sim__capture_record(sim_capture *c, CUstream s, CUevent ev, int external)
{
    cap_stream *cs = cap_find_stream(c, s);
    cap_event *ce = NULL;
    CUresult r;
    size_t i;

    if (c->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (cs == NULL)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (external) {
        r = capture_node(c, s, NODE_EVENT, NULL, ev);
        if (r == CUDA_SUCCESS)
            sim__event_ref(ev);
        return r;
    }
    for (i = 0; i < c->nevents; i++) {
        if (c->events[i].ev == ev)
            ce = &c->events[i];
    }
    if (ce == NULL) {
        cap_event *p = realloc(c->events, (c->nevents + 1) * sizeof *p);

        if (p == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        c->events = p;
        ce = &c->events[c->nevents++];
        memset(ce, 0, sizeof *ce);
        ce->ev = ev;
    }
    if (set_copy(&ce->deps, &cs->deps) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

CUresult
sim__capture_join(CUstream s, int legacy, CUevent ev, uint64_t id)
{
    sim_capture *c = sim__stream_capture(s), *src;
    cap_stream *cs;
    const cap_event *ce = NULL;
    size_t i;

    for (src = captures; src != NULL && src->id != id; src = src->next)
        ;
    if (src != NULL) {
        for (i = 0; i < src->nevents; i++) {
            if (src->events[i].ev == ev)
                ce = &src->events[i];
        }
    }
    if (src == NULL || ce == NULL) {
        /* Its capture has ended: the event stands for no work to run. */
        if (c == NULL)
            return CUDA_ERROR_CAPTURED_EVENT;
        c->invalidated = 1;
        return CUDA_ERROR_STREAM_CAPTURE_MERGE;
    }
    if (c != NULL && c != src) {
        c->invalidated = 1;
        src->invalidated = 1;
        return CUDA_ERROR_STREAM_CAPTURE_MERGE;
    }
    if (src->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (c == NULL) {
        /* The legacy stream cannot be captured, so cannot fork. */
        if (legacy) {
            src->invalidated = 1;
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
        if ((cs = cap_add_stream(src, s)) == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        /* ce moved with nothing: events and streams are apart. */
        if (set_copy(&cs->deps, &ce->deps) < 0) {
            src->nstreams--;
            set_free(&cs->deps);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        sim__stream_set_capture(s, src);
        return CUDA_SUCCESS;
    }
    cs = cap_find_stream(c, s);
    for (i = 0; i < ce->deps.n; i++) {
        if (set_add(&cs->deps, ce->deps.v[i]) < 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
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
    if (sim_names_legacy(h, ptds))
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
    if (c == NULL || (c->g = graph_new()) == NULL ||
        cap_add_stream(c, s) == NULL) {
        if (c != NULL && c->g != NULL)
            graph_free(c->g);
        free(c);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    c->id = ++next_capture_id;
    c->mode = mode;
    c->thread = pthread_self();
    c->g->capture = c;
    c->next = captures;
    captures = c;
    sim__stream_set_capture(s, c);
done:
    sim_unlock();
    return r;
}

/* Lock held. Whether every node s's capture left on the forked streams
 * is one the origin stream depends on (directly or through others). */
static int
capture_joined(sim_capture *c)
{
    nodeset todo = {NULL, 0, 0};
    unsigned mark = ++next_mark;
    size_t i, j;
    int ok = 1;

    if (set_copy(&todo, &c->streams[0].deps) < 0)
        return -1;
    for (i = 0; i < todo.n; i++)
        todo.v[i]->mark = mark;
    /* todo grows as the walk goes: every ancestor is marked once. */
    for (i = 0; i < todo.n; i++) {
        CUgraphNode nd = todo.v[i];

        for (j = 0; j < nd->deps.n; j++) {
            if (nd->deps.v[j]->mark == mark)
                continue;
            nd->deps.v[j]->mark = mark;
            if (set_add(&todo, nd->deps.v[j]) < 0) {
                set_free(&todo);
                return -1;
            }
        }
    }
    for (i = 1; i < c->nstreams && ok; i++) {
        for (j = 0; j < c->streams[i].deps.n && ok; j++)
            ok = c->streams[i].deps.v[j]->mark == mark;
    }
    set_free(&todo);
    return ok;
}

static CUresult
end_capture(CUstream h, int ptds, CUgraph *phGraph)
{
    CUcontext ctx;
    CUstream s;
    sim_capture *c;
    CUgraph g = NULL;
    CUresult r;
    int joined;

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
    /* Only the stream that began it ends it; a forked stream asking
     * invalidates the capture. */
    if (c->streams[0].s != s) {
        c->invalidated = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
        goto done;
    }
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        !pthread_equal(c->thread, pthread_self())) {
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
        goto done;
    }
    joined = c->invalidated ? 1 : capture_joined(c);
    if (c->invalidated)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if (joined < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (!joined)
        r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    else {
        g = c->g;
        g->capture = NULL;
        c->g = NULL;
    }
    capture_end(c);
done:
    sim_unlock();
    *phGraph = g;
    return r;
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
    if (r == CUDA_SUCCESS && sim_names_legacy(h, ptds) &&
        sim__ctx_blocking_capture(ctx) != NULL)
        /* Asking would make the legacy stream wait on a capture. */
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (r == CUDA_SUCCESS)
        *status = (CUstreamCaptureStatus)sim__capture_status(
            s != NULL ? sim__stream_capture(s) : NULL);
    sim_unlock();
    return r;
}

/* Lock held: the capture s belongs to, or an error for asking. */
static CUresult
capture_of(CUstream h, int ptds, CUcontext ctx, CUstream *ps, sim_capture **pc)
{
    CUresult r = sim__stream_resolve(h, ptds, ctx, SIM_RESOLVE_SAME_CTX, ps);

    if (r != CUDA_SUCCESS)
        return r;
    if (sim_names_legacy(h, ptds) && sim__ctx_blocking_capture(ctx) != NULL)
        /* Asking would make the legacy stream wait on a capture. */
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *pc = *ps != NULL ? sim__stream_capture(*ps) : NULL;
    return CUDA_SUCCESS;
}

static CUresult
get_capture_info(CUstream h, int ptds, CUstreamCaptureStatus *status,
                 cuuint64_t *id, CUgraph *graph, const CUgraphNode **deps,
                 const CUgraphEdgeData **edges, size_t *ndeps)
{
    CUcontext ctx;
    CUstream s;
    sim_capture *c = NULL;
    const cap_stream *cs = NULL;
    CUresult r;

    /* Edge data parallels the dependencies: asking for it alone is not
     * meaningful (cuda.h). */
    if (status == NULL || (edges != NULL && deps == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    r = capture_of(h, ptds, ctx, &s, &c);
    if (r != CUDA_SUCCESS)
        goto done;
    *status = (CUstreamCaptureStatus)sim__capture_status(c);
    if (c != NULL && !c->invalidated)
        cs = cap_find_stream(c, s);
    if (cs != NULL && edges != NULL && c->nzeros < cs->deps.n) {
        CUgraphEdgeData *z = calloc(cs->deps.n, sizeof *z);

        if (z == NULL) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto done;
        }
        free(c->zeros);
        c->zeros = z;
        c->nzeros = cs->deps.n;
    }
    /* The rest is valid only while the capture is active. */
    if (id != NULL && c != NULL)
        *id = c->id;
    if (graph != NULL)
        *graph = cs != NULL ? c->g : NULL;
    if (deps != NULL)
        *deps = cs != NULL && cs->deps.n > 0 ? cs->deps.v : NULL;
    if (edges != NULL)
        *edges = cs != NULL && cs->deps.n > 0 ? c->zeros : NULL;
    if (ndeps != NULL)
        *ndeps = cs != NULL ? cs->deps.n : 0;
done:
    sim_unlock();
    return r;
}

static int
edge_data_plain(const CUgraphEdgeData *e)
{
    static const CUgraphEdgeData zero;

    return memcmp(e, &zero, sizeof zero) == 0;
}

static CUresult
update_deps(CUstream h, int ptds, CUgraphNode *nodes,
            const CUgraphEdgeData *data, size_t n, unsigned flags)
{
    CUcontext ctx;
    CUstream s;
    sim_capture *c = NULL;
    cap_stream *cs;
    nodeset next = {NULL, 0, 0};
    CUresult r;
    size_t i;

    if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES &&
        flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES)
        return CUDA_ERROR_INVALID_VALUE;
    if (n > 0 && nodes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim__current_ctx(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    r = capture_of(h, ptds, ctx, &s, &c);
    if (r != CUDA_SUCCESS)
        goto done;
    if (c == NULL) {
        r = CUDA_ERROR_ILLEGAL_STATE;
        goto done;
    }
    if (c->invalidated) {
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        goto done;
    }
    /* Nodes of this capture's graph, with default edges only (the
     * simulator has no kernels for programmatic ports to connect). */
    for (i = 0; i < n; i++) {
        if (!sim__handle_live(nodes[i], SIM_MAGIC_GRAPH_NODE) ||
            nodes[i]->b != c->g->b ||
            (data != NULL && !edge_data_plain(&data[i]))) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto done;
        }
    }
    cs = cap_find_stream(c, s);
    if (flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES &&
        set_copy(&next, &cs->deps) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    for (i = 0; i < n && r == CUDA_SUCCESS; i++) {
        if (set_add(&next, nodes[i]) < 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        set_free(&cs->deps);
        cs->deps = next;
        next.v = NULL;
    }
    set_free(&next);
done:
    sim_unlock();
    return r;
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
    sim_lock();
    g = graph_new();
    sim_unlock();
    if (g == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = g;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuGraphDestroy(CUgraph hGraph)
{
    CUresult r = CUDA_SUCCESS;

    SIM_ENTER(cuGraphDestroy);
    sim_lock();
    if (!sim__handle_live(hGraph, SIM_MAGIC_GRAPH))
        r = CUDA_ERROR_INVALID_VALUE;
    /* A capture owns its graph until it ends (cuStreamGetCaptureInfo). */
    else if (hGraph->capture != NULL)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else
        graph_free(hGraph);
    sim_unlock();
    return r;
}

static CUresult
instantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    const unsigned long long known =
        CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
        CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
        CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
        CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    CUgraphExec e;
    CUcontext ctx;
    CUresult r;

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
    else if (hGraph->b->nodes.n > 0 &&
             (e->nodes = malloc(hGraph->b->nodes.n * sizeof *e->nodes)) ==
                 NULL) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    else if (sim__handle_add(e) < 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    else {
        /* The nodes as they are now: a capture may add more later. */
        e->magic = SIM_MAGIC_GRAPH_EXEC;
        e->ctx = ctx;
        e->b = hGraph->b;
        e->b->refs++;
        e->n = hGraph->b->nodes.n;
        if (e->n > 0)
            memcpy(e->nodes, e->b->nodes.v, e->n * sizeof *e->nodes);
    }
    sim_unlock();
    if (r != CUDA_SUCCESS) {
        free(e->nodes);
        free(e);
        return r;
    }
    *phGraphExec = e;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                            unsigned long long flags)
{
    SIM_ENTER(cuGraphInstantiate);
    return instantiate(phGraphExec, hGraph, flags);
}

/* Lock not held. What an upload stream must be: nothing is uploaded
 * (the simulator's graphs live in host memory), but the handle is. */
static CUresult
upload_stream(CUstream h, int ptds)
{
    CUcontext ctx;
    CUstream s;
    CUresult r = sim__current_ctx(&ctx);

    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    r = sim__stream_resolve(h, ptds, ctx,
                            SIM_RESOLVE_CREATE | SIM_RESOLVE_SAME_CTX, &s);
    sim_unlock();
    return r;
}

static CUresult
instantiate_with_params(CUgraphExec *phGraphExec, CUgraph hGraph,
                        CUDA_GRAPH_INSTANTIATE_PARAMS *params, int ptds)
{
    CUresult r;

    if (params == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    params->hErrNode_out = NULL;
    r = (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
            ? upload_stream(params->hUploadStream, ptds)
            : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        r = instantiate(phGraphExec, hGraph, params->flags);
    params->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
                                           : CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}

static CUresult
graph_upload(CUgraphExec e, CUstream h, int ptds)
{
    int live;

    sim_lock();
    live = sim__handle_live(e, SIM_MAGIC_GRAPH_EXEC);
    sim_unlock();
    return live ? upload_stream(h, ptds) : CUDA_ERROR_INVALID_VALUE;
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
    free(hGraphExec->nodes);
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
    /* In capture order, one after another: every node runs after its
     * dependencies (and after more than it must). */
    for (i = 0; i < e->n && r == CUDA_SUCCESS; i++) {
        const struct CUgraphNode_st *nd = e->nodes[i];
        /* Each launch follows the previous launch of the same graph. */
        const sim_dep *after = first && e->last.uid != 0 ? &e->last : NULL;
        node_op *w;

        if (nd->kind == NODE_EVENT) {
            r = sim__event_record_on(nd->ev, s, after, after != NULL,
                                     after ? &e->vc : NULL);
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
        r = sim__enqueue(s, &w->op, after, after != NULL,
                         after ? &e->vc : NULL, 0);
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

/* ------------------------------------------------------------------------
 * Nodes and edges. Each list call answers the count when given no array,
 * and otherwise fills up to *count entries, clears the ones it has no
 * node for and says how many it filled (cuda.h). */

typedef struct edge_out {
    CUgraphNode *from, *to;
    CUgraphEdgeData *data;
    size_t cap, n;
} edge_out;

static void
edge_put(edge_out *o, CUgraphNode from, CUgraphNode to)
{
    if (o->n < o->cap) {
        if (o->from != NULL)
            o->from[o->n] = from;
        o->to[o->n] = to;
        if (o->data != NULL)
            memset(&o->data[o->n], 0, sizeof o->data[o->n]);
    }
    o->n++;
}

/* Lock held. Fills the list (or counts) and clears the rest. */
static void
edge_finish(edge_out *o, size_t *count)
{
    size_t i;

    if (o->to == NULL) {
        *count = o->n;
        return;
    }
    for (i = o->n; i < o->cap; i++) {
        if (o->from != NULL)
            o->from[i] = NULL;
        o->to[i] = NULL;
        if (o->data != NULL)
            memset(&o->data[i], 0, sizeof o->data[i]);
    }
    if (o->n < o->cap)
        *count = o->n;
}

static CUresult
graph_nodes(CUgraph g, CUgraphNode *out, size_t *count, int roots)
{
    edge_out o = {NULL, out, NULL, 0, 0};
    CUresult r = CUDA_SUCCESS;
    size_t i;

    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim__handle_live(g, SIM_MAGIC_GRAPH)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    o.cap = out != NULL ? *count : 0;
    for (i = 0; i < g->b->nodes.n; i++) {
        CUgraphNode nd = g->b->nodes.v[i];

        if (!roots || nd->deps.n == 0)
            edge_put(&o, NULL, nd);
    }
    edge_finish(&o, count);
done:
    sim_unlock();
    return r;
}

static CUresult
graph_edges(CUgraph g, CUgraphNode *from, CUgraphNode *to,
            CUgraphEdgeData *data, size_t *count)
{
    edge_out o = {from, to, data, 0, 0};
    CUresult r = CUDA_SUCCESS;
    size_t i, j;

    /* Both lists or neither; edge data only with them. */
    if (count == NULL || (from == NULL) != (to == NULL) ||
        (data != NULL && from == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim__handle_live(g, SIM_MAGIC_GRAPH)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    o.cap = to != NULL ? *count : 0;
    for (i = 0; i < g->b->nodes.n; i++) {
        CUgraphNode nd = g->b->nodes.v[i];

        for (j = 0; j < nd->deps.n; j++)
            edge_put(&o, nd->deps.v[j], nd);
    }
    edge_finish(&o, count);
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    CUresult r = CUDA_SUCCESS;

    SIM_ENTER(cuGraphNodeGetType);
    if (type == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim__handle_live(hNode, SIM_MAGIC_GRAPH_NODE)) {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    else if (hNode->kind == NODE_EVENT) {
        *type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    }
    else {
        const char *name = sim__entry_name(hNode->op->entry);

        if (strncmp(name, "cuMemcpy", 8) == 0)
            *type = CU_GRAPH_NODE_TYPE_MEMCPY;
        else if (strncmp(name, "cuMemset", 8) == 0)
            *type = CU_GRAPH_NODE_TYPE_MEMSET;
        else if (hNode->op->entry == SIM_cuLaunchHostFunc)
            *type = CU_GRAPH_NODE_TYPE_HOST;
        else
            /* A prefetch: orders, moves nothing the graph sees. */
            *type = CU_GRAPH_NODE_TYPE_EMPTY;
    }
    sim_unlock();
    return r;
}

static CUresult
node_edges(CUgraphNode nd, CUgraphNode *out, CUgraphEdgeData *data,
           size_t *count, int outs)
{
    edge_out o = {NULL, out, data, 0, 0};
    CUresult r = CUDA_SUCCESS;
    const nodeset *set;
    size_t i;

    if (count == NULL || (data != NULL && out == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim__handle_live(nd, SIM_MAGIC_GRAPH_NODE)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    o.cap = out != NULL ? *count : 0;
    set = outs ? &nd->outs : &nd->deps;
    for (i = 0; i < set->n; i++)
        edge_put(&o, NULL, set->v[i]);
    edge_finish(&o, count);
done:
    sim_unlock();
    return r;
}

/* ------------------------------------------------------------------------
 * User objects: what a graph keeps alive for as long as it may run. */

SIM_EXPORT CUresult CUDAAPI
cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                   unsigned int initialRefcount, unsigned int flags)
{
    CUuserObject o;
    int added;

    SIM_ENTER(cuUserObjectCreate);
    if (object_out == NULL || destroy == NULL || initialRefcount == 0 ||
        initialRefcount > INT_MAX ||
        flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    o = calloc(1, sizeof *o);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->magic = SIM_MAGIC_USER_OBJECT;
    o->refs = initialRefcount;
    o->ptr = ptr;
    o->destroy = destroy;
    sim_lock();
    added = sim__handle_add(o) == 0;
    sim_unlock();
    if (!added) {
        free(o);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *object_out = o;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    CUresult r = CUDA_SUCCESS;

    SIM_ENTER(cuUserObjectRetain);
    if (count == 0 || count > INT_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim__handle_live(object, SIM_MAGIC_USER_OBJECT) ||
        object->refs > (unsigned)INT_MAX - count)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        object->refs += count;
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    CUresult r = CUDA_SUCCESS;

    SIM_ENTER(cuUserObjectRelease);
    if (count == 0 || count > INT_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    /* Releasing more than exist is undefined on the driver: refused. */
    if (!sim__handle_live(object, SIM_MAGIC_USER_OBJECT) ||
        count > object->refs)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        uobj_release(object, count);
    sim_unlock();
    return r;
}

static uref *
uref_find(body *b, CUuserObject o)
{
    size_t i;

    for (i = 0; i < b->nurefs; i++) {
        if (b->urefs[i].obj == o)
            return &b->urefs[i];
    }
    return NULL;
}

SIM_EXPORT CUresult CUDAAPI
cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count,
                        unsigned int flags)
{
    CUresult r = CUDA_SUCCESS;
    uref *u;

    SIM_ENTER(cuGraphRetainUserObject);
    if (count == 0 || count > INT_MAX ||
        (flags != 0 && flags != CU_GRAPH_USER_OBJECT_MOVE))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim__handle_live(graph, SIM_MAGIC_GRAPH) ||
        !sim__handle_live(object, SIM_MAGIC_USER_OBJECT) ||
        (flags == 0 && object->refs > (unsigned)INT_MAX - count) ||
        (flags != 0 && count > object->refs)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    u = uref_find(graph->b, object);
    if (u == NULL) {
        uref *p = realloc(graph->b->urefs, (graph->b->nurefs + 1) * sizeof *p);

        if (p == NULL) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto done;
        }
        graph->b->urefs = p;
        u = &p[graph->b->nurefs++];
        u->obj = object;
        u->count = 0;
    }
    u->count += count;
    /* MOVE: the caller's references become the graph's. */
    if (flags == 0)
        object->refs += count;
done:
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuGraphReleaseUserObject(CUgraph graph, CUuserObject object,
                         unsigned int count)
{
    CUresult r = CUDA_SUCCESS;
    uref *u;

    SIM_ENTER(cuGraphReleaseUserObject);
    if (count == 0 || count > INT_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (!sim__handle_live(graph, SIM_MAGIC_GRAPH) ||
        !sim__handle_live(object, SIM_MAGIC_USER_OBJECT) ||
        (u = uref_find(graph->b, object)) == NULL || count > u->count) {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    else {
        u->count -= count;
        if (u->count == 0)
            *u = graph->b->urefs[--graph->b->nurefs];
        uobj_release(object, count);
    }
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Entry points: one row per exported ABI alias (see SIM_ALIAS_WRAPPER in
 * sim.h); the wrappers of the W rows, then the cuGetProcAddress rows. */

/* clang-format off */
#define GRAPH_ALIASES(W, R)                                                   \
    W(cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, , begin_capture,  \
      (CUstream hStream, CUstreamCaptureMode mode), (hStream, 0, mode))       \
    W(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture, 10010, _ptsz,       \
      begin_capture, (CUstream hStream, CUstreamCaptureMode mode),            \
      (hStream, 1, mode))                                                     \
    W(cuStreamEndCapture, cuStreamEndCapture, 10000, , end_capture,           \
      (CUstream hStream, CUgraph *phGraph), (hStream, 0, phGraph))            \
    W(cuStreamEndCapture_ptsz, cuStreamEndCapture, 10000, _ptsz, end_capture, \
      (CUstream hStream, CUgraph *phGraph), (hStream, 1, phGraph))            \
    W(cuStreamIsCapturing, cuStreamIsCapturing, 10000, , is_capturing,        \
      (CUstream hStream, CUstreamCaptureStatus *captureStatus),               \
      (hStream, 0, captureStatus))                                            \
    W(cuStreamIsCapturing_ptsz, cuStreamIsCapturing, 10000, _ptsz,            \
      is_capturing, (CUstream hStream, CUstreamCaptureStatus *captureStatus), \
      (hStream, 1, captureStatus))                                            \
    W(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo, 10010, ,                \
      get_capture_info, (CUstream hStream,                                    \
      CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out),          \
      (hStream, 0, captureStatus_out, id_out, NULL, NULL, NULL, NULL))        \
    W(cuStreamGetCaptureInfo_ptsz, cuStreamGetCaptureInfo, 10010, _ptsz,      \
      get_capture_info, (CUstream hStream,                                    \
      CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out),          \
      (hStream, 1, captureStatus_out, id_out, NULL, NULL, NULL, NULL))        \
    W(cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo, 11030, ,             \
      get_capture_info, (CUstream hStream,                                    \
      CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,           \
      CUgraph *graph_out, const CUgraphNode **dependencies_out,               \
      size_t *numDependencies_out), (hStream, 0, captureStatus_out, id_out,   \
      graph_out, dependencies_out, NULL, numDependencies_out))                \
    W(cuStreamGetCaptureInfo_v2_ptsz, cuStreamGetCaptureInfo, 11030, _ptsz,   \
      get_capture_info, (CUstream hStream,                                    \
      CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,           \
      CUgraph *graph_out, const CUgraphNode **dependencies_out,               \
      size_t *numDependencies_out), (hStream, 1, captureStatus_out, id_out,   \
      graph_out, dependencies_out, NULL, numDependencies_out))                \
    W(cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo, 12030, ,             \
      get_capture_info, (CUstream hStream,                                    \
      CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,           \
      CUgraph *graph_out, const CUgraphNode **dependencies_out,               \
      const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out),     \
      (hStream, 0, captureStatus_out, id_out, graph_out, dependencies_out,    \
      edgeData_out, numDependencies_out))                                     \
    W(cuStreamGetCaptureInfo_v3_ptsz, cuStreamGetCaptureInfo, 12030, _ptsz,   \
      get_capture_info, (CUstream hStream,                                    \
      CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,           \
      CUgraph *graph_out, const CUgraphNode **dependencies_out,               \
      const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out),     \
      (hStream, 1, captureStatus_out, id_out, graph_out, dependencies_out,    \
      edgeData_out, numDependencies_out))                                     \
    W(cuStreamUpdateCaptureDependencies, cuStreamUpdateCaptureDependencies,   \
      11030, , update_deps, (CUstream hStream, CUgraphNode *dependencies,     \
      size_t numDependencies, unsigned int flags),                            \
      (hStream, 0, dependencies, NULL, numDependencies, flags))               \
    W(cuStreamUpdateCaptureDependencies_ptsz,                                 \
      cuStreamUpdateCaptureDependencies, 11030, _ptsz, update_deps,           \
      (CUstream hStream, CUgraphNode *dependencies, size_t numDependencies,   \
      unsigned int flags),                                                    \
      (hStream, 1, dependencies, NULL, numDependencies, flags))               \
    W(cuStreamUpdateCaptureDependencies_v2,                                   \
      cuStreamUpdateCaptureDependencies, 12030, , update_deps,                \
      (CUstream hStream, CUgraphNode *dependencies,                           \
      const CUgraphEdgeData *dependencyData, size_t numDependencies,          \
      unsigned int flags),                                                    \
      (hStream, 0, dependencies, dependencyData, numDependencies, flags))     \
    W(cuStreamUpdateCaptureDependencies_v2_ptsz,                              \
      cuStreamUpdateCaptureDependencies, 12030, _ptsz, update_deps,           \
      (CUstream hStream, CUgraphNode *dependencies,                           \
      const CUgraphEdgeData *dependencyData, size_t numDependencies,          \
      unsigned int flags),                                                    \
      (hStream, 1, dependencies, dependencyData, numDependencies, flags))     \
    R(cuGraphCreate, cuGraphCreate, 10000, )                                  \
    R(cuGraphDestroy, cuGraphDestroy, 10000, )                                \
    R(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, )      \
    W(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, ,    \
      instantiate_with_params, (CUgraphExec *phGraphExec, CUgraph hGraph,     \
      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams),                      \
      (phGraphExec, hGraph, instantiateParams, 0))                            \
    W(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, 12000, \
      _ptsz, instantiate_with_params, (CUgraphExec *phGraphExec,              \
      CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams),      \
      (phGraphExec, hGraph, instantiateParams, 1))                            \
    W(cuGraphUpload, cuGraphUpload, 11010, , graph_upload,                    \
      (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream, 0))   \
    W(cuGraphUpload_ptsz, cuGraphUpload, 11010, _ptsz, graph_upload,          \
      (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream, 1))   \
    R(cuGraphExecDestroy, cuGraphExecDestroy, 10000, )                        \
    W(cuGraphLaunch, cuGraphLaunch, 10000, , graph_launch,                    \
      (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream, 0))   \
    W(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, _ptsz, graph_launch,          \
      (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream, 1))   \
    W(cuGraphGetNodes, cuGraphGetNodes, 10000, , graph_nodes,                 \
      (CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes),                 \
      (hGraph, nodes, numNodes, 0))                                           \
    W(cuGraphGetRootNodes, cuGraphGetRootNodes, 10000, , graph_nodes,         \
      (CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes),         \
      (hGraph, rootNodes, numRootNodes, 1))                                   \
    W(cuGraphGetEdges, cuGraphGetEdges, 10000, , graph_edges,                 \
      (CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges), \
      (hGraph, from, to, NULL, numEdges))                                     \
    W(cuGraphGetEdges_v2, cuGraphGetEdges, 12030, , graph_edges,              \
      (CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,                    \
      CUgraphEdgeData *edgeData, size_t *numEdges),                           \
      (hGraph, from, to, edgeData, numEdges))                                 \
    R(cuGraphNodeGetType, cuGraphNodeGetType, 10000, )                        \
    W(cuGraphNodeGetDependencies, cuGraphNodeGetDependencies, 10000, ,        \
      node_edges, (CUgraphNode hNode, CUgraphNode *dependencies,              \
      size_t *numDependencies),                                               \
      (hNode, dependencies, NULL, numDependencies, 0))                        \
    W(cuGraphNodeGetDependencies_v2, cuGraphNodeGetDependencies, 12030, ,     \
      node_edges, (CUgraphNode hNode, CUgraphNode *dependencies,              \
      CUgraphEdgeData *edgeData, size_t *numDependencies),                    \
      (hNode, dependencies, edgeData, numDependencies, 0))                    \
    W(cuGraphNodeGetDependentNodes, cuGraphNodeGetDependentNodes, 10000, ,    \
      node_edges, (CUgraphNode hNode, CUgraphNode *dependentNodes,            \
      size_t *numDependentNodes),                                             \
      (hNode, dependentNodes, NULL, numDependentNodes, 1))                    \
    W(cuGraphNodeGetDependentNodes_v2, cuGraphNodeGetDependentNodes, 12030, , \
      node_edges, (CUgraphNode hNode, CUgraphNode *dependentNodes,            \
      CUgraphEdgeData *edgeData, size_t *numDependentNodes),                  \
      (hNode, dependentNodes, edgeData, numDependentNodes, 1))                \
    R(cuUserObjectCreate, cuUserObjectCreate, 11030, )                        \
    R(cuUserObjectRetain, cuUserObjectRetain, 11030, )                        \
    R(cuUserObjectRelease, cuUserObjectRelease, 11030, )                      \
    R(cuGraphRetainUserObject, cuGraphRetainUserObject, 11030, )              \
    R(cuGraphReleaseUserObject, cuGraphReleaseUserObject, 11030, )

GRAPH_ALIASES(SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP)

const sim_proc sim_procs_graph[] = {
    GRAPH_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
    /* From 12.0 cuGraphInstantiate is cuGraphInstantiateWithFlags. */
    {"cuGraphInstantiate", 12000, 0,
     (void *)(1 ? cuGraphInstantiateWithFlags
                : (PFN_cuGraphInstantiateWithFlags_v11040)0)},
};
/* clang-format on */
const size_t sim_nprocs_graph = sizeof sim_procs_graph /
                                sizeof sim_procs_graph[0];
