"""The CUDA driver cudamem loaded, and numba's ``cudadrv.driver`` names.

``get_version()``, ``info()``, ``devices()`` and ``table()`` describe the
driver cudamem loaded: each loads the driver on first use (and raises
``CudaSupportError`` when it cannot be used), except ``table()``.
Loading order: ``CUDAMEM_DRIVER=<path>``; else the bundled simulated driver
when ``CUDAMEM_SIMULATOR=1``; else ``/usr/lib/wsl/lib/libcuda.so.1`` when
it exists, then ``libcuda.so.1``.

The rest are the names numba code imports from
``numba.cuda.cudadrv.driver`` (also ``numba.cuda.driver``), so that the
same imports work from ``cudamem.cudadrv.driver`` (this module): the types,
the memory-manager (EMM) classes, and the helpers on device memory objects
(``device_pointer()``, ``host_to_device()``, ...), written over cudamem's
own transfers. ``driver`` is a small stand-in for numba's ``Driver``: it
answers the device questions, not raw ``cu*`` calls. Importing this module
loads neither the driver, NumPy nor ctypes.
"""
from cudamem import _cudamem
from cudamem._cudamem import (
    Context,
    Device,
    Event,
    MemoryPointer,
    Stream,
    event_elapsed_time,
    profile_start,
    profile_stop,
)
from cudamem.devices import MemoryInfo, profiling
from cudamem.errors import CudaAPIError, CudaDriverError, CudaSupportError
from cudamem.ipc import GetIpcHandleMixin, IpcHandle
from cudamem.memory import (
    BaseCUDAMemoryManager,
    HostOnlyCUDAMemoryManager,
    ManagedMemory,
    MappedMemory,
    NumbaCUDAMemoryManager,  # noqa: F401 (numba's name, see below)
    PinnedMemory,
    set_memory_manager,
)
from cudamem.runtime import _split

__all__ = [
    # cudamem's own
    "get_version", "info", "devices", "table",
    # numba's cudadrv.driver
    "BaseCUDAMemoryManager", "CU_STREAM_DEFAULT", "Context", "CudaAPIError",
    "CudaDriverError", "CudaSupportError", "Device", "Driver", "Event",
    "GetIpcHandleMixin", "HostOnlyCUDAMemoryManager", "IpcHandle",
    "ManagedMemory", "MappedMemory", "MemoryInfo", "MemoryPointer",
    "OwnedPointer", "PinnedMemory",
    "SUPPORTS_IPC", "Stream", "device_ctypes_pointer", "device_extents",
    "device_memory_depends", "device_memory_size", "device_memset",
    "device_pointer", "device_to_device", "device_to_host", "driver",
    "event_elapsed_time", "host_memory_extents", "host_memory_size",
    "host_pointer", "host_to_device", "is_device_memory",
    "memory_size_from_info", "profile_start", "profile_stop", "profiling",
    "require_device_memory", "set_memory_manager",
]
# Also here, outside __all__ (their docstrings are under their cudamem
# names): NumbaCUDAMemoryManager, numba's name of
# cudamem.memory.DefaultMemoryManager, and AutoFreePointer, numba's
# MemoryPointer whose finalizer runs once nothing refers to it: what every
# cudamem MemoryPointer with a finalizer does.

AutoFreePointer = MemoryPointer

# numba-cuda 0.30's constants.
CU_STREAM_DEFAULT = 0
SUPPORTS_IPC = __import__("sys").platform.startswith("linux")


def get_version():
    """get_version() -> tuple[int, int]

    The driver's CUDA version as ``(major, minor)``, e.g. ``(12, 4)``."""
    return _split(_cudamem.driver_info()["version"])


def info():
    """info() -> dict

    ``path`` of the library loaded, ``version`` as the driver reports it
    (12040 for 12.4), ``simulator`` (bool) and ``per_thread_default_stream``
    (whether stream 0 means the per-thread default stream)."""
    return _cudamem.driver_info()


def devices():
    """devices() -> list[dict]

    One dict per visible device: ``id``, ``name``, ``compute_capability``,
    ``total_memory`` (bytes), ``uuid`` and ``pci_bus_id``."""
    return [_cudamem.device_info(i) for i in range(_cudamem.device_count())]


def table():
    """table() -> list[tuple[str, int, bool, bool, bool]]

    The driver entry points cudamem uses: ``(name, ABI version, required,
    has a per-thread-stream variant, resolved)``. Does not load the driver.
    """
    return _cudamem._driver_rows()


# --- numba's Driver -----------------------------------------------------

