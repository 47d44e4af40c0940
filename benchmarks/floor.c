/* floor.c: the raw driver floor, measured straight through cuGetProcAddress
 * with no cudamem code in between: allocation, small and large copies,
 * strided 2-D copies, events, streams and transfer bandwidth. It owns only
 * these numbers; comparing cudamem or its peers against them is elsewhere.
 *
 * Built as a program (build/floor) it times every row in a process of its
 * own. Built with -DFLOOR_LIBRARY (build/libfloor.so) it exports floor_open,
 * floor_time, floor_close and floor_rows instead, so that a benchmark can
 * time the same calls in its own process, beside the libraries it compares
 * (benchmarks/floorlib.py): what a driver call costs depends on the
 * process (the simulator's cuMemAlloc maps memory, and mmap costs more in
 * a larger address space). */
#include <cuda.h>
#include <cudaTypedefs.h>

#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

/* Buffers each latency benchmark rotates through, so that no call finds its
 * bytes still warm in a cache from the call before. */
#define NBUF 16
#define SLOT MIB /* the largest latency copy; also one 2-D source */

/* The strided slice: ROWS rows of WIDTH bytes out of rows of PITCH bytes. */
#define ROWS 256
#define WIDTH 512
#define PITCH 4096

#define MAX_LATENCY 64
#define MAX_BANDWIDTH 64

/* numba's deferred frees (CUDA_DEALLOCS_COUNT 10, cudamem's default too):
 * the eleventh pending free frees them all, oldest first. */
#define DEFERRED 11

/* Every entry point, at the oldest ABI with the semantics used here that
 * cudaTypedefs.h declares publicly (cuDevicePrimaryCtxRelease's 7000 ABI is
 * internal to it). The PFN_<name>_v<version> type makes the compiler check
 * each pairing. */
#define DRIVER_ENTRIES(X)                                                      \
    X(cuInit, 2000)                                                            \
    X(cuDriverGetVersion, 2020)                                                \
    X(cuGetErrorName, 6000)                                                    \
    X(cuDeviceGet, 2000)                                                       \
    X(cuDeviceGetName, 2000)                                                   \
    X(cuDevicePrimaryCtxRetain, 7000)                                          \
    X(cuDevicePrimaryCtxRelease, 11000)                                        \
    X(cuCtxGetCurrent, 4000)                                                   \
    X(cuCtxSetCurrent, 4000)                                                   \
    X(cuCtxSynchronize, 2000)                                                  \
    X(cuMemAlloc, 3020)                                                        \
    X(cuMemFree, 3020)                                                         \
    X(cuMemAllocAsync, 11020)                                                  \
    X(cuMemFreeAsync, 11020)                                                   \
    X(cuMemHostAlloc, 2020)                                                    \
    X(cuMemFreeHost, 2000)                                                     \
    X(cuMemHostRegister, 6050)                                                 \
    X(cuMemHostUnregister, 4000)                                               \
    X(cuMemcpyHtoD, 3020)                                                      \
    X(cuMemcpyDtoH, 3020)                                                      \
    X(cuMemcpy2D, 3020)                                                        \
    X(cuStreamCreate, 2000)                                                    \
    X(cuStreamDestroy, 4000)                                                   \
    X(cuEventCreate, 2000)                                                     \
    X(cuEventDestroy, 4000)                                                    \
    X(cuEventRecord, 2000)                                                     \
    X(cuEventQuery, 2000)                                                      \
    X(cuEventSynchronize, 2000)                                                \
    X(cuEventElapsedTime, 2000)

#define DECLARE_ENTRY(name, version) static PFN_##name##_v##version p_##name;
DRIVER_ENTRIES(DECLARE_ENTRY)
#undef DECLARE_ENTRY

typedef struct latency {
    char op[64];
    size_t bytes;
    double median_ns, p10_ns, p90_ns;
} latency;

typedef struct bandwidth {
    const char *direction;
    const char *memory;
    size_t bytes;
    double gbps;
} bandwidth;

