/* context.c: the device table, primary contexts (retain, reset, release),
 * sticky-error poisoning, the per-thread context state, teardown against
 * use, and the operations that need a context but own nothing in it
 * (memory info, synchronize, peer access, profiler). Allocations, streams
 * and their queues live elsewhere.
 *
 * Locks, in the order they are taken: a device's hold (cm_ctx_enter to
 * cm_ctx_leave, shared; close() and reset() take it alone), dev->lock,
 * dev->qlock (recursive), then pool.c's and the other files' own locks
 * (every lock's level is in lockorder.h; CUDAMEM_DEBUG builds check it).
 * hold_lock is held only to change or wait on the hold, never while
 * another is taken. A thread never waits for the hold while it holds
 * one, or any lock: an enter during a teardown fails at once rather than
 * wait (a thread inside an operation on another device, or holding
 * dev->qlock, could be what the teardown waits for). The teardown waits
 * with no lock held and, from py/, without the GIL, so a call in flight
 * may take the GIL (the staged copy's signal poll): no thread holding the
 * GIL waits for the hold. */
#include "context.h"
#include "lockorder.h"

#include <stdlib.h>

#include "driver.h"

static struct {
    pthread_mutex_t lock;
    cm_device *devices; /* published with release ordering */
    int count;
} table = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define PINS 2

/* This thread's state, in one struct reached through one pointer per
 * function (thread_state): in a shared object each read of a
 * _Thread_local is a call to __tls_get_addr. */
typedef struct {
    /* The device select_device chose (-1: none), and how many contexts
     * cudamem pushed and has not popped. */
    int selected;
    int pushed;
    /* How many cm_ctx_enter of this thread have not been left, all
     * devices. */
    int holding;
    /* The oldest generation of each of the last two devices that this
     * thread found usable (a check of an object, a new object) outside an
     * operation and has not entered since: its next enter of that device
     * refuses a generation that moved on since, for what the call uses was
     * stale before the call held the context. The oldest, because one
     * call may check several objects (or make a temporary) before it
     * enters. A pin left by a look that no enter followed (a call that
     * failed before it entered, an array made and not used yet) refuses
     * the thread's next call on that device once if a teardown came in
     * between: the price of never using a stale pointer. An enter refused
     * during a teardown drops it. */
    struct {
        cm_device *dev;
        uint64_t generation;
    } pins[PINS];
    int pin_next;
    /* On a thread of cudamem's own (ctxsync.c's), which nothing else makes
     * a context current on: the context it made current, and the
     * generation of the device then. Left current between calls, so that
     * a call there costs neither a question nor a push and pop; a release
     * since (a new generation) may have made the handle stale, so it is
     * set again. */
    CUcontext own_ctx;
    uint64_t own_generation;
    /* The device of the innermost enter of this thread that made its
     * context current (or found it so), NULL outside one. cudamem's own
     * pushes and pops in between are balanced, so until that enter is
     * left the context is still current: a nested enter of the same
     * device, and a question for the current device, need not ask the
     * driver. Across operations nothing is remembered: other libraries
     * change the current context between them. */
    cm_device *current;
} ctx_thread;

static _Thread_local ctx_thread tls = {.selected = -1};

/* &tls, hidden from the optimizer: it would otherwise recompute the
 * address (another __tls_get_addr call) after each call rather than keep
 * it in a register. */
static inline ctx_thread *
thread_state(void)
{
    ctx_thread *t = &tls;

    __asm__("" : "+r"(t));
    return t;
}

/* The subsystems' teardown, by slot (cm__subsystem_register). */
static const cm_subsystem_ops *subsystems[CM_SUBSYSTEMS];

void
cm__subsystem_register(cm_subsystem slot, const cm_subsystem_ops *ops)
{
    __atomic_store_n(&subsystems[slot], ops, __ATOMIC_RELEASE);
}

static const cm_subsystem_ops *
subsystem(int slot)
{
    return __atomic_load_n(&subsystems[slot], __ATOMIC_ACQUIRE);
}

/* Every subsystem's before_release: -1 when one failed (the first
 * failure in err), after all ran. */
static int
before_release(cm_error *err)
{
    cm_error later;
    int rc = 0;

    for (int i = 0; i < CM_SUBSYSTEMS; i++) {
        const cm_subsystem_ops *ops = subsystem(i);

        if (ops != NULL && ops->before_release != NULL &&
            ops->before_release(rc < 0 ? &later : err) < 0) {
            rc = -1;
        }
    }
    return rc;
}

/* Every subsystem's unmake. */
static void
unmake_subsystems(cm_device *dev)
{
    for (int i = 0; i < CM_SUBSYSTEMS; i++) {
        const cm_subsystem_ops *ops = subsystem(i);

        if (ops != NULL && ops->unmake != NULL) {
            ops->unmake(dev);
        }
    }
}

