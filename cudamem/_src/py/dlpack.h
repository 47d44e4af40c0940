/* dlpack.h (py/): the DLPack ABI (version 1.1, written from the
 * specification) and cudamem's one exporter of memory as DLPack capsules,
 * legacy ("dltensor") or versioned ("dltensor_versioned"), and the one
 * parser of __dlpack__'s array API arguments. Consuming capsules is
 * dlpackimport.c's; the stream handshake is the callers'. */
#ifndef CMPY_DLPACK_H
#define CMPY_DLPACK_H

#include "npy.h"

#include <cuda.h>
#include <stdint.h>

enum {
    CMPY_DL_CPU = 1,
    CMPY_DL_CUDA = 2,
    CMPY_DL_CUDA_HOST = 3,
    CMPY_DL_CUDA_MANAGED = 13,
};

enum {
    CMPY_DL_INT = 0,
    CMPY_DL_UINT = 1,
    CMPY_DL_FLOAT = 2,
    CMPY_DL_BFLOAT = 4,
    CMPY_DL_COMPLEX = 5,
    CMPY_DL_BOOL = 6,
};

#define CMPY_DLPACK_MAJOR 1
#define CMPY_DLPACK_MINOR 1
#define CMPY_DLPACK_FLAG_READ_ONLY ((uint64_t)1 << 0)

typedef struct {
    uint32_t major;
    uint32_t minor;
} cmpy_DLPackVersion;

typedef struct {
    int32_t device_type; /* DLDeviceType, an int-sized enum */
    int32_t device_id;
} cmpy_DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} cmpy_DLDataType;

typedef struct {
    void *data;
    cmpy_DLDevice device;
    int32_t ndim;
    cmpy_DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements */
    uint64_t byte_offset;
} cmpy_DLTensor;

typedef struct cmpy_DLManagedTensor {
    cmpy_DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct cmpy_DLManagedTensor *);
} cmpy_DLManagedTensor;

typedef struct cmpy_DLManagedTensorVersioned {
    cmpy_DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct cmpy_DLManagedTensorVersioned *);
    uint64_t flags;
    cmpy_DLTensor dl_tensor;
} cmpy_DLManagedTensorVersioned;

/* What a layout exports as. */
typedef struct cmpy_dlpack_desc {
    void *data; /* the first element */
    int ndim;
    const Py_ssize_t *shape;
    const Py_ssize_t *strides; /* in bytes, as NumPy's */
    PyArray_Descr *dtype;
    int device_type; /* CMPY_DL_* */
    int device_id;
    int readonly;
} cmpy_dlpack_desc;

/* DLPack's name for a NumPy dtype: bool, integers, floats (float16 to
 * float64), complex64/128, and ml_dtypes' bfloat16. Anything else (or a
 * byte-swapped dtype) raises BufferError naming it. 0 or -1. */
int cmpy_dlpack_dtype(PyArray_Descr *dtype, cmpy_DLDataType *out);

/* The array API's `copy` argument: None (or NULL) leaves *copy as it is,
 * True and False set 1 and 0, anything else is a TypeError naming it. */
int cmpy_dlpack_copy_arg(PyObject *arg, int *copy);
/* Whether a consumer's max_version (None or a (major, minor) tuple) takes
 * a versioned capsule: *versioned 1 for major >= 1. TypeError naming a
 * malformed value. 0 or -1. */
int cmpy_dlpack_wants_versioned(PyObject *max_version, int *versioned);

/* __dlpack__'s keyword arguments (stream, max_version, dl_device, copy)
 * for memory on DLPack device (type, id). */
typedef struct cmpy_dlpack_args {
    int versioned;   /* max_version allows a versioned capsule */
    int wait;        /* the consumer's stream must see the data */
    CUstream stream; /* ... that stream: None is the legacy default, 1 */
    int to_cpu;      /* dl_device is (kDLCPU, 0), not the memory's own */
    int copy;        /* copy is true */
} cmpy_dlpack_args;

/* Parses them, the array API standard's way: stream None, 1 (legacy
 * default), 2 (per-thread default), a handle, or -1 (no ordering; 0 is
 * ambiguous for CUDA: ValueError); dl_device None, (type, id) or
 * (kDLCPU, 0), else BufferError. TypeError naming a malformed value. 0 or
 * -1. */
int cmpy_dlpack_parse(PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, int type, int id,
                      cmpy_dlpack_args *out);

/* Whether memory (`readonly` or not) may be exported as a versioned or
 * legacy capsule: a legacy one has no read-only flag, so read-only memory
 * needs a versioned one (NumPy's rule). 0, or -1 with BufferError. */
int cmpy_dlpack_check_readonly(int readonly, int versioned);

/* A capsule over desc, keeping `owner` alive until the consumer's deleter
 * (or the unconsumed capsule's destructor) runs; the deleter may run on
 * any thread, and after interpreter shutdown it leaks the owner on
 * purpose. BufferError when a stride is not a multiple of the item size,
 * or as cmpy_dlpack_check_readonly says. New reference. */
PyObject *cmpy_dlpack_capsule(PyObject *owner, const cmpy_dlpack_desc *desc,
                              int versioned);

extern PyMethodDef cmpy_dlpack_methods[];
/* dlpackimport.c: from_dlpack. */
extern PyMethodDef cmpy_dlpack_import_methods[];

#endif
