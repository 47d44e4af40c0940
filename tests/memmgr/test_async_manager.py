"""AsyncMemoryManager: device arrays from the driver's memory pool
(core/asyncpool.c), cuMemAllocAsync on their stream and cuMemFreeAsync on
it when they go, selected the ways numba users select a manager.

The references: NumPy for the bytes every array keeps; the simulator's
call counters for where memory came from and how it was freed; the pool's
attributes (the CUDA driver's CU_MEMPOOL_ATTR_*) for trim and the release
threshold; the hazard checker for frees queued behind work on delayed
streams.
"""
import threading
import warnings

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaOutOfMemoryError, CudaStickyError
from tests.helpers.memmgr import CountingManager
from tests.helpers.memmgr import calls as _calls
from tests.helpers.memmgr import queue_work as _queue_work

pytestmark = pytest.mark.simulator

MIB = 1 << 20
# Enough queued work that a loaded machine cannot finish it first.
DELAY_US = 25000


@pytest.fixture
def manager():
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
        yield m
        m.set_limit(None)
        # Nothing the test made stays reserved in the pool.
        m.trim()


def test_arrays_come_from_the_pool_and_keep_their_data(manager, sim):
    assert cudamem.current_context().memory_manager is manager
    sim.reset()
    stream = cudamem.stream()
    hosts = [np.arange(128, dtype=np.float64) * i for i in range(5)]
    arrays = [cudamem.to_device(h) for h in hosts]
    arrays.append(cudamem.to_device(hosts[2], stream=stream))
    assert _calls(sim, "cuMemAllocAsync") == 6
    assert _calls(sim, "cuMemAlloc") == 0
    for h, a in zip(hosts + [hosts[2]], arrays):
        np.testing.assert_array_equal(a.copy_to_host(stream=stream), h)
    stats = manager.stats()
    assert stats["enabled"] is True
    assert stats["used_bytes"] == 6 * 1024
    del arrays, a
    # Freed on their streams, not through the pending deallocations.
    assert _calls(sim, "cuMemFreeAsync") == 6
    assert _calls(sim, "cuMemFree") == 0
    assert cudamem.current_context().deallocations.nbytes == 0
    cudamem.synchronize()
    assert manager.stats()["used_bytes"] == 0


def test_the_previous_manager_is_back_after_the_block(sim):
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
        kept = cudamem.to_device(np.arange(1000.0))
    manager = cudamem.current_context().memory_manager
    assert type(manager) is cudamem.memory.DefaultMemoryManager
    sim.reset()
    plain = cudamem.device_array(10)
    assert _calls(sim, "cuMemAlloc") == 1
    assert _calls(sim, "cuMemAllocAsync") == 0
    assert m.stats()["enabled"] is False
    # An array made in the block still frees on its stream.
    np.testing.assert_array_equal(kept.copy_to_host(), np.arange(1000.0))
    del kept, plain
    assert _calls(sim, "cuMemFreeAsync") == 1
    m.trim()


def test_a_free_waits_for_work_queued_on_its_stream(manager, hazards):
    sim = hazards
    stream = cudamem.stream()
    with sim.delay(DELAY_US):
        arr = cudamem.device_array(MIB, np.uint8, stream=stream)
        _queue_work(arr, stream)
        sim.reset()
        del arr
        # Queued behind the copies, not run (nor waited for) now.
        assert _calls(sim, "cuMemFreeAsync") == 1
        assert _calls(sim, "cuStreamSynchronize") == 0
        assert not stream.query()
        # Another stream gets memory the queued work cannot touch.
        other = cudamem.stream()
        data = np.arange(MIB, dtype=np.uint8) % 251
        b = cudamem.to_device(data, stream=other)
        np.testing.assert_array_equal(b.copy_to_host(stream=other), data)
        stream.synchronize()
    # conftest's hazard check fails the test on a race.
    assert sim.hazard_count() == 0, sim.last_hazard()
    del b


def test_a_free_waits_for_other_streams_work(manager, hazards):
    sim = hazards
    own, busy = cudamem.stream(), cudamem.stream()
    with sim.delay(DELAY_US):
        arr = cudamem.device_array(MIB, np.uint8, stream=own)
        _queue_work(arr, busy)
        sim.reset()
        del arr
        # The free on `own` waits for `busy` on the device.
        assert _calls(sim, "cuStreamWaitEvent") >= 1
        assert _calls(sim, "cuMemFreeAsync") == 1
        data = np.arange(MIB, dtype=np.uint8) % 13
        b = cudamem.to_device(data, stream=own)
        np.testing.assert_array_equal(b.copy_to_host(stream=own), data)
        busy.synchronize()
    assert sim.hazard_count() == 0, sim.last_hazard()
    del b


