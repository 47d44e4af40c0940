/* entry.c: the simulator's front door: global state, the per-call gate
 * (counters, injected faults, init/fork/callback/sticky rules), cuInit,
 * versions, error names, cuGetProcAddress and the cusim_* control API.
 * Devices and contexts are device.c's; memory and streams are elsewhere. */
#include "sim.h"

#include "cuerrors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* cuda.h maps cuGetProcAddress to the 12000 ABI; both ABIs are exported. */
#undef cuGetProcAddress
SIM_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn,
                                             int cudaVersion,
                                             cuuint64_t flags);

sim_global sim = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .progress = PTHREAD_COND_INITIALIZER,
    .driver_version = SIM_DRIVER_VERSION_DEFAULT,
};

/* What the simulator answers for a symbol it does not know (and for one
 * known only at a higher version) when it plays a driver older than 12.0;
 * from 12.0 the driver documents CUDA_SUCCESS with pfn NULL, and
 * symbolStatus saying why. */
#define SIM_PROC_NOT_FOUND CUDA_ERROR_NOT_FOUND

#define SIM_MAX_FAULTS 64

typedef struct sim_fault {
    sim_entry id;
    CUresult code;
    unsigned after;
    unsigned count;
} sim_fault;

static const char *const entry_names[SIM_NENTRIES] = {
#define SIM_ENTRY_NAME(name) #name,
    SIM_ENTRIES(SIM_ENTRY_NAME)
#undef SIM_ENTRY_NAME
};

/* Calls and bytes per entry point (cusim_entry_stats). Each thread counts
 * into a block it owns with plain stores, where a locked add on shared
 * counters was more than half of the gate's time. Blocks are never freed:
 * a thread's exit gives its block up, counts and all, for the next thread
 * that needs one, so there are as many as threads ever ran at once.
 * counts_lock guards the list and the sums; a reset moves `baseline` to
 * the totals rather than racing the owners' stores. A thread without a
 * block (out of memory) counts into `unattached` with atomics. */
typedef struct counts {
    unsigned long long calls[SIM_NENTRIES];
    unsigned long long bytes[SIM_NENTRIES];
} counts;

typedef struct thread_counts {
    /* The owning thread's gate state (atomic), NULL while free: only the
     * owner writes the counts, and only the owner gives the block up. */
    struct sim_thread *owner;
    struct thread_counts *next;
    counts c;
} thread_counts;

static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;
static thread_counts *all_counts;
static counts baseline, unattached;
static pthread_key_t counts_key;
static pthread_once_t counts_once = PTHREAD_ONCE_INIT;
static int counts_keyed;

/* cusim_set_probe's function, and per entry point the calls for which it
 * answered nonzero. */
static int (*probe)(void);
static unsigned long long entry_probed[SIM_NENTRIES];

/* Faults are per thread; cusim_reset bumps the generation so that every
 * thread drops its list on its next call. */
static unsigned fault_gen;

/* What the gate keeps of its thread, together: one TLS lookup a call. */
typedef struct sim_thread {
    thread_counts *counts;
    int in_callback;
    int nfaults;
    unsigned fault_gen;
    sim_fault faults[SIM_MAX_FAULTS];
} sim_thread;

static __thread sim_thread tls;

static sim_thread *
thread_state(void)
{
    sim_thread *t = &tls;

    /* Keeps the address in a register: read once, not per field. */
    __asm__("" : "+r"(t));
    return t;
}

/* Set in the child of a fork taken after cuInit: everything fails. */
static int forked_child;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int init_done;
static CUresult init_result;

/* ---------------------------------------------------------------------------
 * Small helpers shared by every file. */

unsigned long long
sim_env_ull(const char *name, unsigned long long dflt)
{
    const char *s = getenv(name);
    char *end;
    unsigned long long v, mult = 1;

    if (s == NULL || *s == '\0')
        return dflt;
    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno != 0 || end == s || *s == '-')
        return dflt;
    switch (*end) {
    case 'k':
    case 'K':
        mult = 1ULL << 10;
        end++;
        break;
    case 'm':
    case 'M':
        mult = 1ULL << 20;
        end++;
        break;
    case 'g':
    case 'G':
        mult = 1ULL << 30;
        end++;
        break;
    case 't':
    case 'T':
        mult = 1ULL << 40;
        end++;
        break;
    default:
        break;
    }
    if (*end != '\0' || (mult > 1 && v > ~0ULL / mult))
        return dflt;
    return v * mult;
}

