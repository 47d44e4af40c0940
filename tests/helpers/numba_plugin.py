"""A memory-manager plugin written the way numba-cuda's documentation
writes one (over a "device buffer library": cudamem's default manager
stands in for RMM), with only the import changed to cudamem. The EMM tests
of device and host memory both use it."""
import ctypes
import weakref

from cudamem import HostOnlyCUDAMemoryManager as _Base
from cudamem import MemoryInfo as _MemoryInfo
from cudamem import MemoryPointer as _MemoryPointer
from cudamem.memory import DefaultMemoryManager


def _make_finalizer(handle, allocations):
    def finalizer():
        allocations.pop(handle)
    return finalizer


class NumbaStyleManager(_Base):
    """A numba plugin over a "device buffer library" (cudamem's default
    manager stands in for RMM), as numba-cuda's docs write one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.allocations = {}
        self.library = None

    def initialize(self):
        super().initialize()
        self.library = DefaultMemoryManager(context=self.context)

    def memalloc(self, size):
        buf = self.library.memalloc(size)
        ctx = weakref.proxy(self.context)
        ptr = ctypes.c_uint64(buf.device_pointer_value)
        self.allocations[ptr.value] = buf
        finalizer = _make_finalizer(ptr.value, self.allocations)
        return _MemoryPointer(ctx, ptr, size, finalizer=finalizer)

    def get_ipc_handle(self, memory):
        raise NotImplementedError

    def get_memory_info(self):
        return _MemoryInfo(free=0, total=0)

    @property
    def interface_version(self):
        return 1


_numba_memory_manager = NumbaStyleManager
