"""DLPack for device arrays: DeviceNDArray.__dlpack__ and
__dlpack_device__ (the Python array API standard) and cudamem.from_dlpack.
NumPy is the reference for data; capsules are read through ctypes as in
test_dlpack_capsule.py; the simulator's counters say how streams were
ordered."""
import ctypes
import gc

import numpy as np
import pytest

import cudamem
from tests.helpers.interop import KDL_CPU, KDL_CUDA_MANAGED
from tests.helpers.interop import managed as tensor_of

pytestmark = pytest.mark.simulator

KDL_CUDA = 2


def calls(sim, name):
    return sim.stats()["calls"].get(name, {}).get("calls", 0)


def host_waits(sim):
    return sum(calls(sim, n) for n in ("cuStreamSynchronize",
                                       "cuEventSynchronize",
                                       "cuCtxSynchronize"))


LAYOUTS = [
    ((4, 6), np.float32, ()),
    ((4, 6), np.float64, (slice(None, None, 2), slice(None, None, -3))),
    ((3, 4, 5), np.int16, "T"),
    ((10,), np.uint8, (slice(7, 2, -2),)),
    ((3,), np.bool_, ()),
    ((6,), np.complex128, ()),
    ((), np.float32, ()),
    ((0, 3), np.int64, ()),
]

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
          np.uint16, np.uint32, np.uint64, np.float16, np.float32,
          np.float64, np.complex64, np.complex128]


def layout(case):
    shape, dtype, index = LAYOUTS[case]
    ref = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    d = cudamem.to_device(ref)
    if index == "T":
        return ref.T, d.T
    return (ref[index], d[index]) if index else (ref, d)


def test_dlpack_device():
    d = cudamem.device_array(4)
    assert d.__dlpack_device__() == (KDL_CUDA, 0)
    m = cudamem.managed_array(4).device_array()
    assert m.__dlpack_device__() == (KDL_CUDA_MANAGED, 0)


