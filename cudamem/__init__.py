"""cudamem: numba.cuda's host-side memory API as a fast C extension.

``import cudamem as cuda`` gives device arrays, transfers, streams, events,
pinned / mapped / managed memory and IPC with numba.cuda's names and
behaviour. Importing cudamem touches no driver: the CUDA driver (or, with
``CUDAMEM_SIMULATOR=1``, cudamem's simulated driver) is loaded by the first
call that needs it.
"""
from cudamem import (
    _cudamem,
    cudadrv,
    devicearray,
    devices,
    driver,
    ipc,
    memory,
    runtime,
)
from cudamem._cudamem import (
    Context,
    Deallocations,
    Device,
    DeviceNDArray,
    DeviceNDArrayBase,
    DeviceRecord,
    Event,
    HostBuffer,
    MemoryPointer,
    Stream,
    as_cuda_array,
    can_access_peer,
    close,
    context_is_poisoned,
    current_context,
    default_stream,
    device_array,
    event,
    event_elapsed_time,
    external_stream,
    from_cuda_array_interface,
    from_dlpack,
    get_current_device,
    is_available,
    is_cuda_array,
    legacy_default_stream,
    list_devices,
    managed_array,
    mapped_array,
    memory_stats,
    per_thread_default_stream,
    pinned_array,
    profile_start,
    profile_stop,
    reset_peak_stats,
    select_device,
    stream,
    synchronize,
    to_device,
)
from cudamem.arrays import device_array_like, managed_array_like
from cudamem.devices import (
    MemoryInfo,
    MemoryStats,
    defer_cleanup,
    detect,
    gpus,
    profiling,
    require_context,
)
from cudamem.errors import (
    CudaAPIError,
    CudaDriverError,
    CudaOutOfMemoryError,
    CudaStickyError,
    CudaSupportError,
    CudaWarning,
)
from cudamem.hostarrays import (
    deregister,
    mapped,
    mapped_array_like,
    pinned,
    pinned_array_like,
    register,
)
from cudamem.ipc import (
    GetIpcHandleMixin,
    IpcArrayHandle,
    IpcHandle,
    open_ipc_array,
)
from cudamem.memory import (
    BaseCUDAMemoryManager,
    HostOnlyCUDAMemoryManager,
    ManagedMemory,
    MappedMemory,
    PinnedMemory,
    set_memory_manager,
    using_memory_manager,
)
from cudamem.pool import PoolMemoryManager
from cudamem.runtime import is_supported_version
from cudamem.smartarray import SmartArray


def _load_streams():
    # The stream glue brings threading: imported on first use, not here.
    from cudamem import _streams
    return (_streams.async_done, _streams.auto_synchronize,
            _streams.ensure_dispatcher)


def _load_handles():
    # The ctypes handle types bring ctypes: imported on first use.
    from cudamem import _handles
    return _handles.Handle, _handles.DevicePointer, _handles.LaunchView


# The seam (docs/design.rst): every Python object the extension calls,
# handed over once. It imports nothing else of this package.
_cudamem._install(
    make_memory_manager=memory._make_memory_manager,
    assign_memory_manager=memory._assign_memory_manager,
    plugin_defer_cleanup=memory._plugin_defer_cleanup,
    UniqueDict=memory.UniqueDict,
    MemoryInfo=MemoryInfo,
    MemoryStats=MemoryStats,
    IpcHandle=IpcHandle,
    array_handle=ipc._array_handle,
    load_streams=_load_streams,
    load_handles=_load_handles,
)

__version__ = "0.1.0"

__all__ = [
    "BaseCUDAMemoryManager",
    "Context",
    "CudaAPIError",
    "CudaDriverError",
    "CudaOutOfMemoryError",
    "CudaStickyError",
    "CudaSupportError",
    "CudaWarning",
    "Deallocations",
    "Device",
    "DeviceNDArray",
    "DeviceNDArrayBase",
    "DeviceRecord",
    "Event",
    "GetIpcHandleMixin",
    "HostBuffer",
    "HostOnlyCUDAMemoryManager",
    "IpcArrayHandle",
    "IpcHandle",
    "ManagedMemory",
    "ManagedNDArray",
    "MappedMemory",
    "MappedNDArray",
    "MemoryInfo",
    "MemoryStats",
    "MemoryPointer",
    "PinnedMemory",
    "PoolMemoryManager",
    "SmartArray",
    "Stream",
    "as_cuda_array",
    "from_dlpack",
    "can_access_peer",
    "close",
    "context_is_poisoned",
    "current_context",
    "default_stream",
    "defer_cleanup",
    "deregister",
    "detect",
    "device_array",
    "device_array_like",
    "driver",
    "event",
    "event_elapsed_time",
    "external_stream",
    "from_cuda_array_interface",
    "get_current_device",
    "gpus",
    "is_available",
    "is_cuda_array",
    "is_supported_version",
    "legacy_default_stream",
    "list_devices",
    "managed_array",
    "managed_array_like",
    "mapped",
    "mapped_array",
    "mapped_array_like",
    "open_ipc_array",
    "memory_stats",
    "per_thread_default_stream",
    "pinned",
    "pinned_array",
    "pinned_array_like",
    "profile_start",
    "profile_stop",
    "profiling",
    "register",
    "require_context",
    "reset_peak_stats",
    "runtime",
    "select_device",
    "set_memory_manager",
    "simulator",
    "stream",
    "synchronize",
    "to_device",
    "using_memory_manager",
]


def __getattr__(name):
    # numpy.ndarray subclasses: made, with NumPy loaded, when first asked
    # for.
    if name in ("ManagedNDArray", "MappedNDArray"):
        return _cudamem._host_ndarray_type(name)
    # The simulator's control API needs ctypes: load it only when asked for.
    if name == "simulator":
        import importlib
        return importlib.import_module("cudamem.simulator")
    raise AttributeError("module 'cudamem' has no attribute %r" % name)
