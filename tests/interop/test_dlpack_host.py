"""__dlpack__ and __dlpack_device__ of MappedNDArray and ManagedNDArray
(the Python array API standard): NumPy is the consumer and the
reference; the capsule's fields are read back through ctypes as in
test_dlpack_capsule.py."""
import gc

import numpy as np
import pytest

import cudamem
from tests.helpers.interop import (
    KDL_CPU,
    KDL_CUDA_HOST,
    KDL_CUDA_MANAGED,
)
from tests.helpers.interop import managed as tensor_of

pytestmark = pytest.mark.simulator

KINDS = {"mapped": (cudamem.mapped_array, KDL_CUDA_HOST),
         "managed": (cudamem.managed_array, KDL_CUDA_MANAGED)}


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    return request.param


def make(kind, shape, dtype=np.float64, **kw):
    return KINDS[kind][0](shape, dtype, **kw)


def address(a):
    return a.__array_interface__["data"][0]


def fields(capsule, versioned=False):
    """The capsule's tensor (versioned or not) and the capsule, which must
    outlive the tensor's reads."""
    return tensor_of(capsule, versioned), capsule


def calls(sim, name):
    return sim.stats()["calls"].get(name, {}).get("calls", 0)


LAYOUTS = [
    ((4, 6), np.float32, ()),
    ((4, 6), np.float64, (slice(None, None, 2), slice(None, None, -3))),
    ((3, 4, 5), np.int16, "T"),
    ((10,), np.uint8, (slice(7, 2, -2),)),
    ((3,), np.bool_, ()),
    ((6,), np.complex128, ()),
    ((), np.float32, ()),
    ((0, 3), np.int64, ()),
    ((5, 0), np.int32, (slice(None, None, -1),)),
]


@pytest.mark.parametrize("case", range(len(LAYOUTS)))
def test_numpy_reads_it_in_place(kind, case):
    shape, dtype, index = LAYOUTS[case]
    ref = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    m = make(kind, shape, dtype)
    m[...] = ref
    if index == "T":
        view, want = m.T, ref.T
    elif index == ():
        view, want = m, ref
    else:
        view, want = m[index], ref[index]
    got = np.from_dlpack(view)
    assert type(got) is np.ndarray
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if want.size:
        assert address(got) == address(view)
        view[(0,) * view.ndim] = 1
        assert got[(0,) * got.ndim] == 1


def test_dlpack_device(kind):
    m = make(kind, 3)
    assert m.__dlpack_device__() == (KINDS[kind][1], 0)
    assert m[1:].__dlpack_device__() == (KINDS[kind][1], 0)


@pytest.mark.parametrize("max_version", [None, (0, 8), (1, 0), (2, 3)])
def test_capsule_fields(kind, max_version):
    m = make(kind, (2, 3), np.int32)
    view = m[:, ::-1]
    capsule = view.__dlpack__(max_version=max_version)
    versioned = max_version is not None and max_version[0] >= 1
    name = "dltensor_versioned" if versioned else "dltensor"
    assert repr(capsule).startswith('<capsule object "%s"' % name)
    t = tensor_of(capsule, versioned)
    if versioned:
        assert (t.major, t.minor) == (1, 1) and t.flags == 0
    dl = t.dl_tensor
    assert (dl.device.device_type, dl.device.device_id) == (
        KINDS[kind][1], 0)
    assert dl.data == address(view) and dl.byte_offset == 0
    assert [dl.shape[i] for i in range(2)] == [2, 3]
    assert [dl.strides[i] for i in range(2)] == [3, -1]
    assert (dl.dtype.code, dl.dtype.bits) == (0, 32)


def test_read_only_views_are_flagged(kind):
    m = make(kind, 4)
    m[:] = 2
    view = m[1:]
    view.flags.writeable = False
    t, keep = fields(view.__dlpack__(max_version=(1, 0)), True)
    assert t.flags & 1
    got = np.from_dlpack(view)
    assert not got.flags.writeable
    np.testing.assert_array_equal(got, 2)
    t, keep = fields(m.__dlpack__(max_version=(1, 0)), True)
    assert t.flags == 0


def test_streams_the_standard_allows(kind):
    s = cudamem.stream()
    m = make(kind, 4)
    m[:] = 1
    for stream in (None, -1, 1, 2, int(s), 2 ** 64 - 1):
        t, keep = fields(m.__dlpack__(stream=stream))
        assert t.dl_tensor.data == address(m)


@pytest.mark.parametrize("bad, error, match", [
    (0, ValueError, "stream 0 is not a CUDA stream"),
    (-2, ValueError, "stream -2 is not a CUDA stream"),
    (2 ** 64, ValueError, "is not a CUDA stream"),
    ("x", TypeError, "stream must be None or an int .*not str 'x'"),
    (1.0, TypeError, "not float 1.0"),
    (True, TypeError, "not bool True"),
])
def test_streams_the_standard_refuses(kind, bad, error, match):
    m = make(kind, 4)
    with pytest.raises(error, match=match):
        m.__dlpack__(stream=bad)


