/* lockorder.c: the CUDAMEM_DEBUG check of lockorder.h's order, with the
 * locks this thread holds in a thread-local stack (debug builds only: a
 * release build compiles nothing here). */
#include "lockorder.h"

#ifdef CUDAMEM_DEBUG
#include <assert.h>
#include <execinfo.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* Deeper than any nesting in core: dev->lock, qlock (twice), a pool, a
 * queue, the hold and a record's spin lock. */
#define MAX_HELD 16

static _Thread_local struct {
    const void *lock;
    cm_lock_level level;
} held[MAX_HELD];
static _Thread_local int nheld;

void
cm__lockorder_take(const void *lock, cm_lock_level level)
{
    void *frames[32];

    for (int i = 0; i < nheld; i++) {
        /* Only dev->qlock is recursive: another lock taken twice is a
         * self-deadlock. */
        if (held[i].lock == lock ? level != CM_LOCK_QUEUES
                                 : held[i].level >= level) {
            fprintf(stderr,
                    "cudamem: lock order (core/lockorder.h): taking %p at "
                    "level %d while holding %p at level %d\n",
                    lock, (int)level, held[i].lock, (int)held[i].level);
            backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
            abort();
        }
    }
    assert(nheld < MAX_HELD && "too many locks held");
    held[nheld].lock = lock;
    held[nheld].level = level;
    nheld++;
}

void
cm__lockorder_drop(const void *lock)
{
    /* Usually the last taken; a few paths release out of order. */
    for (int i = nheld - 1; i >= 0; i--) {
        if (held[i].lock == lock) {
            for (; i + 1 < nheld; i++) {
                held[i] = held[i + 1];
            }
            nheld--;
            return;
        }
    }
    assert(0 && "unlocking a lock this thread does not hold");
}
#else
/* ISO C wants a declaration in every translation unit. */
typedef int cm__lockorder_release_build;
#endif
