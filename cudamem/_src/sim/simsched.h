/* simsched.h: private to stream.c, event.c and hazard.c (the stream
 * scheduler). Declares what they share; the stream and event structs stay
 * in their own files. Other files use sim.h only. */
#ifndef CUSIM_SIMSCHED_H
#define CUSIM_SIMSCHED_H

#include "sim.h"

/* The priority range of an H100: greatest -5, least (default) 0. */
#define SIM_PRIORITY_GREATEST (-5)
#define SIM_PRIORITY_LEAST 0

/* Op `seq` of the stream with unique id `uid` (uids are never reused, so a
 * freed stream's uid reads as finished). uid 0: nothing. */
typedef struct sim_dep {
    uint64_t uid;
    uint64_t seq;
} sim_dep;

/* A sparse vector clock: per stream uid, the highest seq known to
 * precede. Entries for finished work are pruned. */
typedef struct sim_vclock {
    sim_dep *e;
    size_t n, cap;
} sim_vclock;

/* Everything below: caller holds the lock. */

/* stream.c */
int sim__dep_done(uint64_t uid, uint64_t seq);
CUresult sim__current_ctx(CUcontext *out); /* lock not held */
int sim__is_special_stream(CUstream h);
enum { SIM_RESOLVE_CREATE = 1, SIM_RESOLVE_SAME_CTX = 2 };
/* Stream named by h; NULL in *out for a special stream not yet made
 * unless SIM_RESOLVE_CREATE. ctx may be NULL for a user handle. */
CUresult sim__stream_resolve(CUstream h, int ptds, CUcontext ctx, int flags,
                             CUstream *out);
/* Queues op on s after the nextra ops of `extra` with the legacy rules;
 * joins extra_vc (may be NULL) into the stream's clock. Does not free op
 * on failure. */
CUresult sim__enqueue(CUstream s, sim_op *op, const sim_dep *extra,
                      size_t nextra, const sim_vclock *extra_vc, int nodelay);
const sim_vclock *sim__stream_vc(CUstream s);
uint64_t sim__stream_uid(CUstream s);
CUcontext sim__stream_ctx(CUstream s);
/* What a synchronize of s, or of an event recorded on s now, waits for:
 * the pool blocks it gives back (mempool.c). */
void sim__stream_pool_cover(CUstream s, sim_pool_cover *out);
const sim_op *sim__stream_head(CUstream s);
void sim__stream_label(CUstream s, char *buf, size_t size);
void sim__streams_each(void (*fn)(CUstream s, void *arg), void *arg);

/* Nonzero when an op queued on s now would run at once: nothing queued
 * or running there, nothing the legacy stream's rules make it wait for, no
 * capture and no CUDAMEM_SIM_DELAY_US. */
int sim__stream_idle(CUstream s);
/* s idle: an op that only marks its place (an event record) passes through
 * s at once, on the calling thread, as its worker would pass it; returns
 * its seq. No wake-up, no system call. */
uint64_t sim__stream_pass(CUstream s);
uint64_t sim__stream_submitted(CUstream s); /* seq of its latest op */
void sim__op_free(sim_op *op);              /* lock not required */
/* Stream capture (graph.c keeps the capture, the stream points at it). */
typedef struct sim_capture sim_capture;
sim_capture *sim__stream_capture(CUstream s);
void sim__stream_set_capture(CUstream s, sim_capture *c);
/* A capture of one of ctx's blocking streams, which the legacy stream
 * may not synchronize with (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). */
sim_capture *sim__ctx_blocking_capture(CUcontext ctx);

/* event.c */
void sim__noop_run(sim_op *op);
/* Called by a worker as each op completes, before it is freed. */
void sim__event_op_done(sim_op *op);
/* The work an event captured, unfinished: dep->uid 0 when none. */
CUresult sim__event_pending(CUevent ev, sim_dep *dep, const sim_vclock **vc);
/* For an interprocess event with records not yet run (here or in another
 * process): an op that waits for them, for the waiting stream to queue;
 * *out NULL when there is nothing to wait for. Validate ev first. */
CUresult sim__event_ipc_wait(CUevent ev, sim_op **out);
void sim__events_release_ctx(CUcontext ctx);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                     unsigned int flags);

/* What waiting for ev means to stream s (`legacy`: the legacy stream):
 * CUDA_SUCCESS (s may have joined the capture ev was recorded in), or the
 * error a capture boundary gives (the capture is invalidated). */
CUresult sim__event_capture_wait(CUevent ev, CUstream s, int legacy);
CUcontext sim__event_ctx(CUevent ev);
void sim__event_ref(CUevent ev);
void sim__event_unref(CUevent ev);
/* Records ev on s after the nafter ops of `after` and what after_vc says
 * it follows (may be NULL), as cuEventRecord would: a graph's event record
 * node, cuCtxRecordEvent's record behind every stream of a context. */
CUresult sim__event_record_on(CUevent ev, CUstream s, const sim_dep *after,
                              size_t nafter, const sim_vclock *after_vc);

/* graph.c */
/* Takes op, given to s, into s's capture c as a node, or fails (op not
 * taken): the capture is invalidated for an operation it cannot hold. */
CUresult sim__capture_add(sim_capture *c, CUstream s, sim_op *op);
/* A record of ev on s in capture c: an event record node when `external`
 * (cuEventRecordWithFlags EXTERNAL), else ev stands for what s's next
 * node would depend on. */
CUresult sim__capture_record(sim_capture *c, CUstream s, CUevent ev,
                             int external);
/* Stream s waits for ev, last recorded in capture `id`: s joins that
 * capture (forks into it) or adds to what it depends on in it. */
CUresult sim__capture_join(CUstream s, int legacy, CUevent ev, uint64_t id);
void sim__capture_invalidate(sim_capture *c);
int sim__capture_status(const sim_capture *c); /* CUstreamCaptureStatus */
uint64_t sim__capture_id(const sim_capture *c);
void sim__capture_drop(sim_capture *c, CUstream s); /* s is gone */

/* hazard.c: vector clocks, the handle registry and the checker. */
void sim__vc_put(sim_vclock *v, uint64_t uid, uint64_t seq);
uint64_t sim__vc_get(const sim_vclock *v, uint64_t uid);
void sim__vc_join(sim_vclock *dst, const sim_vclock *src);
void sim__vc_prune(sim_vclock *v);
void sim__vc_copy(sim_vclock *dst, const sim_vclock *src);
void sim__vc_free(sim_vclock *v);
/* Streams and events the application holds, so that a stale handle is
 * refused without reading freed memory. */
int sim__handle_add(void *h);
void sim__handle_remove(void *h);
int sim__handle_live(const void *h, uint32_t magic);
void sim__hazard_check(CUstream s, const sim_op *op);
/* Reports op on s as touching range r of memory that is gone; `why` says
 * how. */
void sim__hazard_freed(CUstream s, const sim_op *op, const sim_range *r,
                       const char *why);
/* The plain name of an entry point; async-signal-safe. */
const char *sim__entry_name(sim_entry id);

#endif
