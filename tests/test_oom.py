"""Out-of-memory recovery: on CUDA_ERROR_OUT_OF_MEMORY an allocation (device
arrays, managed arrays, the copy engine's temporaries, page-locked host
memory) runs the garbage collector, flushes the pending frees unless they
are deferred, trims the pool and tries once more; after that,
CudaOutOfMemoryError says what was asked for and what was there.

Real out-of-memory comes from a small simulated device (set_memory), the
rest from the simulator's fault injection, whose counters show how many
tries were made. NumPy is the reference for the data a recovered copy
moves.
"""
import gc
import pickle
import weakref

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem
from cudamem.errors import CudaAPIError, CudaOutOfMemoryError

pytestmark = pytest.mark.simulator

MIB = 1 << 20
SMALL = 8 * MIB


def _calls(sim, entry):
    return sim.stats()["calls"][entry]["calls"]


@pytest.fixture
def small(sim):
    """Device 0 with SMALL bytes of memory for the test."""
    sim.set_memory(0, SMALL)
    yield sim
    gc.collect()
    _cudamem._flush_pending()
    sim.set_memory(0, 1 << 30)


def _fill(n):
    """n arrays of one MiB each."""
    return [cudamem.device_array(MIB, dtype=np.uint8) for _ in range(n)]


class _Cycle:
    """An object that only the garbage collector can free."""

    def __init__(self, payload):
        self.payload = payload
        self.me = self


def _gc_runs():
    """A list that grows by one for every collection while installed."""
    runs = []

    def record(phase, info):
        if phase == "start":
            runs.append(info)

    gc.callbacks.append(record)
    return runs, record


def test_pending_frees_are_flushed(small):
    keep = _fill(2)
    with cudamem.defer_cleanup():
        dropped = _fill(6)
        del dropped
    stats = cudamem.memory_stats()
    assert stats["pending_free_count"] == 6
    assert stats["pending_free_bytes"] == 6 * MIB
    frees, allocs = _calls(small, "cuMemFree"), _calls(small, "cuMemAlloc")
    big = cudamem.device_array(5 * MIB, dtype=np.uint8)
    assert _calls(small, "cuMemFree") - frees == 6
    assert _calls(small, "cuMemAlloc") - allocs == 2  # failed, then retried
    assert cudamem.memory_stats()["pending_free_count"] == 0
    assert small.live()["device_bytes"] == 7 * MIB
    del big, keep


def test_garbage_is_collected(small):
    keep = _fill(2)
    gc.collect()
    ref = weakref.ref(_Cycle(cudamem.device_array(5 * MIB, dtype=np.uint8)))
    assert ref() is not None
    runs, record = _gc_runs()
    try:
        big = cudamem.device_array(5 * MIB, dtype=np.uint8)
    finally:
        gc.callbacks.remove(record)
    assert ref() is None
    assert len(runs) == 1
    assert small.live()["device_bytes"] == 7 * MIB
    del big, keep


def test_garbage_is_collected_while_gc_is_disabled(small):
    gc.collect()
    ref = weakref.ref(_Cycle(cudamem.device_array(5 * MIB, dtype=np.uint8)))
    gc.disable()
    try:
        big = cudamem.device_array(5 * MIB, dtype=np.uint8)
    finally:
        gc.enable()
    assert ref() is None
    del big


def test_deferred_frees_stay_and_are_reported(small):
    keep = _fill(2)
    with cudamem.defer_cleanup():
        dropped = _fill(5)
        del dropped
        frees = _calls(small, "cuMemFree")
        with pytest.raises(CudaOutOfMemoryError) as info:
            cudamem.device_array(4 * MIB, dtype=np.uint8)
        assert _calls(small, "cuMemFree") == frees
        free, total = cudamem.current_context().get_memory_info()
    exc = info.value
    assert (exc.code, exc.name, exc.call) == (2, "CUDA_ERROR_OUT_OF_MEMORY",
                                              "cuMemAlloc")
    assert (exc.requested, exc.total, exc.pending, exc.pool_cached) == (
        4 * MIB, SMALL, 5 * MIB, 0)
    assert exc.free == free and total == SMALL
    assert str(exc) == (
        "[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY: "
        "requested %d bytes; %d of %d bytes free, %d pending release, 0 "
        "cached by the pool" % (4 * MIB, free, SMALL, 5 * MIB))
    # After the deferral the next allocation recovers.
    big = cudamem.device_array(4 * MIB, dtype=np.uint8)
    del big, keep


def test_error_pickles_with_its_numbers(sim):
    sim.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", count=2)
    with pytest.raises(CudaOutOfMemoryError) as info:
        cudamem.device_array(1000, dtype=np.uint8)
    exc = info.value
    assert isinstance(exc, CudaAPIError)
    assert exc.requested == 1000
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is CudaOutOfMemoryError
    assert str(back) == str(exc)
    assert (back.requested, back.free, back.total, back.pending,
            back.pool_cached) == (exc.requested, exc.free, exc.total,
                                  exc.pending, exc.pool_cached)


