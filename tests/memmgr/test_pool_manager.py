"""PoolMemoryManager: the pool (test_pool.py tests its C core) as a
context's EMM memory manager, selected the three ways numba users select
a manager. The simulator's call counters show where memory came from."""
import numpy as np
import pytest

import cudamem

pytestmark = pytest.mark.simulator


def allocs(sim):
    return sim.stats()["calls"]["cuMemAlloc"]["calls"]


def test_using_the_pool_for_a_block(sim):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as pool:
        assert cudamem.current_context().memory_manager is pool
        before = allocs(sim)
        arrays = [cudamem.to_device(np.full(100, i)) for i in range(50)]
        # Fifty small arrays share one slab.
        assert allocs(sim) == before + 1
        for i, a in enumerate(arrays):
            np.testing.assert_array_equal(a.copy_to_host(), i)
        stats = pool.stats()
        assert stats["enabled"] and stats["used_blocks"] == 50
        del arrays, a
        assert pool.stats()["used_blocks"] == 0
        pool.trim()
        assert pool.stats()["slab_bytes"] == 0
    # The previous manager is back: no pool.
    manager = cudamem.current_context().memory_manager
    assert type(manager) is cudamem.memory.DefaultMemoryManager
    before = allocs(sim)
    cudamem.device_array(10)
    assert allocs(sim) == before + 1
    assert not cudamem.PoolMemoryManager(
        cudamem.current_context()).stats()["enabled"]


def test_arrays_outlive_the_block(sim):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as pool:
        kept = cudamem.to_device(np.arange(1000.0))
    np.testing.assert_array_equal(kept.copy_to_host(), np.arange(1000.0))
    del kept
    pool.trim()
    assert pool.stats()["slab_bytes"] == 0


def test_limit_trim_and_reset(sim):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as pool:
        pool.set_limit(4 << 20)
        a = cudamem.device_array(3 << 20, np.uint8)
        with pytest.raises(cudamem.CudaOutOfMemoryError):
            cudamem.device_array(3 << 20, np.uint8)
        del a
        b = cudamem.device_array(3 << 20, np.uint8)
        assert pool.stats()["limit"] == 4 << 20
        del b
        pool.reset()
        assert pool.stats()["slab_bytes"] == 0
        pool.set_limit(None)


