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
    /* The driver documents these as leaving the context in an error state
     * that persists until the process ends (or the context is reset). */
    switch (code) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
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
