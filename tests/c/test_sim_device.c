/* test_sim_device.c: the simulator's gate, cuInit, versions, error names,
 * cuGetProcAddress, control API, devices, contexts and peer access (entry.c
 * and device.c). Variants of the environment run in forked children of a
 * process that has not called cuInit yet. */
#include "check.h"
#include "sim.h"

#include <cudaProfiler.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The first ABIs, exported under their plain names as libcuda does. */
#undef cuGetProcAddress
#undef cuDevicePrimaryCtxSetFlags
#undef cuDeviceGetUuid
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                          cuuint64_t flags);
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

#define GIB (1ULL << 30)

static const sim_proc *const all_tables[] = {
    sim_procs_entry, sim_procs_device, sim_procs_memory,
    sim_procs_copy,  sim_procs_stream, sim_procs_ipc,
};

static size_t
table_len(int t)
{
    const size_t *n[] = {&sim_nprocs_entry,  &sim_nprocs_device,
                         &sim_nprocs_memory, &sim_nprocs_copy,
                         &sim_nprocs_stream, &sim_nprocs_ipc};
    return *n[t];
}

static void *
proc(const char *name, int version, cuuint64_t flags,
     CUdriverProcAddressQueryResult *status, CUresult *r)
{
    void *fn = (void *)1;

    *r = cuGetProcAddress_v2(name, &fn, version, flags, status);
    return fn;
}

static int
entry_index(const char *name)
{
    int i;

    for (i = 0; i < cusim_entry_count(); i++) {
        if (strcmp(cusim_entry_stats(i, NULL, NULL), name) == 0)
            return i;
    }
    return -1;
}

static unsigned long long
calls_of(const char *name)
{
    unsigned long long calls = 0;

    cusim_entry_stats(entry_index(name), &calls, NULL);
    return calls;
}

static void
uuid_string(const CUuuid *u, char out[41])
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    int i, n = sprintf(out, "GPU-");

    for (i = 0; i < 16; i++) {
        n += sprintf(out + n, "%02x", b[i]);
        if (i == 3 || i == 5 || i == 7 || i == 9)
            n += sprintf(out + n, "-");
    }
}

/* Runs fn in a forked child; the child's checks decide its exit status. */
static int
in_child(void (*fn)(void))
{
    int status = -1;
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        check_passed = check_failed = 0;
        fn();
        fflush(stderr);
        _exit(check_failed ? 1 : 0);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* ---------------------------------------------------------------------------
 * Environment variants (each in a fresh, uninitialized child). */

static char uuids[4][41]; /* of the 4 physical devices, filled by a child */
static int uuid_pipe[2];

static void
child_uuids(void)
{
    CUuuid u;
    int i;

    setenv("CUDAMEM_SIM_DEVICES", "4", 1);
    setenv("CUDAMEM_SIM_MEMORY", "256M", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    CHECK_OK(cuInit(0));
    for (i = 0; i < 4; i++) {
        CHECK_OK(cuDeviceGetUuid_v2(&u, i));
        uuid_string(&u, uuids[i]);
    }
    CHECK_EQ(write(uuid_pipe[1], uuids, sizeof(uuids)),
             (ssize_t)sizeof(uuids));
}

static void
visible(const char *cvd, int want_count, const int *want_phys)
{
    char name[64], expect[64];
    CUuuid u;
    int n = -1, i;

    setenv("CUDAMEM_SIM_DEVICES", "4", 1);
    setenv("CUDAMEM_SIM_MEMORY", "256M", 1);
    setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
    if (want_count == 0) {
        CHECK_CU(CUDA_ERROR_NO_DEVICE, cuInit(0));
        CHECK_CU(CUDA_ERROR_NO_DEVICE, cuInit(0));
        CHECK_CU(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&n));
        return;
    }
    CHECK_OK(cuInit(0));
    CHECK_OK(cuDeviceGetCount(&n));
    CHECK_EQ(n, want_count);
    for (i = 0; i < n && i < want_count; i++) {
        char s[41];

        CHECK_OK(cuDeviceGetName(name, sizeof(name), i));
        snprintf(expect, sizeof(expect),
                 "cudamem simulated device %d (H100-class)", want_phys[i]);
        CHECK_STR_EQ(name, expect);
        CHECK_OK(cuDeviceGetUuid_v2(&u, i));
        uuid_string(&u, s);
        CHECK_STR_EQ(s, uuids[want_phys[i]]);
    }
}

static void
child_cvd_order(void)
{
    visible("2,0", 2, (const int[]){2, 0});
}

static void
child_cvd_stop_at_invalid(void)
{
    visible("1,7,0", 1, (const int[]){1});
}

static void
child_cvd_duplicate(void)
{
    visible("3, 3,1", 1, (const int[]){3});
}

static void
child_cvd_empty(void)
{
    visible("", 0, NULL);
}

static void
child_cvd_minus_one(void)
{
    visible("-1", 0, NULL);
}

static void
child_cvd_garbage(void)
{
    visible("abc,0", 0, NULL);
}

static void
child_cvd_uuid_prefix(void)
{
    char cvd[64];

    /* "GPU-" and the first 8 hex digits of device 3, then a full UUID. */
    snprintf(cvd, sizeof(cvd), "%.12s,%s", uuids[3], uuids[1]);
    visible(cvd, 2, (const int[]){3, 1});
}

static void
child_cvd_bad_uuid(void)
{
    visible("GPU-zzzz,0", 0, NULL);
}

static void
child_no_devices(void)
{
    int n = -1;

    setenv("CUDAMEM_SIM_DEVICES", "0", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    CHECK_CU(CUDA_ERROR_NO_DEVICE, cuInit(0));
    CHECK_CU(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&n));
}

static void
child_memory_and_limits(void)
{
    size_t bytes = 0;
    int n = 0;

    setenv("CUDAMEM_SIM_DEVICES", "99", 1);
    setenv("CUDAMEM_SIM_MEMORY", "2G", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    CHECK_OK(cuInit(0));
    CHECK_OK(cuDeviceGetCount(&n));
    CHECK_EQ(n, SIM_MAX_DEVICES);
    CHECK_OK(cuDeviceTotalMem(&bytes, SIM_MAX_DEVICES - 1));
    CHECK_EQ(bytes, 2 * GIB);
}

static void
child_no_peer(void)
{
    CUcontext c0, c1;
    int can = -1;

    setenv("CUDAMEM_SIM_DEVICES", "2", 1);
    setenv("CUDAMEM_SIM_MEMORY", "256M", 1);
    setenv("CUDAMEM_SIM_NO_PEER", "1", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    CHECK_OK(cuInit(0));
    CHECK_OK(cuDeviceCanAccessPeer(&can, 0, 1));
    CHECK_EQ(can, 0);
    CHECK_OK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK_OK(cuCtxPushCurrent(c0));
    CHECK_CU(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, cuCtxEnablePeerAccess(c1, 0));
    CHECK_OK(cuCtxPopCurrent(NULL));
    CHECK_OK(cuDevicePrimaryCtxRelease(0));
    CHECK_OK(cuDevicePrimaryCtxRelease(1));
}

static void
child_driver_version(void)
{
    CUdriverProcAddressQueryResult st;
    CUresult r;
    void *fn;
    int v = 0;

    setenv("CUDAMEM_SIM_DRIVER_VERSION", "12040", 1);
    CHECK_OK(cuDriverGetVersion(&v));
    CHECK_EQ(v, 12040);
    /* Only the status is specified for a version above the driver's. */
    (void)proc("cuCtxCreate", 13000, 0, &st, &r);
    CHECK_EQ(r, CUDA_ERROR_INVALID_VALUE);
    fn = proc("cuCtxCreate", 12040, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == (void *)cuCtxCreate_v2);
}

/* Rules before cuInit, in a child so that the parent stays pristine. */
static void
child_before_init(void)
{
    const char *s = NULL;
    CUcontext ctx = (CUcontext)1;
    CUdevice d;
    CUresult r;
    void *fn;
    int v = 0, n = 0;

    CHECK_OK(cuDriverGetVersion(&v));
    CHECK_EQ(v, SIM_DRIVER_VERSION_DEFAULT);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDriverGetVersion(NULL));
    CHECK_OK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s));
    fn = proc("cuMemAlloc", 3020, 0, NULL, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn != NULL);
    CHECK_CU(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&n));
    CHECK_CU(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGet(&d, 0));
    CHECK_CU(CUDA_ERROR_NOT_INITIALIZED, cuCtxGetCurrent(&ctx));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuInit(1));
    setenv("CUDAMEM_SIM_MEMORY", "256M", 1);
    CHECK_OK(cuInit(0));
    CHECK_OK(cuInit(0));
    CHECK_OK(cuDeviceGetCount(&n));
    CHECK_EQ(n, 1);
    CHECK_OK(cuCtxGetCurrent(&ctx));
    CHECK_EQ(ctx, NULL);
}

