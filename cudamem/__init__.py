"""cudamem: numba.cuda's host-side memory API as a fast C extension.

``import cudamem as cuda`` gives device arrays, transfers, streams, events,
pinned / mapped / managed memory and IPC with numba.cuda's names and
behaviour. Importing cudamem touches no driver: the CUDA driver (or, with
``CUDAMEM_SIMULATOR=1``, cudamem's simulated driver) is loaded by the first
call that needs it.
"""
import sys as _sys
from os import environ as _environ

from cudamem import _cudamem
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
    get_memory_limit,
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
    reset_accumulated_memory_stats,
    reset_peak_stats,
    select_device,
    set_memory_limit,
    set_oom_observer,
    stream,
    synchronize,
    to_device,
)

# The extension imported cudamem.errors already: these cost nothing.
from cudamem.errors import (
    CudaAPIError,
    CudaDriverError,
    CudaOutOfMemoryError,
    CudaStickyError,
    CudaSupportError,
    CudaWarning,
)

# The names of the package's Python modules, each imported on first access
# (module __getattr__ below), so that `import cudamem` compiles and runs
# none of them: {name: module}.
_LAZY = {
    name: "cudamem." + module
    for module, names in (
        ("arrays", ("device_array_like", "managed_array_like")),
        ("devices", ("MemoryInfo", "MemoryStats", "MemorySummary",
                     "defer_cleanup", "detect", "gpus", "memory_summary",
                     "profiling", "require_context")),
        ("hostarrays", ("deregister", "mapped", "mapped_array_like",
                        "pinned", "pinned_array_like", "register")),
        ("ipc", ("GetIpcHandleMixin", "IpcArrayHandle", "IpcHandle",
                 "open_ipc_array")),
        ("memory", ("BaseCUDAMemoryManager", "HostOnlyCUDAMemoryManager",
                    "ManagedMemory", "MappedMemory", "PinnedMemory",
                    "set_memory_manager", "using_memory_manager")),
        ("pool", ("AsyncMemoryManager", "PoolMemoryManager")),
        ("runtime", ("is_supported_version",)),
        ("smartarray", ("SmartArray",)),
    )
    for name in names
}
# Submodules that were attributes after `import cudamem` (numba's layout
# and dask's `cuda.devicearray.DeviceNDArray`), also loaded on access.
_SUBMODULES = ("arrays", "cudadrv", "devicearray", "devices", "driver",
               "hostarrays", "ipc", "memory", "pool", "runtime", "simulator",
               "smartarray")
# numpy.ndarray subclasses, made with NumPy loaded when first asked for.
_HOST_NDARRAYS = ("ManagedNDArray", "MappedNDArray")

