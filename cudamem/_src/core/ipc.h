/* ipc.h: legacy CUDA IPC of device memory. Exporting finds the allocation
 * around any device pointer and its handle; opening maps a handle once per
 * device (and context generation) in this process, every later open
 * sharing that mapping. Does not know arrays, pickling or which process
 * exported a handle: py/ipc.c and cudamem/ipc.py do. */
#ifndef CM_IPC_H
#define CM_IPC_H

#include <cuda.h>
#include <stddef.h>

#include "memory.h"

typedef struct cm_ipc_export {
    CUipcMemHandle handle;
    CUdeviceptr base; /* the allocation around the pointer */
    size_t size;      /* its bytes */
} cm_ipc_export;

/* cuMemGetAddressRange of ptr (memory of dev), then cuIpcGetMemHandle of
 * the allocation it lies in, in dev's primary context. Blocks: the driver
 * may wait for work on the memory. */
int cm_ipc_export_ptr(cm_device *dev, CUdeviceptr ptr, cm_ipc_export *out,
                      cm_error *err);

/* The mapping of `handle` in dev's primary context as a record of the
 * whole allocation (kind CM_FREE_IPC) with one new reference. The first
 * open calls cuIpcOpenMemHandle (CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) and
 * cuMemGetAddressRange for the size; until the record's last reference
 * goes, later opens share it, so the driver maps a handle once whichever
 * way it treats a second open. The last decref queues
 * cuIpcCloseMemHandle in dev's memory queue; a driver that refuses to map
 * again while that close is queued (CUDA_ERROR_ALREADY_MAPPED) gets the
 * queue flushed and the open tried once more. Blocks. */
int cm_ipc_open(cm_device *dev, const CUipcMemHandle *handle, cm_mem **out,
                cm_error *err);

/* cuMemPoolImportFromShareableHandle of the POSIX file descriptor fd
 * (another process's exportable pool; the caller still owns fd) in dev's
 * primary context. The pool is kept for the process: cudamem/ipc.py
 * imports each exporter's pool once per device. Blocks. */
int cm_ipc_import_pool(cm_device *dev, int fd, CUmemoryPool *out,
                       cm_error *err);

/* The allocation that `data` (cuMemPoolExportPointer's) names in `pool`
 * (cm_ipc_import_pool's), as cm_ipc_open maps a handle: a record of the
 * whole allocation (kind CM_FREE_POOL_IMPORT, not counted as cudamem's
 * memory) with one new reference, shared by every open of the same data
 * until its last reference goes, which queues its cuMemFree in dev's
 * memory queue (the driver's way to free an imported pointer). The first
 * open calls cuMemPoolImportPointer and cuMemGetAddressRange. Blocks. */
int cm_ipc_open_pool_ptr(cm_device *dev, CUmemoryPool pool,
                         const CUmemPoolPtrExportData *data, cm_mem **out,
                         cm_error *err);

#endif
