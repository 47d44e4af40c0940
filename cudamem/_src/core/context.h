/* context.h: devices as cudamem uses them (one retained primary context per
 * device, a generation bumped by reset/close) and each thread's context
 * state (its selected device, what cudamem pushed). Owns the rule of DESIGN
 * 6; does not own anything allocated inside a context. */
#ifndef CM_CONTEXT_H
#define CM_CONTEXT_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "stats.h"
#include "status.h"

/* One per visible device, created when first asked for after the driver
 * loaded, never freed. `primary`, `last_primary`, `generation` and
 * `resets` are read without the lock (atomically); they change only under
 * it. */
typedef struct cm_device {
    int ordinal;
    CUdevice cudev;
    CUcontext primary;      /* retained by cudamem, or NULL */
    CUcontext last_primary; /* the last handle retained, kept after release */
    uint64_t generation;    /* bumped by reset and close */
    uint64_t resets;        /* bumped by reset only: managed memory of an
                               older count is gone, whatever its retains */
    pthread_mutex_t lock;
    /* qlock (recursive: a free may release more) orders queueing against
     * the generation bump; taken after lock, never before it. The slots
     * below belong to the files named, which context.c does not call:
     * they register their teardown (cm__subsystem_register). */
    pthread_mutex_t qlock;
    /* release.c's queues for the current generation, made on first use
     * (under qlock); queues_stale: a teardown since they were sized. */
    struct cm_pending *queues[2];
    int queues_stale;
    /* pool.c's pool, made on first enable (under qlock) and never freed;
     * pool_on is the same pointer while pooled allocation is on (memory.c
     * then allocates through pool.c's cm_mem_ops). */
    struct cm_pool *pool;
    struct cm_pool *pool_on;
    /* asyncpool.c's: nonzero while memory.c allocates from the driver's
     * pool (atomic); the bytes its allocations hold from the pool and
     * their cap (SIZE_MAX: none), atomic. */
    int async_on;
    size_t async_held, async_limit;
    /* asyncpool.c's exportable pool (cm_asyncpool_set_ipc), made once
     * under qlock and kept for the process, and the POSIX file descriptor
     * exported from it (ipc_ready once both are); async_ipc (atomic) is
     * nonzero while the stream-ordered allocations come from it. */
    CUmemoryPool ipc_pool;
    int ipc_fd, ipc_ready;
    int async_ipc;
    /* ctxsync.c's idle probe: the event cuCtxRecordEvent records into,
     * made in the context of generation idle_made - 1 (0: none; a
     * teardown destroys it), atomic; idle_probing (atomic) is set while a
     * thread uses them; pool_frees (atomic) is set by each cuMemFreeAsync
     * of asyncpool.c and cleared by the probe's cuCtxSynchronize. */
    CUevent idle_event;
    uint64_t idle_made;
    int idle_probing;
    int pool_frees;
    cm_counts counts[CM_STAT_KINDS]; /* stats.c's, under stats_lock */
    char stats_lock;
    /* stats.c's, atomic: device and managed bytes the driver holds for
     * cudamem (pool slabs whole, queued frees until freed) and the
     * allocations the memory limit refused; memory.c's limit (0: none). */
    size_t held_bytes, oom_rejections;
    size_t mem_limit;
    /* The first sticky error seen in the primary context, and its call:
     * set once (the call first), atomically; cleared only by a reset
     * after which the driver reports the new context usable. */
    CUresult poison;
    const char *poison_call;
    /* Teardown against use (context.c's header gives the lock order).
     * `users` counts the cm_ctx_enter not yet left, on every thread
     * (atomic); `tearing` is set while a close() or reset() by `tearer`
     * waits for them to leave or runs (atomic); `exclusive` once none is
     * left. hold_lock guards the three with hold_cond, its wake-up. */
    int users;
    int tearing;
    int exclusive;
    pthread_t tearer;
    pthread_mutex_t hold_lock;
    pthread_cond_t hold_cond;
} cm_device;

/* What cm_ctx_enter pushed, for cm_ctx_leave to pop, and the device, for
 * cm_ctx_leave to note a sticky error in. */
typedef struct cm_ctx_guard {
    CUcontext pushed;
    cm_device *dev;
    cm_device *prev; /* context.c's: the enclosing enter's device */
    void *thread;    /* context.c's: the entering thread's state */
} cm_ctx_guard;

/* Number of visible devices. */
int cm_devices_count(int *count, cm_error *err);
/* The device with this ordinal; CM_ERR_VALUE naming the ordinal and the
 * count when out of range. */
