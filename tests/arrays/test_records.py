"""DeviceRecord: numba's structured element in device memory, checked
against NumPy's numpy.void doing the same reads and writes on the host."""
import pickle

import numpy as np
import pytest

import cudamem

DT = np.dtype([("a", np.float32), ("b", np.int64, (2, 3)),
               ("c", [("x", np.uint8), ("y", np.float64)]),
               ("d", "M8[s]"), ("e", np.complex64)])


def _host(n=4):
    h = np.zeros(n, DT)
    h["a"] = np.arange(n) + 0.5
    h["b"] = np.arange(n * 6).reshape(n, 2, 3)
    h["c"]["x"] = np.arange(n) + 10
    h["c"]["y"] = np.arange(n) / 4
    h["d"] = np.arange(n).astype("M8[s]")
    h["e"] = np.arange(n) * (1 + 2j)
    return h


def _same(got, want):
    """Equal as NumPy compares structured values (bytes and dtype)."""
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


def test_to_device_of_a_void_is_a_record():
    h = _host()
    rec = cudamem.to_device(h[2])
    assert type(rec) is cudamem.DeviceRecord
    assert isinstance(rec, cudamem.DeviceNDArrayBase)
    assert not isinstance(rec, cudamem.DeviceNDArray)
    assert rec.shape == () and rec.strides == () and rec.ndim == 0
    assert rec.dtype == DT and rec.size == 1 and rec.nbytes == DT.itemsize
    assert rec.flags == {"C_CONTIGUOUS": True, "F_CONTIGUOUS": True}
    out = rec.copy_to_host()
    assert type(out) is np.ndarray and out.shape == ()
    _same(out, h[2])
    # A 0-d structured array stays an array, as in numba.
    assert type(cudamem.to_device(np.asarray(h[2]))) is cudamem.DeviceNDArray


def test_record_from_a_structured_array_index():
    h = _host()
    d = cudamem.to_device(h)
    rec = d[3]
    assert type(rec) is cudamem.DeviceRecord
    _same(rec.copy_to_host(), h[3])
    assert rec.gpu_data.owner is d.gpu_data
    assert rec.device_ctypes_pointer.value == (
        d.device_ctypes_pointer.value + 3 * DT.itemsize)
    # Negative indexes and views of views, as NumPy.
    _same(d[::-1][0].copy_to_host(), h[::-1][0])
    _same(d[1:][-1].copy_to_host(), h[1:][-1])
    # A slice stays an array.
    assert type(d[1:2]) is cudamem.DeviceNDArray


def test_field_reads_match_numpy():
    h = _host()
    rec = cudamem.to_device(h)[1]
    assert rec["a"] == h[1]["a"] and type(rec["a"]) is np.float32
    assert rec["d"] == h[1]["d"] and type(rec["d"]) is np.datetime64
    assert rec["e"] == h[1]["e"] and type(rec["e"]) is np.complex64
    # By position, as numpy.void.
    assert rec[0] == h[1][0] and rec[-1] == h[1][-1]
    sub = rec["b"]
    assert type(sub) is cudamem.DeviceNDArray
    assert sub.shape == (2, 3) and sub.dtype == np.int64
    np.testing.assert_array_equal(sub.copy_to_host(), h[1]["b"])
    nested = rec["c"]
    assert type(nested) is cudamem.DeviceRecord
    assert nested.dtype == DT["c"]
    assert nested["x"] == h[1]["c"]["x"] and nested["y"] == h[1]["c"]["y"]


