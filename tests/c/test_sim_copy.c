/* test_sim_copy.c: every memcpy and memset form of the simulator, checked
 * byte for byte against a host reference; the pitch, range and overlap
 * rules; the driver's synchronization of "synchronous" calls; counters. */
#include "check.h"
#include "sim.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static CUcontext ctx, ctx1;
static CUstream stream;

static double
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void
fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31 + seed * 7 + (i >> 8));
}

static void
entry_stats(const char *name, unsigned long long *calls,
            unsigned long long *bytes)
{
    *calls = *bytes = ~0ULL;
    for (int i = 0; i < cusim_entry_count(); i++) {
        unsigned long long c, b;
        const char *n = cusim_entry_stats(i, &c, &b);
        if (n && strcmp(n, name) == 0) {
            *calls = c;
            *bytes = b;
        }
    }
}

static void
test_linear(void)
{
    enum { N = 10000 };
    unsigned char *src = malloc(N), *dst = malloc(N), *pin;
    CUdeviceptr a, b;

    fill(src, N, 1);
    CHECK_OK(cuMemAlloc(&a, N));
    CHECK_OK(cuMemAlloc(&b, N));
    CHECK_OK(cuMemAllocHost((void **)&pin, N));

    CHECK_OK(cuMemcpyHtoD(a, src, N));
    CHECK_OK(cuMemcpyDtoD(b, a, N));
    memset(dst, 0, N);
    CHECK_OK(cuMemcpyDtoH(dst, b, N));
    CHECK_MEM_EQ(dst, src, N);

    /* Async forms on a stream, pinned and pageable. */
    fill(src, N, 2);
    CHECK_OK(cuMemcpyHtoDAsync(a + 10, src, N - 10, stream));
    CHECK_OK(cuMemcpyDtoDAsync(b, a, N, stream));
    CHECK_OK(cuMemcpyDtoHAsync(pin, b, N, stream));
    CHECK_OK(cuStreamSynchronize(stream));
    CHECK_MEM_EQ(pin + 10, src, N - 10);

    /* Unified cuMemcpy: every direction, kind inferred from the table. */
    fill(src, N, 3);
    memset(dst, 0, N);
    CHECK_OK(cuMemcpy(a, (CUdeviceptr)src, N));
    CHECK_OK(cuMemcpy(b, a, N));
    CHECK_OK(cuMemcpy((CUdeviceptr)pin, b, N));
    CHECK_OK(cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)pin, N));
    CHECK_MEM_EQ(dst, src, N);
    fill(src, N, 4);
    CHECK_OK(cuMemcpyAsync(a, (CUdeviceptr)src, N, stream));
    CHECK_OK(cuMemcpyAsync((CUdeviceptr)dst, a, N, stream));
    CHECK_OK(cuStreamSynchronize(stream));
    CHECK_MEM_EQ(dst, src, N);

    /* Zero bytes is a no-op. */
    CHECK_OK(cuMemcpyHtoD(a, src, 0));

    /* Ranges must lie inside one live allocation. */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(a + 1, src, N));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(dst, a, N + 1));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD((CUdeviceptr)dst, src, N));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(dst, (CUdeviceptr)src, N));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH((void *)b, a, 16));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoD(0, a, 16));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoDAsync(a, NULL, 16, stream));

    /* Overlap (same allocation, shared bytes) is undefined on the driver,
     * not an error: the simulator copies as memmove does. */
    {
        unsigned char before[300], after[300];
        CHECK_OK(cuMemcpyDtoH(before, a, 300));
        memmove(before + 100, before, 200);
        CHECK_OK(cuMemcpyDtoD(a + 100, a, 200));
        CHECK_OK(cuMemcpyDtoD(a, a, 16));
        CHECK_OK(cuMemcpyDtoH(after, a, 300));
        CHECK_MEM_EQ(before, after, 300);
        unsigned char *p = pin;
        for (int i = 0; i < 11; i++)
            p[i] = (unsigned char)(i + 1);
        memmove(before, p, 11);
        memmove(before + 1, before, 10);
        CHECK_OK(cuMemcpy((CUdeviceptr)pin + 1, (CUdeviceptr)pin, 10));
        CHECK_MEM_EQ(before, p, 11);
    }
    CHECK_OK(cuMemcpyDtoD(a + 100, a, 100));

    CHECK_OK(cuMemFree(b));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoD(b, a, 16));
    CHECK_OK(cuMemFree(a));
    CHECK_OK(cuMemFreeHost(pin));
    free(src);
    free(dst);
}