int cm_device_get(int ordinal, cm_device **dev, cm_error *err);
/* The device's primary context, retained on first use, and the device's
 * generation at that moment (a Context object records it). */
int cm_device_context(cm_device *dev, CUcontext *ctx, uint64_t *generation,
                      cm_error *err);
/* The same for a caller about to make an object in the context: notes
 * the generation as cm_ctx_check does, so that a teardown before the
 * calling thread's next enter fails that enter. */
int cm_device_primary(cm_device *dev, CUcontext *ctx, uint64_t *generation,
                      cm_error *err);
/* numba's Device.reset(): waits for the calls other threads have in
 * flight in the context (refusing new ones meanwhile) and for the
 * device's work, releases cudamem's retain, resets the primary context
 * and bumps the generation. The reset destroys the context whatever its
 * retains: managed memory still in use goes with it. */
int cm_device_reset(cm_device *dev, cm_error *err);

/* Sticky errors (DESIGN rule 3). After one, every call in the context
 * fails with it, so core fails fast without calling the driver: the
 * device is poisoned for good unless a reset gives a context the driver
 * reports usable (the real driver does not: the process must restart).
 * cm__device_poison records err in dev when its code is sticky and sets
 * err->device; cm_device_poisoned is 0, or -1 with that error in err;
 * cm_current_poison records a sticky err that names no device in the
 * device of the calling thread's current context. */
void cm__device_poison(cm_device *dev, cm_error *err);
int cm_device_poisoned(cm_device *dev, cm_error *err);
void cm_current_poison(cm_error *err);

/* Makes dev's primary context current for one operation, only if it is not
 * already; cm_ctx_leave pops only what enter pushed. `status` is the
 * operation's: when it is -1, err keeps its error and leave's own failure is
 * dropped. Returns -1 when status is -1 or the pop failed. Enter fails at
 * once on a poisoned device; leave poisons it on a sticky error. Between
 * the two the context is in use: close() and reset() wait for it. Enter
 * fails with CM_ERR_STATE while another thread tears the context down,
 * and when one did since this thread last checked or made an object of
 * the device (cm_ctx_check, cm_mem_check, cm_device_primary) outside an
 * operation: the object was stale by the time the call began. */
int cm_ctx_enter(cm_device *dev, cm_ctx_guard *guard, cm_error *err);
int cm_ctx_leave(cm_ctx_guard *guard, int status, cm_error *err);
/* cm_current_device and cm_ctx_enter of that device with one question to
 * the driver: an operation on the current device starts here. Inside an
 * enter, enter (of the same device) and the current device ask nothing:
 * what runs in between (Python code included) must leave the current
 * context as it found it. */
int cm_ctx_enter_current(cm_device **out, cm_ctx_guard *guard, cm_error *err);
/* cm_ctx_enter for a call on a handle that names its own context (an
 * event query, a stream's destroy): the hold and the poison check, with no
 * question and nothing made current. */
int cm__ctx_enter_handle(cm_device *dev, cm_ctx_guard *guard, cm_error *err);

/* The device of the calling thread (DESIGN rule 6): that of the current
 * context when it is a primary context (cudamem's or another library's);
 * a non-primary current context fails with CM_ERR_STATE naming it. With no
 * current context: the thread's selected device, else device 0, whose
 * primary context is then made current and left current. */
int cm_current_device(cm_device **out, cm_error *err);
/* The device whose primary context is `ctx` (a handle another library
 * got, such as a stream's context); CM_ERR_VALUE naming it otherwise. */
int cm__context_device(CUcontext ctx, cm_device **out, cm_error *err);
/* The device of the current context whatever its kind, or NULL when none
 * is current. Changes nothing. */
int cm_active_device(cm_device **out, cm_error *err);
/* numba's select_device: makes dev's primary context current on this
 * thread, replacing the one cudamem made current before (if any). */
int cm_device_select(cm_device *dev, cm_error *err);
/* numba's Device.release_primary_context(): drops cudamem's retain of
 * dev's primary context as close() does for every device (its Contexts
 * and the memory made in it cannot be used after); the next use retains
 * it again. */
int cm_device_release(cm_device *dev, cm_error *err);
/* numba's close(): pops the contexts cudamem pushed on this thread and
 * forgets its selection; with `main_thread`, also releases every retained
 * primary context and bumps every generation, each once the calls other
 * threads have in flight in it have left (as cm_device_reset). */
int cm_devices_close(int main_thread, cm_error *err);