def test_field_writes_match_numpy():
    h = _host()
    d = cudamem.to_device(h)
    rec = d[2]
    rec["a"] = 7.25
    rec["b"] = [1, 2, 3]          # broadcast over the sub-array
    rec["c"]["x"] = 200
    rec[4] = 1 - 1j
    rec["d"] = np.datetime64("2026-11-21T10:00:00")
    expect = h.copy()
    e = expect[2]
    e["a"] = 7.25
    e["b"] = [1, 2, 3]
    e["c"]["x"] = 200
    e[4] = 1 - 1j
    e["d"] = np.datetime64("2026-11-21T10:00:00")
    _same(d.copy_to_host(), expect)
    # Out of range for the field: NumPy 2's OverflowError on both sides.
    with pytest.raises(OverflowError):
        e["c"]["x"] = 300
    with pytest.raises(OverflowError):
        rec["c"]["x"] = 300
    _same(d.copy_to_host(), expect)
    # A nested record written whole.
    rec["c"] = np.array((5, 0.125), DT["c"])[()]
    expect[2]["c"] = (5, 0.125)
    _same(d.copy_to_host(), expect)


def test_copy_to_device_and_into_a_void():
    h = _host()
    rec = cudamem.to_device(h[0])
    rec.copy_to_device(h[3])
    _same(rec.copy_to_host(), h[3])
    # numba's tests copy a record into a numpy.void taken from an array:
    # the array sees the write.
    target = np.zeros(2, DT)
    out = rec.copy_to_host(target[1])
    _same(target[1], h[3])
    _same(target[0], np.zeros((), DT))
    assert out is not None
    with pytest.raises(TypeError, match="numpy.void of dtype"):
        rec.copy_to_host(np.zeros(1, [("q", "i4")])[0])
    with pytest.raises(TypeError, match="incompatible dtype"):
        rec.copy_to_device(np.zeros((), [("q", "i4")]))


def test_stream_methods(sim):
    h = _host()
    stream = cudamem.stream()
    rec = cudamem.to_device(h[1])
    sim.reset()
    rec.setitem("a", 3.5, stream=stream)
    assert sim.stats()["calls"].get("cuMemcpyHtoDAsync", {}).get(
        "calls", 0) + sim.stats()["calls"].get("cuMemsetD32Async", {}).get(
        "calls", 0) == 1
    assert rec.getitem("a", stream=stream) == np.float32(3.5)
    bound = rec.bind(stream)
    assert type(bound) is cudamem.DeviceRecord and bound.stream is stream
    assert bound["a"] == np.float32(3.5)


@pytest.mark.parametrize("key, exc, text", [
    ("nope", KeyError, "no field of name 'nope'"),
    (9, IndexError, "field index 9 is out of range for a record of 5"),
    (1.5, TypeError, "by name or position, not float"),
    (slice(0, 1), TypeError, "by name or position, not slice"),
])
def test_bad_field_keys(key, exc, text):
    rec = cudamem.to_device(_host()[0])
    before = rec.copy_to_host()
    with pytest.raises(exc, match=text):
        rec[key]
    with pytest.raises(exc, match=text):
        rec[key] = 1
    _same(rec.copy_to_host(), before)


def test_bad_field_values_write_nothing():
    rec = cudamem.to_device(_host()[0])
    before = rec.copy_to_host()
    with pytest.raises(ValueError):
        rec["b"] = [1, 2]                 # does not broadcast to (2, 3)
    with pytest.raises(ValueError):
        rec["a"] = "not a number"
    with pytest.raises(ValueError, match="cannot delete"):
        del rec["a"]
    _same(rec.copy_to_host(), before)


def test_repr_and_pickle():
    h = _host()
    rec = cudamem.to_device(h[1])
    text = repr(rec)
    assert text.startswith("<cudamem.DeviceRecord shape=() dtype=")
    assert text.endswith(": %s>" % (h[1],))
    back = pickle.loads(pickle.dumps(rec, protocol=5))
    assert type(back) is cudamem.DeviceRecord
    _same(back.copy_to_host(), h[1])


def test_cuda_array_interface_of_a_record():
    rec = cudamem.to_device(_host()[0])
    cai = rec.__cuda_array_interface__
    assert cai["shape"] == () and cai["typestr"] == DT.str
    assert cai["descr"] == DT.descr
    assert cai["data"][0] == rec.device_ctypes_pointer.value