@pytest.mark.parametrize("failures", [1, 2])
def test_injected_device_allocation(sim, failures):
    before = _calls(sim, "cuMemAlloc")
    sim.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", count=failures)
    if failures == 1:
        ary = cudamem.device_array(100)
        assert ary.shape == (100,)
        del ary
    else:
        with pytest.raises(CudaOutOfMemoryError, match="requested 800 "
                           "bytes"):
            cudamem.device_array(100)
    assert _calls(sim, "cuMemAlloc") - before == 2


def test_other_errors_are_not_retried(sim):
    before = _calls(sim, "cuMemAlloc")
    runs, record = _gc_runs()
    sim.inject("cuMemAlloc", "CUDA_ERROR_INVALID_VALUE")
    try:
        with pytest.raises(CudaAPIError) as info:
            cudamem.device_array(100)
    finally:
        gc.callbacks.remove(record)
    assert type(info.value) is CudaAPIError
    assert _calls(sim, "cuMemAlloc") - before == 1
    assert runs == []


@pytest.mark.parametrize("failures", [1, 2])
def test_injected_managed_allocation(sim, failures):
    before = _calls(sim, "cuMemAllocManaged")
    sim.inject("cuMemAllocManaged", "CUDA_ERROR_OUT_OF_MEMORY",
               count=failures)
    if failures == 1:
        ary = cudamem.managed_array(10, dtype=np.float32)
        ary[:] = 1
        assert ary.sum() == 10
        del ary
    else:
        with pytest.raises(CudaOutOfMemoryError) as info:
            cudamem.managed_array(10, dtype=np.float32)
        assert info.value.call == "cuMemAllocManaged"
        assert info.value.requested == 40
        assert sim.live()["managed_allocations"] == 0
    assert _calls(sim, "cuMemAllocManaged") - before == 2


def test_managed_recovers_pending_frees(small):
    keep = _fill(2)
    with cudamem.defer_cleanup():
        dropped = [cudamem.managed_array(MIB, dtype=np.uint8)
                   for _ in range(5)]
        del dropped
    ary = cudamem.managed_array(5 * MIB, dtype=np.uint8)
    assert small.live()["managed_bytes"] == 5 * MIB
    del ary, keep


@pytest.mark.parametrize("failures", [1, 2])
def test_injected_temporary(sim, failures):
    host = np.arange(1000.0)
    ary = cudamem.to_device(host)
    before = _calls(sim, "cuMemAlloc")
    sim.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", count=failures)
    if failures == 1:
        ary[1:] = ary[:-1]
        host[1:] = host[:-1].copy()
        np.testing.assert_array_equal(ary.copy_to_host(), host)
    else:
        with pytest.raises(CudaOutOfMemoryError) as info:
            ary[1:] = ary[:-1]
        assert info.value.requested == 999 * 8
    assert _calls(sim, "cuMemAlloc") - before == 2


def test_temporary_recovers_garbage(small):
    host = np.arange(MIB // 8, dtype=np.float64)
    ary = cudamem.to_device(host)
    keep = _fill(2)
    gc.collect()
    ref = weakref.ref(_Cycle(cudamem.device_array(5 * MIB, dtype=np.uint8)))
    assert small.live()["device_bytes"] == SMALL
    runs, record = _gc_runs()
    try:
        ary[1:] = ary[:-1]
    finally:
        gc.callbacks.remove(record)
    host[1:] = host[:-1].copy()
    assert ref() is None and len(runs) == 1
    np.testing.assert_array_equal(ary.copy_to_host(), host)
    del ary, keep


@pytest.mark.parametrize("failures", [1, 2])
def test_injected_pinned_host_memory(sim, failures):
    before = _calls(sim, "cuMemHostAlloc")
    sim.inject("cuMemHostAlloc", "CUDA_ERROR_OUT_OF_MEMORY", count=failures)
    if failures == 1:
        buf = cudamem.mapped_array(16, wc=True)
        assert buf.shape == (16,)
        del buf
    else:
        with pytest.raises(CudaOutOfMemoryError) as info:
            cudamem.mapped_array(16, wc=True)
        assert info.value.requested == 128
        assert sim.live()["host_allocations"] == 0
    assert _calls(sim, "cuMemHostAlloc") - before == 2


def test_injected_page_locking(sim):
    before = _calls(sim, "cuMemHostRegister")
    sim.inject("cuMemHostRegister", "CUDA_ERROR_OUT_OF_MEMORY")
    buf = cudamem.pinned_array(16)
    assert _calls(sim, "cuMemHostRegister") - before == 2
    assert sim.live()["registrations"] == 1
    del buf
