"""set_memory_limit(): a cap on the device and managed memory cudamem holds
from the driver on a device (pool slabs whole, frees still pending until
they run). An allocation that would pass it runs the out-of-memory recovery
and then raises CudaOutOfMemoryError without calling the driver;
memory_stats() counts the refusals and set_oom_observer()'s observer is
told of each.

The references: the simulator's counters (live bytes, calls of each entry
point) for what cudamem holds and whether the driver was asked, and the
simulated device's total (set_memory) for fractions.
"""
import json
import math
import pickle
import sys
import threading

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaOutOfMemoryError
from tests.helpers.devmem import device_memory

pytestmark = pytest.mark.simulator

MIB = 1 << 20
DEVICE = 64 * MIB


def _calls(sim, entry):
    return sim.stats()["calls"][entry]["calls"]


def _held(sim):
    live = sim.live()
    return live["device_bytes"] + live["managed_bytes"]


@pytest.fixture
def dev64(sim):
    """Device 0 with DEVICE bytes, no limit and no observer afterwards."""
    with device_memory(sim, DEVICE):
        try:
            yield sim
        finally:
            cudamem.set_memory_limit(None)
            cudamem.set_oom_observer(None)


def test_limit_is_inclusive_and_refuses_without_the_driver(dev64):
    cudamem.set_memory_limit(4 * MIB)
    assert cudamem.get_memory_limit() == 4 * MIB
    a = cudamem.device_array(3 * MIB, np.uint8)
    b = cudamem.device_array(MIB, np.uint8)  # exactly at the limit
    assert _held(dev64) == 4 * MIB
    before = cudamem.memory_stats()["oom_rejections"]
    allocs = _calls(dev64, "cuMemAlloc")
    with pytest.raises(CudaOutOfMemoryError) as info:
        cudamem.device_array(1, np.uint8)
    exc = info.value
    assert _calls(dev64, "cuMemAlloc") == allocs
    assert (exc.call, exc.requested, exc.held, exc.limit) == (
        None, 1, 4 * MIB, 4 * MIB)
    assert exc.held == _held(dev64)
    assert ("requested 1 bytes with %d bytes held, beyond the memory limit "
            "of %d bytes" % (4 * MIB, 4 * MIB)) in str(exc)
    assert cudamem.memory_stats()["oom_rejections"] == before + 1
    back = pickle.loads(pickle.dumps(exc))
    assert (type(back), str(back), back.held, back.limit) == (
        CudaOutOfMemoryError, str(exc), exc.held, exc.limit)
    # Nothing was left allocated by the refusal.
    assert _held(dev64) == 4 * MIB
    del a, b


def test_removing_the_limit_lets_allocations_through(dev64):
    cudamem.set_memory_limit(MIB)
    with pytest.raises(CudaOutOfMemoryError):
        cudamem.device_array(2 * MIB, np.uint8)
    cudamem.set_memory_limit(None)
    assert cudamem.get_memory_limit() is None
    a = cudamem.device_array(2 * MIB, np.uint8)
    assert _held(dev64) == 2 * MIB
    del a


def test_a_pending_free_makes_room(dev64):
    cudamem.set_memory_limit(4 * MIB)
    a = cudamem.device_array(4 * MIB, np.uint8)
    del a
    stats = cudamem.memory_stats()
    assert stats["pending_free_bytes"] == 4 * MIB
    assert _held(dev64) == 4 * MIB  # the driver still holds it
    frees = _calls(dev64, "cuMemFree")
    b = cudamem.device_array(4 * MIB, np.uint8)
    assert _calls(dev64, "cuMemFree") == frees + 1
    assert cudamem.memory_stats()["oom_rejections"] == \
        stats["oom_rejections"]
    assert _held(dev64) == 4 * MIB
    del b


def test_deferred_frees_do_not_make_room(dev64):
    cudamem.set_memory_limit(4 * MIB)
    with cudamem.defer_cleanup():
        a = cudamem.device_array(4 * MIB, np.uint8)
        del a
        with pytest.raises(CudaOutOfMemoryError) as info:
            cudamem.device_array(MIB, np.uint8)
    assert (info.value.held, info.value.pending) == (4 * MIB, 4 * MIB)
    # After the deferral the allocation recovers.
    b = cudamem.device_array(MIB, np.uint8)
    assert _held(dev64) == MIB
    del b