/* Every subsystem's drop, as before_release. */
static int
drop_subsystems(cm_device *dev, int reset, cm_error *err)
{
    cm_error later;
    int rc = 0;

    for (int i = 0; i < CM_SUBSYSTEMS; i++) {
        const cm_subsystem_ops *ops = subsystem(i);

        if (ops != NULL && ops->drop != NULL &&
            ops->drop(dev, reset, rc < 0 ? &later : err) < 0) {
            rc = -1;
        }
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * The device table. */

static CUcontext
load_ctx(CUcontext *slot)
{
    return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}

/* Creates the table on first use; the device count is fixed after cuInit. */
static int
table_ready(cm_error *err)
{
    pthread_mutexattr_t recursive;
    cm_device *devices;
    int count, rc = -1;

    if (__atomic_load_n(&table.devices, __ATOMIC_ACQUIRE) != NULL) {
        return 0;
    }
    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    cm__lock(&table.lock, CM_LOCK_DEVICES);
    if (table.devices != NULL) {
        rc = 0;
        goto done;
    }
    if (CM_CALL(err, cuDeviceGetCount, &count) < 0) {
        goto done;
    }
    /* calloc(0) may return NULL: keep one slot so "ready" is never NULL. */
    devices = calloc(count > 0 ? (size_t)count : 1, sizeof(*devices));
    if (devices == NULL) {
        cm_fail(err, CM_ERR_NOMEM, "out of host memory");
        goto done;
    }
    for (int i = 0; i < count; i++) {
        if (CM_CALL(err, cuDeviceGet, &devices[i].cudev, i) < 0) {
            free(devices);
            goto done;
        }
        devices[i].ordinal = i;
        devices[i].async_limit = SIZE_MAX; /* asyncpool.c's: no cap */
        pthread_mutex_init(&devices[i].lock, NULL);
        pthread_mutex_init(&devices[i].qlock, &recursive);
        pthread_mutex_init(&devices[i].hold_lock, NULL);
        pthread_cond_init(&devices[i].hold_cond, NULL);
    }
    table.count = count;
    __atomic_store_n(&table.devices, devices, __ATOMIC_RELEASE);
    rc = 0;
done:
    cm__unlock(&table.lock);
    pthread_mutexattr_destroy(&recursive);
    return rc;
}

int
cm_devices_count(int *count, cm_error *err)
{
    if (cm_fork_check(err) < 0 || table_ready(err) < 0) {
        return -1;
    }
    *count = table.count;
    return 0;
}

int
cm_device_get(int ordinal, cm_device **dev, cm_error *err)
{
    if (cm_fork_check(err) < 0 || table_ready(err) < 0) {
        return -1;
    }
    if (ordinal < 0 || ordinal >= table.count) {
        return cm__fail_fmt(
            err, CM_ERR_VALUE,
            "device ordinal %d out of range: %d device%s visible", ordinal,
            table.count, table.count == 1 ? "" : "s");
    }
    *dev = &table.devices[ordinal];
    return 0;
}

void
cm__ctx_note_checked(cm_device *dev, uint64_t generation)
{
    ctx_thread *t = thread_state();
    int slot;

    /* Inside an operation the hold keeps the generation. */
    if (t->holding > 0) {
        return;
    }
    for (slot = 0; slot < PINS; slot++) {
        if (t->pins[slot].dev == dev) {
            return; /* the older look stays */
        }
    }
    slot = t->pin_next;
    t->pin_next = (t->pin_next + 1) % PINS;
    t->pins[slot].dev = dev;
    t->pins[slot].generation = generation;
}

/* ------------------------------------------------------------------------
 * Primary contexts: retain, hold, teardown, reset, poison. */

/* Forgets what this thread checked of dev; 1 when its generation moved
 * on since. */
static int
pin_moved(ctx_thread *t, cm_device *dev)
{
    int moved = 0;

    for (int i = 0; i < PINS; i++) {
        if (t->pins[i].dev == dev) {
            moved = t->pins[i].generation !=
                    __atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE);
            t->pins[i].dev = NULL;
        }
    }
    return moved;
}

/* primary_retain's retain, when cudamem holds none (first use, or after a
 * release): apart, so that every other call is inlined as one load. */
static __attribute__((noinline)) int
primary_retain_first(cm_device *dev, CUcontext *out, cm_error *err)
{
    CUcontext ctx;
    int rc = 0;

    cm__lock(&dev->lock, CM_LOCK_DEVICE);
    ctx = dev->primary;
    if (ctx == NULL) {
        rc = CM_CALL(err, cuDevicePrimaryCtxRetain, &ctx, dev->cudev);
        if (rc == 0) {
            __atomic_store_n(&dev->last_primary, ctx, __ATOMIC_RELEASE);
            __atomic_store_n(&dev->primary, ctx, __ATOMIC_RELEASE);
        }
    }
    cm__unlock(&dev->lock);
    *out = ctx;
    return rc;
}

/* The device's primary context, retained once by cudamem. */
static inline int
primary_retain(cm_device *dev, CUcontext *out, cm_error *err)
{
    CUcontext ctx = load_ctx(&dev->primary);

    if (ctx != NULL) {
        *out = ctx;
        return 0;
    }
    return primary_retain_first(dev, out, err);
}

int
cm_device_context(cm_device *dev, CUcontext *ctx, uint64_t *generation,
                  cm_error *err)
{
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    /* Read the generation first: a reset in between makes the new Context
     * stale at once rather than letting a stale one look fresh. */
    *generation = __atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE);
    return primary_retain(dev, ctx, err);
}

