"""Zero-copy interop with CuPy, PyTorch, numba-cuda, JAX and cuda.core on a
real GPU, through the CUDA Array Interface, DLPack and __cuda_stream__.
Skipped without a GPU; each library is optional (pytest.importorskip). The
calls used are those each library documents: cupy.asarray /
cupy.from_dlpack / Stream.ptr, torch.as_tensor / torch.from_dlpack /
Stream.cuda_stream, numba.cuda.as_cuda_array and @cuda.jit,
jax.dlpack.from_dlpack / Array.unsafe_buffer_pointer, and cuda.core's
Device / Stream / StridedMemoryView."""
import importlib
import os

import numpy as np
import pytest

import cudamem

pytestmark = pytest.mark.gpu

# JAX would otherwise take most of the GPU's memory at import.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

N = 1 << 20


def ptr(d):
    return d.device_ctypes_pointer.value


def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA")
    return torch


def cuda_core():
    """cuda.core's namespace and its utils (cuda.core, or
    cuda.core.experimental before the API left its experimental module)."""
    for name in ("cuda.core", "cuda.core.experimental"):
        try:
            core = importlib.import_module(name)
            utils = importlib.import_module(name + ".utils")
            core.Device
            return core, utils
        except (ImportError, AttributeError):
            continue
    pytest.skip("cuda.core is not installed")


def numba_cuda():
    """numba.cuda, able to compile. numba-cuda 0.30 reads np.row_stack
    when it first compiles, an alias of np.vstack that NumPy 2.5 removed
    (seen on an H200 machine with NumPy 2.5.2); it gets the alias back."""
    cuda = pytest.importorskip("numba.cuda")
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    return cuda


def as_stream_arg(s, handle):
    """A foreign stream as `stream=`: the object itself when it speaks
    __cuda_stream__, else its raw handle through external_stream()."""
    return s if hasattr(s, "__cuda_stream__") else \
        cudamem.external_stream(handle)


def test_cupy_round_trip():
    cupy = pytest.importorskip("cupy")
    h = np.arange(64, dtype=np.float32).reshape(8, 8)
    d = cudamem.to_device(h)
    c = cupy.asarray(d)  # CAI
    assert c.data.ptr == ptr(d)
    np.testing.assert_array_equal(cupy.asnumpy(c), h)
    back = cudamem.as_cuda_array(c)
    assert ptr(back) == c.data.ptr
    assert cupy.from_dlpack(d).data.ptr == ptr(d)
    assert ptr(cudamem.from_dlpack(c)) == c.data.ptr
    # A strided view travels as strides, not as a copy.
    v = cudamem.as_cuda_array(c[::2, 1::3])
    assert ptr(v) == c[::2, 1::3].data.ptr
    np.testing.assert_array_equal(v.copy_to_host(), h[::2, 1::3])


def test_torch_round_trip():
    torch = torch_cuda()
    h = np.arange(64, dtype=np.float32)
    d = cudamem.to_device(h)
    t = torch.as_tensor(d, device="cuda")  # CAI
    assert t.data_ptr() == ptr(d)
    assert torch.from_dlpack(d).data_ptr() == ptr(d)
    np.testing.assert_array_equal(t.cpu().numpy(), h)
    back = cudamem.as_cuda_array(t)
    assert ptr(back) == t.data_ptr()
    assert ptr(cudamem.from_dlpack(t)) == t.data_ptr()
    t.add_(1)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), h + 1)


def test_numba_round_trip_and_kernel():
    cuda = numba_cuda()
    d = cudamem.to_device(np.zeros(32, dtype=np.float32))
    n = cuda.as_cuda_array(d)
    assert n.device_ctypes_pointer.value == ptr(d)
    assert ptr(cudamem.as_cuda_array(n)) == ptr(d)

    @cuda.jit
    def add_one(arr):
        i = cuda.grid(1)
        if i < arr.size:
            arr[i] += 1

    add_one[1, 32](d)  # the seeds' launch on a (cudamem) device array
    np.testing.assert_array_equal(d.copy_to_host(), np.ones(32))
    # A strided view and mapped memory launch through the same protocol
    # (__cuda_memory__ and _strided_memory_view_shim, numba's own).
    h = np.arange(64, dtype=np.float32)
    s = cudamem.to_device(h)
    add_one[1, 32](s[::2])
    h[::2] += 1
    np.testing.assert_array_equal(s.copy_to_host(), h)
    m = cudamem.mapped_array(32, np.float32)
    m[:] = np.arange(32)
    add_one[1, 32](m)
    cudamem.synchronize()
    np.testing.assert_array_equal(m, np.arange(32) + 1)


