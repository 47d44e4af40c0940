"""Out-of-memory recovery: on CUDA_ERROR_OUT_OF_MEMORY an allocation (device
arrays, managed arrays, the copy engine's temporaries, page-locked host
memory) runs the garbage collector, flushes the pending frees unless they
are deferred, waits for the pool's free blocks still pending on their
streams and trims the pool, and tries once more; after that,
CudaOutOfMemoryError says what was asked for and what was there, and
whether the pool's limit rather than the device refused it.

Real out-of-memory comes from a small simulated device (set_memory), the
rest from the simulator's fault injection, whose counters show how many
tries were made. NumPy is the reference for the data a recovered copy
moves.
"""
import gc
import json
import pickle
import weakref

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaOutOfMemoryError
from tests.helpers.devmem import device_memory

pytestmark = pytest.mark.simulator

MIB = 1 << 20
SMALL = 8 * MIB


def _calls(sim, entry):
    return sim.stats()["calls"][entry]["calls"]


@pytest.fixture
def small(sim):
    """Device 0 with SMALL bytes of memory for the test."""
    with device_memory(sim, SMALL):
        yield sim


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


# A 64 MiB device: a 50 MiB array freed while its stream still has work
# queued, then a 40 MiB request that only the freed array's bytes can meet.
DEVICE = 64 * MIB
FREED, WANTED, KEPT = 50 * MIB, 40 * MIB, 4 * MIB
# Enough queued work that a loaded machine cannot finish it first.
DELAY_US = 25000
QUEUED = 8


@pytest.fixture
def device64(sim):
    """Device 0 with DEVICE bytes of memory for the test."""
    with device_memory(sim, DEVICE):
        yield sim


def _manager(name):
    return {"default": cudamem.memory.DefaultMemoryManager,
            "pool": cudamem.PoolMemoryManager}[name]


def _busy_array(nbytes, stream, source):
    """An nbytes array that QUEUED copies on `stream` from the pinned
    array `source` keep writing (pinned: they return at once)."""
    arr = cudamem.device_array(nbytes, np.uint8, stream=stream)
    for i in range(QUEUED):
        arr[i * source.size:(i + 1) * source.size].copy_to_device(
            source, stream=stream)
    return arr


