"""numba's handles and memory pointers (numba-cuda 0.30's cudadrv/driver.py):
every handle and pointer converts with int() and operator.index() (numba's
are cuda-bindings objects) and keeps .value and ctypes passing (cudamem's
are ctypes objects); MemoryPointer's own(), free(), memset(), view(),
refct and device_ctypes_pointer as numba's MemoryPointer / OwnedPointer /
AutoFreePointer have them, with NumPy the reference for memset."""
import ctypes
import gc
import operator

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaDriverError

pytestmark = pytest.mark.simulator


def _through_ctypes(handle):
    """The address a C function taking a void * receives for `handle`."""
    fn = ctypes.pythonapi.PyLong_FromVoidPtr
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = ctypes.py_object
    return fn(handle)


def _check_handle(handle, address):
    assert isinstance(handle, ctypes.c_void_p)
    assert int(handle) == address
    assert operator.index(handle) == address
    assert hex(handle) == hex(address)
    assert handle.value == (address or None)  # ctypes: None for NULL
    assert _through_ctypes(handle) == address


# --- handles -----------------------------------------------------------

def test_stream_handle_converts_with_int():
    s = cudamem.stream()
    address = s.__cuda_stream__()[1]
    assert address != 0
    _check_handle(s.handle, address)
    # numba's Stream.__int__ is int(self.handle) too.
    assert int(s) == int(s.handle)


@pytest.mark.parametrize("make, address", [
    (cudamem.default_stream, 0),
    (cudamem.legacy_default_stream, 1),   # CU_STREAM_LEGACY
    (cudamem.per_thread_default_stream, 2),  # CU_STREAM_PER_THREAD
])
def test_default_stream_handles(make, address):
    # numba: binding.CUstream(CU_STREAM_DEFAULT / _LEGACY / _PER_THREAD).
    _check_handle(make().handle, address)


def test_external_stream_handle_is_the_pointer():
    s = cudamem.stream()
    ext = cudamem.external_stream(int(s.handle))
    _check_handle(ext.handle, int(s.handle))
    assert ext.handle == s.handle
    assert hash(ext.handle) == hash(s.handle)


def test_event_handle_converts_with_int():
    e = cudamem.event()
    assert int(e.handle) != 0
    _check_handle(e.handle, e.handle.value)
    assert e.handle != cudamem.event().handle


def test_handles_of_different_kinds_of_equal_address_compare():
    s = cudamem.stream()
    assert s.handle == s.handle and s.handle is not s.handle
    assert cudamem.default_stream().handle != s.handle
    # Like cuda-bindings objects, a handle is not an int.
    assert (s.handle == int(s.handle)) is False


def test_memory_pointer_handles():
    d = cudamem.to_device(np.arange(8, dtype=np.int32))
    address = d.__cuda_array_interface__["data"][0]
    g = d.gpu_data
    _check_handle(g.handle, address)
    _check_handle(g.device_pointer, address)
    assert g.device_pointer_value == address
    assert int(d.device_ctypes_pointer) == address


def test_device_ctypes_pointer_is_numbas_c_size_t():
    d = cudamem.to_device(np.arange(8, dtype=np.int32))
    address = d.__cuda_array_interface__["data"][0]
    p = d.gpu_data.device_ctypes_pointer
    # numba: c_size_t(int(self.device_pointer)).
    assert isinstance(p, ctypes.c_size_t)
    assert p.value == int(p) == operator.index(p) == address
    z = cudamem.device_array(0).gpu_data
    assert z.device_ctypes_pointer.value == 0  # c_size_t: 0, not None
    assert int(z.device_ctypes_pointer) == 0
    assert z.device_pointer_value is None  # int(...) or None
    _check_handle(z.handle, 0)


def test_host_memory_handles():
    pinned = cudamem.pinned_array(16, np.uint8)
    buf = pinned.base
    assert isinstance(buf, cudamem.HostBuffer)
    # numba's PinnedMemory.handle is the host pointer.
    _check_handle(buf.handle, pinned.ctypes.data)
    mapped = cudamem.mapped_array(16, np.uint8)
    mbuf = mapped.base.base
    _check_handle(mbuf.handle, mapped.ctypes.data)
    _check_handle(mbuf.device_pointer,
                  mapped.__cuda_array_interface__["data"][0])


# --- MemoryPointer -----------------------------------------------------

