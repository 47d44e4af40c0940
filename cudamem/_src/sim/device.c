/* device.c: simulated devices (CUDA_VISIBLE_DEVICES, attributes, PCI ids,
 * UUIDs), primary and created contexts, the per-thread context stack, peer
 * access, profiler switches. Not what a context holds: streams and memory
 * are released through stream.c's and memory.c's hooks. */
#include "sim.h"

#include <cudaProfiler.h>
#include <cudaProfilerTypedefs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cudaTypedefs.h declares the first ABIs of these only for the driver's own
 * build; they are what cuGetProcAddress hands out below the _v2 versions. */
typedef CUresult(CUDAAPI *PFN_cuCtxDestroy_v2000)(CUcontext ctx);
typedef CUresult(CUDAAPI *PFN_cuCtxPopCurrent_v2000)(CUcontext *pctx);
typedef CUresult(CUDAAPI *PFN_cuCtxPushCurrent_v2000)(CUcontext ctx);
typedef CUresult(CUDAAPI *PFN_cuDevicePrimaryCtxRelease_v7000)(
    CUdevice_v1 dev);
typedef CUresult(CUDAAPI *PFN_cuDevicePrimaryCtxReset_v7000)(CUdevice_v1 dev);
typedef CUresult(CUDAAPI *PFN_cuDevicePrimaryCtxSetFlags_v7000)(
    CUdevice_v1 dev, unsigned int flags);

/* The unversioned (first ABI) symbols are exported too, as libcuda does. */
#undef cuCtxDestroy
#undef cuCtxPopCurrent
#undef cuCtxPushCurrent
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxSetFlags
#undef cuDeviceGetUuid
#undef cuCtxCreate
SIM_EXPORT CUresult CUDAAPI cuCtxDestroy(CUcontext ctx);
SIM_EXPORT CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx);
SIM_EXPORT CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx);
SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);
SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev,
                                                       unsigned int flags);
SIM_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
SIM_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags,
                                           CUdevice dev);

#define SIM_CTX_STACK 64
/* Context registry: append-only chunks, so that a handle can be checked
 * without the lock and without dereferencing a stranger's pointer. */
#define SIM_CTX_CHUNK 256
#define SIM_CTX_CHUNKS 1024

static __thread CUcontext tls_stack[SIM_CTX_STACK];
static __thread int tls_depth;

static CUcontext *ctx_chunks[SIM_CTX_CHUNKS];
static size_t ctx_count; /* published with release ordering */
static int no_peer;      /* CUDAMEM_SIM_NO_PEER */

/* CUDAMEM_SIM_ATTRS="<attribute>=<value>,...": attributes (by number) that
 * every device reports instead of its own, so that tests reach the paths
 * of devices that lack a capability. */
#define SIM_MAX_ATTR_OVERRIDES 16
static struct {
    int attr;
    int value;
} attr_overrides[SIM_MAX_ATTR_OVERRIDES];
static int n_attr_overrides;

/* ---------------------------------------------------------------------------
 * Contexts: registry and stack. */