static void
child_of_initialized(void)
{
    const char *s;
    int n, v;

    CHECK_CU(CUDA_ERROR_NOT_INITIALIZED, cuInit(0));
    CHECK_CU(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&n));
    CHECK_CU(CUDA_ERROR_NOT_INITIALIZED, cuDriverGetVersion(&v));
    CHECK_CU(CUDA_ERROR_NOT_INITIALIZED, cuGetErrorName(CUDA_SUCCESS, &s));
}

static void
test_environments(void)
{
    int r;

    CHECK_EQ(in_child(child_before_init), 0);
    CHECK_EQ(pipe(uuid_pipe), 0);
    CHECK_EQ(in_child(child_uuids), 0);
    CHECK_EQ(read(uuid_pipe[0], uuids, sizeof(uuids)), (ssize_t)sizeof(uuids));
    close(uuid_pipe[0]);
    close(uuid_pipe[1]);
    CHECK_TRUE(strncmp(uuids[0], "GPU-", 4) == 0 && strlen(uuids[0]) == 40);
    CHECK_NE(strcmp(uuids[0], uuids[1]), 0);
    CHECK_EQ(in_child(child_cvd_order), 0);
    CHECK_EQ(in_child(child_cvd_stop_at_invalid), 0);
    CHECK_EQ(in_child(child_cvd_duplicate), 0);
    CHECK_EQ(in_child(child_cvd_empty), 0);
    CHECK_EQ(in_child(child_cvd_minus_one), 0);
    CHECK_EQ(in_child(child_cvd_garbage), 0);
    CHECK_EQ(in_child(child_cvd_uuid_prefix), 0);
    CHECK_EQ(in_child(child_cvd_bad_uuid), 0);
    CHECK_EQ(in_child(child_no_devices), 0);
    CHECK_EQ(in_child(child_memory_and_limits), 0);
    CHECK_EQ(in_child(child_no_peer), 0);
    r = in_child(child_driver_version);
    CHECK_EQ(r, 0);
}

/* ---------------------------------------------------------------------------
 * cuGetProcAddress. */