static void
test_peer(void)
{
    enum { N = 5000 };
    unsigned char src[N], dst[N];
    CUdeviceptr a, b;
    fill(src, N, 5);
    CHECK_OK(cuMemAlloc(&a, N));
    CHECK_OK(cuCtxSetCurrent(ctx1));
    CHECK_OK(cuMemAlloc(&b, N));
    CHECK_OK(cuCtxSetCurrent(ctx));

    CHECK_OK(cuMemcpyHtoD(a, src, N));
    CHECK_OK(cuMemcpyPeer(b, ctx1, a, ctx, N));
    memset(dst, 0, N);
    CHECK_OK(cuMemcpyDtoH(dst, b, N)); /* unified addressing */
    CHECK_MEM_EQ(dst, src, N);
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyPeer(b, ctx, a, ctx, N));
    CHECK_CU(CUDA_ERROR_INVALID_CONTEXT,
             cuMemcpyPeer(b, (CUcontext)src, a, ctx, N));

    fill(src, N, 6);
    CHECK_OK(cuMemcpyHtoD(a, src, N));
    CHECK_OK(cuMemcpyPeerAsync(b, ctx1, a, ctx, N, stream));
    CHECK_OK(cuStreamSynchronize(stream));
    memset(dst, 0, N);
    CHECK_OK(cuMemcpyDtoH(dst, b, N));
    CHECK_MEM_EQ(dst, src, N);

    /* 3-D peer: a 10 x 5 x 2 box from device 1 back to device 0. */
    CUDA_MEMCPY3D_PEER p;
    memset(&p, 0, sizeof(p));
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = b;
    p.srcContext = ctx1;
    p.srcPitch = 50;
    p.srcHeight = 10;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = a;
    p.dstContext = ctx;
    p.dstPitch = 20;
    p.dstHeight = 5;
    p.WidthInBytes = 10;
    p.Height = 5;
    p.Depth = 2;
    CHECK_OK(cuMemsetD8(a, 0, N));
    CHECK_OK(cuMemcpy3DPeer(&p));
    CHECK_OK(cuMemcpyDtoH(dst, a, 200));
    int ok = 1;
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 5; y++)
            for (int x = 0; x < 20; x++) {
                unsigned char want = x < 10 ? src[z * 500 + y * 50 + x] : 0;
                ok &= dst[z * 100 + y * 20 + x] == want;
            }
    CHECK_TRUE(ok);
    p.srcContext = ctx;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy3DPeerAsync(&p, stream));
    p.srcContext = ctx1;
    CHECK_OK(cuMemcpy3DPeerAsync(&p, stream));
    CHECK_OK(cuStreamSynchronize(stream));

    CHECK_OK(cuMemFree(a));
    CHECK_OK(cuMemFree(b));
}

/* Host reference of a 3-D copy between two byte buffers. */
static void
ref3d(unsigned char *dst, const unsigned char *src, const CUDA_MEMCPY3D *p)
{
    for (size_t z = 0; z < p->Depth; z++)
        for (size_t y = 0; y < p->Height; y++)
            memcpy(dst +
                       ((z + p->dstZ) * p->dstHeight + y + p->dstY) *
                           p->dstPitch +
                       p->dstXInBytes,
                   src +
                       ((z + p->srcZ) * p->srcHeight + y + p->srcY) *
                           p->srcPitch +
                       p->srcXInBytes,
                   p->WidthInBytes);
}