@pytest.mark.parametrize("case", range(len(LAYOUTS)))
@pytest.mark.parametrize("versioned", [False, True])
def test_capsule_fields(case, versioned):
    ref, d = layout(case)
    cap = d.__dlpack__(max_version=(1, 1) if versioned else None)
    t = tensor_of(cap, versioned)
    if versioned:
        assert (t.major, t.minor) == (1, 1)
        assert t.flags == 0
    dl = t.dl_tensor
    assert (dl.device.device_type, dl.device.device_id) == (KDL_CUDA, 0)
    assert (dl.data or 0) + dl.byte_offset == \
        d.device_ctypes_pointer.value or d.size == 0
    assert dl.ndim == ref.ndim
    assert [dl.shape[i] for i in range(dl.ndim)] == list(ref.shape)
    assert [dl.strides[i] for i in range(dl.ndim)] == \
        [s // ref.itemsize for s in d.strides]
    assert (dl.dtype.bits, dl.dtype.lanes) == (ref.itemsize * 8, 1)


def test_legacy_capsule_for_old_consumers():
    d = cudamem.device_array(3)
    assert "\"dltensor\"" in repr(d.__dlpack__())
    assert "\"dltensor\"" in repr(d.__dlpack__(max_version=(0, 8)))
    assert "dltensor_versioned" in repr(d.__dlpack__(max_version=(2, 0)))


@pytest.mark.parametrize("case", range(len(LAYOUTS)))
def test_host_copy_numpy_reads(case):
    ref, d = layout(case)
    got = np.from_dlpack(d, device="cpu", copy=True)
    np.testing.assert_array_equal(got, ref)
    cap = d.__dlpack__(dl_device=(KDL_CPU, 0), copy=True, max_version=(1, 0))
    assert tensor_of(cap, True).dl_tensor.device.device_type == KDL_CPU


def test_device_memory_is_not_cpu_memory():
    d = cudamem.to_device(np.arange(4))
    with pytest.raises(BufferError, match="copy=True"):
        d.__dlpack__(dl_device=(KDL_CPU, 0))
    with pytest.raises(BufferError, match="copy=True"):
        d.__dlpack__(dl_device=(KDL_CPU, 0), copy=False)
    with pytest.raises((BufferError, RuntimeError)):
        np.from_dlpack(d)
    with pytest.raises(BufferError, match="DLPack device"):
        d.__dlpack__(dl_device=(KDL_CUDA, 5))


@pytest.mark.parametrize("bad, error, match", [
    (0, ValueError, "ambiguous"), (-2, ValueError, "not a CUDA stream"),
    ("1", TypeError, "stream must be"), (True, TypeError, "stream must be"),
])
def test_streams_the_standard_refuses(bad, error, match):
    d = cudamem.device_array(4)
    with pytest.raises(error, match=match):
        d.__dlpack__(stream=bad)


def test_bad_arguments():
    d = cudamem.device_array(4)
    with pytest.raises(TypeError, match="keyword"):
        d.__dlpack__(None)
    with pytest.raises(TypeError, match="max_version"):
        d.__dlpack__(max_version=1)
    with pytest.raises(TypeError, match="dl_device"):
        d.__dlpack__(dl_device="cuda")
    with pytest.raises(TypeError):
        d.__dlpack__(bogus=1)


def _writer(sim, stream):
    """A device array bound to `stream` with 0.2 s of writes queued."""
    d = cudamem.device_array(1 << 16, np.int64, stream=stream)
    d.copy_to_device(np.arange(1 << 16), stream=stream)
    return d


def _read_on(d, stream):
    out = cudamem.device_array(d.shape, d.dtype, stream=stream)
    out.copy_to_device(d, stream=stream)
    return out


def test_consumer_stream_waits_on_the_device(sim):
    a, b = cudamem.stream(), cudamem.stream()
    sim.set_hazards(True)
    try:
        with sim.delay(200000):
            d = _writer(sim, a)
            waits, orders = host_waits(sim), calls(sim, "cuStreamWaitEvent")
            d.__dlpack__(stream=int(b))
            assert host_waits(sim) == waits
            assert calls(sim, "cuStreamWaitEvent") == orders + 1
            before = sim.hazard_count()
            out = _read_on(d, b)
            b.synchronize()
            assert sim.hazard_count() == before
        np.testing.assert_array_equal(out.copy_to_host(), np.arange(1 << 16))
    finally:
        sim.set_hazards(False)


@pytest.mark.expect_hazards
def test_minus_one_orders_nothing(sim):
    a, b = cudamem.stream(), cudamem.stream()
    sim.set_hazards(True)
    try:
        with sim.delay(200000):
            d = _writer(sim, a)
            orders = calls(sim, "cuStreamWaitEvent")
            d.__dlpack__(stream=-1)
            assert calls(sim, "cuStreamWaitEvent") == orders
            before = sim.hazard_count()
            _read_on(d, b)
            cudamem.synchronize()
            assert sim.hazard_count() > before
    finally:
        sim.set_hazards(False)


def test_same_stream_needs_no_event(sim):
    s = cudamem.stream()
    d = cudamem.device_array(4, stream=s)
    orders = calls(sim, "cuEventRecord")
    d.__dlpack__(stream=int(s))
    cudamem.device_array(4).__dlpack__()  # 0 and None: the legacy stream
    cudamem.device_array(4).__dlpack__(stream=1)
    assert calls(sim, "cuEventRecord") == orders


@pytest.mark.parametrize("entry", ["cuEventCreate", "cuEventRecord",
                                   "cuStreamWaitEvent"])
def test_event_faults_leak_nothing(sim, entry):
    s = cudamem.stream()
    d = cudamem.device_array(4, stream=s)
    sim.inject(entry, sim.error_code("CUDA_ERROR_UNKNOWN"))
    with pytest.raises(cudamem.CudaAPIError):
        d.__dlpack__(stream=1)
    d.__dlpack__(stream=1)


# ------------------------------------------------------------------------
# cudamem.from_dlpack


class _Capsule:
    """A producer handing out one capsule it already has."""

    def __init__(self, capsule, device=(KDL_CUDA, 0)):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None,
                   copy=None):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


class _Producer:
    """Wraps a DeviceNDArray; `legacy` producers predate max_version.
    Records the keyword arguments of each call."""

    def __init__(self, array, legacy=False):
        self.array, self.legacy, self.calls = array, legacy, []

    def __dlpack__(self, **kw):
        self.calls.append(dict(kw))
        if self.legacy and "max_version" in kw:
            raise TypeError("unexpected keyword argument 'max_version'")
        return self.array.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.mark.parametrize("case", range(len(LAYOUTS)))