static void
test_proc_address(void)
{
    CUdriverProcAddressQueryResult st;
    const sim_proc *ptds = NULL;
    CUresult r;
    void *fn;
    int t;
    size_t i;

    fn = proc("cuDevicePrimaryCtxRelease", 10000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && st == CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK_TRUE(fn != NULL && fn != (void *)cuDevicePrimaryCtxRelease_v2);
    fn = proc("cuDevicePrimaryCtxRelease", 11000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS &&
               fn == (void *)cuDevicePrimaryCtxRelease_v2);
    fn = proc("cuDevicePrimaryCtxRelease", 13000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS &&
               fn == (void *)cuDevicePrimaryCtxRelease_v2);
    fn = proc("cuCtxCreate", 12000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == (void *)cuCtxCreate_v2);
    fn = proc("cuCtxCreate", 12050, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == (void *)cuCtxCreate_v4);
    fn = proc("cuDeviceTotalMem", 12000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == (void *)cuDeviceTotalMem_v2);

    /* cuda.h 12.0 on: CUDA_SUCCESS with pfn NULL, the status says why. */
    fn = proc("cuCtxCreate", 3000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    fn = proc("cuNoSuchThing", 12000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    fn = proc("cuMemAlloc_v2", 12000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    fn = proc("cuInit", 13010, 0, &st, &r);
    CHECK_EQ(r, CUDA_ERROR_INVALID_VALUE);
    fn = proc("cuInit", 12000, 4, &st, &r);
    CHECK_EQ(r, CUDA_ERROR_INVALID_VALUE);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuGetProcAddress_v2(NULL, &fn, 12000, 0, NULL));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuGetProcAddress_v2("cuInit", NULL, 12000, 0, NULL));

    /* The 11030 ABI, and both ABIs through the table. */
    fn = NULL;
    CHECK_OK(cuGetProcAddress("cuInit", &fn, 12000, 0));
    CHECK_EQ(fn, (void *)cuInit);
    CHECK_OK(cuGetProcAddress("cuNope", &fn, 12000, 0));
    CHECK_EQ(fn, NULL);
    fn = proc("cuGetProcAddress", 11030, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == (void *)cuGetProcAddress);
    fn = proc("cuGetProcAddress", 12000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == (void *)cuGetProcAddress_v2);

    /* Every row of every file is what a lookup at its own version finds,
     * and names a counted entry point. */
    for (t = 0; t < 6; t++) {
        for (i = 0; i < table_len(t); i++) {
            const sim_proc *row = &all_tables[t][i];
            cuuint64_t fl = row->ptds
                                ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                : CU_GET_PROC_ADDRESS_LEGACY_STREAM;

            fn = proc(row->name, row->version, fl, &st, &r);
            if (r != CUDA_SUCCESS || fn != row->fn)
                fprintf(stderr, "row %s %d ptds=%d not found as itself\n",
                        row->name, row->version, row->ptds);
            CHECK_TRUE(r == CUDA_SUCCESS && fn == row->fn);
            if (entry_index(row->name) < 0)
                fprintf(stderr, "row %s not in SIM_ENTRIES\n", row->name);
            CHECK_GE(entry_index(row->name), 0);
            CHECK_NE(row->fn, NULL);
            if (row->ptds && ptds == NULL)
                ptds = row;
        }
    }

    /* Per-thread variants only when asked for; legacy otherwise. */
    if (ptds != NULL) {
        void *legacy = proc(ptds->name, 13000, 0, &st, &r);

        CHECK_TRUE(r == CUDA_SUCCESS && legacy != ptds->fn);
        fn = proc(ptds->name, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st,
                  &r);
        CHECK_TRUE(r == CUDA_SUCCESS && fn == legacy);
        fn = proc(ptds->name, 13000,
                  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st, &r);
        CHECK_TRUE(r == CUDA_SUCCESS && fn != legacy && fn != NULL);
    }
    else {
        fprintf(stderr, "note: no per-thread rows linked yet\n");
    }
    fn = proc("cuInit", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
              &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && fn == (void *)cuInit);
}

/* ---------------------------------------------------------------------------
 * Error names. */

static void
test_error_names(void)
{
    static const struct {
        CUresult code;
        const char *name;
    } some[] = {
        {CUDA_SUCCESS, "CUDA_SUCCESS"},
        {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
        {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
        {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
        {CUDA_ERROR_KEY_ROTATION, "CUDA_ERROR_KEY_ROTATION"},
        {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
    };
    const char *s;
    size_t i;
    int code, named = 0;

    for (i = 0; i < sizeof(some) / sizeof(some[0]); i++) {
        s = NULL;
        CHECK_OK(cuGetErrorName(some[i].code, &s));
        CHECK_TRUE(s != NULL && strcmp(s, some[i].name) == 0);
        s = NULL;
        CHECK_OK(cuGetErrorString(some[i].code, &s));
        CHECK_TRUE(s != NULL && *s != '\0');
    }
    s = NULL;
    CHECK_OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    CHECK_TRUE(s != NULL && strcmp(s, "invalid argument") == 0);
    s = "x";
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuGetErrorName((CUresult)12345, &s));
    CHECK_EQ(s, NULL);
    s = "x";
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuGetErrorString((CUresult)-1, &s));
    CHECK_EQ(s, NULL);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuGetErrorName(CUDA_SUCCESS, NULL));
    /* Names and strings agree on which codes exist: 101 in CUDA 13.0. */
    for (code = 0; code < 1000; code++) {
        const char *str;
        int a = cuGetErrorName((CUresult)code, &s) == CUDA_SUCCESS;
        int b = cuGetErrorString((CUresult)code, &str) == CUDA_SUCCESS;

        CHECK_EQ(a, b);
        named += a;
        if (a)
            CHECK_EQ(strncmp(s, "CUDA_", 5), 0);
    }
    CHECK_GE(named, 101);
}

/* ---------------------------------------------------------------------------
 * Device queries. */

static void
test_devices(void)
{
    char name[64], bus[32], bus2[32];
    CUuuid u0, u1, v1;
    size_t bytes = 0;
    CUdevice d = -1;
    int n = 0, v = -1, a, ok;

    CHECK_OK(cuDeviceGetCount(&n));
    CHECK_EQ(n, 2);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetCount(NULL));
    CHECK_OK(cuDeviceGet(&d, 1));
    CHECK_EQ(d, 1);
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&d, 2));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&d, -1));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGet(NULL, 0));

    CHECK_OK(cuDeviceGetName(name, sizeof(name), 1));
    CHECK_STR_EQ(name, "cudamem simulated device 1 (H100-class)");
    CHECK_OK(cuDeviceGetName(name, 5, 0));
    CHECK_STR_EQ(name, "cuda");
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetName(name, 0, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetName(NULL, 8, 0));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetName(name, 8, 7));

    CHECK_OK(cuDeviceTotalMem(&bytes, 0));
    CHECK_EQ(bytes, GIB);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceTotalMem(NULL, 0));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceTotalMem(&bytes, 2));

    CHECK_OK(cuDeviceGetUuid_v2(&u0, 0));
    CHECK_OK(cuDeviceGetUuid_v2(&u1, 1));
    CHECK_OK(cuDeviceGetUuid(&v1, 1));
    CHECK_NE(memcmp(&u0, &u1, sizeof(u0)), 0);
    CHECK_MEM_EQ(&u1, &v1, sizeof(u1));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetUuid_v2(NULL, 0));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetUuid_v2(&u0, 5));

    /* PCI ids: the string, the attributes and the reverse lookup agree. */
    for (d = 0; d < 2; d++) {
        int dom, bus_id, dev_id;

        CHECK_OK(cuDeviceGetPCIBusId(bus, sizeof(bus), d));
        CHECK_EQ(strlen(bus), 12);
        CHECK_OK(
            cuDeviceGetAttribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d));
        CHECK_OK(
            cuDeviceGetAttribute(&bus_id, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d));
        CHECK_OK(cuDeviceGetAttribute(&dev_id,
                                      CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d));
        snprintf(bus2, sizeof(bus2), "%04X:%02X:%02X.0", dom, bus_id, dev_id);
        CHECK_STR_EQ(bus, bus2);
        v = -1;
        CHECK_OK(cuDeviceGetByPCIBusId(&v, bus));
        CHECK_EQ(v, d);
        snprintf(bus2, sizeof(bus2), "%x:%x.0", bus_id, dev_id);
        v = -1;
        CHECK_OK(cuDeviceGetByPCIBusId(&v, bus2));
        CHECK_EQ(v, d);
        snprintf(bus2, sizeof(bus2), "%08x:%02x:%02x", dom, bus_id, dev_id);
        v = -1;
        CHECK_OK(cuDeviceGetByPCIBusId(&v, bus2));
        CHECK_EQ(v, d);
    }
    CHECK_OK(cuDeviceGetPCIBusId(bus, 5, 0));
    CHECK_EQ(strlen(bus), 4);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetPCIBusId(bus, 0, 0));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetPCIBusId(bus, 32, 9));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetByPCIBusId(&v, "nonsense"));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetByPCIBusId(&v, "0:18"));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetByPCIBusId(NULL, bus));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE,
             cuDeviceGetByPCIBusId(&v, "0000:ee:00.0"));

    /* Every attribute of the enum answers; nothing else does. */
    ok = 1;
    for (a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++) {
        if (cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0) !=
            CUDA_SUCCESS) {
            fprintf(stderr, "attribute %d not answered\n", a);
            ok = 0;
        }
    }
    CHECK_TRUE(ok);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuDeviceGetAttribute(&v, (CUdevice_attribute)9999, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE,
             cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 3));
