/* test_sim_ipc.c: legacy IPC between two processes of the simulator: export
 * of a whole allocation, open in a child forked before cuInit, both
 * behaviours of a second open, close, and the exporter's cleanup. */
#include "check.h"
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { N = 1 << 20 };

static int
read_full(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)p + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* The importer: opens, reads, writes, reopens, closes. */
static int
child(int in, int out)
{
    CUipcMemHandle h;
    CUcontext ctx;
    CUdeviceptr d, d2;
    unsigned char *buf = malloc(N);
    unsigned type, ipc;
    char done = 'x';

    if (read_full(in, &h, sizeof(h)) != 0)
        _exit(2);
    CHECK_OK(cuInit(0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK_OK(cuCtxSetCurrent(ctx));

    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuIpcOpenMemHandle(&d, h, 0));
    CHECK_OK(cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK_OK(cuMemcpyDtoH(buf, d, N));
    int ok = 1;
    for (size_t i = 0; i < N; i++)
        ok &= buf[i] == (unsigned char)(i * 13);
    CHECK_TRUE(ok);
    CHECK_OK(
        cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 5));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CHECK_OK(cuPointerGetAttribute(
        &ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
    CHECK_EQ(ipc, 0);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(d));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(&h, d));

    /* Default: a second open counts a reference to the same mapping. */
    CHECK_OK(cuIpcOpenMemHandle(&d2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK_EQ(d2, d);
    cusim_stats s;
    cusim_get_stats(&s);
    CHECK_EQ(s.ipc_open, 1);
    CHECK_OK(cuIpcCloseMemHandle(d));
    CHECK_OK(cuMemsetD8(d + 100, 0xee, 10)); /* still mapped */
    CHECK_OK(cuIpcCloseMemHandle(d));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuIpcCloseMemHandle(d));
    cusim_get_stats(&s);
    CHECK_EQ(s.ipc_open, 0);

    /* The older driver behaviour: a second open is an error. */
    sim.ipc_reopen_error = 1;
    CHECK_OK(cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK_CU(CUDA_ERROR_ALREADY_MAPPED,
             cuIpcOpenMemHandle(&d2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK_OK(cuMemsetD8(d, 0x42, N));
    CHECK_OK(cuCtxSynchronize());
    CHECK_OK(cuIpcCloseMemHandle(d));
    cusim_get_stats(&s);
    CHECK_EQ(s.ipc_open, 0);

    CHECK_EQ(write(out, &done, 1), 1);
    CHECK_OK(cuDevicePrimaryCtxRelease(0));
    free(buf);
    printf("child: %d passed, %d failed\n", check_passed, check_failed);
    fflush(stdout);
    _exit(check_failed ? 1 : 0);
}

/* The exporter, with the importer forked before cuInit. */
static void
test_export_import(void)
{
    int to_child[2], to_parent[2];
    int piped = pipe(to_child) == 0 && pipe(to_parent) == 0;
    CHECK_TRUE(piped);
    if (!piped) {
        return; /* the descriptors are not set */
    }
    fflush(NULL);
    /* Forked before cuInit, the child may use the driver. */
    pid_t pid = fork();
    if (pid == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        child(to_child[0], to_parent[1]);
    }
    close(to_child[0]);
    close(to_parent[1]);

    CUcontext ctx;
    CUdeviceptr d, other;
    CUipcMemHandle h, h2;
    unsigned char *buf = malloc(N);
    void *pin;
    char name[64], c = 0;
    struct stat st;

    CHECK_OK(cuInit(0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK_OK(cuCtxSetCurrent(ctx));
    CHECK_OK(cuMemAlloc(&d, N));
    CHECK_OK(cuMemAlloc(&other, 256));
    for (size_t i = 0; i < N; i++)
        buf[i] = (unsigned char)(i * 13);
    CHECK_OK(cuMemcpyHtoD(d, buf, N));

    /* Any pointer into the allocation names all of it. */
    CHECK_OK(cuIpcGetMemHandle(&h, d + 4096));
    CHECK_OK(cuIpcGetMemHandle(&h2, d));
    CHECK_MEM_EQ(&h, &h2, sizeof(h));
    CHECK_OK(cuIpcGetMemHandle(&h2, other));
    CHECK_NE(memcmp(&h, &h2, sizeof(h)), 0);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(&h2, other + 256));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(NULL, d));
    CHECK_OK(cuMemAllocHost(&pin, 64));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE,
             cuIpcGetMemHandle(&h2, (CUdeviceptr)pin));
    CHECK_OK(cuMemFreeHost(pin));

    /* The exported bytes are still the allocation's. */
    memset(buf, 0, N);
    CHECK_OK(cuMemcpyDtoH(buf, d, N));
    CHECK_EQ(buf[N - 1], (unsigned char)((N - 1) * 13));

    /* A process cannot open its own handle; garbage is refused. */
    CUdeviceptr x;
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT,
             cuIpcOpenMemHandle(&x, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    memset(&h2, 0, sizeof(h2));
    CHECK_CU(CUDA_ERROR_INVALID_HANDLE,
             cuIpcOpenMemHandle(&x, h2, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));

    CHECK_EQ(write(to_child[1], &h, sizeof(h)), (ssize_t)sizeof(h));
    CHECK_TRUE(read(to_parent[0], &c, 1) == 1 && c == 'x');
    int status = -1;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* The child's writes are visible here. */
    CHECK_OK(cuMemcpyDtoH(buf, d, N));
    CHECK_TRUE(buf[0] == 0x42 && buf[N - 1] == 0x42);

    /* Freeing the exporter's allocation removes the shared object. */
    snprintf(name, sizeof(name), "/dev/shm/cusim.%ld.", (long)getpid());
    unsigned long long id;
    CHECK_OK(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
    snprintf(name + strlen(name), sizeof(name) - strlen(name), "%llu", id);
    CHECK_EQ(stat(name, &st), 0);
    CHECK_OK(cuMemFree(d));
    CHECK_NE(stat(name, &st), 0);
    CHECK_OK(cuMemFree(other));

    cusim_stats s;
    cusim_get_stats(&s);
    CHECK_TRUE(s.device_allocations == 0 && s.ipc_open == 0);
    CHECK_OK(cuDevicePrimaryCtxRelease(0));
    free(buf);
}

static const check_test tests[] = {
    {"export_import", test_export_import, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, NULL, NULL)