static void
test_2d(void)
{
    enum { SP = 100, SH = 20, DP = 64, DH = 30 };
    unsigned char src[SP * SH], ref[DP * DH], out[DP * DH];
    CUdeviceptr d, e;
    CUDA_MEMCPY2D p;

    fill(src, sizeof(src), 7);
    CHECK_OK(cuMemAlloc(&d, DP * DH));
    CHECK_OK(cuMemAlloc(&e, DP * DH));
    CHECK_OK(cuMemsetD8(d, 0xee, DP * DH));
    memset(ref, 0xee, sizeof(ref));

    memset(&p, 0, sizeof(p));
    p.srcMemoryType = CU_MEMORYTYPE_HOST;
    p.srcHost = src;
    p.srcPitch = SP;
    p.srcXInBytes = 5;
    p.srcY = 2;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = d;
    p.dstPitch = DP;
    p.dstXInBytes = 3;
    p.dstY = 4;
    p.WidthInBytes = 50;
    p.Height = 15;
    CHECK_OK(cuMemcpy2D(&p));
    for (int y = 0; y < 15; y++)
        memcpy(ref + (y + 4) * DP + 3, src + (y + 2) * SP + 5, 50);
    CHECK_OK(cuMemcpyDtoH(out, d, sizeof(out)));
    CHECK_MEM_EQ(out, ref, sizeof(ref));

    /* Device to device (unified types), then back to the host. */
    CUDA_MEMCPY2D q;
    memset(&q, 0, sizeof(q));
    q.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    q.srcDevice = d;
    q.srcPitch = DP;
    q.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    q.dstDevice = e;
    q.dstPitch = DP;
    q.WidthInBytes = DP;
    q.Height = DH;
    CHECK_OK(cuMemcpy2DUnaligned(&q));
    q.srcDevice = e;
    q.dstMemoryType = CU_MEMORYTYPE_HOST;
    q.dstHost = out;
    memset(out, 0, sizeof(out));
    CHECK_OK(cuMemcpy2DAsync(&q, stream));
    CHECK_OK(cuStreamSynchronize(stream));
    CHECK_MEM_EQ(out, ref, sizeof(ref));

    /* Pitch rules. */
    CUDA_MEMCPY2D bad = p;
    bad.dstPitch = 52; /* < WidthInBytes + dstXInBytes */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&bad));
    bad = p;
    bad.srcPitch = 0;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&bad));
    bad.Height = 1;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&bad));
    bad = p;
    bad.srcPitch = (size_t)2147483647 + 1;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&bad));
    bad = p;
    bad.dstY = 16; /* last row ends past the allocation */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&bad));
    bad = p;
    bad.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    CHECK_CU(CUDA_ERROR_NOT_SUPPORTED, cuMemcpy2D(&bad));
    bad = p;
    bad.dstMemoryType = (CUmemorytype)9;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&bad));
    bad = p;
    bad.dstMemoryType = CU_MEMORYTYPE_HOST; /* a device pointer as host */
    bad.dstHost = (void *)d;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&bad));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(NULL));

    /* Interleaved rows of one allocation do not overlap; shared bytes
     * do, which the driver leaves undefined (not an error): the simulator
     * copies them as memmove would. */
    memset(&q, 0, sizeof(q));
    q.srcMemoryType = q.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    q.srcDevice = d;
    q.dstDevice = d + 32;
    q.srcPitch = q.dstPitch = DP;
    q.WidthInBytes = 32;
    q.Height = DH;
    CHECK_OK(cuMemcpy2D(&q));
    for (int y = 0; y < DH; y++)
        memcpy(ref + y * DP + 32, ref + y * DP, 32);
    CHECK_OK(cuMemcpyDtoH(out, d, sizeof(out)));
    CHECK_MEM_EQ(out, ref, sizeof(ref));
    q.WidthInBytes = 33;
    q.dstDevice = d + 31;
    q.Height = DH - 1;
    CHECK_OK(cuMemcpy2D(&q));
    {
        unsigned char rows[DH * 33];
        for (int y = 0; y < DH - 1; y++)
            memcpy(rows + y * 33, ref + y * DP, 33);
        for (int y = 0; y < DH - 1; y++)
            memcpy(ref + y * DP + 31, rows + y * 33, 33);
    }
    CHECK_OK(cuMemcpyDtoH(out, d, sizeof(out)));
    CHECK_MEM_EQ(out, ref, sizeof(ref));

    CHECK_OK(cuMemFree(d));
    CHECK_OK(cuMemFree(e));
}

/* CUDAMEM_SIM_STRICT_PITCH: cuMemcpy2D and cuMemcpy2DAsync between device
 * memory refuse pitches that are not multiples of the texture pitch
 * alignment (cuda.h: they "may fail for pitches not computed by
 * cuMemAllocPitch()"); cuMemcpy2DUnaligned, 3-D copies and copies with a
 * host side take any pitch. */
