"""PoolMemoryManager: the pool (tests/test_pool.py tests its C core) as a
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


@pytest.mark.parametrize("how", ["set_memory_manager", "environment"])
def test_selecting_the_pool_for_every_context(run_py, how):
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
        # A new context (after close) gets a pool again.
        cudamem.close()
        a = cudamem.device_array(100)
        print(type(cudamem.current_context().memory_manager).__name__,
              cudamem.current_context().memory_manager.stats()["used_blocks"])
    """ % setup, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["PoolMemoryManager", "1", "0",
                                   "PoolMemoryManager", "1"]
