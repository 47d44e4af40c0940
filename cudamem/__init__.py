"""cudamem: numba.cuda's host-side memory API as a fast C extension.

``import cudamem as cuda`` gives device arrays, transfers, streams, events,
pinned / mapped / managed memory and IPC with numba.cuda's names and
behaviour. Importing cudamem touches no driver: the CUDA driver (or, with
``CUDAMEM_SIMULATOR=1``, cudamem's simulated driver) is loaded by the first
call that needs it.
"""
from cudamem import driver
from cudamem._cudamem import is_available
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
    "CudaAPIError",
    "CudaDriverError",
    "CudaOutOfMemoryError",
    "CudaStickyError",
    "CudaSupportError",
    "CudaWarning",
    "driver",
    "is_available",
    "simulator",
]


def __getattr__(name):
    # The simulator's control API needs ctypes: load it only when asked for.
    if name == "simulator":
        import importlib
        return importlib.import_module("cudamem.simulator")
    raise AttributeError("module 'cudamem' has no attribute %r" % name)