static void
test_strict_pitch(void)
{
    enum { N = 4096 };
    unsigned char src[N], ref[N], out[N];
    CUdeviceptr d, e;
    CUDA_MEMCPY2D p, a;
    CUDA_MEMCPY3D t;
    int align;

    CHECK_EQ(cusim_get_strict_pitch(), 0);
    CHECK_OK(cuDeviceGetAttribute(
        &align, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 0));
    CHECK_EQ(align, 32);
    fill(src, N, 9);
    CHECK_OK(cuMemAlloc(&d, N));
    CHECK_OK(cuMemAlloc(&e, N));
    CHECK_OK(cuMemcpyHtoD(d, src, N));
    CHECK_OK(cuMemsetD8(e, 0, N));
    memset(ref, 0, N);

    /* A column of bytes (pitch 10) into a packed row (pitch 1). */
    memset(&p, 0, sizeof(p));
    p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = d + 3;
    p.srcPitch = 10;
    p.dstDevice = e;
    p.dstPitch = 1;
    p.WidthInBytes = 1;
    p.Height = 100;
    CHECK_OK(cuMemcpy2D(&p));
    for (int y = 0; y < 100; y++)
        ref[y] = src[3 + 10 * y];

    cusim_set_strict_pitch(1);
    CHECK_EQ(cusim_get_strict_pitch(), 1);
    p.dstDevice = e + 200;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&p));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2DAsync(&p, stream));
    a = p;
    a.srcMemoryType = a.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&a));
    /* One pitch aligned is not enough; both are, at any start address. */
    a = p;
    a.srcPitch = 64;
    a.dstPitch = 48;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy2DAsync(&a, stream));
    a.dstPitch = 32;
    a.dstDevice = e + 1001;
    a.Height = 30;
    CHECK_OK(cuMemcpy2DAsync(&a, stream));
    CHECK_OK(cuStreamSynchronize(stream));
    for (int y = 0; y < 30; y++)
        ref[1001 + 32 * y] = src[3 + 64 * y];
    /* Without the restriction: cuMemcpy2DUnaligned, and the 3-D copies. */
    CHECK_OK(cuMemcpy2DUnaligned(&p));
    for (int y = 0; y < 100; y++)
        ref[200 + y] = src[3 + 10 * y];
    memset(&t, 0, sizeof(t));
    t.srcMemoryType = t.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    t.srcDevice = d + 5;
    t.srcPitch = 7;
    t.srcHeight = 100;
    t.dstDevice = e + 2000;
    t.dstPitch = 3;
    t.dstHeight = 100;
    t.WidthInBytes = 3;
    t.Height = 100;
    t.Depth = 1;
    CHECK_OK(cuMemcpy3DAsync(&t, stream));
    CHECK_OK(cuStreamSynchronize(stream));
    t.dstDevice = e + 2400;
    CHECK_OK(cuMemcpy3D(&t));
    for (int y = 0; y < 100; y++) {
        memcpy(ref + 2000 + 3 * y, src + 5 + 7 * y, 3);
        memcpy(ref + 2400 + 3 * y, src + 5 + 7 * y, 3);
    }
    CHECK_OK(cuCtxSynchronize());
    CHECK_OK(cuMemcpyDtoH(out, e, N));
    CHECK_MEM_EQ(out, ref, N);
    /* A host side on either end is no intra-device copy. */
    a = p;
    a.dstMemoryType = CU_MEMORYTYPE_HOST;
    a.dstHost = out;
    memset(out, 0, N);
    CHECK_OK(cuMemcpy2D(&a));
    CHECK_OK(cuMemcpy2DAsync(&a, stream));
    CHECK_OK(cuStreamSynchronize(stream));
    for (int y = 0; y < 100; y++)
        CHECK_EQ(out[y], src[3 + 10 * y]);
    a = p;
    a.srcMemoryType = CU_MEMORYTYPE_HOST;
    a.srcHost = src + 4;
    CHECK_OK(cuMemcpy2D(&a));
    for (int y = 0; y < 100; y++)
        ref[200 + y] = src[4 + 10 * y];
    CHECK_OK(cuCtxSynchronize());
    CHECK_OK(cuMemcpyDtoH(out, e, N));
    CHECK_MEM_EQ(out, ref, N);

    cusim_set_strict_pitch(0);
    CHECK_OK(cuMemFree(d));
    CHECK_OK(cuMemFree(e));
}

