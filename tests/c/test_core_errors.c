/* test_core_errors.c: core/errors.c and status.h without a driver: each
 * cm_error owns its formatted text (a second failure on the same thread, as
 * a cleanup's, leaves the first record's message alone), messages that quote
 * their own record, copies, truncation, the name table and the way to
 * out-of-memory recovery. */
#include "check.h"
#include "status.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Two failures on one thread: the primary error, then a cleanup's into a
 * second record, as core's `ignored` records are filled. */
static void
two_records(void)
{
    cm_error first, ignored;

    CHECK_EQ(cm__fail_fmt(&first, CM_ERR_VALUE, "first failure: %d", 1), -1);
    CHECK_EQ(cm__fail_fmt(&ignored, CM_ERR_STATE, "cleanup failure: %s",
                          "device 0"),
             -1);
    CHECK_STR_EQ(cm_error_msg(&first), "first failure: 1");
    CHECK_EQ(first.kind, CM_ERR_VALUE);
    CHECK_STR_EQ(cm_error_msg(&ignored), "cleanup failure: device 0");
    CHECK_EQ(ignored.kind, CM_ERR_STATE);
}

/* cm__fail_fmt(err, ..., cm_error_msg(err)): wrapping a record's own
 * message, as core/stream.c and core/memory.c do. */
static void
quotes_itself(void)
{
    cm_error err;

    cm__fail_fmt(&err, CM_ERR_VALUE, "device %d is not visible", 3);
    cm__fail_fmt(&err, CM_ERR_VALUE, "cannot use stream %d: %s", 7,
                 cm_error_msg(&err));
    CHECK_STR_EQ(cm_error_msg(&err),
                 "cannot use stream 7: device 3 is not visible");
}

/* A copied record carries its message; the original may then change. */
static void
copies(void)
{
    cm_error a, b;

    cm__fail_fmt(&a, CM_ERR_STATE, "context %d was reset", 2);
    b = a;
    cm__fail_fmt(&a, CM_ERR_VALUE, "something else");
    CHECK_STR_EQ(cm_error_msg(&b), "context 2 was reset");
    CHECK_STR_EQ(cm_error_msg(&a), "something else");
}

/* cm_fail keeps a literal by pointer; a later cm__fail_fmt replaces it and
 * a later cm_fail replaces the text; a driver error has no message. */
static void
literal_and_driver(void)
{
    cm_error err;

    cm_fail(&err, CM_ERR_VALUE, "a literal");
    CHECK_STR_EQ(cm_error_msg(&err), "a literal");
    cm__fail_fmt(&err, CM_ERR_VALUE, "formatted %s", "text");
    CHECK_STR_EQ(cm_error_msg(&err), "formatted text");
    cm_fail(&err, CM_ERR_STATE, "another literal");
    CHECK_STR_EQ(cm_error_msg(&err), "another literal");
    cm_fail(&err, CM_ERR_NOMEM, NULL);
    CHECK_STR_EQ(cm_error_msg(&err), "");
}

/* Longer messages are cut to the buffer, still terminated. */
static void
truncation(void)
{
    char longer[3 * CM_ERROR_TEXT];
    cm_error err;

    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    cm__fail_fmt(&err, CM_ERR_VALUE, "%s", longer);
    CHECK_EQ(strlen(cm_error_msg(&err)), CM_ERROR_TEXT - 1);
    CHECK_EQ(strncmp(cm_error_msg(&err), longer, CM_ERROR_TEXT - 1), 0);
}

/* Threads formatting at once each keep their own records' text. */
static void *
format_many(void *arg)
{
    int id = (int)(size_t)arg;
    cm_error errs[64];
    char want[64];
    int bad = 0;

    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 64; i++) {
            cm__fail_fmt(&errs[i], CM_ERR_VALUE, "thread %d error %d", id, i);
        }
        for (int i = 0; i < 64; i++) {
            snprintf(want, sizeof(want), "thread %d error %d", id, i);
            bad |= strcmp(cm_error_msg(&errs[i]), want) != 0;
        }
    }
    return (void *)(size_t)bad;
}

