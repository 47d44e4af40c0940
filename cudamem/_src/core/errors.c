/* errors.c: the one table of CUresult names and the sticky-error rule.
 * Does not format messages: py/ owns the wording. */
#include "status.h"

#include "cuerrors.h"

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
