/* array.h (py/): the DeviceNDArray object. Layout facts (shape, strides,
 * contiguity, sizes) are computed once at creation; the memory is its
 * gpu_data's. */
#ifndef CMPY_ARRAY_H
#define CMPY_ARRAY_H

#include "npy.h"

#include "memory.h"

typedef struct cmpy_DeviceNDArray {
    PyObject_VAR_HEAD                /* ob_size: 2 * ndim */
    cmpy_MemoryPointer *gpu_data;
    CUdeviceptr ptr;                 /* the first element */
    PyArray_Descr *dtype;
    Py_ssize_t size;                 /* elements */
    Py_ssize_t nbytes;               /* size * itemsize */
    int flags;                       /* NPY_ARRAY_{C,F}_CONTIGUOUS */
    PyObject *stream;                /* the stream= it was made with */
    CUstream stream_handle;          /* ... parsed once */
    int stream_async;
    PyObject *weakreflist;
    Py_ssize_t dims[1];              /* shape[ndim], then strides[ndim] */
} cmpy_DeviceNDArray;

#define CMPY_NDIM(a) ((int)(Py_SIZE(a) / 2))
#define CMPY_SHAPE(a) ((a)->dims)
#define CMPY_STRIDES(a) ((a)->dims + CMPY_NDIM(a))

#endif
