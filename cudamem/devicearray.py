"""numba's ``cudadrv.devicearray`` names (also ``numba.cuda.devicearray``):
the device array types and the helpers numba code imports from there
(``auto_device``, ``from_array_like``, ``is_cuda_ndarray``, ...), as
``cudamem.devicearray`` and ``cudamem.cudadrv.devicearray``.

The types are cudamem's; the helpers are thin Python over cudamem's
constructors and transfers. ``MappedNDArray`` and ``ManagedNDArray`` are
made, with NumPy loaded, when first asked for; nothing here loads NumPy or
the driver at import.
"""
from cudamem import _cudamem
from cudamem._cudamem import DeviceNDArray, DeviceNDArrayBase, DeviceRecord
from cudamem.ipc import IpcArrayHandle

# ManagedNDArray and MappedNDArray come from __getattr__ below.
__all__ = ["DeviceNDArray", "DeviceNDArrayBase", "DeviceRecord",  # noqa: F822
           "IpcArrayHandle", "ManagedNDArray", "MappedNDArray",
           "array_core", "auto_device", "check_array_compatibility",
           "errmsg_contiguous_buffer", "from_array_like",
           "from_record_like", "is_contiguous", "is_cuda_ndarray",
           "require_cuda_ndarray", "sentry_contiguous",
           "verify_cuda_ndarray_interface"]

# numba-cuda 0.30's wording.
errmsg_contiguous_buffer = (
    "Array contains non-contiguous buffer and cannot "
    "be transferred as a single memory region. Please "
    "ensure contiguous buffer with numpy "
    ".ascontiguousarray()"
)


def __getattr__(name):
    # numpy.ndarray subclasses: made, with NumPy loaded, when asked for.
    if name in ("ManagedNDArray", "MappedNDArray"):
        return _cudamem._host_ndarray_type(name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def is_cuda_ndarray(obj):
    """is_cuda_ndarray(obj) -> bool

    Whether *obj* says it is a CUDA ndarray (its ``__cuda_ndarray__``)."""
    return getattr(obj, "__cuda_ndarray__", False)


def require_cuda_ndarray(obj):
    """require_cuda_ndarray(obj)

    ValueError unless ``is_cuda_ndarray(obj)``."""
    if not is_cuda_ndarray(obj):
        raise ValueError("require an cuda ndarray object")


def verify_cuda_ndarray_interface(obj):
    """verify_cuda_ndarray_interface(obj)

    Checks that *obj* is a CUDA ndarray (ValueError otherwise) with a tuple
    ``shape`` and ``strides``, a NumPy ``dtype`` and an int ``size``
    (AttributeError naming the first that is not), as numba's."""
    import numpy as np

    require_cuda_ndarray(obj)
    for attr, typ in (("shape", tuple), ("strides", tuple),
                      ("dtype", np.dtype), ("size", int)):
        if not hasattr(obj, attr):
            raise AttributeError(attr)
        if not isinstance(getattr(obj, attr), typ):
            raise AttributeError("%s must be of type %s" % (attr, typ))


def from_array_like(ary, stream=0, gpu_data=None):
    """from_array_like(ary, stream=0, gpu_data=None) -> DeviceNDArray

    A device array with *ary*'s shape, strides and dtype, over *gpu_data*
    (new memory when None); nothing is copied."""
    return DeviceNDArray(ary.shape, ary.strides, ary.dtype, stream=stream,
                         gpu_data=gpu_data)


def from_record_like(rec, stream=0, gpu_data=None):
    """from_record_like(rec, stream=0, gpu_data=None) -> DeviceRecord

    A device record of *rec*'s dtype, over *gpu_data* (new memory when
    None); nothing is copied."""
    return DeviceRecord(rec.dtype, stream=stream, gpu_data=gpu_data)


def array_core(ary):
    """array_core(ary)

    The view of *ary* without its broadcast (zero-stride) dimensions:
    index 0 along each of them."""
    if not ary.strides or not ary.size:
        return ary
    core_index = tuple(0 if stride == 0 else slice(None)
                       for stride in ary.strides)
    return ary[core_index]


def is_contiguous(ary):
    """is_contiguous(ary) -> bool

    Whether *ary* is C-contiguous once its broadcast and length-1
    dimensions are ignored."""
    size = ary.dtype.itemsize
    for shape, stride in zip(reversed(ary.shape), reversed(ary.strides)):
        if shape > 1 and stride != 0:
            if size != stride:
                return False
            size *= shape
    return True


def sentry_contiguous(ary):
    """sentry_contiguous(ary)

    ValueError (``errmsg_contiguous_buffer``) unless ``array_core(ary)``
    is C- or F-contiguous, as numba's. cudamem's own transfers do not
    need it: they copy any layout."""
    core = array_core(ary)
    if not core.flags["C_CONTIGUOUS"] and not core.flags["F_CONTIGUOUS"]:
        raise ValueError(errmsg_contiguous_buffer)


def auto_device(obj, stream=0, copy=True, user_explicit=False):
    """auto_device(obj, stream=0, copy=True, user_explicit=False)
    -> (device array, bool)

    ``(obj, False)`` when *obj* is CUDA memory already, an array over the
    memory of an object with ``__cuda_array_interface__`` and False;
    otherwise a new device array (a DeviceRecord for a NumPy record) like
    *obj* and True, holding *obj*'s data when *copy* (``to_device()``: any
    layout). *user_explicit* is accepted for numba's signature (it only
    decides numba's implicit-copy warning for kernel arguments)."""
    import numpy as np

    if getattr(obj, "__cuda_memory__", False):
        return obj, False
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is not None:
        return _cudamem.from_cuda_array_interface(interface, owner=obj), False
    if not isinstance(obj, np.void):
        obj = np.asanyarray(obj)
    if copy:
        return _cudamem.to_device(obj, stream=stream), True
    if isinstance(obj, np.void):
        return from_record_like(obj, stream=stream), True
    from cudamem.arrays import device_array_like
    return device_array_like(obj, stream=stream), True


def check_array_compatibility(ary1, ary2):
    """check_array_compatibility(ary1, ary2)

    TypeError when the dtypes differ, ValueError when the shapes (length-1
    dimensions ignored) or, for non-empty arrays, the strides differ, as
    numba's check before a copy."""
    ary1sq, ary2sq = ary1.squeeze(), ary2.squeeze()
    if ary1.dtype != ary2.dtype:
        raise TypeError("incompatible dtype: %s vs. %s"
                        % (ary1.dtype, ary2.dtype))
    if ary1sq.shape != ary2sq.shape:
        raise ValueError("incompatible shape: %s vs. %s"
                         % (ary1.shape, ary2.shape))
    if ary1.size and ary1sq.strides != ary2sq.strides:
        raise ValueError("incompatible strides: %s vs. %s"
                         % (ary1.strides, ary2.strides))