def test_the_arrays_stream_is_waited_for(kind, sim):
    s = cudamem.stream()
    m = make(kind, 64, np.int64, stream=s)
    m[:] = 0
    with sim.delay(100000):
        m.copy_to_device(np.arange(64))  # queued on s, 0.1 s late
        got = np.from_dlpack(m)
        np.testing.assert_array_equal(got, np.arange(64))
    syncs = calls(sim, "cuStreamSynchronize")
    m.__dlpack__(stream=-1)
    assert calls(sim, "cuStreamSynchronize") == syncs
    m.__dlpack__(stream=int(s))
    assert calls(sim, "cuStreamSynchronize") == syncs + 1
    # Synchronous arrays have nothing pending: nothing is waited for.
    plain = make(kind, 4)
    plain.__dlpack__()
    assert calls(sim, "cuStreamSynchronize") == syncs + 1


def test_dl_device(kind):
    m = make(kind, 5)
    m[:] = np.arange(5)
    own = m.__dlpack_device__()
    for dl_device, want in ((None, own), (own, own), ((KDL_CPU, 0),
                                                      (KDL_CPU, 0))):
        t, keep = fields(m.__dlpack__(dl_device=dl_device))
        dl = t.dl_tensor
        assert (dl.device.device_type, dl.device.device_id) == want
        assert dl.data == address(m)
    got = np.from_dlpack(m, device="cpu")
    assert address(got) == address(m)
    np.testing.assert_array_equal(got, np.arange(5))
    for other in ((2, 0), (KDL_CPU, 1), (own[0], 1),
                  (KDL_CUDA_HOST + KDL_CUDA_MANAGED - own[0], 0)):
        with pytest.raises(BufferError, match=r"DLPack device \(%d, %d\)"
                           % other):
            m.__dlpack__(dl_device=other)
    for bad in ("cpu", (1,), (1.0, 0), [1, 0]):
        with pytest.raises(TypeError, match="dl_device must be"):
            m.__dlpack__(dl_device=bad)


@pytest.mark.parametrize("copy", [None, False])
def test_no_copy(kind, copy):
    m = make(kind, 4)
    t, keep = fields(m.__dlpack__(copy=copy))
    assert t.dl_tensor.data == address(m)
    assert address(np.from_dlpack(m, copy=copy)) == address(m)


def test_copy(kind, sim):
    m = make(kind, (3, 4), np.float32)
    m[...] = np.arange(12).reshape(3, 4)
    view = m[::-1, 1:]
    got = np.from_dlpack(view, copy=True)
    assert address(got) != address(view)
    np.testing.assert_array_equal(got, view)
    got[0, 0] = -1
    assert view[0, 0] != -1
    t, keep = fields(view.__dlpack__(copy=True, max_version=(1, 0)), True)
    dl = t.dl_tensor
    assert (dl.device.device_type, dl.device.device_id) == (
        KINDS[kind][1], 0)
    assert dl.data != address(view)
    t, keep = fields(view.__dlpack__(copy=True, dl_device=(KDL_CPU, 0)))
    dl = t.dl_tensor
    assert dl.device.device_type == KDL_CPU and dl.data != address(view)
    cpu = np.from_dlpack(view, device="cpu", copy=True)
    np.testing.assert_array_equal(cpu, view)
    assert address(cpu) != address(view)
    # A read-only array's copy is the consumer's to write.
    view.flags.writeable = False
    t, keep = fields(view.__dlpack__(copy=True, max_version=(1, 0)), True)
    assert t.flags == 0


def test_copy_of_the_same_kind_allocates_that_kind(kind, sim):
    m = make(kind, 8)
    m[:] = 3
    # Mapped memory is page-locked mmap memory: one more registration.
    key = "registrations" if kind == "mapped" else "managed_allocations"
    live = sim.live()[key]
    capsule = m.__dlpack__(copy=True)
    assert sim.live()[key] == live + 1
    del capsule
    gc.collect()
    cudamem.current_context().memory_manager.deallocations.clear()


def test_the_capsule_keeps_the_memory_alive(kind):
    m = make(kind, (2, 3))
    m[...] = 7
    got = np.from_dlpack(m[:, 1:])
    unconsumed = m.__dlpack__(max_version=(1, 0))
    del m
    gc.collect()
    np.testing.assert_array_equal(got, 7)
    got[...] = 8
    np.testing.assert_array_equal(got, 8)
    del got, unconsumed
    gc.collect()
    cudamem.current_context().memory_manager.deallocations.clear()


def test_arrays_numpy_made_cannot_be_exported(kind):
    m = make(kind, 4)
    other = m + 1
    memory = "mapped" if kind == "mapped" else "managed"
    with pytest.raises(ValueError, match="not in %s memory" % memory):
        other.__dlpack__()
    with pytest.raises(ValueError, match="not in %s memory" % memory):
        other.__dlpack_device__()


def test_bad_arguments(kind):
    m = make(kind, 4)
    with pytest.raises(TypeError, match="keyword arguments only"):
        m.__dlpack__(None)
    with pytest.raises(TypeError, match="max_version"):
        m.__dlpack__(max_version=(1,))
    with pytest.raises(TypeError, match="unexpected keyword|sream"):
        m.__dlpack__(sream=1)
    with pytest.raises(BufferError, match="DLPack cannot describe"):
        make(kind, 2, ">f8").__dlpack__()


def test_after_a_reset(kind):
    m = make(kind, 4)
    cudamem.get_current_device().reset()
    with pytest.raises(cudamem.CudaDriverError, match="was reset"):
        m.__dlpack__()
    del m
    gc.collect()