class Driver:
    """Driver()

    numba's ``Driver`` object (``numba.cuda.cudadrv.driver.driver``), for
    what code asks of it besides raw driver calls: devices, the version,
    availability and ``reset()``. Raw ``cu*`` entry points are not
    offered (AttributeError): cudamem keeps them behind its own gate."""

    @property
    def is_available(self):
        """Whether a usable CUDA driver loads (``cudamem.is_available()``).
        """
        return _cudamem.is_available()

    def get_device(self, devnum=0):
        """get_device(devnum=0) -> Device

        The Device of ordinal *devnum*."""
        return _cudamem.list_devices()[devnum]

    def get_device_count(self):
        """get_device_count() -> int

        How many devices are visible."""
        return _cudamem.device_count()

    def list_devices(self):
        """list_devices() -> list[Device]

        Every visible device."""
        return _cudamem.list_devices()

    def get_version(self):
        """get_version() -> tuple[int, int]

        The module's ``get_version()``."""
        return get_version()

    def reset(self):
        """reset()

        Resets every device (``Device.reset()``), as numba's does."""
        for device in _cudamem.list_devices():
            device.reset()

    def __getattr__(self, name):
        if name.startswith("cu"):
            raise AttributeError(
                "cudamem does not expose the driver entry point %s; use "
                "cudamem's API (or cuda.bindings) instead" % name)
        raise AttributeError("'Driver' object has no attribute %r" % name)


driver = Driver()


def OwnedPointer(memptr, view=None):
    """OwnedPointer(memptr, view=None) -> MemoryPointer

    numba's ``OwnedPointer``: a pointer to *view* (default *memptr*) that
    keeps the allocation alive and counts in its ``refct`` until it goes:
    ``(view or memptr).own()``."""
    return (memptr if view is None else view).own()


# --- numba's helpers on memory objects ---------------------------------

def is_device_memory(obj):
    """is_device_memory(obj) -> bool

    Whether *obj* is CUDA memory: its ``__cuda_memory__`` attribute is
    true (numba's protocol; such objects have ``device_ctypes_pointer``).
    """
    try:
        return obj.__cuda_memory__
    except AttributeError:
        return False


def require_device_memory(obj):
    """require_device_memory(obj)

    Raises Exception("Not a CUDA memory object.") unless
    ``is_device_memory(obj)``, as numba's."""
    if not is_device_memory(obj):
        raise Exception("Not a CUDA memory object.")


def device_ctypes_pointer(obj):
    """device_ctypes_pointer(obj) -> ctypes.c_void_p

    The device pointer of the CUDA memory *obj* as a ctypes object
    (``c_void_p(0)`` for None)."""
    if obj is None:
        import ctypes  # lazily: importing cudamem must not load ctypes
        return ctypes.c_void_p(0)
    require_device_memory(obj)
    return obj.device_ctypes_pointer


def device_pointer(obj):
    """device_pointer(obj) -> int | None

    The device pointer of the CUDA memory *obj* as an int
    (``device_ctypes_pointer(obj).value``: None for address 0, as
    numba's)."""
    return device_ctypes_pointer(obj).value


def device_extents(devmem):
    """device_extents(devmem) -> tuple[int, int]

    ``(start, end)`` of the whole allocation the CUDA memory *devmem*
    lies in (``cuMemGetAddressRange``), not only of *devmem*'s bytes."""
    pointer = device_pointer(devmem)
    base, size = _cudamem._pointer_range(pointer or 0)
    return base, base + size


def device_memory_size(devmem):
    """device_memory_size(devmem) -> int

    The size of the allocation *devmem* lies in (``device_extents()``),
    cached in ``devmem._cuda_memsize_`` where *devmem* takes attributes."""
    size = getattr(devmem, "_cuda_memsize_", None)
    if size is None:
        start, end = device_extents(devmem)
        size = end - start
        try:
            devmem._cuda_memsize_ = size
        except AttributeError:
            pass
    return size


def device_memory_depends(devmem, *objs):
    """device_memory_depends(devmem, *objs)

    Appends *objs* to ``devmem._depends_`` when *devmem* has that list, to
    keep them alive with it (numba's; otherwise nothing)."""
    depset = getattr(devmem, "_depends_", [])
    depset.extend(objs)


def _host_array(obj, readonly):
    """The host buffer *obj* as a NumPy array over the same memory
    (datetime arrays as int64: NumPy's buffers refuse them)."""
    import numpy as np

    if getattr(obj, "dtype", None) is not None and obj.dtype.char in "Mm":
        obj = obj.view(np.int64)
    view = memoryview(obj)
    if not readonly and view.readonly:
        raise BufferError("%r is a read-only buffer: it cannot receive data"
                          % (obj,))
    return np.asarray(view)


