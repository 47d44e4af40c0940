/* memory.h (py/): MemoryPointer, the Python owner of a core allocation
 * record (an array's gpu_data). Views share the record and point into it;
 * the record is released when the last MemoryPointer goes. Host-accessible
 * memory (managed) exports the buffer protocol (memory.c). Also what other
 * py/ files share of EMM plugins (emm.c): the allocations that ask a
 * context's manager first, the call into it, the parsing of plugins'
 * pointers and the finalizers they hand over. */
#ifndef CMPY_MEMORY_H
#define CMPY_MEMORY_H

#include "module.h"

#include "../core/memory.h"

typedef struct cmpy_MemoryPointer {
    PyObject_HEAD
    cm_mem *mem;     /* shared by views */
    CUdeviceptr ptr; /* mem->ptr plus this view's offset */
    size_t size;     /* bytes from ptr */
    PyObject *owner; /* the MemoryPointer that made mem, the object whose
                         memory mem borrows, or NULL: self */
    int managed;     /* managed memory, host-accessible at ptr */
    PyObject *weakreflist;
} cmpy_MemoryPointer;

/* Why writes through a record are refused: what py/ stores in
 * cm_mem.readonly (0: writable), for the message that refuses them. */
enum {
    CMPY_RO_CAI = 1,    /* a CUDA Array Interface said readonly */
    CMPY_RO_DLPACK,     /* a DLPack capsule was flagged read-only */
    CMPY_RO_REGISTERED, /* host memory registered read-only */
    CMPY_RO_HOST_ARRAY, /* the device side of a read-only NumPy array */
};

/* Why memory of cm_mem.readonly `readonly` (not 0) cannot be written:
 * "that a CUDA Array Interface exported read-only" and the like. */
const char *cmpy_memory_readonly_why(int readonly);

/* emm.c: allocates nbytes on dev for work on `stream`: from the context's
 * EMM plugin when it has one, else core's (from dev's pool while it
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
/* The same for an allocation of another process's pool (core's
 * cm_ipc_open_pool_ptr). */
PyObject *cmpy_memory_pool_open(cmpy_state *st, cm_device *dev,
                                CUmemoryPool pool,
                                const CUmemPoolPtrExportData *data);

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

struct cmpy_stream_ref;

/* Before asynchronous work on `ref` (stream.h) touching mem, a device
 * dev's stream: remembers a stream cudamem owns on the record, so that an
 * export orders after it (core's cm_mem_note_stream). 0, or -1 with an
 * exception set. */
int cmpy_memory_note_work(cmpy_state *st, cm_mem *mem, cm_device *dev,
                          const struct cmpy_stream_ref *ref);
/* After work on a foreign stream of dev was queued (status 0) on a and b
 * (or NULL): an event after it on each, since the stream may be destroyed
 * before an export orders it. If that fails the stream is waited for, so
 * that no work is left unordered. Returns `status`, or -1. */
int cmpy_memory_note_done(cmpy_state *st, cm_mem *a, cm_mem *b, cm_device *dev,
                          const struct cmpy_stream_ref *ref, int status);

/* memory.c: the records a MemoryPointer owns, and its arguments. */
/* nbytes from core's allocator on dev (its pool while that is on) for
 * work on `stream`: a new MemoryPointer, whatever the context's manager. */
PyObject *cmpy_memory_native_alloc(cmpy_state *st, cm_device *dev,
                                   size_t nbytes, CUstream stream);
/* The same for managed memory (core's cm_mem_alloc_managed). */
PyObject *cmpy_memory_native_managed(cmpy_state *st, cm_device *dev,
                                     size_t nbytes, int attach_global);
/* A MemoryPointer owning an external record for `size` bytes at ptr on
 * dev (host-accessible when `managed`), whose release hook calls
 * `finalizer` (or None) and drops `keep` (or None). */
PyObject *cmpy_memory_external(cmpy_state *st, cm_device *dev, CUdeviceptr ptr,
                               size_t size, int managed, PyObject *finalizer,
                               PyObject *keep, PyObject *owner);
/* An address given as an int or as an object with an int `.value` (a
 * ctypes pointer; None for NULL, as c_void_p(0).value). 0, or -1 with
 * TypeError / ValueError naming `what` and the value. */
int cmpy_address_arg(PyObject *arg, const char *what, CUdeviceptr *out);
/* A byte count: an int >= 0. 0, or -1 with TypeError / ValueError. */
int cmpy_size_arg(PyObject *arg, const char *what, size_t *out);

/* emm.c: the EMM plugin dispatch (its opening comment tells the whole). */
/* dev's context's memory manager when allocations ask plugins and it is
 * one: 1 with *plugin (a new reference); 0 when cudamem allocates; -1 with
 * an exception. */
int cmpy_manager_plugin(cmpy_state *st, cm_device *dev, PyObject **plugin);
/* Calls `method` of `plugin` (from cmpy_manager_plugin) with args (a
 * tuple; NULL when making it failed, with the exception set) and kwargs
 * (or NULL), dev's context current. 1 with *got (a new reference); 0,
 * with `optional`, when the plugin has no such method; -1 with an
 * exception. */
int cmpy_manager_call(cmpy_state *st, cm_device *dev, PyObject *plugin,
                      const char *method, int optional, PyObject *args,
                      PyObject *kwargs, PyObject **got);

/* Calls an EMM plugin's finalizer (no arguments); an exception it raises
 * becomes a CudaWarning naming it (unraisable when st is NULL: the
 * module is gone). Any exception already set is kept. */
void cmpy_memory_finalize(cmpy_state *st, PyObject *finalizer);

/* A (context, size) pair of arguments of `name`(): the context's device
 * and the byte count. 0, or -1 with TypeError / ValueError. */
int cmpy_memory_parse_sized(cmpy_state *st, const char *name,
                            PyObject *context, PyObject *size_obj,
                            cm_device **dev, size_t *size);

/* The arguments numba's MemoryPointer-like constructors share, (context,
 * pointer, size, owner, finalizer) as `name`(): the context's device,
 * checked alive, the address (an int or a ctypes pointer), the byte count
 * and the finalizer (callable or None). 0, or -1 with TypeError /
 * ValueError naming the value, before anything is allocated. */
int cmpy_memory_parse_external(cmpy_state *st, const char *name,
                               PyObject *const *argv, cm_device **dev,
                               CUdeviceptr *ptr, size_t *size);

/* numba's MemoryPointer(context, pointer, size, owner=None,
 * finalizer=None) and ManagedMemory(...) (`managed`) as `name`(), argv
 * the five arguments (the last two may be NULL): an external record
 * whose release hook calls the finalizer. */
PyObject *cmpy_emm_external_new(cmpy_state *st, const char *name,
                                PyObject *const *argv, int managed);
/* core's release hook of external records (cm_mem_set_release_hook). */
void cmpy_emm_release_external(void *hook_arg, void *external);
/* What a plugin's memhostalloc() returned: a HostBuffer (PinnedMemory or
 * MappedMemory) of at least nbytes, mapped on dev when `mapped`. 0, or -1
 * with TypeError / ValueError naming the plugin and the object. */
int cmpy_emm_check_host_buffer(cmpy_state *st, cm_device *dev,
                               PyObject *plugin, PyObject *got, size_t nbytes,
                               int mapped);

#endif