#define ATTR_IS(attr, want)                                                   \
    do {                                                                      \
        v = -12345;                                                           \
        CHECK_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_##attr, 1));    \
        CHECK_EQ(v, (want));                                                  \
    } while (0)
    ATTR_IS(COMPUTE_CAPABILITY_MAJOR, 9);
    ATTR_IS(COMPUTE_CAPABILITY_MINOR, 0);
    ATTR_IS(MAX_PITCH, 2147483647);
    ATTR_IS(WARP_SIZE, 32);
    ATTR_IS(UNIFIED_ADDRESSING, 1);
    ATTR_IS(CAN_MAP_HOST_MEMORY, 1);
    ATTR_IS(MANAGED_MEMORY, 1);
    ATTR_IS(CONCURRENT_MANAGED_ACCESS, 1);
    ATTR_IS(PAGEABLE_MEMORY_ACCESS, 0);
    ATTR_IS(MEMORY_POOLS_SUPPORTED, 1);
    ATTR_IS(MULTI_GPU_BOARD, 0);
    ATTR_IS(INTEGRATED, 0);
    ATTR_IS(STREAM_PRIORITIES_SUPPORTED, 1);
#undef ATTR_IS
}

/* ---------------------------------------------------------------------------
 * Counters, fault injection, callbacks. */

typedef struct fault_thread {
    pthread_barrier_t *bar;
    CUresult first, after_reset;
} fault_thread;

static void *
other_thread_calls(void *arg)
{
    int n;

    *(CUresult *)arg = cuDeviceGetCount(&n);
    return NULL;
}

static void *
inject_then_wait(void *arg)
{
    fault_thread *ft = arg;
    int n;

    cusim_inject("cuDeviceGetCount", CUDA_ERROR_OUT_OF_MEMORY, 0, 5);
    ft->first = cuDeviceGetCount(&n);
    pthread_barrier_wait(ft->bar); /* main resets */
    pthread_barrier_wait(ft->bar);
    ft->after_reset = cuDeviceGetCount(&n);
    return NULL;
}

/* The per-thread counters: calls of threads that exited, of one still
 * running and of one calling from its own exit's destructor all count,
 * and a reset drops them all. The reference is the calls each thread
 * made. */
static pthread_key_t exit_key;
/* Threads record their calls' failures for the main thread to check:
 * check.h's counters are the main thread's. */
