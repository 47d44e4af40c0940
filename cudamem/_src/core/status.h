/* status.h: how core reports failure. Core functions return 0 or -1 and fill
 * a caller-provided cm_error, which holds its own text, so a second failure
 * (a cleanup's) never rewrites the first; py/ turns it into a Python
 * exception. Nothing here knows Python or is thread-local: core's only
 * thread-local state is context.c's per-thread context state (the selected
 * device, pushed contexts, entered operations, checked generations), kept
 * per thread because the driver's current context is (docs/design.rst). */
#ifndef CM_STATUS_H
#define CM_STATUS_H

#include <cuda.h>
#include <stddef.h>

typedef enum cm_error_kind {
    CM_ERR_DRIVER = 1, /* a driver call failed: code and call */
    CM_ERR_SUPPORT,    /* the driver cannot be used: msg */
    CM_ERR_NOMEM,      /* host memory for core's own bookkeeping */
    CM_ERR_VALUE,      /* an argument core rejected: msg */
    CM_ERR_FORK,       /* used in a child of an initialized parent */
    CM_ERR_STATE,      /* misuse of cudamem's state (a stale context): msg */
    CM_ERR_INTERRUPTED /* a poll hook ended the work early (staging.h): msg */
} cm_error_kind;

/* Room for a formatted message: it names values (a pointer, a shape, a
 * device) and may quote another message once; longer text is cut. */
#define CM_ERROR_TEXT 256

typedef struct cm_error {
    cm_error_kind kind;
    CUresult code;    /* CM_ERR_DRIVER */
    const char *call; /* the driver entry point, a string literal */
    /* The message, for the kinds that have one: read it with cm_error_msg.
     * A string that outlives the record (a literal, or a buffer kept for
     * the process), or NULL when the message is in text. */
    const char *msg;
    /* CUDA_ERROR_OUT_OF_MEMORY of one of cudamem's allocations after its
     * recovery (oom.h): the device and the bytes asked for; else NULL
     * and 0. */
    struct cm_device *oom_dev;
    size_t oom_bytes;
    /* When memory.h's limit refused it (call is cm_mem_limit_call): the
     * limit and the bytes the device held; else unset. */
    size_t oom_limit, oom_held;
    /* A sticky code (cm_error_is_sticky): the ordinal of the device whose
     * context it poisoned, when core knows it; else -1. */
    int device;
    /* cm__fail_fmt's message. Written only when an error is set, so that
     * declaring a cm_error costs nothing; copies carry it along. */
    char text[CM_ERROR_TEXT];
} cm_error;

/* Name of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"), or NULL when unknown.
 * From core's own table: the toolkit's stub library answers even
 * cuGetErrorName with CUDA_ERROR_STUB_LIBRARY. */
const char *cm_error_name(CUresult code);
/* Every known code in order: 0 while index is in range. */
int cm_error_table(size_t index, CUresult *code, const char **name);
/* Nonzero for the codes after which the context is unusable. */
int cm_error_is_sticky(CUresult code);

/* Out-of-memory recovery as the allocating records (memory.c, hostmem.c)
 * reach it: oom.c, above them, installs what it does (flushes and trims
 * of the queues and pools above those records), so that they call
 * nothing above them. Without it (core linked without oom.c) nothing is
 * recovered. */
typedef void (*cm_oom_recovery)(struct cm_device *dev);
void cm__oom_set_recovery(cm_oom_recovery recovery);
/* After a failed allocation on dev: when err is CUDA_ERROR_OUT_OF_MEMORY
 * and a recovery is installed, runs it and returns 1: the caller tries
 * once more, then calls cm__oom_mark. 0 otherwise (err untouched). */
int cm__oom_recover(struct cm_device *dev, const cm_error *err);
/* 1 when cm__oom_recover(dev, err) would recover, without recovering. */
int cm__oom_recoverable(const cm_error *err);
/* Marks err, when it is out of memory, as the failure of an allocation
 * of nbytes on dev that recovery did not help (the oom fields), unless
 * they are set already (memory.h's limit refused it). */
void cm__oom_mark(struct cm_device *dev, size_t nbytes, cm_error *err);

static inline int
cm_fail(cm_error *err, cm_error_kind kind, const char *msg)
{
    err->kind = kind;
    err->code = CUDA_SUCCESS;
    err->call = NULL;
    err->msg = msg;
    err->oom_dev = NULL;
    err->oom_bytes = 0;
    err->device = -1;
    err->text[0] = '\0';
    return -1;
}

/* The message of err: "" when it has none (a driver error's is its code). */
static inline const char *
cm_error_msg(const cm_error *err)
{
    return err->msg != NULL ? err->msg : err->text;
}

/* cm_fail with a printf-formatted message, kept in err->text. An argument
 * may be err's own message. */
int cm__fail_fmt(cm_error *err, cm_error_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