def test_managed_memory_counts(dev64):
    cudamem.set_memory_limit(2 * MIB)
    m = cudamem.managed_array(MIB, np.uint8)
    a = cudamem.device_array(MIB, np.uint8)
    assert _held(dev64) == 2 * MIB
    managed = _calls(dev64, "cuMemAllocManaged")
    with pytest.raises(CudaOutOfMemoryError) as info:
        cudamem.managed_array(1, np.uint8)
    assert _calls(dev64, "cuMemAllocManaged") == managed
    assert info.value.held == 2 * MIB
    del m, a


@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0, 1 / 3])
def test_fraction_of_the_device_total(dev64, fraction):
    cudamem.set_memory_limit(fraction)
    assert cudamem.get_memory_limit() == math.floor(DEVICE * fraction)
    assert cudamem.get_memory_limit(0) == cudamem.get_memory_limit(
        cudamem.get_current_device())


def test_limit_by_device_object(dev64):
    cudamem.set_memory_limit(3 * MIB, device=cudamem.get_current_device())
    assert cudamem.get_memory_limit(device=0) == 3 * MIB


@pytest.mark.parametrize("bad, exc, text", [
    (-1, ValueError, "not -1"),
    (0, ValueError, "not 0"),
    (1 << 64, ValueError, "not %d" % (1 << 64)),
    (1.5, ValueError, "not 1.5"),
    (0.0, ValueError, "not 0.0"),
    (-0.5, ValueError, "not -0.5"),
    (float("nan"), ValueError, "not nan"),
    (True, TypeError, "not bool"),
    ("1", TypeError, "not str"),
    (np.int64(5), TypeError, "not numpy.int64"),
])
def test_bad_limits(dev64, bad, exc, text):
    cudamem.set_memory_limit(MIB)
    with pytest.raises(exc, match="set_memory_limit.*" + text):
        cudamem.set_memory_limit(bad)
    assert cudamem.get_memory_limit() == MIB  # unchanged


def test_bad_device(dev64):
    with pytest.raises(ValueError, match="7"):
        cudamem.set_memory_limit(MIB, device=7)
    with pytest.raises(ValueError, match="7"):
        cudamem.get_memory_limit(7)


def test_failed_total_is_reported(dev64):
    dev64.inject("cuDeviceTotalMem", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError, match="cuDeviceTotalMem"):
        cudamem.set_memory_limit(0.5)
    dev64.clear_faults()
    assert cudamem.get_memory_limit() is None


def test_pool_counts_slabs_and_trims_before_refusing(dev64):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as mgr:
        try:
            _pool_at_the_limit(dev64, mgr)
        finally:
            mgr.trim()
    assert _held(dev64) == 0


