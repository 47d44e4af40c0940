/* lockorder.h: the order in which core's locks nest, one level per lock
 * (outermost first), and in CUDAMEM_DEBUG builds its check: a thread takes
 * a lock only above every level it holds, or a recursive lock it holds
 * again. Release builds compile cm__lock/cm__unlock to the bare calls. */
#ifndef CM_LOCKORDER_H
#define CM_LOCKORDER_H

#include <pthread.h>
#include <sched.h>

typedef enum cm_lock_level {
    CM_LOCK_DRIVER = 1,   /* driver.c: loading the driver */
    CM_LOCK_DEVICES,      /* context.c: building the device table */
    CM_LOCK_HOSTMEM,      /* hostmem.c: the registration table */
    CM_LOCK_DEVICE,       /* dev->lock: the primary context */
    CM_LOCK_QUEUES,       /* dev->qlock (recursive): queues, pool slot */
    CM_LOCK_POOL,         /* pool.c: a device pool's lists */
    CM_LOCK_IPC,          /* ipc.c: the cache of opened handles */
    CM_LOCK_HOSTPOOL,     /* hostpool.c: cached page-locked blocks */
    CM_LOCK_STAGING_CONF, /* staging.c: chunk size and threads */
    CM_LOCK_STAGING_CREW, /* staging.c: the copy threads' work */
    CM_LOCK_CTXSYNC,      /* ctxsync.c: the synchronizing worker */
    CM_LOCK_CALLBACKS,    /* callback.c: the dispatcher's queue */
    CM_LOCK_HOLD,         /* dev->hold_lock: changes to the hold only */
    CM_LOCK_MEM_PENDING,  /* memory.c: a record's pending set (spin) */
    CM_LOCK_STREAMS,      /* stream.c: the table of live streams */
    CM_LOCK_STATS,        /* stats.c: a device's counters (spin) */
} cm_lock_level;

#ifdef CUDAMEM_DEBUG
/* Assert that this thread may take lock at level, and note it held. */
void cm__lockorder_take(const void *lock, cm_lock_level level);
/* Assert that this thread holds lock, and forget it. */
void cm__lockorder_drop(const void *lock);
#else
static inline void
cm__lockorder_take(const void *lock, cm_lock_level level)
{
    (void)lock;
    (void)level;
}

static inline void
cm__lockorder_drop(const void *lock)
{
    (void)lock;
}
#endif

static inline void
cm__lock(pthread_mutex_t *m, cm_lock_level level)
{
    cm__lockorder_take(m, level);
    pthread_mutex_lock(m);
}

static inline void
cm__unlock(pthread_mutex_t *m)
{
    cm__lockorder_drop(m);
    pthread_mutex_unlock(m);
}

/* A spin lock, for a few loads and stores that call nothing while it is
 * held: one locked instruction to take it when free (a mutex costs two,
 * with the release), a plain store to give it back. */
static inline void
cm__spin_lock(char *lock, cm_lock_level level)
{
    cm__lockorder_take(lock, level);
    while (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE)) {
        /* Wait reading, not writing, so the line is not bounced; a holder
         * that is not running (preempted, or valgrind's one thread at a
         * time) gets the processor after a while. */
        for (int spins = 0; __atomic_load_n(lock, __ATOMIC_RELAXED); spins++) {
            if (spins >= 64) {
                sched_yield();
            }
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#elif defined(__aarch64__)
            __asm__ __volatile__("yield");
#endif
        }
    }
}

static inline void
cm__spin_unlock(char *lock)
{
    cm__lockorder_drop(lock);
    __atomic_store_n(lock, 0, __ATOMIC_RELEASE);
}

#endif
