"""numba's deferred deallocation, observed through the simulator's live
counts: the count and byte thresholds (strict), defer_cleanup() nesting and
exceptions, Context.reset(), failed frees (DESIGN rule 5), queues dropped
by close() and Device.reset(), and the flush at interpreter exit."""
import gc

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaDriverError, CudaWarning
from tests.helpers.devmem import device_memory

pytestmark = pytest.mark.simulator


def _deallocs():
    return cudamem.current_context().memory_manager.deallocations


def _live(sim):
    return sim.live()["device_allocations"]


def test_count_threshold(sim):
    # numba's test_max_pending_count, with the default count of 10.
    deallocs = _deallocs()
    deallocs.clear()
    assert len(deallocs) == 0
    base = _live(sim)
    for i in range(10):
        cudamem.to_device(np.arange(1))
        assert len(deallocs) == i + 1
        assert _live(sim) == base + i + 1
    cudamem.to_device(np.arange(1))
    assert len(deallocs) == 0
    assert _live(sim) == base


def test_byte_threshold_is_strict(run_py):
    # numba's test_max_pending_bytes: equality does not flush.
    proc = run_py("""
        import numpy as np, cudamem
        from cudamem import simulator
        total = cudamem.current_context().get_memory_info().total
        limit = int(total * 0.001)
        deallocs = cudamem.current_context().memory_manager.deallocations
        cudamem.to_device(np.ones(limit // 2, np.int8))
        assert len(deallocs) == 1, len(deallocs)
        cudamem.to_device(np.ones(limit - deallocs.nbytes, np.int8))
        assert len(deallocs) == 2 and deallocs.nbytes == limit
        assert simulator.live()["device_allocations"] == 2
        cudamem.to_device(np.ones(1, np.int8))
        assert len(deallocs) == 0
        print(simulator.live()["device_allocations"])
    """, env={"CUDAMEM_MAX_PENDING_DEALLOCS_RATIO": "0.001",
              "CUDAMEM_SIM_MEMORY": str(1 << 28)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


def _pending_after_free(nbytes):
    cudamem.device_array(nbytes, np.uint8)
    return _deallocs().nbytes


def test_byte_threshold_follows_each_context(sim):
    # numba sizes a context's queue (a share of its device's memory) when
    # the context is made: a context made after the device's memory
    # changed uses the new size, though the queue outlived the old one.
    mib = 1 << 20
    _pending_after_free(1)
    assert _pending_after_free(2 * mib) >= 2 * mib  # 20% of 1 GiB
    with device_memory(sim, 8 * mib):
        assert _pending_after_free(2 * mib) == 0  # over 20% of 8 MiB
        assert _pending_after_free(mib) == mib
    # The block's end closed that context, with what it queued.
    assert _pending_after_free(2 * mib) == 2 * mib


def test_a_failed_resizing_keeps_the_old_threshold(sim):
    # Sizing again is best effort: the free that asks is queued under the
    # old limit, and the next one sizes the queue.
    mib = 1 << 20
    _pending_after_free(1)
    with device_memory(sim, 8 * mib):
        sim.inject("cuDeviceTotalMem", "CUDA_ERROR_UNKNOWN")
        assert _pending_after_free(2 * mib) == 2 * mib
        assert _pending_after_free(2 * mib) == 0


def test_count_from_numba_variable(run_py):
    proc = run_py("""
        import numpy as np, cudamem
        deallocs = cudamem.current_context().memory_manager.deallocations
        for i in range(3):
            cudamem.to_device(np.arange(1))
        print(len(deallocs))
        cudamem.to_device(np.arange(1))
        print(len(deallocs))
    """, env={"NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT": "3",
              "CUDAMEM_MAX_PENDING_DEALLOCS_COUNT": None})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "0"]


@pytest.mark.parametrize("value", ["ten", "-1", "1.5", ""])
def test_malformed_threshold(run_py, value):
    proc = run_py("""
        import numpy as np, cudamem
        try:
            cudamem.to_device(np.arange(1))
        except ValueError as exc:
            print(exc)
    """, env={"CUDAMEM_MAX_PENDING_DEALLOCS_COUNT": value})
    assert proc.returncode == 0, proc.stderr
    assert "CUDAMEM_MAX_PENDING_DEALLOCS_COUNT" in proc.stdout
    assert repr(value) in proc.stdout or value in proc.stdout


def test_defer_cleanup(sim):
    # numba's test_defer_cleanup.
    harr = np.arange(5)
    darr1 = cudamem.to_device(harr)
    deallocs = _deallocs()
    deallocs.clear()
    assert len(deallocs) == 0
    base = _live(sim)
    with cudamem.defer_cleanup():
        darr2 = cudamem.to_device(harr)
        del darr1
        assert len(deallocs) == 1
        del darr2
        assert len(deallocs) == 2
        deallocs.clear()
        assert len(deallocs) == 2
        assert _live(sim) == base + 1
        assert deallocs.is_disabled
    assert not deallocs.is_disabled
    assert len(deallocs) == 2  # leaving does not flush
    deallocs.clear()
    assert len(deallocs) == 0
    assert _live(sim) == base - 1


def test_defer_cleanup_nested():
    harr = np.arange(5)
    darr1 = cudamem.to_device(harr)
    deallocs = _deallocs()
    deallocs.clear()
    with cudamem.defer_cleanup():
        with cudamem.defer_cleanup():
            darr2 = cudamem.to_device(harr)
            del darr1
            assert len(deallocs) == 1
            del darr2
            assert len(deallocs) == 2
            deallocs.clear()
            assert len(deallocs) == 2
        deallocs.clear()
        assert len(deallocs) == 2
    deallocs.clear()
    assert len(deallocs) == 0


def test_defer_cleanup_blocks_the_thresholds():
    deallocs = _deallocs()
    deallocs.clear()
    with cudamem.defer_cleanup():
        for _ in range(25):
            cudamem.to_device(np.arange(1))
        assert len(deallocs) == 25
    assert len(deallocs) == 25
    cudamem.to_device(np.arange(1))  # the next release flushes
    assert len(deallocs) == 0


def test_defer_cleanup_exception():
    # numba's test_exception.
    class CustomError(Exception):
        pass

    harr = np.arange(5)
    darr1 = cudamem.to_device(harr)
    deallocs = _deallocs()
    deallocs.clear()
    with pytest.raises(CustomError):
        with cudamem.defer_cleanup():
            darr2 = cudamem.to_device(harr)
            del darr1
            assert len(deallocs) == 1
            del darr2
            assert len(deallocs) == 2
            deallocs.clear()
            assert len(deallocs) == 2
            raise CustomError
    assert not deallocs.is_disabled
    deallocs.clear()
    assert len(deallocs) == 0


def test_disable_one_queue(sim):
    ctx = cudamem.current_context()
    mem, objs = ctx.memory_manager.deallocations, ctx.deallocations
    mem.clear()
    objs.clear()
    with objs.disable():
        s = cudamem.stream()
        del s
        cudamem.to_device(np.arange(2))
        assert len(objs) == 1 and len(mem) == 1
        objs.clear()
        mem.clear()
        assert len(objs) == 1 and len(mem) == 0
    objs.clear()
    assert len(objs) == 0
    with ctx.defer_cleanup():
        assert objs.is_disabled and mem.is_disabled
    assert not objs.is_disabled and not mem.is_disabled


def test_guard_dropped_inside_a_block():
    deallocs = _deallocs()

    def gen():
        with cudamem.defer_cleanup():
            yield

    g = gen()
    next(g)
    assert deallocs.is_disabled
    del g
    gc.collect()
    assert not deallocs.is_disabled


def test_context_reset_flushes(sim):
    ctx = cudamem.current_context()
    ctx.memory_manager.deallocations.clear()
    base = _live(sim)
    cudamem.to_device(np.arange(3))
    s = cudamem.stream()
    del s
    assert len(ctx.memory_manager.deallocations) == 1
    assert len(ctx.deallocations) == 1
    ctx.reset()
    assert len(ctx.memory_manager.deallocations) == 0
    assert len(ctx.deallocations) == 0
    assert _live(sim) == base
    assert sim.live()["streams"] == 0
    ctx.memory_manager.reset()  # numba's manager API: a flush too


@pytest.mark.parametrize("kill", ["close", "reset"])
def test_queued_frees_dropped_with_the_context(sim, kill):
    ctx = cudamem.current_context()
    ctx.memory_manager.deallocations.clear()
    sim.reset()
    for _ in range(3):
        cudamem.to_device(np.arange(4))
    assert len(ctx.memory_manager.deallocations) == 3
    if kill == "close":
        cudamem.close()
    else:
        cudamem.get_current_device().reset()
    assert sim.live()["device_allocations"] == 0
    # The old Context and its queues are stale; the new one starts empty.
    with pytest.raises(CudaDriverError, match="reset or closed"):
        len(ctx.memory_manager.deallocations)
    fresh = cudamem.current_context()
    assert len(fresh.memory_manager.deallocations) == 0
    assert sim.stats()["calls"]["cuMemFree"]["calls"] == 0


def test_failed_free_raised_from_clear_keeps_the_rest(sim):
    deallocs = _deallocs()
    deallocs.clear()
    base = _live(sim)
    for _ in range(4):
        cudamem.to_device(np.arange(2))
    assert len(deallocs) == 4
    sim.inject("cuMemFree", "CUDA_ERROR_INVALID_VALUE", after=1)
    with pytest.raises(CudaAPIError) as info:
        deallocs.clear()
    assert info.value.call == "cuMemFree"
    # One freed, one failed (dropped: never freed twice), two still queued.
    assert len(deallocs) == 2
    assert _live(sim) == base + 3
    deallocs.clear()
    assert len(deallocs) == 0
    assert _live(sim) == base + 1
    # Only a reset reclaims what a failed free left behind.
    cudamem.get_current_device().reset()


def test_failed_free_in_a_finalizer_warns(sim):
    deallocs = _deallocs()
    deallocs.clear()
    with cudamem.defer_cleanup():
        for _ in range(10):
            cudamem.to_device(np.arange(2))
    sim.inject("cuMemFree", "CUDA_ERROR_INVALID_VALUE")
    with pytest.warns(CudaWarning, match="cuMemFree"):
        cudamem.to_device(np.arange(2))  # its release flushes
    assert len(deallocs) == 10
    deallocs.clear()
    cudamem.get_current_device().reset()


def test_out_of_memory_flushes_and_retries(sim, run_py):
    proc = run_py("""
        import numpy as np, cudamem
        from cudamem import simulator
        from cudamem.errors import CudaOutOfMemoryError
        deallocs = cudamem.current_context().memory_manager.deallocations
        keep = [cudamem.device_array(1 << 20, np.uint8) for _ in range(3)]
        with cudamem.defer_cleanup():
            keep.pop()
            keep.pop()
            try:
                cudamem.device_array(2 << 20, np.uint8)
            except CudaOutOfMemoryError:
                print("deferred: out of memory")
        assert len(deallocs) == 2
        big = cudamem.device_array(2 << 20, np.uint8)
        print("retried:", len(deallocs),
              simulator.live()["device_allocations"])
    """, env={"CUDAMEM_SIM_MEMORY": str(3 << 20),
              "CUDAMEM_MAX_PENDING_DEALLOCS_RATIO": "0.9"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["deferred: out of memory",
                                        "retried: 0 2"]


def test_shutdown_flushes_once(run_py):
    proc = run_py("""
        import atexit
        def report():
            from cudamem import simulator
            print(simulator.live()["device_allocations"],
                  simulator.live()["streams"])
        atexit.register(report)  # runs after cudamem's own exit hook
        import numpy as np, cudamem
        arrays = [cudamem.to_device(np.arange(3)) for _ in range(3)]
        del arrays
        s = cudamem.stream()
        del s
        cudamem.defer_cleanup().__enter__()  # left open at exit
        for _ in range(3):
            cudamem.to_device(np.arange(3))
        kept = cudamem.to_device(np.arange(3))  # freed after the flush
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.split() == ["1", "0"]


def test_failed_free_at_shutdown_goes_to_stderr(run_py):
    proc = run_py("""
        import numpy as np, cudamem
        from cudamem import simulator
        cudamem.to_device(np.arange(3))
        simulator.inject("cuMemFree", "CUDA_ERROR_INVALID_VALUE")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "cuMemFree" in proc.stderr and "at exit" in proc.stderr


def test_stale_context_deallocations():
    ctx = cudamem.current_context()
    objs = ctx.deallocations
    cudamem.close()
    with pytest.raises(CudaDriverError):
        objs.clear()
    with pytest.raises(CudaDriverError):
        ctx.defer_cleanup()
    assert "deallocations" in repr(cudamem.current_context().deallocations)
