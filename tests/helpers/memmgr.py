"""Helpers of the memory-manager tests: driver call counts, an array's
address, work queued on a stream long enough to observe, and an EMM
plugin that counts what it is asked."""
import numpy as np

import cudamem
from cudamem import HostOnlyCUDAMemoryManager, MemoryPointer
from cudamem.memory import DefaultMemoryManager

QUEUED = 8  # copies: 200 ms with the tests' 25 ms stream delay


def calls(sim, entry):
    """How many times the driver's `entry` was called so far."""
    return sim.stats()["calls"][entry]["calls"]


def ptr(arr):
    """arr's device address."""
    return arr.__cuda_array_interface__["data"][0]


def queue_work(arr, stream):
    """At least 200 ms of work on `stream` that writes arr (zeros)."""
    host = np.zeros(arr.shape, arr.dtype)
    for _ in range(QUEUED):
        arr.copy_to_device(host, stream=stream)


class CountingManager(HostOnlyCUDAMemoryManager):
    """Every memalloc and every finalizer call, over cudamem's allocator."""

    def __init__(self, context):
        super().__init__(context)
        self.sizes = []
        self.freed = []

    def initialize(self):
        self.initialized = True

    def memalloc(self, size):
        inner = DefaultMemoryManager.memalloc(self, size)
        self.sizes.append(size)
        ptr = inner.device_pointer_value
        return MemoryPointer(self.context, ptr, size, owner=inner,
                             finalizer=lambda: self.freed.append(ptr))

    def get_ipc_handle(self, memory):
        raise NotImplementedError

    def get_memory_info(self):
        return cudamem.MemoryInfo(free=1, total=2)

    @property
    def interface_version(self):
        return 1
