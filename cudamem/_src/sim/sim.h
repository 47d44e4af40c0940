/* sim.h: state and helpers shared by the simulated driver's files.
 * Owns the cross-file contract (global lock, entry ids, allocations, stream
 * operations); not the driver ABI (cuda.h) nor the control API (cusim.h). */
#ifndef CUSIM_SIM_H
#define CUSIM_SIM_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "addrtree.h"
#include "cusim.h"

/* The name of every stream worker thread (at most 15 characters). */
#define SIM_WORKER_NAME "cusim-stream"

#define SIM_EXPORT __attribute__((visibility("default")))
#define SIM_MAX_DEVICES 16
#define SIM_ALIGN 256
#define SIM_MAX_PITCH ((size_t)2147483647) /* MAX_PITCH attribute */
#define SIM_DRIVER_VERSION_DEFAULT 13000

/* Every entry point the simulator implements, by plain name. The order is
 * the order of cusim_entry_stats(). */
#define SIM_ENTRIES(X)                                                        \
    X(cuGetProcAddress)                                                       \
    X(cuInit)                                                                 \
    X(cuDriverGetVersion)                                                     \
    X(cuGetErrorName)                                                         \
    X(cuGetErrorString)                                                       \
    X(cuDeviceGetCount)                                                       \
    X(cuDeviceGet)                                                            \
    X(cuDeviceGetName)                                                        \
    X(cuDeviceGetAttribute)                                                   \
    X(cuDeviceTotalMem)                                                       \
    X(cuDeviceGetUuid)                                                        \
    X(cuDeviceGetPCIBusId)                                                    \
    X(cuDeviceGetByPCIBusId)                                                  \
    X(cuDeviceCanAccessPeer)                                                  \
    X(cuDevicePrimaryCtxRetain)                                               \
    X(cuDevicePrimaryCtxRelease)                                              \
    X(cuDevicePrimaryCtxReset)                                                \
    X(cuDevicePrimaryCtxGetState)                                             \
    X(cuDevicePrimaryCtxSetFlags)                                             \
    X(cuCtxCreate)                                                            \
    X(cuCtxDestroy)                                                           \
    X(cuCtxGetCurrent)                                                        \
    X(cuCtxSetCurrent)                                                        \
    X(cuCtxPushCurrent)                                                       \
    X(cuCtxPopCurrent)                                                        \
    X(cuCtxGetDevice)                                                         \
    X(cuCtxGetFlags)                                                          \
    X(cuCtxSynchronize)                                                       \
    X(cuCtxRecordEvent)                                                       \
    X(cuCtxGetStreamPriorityRange)                                            \
    X(cuCtxEnablePeerAccess)                                                  \
    X(cuCtxDisablePeerAccess)                                                 \
    X(cuCtxGetId)                                                             \
    X(cuCtxGetLimit)                                                          \
    X(cuCtxSetLimit)                                                          \
    X(cuCtxGetApiVersion)                                                     \
    X(cuDeviceGetP2PAttribute)                                                \
    X(cuProfilerStart)                                                        \
    X(cuProfilerStop)                                                         \
    X(cuMemGetInfo)                                                           \
    X(cuMemAlloc)                                                             \
    X(cuMemAllocPitch)                                                        \
    X(cuMemFree)                                                              \
    X(cuMemGetAddressRange)                                                   \
    X(cuMemAllocHost)                                                         \
    X(cuMemHostAlloc)                                                         \
    X(cuMemFreeHost)                                                          \
    X(cuMemHostGetDevicePointer)                                              \
    X(cuMemHostGetFlags)                                                      \
    X(cuMemHostRegister)                                                      \
    X(cuMemHostUnregister)                                                    \
    X(cuMemAllocManaged)                                                      \
    X(cuMemPrefetchAsync)                                                     \
    X(cuMemAdvise)                                                            \
    X(cuPointerGetAttribute)                                                  \
    X(cuPointerGetAttributes)                                                 \
    X(cuPointerSetAttribute)                                                  \
    X(cuMemRangeGetAttribute)                                                 \
    X(cuMemRangeGetAttributes)                                                \
    X(cuMemcpy)                                                               \
    X(cuMemcpyAsync)                                                          \
    X(cuMemcpyHtoD)                                                           \
    X(cuMemcpyHtoDAsync)                                                      \
    X(cuMemcpyDtoH)                                                           \
    X(cuMemcpyDtoHAsync)                                                      \
    X(cuMemcpyDtoD)                                                           \
    X(cuMemcpyDtoDAsync)                                                      \
    X(cuMemcpyPeer)                                                           \
    X(cuMemcpyPeerAsync)                                                      \
    X(cuMemcpy2D)                                                             \
    X(cuMemcpy2DAsync)                                                        \
    X(cuMemcpy2DUnaligned)                                                    \
    X(cuMemcpy3D)                                                             \
    X(cuMemcpy3DAsync)                                                        \
    X(cuMemcpy3DPeer)                                                         \
    X(cuMemcpy3DPeerAsync)                                                    \
    X(cuMemcpyBatchAsync)                                                     \
    X(cuMemsetD8)                                                             \
    X(cuMemsetD8Async)                                                        \
    X(cuMemsetD16)                                                            \
    X(cuMemsetD16Async)                                                       \
    X(cuMemsetD32)                                                            \
    X(cuMemsetD32Async)                                                       \
    X(cuMemsetD2D8)                                                           \
    X(cuMemsetD2D8Async)                                                      \
    X(cuMemsetD2D16)                                                          \
    X(cuMemsetD2D16Async)                                                     \
    X(cuMemsetD2D32)                                                          \
    X(cuMemsetD2D32Async)                                                     \
    X(cuStreamCreate)                                                         \
    X(cuStreamCreateWithPriority)                                             \
    X(cuStreamDestroy)                                                        \
    X(cuStreamSynchronize)                                                    \
    X(cuStreamQuery)                                                          \
    X(cuStreamWaitEvent)                                                      \
    X(cuStreamAddCallback)                                                    \
    X(cuLaunchHostFunc)                                                       \
    X(cuStreamGetPriority)                                                    \
    X(cuStreamGetFlags)                                                       \
    X(cuStreamGetCtx)                                                         \
    X(cuStreamAttachMemAsync)                                                 \
    X(cuStreamGetId)                                                          \
    X(cuStreamGetAttribute)                                                   \
    X(cuStreamSetAttribute)                                                   \
    X(cuEventCreate)                                                          \
    X(cuEventDestroy)                                                         \
    X(cuEventRecord)                                                          \
    X(cuEventRecordWithFlags)                                                 \
    X(cuEventSynchronize)                                                     \
    X(cuEventQuery)                                                           \
    X(cuEventElapsedTime)                                                     \
    X(cuIpcGetMemHandle)                                                      \
    X(cuIpcOpenMemHandle)                                                     \
    X(cuIpcCloseMemHandle)                                                    \
    X(cuIpcGetEventHandle)                                                    \
    X(cuIpcOpenEventHandle)                                                   \
    X(cuModuleLoad)                                                           \
    X(cuModuleLoadData)                                                       \
    X(cuModuleLoadDataEx)                                                     \
    X(cuModuleLoadFatBinary)                                                  \
    X(cuModuleUnload)                                                         \
    X(cuModuleGetFunction)                                                    \
    X(cuModuleGetGlobal)                                                      \
    X(cuLibraryLoadData)                                                      \
    X(cuLibraryLoadFromFile)                                                  \
    X(cuLibraryUnload)                                                        \
    X(cuLibraryGetKernel)                                                     \
    X(cuLibraryGetModule)                                                     \
    X(cuKernelGetFunction)                                                    \
    X(cuKernelGetAttribute)                                                   \
    X(cuLinkCreate)                                                           \
    X(cuLinkAddData)                                                          \
    X(cuLinkAddFile)                                                          \
    X(cuLinkComplete)                                                         \
    X(cuLinkDestroy)                                                          \
    X(cuLaunchKernel)                                                         \
    X(cuLaunchKernelEx)                                                       \
    X(cuLaunchCooperativeKernel)                                              \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                            \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)                   \
    X(cuOccupancyMaxPotentialBlockSize)                                       \
    X(cuOccupancyMaxPotentialBlockSizeWithFlags)                              \
    X(cuOccupancyAvailableDynamicSMemPerBlock)                                \
    X(cuFuncGetAttribute)                                                     \
    X(cuFuncSetAttribute)                                                     \
    X(cuFuncSetCacheConfig)                                                   \
    X(cuFuncGetModule)                                                        \
    X(cuMemAllocAsync)                                                        \
    X(cuMemAllocFromPoolAsync)                                                \
    X(cuMemFreeAsync)                                                         \
    X(cuMemPoolCreate)                                                        \
    X(cuMemPoolDestroy)                                                       \
    X(cuMemPoolSetAttribute)                                                  \
    X(cuMemPoolGetAttribute)                                                  \
    X(cuMemPoolTrimTo)                                                        \
    X(cuMemPoolSetAccess)                                                     \
    X(cuMemPoolGetAccess)                                                     \
    X(cuMemPoolExportToShareableHandle)                                       \
    X(cuMemPoolImportFromShareableHandle)                                     \
    X(cuMemPoolExportPointer)                                                 \
    X(cuMemPoolImportPointer)                                                 \
    X(cuDeviceGetDefaultMemPool)                                              \
    X(cuDeviceGetMemPool)                                                     \
    X(cuDeviceSetMemPool)                                                     \
    X(cuMemGetDefaultMemPool)                                                 \
    X(cuMemGetMemPool)                                                        \
    X(cuMemSetMemPool)                                                        \
    X(cuStreamBeginCapture)                                                   \
    X(cuStreamEndCapture)                                                     \
    X(cuStreamIsCapturing)                                                    \
    X(cuStreamGetCaptureInfo)                                                 \
    X(cuStreamUpdateCaptureDependencies)                                      \
    X(cuGraphCreate)                                                          \
    X(cuGraphDestroy)                                                         \
    X(cuGraphInstantiate)                                                     \
    X(cuGraphInstantiateWithParams)                                           \
    X(cuGraphUpload)                                                          \
    X(cuGraphExecDestroy)                                                     \
    X(cuGraphLaunch)                                                          \
    X(cuGraphGetNodes)                                                        \
    X(cuGraphGetRootNodes)                                                    \
    X(cuGraphGetEdges)                                                        \
    X(cuGraphNodeGetType)                                                     \
    X(cuGraphNodeGetDependencies)                                             \
    X(cuGraphNodeGetDependentNodes)                                           \
    X(cuUserObjectCreate)                                                     \
    X(cuUserObjectRetain)                                                     \
    X(cuUserObjectRelease)                                                    \
    X(cuGraphRetainUserObject)                                                \
    X(cuGraphReleaseUserObject)

