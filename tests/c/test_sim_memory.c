/* test_sim_memory.c: the simulator's memory entry points: device, host,
 * registered and managed memory, address ranges, pointer attributes and
 * live counts. Copies are test_sim_copy.c's, IPC test_sim_ipc.c's. */
#include "check.h"
#include "sim.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static CUcontext ctx;

static cusim_stats
stats(void)
{
    cusim_stats s;
    cusim_get_stats(&s);
    return s;
}

static void
test_device_alloc(void)
{
    CUdeviceptr a, b, base;
    size_t free0, total, free1, size;

    CHECK_OK(cuMemGetInfo(&free0, &total));
    CHECK_EQ(total, (size_t)64 << 20);
    CHECK_EQ(free0, total);
    CHECK_OK(cuMemAlloc(&a, 1000));
    CHECK_TRUE(a != 0 && a % SIM_ALIGN == 0);
    CHECK_OK(cuMemGetInfo(&free1, &total));
    CHECK_EQ(free1, free0 - 1024);
    CHECK_OK(cuMemAlloc(&b, 1));
    CHECK_TRUE(b % SIM_ALIGN == 0 && b != a);
    CHECK_TRUE(stats().device_allocations == 2 &&
               stats().device_bytes == 1001);

    CHECK_OK(cuMemGetAddressRange(&base, &size, a + 999));
    CHECK_TRUE(base == a && size == 1000);
    CHECK_OK(cuMemGetAddressRange(NULL, &size, a));
    CHECK_EQ(size, 1000);
    CHECK_CU(CUDA_ERROR_NOT_FOUND,
             cuMemGetAddressRange(&base, &size, a + 1000));

    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(&a, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(NULL, 16));
    CHECK_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&base, free1));
    CHECK_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&base, (size_t)-1));

    /* Free rules: interior pointers, double frees and foreign pointers. */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(a + 256));
    CHECK_OK(cuMemFree(a));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(a));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree((CUdeviceptr)&base));
    CHECK_OK(cuMemFree(0));
    CHECK_OK(cuMemFree(b));
    CHECK_CU(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, a));
    CHECK_OK(cuMemGetInfo(&free1, &total));
    CHECK_EQ(free1, free0);

    /* Fragmentation-free reuse: the whole memory in one piece again. */
    CHECK_OK(cuMemAlloc(&a, total));
    CHECK_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&b, 1));
    CHECK_EQ(cusim_set_memory(0, 32 << 20), CUDA_ERROR_INVALID_VALUE);
    CHECK_OK(cuMemFree(a));

    /* Coalescing: three neighbours freed out of order merge back. */
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++)
        CHECK_OK(cuMemAlloc(&p[i], 4096));
    CHECK_OK(cuMemFree(p[0]));
    CHECK_OK(cuMemFree(p[2]));
    CHECK_OK(cuMemFree(p[1]));
    CHECK_OK(cuMemAlloc(&a, total));
    CHECK_OK(cuMemFree(a));
}

/* The address lies in a mapping the host may not touch at all. */
static int
prot_none(uintptr_t addr)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512], perms[8];
    unsigned long lo, hi;
    int found = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && addr >= lo &&
            addr < hi)
            found = strncmp(perms, "---", 3) == 0;
    if (f)
        fclose(f);
    return found;
}

