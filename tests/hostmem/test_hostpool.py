"""The host pool (core/hostpool.c): page-locked blocks kept registered for
reuse by pinned arrays while PoolMemoryManager is on and by staged
cross-device copies always; size classes (test_pinned_cache.py: exact
sizes above the round threshold, waste and the tunables), the limit on
cached bytes, trim, statistics, threads, faults, and what close() and
Device.reset() do to it.

The references: NumPy for data, the simulator's call counters and live
registrations for how memory was page-locked."""
import threading

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem
from cudamem.errors import CudaAPIError
from tests.helpers.run import run_python

pytestmark = pytest.mark.simulator

PAGE = 4096



def calls(sim, name):
    return sim.stats()["calls"][name]["calls"]


def cached():
    stats = _cudamem._hostpool_stats()
    return stats["cached_blocks"], stats["cached_bytes"]


def address(ary):
    return ary.__array_interface__["data"][0]


def test_pinned_arrays_reuse_one_page_locked_block(sim, pool):
    before = calls(sim, "cuMemHostRegister")
    unregistered = calls(sim, "cuMemHostUnregister")
    for i in range(20):
        a = cudamem.pinned_array(1000, np.float64)
        a[:] = np.arange(1000) + i
        np.testing.assert_array_equal(a, np.arange(1000.0) + i)
        assert a.base.kind == "pinned" and a.base.registered
        assert a.base.size == 8000
        del a
    assert calls(sim, "cuMemHostRegister") == before + 1
    assert calls(sim, "cuMemHostUnregister") == unregistered
    assert cached() == (1, 2 * PAGE)


def test_like_and_device_copies_use_the_pool(sim, pool):
    ref = np.arange(24.0).reshape(4, 6)
    before = calls(sim, "cuMemHostRegister")
    for _ in range(5):
        h = cudamem.pinned_array_like(ref)
        cudamem.to_device(ref).copy_to_host(h)
        np.testing.assert_array_equal(h, ref)
        del h
    assert calls(sim, "cuMemHostRegister") == before + 1


def test_a_block_returns_only_with_its_last_reference(sim, pool):
    a = cudamem.pinned_array(1000, np.float64)
    a[:] = np.arange(1000.0)
    first = address(a)
    view = a[10:20]
    del a
    # The view keeps the HostBuffer: nothing cached, and a new array gets
    # other memory.
    assert cached() == (0, 0)
    b = cudamem.pinned_array(1000, np.float64)
    assert address(b) != first
    b[:] = -1
    np.testing.assert_array_equal(view, np.arange(10.0, 20.0))
    before = calls(sim, "cuMemHostRegister")
    del view
    assert cached() == (1, 2 * PAGE)
    c = cudamem.pinned_array(1000, np.float64)
    assert address(c) == first
    assert calls(sim, "cuMemHostRegister") == before
    assert cached() == (0, 0)


@pytest.mark.parametrize("nbytes, block", [
    (1, PAGE), (PAGE, PAGE), (PAGE + 1, 2 * PAGE), (3 * PAGE, 4 * PAGE),
    (100000, 131072), (1 << 20, 1 << 20)])
