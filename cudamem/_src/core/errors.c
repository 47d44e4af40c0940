/* errors.c: the one table of CUresult names, the sticky-error rule and
 * the formatting of messages that name a value into the record's own text.
 * py/ owns the exception classes and numba's wording of driver errors. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuerrors.h"

int
cm_fail_fmt(cm_error *err, cm_error_kind kind, const char *fmt, ...)
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
#define CM_ERROR_CASE(name, value)                                             \
    case value:                                                                \
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
