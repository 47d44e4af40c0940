/* test_core_stats.c: core/stats.c linked alone (the floor plan's leaf:
 * docs/architecture.rst): the per-device counters of each kind, their
 * peaks, requested bytes, allocations and frees and their reset, a
 * recount that leaves the peaks alone, updates from several
 * threads at once adding up exactly, a snapshot taken at one instant,
 * and the held bytes that the memory limit checks, atomically against
 * racing threads. */
#include "check.h"
#include "context.h"
#include "lockorder.h"
#include "stats.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

static cm_device dev;

static void
setup(void)
{
    memset(&dev, 0, sizeof(dev));
}

static cm_counts
read_kind(cm_stat_kind kind)
{
    cm_counts out[CM_STAT_KINDS];

    cm__stats_read(&dev, out);
    return out[kind];
}

/* Adds and subtractions move bytes and count; the peaks keep the most. */
static void
add_and_sub(void)
{
    cm_counts c;

    cm__stats_add(&dev, CM_STAT_DEVICE, 1000, 1000);
    cm__stats_add(&dev, CM_STAT_DEVICE, 24, 24);
    cm__stats_sub(&dev, CM_STAT_DEVICE, 1000, 1000);
    c = read_kind(CM_STAT_DEVICE);
    CHECK_UINT_EQ(c.bytes, 24);
    CHECK_UINT_EQ(c.count, 1);
    CHECK_UINT_EQ(c.peak_bytes, 1024);
    CHECK_UINT_EQ(c.peak_count, 2);
}

/* Each kind counts on its own. */
static void
kinds_apart(void)
{
    cm_counts out[CM_STAT_KINDS];

    cm__stats_add(&dev, CM_STAT_PINNED, 4096, 4096);
    cm__stats_add(&dev, CM_STAT_MANAGED, 512, 512);
    cm__stats_read(&dev, out);
    CHECK_UINT_EQ(out[CM_STAT_PINNED].bytes, 4096);
    CHECK_UINT_EQ(out[CM_STAT_MANAGED].bytes, 512);
    CHECK_UINT_EQ(out[CM_STAT_DEVICE].bytes, 0);
    CHECK_UINT_EQ(out[CM_STAT_MAPPED].count, 0);
    CHECK_UINT_EQ(out[CM_STAT_WRITE_COMBINED].peak_bytes, 0);
}

/* A reset brings the peaks down to what is held now. */
static void
reset_peaks(void)
{
    cm_counts c;

    cm__stats_add(&dev, CM_STAT_MAPPED, 300, 300);
    cm__stats_add(&dev, CM_STAT_MAPPED, 200, 200);
    cm__stats_sub(&dev, CM_STAT_MAPPED, 300, 300);
    cm_stats_reset_peaks(&dev);
    c = read_kind(CM_STAT_MAPPED);
    CHECK_UINT_EQ(c.peak_bytes, 200);
    CHECK_UINT_EQ(c.peak_count, 1);
    cm__stats_add(&dev, CM_STAT_MAPPED, 50, 50);
    CHECK_UINT_EQ(read_kind(CM_STAT_MAPPED).peak_bytes, 250);
}

/* hostpool.c's recount of a cached block: counted in, peaks untouched,
 * then counted out as cm_host_free does: one free in all. */
static void
recount(void)
{
    cm_counts c;

    cm__stats_add(&dev, CM_STAT_PINNED, 4096, 4096);
    cm__stats_sub(&dev, CM_STAT_PINNED, 4096, 4096);
    cm__stats_recount(&dev, CM_STAT_PINNED, 8192, 8192);
    c = read_kind(CM_STAT_PINNED);
    CHECK_UINT_EQ(c.bytes, 8192);
    CHECK_UINT_EQ(c.count, 1);
    CHECK_UINT_EQ(c.peak_bytes, 4096);
    CHECK_UINT_EQ(c.peak_count, 1);
    CHECK_UINT_EQ(c.requested, 8192);
    CHECK_UINT_EQ(c.frees, 0);
    cm__stats_sub(&dev, CM_STAT_PINNED, 8192, 8192);
    c = read_kind(CM_STAT_PINNED);
    CHECK_UINT_EQ(c.bytes, 0);
    CHECK_UINT_EQ(c.requested, 0);
    CHECK_UINT_EQ(c.allocations, 1);
    CHECK_UINT_EQ(c.frees, 1);
}

/* Requested bytes move with the occupied ones, apart, with their own
 * peak; allocations and frees only grow. */
