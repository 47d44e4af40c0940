"""Mapped memory: mapped_array / mapped_array_like and MappedNDArray
(numba's), views whose device side starts at their own first element,
portable and write-combined allocations, the mapped() context manager,
and what close() and Device.reset() leave.

The host side is checked against NumPy; the device side through device
copies (write on one side, read on the other) and the simulator's own
cuMemHostGetFlags."""
import gc

import numpy as np
import pytest

import cudamem
from tests.helpers.simref import SimDriver

PORTABLE, DEVICEMAP, WRITECOMBINED = 0x1, 0x2, 0x4

pytestmark = pytest.mark.simulator


def host_flags(sim, ary):
    return SimDriver(sim.library_path()).host_flags(ary)


def device_read(m):
    """The bytes of m's device side, read by a device-to-device copy."""
    d = cudamem.device_array(m.shape, m.dtype)
    d.copy_to_device(m.device_array())
    return d.copy_to_host()


def test_mapped_array_is_a_numpy_array_with_a_device_side():
    m = cudamem.mapped_array((3, 4), np.int32)
    assert isinstance(m, np.ndarray) and type(m) is cudamem.MappedNDArray
    assert (m.shape, m.dtype, m.strides) == ((3, 4), np.int32, (16, 4))
    buf = m.base.base
    assert type(buf) is cudamem.HostBuffer and buf.kind == "mapped"
    assert buf.device == cudamem.get_current_device()
    cai = m.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<i4"
    assert cai["data"][0] == buf.device_pointer_value
    assert m.device_ctypes_pointer.value == buf.device_pointer.value
    assert m.gpu_data.owner is buf
    assert m.stream == 0


def test_host_writes_are_seen_on_the_device():
    m = cudamem.mapped_array((5, 7), np.float32, order="F")
    m[...] = np.arange(35, dtype=np.float32).reshape(5, 7)
    np.testing.assert_array_equal(device_read(m), m)
    np.testing.assert_array_equal(m.copy_to_host(), m)
    out = np.zeros((5, 7), np.float32)
    assert m.copy_to_host(out) is out
    np.testing.assert_array_equal(out, m)


def test_device_writes_are_seen_on_the_host():
    m = cudamem.mapped_array(100, np.int64)
    m[:] = 0
    src = cudamem.to_device(np.arange(100, dtype=np.int64) * 3)
    m.device_array().copy_to_device(src)
    np.testing.assert_array_equal(m, np.arange(100) * 3)
    m.copy_to_device(np.arange(100, dtype=np.int64))
    np.testing.assert_array_equal(m, np.arange(100))


@pytest.mark.parametrize("key", [
    (slice(1, None), slice(None, None, 2)), (2,), (slice(None, None, -1),),
    (Ellipsis, 3), (slice(None), None, slice(2, 4))])
def test_views_point_at_their_own_first_element(key):
    m = cudamem.mapped_array((4, 6), np.float64)
    m[...] = np.arange(24).reshape(4, 6)
    view = m[key]
    assert type(view) is cudamem.MappedNDArray
    buf = m.base.base
    host = view.__array_interface__["data"][0]
    assert view.__cuda_array_interface__["data"][0] == \
        buf.device_pointer_value + (host - buf.host_pointer)
    np.testing.assert_array_equal(view.copy_to_host(), view)
    view.copy_to_device(np.full(view.shape, -1.0))
    expect = np.arange(24.0).reshape(4, 6)
    expect[key] = -1
    np.testing.assert_array_equal(m, expect)


def test_reshaped_and_transposed_views():
    m = cudamem.mapped_array(12, np.int16)
    m[:] = np.arange(12)
    t = m.reshape(3, 4).T
    np.testing.assert_array_equal(t.copy_to_host(), np.arange(12).reshape(
        3, 4).T)
    assert t.__cuda_array_interface__["strides"] == (2, 8)


def test_stream_is_kept_by_views():
    s = cudamem.stream()
    m = cudamem.mapped_array(8, stream=s)
    assert m.stream is s and m[2:].stream is s
    assert m.__cuda_array_interface__["stream"] == int(s)
    m[:] = 5
    assert m[2:].copy_to_host(stream=s).sum() == 30
    s.synchronize()


def test_portable_and_write_combined_flags(sim):
    m = cudamem.mapped_array(10)
    assert host_flags(sim, m) & (PORTABLE | DEVICEMAP) == PORTABLE | \
        DEVICEMAP
    live = sim.live()["host_allocations"]
    wc = cudamem.mapped_array(10, np.int32, wc=True)
    assert wc.base.base.kind == "mapped_wc"
    assert sim.live()["host_allocations"] == live + 1
    assert host_flags(sim, wc) == WRITECOMBINED | DEVICEMAP
    wcp = cudamem.mapped_array(10, wc=True, portable=True)
    assert host_flags(sim, wcp) == WRITECOMBINED | DEVICEMAP | PORTABLE
    wc[:] = np.arange(10)
    np.testing.assert_array_equal(device_read(wc), np.arange(10))
    del wc, wcp
    cudamem.current_context().memory_manager.deallocations.clear()
    assert sim.live()["host_allocations"] == live