@pytest.mark.parametrize("manager", ["default", "pool"])
def test_memory_freed_on_a_busy_stream_is_recovered(run_py, manager):
    # A fresh process: the default manager's queue flushes past 20% of the
    # device's memory unless its environment raises the ratio.
    proc = run_py("""
        import json
        import numpy as np
        import cudamem
        from cudamem import simulator as sim
        MIB = 1 << 20
        ref = np.arange(%(kept)d // 8, dtype=np.float64)
        stream = cudamem.stream()
        cls = (cudamem.PoolMemoryManager if "%(manager)s" == "pool"
               else cudamem.memory.DefaultMemoryManager)
        out = {}
        with cudamem.using_memory_manager(cls) as mgr:
            kept = cudamem.to_device(ref, stream=stream)
            freed = cudamem.device_array(%(freed)d, np.uint8, stream=stream)
            # Pinned, so that the copies are queued and return at once.
            source = cudamem.pinned_array(MIB, np.uint8)
            source[:] = 9
            for i in range(%(queued)d):
                freed[i * MIB:(i + 1) * MIB].copy_to_device(source,
                                                            stream=stream)
            del freed
            out["pending_blocks"] = (mgr.stats()["pending_blocks"]
                                     if cls is cudamem.PoolMemoryManager
                                     else None)
            out["pending_free_bytes"] = (
                cudamem.memory_stats()["pending_free_bytes"])
            out["stream_busy"] = not stream.query()
            wanted = cudamem.device_array(%(wanted)d, np.uint8)
            wanted[:] = 5
            out["wanted_ok"] = bool((wanted.copy_to_host() == 5).all())
            out["kept_ok"] = bool(
                (kept.copy_to_host(stream=stream) == ref).all())
            stream.synchronize()
            del wanted, kept, source
        out["hazards"] = sim.hazard_count()
        print(json.dumps(out))
    """ % dict(kept=KEPT, freed=FREED, wanted=WANTED, queued=QUEUED,
               manager=manager),
        env={"CUDAMEM_SIM_MEMORY": str(DEVICE),
             "CUDAMEM_SIM_DELAY_US": str(DELAY_US),
             "CUDAMEM_SIM_HAZARDS": "1",
             "CUDAMEM_MAX_PENDING_DEALLOCS_RATIO": "0.9"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out == {
        "pending_blocks": 1 if manager == "pool" else None,
        "pending_free_bytes": 0 if manager == "pool" else FREED,
        "stream_busy": True, "wanted_ok": True, "kept_ok": True,
        "hazards": 0}


@pytest.mark.parametrize("manager", ["default", "pool"])
def test_what_recovery_cannot_free_is_reported(device64, hazards, manager):
    # The freed block is reclaimed, so the report counts it as free, not
    # as cached: what is left is the kept array.
    ref = np.arange(KEPT // 8, dtype=np.float64)
    stream = cudamem.stream()
    with cudamem.using_memory_manager(_manager(manager)) as mgr, \
            device64.delay(DELAY_US):
        kept = cudamem.to_device(ref, stream=stream)
        source = cudamem.pinned_array(MIB // 4, np.uint8)
        freed = _busy_array(FREED, stream, source)
        del freed
        with pytest.raises(CudaOutOfMemoryError) as info:
            cudamem.device_array(DEVICE - KEPT + MIB, np.uint8)
        free, total = cudamem.current_context().get_memory_info()
        np.testing.assert_array_equal(kept.copy_to_host(stream=stream),
                                      ref)
        stream.synchronize()
        del kept, source
        if manager == "pool":
            mgr.trim()
    exc = info.value
    assert (type(exc), exc.code, exc.call) == (
        CudaOutOfMemoryError, 2, "cuMemAlloc")
    assert (exc.requested, exc.total, exc.pending, exc.pool_cached,
            exc.limit) == (DEVICE - KEPT + MIB, DEVICE, 0, 0, None)
    assert exc.free == free == DEVICE - KEPT
    assert str(exc) == (
        "[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY: "
        "requested %d bytes; %d of %d bytes free, 0 pending release, 0 "
        "cached by the pool" % (DEVICE - KEPT + MIB, DEVICE - KEPT, DEVICE))


def test_trim_waits_for_blocks_pending_on_a_stream(device64, hazards):
    stream = cudamem.stream()
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as mgr, \
            device64.delay(DELAY_US):
        source = cudamem.pinned_array(MIB // 4, np.uint8)
        freed = _busy_array(FREED, stream, source)
        del freed
        assert mgr.stats()["pending_blocks"] == 1
        mgr.trim()
        assert stream.query()
        assert mgr.stats()["slab_bytes"] == 0
        assert device64.live()["device_bytes"] == 0
        del source


def test_the_pools_limit_says_it_refused(device64, hazards):
    ref = np.arange(3 * MIB // 8, dtype=np.float64)
    stream = cudamem.stream()
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as mgr, \
            device64.delay(DELAY_US):
        mgr.set_limit(8 * MIB)
        kept = cudamem.to_device(ref, stream=stream)
        # Pending on the stream: recovery waits for it, then frees it,
        # and what is left is still over the limit.
        source = cudamem.pinned_array(MIB // 4, np.uint8)
        freed = _busy_array(4 * MIB, stream, source)
        del freed
        try:
            with pytest.raises(CudaOutOfMemoryError) as info:
                cudamem.device_array(6 * MIB, np.uint8)
            free, total = cudamem.current_context().get_memory_info()
            np.testing.assert_array_equal(kept.copy_to_host(stream=stream),
                                          ref)
            stream.synchronize()
            del kept, source
        finally:
            mgr.set_limit(None)
            mgr.trim()
    exc = info.value
    assert (type(exc), exc.code, exc.call, exc.name) == (
        CudaOutOfMemoryError, 2, None, "CUDA_ERROR_OUT_OF_MEMORY")
    # The kept array's 3 MiB block is in a 4 MiB slab.
    assert (exc.requested, exc.limit, exc.pool_used, exc.pool_cached,
            exc.total, exc.pending) == (6 * MIB, 8 * MIB, 3 * MIB, MIB,
                                        DEVICE, 0)
    assert exc.free == free == DEVICE - 4 * MIB
    assert str(exc) == (
        "[2] CUDA_ERROR_OUT_OF_MEMORY: requested %d bytes beyond the pool's "
        "limit of %d bytes (%d bytes in use and %d cached by the pool); "
        "the device has %d of %d bytes free, 0 pending release" % (
            6 * MIB, 8 * MIB, 3 * MIB, MIB, DEVICE - 4 * MIB, DEVICE))
    back = pickle.loads(pickle.dumps(exc))
    assert (type(back), str(back), back.limit, back.pool_used) == (
        CudaOutOfMemoryError, str(exc), exc.limit, exc.pool_used)