static void
test_3d(void)
{
    enum { SP = 40, SH = 12, SD = 5, DP = 32, DH = 10, DD = 4 };
    unsigned char src[SP * SH * SD], ref[DP * DH * DD], out[DP * DH * DD];
    CUdeviceptr d;
    CUDA_MEMCPY3D p;

    fill(src, sizeof(src), 8);
    memset(ref, 0, sizeof(ref));
    CHECK_OK(cuMemAlloc(&d, sizeof(ref)));
    CHECK_OK(cuMemsetD32(d, 0, sizeof(ref) / 4));

    memset(&p, 0, sizeof(p));
    p.srcMemoryType = CU_MEMORYTYPE_HOST;
    p.srcHost = src;
    p.srcPitch = SP;
    p.srcHeight = SH;
    p.srcXInBytes = 4;
    p.srcY = 1;
    p.srcZ = 1;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = d;
    p.dstPitch = DP;
    p.dstHeight = DH;
    p.dstXInBytes = 2;
    p.dstY = 3;
    p.dstZ = 1;
    p.WidthInBytes = 30;
    p.Height = 7;
    p.Depth = 3;
    CHECK_OK(cuMemcpy3D(&p));
    ref3d(ref, src, &p);
    CHECK_OK(cuMemcpyDtoH(out, d, sizeof(out)));
    CHECK_MEM_EQ(out, ref, sizeof(ref));

    /* And back, asynchronously, into a fresh host buffer. */
    CUDA_MEMCPY3D b;
    memset(&b, 0, sizeof(b));
    b.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    b.srcDevice = d;
    b.srcPitch = DP;
    b.srcHeight = DH;
    b.dstMemoryType = CU_MEMORYTYPE_HOST;
    b.dstHost = out;
    b.dstPitch = DP;
    b.dstHeight = DH;
    b.WidthInBytes = DP;
    b.Height = DH;
    b.Depth = DD;
    memset(out, 1, sizeof(out));
    CHECK_OK(cuMemcpy3DAsync(&b, stream));
    CHECK_OK(cuStreamSynchronize(stream));
    CHECK_MEM_EQ(out, ref, sizeof(ref));

    CUDA_MEMCPY3D bad = p;
    bad.srcHeight = 7; /* < Height + srcY */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&bad));
    bad = p;
    bad.dstHeight = 0;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&bad));
    bad = p;
    bad.dstZ = 2; /* last slice past the allocation */
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&bad));
    bad = p;
    bad.srcLOD = 1;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&bad));
    bad = p;
    bad.reserved0 = src;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&bad));
    bad = p;
    bad.dstPitch = 31;
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&bad));
    bad = p;
    bad.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    CHECK_CU(CUDA_ERROR_NOT_SUPPORTED, cuMemcpy3D(&bad));
    CHECK_OK(cuMemFree(d));
}

/* Host reference of a 2-D memset of `elsize`-byte values. */
static void
ref_set(unsigned char *p, size_t pitch, unsigned v, unsigned elsize, size_t w,
        size_t h)
{
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++)
            memcpy(p + y * pitch + x * elsize, &v, elsize);
}

