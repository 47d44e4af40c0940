/* test_core_env.c: core/env.c linked alone (a leaf of
 * docs/architecture.rst): the one syntax of sizes in environment
 * variables, its overflow edge, and the fallback for whatever it refuses. */
#include "check.h"
#include "env.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void
accepts_digits(void)
{
    size_t v = 7;

    CHECK_INT_EQ(cm__parse_size("0", &v), 0);
    CHECK_UINT_EQ(v, 0);
    CHECK_INT_EQ(cm__parse_size("4194304", &v), 0);
    CHECK_UINT_EQ(v, 4194304);
    CHECK_INT_EQ(cm__parse_size("007", &v), 0);
    CHECK_UINT_EQ(v, 7);
}

/* Nothing strtoull would also take: no sign, blank, base prefix or
 * suffix; an empty value is malformed too. The output is left alone. */
static void
refuses_the_rest(void)
{
    static const char *const bad[] = {"",     "-5",  " 5", "+5", "5 ",
                                      "0x10", "1e3", "5k", "5.0"};
    size_t v = 42;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_INT_EQ(cm__parse_size(bad[i], &v), -1);
    }
    CHECK_UINT_EQ(v, 42);
}

static void
overflow_edge(void)
{
    char text[32];
    size_t v = 0;

    snprintf(text, sizeof(text), "%zu", (size_t)SIZE_MAX);
    CHECK_INT_EQ(cm__parse_size(text, &v), 0);
    CHECK_UINT_EQ(v, SIZE_MAX);
    /* SIZE_MAX is 18446744073709551615 on every platform cudamem builds
     * for (64-bit size_t): one more in the last digit overflows. */
    CHECK_INT_EQ(cm__parse_size("18446744073709551616", &v), -2);
    CHECK_INT_EQ(cm__parse_size("99999999999999999999999", &v), -2);
    CHECK_UINT_EQ(v, SIZE_MAX);
}

static void
env_fallback(void)
{
    CHECK_INT_EQ(unsetenv("CUDAMEM_TEST_ENV_SIZE"), 0);
    CHECK_UINT_EQ(cm__env_size("CUDAMEM_TEST_ENV_SIZE", 5), 5);
    CHECK_INT_EQ(setenv("CUDAMEM_TEST_ENV_SIZE", "65536", 1), 0);
    CHECK_UINT_EQ(cm__env_size("CUDAMEM_TEST_ENV_SIZE", 5), 65536);
    CHECK_INT_EQ(setenv("CUDAMEM_TEST_ENV_SIZE", "-1", 1), 0);
    CHECK_UINT_EQ(cm__env_size("CUDAMEM_TEST_ENV_SIZE", 5), 5);
    CHECK_INT_EQ(setenv("CUDAMEM_TEST_ENV_SIZE", "99999999999999999999999", 1),
                 0);
    CHECK_UINT_EQ(cm__env_size("CUDAMEM_TEST_ENV_SIZE", 5), 5);
    CHECK_INT_EQ(setenv("CUDAMEM_TEST_ENV_SIZE", "", 1), 0);
    CHECK_UINT_EQ(cm__env_size("CUDAMEM_TEST_ENV_SIZE", 5), 5);
}

static const check_test tests[] = {
    {"accepts_digits", accepts_digits, 0},
    {"refuses_the_rest", refuses_the_rest, 0},
    {"overflow_edge", overflow_edge, 0},
    {"env_fallback", env_fallback, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, NULL, NULL)