/* Everything that must be released, failure or not. */
static struct {
    void *lib;
    CUdevice dev;
    int ctx_retained;
    CUcontext prev_ctx;     /* current before setup, current again after */
    CUdeviceptr dpool;      /* NBUF slots of SLOT bytes */
    char *hpool;            /* pageable, NBUF slots */
    char *ppool;            /* pinned, NBUF slots */
    char *rpool;            /* registered (cudamem's pinned arrays), NBUF */
    int rpool_registered;
    CUstream stream;
    CUevent events[NBUF];   /* timing disabled */
    CUevent start, stop;    /* timing enabled */
    CUdeviceptr dbig;       /* bandwidth buffers of max_bytes */
    char *hbig;
    char *pbig;
    CUdeviceptr deferred[DEFERRED]; /* op_alloc_free_deferred's, or 0 */
    int n_deferred;
} R;

static struct {
    const char *json_path;
    int quick;
    size_t max_bytes;
} opt;

static latency lat[MAX_LATENCY];
static int nlat;
static bandwidth bw[MAX_BANDWIDTH];
static int nbw;

static void release_all(int check);
static void die(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

#ifdef FLOOR_LIBRARY
/* A library cannot exit its host process: die() returns to the exported
 * call that was running, which reports the message through floor_error(). */
static jmp_buf die_env;
static char die_msg[512];
#endif

static void
die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
#ifdef FLOOR_LIBRARY
    vsnprintf(die_msg, sizeof(die_msg), fmt, ap);
#else
    fputs("floor: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
#endif
    va_end(ap);
    release_all(0);
#ifdef FLOOR_LIBRARY
    longjmp(die_env, 1);
#else
    exit(1);
#endif
}

static void
die_cu(const char *entry, CUresult rc)
{
    const char *name = NULL;

    /* The stub library fails even cuGetErrorName; the number always shows. */
    if (p_cuGetErrorName == NULL || p_cuGetErrorName(rc, &name) != CUDA_SUCCESS)
        name = NULL;
    die("%s failed: CUresult %d%s%s%s", entry, (int)rc, name ? " (" : "",
        name ? name : "", name ? ")" : "");
}

#define CHECK(entry, args)                                                     \
    do {                                                                       \
        CUresult rc_ = p_##entry args;                                         \
        if (rc_ != CUDA_SUCCESS)                                               \
            die_cu(#entry, rc_);                                               \
    } while (0)

/* On the failure path (check == 0) errors are ignored: the first one has
 * already been reported and the rest are its echoes. */
static void
release_all(int check)
{
    static int releasing;
    CUresult rc;
    int i;

    if (releasing)
        return;
    releasing = 1;
#define RELEASE(entry, args)                                                   \
    do {                                                                       \
        rc = p_##entry args;                                                   \
        if (check && rc != CUDA_SUCCESS) {                                     \
            releasing = 0;                                                     \
            check = 0;                                                         \
            die_cu(#entry, rc);                                                \
        }                                                                      \
    } while (0)
    if (R.ctx_retained) {
        /* Nothing may still be using the buffers freed below. */
        RELEASE(cuCtxSynchronize, ());
        for (i = 0; i < NBUF; i++) {
            if (R.events[i] != NULL) {
                RELEASE(cuEventDestroy, (R.events[i]));
                R.events[i] = NULL;
            }
        }
        if (R.start != NULL) {
            RELEASE(cuEventDestroy, (R.start));
            R.start = NULL;
        }
        if (R.stop != NULL) {
            RELEASE(cuEventDestroy, (R.stop));
            R.stop = NULL;
        }
        if (R.stream != NULL) {
            RELEASE(cuStreamDestroy, (R.stream));
            R.stream = NULL;
        }
        if (R.dpool != 0) {
            RELEASE(cuMemFree, (R.dpool));
            R.dpool = 0;
        }
        if (R.dbig != 0) {
            RELEASE(cuMemFree, (R.dbig));
            R.dbig = 0;
        }
        for (i = 0; i < DEFERRED; i++) {
            if (R.deferred[i] != 0) {
                RELEASE(cuMemFree, (R.deferred[i]));
                R.deferred[i] = 0;
            }
        }
        R.n_deferred = 0;
        if (R.ppool != NULL) {
            RELEASE(cuMemFreeHost, (R.ppool));
            R.ppool = NULL;
        }
        if (R.pbig != NULL) {
            RELEASE(cuMemFreeHost, (R.pbig));
            R.pbig = NULL;
        }
        if (R.rpool_registered) {
            RELEASE(cuMemHostUnregister, (R.rpool));
            R.rpool_registered = 0;
        }
        RELEASE(cuCtxSetCurrent, (R.prev_ctx));
        R.ctx_retained = 0;
        RELEASE(cuDevicePrimaryCtxRelease, (R.dev));
    }
#undef RELEASE
    free(R.hpool);
    R.hpool = NULL;
    free(R.rpool);
    R.rpool = NULL;
    free(R.hbig);
    R.hbig = NULL;
    /* R.lib stays loaded: unloading the real driver can race its own
     * threads, and exit follows anyway. */
    releasing = 0;
}

/* ---------------------------------------------------------------------------
 * Loading the driver. */

static void
load_driver(const char *path, int *is_sim)
{
    PFN_cuGetProcAddress_v12000 getproc;
    CUdriverProcAddressQueryResult status;
    CUresult rc;

    R.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (R.lib == NULL)
        die("cannot load %s: %s", path, dlerror());
    *(void **)&getproc = dlsym(R.lib, "cuGetProcAddress_v2");
    if (getproc == NULL)
        die("%s has no cuGetProcAddress_v2 (driver older than CUDA 12.0?)",
            path);
    *is_sim = dlsym(R.lib, "cusim_is_simulator") != NULL;

    /* A success with a NULL pointer also means "not found". */
#define RESOLVE(name, version)                                                 \
    status = CU_GET_PROC_ADDRESS_SUCCESS;                                      \
    rc = getproc(#name, (void **)&p_##name, version,                           \
                 CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);                  \
    if (rc != CUDA_SUCCESS || p_##name == NULL) {                              \
        p_##name = NULL;                                                       \
        die("cuGetProcAddress(\"%s\", %d) failed: CUresult %d, status %d",     \
            #name, version, (int)rc, (int)status);                             \
    }
    DRIVER_ENTRIES(RESOLVE)
#undef RESOLVE
}

/* ---------------------------------------------------------------------------
 * Timing. */

static uint64_t
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Nearest rank on sorted samples. */
static double
percentile(const double *sorted, int n, int pct)
{
    return sorted[(int)(((long)(n - 1) * pct + 50) / 100)];
}

typedef void (*op_fn)(unsigned i);

/* Times `fn` as `op` of `bytes`: warm-up, then samples of `batch` calls each
 * (batch chosen so that one sample is long against clock_gettime), until the
 * sample count or the time budget runs out. */
static void
time_op(const char *op, size_t bytes, op_fn fn)
{
    enum { MAX_SAMPLES = 2000 };
    static double samples[MAX_SAMPLES];
    int max_samples = opt.quick ? 200 : MAX_SAMPLES;
    int min_samples = opt.quick ? 20 : 200;
    uint64_t budget = opt.quick ? 20000000u : 500000000u;
    unsigned warm = opt.quick ? 20 : 200, batch, i = 0, k;
    uint64_t t0, t1, start;
    double per_call;
    int n = 0;
    latency *l;

    if (nlat == MAX_LATENCY)
        die("too many latency rows");
    t0 = now_ns();
    for (k = 0; k < warm; k++)
        fn(i++);
    t1 = now_ns();
    per_call = (double)(t1 - t0) / warm;
    batch = per_call >= 2000.0 ? 1 : (unsigned)(2000.0 / (per_call + 1.0)) + 1;
    if (batch > 256)
        batch = 256;

    start = now_ns();
    while (n < max_samples) {
        t0 = now_ns();
        for (k = 0; k < batch; k++)
            fn(i++);
        t1 = now_ns();
        samples[n++] = (double)(t1 - t0) / batch;
        if (n >= min_samples && t1 - start > budget)
            break;
    }
    qsort(samples, n, sizeof(samples[0]), cmp_double);
    l = &lat[nlat++];
    snprintf(l->op, sizeof(l->op), "%s", op);
    l->bytes = bytes;
    l->median_ns = percentile(samples, n, 50);
    l->p10_ns = percentile(samples, n, 10);
    l->p90_ns = percentile(samples, n, 90);
}

/* ---------------------------------------------------------------------------
 * The operations. Each takes the call's index and rotates through the
 * NBUF slots with it; `cur_bytes` is the size under test. */

static size_t cur_bytes;

static size_t
slot(unsigned i)
{
    return (size_t)(i % NBUF) * SLOT;
}

static void
op_alloc_free(unsigned i)
{
    CUdeviceptr p;

    (void)i;
    CHECK(cuMemAlloc, (&p, cur_bytes));
    CHECK(cuMemFree, (p));
}

/* The same calls in the order a library with numba's API makes them: each
 * free deferred until the eleventh, then all, oldest first. The pending
 * ones carry over from one timing to the next, as a library's queue does;
 * release_all frees what is left. */
static void
op_alloc_free_deferred(unsigned i)
{
    CUdeviceptr p;
    int k;

    (void)i;
    CHECK(cuMemAlloc, (&p, cur_bytes));
    R.deferred[R.n_deferred++] = p;
    if (R.n_deferred < DEFERRED)
        return;
    R.n_deferred = 0;
    for (k = 0; k < DEFERRED; k++) {
        p = R.deferred[k];
        R.deferred[k] = 0; /* not freed again after a failure */
        CHECK(cuMemFree, (p));
    }
}

/* Stream-ordered, from the device's default pool: cuda.core's only
 * allocation, and cudamem's AsyncMemoryManager's. */
static void
op_alloc_free_async(unsigned i)
{
    CUdeviceptr p;

    (void)i;
    CHECK(cuMemAllocAsync, (&p, cur_bytes, R.stream));
    CHECK(cuMemFreeAsync, (p, R.stream));
}

/* to_device: a new allocation filled from pageable memory, then freed. */
static void
op_alloc_htod_free(unsigned i)
{
    CUdeviceptr p;

    CHECK(cuMemAlloc, (&p, cur_bytes));
    CHECK(cuMemcpyHtoD, (p, R.hpool + slot(i), cur_bytes));
    CHECK(cuMemFree, (p));
}

static void
op_htod_pageable(unsigned i)
{
    CHECK(cuMemcpyHtoD, (R.dpool + slot(i), R.hpool + slot(i), cur_bytes));
}

static void
op_htod_pinned(unsigned i)
{
    CHECK(cuMemcpyHtoD, (R.dpool + slot(i), R.ppool + slot(i), cur_bytes));
}

static void
op_dtoh_pageable(unsigned i)
{
    CHECK(cuMemcpyDtoH, (R.hpool + slot(i), R.dpool + slot(i), cur_bytes));
}

static void
op_dtoh_pinned(unsigned i)
{
    CHECK(cuMemcpyDtoH, (R.ppool + slot(i), R.dpool + slot(i), cur_bytes));
}

static void
copy2d_dtoh(char *host, unsigned i)
{
    CUDA_MEMCPY2D c;

    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = R.dpool + slot(i);
    c.srcPitch = PITCH;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = host + slot(i);
    c.dstPitch = WIDTH;
    c.WidthInBytes = WIDTH;
    c.Height = ROWS;
    CHECK(cuMemcpy2D, (&c));
}

static void
op_2d_dtoh_pageable(unsigned i)
{
    copy2d_dtoh(R.hpool, i);
}

static void
op_2d_dtoh_pinned(unsigned i)
{
    copy2d_dtoh(R.ppool, i);
}

/* The same into registered pages, which is how cudamem pins host memory:
 * on an H100 cudamem's slice into them took 3 times the floor's into
 * cuMemHostAlloc memory, one cuMemcpy2D each. */
static void
op_2d_dtoh_registered(unsigned i)
{
    copy2d_dtoh(R.rpool, i);
}

static void
op_event_record_query(unsigned i)
{
    CUevent ev = R.events[i % NBUF];
    CUresult rc;

    CHECK(cuEventRecord, (ev, R.stream));
    /* On a GPU the record may not have reached the device yet. */
    rc = p_cuEventQuery(ev);
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_NOT_READY)
        die_cu("cuEventQuery", rc);
}

static void
op_stream_create_destroy(unsigned i)
{
    CUstream s;

    (void)i;
    CHECK(cuStreamCreate, (&s, CU_STREAM_DEFAULT));
    CHECK(cuStreamDestroy, (s));
}

static void
op_ctx_synchronize(unsigned i)
{
    (void)i;
    CHECK(cuCtxSynchronize, ());
}

/* The rows with a fixed name, which floor_time also finds by it. */
static const struct {
    const char *name;
    op_fn fn;
} named_ops[] = {
    {"cuMemAlloc+cuMemFree", op_alloc_free},
    {"cuMemAlloc+cuMemFree deferred", op_alloc_free_deferred},
    {"cuMemAllocAsync+cuMemFreeAsync", op_alloc_free_async},
    {"cuMemAlloc+cuMemcpyHtoD+cuMemFree", op_alloc_htod_free},
    {"cuMemcpyHtoD pageable", op_htod_pageable},
    {"cuMemcpyHtoD pinned", op_htod_pinned},
    {"cuMemcpyDtoH pageable", op_dtoh_pageable},
    {"cuMemcpyDtoH pinned", op_dtoh_pinned},
    {"cuEventRecord+cuEventQuery", op_event_record_query},
    {"cuStreamCreate+cuStreamDestroy", op_stream_create_destroy},
    {"cuCtxSynchronize idle", op_ctx_synchronize},
};

static op_fn
find_op(const char *name)
{
    size_t k;

    for (k = 0; k < sizeof(named_ops) / sizeof(named_ops[0]); k++) {
        if (strcmp(named_ops[k].name, name) == 0)
            return named_ops[k].fn;
    }
    die("no latency row named \"%s\"", name);
}

static void
time_named(const char *op, size_t bytes)
{
    cur_bytes = bytes;
    time_op(op, bytes, find_op(op));
}

static void
run_latency(void)
{
    static const size_t sizes[] = {8, 4 * KIB, MIB};
    static const char *const copies[] = {
        "cuMemcpyHtoD pageable",
        "cuMemcpyHtoD pinned",
        "cuMemcpyDtoH pageable",
        "cuMemcpyDtoH pinned",
    };
    size_t s, c;
    char name[64];

    for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        time_named("cuMemAlloc+cuMemFree", sizes[s]);
        time_named("cuMemAllocAsync+cuMemFreeAsync", sizes[s]);
    }
    /* The stream-ordered frees still queued run before the next timing. */
    CHECK(cuCtxSynchronize, ());
    time_named("cuMemAlloc+cuMemcpyHtoD+cuMemFree", 8);
    for (c = 0; c < sizeof(copies) / sizeof(copies[0]); c++) {
        for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
            time_named(copies[c], sizes[s]);
    }
    /* The slice and the contiguous copy of the same bytes, side by side. */
    snprintf(name, sizeof(name), "cuMemcpy2D DtoH %dx%d/%d pageable", ROWS,
             WIDTH, PITCH);
    time_op(name, (size_t)ROWS * WIDTH, op_2d_dtoh_pageable);
    time_named("cuMemcpyDtoH pageable", (size_t)ROWS * WIDTH);
    snprintf(name, sizeof(name), "cuMemcpy2D DtoH %dx%d/%d pinned", ROWS,
             WIDTH, PITCH);
    time_op(name, (size_t)ROWS * WIDTH, op_2d_dtoh_pinned);
    time_named("cuMemcpyDtoH pinned", (size_t)ROWS * WIDTH);
    snprintf(name, sizeof(name), "cuMemcpy2D DtoH %dx%d/%d registered", ROWS,
             WIDTH, PITCH);
    time_op(name, (size_t)ROWS * WIDTH, op_2d_dtoh_registered);

    time_named("cuEventRecord+cuEventQuery", 0);
    CHECK(cuCtxSynchronize, ());
    time_named("cuStreamCreate+cuStreamDestroy", 0);
    time_named("cuCtxSynchronize idle", 0);
}

/* ---------------------------------------------------------------------------
 * Bandwidth: event-timed runs of synchronous copies on the legacy stream. */

static double
time_copies(int htod, const char *host, size_t bytes, int count)
{
    float ms;
    int k;

    CHECK(cuEventRecord, (R.start, NULL));
    for (k = 0; k < count; k++) {
        if (htod)
            CHECK(cuMemcpyHtoD, (R.dbig, host, bytes));
        else
            CHECK(cuMemcpyDtoH, ((void *)host, R.dbig, bytes));
    }
    CHECK(cuEventRecord, (R.stop, NULL));
    CHECK(cuEventSynchronize, (R.stop));
    CHECK(cuEventElapsedTime, (&ms, R.start, R.stop));
    return ms;
}

static void
run_bandwidth(void)
{
    enum { MAX_TRIALS = 5 };
    static const struct {
        int htod;
        const char *memory;
        int pinned;
    } kinds[] = {
        {1, "pageable", 0},
        {1, "pinned", 1},
        {0, "pageable", 0},
        {0, "pinned", 1},
    };
    size_t target = opt.quick ? 8 * MIB : 256 * MIB;
    int trials = opt.quick ? 1 : MAX_TRIALS;
    double gbps[MAX_TRIALS];
    size_t bytes, k;
    int t, count, last = 0;

    for (bytes = 64 * KIB; !last; bytes *= 4) {
        if (bytes >= opt.max_bytes) {
            bytes = opt.max_bytes;
            last = 1;
        }
        /* Enough copies per trial that event resolution does not matter. */
        count = (int)(target / bytes);
        if (count < 2)
            count = 2;
        if (count > 1024)
            count = 1024;
        for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
            const char *host = kinds[k].pinned ? R.pbig : R.hbig;
            bandwidth *b;

            if (nbw == MAX_BANDWIDTH)
                die("too many bandwidth rows");
            time_copies(kinds[k].htod, host, bytes, 1);
            for (t = 0; t < trials; t++) {
                double ms = time_copies(kinds[k].htod, host, bytes, count);
                gbps[t] = ms > 0.0 ? (double)bytes * count / (ms * 1e6) : 0.0;
            }
            qsort(gbps, trials, sizeof(gbps[0]), cmp_double);
            b = &bw[nbw++];
            b->direction = kinds[k].htod ? "HtoD" : "DtoH";
            b->memory = kinds[k].memory;
            b->bytes = bytes;
            b->gbps = gbps[trials / 2];
        }
    }
}

/* ---------------------------------------------------------------------------
 * Output. */

static const char *
human(size_t bytes, char *buf, size_t size)
{
    if (bytes >= GIB && bytes % GIB == 0)
        snprintf(buf, size, "%zu GiB", bytes / GIB);
    else if (bytes >= MIB && bytes % MIB == 0)
        snprintf(buf, size, "%zu MiB", bytes / MIB);
    else if (bytes >= KIB && bytes % KIB == 0)
        snprintf(buf, size, "%zu KiB", bytes / KIB);
    else
        snprintf(buf, size, "%zu B", bytes);
    return buf;
}

static void
print_table(const char *path, int version, const char *device, int is_sim)
{
    char hb[32];
    int i;

    printf("driver %s (version %d), device 0: %s%s%s\n\n", path, version,
           device, is_sim ? " [simulator]" : "", opt.quick ? " [quick]" : "");
    printf("%-38s %9s %11s %11s %11s\n", "latency", "bytes", "median ns",
           "p10 ns", "p90 ns");
    for (i = 0; i < nlat; i++) {
        printf("%-38s %9s %11.1f %11.1f %11.1f\n", lat[i].op,
               lat[i].bytes ? human(lat[i].bytes, hb, sizeof(hb)) : "-",
               lat[i].median_ns, lat[i].p10_ns, lat[i].p90_ns);
    }
    printf("\n%-10s %-9s %9s %9s\n", "bandwidth", "memory", "bytes", "GB/s");
    for (i = 0; i < nbw; i++) {
        printf("%-10s %-9s %9s %9.2f\n", bw[i].direction, bw[i].memory,
               human(bw[i].bytes, hb, sizeof(hb)), bw[i].gbps);
    }
}

static void
json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void
write_json(const char *path, const char *driver, int version,
           const char *device, int is_sim)
{
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    FILE *f;
    int i;

    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
    f = fopen(path, "w");
    if (f == NULL)
        die("cannot write %s: %s", path, strerror(errno));
    fputs("{\n  \"driver\": ", f);
    json_string(f, driver);
    fprintf(f, ",\n  \"driver_version\": %d,\n  \"device\": ", version);
    json_string(f, device);
    fprintf(f,
            ",\n  \"simulator\": %s,\n  \"quick\": %s,\n"
            "  \"date\": \"%s\",\n",
            is_sim ? "true" : "false", opt.quick ? "true" : "false", date);
    fputs("  \"latency\": [", f);
    for (i = 0; i < nlat; i++) {
        fputs(i ? ",\n    {\"op\": " : "\n    {\"op\": ", f);
        json_string(f, lat[i].op);
        fprintf(f,
                ", \"bytes\": %zu, \"median_ns\": %.1f, \"p10_ns\": %.1f, "
                "\"p90_ns\": %.1f}",
                lat[i].bytes, lat[i].median_ns, lat[i].p10_ns, lat[i].p90_ns);
    }
    fputs("\n  ],\n  \"bandwidth\": [", f);
    for (i = 0; i < nbw; i++) {
        fprintf(f,
                "%s    {\"direction\": \"%s\", \"memory\": \"%s\", "
                "\"bytes\": %zu, \"gbps\": %.3f}",
                i ? ",\n" : "\n", bw[i].direction, bw[i].memory, bw[i].bytes,
                bw[i].gbps);
    }
    fputs("\n  ]\n}\n", f);
    if (ferror(f) | fclose(f))
        die("cannot write %s", path);
}

/* ---------------------------------------------------------------------------
 * Set-up and main. */

static void
usage(FILE *f)
{
    fputs("usage: floor [--quick] [--json PATH] [--max-bytes N[K|M|G]]\n"
          "  times raw CUDA driver calls; the library is $CUDAMEM_DRIVER\n"
          "  (default libcuda.so.1)\n",
          f);
}

static size_t
parse_bytes(const char *s)
{
    unsigned long long v;
    unsigned shift = 0;
    char *end;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *s == '-')
        return 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    /* 0 is out of range for the caller, so it also stands for "invalid". */
    if (*end != '\0' || v > (~0ULL >> shift))
        return 0;
    return (size_t)(v << shift);
}

