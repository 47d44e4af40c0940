/* hostarray.h (py/): NumPy arrays over host-accessible memory cudamem
 * allocated, with a device side: ManagedNDArray (managed memory) and
 * MappedNDArray (mapped page-locked host memory). Allocating each kind of
 * memory is its own file's (managed.c, hostalloc.c). */
#ifndef CMPY_HOSTARRAY_H
#define CMPY_HOSTARRAY_H

#include "npy.h"

#include "../core/context.h"
#include "memory.h"
#include "stream.h"

typedef enum cmpy_hostarray_kind {
    CMPY_HOSTARRAY_MANAGED = 0, /* .base root: a managed MemoryPointer */
    CMPY_HOSTARRAY_MAPPED = 1,  /* .base root: a mapped HostBuffer */
} cmpy_hostarray_kind;

/* The type of `kind`, a subclass of numpy.ndarray made (with NumPy
 * loaded) on first use. Borrowed. */
PyObject *cmpy_hostarray_type(PyObject *module, cmpy_hostarray_kind kind);

/* An array of `kind` over `data` with the given layout (dtype
 * borrowed), writeable, its NumPy .base `base` (stolen, also on failure),
 * bound to the stream `ref` was parsed from. New reference. */
PyObject *cmpy_hostarray_new(PyObject *module, cmpy_hostarray_kind kind,
                             PyArray_Descr *dtype, int ndim,
                             const Py_ssize_t *shape,
                             const Py_ssize_t *strides, void *data,
                             PyObject *base, const cmpy_stream_ref *ref);

/* The object owning self's memory (the root of its chain of .base) and
 * *dev, its device, after checking the memory is usable (CudaDriverError
 * once its device was reset). ValueError for an array NumPy made with
 * memory of its own. Borrowed. */
PyObject *cmpy_hostarray_owner(cmpy_state *st, PyObject *self,
                               cm_device **dev);

/* Whether arr, C- or F-contiguous, lies in page-locked memory cudamem
 * made (a pinned or mapped array, or a view of one): core's
 * cm_host_covers, for copies that need not ask the registry. */
int cmpy_host_is_locked(cmpy_state *st, PyArrayObject *arr);

/* Whether arr (any NumPy array) is a view of managed memory of dev: copies
 * with it are device copies, which synchronous forms of the driver may
 * finish after returning (DESIGN rule 9). */
int cmpy_host_is_managed_on(cmpy_state *st, PyArrayObject *arr,
                            cm_device *dev);

/* Where the host sees device address ptr of the memory mp points into,
 * when that is host memory the device maps (a mapped or registered
 * HostBuffer's, found through mp's owners and arrays' bases: a mapped
 * array's device side, mapped(), an import of either) or managed memory;
 * else NULL. A host array there shares bytes with the device side. */
void *cmpy_host_address(cmpy_state *st, cmpy_MemoryPointer *mp,
                        CUdeviceptr ptr);

/* managed.c: the methods only ManagedNDArray has (prefetch, advise), and
 * a new ManagedNDArray over new managed memory of dev, as
 * managed_array() makes it (dtype borrowed). */
extern PyMethodDef cmpy_managed_ndarray_methods[];
PyObject *cmpy_managed_empty(PyObject *module, cm_device *dev,
                             PyArray_Descr *dtype, int ndim,
                             const Py_ssize_t *shape,
                             const Py_ssize_t *strides, int attach_global,
                             const cmpy_stream_ref *ref);

/* hostalloc.c: a new MappedNDArray over new mapped memory of dev
 * (write-combined when `wc`), as mapped_array() makes it (dtype
 * borrowed). */
PyObject *cmpy_mapped_empty(PyObject *module, cm_device *dev, int wc,
                            int portable, PyArray_Descr *dtype, int ndim,
                            const Py_ssize_t *shape, const Py_ssize_t *strides,
                            const cmpy_stream_ref *ref);

#endif