int
cm_device_primary(cm_device *dev, CUcontext *ctx, uint64_t *generation,
                  cm_error *err)
{
    if (cm_device_context(dev, ctx, generation, err) < 0) {
        return -1;
    }
    /* What is made next is made in the context entered next: a teardown
     * in between fails that enter instead of leaving the new object in a
     * context its generation does not name. */
    cm__ctx_note_checked(dev, *generation);
    return 0;
}

/* Takes a share of dev's hold. During a teardown only a thread already
 * inside an operation gets one (the teardown waits for it), until no
 * such thread is left; then only the tearer. The count goes up before the
 * flag is read, and the tearer sets the flag before it reads the count
 * (both sequentially consistent): one of them sees the other. */
static int
hold_take(ctx_thread *t, cm_device *dev, cm_error *err)
{
    int ok = 1;

    __atomic_add_fetch(&dev->users, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&dev->tearing, __ATOMIC_SEQ_CST)) {
        cm__lock(&dev->hold_lock, CM_LOCK_HOLD);
        if (dev->tearing) {
            ok = dev->exclusive ? pthread_equal(dev->tearer, pthread_self())
                                : t->holding > 0;
        }
        if (!ok && __atomic_sub_fetch(&dev->users, 1, __ATOMIC_SEQ_CST) == 0) {
            pthread_cond_broadcast(&dev->hold_cond);
        }
        cm__unlock(&dev->hold_lock);
    }
    if (!ok) {
        return cm__fail_fmt(err, CM_ERR_STATE,
                            "device %d cannot be used now: another thread "
                            "is resetting or closing its context",
                            dev->ordinal);
    }
    t->holding++;
    return 0;
}

static void
hold_drop(ctx_thread *t, cm_device *dev)
{
    t->holding--;
    if (__atomic_sub_fetch(&dev->users, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&dev->tearing, __ATOMIC_SEQ_CST)) {
        cm__lock(&dev->hold_lock, CM_LOCK_HOLD);
        pthread_cond_broadcast(&dev->hold_cond);
        cm__unlock(&dev->hold_lock);
    }
}

/* Makes this thread dev's tearer: waits for another teardown of dev to
 * end, refuses new calls, waits for the calls in flight to leave. */
static int
teardown_begin(cm_device *dev, cm_error *err)
{
    /* The calls in flight would include this thread's own (a signal
     * handler run by a staged copy's poll for signals). */
    if (tls.holding > 0) {
        return cm__fail_fmt(err, CM_ERR_STATE,
                            "device %d cannot be reset or closed from "
                            "inside an operation on a context",
                            dev->ordinal);
    }
    cm__lock(&dev->hold_lock, CM_LOCK_HOLD);
    while (dev->tearing) {
        pthread_cond_wait(&dev->hold_cond, &dev->hold_lock);
    }
    __atomic_store_n(&dev->tearing, 1, __ATOMIC_SEQ_CST);
    dev->tearer = pthread_self();
    while (__atomic_load_n(&dev->users, __ATOMIC_SEQ_CST) != 0) {
        pthread_cond_wait(&dev->hold_cond, &dev->hold_lock);
    }
    dev->exclusive = 1;
    cm__unlock(&dev->hold_lock);
    /* What this thread checked before is stale once it returns. */
    (void)pin_moved(thread_state(), dev);
    return 0;
}

static void
teardown_end(cm_device *dev)
{
    cm__lock(&dev->hold_lock, CM_LOCK_HOLD);
    dev->exclusive = 0;
    __atomic_store_n(&dev->tearing, 0, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&dev->hold_cond);
    cm__unlock(&dev->hold_lock);
}

