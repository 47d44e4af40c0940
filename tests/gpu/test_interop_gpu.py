"""Zero-copy interop with CuPy, PyTorch and numba-cuda on a real GPU
(CUDA Array Interface and DLPack). Skipped without one; each library is
optional (pytest.importorskip)."""
import numpy as np
import pytest

import cudamem

pytestmark = pytest.mark.gpu


def test_cupy_round_trip():
    cupy = pytest.importorskip("cupy")
    d = cudamem.to_device(np.arange(16, dtype=np.float32))
    c = cupy.asarray(d)  # CAI
    assert c.data.ptr == d.device_ctypes_pointer.value
    back = cudamem.as_cuda_array(c)
    assert back.device_ctypes_pointer.value == c.data.ptr
    via_dl = cupy.from_dlpack(d)
    assert via_dl.data.ptr == d.device_ctypes_pointer.value


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    d = cudamem.to_device(np.arange(16, dtype=np.float32))
    t = torch.as_tensor(d, device="cuda")
    assert t.data_ptr() == d.device_ctypes_pointer.value
    assert torch.from_dlpack(d).data_ptr() == t.data_ptr()
    back = cudamem.as_cuda_array(t)
    assert back.device_ctypes_pointer.value == t.data_ptr()


def test_numba_round_trip_and_kernel():
    cuda = pytest.importorskip("numba.cuda")
    d = cudamem.to_device(np.zeros(32, dtype=np.float32))
    n = cuda.as_cuda_array(d)
    assert n.device_ctypes_pointer.value == d.device_ctypes_pointer.value

    @cuda.jit
    def add_one(arr):
        i = cuda.grid(1)
        if i < arr.size:
            arr[i] += 1

    add_one[1, 32](d)
    np.testing.assert_array_equal(d.copy_to_host(), np.ones(32))


def test_cupy_kernel_on_a_read_on_b_without_host_sync():
    cupy = pytest.importorskip("cupy")
    a, b = cupy.cuda.Stream(non_blocking=True), cudamem.stream()
    with a:
        c = cupy.arange(1 << 20, dtype=cupy.float32) * 2
    d = cudamem.as_cuda_array(c, stream=b)
    out = d.copy_to_host(stream=b)
    b.synchronize()
    np.testing.assert_array_equal(out, np.arange(1 << 20) * 2)


def test_foreign_streams_as_stream_arguments():
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    h = np.arange(8, dtype=np.float32)
    for s in (cupy.cuda.Stream(), torch.cuda.Stream()):
        d = cudamem.to_device(h, stream=s)
        np.testing.assert_array_equal(d.copy_to_host(stream=s), h)
        s.synchronize()
