"""Pinned arrays: pinned_array / pinned_array_like (numba's), their
HostBuffer (.base, buffer protocol, freed with the last reference), memory
that outlives close() and Device.reset(), bad input, and asynchronous
copies into pinned memory that never block the host.

The reference for layouts is numpy.empty; for page-locking, the
simulator's live registrations and its own cuMemHostGetFlags."""
import gc
import mmap

import numpy as np
import pytest

import cudamem
from tests.helpers.simref import SimDriver

PAGE = mmap.PAGESIZE


def host_flags(sim, ary):
    return SimDriver(sim.library_path()).host_flags(ary)


@pytest.mark.parametrize("shape, dtype, order", [
    (10, np.float64, "C"), ((3, 4), np.int16, "C"), ((3, 4), np.int16, "F"),
    ((2, 3, 5), np.complex64, "F"), ((), np.uint8, "C"),
    ((5000,), np.float32, "C")])
def test_layout_matches_numpy_empty(shape, dtype, order):
    a = cudamem.pinned_array(shape, dtype=dtype, order=order)
    ref = np.empty(shape, dtype=dtype, order=order)
    assert type(a) is np.ndarray
    assert (a.shape, a.dtype, a.strides) == (ref.shape, ref.dtype,
                                             ref.strides)
    assert a.flags.writeable and a.flags.aligned
    a[...] = np.arange(ref.size).reshape(ref.shape).astype(dtype)
    np.testing.assert_array_equal(a, np.arange(ref.size).reshape(ref.shape))


def test_base_is_a_host_buffer_that_exports_its_bytes():
    a = cudamem.pinned_array((4, 5), np.int32)
    buf = a.base
    assert type(buf) is cudamem.HostBuffer
    assert buf.kind == "pinned" and buf.registered and not buf.readonly
    assert buf.size == a.nbytes
    assert buf.host_pointer == a.__array_interface__["data"][0]
    assert buf.device_pointer is None and buf.device is None
    assert "pinned, 80 bytes" in repr(buf)
    a[...] = np.arange(20).reshape(4, 5)
    view = memoryview(buf)
    assert view.nbytes == 80 and not view.readonly
    np.testing.assert_array_equal(np.frombuffer(view, np.int32),
                                  np.arange(20))
    view.release()
    with pytest.raises(TypeError):
        cudamem.HostBuffer()


def test_page_locked_while_alive_and_freed_with_the_last_reference(sim):
    before = sim.live()
    a = cudamem.pinned_array(3 * PAGE + 1, np.uint8)
    live = sim.live()
    assert live["registrations"] == before["registrations"] + 1
    assert live["registered_bytes"] == before["registered_bytes"] + 4 * PAGE
    assert host_flags(sim, a) & 0x1  # CU_MEMHOSTREGISTER_PORTABLE
    view = a[PAGE:]
    del a
    gc.collect()
    assert sim.live()["registrations"] == before["registrations"] + 1
    view[:] = 7  # the view keeps the memory
    del view
    gc.collect()
    assert sim.live() == before


def test_zero_size_needs_no_pages(sim):
    calls = sim.stats()["calls"]["cuMemHostRegister"]["calls"]
    a = cudamem.pinned_array((0, 3))
    assert a.shape == (0, 3) and a.base.size == 0
    assert not a.base.registered
    assert memoryview(a.base).nbytes == 0
    assert sim.stats()["calls"]["cuMemHostRegister"]["calls"] == calls


def test_strides_any_sign():
    a = cudamem.pinned_array((3, 4), np.int64, strides=(-8, 24))
    assert a.strides == (-8, 24)
    a[...] = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4))
    assert a.base.size == 12 * 8


@pytest.mark.parametrize("make", [
    lambda: np.zeros((3, 4), np.float32),
    lambda: np.zeros((3, 4), np.float32, order="F"),
    lambda: np.zeros((4, 6, 5), np.int16)[:, ::2, :].transpose(2, 0, 1)])
def test_pinned_array_like_keeps_the_layout(make):
    ary = make()
    a = cudamem.pinned_array_like(ary)
    assert (a.shape, a.dtype) == (ary.shape, ary.dtype)
    ref = np.empty_like(ary)  # NumPy keeps the axis order too
    assert a.strides == ref.strides
    assert a.base.size == a.nbytes  # dense


def test_memory_outlives_close_and_reset(sim):
    a = cudamem.pinned_array(100, np.int32)
    a[:] = np.arange(100)
    cudamem.close()
    np.testing.assert_array_equal(a, np.arange(100))
    assert sim.live()["registrations"] == 1  # still page-locked
    b = cudamem.pinned_array(100, np.int32)
    cudamem.get_current_device().reset()
    assert sim.live()["registrations"] == 0
    b[:] = a
    unregisters = sim.stats()["calls"]["cuMemHostUnregister"]["calls"]
    # Their registrations died with the context: nothing to unregister.
    del a, b
    gc.collect()
    assert sim.stats()["calls"]["cuMemHostUnregister"]["calls"] == \
        unregisters


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(shape=-1), ValueError, "negative dimensions"),
    (dict(shape="x"), TypeError, "shape"),
    (dict(shape=3, dtype=object), TypeError, "Python objects"),
    (dict(shape=3, order="X"), ValueError, "order must be"),
    (dict(shape=(2, 3), strides=(8,)), ValueError, "strides"),
    (dict(shape=(1 << 62, 8)), ValueError, "too big")])
def test_bad_input_allocates_nothing(sim, kwargs, exc, match):
    calls = sim.stats()["calls"]["cuMemHostRegister"]["calls"]
    with pytest.raises(exc, match=match):
        cudamem.pinned_array(**kwargs)
    assert sim.stats()["calls"]["cuMemHostRegister"]["calls"] == calls