/* Caller holds dev->lock. Drops cudamem's retain; the handle becomes stale
 * for every Context made before. `reset`: the context is about to be
 * reset, which takes managed memory with it. 0; -1 when nothing changed;
 * 1 when the context was released but a queued managed free failed
 * (reported in err). */
static int
release_locked(cm_device *dev, int reset, cm_error *err)
{
    int rc = 0;

    /* Under qlock, so that nothing is queued for the old generation once
     * the queues are emptied. */
    cm__lock(&dev->qlock, CM_LOCK_QUEUES);
    if (dev->primary != NULL) {
        unmake_subsystems(dev);
        rc = CM_CALL(err, cuDevicePrimaryCtxRelease, dev->cudev);
        if (rc == 0) {
            __atomic_store_n(&dev->primary, NULL, __ATOMIC_RELEASE);
        }
    }
    if (rc == 0) {
        if (reset) {
            __atomic_add_fetch(&dev->resets, 1, __ATOMIC_ACQ_REL);
        }
        /* Queued managed frees still hold the context: they run (or, on
         * a reset, give their retains back) even when one fails. */
        rc = drop_subsystems(dev, reset, err) < 0 ? 1 : 0;
        __atomic_add_fetch(&dev->generation, 1, __ATOMIC_ACQ_REL);
    }
    cm__unlock(&dev->qlock);
    return rc;
}

/* After a reset of a poisoned device: whether the driver gave a usable
 * context. The real driver does not (a sticky error lasts as long as the
 * process): the first error stays, and is err. A driver that does clears
 * the poison. */
static int
probe_after_reset(cm_device *dev, cm_error *err)
{
    cm_error first;
    cm_ctx_guard guard;
    int rc;

    cm_device_poisoned(dev, &first);
    __atomic_store_n(&dev->poison, CUDA_SUCCESS, __ATOMIC_RELEASE);
    __atomic_store_n(&dev->poison_call, NULL, __ATOMIC_RELEASE);
    rc = cm_ctx_enter(dev, &guard, err);
    if (rc == 0) {
        rc = cm_ctx_leave(&guard, CM_CALL0(err, cuCtxSynchronize), err);
    }
    if (rc < 0 && cm_device_poisoned(dev, err) < 0) {
        __atomic_store_n(&dev->poison_call, first.call, __ATOMIC_RELEASE);
        __atomic_store_n(&dev->poison, first.code, __ATOMIC_RELEASE);
        *err = first;
    }
    return rc;
}

/* cm_device_reset's work, by the tearer. */
static int
reset_held(cm_device *dev, cm_error *err)
{
    cm_ctx_guard guard;
    cm_error ignored;
    int rc, released, poisoned;

    if (load_ctx(&dev->primary) != NULL &&
        cm_device_poisoned(dev, &ignored) == 0) {
        /* Drain first. A sticky error is what a reset is for: go on. */
        rc = cm_ctx_enter(dev, &guard, err);
        if (rc == 0) {
            rc = cm_ctx_leave(&guard, CM_CALL0(err, cuCtxSynchronize), err);
        }
        if (rc < 0 &&
            !(err->kind == CM_ERR_DRIVER && cm_error_is_sticky(err->code))) {
            return -1;
        }
    }
    poisoned = cm_device_poisoned(dev, &ignored) < 0;
    cm__lock(&dev->lock, CM_LOCK_DEVICE);
    released = release_locked(dev, 1, err);
    rc = released < 0 ? -1
                      : CM_CALL(released > 0 ? &ignored : err,
                                cuDevicePrimaryCtxReset, dev->cudev);
    if (released >= 0 && rc < 0) {
        /* The driver kept the context and what is in it: host memory
         * retaining it must still be freed, not taken as reset away. */
        __atomic_sub_fetch(&dev->resets, 1, __ATOMIC_ACQ_REL);
    }
    cm__unlock(&dev->lock);
    if (released > 0) {
        return -1;
    }
    return rc == 0 && poisoned ? probe_after_reset(dev, err) : rc;
}

int
cm_device_reset(cm_device *dev, cm_error *err)
{
    int rc;

    if (cm_fork_check(err) < 0 || teardown_begin(dev, err) < 0) {
        return -1;
    }
    rc = reset_held(dev, err);
    teardown_end(dev);
    return rc;
}

void
cm__device_poison(cm_device *dev, cm_error *err)
{
    const char *none = NULL;

    if (err->kind != CM_ERR_DRIVER || !cm_error_is_sticky(err->code)) {
        return;
    }
    err->device = dev->ordinal;
    /* The first error wins; its call is published before its code. */
    if (__atomic_compare_exchange_n(&dev->poison_call, &none, err->call, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&dev->poison, err->code, __ATOMIC_RELEASE);
    }
}