static void
test_not_host_accessible(void)
{
    CUdeviceptr a;
    CHECK_OK(cuMemAlloc(&a, 4096));
    CHECK_TRUE(prot_none(a));
    /* Valgrind would report the child's deliberate fault. */
    const char *preload = getenv("LD_PRELOAD");
    if (preload && strstr(preload, "vgpreload")) {
        CHECK_OK(cuMemFree(a));
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        volatile unsigned char *p = (volatile unsigned char *)a;
        signal(SIGSEGV, SIG_DFL);
        (void)p[0];
        _exit(0);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    CHECK_OK(cuMemFree(a));
}

static void
test_set_memory(void)
{
    size_t f, t;
    CHECK_EQ(cusim_set_memory(0, 32 << 20), 0);
    CHECK_OK(cuMemGetInfo(&f, &t));
    CHECK_TRUE(t == (size_t)32 << 20 && f == t);
    CHECK_EQ(cusim_set_memory(0, 64 << 20), 0);
}

static void
test_host_alloc(void)
{
    void *p, *q;
    unsigned flags = 99;
    CUdeviceptr d;

    CHECK_OK(cuMemAllocHost(&p, 10000));
    memset(p, 0xab, 10000);
    CHECK_EQ(((unsigned char *)p)[9999], 0xab);
    CHECK_OK(cuMemHostGetFlags(&flags, p));
    CHECK_EQ(flags, 0);
    CHECK_OK(cuMemHostAlloc(&q, 100,
                            CU_MEMHOSTALLOC_PORTABLE |
                                CU_MEMHOSTALLOC_DEVICEMAP |
                                CU_MEMHOSTALLOC_WRITECOMBINED));
    CHECK_OK(cuMemHostGetFlags(&flags, (char *)q + 50));
    CHECK_EQ(flags, 7);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemHostAlloc(&q, 100, 8));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemHostAlloc(&q, 0, 0));
    CHECK_TRUE(stats().host_allocations == 2 && stats().host_bytes == 10100);

    CHECK_OK(cuMemHostGetDevicePointer(&d, (char *)p + 10, 0));
    CHECK_EQ(d, (CUdeviceptr)p + 10);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(&d, p, 1));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuMemHostGetDevicePointer(&d, &flags, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemHostGetFlags(&flags, &flags));

    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost((char *)p + 1));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree((CUdeviceptr)p));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(&flags));
    CHECK_OK(cuMemFreeHost(p));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(p));
    CHECK_OK(cuMemFreeHost(q));
    CHECK_TRUE(stats().host_allocations == 0 && stats().host_bytes == 0);
}

static void
test_register(void)
{
    char *buf = malloc(65536);
    void *pinned;
    unsigned flags;
    CUdeviceptr d;

    CHECK_OK(cuMemHostRegister(buf + 100, 1000, CU_MEMHOSTREGISTER_PORTABLE));
    CHECK_TRUE(stats().registrations == 1 && stats().registered_bytes == 1000);
    CHECK_CU(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
             cuMemHostRegister(buf, 200, 0));
    CHECK_CU(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
             cuMemHostRegister(buf + 1099, 10, 0));
    CHECK_OK(cuMemHostRegister(buf + 1100, 10, CU_MEMHOSTREGISTER_DEVICEMAP));
    CHECK_OK(cuMemHostGetFlags(&flags, buf + 1100));
    CHECK_EQ(flags, CU_MEMHOSTREGISTER_DEVICEMAP);
    CHECK_OK(cuMemHostGetDevicePointer(&d, buf + 1105, 0));
    CHECK_EQ(d, (CUdeviceptr)(buf + 1105));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemHostRegister(NULL, 10, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemHostRegister(buf + 5000, 0, 0));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemHostRegister(buf + 5000, 10, 16));

    CHECK_CU(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
             cuMemHostUnregister(buf + 101));
    CHECK_CU(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(buf));
    CHECK_OK(cuMemHostUnregister(buf + 100));
    CHECK_CU(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
             cuMemHostUnregister(buf + 100));
    CHECK_OK(cuMemHostUnregister(buf + 1100));

    /* Memory from cuMemHostAlloc is page-locked already. */
    CHECK_OK(cuMemAllocHost(&pinned, 4096));
    CHECK_CU(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
             cuMemHostRegister((char *)pinned + 8, 8, 0));
    CHECK_CU(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
             cuMemHostUnregister(pinned));
    CHECK_OK(cuMemFreeHost(pinned));

    /* Device memory cannot be registered. */
    CHECK_OK(cuMemAlloc(&d, 4096));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemHostRegister((void *)d, 16, 0));
    CHECK_OK(cuMemFree(d));

    /* Read-only registrations: the device may read but not write them. */
    CHECK_OK(cuMemAlloc(&d, 4096));
    CHECK_OK(cuMemHostRegister(buf, 4096, CU_MEMHOSTREGISTER_READ_ONLY));
    CHECK_OK(cuMemcpyHtoD(d, buf, 4096));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(buf, d, 4096));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD8((CUdeviceptr)buf, 1, 4));
    unsigned access = 0;
    CHECK_OK(cuPointerGetAttribute(&access, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,
                                   (CUdeviceptr)buf));
    CHECK_EQ(access, CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ);
    CHECK_OK(cuMemHostUnregister(buf));
    CHECK_OK(cuMemFree(d));
    CHECK_TRUE(stats().registrations == 0 && stats().registered_bytes == 0);
    free(buf);
}

