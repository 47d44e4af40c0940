"""Contexts: primary contexts as numba's Context, the current-context rules
(DESIGN rule 6), generations after reset/close (rule 4), threads.

References: the simulator's own driver API through ctypes (simref), which
shares the per-thread context stack with cudamem, and numba's documented
behaviour. Tests that change a context stack run in a fresh thread.
"""
import re
import threading

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaDriverError
from tests.helpers.run import in_thread
from tests.helpers.simref import SimDriver

pytestmark = pytest.mark.simulator

STALE = "context was reset or closed"


@pytest.fixture
def ref(sim):
    cudamem.is_available()
    return SimDriver(sim.library_path())


def test_current_context_is_the_primary_context(ref):
    ctx = cudamem.current_context()
    assert isinstance(ctx, cudamem.Context)
    assert ctx.device == cudamem.get_current_device()
    primary = ref.retain_primary(0)
    ref.release_primary(0)
    assert ctx.handle == primary
    assert ref.current() == primary
    assert cudamem.current_context() is ctx
    assert ctx == cudamem.list_devices()[0].get_primary_context()
    assert hash(ctx) == hash(cudamem.current_context(0))
    assert ctx != 0
    assert re.fullmatch(r"<CUDA context 0x[0-9a-f]+ of device 0>", repr(ctx))
    assert int(repr(ctx).split()[2], 16) == ctx.handle


def test_get_memory_info_matches_the_driver(ref):
    ctx = cudamem.current_context()
    info = ctx.get_memory_info()
    assert isinstance(info, cudamem.MemoryInfo)
    assert info == ref.mem_info()
    assert info.total == ref.total_mem(0)
    ptr = ref.mem_alloc(1 << 20)
    try:
        after = ctx.get_memory_info()
        assert after == ref.mem_info()
        assert after.free == info.free - (1 << 20)
    finally:
        ref.mem_free(ptr)
    assert ctx.get_memory_info() == info


def test_thread_without_context_gets_device_0(ref):
    def body():
        assert ref.current() is None
        dev = cudamem.get_current_device()
        assert dev.id == 0
        # numba leaves the context current
        assert ref.current() == dev.get_primary_context().handle
        return dev

    assert in_thread(body) == cudamem.list_devices()[0]


def test_operations_leave_no_context_behind(ref):
    ctx = cudamem.current_context()

    def body():
        assert ref.current() is None
        ctx.get_memory_info()
        ctx.synchronize()
        assert ref.current() is None
        return ctx.get_memory_info()

    assert in_thread(body) == ctx.get_memory_info()


def test_context_used_in_another_thread(ref):
    ctx = cudamem.current_context()
    assert in_thread(lambda: ctx.get_memory_info()) == ref.mem_info()
    made = in_thread(cudamem.current_context)
    assert made is ctx
    made.synchronize()


def test_push_and_pop(ref):
    ctx = cudamem.current_context()

    def body():
        ctx.push()
        assert ref.current() == ctx.handle
        ctx.push()
        ctx.pop()
        assert ref.current() == ctx.handle
        ctx.pop()
        assert ref.current() is None
        with pytest.raises(CudaDriverError, match="not the current context"):
            ctx.pop()

    in_thread(body)


def test_pop_must_be_the_top(ref):
    ctx = cudamem.current_context()

    def body():
        ctx.push()
        other = ref.create_context(0)
        try:
            with pytest.raises(CudaDriverError) as info:
                ctx.pop()
            assert "not the current context" in str(info.value)
            assert ref.current() == other  # nothing was popped
        finally:
            ref.destroy_context(other)
        ctx.pop()
        assert ref.current() is None

    in_thread(body)


def test_foreign_primary_context_is_used(ref):
    def body():
        handle = ref.retain_primary(0)
        ref.set_current(handle)
        try:
            assert cudamem.get_current_device().id == 0
            assert cudamem.current_context().handle == handle
            cudamem.synchronize()
            assert ref.current() == handle
        finally:
            ref.pop()
            ref.release_primary(0)

    in_thread(body)


def test_non_primary_context_is_refused(ref):
    def body():
        handle = ref.create_context(0)
        text = "cudamem cannot operate on non-primary CUDA context %#x" % (
            handle)
        try:
            for call in (cudamem.get_current_device, cudamem.current_context,
                         cudamem.synchronize, cudamem.profile_start,
                         cudamem.require_context(lambda: None)):
                with pytest.raises(CudaDriverError) as info:
                    call()
                assert str(info.value) == text
            # gpus.current names the device whatever the context's kind.
            assert cudamem.gpus.current.id == 0
        finally:
            ref.destroy_context(handle)
        assert ref.current() is None

    in_thread(body)


def test_require_context(ref):
    @cudamem.require_context
    def inside(x):
        """doc"""
        return ref.current(), x

    def body():
        assert ref.current() is None
        current, x = inside(7)
        assert current == cudamem.list_devices()[0].get_primary_context(
        ).handle and x == 7

    in_thread(body)
    assert inside.__doc__ == "doc" and inside.__name__ == "inside"


