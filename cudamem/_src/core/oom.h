/* oom.h: memory pressure across core's subsystems: the snapshot of a
 * device's memory use (stats.h's counters with what its queue and the
 * pools hold), out-of-memory recovery and what an out-of-memory report
 * gives. Above the pools and queues it flushes and trims; the allocating
 * records reach the recovery through status.h's cm__oom_recover. */
#ifndef CM_OOM_H
#define CM_OOM_H

#include <stddef.h>

#include "stats.h"
#include "status.h"

struct cm_device;

/* A snapshot of dev's counters, its memory queue, its pool and the host
 * pool. */
void cm_stats_get(struct cm_device *dev, cm_stats *out);

/* Out-of-memory recovery, DESIGN section 2's second sanctioned call into
 * Python: py/ installs a hook that runs the garbage collector, taking the
 * GIL itself (core may call it from code running without it); core holds
 * none of its locks and no pushed context when it calls it. */
typedef void (*cm_oom_hook)(void);
void cm_oom_set_hook(cm_oom_hook hook);

/* The recovery that status.h's cm__oom_recover runs wherever oom.c is
 * linked (installed when the library loads): the hook, a flush of dev's
 * memory queue unless deferred, a trim of dev's pool, which first waits
 * for its free blocks still pending on streams, and a trim of the host
 * pool. A failed flush or trim is not reported: the allocation's error
 * is. */

/* What an out-of-memory report gives: dev's free and total memory
 * (cuMemGetInfo in its primary context), bytes pending release and bytes
 * cached by the pool. */
int cm_oom_info(struct cm_device *dev, size_t *free_bytes, size_t *total_bytes,
                size_t *pending, size_t *pool_cached, cm_error *err);

#endif