int
cm_device_poisoned(cm_device *dev, cm_error *err)
{
    CUresult code = __atomic_load_n(&dev->poison, __ATOMIC_ACQUIRE);

    if (code == CUDA_SUCCESS) {
        return 0;
    }
    cm_fail(err, CM_ERR_DRIVER, NULL);
    err->code = code;
    err->call = __atomic_load_n(&dev->poison_call, __ATOMIC_ACQUIRE);
    err->device = dev->ordinal;
    return -1;
}

/* ------------------------------------------------------------------------
 * Entering a context, and the current device. */

typedef enum {
    ENTER_ASK,    /* ask the driver which context is current */
    ENTER_KNOWN,  /* `known` was made or found current just before */
    ENTER_OWN,    /* on a thread of cudamem's own (own_ctx) */
    ENTER_HANDLE, /* for a call on a handle that names its context */
} enter_mode;

static int
ctx_enter(cm_device *dev, cm_ctx_guard *guard, enter_mode mode,
          CUcontext known, cm_error *err)
{
    ctx_thread *t = thread_state();
    CUcontext cur, ctx;
    uint64_t generation;

    guard->pushed = NULL;
    guard->dev = dev;
    guard->prev = t->current;
    guard->thread = t;
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    if (t->current == dev) {
        /* Nested in this thread's enter of dev, whose hold keeps the
         * context: only a sticky error since is news. */
        return cm_device_poisoned(dev, err);
    }
    if (hold_take(t, dev, err) < 0) {
        /* This call is over: its retry must not find its pin. */
        if (t->holding == 0) {
            (void)pin_moved(t, dev);
        }
        return -1;
    }
    if (t->holding == 1 && pin_moved(t, dev)) {
        hold_drop(t, dev);
        return cm__fail_fmt(err, CM_ERR_STATE,
                            "device %d's context was reset or closed by "
                            "another thread as this call began: what it "
                            "uses is gone",
                            dev->ordinal);
    }
    if (cm_device_poisoned(dev, err) < 0) {
        hold_drop(t, dev);
        return -1;
    }
    if (mode == ENTER_HANDLE) {
        return 0;
    }
    if (primary_retain(dev, &ctx, err) < 0) {
        hold_drop(t, dev);
        return -1;
    }
    if (mode == ENTER_OWN) {
        /* The hold keeps the generation until leave. */
        generation = __atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE);
        if (ctx == t->own_ctx && generation == t->own_generation) {
            return 0;
        }
        t->own_ctx = NULL;
        if (CM_CALL(err, cuCtxSetCurrent, ctx) < 0) {
            hold_drop(t, dev);
            return -1;
        }
        t->own_ctx = ctx;
        t->own_generation = generation;
        return 0;
    }
    /* A teardown between the caller's question and the hold may have
     * replaced the context: then ask. */
    if (mode == ENTER_ASK || known != ctx) {
        if (CM_CALL(err, cuCtxGetCurrent, &cur) < 0) {
            hold_drop(t, dev);
            return -1;
        }
        if (cur != ctx) {
            if (CM_CALL(err, cuCtxPushCurrent, ctx) < 0) {
                hold_drop(t, dev);
                return -1;
            }
            guard->pushed = ctx;
        }
    }
    t->current = dev;
    return 0;
}

int
cm_ctx_enter(cm_device *dev, cm_ctx_guard *guard, cm_error *err)
{
    return ctx_enter(dev, guard, ENTER_ASK, NULL, err);
}

int
cm__ctx_enter_handle(cm_device *dev, cm_ctx_guard *guard, cm_error *err)
{
    return ctx_enter(dev, guard, ENTER_HANDLE, NULL, err);
}

int
cm_ctx_leave(cm_ctx_guard *guard, int status, cm_error *err)
{
    cm_error ignored;
    CUcontext popped;
    ctx_thread *t;

    if (status < 0) {
        cm__device_poison(guard->dev, err);
    }
    if (guard->prev == guard->dev) {
        return status; /* nested: the enclosing enter leaves */
    }
    /* The enter's: a leave is on the thread that entered, and one
     * __tls_get_addr fewer. */
    t = guard->thread;
    t->current = guard->prev;
    if (guard->pushed != NULL) {
        guard->pushed = NULL;
        if (CM_CALL(status < 0 ? &ignored : err, cuCtxPopCurrent, &popped) <
            0) {
            status = -1;
        }
    }
    hold_drop(t, guard->dev);
    return status;
}

/* The device whose primary context (current or last retained) is `cur`. */
static cm_device *
known_primary(CUcontext cur, int *stale)
{
    for (int i = 0; i < table.count; i++) {
        if (load_ctx(&table.devices[i].primary) == cur) {
            *stale = 0;
            return &table.devices[i];
        }
    }
    for (int i = 0; i < table.count; i++) {
        if (load_ctx(&table.devices[i].last_primary) == cur) {
            *stale = 1;
            return &table.devices[i];
        }
    }
    return NULL;
}