def test_synchronize_and_context_reset(ref):
    ctx = cudamem.current_context()
    cudamem.synchronize()
    ctx.synchronize()
    ctx.reset()  # cleans up; the context stays usable
    assert ctx.get_memory_info() == ref.mem_info()
    assert cudamem.current_context() is ctx


def test_device_reset_makes_contexts_stale(ref, sim):
    ctx = cudamem.current_context()
    dev = ctx.device
    ptr = ref.mem_alloc(4096)
    assert sim.live()["device_allocations"] >= 1
    dev.reset()
    # The context and everything in it is gone (the driver's reset).
    assert sim.live()["device_allocations"] == 0
    assert not ref.primary_active(0)
    del ptr
    mm = ctx.memory_manager
    for call in (ctx.get_memory_info, ctx.synchronize, ctx.push, ctx.pop,
                 ctx.reset, lambda: ctx.can_access_peer(0),
                 lambda: ctx.enable_peer_access(0),
                 # Its memory manager allocates in the context it names.
                 lambda: mm.memalloc(64), lambda: mm.memhostalloc(64),
                 lambda: mm.memallocmanaged(64)):
        with pytest.raises(CudaDriverError, match=STALE):
            call()
    fresh = cudamem.current_context()
    assert fresh is not ctx
    assert ref.primary_active(0)
    assert fresh.get_memory_info() == ref.mem_info()
    # A stale peer is refused too.
    with pytest.raises(CudaDriverError, match=STALE):
        fresh.enable_peer_access(ctx)


def test_release_primary_context_drops_cudamem_s_retain(ref, sim):
    # numba's Device.release_primary_context: cuDevicePrimaryCtxRelease;
    # with no other retainer the driver destroys the context.
    ctx = cudamem.current_context()
    d = cudamem.to_device(np.arange(4))
    s = cudamem.stream()
    assert ref.primary_active(0)
    ctx.device.release_primary_context()
    assert not ref.primary_active(0)
    assert sim.live()["device_allocations"] == 0
    for call in (ctx.synchronize, d.copy_to_host, s.synchronize):
        with pytest.raises(CudaDriverError, match="cannot be used"):
            call()
    del d, s
    fresh = cudamem.current_context()
    assert fresh is not ctx and ref.primary_active(0)
    np.testing.assert_array_equal(
        cudamem.to_device(np.arange(3)).copy_to_host(), np.arange(3))
    # Releasing a context cudamem does not hold is a no-op.
    fresh.device.release_primary_context()
    fresh.device.release_primary_context()
    assert not ref.primary_active(0)


def test_reset_inside_gpus_block(ref):
    def body():
        with cudamem.gpus[0]:
            cudamem.gpus[0].reset()
            assert cudamem.current_context().get_memory_info().total > 0
        assert ref.current() is None

    in_thread(body)


def test_close_then_reuse(ref, sim):
    ctx = cudamem.current_context()
    assert ref.primary_active(0)
    cudamem.close()
    # cudamem was the only one to retain it: the context is destroyed.
    assert not ref.primary_active(0)
    assert sim.live()["contexts"] == 0
    with pytest.raises(CudaDriverError, match=STALE):
        ctx.get_memory_info()
    cudamem.close()  # twice is fine
    fresh = cudamem.current_context()
    assert ref.primary_active(0)
    assert fresh.get_memory_info() == ref.mem_info()
    assert cudamem.get_current_device().id == 0


def test_close_in_a_thread_only_pops(ref):
    ctx = cudamem.current_context()

    def body():
        cudamem.select_device(0)
        assert ref.current() == ctx.handle
        cudamem.close()
        assert ref.current() is None

    in_thread(body)
    assert ref.primary_active(0)
    assert ctx.get_memory_info() == ref.mem_info()


def test_close_forgets_the_selection(run_py):
    proc = run_py("""
        import cudamem
        cudamem.select_device(1)
        cudamem.close()
        print(cudamem.get_current_device().id)
        cudamem.select_device(1)
        print(cudamem.get_current_device().id)
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "1"]


def test_many_threads(ref):
    ctx = cudamem.current_context()
    errors = []

    def body():
        try:
            for _ in range(50):
                assert cudamem.get_current_device().id == 0
                with cudamem.gpus[0]:
                    ctx.get_memory_info()
                cudamem.synchronize()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_driver_errors_name_the_call(sim):
    sim.inject("cuMemGetInfo", "CUDA_ERROR_INVALID_CONTEXT")
    with pytest.raises(CudaAPIError) as info:
        cudamem.current_context().get_memory_info()
    assert info.value.call == "cuMemGetInfo"
    assert info.value.name == "CUDA_ERROR_INVALID_CONTEXT"


def test_enter_restores_on_failure(ref, sim):
    ctx = cudamem.current_context()

    def body():
        sim.inject("cuMemGetInfo", "CUDA_ERROR_UNKNOWN")
        with pytest.raises(CudaAPIError):
            ctx.get_memory_info()
        assert ref.current() is None  # what enter pushed was popped

    in_thread(body)