static void
parse_args(int argc, char **argv)
{
    int i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            opt.quick = 1;
        }
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            opt.json_path = argv[++i];
        }
        else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc) {
            opt.max_bytes = parse_bytes(argv[++i]);
            if (opt.max_bytes < 64 * KIB || opt.max_bytes > 64 * GIB) {
                fprintf(stderr, "floor: --max-bytes must be 64K..64G\n");
                exit(2);
            }
        }
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        else {
            usage(stderr);
            exit(2);
        }
    }
}

static void
setup(void)
{
    CUcontext ctx;
    void *p;
    int i;

    CHECK(cuCtxGetCurrent, (&R.prev_ctx));
    CHECK(cuDevicePrimaryCtxRetain, (&ctx, R.dev));
    R.ctx_retained = 1;
    CHECK(cuCtxSetCurrent, (ctx));

    CHECK(cuMemAlloc, (&R.dpool, (size_t)NBUF * SLOT));
    CHECK(cuMemHostAlloc, (&p, (size_t)NBUF * SLOT, 0));
    R.ppool = p;
    R.hpool = malloc((size_t)NBUF * SLOT);
    if (R.hpool == NULL)
        die("out of host memory");
    /* Touch every page now, so no first-touch fault lands in a timing. */
    memset(R.hpool, 1, (size_t)NBUF * SLOT);
    memset(R.ppool, 2, (size_t)NBUF * SLOT);
    if (posix_memalign(&p, 4096, (size_t)NBUF * SLOT) != 0)
        die("out of host memory");
    R.rpool = p;
    memset(R.rpool, 3, (size_t)NBUF * SLOT);
    CHECK(cuMemHostRegister, (R.rpool, (size_t)NBUF * SLOT, 0));
    R.rpool_registered = 1;
    CHECK(cuMemcpyHtoD, (R.dpool, R.hpool, (size_t)NBUF * SLOT));

    CHECK(cuStreamCreate, (&R.stream, CU_STREAM_NON_BLOCKING));
    for (i = 0; i < NBUF; i++)
        CHECK(cuEventCreate, (&R.events[i], CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate, (&R.start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate, (&R.stop, CU_EVENT_DEFAULT));

    if (opt.max_bytes == 0)
        return; /* no bandwidth rows */
    CHECK(cuMemAlloc, (&R.dbig, opt.max_bytes));
    CHECK(cuMemHostAlloc, (&p, opt.max_bytes, 0));
    R.pbig = p;
    R.hbig = malloc(opt.max_bytes);
    if (R.hbig == NULL)
        die("out of host memory");
    memset(R.hbig, 3, opt.max_bytes);
    memset(R.pbig, 4, opt.max_bytes);
}

#ifdef FLOOR_LIBRARY
#define FLOOR_API __attribute__((visibility("default")))

/* floor_open(driver): 0, or -1 with floor_error() saying why. Loads the
 * driver at `driver` (the one the process already uses, to share its
 * state), makes device 0's primary context current and sets up the
 * latency rows' buffers. */
FLOOR_API int
floor_open(const char *driver)
{
    int is_sim;

    if (R.ctx_retained) {
        /* Not die(): that would close the floor that is open. */
        snprintf(die_msg, sizeof(die_msg), "already open");
        return -1;
    }
    if (setjmp(die_env))
        return -1;
    load_driver(driver, &is_sim);
    CHECK(cuInit, (0));
    CHECK(cuDeviceGet, (&R.dev, 0));
    opt.max_bytes = 0;
    setup();
    return 0;
}

/* floor_time(op, bytes, calls): ns per call of `calls` calls of the latency
 * row named `op` (named_ops) on `bytes`, timed here, with no caller's loop
 * in the time; negative on failure, which also closes the floor. */
FLOOR_API double
floor_time(const char *op, size_t bytes, unsigned calls)
{
    static unsigned next;
    uint64_t t0;
    op_fn fn;
    unsigned k;

    if (setjmp(die_env))
        return -1.0;
    if (!R.ctx_retained)
        die("floor_time: not open");
    if (calls == 0 || bytes > SLOT)
        die("floor_time: %u calls of %zu bytes", calls, bytes);
    fn = find_op(op);
    cur_bytes = bytes;
    t0 = now_ns();
    for (k = 0; k < calls; k++)
        fn(next++);
    return (double)(now_ns() - t0) / calls;
}

/* floor_close(): 0, or -1 with floor_error(); releases what floor_open set
 * up and makes the context current before it current again. */
FLOOR_API int
floor_close(void)
{
    if (setjmp(die_env))
        return -1;
    release_all(1);
    return 0;
}

FLOOR_API const char *
floor_error(void)
{
    return die_msg;
}

/* floor_rows(): the names floor_time takes, one per line. */
FLOOR_API const char *
floor_rows(void)
{
    static char rows[1024];
    size_t k, used = 0;

    if (rows[0] == '\0') {
        for (k = 0; k < sizeof(named_ops) / sizeof(named_ops[0]) &&
                    used < sizeof(rows);
             k++) {
            used += (size_t)snprintf(rows + used, sizeof(rows) - used, "%s\n",
                                     named_ops[k].name);
        }
    }
    return rows;
}

#else

int
main(int argc, char **argv)
{
    const char *path = getenv("CUDAMEM_DRIVER");
    char device[256];
    int is_sim, version;

    parse_args(argc, argv);
    if (path == NULL || path[0] == '\0')
        path = "libcuda.so.1";
    load_driver(path, &is_sim);
    if (opt.max_bytes == 0)
        opt.max_bytes = is_sim ? 64 * MIB : GIB;

    CHECK(cuInit, (0));
    CHECK(cuDriverGetVersion, (&version));
    CHECK(cuDeviceGet, (&R.dev, 0));
    CHECK(cuDeviceGetName, (device, (int)sizeof(device), R.dev));
    setup();

    run_latency();
    run_bandwidth();
    CHECK(cuCtxSynchronize, ());

    print_table(path, version, device, is_sim);
    if (opt.json_path != NULL)
        write_json(opt.json_path, path, version, device, is_sim);
    release_all(1);
    return 0;
}

#endif /* FLOOR_LIBRARY */