@pytest.mark.parametrize("end", ["close", "reset"])
@pytest.mark.parametrize("how", ["set_memory_manager", "environment"])
def test_selecting_the_pool_for_every_context(run_py, how, end):
    setup = ("cudamem.set_memory_manager(cudamem.PoolMemoryManager)"
             if how == "set_memory_manager" else "")
    env = {"CUDAMEM_MEMORY_MANAGER": "pool"} if how == "environment" else {}
    proc = run_py("""
        import numpy as np
        import cudamem
        from cudamem import simulator as sim
        %s
        before = sim.stats()["calls"]["cuMemAlloc"]["calls"]
        arrays = [cudamem.device_array(100) for _ in range(20)]
        print(type(cudamem.current_context().memory_manager).__name__)
        print(sim.stats()["calls"]["cuMemAlloc"]["calls"] - before)
        del arrays
        cudamem.current_context().memory_manager.trim()
        print(sim.live()["device_allocations"])
        # A new context (after close or reset) gets a pool again.
        %s
        a = cudamem.device_array(100)
        print(type(cudamem.current_context().memory_manager).__name__,
              cudamem.current_context().memory_manager.stats()["used_blocks"])
    """ % (setup, "cudamem.close()" if end == "close"
           else "cudamem.get_current_device().reset()"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["PoolMemoryManager", "1", "0",
                                   "PoolMemoryManager", "1"]


# --- resets inside a block ----------------------------------------------

DELAY_US = 3000


def _pool_arrays(n, stream):
    """n small arrays with queued copies of i on `stream`, and their
    NumPy references."""
    refs = [np.full(100, i, np.float64) for i in range(n)]
    return [cudamem.to_device(r, stream=stream) for r in refs], refs


def test_device_reset_keeps_the_pool(sim, hazards):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as pool:
        pool.set_limit(4 << 20)
        before = cudamem.to_device(np.arange(10.0))
        cudamem.get_current_device().reset()
        # The pool's cached blocks went with the context; not its limit.
        stats = pool.stats()
        assert (stats["slab_bytes"], stats["limit"]) == (0, 4 << 20)
        stream = cudamem.stream()
        with sim.delay(DELAY_US):
            start = allocs(sim)
            arrays, refs = _pool_arrays(20, stream)
            # Twenty small arrays share one slab: the pool's.
            assert allocs(sim) == start + 1
            assert pool.stats()["used_blocks"] == 20
            manager = cudamem.current_context().memory_manager
            assert type(manager) is cudamem.PoolMemoryManager
            for a, r in zip(arrays, refs):
                np.testing.assert_array_equal(a.copy_to_host(stream=stream),
                                              r)
            stream.synchronize()
        # The limit still refuses, naming itself.
        with pytest.raises(cudamem.CudaOutOfMemoryError) as info:
            cudamem.device_array(5 << 20, np.uint8)
        assert (info.value.call, info.value.limit) == (None, 4 << 20)
        del arrays, a, before
        pool.set_limit(None)
    # The manager the context would have had without the block is back.
    manager = cudamem.current_context().memory_manager
    assert type(manager) is cudamem.memory.DefaultMemoryManager
    assert not pool.stats()["enabled"]
    start = allocs(sim)
    plain = cudamem.device_array(10)
    assert allocs(sim) == start + 1
    del plain
    pool.trim()
    assert pool.stats()["slab_bytes"] == 0


def test_reset_with_no_allocation_after_it_restores_the_manager(sim):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as pool:
        cudamem.get_current_device().reset()
    assert not pool.stats()["enabled"]
    manager = cudamem.current_context().memory_manager
    assert type(manager) is cudamem.memory.DefaultMemoryManager
    start = allocs(sim)
    plain = cudamem.device_array(10)
    assert allocs(sim) == start + 1
    del plain


def test_inner_block_reset_gives_the_outer_pool_back(sim):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as pool:
        with cudamem.using_memory_manager(
                cudamem.memory.DefaultMemoryManager):
            cudamem.get_current_device().reset()
            start = allocs(sim)
            plain = [cudamem.device_array(10) for _ in range(2)]
            assert allocs(sim) == start + 2
            assert not pool.stats()["enabled"]
        manager = cudamem.current_context().memory_manager
        assert type(manager) is cudamem.PoolMemoryManager
        start = allocs(sim)
        pooled = [cudamem.to_device(np.full(10, i)) for i in range(3)]
        assert allocs(sim) == start + 1
        for i, a in enumerate(pooled):
            np.testing.assert_array_equal(a.copy_to_host(), np.full(10, i))
        del pooled, plain, a
        pool.trim()
    assert pool.stats()["slab_bytes"] == 0


def test_context_reset_keeps_the_manager_and_trims(sim, hazards):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as pool:
        stream = cudamem.stream()
        with sim.delay(DELAY_US):
            kept, refs = _pool_arrays(3, stream)
            dropped = cudamem.device_array(3 << 20, np.uint8, stream=stream)
            del dropped
            ctx = cudamem.current_context()
            ctx.reset()
        # numba's Context.reset(): the manager object stays; its reset()
        # (the pool's trim) freed the free slab; live blocks stay.
        assert ctx.memory_manager is pool
        stats = pool.stats()
        assert stats["enabled"] and stats["slabs"] == 1
        assert stats["used_blocks"] == 3
        for a, r in zip(kept, refs):
            np.testing.assert_array_equal(a.copy_to_host(), r)
        del kept, a
        pool.trim()