void
cm_current_poison(cm_error *err)
{
    CUcontext cur;
    cm_device *dev;
    cm_error ignored;
    int stale;

    if (err->kind != CM_ERR_DRIVER || !cm_error_is_sticky(err->code) ||
        err->device >= 0 || !cm_driver_ready() ||
        cm_fork_check(&ignored) < 0 || table_ready(&ignored) < 0 ||
        CM_CALL(&ignored, cuCtxGetCurrent, &cur) < 0 || cur == NULL) {
        return;
    }
    dev = known_primary(cur, &stale);
    if (dev != NULL && !stale) {
        cm__device_poison(dev, err);
    }
}

static cm_device *
by_cudev(CUdevice cudev)
{
    for (int i = 0; i < table.count; i++) {
        if (table.devices[i].cudev == cudev) {
            return &table.devices[i];
        }
    }
    return NULL;
}

/* The device of a current context `cur`, which must be a primary one, and
 * in *now the context current after (a stale handle is replaced). */
static int
resolve_current(CUcontext cur, cm_device **out, CUcontext *now, cm_error *err)
{
    CUcontext ctx;
    CUdevice cudev;
    cm_device *dev;
    int stale;

    *now = cur;
    dev = known_primary(cur, &stale);
    if (dev != NULL && !stale) {
        *out = dev;
        return 0;
    }
    if (dev != NULL) {
        /* cudamem's own primary context after a reset or close on some
         * thread: retain it again, and replace the handle if it changed. */
        if (primary_retain(dev, &ctx, err) < 0 ||
            (ctx != cur && CM_CALL(err, cuCtxSetCurrent, ctx) < 0)) {
            return -1;
        }
        *now = ctx;
        *out = dev;
        return 0;
    }
    if (CM_CALL(err, cuCtxGetDevice, &cudev) < 0) {
        return -1;
    }
    dev = by_cudev(cudev);
    if (dev == NULL) {
        return cm__fail_fmt(err, CM_ERR_STATE,
                            "the current CUDA context %p is on a device that "
                            "is not visible to cudamem",
                            (void *)cur);
    }
    /* Another library's primary context is fine (numba's rule). */
    if (primary_retain(dev, &ctx, err) < 0) {
        return -1;
    }
    if (ctx != cur) {
        return cm__fail_fmt(
            err, CM_ERR_STATE,
            "cudamem cannot operate on non-primary CUDA context "
            "%p",
            (void *)cur);
    }
    *out = dev;
    return 0;
}

/* cm_current_device, and in *now the context it left current; NULL when
 * an enter of this thread knew it without asking. */
static int
current_device(cm_device **out, CUcontext *now, cm_error *err)
{
    CUcontext cur, ctx;
    cm_device *dev;

    *now = NULL;
    if (cm_fork_check(err) < 0 || table_ready(err) < 0) {
        return -1;
    }
    if (tls.current != NULL) {
        *out = tls.current;
        return 0;
    }
    if (CM_CALL(err, cuCtxGetCurrent, &cur) < 0) {
        return -1;
    }
    if (cur != NULL) {
        return resolve_current(cur, out, now, err);
    }
    if (table.count == 0) {
        return cm_fail(err, CM_ERR_VALUE, "no CUDA device is visible");
    }
    dev = &table.devices[tls.selected >= 0 ? tls.selected : 0];
    if (primary_retain(dev, &ctx, err) < 0 ||
        CM_CALL(err, cuCtxPushCurrent, ctx) < 0) {
        return -1;
    }
    tls.pushed++;
    *now = ctx;
    *out = dev;
    return 0;
}

int
cm_current_device(cm_device **out, cm_error *err)
{
    CUcontext now;

    return current_device(out, &now, err);
}

int
cm_ctx_enter_current(cm_device **out, cm_ctx_guard *guard, cm_error *err)
{
    CUcontext now;

    if (current_device(out, &now, err) < 0) {
        return -1;
    }
    return ctx_enter(*out, guard, now != NULL ? ENTER_KNOWN : ENTER_ASK, now,
                     err);
}

