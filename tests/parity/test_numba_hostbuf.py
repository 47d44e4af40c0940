"""HostBuffer as numba's MappedMemory and PinnedMemory (numba-cuda 0.30's
cudadrv/driver.py is the reference): mapped memory is a MemoryPointer at
its device address (view, memset, device_ctypes_pointer, owner,
__cuda_memory__), pinned memory a host buffer with its context and owned
object; own() keeps either alive. NumPy is the reference for the bytes."""
import gc
import weakref

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem


def buffer_of(array):
    base = array
    while not isinstance(base, _cudamem.HostBuffer):
        base = base.base
    return base


def mapped():
    """A mapped array and its HostBuffer (made in each test: the suite's
    leak check runs while fixture values are still held)."""
    host = cudamem.mapped_array(64, np.uint8)
    host[:] = np.arange(64)
    return host, buffer_of(host)


def test_mapped_memory_is_device_memory():
    host, buf = mapped()
    assert buf.__cuda_memory__ is True
    assert int(buf.device_ctypes_pointer) == buf.device_pointer_value
    assert buf.device_pointer_value == \
        host.__cuda_array_interface__["data"][0]
    assert buf.context == cudamem.current_context()
    assert buf.owned is None and buf.owner is buf and buf.own() is buf


@pytest.mark.parametrize("start, stop", [(0, None), (4, 12), (64, None),
                                         (10, 10)])
def test_view_is_a_pointer_into_the_mapped_bytes(start, stop):
    host, buf = mapped()
    view = buf.view(start, stop)
    assert isinstance(view, _cudamem.MemoryPointer)
    end = 64 if stop is None else stop
    assert view.size == end - start
    if view.size:
        assert view.device_pointer_value == buf.device_pointer_value + start
    # The view keeps the memory: the bytes are the host array's.
    view.memset(0xEE)
    cudamem.synchronize()
    expect = np.arange(64, dtype=np.uint8)
    expect[start:end] = 0xEE
    np.testing.assert_array_equal(host, expect)


def test_view_refuses_what_memory_pointer_refuses():
    _, buf = mapped()
    for start, stop in ((10, 4), (0, 65), (65, None)):
        with pytest.raises(IndexError, match="outside this memory of 64"):
            buf.view(start, stop)


def test_view_outlives_the_array():
    host, buf = mapped()
    view = buf.view(8)
    ref = weakref.ref(buf)
    del host, buf
    gc.collect()
    assert ref() is not None  # the view owns the buffer
    view.memset(7)
    cudamem.synchronize()
    np.testing.assert_array_equal(np.frombuffer(ref(), np.uint8)[8:], 7)
    del view
    gc.collect()
    assert ref() is None


def test_memset_on_a_stream():
    host, buf = mapped()
    s = cudamem.stream()
    buf.memset(0xAB, 16, stream=s)
    buf.memset(1, count=4, stream=s)
    s.synchronize()
    expect = np.arange(64, dtype=np.uint8)
    expect[:16] = 0xAB
    expect[:4] = 1
    np.testing.assert_array_equal(host, expect)


def test_numba_s_host_alloc_driver_test():
    # numba's test_host_alloc_driver, with the buffer as numba builds it.
    _, buf = mapped()
    ary = np.ndarray(shape=64, dtype=np.uint8, buffer=buf)
    buf.memset(0xAB)
    cudamem.synchronize()
    assert np.all(ary == 0xAB)


def test_pinned_memory_is_host_memory():
    host = cudamem.pinned_array(16, np.uint8)
    buf = buffer_of(host)
    assert buf.__cuda_memory__ is False
    assert buf.device_ctypes_pointer is None
    assert buf.context == cudamem.current_context()
    assert buf.owned is None and buf.own() is buf
    for call in (lambda: buf.view(0), lambda: buf.memset(0)):
        with pytest.raises(TypeError, match="pinned host memory has no "
                                            "device address"):
            call()


def test_a_registration_owns_its_array():
    h = np.zeros(4096, np.uint8)
    with cudamem.pinned(h):
        bufs = [b for b in gc.get_referrers(h)
                if isinstance(b, _cudamem.HostBuffer)]
        assert len(bufs) == 1
        assert bufs[0].owned is h and bufs[0].owner is h


def test_read_only_mapped_memory_refuses_a_device_write():
    h = np.zeros(4096, np.uint8)
    h.flags.writeable = False
    with cudamem.mapped(h) as d:
        buf = d.gpu_data.owner
        assert isinstance(buf, _cudamem.HostBuffer)
        with pytest.raises(ValueError, match="read-only"):
            buf.memset(1)
    assert not h.any()