def test_jax_round_trip():
    pytest.importorskip("jax")
    import jax
    import jax.dlpack
    import jax.numpy as jnp

    if not any(dev.platform == "gpu" for dev in jax.devices()):
        pytest.skip("JAX has no GPU backend")
    h = np.arange(256, dtype=np.float32)
    d = cudamem.to_device(h)
    x = jax.dlpack.from_dlpack(d)
    assert x.unsafe_buffer_pointer() == ptr(d)
    np.testing.assert_array_equal(np.asarray(x), h)
    y = jnp.arange(256, dtype=jnp.float32) * 3
    back = cudamem.from_dlpack(y)
    assert ptr(back) == y.unsafe_buffer_pointer()
    np.testing.assert_array_equal(back.copy_to_host(), h * 3)


def test_chain_keeps_one_pointer():
    # cudamem -> CuPy -> PyTorch -> numba -> cudamem: every hop zero-copy.
    cupy = pytest.importorskip("cupy")
    torch = torch_cuda()
    cuda = numba_cuda()
    d = cudamem.to_device(np.arange(1000, dtype=np.int32))
    c = cupy.asarray(d)
    t = torch.from_dlpack(c)
    n = cuda.as_cuda_array(t)
    back = cudamem.as_cuda_array(n)
    assert {c.data.ptr, t.data_ptr(), n.device_ctypes_pointer.value,
            ptr(back)} == {ptr(d)}


def test_cupy_kernel_on_a_read_on_b_without_host_sync():
    # CuPy writes on stream A; cudamem reads on stream B, ordered by the
    # stream CuPy exports (an event wait on the device, no host wait).
    cupy = pytest.importorskip("cupy")
    a = cupy.cuda.Stream(non_blocking=True)
    b = cudamem.stream(non_blocking=True)
    with a:
        c = cupy.zeros(N, dtype=cupy.float32)
        for _ in range(50):  # long enough to be still running
            c += 1
        d = cudamem.as_cuda_array(c, stream=b)  # exported while A is current
    out = d.copy_to_host(stream=b)
    b.synchronize()
    np.testing.assert_array_equal(out, np.full(N, 50, dtype=np.float32))


def test_cudamem_writes_on_a_torch_reads_after_dlpack_handshake():
    torch = torch_cuda()
    s = cudamem.stream(non_blocking=True)
    d = cudamem.device_array(N, dtype=np.float32, stream=s)
    d.copy_to_device(np.full(N, 7.0, dtype=np.float32), stream=s)
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        t = torch.from_dlpack(d)  # __dlpack__(stream=consumer's handle)
        total = t.sum()
    consumer.synchronize()
    assert total.item() == 7.0 * N


def test_foreign_streams_as_stream_arguments():
    cupy = pytest.importorskip("cupy")
    torch = torch_cuda()
    h = np.arange(8, dtype=np.float32)
    cs, ts = cupy.cuda.Stream(), torch.cuda.Stream()
    for s, handle in ((cs, cs.ptr), (ts, ts.cuda_stream)):
        stream = as_stream_arg(s, handle)
        d = cudamem.to_device(h, stream=stream)
        np.testing.assert_array_equal(d.copy_to_host(stream=stream), h)
        s.synchronize()


def test_cuda_core_stream_and_view():
    core, utils = cuda_core()
    dev = core.Device(0)
    dev.set_current()
    s = dev.create_stream()
    h = np.arange(32, dtype=np.float64)
    d = cudamem.to_device(h, stream=s)  # __cuda_stream__
    out = d.copy_to_host(stream=s)
    s.sync()
    np.testing.assert_array_equal(out, h)
    view = utils.StridedMemoryView(d, stream_ptr=-1)
    assert view.ptr == ptr(d)
    assert tuple(view.shape) == (32,)