static void
test_managed(void)
{
    CUdeviceptr m, d;
    size_t f0, f1, t;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
    CUmemLocation bad = {CU_MEM_LOCATION_TYPE_DEVICE, 7};

    CHECK_OK(cuMemGetInfo(&f0, &t));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(&m, 100, 0));
    CHECK_CU(
        CUDA_ERROR_INVALID_VALUE,
        cuMemAllocManaged(&m, 100, CU_MEM_ATTACH_GLOBAL | CU_MEM_ATTACH_HOST));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuMemAllocManaged(&m, 0, CU_MEM_ATTACH_GLOBAL));
    CHECK_CU(CUDA_ERROR_OUT_OF_MEMORY,
             cuMemAllocManaged(&m, f0 + 1, CU_MEM_ATTACH_GLOBAL));
    CHECK_OK(cuMemAllocManaged(&m, 5000, CU_MEM_ATTACH_GLOBAL));
    CHECK_OK(cuMemGetInfo(&f1, &t));
    CHECK_EQ(f1, f0 - 5120);
    CHECK_TRUE(stats().managed_allocations == 1 &&
               stats().managed_bytes == 5000);
    memset((void *)m, 7, 5000); /* host-accessible */

    CHECK_OK(cuMemPrefetchAsync(m, 5000, loc, 0, NULL));
    CHECK_OK(cuMemPrefetchAsync(m + 100, 100, host, 0, NULL));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuMemPrefetchAsync(m, 5001, loc, 0, NULL));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuMemPrefetchAsync(m, 10, loc, 1, NULL));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE,
             cuMemPrefetchAsync(m, 10, bad, 0, NULL));
    CHECK_OK(cuCtxSynchronize());

    CHECK_OK(cuMemAdvise(m, 5000, CU_MEM_ADVISE_SET_READ_MOSTLY, bad));
    CHECK_OK(cuMemAdvise(m, 5000, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, loc));
    CHECK_OK(cuMemAdvise(m, 10, CU_MEM_ADVISE_SET_ACCESSED_BY, host));
    CHECK_CU(CUDA_ERROR_INVALID_DEVICE,
             cuMemAdvise(m, 10, CU_MEM_ADVISE_SET_ACCESSED_BY, bad));
    /* Advice outside the enum on purpose: the driver receives an int. */
    /* NOLINTBEGIN(clang-analyzer-optin.core.EnumCastOutOfRange) */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuMemAdvise(m, 10, (CUmem_advise)0, loc));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuMemAdvise(m, 10, (CUmem_advise)7, loc));
    /* NOLINTEND(clang-analyzer-optin.core.EnumCastOutOfRange) */

    /* Only managed memory is prefetched or advised. */
    CHECK_OK(cuMemAlloc(&d, 4096));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuMemPrefetchAsync(d, 16, loc, 0, NULL));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuMemAdvise(d, 16, CU_MEM_ADVISE_SET_READ_MOSTLY, loc));
    CHECK_OK(cuMemFree(d));

    /* The 8000 ABIs, through the driver's table. */
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    CHECK_OK(cuGetProcAddress("cuMemPrefetchAsync", &fn, 8000,
                              CU_GET_PROC_ADDRESS_DEFAULT, &q));
    CHECK_NE(fn, NULL);
    if (fn) {
        PFN_cuMemPrefetchAsync_v8000 pf = (PFN_cuMemPrefetchAsync_v8000)fn;
        CHECK_OK(pf(m, 5000, CU_DEVICE_CPU, NULL));
        CHECK_OK(pf(m, 5000, 0, NULL));
        CHECK_CU(CUDA_ERROR_INVALID_DEVICE, pf(m, 5000, 9, NULL));
    }
    fn = NULL;
    CHECK_OK(cuGetProcAddress("cuMemAdvise", &fn, 8000,
                              CU_GET_PROC_ADDRESS_DEFAULT, &q));
    CHECK_NE(fn, NULL);
    if (fn) {
        PFN_cuMemAdvise_v8000 adv = (PFN_cuMemAdvise_v8000)fn;
        CHECK_OK(
            adv(m, 10, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU));
        CHECK_CU(CUDA_ERROR_INVALID_DEVICE,
                 adv(m, 10, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 5));
    }
    CHECK_OK(cuCtxSynchronize());
    CHECK_EQ(((unsigned char *)m)[4999], 7);

    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(m + 256));
    CHECK_OK(cuMemFree(m));
    CHECK_OK(cuMemGetInfo(&f1, &t));
    CHECK_EQ(f1, f0);
    CHECK_TRUE(stats().managed_allocations == 0 && stats().managed_bytes == 0);
}