def test_round_trip_shares_memory(case):
    ref, d = layout(case)
    x = cudamem.from_dlpack(d)
    assert isinstance(x, cudamem.DeviceNDArray)
    assert x.device_ctypes_pointer.value == d.device_ctypes_pointer.value
    assert (x.shape, x.strides, x.dtype) == (d.shape, d.strides, d.dtype)
    np.testing.assert_array_equal(x.copy_to_host(), ref)
    if ref.size:
        x[...] = 1
        np.testing.assert_array_equal(d.copy_to_host(), np.ones_like(ref))
        d[...] = 0
        np.testing.assert_array_equal(x.copy_to_host(), np.zeros_like(ref))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype(dtype):
    ref = (np.arange(6) % 3).astype(dtype)
    x = cudamem.from_dlpack(cudamem.to_device(ref))
    assert x.dtype == ref.dtype
    np.testing.assert_array_equal(x.copy_to_host(), ref)
    host = cudamem.from_dlpack(ref)
    np.testing.assert_array_equal(host.copy_to_host(), ref)


def test_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    ref = np.arange(4).astype(ml_dtypes.bfloat16)
    x = cudamem.from_dlpack(cudamem._cudamem._dlpack_export(ref, KDL_CPU, 0))
    assert x.dtype == ref.dtype
    np.testing.assert_array_equal(x.copy_to_host(), ref)


@pytest.mark.parametrize("case", range(len(LAYOUTS)))
def test_numpy_producer_is_copied(case):
    ref, _ = layout(case)
    x = cudamem.from_dlpack(ref)
    assert x.is_c_contiguous()
    np.testing.assert_array_equal(x.copy_to_host(), ref)
    with pytest.raises(BufferError, match="copy=False"):
        cudamem.from_dlpack(ref, copy=False)


def test_copy_true_copies():
    d = cudamem.to_device(np.arange(6.0))
    x = cudamem.from_dlpack(d, copy=True)
    assert x.device_ctypes_pointer.value != d.device_ctypes_pointer.value
    np.testing.assert_array_equal(x.copy_to_host(), np.arange(6.0))


def test_device_copy():
    d = cudamem.to_device(np.arange(8.0))[::2]
    cap = d.__dlpack__(copy=True)
    dl = tensor_of(cap, False).dl_tensor
    assert dl.data != d.device_ctypes_pointer.value
    assert [dl.strides[i] for i in range(dl.ndim)] == [1]
    back = cudamem.from_dlpack(_Capsule(cap))
    np.testing.assert_array_equal(back.copy_to_host(), np.arange(0, 8.0, 2))


def test_capsule_keeps_memory_alive(sim):
    d = cudamem.to_device(np.arange(5))
    cap = d.__dlpack__()
    live = sim.live()
    del d
    gc.collect()
    assert sim.live() == live
    back = cudamem.from_dlpack(_Capsule(cap))
    np.testing.assert_array_equal(back.copy_to_host(), np.arange(5))


@pytest.mark.parametrize("legacy", [False, True])
def test_versioned_and_legacy_producers(legacy):
    d = cudamem.to_device(np.arange(4))
    p = _Producer(d, legacy)
    x = cudamem.from_dlpack(p)
    assert x.device_ctypes_pointer.value == d.device_ctypes_pointer.value
    assert p.calls[0] == dict(stream=1, max_version=(1, 1))
    assert p.calls[-1] == dict(stream=1) if legacy else len(p.calls) == 1
    assert len(p.calls) == (2 if legacy else 1)


def test_bare_capsules_and_consumed_ones():
    d = cudamem.to_device(np.arange(4))
    for versioned in (False, True):
        cap = d.__dlpack__(max_version=(1, 1) if versioned else None)
        x = cudamem.from_dlpack(cap)
        np.testing.assert_array_equal(x.copy_to_host(), np.arange(4))
        with pytest.raises(ValueError, match="already consumed"):
            cudamem.from_dlpack(cap)


class _Owner:
    pass


def test_deleter_runs_once_when_last_reference_goes():
    import weakref
    owner, freed = _Owner(), []
    weakref.finalize(owner, freed.append, 1)
    base = np.arange(6.0)
    owner.base = base

    class Tracked(np.ndarray):
        pass

    view = base.view(Tracked)
    view.owner = owner
    cap = cudamem._cudamem._dlpack_export(view, KDL_CPU, 0, (1, 1))
    del view, owner
    gc.collect()
    assert freed == []
    x = cudamem.from_dlpack(cap)
    del cap
    gc.collect()
    # The device copy is complete: the producer's memory is let go, once.
    assert freed == [1]
    np.testing.assert_array_equal(x.copy_to_host(), np.arange(6.0))
    del x
    gc.collect()
    assert freed == [1]