def test_failed_registration_leaves_nothing(sim):
    before = sim.live()
    sim.inject("cuMemHostRegister", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(cudamem.CudaAPIError):
        cudamem.pinned_array(10)
    assert sim.live() == before


def test_failed_unregister_is_a_warning(sim):
    a = cudamem.pinned_array(10)
    sim.inject("cuMemHostUnregister", "CUDA_ERROR_UNKNOWN")
    with pytest.warns(cudamem.CudaWarning, match="cuMemHostUnregister"):
        del a
        gc.collect()
    # The driver still holds the pages: they go with the context.
    cudamem.get_current_device().reset()


# ---------------------------------------------------------------------------
# Asynchronous copies into pinned memory return at once.

def test_async_copy_to_pinned_does_not_block(sim):
    src = np.arange(1 << 16, dtype=np.float64)
    d = cudamem.to_device(src)
    s = cudamem.stream()
    host = cudamem.pinned_array_like(src)
    with sim.delay(200000):
        d.copy_to_host(host, stream=s)
        assert not s.query()  # returned while the copy is queued
        s.synchronize()
    np.testing.assert_array_equal(host, src)
    back = cudamem.device_array_like(src)
    with sim.delay(200000):
        back.copy_to_device(host, stream=s)
        assert not s.query()
        s.synchronize()
    np.testing.assert_array_equal(back.copy_to_host(), src)


def test_async_copy_to_pageable_blocks(sim):
    src = np.arange(1 << 16, dtype=np.float64)
    d = cudamem.to_device(src)
    s = cudamem.stream()
    host = np.empty_like(src)
    with sim.delay(200000):
        d.copy_to_host(host, stream=s)
        assert s.query()  # complete on return: the host memory is pageable
    np.testing.assert_array_equal(host, src)


@pytest.mark.simulator
def test_copies_to_pageable_memory_land_before_return(run_py):
    # The driver may return from an asynchronous copy into pageable memory
    # before it lands (CUDAMEM_SIM_STRICT_DTOH does): cudamem waits, so the
    # array it hands back, or fills, is complete (found by the simulator's
    # strict mode: copy_to_host() of an array bound to a stream).
    proc = run_py("""
        import numpy as np, cudamem
        src = np.arange(4096, dtype=np.float64).reshape(64, 64)
        s = cudamem.stream()
        d = cudamem.to_device(src, stream=s)
        s.synchronize()
        got = [d.copy_to_host(), d.copy_to_host(stream=s),
               d[:, ::3].copy_to_host(stream=s)]
        into = np.zeros((64, 22))
        d[:, ::3].copy_to_host(into, stream=s)
        got.append(into)
        assert s.query()
        for g, want in zip(got, (src, src, src[:, ::3], src[:, ::3])):
            np.testing.assert_array_equal(g, want)
        print("ok")
    """, env={"CUDAMEM_SIM_STRICT_DTOH": "1", "CUDAMEM_SIM_DELAY_US": "20000"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


def test_synchronous_copy_from_pinned_is_complete_without_a_wait(sim):
    # From page-locked memory the driver's cuMemcpyHtoD is synchronous
    # (CUDA's "API synchronization behavior"): cudamem adds no
    # cuStreamSynchronize; from pageable memory it still waits (rule 9).
    src = np.arange(1 << 12, dtype=np.float64)
    pinned = cudamem.pinned_array_like(src)
    pinned[...] = src
    d = cudamem.device_array_like(src)
    waits = sim.stats()["calls"]["cuStreamSynchronize"]["calls"]
    with sim.delay(200000):
        d.copy_to_device(pinned)
        assert cudamem.default_stream().query()
    assert sim.stats()["calls"]["cuStreamSynchronize"]["calls"] == waits
    np.testing.assert_array_equal(d.copy_to_host(), src)
    waits = sim.stats()["calls"]["cuStreamSynchronize"]["calls"]
    d.copy_to_device(src[::-1].copy())
    assert sim.stats()["calls"]["cuStreamSynchronize"]["calls"] == waits + 1
    np.testing.assert_array_equal(d.copy_to_host(), src[::-1])


@pytest.mark.parametrize("view", [lambda a: a, lambda a: a[3:100],
                                  lambda a: a.reshape(16, 32).T],
                         ids=["whole", "slice", "transposed"])
def test_contiguous_views_of_pinned_memory_are_copied_without_a_wait(
        sim, view):
    # Known page-locked from the buffer they are a view of, not looked up
    # in the registry: no wait (CUDA's synchronous HtoD from page-locked
    # memory), and the bytes NumPy sees.
    pinned = cudamem.pinned_array(512, np.float64)
    pinned[...] = np.arange(512.0)
    src = view(pinned)
    d = cudamem.device_array_like(src)
    waits = sim.stats()["calls"]["cuStreamSynchronize"]["calls"]
    d.copy_to_device(src)
    assert sim.stats()["calls"]["cuStreamSynchronize"]["calls"] == waits
    np.testing.assert_array_equal(d.copy_to_host(), src)


def test_pinned_memory_after_a_reset_is_copied_as_pageable(sim):
    # The reset ended the page-locking: the pinned array's bytes are
    # pageable memory now, and a synchronous copy from them waits.
    src = np.arange(512, dtype=np.float64)
    pinned = cudamem.pinned_array_like(src)
    pinned[...] = src
    cudamem.get_current_device().reset()
    d = cudamem.device_array_like(src)
    for part in (pinned, pinned[3:100]):
        waits = sim.stats()["calls"]["cuStreamSynchronize"]["calls"]
        d[:part.size].copy_to_device(part)
        assert sim.stats()["calls"]["cuStreamSynchronize"]["calls"] == \
            waits + 1
        np.testing.assert_array_equal(d[:part.size].copy_to_host(), part)