static int exit_failures;

static void
call_at_exit(void *arg)
{
    int n;

    (void)arg;
    if (cuDeviceGetCount(&n) != CUDA_SUCCESS)
        __atomic_add_fetch(&exit_failures, 1, __ATOMIC_RELAXED);
}

typedef struct counting_thread {
    pthread_barrier_t *parked, *resume;
    int before, after; /* calls before and after the parking */
    int park;
    int failed;
} counting_thread;

static void *
counting_main(void *arg)
{
    counting_thread *c = arg;
    int n, i;

    for (i = 0; i < c->before; i++)
        c->failed += cuDeviceGetCount(&n) != CUDA_SUCCESS;
    if (c->park) {
        pthread_barrier_wait(c->parked);
        pthread_barrier_wait(c->resume);
    }
    for (i = 0; i < c->after; i++)
        c->failed += cuDeviceGetCount(&n) != CUDA_SUCCESS;
    pthread_setspecific(exit_key, c);
    return NULL;
}

static void
test_counters_per_thread(void)
{
    pthread_barrier_t parked, resume;
    counting_thread workers[4], sleeper = {&parked, &resume, 5, 7, 1, 0};
    pthread_t th[4], sleeper_th;
    int n, i;

    CHECK_EQ(pthread_key_create(&exit_key, call_at_exit), 0);
    pthread_barrier_init(&parked, NULL, 2);
    pthread_barrier_init(&resume, NULL, 2);
    cusim_reset_counters();
    for (i = 0; i < 4; i++) {
        workers[i] = (counting_thread){NULL, NULL, 100 + i, 0, 0, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, counting_main, &workers[i]), 0);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(workers[i].failed, 0);
    }
    /* 406 calls, and one more at each thread's exit. */
    CHECK_EQ(calls_of("cuDeviceGetCount"), 410);
    CHECK_EQ(pthread_create(&sleeper_th, NULL, counting_main, &sleeper), 0);
    pthread_barrier_wait(&parked);
    CHECK_OK(cuDeviceGetCount(&n));
    CHECK_EQ(calls_of("cuDeviceGetCount"), 416);
    cusim_reset_counters();
    CHECK_EQ(calls_of("cuDeviceGetCount"), 0);
    pthread_barrier_wait(&resume);
    pthread_join(sleeper_th, NULL);
    CHECK_EQ(sleeper.failed, 0);
    CHECK_EQ(__atomic_load_n(&exit_failures, __ATOMIC_RELAXED), 0);
    CHECK_EQ(calls_of("cuDeviceGetCount"), 8);
    pthread_barrier_destroy(&parked);
    pthread_barrier_destroy(&resume);
    pthread_key_delete(exit_key);
}

static void
test_counters_and_faults(void)
{
    unsigned long long calls = 0, bytes = 0;
    pthread_barrier_t bar;
    fault_thread ft = {&bar, 0, 0};
    PFN_cuDevicePrimaryCtxRelease_v11000 rel1;
    CUdriverProcAddressQueryResult st;
    CUresult r, other = CUDA_ERROR_UNKNOWN;
    size_t total = 0;
    pthread_t th;
    int n, i;

    CHECK_EQ(cusim_is_simulator(), 1);
    CHECK_EQ(cusim_entry_count(), SIM_NENTRIES);
    CHECK_EQ(cusim_entry_stats(-1, &calls, &bytes), NULL);
    CHECK_EQ(cusim_entry_stats(SIM_NENTRIES, &calls, &bytes), NULL);
    CHECK_STR_EQ(cusim_entry_stats(0, NULL, NULL), "cuGetProcAddress");

    cusim_reset_counters();
    for (i = 0; i < 3; i++)
        CHECK_OK(cuDeviceGetCount(&n));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetCount(NULL));
    CHECK_EQ(calls_of("cuDeviceGetCount"), 4);
    CHECK_EQ(calls_of("cuDeviceGet"), 0);
    sim_count_bytes(SIM_cuMemcpyHtoD, 100);
    sim_count_bytes(SIM_cuMemcpyHtoD, 28);
    cusim_entry_stats(entry_index("cuMemcpyHtoD"), &calls, &bytes);
    CHECK_EQ(bytes, 128);

    /* after / count */
    CHECK_EQ(cusim_inject("cuDeviceGetCount", CUDA_ERROR_OUT_OF_MEMORY, 1, 2),
             0);
    CHECK_OK(cuDeviceGetCount(&n));
    CHECK_CU(CUDA_ERROR_OUT_OF_MEMORY, cuDeviceGetCount(&n));
    CHECK_CU(CUDA_ERROR_OUT_OF_MEMORY, cuDeviceGetCount(&n));
    CHECK_OK(cuDeviceGetCount(&n));
    CHECK_EQ(cusim_inject("cuNoSuchEntry", 1, 0, 1), -1);
    CHECK_EQ(cusim_inject("cuMemAlloc_v2", 1, 0, 1), -1);
    CHECK_EQ(cusim_inject("cuDeviceGet", 1, 0, 0), 0);
    CHECK_OK(cuDeviceGet(&n, 0));

    /* A plain name covers every ABI version of the entry. */
    rel1 = (PFN_cuDevicePrimaryCtxRelease_v11000)proc(
        "cuDevicePrimaryCtxRelease", 7000, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && rel1 != NULL);
    CHECK_EQ(
        cusim_inject("cuDevicePrimaryCtxRelease", CUDA_ERROR_UNKNOWN, 0, 2),
        0);
    CHECK_CU(CUDA_ERROR_UNKNOWN, rel1(0));
    CHECK_CU(CUDA_ERROR_UNKNOWN, cuDevicePrimaryCtxRelease(0));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuDevicePrimaryCtxRelease(0));

    /* Two faults on one entry fire in turn. */
    cusim_inject("cuDeviceGet", CUDA_ERROR_INVALID_HANDLE, 0, 1);
    cusim_inject("cuDeviceGet", CUDA_ERROR_NOT_READY, 0, 1);
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE, cuDeviceGet(&n, 0));
    CHECK_CU(CUDA_ERROR_NOT_READY, cuDeviceGet(&n, 0));
    CHECK_OK(cuDeviceGet(&n, 0));

    /* Per thread: another thread is unaffected. */
    cusim_inject("cuDeviceGetCount", CUDA_ERROR_OUT_OF_MEMORY, 0, 1);
    pthread_create(&th, NULL, other_thread_calls, &other);
    pthread_join(th, NULL);
    CHECK_EQ(other, CUDA_SUCCESS);
    CHECK_CU(CUDA_ERROR_OUT_OF_MEMORY, cuDeviceGetCount(&n));
    cusim_inject("cuDeviceGetCount", CUDA_ERROR_OUT_OF_MEMORY, 0, 1);
    cusim_clear_faults();
    CHECK_OK(cuDeviceGetCount(&n));

    /* cusim_reset forgets the faults of every thread. */
    pthread_barrier_init(&bar, NULL, 2);
    pthread_create(&th, NULL, inject_then_wait, &ft);
    pthread_barrier_wait(&bar);
    cusim_reset();
    pthread_barrier_wait(&bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&bar);
    CHECK_EQ(ft.first, CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(ft.after_reset, CUDA_SUCCESS);
    CHECK_EQ(calls_of("cuDeviceGetCount"), 1);

    /* Driver calls from a stream callback are refused. */
    sim_set_in_callback(1);
    CHECK_TRUE(sim_in_callback());
    CHECK_CU(CUDA_ERROR_NOT_PERMITTED, cuDeviceGetCount(&n));
    sim_set_in_callback(0);
    CHECK_OK(cuDeviceGetCount(&n));

    /* Control setters. */
    cusim_set_delay_us(7);
    CHECK_EQ(cusim_get_delay_us(), 7);
    cusim_set_delay_us(0);
    CHECK_EQ(cusim_set_memory(5, GIB), CUDA_ERROR_INVALID_DEVICE);
    CHECK_EQ(cusim_set_memory(1, 2 * GIB), 0);
    CHECK_OK(cuDeviceTotalMem(&total, 1));
    CHECK_EQ(total, 2 * GIB);
    CHECK_EQ(cusim_set_memory(1, GIB), 0);
}