def test_size_classes(sim, pool, nbytes, block):
    # Up to the round threshold (1 MiB by default); test_pinned_cache.py
    # has the exact sizes above it.
    live = sim.live()
    a = cudamem.pinned_array(nbytes, np.uint8)
    assert a.base.size == nbytes
    assert sim.live()["registered_bytes"] == live["registered_bytes"] + block
    assert cudamem.memory_stats()["pinned_bytes_in_use"] == block
    del a
    assert cached() == (1, block)
    # Any request of the same class takes the block.
    before = calls(sim, "cuMemHostRegister")
    b = cudamem.pinned_array(block // 2 + 1 if block > PAGE else 1, np.uint8)
    assert calls(sim, "cuMemHostRegister") == before
    del b


def test_empty_and_uncachable_requests_bypass_the_pool(sim, pool):
    live = sim.live()
    # Larger than the limit on cached bytes: freed when given back.
    big = cudamem.pinned_array((256 << 20) + 1, np.uint8)
    empty = cudamem.pinned_array(0)
    big[-1] = 7
    del big, empty
    assert cached() == (0, 0)
    assert sim.live() == live


def test_pool_off_frees_at_once(sim):
    _cudamem._hostpool_trim()
    live = sim.live()
    a = cudamem.pinned_array(1000)
    unregistered = calls(sim, "cuMemHostUnregister")
    del a
    assert calls(sim, "cuMemHostUnregister") == unregistered + 1
    assert cached() == (0, 0) and sim.live() == live


def test_limit_and_trim(sim, pool):
    live = sim.live()
    pool.set_pinned_limit(2 * PAGE)
    assert _cudamem._hostpool_stats()["limit"] == 2 * PAGE
    arrays = [cudamem.pinned_array(PAGE, np.uint8) for _ in range(3)]
    unregistered = calls(sim, "cuMemHostUnregister")
    del arrays
    # Two fit under the limit; the third is freed.
    assert cached() == (2, 2 * PAGE)
    assert calls(sim, "cuMemHostUnregister") == unregistered + 1
    assert (sim.live()["registrations"]
            == live["registrations"] + 2)
    pool.set_pinned_limit(PAGE)
    assert cached() == (1, PAGE)
    pool.set_pinned_limit(None)
    assert _cudamem._hostpool_stats()["limit"] is None
    pool.trim()
    assert cached() == (0, 0)
    assert sim.live()["registrations"] == live["registrations"]


@pytest.mark.parametrize("bad, exc", [("1", TypeError), (True, TypeError),
                                      (-1, ValueError)])
def test_limit_bad_input(pool, bad, exc):
    with pytest.raises(exc, match="nbytes"):
        pool.set_pinned_limit(bad)
    assert _cudamem._hostpool_stats()["limit"] == 256 << 20


def test_memory_stats_match_the_simulator(sim, pool):
    live = sim.live()
    a = cudamem.pinned_array(3 * PAGE, np.uint8)
    b = cudamem.pinned_array(PAGE, np.uint8)
    del a
    stats = cudamem.memory_stats()
    assert stats["pinned_count"] == 1
    assert stats["pinned_bytes_in_use"] == PAGE
    assert stats["pinned_pool_cached_count"] == 1
    assert stats["pinned_pool_cached_bytes"] == 4 * PAGE
    # What the driver holds: in use plus cached.
    assert (sim.live()["registered_bytes"] - live["registered_bytes"]
            == stats["pinned_bytes_in_use"]
            + stats["pinned_pool_cached_bytes"])
    del b
    pool.trim()
    stats = cudamem.memory_stats()
    assert stats["pinned_pool_cached_bytes"] == stats["pinned_count"] == 0
    assert stats["pinned_count_peak"] >= 2


def test_threads_allocating_and_freeing(sim, pool):
    live = sim.live()
    errors = []

    def work(tid):
        try:
            rng = np.random.default_rng(tid)
            for i in range(40):
                n = int(rng.integers(1, 5000))
                a = cudamem.pinned_array(n, np.int32)
                a[:] = tid * 1000 + i
                assert (a == tid * 1000 + i).all()
                del a
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    blocks, nbytes = cached()
    # Every cached block is one registration, nothing else stays.
    assert blocks >= 1
    assert sim.live()["registrations"] == live["registrations"] + blocks
    assert cudamem.memory_stats()["pinned_count"] == 0
    pool.trim()
    assert sim.live() == live


def test_register_failing_while_the_pool_grows(sim, pool):
    keep = cudamem.pinned_array(PAGE, np.uint8)
    del keep
    live = sim.live()
    sim.inject("cuMemHostRegister", "CUDA_ERROR_UNKNOWN", after=2)
    arrays = [cudamem.pinned_array(PAGE, np.uint8)]  # the cached block
    arrays += [cudamem.pinned_array(2 * PAGE, np.uint8) for _ in range(2)]
    with pytest.raises(CudaAPIError) as info:
        cudamem.pinned_array(2 * PAGE, np.uint8)
    assert info.value.call == "cuMemHostRegister"
    stats = cudamem.memory_stats()
    assert stats["pinned_count"] == 3
    del arrays
    assert cached() == (3, 5 * PAGE)
    pool.trim()
    assert sim.live()["registrations"] == live["registrations"] - 1


def test_out_of_memory_trims_the_host_pool(sim, pool):
    arrays = [cudamem.pinned_array(PAGE, np.uint8) for _ in range(2)]
    del arrays
    assert cached() == (2, 2 * PAGE)
    live = sim.live()
    sim.inject("cuMemHostRegister", "CUDA_ERROR_OUT_OF_MEMORY")
    a = cudamem.pinned_array(4 * PAGE, np.uint8)
    # The recovery freed the cached blocks, then the retry succeeded.
    assert cached() == (0, 0)
    assert (sim.live()["registrations"]
            == live["registrations"] - 2 + 1)
    del a


_STAGED = """
    import numpy as np
    import cudamem
    from cudamem import _cudamem, simulator

    def registers():
        return simulator.stats()["calls"]["cuMemHostRegister"]["calls"]

    with cudamem.gpus[1]:
        far = cudamem.to_device(np.arange(10000.0))
    near = cudamem.device_array(10000)
    stream = cudamem.stream()
    before = registers()
    for i in range(5):
        near.copy_to_device(far, stream=stream if i % 2 else 0)
        assert (near.copy_to_host() == np.arange(10000.0)).all()
    # A smaller copy of the same size class takes the same block.
    near[:9000].copy_to_device(far[:9000])
    assert registers() == before + 1, registers() - before
    stats = cudamem.memory_stats(1)
    assert stats["pinned_pool_cached_count"] == 1
    assert stats["pinned_pool_cached_bytes"] == 131072
    assert simulator.live()["registrations"] == 1

    # A reset of the device that registered it ends the registration:
    # the next staged copy frees the stale block and page-locks anew.
    far_host = far.copy_to_host()
    del far
    cudamem.gpus[1].reset()
    with cudamem.gpus[1]:
        far = cudamem.to_device(far_host)
    near.copy_to_device(far)
    assert (near.copy_to_host() == far_host).all()
    assert registers() == before + 2
    assert simulator.live()["registrations"] == 1

    # Cached blocks retain the context of the device that registered
    # them: close() frees them and every context goes.
    del far, near, stream
    cudamem.close()
    live = simulator.live()
    assert live["registrations"] == live["contexts"] == 0, live
    assert _cudamem._hostpool_stats()["cached_blocks"] == 0
    print("ok")
    """


def test_staged_copies_reuse_one_buffer():
    proc = run_python(_STAGED, env={"CUDAMEM_SIM_DEVICES": "2",
                                    "CUDAMEM_SIM_NO_PEER": "1",
                                    "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "ok"
