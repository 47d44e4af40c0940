"""Host memory outlives the queued copies that use it.

Every kind of page-locked host memory cudamem hands out or registers
(pinned, mapped, write-combined, pooled, the caller's memory registered) is
dropped while a copy queued on a stream still reads or writes it, with
every stream operation delayed so that the copy has not run yet. The CUDA
driver requires host memory used by an asynchronous copy to stay valid and
page-locked until the copy is done; the reference for the data is NumPy.
A release that did not wait would crash the process (the pages unmapped
under the simulator's stream worker) or, with the host pool, send the next
user's bytes to the device.
"""
import gc

import numpy as np
import pytest

import cudamem as cuda

pytestmark = pytest.mark.simulator

N = 1 << 16
DELAY_US = 20000


@pytest.fixture
def slow(sim):
    """Every stream operation delayed, and the hazard checker on."""
    sim.set_hazards(True)
    before = sim.hazard_count()
    with sim.delay(DELAY_US):
        yield sim
    assert sim.hazard_count() == before, sim.last_hazard()


def registered(sim):
    return sim.live()["registrations"]


def upload(x, stream):
    h = cuda.pinned_array_like(x)
    h[:] = x
    return cuda.to_device(h, stream=stream)  # h's last reference goes


def test_pinned_source_dropped_under_queued_upload(slow):
    x = np.arange(N, dtype=np.float64)
    s = cuda.stream()
    d = upload(x, s)
    # The registration waits for the copy, not for the last reference.
    assert registered(slow) >= 1
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), x)


def test_pinned_destination_dropped_under_queued_download(slow):
    x = np.arange(N, dtype=np.int32)
    d = cuda.to_device(x)
    s = cuda.stream()
    h = cuda.pinned_array(N, dtype=np.int32)
    d.copy_to_host(h, stream=s)
    before = registered(slow)
    del h
    gc.collect()
    assert registered(slow) == before
    s.synchronize()
    # A later release finds the copy done and lets the pages go.
    h2 = cuda.pinned_array(N, dtype=np.int32)
    d.copy_to_host(h2, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(h2, x)


def test_mapped_array_dropped_under_queued_copy(slow):
    x = np.linspace(0, 1, N)
    s = cuda.stream()
    m = cuda.mapped_array(N, dtype=np.float64)
    m[:] = x
    d = cuda.to_device(m, stream=s)
    del m
    gc.collect()
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), x)


def test_write_combined_dropped_and_flushed_under_queued_copy(slow):
    x = np.arange(N, dtype=np.float32)
    s = cuda.stream()
    m = cuda.mapped_array(N, dtype=np.float32, wc=True)
    m[:] = x
    d = cuda.to_device(m, stream=s)
    del m
    gc.collect()
    # The flush would free the write-combined pages the stream reads.
    cuda.current_context().deallocations.clear()
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), x)


def test_pinned_context_left_under_queued_copy(slow):
    x = np.arange(N, dtype=np.int64)
    expect = x.copy()
    s = cuda.stream()
    with cuda.pinned(x):
        d = cuda.to_device(x, stream=s)
    # Unregistered only once the copy has read the pages.
    assert registered(slow) >= 1
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), expect)


def test_deregister_under_queued_download(slow):
    x = np.arange(N, dtype=np.int16)
    d = cuda.to_device(x)
    out = np.zeros_like(x)
    s = cuda.stream()
    cuda.register(out)
    d.copy_to_host(out, stream=s)
    cuda.deregister(out)
    assert registered(slow) >= 1
    s.synchronize()
    np.testing.assert_array_equal(out, x)


def test_pooled_block_not_reused_under_queued_copy(slow):
    """The pooled block goes back to the host pool only once the stream
    has read it: the next pinned array must not share its bytes."""
    s = cuda.stream()
    with cuda.using_memory_manager(cuda.PoolMemoryManager) as pool:
        h = cuda.pinned_array(1)
        h[0] = 1.0
        d = cuda.device_array(1)
        d.copy_to_device(h, stream=s)
        del h
        gc.collect()
        h2 = cuda.pinned_array(1)
        h2[0] = 7.0
        s.synchronize()
        assert d.copy_to_host()[0] == 1.0
        assert h2[0] == 7.0
        del h2, d
        pool.trim()


def test_strided_copy_notes_the_host_extent(slow):
    x = np.arange(64 * 64, dtype=np.float64).reshape(64, 64)
    s = cuda.stream()
    h = cuda.pinned_array_like(x)
    h[:] = x
    d = cuda.device_array((64, 32))
    d.copy_to_device(h[:, ::2], stream=s)
    del h
    gc.collect()
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), x[:, ::2])


def test_release_of_idle_memory_is_immediate(sim):
    """Without queued work nothing waits: the pages go with the last
    reference, as before."""
    before = registered(sim)
    h = cuda.pinned_array(N)
    d = cuda.to_device(h)
    del h
    gc.collect()
    assert registered(sim) == before
    del d


def test_drain_waits_for_every_retiring_release(slow):
    s = cuda.stream()
    d = cuda.device_array(N)
    for _ in range(3):
        h = cuda.pinned_array(N)
        d.copy_to_host(h, stream=s)
        del h
    gc.collect()
    assert registered(slow) >= 3
    cuda.testing.quiesce()
    assert registered(slow) == 0


