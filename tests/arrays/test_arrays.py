"""The first DeviceNDArray: contiguous to_device / device_array /
copy_to_host / copy_to_device, checked against NumPy, on stream 0
(synchronous) and on streams (asynchronous), with the simulator's counters
showing how each copy was made."""
import ctypes
import gc
import threading

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaDriverError

DTYPES = [np.bool_, np.int8, np.uint16, np.int32, np.int64, np.float16,
          np.float32, np.float64, np.complex64, np.complex128,
          np.dtype([("a", np.int32), ("b", np.float64)])]


def calls(sim):
    """Driver calls per entry point since sim.reset()."""
    return {k: v["calls"] for k, v in sim.stats()["calls"].items()}


def moved(sim):
    """Bytes moved per entry point since sim.reset()."""
    return {k: v["bytes"] for k, v in sim.stats()["calls"].items()}


def _host(shape, dtype, order="C", seed=0):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if shape else 1
    dtype = np.dtype(dtype)
    if dtype.fields:
        out = np.zeros(n, dtype)
        out["a"] = rng.integers(-100, 100, n)
        out["b"] = rng.standard_normal(n)
    else:
        out = (rng.standard_normal(n) * 100).astype(dtype)
    return np.asarray(out.reshape(shape), order=order)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (2, 3, 4),
                                   (0,), (4, 0, 2)])
def test_round_trip_matches_numpy(dtype, shape):
    host = _host(shape, dtype)
    dev = cudamem.to_device(host)
    assert dev.shape == host.shape
    assert dev.strides == host.strides
    assert dev.dtype == host.dtype
    assert dev.size == host.size
    assert dev.nbytes == host.nbytes
    assert dev.ndim == host.ndim
    assert dev.itemsize == host.itemsize
    back = dev.copy_to_host()
    assert back.dtype == host.dtype and back.shape == host.shape
    np.testing.assert_array_equal(back, host)


@pytest.mark.parametrize("order", ["C", "F"])
def test_layout_is_kept(order):
    host = _host((4, 6), np.float32, order)
    dev = cudamem.to_device(host)
    assert dev.strides == host.strides
    assert dev.flags == {"C_CONTIGUOUS": host.flags.c_contiguous,
                         "F_CONTIGUOUS": host.flags.f_contiguous}
    assert dev.is_c_contiguous() == host.flags.c_contiguous
    assert dev.is_f_contiguous() == host.flags.f_contiguous
    back = dev.copy_to_host()
    assert back.strides == host.strides
    np.testing.assert_array_equal(back, host)


@pytest.mark.parametrize("key", [slice(None), slice(None, None, 2),
                                 slice(None, None, -1), slice(2, 3),
                                 slice(1, 2, 4), slice(5, 5),
                                 slice(4, 4, -3)], ids=str)
def test_one_dimensional_flags_follow_numpy(key):
    # 1-d layouts take a path of their own: a length of 0 or 1 is
    # contiguous whatever its step, as in NumPy.
    host = np.arange(9, dtype=np.float64)
    view = cudamem.to_device(host)[key]
    ref = host[key]
    assert view.strides == ref.strides
    assert view.flags == {"C_CONTIGUOUS": ref.flags.c_contiguous,
                          "F_CONTIGUOUS": ref.flags.f_contiguous}
    np.testing.assert_array_equal(view.copy_to_host(), ref)


def test_non_contiguous_source_is_copied_exactly():
    base = _host((6, 8), np.int64)
    for view in (base[::2, 1::3], base[:, ::-1], base.T[::2]):
        dev = cudamem.to_device(view)
        assert dev.shape == view.shape
        np.testing.assert_array_equal(dev.copy_to_host(), view)


def test_inputs_numpy_accepts():
    np.testing.assert_array_equal(
        cudamem.to_device([[1, 2], [3, 4]]).copy_to_host(),
        np.array([[1, 2], [3, 4]]))
    scalar = cudamem.to_device(np.float32(2.5))
    assert scalar.shape == () and scalar.copy_to_host() == np.float32(2.5)
    ro = np.arange(5.0)
    ro.flags.writeable = False
    np.testing.assert_array_equal(cudamem.to_device(ro).copy_to_host(), ro)


class _Unit(np.ndarray):
    """An ndarray subclass, passed through as NumPy's asanyarray does."""


