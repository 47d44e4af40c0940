"""cudamem: numba.cuda's host-side memory API as a fast C extension.

``import cudamem as cuda`` gives device arrays, transfers, streams, events,
pinned / mapped / managed memory and IPC with numba.cuda's names and
behaviour. Importing cudamem touches no driver: the CUDA driver (or, with
``CUDAMEM_SIMULATOR=1``, cudamem's simulated driver) is loaded by the first
call that needs it.
"""
from cudamem import driver, runtime
from cudamem._cudamem import (
    Context,
    Device,
    can_access_peer,
    close,
    current_context,
    get_current_device,
    is_available,
    list_devices,
    profile_start,
    profile_stop,
    select_device,
    synchronize,
)
from cudamem.devices import (
    MemoryInfo,
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

__version__ = "0.1.0"

__all__ = [
    "Context",
    "CudaAPIError",
    "CudaDriverError",
    "CudaOutOfMemoryError",
    "CudaStickyError",
    "CudaSupportError",
    "CudaWarning",
    "Device",
    "MemoryInfo",
    "can_access_peer",
    "close",
    "current_context",
    "detect",
    "driver",
    "get_current_device",
    "gpus",
    "is_available",
    "list_devices",
    "profile_start",
    "profile_stop",
    "profiling",
    "require_context",
    "runtime",
    "select_device",
    "simulator",
    "synchronize",
]


def __getattr__(name):
    # The simulator's control API needs ctypes: load it only when asked for.
    if name == "simulator":
        import importlib
        return importlib.import_module("cudamem.simulator")
    raise AttributeError("module 'cudamem' has no attribute %r" % name)