def test_refct_counts_views_and_owned_pointers():
    d = cudamem.to_device(np.arange(8))
    g = d.gpu_data
    # numba: the array's OwnedPointer holds the one count.
    assert g.refct == 1
    v = d[2:]
    assert g.refct == 2
    o = g.own()
    assert g.refct == 3 and o.refct == 3
    assert o.device_pointer_value == g.device_pointer_value
    assert o.size == g.size and o.owner is g.owner
    del v, o
    gc.collect()
    assert g.refct == 1


def test_view_as_numbas():
    d = cudamem.to_device(np.arange(16, dtype=np.uint8))
    g = d.gpu_data
    base = g.device_pointer_value
    v = g.view(4)  # stop=None: to the end
    assert v.device_pointer_value == base + 4 and v.size == 12
    w = g.view(4, 10)
    assert w.device_pointer_value == base + 4 and w.size == 6
    assert int(w.device_ctypes_pointer) == base + 4
    assert g.refct == 3


def test_memset_against_numpy():
    host = np.arange(40, dtype=np.uint8)
    d = cudamem.to_device(host)
    g = d.gpu_data
    g.memset(0xAB, 5)
    expect = host.copy()
    expect[:5] = 0xAB
    np.testing.assert_array_equal(d.copy_to_host(), expect)
    g.view(10, 20).memset(7)
    expect[10:20] = 7
    np.testing.assert_array_equal(d.copy_to_host(), expect)
    g.memset(3)  # count=None: every byte
    np.testing.assert_array_equal(d.copy_to_host(), np.full(40, 3, np.uint8))


def test_memset_is_one_memset_d8(sim):
    d = cudamem.device_array(64, np.uint8)
    before = sim.stats()["calls"]
    d.gpu_data.memset(1, 33)
    after = sim.stats()["calls"]
    moved = {name: (after[name]["calls"] - n["calls"],
                    after[name]["bytes"] - n["bytes"])
             for name, n in before.items()
             if after[name]["calls"] != n["calls"]
             and ("Memset" in name or "Memcpy" in name)}
    assert moved == {"cuMemsetD8": (1, 33)}


def test_memset_of_zero_bytes_calls_nothing(sim):
    z = cudamem.device_array(0, np.uint8).gpu_data
    d = cudamem.device_array(4, np.uint8).gpu_data
    before = sim.stats()["calls"]["cuMemsetD8"]["calls"]
    z.memset(1)
    d.memset(1, 0)
    assert sim.stats()["calls"]["cuMemsetD8"]["calls"] == before


def test_memset_on_a_stream():
    s = cudamem.stream()
    host = np.arange(32, dtype=np.int32)
    d = cudamem.to_device(host, stream=s)
    d.gpu_data.memset(0xFF, 16, stream=s)
    out = d.copy_to_host(stream=s)
    s.synchronize()
    expect = host.copy()
    expect.view(np.uint8)[:16] = 0xFF
    np.testing.assert_array_equal(out, expect)


def test_memset_of_managed_memory():
    m = cudamem.managed_array(10, np.uint8)
    m[:] = np.arange(10, dtype=np.uint8)
    m.gpu_data.memset(9, 4)
    np.testing.assert_array_equal(np.asarray(m), [9, 9, 9, 9, 4, 5, 6, 7,
                                                  8, 9])


def test_memset_of_mapped_memory():
    # numba's MappedMemory is an AutoFreePointer: memset() as any other.
    m = cudamem.mapped_array(12, np.uint8)
    m[:] = np.arange(12, dtype=np.uint8)
    m.gpu_data.view(3).memset(0x11, 2)
    expect = np.arange(12, dtype=np.uint8)
    expect[3:5] = 0x11
    np.testing.assert_array_equal(m, expect)


@pytest.mark.parametrize("args, kwargs, exc, match", [
    ((256,), {}, OverflowError, "256"),
    ((-1,), {}, OverflowError, "-1"),
    (("a",), {}, TypeError, "'a'"),
    ((True,), {}, TypeError, "True"),
    ((1, 9), {}, ValueError, "count 9 is more than the 8 bytes"),
    ((1, -1), {}, ValueError, "-1"),
    ((2 ** 70,), {}, OverflowError, str(2 ** 70)),
    ((1, "x"), {}, TypeError, "'x'"),
    ((1,), {"stream": 5}, (TypeError, ValueError), "5"),
])
def test_memset_bad_input_writes_nothing(args, kwargs, exc, match):
    host = np.arange(8, dtype=np.uint8)
    d = cudamem.to_device(host)
    with pytest.raises(exc, match=match):
        d.gpu_data.memset(*args, **kwargs)
    np.testing.assert_array_equal(d.copy_to_host(), host)


