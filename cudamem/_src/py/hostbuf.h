/* hostbuf.h (py/): HostBuffer (hostbuf.c), the files that make them
 * (hostalloc.c, hostregister.c) and what other py/ files use: the host
 * memory one holds, and the one translation of mapped host addresses to
 * device addresses. */
#ifndef CMPY_HOSTBUF_H
#define CMPY_HOSTBUF_H

#include "npy.h"

#include "../core/hostmem.h"
#include "array.h"

typedef struct cmpy_HostBuffer {
    PyObject_HEAD
    cm_host *host;
    /* registered: the array whose memory it is; external: the plugin's
     * owner */
    PyObject *owner;
    PyObject *finalizer; /* external: the plugin's, or NULL */
    PyObject *weakreflist;
} cmpy_HostBuffer;

/* A new HostBuffer owning `host` (kept alive with `owner`, may be NULL).
 * NULL with an exception, host still the caller's. */
PyObject *cmpy_hostbuf_new(cmpy_state *st, cm_host *host, PyObject *owner);

/* Frees a host buffer no Python object owns yet; a failure is a
 * CudaWarning. */
void cmpy_hostbuf_discard(cmpy_state *st, cm_host *host);

/* Where host's bytes start for NumPy (which allocates for NULL data). */
void *cmpy_hostbuf_data(const cm_host *h);

/* The host memory obj holds when it is a HostBuffer, else NULL (no
 * exception). */
cm_host *cmpy_hostbuf_host(cmpy_state *st, PyObject *obj);

/* Replaces *host, a temporary the caller made (a list, scalar or cast
 * converted), by a C-ordered copy in a block of the host pool on dev
 * whose release waits for the copies queued on it (core/hostmem.h), so
 * that an asynchronous copy from it never reads freed memory. 0, or -1
 * with an exception and *host unchanged. */
int cmpy_hostbuf_pin_temporary(cmpy_state *st, cm_device *dev,
                               PyArrayObject **host);

/* The device side of `ary`, whose elements lie in the HostBuffer `buf`:
 * a DeviceNDArray over the same bytes at their device address, its
 * gpu_data a MemoryPointer over buf's mapped bytes owned by buf, bound to
 * the stream `ref` was parsed from, read-only when buf is registered
 * read-only or ary is not writeable. TypeError when buf is not mapped,
 * CudaDriverError once its device was reset, ValueError when ary reaches
 * outside buf. New reference. */
cmpy_DeviceNDArray *cmpy_hostbuf_device_array(cmpy_state *st, PyObject *buf,
                                              PyArrayObject *ary,
                                              const cmpy_stream_ref *ref);

#endif