uint64_t
sim_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int
sim_in_callback(void)
{
    return thread_state()->in_callback;
}

void
sim_set_in_callback(int on)
{
    thread_state()->in_callback = on;
}

int
sim_is_sticky(CUresult code)
{
    switch (code) {
#define SIM_STICKY_CASE(name) case name:
        CM_CUDA_STICKY_ERRORS(SIM_STICKY_CASE)
#undef SIM_STICKY_CASE
        return 1;
    default:
        return 0;
    }
}

/* ---------------------------------------------------------------------------
 * The counters. */

/* A thread's exit gives its block up. It writes nothing of the thread's
 * own (TLS): a call later in the exit (another key's destructor) finds
 * the block no longer its and takes one again. */
static void
counts_detach(void *arg)
{
    thread_counts *b = arg;

    __atomic_store_n(&b->owner, NULL, __ATOMIC_RELEASE);
}

static void
counts_key_init(void)
{
    counts_keyed = pthread_key_create(&counts_key, counts_detach) == 0;
}

/* A block for the calling thread: a free one, else a new one; NULL when
 * none can be had. */
static thread_counts *
counts_attach(sim_thread *t)
{
    thread_counts *b;

    if (pthread_once(&counts_once, counts_key_init) != 0 || !counts_keyed)
        return NULL;
    pthread_mutex_lock(&counts_lock);
    for (b = all_counts; b != NULL; b = b->next) {
        if (__atomic_load_n(&b->owner, __ATOMIC_ACQUIRE) == NULL)
            break;
    }
    if (b == NULL && (b = calloc(1, sizeof(*b))) != NULL) {
        b->next = all_counts;
        all_counts = b;
    }
    if (b != NULL && pthread_setspecific(counts_key, b) != 0)
        b = NULL;
    if (b != NULL)
        __atomic_store_n(&b->owner, t, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&counts_lock);
    t->counts = b;
    return b;
}

/* Adds n to entry `id`'s calls, or its bytes when `bytes`. */
static void
count_add(sim_thread *t, int bytes, sim_entry id, unsigned long long n)
{
    thread_counts *b = t->counts;
    unsigned long long *c;

    if (b == NULL || __atomic_load_n(&b->owner, __ATOMIC_RELAXED) != t)
        b = counts_attach(t);
    if (b == NULL) {
        c = bytes ? &unattached.bytes[id] : &unattached.calls[id];
        __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
        return;
    }
    /* Only the owner writes its block; readers load it atomically. */
    c = bytes ? &b->c.bytes[id] : &b->c.calls[id];
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n,
                     __ATOMIC_RELAXED);
}

void
sim_count_bytes(sim_entry id, size_t nbytes)
{
    count_add(thread_state(), 1, id, (unsigned long long)nbytes);
}

/* Entry i's calls and bytes so far over every thread, the exited ones
 * included (lock held). */
static void
entry_total(int i, unsigned long long *calls, unsigned long long *bytes)
{
    *calls = __atomic_load_n(&unattached.calls[i], __ATOMIC_RELAXED);
    *bytes = __atomic_load_n(&unattached.bytes[i], __ATOMIC_RELAXED);
    for (thread_counts *b = all_counts; b != NULL; b = b->next) {
        *calls += __atomic_load_n(&b->c.calls[i], __ATOMIC_RELAXED);
        *bytes += __atomic_load_n(&b->c.bytes[i], __ATOMIC_RELAXED);
    }
}

/* ---------------------------------------------------------------------------
 * The gate. */

/* Calls that still work in a poisoned context: they do not use it, or they
 * are how a program gets rid of it. */
