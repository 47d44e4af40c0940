"""RMM's numba plugin (rmm/allocators/numba.py, its ctypes branch) as its
source writes it, with the imports changed to cudamem and two stand-ins:
``DeviceBuffer`` for rmm's (cudamem's default allocator underneath, so
its frees go through the pending deallocations) and ``_driver`` for
numba's ctypes driver (the library cudamem loaded, called directly).
Used by tests/parity/test_numba_emm_parity.py, in process and as the
module that NUMBA_CUDA_MEMORY_MANAGER names."""
import ctypes

import cudamem as cuda
from cudamem import HostOnlyCUDAMemoryManager, IpcHandle, MemoryPointer
from cudamem.memory import DefaultMemoryManager


class DeviceBuffer:
    """rmm.pylibrmm.DeviceBuffer's part the plugin uses: ``ptr``; the
    memory is freed when the buffer is."""

    def __init__(self, size):
        library = DefaultMemoryManager(context=cuda.current_context())
        self._memory = library.memalloc(size)
        self.ptr = self._memory.device_pointer_value or 0


def _driver():
    return ctypes.CDLL(cuda.driver.info()["path"])


def device_extents(memory):
    """numba's cudadrv.driver.device_extents: the allocation around
    *memory*, from cuMemGetAddressRange."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = _driver().cuMemGetAddressRange_v2(
        ctypes.byref(base), ctypes.byref(size),
        ctypes.c_uint64(memory.device_pointer_value))
    assert rc == 0, rc
    return base.value, base.value + size.value


def _make_emm_plugin_finalizer(handle, allocations):
    def finalizer():
        # RMM's guard: Context.reset() may have emptied allocations.
        if allocations:
            del allocations[handle]

    return finalizer


class RMMNumbaManager(HostOnlyCUDAMemoryManager):
    def initialize(self):
        pass

    def memalloc(self, size):
        buf = DeviceBuffer(size=size)
        ctx = self.context
        ptr = ctypes.c_uint64(int(buf.ptr))
        finalizer = _make_emm_plugin_finalizer(int(buf.ptr), self.allocations)
        self.allocations[int(buf.ptr)] = buf
        return MemoryPointer(ctx, ptr, size, finalizer=finalizer)

    def get_ipc_handle(self, memory):
        start, end = device_extents(memory)
        ipc_handle = (ctypes.c_byte * 64)()  # IPC handle is 64 bytes
        rc = _driver().cuIpcGetMemHandle(ctypes.byref(ipc_handle),
                                         ctypes.c_uint64(start))
        assert rc == 0, rc
        offset = memory.handle.value - start
        source_info = cuda.current_context().device.get_device_identity()
        return IpcHandle(memory, ipc_handle, memory.size, source_info,
                         offset=offset)

    def get_memory_info(self):
        raise NotImplementedError()

    @property
    def interface_version(self):
        return 1


_numba_memory_manager = RMMNumbaManager
