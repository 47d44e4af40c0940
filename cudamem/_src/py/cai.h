/* cai.h (py/): the import side of the CUDA Array Interface (v3), numba's
 * as_cuda_array, from_cuda_array_interface and is_cuda_array. The export
 * (__cuda_array_interface__) is arraycai.c's; borrowed memory records are
 * core/memory.c's. */
#ifndef CMPY_CAI_H
#define CMPY_CAI_H

#include "module.h"

#include "../core/context.h"

/* 1 when obj is not a cudamem array but has __cuda_array_interface__, 0
 * when not, -1 with an exception set. */
int cmpy_cai_check(cmpy_state *st, PyObject *obj);

/* numba's as_cuda_array: a new DeviceNDArray over obj's memory that keeps
 * obj alive (its gpu_data's owner); a cudamem array is returned as it is.
 * TypeError when obj has no __cuda_array_interface__. New reference. */
PyObject *cmpy_cai_import(cmpy_state *st, PyObject *obj, int sync,
                          PyObject *consumer);

/* numba's from_cuda_array_interface: a DeviceNDArray over the memory that
 * `desc` describes, on the device that owns it, bound to desc's stream.
 * `owner` (NULL or None: none) is kept alive by the array and its views.
 * With `sync`, desc's stream is waited for once, unless
 * CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC (or, when unset, numba's
 * NUMBA_CUDA_ARRAY_INTERFACE_SYNC) is 0. `consumer` (NULL, None or 0:
 * none) is a stream= argument: the array is bound to it, and the wait is an
 * event wait of that stream on desc's, not a host synchronize. Nothing is
 * made when desc is invalid. New reference. */
PyObject *cmpy_cai_from_desc(cmpy_state *st, PyObject *desc, PyObject *owner,
                             int sync, PyObject *consumer);

/* Refuses (ValueError naming `what` and the bytes) foreign memory whose
 * extent [ptr + low, ptr + high) leaves the allocation ptr lies in
 * (cm_pointer_range): an importer's check, before a kernel faults. An
 * empty extent (low == high) is not checked. 0 or -1. */
int cmpy_check_extent(cmpy_state *st, CUdeviceptr ptr, Py_ssize_t low,
                      Py_ssize_t high, const char *what);

/* from_cuda_array_interface, as_cuda_array, is_cuda_array; merged by
 * module.c. */
extern PyMethodDef cmpy_cai_methods[];

#endif