typedef enum sim_entry {
#define SIM_ENTRY_ENUM(name) SIM_##name,
    SIM_ENTRIES(SIM_ENTRY_ENUM)
#undef SIM_ENTRY_ENUM
        SIM_NENTRIES
} sim_entry;

/* ---------------------------------------------------------------------------
 * Global state (entry.c). One lock guards all bookkeeping; nobody holds it
 * while moving bytes, sleeping for the delay or running a callback. */
typedef struct sim_global {
    pthread_mutex_t lock;
    pthread_cond_t progress; /* broadcast whenever any stream op completes */
    int initialized;         /* cuInit succeeded */
    pid_t init_pid;          /* a forked child of it gets NOT_INITIALIZED */
    int driver_version;      /* CUDAMEM_SIM_DRIVER_VERSION, default 13000 */
    int ndevices;            /* visible devices */
    struct sim_device *devices[SIM_MAX_DEVICES];
    unsigned delay_us;    /* CUDAMEM_SIM_DELAY_US */
    int hazards;          /* CUDAMEM_SIM_HAZARDS */
    int strict_pitch;     /* CUDAMEM_SIM_STRICT_PITCH */
    int strict_staging;   /* CUDAMEM_SIM_STRICT_STAGING */
    int strict_dtoh;      /* CUDAMEM_SIM_STRICT_DTOH */
    int strict_htod;      /* CUDAMEM_SIM_STRICT_HTOD */
    int ipc_reopen_error; /* CUDAMEM_SIM_IPC_REOPEN=error */
    int log_missing;      /* CUDAMEM_SIM_LOG_MISSING */
    int profiling;
    cusim_stats live; /* maintained by the owners of each kind */
} sim_global;

