"""memory_stats() and reset_peak_stats(): cudamem's current and peak bytes
and counts per kind of allocation, and the frees pending release.

The simulator's live counts are the reference: what cudamem counts in use
plus what it has queued for release is what the driver holds, kind by
kind.
"""
import contextlib
import gc

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem

pytestmark = pytest.mark.simulator

KINDS = ["device", "managed", "pinned", "mapped", "write_combined"]
PAGE = 4096


def _flush():
    gc.collect()
    _cudamem._flush_pending()


def _check_device(sim):
    """Device and managed memory: in use plus pending is what the driver
    holds (the queue holds only device and managed memory here)."""
    stats, live = cudamem.memory_stats(), sim.live()
    assert (stats["device_bytes_in_use"] + stats["managed_bytes_in_use"] +
            stats["pending_free_bytes"]) == (live["device_bytes"] +
                                             live["managed_bytes"])
    assert (stats["device_count"] + stats["managed_count"] +
            stats["pending_free_count"]) == (live["device_allocations"] +
                                             live["managed_allocations"])
    return stats, live


def test_keys():
    stats = cudamem.memory_stats()
    expected = {"pending_free_bytes", "pending_free_count",
                "pool_cached_bytes", "pinned_pool_cached_bytes",
                "pinned_pool_cached_count", "oom_rejections"}
    for kind in KINDS:
        expected |= {kind + "_bytes_in_use", kind + "_bytes_peak",
                     kind + "_count", kind + "_count_peak",
                     kind + "_requested_bytes",
                     kind + "_requested_bytes_peak",
                     kind + "_allocations", kind + "_frees"}
    assert set(stats) == expected
    assert all(type(v) is int and v >= 0 for v in stats.values())
    assert stats["pool_cached_bytes"] == 0


def test_device_arrays_match_the_simulator(sim):
    _flush()
    arrays = [cudamem.device_array(n) for n in (10, 1000, 12345)]
    stats, live = _check_device(sim)
    assert stats["pending_free_count"] == 0
    assert stats["device_bytes_in_use"] == live["device_bytes"]
    assert stats["device_count"] == live["device_allocations"]
    assert stats["device_bytes_in_use"] >= 8 * (10 + 1000 + 12345)
    del arrays
    _flush()
    stats, live = _check_device(sim)
    assert stats["device_count"] == live["device_allocations"]


def test_zero_size_is_not_counted():
    before = cudamem.memory_stats()["device_count"]
    ary = cudamem.device_array(0)
    assert cudamem.memory_stats()["device_count"] == before
    del ary


@pytest.mark.parametrize("manager", [None, "PoolMemoryManager",
                                     "AsyncMemoryManager"])
def test_an_empty_array_calls_nothing_and_queues_nothing(manager, sim):
    # An empty allocation has no memory to wait for: it is made with the
    # GIL held and calls no driver entry, with any manager; its release
    # queues nothing.
    use = (cudamem.using_memory_manager(getattr(cudamem, manager))
           if manager else contextlib.nullcontext())
    with use:
        cudamem.device_array(0)  # the current context made, as before
        _flush()
        before = {k: v["calls"] for k, v in sim.stats()["calls"].items()}
        pending = cudamem.memory_stats()["pending_free_count"]
        ary = cudamem.device_array((0, 3), np.float64)
        assert ary.shape == (0, 3) and ary.nbytes == 0
        del ary
        after = {k: v["calls"] for k, v in sim.stats()["calls"].items()}
        called = {k for k in after if after[k] != before.get(k, 0)}
        assert not called & {"cuMemAlloc", "cuMemAllocAsync",
                             "cuMemAllocFromPoolAsync", "cuMemFree",
                             "cuMemFreeAsync"}, called
        assert cudamem.memory_stats()["pending_free_count"] == pending


def test_pending_release(sim):
    _flush()
    before = cudamem.memory_stats()
    with cudamem.defer_cleanup():
        arrays = [cudamem.device_array(100) for _ in range(20)]
        stats, _ = _check_device(sim)
        assert stats["device_count"] == before["device_count"] + 20
        del arrays
        stats, live = _check_device(sim)
        assert stats["pending_free_count"] == 20
        assert stats["pending_free_bytes"] == 20 * 800
        assert stats["device_count"] == before["device_count"]
        assert live["device_allocations"] == stats["device_count"] + 20
        deallocs = cudamem.current_context().memory_manager.deallocations
        assert (len(deallocs), deallocs.nbytes) == (20, 20 * 800)
    _flush()
    stats, _ = _check_device(sim)
    assert stats["pending_free_count"] == 0