static int
sticky_exempt(sim_entry id)
{
    switch (id) {
    case SIM_cuGetProcAddress:
    case SIM_cuInit:
    case SIM_cuDriverGetVersion:
    case SIM_cuGetErrorName:
    case SIM_cuGetErrorString:
    case SIM_cuDeviceGetCount:
    case SIM_cuDeviceGet:
    case SIM_cuDeviceGetName:
    case SIM_cuDeviceGetAttribute:
    case SIM_cuDeviceTotalMem:
    case SIM_cuDeviceGetUuid:
    case SIM_cuDeviceGetPCIBusId:
    case SIM_cuDeviceGetByPCIBusId:
    case SIM_cuDeviceCanAccessPeer:
    case SIM_cuDevicePrimaryCtxRetain:
    case SIM_cuDevicePrimaryCtxRelease:
    case SIM_cuDevicePrimaryCtxReset:
    case SIM_cuDevicePrimaryCtxGetState:
    case SIM_cuDevicePrimaryCtxSetFlags:
    case SIM_cuCtxCreate:
    case SIM_cuCtxDestroy:
    case SIM_cuCtxGetCurrent:
    case SIM_cuCtxSetCurrent:
    case SIM_cuCtxPushCurrent:
    case SIM_cuCtxPopCurrent:
        return 1;
    default:
        return 0;
    }
}

/* Returns the code of a fault that fires for this call, or CUDA_SUCCESS. */
static CUresult
take_fault(sim_thread *t, sim_entry id)
{
    CUresult code = CUDA_SUCCESS;
    int i, fired = -1;

    if (t->fault_gen != __atomic_load_n(&fault_gen, __ATOMIC_ACQUIRE)) {
        t->nfaults = 0;
        return CUDA_SUCCESS;
    }
    for (i = 0; i < t->nfaults; i++) {
        if (t->faults[i].id == id && t->faults[i].after == 0) {
            fired = i;
            break;
        }
    }
    if (fired >= 0) {
        code = t->faults[fired].code;
        if (--t->faults[fired].count == 0) {
            memmove(&t->faults[fired], &t->faults[fired + 1],
                    (size_t)(t->nfaults - fired - 1) * sizeof(sim_fault));
            t->nfaults--;
        }
        return code;
    }
    for (i = 0; i < t->nfaults; i++) {
        if (t->faults[i].id == id)
            t->faults[i].after--;
    }
    return CUDA_SUCCESS;
}