CROSS_DEVICE_EXPORT = """
import numpy as np, cudamem as cuda
from cudamem import simulator as sim
sim.set_hazards(True)
x = np.arange(1 << 16, dtype=np.float64)
with cuda.gpus[1]:
    d1 = cuda.to_device(x)
s0 = cuda.stream()
d0 = cuda.device_array_like(x, stream=s0)
with sim.delay(3000):
    d0.copy_to_device(d1, stream=s0)   # d1's memory read on device 0's s0
    cai = d1.__cuda_array_interface__  # orders device 1's export after s0
    assert cai["stream"] is None, cai
    del s0                             # retired: its handle may be reused
    d0.copy_to_device(d1, stream=cuda.stream())
    d1.__cuda_array_interface__
np.testing.assert_array_equal(d0.copy_to_host(), x)
np.testing.assert_array_equal(d1.copy_to_host(), x)
assert sim.hazard_count() == 0, sim.last_hazard()
print("ok")
"""


@pytest.mark.parametrize("peer", [True, False])
def test_cross_device_work_is_recorded_with_the_streams_device(peer):
    """Item 2: work a device-0 stream queued on device-1 memory is
    recorded with device 0's context and retirement count, so the export
    of the device-1 array orders after it instead of failing."""
    from tests.helpers.run import run_python
    proc = run_python(CROSS_DEVICE_EXPORT, env={
        "CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None,
        "CUDAMEM_SIM_NO_PEER": None if peer else "1"})
    assert proc.returncode == 0 and "ok" in proc.stdout, (
        proc.stdout + proc.stderr)


def test_list_source_outlives_its_queued_copy(slow):
    """Item 12: a converted source (list, cast) is copied from page-locked
    memory that waits for the stream, not from a temporary freed at once."""
    s = cuda.stream()
    values = [float(i) for i in range(N)]
    before = registered(slow)
    d = cuda.to_device(values, stream=s)
    assert registered(slow) > before  # the pinned temporary retires
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), np.array(values))


def test_cast_assignment_outlives_its_queued_copy(slow):
    s = cuda.stream()
    d = cuda.to_device(np.zeros((64, 8)))
    db = d.bind(s)
    src = np.arange(256.0).reshape(64, 4).astype(np.float32)  # cast
    before = registered(slow)
    db[:, ::2] = src
    assert registered(slow) > before
    s.synchronize()
    expect = np.zeros((64, 8))
    expect[:, ::2] = src
    np.testing.assert_array_equal(d.copy_to_host(), expect)


def test_assigned_expression_outlives_its_queued_copy(slow):
    """The right-hand side of an assignment on a bound stream is usually
    an expression's value, gone with the statement."""
    s = cuda.stream()
    d = cuda.to_device(np.zeros((64, 8)))
    db = d.bind(s)
    before = registered(slow)
    db[:, ::2] = np.arange(256.0).reshape(64, 4)
    assert registered(slow) > before
    s.synchronize()
    expect = np.zeros((64, 8))
    expect[:, ::2] = np.arange(256.0).reshape(64, 4)
    np.testing.assert_array_equal(d.copy_to_host(), expect)


def test_user_array_is_not_copied_again(sim):
    """A NumPy source is the caller's to keep alive, as in numba: no
    temporary is made for it."""
    s = cuda.stream()
    x = np.arange(N, dtype=np.float64)
    before = registered(sim)
    d = cuda.to_device(x, stream=s)
    assert registered(sim) == before
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), x)


# The other owners of memory or handles, each dropped under queued work.

def test_device_array_dropped_under_queued_download(slow):
    x = np.arange(N, dtype=np.float64)
    s = cuda.stream()
    d = cuda.to_device(x, stream=s)
    out = cuda.pinned_array(N)
    d.copy_to_host(out, stream=s)
    del d
    gc.collect()
    cuda.current_context().deallocations.clear()  # cuMemFree waits
    s.synchronize()
    np.testing.assert_array_equal(out, x)


def test_pooled_device_block_not_reused_under_queued_download(slow):
    x = np.arange(N, dtype=np.float64)
    s, other = cuda.stream(), cuda.stream()
    with cuda.using_memory_manager(cuda.PoolMemoryManager) as pool:
        d = cuda.to_device(x, stream=s)
        out = cuda.pinned_array(N)
        d.copy_to_host(out, stream=s)
        del d
        gc.collect()
        e = cuda.device_array(N, stream=other)  # must not take d's block
        e.bind(other)[:] = 7.0
        s.synchronize()
        other.synchronize()
        np.testing.assert_array_equal(out, x)
        del e
        pool.trim()


def test_managed_array_dropped_under_queued_copy(slow):
    x = np.arange(N, dtype=np.float64)
    s = cuda.stream()
    m = cuda.managed_array(N)
    m[:] = x
    d = cuda.device_array(N)
    d.copy_to_device(m, stream=s)
    del m
    gc.collect()
    cuda.current_context().deallocations.clear()  # cuMemFree waits
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), x)


def test_stream_dropped_under_queued_download(slow):
    x = np.arange(N, dtype=np.float64)
    d = cuda.to_device(x)
    out = cuda.pinned_array(N)
    s = cuda.stream()
    d.copy_to_host(out, stream=s)
    del s
    gc.collect()
    cuda.current_context().deallocations.clear()  # cuStreamDestroy
    cuda.synchronize()
    np.testing.assert_array_equal(out, x)


def test_event_dropped_under_queued_work(slow):
    x = np.arange(N, dtype=np.float64)
    s = cuda.stream()
    d = cuda.to_device(x, stream=s)
    e = cuda.event()
    e.record(s)
    out = cuda.pinned_array(N)
    d.copy_to_host(out, stream=s)
    del e
    gc.collect()
    cuda.current_context().deallocations.clear()  # cuEventDestroy
    s.synchronize()
    np.testing.assert_array_equal(out, x)