typedef struct attrs {
    CUcontext ctx;
    unsigned type;
    CUdeviceptr dptr;
    void *hptr;
    unsigned long long id;
    unsigned managed;
    int ordinal;
    unsigned ipc;
    CUdeviceptr start;
    size_t size;
    unsigned mapped;
    CUmemoryPool pool;
    unsigned sync;
} attrs;

static CUresult
get_all(CUdeviceptr p, attrs *a)
{
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_CONTEXT,
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        CU_POINTER_ATTRIBUTE_HOST_POINTER,
        CU_POINTER_ATTRIBUTE_BUFFER_ID,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_MAPPED,
        CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
        CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
    };
    void *data[] = {&a->ctx,     &a->type,    &a->dptr, &a->hptr,  &a->id,
                    &a->managed, &a->ordinal, &a->ipc,  &a->start, &a->size,
                    &a->mapped,  &a->pool,    &a->sync};
    memset(a, 0x5a, sizeof(*a));
    return cuPointerGetAttributes(13, which, data, p);
}

static void
test_attributes(void)
{
    CUdeviceptr d, m;
    void *h;
    char *reg = malloc(1000);
    attrs a;
    unsigned type;
    void *hp;
    unsigned long long id1, id2;

    CHECK_OK(cuMemAlloc(&d, 3000));
    CHECK_OK(get_all(d + 10, &a));
    CHECK_TRUE(a.ctx == ctx && a.type == CU_MEMORYTYPE_DEVICE);
    CHECK_TRUE(a.dptr == d + 10 && a.hptr == NULL && a.managed == 0);
    CHECK_TRUE(a.ordinal == 0 && a.ipc == 1 && a.start == d && a.size == 3000);
    CHECK_TRUE(a.mapped == 1 && a.pool == NULL && a.sync == 0 && a.id != 0);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d));
    CHECK_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   d + 2999));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   d + 3000));
    /* An attribute outside the enum on purpose, as a caller may pass. */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             /* NOLINTNEXTLINE(clang-analyzer-optin.core.EnumCastOutOfRange) */
             cuPointerGetAttribute(&type, (CUpointer_attribute)999, d));

    /* Buffer ids are never reused, even at the same address. */
    CHECK_OK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
    CHECK_OK(cuMemFree(d));
    CHECK_OK(cuMemAlloc(&d, 3000));
    CHECK_OK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
    CHECK_NE(id1, id2);
    CHECK_OK(cuMemFree(d));

    CHECK_OK(cuMemAllocHost(&h, 100));
    CHECK_OK(get_all((CUdeviceptr)h + 1, &a));
    CHECK_TRUE(a.ctx == ctx && a.type == CU_MEMORYTYPE_HOST);
    CHECK_TRUE(a.dptr == (CUdeviceptr)h + 1 && a.hptr == (char *)h + 1);
    CHECK_TRUE(a.managed == 0 && a.ipc == 0 && a.size == 100);
    CHECK_TRUE(a.start == (CUdeviceptr)h && a.ordinal == 0);
    CHECK_OK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   (CUdeviceptr)h));
    CHECK_EQ(hp, h);
    CHECK_OK(cuMemFreeHost(h));

    CHECK_OK(cuMemHostRegister(reg, 1000, 0));
    CHECK_OK(get_all((CUdeviceptr)reg, &a));
    CHECK_TRUE(a.type == CU_MEMORYTYPE_HOST && a.hptr == reg &&
               a.size == 1000);
    CHECK_TRUE(a.managed == 0 && a.ipc == 0 && a.mapped == 1);
    CHECK_OK(cuMemHostUnregister(reg));

    CHECK_OK(cuMemAllocManaged(&m, 64, CU_MEM_ATTACH_HOST));
    CHECK_OK(get_all(m, &a));
    CHECK_TRUE(a.type == CU_MEMORYTYPE_DEVICE && a.managed == 1);
    CHECK_TRUE(a.hptr == (void *)m && a.dptr == m && a.ipc == 0);
    CHECK_OK(cuMemFree(m));

    /* Unknown pointers: an error alone, zero values in bulk. */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   (CUdeviceptr)reg));
    CHECK_OK(get_all((CUdeviceptr)reg, &a));
    CHECK_TRUE(a.ctx == NULL && a.type == 0 && a.hptr == NULL && a.size == 0);
    CHECK_TRUE(a.mapped == 0 && a.managed == 0 && a.id == 0);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuPointerGetAttributes(0, NULL, NULL, (CUdeviceptr)reg));
    free(reg);
}