# What type checkers and IDEs see: the names as plain imports.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from cudamem import (
        arrays,
        cudadrv,
        devicearray,
        devices,
        driver,
        hostarrays,
        ipc,
        memory,
        pool,
        runtime,
        simulator,
        smartarray,
    )
    from cudamem.arrays import device_array_like, managed_array_like
    from cudamem.devices import (
        MemoryInfo,
        MemoryStats,
        MemorySummary,
        defer_cleanup,
        detect,
        gpus,
        memory_summary,
        profiling,
        require_context,
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
    from cudamem.pool import AsyncMemoryManager, PoolMemoryManager
    from cudamem.runtime import is_supported_version
    from cudamem.smartarray import SmartArray
del TYPE_CHECKING


def _load_streams():
    # The stream glue brings threading: imported on first use, not here.
    from cudamem import _streams
    return (_streams.async_done, _streams.auto_synchronize,
            _streams.ensure_dispatcher)


def _load_handles():
    # The ctypes handle types bring ctypes: imported on first use.
    from cudamem import _handles
    return _handles.Handle, _handles.DevicePointer, _handles.LaunchView


# The extension's hooks from memory.py, devices.py and ipc.py:
# {keyword of _install(): (module, name)}.
_HOOKS = {
    "make_memory_manager": ("memory", "_make_memory_manager"),
    "assign_memory_manager": ("memory", "_assign_memory_manager"),
    "plugin_defer_cleanup": ("memory", "_plugin_defer_cleanup"),
    "UniqueDict": ("memory", "UniqueDict"),
    "MemoryInfo": ("devices", "MemoryInfo"),
    "MemoryStats": ("devices", "MemoryStats"),
    "IpcHandle": ("ipc", "IpcHandle"),
    "array_handle": ("ipc", "_array_handle"),
    "PoolIpcHandle": ("ipc", "PoolIpcHandle"),
}


def _install_hooks():
    """Imports the hooks' modules and hands the extension the real hooks
    and the two loaders; returns the hooks by keyword."""
    import importlib
    hooks = {key: getattr(importlib.import_module("cudamem." + module), name)
             for key, (module, name) in _HOOKS.items()}
    _cudamem._install(load_streams=_load_streams, load_handles=_load_handles,
                      complete=_complete, **hooks)
    return hooks


def _first_use(key):
    # A stand-in for hook `key`: its first call imports the hooks' modules
    # and installs the real objects, which the extension calls from then on.
    def hook(*args, **kwargs):
        return _install_hooks()[key](*args, **kwargs)
    hook.__qualname__ = hook.__name__ = "_first_use_" + key
    return hook


def _complete():
    """Binds every lazy name, submodule and host array type and removes
    the module's __getattr__: CPython specializes `cudamem.name` only in
    a module without one, so with it every access paid 14 to 25 ns more.
    The extension calls this once the driver has loaded, so the first use
    pays for the modules, not the import; without NumPy loaded by then,
    which the host array types need, the names stay lazy."""
    # No __getattr__: already complete, or the package still importing.
    if "numpy" not in _sys.modules or "__getattr__" not in globals():
        return
    import importlib
    names = {name: getattr(importlib.import_module(module), name)
             for name, module in _LAZY.items()}
    names.update((name, importlib.import_module("cudamem." + name))
                 for name in _SUBMODULES)
    names.update((name, _cudamem._host_ndarray_type(name))
                 for name in _HOST_NDARRAYS)
    _install_hooks()
    globals().update(names)
    del globals()["__getattr__"]


# The seam (docs/design.rst): every Python object the extension calls;
# until the first call into one of _HOOKS, a stand-in that loads them.
_cudamem._install(load_streams=_load_streams, load_handles=_load_handles,
                  complete=_complete,
                  **{key: _first_use(key) for key in _HOOKS})

# The variables that name the memory manager (memory.py reads them). One
# named there must be on before the first allocation, which memory.py sees
# to when imported: with either set, it is imported now.
_MANAGER_VARIABLES = ("CUDAMEM_MEMORY_MANAGER", "NUMBA_CUDA_MEMORY_MANAGER")
if not _environ.keys().isdisjoint(_MANAGER_VARIABLES):
    _install_hooks()

__version__ = "0.1.0"

__all__ = [
    "AsyncMemoryManager",
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
    "MemorySummary",
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
    "get_memory_limit",
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
    "memory_summary",
    "per_thread_default_stream",
    "pinned",
    "pinned_array",
    "pinned_array_like",
    "profile_start",
    "profile_stop",
    "profiling",
    "register",
    "require_context",
    "reset_accumulated_memory_stats",
    "reset_peak_stats",
    "runtime",
    "select_device",
    "set_memory_limit",
    "set_memory_manager",
    "set_oom_observer",
    "simulator",
    "stream",
    "synchronize",
    "to_device",
    "using_memory_manager",
]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is not None:
        import importlib
        value = getattr(importlib.import_module(module), name)
    elif name in _SUBMODULES:
        # Importing a submodule binds it here too: no __getattr__ next time.
        import importlib
        return importlib.import_module("cudamem." + name)
    elif name in _HOST_NDARRAYS:
        value = _cudamem._host_ndarray_type(name)
    else:
        raise AttributeError("module 'cudamem' has no attribute %r" % name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()).union(_LAZY, _SUBMODULES, _HOST_NDARRAYS))