/* ---------------------------------------------------------------------------
 * Contexts. */

static unsigned long long
live_contexts(void)
{
    cusim_stats st;

    cusim_get_stats(&st);
    return st.contexts;
}

static void *
current_of_new_thread(void *arg)
{
    CUcontext ctx = (CUcontext)1;

    cuCtxGetCurrent(&ctx);
    *(CUcontext *)arg = ctx;
    return NULL;
}

static void
test_primary(void)
{
    PFN_cuDevicePrimaryCtxSetFlags_v11000 setflags1;
    CUdriverProcAddressQueryResult st;
    CUcontext c, c2, cur;
    unsigned flags = 99;
    unsigned long long base = live_contexts();
    CUdeviceptr p = 0;
    CUresult r;
    int active = -1;

    CHECK_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK_TRUE(flags == 0 && active == 0);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuDevicePrimaryCtxGetState(0, NULL, &active));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE,
             cuDevicePrimaryCtxGetState(4, &flags, &active));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDevicePrimaryCtxRetain(NULL, 0));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDevicePrimaryCtxRetain(&c, 2));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuDevicePrimaryCtxRelease(0));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDevicePrimaryCtxRelease(2));

    /* The first ABI of SetFlags refuses while active; the second not. */
    setflags1 = (PFN_cuDevicePrimaryCtxSetFlags_v11000)proc(
        "cuDevicePrimaryCtxSetFlags", 10020, 0, &st, &r);
    CHECK_TRUE(r == CUDA_SUCCESS && setflags1 == cuDevicePrimaryCtxSetFlags);
    CHECK_OK(setflags1(0, CU_CTX_SCHED_YIELD));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDevicePrimaryCtxSetFlags_v2(0, 3));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuDevicePrimaryCtxSetFlags_v2(0, 0x100));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDevicePrimaryCtxSetFlags_v2(9, 0));

    CHECK_OK(cuDevicePrimaryCtxRetain(&c, 0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&c2, 0));
    CHECK_TRUE(c == c2 && c != NULL);
    CHECK_EQ(live_contexts(), base + 1);
    CHECK_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK_TRUE(flags == CU_CTX_SCHED_YIELD && active == 1);
    CHECK_CU(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
             setflags1(0, CU_CTX_SCHED_SPIN));
    CHECK_OK(cuDevicePrimaryCtxSetFlags_v2(0, CU_CTX_SCHED_BLOCKING_SYNC));
    CHECK_OK(cuCtxPushCurrent(c));
    CHECK_OK(cuCtxGetFlags(&flags));
    CHECK_EQ(flags, CU_CTX_SCHED_BLOCKING_SYNC);
    CHECK_OK(cuDevicePrimaryCtxSetFlags_v2(0, 0));

    /* Release does not pop; one retain is left. */
    CHECK_OK(cuDevicePrimaryCtxRelease(0));
    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, c);
    CHECK_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK_EQ(active, 1);

    /* Reset frees what the context owns and keeps the retain count. */
    CHECK_OK(cuMemAlloc(&p, 4096));
    {
        cusim_stats s;

        cusim_get_stats(&s);
        CHECK_GE(s.device_allocations, 1);
    }
    CHECK_OK(cuDevicePrimaryCtxReset(0));
    {
        cusim_stats s;

        cusim_get_stats(&s);
        CHECK_EQ(s.device_allocations, 0);
    }
    CHECK_EQ(live_contexts(), base);
    CHECK_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK_EQ(active, 0);
    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, c);
    CHECK_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED, cuCtxGetFlags(&flags));
    CHECK_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED, cuCtxGetDevice(&active));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent(c));
    CHECK_OK(cuDevicePrimaryCtxReset(0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&c2, 0));
    CHECK_EQ(c2, c);
    CHECK_EQ(live_contexts(), base + 1);
    CHECK_OK(cuCtxGetFlags(&flags));
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK_EQ(active, 1);
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK_EQ(active, 0);
    CHECK_EQ(live_contexts(), base);
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuDevicePrimaryCtxRelease(0));
    CHECK_OK(cuCtxPopCurrent(&cur));
    CHECK_EQ(cur, c);
}