def test_zero_copy_deleter_waits_for_views(sim):
    m = cudamem.managed_array(6, np.float64)
    m[:] = np.arange(6.0)
    cap = m.device_array().__dlpack__(max_version=(1, 1))
    x = cudamem.from_dlpack(cap)
    assert x.__dlpack_device__() == (KDL_CUDA, 0)
    v = x[1:]
    del cap, x, m
    gc.collect()
    np.testing.assert_array_equal(v.copy_to_host(), np.arange(1.0, 6.0))


def test_mapped_and_managed_producers():
    mapped = cudamem.mapped_array(5, np.int32)
    mapped[:] = np.arange(5)
    x = cudamem.from_dlpack(mapped)
    x[...] = 7
    np.testing.assert_array_equal(mapped, np.full(5, 7))
    managed = cudamem.managed_array(5, np.int32)
    managed[:] = np.arange(5)
    y = cudamem.from_dlpack(managed)
    np.testing.assert_array_equal(y.copy_to_host(), np.arange(5))
    y[...] = 3
    cudamem.synchronize()
    np.testing.assert_array_equal(managed, np.full(5, 3))


def test_read_only_producer():
    ref = np.arange(4.0)
    ref.flags.writeable = False
    mapped = cudamem.mapped_array(4)
    mapped[:] = ref
    cap = cudamem._cudamem._dlpack_export(
        mapped, 3, 0, max_version=(1, 1))
    assert tensor_of(cap, True).flags == 0
    mapped.flags.writeable = False
    cap = cudamem._cudamem._dlpack_export(mapped, 3, 0, max_version=(1, 1))
    x = cudamem.from_dlpack(cap)
    np.testing.assert_array_equal(x.copy_to_host(), ref)
    with pytest.raises(Exception, match="read-only"):
        x[...] = 1


def test_stream_handshake_orders_the_consumer(sim):
    a, b = cudamem.stream(), cudamem.stream()
    sim.set_hazards(True)
    try:
        with sim.delay(200000):
            d = _writer(sim, a)
            p = _Producer(d)
            waits = host_waits(sim)
            x = cudamem.from_dlpack(p, stream=b)
            assert p.calls[0]["stream"] == int(b)
            assert host_waits(sim) == waits
            before = sim.hazard_count()
            out = _read_on(x, b)
            b.synchronize()
            assert sim.hazard_count() == before
        np.testing.assert_array_equal(out.copy_to_host(), np.arange(1 << 16))
    finally:
        sim.set_hazards(False)


def _malformed(mutate, versioned=True):
    """A cudamem capsule whose tensor `mutate` damages, and whether its
    deleter ran (through the exporting array's weakref)."""
    import weakref
    d = cudamem.to_device(np.arange(4.0))
    cap = d.__dlpack__(max_version=(1, 1) if versioned else None)
    mutate(tensor_of(cap, versioned))
    alive = weakref.ref(d)
    del d
    return cap, alive


@pytest.mark.parametrize("mutate, error, match", [
    (lambda t: setattr(t.dl_tensor.device, "device_type", 4), BufferError,
     "device type 4"),
    (lambda t: setattr(t.dl_tensor.dtype, "lanes", 4), BufferError,
     "4 lanes"),
    (lambda t: setattr(t.dl_tensor.dtype, "code", 99), BufferError,
     "code 99"),
    (lambda t: setattr(t.dl_tensor, "ndim", -1), BufferError, "ndim -1"),
    (lambda t: t.dl_tensor.shape.__setitem__(0, -3), BufferError,
     "shape -3"),
    (lambda t: setattr(t.dl_tensor, "data", None), BufferError,
     "NULL data"),
])
def test_malformed_tensors_are_refused_and_deleted(mutate, error, match):
    cap, alive = _malformed(mutate)
    with pytest.raises(error, match=match):
        cudamem.from_dlpack(cap)
    del cap
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_stride_whose_extent_wraps_is_refused(where):
    # One byte per element and a stride of 2**63 - 1: the last element
    # lies past the largest address, and a sum that wrapped once let a
    # CPU tensor through to a read of a wild address.
    x = np.arange(4, dtype=np.uint8)
    cap = (np.from_dlpack(x).__dlpack__(max_version=(1, 0))
           if where == "cpu" else
           cudamem.to_device(x).__dlpack__(max_version=(1, 0)))
    t = tensor_of(cap, True).dl_tensor
    t.shape[0] = 2
    t.strides = (ctypes.c_int64 * 1)(2 ** 63 - 1)
    with pytest.raises(ValueError, match="array is too big"):
        cudamem.from_dlpack(cap)