def test_mapped_array_like():
    ary = np.zeros((3, 5), np.uint8, order="F")
    m = cudamem.mapped_array_like(ary, wc=True)
    assert type(m) is cudamem.MappedNDArray
    assert (m.shape, m.dtype, m.strides) == (ary.shape, ary.dtype,
                                             ary.strides)
    with pytest.raises(TypeError, match="mapped_array_like"):
        cudamem.mapped_array_like([1, 2])


def test_zero_size():
    m = cudamem.mapped_array((0, 4))
    assert m.__cuda_array_interface__["shape"] == (0, 4)
    assert m.copy_to_host().shape == (0, 4)


def test_bad_stream_allocates_nothing(sim):
    live = sim.live()
    with pytest.raises(TypeError):
        cudamem.mapped_array(4, stream="s")
    assert sim.live() == live


def test_results_of_operations_have_no_device_side():
    m = cudamem.mapped_array(4)
    with pytest.raises(ValueError, match="not in mapped memory"):
        (m + 1).__cuda_array_interface__


def test_mapped_yields_device_arrays_over_the_same_memory(sim):
    a = np.arange(10.0)
    b = np.zeros((2, 3), np.int32)
    with cudamem.mapped(a) as da:
        assert type(da) is cudamem.DeviceNDArray
        assert da.__cuda_array_interface__["data"][0] == \
            a.__array_interface__["data"][0]  # the simulator's UVA
        np.testing.assert_array_equal(da.copy_to_host(), a)
        assert sim.live()["registrations"] == 1
    assert sim.live()["registrations"] == 0
    s = cudamem.stream()
    with cudamem.mapped(a[::2], b, stream=s) as (da, db):
        db.copy_to_device(np.ones((2, 3), np.int32), stream=0)
        got = da.copy_to_host()
        # Queued on the arrays' stream (numba's rule), not complete: the new
        # host array may share a registered page with `a`, and then the
        # simulator returns before the copy ran.
        s.synchronize()
        np.testing.assert_array_equal(got, a[::2])
    np.testing.assert_array_equal(b, 1)


def test_mapped_over_a_mapped_array_shares_its_pages(sim):
    m = cudamem.mapped_array(16)
    m[:] = 1
    calls = sim.stats()["calls"]["cuMemHostRegister"]["calls"]
    with cudamem.mapped(m[4:]) as d:
        np.testing.assert_array_equal(d.copy_to_host(), 1)
    assert sim.stats()["calls"]["cuMemHostRegister"]["calls"] == calls


def test_failed_device_pointer_leaves_nothing(sim):
    live = sim.live()
    sim.inject("cuMemHostGetDevicePointer", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(cudamem.CudaAPIError):
        cudamem.mapped_array(10)
    sim.inject("cuMemHostGetDevicePointer", "CUDA_ERROR_UNKNOWN")
    a = np.arange(4.0)
    with pytest.raises(cudamem.CudaAPIError):
        with cudamem.mapped(a):
            pass
    sim.inject("cuMemHostGetDevicePointer", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(cudamem.CudaAPIError):
        cudamem.mapped_array(10, wc=True)
    assert sim.live() == live


def test_close_keeps_mapped_memory(sim):
    m = cudamem.mapped_array(10)
    wc = cudamem.mapped_array(10, wc=True)
    m[:] = 3
    wc[:] = 4
    registers = sim.stats()["calls"]["cuMemHostRegister"]["calls"]
    cudamem.close()
    # The registrations and the write-combined memory retain their
    # context: both sides still work, nothing was registered again.
    np.testing.assert_array_equal(device_read(m), 3)
    np.testing.assert_array_equal(device_read(wc), 4)
    with cudamem.pinned(m):
        pass
    assert sim.stats()["calls"]["cuMemHostRegister"]["calls"] == registers
    del m, wc
    gc.collect()
    cudamem.current_context().memory_manager.deallocations.clear()


def test_queued_write_combined_free_runs_at_close(sim):
    # The queued free still holds the context: close() frees the memory
    # rather than dropping the free with the queue.
    live = sim.live()["host_allocations"]
    wc = cudamem.mapped_array(10, wc=True)
    del wc
    assert len(cudamem.current_context().memory_manager.deallocations) == 1
    assert sim.live()["host_allocations"] == live + 1
    cudamem.close()
    assert sim.live()["host_allocations"] == live


def test_reset_ends_the_device_side(sim):
    m = cudamem.mapped_array(10)
    m[:] = 3
    wc = cudamem.mapped_array(10, wc=True)
    cudamem.get_current_device().reset()
    np.testing.assert_array_equal(m, 3)
    for ary in (m, wc):
        with pytest.raises(cudamem.CudaDriverError, match="was reset"):
            ary.device_array()
        # numba's MappedMemory view of the buffer: its device address.
        with pytest.raises(cudamem.CudaDriverError, match="was reset"):
            ary.base.base.view(0)
    # Write-combined memory went with the context: only drop it.
    del wc
    gc.collect()