def _extents(shape, strides, itemsize, pointer):
    # numba's mviewbuf get_extents: the half-open byte range the elements
    # touch; empty at the pointer for an empty array.
    start = end = pointer
    if any(dim == 0 for dim in shape):
        return start, end
    for dim, stride in zip(shape, strides):
        if stride > 0:
            end += stride * (dim - 1)
        else:
            start += stride * (dim - 1)
    return start, end + itemsize


def host_pointer(obj, readonly=False):
    """host_pointer(obj, readonly=False) -> int

    The address of the host buffer *obj* (an int is taken as one);
    BufferError for a read-only buffer unless *readonly*."""
    if isinstance(obj, int):
        return obj
    return _host_array(obj, readonly).__array_interface__["data"][0]


def host_memory_extents(obj):
    """host_memory_extents(obj) -> tuple[int, int]

    ``(start, end)``: the half-open address range of the host buffer
    *obj*'s elements (negative strides included)."""
    ary = _host_array(obj, True)
    return _extents(ary.shape, ary.strides, ary.itemsize,
                    ary.__array_interface__["data"][0])


def memory_size_from_info(shape, strides, itemsize):
    """memory_size_from_info(shape, strides, itemsize) -> int

    The bytes an array of *shape*, *strides* and *itemsize* spans."""
    if len(shape) != len(strides):
        raise ValueError("shape %r and strides %r differ in length"
                         % (shape, strides))
    start, end = _extents(shape, strides, itemsize, 0)
    return end - start


def host_memory_size(obj):
    """host_memory_size(obj) -> int

    The bytes the host buffer *obj*'s elements span."""
    start, end = host_memory_extents(obj)
    return end - start


def _size(size):
    import operator

    if isinstance(size, bool):
        raise TypeError("size must be an int, not bool")
    size = operator.index(size)
    if size < 0:
        raise ValueError("size must not be negative, not %d" % size)
    return size


def _device_bytes(obj, size):
    """The first *size* bytes of the CUDA memory *obj* as a uint8 device
    array that keeps *obj* alive."""
    pointer = device_pointer(obj)
    return _cudamem.from_cuda_array_interface(
        {"shape": (size,), "typestr": "|u1", "data": (pointer or 0, False),
         "strides": None, "version": 3}, owner=obj)


def _host_bytes(obj, size, readonly):
    """The first *size* bytes of the host buffer *obj* (or the address
    *obj*) as a uint8 array over the same memory."""
    import numpy as np

    if isinstance(obj, int):
        import ctypes
        return np.frombuffer((ctypes.c_uint8 * size).from_address(obj),
                             np.uint8)
    ary = _host_array(obj, readonly)
    if not (ary.flags.c_contiguous or ary.flags.f_contiguous):
        raise ValueError("a host buffer for a byte copy must be contiguous, "
                         "not strides %r" % (ary.strides,))
    data = ary.reshape(-1, order="A").view(np.uint8)
    if size > data.size:
        raise ValueError("cannot copy %d bytes: the host buffer has %d"
                         % (size, data.size))
    return data[:size]


def host_to_device(dst, src, size, stream=0):
    """host_to_device(dst, src, size, stream=0)

    Copies *size* bytes from the host buffer *src* (or address) to the
    CUDA memory *dst*; asynchronous on a Stream, synchronous with 0."""
    size = _size(size)
    _device_bytes(dst, size).copy_to_device(_host_bytes(src, size, True),
                                            stream=stream)


def device_to_host(dst, src, size, stream=0):
    """device_to_host(dst, src, size, stream=0)

    Copies *size* bytes from the CUDA memory *src* to the host buffer
    *dst* (or address); asynchronous on a Stream, synchronous with 0."""
    size = _size(size)
    _device_bytes(src, size).copy_to_host(_host_bytes(dst, size, False),
                                          stream=stream)


def device_to_device(dst, src, size, stream=0):
    """device_to_device(dst, src, size, stream=0)

    Copies *size* bytes from the CUDA memory *src* to *dst*; asynchronous
    on a Stream, synchronous with 0."""
    size = _size(size)
    _device_bytes(dst, size).copy_to_device(_device_bytes(src, size),
                                            stream=stream)


def device_memset(dst, val, size, stream=0):
    """device_memset(dst, val, size, stream=0)

    Sets *size* bytes of the CUDA memory *dst* to the byte *val*;
    asynchronous on a Stream, synchronous with 0."""
    size = _size(size)
    _device_bytes(dst, size).fill(val, stream=stream)