def _pool_at_the_limit(sim, mgr):
    cudamem.set_memory_limit(4 * MIB)
    a = cudamem.device_array(MIB, np.uint8)  # a 2 MiB slab
    b = cudamem.device_array(MIB + MIB // 2, np.uint8)  # another
    assert _held(sim) == 4 * MIB
    allocs = _calls(sim, "cuMemAlloc")
    with pytest.raises(CudaOutOfMemoryError) as info:
        # Neither slab has room: a third one would pass the limit.
        cudamem.device_array(MIB + MIB // 2, np.uint8)
    assert _calls(sim, "cuMemAlloc") == allocs
    # What it would take from the driver: a slab.
    assert (info.value.held, info.value.limit, info.value.requested) == (
        4 * MIB, 4 * MIB, 2 * MIB)
    del a, b
    # Both slabs are cached now: a 4 MiB slab fits only once the pool is
    # trimmed, which the recovery does before refusing.
    assert mgr.stats()["cached_bytes"] == 4 * MIB
    c = cudamem.device_array(4 * MIB, np.uint8)
    assert _held(sim) == 4 * MIB
    assert _calls(sim, "cuMemAlloc") == allocs + 1
    del c


def test_observer_is_told(dev64):
    seen = []
    cudamem.set_oom_observer(seen.append)
    cudamem.set_memory_limit(2 * MIB)
    a = cudamem.device_array(MIB, np.uint8)
    with pytest.raises(CudaOutOfMemoryError):
        cudamem.device_array(2 * MIB, np.uint8)
    assert seen == [{"device": 0, "requested": 2 * MIB, "held": MIB,
                     "limit": 2 * MIB}]
    cudamem.set_oom_observer(None)
    with pytest.raises(CudaOutOfMemoryError):
        cudamem.device_array(2 * MIB, np.uint8)
    assert len(seen) == 1
    del a


def test_observer_not_told_of_driver_oom(dev64):
    seen = []
    cudamem.set_oom_observer(seen.append)
    with pytest.raises(CudaOutOfMemoryError) as info:
        cudamem.device_array(2 * DEVICE, np.uint8)
    assert info.value.call == "cuMemAlloc" and info.value.held is None
    assert seen == []


def test_observer_exception_is_unraisable(dev64, monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)

    def observer(info):
        raise RuntimeError("observer failed")

    cudamem.set_oom_observer(observer)
    cudamem.set_memory_limit(MIB)
    with pytest.raises(CudaOutOfMemoryError) as info:
        cudamem.device_array(2 * MIB, np.uint8)
    assert info.value.limit == MIB
    assert len(reported) == 1
    assert isinstance(reported[0].exc_value, RuntimeError)
    assert reported[0].object is observer


def test_observer_must_be_callable(dev64):
    with pytest.raises(TypeError, match="callable.*int"):
        cudamem.set_oom_observer(5)


def test_threads_racing_never_pass_the_limit(dev64):
    cudamem.set_memory_limit(8 * MIB)
    kept, refused, seen = [], [], []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def work():
        start.wait()
        for _ in range(4):
            try:
                arr = cudamem.device_array(MIB, np.uint8)
            except CudaOutOfMemoryError as exc:
                with lock:
                    refused.append(exc.held)
            else:
                with lock:
                    kept.append(arr)
                    seen.append(_held(dev64))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Nothing is freed: exactly the limit's worth gets through.
    assert len(kept) == 8 and len(refused) == 24
    assert _held(dev64) == 8 * MIB
    assert all(h + MIB > 8 * MIB for h in refused)
    assert max(seen) <= 8 * MIB
    kept.clear()


def test_limits_are_per_device(run_py):
    proc = run_py("""
        import json
        import numpy as np
        import cudamem
        out = {}
        cudamem.set_memory_limit(1 << 20, device=1)
        out["limits"] = [cudamem.get_memory_limit(0),
                         cudamem.get_memory_limit(1)]
        a = cudamem.device_array(2 << 20, np.uint8)  # device 0: no limit
        cudamem.select_device(1)
        try:
            cudamem.device_array(2 << 20, np.uint8)
        except cudamem.CudaOutOfMemoryError as exc:
            out["refused"] = [exc.held, exc.limit, exc.requested]
        b = cudamem.device_array(1 << 20, np.uint8)
        out["rejections"] = [cudamem.memory_stats(0)["oom_rejections"],
                             cudamem.memory_stats(1)["oom_rejections"]]
        print(json.dumps(out))
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "limits": [None, 1 << 20], "refused": [0, 1 << 20, 2 << 20],
        "rejections": [0, 1]}


def test_refusal_when_the_device_cannot_say_its_memory(dev64):
    # cuMemGetInfo fails while the error is built: the limit's figures
    # stay, the device's are 0.
    cudamem.set_memory_limit(MIB)
    dev64.inject("cuMemGetInfo", "CUDA_ERROR_UNKNOWN")
    try:
        with pytest.raises(CudaOutOfMemoryError) as info:
            cudamem.device_array(2 * MIB, np.uint8)
    finally:
        dev64.clear_faults()
    exc = info.value
    assert (exc.requested, exc.held, exc.limit, exc.free, exc.total) == (
        2 * MIB, 0, MIB, 0, 0)


def test_a_reset_gives_back_what_it_freed(run_py):
    # Device.reset() frees every allocation of the context with it, pool
    # slabs included: the limit has room for them again.
    proc = run_py("""
        import gc
        import numpy as np
        import cudamem
        from cudamem import simulator as sim
        MIB = 1 << 20
        dev = cudamem.get_current_device()
        cudamem.set_memory_limit(4 * MIB)
        a = cudamem.device_array(3 * MIB, np.uint8)
        m = cudamem.managed_array(MIB, np.uint8)
        dev.reset()
        del a, m
        gc.collect()
        b = cudamem.device_array(4 * MIB, np.uint8)
        print(sim.live()["device_bytes"] == 4 * MIB)
        del b
        cudamem._cudamem._flush_pending()
        with cudamem.using_memory_manager(cudamem.PoolMemoryManager):
            c = cudamem.device_array(3 * MIB, np.uint8)
            dev.reset()
            del c
            gc.collect()
        d = cudamem.device_array(4 * MIB, np.uint8)
        print(sim.live()["device_bytes"] == 4 * MIB,
              cudamem.memory_stats()["oom_rejections"])
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "0"]