static void
test_stack(void)
{
    CUctxCreateParams params = {0};
    CUexecAffinityParam aff;
    CUcontext c0, c1, mine, cur, other = (CUcontext)1;
    unsigned long long base = live_contexts();
    unsigned flags;
    pthread_t th;
    CUdevice d;
    int fake = 0;

    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, NULL);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuCtxGetCurrent(NULL));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPopCurrent(&cur));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxGetDevice(&d));
    CHECK_OK(cuCtxSetCurrent(NULL));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent(NULL));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent((CUcontext)&fake));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxSetCurrent((CUcontext)&fake));

    CHECK_OK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK_NE(c0, c1);
    CHECK_OK(cuCtxPushCurrent(c0));
    CHECK_OK(cuCtxGetDevice(&d));
    CHECK_EQ(d, 0);
    CHECK_OK(cuCtxPushCurrent(c1));
    CHECK_OK(cuCtxGetDevice(&d));
    CHECK_EQ(d, 1);
    CHECK_OK(cuCtxGetDevice_v2(&d, c0));
    CHECK_EQ(d, 0);
    CHECK_OK(cuCtxGetDevice_v2(&d, NULL));
    CHECK_EQ(d, 1);
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT,
             cuCtxGetDevice_v2(&d, (CUcontext)&fake));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuCtxGetDevice(NULL));
    /* SetCurrent replaces the top. */
    CHECK_OK(cuCtxSetCurrent(c0));
    CHECK_OK(cuCtxPopCurrent(&cur));
    CHECK_EQ(cur, c0);
    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, c0);
    CHECK_OK(cuCtxSetCurrent(NULL));
    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, NULL);
    CHECK_OK(cuCtxSetCurrent(c1));
    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, c1);

    /* A new thread starts with an empty stack. */
    pthread_create(&th, NULL, current_of_new_thread, &other);
    pthread_join(th, NULL);
    CHECK_EQ(other, NULL);

    /* Created contexts: pushed, flags kept, destroyed and popped. */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuCtxCreate_v2(NULL, 0, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuCtxCreate_v2(&mine, 0x100, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuCtxCreate_v2(&mine, 6, 0));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuCtxCreate_v2(&mine, 0, 2));
    CHECK_OK(cuCtxCreate_v2(&mine, CU_CTX_SCHED_SPIN | CU_CTX_MAP_HOST, 0));
    CHECK_TRUE(mine != c0 && mine != c1);
    CHECK_EQ(live_contexts(), base + 3);
    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, mine);
    CHECK_OK(cuCtxGetFlags(&flags));
    CHECK_EQ(flags, (CU_CTX_SCHED_SPIN | CU_CTX_MAP_HOST));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuCtxGetFlags(NULL));
    CHECK_OK(cuCtxDestroy_v2(mine));
    CHECK_EQ(live_contexts(), base + 2);
    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, c1);
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy_v2(mine));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent(mine));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy_v2(c0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuCtxDestroy_v2(NULL));

    /* Destroyed while not on top: it stays, and using it says so. */
    CHECK_OK(cuCtxCreate(&mine, NULL, 1, 1));
    CHECK_OK(cuCtxPushCurrent(c0));
    CHECK_OK(cuCtxDestroy_v2(mine));
    CHECK_OK(cuCtxPopCurrent(&cur));
    CHECK_EQ(cur, c0);
    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, mine);
    CHECK_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED, cuCtxGetDevice(&d));
    CHECK_CU(CUDA_ERROR_CONTEXT_IS_DESTROYED, cuProfilerStart());
    CHECK_OK(cuCtxPopCurrent(NULL));

    /* The 12050 ABI: no execution affinity, no CIG here. */
    params.execAffinityParams = &aff;
    params.numExecAffinityParams = 1;
    CHECK_CU(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
             cuCtxCreate(&mine, &params, 0, 0));
    CHECK_OK(cuCtxCreate(&mine, NULL, 0, 0));
    CHECK_OK(cuCtxDestroy_v2(mine));

    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, c1);
    CHECK_OK(cuProfilerStart());
    CHECK_OK(cuProfilerStop());
    CHECK_OK(cuCtxPopCurrent(NULL));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuProfilerStart());
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(1));
    CHECK_EQ(live_contexts(), base);
}