int
cm__context_device(CUcontext ctx, cm_device **out, cm_error *err)
{
    CUcontext primary, popped;
    CUdevice cudev;
    cm_device *dev;
    cm_error ignored;
    int stale, rc;

    if (cm_fork_check(err) < 0 || table_ready(err) < 0) {
        return -1;
    }
    dev = known_primary(ctx, &stale);
    if (dev != NULL && !stale) {
        *out = dev;
        return 0;
    }
    /* Another library's retain of a primary context cudamem has not
     * retained yet: ask which device, then compare with its primary. */
    if (CM_CALL(err, cuCtxPushCurrent, ctx) < 0) {
        return -1;
    }
    rc = CM_CALL(err, cuCtxGetDevice, &cudev);
    if (CM_CALL(rc < 0 ? &ignored : err, cuCtxPopCurrent, &popped) < 0 ||
        rc < 0) {
        return -1;
    }
    dev = by_cudev(cudev);
    if (dev == NULL || primary_retain(dev, &primary, err) < 0) {
        return dev == NULL
                   ? cm__fail_fmt(err, CM_ERR_VALUE,
                                  "CUDA context %p is on a device that "
                                  "is not visible to cudamem",
                                  (void *)ctx)
                   : -1;
    }
    if (primary != ctx) {
        return cm__fail_fmt(
            err, CM_ERR_VALUE,
            "CUDA context %p is not a primary context: cudamem "
            "works only with primary contexts",
            (void *)ctx);
    }
    *out = dev;
    return 0;
}

int
cm_active_device(cm_device **out, cm_error *err)
{
    CUcontext cur;
    CUdevice cudev;
    int stale;

    *out = NULL;
    if (cm_fork_check(err) < 0 || table_ready(err) < 0 ||
        CM_CALL(err, cuCtxGetCurrent, &cur) < 0) {
        return -1;
    }
    if (cur == NULL) {
        return 0;
    }
    if (CM_CALL(err, cuCtxGetDevice, &cudev) < 0) {
        /* cudamem's own primary context after a reset or close is still
         * that device's: the next operation retains it again. */
        cm_device *dev = known_primary(cur, &stale);

        if (dev == NULL || !stale) {
            return -1;
        }
        *out = dev;
        return 0;
    }
    *out = by_cudev(cudev);
    return 0;
}

int
cm_device_select(cm_device *dev, cm_error *err)
{
    CUcontext ctx;

    if (cm_fork_check(err) < 0 || primary_retain(dev, &ctx, err) < 0) {
        return -1;
    }
    /* Replace rather than push, so that selecting often does not grow the
     * thread's context stack. */
    if (tls.pushed > 0) {
        if (CM_CALL(err, cuCtxSetCurrent, ctx) < 0) {
            return -1;
        }
    }
    else {
        if (CM_CALL(err, cuCtxPushCurrent, ctx) < 0) {
            return -1;
        }
        tls.pushed++;
    }
    tls.selected = dev->ordinal;
    return 0;
}

/* ------------------------------------------------------------------------
 * Release and close. */

/* Drops cudamem's retain of dev's primary context once the calls other
 * threads have in flight in it have left: release_locked's result. */
static int
release_device(cm_device *dev, cm_error *err)
{
    int rc;

    if (teardown_begin(dev, err) < 0) {
        return -1;
    }
    cm__lock(&dev->lock, CM_LOCK_DEVICE);
    rc = release_locked(dev, 0, err);
    cm__unlock(&dev->lock);
    teardown_end(dev);
    return rc;
}

int
cm_device_release(cm_device *dev, cm_error *err)
{
    cm_error ignored;
    int failed, rc;

    if (cm_fork_check(err) < 0) {
        return -1;
    }
    /* Cached page-locked blocks may retain the context (as in close). */
    failed = before_release(err) < 0;
    rc = release_device(dev, failed ? &ignored : err);
    return failed || rc != 0 ? -1 : 0;
}

int
cm_devices_close(int main_thread, cm_error *err)
{
    CUcontext popped;
    cm_error ignored;
    int failed = 0;

    if (cm_fork_check(err) < 0 || table_ready(err) < 0) {
        return -1;
    }
    while (tls.pushed > 0) {
        if (CM_CALL(err, cuCtxPopCurrent, &popped) < 0) {
            return -1;
        }
        tls.pushed--;
    }
    tls.selected = -1;
    if (!main_thread) {
        return 0;
    }
    /* Cached page-locked blocks retain the contexts of the devices that
     * registered them: free them, so that close() releases every context.
     * A failure is reported once every device is closed. */
    failed = before_release(err) < 0;
    for (int i = 0; i < table.count; i++) {
        int rc = release_device(&table.devices[i], failed ? &ignored : err);

        if (rc < 0) {
            return -1;
        }
        failed |= rc > 0;
    }
    return failed ? -1 : 0;
}

/* ------------------------------------------------------------------------
 * Operations on a context that own nothing in it. */

int
cm_ctx_check(cm_device *dev, uint64_t generation, cm_error *err)
{
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    if (__atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE) != generation) {
        return cm__fail_fmt(err, CM_ERR_STATE,
                            "this Context of device %d cannot be used: the "
                            "context was reset or closed; get the current one "
                            "with current_context()",
                            dev->ordinal);
    }
    cm__ctx_note_checked(dev, generation);
    return 0;
}