CUresult
sim_enter(sim_entry id, int need_init)
{
    int (*p)(void) = __atomic_load_n(&probe, __ATOMIC_ACQUIRE);
    sim_thread *t = thread_state();
    CUcontext ctx;
    CUresult code;

    count_add(t, 0, id, 1);
    if (p != NULL && p() != 0)
        __atomic_fetch_add(&entry_probed[id], 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&forked_child, __ATOMIC_RELAXED))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (t->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    if (need_init && !__atomic_load_n(&sim.initialized, __ATOMIC_ACQUIRE))
        return CUDA_ERROR_NOT_INITIALIZED;
    ctx = sim_ctx_current();
    if (t->nfaults > 0) {
        code = take_fault(t, id);
        if (code != CUDA_SUCCESS) {
            /* An injected sticky code is as lasting as a genuine one:
             * it poisons the context and its device. */
            if (ctx != NULL && sim_is_sticky(code)) {
                sim_lock();
                sim_ctx_poison(ctx, code);
                sim_unlock();
            }
            return code;
        }
    }
    if (ctx != NULL && !sticky_exempt(id)) {
        code = __atomic_load_n(&ctx->sticky, __ATOMIC_ACQUIRE);
        if (code != CUDA_SUCCESS)
            return code;
    }
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Initialization and versions. */

static void
load_env(void)
{
    const char *s;
    unsigned long long v;

    v = sim_env_ull("CUDAMEM_SIM_DRIVER_VERSION", SIM_DRIVER_VERSION_DEFAULT);
    sim.driver_version = v > 0 && v < 1000000 ? (int)v
                                              : SIM_DRIVER_VERSION_DEFAULT;
    v = sim_env_ull("CUDAMEM_SIM_DELAY_US", 0);
    __atomic_store_n(&sim.delay_us, v > 10000000 ? 10000000u : (unsigned)v,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&sim.hazards, sim_env_ull("CUDAMEM_SIM_HAZARDS", 0) != 0,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&sim.strict_pitch,
                     sim_env_ull("CUDAMEM_SIM_STRICT_PITCH", 0) != 0,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&sim.strict_staging,
                     sim_env_ull("CUDAMEM_SIM_STRICT_STAGING", 0) != 0,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&sim.strict_dtoh,
                     sim_env_ull("CUDAMEM_SIM_STRICT_DTOH", 0) != 0,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&sim.strict_htod,
                     sim_env_ull("CUDAMEM_SIM_STRICT_HTOD", 0) != 0,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&sim.log_missing,
                     sim_env_ull("CUDAMEM_SIM_LOG_MISSING", 0) != 0,
                     __ATOMIC_RELAXED);
    s = getenv("CUDAMEM_SIM_IPC_REOPEN");
    sim.ipc_reopen_error = s != NULL && strcmp(s, "error") == 0;
}

static void
env_load_once(void)
{
    pthread_once(&env_once, load_env);
}

static void
fork_prepare(void)
{
    sim_lock();
    pthread_mutex_lock(&counts_lock);
}

static void
fork_parent(void)
{
    pthread_mutex_unlock(&counts_lock);
    sim_unlock();
}

static void
fork_child(void)
{
    __atomic_store_n(&forked_child, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&counts_lock);
    sim_unlock();
}

static void
register_atfork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

SIM_EXPORT CUresult CUDAAPI
cuInit(unsigned int Flags)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

    SIM_ENTER_NOINIT(cuInit);
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    env_load_once();
    sim_lock();
    if (!init_done) {
        init_result = sim_devices_init();
        init_done = 1;
        if (init_result == CUDA_SUCCESS) {
            sim.init_pid = getpid();
            __atomic_store_n(&sim.initialized, 1, __ATOMIC_RELEASE);
        }
    }
    sim_unlock();
    /* Registered outside the lock: the handlers take it. */
    if (init_result == CUDA_SUCCESS)
        pthread_once(&atfork_once, register_atfork);
    return init_result;
}

