"""numba.cuda host code as real projects write it, run with only the import
line changed to ``import cudamem as cuda``.

Written here in the manner of: dask.distributed's serializers for numba
device arrays (distributed/protocol/numba.py: registered on
``numba.cuda.devicearray.DeviceNDArray`` with its documented
constructor), cudf/pyblazing's IPC by raw handle bytes (``IpcHandle(None,
raw, np.prod(shape) * itemsize)`` then ``open_array``), and training loops
that iterate a device array by rows. RMM's memory-manager plugin is
tests/helpers/rmm_style_plugin.py, run by test_numba_emm_parity.py.
References: numba-cuda 0.30's devicearray.py and driver.py for the API,
NumPy for every value.
"""
import numpy as np
import pytest

import cudamem as cuda


class Dispatch:
    """dask.utils.Dispatch's part the serializers use: functions registered
    by type, looked up along the argument type's MRO."""

    def __init__(self):
        self._lookup = {}

    def register(self, cls):
        def wrapper(func):
            self._lookup[cls] = func
            return func
        return wrapper

    def dispatch(self, cls):
        for base in cls.__mro__:
            if base in self._lookup:
                return self._lookup[base]
        raise TypeError(f"no dispatch for {cls}")


def numba_serializers():
    """The four serializers of distributed/protocol/numba.py, with
    ``numba.cuda`` spelled ``cuda``; returns the registries."""
    cuda_serialize, cuda_deserialize = Dispatch(), Dispatch()
    dask_serialize, dask_deserialize = Dispatch(), Dispatch()

    @cuda_serialize.register(cuda.devicearray.DeviceNDArray)
    def cuda_serialize_numba_ndarray(x):
        # Making sure `x` is behaving
        if not (x.flags["C_CONTIGUOUS"] or x.flags["F_CONTIGUOUS"]):
            shape = x.shape
            t = cuda.device_array(shape, dtype=x.dtype)
            t.copy_to_device(x)
            x = t

        header = x.__cuda_array_interface__.copy()
        header["strides"] = tuple(x.strides)
        header["lengths"] = [x.nbytes]
        frames = [
            cuda.cudadrv.devicearray.DeviceNDArray(
                shape=(x.nbytes,), strides=(1,), dtype=np.dtype("u1"),
                gpu_data=x.gpu_data,
            )
        ]
        return header, frames

    @cuda_deserialize.register(cuda.devicearray.DeviceNDArray)
    def cuda_deserialize_numba_ndarray(header, frames):
        (frame,) = frames
        shape = header["shape"]
        strides = header["strides"]

        arr = cuda.devicearray.DeviceNDArray(
            shape=shape,
            strides=strides,
            dtype=np.dtype(header["typestr"]),
            gpu_data=cuda.as_cuda_array(frame).gpu_data,
        )
        return arr

    @dask_serialize.register(cuda.devicearray.DeviceNDArray)
    def dask_serialize_numba_ndarray(x):
        header, frames = cuda_serialize_numba_ndarray(x)
        frames = [memoryview(f.copy_to_host()) for f in frames]
        return header, frames

    @dask_deserialize.register(cuda.devicearray.DeviceNDArray)
    def dask_deserialize_numba_array(header, frames):
        frames = [cuda.to_device(np.asarray(memoryview(f))) for f in frames]
        arr = cuda_deserialize_numba_ndarray(header, frames)
        return arr

    return cuda_serialize, cuda_deserialize, dask_serialize, dask_deserialize


def _layouts():
    base = np.arange(4 * 6, dtype=np.float64).reshape(4, 6) * 1.5
    return {"C": base, "F": np.asfortranarray(base)}


@pytest.mark.parametrize("route", ["cuda", "dask"])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_dask_style_serializer_round_trips(route, layout):
    registries = numba_serializers()
    serialize, deserialize = (registries[:2] if route == "cuda"
                              else registries[2:])
    host = _layouts()["C" if layout == "strided" else layout]
    d = cuda.to_device(host)
    if layout == "strided":
        d, host = d[::2, 1::2], host[::2, 1::2]
    header, frames = serialize.dispatch(type(d))(d)
    assert header["shape"] == host.shape
    assert header["lengths"] == [host.nbytes]
    assert [f.nbytes if route == "cuda" else len(f) for f in frames] == \
        [host.nbytes]
    out = deserialize.dispatch(type(d))(header, frames)
    assert isinstance(out, cuda.devicearray.DeviceNDArray)
    got = out.copy_to_host()
    np.testing.assert_array_equal(got, host)
    assert got.dtype == host.dtype
    del d, out, frames


def test_dask_style_device_frame_shares_the_array_memory():
    cuda_serialize = numba_serializers()[0]
    host = np.arange(10, dtype=np.int32)
    d = cuda.to_device(host)
    _, (frame,) = cuda_serialize.dispatch(type(d))(d)
    frame.copy_to_device(np.full(host.nbytes, 0xFF, dtype=np.uint8))
    np.testing.assert_array_equal(d.copy_to_host(),
                                  np.full(10, -1, dtype=np.int32))
    del d, frame


def test_ipc_by_raw_handle_bytes(run_py):
    # The exporter ships the handle's 64 bytes, the shape and the dtype;
    # the reader rebuilds the handle with a NumPy integer size.
    host = np.arange(3 * 5, dtype=np.float32).reshape(3, 5) - 7.25
    d = cuda.to_device(host)
    ipch = d.get_ipc_handle()
    raw = bytes(ipch._ipc_handle.handle)
    assert len(raw) == 64
    proc = run_py("""
        import numpy as np
        import cudamem as cuda
        raw, shape, typestr = %r
        dtype = np.dtype(typestr)
        size = np.prod(shape) * dtype.itemsize
        ipch = cuda.IpcHandle(None, raw, size)
        arr = ipch.open_array(cuda.current_context(), shape=shape,
                              dtype=dtype)
        print(repr(arr.copy_to_host().tolist()))
        arr[1] = np.zeros(shape[1], dtype=dtype)
        cuda.synchronize()
        ipch.close()
    """ % ((raw, host.shape, host.dtype.str),))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr(host.tolist())
    expect = host.copy()
    expect[1] = 0
    np.testing.assert_array_equal(d.copy_to_host(), expect)
    ipch.close()
    del d, ipch


def test_training_loop_iterates_rows_as_device_views():
    batches = np.arange(4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2)
    d_batches = cuda.to_device(batches)
    seen = 0
    for i, d_batch in enumerate(d_batches):
        assert isinstance(d_batch, cuda.DeviceNDArray)
        assert d_batch.shape == batches[i].shape
        np.testing.assert_array_equal(d_batch.copy_to_host(), batches[i])
        # A row is a view: a write through it reaches the batch array.
        d_batch.copy_to_device(batches[i] * -1)
        seen += 1
    assert seen == len(batches)
    np.testing.assert_array_equal(d_batches.copy_to_host(), -batches)
    del d_batches, d_batch


def test_iterating_a_1d_array_gives_numpys_elements():
    host = np.array([3, -1, 4, 1, -5], dtype=np.int16)
    d = cuda.to_device(host)
    got = list(d)
    assert got == host.tolist()
    assert [type(x) for x in got] == [type(x) for x in host]
    assert list(cuda.device_array(0, dtype=np.int16)) == []
    del d