static void
requested_and_counts(void)
{
    cm_counts c;

    cm__stats_add(&dev, CM_STAT_DEVICE, 512, 300);
    cm__stats_add(&dev, CM_STAT_DEVICE, 4096, 4000);
    cm__stats_sub(&dev, CM_STAT_DEVICE, 4096, 4000);
    cm__stats_add(&dev, CM_STAT_DEVICE, 256, 1);
    c = read_kind(CM_STAT_DEVICE);
    CHECK_UINT_EQ(c.bytes, 768);
    CHECK_UINT_EQ(c.requested, 301);
    CHECK_UINT_EQ(c.peak_bytes, 4608);
    CHECK_UINT_EQ(c.peak_requested, 4300);
    CHECK_UINT_EQ(c.allocations, 3);
    CHECK_UINT_EQ(c.frees, 1);
    CHECK_UINT_EQ(c.count, c.allocations - c.frees);
}

/* Resetting the peaks leaves the accumulated counts; resetting those
 * leaves the peaks and what is held, and zeroes the rejections. */
static void
reset_accumulated(void)
{
    size_t held, rejections;
    cm_counts c;

    cm__stats_add(&dev, CM_STAT_MANAGED, 2000, 1999);
    cm__stats_add(&dev, CM_STAT_MANAGED, 100, 100);
    cm__stats_sub(&dev, CM_STAT_MANAGED, 2000, 1999);
    cm__stats_reject(&dev);
    cm_stats_reset_peaks(&dev);
    c = read_kind(CM_STAT_MANAGED);
    CHECK_UINT_EQ(c.peak_requested, 100);
    CHECK_UINT_EQ(c.allocations, 2);
    CHECK_UINT_EQ(c.frees, 1);
    cm__stats_add(&dev, CM_STAT_MANAGED, 3000, 3000);
    cm_stats_reset_accumulated(&dev);
    c = read_kind(CM_STAT_MANAGED);
    CHECK_UINT_EQ(c.allocations, 0);
    CHECK_UINT_EQ(c.frees, 0);
    CHECK_UINT_EQ(c.bytes, 3100);
    CHECK_UINT_EQ(c.requested, 3100);
    CHECK_UINT_EQ(c.peak_requested, 3100);
    cm__stats_read_held(&dev, &held, &rejections);
    CHECK_UINT_EQ(rejections, 0);
    cm__stats_sub(&dev, CM_STAT_MANAGED, 100, 100);
    c = read_kind(CM_STAT_MANAGED);
    CHECK_UINT_EQ(c.frees, 1);
    CHECK_UINT_EQ(c.count, 1);
}

#define THREADS 4
#define ROUNDS 10000

static void *
churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        cm__stats_add(&dev, CM_STAT_DEVICE, 3, 2);
        cm__stats_add(&dev, CM_STAT_DEVICE, 5, 4);
        cm__stats_sub(&dev, CM_STAT_DEVICE, 3, 2);
    }
    return NULL;
}