def test_memory_that_outlives_its_stream_frees_on_the_legacy_stream(
        manager, hazards):
    sim = hazards
    stream = cudamem.stream()
    with sim.delay(DELAY_US):
        arr = cudamem.device_array(MIB, np.uint8, stream=stream)
        _queue_work(arr, stream)
        memory = arr.gpu_data
        del arr, stream
        # The stream's release queued its destroy; its handle may go.
        cudamem.current_context().deallocations.clear()
        sim.reset()
        del memory
        assert _calls(sim, "cuMemFreeAsync") == 1
        # Ordered after the released stream's work by its event.
        assert _calls(sim, "cuStreamWaitEvent") >= 1
        assert _calls(sim, "cuStreamSynchronize") == 0
        cudamem.synchronize()
    assert sim.hazard_count() == 0, sim.last_hazard()


def test_trim_and_release_threshold_against_the_pool(manager, sim):
    manager.set_release_threshold(None)
    assert manager.stats()["release_threshold"] is None
    arrays = [cudamem.device_array(MIB, np.uint8) for _ in range(4)]
    stats = manager.stats()
    assert stats["used_bytes"] == 4 * MIB
    assert stats["reserved_bytes"] >= 4 * MIB
    del arrays
    cudamem.synchronize()
    # Kept reserved for reuse past the synchronize: no threshold.
    stats = manager.stats()
    assert stats["used_bytes"] == 0 and stats["reserved_bytes"] >= 4 * MIB
    assert stats["used_bytes_high"] >= 4 * MIB
    sim.reset()
    again = cudamem.device_array(MIB, np.uint8)
    assert manager.stats()["reserved_bytes"] >= 4 * MIB
    del again
    manager.trim(2 * MIB)
    assert 0 < manager.stats()["reserved_bytes"] <= 2 * MIB
    manager.trim()
    assert manager.stats()["reserved_bytes"] == 0
    assert _calls(sim, "cuMemPoolTrimTo") == 2
    # Threshold 0 (the driver's default): a synchronize releases it all.
    manager.set_release_threshold(0)
    assert manager.stats()["release_threshold"] == 0
    arr = cudamem.device_array(MIB, np.uint8)
    del arr
    cudamem.synchronize()
    assert manager.stats()["reserved_bytes"] == 0


SYNCS = ("cuCtxSynchronize", "cuEventSynchronize")


def test_an_idle_synchronize_releases_the_pool_once_after_frees(manager,
                                                                sim):
    # synchronize() on an idle context probes it; after cudamem freed into
    # the pool, the probe ends with the one call a GPU's pool gives memory
    # back at (cuCtxSynchronize, which returns at once): numba's
    # synchronize() is that call. Not before a free, nor twice after one.
    manager.set_release_threshold(0)
    cudamem.synchronize()
    sim.reset()
    cudamem.synchronize()
    assert [_calls(sim, e) for e in SYNCS] == [0, 0]
    stream = cudamem.stream(non_blocking=True)
    arr = cudamem.device_array(MIB, np.uint8, stream=stream)
    del arr
    stream.query()
    assert manager.stats()["reserved_bytes"] >= MIB
    cudamem.synchronize()
    assert manager.stats()["reserved_bytes"] == 0
    cudamem.synchronize()
    assert [_calls(sim, e) for e in SYNCS] == [1, 0]


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), ("1", TypeError),
                                      (True, TypeError), (1.5, TypeError)])
def test_bad_byte_counts_are_refused(manager, bad, exc):
    with pytest.raises(exc, match="nbytes"):
        manager.set_release_threshold(bad)
    with pytest.raises(exc, match="min_bytes_to_keep"):
        manager.trim(bad)
    with pytest.raises(exc, match="nbytes"):
        manager.set_limit(bad)
    assert manager.stats()["limit"] is None


