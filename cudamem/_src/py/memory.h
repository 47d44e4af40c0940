/* memory.h (py/): MemoryPointer, the Python owner of a core allocation
 * record (an array's gpu_data). Views share the record and point into it;
 * the record is released when the last MemoryPointer goes. Host-accessible
 * memory (managed) exports the buffer protocol. */
#ifndef CMPY_MEMORY_H
#define CMPY_MEMORY_H

#include "module.h"

#include "../core/memory.h"

typedef struct cmpy_MemoryPointer {
    PyObject_HEAD
    cm_mem *mem;      /* shared by views */
    CUdeviceptr ptr;  /* mem->ptr plus this view's offset */
    size_t size;      /* bytes from ptr */
    PyObject *owner;  /* the MemoryPointer that made mem, the object whose
                         memory mem borrows, or NULL: self */
    PyObject *weakreflist;
} cmpy_MemoryPointer;

/* Allocates nbytes on dev for work on `stream` (from dev's pool while it
 * is enabled), with the GIL released (core's out-of-memory recovery runs
 * the garbage collector, flushes pending frees and trims the pool before
 * its one retry; CudaOutOfMemoryError with the numbers after). New
 * reference, or NULL with an exception set. */
PyObject *cmpy_memory_alloc(cmpy_state *st, cm_device *dev, size_t nbytes,
                            CUstream stream);

/* The same for managed memory (core's cm_mem_alloc_managed). */
PyObject *cmpy_memory_alloc_managed(cmpy_state *st, cm_device *dev,
                                    size_t nbytes, int attach_global);

/* The mapping of an IPC handle on dev (core's cm_ipc_open, with the GIL
 * released): the whole allocation, shared with every other open of the
 * handle on dev in this process. */
PyObject *cmpy_memory_ipc_open(cmpy_state *st, cm_device *dev,
                               const CUipcMemHandle *handle);

/* The `size` bytes at ptr on dev, allocated by another library: never
 * freed by cudamem. `owner` (None or NULL: the pointer itself) is kept
 * alive by the pointer and every view of it, and is their `owner`. New
 * reference, or NULL with an exception set. */
PyObject *cmpy_memory_borrow(cmpy_state *st, cm_device *dev, CUdeviceptr ptr,
                             size_t size, PyObject *owner);

/* The bytes [offset, offset + size) of `base` (in range), sharing its
 * allocation; the owner is base's. New reference. */
PyObject *cmpy_memory_view(cmpy_state *st, cmpy_MemoryPointer *base,
                           size_t offset, size_t size);

#endif
