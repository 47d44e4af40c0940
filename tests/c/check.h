/* check.h: the C tests' assertions. Each test program counts its checks and
 * ends with CHECK_DONE(), which prints "N passed, N failed" and sets the exit
 * status. */
#ifndef CM_TEST_CHECK_H
#define CM_TEST_CHECK_H

#include <stdio.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (cond) {                                                            \
            check_passed++;                                                    \
        } else {                                                               \
            check_failed++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                    \
        }                                                                      \
    } while (0)

/* A driver call expected to return `want` (a CUresult). */
#define CHECK_CU(want, call)                                                   \
    do {                                                                       \
        int got_ = (int)(call);                                                \
        if (got_ == (int)(want)) {                                             \
            check_passed++;                                                    \
        } else {                                                               \
            check_failed++;                                                    \
            fprintf(stderr, "%s:%d: %s returned %d, expected %d\n", __FILE__,  \
                    __LINE__, #call, got_, (int)(want));                       \
        }                                                                      \
    } while (0)

#define CHECK_OK(call) CHECK_CU(0, call)

#define CHECK_DONE()                                                           \
    do {                                                                       \
        printf("%d passed, %d failed\n", check_passed, check_failed);         \
        return check_failed ? 1 : 0;                                           \
    } while (0)

#endif