def test_the_limit_refuses_without_the_driver(manager, sim):
    cap = 2 * MIB + MIB // 2
    manager.set_limit(cap)
    stats = manager.stats()
    assert stats["limit"] == cap and stats["held_bytes"] == 0
    sim.reset()
    arrays = [cudamem.device_array(MIB, np.uint8) for _ in range(2)]
    # cudamem's count agrees with the simulated pool's
    # CU_MEMPOOL_ATTR_USED_MEM_CURRENT.
    stats = manager.stats()
    assert stats["held_bytes"] == 2 * MIB == stats["used_bytes"]
    assert _calls(sim, "cuMemAllocAsync") == 2
    sim.reset()
    with pytest.raises(CudaOutOfMemoryError) as info:
        cudamem.device_array(MIB, np.uint8)
    exc = info.value
    assert exc.call is None and exc.limit == cap
    assert exc.pool_used == 2 * MIB and exc.requested == MIB
    assert "limit of %d bytes" % cap in str(exc)
    # Recovery trimmed the pool; the driver was not asked for memory.
    assert _calls(sim, "cuMemAllocAsync") == 0
    assert _calls(sim, "cuMemPoolTrimTo") == 1
    assert manager.stats()["held_bytes"] == 2 * MIB
    # What is given back makes room; a smaller request fits beside.
    small = cudamem.device_array(MIB // 2, np.uint8)
    del arrays[0]
    arrays.append(cudamem.device_array(MIB, np.uint8))
    assert manager.stats()["held_bytes"] == cap
    manager.set_limit(None)
    assert manager.stats()["limit"] is None
    arrays.append(cudamem.device_array(MIB, np.uint8))
    assert manager.stats()["held_bytes"] == cap + MIB
    del arrays, small
    assert manager.stats()["held_bytes"] == 0


def test_a_cap_of_zero_refuses_all_but_empty_arrays(manager, sim):
    manager.set_limit(0)
    empty = cudamem.device_array(0)
    assert empty.size == 0
    with pytest.raises(CudaOutOfMemoryError, match="limit of 0 bytes"):
        cudamem.device_array(1, np.uint8)


def test_threads_racing_at_the_limit_pass_it_together_never(manager, sim):
    manager.set_limit(4 * MIB)
    workers = 12
    barrier = threading.Barrier(workers)
    made, refused, other = [], [], []

    def allocate():
        barrier.wait()
        try:
            made.append(cudamem.device_array(MIB, np.uint8))
        except CudaOutOfMemoryError as exc:
            refused.append(exc.limit)
        except BaseException as exc:  # reported below
            other.append(exc)

    threads = [threading.Thread(target=allocate) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert other == []
    # Nothing is freed during the race: exactly the cap's worth is made.
    assert len(made) == 4 and refused == [4 * MIB] * (workers - 4)
    assert manager.stats()["held_bytes"] == 4 * MIB
    assert manager.stats()["used_bytes"] == 4 * MIB
    made.clear()
    assert manager.stats()["held_bytes"] == 0


def test_the_limit_counts_only_this_managers_arrays(sim):
    plain = cudamem.device_array(MIB, np.uint8)
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
        try:
            m.set_limit(MIB)
            # The default manager's megabyte is not the pool's.
            arr = cudamem.device_array(MIB, np.uint8)
            assert m.stats()["held_bytes"] == MIB
            del arr
        finally:
            m.set_limit(None)
            m.trim()
    del plain


def test_memory_stats_and_the_memory_limit_count_it(manager, sim):
    before = cudamem.memory_stats()["device_bytes_in_use"]
    arr = cudamem.device_array(MIB, np.uint8)
    assert cudamem.memory_stats()["device_bytes_in_use"] == before + MIB
    cudamem.set_memory_limit(MIB + MIB // 2)
    try:
        sim.reset()
        with pytest.raises(CudaOutOfMemoryError, match="memory limit"):
            cudamem.device_array(MIB, np.uint8)
        # Refused without asking the driver.
        assert _calls(sim, "cuMemAllocAsync") == 0
        del arr
        fits = cudamem.device_array(MIB, np.uint8)
        del fits
    finally:
        cudamem.set_memory_limit(None)
    assert cudamem.memory_stats()["device_bytes_in_use"] == before


def test_out_of_memory_trims_the_pool_and_retries(manager, sim):
    sim.reset()
    sim.inject("cuMemAllocAsync", "CUDA_ERROR_OUT_OF_MEMORY")
    arr = cudamem.to_device(np.arange(10))
    assert _calls(sim, "cuMemPoolTrimTo") == 1
    assert _calls(sim, "cuMemAllocAsync") == 2
    np.testing.assert_array_equal(arr.copy_to_host(), np.arange(10))


def _gil_calls(sim, name):
    return sim.stats()["calls"][name]["gil"]


def test_a_stream_ordered_allocation_keeps_the_gil(sim):
    cudamem.device_array(8)
    with sim.probe_gil():
        sim.reset()
        # cuMemAlloc can wait for the device: made without the GIL.
        cudamem.device_array(8)
        assert _calls(sim, "cuMemAlloc") == 1
        assert _gil_calls(sim, "cuMemAlloc") == 0
        with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
            sim.reset()
            # cuMemAllocAsync returns at once, as cuMemFreeAsync does:
            # releasing the GIL would cost as much as the rest of the call.
            arrays = [cudamem.device_array(8) for _ in range(3)]
            assert _calls(sim, "cuMemAllocAsync") == 3
            assert _gil_calls(sim, "cuMemAllocAsync") == 3
            del arrays
            # Out of memory, the recovery can wait for the device: the
            # second try and the trim are made without it, and the first
            # try is not repeated.
            sim.reset()
            sim.inject("cuMemAllocAsync", "CUDA_ERROR_OUT_OF_MEMORY")
            arr = cudamem.to_device(np.arange(10))
            assert _calls(sim, "cuMemAllocAsync") == 2
            assert _gil_calls(sim, "cuMemAllocAsync") == 1
            assert _calls(sim, "cuMemPoolTrimTo") == 1
            assert _gil_calls(sim, "cuMemPoolTrimTo") == 0
            np.testing.assert_array_equal(arr.copy_to_host(), np.arange(10))
            del arr
            # A failure that recovery cannot help is raised from the first
            # try, with nothing left allocated.
            sim.reset()
            before = sim.live()
            sim.inject("cuMemAllocAsync", "CUDA_ERROR_INVALID_VALUE")
            with pytest.raises(CudaAPIError, match="cuMemAllocAsync"):
                cudamem.device_array(8)
            assert _calls(sim, "cuMemAllocAsync") == 1
            assert sim.live() == before
            m.trim()


def test_ipc_is_refused_with_the_reason(manager):
    arr = cudamem.device_array(4)
    with pytest.raises(NotImplementedError, match="not exportable"):
        arr.get_ipc_handle()
    with pytest.raises(NotImplementedError, match="not exportable"):
        cudamem.current_context().get_ipc_handle(arr.gpu_data)


def test_reset_frees_pending_and_trims(manager):
    manager.set_release_threshold(None)
    arr = cudamem.device_array(MIB, np.uint8)
    del arr
    cudamem.synchronize()
    assert manager.stats()["reserved_bytes"] >= MIB
    manager.reset()
    assert manager.stats()["reserved_bytes"] == 0
    # Context.reset() trims it too, as it trims cudamem's pool.
    arr = cudamem.device_array(MIB, np.uint8)
    del arr
    cudamem.synchronize()
    assert manager.stats()["reserved_bytes"] >= MIB
    cudamem.current_context().reset()
    assert manager.stats()["reserved_bytes"] == 0
    manager.set_release_threshold(0)


def test_arrays_alive_across_a_device_reset(sim):
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager):
        arr = cudamem.device_array(MIB, np.uint8)
        cudamem.get_current_device().reset()
        # The memory went with the context: its free asks nothing.
        sim.reset()
        del arr
        assert _calls(sim, "cuMemFreeAsync") == 0


@pytest.mark.parametrize("how", ["environment", "set_memory_manager"])
def test_selecting_it_for_every_context(run_py, how):
    setup = ("cudamem.set_memory_manager(cudamem.AsyncMemoryManager)"
             if how == "set_memory_manager" else "")
    env = {"CUDAMEM_MEMORY_MANAGER": "async"} if how == "environment" else {}
    proc = run_py("""
        import numpy as np
        import cudamem
        from cudamem import simulator as sim
        %s
        arrays = [cudamem.to_device(np.arange(10) + i) for i in range(5)]
        print(type(cudamem.current_context().memory_manager).__name__)
        calls = sim.stats()["calls"]
        print(calls["cuMemAllocAsync"]["calls"], calls["cuMemAlloc"]["calls"])
        print(all((a.copy_to_host() == np.arange(10) + i).all()
                  for i, a in enumerate(arrays)))
        del arrays
        cudamem.current_context().memory_manager.trim()
        print(sim.live()["device_allocations"])
    """ % setup, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:4] == ["AsyncMemoryManager", "5 0",
                                           "True", "0"]


def test_a_device_without_pools_refuses_it(run_py):
    # CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED (115) overridden to 0.
    proc = run_py("""
        import cudamem
        from cudamem.errors import CudaSupportError
        try:
            with cudamem.using_memory_manager(cudamem.AsyncMemoryManager):
                pass
        except CudaSupportError as exc:
            print(exc)
        print(type(cudamem.current_context().memory_manager).__name__)
        cudamem.device_array(4)
    """, env={"CUDAMEM_SIM_ATTRS": "115=0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == [
        "device 0 does not support stream-ordered memory pools "
        "(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0)",
        "DefaultMemoryManager"]


def test_a_failed_support_query_raises_and_keeps_the_manager(sim):
    previous = cudamem.current_context().memory_manager
    sim.inject("cuDeviceGetAttribute", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        with cudamem.using_memory_manager(cudamem.AsyncMemoryManager):
            pass
    assert info.value.call == "cuDeviceGetAttribute"
    assert cudamem.current_context().memory_manager is previous


def test_a_failed_order_of_a_free_raises(manager, sim):
    own, busy = cudamem.stream(), cudamem.stream()
    arr = cudamem.device_array(MIB, np.uint8, stream=own)
    arr.copy_to_device(np.ones(MIB, np.uint8), stream=busy)
    sim.reset()
    sim.inject("cuStreamWaitEvent", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        arr.gpu_data.free()
    assert info.value.call == "cuStreamWaitEvent"
    # Not freed while the other stream may use it: the context keeps it.
    assert _calls(sim, "cuMemFreeAsync") == 0
    del arr
    busy.synchronize()
    cudamem.get_current_device().reset()


def test_a_poisoned_device_refuses_the_pool_calls(sim):
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
        arr = cudamem.device_array(4)
        sim.inject("cuMemPoolTrimTo", "CUDA_ERROR_ILLEGAL_ADDRESS")
        with pytest.raises(CudaStickyError):
            m.trim()
        # Its free fails with the sticky error, quietly, as every free in
        # a poisoned context: the memory goes with the context.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del arr
        assert caught == []
        before = _calls(sim, "cuDeviceGetMemPool")
        # Each fails fast, without the driver.
        for call in (m.trim, m.stats, lambda: m.set_release_threshold(0)):
            with pytest.raises(CudaStickyError):
                call()
        assert _calls(sim, "cuDeviceGetMemPool") == before
    # The driver keeps the error until the process ends; the simulator's
    # reset models a new one, after which a device reset gives a context.
    with pytest.raises(CudaStickyError):
        cudamem.get_current_device().reset()
    sim.reset()
    cudamem.get_current_device().reset()
    assert not cudamem.context_is_poisoned(0)


def test_a_plugin_over_the_stream_ordered_manager_is_asked(manager, sim):
    # Allocations under a manager cudamem allocates for skip the plugin
    # lookup; a plugin installed over it is asked from the next
    # allocation on, and the manager back after it is used again.
    h = np.arange(16, dtype=np.float32)
    a = cudamem.to_device(h)
    with cudamem.using_memory_manager(CountingManager) as plugin:
        b = cudamem.to_device(h)
        assert plugin.sizes == [64]
    sim.reset()
    c = cudamem.to_device(h)
    assert (plugin.sizes, _calls(sim, "cuMemAllocAsync")) == ([64], 1)
    ctx = cudamem.current_context()
    assigned = ctx.memory_manager = CountingManager(ctx)
    d = cudamem.to_device(h)
    assert assigned.sizes == [64]
    ctx.memory_manager = manager
    e = cudamem.to_device(h)
    # Assigned over the stream-ordered manager, the plugin switched it
    # off: its memory came from cuMemAlloc, e's from the pool again.
    assert (assigned.sizes, _calls(sim, "cuMemAllocAsync"),
            _calls(sim, "cuMemAlloc")) == ([64], 2, 1)
    for arr in (a, b, c, d, e):
        np.testing.assert_array_equal(arr.copy_to_host(), h)
    del a, b, c, d, e