static void
test_peer(void)
{
    CUcontext c0, c1, cur;
    int can = -1, fake = 0;

    CHECK_OK(cuDeviceCanAccessPeer(&can, 0, 1));
    CHECK_EQ(can, 1);
    CHECK_OK(cuDeviceCanAccessPeer(&can, 1, 1));
    CHECK_EQ(can, 0);
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceCanAccessPeer(&can, 0, 2));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceCanAccessPeer(NULL, 0, 1));

    CHECK_OK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxEnablePeerAccess(c1, 0));
    CHECK_OK(cuCtxPushCurrent(c0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuCtxEnablePeerAccess(c1, 1));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxEnablePeerAccess(c0, 0));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT,
             cuCtxEnablePeerAccess((CUcontext)&fake, 0));
    CHECK_CU(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cuCtxDisablePeerAccess(c1));
    CHECK_OK(cuCtxEnablePeerAccess(c1, 0));
    CHECK_EQ(c0->peer[1], 1);
    CHECK_CU(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
             cuCtxEnablePeerAccess(c1, 0));
    CHECK_OK(cuCtxDisablePeerAccess(c1));
    CHECK_CU(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cuCtxDisablePeerAccess(c1));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT,
             cuCtxDisablePeerAccess((CUcontext)&fake));
    /* Access ends when the peer goes away. */
    CHECK_OK(cuCtxEnablePeerAccess(c1, 0));
    CHECK_OK(cuDevicePrimaryCtxReset(1));
    CHECK_EQ(c0->peer[1], 0);
    CHECK_OK(cuCtxPopCurrent(&cur));
    CHECK_EQ(cur, c0);
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(1));
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(0));
}

static void
test_sticky(void)
{
    CUcontext c0, c1, cur;
    unsigned flags;
    CUdevice d;
    int n, active;

    CHECK_TRUE(sim_is_sticky(CUDA_ERROR_ILLEGAL_ADDRESS));
    CHECK_TRUE(sim_is_sticky(CUDA_ERROR_LAUNCH_FAILED));
    CHECK_TRUE(sim_is_sticky(CUDA_ERROR_ECC_UNCORRECTABLE));
    CHECK_TRUE(!sim_is_sticky(CUDA_ERROR_OUT_OF_MEMORY));
    CHECK_TRUE(!sim_is_sticky(CUDA_ERROR_INVALID_VALUE));

    CHECK_OK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK_OK(cuCtxPushCurrent(c0));
    /* A plain error does not poison. */
    cusim_inject("cuCtxGetFlags", CUDA_ERROR_OUT_OF_MEMORY, 0, 1);
    CHECK_CU(CUDA_ERROR_OUT_OF_MEMORY, cuCtxGetFlags(&flags));
    CHECK_OK(cuCtxGetFlags(&flags));
    /* A sticky one does, for every later call in that context. */
    cusim_inject("cuCtxGetFlags", CUDA_ERROR_ILLEGAL_ADDRESS, 0, 1);
    CHECK_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxGetFlags(&flags));
    CHECK_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxGetFlags(&flags));
    CHECK_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxGetDevice(&d));
    CHECK_EQ(sim_ctx_get(&cur), CUDA_ERROR_ILLEGAL_ADDRESS);
    /* Device queries and the context stack still work. */
    CHECK_OK(cuDeviceGetCount(&n));
    CHECK_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, c0);
    /* Other contexts are unaffected. */
    CHECK_OK(cuCtxPushCurrent(c1));
    CHECK_OK(cuCtxGetFlags(&flags));
    CHECK_OK(cuCtxPopCurrent(NULL));
    /* A reset does not clear it: "the process must be terminated and
     * relaunched". The new primary context and any context made later on
     * the device answer the same code; the other device stays usable. */
    CHECK_OK(cuDevicePrimaryCtxReset(0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&cur, 0));
    CHECK_EQ(cur, c0);
    CHECK_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxGetFlags(&flags));
    CHECK_OK(cuCtxCreate_v2(&cur, 0, 0));
    CHECK_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxGetDevice(&d));
    CHECK_OK(cuCtxDestroy(cur));
    CHECK_OK(cuCtxPushCurrent(c1));
    CHECK_OK(cuCtxGetFlags(&flags));
    CHECK_OK(cuCtxPopCurrent(NULL));
    /* A later code does not replace the first. */
    cusim_inject("cuCtxGetFlags", CUDA_ERROR_LAUNCH_FAILED, 0, 1);
    CHECK_CU(CUDA_ERROR_LAUNCH_FAILED, cuCtxGetFlags(&flags));
    CHECK_CU(CUDA_ERROR_ILLEGAL_ADDRESS, cuCtxGetFlags(&flags));
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(0));
    /* The simulator's reset (a new process, for this) forgets it. */
    cusim_reset();
    CHECK_OK(cuDevicePrimaryCtxReset(0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&cur, 0));
    CHECK_EQ(cur, c0);
    CHECK_OK(cuCtxGetFlags(&flags));
    CHECK_OK(cuCtxGetDevice(&d));
    CHECK_EQ(d, 0);
    CHECK_OK(cuCtxPopCurrent(NULL));
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK_OK(cuDevicePrimaryCtxRelease_v2(1));
}

/* A child forked after cuInit cannot use the driver. */
static void
test_fork_after_init(void)
{
    CHECK_EQ(in_child(child_of_initialized), 0);
}

static void
setup(void)
{
    setenv("CUDAMEM_SIM_DEVICES", "2", 1);
    setenv("CUDAMEM_SIM_MEMORY", "1G", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("CUDAMEM_SIM_NO_PEER");
    unsetenv("CUDAMEM_SIM_DRIVER_VERSION");
    CHECK_OK(cuInit(0));
}

/* The environment variants run before any cuInit, each in a child. */
static const check_test tests[] = {
    {"environments", test_environments, CHECK_BARE},
    {"proc_address", test_proc_address, 0},
    {"error_names", test_error_names, 0},
    {"devices", test_devices, 0},
    {"counters_and_faults", test_counters_and_faults, 0},
    {"counters_per_thread", test_counters_per_thread, 0},
    {"primary", test_primary, 0},
    {"stack", test_stack, 0},
    {"peer", test_peer, 0},
    {"sticky", test_sticky, 0},
    {"fork_after_init", test_fork_after_init, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, setup, NULL)