extern sim_global sim;

static inline void
sim_lock(void)
{
    pthread_mutex_lock(&sim.lock);
}
static inline void
sim_unlock(void)
{
    pthread_mutex_unlock(&sim.lock);
}

/* Every entry point starts with SIM_ENTER(name) (or SIM_ENTER_NOINIT for the
 * few the driver answers before cuInit). It counts the call, returns an
 * injected fault, refuses calls from stream callbacks (NOT_PERMITTED), from a
 * forked child of an initialized parent (NOT_INITIALIZED) and before cuInit
 * (NOT_INITIALIZED), and fails with the sticky code of a poisoned current
 * context. Takes and releases the lock itself. */
CUresult sim_enter(sim_entry id, int need_init);
#define SIM_ENTER(name)                                                       \
    do {                                                                      \
        CUresult sim_r_ = sim_enter(SIM_##name, 1);                           \
        if (sim_r_ != CUDA_SUCCESS)                                           \
            return sim_r_;                                                    \
    } while (0)
#define SIM_ENTER_NOINIT(name)                                                \
    do {                                                                      \
        CUresult sim_r_ = sim_enter(SIM_##name, 0);                           \
        if (sim_r_ != CUDA_SUCCESS)                                           \
            return sim_r_;                                                    \
    } while (0)
/* Adds to the bytes-moved counter of an entry point (any thread). */
void sim_count_bytes(sim_entry id, size_t nbytes);
/* Sticky codes poison the context they occur in (illegal address, ...). */
int sim_is_sticky(CUresult code);
/* Nonzero on a stream worker thread while it runs a callback/host func. */
int sim_in_callback(void);
void sim_set_in_callback(int on);
/* Reads an environment variable as an unsigned number; `dflt` when unset. */
unsigned long long sim_env_ull(const char *name, unsigned long long dflt);
uint64_t sim_now_ns(void); /* CLOCK_MONOTONIC */

/* cuGetProcAddress rows. Each file lists its own; entry.c searches them.
 * SIM_ALIAS_ROW (below) makes them, checking each function against the
 * driver's PFN type. */
typedef struct sim_proc {
    const char *name; /* plain name, as passed to cuGetProcAddress */
    int version;      /* the CUDA version that introduced this ABI */
    int ptds;         /* 1: the per-thread default stream variant */
    void *fn;
} sim_proc;

/* Alias tables. Most exported entry points only enter and forward, once per
 * ABI alias (plain, _v2, _ptds, ...). Each file lists its aliases in one
 * X-macro table, NAME_ALIASES(W, R), a row per alias:
 *   W(symbol, entry, version, pt, impl, (params), (args)): the exported
 *     `symbol params` enters `entry` (its counters and fault injection) and
 *     returns `impl args`;
 *   R(symbol, entry, version, pt): a hand-written symbol, for its
 *     cuGetProcAddress row alone.
 * `entry` is the plain name cuGetProcAddress answers for, `version` the
 * cudaTypedefs.h ABI version and `pt` empty, or _ptds or _ptsz for the
 * per-thread default stream variants. The file expands the table once with
 * (SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP) for its wrappers and once with
 * (SIM_ALIAS_ROW, SIM_ALIAS_ROW) for its rows. `entry` is only pasted, so
 * cuda.h's _v2 macros do not rename it. */
#define SIM_ALIAS_WRAPPER(sym, entry, ver, pt, impl, params, args)            \
    SIM_EXPORT CUresult CUDAAPI sym params                                    \
    {                                                                         \
        CUresult sim_r_ = sim_enter(SIM_##entry, 1);                          \
        if (sim_r_ != CUDA_SUCCESS)                                           \
            return sim_r_;                                                    \
        return impl args;                                                     \
    }
#define SIM_ALIAS_SKIP(sym, entry, ver, pt)
#define SIM_ALIAS_ROW(sym, entry, ver, pt, ...)                               \
    {#entry, ver, sizeof(#pt) > 1,                                            \
     (void *)(1 ? (sym) : (PFN_##entry##_v##ver##pt)0)},

extern const sim_proc sim_procs_entry[], sim_procs_device[],
    sim_procs_memory[], sim_procs_copy[], sim_procs_stream[],
    sim_procs_event[], sim_procs_ipc[], sim_procs_kernel[],
    sim_procs_mempool[], sim_procs_graph[];
extern const size_t sim_nprocs_entry, sim_nprocs_device, sim_nprocs_memory,
    sim_nprocs_copy, sim_nprocs_stream, sim_nprocs_event, sim_nprocs_ipc,
    sim_nprocs_kernel, sim_nprocs_mempool, sim_nprocs_graph;

/* ---------------------------------------------------------------------------
 * Devices and contexts (device.c). */
typedef struct sim_device {
    int ordinal;  /* as seen through CUDA_VISIBLE_DEVICES */
    int physical; /* index among CUDAMEM_SIM_DEVICES */
    char name[64];
    int cc_major, cc_minor;
    size_t total_mem;      /* CUDAMEM_SIM_MEMORY, cusim_set_memory */
    size_t used_mem;       /* device + IPC-opened bytes (memory.c) */
    uintptr_t va_base;     /* PROT_NONE reserve for device pointers */
    size_t va_size;        /* == total_mem rounded, at least 1 GiB */
    struct sim_heap *heap; /* address allocator (memory.c) */
    CUuuid uuid;           /* deterministic from `physical` */
    int pci_domain, pci_bus, pci_dev;
    struct CUctx_st *primary; /* always allocated, active or not */
    unsigned primary_flags;
    /* The first sticky error of any of its contexts, injected or raised
     * by the simulator (work on freed memory): a driver keeps it until
     * the process ends, so every context activated later starts with it
     * (cusim_reset, a new process for this, forgets it). */
    CUresult sticky;
} sim_device;

#define SIM_MAGIC_CTX 0x43545831u
#define SIM_MAGIC_STREAM 0x53545231u
#define SIM_MAGIC_EVENT 0x45564e31u

struct CUctx_st {
    uint32_t magic;
    sim_device *dev;
    int is_primary;
    int active; /* primary: retained since the last reset / release */
    int retain; /* primary retain count */
    unsigned flags;
    CUresult sticky; /* CUDA_SUCCESS, or the code that poisoned it */
    struct CUstream_st *legacy; /* the legacy default stream */
    /* cuCtxRecordEvent's records queue here, each behind the last op of
     * every stream above: made on first need, never a handle. */
    struct CUstream_st *recorder;
    struct CUstream_st *streams; /* every other stream (list via `next`) */
    /* Those of `streams` with work queued (list via `busy_next`), and how
     * many capture: what the legacy stream's rules and a context-wide
     * wait look at, without a walk over every idle stream. */
    struct CUstream_st *busy;
    int ncapturing;
    unsigned char peer[SIM_MAX_DEVICES]; /* peer access enabled to device */
    unsigned long long id;       /* cuCtxGetId: new at each activation */
    size_t limits[CU_LIMIT_MAX]; /* cuCtxSetLimit, reset at activation */
};

/* Lock held. A sticky error poisons ctx and its device; the first code
 * stays. */
void sim_ctx_poison(CUcontext ctx, CUresult code);
/* Lock held. Forgets every device's sticky error (cusim_reset). */
void sim_devices_forget_sticky(void);
/* The calling thread's current context (top of its stack), or NULL. */
CUcontext sim_ctx_current(void);
/* Current context, checked active and not poisoned; else an error code
 * (INVALID_CONTEXT when none, CONTEXT_IS_DESTROYED, or the sticky code). */
CUresult sim_ctx_get(CUcontext *out);
/* Nonzero when ctx is a context object the simulator made and is active. */
int sim_ctx_valid(CUcontext ctx);
/* Device by visible ordinal, or NULL. Caller holds the lock or the device
 * table is known initialized (it never changes after cuInit). */
sim_device *sim_device_get(int ordinal);
/* What cuDeviceGetAttribute answers for d (CUDAMEM_SIM_ATTRS included):
 * 0, or -1 for an attribute the device does not have. */
int sim_device_attribute(const sim_device *d, CUdevice_attribute attrib,
                         int *out);
/* Called by cuInit (entry.c) to build the device table from the
 * environment; returns a CUresult. */
CUresult sim_devices_init(void);

/* ---------------------------------------------------------------------------
 * Memory (memory.c). Every range the driver knows is one sim_alloc, found by
 * address. Device kinds live in their device's PROT_NONE reserve and are
 * backed by a separate mapping; host-accessible kinds are their own bytes. */
typedef enum sim_mem_kind {
    SIM_MEM_DEVICE = 1, /* cuMemAlloc */
    SIM_MEM_HOST,       /* cuMemAllocHost / cuMemHostAlloc */
    SIM_MEM_REGISTERED, /* cuMemHostRegister */
    SIM_MEM_MANAGED,    /* cuMemAllocManaged */
    SIM_MEM_IPC         /* cuIpcOpenMemHandle, in the importer */
} sim_mem_kind;

typedef struct sim_alloc {
    addrnode link; /* in memory.c's table, by base (a copy of base, size) */
    struct sim_alloc *hnext; /* memory.c's records by exact base: chain */
    sim_mem_kind kind;
    uintptr_t base;         /* the address the API hands out */
    size_t size;            /* bytes requested */
    unsigned char *backing; /* where the bytes are, host-accessible */
    size_t backing_size;
    CUcontext ctx;  /* the context it was made in */
    unsigned flags; /* host alloc / register / attach flags */
    unsigned long long buffer_id;
    int ipc_fd;        /* exporter: shared memory fd once exported */
    char ipc_name[40]; /* shared memory object name once exported */
    int ipc_refs;      /* importer: opens of this mapping */
    CUmemoryPool pool; /* SIM_MEM_DEVICE from a memory pool, or NULL */
    off_t pool_off;    /* its offset in an IPC-capable pool's file */
    int sync_memops;   /* cuPointerSetAttribute(SYNC_MEMOPS) */
} sim_alloc;

/* Caller holds the lock. The allocation containing `addr` (any kind). */
sim_alloc *sim_mem_find(uintptr_t addr);

/* A resolved range for a copy or memset: bytes to touch, and what it is. */
typedef struct sim_ref {
    unsigned char *bytes; /* host-accessible view of the range */
    sim_alloc *alloc;     /* NULL: pageable host memory */
} sim_ref;

enum { SIM_WANT_DEVICE = 1, SIM_WANT_HOST = 2, SIM_WANT_ANY = 3 };
/* Caller holds the lock. Resolves [addr, addr + len) to bytes: `want`
 * says what the call accepts (a device pointer must lie inside one live
 * device-accessible allocation; a host pointer may be pageable). Returns
 * CUDA_ERROR_INVALID_VALUE for a range the call cannot take. */
CUresult sim_mem_resolve(uintptr_t addr, size_t len, int want, sim_ref *out);

/* Frees everything a context owns (reset / destroy). Caller holds the lock
 * and has drained the context's streams. */
void sim_mem_release_ctx(CUcontext ctx);
/* Lock held. Nonzero while an op of any context runs on memory ctx owns:
 * a reset or destroy waits for those; ops still queued on that memory
 * fail with CUDA_ERROR_ILLEGAL_ADDRESS when they run. */
int sim_mem_ctx_busy(CUcontext ctx);
/* Lock held. Waits until no op of any context, queued or running, touches
 * a's range; returns a again, or NULL when it was freed meanwhile. */
sim_alloc *sim_mem_quiesce(sim_alloc *a);
/* Creates an allocation record of `kind` over existing bytes (IPC import);
 * for SIM_MEM_IPC a device address is reserved on ctx's device. */
CUresult sim_mem_add(sim_mem_kind kind, CUcontext ctx, unsigned char *backing,
                     size_t size, sim_alloc **out);
/* Removes a record made by sim_mem_add (does not unmap the backing). */
void sim_mem_remove(sim_alloc *a);
/* Device memory blocks for memory pools (mempool.c): `len` bytes of dev's
 * addresses with host-accessible backing (fresh, or fd's bytes from `off`
 * when fd >= 0), and back. Lock held. */
CUresult sim_mem_block_new(sim_device *dev, size_t len, int fd, off_t off,
                           uintptr_t *base, unsigned char **backing,
                           size_t *backing_size);
void sim_mem_block_delete(sim_device *dev, uintptr_t base, size_t len,
                          unsigned char *backing, size_t backing_size);
/* The granularity in which a block can give back its end. */
size_t sim_mem_block_granularity(void);
/* Gives back a block's bytes from `keep` (a multiple of the granularity,
 * below len) on: its addresses and its backing's pages. */
void sim_mem_block_shrink(sim_device *dev, uintptr_t base, size_t len,
                          unsigned char *backing, size_t *backing_size,
                          size_t keep);
/* Enters a pool allocation of `size` bytes over a block as a device
 * record of ctx. Lock held. */
CUresult sim_mem_pool_record(CUcontext ctx, CUmemoryPool pool, uintptr_t base,
                             size_t size, unsigned char *backing,
                             size_t backing_size, sim_alloc **out);
/* Frees a record as cuMemFree would once nothing uses it (a pool's goes
 * back to its pool). Lock held. */
void sim_mem_free(sim_alloc *a);
/* (Re)creates dev's PROT_NONE reserve and address heap for `nbytes` of
 * memory and sets total_mem; device.c calls it at init, cusim_set_memory
 * later. Fails (CUDA_ERROR_INVALID_VALUE) while anything is allocated there.
 * Caller holds the lock. */
CUresult sim_mem_set_size(sim_device *dev, size_t nbytes);

/* ---------------------------------------------------------------------------
 * Streams and events (stream.c). Every device operation is a sim_op queued
 * on a stream and run by a worker thread that the stream holds while it
 * has work. */
typedef struct sim_range {
    uintptr_t addr; /* API address (device or host) */
    size_t len;
    int write;
    /* The allocation it lies in when queued (sim_alloc.buffer_id), checked
     * again when the op runs; 0: pageable memory, not checked. */
    unsigned long long buffer_id;
} sim_range;

#define SIM_OP_RANGES 4

typedef struct sim_op sim_op;
struct sim_op {
    /* Filled by the submitter. */
    void (*run)(sim_op *op);  /* the work; on the worker, without the lock */
    void (*free)(sim_op *op); /* releases op and its payload; NULL: free() */
    sim_range ranges[SIM_OP_RANGES]; /* memory touched, for hazards */
    int nranges;
    sim_entry entry; /* for hazard reports */
    int pageable;    /* stages pageable memory at the call: not capturable */
    /* Owned by stream.c. */
    sim_op *next;
    struct CUstream_st *stream;
    uint64_t seq;
    void *sched; /* scheduling state (dependencies, clocks) */
};

typedef enum sim_sync {
    SIM_ASYNC,        /* an *Async call: return once queued */
    SIM_ASYNC_INLINE, /* one that moves no data (a pool allocation or
                       * free): run by the caller on an idle stream, as
                       * the driver's pool hands a block freed on a
                       * stream to that stream's next allocation at once */
    SIM_RETURN_EARLY, /* a synchronous call the driver returns from early */
    SIM_STAGED,       /* returns once the stream's earlier work is done */
    SIM_BLOCK         /* a synchronous call that returns when done */
} sim_sync;

/* Queues op on hStream of the current context: NULL is the legacy default
 * stream, or the calling thread's per-thread default stream when `ptds`;
 * CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are accepted. Validates the
 * handle (INVALID_HANDLE; a stream of another context: INVALID_CONTEXT).
 * Takes ownership of op (freed on error too). With SIM_BLOCK waits for the
 * op, with SIM_STAGED for the work queued before it, and the legacy
 * stream's rules apply to it as to any op. */
CUresult sim_stream_submit(CUstream hStream, int ptds, sim_op *op,
                           sim_sync mode);
/* Waits until every stream of ctx is idle (cuCtxSynchronize, frees). The
 * caller does not hold the lock. */
CUresult sim_ctx_drain(CUcontext ctx);
/* Lock held. Nonzero while an op of any stream, of any context, that
 * touches [addr, addr + len) is running, or with `queued_too` also while one
 * is queued. Frees wait on sim.progress until it is zero. */
int sim_range_busy(uintptr_t addr, size_t len, int queued_too);
/* Destroys every stream and event of ctx (reset / destroy); lock held,
 * streams drained. */
void sim_streams_release_ctx(CUcontext ctx);
/* Hazard reports (the checker lives here): count and last report since the
 * last reset; sim_hazards_reset forgets both (cusim_reset). */
unsigned long long sim_hazard_count(void);
/* Lock held. Reports a synchronous free (`id`) of pool memory that work
 * still uses: the simulator waits for it, a driver does not. */
void sim_hazard_unordered_free(sim_entry id, uintptr_t addr, size_t len);
/* Lock held. Reports a copy (`id`) whose source and destination overlap:
 * undefined on the driver, a memmove on the simulator. */
void sim_hazard_overlap(sim_entry id, uintptr_t dst, size_t dlen,
                        uintptr_t src, size_t slen);
const char *sim_last_hazard(void);
void sim_hazards_reset(void);

/* Checks a stream handle as sim_stream_submit would, without queueing:
 * *uid is the stream's unique id (0 for a default stream not made yet). */
CUresult sim_stream_check(CUstream hStream, int ptds, uint64_t *uid);
/* Nonzero when h names the legacy default stream: CU_STREAM_LEGACY, or
 * NULL unless `ptds` makes it the per-thread one. */
int sim_names_legacy(CUstream h, int ptds);
/* The unique id of the stream an op was queued on (lock held). */
uint64_t sim_op_stream_uid(const sim_op *op);
/* The context of the stream an op was queued on when that stream is a
 * blocking one, which its legacy stream waits for; else NULL. */
CUcontext sim_op_blocking_ctx(const sim_op *op);

/* ---------------------------------------------------------------------------
 * Memory pools (mempool.c). Lock held for all. */
/* A pool allocation's block goes back to its pool (record_free). */
void sim_pool_block_freed(sim_alloc *a);
/* What a synchronize waited for, which decides the pool blocks it gives
 * back (seen on an H100, tests/gpu/driver_facts.json "pool_release"): a
 * block freed on the stream synchronized or recorded on, by a free queued
 * before the synchronize or the record; for the legacy stream, also those
 * its context's blocking streams freed. A context's synchronize covers
 * every block (a NULL cover); an event recorded by cuCtxRecordEvent
 * none, as it is recorded on a stream of its own. */
typedef struct sim_pool_cover {
    uint64_t stream_uid;
    CUcontext legacy_of; /* the stream is this context's legacy stream */
    uint64_t frees;      /* stream-ordered frees queued before it */
} sim_pool_cover;
/* A synchronize point: pools holding more than their release threshold
 * give back the blocks `cover` covers, down to the threshold. */
void sim_pool_sync(const sim_pool_cover *cover);
/* Stream-ordered frees queued so far in the process. */
uint64_t sim_pool_frees_queued(void);
/* Gives back every unused block of dev's pools (context reset). */
void sim_pool_release_device(sim_device *dev);
/* The device a pool's memory lives on. */
sim_device *sim_pool_device(CUmemoryPool pool);

/* ---------------------------------------------------------------------------
 * IPC (ipc.c). */
/* Called when the exporter frees an allocation it exported (lock held). */
void sim_ipc_forget(sim_alloc *a);

#endif