def _pinned_copy(a):
    out = cudamem.pinned_array(a.shape, a.dtype)
    out[...] = a
    return out


_BASE = np.arange(12, dtype=np.int16).reshape(3, 4)


@pytest.mark.parametrize("make", [
    lambda: _BASE.view(_Unit),
    lambda: _BASE.T.view(_Unit),
    lambda: _BASE[:, ::2].view(_Unit),
    lambda: np.ma.masked_array(_BASE, mask=_BASE > 5),
    lambda: _pinned_copy(_BASE),
    lambda: np.zeros(3, [("a", np.int8), ("b", np.float32)])[["b"]],
], ids=["subclass", "subclass-F", "subclass-strided", "masked", "pinned",
        "structured-view"])
def test_to_device_of_ndarray_subclasses_follows_numpy(make):
    host = make()
    ref = np.asarray(host)
    dev = cudamem.to_device(host)
    assert (dev.shape, dev.dtype) == (ref.shape, ref.dtype)
    if ref.flags.c_contiguous or ref.flags.f_contiguous:
        assert dev.strides == ref.strides
    np.testing.assert_array_equal(dev.copy_to_host(), ref)


def _odd_unit_strides(a, odd):
    """a's elements with the strides of its length-1 dimensions set to
    `odd`: NumPy ignores those strides, and so must a copy."""
    strides = tuple(odd if n == 1 else st for n, st in zip(a.shape, a.strides))
    return np.lib.stride_tricks.as_strided(a, a.shape, strides)


@pytest.mark.parametrize("shape", [(), (1,), (5,), (1, 5), (5, 1), (2, 1, 3),
                                   (1, 1, 1)])
@pytest.mark.parametrize("odd", [0, -8, 999])
def test_one_run_copies_follow_numpy_in_one_call(shape, odd, sim):
    """A copy between a C-contiguous host array and a C-contiguous device
    array (whatever the strides of length-1 dimensions) is one
    cuMemcpyHtoD or cuMemcpyDtoH of the whole run, in both directions,
    to pageable and page-locked memory."""
    ref = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape) + 7
    for host in (ref.copy(), _pinned_copy(ref)):
        src = _odd_unit_strides(host, odd)
        dev = cudamem.device_array(shape, np.int32)
        sim.reset()
        dev.copy_to_device(src)
        back = _odd_unit_strides(np.zeros_like(host), odd)
        dev.copy_to_host(back)
        np.testing.assert_array_equal(back, ref)
        stats = calls(sim)
        assert (stats["cuMemcpyHtoD"], stats["cuMemcpyDtoH"],
                stats["cuMemcpy2D"], stats["cuMemcpy3D"]) == (1, 1, 0, 0)
        assert moved(sim)["cuMemcpyHtoD"] == ref.nbytes


def test_sync_copies_use_one_driver_call_each(sim):
    host = np.arange(1000, dtype=np.float64)
    sim.reset()
    dev = cudamem.to_device(host)
    dev.copy_to_host()
    stats = calls(sim)
    assert stats["cuMemAlloc"] == 1
    assert stats["cuMemcpyHtoD"] == 1
    assert stats["cuMemcpyDtoH"] == 1
    assert moved(sim)["cuMemcpyHtoD"] == host.nbytes
    assert moved(sim)["cuMemcpyDtoH"] == host.nbytes


def test_synchronous_means_complete(sim):
    # Delayed stream work exposes a copy that returns before it ran.
    host = np.arange(256, dtype=np.int32)
    with sim.delay(2000):
        dev = cudamem.to_device(host)
        np.testing.assert_array_equal(dev.copy_to_host(), host)
        other = cudamem.device_array(host.shape, host.dtype)
        other.copy_to_device(dev)
        np.testing.assert_array_equal(other.copy_to_host(), host)


def test_async_on_a_stream(sim):
    s = cudamem.stream()
    host = np.arange(4096, dtype=np.float32)
    sim.reset()
    with sim.delay(500):
        dev = cudamem.to_device(host, stream=s)
        assert dev.stream is s
        out = dev.copy_to_host(stream=s)
        s.synchronize()
    np.testing.assert_array_equal(out, host)
    made = calls(sim)
    assert made["cuMemcpyHtoDAsync"] == 1
    assert made["cuMemcpyDtoHAsync"] == 1
    assert made["cuMemcpyHtoD"] == 0
    assert made["cuMemcpyDtoH"] == 0


