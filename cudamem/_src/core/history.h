/* history.h: the record points of the memory history. Core calls
 * cm__history_note where it allocates and frees memory for a user; py/
 * installs the one hook that records them (history.c owns the pointer).
 * Off, a record point costs one load and one predictable branch. */
#ifndef CM_HISTORY_H
#define CM_HISTORY_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* PyTorch's trace actions, in its names' order. */
typedef enum cm_hist_action {
    CM_HIST_ALLOC,
    CM_HIST_FREE_REQUESTED,
    CM_HIST_FREE_COMPLETED,
    CM_HIST_SEGMENT_ALLOC,
    CM_HIST_SEGMENT_FREE,
    CM_HIST_ACTION_COUNT
} cm_hist_action;

/* What the memory is. */
typedef enum cm_hist_memory {
    CM_HIST_DEVICE,  /* cuMemAlloc, or a block of cudamem's pool */
    CM_HIST_MANAGED, /* cuMemAllocManaged */
    CM_HIST_PINNED,  /* page-locked host memory */
    CM_HIST_MAPPED,  /* mapped (also write-combined) host memory */
    CM_HIST_MEMORY_COUNT
} cm_hist_memory;

typedef struct cm_hist_event {
    cm_hist_action action;
    cm_hist_memory memory;
    int device;      /* the ordinal */
    uint64_t addr;   /* the device address; host memory: the host's */
    size_t size;     /* bytes asked for (a segment: bytes it holds) */
    uint64_t stream; /* the CUstream the memory is for; 0: none */
} cm_hist_event;

/* Runs on the thread that allocates or frees, possibly without the GIL
 * and with core locks held: it must not block on either. */
typedef void (*cm_history_hook)(const cm_hist_event *ev);

/* Installs hook (NULL: recording stops). Takes effect for record points
 * reached after it returns. */
void cm_history_set_hook(cm_history_hook hook);

/* history.c's; read through cm__history_note only. */
extern cm_history_hook cm__history_hook;

/* Whether a hook is installed: one load, for a record point that has work
 * to do before its notes. */
static inline int
cm__history_on(void)
{
    return __builtin_expect(
               __atomic_load_n(&cm__history_hook, __ATOMIC_RELAXED) != NULL,
               0) != 0;
}

static inline void
cm__history_note(cm_hist_action action, cm_hist_memory memory, int device,
                 uint64_t addr, size_t size, CUstream stream)
{
    cm_history_hook hook = __atomic_load_n(&cm__history_hook,
                                           __ATOMIC_ACQUIRE);

    if (__builtin_expect(hook != NULL, 0)) {
        cm_hist_event ev = {.action = action,
                            .memory = memory,
                            .device = device,
                            .addr = addr,
                            .size = size,
                            .stream = (uint64_t)(uintptr_t)stream};
        hook(&ev);
    }
}

#endif
