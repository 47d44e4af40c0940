"""cudamem with the real numba-cuda and cuda.core in one process, all on
cudamem's simulated driver: the interop the GPU tests cover, without a GPU.

Run by ``make test-peers`` (in its venv, which has the peers, under
``python -m cudamem.simulator run --hazards``); skipped where numba-cuda or
cuda.core is not installed. cudamem loads the simulator before the peers
touch the driver, so their ``dlopen("libcuda.so.1")`` finds it under its
SONAME: one driver, one address space, one hazard checker.

References: the CUDA Array Interface v3 (a consumer synchronizes on the
exporter's ``stream`` unless told not to), DLPack, the ``__cuda_stream__``
protocol (``(version, handle)``), NumPy for every value. Stream order is
checked by the simulator's hazard checker with every stream operation
delayed, so unordered work overlaps every time.
"""
import importlib.util

import numpy as np
import pytest

import cudamem
from cudamem.testing import quiesce

for _peer in ("numba_cuda", "cuda.core"):
    try:
        _found = importlib.util.find_spec(_peer) is not None
    except ImportError:  # no `cuda` package at all
        _found = False
    if not _found:
        pytest.skip("needs %s (make test-peers installs it)" % _peer,
                    allow_module_level=True)

# numba-cuda loads the driver by name when numba.cuda is imported: the
# simulator must be in the process under its SONAME before that.
cudamem.driver.info()
ncuda = pytest.importorskip("numba.cuda")
cuda_core = pytest.importorskip("cuda.core")
from cuda.core.utils import StridedMemoryView  # noqa: E402

pytestmark = pytest.mark.simulator

DELAY_US = 3000


@pytest.fixture(scope="module", autouse=True)
def one_driver():
    """The simulator loaded by cudamem first, then the peers on it."""
    assert cudamem.driver.info()["simulator"]
    assert ncuda.is_available()
    dev = cuda_core.Device(0)
    dev.set_current()
    yield dev


@pytest.fixture(autouse=True)
def numba_flushed():
    """numba frees late (its deferred deallocations): free what the test
    let go of before the leak check counts, after cudamem let go of the
    numba arrays it imported."""
    yield
    quiesce()
    context = ncuda.current_context()
    context.memory_manager.deallocations.clear()
    context.deallocations.clear()


def host(n=1 << 16):
    return np.arange(n, dtype=np.float64) * 0.5


def ptr(cai_owner):
    return cai_owner.__cuda_array_interface__["data"][0]


# --- CUDA Array Interface ----------------------------------------------------

def test_numba_sees_a_cudamem_array():
    a = host(24).reshape(4, 6)
    d = cudamem.to_device(a)
    n = ncuda.as_cuda_array(d)
    assert n.device_ctypes_pointer.value == d.device_ctypes_pointer.value
    assert (n.shape, n.strides, n.dtype) == (a.shape, a.strides, a.dtype)
    np.testing.assert_array_equal(n.copy_to_host(), a)
    # A strided view: same pointer, numba's view of the same elements.
    v = d[1:, ::2]
    nv = ncuda.as_cuda_array(v)
    assert ptr(nv) == ptr(v)
    np.testing.assert_array_equal(nv.copy_to_host(), a[1:, ::2])


def test_cudamem_sees_a_numba_array():
    a = host(30).reshape(5, 6)
    n = ncuda.to_device(a)
    d = cudamem.as_cuda_array(n)
    assert d.device_ctypes_pointer.value == n.device_ctypes_pointer.value
    np.testing.assert_array_equal(d.copy_to_host(), a)
    # Writes through cudamem land in numba's memory.
    d[2:4] = cudamem.to_device(np.full((2, 6), -1.0))
    expect = a.copy()
    expect[2:4] = -1.0
    np.testing.assert_array_equal(n.copy_to_host(), expect)