static void
test_memset(void)
{
    enum { N = 4096 };
    unsigned char ref[N], out[N];
    CUdeviceptr d;

    CHECK_OK(cuMemAlloc(&d, N));
    memset(ref, 0, N);
    CHECK_OK(cuMemsetD8(d, 0, N));

    CHECK_OK(cuMemsetD8(d + 1, 0x11, 100));
    ref_set(ref + 1, 0, 0x11, 1, 100, 1);
    CHECK_OK(cuMemsetD16(d + 200, 0x2233, 50));
    ref_set(ref + 200, 0, 0x2233, 2, 50, 1);
    CHECK_OK(cuMemsetD32(d + 400, 0x44556677, 25));
    ref_set(ref + 400, 0, 0x44556677, 4, 25, 1);
    CHECK_OK(cuMemsetD8Async(d + 600, 0x88, 7, stream));
    ref_set(ref + 600, 0, 0x88, 1, 7, 1);
    CHECK_OK(cuMemsetD16Async(d + 610, 0x99aa, 7, stream));
    ref_set(ref + 610, 0, 0x99aa, 2, 7, 1);
    CHECK_OK(cuMemsetD32Async(d + 640, 0xbbccddee, 7, stream));
    ref_set(ref + 640, 0, 0xbbccddee, 4, 7, 1);
    CHECK_OK(cuMemsetD2D8(d + 1024, 64, 0x12, 10, 5));
    ref_set(ref + 1024, 64, 0x12, 1, 10, 5);
    CHECK_OK(cuMemsetD2D16(d + 1030 + 256, 64, 0x3456, 10, 5));
    ref_set(ref + 1030 + 256, 64, 0x3456, 2, 10, 5);
    CHECK_OK(cuMemsetD2D32(d + 1600, 48, 0x789abcde, 10, 6));
    ref_set(ref + 1600, 48, 0x789abcde, 4, 10, 6);
    CHECK_OK(cuMemsetD2D8Async(d + 2048, 100, 0x21, 99, 3, stream));
    ref_set(ref + 2048, 100, 0x21, 1, 99, 3);
    CHECK_OK(cuMemsetD2D16Async(d + 2500, 100, 0x4321, 50, 3, stream));
    ref_set(ref + 2500, 100, 0x4321, 2, 50, 3);
    CHECK_OK(cuMemsetD2D32Async(d + 3000, 100, 0x87654321, 25, 3, stream));
    ref_set(ref + 3000, 100, 0x87654321, 4, 25, 3);
    /* The pitch is unused for one row. */
    CHECK_OK(cuMemsetD2D32(d + 3600, 0, 0x01020304, 8, 1));
    ref_set(ref + 3600, 0, 0x01020304, 4, 8, 1);
    CHECK_OK(cuStreamSynchronize(stream));
    CHECK_OK(cuMemcpyDtoH(out, d, N));
    CHECK_MEM_EQ(out, ref, N);

    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD16(d + 1, 0, 4));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD32(d + 2, 0, 4));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD32Async(d + 2, 0, 4, stream));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD2D16(d, 63, 0, 4, 2));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD2D32(d, 64, 0, 17, 2));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD8(d, 0, N + 1));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD32(d + N - 4, 0, 2));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD2D8(d, 64, 0, 64, 65));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD8((CUdeviceptr)ref, 0, 4));
    CHECK_OK(cuMemsetD8(d, 0, 0));
    CHECK_OK(cuMemFree(d));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD8(d, 0, 1));
}

/* A gate on a stream: a host function that holds the work queued behind
 * it until gate_release (or 10 s). A call that returned while the gate
 * was closed did not wait for its work: no clock bound needed. */
static int gate_open, gate_timed_out;

static void CUDA_CB
gate_hold(void *arg)
{
    double end = now_ms() + 10000;

    (void)arg;
    while (!__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE)) {
        if (now_ms() > end) {
            __atomic_store_n(&gate_timed_out, 1, __ATOMIC_RELEASE);
            return;
        }
        usleep(500);
    }
}

static void
gate_close(CUstream s)
{
    __atomic_store_n(&gate_open, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&gate_timed_out, 0, __ATOMIC_RELEASE);
    CHECK_OK(cuLaunchHostFunc(s, gate_hold, NULL));
}

/* Opens the gate: 1 when it had already given up, so the call made while
 * it was closed waited for the work behind it. */
static int
gate_release(void)
{
    __atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
    return __atomic_load_n(&gate_timed_out, __ATOMIC_ACQUIRE);
}