/* Records update the counters from any thread. */
static void
threads(void)
{
    pthread_t t[THREADS];
    cm_counts c;

    for (int i = 0; i < THREADS; i++) {
        CHECK_EQ(pthread_create(&t[i], NULL, churn, NULL), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    c = read_kind(CM_STAT_DEVICE);
    CHECK_UINT_EQ(c.bytes, (size_t)THREADS * ROUNDS * 5);
    CHECK_UINT_EQ(c.count, (size_t)THREADS * ROUNDS);
    CHECK_UINT_EQ(c.requested, (size_t)THREADS * ROUNDS * 4);
    CHECK_UINT_EQ(c.allocations, (size_t)THREADS * ROUNDS * 2);
    CHECK_UINT_EQ(c.frees, (size_t)THREADS * ROUNDS);
    CHECK_LE(c.peak_bytes, (size_t)THREADS * ROUNDS * 8);
    CHECK_GE(c.peak_bytes, c.bytes);
}

static int writer_started;

static void *
write_one(void *arg)
{
    (void)arg;
    __atomic_store_n(&writer_started, 1, __ATOMIC_RELEASE);
    cm__stats_add(&dev, CM_STAT_DEVICE, 24, 8);
    return NULL;
}

static void *
read_one(void *arg)
{
    cm__stats_read(&dev, arg);
    return NULL;
}

static int
counts_equal(const cm_counts *a, const cm_counts *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

/* An update and a read are each one step under the device's lock,
 * driven here by holding it: a writer that started meanwhile has changed
 * nothing (the old per-field atomics would have changed every field, one
 * at a time), and a reader gets all of the state before it or all of the
 * state after. */
static void
snapshot(void)
{
    struct timespec pause = {0, 20 * 1000 * 1000};
    cm_counts before[CM_STAT_KINDS], seen[CM_STAT_KINDS], after;
    pthread_t writer, reader;

    cm__stats_add(&dev, CM_STAT_DEVICE, 1000, 1000);
    cm__stats_read(&dev, before);
    cm__spin_lock(&dev.stats_lock, CM_LOCK_STATS);
    CHECK_EQ(pthread_create(&writer, NULL, write_one, NULL), 0);
    CHECK_EQ(pthread_create(&reader, NULL, read_one, seen), 0);
    while (!__atomic_load_n(&writer_started, __ATOMIC_ACQUIRE)) {
        nanosleep(&pause, NULL);
    }
    /* Time for the writer to run into the lock. */
    nanosleep(&pause, NULL);
    CHECK_TRUE(
        counts_equal(&dev.counts[CM_STAT_DEVICE], &before[CM_STAT_DEVICE]));
    cm__spin_unlock(&dev.stats_lock);
    pthread_join(writer, NULL);
    pthread_join(reader, NULL);
    after = read_kind(CM_STAT_DEVICE);
    CHECK_UINT_EQ(after.bytes, 1024);
    CHECK_UINT_EQ(after.count, 2);
    CHECK_UINT_EQ(after.requested, 1008);
    CHECK_UINT_EQ(after.allocations, 2);
    CHECK_TRUE(counts_equal(&seen[CM_STAT_DEVICE], &before[CM_STAT_DEVICE]) ||
               counts_equal(&seen[CM_STAT_DEVICE], &after));
}

/* The held bytes: a hold up to the limit, inclusive, goes through; one
 * past it (or larger than the limit itself: no wrap-around) is refused,
 * adds nothing and says what is held; 0 is no limit. */
static void
hold_limit(void)
{
    size_t held = 0, rejections = 1;

    CHECK_EQ(cm__stats_hold(&dev, 600, 1000, &held), 0);
    CHECK_EQ(cm__stats_hold(&dev, 400, 1000, &held), 0);
    CHECK_EQ(cm__stats_hold(&dev, 1, 1000, &held), -1);
    CHECK_UINT_EQ(held, 1000);
    CHECK_EQ(cm__stats_hold(&dev, (size_t)-1, 1000, &held), -1);
    cm__stats_unhold(&dev, 400);
    CHECK_EQ(cm__stats_hold(&dev, (size_t)-1 - 600, 1000, &held), -1);
    CHECK_UINT_EQ(held, 600);
    CHECK_EQ(cm__stats_hold(&dev, 1 << 20, 0, &held), 0);
    cm__stats_reject(&dev);
    cm__stats_read_held(&dev, &held, &rejections);
    CHECK_UINT_EQ(held, 600 + (1 << 20));
    CHECK_UINT_EQ(rejections, 1);
}

#define LIMIT_UNITS 1000

static void *
race(void *arg)
{
    size_t held, *got = arg;

    for (int i = 0; i < ROUNDS; i++) {
        if (cm__stats_hold(&dev, 7, 7 * LIMIT_UNITS, &held) == 0) {
            (*got)++;
        }
    }
    return NULL;
}

/* Threads holding at once never pass the limit together: exactly the
 * limit's worth goes through. */
static void
hold_race(void)
{
    pthread_t t[THREADS];
    size_t got[THREADS] = {0}, total = 0, held, rejections;

    for (int i = 0; i < THREADS; i++) {
        CHECK_EQ(pthread_create(&t[i], NULL, race, &got[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += got[i];
    }
    cm__stats_read_held(&dev, &held, &rejections);
    CHECK_UINT_EQ(total, LIMIT_UNITS);
    CHECK_UINT_EQ(held, 7 * LIMIT_UNITS);
}

static const check_test tests[] = {
    {"add_and_sub", add_and_sub, 0},
    {"kinds_apart", kinds_apart, 0},
    {"reset_peaks", reset_peaks, 0},
    {"recount", recount, 0},
    {"threads", threads, 0},
    {"snapshot", snapshot, 0},
    {"hold_limit", hold_limit, 0},
    {"hold_race", hold_race, 0},
    {"requested_and_counts", requested_and_counts, 0},
    {"reset_accumulated", reset_accumulated, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, setup, NULL)