uint64_t
cm_device_generation(cm_device *dev)
{
    return __atomic_load_n(&dev->generation, __ATOMIC_ACQUIRE);
}

int
cm_ctx_unchanged(cm_device *dev, uint64_t generation, cm_error *err)
{
    if (cm_device_generation(dev) != generation) {
        return cm__fail_fmt(err, CM_ERR_STATE,
                            "device %d's context was reset or closed by "
                            "another thread during this wait: what it "
                            "waited for is gone",
                            dev->ordinal);
    }
    cm__ctx_note_checked(dev, generation);
    return 0;
}

int
cm_ctx_push(cm_device *dev, uint64_t generation, cm_error *err)
{
    CUcontext ctx;

    if (cm_ctx_check(dev, generation, err) < 0 ||
        primary_retain(dev, &ctx, err) < 0 ||
        CM_CALL(err, cuCtxPushCurrent, ctx) < 0) {
        return -1;
    }
    tls.pushed++;
    return 0;
}

int
cm_ctx_pop(cm_device *dev, uint64_t generation, cm_error *err)
{
    CUcontext ctx, cur, popped;

    if (cm_ctx_check(dev, generation, err) < 0 ||
        primary_retain(dev, &ctx, err) < 0 ||
        CM_CALL(err, cuCtxGetCurrent, &cur) < 0) {
        return -1;
    }
    if (cur != ctx) {
        return cm__fail_fmt(
            err, CM_ERR_STATE,
            "cannot pop CUDA context %p of device %d: it is not "
            "the current context (%p is)",
            (void *)ctx, dev->ordinal, (void *)cur);
    }
    if (CM_CALL(err, cuCtxPopCurrent, &popped) < 0) {
        return -1;
    }
    if (tls.pushed > 0) {
        tls.pushed--;
    }
    return 0;
}

int
cm_ctx_meminfo(cm_device *dev, uint64_t generation, size_t *free_bytes,
               size_t *total_bytes, cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_check(dev, generation, err) < 0 ||
        cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(
        &guard, CM_CALL(err, cuMemGetInfo, free_bytes, total_bytes), err);
}

int
cm__ctx_synchronize(cm_device *dev, uint64_t generation, cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_check(dev, generation, err) < 0 ||
        cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(&guard, CM_CALL0(err, cuCtxSynchronize), err);
}

int
cm__ctx_synchronize_own(cm_device *dev, uint64_t generation, cm_error *err)
{
    cm_ctx_guard guard;

    if (cm_ctx_check(dev, generation, err) < 0 ||
        ctx_enter(dev, &guard, ENTER_OWN, NULL, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(&guard, CM_CALL0(err, cuCtxSynchronize), err);
}

int
cm_ctx_reset(cm_device *dev, uint64_t generation, cm_error *err)
{
    if (cm__ctx_synchronize(dev, generation, err) < 0) {
        return -1;
    }
    /* The queues flush, then numba's reset() of the context's memory
     * manager: the pool's is a trim. The first failure stops. */
    for (int i = 0; i < CM_SUBSYSTEMS; i++) {
        const cm_subsystem_ops *ops = subsystem(i);

        if (ops != NULL && ops->relieve != NULL &&
            ops->relieve(dev, err) < 0) {
            return -1;
        }
    }
    return 0;
}

int
cm_ctx_enable_peer(cm_device *dev, uint64_t generation, cm_device *peer,
                   unsigned flags, cm_error *err)
{
    cm_ctx_guard guard;
    CUcontext peer_ctx;
    int rc;

    if (cm_ctx_check(dev, generation, err) < 0 ||
        primary_retain(peer, &peer_ctx, err) < 0 ||
        cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    rc = CM_CALL(err, cuCtxEnablePeerAccess, peer_ctx, flags);
    if (rc < 0 && err->code == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
        rc = 0;
    }
    return cm_ctx_leave(&guard, rc, err);
}

int
cm_profiler_start(cm_error *err)
{
    cm_device *dev;

    if (cm_current_device(&dev, err) < 0) {
        return -1;
    }
    return CM_CALL0(err, cuProfilerStart);
}

int
cm_profiler_stop(cm_error *err)
{
    cm_device *dev;

    if (cm_current_device(&dev, err) < 0) {
        return -1;
    }
    return CM_CALL0(err, cuProfilerStop);
}

int
cm_peer_can_access(cm_device *dev, cm_device *peer, int *can, cm_error *err)
{
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    return CM_CALL(err, cuDeviceCanAccessPeer, can, dev->cudev, peer->cudev);
}