def test_managed_match_the_simulator(sim):
    _flush()
    arrays = [cudamem.managed_array(n, dtype=np.float32) for n in (3, 300)]
    stats, live = _check_device(sim)
    assert stats["managed_bytes_in_use"] == live["managed_bytes"] == 4 * 303
    assert stats["managed_count"] == live["managed_allocations"] == 2
    del arrays


def test_pinned_and_mapped_match_the_simulator(sim):
    _flush()
    base = sim.live()
    pinned = cudamem.pinned_array(1000)  # two pages
    mapped = cudamem.mapped_array(10)    # one page
    stats, live = cudamem.memory_stats(), sim.live()
    assert stats["pinned_bytes_in_use"] == 2 * PAGE
    assert stats["pinned_count"] == 1
    assert stats["mapped_bytes_in_use"] == PAGE
    assert stats["mapped_count"] == 1
    assert (live["registered_bytes"] - base["registered_bytes"] ==
            stats["pinned_bytes_in_use"] + stats["mapped_bytes_in_use"])
    assert live["registrations"] - base["registrations"] == 2
    del pinned, mapped
    stats = cudamem.memory_stats()
    assert stats["pinned_count"] == stats["mapped_count"] == 0
    assert stats["pinned_bytes_in_use"] == stats["mapped_bytes_in_use"] == 0


def test_write_combined_match_the_simulator(sim):
    _flush()
    wc = cudamem.mapped_array(100, dtype=np.float32, wc=True)
    stats, live = cudamem.memory_stats(), sim.live()
    assert stats["write_combined_bytes_in_use"] == live["host_bytes"] == 400
    assert stats["write_combined_count"] == live["host_allocations"] == 1
    del wc
    stats = cudamem.memory_stats()
    assert stats["write_combined_count"] == 0
    # Its free is queued with the device's memory.
    assert stats["pending_free_bytes"] >= 400


def test_registrations_are_not_counted(sim):
    host = np.zeros(5000)
    before = cudamem.memory_stats()
    cudamem.register(host)
    try:
        assert sim.live()["registrations"] >= 1
        assert cudamem.memory_stats() == before
    finally:
        cudamem.deregister(host)


def test_peaks_and_reset(sim):
    _flush()
    cudamem.reset_peak_stats()
    start = cudamem.memory_stats()
    assert start["device_bytes_peak"] == start["device_bytes_in_use"]
    assert start["device_count_peak"] == start["device_count"]
    arrays = [cudamem.device_array(1000) for _ in range(3)]
    del arrays[1:]
    _flush()
    stats = cudamem.memory_stats()
    assert stats["device_count"] == start["device_count"] + 1
    assert stats["device_count_peak"] == start["device_count"] + 3
    assert stats["device_bytes_peak"] == start["device_bytes_in_use"] + 24000
    cudamem.reset_peak_stats(cudamem.get_current_device())
    stats = cudamem.memory_stats()
    assert stats["device_bytes_peak"] == stats["device_bytes_in_use"]
    assert stats["device_count_peak"] == stats["device_count"]
    del arrays


def test_temporary_shows_in_the_peak(sim):
    ary = cudamem.to_device(np.arange(1000.0))
    cudamem.reset_peak_stats()
    before = cudamem.memory_stats()
    ary[1:] = ary[:-1]  # overlapping: through a device temporary
    after = cudamem.memory_stats()
    assert after["device_count"] == before["device_count"]
    assert after["device_bytes_peak"] == before["device_bytes_in_use"] + 7992
    del ary


def test_device_argument():
    dev = cudamem.get_current_device()
    assert cudamem.memory_stats(dev) == cudamem.memory_stats(dev.id)
    assert cudamem.memory_stats(device=0) == cudamem.memory_stats()
    cudamem.reset_peak_stats(device=dev)


@pytest.mark.parametrize("bad, exc, text", [
    ("0", TypeError, "device must be an int ordinal or a Device, not str"),
    (1.0, TypeError, "not float"),
    (True, TypeError, "not bool"),
    (99, ValueError, "99"),
    (-1, ValueError, "-1"),
])
def test_bad_device(bad, exc, text):
    for fn in (cudamem.memory_stats, cudamem.reset_peak_stats,
               cudamem.reset_accumulated_memory_stats,
               cudamem.memory_summary):
        with pytest.raises(exc, match=text):
            fn(bad)


def test_bad_arguments():
    with pytest.raises(TypeError, match="memory_stats"):
        cudamem.memory_stats(0, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        cudamem.reset_peak_stats(dev=0)


def test_second_device(run_py):
    proc = run_py("""
        import numpy as np
        import cudamem
        from cudamem import simulator
        with cudamem.gpus[1]:
            ary = cudamem.device_array(100)
        assert cudamem.memory_stats(1)["device_bytes_in_use"] == 800
        assert cudamem.memory_stats(0)["device_count"] == 0
        assert simulator.live()["device_bytes"] == 800
        print("ok")
        """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