static void
threads(void)
{
    pthread_t t[4];
    void *bad;

    for (size_t i = 0; i < 4; i++) {
        CHECK_EQ(pthread_create(&t[i], NULL, format_many, (void *)i), 0);
    }
    for (size_t i = 0; i < 4; i++) {
        CHECK_EQ(pthread_join(t[i], &bad), 0);
        CHECK_EQ(bad, NULL);
    }
}

/* The name table and the sticky rule, against cuda.h's values. */
static void
names(void)
{
    CUresult code;
    const char *name;

    CHECK_STR_EQ(cm_error_name(CUDA_ERROR_OUT_OF_MEMORY),
                 "CUDA_ERROR_OUT_OF_MEMORY");
    /* A code outside the enum on purpose: drivers return newer codes. */
    /* NOLINTNEXTLINE(clang-analyzer-optin.core.EnumCastOutOfRange) */
    CHECK_EQ(cm_error_name((CUresult)123456), NULL);
    CHECK_TRUE(cm_error_table(0, &code, &name) == 0 && code == CUDA_SUCCESS &&
               strcmp(name, "CUDA_SUCCESS") == 0);
    CHECK_TRUE(cm_error_is_sticky(CUDA_ERROR_ILLEGAL_ADDRESS));
    CHECK_TRUE(!cm_error_is_sticky(CUDA_ERROR_OUT_OF_MEMORY));
}

static struct cm_device *recovered;
static int recoveries;

static void
fake_recovery(struct cm_device *dev)
{
    recovered = dev;
    recoveries++;
}

static void
out_of_memory(cm_error *err)
{
    cm_fail(err, CM_ERR_DRIVER, NULL);
    err->code = CUDA_ERROR_OUT_OF_MEMORY;
    err->call = "cuMemAlloc";
}

/* The way from an out-of-memory error to oom.c's recovery: nothing
 * without one installed (errors.c linked without oom.c), the recovery for
 * an out-of-memory driver error only, and the mark of what recovery did
 * not help. */
static void
oom_recovery(void)
{
    struct cm_device *dev = (struct cm_device *)&recoveries;
    cm_error err, other;

    out_of_memory(&err);
    CHECK_EQ(cm__oom_recover(dev, &err), 0);
    cm__oom_set_recovery(fake_recovery);
    CHECK_EQ(cm__oom_recover(dev, &err), 1);
    CHECK_EQ(recoveries, 1);
    CHECK_PTR_EQ(recovered, dev);
    cm_fail(&other, CM_ERR_NOMEM, "out of host memory");
    CHECK_EQ(cm__oom_recover(dev, &other), 0);
    other.kind = CM_ERR_DRIVER;
    other.code = CUDA_ERROR_INVALID_VALUE;
    CHECK_EQ(cm__oom_recover(dev, &other), 0);
    CHECK_EQ(recoveries, 1);
    cm__oom_mark(dev, 4096, &other);
    CHECK_PTR_EQ(other.oom_dev, NULL);
    CHECK_UINT_EQ(other.oom_bytes, 0);
    cm__oom_mark(dev, 4096, &err);
    CHECK_PTR_EQ(err.oom_dev, dev);
    CHECK_UINT_EQ(err.oom_bytes, 4096);
    cm__oom_set_recovery(NULL);
}

static const check_test tests[] = {
    {"two_records", two_records, 0},
    {"quotes_itself", quotes_itself, 0},
    {"copies", copies, 0},
    {"literal_and_driver", literal_and_driver, 0},
    {"truncation", truncation, 0},
    {"threads", threads, 0},
    {"names", names, 0},
    {"oom_recovery", oom_recovery, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, NULL, NULL)