static void
test_sync_behaviour(void)
{
    enum { N = 1 << 16 };
    unsigned char *host = malloc(N), *out = malloc(N), *pin;
    CUdeviceptr a, b, m;
    double t0, dt;

    CHECK_OK(cuMemAlloc(&a, N));
    CHECK_OK(cuMemAlloc(&b, N));
    CHECK_OK(cuMemAllocManaged(&m, N, CU_MEM_ATTACH_GLOBAL));
    CHECK_OK(cuMemAllocHost((void **)&pin, N));
    memset((void *)m, 0, N);
    cusim_set_delay_us(20000);

    /* A memset of device memory returns before it runs; one of managed
     * memory once it has landed (the driver's synchronization rules). */
    gate_close(NULL);
    CHECK_OK(cuMemsetD8(b, 0x5a, N));
    CHECK_EQ(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
    CHECK_EQ(gate_release(), 0);
    CHECK_OK(cuCtxSynchronize());
    CHECK_OK(cuMemsetD8(m, 0x5a, N));
    CHECK_EQ(((unsigned char *)m)[N - 1], 0x5a);

    /* So does a device-to-device copy. */
    CHECK_OK(cuMemsetD8(a, 0x77, N));
    CHECK_OK(cuCtxSynchronize());
    gate_close(NULL);
    CHECK_OK(cuMemcpyDtoD(m, a, N));
    CHECK_EQ(((unsigned char *)m)[0], 0x5a);
    CHECK_EQ(gate_release(), 0);
    CHECK_OK(cuCtxSynchronize());
    CHECK_EQ(((unsigned char *)m)[0], 0x77);

    /* Pageable host-to-device: the source is staged before the call
     * returns, and by default the copy has landed too (the strict mode
     * that returns first is tested from Python: test_sim_strict.py). */
    fill(host, N, 9);
    memcpy(out, host, N);
    CHECK_OK(cuMemsetD8(b, 0, N));
    t0 = now_ms();
    CHECK_OK(cuMemcpyHtoD(b, host, N));
    dt = now_ms() - t0;
    CHECK_GE(dt, 15);
    memset(host, 0, N);
    CHECK_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);
    CHECK_OK(cuMemcpyDtoH(host, b, N));
    CHECK_MEM_EQ(host, out, N);

    /* The async form snapshots at call time too. */
    fill(host, N, 10);
    memcpy(out, host, N);
    CHECK_OK(cuMemcpyHtoDAsync(b, host, N, stream));
    memset(host, 0, N);
    CHECK_OK(cuStreamSynchronize(stream));
    CHECK_OK(cuMemcpyDtoH(host, b, N));
    CHECK_MEM_EQ(host, out, N);

    /* Device-to-host blocks until done. */
    memset(host, 0, N);
    t0 = now_ms();
    CHECK_OK(cuMemcpyDtoH(host, a, N));
    dt = now_ms() - t0;
    CHECK_GE(dt, 19);
    CHECK_EQ(host[N - 1], 0x77);

    /* Into pageable memory even the async form blocks; into pinned memory
     * it does not. */
    memset(host, 0, N);
    t0 = now_ms();
    CHECK_OK(cuMemcpyDtoHAsync(host, a, N, stream));
    dt = now_ms() - t0;
    CHECK_TRUE(dt >= 19 && host[0] == 0x77);
    memset(pin, 0, N);
    gate_close(stream);
    CHECK_OK(cuMemcpyDtoHAsync(pin, a, N, stream));
    CHECK_EQ(pin[0], 0);
    CHECK_EQ(gate_release(), 0);
    CHECK_OK(cuStreamSynchronize(stream));
    CHECK_EQ(pin[0], 0x77);

    /* From page-locked memory the synchronous copy blocks. */
    memset(pin, 0x31, N);
    t0 = now_ms();
    CHECK_OK(cuMemcpyHtoD(b, pin, N));
    dt = now_ms() - t0;
    CHECK_GE(dt, 19);

    cusim_set_delay_us(0);
    CHECK_OK(cuMemFree(a));
    CHECK_OK(cuMemFree(b));
    CHECK_OK(cuMemFree(m));
    CHECK_OK(cuMemFreeHost(pin));
    free(host);
    free(out);
}

