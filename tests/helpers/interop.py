"""Helpers of the interop tests: a CUDA Array Interface producer, and
DLPack's structures (dlpack.h, v1.0) read back through ctypes."""
import ctypes


class Producer:
    """A foreign array: a cudamem array seen only through its CUDA Array
    Interface."""

    def __init__(self, base):
        self.base = base

    @property
    def __cuda_array_interface__(self):
        return self.base.__cuda_array_interface__


KDL_CPU, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 3, 13


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter",
     ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))),
    ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def managed(capsule, versioned):
    """The DLManagedTensor(Versioned) a DLPack capsule holds."""
    name = b"dltensor_versioned" if versioned else b"dltensor"
    kind = DLManagedTensorVersioned if versioned else DLManagedTensor
    return kind.from_address(_get_pointer(capsule, name))
