/* errors.c: the one table of CUresult names, the sticky-error rule, the
 * formatting of messages that name a value into the record's own text and
 * the way from an out-of-memory error to its recovery (oom.c's). py/ owns
 * the exception classes and numba's wording of driver errors. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuerrors.h"

int
cm__fail_fmt(cm_error *err, cm_error_kind kind, const char *fmt, ...)
{
    char msg[sizeof(err->text)];
    va_list ap;
    int n;

    /* Through a copy: an argument may be err's own message. Only the
     * message's bytes are written, not the whole buffer. */
    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) {
        n = 0;
        msg[0] = '\0';
    }
    else if ((size_t)n >= sizeof(msg)) {
        n = (int)sizeof(msg) - 1;
    }
    cm_fail(err, kind, NULL);
    memcpy(err->text, msg, (size_t)n + 1);
    return -1;
}

const char *
cm_error_name(CUresult code)
{
    switch ((int)code) {
#define CM_ERROR_CASE(name, value)                                            \
    case value:                                                               \
        return #name;
        CM_CUDA_ERRORS(CM_ERROR_CASE)
#undef CM_ERROR_CASE
    }
    return NULL;
}

int
cm_error_is_sticky(CUresult code)
{
    switch (code) {
#define CM_STICKY_CASE(name) case name:
        CM_CUDA_STICKY_ERRORS(CM_STICKY_CASE)
#undef CM_STICKY_CASE
        return 1;
    default:
        return 0;
    }
}

int
cm_error_table(size_t index, CUresult *code, const char **name)
{
    static const struct {
        CUresult code;
        const char *name;
    } table[] = {
#define CM_ERROR_ROW(n, value) {(CUresult)(value), #n},
        CM_CUDA_ERRORS(CM_ERROR_ROW)
#undef CM_ERROR_ROW
    };

    if (index >= sizeof(table) / sizeof(table[0])) {
        return -1;
    }
    *code = table[index].code;
    *name = table[index].name;
    return 0;
}

static cm_oom_recovery oom_recovery;

void
cm__oom_set_recovery(cm_oom_recovery recovery)
{
    __atomic_store_n(&oom_recovery, recovery, __ATOMIC_RELEASE);
}

static int
is_oom(const cm_error *err)
{
    return err->kind == CM_ERR_DRIVER && err->code == CUDA_ERROR_OUT_OF_MEMORY;
}

int
cm__oom_recoverable(const cm_error *err)
{
    return is_oom(err) &&
           __atomic_load_n(&oom_recovery, __ATOMIC_ACQUIRE) != NULL;
}

int
cm__oom_recover(struct cm_device *dev, const cm_error *err)
{
    cm_oom_recovery recovery = __atomic_load_n(&oom_recovery,
                                               __ATOMIC_ACQUIRE);

    if (!is_oom(err) || recovery == NULL) {
        return 0;
    }
    recovery(dev);
    return 1;
}

void
cm__oom_mark(struct cm_device *dev, size_t nbytes, cm_error *err)
{
    if (is_oom(err) && err->oom_dev == NULL) {
        err->oom_dev = dev;
        err->oom_bytes = nbytes;
    }
}