/* Caller holds the lock. */
static CUresult
ctx_register(CUcontext ctx)
{
    size_t n = ctx_count, c = n / SIM_CTX_CHUNK;

    if (c >= SIM_CTX_CHUNKS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ctx_chunks[c] == NULL) {
        ctx_chunks[c] = calloc(SIM_CTX_CHUNK, sizeof(CUcontext));
        if (ctx_chunks[c] == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ctx_chunks[c][n % SIM_CTX_CHUNK] = ctx;
    __atomic_store_n(&ctx_count, n + 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

static int
ctx_known(CUcontext ctx)
{
    size_t n = __atomic_load_n(&ctx_count, __ATOMIC_ACQUIRE), i;

    if (ctx == NULL)
        return 0;
    for (i = 0; i < n; i++) {
        if (ctx_chunks[i / SIM_CTX_CHUNK][i % SIM_CTX_CHUNK] == ctx)
            return 1;
    }
    return 0;
}

static int
ctx_active(CUcontext ctx)
{
    return __atomic_load_n(&ctx->active, __ATOMIC_ACQUIRE);
}

CUcontext
sim_ctx_current(void)
{
    return tls_depth > 0 ? tls_stack[tls_depth - 1] : NULL;
}

CUresult
sim_ctx_get(CUcontext *out)
{
    CUcontext ctx = sim_ctx_current();
    CUresult sticky;

    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx_active(ctx))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    sticky = __atomic_load_n(&ctx->sticky, __ATOMIC_ACQUIRE);
    if (sticky != CUDA_SUCCESS)
        return sticky;
    if (out != NULL)
        *out = ctx;
    return CUDA_SUCCESS;
}

int
sim_ctx_valid(CUcontext ctx)
{
    return ctx_known(ctx) && ctx_active(ctx);
}

static CUcontext
ctx_new(sim_device *dev, int is_primary, unsigned flags)
{
    CUcontext ctx = calloc(1, sizeof(*ctx));

    if (ctx == NULL)
        return NULL;
    ctx->magic = SIM_MAGIC_CTX;
    ctx->dev = dev;
    ctx->is_primary = is_primary;
    ctx->flags = flags;
    if (ctx_register(ctx) != CUDA_SUCCESS) {
        free(ctx);
        return NULL;
    }
    return ctx;
}

void
sim_ctx_poison(CUcontext ctx, CUresult code)
{
    CUresult none = CUDA_SUCCESS;

    __atomic_compare_exchange_n(&ctx->sticky, &none, code, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    if (ctx->dev->sticky == CUDA_SUCCESS)
        ctx->dev->sticky = code;
}

void
sim_devices_forget_sticky(void)
{
    for (int i = 0; i < sim.ndevices; i++)
        sim.devices[i]->sticky = CUDA_SUCCESS;
}

/* Caller holds the lock. A new context of a device that had a sticky
 * error starts poisoned with it. */
static void
ctx_activate(CUcontext ctx)
{
    static unsigned long long next_ctx_id;
    int i;

    /* A new id each time: a reset primary context is a new context. */
    ctx->id = ++next_ctx_id;
    for (i = 0; i < CU_LIMIT_MAX; i++)
        ctx->limits[i] = 0;
    ctx->limits[CU_LIMIT_STACK_SIZE] = 1024;
    ctx->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
    ctx->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
    ctx->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
    ctx->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
    ctx->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
    ctx->sticky = ctx->dev->sticky;
    memset(ctx->peer, 0, sizeof(ctx->peer));
    __atomic_store_n(&ctx->active, 1, __ATOMIC_RELEASE);
    sim.live.contexts++;
}

/* Caller holds the lock and has drained ctx's streams. Frees what the
 * context owns; the object itself stays, so stale handles are detected. */
static void
ctx_deactivate(CUcontext ctx)
{
    size_t n = ctx_count, i;
    int ord = ctx->dev->ordinal;

    sim_streams_release_ctx(ctx);
    sim_mem_release_ctx(ctx);
    __atomic_store_n(&ctx->active, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&ctx->sticky, CUDA_SUCCESS, __ATOMIC_RELEASE);
    memset(ctx->peer, 0, sizeof(ctx->peer));
    /* Access granted to this context's device ends with it. */
    for (i = 0; i < n; i++) {
        CUcontext other = ctx_chunks[i / SIM_CTX_CHUNK][i % SIM_CTX_CHUNK];

        if (other != ctx && other->dev != ctx->dev)
            other->peer[ord] = 0;
    }
    sim.live.contexts--;
}

static CUresult
stack_push(CUcontext ctx)
{
    if (tls_depth == SIM_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tls_stack[tls_depth++] = ctx;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Device table. */

static uint64_t
splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void
make_uuid(int physical, CUuuid *uuid)
{
    uint64_t a = splitmix64(UINT64_C(0x6375646d656d) + (uint64_t)physical);
    uint64_t b = splitmix64(a);
    int i;

    for (i = 0; i < 8; i++) {
        uuid->bytes[i] = (char)(a >> (8 * i));
        uuid->bytes[8 + i] = (char)(b >> (8 * i));
    }
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it. */
static void
format_uuid(const CUuuid *uuid, char out[41])
{
    const unsigned char *u = (const unsigned char *)uuid->bytes;

    snprintf(out, 41,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
             u[11], u[12], u[13], u[14], u[15]);
}

/* ASCII classes for the environment's bytes: the locale plays no part,
 * and unlike ctype's table lookups the analyzer can see them bounded. */
static int
env_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static int
env_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* One CUDA_VISIBLE_DEVICES entry [s, e): a physical index, or -1 when it
 * names no device (which ends the list, as in the driver). */
static int
visible_entry(const char *s, const char *e, int nphys)
{
    char uuid[41];
    int p, match = -1;
    size_t len;

    while (s < e && env_space(*s))
        s++;
    while (e > s && env_space(e[-1]))
        e--;
    len = (size_t)(e - s);
    if (len == 0)
        return -1;
    if (env_digit(*s)) {
        long v = 0;

        for (; s < e; s++) {
            if (!env_digit(*s) || v > SIM_MAX_DEVICES)
                return -1;
            v = v * 10 + (*s - '0');
        }
        return v < nphys ? (int)v : -1;
    }
    if (len <= 4 || strncasecmp(s, "GPU-", 4) != 0 || len > 40)
        return -1;
    for (p = 0; p < nphys; p++) {
        CUuuid u;

        make_uuid(p, &u);
        format_uuid(&u, uuid);
        if (strncasecmp(uuid, s, len) == 0) {
            if (match >= 0)
                return -1; /* ambiguous prefix */
            match = p;
        }
    }
    return match;
}

/* Fills phys[] with the visible physical indices; returns how many. */
static int
visible_devices(int nphys, int phys[SIM_MAX_DEVICES])
{
    const char *s = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0, i;

    if (s == NULL) {
        for (i = 0; i < nphys; i++)
            phys[i] = i;
        return nphys;
    }
    while (*s != '\0' && n < SIM_MAX_DEVICES) {
        const char *e = strchr(s, ',');
        int p, dup = 0;

        if (e == NULL)
            e = s + strlen(s);
        p = visible_entry(s, e, nphys);
        for (i = 0; i < n; i++)
            dup |= phys[i] == p;
        if (p < 0 || dup)
            break;
        phys[n++] = p;
        if (*e == '\0')
            break;
        s = e + 1;
    }
    return n;
}

/* A malformed list stops at the first bad entry: what came before it
 * stays. */
static void
parse_attr_overrides(void)
{
    const char *s = getenv("CUDAMEM_SIM_ATTRS");
    char *end;

    n_attr_overrides = 0;
    while (s != NULL && *s != '\0' &&
           n_attr_overrides < SIM_MAX_ATTR_OVERRIDES) {
        long attr = strtol(s, &end, 0), value;

        if (end == s || *end != '=')
            return;
        s = end + 1;
        value = strtol(s, &end, 0);
        if (end == s || (*end != ',' && *end != '\0'))
            return;
        attr_overrides[n_attr_overrides].attr = (int)attr;
        attr_overrides[n_attr_overrides].value = (int)value;
        n_attr_overrides++;
        s = *end == ',' ? end + 1 : end;
    }
}

CUresult
sim_devices_init(void)
{
    unsigned long long nphys, mem;
    int phys[SIM_MAX_DEVICES], n, i;
    CUresult r;

    nphys = sim_env_ull("CUDAMEM_SIM_DEVICES", 1);
    if (nphys > SIM_MAX_DEVICES)
        nphys = SIM_MAX_DEVICES;
    mem = sim_env_ull("CUDAMEM_SIM_MEMORY", 16ULL << 30);
    if (mem == 0 || mem > SIZE_MAX / 2)
        mem = 16ULL << 30;
    no_peer = sim_env_ull("CUDAMEM_SIM_NO_PEER", 0) != 0;
    parse_attr_overrides();
    n = visible_devices((int)nphys, phys);
    if (n == 0)
        return CUDA_ERROR_NO_DEVICE;
    for (i = 0; i < n; i++) {
        sim_device *dev = calloc(1, sizeof(*dev));

        if (dev == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        dev->ordinal = i;
        dev->physical = phys[i];
        snprintf(dev->name, sizeof(dev->name),
                 "cudamem simulated device %d (H100-class)", phys[i]);
        dev->cc_major = 9;
        dev->cc_minor = 0;
        make_uuid(phys[i], &dev->uuid);
        dev->pci_domain = 0;
        dev->pci_bus = 0x18 + 8 * phys[i];
        dev->pci_dev = 0;
        sim.devices[i] = dev;
        sim.ndevices = i + 1;
        dev->primary = ctx_new(dev, 1, 0);
        if (dev->primary == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        r = sim_mem_set_size(dev, (size_t)mem);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

sim_device *
sim_device_get(int ordinal)
{
    if (ordinal < 0 || ordinal >= sim.ndevices)
        return NULL;
    return sim.devices[ordinal];
}

/* ---------------------------------------------------------------------------
 * Device queries. */

SIM_EXPORT CUresult CUDAAPI
cuDeviceGetCount(int *count)
{
    SIM_ENTER(cuDeviceGetCount);
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim.ndevices;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceGet(CUdevice *device, int ordinal)
{
    SIM_ENTER(cuDeviceGet);
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_device_get(ordinal) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceGetName(char *name, int len, CUdevice dev)
{
    sim_device *d;

    SIM_ENTER(cuDeviceGetName);
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    d = sim_device_get(dev);
    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", d->name);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    sim_device *d;

    SIM_ENTER(cuDeviceTotalMem);
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    d = sim_device_get(dev);
    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    *bytes = d->total_mem;
    sim_unlock();
    return CUDA_SUCCESS;
}

static CUresult
device_uuid(CUuuid *uuid, CUdevice dev)
{
    sim_device *d;

    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    d = sim_device_get(dev);
    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    *uuid = d->uuid;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    sim_device *d;

    SIM_ENTER(cuDeviceGetPCIBusId);
    if (pciBusId == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    d = sim_device_get(dev);
    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", d->pci_domain,
             d->pci_bus, d->pci_dev);
    return CUDA_SUCCESS;
}

/* [domain]:[bus]:[device].[function], [domain]:[bus]:[device] or
 * [bus]:[device].[function], all hexadecimal; v = {domain, bus, dev, fn}. */
static int
parse_bus_id(const char *s, unsigned v[4])
{
    int end = -1;

    v[0] = v[3] = 0;
    if (sscanf(s, "%x:%x:%x.%x%n", &v[0], &v[1], &v[2], &v[3], &end) == 4 &&
        end >= 0 && s[end] == '\0')
        return 0;
    end = -1;
    v[0] = v[3] = 0;
    if (sscanf(s, "%x:%x:%x%n", &v[0], &v[1], &v[2], &end) == 3 && end >= 0 &&
        s[end] == '\0')
        return 0;
    end = -1;
    v[0] = v[3] = 0;
    if (sscanf(s, "%x:%x.%x%n", &v[1], &v[2], &v[3], &end) == 3 && end >= 0 &&
        s[end] == '\0')
        return 0;
    return -1;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    unsigned v[4];
    int i;

    SIM_ENTER(cuDeviceGetByPCIBusId);
    if (dev == NULL || pciBusId == NULL || parse_bus_id(pciBusId, v) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < sim.ndevices; i++) {
        sim_device *d = sim.devices[i];

        if ((unsigned)d->pci_domain == v[0] && (unsigned)d->pci_bus == v[1] &&
            (unsigned)d->pci_dev == v[2] && v[3] == 0) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    SIM_ENTER(cuDeviceCanAccessPeer);
    if (canAccessPeer == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_device_get(dev) == NULL || sim_device_get(peerDev) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = !no_peer && dev != peerDev;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Attributes: an H100 SXM, except where the simulator does less (no virtual
 * memory management, no memory pools, no stream memory operations, no
 * pageable access). The switch has no default, so -Wswitch
 * fails the build when cuda.h grows an attribute. */
int
sim_device_attribute(const sim_device *d, CUdevice_attribute attrib, int *out)
{
    int v = INT_MIN; /* values outside the enum match no case */

    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        v = 64;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        v = 2147483647;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
        v = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        v = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        v = 49152;
        break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        v = 2147483647;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        v = 1980000;
        break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
        v = 512;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        v = 132;
        break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
        v = CU_COMPUTEMODE_DEFAULT;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
        v = 131072;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
        v = 131072;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
        v = 16384;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
        v = 16384;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
        v = 16384;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS:
        v = 2048;
        break;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
        v = 512;
        break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        v = d->pci_bus;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        v = d->pci_dev;
        break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        v = 2619000;
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        v = 5120;
        break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        v = 52428800;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        v = 2048;
        break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        v = 3;
        break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS:
        v = 2048;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE:
        v = 8192;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE:
        v = 8192;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        v = d->pci_domain;
        break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
        v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS:
        v = 2046;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH:
        v = 131072;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH:
        v = 16384;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT:
        v = 16384;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH:
        v = 16384;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS:
        v = 2048;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS:
        v = 2048;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS:
        v = 2046;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH:
        v = 268435456;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH:
        v = 131072;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT:
        v = 65000;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH:
        v = 2097120;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        v = d->cc_major;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        v = d->cc_minor;
        break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH:
        v = 32768;
        break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        v = 233472;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
        v = d->physical;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
        v = 2;
        break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        v = 232448;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
        v = 32505856;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:
        v = 134213632;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
        v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
        v = 4;
        break;
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS:
        v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:
        v = CU_DEVICE_NUMA_CONFIG_NONE;
        break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
        v = -1;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED:
        v = 0;
        break;
    /* 0x2330 (H100 SXM5) << 16 | NVIDIA's vendor id 0x10de. */
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID:
        v = 0x233010de;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID:
        v = 0x16c110de;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED:
        v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX:
        break;
    }
    if (v == INT_MIN)
        return -1;
    for (int i = 0; i < n_attr_overrides; i++) {
        if (attr_overrides[i].attr == (int)attrib)
            v = attr_overrides[i].value;
    }
    *out = v;
    return 0;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    sim_device *d;

    SIM_ENTER(cuDeviceGetAttribute);
    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    d = sim_device_get(dev);
    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (sim_device_attribute(d, attrib, pi) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Primary contexts. */

/* Only one scheduling policy, and nothing outside CU_CTX_FLAGS_MASK. */
static int
ctx_flags_ok(unsigned flags)
{
    unsigned sched = flags & CU_CTX_SCHED_MASK;

    return (flags & ~(unsigned)CU_CTX_FLAGS_MASK) == 0 &&
           (sched == 0 || sched == CU_CTX_SCHED_SPIN ||
            sched == CU_CTX_SCHED_YIELD ||
            sched == CU_CTX_SCHED_BLOCKING_SYNC);
}

SIM_EXPORT CUresult CUDAAPI
cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    sim_device *d;
    CUcontext ctx;

    SIM_ENTER(cuDevicePrimaryCtxRetain);
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    d = sim_device_get(dev);
    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    ctx = d->primary;
    sim_lock();
    ctx->retain++;
    if (!ctx->active)
        ctx_activate(ctx);
    sim_unlock();
    *pctx = ctx;
    return CUDA_SUCCESS;
}

/* Drains ctx outside the lock, then frees what it owns unless `still` says
 * someone took it back meanwhile. Returns with the lock released. */
static void
ctx_shutdown(CUcontext ctx, int (*still)(CUcontext))
{
    sim_ctx_drain(ctx);
    sim_lock();
    /* Other contexts' ops running on its memory finish first; those still
     * queued fail when they run (CUDA_ERROR_ILLEGAL_ADDRESS). */
    while (ctx->active && still(ctx) && sim_mem_ctx_busy(ctx))
        pthread_cond_wait(&sim.progress, &sim.lock);
    if (ctx->active && still(ctx))
        ctx_deactivate(ctx);
    sim_unlock();
}

static int
primary_unretained(CUcontext ctx)
{
    return ctx->retain == 0;
}

static int
always(CUcontext ctx)
{
    (void)ctx;
    return 1;
}

static CUresult
primary_release(CUdevice dev)
{
    sim_device *d = sim_device_get(dev);
    CUcontext ctx;
    int last;

    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    ctx = d->primary;
    sim_lock();
    if (ctx->retain == 0) {
        sim_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    last = --ctx->retain == 0 && ctx->active;
    sim_unlock();
    if (last)
        ctx_shutdown(ctx, primary_unretained);
    return CUDA_SUCCESS;
}

/* Resetting keeps the retain count: a later retain brings it back. */
static CUresult
primary_reset(CUdevice dev)
{
    sim_device *d = sim_device_get(dev);
    int active;

    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    active = d->primary->active;
    sim_unlock();
    if (active)
        ctx_shutdown(d->primary, always);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    sim_device *d;

    SIM_ENTER(cuDevicePrimaryCtxGetState);
    if (flags == NULL || active == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    d = sim_device_get(dev);
    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    *flags = d->primary_flags;
    *active = d->primary->active;
    sim_unlock();
    return CUDA_SUCCESS;
}

/* The first ABI refuses while the context is active; the second does not. */
static CUresult
primary_set_flags(CUdevice dev, unsigned flags, int refuse_active)
{
    sim_device *d = sim_device_get(dev);
    CUresult r = CUDA_SUCCESS;

    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!ctx_flags_ok(flags))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (refuse_active && d->primary->active) {
        r = CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE;
    }
    else {
        d->primary_flags = flags;
        d->primary->flags = flags;
    }
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Created contexts and the context stack. */

static CUresult
ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    sim_device *d;
    CUcontext ctx;
    CUresult r = CUDA_SUCCESS;

    if (pctx == NULL || !ctx_flags_ok(flags))
        return CUDA_ERROR_INVALID_VALUE;
    d = sim_device_get(dev);
    if (d == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (tls_depth == SIM_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    ctx = ctx_new(d, 0, flags);
    if (ctx == NULL)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        ctx_activate(ctx);
    sim_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    stack_push(ctx);
    *pctx = ctx;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
               unsigned int flags, CUdevice dev)
{
    SIM_ENTER(cuCtxCreate);
    if (ctxCreateParams != NULL) {
        int affinity = ctxCreateParams->execAffinityParams != NULL ||
                       ctxCreateParams->numExecAffinityParams != 0;

        if (affinity && ctxCreateParams->cigParams != NULL)
            return CUDA_ERROR_INVALID_VALUE;
        if (affinity)
            return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
        if (ctxCreateParams->cigParams != NULL)
            return CUDA_ERROR_NOT_SUPPORTED;
    }
    return ctx_create(pctx, flags, dev);
}

static CUresult
ctx_destroy(CUcontext ctx)
{
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx_known(ctx) || ctx->is_primary || !ctx_active(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (sim_ctx_current() == ctx)
        tls_depth--;
    ctx_shutdown(ctx, always);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_ENTER(cuCtxGetCurrent);
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = sim_ctx_current();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuCtxSetCurrent(CUcontext ctx)
{
    SIM_ENTER(cuCtxSetCurrent);
    if (ctx == NULL) {
        if (tls_depth > 0)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth == 0)
        return stack_push(ctx);
    tls_stack[tls_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

static CUresult
ctx_push(CUcontext ctx)
{
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return stack_push(ctx);
}

static CUresult
ctx_pop(CUcontext *pctx)
{
    if (tls_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_depth--;
    if (pctx != NULL)
        *pctx = tls_stack[tls_depth];
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuCtxGetDevice(CUdevice *device)
{
    CUcontext ctx;
    CUresult r;

    SIM_ENTER(cuCtxGetDevice);
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    *device = ctx->dev->ordinal;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    CUresult r;

    SIM_ENTER(cuCtxGetDevice);
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx == NULL) {
        r = sim_ctx_get(&ctx);
        if (r != CUDA_SUCCESS)
            return r;
    }
    else if (!sim_ctx_valid(ctx)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *device = ctx->dev->ordinal;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuCtxGetFlags(unsigned int *flags)
{
    CUcontext ctx;
    CUresult r;

    SIM_ENTER(cuCtxGetFlags);
    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    *flags = ctx->flags;
    sim_unlock();
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Context identity and limits. */

/* ctx, or the current context when NULL, checked active. */
static CUresult
ctx_or_current(CUcontext ctx, CUcontext *out)
{
    if (ctx == NULL)
        return sim_ctx_get(out);
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = ctx;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    CUresult r;

    SIM_ENTER(cuCtxGetId);
    if (ctxId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    r = ctx_or_current(ctx, &ctx);
    if (r == CUDA_SUCCESS)
        *ctxId = ctx->id;
    sim_unlock();
    return r;
}

/* Every context the simulator makes has the _v2 context ABI. */
SIM_EXPORT CUresult CUDAAPI
cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    CUresult r;

    SIM_ENTER(cuCtxGetApiVersion);
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    r = ctx_or_current(ctx, &ctx);
    if (r == CUDA_SUCCESS)
        *version = 3020;
    sim_unlock();
    return r;
}

/* What cuCtxGetLimit / cuCtxSetLimit accept for limit on ctx's device:
 * 0, or CUDA_ERROR_UNSUPPORTED_LIMIT. The CIG limits belong to contexts
 * made with CIG parameters, which the simulator refuses. */
static CUresult
limit_supported(CUcontext ctx, CUlimit limit)
{
    switch (limit) {
    case CU_LIMIT_STACK_SIZE:
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:
    case CU_LIMIT_CIG_ENABLED:
        return CUDA_SUCCESS;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
        /* cuda.h: only below compute capability 9.0. */
        return ctx->dev->cc_major < 9 ? CUDA_SUCCESS
                                      : CUDA_ERROR_UNSUPPORTED_LIMIT;
    default:
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    }
}

SIM_EXPORT CUresult CUDAAPI
cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    CUcontext ctx;
    CUresult r;

    SIM_ENTER(cuCtxGetLimit);
    if (pvalue == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    r = limit_supported(ctx, limit);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    *pvalue = ctx->limits[limit];
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuCtxSetLimit(CUlimit limit, size_t value)
{
    CUcontext ctx;
    CUresult r;
    int max_l2 = 0;

    SIM_ENTER(cuCtxSetLimit);
    r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    r = limit_supported(ctx, limit);
    if (r != CUDA_SUCCESS)
        return r;
    switch (limit) {
    case CU_LIMIT_CIG_ENABLED:
        return CUDA_ERROR_INVALID_VALUE; /* can only be queried */
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
        if (value > 24) /* the maximum launch depth */
            return CUDA_ERROR_INVALID_VALUE;
        break;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
        /* A hint: clamped to 0..128, as cuda.h allows. */
        if (value > 128)
            value = 128;
        break;
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:
        sim_device_attribute(ctx->dev,
                             CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE,
                             &max_l2);
        if (value > (size_t)max_l2)
            value = (size_t)max_l2;
        break;
    default:
        break;
    }
    sim_lock();
    ctx->limits[limit] = value;
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib,
                        CUdevice srcDevice, CUdevice dstDevice)
{
    int peer;

    SIM_ENTER(cuDeviceGetP2PAttribute);
    if (sim_device_get(srcDevice) == NULL ||
        sim_device_get(dstDevice) == NULL || srcDevice == dstDevice)
        return CUDA_ERROR_INVALID_DEVICE;
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    peer = !no_peer;
    switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
        *value = 0;
        break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
        /* One host memory: every access and atomic works across it. */
        *value = peer;
        break;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED:
        *value = 0;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Peer access: unidirectional, from the current context to a device. */

SIM_EXPORT CUresult CUDAAPI
cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    CUcontext ctx;
    CUresult r;

    SIM_ENTER(cuCtxEnablePeerAccess);
    r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!sim_ctx_valid(peerContext) || peerContext == ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (no_peer || peerContext->dev == ctx->dev)
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    sim_lock();
    if (ctx->peer[peerContext->dev->ordinal])
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else
        ctx->peer[peerContext->dev->ordinal] = 1;
    sim_unlock();
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuCtxDisablePeerAccess(CUcontext peerContext)
{
    CUcontext ctx;
    CUresult r;

    SIM_ENTER(cuCtxDisablePeerAccess);
    r = sim_ctx_get(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!sim_ctx_valid(peerContext))
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_lock();
    if (peerContext->dev == ctx->dev || !ctx->peer[peerContext->dev->ordinal])
        r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    else
        ctx->peer[peerContext->dev->ordinal] = 0;
    sim_unlock();
    return r;
}

/* ---------------------------------------------------------------------------
 * Profiler: a switch with nothing behind it. */

SIM_EXPORT CUresult CUDAAPI
cuProfilerStart(void)
{
    CUresult r;

    SIM_ENTER(cuProfilerStart);
    r = sim_ctx_get(NULL);
    if (r == CUDA_SUCCESS)
        __atomic_store_n(&sim.profiling, 1, __ATOMIC_RELAXED);
    return r;
}

SIM_EXPORT CUresult CUDAAPI
cuProfilerStop(void)
{
    CUresult r;

    SIM_ENTER(cuProfilerStop);
    r = sim_ctx_get(NULL);
    if (r == CUDA_SUCCESS)
        __atomic_store_n(&sim.profiling, 0, __ATOMIC_RELAXED);
    return r;
}

/* ---------------------------------------------------------------------------
 * Entry points: one row per exported ABI alias (see SIM_ALIAS_WRAPPER in
 * sim.h); the wrappers of the W rows, then the cuGetProcAddress rows. */

/* clang-format off */
#define DEVICE_ALIASES(W, R)                                                  \
    R(cuDeviceGetCount, cuDeviceGetCount, 2000, )                             \
    R(cuDeviceGet, cuDeviceGet, 2000, )                                       \
    R(cuDeviceGetName, cuDeviceGetName, 2000, )                               \
    R(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, )                     \
    R(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, )                          \
    W(cuDeviceGetUuid, cuDeviceGetUuid, 9020, , device_uuid,                  \
      (CUuuid *uuid, CUdevice dev), (uuid, dev))                              \
    W(cuDeviceGetUuid_v2, cuDeviceGetUuid, 11040, , device_uuid,              \
      (CUuuid *uuid, CUdevice dev), (uuid, dev))                              \
    R(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, )                       \
    R(cuDeviceGetByPCIBusId, cuDeviceGetByPCIBusId, 4010, )                   \
    R(cuDeviceCanAccessPeer, cuDeviceCanAccessPeer, 4000, )                   \
    R(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, )             \
    W(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, ,           \
      primary_release, (CUdevice dev), (dev))                                 \
    W(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, ,       \
      primary_release, (CUdevice dev), (dev))                                 \
    W(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, ,               \
      primary_reset, (CUdevice dev), (dev))                                   \
    W(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 11000, ,           \
      primary_reset, (CUdevice dev), (dev))                                   \
    R(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, )         \
    W(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags, 7000, ,         \
      primary_set_flags, (CUdevice dev, unsigned int flags), (dev, flags, 1)) \
    W(cuDevicePrimaryCtxSetFlags_v2, cuDevicePrimaryCtxSetFlags, 11000, ,     \
      primary_set_flags, (CUdevice dev, unsigned int flags), (dev, flags, 0)) \
    W(cuCtxCreate_v2, cuCtxCreate, 3020, , ctx_create,                        \
      (CUcontext *pctx, unsigned int flags, CUdevice dev),                    \
      (pctx, flags, dev))                                                     \
    R(cuCtxCreate_v4, cuCtxCreate, 12050, )                                   \
    W(cuCtxDestroy, cuCtxDestroy, 2000, , ctx_destroy, (CUcontext ctx),       \
      (ctx))                                                                  \
    W(cuCtxDestroy_v2, cuCtxDestroy, 4000, , ctx_destroy, (CUcontext ctx),    \
      (ctx))                                                                  \
    R(cuCtxGetCurrent, cuCtxGetCurrent, 4000, )                               \
    R(cuCtxSetCurrent, cuCtxSetCurrent, 4000, )                               \
    W(cuCtxPushCurrent, cuCtxPushCurrent, 2000, , ctx_push, (CUcontext ctx),  \
      (ctx))                                                                  \
    W(cuCtxPushCurrent_v2, cuCtxPushCurrent, 4000, , ctx_push,                \
      (CUcontext ctx), (ctx))                                                 \
    W(cuCtxPopCurrent, cuCtxPopCurrent, 2000, , ctx_pop, (CUcontext *pctx),   \
      (pctx))                                                                 \
    W(cuCtxPopCurrent_v2, cuCtxPopCurrent, 4000, , ctx_pop,                   \
      (CUcontext *pctx), (pctx))                                              \
    R(cuCtxGetDevice, cuCtxGetDevice, 2000, )                                 \
    R(cuCtxGetDevice_v2, cuCtxGetDevice, 13000, )                             \
    R(cuCtxGetFlags, cuCtxGetFlags, 7000, )                                   \
    R(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, 4000, )                   \
    R(cuCtxDisablePeerAccess, cuCtxDisablePeerAccess, 4000, )                 \
    R(cuCtxGetId, cuCtxGetId, 12000, )                                        \
    R(cuCtxGetApiVersion, cuCtxGetApiVersion, 3020, )                         \
    R(cuCtxGetLimit, cuCtxGetLimit, 3010, )                                   \
    R(cuCtxSetLimit, cuCtxSetLimit, 3010, )                                   \
    R(cuDeviceGetP2PAttribute, cuDeviceGetP2PAttribute, 8000, )               \
    R(cuProfilerStart, cuProfilerStart, 4000, )                               \
    R(cuProfilerStop, cuProfilerStop, 4000, )

DEVICE_ALIASES(SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP)

const sim_proc sim_procs_device[] = {
    DEVICE_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
};
/* clang-format on */
const size_t sim_nprocs_device = sizeof(sim_procs_device) / sizeof(sim_proc);