/* Context operations. `generation` is the one recorded when the Context was
 * made: after a reset or close of its device they fail with CM_ERR_STATE
 * (DESIGN rule 4). cm_ctx_check also notes the generation it saw for the
 * calling thread's next cm_ctx_enter (see there). */
int cm_ctx_check(cm_device *dev, uint64_t generation, cm_error *err);
/* dev's generation now, for cm_ctx_unchanged. */
uint64_t cm_device_generation(cm_device *dev);
/* For a call that uses the context over several enters (a polled wait):
 * fails with CM_ERR_STATE when the context was reset or closed since
 * `generation`, and notes it as cm_ctx_check does. */
int cm_ctx_unchanged(cm_device *dev, uint64_t generation, cm_error *err);
/* For other records (memory.c): notes that the calling thread found
 * `generation` of dev usable, as cm_ctx_check does (the oldest noted
 * since the thread's last enter of dev is kept). */
void cm__ctx_note_checked(cm_device *dev, uint64_t generation);
int cm_ctx_push(cm_device *dev, uint64_t generation, cm_error *err);
/* Fails unless the context is the current one (numba's rule). */
int cm_ctx_pop(cm_device *dev, uint64_t generation, cm_error *err);
int cm_ctx_meminfo(cm_device *dev, uint64_t generation, size_t *free_bytes,
                   size_t *total_bytes, cm_error *err);
/* Blocks: py/ calls it with the GIL released. */
int cm__ctx_synchronize(cm_device *dev, uint64_t generation, cm_error *err);
/* The same on a thread of cudamem's own that nothing else makes a context
 * current on (ctxsync.c's): the context stays current there after. */
int cm__ctx_synchronize_own(cm_device *dev, uint64_t generation,
                            cm_error *err);
/* numba's Context.reset(): waits for the context's work and releases what
 * cudamem holds in it (pending frees, the pool's free slabs); the context
 * stays usable. Blocks. */
int cm_ctx_reset(cm_device *dev, uint64_t generation, cm_error *err);
/* Lets dev's context access peer's memory; already enabled is success. */
int cm_ctx_enable_peer(cm_device *dev, uint64_t generation, cm_device *peer,
                       unsigned flags, cm_error *err);

/* What a subsystem that keeps state per device (in cm_device's slots, or
 * anything holding a context) does when a context is torn down or reset.
 * Each registers its operations when it first makes such state, so that
 * context.c needs none of them; they run in the order of the slots. */
typedef enum cm_subsystem {
    CM_SUB_QUEUES = 0, /* release.c's pending-free queues */
    CM_SUB_POOL,       /* pool.c's device pool */
    CM_SUB_HOSTMEM,    /* hostmem.c's records waiting for their work */
    CM_SUB_HOSTPOOL,   /* hostpool.c's cached page-locked blocks */
    CM_SUB_ASYNCPOOL,  /* asyncpool.c's switch of the driver's pool */
    CM_SUB_CTXSYNC,    /* ctxsync.c's idle probe event */
    CM_SUBSYSTEMS
} cm_subsystem;

typedef struct cm_subsystem_ops {
    /* close() and release_primary_context(), before any lock is taken:
     * gives back what holds contexts from outside them (may be NULL). */
    int (*before_release)(cm_error *err);
    /* With dev->lock and dev->qlock held, before cudamem's retain is
     * dropped: destroys the objects of its own it made in the context,
     * which another retain (another library's, memory's) may keep alive.
     * What the driver refuses to destroy goes with the context: nothing
     * to report to a caller that never saw it (may be NULL). */
    void (*unmake)(cm_device *dev);
    /* With dev->lock and dev->qlock held, cudamem's retain dropped and
     * the generation not bumped yet: forgets dev's state of the old
     * context; `reset` when the context is about to be reset. -1 with err
     * filled; the teardown goes on (may be NULL). */
    int (*drop)(cm_device *dev, int reset, cm_error *err);
    /* Context.reset(), after the context's work is done: gives back what
     * is held in it; the context stays usable (may be NULL). */
    int (*relieve)(cm_device *dev, cm_error *err);
} cm_subsystem_ops;

/* Installs `ops` (static storage) in `slot`; again is harmless. A drop
 * must be registered under dev->qlock before its state is made. */
void cm__subsystem_register(cm_subsystem slot, const cm_subsystem_ops *ops);

int cm_profiler_start(cm_error *err);
int cm_profiler_stop(cm_error *err);
int cm_peer_can_access(cm_device *dev, cm_device *peer, int *can,
                       cm_error *err);

#endif
