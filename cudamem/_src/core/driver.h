/* driver.h: the one gate to the CUDA driver. Owns the table of entry points
 * (each row an ABI version checked against cudaTypedefs.h), loading the
 * library, API tracing and the fork check. Does not own contexts or any
 * other driver object. */
#ifndef CM_DRIVER_H
#define CM_DRIVER_H

#include <cuda.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Row flags. */
#define CM_ROW_REQUIRED 0x1 /* the driver cannot be used without it */
#define CM_ROW_PTDS 0x2     /* has a per-thread default stream variant */

/* X(name, ABI version, flags). The version is the oldest ABI with the
 * semantics core needs (DESIGN rule 2); the field's type is
 * PFN_<name>_v<version>, so the compiler checks every call. */
#define CM_DRIVER_ROWS(X)                                                     \
    X(cuInit, 2000, CM_ROW_REQUIRED)                                          \
    X(cuDriverGetVersion, 2020, CM_ROW_REQUIRED)                              \
    X(cuDeviceGetCount, 2000, CM_ROW_REQUIRED)                                \
    X(cuDeviceGet, 2000, CM_ROW_REQUIRED)                                     \
    X(cuDeviceGetName, 2000, CM_ROW_REQUIRED)                                 \
    X(cuDeviceGetAttribute, 2000, CM_ROW_REQUIRED)                            \
    X(cuDeviceTotalMem, 3020, CM_ROW_REQUIRED)                                \
    X(cuDeviceGetUuid, 11040, CM_ROW_REQUIRED)                                \
    X(cuDeviceGetPCIBusId, 4010, CM_ROW_REQUIRED)                             \
    X(cuDevicePrimaryCtxRetain, 7000, CM_ROW_REQUIRED)                        \
    X(cuDevicePrimaryCtxRelease, 11000, CM_ROW_REQUIRED)                      \
    X(cuDevicePrimaryCtxReset, 11000, CM_ROW_REQUIRED)                        \
    X(cuCtxGetCurrent, 4000, CM_ROW_REQUIRED)                                 \
    X(cuCtxSetCurrent, 4000, CM_ROW_REQUIRED)                                 \
    X(cuCtxPushCurrent, 4000, CM_ROW_REQUIRED)                                \
    X(cuCtxPopCurrent, 4000, CM_ROW_REQUIRED)                                 \
    X(cuCtxGetDevice, 2000, CM_ROW_REQUIRED)                                  \
    X(cuCtxSynchronize, 2000, CM_ROW_REQUIRED)                                \
    X(cuMemGetInfo, 3020, CM_ROW_REQUIRED)                                    \
    X(cuDeviceCanAccessPeer, 4000, CM_ROW_REQUIRED)                           \
    X(cuCtxEnablePeerAccess, 4000, CM_ROW_REQUIRED)                           \
    X(cuProfilerStart, 4000, CM_ROW_REQUIRED)                                 \
    X(cuProfilerStop, 4000, CM_ROW_REQUIRED)                                  \
    X(cuMemAlloc, 3020, CM_ROW_REQUIRED)                                      \
    X(cuMemFree, 3020, CM_ROW_REQUIRED)                                       \
    X(cuPointerGetAttributes, 7000, CM_ROW_REQUIRED)                          \
    X(cuMemcpyHtoD, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                      \
    X(cuMemcpyDtoH, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                      \
    X(cuMemcpyDtoD, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                      \
    X(cuMemcpyHtoDAsync, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                 \
    X(cuMemcpyDtoHAsync, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                 \
    X(cuMemcpyDtoDAsync, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                 \
    X(cuStreamCreate, 2000, CM_ROW_REQUIRED)                                  \
    X(cuStreamCreateWithPriority, 5050, CM_ROW_REQUIRED)                      \
    X(cuStreamDestroy, 4000, CM_ROW_REQUIRED)                                 \
    X(cuStreamSynchronize, 2000, CM_ROW_REQUIRED | CM_ROW_PTDS)               \
    X(cuStreamQuery, 2000, CM_ROW_REQUIRED | CM_ROW_PTDS)                     \
    X(cuStreamGetCtx, 9020, CM_ROW_REQUIRED | CM_ROW_PTDS)                    \
    X(cuCtxGetStreamPriorityRange, 5050, CM_ROW_REQUIRED)                     \
    X(cuMemcpy2D, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                        \
    X(cuMemcpy2DUnaligned, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)               \
    X(cuMemcpy2DAsync, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                   \
    X(cuMemcpy3D, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                        \
    X(cuMemcpy3DAsync, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                   \
    X(cuMemsetD8, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                        \
    X(cuMemsetD16, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                       \
    X(cuMemsetD32, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                       \
    X(cuMemsetD8Async, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                   \
    X(cuMemsetD16Async, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                  \
    X(cuMemsetD32Async, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                  \
    X(cuMemsetD2D8, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                      \
    X(cuMemsetD2D16, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                     \
    X(cuMemsetD2D32, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                     \
    X(cuMemsetD2D8Async, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                 \
    X(cuMemsetD2D16Async, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                \
    X(cuMemsetD2D32Async, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                \
    X(cuMemcpyPeer, 4000, CM_ROW_REQUIRED | CM_ROW_PTDS)                      \
    X(cuMemcpyPeerAsync, 4000, CM_ROW_REQUIRED | CM_ROW_PTDS)                 \
    X(cuEventCreate, 2000, CM_ROW_REQUIRED)                                   \
    X(cuEventDestroy, 4000, CM_ROW_REQUIRED)                                  \
    X(cuEventRecord, 2000, CM_ROW_REQUIRED | CM_ROW_PTDS)                     \
    X(cuEventSynchronize, 2000, CM_ROW_REQUIRED)                              \
    X(cuEventQuery, 2000, CM_ROW_REQUIRED)                                    \
    X(cuEventElapsedTime, 2000, CM_ROW_REQUIRED)                              \
    X(cuCtxRecordEvent, 12050, 0)                                             \
    X(cuStreamWaitEvent, 3020, CM_ROW_REQUIRED | CM_ROW_PTDS)                 \
    X(cuStreamAddCallback, 5000, CM_ROW_REQUIRED | CM_ROW_PTDS)               \
    X(cuMemHostAlloc, 2020, CM_ROW_REQUIRED)                                  \
    X(cuMemFreeHost, 2000, CM_ROW_REQUIRED)                                   \
    X(cuMemHostGetDevicePointer, 3020, CM_ROW_REQUIRED)                       \
    X(cuMemHostRegister, 6050, CM_ROW_REQUIRED)                               \
    X(cuMemHostUnregister, 4000, CM_ROW_REQUIRED)                             \
    X(cuMemAllocManaged, 6000, CM_ROW_REQUIRED)                               \
    X(cuMemPrefetchAsync, 12020, CM_ROW_PTDS)                                 \
    X(cuMemAdvise, 12020, 0)                                                  \
    X(cuMemGetAddressRange, 3020, CM_ROW_REQUIRED)                            \
    X(cuIpcGetMemHandle, 4010, CM_ROW_REQUIRED)                               \
    X(cuIpcOpenMemHandle, 11000, CM_ROW_REQUIRED)                             \
    X(cuIpcCloseMemHandle, 4010, CM_ROW_REQUIRED)                             \
    X(cuMemAllocAsync, 11020, CM_ROW_REQUIRED | CM_ROW_PTDS)                  \
    X(cuMemFreeAsync, 11020, CM_ROW_REQUIRED | CM_ROW_PTDS)                   \
    X(cuDeviceGetMemPool, 11020, CM_ROW_REQUIRED)                             \
    X(cuMemPoolTrimTo, 11020, CM_ROW_REQUIRED)                                \
    X(cuMemPoolSetAttribute, 11020, CM_ROW_REQUIRED)                          \
    X(cuMemPoolGetAttribute, 11020, CM_ROW_REQUIRED)                          \
    X(cuMemPoolCreate, 11020, CM_ROW_REQUIRED)                                \
    X(cuMemAllocFromPoolAsync, 11020, CM_ROW_REQUIRED | CM_ROW_PTDS)          \
    X(cuMemPoolExportToShareableHandle, 11020, CM_ROW_REQUIRED)               \
    X(cuMemPoolImportFromShareableHandle, 11020, CM_ROW_REQUIRED)             \
    X(cuMemPoolExportPointer, 11020, CM_ROW_REQUIRED)                         \
    X(cuMemPoolImportPointer, 11020, CM_ROW_REQUIRED)

typedef struct cm_driver_table {
#define CM_DRIVER_FIELD(name, version, flags) PFN_##name##_v##version name;
    CM_DRIVER_ROWS(CM_DRIVER_FIELD)
#undef CM_DRIVER_FIELD
} cm_driver_table;

extern cm_driver_table cm__drv;
extern int cm__log_api; /* CUDAMEM_LOG=api */

/* Loads the driver once per process: CUDAMEM_DRIVER, else `sim_path` when
 * CUDAMEM_SIMULATOR=1, else the system's libcuda.so.1; resolves the table
 * and calls cuInit. A failure is kept and returned again on every later
 * call. Thread-safe. */
int cm_driver_load(const char *sim_path, cm_error *err);
/* Nonzero once cm_driver_load succeeded in this process. */
int cm_driver_ready(void);
/* After a successful load: the library's path, version (12040 for 12.4),
 * whether it is the simulator, and whether the per-thread default stream
 * variants were resolved. */
const char *cm_driver_path(void);
int cm_driver_version(void);
int cm_driver_is_simulator(void);
int cm_driver_ptds(void);

/* The rows, for tests and diagnostics: 0 while index is in range. */
int cm_driver_row(size_t index, const char **name, int *version, int *flags,
                  int *present);

/* Fails with CM_ERR_FORK in a child of a process that initialized the
 * driver (DESIGN rule 10). Every core entry calls it first. */
int cm_fork_check(cm_error *err);

/* CM_CALL(err, fn, args...): calls the table's fn and returns 0, or -1 with
 * err filled. Arguments must be free of side effects: tracing evaluates
 * them a second time. */
typedef struct cm__arg {
    const void *value;
    size_t size;
} cm__arg;

int cm__done(cm_error *err, const char *call, CUresult rc, const cm__arg *args,
             const char *names);

/* `1 ? x : x` decays arrays to pointers and leaves structs whole; a
 * one-element array takes a struct (CUmemLocation) as its initializer. */
#define CM__ARG(x)                                                            \
    {(__typeof__(1 ? (x) : (x))[1]){x}, sizeof(__typeof__(1 ? (x) : (x)))},
#define CM__MAP1(m, a) m(a)
#define CM__MAP2(m, a, ...) m(a) CM__MAP1(m, __VA_ARGS__)
#define CM__MAP3(m, a, ...) m(a) CM__MAP2(m, __VA_ARGS__)
#define CM__MAP4(m, a, ...) m(a) CM__MAP3(m, __VA_ARGS__)
#define CM__MAP5(m, a, ...) m(a) CM__MAP4(m, __VA_ARGS__)
#define CM__MAP6(m, a, ...) m(a) CM__MAP5(m, __VA_ARGS__)
#define CM__MAP7(m, a, ...) m(a) CM__MAP6(m, __VA_ARGS__)
#define CM__MAP8(m, a, ...) m(a) CM__MAP7(m, __VA_ARGS__)
#define CM__MAP9(m, a, ...) m(a) CM__MAP8(m, __VA_ARGS__)
#define CM__MAP10(m, a, ...) m(a) CM__MAP9(m, __VA_ARGS__)
#define CM__MAP11(m, a, ...) m(a) CM__MAP10(m, __VA_ARGS__)
#define CM__MAP12(m, a, ...) m(a) CM__MAP11(m, __VA_ARGS__)
#define CM__PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, N, ...) N
#define CM__MAP(m, ...)                                                       \
    CM__PICK(__VA_ARGS__, CM__MAP12, CM__MAP11, CM__MAP10, CM__MAP9,          \
             CM__MAP8, CM__MAP7, CM__MAP6, CM__MAP5, CM__MAP4, CM__MAP3,      \
             CM__MAP2, CM__MAP1, )                                            \
    (m, __VA_ARGS__)

#define CM_CALL(err, fn, ...)                                                 \
    cm__done((err), #fn, cm__drv.fn(__VA_ARGS__),                             \
             cm__log_api                                                      \
                 ? (const cm__arg[]){CM__MAP(CM__ARG, __VA_ARGS__){NULL, 0}}  \
                 : NULL,                                                      \
             #__VA_ARGS__)

/* CM_REQUIRE(err, fn): 0 when the optional row fn was resolved, else -1
 * with CM_ERR_SUPPORT naming the entry point and the driver's version. */
#define CM_REQUIRE(err, fn) (cm__drv.fn != NULL ? 0 : cm__missing((err), #fn))

int cm__missing(cm_error *err, const char *call);

/* CM_CALL0(err, fn): the same for entry points without arguments. */
#define CM_CALL0(err, fn)                                                     \
    cm__done((err), #fn, cm__drv.fn(),                                        \
             cm__log_api ? (const cm__arg[]){{NULL, 0}} : NULL, "")

#endif