def test_array_stream_is_the_default_for_its_operations(sim):
    s = cudamem.stream()
    dev = cudamem.device_array(64, np.int16, stream=s)
    sim.reset()
    dev.copy_to_device(np.ones(64, np.int16))
    host = dev.copy_to_host()
    s.synchronize()
    made = calls(sim)
    assert made["cuMemcpyHtoDAsync"] == 1 and made["cuMemcpyDtoHAsync"] == 1
    np.testing.assert_array_equal(host, np.ones(64, np.int16))


def test_default_stream_object_is_asynchronous(sim):
    ds = cudamem.default_stream()
    sim.reset()
    dev = cudamem.to_device(np.ones(8), stream=ds)
    ds.synchronize()
    assert calls(sim)["cuMemcpyHtoDAsync"] == 1
    np.testing.assert_array_equal(dev.copy_to_host(), np.ones(8))


def test_foreign_stream_protocol():
    s = cudamem.stream()

    class Foreign:
        def __cuda_stream__(self):
            return (0, s.handle.value)

    dev = cudamem.to_device(np.arange(10), stream=Foreign())
    out = dev.copy_to_host(stream=Foreign())
    s.synchronize()
    np.testing.assert_array_equal(out, np.arange(10))


def test_nonzero_int_stream_is_rejected():
    with pytest.raises(ValueError, match="external_stream"):
        cudamem.to_device(np.ones(3), stream=5)
    dev = cudamem.to_device(np.ones(3))
    for bad in (7, 2 ** 70, -1):
        with pytest.raises(ValueError, match="external_stream"):
            dev.copy_to_host(stream=bad)
    with pytest.raises(TypeError):
        cudamem.device_array(3, stream="s")


@pytest.mark.parametrize("order", ["C", "F"])
def test_device_array(order):
    dev = cudamem.device_array((3, 4), dtype=np.int32, order=order)
    ref = np.empty((3, 4), np.int32, order=order)
    assert dev.shape == ref.shape and dev.strides == ref.strides
    assert dev.dtype == np.int32
    assert dev.alloc_size == ref.nbytes
    assert cudamem.device_array(5).dtype == np.float64
    assert cudamem.device_array([2, 2], "f4").dtype == np.float32