def test_cuda_core_views_a_cudamem_array_through_cai():
    a = host(24).reshape(4, 6)
    d = cudamem.to_device(a)
    v = StridedMemoryView.from_cuda_array_interface(d, stream_ptr=-1)
    assert v.ptr == d.device_ctypes_pointer.value
    assert v.shape == a.shape
    assert v.dtype == a.dtype
    assert v.is_device_accessible and v.device_id == 0
    t = d.T
    vt = StridedMemoryView.from_cuda_array_interface(t, stream_ptr=-1)
    assert vt.ptr == ptr(t)
    assert vt.shape == (6, 4)
    # StridedMemoryView counts strides in elements.
    assert vt.strides == tuple(s // 8 for s in a.T.strides)


# --- DLPack ------------------------------------------------------------------

def test_cuda_core_views_a_cudamem_array_through_dlpack():
    a = host(24).reshape(4, 6)
    d = cudamem.to_device(a)
    v = StridedMemoryView.from_dlpack(d, stream_ptr=-1)
    assert v.ptr == d.device_ctypes_pointer.value
    assert (v.shape, v.strides, v.dtype) == ((4, 6), (6, 1), a.dtype)
    assert v.is_device_accessible and v.device_id == 0


def test_cudamem_takes_a_cuda_core_buffer_through_dlpack():
    # A cuda.core Buffer over numba's memory: three libraries, one range.
    a = np.arange(32, dtype=np.float64)
    n = ncuda.to_device(a)
    buf = cuda_core.Buffer.from_handle(n.device_ctypes_pointer.value,
                                       a.nbytes, owner=n)
    d = cudamem.from_dlpack(buf)
    assert d.device_ctypes_pointer.value == int(buf.handle)
    assert d.nbytes == a.nbytes
    np.testing.assert_array_equal(d.copy_to_host().view(np.float64), a)
    # Written through cudamem, read back through numba.
    d.copy_to_device(np.full(a.nbytes, 0x3F, dtype=d.dtype))
    np.testing.assert_array_equal(n.copy_to_host().view(np.uint8),
                                  np.full(a.nbytes, 0x3F, np.uint8))
    del d
    buf.close()


def test_cuda_core_copies_a_cudamem_buffer(one_driver):
    a = np.arange(32, dtype=np.float64)
    src = cudamem.to_device(a)
    dst = cudamem.device_array_like(a)
    stream = one_driver.create_stream()
    try:
        b_src = cuda_core.Buffer.from_handle(
            src.device_ctypes_pointer.value, src.nbytes, owner=src)
        b_dst = cuda_core.Buffer.from_handle(
            dst.device_ctypes_pointer.value, dst.nbytes, owner=dst)
        b_src.copy_to(b_dst, stream=stream)
        stream.sync()
        np.testing.assert_array_equal(dst.copy_to_host(), a)
        b_src.close()
        b_dst.close()
    finally:
        stream.close()


def test_cuda_core_default_resource_allocates(one_driver):
    # cuda.core's default resource is the stream-ordered allocator.
    stream = one_driver.create_stream()
    try:
        mr = one_driver.memory_resource
        assert isinstance(mr, cuda_core.DeviceMemoryResource)
        buf = mr.allocate(256, stream=stream)
        stream.sync()  # allocated in stream order: cudamem uses stream 0
        d = cudamem.from_dlpack(buf)
        assert d.device_ctypes_pointer.value == int(buf.handle)
        want = np.arange(256, dtype=np.uint8).view(d.dtype)
        d.copy_to_device(want)
        np.testing.assert_array_equal(d.copy_to_host(), want)
        del d
        buf.close(stream)
        stream.sync()
    finally:
        stream.close()


# --- __cuda_stream__ ---------------------------------------------------------

def test_cuda_core_takes_a_cudamem_stream(one_driver):
    s = cudamem.stream()
    version, handle = s.__cuda_stream__()
    assert version == 0
    cs = one_driver.create_stream(s)
    assert int(cs.handle) == handle == s.handle.value
    a = host()
    d = cudamem.to_device(a, stream=s)
    out = cudamem.pinned_array_like(a)
    d.copy_to_host(out, stream=cs)   # the same stream: ordered
    cs.sync()
    np.testing.assert_array_equal(out, a)


def test_cudamem_takes_a_cuda_core_stream(one_driver):
    cs = one_driver.create_stream()
    try:
        a = host()
        d = cudamem.to_device(a, stream=cs)
        assert d.stream.__cuda_stream__() == cs.__cuda_stream__()
        out = d.copy_to_host(stream=cs)
        cs.sync()
        np.testing.assert_array_equal(out, a)
        del d
    finally:
        cs.close()


# --- Stream order across libraries, checked by the hazard checker ------------

def test_numba_orders_after_a_cudamem_arrays_stream(hazards):
    a = host()
    s = cudamem.stream()
    ns = ncuda.stream()
    with hazards.delay(DELAY_US):
        d = cudamem.to_device(cudamem.pinned_array_like(a), stream=s)
        d.copy_to_device(a, stream=s)
        n = ncuda.as_cuda_array(d)       # synchronizes s (CAI stream)
        out = n.copy_to_host(stream=ns)
        ns.synchronize()
    np.testing.assert_array_equal(out, a)


@pytest.mark.expect_hazards
def test_hazard_checker_sees_numba_reading_unordered(cudamem_sim,
                                                     cudamem_hazards):
    # The control: without the CAI synchronization numba's copy races
    # cudamem's, and the checker reports it.
    s = cudamem.stream()
    ns = ncuda.stream()
    with cudamem_sim.delay(DELAY_US):
        d = cudamem.to_device(cudamem.pinned_array(1 << 16), stream=s)
        n = ncuda.as_cuda_array(d, sync=False)
        n.copy_to_host(stream=ns)
        ns.synchronize()
        s.synchronize()
    assert cudamem_hazards() >= 1
    assert "cuMemcpyDtoHAsync" in cudamem_sim.last_hazard()


def test_cudamem_orders_after_a_numba_arrays_stream(hazards):
    a = host()
    ns = ncuda.stream()
    s = cudamem.stream()
    with hazards.delay(DELAY_US):
        n = ncuda.to_device(a, stream=ns)
        d = cudamem.as_cuda_array(n)     # synchronizes ns (CAI stream)
        out = d.copy_to_host(stream=s)
        s.synchronize()
    np.testing.assert_array_equal(out, a)


def test_cuda_core_stream_waits_for_a_cudamem_stream(hazards, one_driver):
    a = host()
    s = cudamem.stream()
    cs = one_driver.create_stream()
    try:
        with hazards.delay(DELAY_US):
            d = cudamem.to_device(cudamem.pinned_array_like(a), stream=s)
            d.copy_to_device(a, stream=s)
            cs.wait(s)                   # __cuda_stream__: an event on s
            out = d.copy_to_host(stream=cs)
            cs.sync()
        np.testing.assert_array_equal(out, a)
        del d
    finally:
        cs.close()


@pytest.mark.expect_hazards
def test_hazard_checker_sees_cuda_core_stream_unordered(
        cudamem_sim, cudamem_hazards, one_driver):
    cs = one_driver.create_stream()
    try:
        s = cudamem.stream()
        with cudamem_sim.delay(DELAY_US):
            d = cudamem.to_device(cudamem.pinned_array(1 << 16), stream=s)
            d.copy_to_host(stream=cs)    # not ordered after s
            cs.sync()
            s.synchronize()
        assert cudamem_hazards() >= 1
        assert "cuMemcpyDtoHAsync" in cudamem_sim.last_hazard()
        del d
    finally:
        cs.close()
