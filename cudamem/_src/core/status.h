/* status.h: how core reports failure. Core functions return 0 or -1 and fill
 * a caller-provided cm_error; py/ turns it into a Python exception. Nothing
 * here is thread-local and nothing here knows Python. */
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

typedef struct cm_error {
    cm_error_kind kind;
    CUresult code;    /* CM_ERR_DRIVER */
    const char *call; /* the driver entry point, a string literal */
    const char *msg;  /* static, or owned by the subsystem that set it */
    /* CUDA_ERROR_OUT_OF_MEMORY of one of cudamem's allocations after its
     * recovery (stats.h): the device and the bytes asked for; else NULL
     * and 0. */
    struct cm_device *oom_dev;
    size_t oom_bytes;
    /* A sticky code (cm_error_is_sticky): the ordinal of the device whose
     * context it poisoned, when core knows it; else -1. */
    int device;
} cm_error;

/* Name of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"), or NULL when unknown.
 * From core's own table: the toolkit's stub library answers even
 * cuGetErrorName with CUDA_ERROR_STUB_LIBRARY. */
const char *cm_error_name(CUresult code);
/* Every known code in order: 0 while index is in range. */
int cm_error_table(size_t index, CUresult *code, const char **name);
/* Nonzero for the codes after which the context is unusable. */
int cm_error_is_sticky(CUresult code);

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
    return -1;
}

/* cm_fail with a printf-formatted message in a per-thread buffer, valid
 * until the thread's next cm_fail_fmt. */
int cm_fail_fmt(cm_error *err, cm_error_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