def test_strides_null_and_byte_offset():
    def mutate(t):
        t.dl_tensor.strides = None
        t.dl_tensor.byte_offset = 8
        t.dl_tensor.shape[0] = 3
    cap, _ = _malformed(mutate, versioned=False)
    x = cudamem.from_dlpack(cap)
    np.testing.assert_array_equal(x.copy_to_host(), np.arange(1.0, 4.0))


def test_bad_capsules_and_arguments():
    import ctypes as c
    c.pythonapi.PyCapsule_New.restype = c.py_object
    c.pythonapi.PyCapsule_New.argtypes = [c.c_void_p, c.c_char_p, c.c_void_p]
    other = c.pythonapi.PyCapsule_New(8, b"other", None)
    with pytest.raises(ValueError, match="other"):
        cudamem.from_dlpack(other)
    with pytest.raises(TypeError, match="__dlpack__"):
        cudamem.from_dlpack(object())
    with pytest.raises(TypeError):
        cudamem.from_dlpack(np.arange(3), None)
    with pytest.raises(ValueError):
        cudamem.from_dlpack(np.arange(3), device=7)


@pytest.mark.parametrize("entry", ["cuMemAlloc", "cuMemcpyHtoD"])
def test_copy_faults_leak_nothing(sim, entry):
    sim.inject(entry, sim.error_code("CUDA_ERROR_UNKNOWN"))
    with pytest.raises(cudamem.CudaAPIError):
        cudamem.from_dlpack(np.arange(4.0))
    np.testing.assert_array_equal(
        cudamem.from_dlpack(np.arange(4.0)).copy_to_host(), np.arange(4.0))


@pytest.mark.parametrize("mutate", [
    lambda t: t.dl_tensor.shape.__setitem__(0, 5),
    lambda t: setattr(t.dl_tensor, "byte_offset", 8),
    lambda t: t.dl_tensor.strides.__setitem__(0, 2),
])
def test_tensor_leaving_its_allocation_is_refused(mutate):
    # As for a CUDA Array Interface import: the extent is checked against
    # the allocation (cuPointerGetAttributes' range) before anything is
    # made.
    cap, alive = _malformed(mutate)
    with pytest.raises(ValueError, match="outside its allocation of 32 "
                       "bytes"):
        cudamem.from_dlpack(cap)
    del cap
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("copy", ["yes", 1, 0.0, np.int8(1)])
def test_copy_must_be_a_bool_or_none(copy):
    # The array API's copy is Optional[bool] (NumPy's bools included):
    # anything else is refused, on import and on export, naming the value.
    d = cudamem.to_device(np.arange(4.0))
    with pytest.raises(TypeError, match="copy must be True, False or None"
                       ", not " + repr(copy).replace("(", r"\(").replace(
                           ")", r"\)")):
        cudamem.from_dlpack(d, copy=copy)
    with pytest.raises(TypeError, match="copy must be"):
        d.__dlpack__(copy=copy)


def test_numpy_bool_copy_is_a_bool():
    d = cudamem.to_device(np.arange(4.0))
    x = cudamem.from_dlpack(d, copy=np.True_)
    assert x.device_ctypes_pointer.value != d.device_ctypes_pointer.value
    np.testing.assert_array_equal(x.copy_to_host(), np.arange(4.0))


def test_extent_question_fault_deletes_the_tensor(sim):
    # The extent check's one driver call failing: the error names it, the
    # producer's deleter runs, and a second import of the same data works.
    cap, alive = _malformed(lambda t: None)
    sim.inject("cuPointerGetAttributes", sim.error_code("CUDA_ERROR_UNKNOWN"))
    with pytest.raises(cudamem.CudaAPIError, match="cuPointerGetAttributes"):
        cudamem.from_dlpack(cap)
    del cap
    gc.collect()
    assert alive() is None
    d = cudamem.to_device(np.arange(4.0))
    np.testing.assert_array_equal(
        cudamem.from_dlpack(d.__dlpack__(max_version=(1, 1))).copy_to_host(),
        np.arange(4.0))