def test_memset_refuses_read_only_memory():
    host = np.arange(8, dtype=np.uint8)
    d = cudamem.to_device(host)

    class ReadOnly:
        __cuda_array_interface__ = dict(
            d.__cuda_array_interface__,
            data=(d.__cuda_array_interface__["data"][0], True))

    ro = cudamem.as_cuda_array(ReadOnly())
    with pytest.raises(ValueError, match="read-only.*CUDA Array Interface"):
        ro.gpu_data.memset(0)
    np.testing.assert_array_equal(d.copy_to_host(), host)


def test_memset_driver_error_is_raised(sim):
    d = cudamem.device_array(8, np.uint8)
    sim.inject("cuMemsetD8", "CUDA_ERROR_INVALID_VALUE")
    with pytest.raises(CudaAPIError, match="cuMemsetD8"):
        d.gpu_data.memset(0)


def _deallocs():
    return cudamem.current_context().memory_manager.deallocations


def test_free_queues_the_memory_now(sim):
    deallocs = _deallocs()
    deallocs.clear()
    base = sim.live()["device_allocations"]
    d = cudamem.to_device(np.arange(4))
    g = d.gpu_data
    v = d[1:]
    g.free()
    # numba: the finalizer puts it in the pending deallocations at once.
    assert len(deallocs) == 1
    deallocs.clear()
    assert sim.live()["device_allocations"] == base
    with pytest.raises(CudaDriverError, match="freed with free"):
        d.copy_to_host()
    with pytest.raises(CudaDriverError, match="freed with free"):
        v.copy_to_host()
    with pytest.raises(CudaDriverError, match="freed with free"):
        g.memset(0)
    with pytest.raises(RuntimeError, match="Freeing dead memory"):
        g.free()
    frees = sim.stats()["calls"]["cuMemFree"]["calls"]
    del d, v, g
    gc.collect()
    deallocs.clear()
    assert sim.stats()["calls"]["cuMemFree"]["calls"] == frees  # not twice


def test_free_runs_a_plugins_finalizer_once():
    backing = cudamem.device_array(16, np.uint8)
    calls = []
    p = cudamem.MemoryPointer(cudamem.current_context(),
                              backing.gpu_data.device_pointer_value, 16,
                              finalizer=lambda: calls.append(1))
    p.free()
    assert calls == [1]
    with pytest.raises(RuntimeError, match="Freeing dead memory"):
        p.free()
    del p
    gc.collect()
    assert calls == [1]


def test_free_without_a_finalizer_does_nothing():
    # numba frees only a MemoryPointer that has a finalizer.
    backing = cudamem.to_device(np.arange(16, dtype=np.uint8))
    p = cudamem.MemoryPointer(cudamem.current_context(),
                              backing.gpu_data.device_pointer_value, 16)
    p.free()
    p.free()
    p.memset(5, 2)
    expect = np.arange(16, dtype=np.uint8)
    expect[:2] = 5
    np.testing.assert_array_equal(backing.copy_to_host(), expect)


def test_free_of_managed_memory(sim):
    base = sim.live()["managed_allocations"]
    m = cudamem.managed_array(8, np.uint8)
    assert sim.live()["managed_allocations"] == base + 1
    g = m.gpu_data
    g.free()
    _deallocs().clear()
    assert sim.live()["managed_allocations"] == base
    with pytest.raises(CudaDriverError, match="freed with free"):
        memoryview(g)


def test_a_failed_free_is_raised(sim):
    deallocs = _deallocs()
    deallocs.clear()
    keep = [cudamem.to_device(np.arange(2)) for _ in range(11)]
    del keep[:10]  # ten queued: the next release flushes
    gc.collect()
    assert len(deallocs) == 10
    sim.inject("cuMemFree", "CUDA_ERROR_INVALID_VALUE")
    with pytest.raises(CudaAPIError, match="cuMemFree"):
        keep[0].gpu_data.free()
    deallocs.clear()
    # The failed free leaked one allocation: only a reset reclaims it.
    cudamem.get_current_device().reset()
