"""Views and element moves of DeviceNDArray against NumPy: indexing,
reshape, ravel, squeeze, view(dtype), transpose, split, bind, assignment,
fill, copy, and copies between any layouts. Property-based (hypothesis):
each case does the same operation on a NumPy array and on its device copy
and compares layouts and values."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

import cudamem

DTYPES = [np.bool_, np.int8, np.uint16, np.int32, np.int64, np.float32,
          np.float64, np.complex128, "M8[s]",
          np.dtype([("a", np.int16), ("b", np.float64)])]

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    if dtype.fields:
        out = np.zeros(n, dtype)
        out["a"] = rng.integers(-100, 100, n)
        out["b"] = rng.standard_normal(n)
    elif dtype.kind == "M":
        out = rng.integers(0, 10 ** 9, n).astype(dtype)
    elif dtype.kind == "b":
        out = rng.integers(0, 2, n).astype(dtype)
    else:
        out = (rng.standard_normal(n) * 50).astype(dtype)
    return out.reshape(shape)


@hst.composite
def arrays(draw, max_dims=5):
    ndim = draw(hst.integers(0, max_dims))
    shape = tuple(draw(hst.lists(hst.integers(0, 5), min_size=ndim,
                                 max_size=ndim)))
    dtype = draw(hst.sampled_from(DTYPES))
    order = draw(hst.sampled_from("CF"))
    host = np.asarray(_values(shape, dtype, draw(hst.integers(0, 99))),
                      order=order)
    return host


@hst.composite
def index_for(draw, shape):
    key = []
    for n in shape:
        kind = draw(hst.sampled_from(["slice", "slice", "int", "all"]))
        if kind == "int" and n > 0:
            key.append(draw(hst.integers(-n, n - 1)))
        elif kind == "slice":
            start = draw(hst.one_of(hst.none(), hst.integers(-n - 2, n + 2)))
            stop = draw(hst.one_of(hst.none(), hst.integers(-n - 2, n + 2)))
            step = draw(hst.one_of(hst.none(),
                                   hst.integers(-3, 3).filter(bool)))
            key.append(slice(start, stop, step))
        else:
            key.append(slice(None))
    if key and draw(hst.booleans()):
        key.insert(draw(hst.integers(0, len(key))), None)
    if len(key) > 1 and draw(hst.booleans()):
        cut = draw(hst.integers(0, len(key) - 1))
        key = key[:cut] + [Ellipsis]
    return tuple(key)


def _same(dev, ref):
    out = dev.copy_to_host()
    assert out.shape == ref.shape and out.dtype == ref.dtype
    np.testing.assert_array_equal(out, ref)


@SETTINGS
@given(hst.data())
def test_indexing_matches_numpy(data):
    host = data.draw(arrays())
    key = data.draw(index_for(host.shape))
    dev = cudamem.to_device(host)
    ref = host[key]
    got = dev[key]
    if isinstance(ref, np.ndarray):
        assert got.shape == ref.shape
        assert got.strides == ref.strides
        assert got.flags == {"C_CONTIGUOUS": ref.flags.c_contiguous,
                             "F_CONTIGUOUS": ref.flags.f_contiguous}
        _same(got, ref)
        # A view shares the memory: writing through it shows in the base.
        if ref.size:
            fill = _values(ref.shape, host.dtype, 7)
            got.copy_to_device(fill)
            host2 = host.copy()
            host2[key] = fill
            _same(dev, host2)
    elif isinstance(ref, np.void):
        # numba: a structured element is a DeviceRecord, not a host value.
        assert type(got) is cudamem.DeviceRecord
        assert got.copy_to_host().tobytes() == ref.tobytes()
    else:
        assert type(got) is type(ref)
        assert got == ref or (np.isnan(got) and np.isnan(ref))


@SETTINGS
@given(hst.data())
def test_copy_to_strided_host_destination(data):
    host = data.draw(arrays())
    key = data.draw(index_for(host.shape))
    ref = host[key]
    if not isinstance(ref, np.ndarray):
        return
    dev = cudamem.to_device(np.ascontiguousarray(ref))
    dest = np.zeros_like(host)
    before = dest.copy()
    dev.copy_to_host(dest[key])
    before[key] = ref
    np.testing.assert_array_equal(dest, before)


@SETTINGS
@given(hst.data())
def test_to_device_of_any_layout(data):
    host = data.draw(arrays())
    key = data.draw(index_for(host.shape))
    view = host[key]
    if not isinstance(view, np.ndarray):
        return
    _same(cudamem.to_device(view), view)
    if view.ndim and view.size:
        wide = np.broadcast_to(view[..., :1], view.shape)
        _same(cudamem.to_device(wide), wide)


@SETTINGS
@given(hst.data())
def test_assignment_matches_numpy(data):
    host = data.draw(arrays(max_dims=4))
    key = data.draw(index_for(host.shape))
    dev = cudamem.to_device(host)
    target = host[key]
    shape = np.shape(target)
    kind = data.draw(hst.sampled_from(["scalar", "host", "device", "bcast"]))
    if kind == "scalar" or not shape:
        value = _values((), host.dtype, 3)[()]
    elif kind == "host":
        value = _values(shape, host.dtype, 4)
    elif kind == "device":
        value = cudamem.to_device(_values(shape, host.dtype, 5))
    else:
        value = _values(shape[-1:], host.dtype, 6)
    ref = host.copy()
    ref[key] = value.copy_to_host() if kind == "device" and shape else value
    dev[key] = value
    _same(dev, ref)


@SETTINGS
@given(hst.data())
def test_reshape_ravel_transpose(data):
    host = data.draw(arrays())
    key = data.draw(index_for(host.shape))
    view = host[key]
    if not isinstance(view, np.ndarray):
        return
    dev = cudamem.to_device(host)[key]
    order = data.draw(hst.sampled_from("CFA"))
    _same(dev.ravel(order=order), view.ravel(order=order))
    _same(dev.reshape(-1, order=order), view.reshape(-1, order=order))
    if view.size:
        shape = (view.size // view.shape[-1] if view.ndim else 1, -1)
        _same(dev.reshape(shape), view.reshape(shape))
    _same(dev.T, view.T)
    assert dev.T.strides == view.T.strides
    axes = data.draw(hst.permutations(range(view.ndim)))
    _same(dev.transpose(axes), view.transpose(axes))
    _same(dev.squeeze(), view.squeeze())
    _same(dev.copy(order=order), view.copy(order=order))


def test_reshape_is_a_view_when_numpy_views():
    host = np.arange(24.0).reshape(4, 6)
    dev = cudamem.to_device(host)
    r = dev.reshape(2, 12)
    assert r.gpu_data.owner is dev.gpu_data.owner
    assert r.strides == host.reshape(2, 12).strides
    strided = dev[:, ::2].reshape(12)  # one stride of 16 bytes: a view
    assert strided.gpu_data.owner is dev.gpu_data.owner
    assert strided.strides == host[:, ::2].reshape(12).strides
    copied = dev[:, :3].reshape(12)  # no single stride: a copy
    assert copied.gpu_data.owner is not dev.gpu_data.owner
    _same(copied, host[:, :3].reshape(12))


@pytest.mark.parametrize("shape", [(2**62, 4), (-1, 2**62, 4),
                                   (4, 2**62, 2**62)])
def test_reshape_to_more_elements_than_fit(shape):
    # The product of the dimensions overflows: NumPy says the size cannot
    # match (checked by the overflow, not by a wrapped product).
    host = np.zeros(0)
    with pytest.raises(ValueError) as want:
        host.reshape(shape)
    with pytest.raises(ValueError) as got:
        cudamem.device_array(0).reshape(shape)
    # NumPy names the shape with -1 filled in; cudamem names it as given.
    prefix = "cannot reshape array of size 0 into shape "
    assert str(want.value).startswith(prefix)
    assert str(got.value) == prefix + str(shape)


def test_view_dtype():
    host = np.arange(12, dtype=np.int32).reshape(3, 4)
    dev = cudamem.to_device(host)
    _same(dev.view(np.float32), host.view(np.float32))
    _same(dev.view(np.int64), host.view(np.int64))
    _same(dev.view(np.int16), host.view(np.int16))
    with pytest.raises(ValueError, match="last axis must be contiguous"):
        dev[:, ::2].view(np.int64)
    with pytest.raises(ValueError, match="divisor"):
        cudamem.to_device(np.zeros(3, np.int8)).view(np.int16)
    with pytest.raises(ValueError, match="0d array"):
        cudamem.to_device(np.int32(1)).view(np.int64)


def test_split_and_bind(sim):
    dev = cudamem.to_device(np.arange(10))
    parts = dev.split(4)
    assert [p.shape for p in parts] == [(4,), (4,), (2,)]
    for i, p in enumerate(parts):
        _same(p, np.arange(10)[i * 4:(i + 1) * 4])
    s = cudamem.stream()
    assert all(p.stream is s for p in dev.split(3, stream=s))
    with pytest.raises(ValueError, match="positive"):
        dev.split(0)
    with pytest.raises(ValueError, match="1D"):
        cudamem.device_array((2, 2)).split(1)
    bound = dev.bind(s)
    assert bound.stream is s and dev.stream == 0
    sim.reset()
    bound.copy_to_host()
    s.synchronize()
    assert sim.stats()["calls"]["cuMemcpyDtoHAsync"]["calls"] == 1


def test_scalar_reads():
    host = np.arange(12.0).reshape(3, 4)
    dev = cudamem.to_device(host)
    assert dev[1, 2] == host[1, 2] and isinstance(dev[1, 2], np.float64)
    assert dev[-1, -1] == host[-1, -1]
    zero_d = cudamem.to_device(np.float32(3.5))
    assert zero_d[()] == np.float32(3.5)
    s = cudamem.stream()
    on_s = cudamem.to_device(host, stream=s)
    assert on_s[2, 3] == 11.0


@pytest.mark.parametrize("key, exc, text", [
    ((0, 0, 0), IndexError, "too many indices"),
    (5, IndexError, "out of bounds"),
    ((Ellipsis, Ellipsis), IndexError, "single ellipsis"),
    ([0, 1], TypeError, "not supported"),
    (np.array([True, False, True]), TypeError, "not supported"),
    ("a", IndexError, "valid indices"),
    (1.5, IndexError, "valid indices"),
])
def test_bad_indexes(key, exc, text):
    dev = cudamem.to_device(np.zeros((3, 4)))
    with pytest.raises(exc, match=text):
        dev[key]
    with pytest.raises(exc, match=text):
        dev[key] = 1


def test_bad_view_arguments():
    dev = cudamem.to_device(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="cannot reshape"):
        dev.reshape(4, 2)
    with pytest.raises(ValueError, match="cannot reshape"):
        dev.reshape(-1, 4)
    with pytest.raises(ValueError, match="order"):
        dev.reshape(6, order="X")
    with pytest.raises(ValueError, match="axes"):
        dev.transpose((0,))
    with pytest.raises(ValueError, match=r"invalid axes list \(0, 0\)"):
        dev.transpose((0, 0))
    with pytest.raises(ValueError, match="size not equal to one"):
        dev.squeeze(axis=0)
    with pytest.raises(ValueError, match="out of bounds"):
        dev.squeeze(axis=5)
    with pytest.raises(ValueError, match="could not broadcast"):
        dev[...] = np.zeros(4)
    with pytest.raises(TypeError, match="do not cast"):
        dev[...] = cudamem.to_device(np.zeros((2, 3), np.float32))


def test_fill_and_memset(sim):
    dev = cudamem.device_array((64, 64), np.float32)
    sim.reset()
    dev.fill(0)
    calls = {k: v["calls"] for k, v in sim.stats()["calls"].items()}
    assert sum(calls[k] for k in calls if k.startswith("cuMemset")) == 1
    assert sum(calls[k] for k in calls if k.startswith("cuMemcpy")) == 0
    _same(dev, np.zeros((64, 64), np.float32))
    dev[::2, 1::3] = 2.5
    ref = np.zeros((64, 64), np.float32)
    ref[::2, 1::3] = 2.5
    _same(dev, ref)
    big = cudamem.device_array(5, np.complex128)
    big.fill(1 + 2j)
    _same(big, np.full(5, 1 + 2j))


def test_two_d_slice_is_one_copy(sim):
    host = np.arange(256 * 256, dtype=np.float32).reshape(256, 256)
    dev = cudamem.to_device(host)
    view = dev[::2, 64:192]
    sim.reset()
    out = view.copy_to_host()
    stats = sim.stats()["calls"]
    twod = {k: v for k, v in stats.items()
            if k.startswith("cuMemcpy2D") and v["calls"]}
    assert sum(v["calls"] for v in twod.values()) == 1
    assert sum(v["bytes"] for v in twod.values()) == view.nbytes
    np.testing.assert_array_equal(out, host[::2, 64:192])


def test_array_protocols():
    host = np.arange(6).reshape(2, 3)
    dev = cudamem.to_device(host)
    np.testing.assert_array_equal(np.asarray(dev), host)
    assert np.asarray(dev, dtype=np.float32).dtype == np.float32
    with pytest.raises(ValueError, match="copy=False"):
        dev.__array__(copy=False)
    with pytest.raises(BufferError, match="copy_to_host"):
        memoryview(dev)
    assert dev.__cuda_memory__ and dev.__cuda_ndarray__


def test_device_array_like():
    for host in (np.zeros((3, 4), order="F"), np.zeros((3, 4)),
                 np.zeros((4, 6, 2))[::2].transpose(2, 0, 1)):
        dev = cudamem.device_array_like(host)
        assert dev.shape == host.shape and dev.dtype == host.dtype
        ref = np.empty_like(host)
        if host.flags.c_contiguous or host.flags.f_contiguous:
            assert dev.strides == host.strides
        else:
            assert sorted(dev.strides) == sorted(ref.strides)
    like_dev = cudamem.device_array_like(cudamem.device_array((2, 5)))
    assert like_dev.shape == (2, 5)