def test_device_array_with_strides():
    dev = cudamem.device_array((2, 3), np.float64, strides=(8, 16))
    assert dev.strides == (8, 16)
    assert dev.is_f_contiguous()
    gappy = cudamem.device_array((2, 3), np.float64, strides=(48, 16))
    assert gappy.alloc_size == 48 + 2 * 16 + 8
    assert not gappy.is_c_contiguous() and not gappy.is_f_contiguous()
    gappy.copy_to_device(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(gappy.copy_to_host(),
                                  np.arange(6.0).reshape(2, 3))
    neg = cudamem.device_array(4, np.int32, strides=-4)
    assert neg.alloc_size == 16
    assert neg.gpu_data.device_pointer_value + 12 == \
        neg.device_ctypes_pointer.value


def test_zero_size_allocates_nothing(sim):
    before = sim.live()["device_allocations"]
    dev = cudamem.device_array((0, 5))
    assert sim.live()["device_allocations"] == before
    assert dev.gpu_data.device_pointer_value is None
    assert dev.__cuda_array_interface__["data"] == (0, False)
    assert dev.copy_to_host().shape == (0, 5)


@pytest.mark.parametrize("bad, exc, text", [
    ((-1,), ValueError, "negative dimensions"),
    ("ab", TypeError, "shape"),
    ((2, "x"), TypeError, "not an int"),
    ((2 ** 62, 2 ** 62), ValueError, "too big"),
    (2 ** 62, ValueError, "too big"),
    (2 ** 63, ValueError, "out of range"),
    ((3, 2 ** 64), ValueError, "out of range"),
    (True, TypeError, "shape"),
    ((2, False), TypeError, "bool is not an int"),
])
def test_device_array_bad_shape(bad, exc, text, sim):
    before = sim.live()
    with pytest.raises(exc, match=text):
        cudamem.device_array(bad)
    assert sim.live() == before


# Zero-size shapes at the edge of NumPy's size rule: the nonzero extents
# times the itemsize must fit in an intp even when another extent is 0.
_EDGE_SHAPES = [((2 ** 62, 0), "f8"), ((2 ** 62, 0), "u1"),
                ((2 ** 63 - 1, 0), "u1"), ((2 ** 59, 0), "f8"),
                ((2 ** 60, 0), "f8"), ((0, 2 ** 62, 2), "u1"),
                ((2 ** 61, 0, 4), "u1"), ((2 ** 61, 0, 3), "u1")]


def _numpy_accepts(shape, dtype):
    try:
        np.empty(shape, dtype)
    except ValueError as exc:
        assert "too big" in str(exc)
        return False
    return True


@pytest.mark.parametrize("shape, dtype", _EDGE_SHAPES)
def test_zero_size_shapes_follow_numpy(shape, dtype, sim):
    makers = [lambda: cudamem.device_array(shape, dtype),
              lambda: cudamem.device_array(0, dtype).reshape(shape),
              lambda: cudamem.pinned_array(shape, dtype),
              lambda: cudamem.mapped_array(shape, dtype)]
    before = sim.live()
    for make in makers:
        if _numpy_accepts(shape, dtype):
            made = make()
            assert made.shape == np.empty(shape, dtype).shape
            assert made.size == 0
        else:
            with pytest.raises(ValueError, match="too big"):
                make()
    assert sim.live() == before


class _DtypeAttr:
    """A class NumPy converts through its dtype attribute, which can be
    reassigned."""
    dtype = np.dtype(np.float32)


@pytest.mark.parametrize("make", [cudamem.device_array, cudamem.pinned_array,
                                  cudamem.mapped_array,
                                  cudamem.managed_array],
                         ids=lambda f: f.__name__)
def test_each_dtype_argument_converts_as_numpy_s_does(make):
    """One conversion is remembered (a static type's): any sequence of
    arguments still gets what numpy.empty gets, a class whose dtype
    attribute changed included."""
    args = [np.uint8, float, np.uint8, "f4", np.dtype("i2"), None, bool,
            np.complex64, np.complex64, _DtypeAttr, int, np.uint8]
    for arg in args:
        assert make(3, arg).dtype == np.empty(3, arg).dtype, arg
    try:
        _DtypeAttr.dtype = np.dtype(np.int16)
        assert make(3, _DtypeAttr).dtype == np.int16
        assert make(3, np.uint8).dtype == np.uint8
        assert make(3, _DtypeAttr).dtype == np.int16
    finally:
        _DtypeAttr.dtype = np.dtype(np.float32)
    with pytest.raises(TypeError, match="Python objects"):
        make(3, object)
    with pytest.raises(TypeError, match="Python objects"):
        make(3, object)


def test_device_array_bad_arguments():
    with pytest.raises(TypeError, match="Python objects"):
        cudamem.device_array(3, dtype=object)
    with pytest.raises(ValueError, match="order"):
        cudamem.device_array(3, order="K")
    with pytest.raises(ValueError, match="strides"):
        cudamem.device_array((2, 2), strides=(8,))
    with pytest.raises(TypeError, match="multiple values"):
        cudamem.device_array(3, shape=4)
    with pytest.raises(TypeError, match="unexpected keyword"):
        cudamem.device_array(3, dtyp=4)
    with pytest.raises(TypeError, match="missing"):
        cudamem.device_array()
    with pytest.raises(TypeError, match="Python objects"):
        cudamem.to_device(np.array([object()]))


def test_copy_to_host_into_an_array():
    host = _host((3, 4), np.float64)
    dev = cudamem.to_device(host)
    out = np.zeros((3, 4))
    assert dev.copy_to_host(out) is out
    np.testing.assert_array_equal(out, host)
    # Another layout and extra dimensions of length 1 (numba's rule).
    out_f = np.zeros((3, 1, 4), order="F")
    dev.copy_to_host(out_f)
    np.testing.assert_array_equal(out_f[:, 0, :], host)
    # A strided destination: only its elements change.
    big = np.full((6, 8), -1.0)
    dev.copy_to_host(big[::2, ::2])
    expect = np.full((6, 8), -1.0)
    expect[::2, ::2] = host
    np.testing.assert_array_equal(big, expect)


def test_copy_to_host_errors():
    dev = cudamem.to_device(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="incompatible dtype"):
        dev.copy_to_host(np.zeros((2, 3), np.float64))
    with pytest.raises(ValueError, match="incompatible shape"):
        dev.copy_to_host(np.zeros((3, 2), np.float32))
    ro = np.zeros((2, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        dev.copy_to_host(ro)
    with pytest.raises(TypeError, match="ndarray"):
        dev.copy_to_host([0, 0])


def test_copy_to_device():
    dev = cudamem.device_array((4, 5), np.int32)
    src = _host((4, 5), np.int32, "F")
    dev.copy_to_device(src)
    np.testing.assert_array_equal(dev.copy_to_host(), src)
    dev.copy_to_device(src[:, None, :][:, :, ::1])
    dev.copy_to_device(_host((4, 5), np.int32, seed=3)[None])
    np.testing.assert_array_equal(dev.copy_to_host(),
                                  _host((4, 5), np.int32, seed=3))
    other = cudamem.to_device(src)
    dev2 = cudamem.device_array((4, 5), np.int32, order="F")
    dev2.copy_to_device(other)
    np.testing.assert_array_equal(dev2.copy_to_host(), src)
    with pytest.raises(TypeError, match="incompatible dtype"):
        dev.copy_to_device(np.zeros((4, 5)))
    with pytest.raises(ValueError, match="incompatible shape"):
        dev.copy_to_device(np.zeros((5, 4), np.int32))


def test_to_device_to_and_copy_false(sim):
    dst = cudamem.device_array(6, np.int64)
    assert cudamem.to_device(np.arange(6), to=dst) is dst
    np.testing.assert_array_equal(dst.copy_to_host(), np.arange(6))
    sim.reset()
    empty = cudamem.to_device(np.arange(6), copy=False)
    assert empty.shape == (6,)
    assert calls(sim).get("cuMemcpyHtoD", 0) == 0
    assert cudamem.to_device(dst) is dst
    with pytest.raises(TypeError, match="to= must be a device array, "
                       "not numpy.ndarray"):
        cudamem.to_device(np.arange(6), to=np.zeros(6))


def test_cuda_array_interface():
    host = _host((3, 4), np.float32, "F")
    dev = cudamem.to_device(host)
    cai = dev.__cuda_array_interface__
    assert cai == {"shape": (3, 4), "strides": host.strides,
                   "data": (dev.device_ctypes_pointer.value, False),
                   "typestr": "<f4", "stream": None, "version": 3}
    c = cudamem.to_device(np.zeros(3, np.int16))
    assert c.__cuda_array_interface__["strides"] is None
    s = cudamem.stream()
    on_s = cudamem.device_array(3, stream=s)
    assert on_s.__cuda_array_interface__["stream"] == s.handle.value
    rec = cudamem.device_array(2, np.dtype([("a", "<i4"), ("b", "<f8")]))
    assert rec.__cuda_array_interface__["descr"] == [("a", "<i4"),
                                                     ("b", "<f8")]


def test_cai_matches_the_simulated_memory(sim):
    # The exported pointer is the array's memory: read it back raw.
    dev = cudamem.to_device(np.arange(4, dtype=np.int32))
    ptr, _ = dev.__cuda_array_interface__["data"]
    out = (ctypes.c_int32 * 4)()
    lib = ctypes.CDLL(sim.library_path())
    assert lib.cuMemcpyDtoH_v2(out, ctypes.c_uint64(ptr), 16) == 0
    assert list(out) == [0, 1, 2, 3]


def test_attributes_and_repr():
    dev = cudamem.to_device(np.zeros((2, 3), np.uint8))
    assert len(dev) == 2
    with pytest.raises(TypeError, match="unsized"):
        len(cudamem.to_device(np.float64(1)))
    assert "shape=(2, 3)" in repr(dev) and "uint8" in repr(dev)
    mp = dev.gpu_data
    assert isinstance(mp, cudamem.MemoryPointer)
    assert mp.owner is mp and mp.size == 6
    assert mp.device_pointer.value == mp.device_pointer_value
    assert mp.context == cudamem.current_context()
    view = mp.view(2, 4)
    assert view.owner is mp and view.size == 2
    assert view.device_pointer_value == mp.device_pointer_value + 2
    with pytest.raises(IndexError):
        mp.view(4, 10)
    assert dev.stream == 0
    with pytest.raises(TypeError):
        cudamem.DeviceNDArray()


def test_a_memory_pointer_made_again_keeps_nothing_of_the_last():
    # The module keeps freed MemoryPointers for the next allocation: one
    # made from a kept object has this allocation's pointer, size, owner
    # and no weak references of the last one's.
    import weakref
    for n in (8, 24, 8, 40):
        a = cudamem.to_device(np.arange(n, dtype=np.uint8))
        mp = a.gpu_data
        assert (mp.size, mp.owner) == (n, mp)
        assert weakref.getweakrefcount(mp) == 0
        ref = weakref.ref(mp)
        view = mp.view(1)
        assert view.owner is mp and view.size == n - 1
        np.testing.assert_array_equal(a.copy_to_host(), np.arange(n))
        del a, mp, view
        assert ref() is None


def test_a_device_array_made_again_keeps_nothing_of_the_last():
    # The same for the 1-d arrays the module keeps: each has its own
    # layout, dtype, stream, memory and weak references.
    import weakref
    s = cudamem.stream()
    for n, dtype, stream in ((8, np.uint8, 0), (3, np.float64, s),
                             (5, np.int16, 0), (4, np.complex64, s)):
        h = np.arange(n).astype(dtype)
        a = cudamem.to_device(h, stream=stream)
        assert (a.shape, a.strides, a.dtype, a.size) == \
            (h.shape, h.strides, h.dtype, h.size)
        assert a.stream is stream and a.is_c_contiguous()
        assert weakref.getweakrefcount(a) == 0
        ref = weakref.ref(a)
        cai = a.__cuda_array_interface__
        assert cai["shape"] == (n,) and cai["typestr"] == h.dtype.str
        assert cai["data"][0] == a.gpu_data.device_pointer_value
        np.testing.assert_array_equal(a[::-1].copy_to_host(), h[::-1])
        np.testing.assert_array_equal(a.copy_to_host(stream=stream), h)
        s.synchronize()
        del a
        assert ref() is None


def test_freed_through_the_queue(sim):
    deallocs = cudamem.current_context().memory_manager.deallocations
    deallocs.clear()
    base = sim.live()["device_allocations"]
    dev = cudamem.to_device(np.arange(10))
    view = dev.gpu_data.view(8)
    del dev
    assert len(deallocs) == 0  # the view keeps the memory
    del view
    assert len(deallocs) == 1
    assert sim.live()["device_allocations"] == base + 1
    deallocs.clear()
    assert sim.live()["device_allocations"] == base


def test_stale_array_after_close_and_reset():
    for kill in (cudamem.close,
                 lambda: cudamem.get_current_device().reset()):
        dev = cudamem.to_device(np.arange(3))
        kill()
        with pytest.raises(CudaDriverError, match="reset or closed"):
            dev.copy_to_host()
        with pytest.raises(CudaDriverError, match="reset or closed"):
            dev.copy_to_device(np.arange(3))
        with pytest.raises(CudaDriverError, match="reset or closed"):
            dev.__cuda_array_interface__
        del dev  # its free is dropped: the context took the memory
        fresh = cudamem.to_device(np.arange(3))
        np.testing.assert_array_equal(fresh.copy_to_host(), np.arange(3))


def test_arrays_cross_threads():
    made = {}

    def make():
        made["a"] = cudamem.to_device(np.arange(100))
        made["dev"] = cudamem.get_current_device().id

    t = threading.Thread(target=make)
    t.start()
    t.join()
    assert made["dev"] == 0
    np.testing.assert_array_equal(made["a"].copy_to_host(), np.arange(100))

    def free():
        made.pop("a")
        gc.collect()

    t = threading.Thread(target=free)
    t.start()
    t.join()
    assert "a" not in made


def test_many_threads_round_trips():
    errors = []

    def work(k):
        try:
            s = cudamem.stream()
            for i in range(50):
                host = np.full(64 + i, k * 1000 + i, np.int64)
                d = cudamem.to_device(host, stream=s if i % 2 else 0)
                out = d.copy_to_host(stream=s if i % 3 else 0)
                s.synchronize()
                if not np.array_equal(out, host):
                    errors.append((k, i))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.simulator
def test_two_devices(run_py):
    proc = run_py("""
        import numpy as np, cudamem
        from cudamem import simulator
        a = cudamem.to_device(np.arange(5))
        with cudamem.gpus[1]:
            b = cudamem.to_device(np.arange(5) * 2)
            s1 = cudamem.stream()
        assert a.gpu_data.context.device.id == 0
        assert b.gpu_data.context.device.id == 1
        # Operations enter the array's own device.
        assert list(b.copy_to_host()) == [0, 2, 4, 6, 8]
        assert cudamem.get_current_device().id == 0
        try:
            a.copy_to_host(stream=s1)
        except ValueError as exc:
            assert "device 1" in str(exc) and "device 0" in str(exc), exc
        else:
            raise SystemExit("stream of device 1 accepted for device 0")
        out = b.copy_to_host(stream=s1)
        s1.synchronize()
        assert list(out) == [0, 2, 4, 6, 8]
        del a, b, s1
        cudamem.close()
        print(simulator.live())
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    live = eval(proc.stdout)
    assert live["device_allocations"] == 0 and live["contexts"] == 0, live


@pytest.mark.simulator
def test_visible_devices(run_py):
    proc = run_py("""
        import numpy as np, cudamem
        assert len(cudamem.gpus) == 1
        a = cudamem.to_device(np.arange(3))
        print(cudamem.get_current_device().uuid)
    """, env={"CUDAMEM_SIM_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "2"})
    assert proc.returncode == 0, proc.stderr
    full = run_py("""
        import cudamem
        print(cudamem.list_devices()[2].uuid)
    """, env={"CUDAMEM_SIM_DEVICES": "3", "CUDA_VISIBLE_DEVICES": None})
    assert proc.stdout == full.stdout


def test_fork(run_py):
    proc = run_py("""
        import os, numpy as np, cudamem
        def child(expect_ok):
            pid = os.fork()
            if pid == 0:
                try:
                    d = cudamem.to_device(np.arange(3))
                    ok = list(d.copy_to_host()) == [0, 1, 2]
                    os._exit(0 if expect_ok and ok else 3)
                except cudamem.CudaDriverError as exc:
                    good = not expect_ok and "fork" in str(exc)
                    os._exit(0 if good else 4)
                except BaseException:
                    os._exit(5)
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status)
        assert child(True) == 0          # uninitialized parent
        d = cudamem.to_device(np.arange(3))
        assert child(False) == 0         # initialized parent
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_fork_grandchild_is_refused_and_the_parent_is_not(run_py):
    # The fork check compares a pid cached at load, refreshed in each fork
    # child: a grandchild is refused as a child is, and forking leaves the
    # parent's own pid (and its right to CUDA) as it was.
    proc = run_py("""
        import os, numpy as np, cudamem
        d = cudamem.to_device(np.arange(3))
        def refused():
            try:
                cudamem.to_device(np.arange(3))
            except cudamem.CudaDriverError as exc:
                return "fork" in str(exc)
            return False
        pid = os.fork()
        if pid == 0:
            ok = refused()
            pid = os.fork()
            if pid == 0:
                os._exit(0 if refused() else 3)
            _, status = os.waitpid(pid, 0)
            os._exit(0 if ok and os.waitstatus_to_exitcode(status) == 0
                     else 4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert list(cudamem.to_device(np.arange(3)).copy_to_host()) == \
            [0, 1, 2]
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_repr_shows_values_of_small_arrays():
    h = np.arange(6.0).reshape(2, 3)
    text = repr(cudamem.to_device(h))
    assert text == ("<cudamem.DeviceNDArray shape=(2, 3) dtype=float64 on "
                    "device 0\n%s>" % (h,))
    assert repr(cudamem.to_device(np.arange(3, dtype=np.int16))) == (
        "<cudamem.DeviceNDArray shape=(3,) dtype=int16 on device 0: "
        "[0 1 2]>")
    big = cudamem.to_device(np.zeros(101))
    assert repr(big) == ("<cudamem.DeviceNDArray shape=(101,) dtype=float64 "
                         "on device 0>")
    empty = cudamem.device_array((0, 4))
    assert repr(empty) == ("<cudamem.DeviceNDArray shape=(0, 4) "
                           "dtype=float64 on device 0>")
    # A strided view shows its own elements.
    view = cudamem.to_device(np.arange(10))[::-3]
    assert repr(view).endswith(": %s>" % (np.arange(10)[::-3],))


def test_repr_of_a_stale_array_does_not_raise():
    dev = cudamem.to_device(np.arange(3.0))
    cudamem.list_devices()[0].reset()
    assert repr(dev) == ("<cudamem.DeviceNDArray shape=(3,) dtype=float64 "
                         "on device 0>")
    with pytest.raises(CudaDriverError):
        dev.copy_to_host()


def test_host_reads_wait_for_the_arrays_stream(sim):
    """__array__, repr and pickling read complete data from an array bound
    to a stream, even when the stream's work finishes late."""
    import pickle
    stream = cudamem.stream()
    h = np.arange(64, dtype=np.int32)
    dev = cudamem.device_array(64, np.int32, stream=stream)
    with sim.delay(20000):
        dev.copy_to_device(h)
        np.testing.assert_array_equal(np.asarray(dev), h)
        dev.copy_to_device(h * 2)
        back = pickle.loads(pickle.dumps(dev, protocol=5))
        dev.copy_to_device(h * 3)
        assert repr(dev) == ("<cudamem.DeviceNDArray shape=(64,) dtype=int32 "
                             "on device 0\n%s>" % (h * 3,))
    np.testing.assert_array_equal(back.copy_to_host(), h * 2)
    assert back.stream == 0


@pytest.mark.parametrize("order", ["C", "F"])
def test_pickle_round_trip(order):
    import pickle
    h = np.asarray(_host((3, 4), np.complex64), order=order)
    dev = cudamem.to_device(h)
    buffers = []
    data = pickle.dumps(dev, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and buffers[0].raw().nbytes == h.nbytes
    back = pickle.loads(data, buffers=buffers)
    assert type(back) is cudamem.DeviceNDArray
    assert back.strides == dev.strides and back.dtype == dev.dtype
    np.testing.assert_array_equal(back.copy_to_host(), h)
    assert (back.gpu_data.device_pointer_value !=
            dev.gpu_data.device_pointer_value)
    # A strided view arrives C-ordered, with its own elements only.
    view = dev[::2, ::-1]
    back = pickle.loads(pickle.dumps(view))
    assert back.is_c_contiguous()
    np.testing.assert_array_equal(back.copy_to_host(), h[::2, ::-1])


def test_ravel_on_a_stream(sim):
    """numba's ravel(order='C', stream=0): the result is bound to the
    stream, and a copy (where no view exists) is made there."""
    stream = cudamem.stream()
    h = np.arange(12.0).reshape(3, 4)
    dev = cudamem.to_device(h)
    flat = dev.ravel(stream=stream)
    assert flat.stream is stream and dev.stream == 0
    assert flat.gpu_data.owner is dev.gpu_data
    sim.reset()
    copied = dev.T.ravel(stream=stream)
    # Made on the stream: every copy call is an asynchronous one.
    copies = {k: n for k, n in calls(sim).items()
              if k.startswith("cuMemcpy") and n}
    assert copies and all(k.endswith("Async") for k in copies), copies
    stream.synchronize()
    assert copied.stream is stream
    np.testing.assert_array_equal(copied.copy_to_host(), h.T.ravel())
    with pytest.raises(TypeError, match="stream"):
        dev.ravel(stream="s")


def test_copy_into_interleaved_and_overlapping_host_layouts():
    """A destination whose strides interleave without overlapping is
    written exactly; one whose elements share bytes is refused (the result
    would depend on the order of the writes), naming its strides."""
    from numpy.lib.stride_tricks import as_strided
    h = np.arange(6, dtype=np.float32).reshape(2, 3)
    dev = cudamem.to_device(h)
    buf = np.full(16, -1, np.float32)
    dst = as_strided(buf, (2, 3), (12, 8), writeable=True)
    dev.copy_to_host(dst)
    np.testing.assert_array_equal(dst, h)
    before = buf.copy()
    bad = as_strided(buf, (2, 3), (8, 4), writeable=True)
    with pytest.raises(ValueError, match=r"strides \(8, 4\) map several"):
        dev.copy_to_host(bad)
    np.testing.assert_array_equal(buf, before)