SIM_EXPORT CUresult CUDAAPI
cuDriverGetVersion(int *driverVersion)
{
    SIM_ENTER_NOINIT(cuDriverGetVersion);
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    env_load_once();
    *driverVersion = sim.driver_version;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Error names and strings: every CUresult of cuda.h. The switch below has no
 * default, so -Wswitch fails the build when cuda.h grows a code. */
#define SIM_ERRORS(X)                                                         \
    X(CUDA_SUCCESS, "no error")                                               \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                           \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                              \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                     \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                       \
    X(CUDA_ERROR_PROFILER_DISABLED,                                           \
      "profiler disabled while using external profiling tool")                \
    X(CUDA_ERROR_PROFILER_NOT_INITIALIZED,                                    \
      "profiler not initialized: call cudaProfilerInitialize()")              \
    X(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started")        \
    X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped")        \
    X(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")               \
    X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER,                                  \
      "API call requires a newer CUDA driver")                                \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE,                                          \
      "CUDA-capable device(s) is/are busy or unavailable")                    \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")             \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                    \
    X(CUDA_ERROR_DEVICE_NOT_LICENSED,                                         \
      "device doesn't have valid Grid license")                               \
    X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")             \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                   \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")          \
    X(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed")               \
    X(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed")           \
    X(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped")                          \
    X(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")                   \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU,                                           \
      "no kernel image is available for execution on the device")             \
    X(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired")               \
    X(CUDA_ERROR_NOT_MAPPED, "resource not mapped")                           \
    X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array")         \
    X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer")     \
    X(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered")    \
    X(CUDA_ERROR_UNSUPPORTED_LIMIT,                                           \
      "limit is not supported on this architecture")                          \
    X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE,                                      \
      "exclusive-thread device already in use by a different thread")         \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,                                     \
      "peer access is not supported between these two devices")               \
    X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")                 \
    X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT,                                    \
      "invalid OpenGL or DirectX context")                                    \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE,                                        \
      "uncorrectable NVLink error detected during the execution")             \
    X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND,                                      \
      "PTX JIT compiler library not found")                                   \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,                                     \
      "the provided PTX was compiled with an unsupported toolchain.")         \
    X(CUDA_ERROR_JIT_COMPILATION_DISABLED,                                    \
      "PTX JIT compilation was disabled")                                     \
    X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,                                   \
      "the provided execution affinity is not supported")                     \
    X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,                                    \
      "the provided PTX contains unsupported call to "                        \
      "cudaDeviceSynchronize")                                                \
    X(CUDA_ERROR_CONTAINED,                                                   \
      "an exception occurred on the device that is now contained")            \
    X(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid")            \
    X(CUDA_ERROR_FILE_NOT_FOUND, "file not found")                            \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND,                              \
      "shared object symbol not found")                                       \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED,                                   \
      "shared object initialization failed")                                  \
    X(CUDA_ERROR_OPERATING_SYSTEM,                                            \
      "OS call failed or operation not supported on this OS")                 \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                   \
    X(CUDA_ERROR_ILLEGAL_STATE,                                               \
      "the operation cannot be performed in the present state")               \
    X(CUDA_ERROR_LOSSY_QUERY,                                                 \
      "attempted introspection would be semantically lossy")                  \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                         \
    X(CUDA_ERROR_NOT_READY, "device not ready")                               \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered") \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,                                     \
      "too many resources requested for launch")                              \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated")   \
    X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING,                               \
      "launch uses incompatible texturing mode")                              \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,                                 \
      "peer access is already enabled")                                       \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled") \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,                                      \
      "cannot set while device is active in this process")                    \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                \
    X(CUDA_ERROR_ASSERT, "device-side assert triggered")                      \
    X(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted")          \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,                              \
      "part or all of the requested memory range is already mapped")          \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,                                  \
      "pointer does not correspond to a registered memory region")            \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error")                \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION,                                         \
      "an illegal instruction was encountered")                               \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")                    \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE,                                       \
      "operation not supported on global/shared address space")               \
    X(CUDA_ERROR_INVALID_PC, "invalid program counter")                       \
    X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                 \
    X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,                                \
      "too many blocks in cooperative launch")                                \
    X(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed")    \
    X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                    \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                    \
    X(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized")              \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,                                      \
      "system has unsupported display driver / cuda driver combination")      \
    X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,                              \
      "forward compatibility was attempted on non supported HW")              \
    X(CUDA_ERROR_MPS_CONNECTION_FAILED,                                       \
      "MPS client failed to connect to the MPS control daemon or the MPS "    \
      "server")                                                               \
    X(CUDA_ERROR_MPS_RPC_FAILURE,                                             \
      "the remote procedural call between the MPS server and the MPS client " \
      "failed")                                                               \
    X(CUDA_ERROR_MPS_SERVER_NOT_READY,                                        \
      "MPS server is not ready to accept new MPS client requests")            \
    X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED,                                     \
      "the hardware resources required to create MPS client have been "       \
      "exhausted")                                                            \
    X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED,                                 \
      "the hardware resources required to support device connections have "   \
      "been exhausted")                                                       \
    X(CUDA_ERROR_MPS_CLIENT_TERMINATED,                                       \
      "the MPS client has been terminated by the server")                     \
    X(CUDA_ERROR_CDP_NOT_SUPPORTED,                                           \
      "is using CUDA Dynamic Parallelism, but the current configuration, "    \
      "like MPS, does not support it")                                        \
    X(CUDA_ERROR_CDP_VERSION_MISMATCH,                                        \
      "unsupported interaction between different versions of CUDA Dynamic "   \
      "Parallelism")                                                          \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,                                  \
      "operation not permitted when stream is capturing")                     \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,                                  \
      "operation failed due to a previous error during capture")              \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE,                                        \
      "operation would result in a merge of separate capture sequences")      \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,                                    \
      "capture was not ended in the same stream as it began")                 \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED,                                     \
      "capturing stream has unjoined work")                                   \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,                                    \
      "dependency created on uncaptured work in another stream")              \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,                                     \
      "operation would make the legacy stream depend on a capturing "         \
      "blocking "                                                             \
      "stream")                                                               \
    X(CUDA_ERROR_CAPTURED_EVENT,                                              \
      "operation not permitted on an event last recorded in a capturing "     \
      "stream")                                                               \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,                                 \
      "attempt to terminate a thread-local capture sequence from another "    \
      "thread")                                                               \
    X(CUDA_ERROR_TIMEOUT, "wait operation timed out")                         \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,                                   \
      "the graph update was not performed because it included changes which " \
      "violated constraints specific to instantiated graph update")           \
    X(CUDA_ERROR_EXTERNAL_DEVICE,                                             \
      "an async error has occurred in external entity outside of CUDA")       \
    X(CUDA_ERROR_INVALID_CLUSTER_SIZE,                                        \
      "a kernel launch error has occurred due to cluster misconfiguration")   \
    X(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded")    \
    X(CUDA_ERROR_INVALID_RESOURCE_TYPE,                                       \
      "one or more resources passed in are not valid resource types for the " \
      "operation")                                                            \
    X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,                              \
      "one or more resources are insufficient or non-applicable for the "     \
      "operation")                                                            \
    X(CUDA_ERROR_KEY_ROTATION,                                                \
      "an error occurred during the key rotation sequence")                   \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

static int
error_lookup(CUresult error, const char **name, const char **desc)
{
    switch (error) {
#define SIM_ERROR_CASE(code, text)                                            \
    case code:                                                                \
        *name = #code;                                                        \
        *desc = text;                                                         \
        return 0;
        SIM_ERRORS(SIM_ERROR_CASE)
#undef SIM_ERROR_CASE
    }
    return -1;
}

SIM_EXPORT CUresult CUDAAPI
cuGetErrorName(CUresult error, const char **pStr)
{
    const char *name, *desc;

    SIM_ENTER_NOINIT(cuGetErrorName);
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (error_lookup(error, &name, &desc) != 0) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pStr = name;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuGetErrorString(CUresult error, const char **pStr)
{
    const char *name, *desc;

    SIM_ENTER_NOINIT(cuGetErrorString);
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (error_lookup(error, &name, &desc) != 0) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pStr = desc;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * cuGetProcAddress. */

typedef struct proc_table {
    const sim_proc *rows;
    const size_t *n;
} proc_table;

static const proc_table proc_tables[] = {
    {sim_procs_entry, &sim_nprocs_entry},
    {sim_procs_device, &sim_nprocs_device},
    {sim_procs_memory, &sim_nprocs_memory},
    {sim_procs_copy, &sim_nprocs_copy},
    {sim_procs_stream, &sim_nprocs_stream},
    {sim_procs_event, &sim_nprocs_event},
    {sim_procs_ipc, &sim_nprocs_ipc},
    {sim_procs_kernel, &sim_nprocs_kernel},
    {sim_procs_mempool, &sim_nprocs_mempool},
    {sim_procs_graph, &sim_nprocs_graph},
};

/* The row of `symbol` with the largest version <= cudaVersion among rows of
 * the given ptds kind; *known is set when the symbol has any row at all. */
static const sim_proc *
proc_find(const char *symbol, int cudaVersion, int ptds, int *known)
{
    const sim_proc *best = NULL;
    size_t t, i;

    for (t = 0; t < sizeof(proc_tables) / sizeof(proc_tables[0]); t++) {
        const sim_proc *rows = proc_tables[t].rows;
        size_t n = *proc_tables[t].n;

        for (i = 0; i < n; i++) {
            if (strcmp(rows[i].name, symbol) != 0)
                continue;
            *known = 1;
            if (rows[i].ptds != ptds || rows[i].version > cudaVersion)
                continue;
            if (best == NULL || rows[i].version > best->version)
                best = &rows[i];
        }
    }
    return best;
}

/* Names already logged by CUDAMEM_SIM_LOG_MISSING (under the lock). */
typedef struct missing_name {
    struct missing_name *next;
    char name[];
} missing_name;

static missing_name *missing_logged;

/* Says once per symbol on stderr that a client asked for it in vain, so
 * that the next gap in the simulator is one command away. */
static void
log_missing(const char *symbol, int cudaVersion, int known)
{
    missing_name *m;
    size_t len = strlen(symbol);

    sim_lock();
    for (m = missing_logged; m != NULL; m = m->next) {
        if (strcmp(m->name, symbol) == 0)
            break;
    }
    if (m == NULL && (m = malloc(sizeof(*m) + len + 1)) != NULL) {
        memcpy(m->name, symbol, len + 1);
        m->next = missing_logged;
        missing_logged = m;
        fprintf(stderr, "cusim: cuGetProcAddress(\"%s\", %d): %s\n", symbol,
                cudaVersion,
                known ? "not at this version" : "not in the simulator");
    }
    sim_unlock();
}

static CUresult
proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
             CUdriverProcAddressQueryResult *status)
{
    const sim_proc *row = NULL;
    int known = 0;

    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags != CU_GET_PROC_ADDRESS_DEFAULT &&
        flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM &&
        flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    env_load_once();
    /* As cuda.h documents for a version above the driver's. */
    if (cudaVersion > sim.driver_version)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        row = proc_find(symbol, cudaVersion, 1, &known);
    if (row == NULL)
        row = proc_find(symbol, cudaVersion, 0, &known);
    if (row == NULL) {
        if (__atomic_load_n(&sim.log_missing, __ATOMIC_RELAXED))
            log_missing(symbol, cudaVersion, known);
        *pfn = NULL;
        if (status != NULL)
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return sim.driver_version >= 12000 ? CUDA_SUCCESS : SIM_PROC_NOT_FOUND;
    }
    *pfn = row->fn;
    if (status != NULL)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                    cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    SIM_ENTER_NOINIT(cuGetProcAddress);
    return proc_address(symbol, pfn, cudaVersion, flags, status);
}

SIM_EXPORT CUresult CUDAAPI
cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                 cuuint64_t flags)
{
    SIM_ENTER_NOINIT(cuGetProcAddress);
    return proc_address(symbol, pfn, cudaVersion, flags, NULL);
}

/* ---------------------------------------------------------------------------
 * cuGetProcAddress rows, one per exported ABI alias (see SIM_ALIAS_WRAPPER
 * in sim.h). The wrappers here are hand-written: they run before cuInit. */

/* clang-format off */
#define ENTRY_ALIASES(W, R)                                                   \
    R(cuGetProcAddress, cuGetProcAddress, 11030, )                            \
    R(cuGetProcAddress_v2, cuGetProcAddress, 12000, )                         \
    R(cuInit, cuInit, 2000, )                                                 \
    R(cuDriverGetVersion, cuDriverGetVersion, 2020, )                         \
    R(cuGetErrorName, cuGetErrorName, 6000, )                                 \
    R(cuGetErrorString, cuGetErrorString, 6000, )

const sim_proc sim_procs_entry[] = {
    ENTRY_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
};
/* clang-format on */
const size_t sim_nprocs_entry = sizeof(sim_procs_entry) / sizeof(sim_proc);

/* ---------------------------------------------------------------------------
 * Control API (cusim.h). */

SIM_EXPORT int
cusim_is_simulator(void)
{
    return 1;
}

static int
entry_by_name(const char *name)
{
    int i;

    for (i = 0; name != NULL && i < SIM_NENTRIES; i++) {
        if (strcmp(entry_names[i], name) == 0)
            return i;
    }
    return -1;
}

SIM_EXPORT int
cusim_inject(const char *entry, int code, unsigned after, unsigned count)
{
    int id = entry_by_name(entry);
    unsigned gen = __atomic_load_n(&fault_gen, __ATOMIC_ACQUIRE);

    sim_thread *t = thread_state();

    if (id < 0)
        return -1;
    if (t->fault_gen != gen) {
        t->nfaults = 0;
        t->fault_gen = gen;
    }
    if (count == 0)
        return 0;
    if (t->nfaults == SIM_MAX_FAULTS)
        return -1;
    t->faults[t->nfaults].id = (sim_entry)id;
    t->faults[t->nfaults].code = (CUresult)code;
    t->faults[t->nfaults].after = after;
    t->faults[t->nfaults].count = count;
    t->nfaults++;
    return 0;
}

SIM_EXPORT void
cusim_clear_faults(void)
{
    thread_state()->nfaults = 0;
}

SIM_EXPORT void
cusim_get_stats(cusim_stats *out)
{
    if (out == NULL)
        return;
    sim_lock();
    *out = sim.live;
    sim_unlock();
}

SIM_EXPORT int
cusim_entry_count(void)
{
    return SIM_NENTRIES;
}

SIM_EXPORT const char *
cusim_entry_stats(int index, unsigned long long *calls,
                  unsigned long long *bytes)
{
    unsigned long long c, b;

    if (index < 0 || index >= SIM_NENTRIES)
        return NULL;
    pthread_mutex_lock(&counts_lock);
    entry_total(index, &c, &b);
    c -= baseline.calls[index];
    b -= baseline.bytes[index];
    pthread_mutex_unlock(&counts_lock);
    if (calls != NULL)
        *calls = c;
    if (bytes != NULL)
        *bytes = b;
    return entry_names[index];
}

SIM_EXPORT unsigned long long
cusim_entry_probed(int index)
{
    if (index < 0 || index >= SIM_NENTRIES)
        return 0;
    return __atomic_load_n(&entry_probed[index], __ATOMIC_RELAXED);
}

SIM_EXPORT void
cusim_set_probe(int (*fn)(void))
{
    __atomic_store_n(&probe, fn, __ATOMIC_RELEASE);
}

SIM_EXPORT void
cusim_reset_counters(void)
{
    pthread_mutex_lock(&counts_lock);
    for (int i = 0; i < SIM_NENTRIES; i++)
        entry_total(i, &baseline.calls[i], &baseline.bytes[i]);
    pthread_mutex_unlock(&counts_lock);
    for (int i = 0; i < SIM_NENTRIES; i++) {
        __atomic_store_n(&entry_probed[i], 0, __ATOMIC_RELAXED);
    }
}

SIM_EXPORT int
cusim_set_memory(int device, unsigned long long nbytes)
{
    sim_device *dev;
    CUresult r;

    if (!__atomic_load_n(&sim.initialized, __ATOMIC_ACQUIRE))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (nbytes == 0 || nbytes > SIZE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    dev = sim_device_get(device);
    r = dev != NULL ? sim_mem_set_size(dev, (size_t)nbytes)
                    : CUDA_ERROR_INVALID_DEVICE;
    sim_unlock();
    return (int)r;
}

SIM_EXPORT void
cusim_set_delay_us(unsigned us)
{
    env_load_once();
    __atomic_store_n(&sim.delay_us, us, __ATOMIC_RELAXED);
}

SIM_EXPORT unsigned
cusim_get_delay_us(void)
{
    env_load_once();
    return __atomic_load_n(&sim.delay_us, __ATOMIC_RELAXED);
}

SIM_EXPORT void
cusim_set_hazards(int on)
{
    env_load_once();
    __atomic_store_n(&sim.hazards, on != 0, __ATOMIC_RELAXED);
}

SIM_EXPORT void
cusim_set_strict_pitch(int on)
{
    env_load_once();
    __atomic_store_n(&sim.strict_pitch, on != 0, __ATOMIC_RELAXED);
}

SIM_EXPORT int
cusim_get_strict_pitch(void)
{
    env_load_once();
    return __atomic_load_n(&sim.strict_pitch, __ATOMIC_RELAXED);
}

SIM_EXPORT unsigned long long
cusim_hazard_count(void)
{
    return sim_hazard_count();
}

SIM_EXPORT const char *
cusim_last_hazard(void)
{
    return sim_last_hazard();
}

SIM_EXPORT void
cusim_reset(void)
{
    __atomic_fetch_add(&fault_gen, 1, __ATOMIC_ACQ_REL);
    thread_state()->nfaults = 0;
    cusim_reset_counters();
    sim_hazards_reset();
    sim_lock();
    sim_devices_forget_sticky();
    sim_unlock();
}
