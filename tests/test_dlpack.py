"""DLPack for device arrays: DeviceNDArray.__dlpack__ and
__dlpack_device__ (the Python array API standard) and cudamem.from_dlpack.
NumPy is the reference for data; capsules are read through ctypes as in
test_dlpack_export.py; the simulator's counters say how streams were
ordered."""
import ctypes
import gc

import numpy as np
import pytest

import cudamem
from test_dlpack_export import KDL_CPU, KDL_CUDA_MANAGED
from test_dlpack_export import managed as tensor_of

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