static void
test_release_ctx(void)
{
    CUdeviceptr d, m;
    void *h;
    char buf[64];
    CHECK_OK(cuMemAlloc(&d, 100));
    CHECK_OK(cuMemAllocManaged(&m, 100, CU_MEM_ATTACH_GLOBAL));
    CHECK_OK(cuMemAllocHost(&h, 100));
    CHECK_OK(cuMemHostRegister(buf, sizeof(buf), 0));
    CHECK_OK(cuDevicePrimaryCtxReset(0));
    cusim_stats s = stats();
    CHECK_TRUE(s.device_allocations == 0 && s.managed_allocations == 0);
    CHECK_TRUE(s.host_allocations == 0 && s.registrations == 0);
    CHECK_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK_OK(cuCtxSetCurrent(ctx));
    size_t f, t;
    CHECK_OK(cuMemGetInfo(&f, &t));
    CHECK_EQ(f, t);
}

static void
test_no_context(void)
{
    CUdeviceptr d;
    CHECK_OK(cuCtxSetCurrent(NULL));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT, cuMemAlloc(&d, 16));
    CHECK_OK(cuCtxSetCurrent(ctx));
}

static void
setup(void)
{
    CHECK_OK(cuInit(0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK_OK(cuCtxSetCurrent(ctx));
    CHECK_EQ(cusim_set_memory(0, 64 << 20), 0);
}

static void
teardown(void)
{
    cusim_stats s = stats();

    CHECK_TRUE(s.device_allocations == 0 && s.device_bytes == 0);
    CHECK_TRUE(s.host_allocations == 0 && s.registrations == 0);
    CHECK_TRUE(s.managed_allocations == 0 && s.ipc_open == 0);
    CHECK_OK(cuDevicePrimaryCtxRelease(0));
}

static const check_test tests[] = {
    {"device_alloc", test_device_alloc, 0},
    {"not_host_accessible", test_not_host_accessible, 0},
    {"set_memory", test_set_memory, 0},
    {"host_alloc", test_host_alloc, 0},
    {"register", test_register, 0},
    {"managed", test_managed, 0},
    {"attributes", test_attributes, 0},
    {"release_ctx", test_release_ctx, 0},
    {"no_context", test_no_context, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, setup, teardown)