static void
test_counters(void)
{
    enum { N = 1000 };
    unsigned char host[N];
    unsigned long long calls, bytes;
    CUdeviceptr d;
    CUDA_MEMCPY2D p;

    CHECK_OK(cuMemAlloc(&d, N));
    memset(host, 3, N);
    cusim_reset_counters();
    CHECK_OK(cuMemcpyHtoD(d, host, N));
    CHECK_OK(cuMemsetD32(d, 0, N / 4));
    memset(&p, 0, sizeof(p));
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = d;
    p.srcPitch = 100;
    p.dstMemoryType = CU_MEMORYTYPE_HOST;
    p.dstHost = host;
    p.dstPitch = 10;
    p.WidthInBytes = 10;
    p.Height = 10;
    CHECK_OK(cuMemcpy2D(&p));
    CHECK_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(d, host, N + 1));
    CHECK_OK(cuCtxSynchronize());
    entry_stats("cuMemcpyHtoD", &calls, &bytes);
    CHECK_TRUE(calls == 2 && bytes == N);
    entry_stats("cuMemsetD32", &calls, &bytes);
    CHECK_TRUE(calls == 1 && bytes == N);
    entry_stats("cuMemcpy2D", &calls, &bytes);
    CHECK_TRUE(calls == 1 && bytes == 100);
    CHECK_OK(cuMemFree(d));
}

/* The per-thread default stream rows, reached as cudamem reaches them. */
static void
test_ptds(void)
{
    enum { N = 512 };
    unsigned char src[N], dst[N];
    CUdeviceptr d;
    void *fn;
    CUdriverProcAddressQueryResult q;
    const cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

    fill(src, N, 11);
    CHECK_OK(cuMemAlloc(&d, N));
    CHECK_OK(cuGetProcAddress("cuMemcpyHtoD", &fn, 12000, ptds, &q));
    PFN_cuMemcpyHtoD_v7000_ptds htod = (PFN_cuMemcpyHtoD_v7000_ptds)fn;
    CHECK_OK(cuGetProcAddress("cuMemsetD8Async", &fn, 12000, ptds, &q));
    PFN_cuMemsetD8Async_v7000_ptsz set = (PFN_cuMemsetD8Async_v7000_ptsz)fn;
    CHECK_OK(cuGetProcAddress("cuMemcpyDtoHAsync", &fn, 12000, ptds, &q));
    PFN_cuMemcpyDtoHAsync_v7000_ptsz dtoh = (PFN_cuMemcpyDtoHAsync_v7000_ptsz)
        fn;
    CHECK_OK(cuGetProcAddress("cuStreamSynchronize", &fn, 12000, ptds, &q));
    PFN_cuStreamSynchronize_v7000_ptsz sync =
        (PFN_cuStreamSynchronize_v7000_ptsz)fn;
    if (htod && set && dtoh && sync) {
        CHECK_OK(htod(d, src, N));
        CHECK_OK(set(d, 0xcd, 16, NULL));
        memset(src, 0xcd, 16);
        CHECK_OK(dtoh(dst, d, N, NULL));
        CHECK_OK(sync(NULL));
        CHECK_MEM_EQ(dst, src, N);
    }
    else {
        CHECK_TRUE(!"per-thread rows missing");
    }
    CHECK_OK(cuMemFree(d));
}

static void
setup(void)
{
    setenv("CUDAMEM_SIM_DEVICES", "2", 1);
    CHECK_OK(cuInit(0));
    CHECK_OK(cuDevicePrimaryCtxRetain(&ctx1, 1));
    CHECK_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK_OK(cuCtxSetCurrent(ctx));
    /* A blocking stream: ordered against the legacy default stream, which
     * the synchronous calls that return early use. */
    CHECK_OK(cuStreamCreate(&stream, CU_STREAM_DEFAULT));
}

static void
teardown(void)
{
    cusim_stats s;

    CHECK_OK(cuStreamDestroy(stream));
    cusim_get_stats(&s);
    CHECK_TRUE(s.device_allocations == 0 && s.device_bytes == 0);
    CHECK_TRUE(s.host_allocations == 0 && s.managed_allocations == 0);
    CHECK_OK(cuDevicePrimaryCtxRelease(0));
    CHECK_OK(cuDevicePrimaryCtxRelease(1));
}

static const check_test tests[] = {
    {"linear", test_linear, 0},
    {"peer", test_peer, 0},
    {"2d", test_2d, 0},
    {"strict_pitch", test_strict_pitch, 0},
    {"3d", test_3d, 0},
    {"memset", test_memset, 0},
    {"sync_behaviour", test_sync_behaviour, 0},
    {"counters", test_counters, 0},
    {"ptds", test_ptds, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, setup, teardown)
