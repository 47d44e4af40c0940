"""numba.cuda parity of device arrays' shapes, constructors, iteration and
IPC handle arguments.

The reference for what is accepted is numba-cuda 0.30's source: shapes
and strides go through ``tuple(shape)`` and ``int(s)`` for each
``int``/``np.integer`` element (api_util.prepare_shape_strides_dtype,
dummyarray.Array.from_desc); ``DeviceNDArray(shape, strides, dtype,
stream=0, gpu_data=None)`` and ``DeviceRecord(dtype, stream=0,
gpu_data=None)`` are public constructors; ``getitem/setitem(...,
stream=0)`` fall back to the array's own stream when the stream is 0
(``_default_stream``); ``IpcHandle`` keeps whatever it is given and
pickles ``handle.reserved`` (cuda.bindings' CUipcMemHandle). NumPy is the
reference for the data and for what numba leaves to it (bools and floats
are not ints; a 0-d integer array is one; iterating a 0-d array raises).
"""
import ctypes
import pickle

import numpy as np
import pytest

import cudamem

# Integer shapes as real code passes them, with the tuple NumPy makes of
# each (np.empty(shape).shape is the reference).
SHAPES = {
    "int64-array": np.array([3, 4]),
    "int32-array": np.array([3, 4], dtype=np.int32),
    "uint8-array": np.array([3, 4], dtype=np.uint8),
    "list-of-np-ints": [np.int64(3), np.uint16(4)],
    "tuple-mixed": (3, np.int8(4)),
    "0-d-array": np.array(5),
    "np-scalar": np.int32(5),
    "empty-array": np.array([], dtype=np.intp),
    "2-d-shape-from-arange": np.arange(1, 4),
}


def _host(shape, dtype=np.float64):
    return np.empty(shape, dtype)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("make", ["device_array", "pinned_array",
                                  "mapped_array", "managed_array"])
def test_constructors_take_integer_sequences(make, shape):
    ref = _host(shape)
    a = getattr(cudamem, make)(shape)
    assert a.shape == ref.shape and a.strides == ref.strides
    assert all(type(n) is int for n in a.shape + a.strides)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_device_array_like_and_numba_constructor(shape):
    ref = _host(shape, np.int16)
    d = cudamem.DeviceNDArray(shape, np.array(ref.strides), np.int16)
    assert (d.shape, d.strides, d.dtype) == (ref.shape, ref.strides,
                                             ref.dtype)
    like = cudamem.device_array_like(d)
    assert (like.shape, like.strides) == (ref.shape, ref.strides)


def test_strides_from_an_array():
    h = np.lib.stride_tricks.as_strided(np.empty(6), (2, 3), (8, 16))
    d = cudamem.device_array(np.array([2, 3]), strides=np.array([8, 16]))
    assert d.strides == h.strides
    d.copy_to_device(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(d.copy_to_host(),
                                  np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("shape", [np.array([3, 2]), np.array(6),
                                   [np.int64(2), np.int64(3)],
                                   np.array([-1, 2])])
def test_reshape_takes_integer_sequences(shape):
    h = np.arange(6)
    d = cudamem.to_device(h)
    np.testing.assert_array_equal(d.reshape(shape).copy_to_host(),
                                  h.reshape(shape))


BAD_SHAPES = {
    "float-array": np.array([2.0, 3.0]),
    "float-list": [2.0, 3],
    "np-float": np.float64(2),
    "bool": True,
    "bool-in-tuple": (True, 2),
    "np-bool-array": np.array([True, True]),
    "float-0-d-array": np.array(2.0),
    "2-d-array": np.array([[2, 3]]),
    "str": "ab",
}


@pytest.mark.parametrize("shape", BAD_SHAPES.values(), ids=BAD_SHAPES.keys())
@pytest.mark.parametrize("make", ["device_array", "pinned_array",
                                  "mapped_array", "managed_array"])
def test_non_int_shapes_are_refused_as_numpy_refuses_them(make, shape):
    with pytest.raises(TypeError):
        np.empty(shape)
    with pytest.raises(TypeError, match=r"shape .*(not an int|sequence of "
                                        r"ints)"):
        getattr(cudamem, make)(shape)


def test_refusal_names_the_value():
    with pytest.raises(TypeError, match=r"shape \[2\.0, 3\]: float is not "
                                        r"an int"):
        cudamem.device_array([2.0, 3])
    with pytest.raises(TypeError, match=r"strides \(8, True\): bool is not "
                                        r"an int"):
        cudamem.device_array((2, 2), strides=(8, True))
    with pytest.raises(TypeError, match=r"not numpy\.ndarray array\(2\.5\)"):
        cudamem.device_array(np.array(2.5))
    with pytest.raises(ValueError, match="negative dimensions"):
        cudamem.device_array(np.array([2, -3]))


# --- DeviceNDArray(shape, strides, dtype, stream=0, gpu_data=None) --------

def test_numba_constructor_allocates():
    # numba's docstring's example.
    d = cudamem.DeviceNDArray((1, 10), (80, 8), np.float64)
    assert (d.shape, d.strides, d.dtype) == ((1, 10), (80, 8),
                                             np.dtype(np.float64))
    assert type(d) is cudamem.DeviceNDArray and d.gpu_data.size == 80
    h = np.arange(10.0).reshape(1, 10)
    d.copy_to_device(h)
    np.testing.assert_array_equal(d.copy_to_host(), h)


def test_numba_constructor_with_int_shape_and_strides():
    # numba: isinstance(shape, int) -> (shape,), the same for strides.
    d = cudamem.DeviceNDArray(4, 8, "f8")
    assert (d.shape, d.strides) == ((4,), (8,))


def test_numba_constructor_keyword_arguments_and_stream():
    s = cudamem.stream()
    d = cudamem.DeviceNDArray(shape=(2, 3), strides=(4, 8), dtype=np.int32,
                              stream=s)
    assert d.stream is s and not d.is_c_contiguous() and d.is_f_contiguous()
    h = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    d.copy_to_device(h, stream=s)
    np.testing.assert_array_equal(d.copy_to_host(stream=s), h)
    s.synchronize()


def test_numba_constructor_over_gpu_data():
    base = cudamem.to_device(np.arange(12.0))
    # numba's open_array: gpu_data is the memory, the first element at it.
    d = cudamem.DeviceNDArray((3, 4), (32, 8), np.float64,
                              gpu_data=base.gpu_data)
    assert d.gpu_data is base.gpu_data
    np.testing.assert_array_equal(d.copy_to_host(),
                                  np.arange(12.0).reshape(3, 4))
    d[1, 2] = -1.0
    assert base.copy_to_host()[6] == -1.0
    # A view of the memory, as numba's _do_getitem passes.
    tail = cudamem.DeviceNDArray(2, 8, np.float64,
                                 gpu_data=base.gpu_data.view(80))
    np.testing.assert_array_equal(tail.copy_to_host(), [10.0, 11.0])


def test_numba_constructor_negative_strides_over_gpu_data():
    base = cudamem.to_device(np.arange(4.0))
    d = cudamem.DeviceNDArray(4, -8, np.float64, gpu_data=base.gpu_data)
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(4.0)[::-1])


def test_numba_constructor_refuses_bad_arguments():
    base = cudamem.device_array(4)
    with pytest.raises(ValueError, match="outside the 32 bytes"):
        cudamem.DeviceNDArray(5, 8, np.float64, gpu_data=base.gpu_data)
    with pytest.raises(TypeError, match="gpu_data must be a MemoryPointer, "
                                        "not int"):
        cudamem.DeviceNDArray(4, 8, np.float64, gpu_data=1234)
    with pytest.raises(ValueError, match="do not match the 2 dimensions"):
        cudamem.DeviceNDArray((2, 2), (8,), np.float64)
    with pytest.raises(TypeError, match="Python objects"):
        cudamem.DeviceNDArray(2, 8, object)
    with pytest.raises(TypeError, match="required"):
        cudamem.DeviceNDArray((2, 2), (16, 8))


def test_zero_size_numba_constructor():
    d = cudamem.DeviceNDArray((0, 3), (24, 8), np.float64)
    assert d.size == 0 and d.copy_to_host().shape == (0, 3)


# --- DeviceRecord(dtype, stream=0, gpu_data=None) -------------------------

REC = np.dtype([("a", np.int32), ("b", np.float64, (2,))])


def test_numba_record_constructor():
    r = cudamem.DeviceRecord(REC)
    assert (type(r), r.shape, r.strides, r.dtype) == (
        cudamem.DeviceRecord, (), (), REC)
    r["a"] = 7
    r["b"] = [1.5, 2.5]
    h = r.copy_to_host()
    assert h["a"] == 7 and list(h["b"]) == [1.5, 2.5]


def test_numba_record_constructor_over_gpu_data():
    h = np.zeros(2, REC)
    h[1]["a"] = 9
    d = cudamem.to_device(h)
    r = cudamem.DeviceRecord(REC, gpu_data=d.gpu_data.view(REC.itemsize))
    assert r["a"] == 9
    r["a"] = 11
    assert d.copy_to_host()[1]["a"] == 11


def test_numba_record_constructor_refuses_plain_dtypes():
    with pytest.raises(TypeError, match="needs a structured dtype"):
        cudamem.DeviceRecord(np.float64)


# --- getitem / setitem(..., stream=0) -------------------------------------

def test_getitem_setitem_match_indexing():
    h = np.arange(12).reshape(3, 4)
    d = cudamem.to_device(h)
    np.testing.assert_array_equal(d.getitem((1, slice(None, None, 2)))
                                  .copy_to_host(), h[1, ::2])
    assert d.getitem((2, 3)) == h[2, 3]
    d.setitem((0, slice(None)), np.array([9, 8, 7, 6]))
    h[0, :] = [9, 8, 7, 6]
    np.testing.assert_array_equal(d.copy_to_host(), h)


def test_getitem_setitem_on_a_stream():
    s = cudamem.stream()
    h = np.arange(6.0)
    d = cudamem.to_device(h)
    view = d.getitem(slice(1, 4), stream=s)
    assert view.stream is s and d.stream == 0
    d.setitem(slice(0, 2), np.array([-1.0, -2.0]), stream=s)
    s.synchronize()
    h[0:2] = [-1.0, -2.0]
    np.testing.assert_array_equal(d.copy_to_host(), h)
    assert d.getitem(0, stream=s) == -1.0


def test_getitem_stream_0_keeps_the_arrays_stream():
    # numba's _default_stream: `self.stream if not stream else stream`.
    s = cudamem.stream()
    d = cudamem.device_array(4, stream=s)
    assert d.getitem(slice(None), stream=0).stream is s
    assert d.getitem(slice(None)).stream is s


def test_record_getitem_stream_0_keeps_the_records_stream():
    s = cudamem.stream()
    r = cudamem.DeviceRecord(REC, stream=s)
    r.setitem("a", 3, stream=0)
    assert r.getitem("a") == 3
    assert r.getitem("b", stream=0).stream is s


# --- iteration ------------------------------------------------------------

@pytest.mark.parametrize("h", [np.arange(12).reshape(3, 4),
                               np.arange(5.0),
                               np.arange(24).reshape(2, 3, 4)[:, ::-1, 1:],
                               np.zeros((0, 2))],
                         ids=["2-d", "1-d", "strided-3-d", "empty"])
def test_iteration_yields_what_numpy_yields(h):
    d = cudamem.to_device(h)
    rows = list(d)
    assert len(rows) == len(d) == len(h)
    for got, want in zip(rows, h):
        if h.ndim == 1:
            assert type(got) is type(want) and got == want
        else:
            assert type(got) is cudamem.DeviceNDArray
            np.testing.assert_array_equal(got.copy_to_host(), want)


def test_iteration_over_a_0_d_array_raises_as_numpy():
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        iter(np.zeros(()))
    d = cudamem.to_device(np.zeros(()))
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        iter(d)
    with pytest.raises(TypeError, match="len"):
        len(d)


def test_iteration_of_records():
    h = np.zeros(3, REC)
    h["a"] = [4, 5, 6]
    got = [r["a"] for r in cudamem.to_device(h)]
    assert got == [4, 5, 6]


# --- IpcHandle arguments ----------------------------------------------------

def _raw_handle():
    base = cudamem.to_device(np.arange(16, dtype=np.float32))
    return base, bytes(base.get_ipc_handle()._ipc_handle.handle)


class CUipcMemHandle:
    """What cuda.bindings makes and numba's GetIpcHandleMixin passes: the
    64 bytes in `.reserved`."""

    def __init__(self, reserved):
        self.reserved = reserved


def test_ipc_handle_takes_numpy_integers():
    shape, itemsize = (4, 4), np.dtype(np.float32).itemsize
    base, raw = _raw_handle()
    # pyblazing's call.
    h = cudamem.IpcHandle(None, raw, np.prod(shape) * itemsize)
    assert h.size == 64 and type(h.size) is int
    h = cudamem.IpcHandle(None, raw, np.uint32(8), offset=np.int64(8))
    assert (h.size, h.offset) == (8, 8) and type(h.offset) is int
    del base


@pytest.mark.parametrize("kind", ["ctypes-char", "ctypes-byte", "reserved",
                                  "bytearray", "list"])
def test_ipc_handle_takes_numba_handle_objects(kind):
    base, raw = _raw_handle()
    handle = {
        "ctypes-char": lambda: (ctypes.c_char * 64).from_buffer_copy(raw),
        "ctypes-byte": lambda: (ctypes.c_byte * 64).from_buffer_copy(raw),
        "reserved": lambda: CUipcMemHandle(raw),
        "bytearray": lambda: bytearray(raw),
        "list": lambda: list(raw),
    }[kind]()
    h = cudamem.IpcHandle(None, handle, 64)
    assert h.handle == raw
    assert pickle.loads(pickle.dumps(h)).handle == raw
    del base


@pytest.mark.parametrize("size, exc", [(2.0, TypeError),
                                       (np.float64(64), TypeError),
                                       (True, TypeError),
                                       (np.int64(-1), ValueError)])
def test_ipc_handle_refuses_non_int_sizes(size, exc):
    base, raw = _raw_handle()
    with pytest.raises(exc, match="size"):
        cudamem.IpcHandle(None, raw, size)
    with pytest.raises(exc, match="offset"):
        cudamem.IpcHandle(None, raw, 64, offset=size)
    del base


def test_ipc_handle_refuses_a_short_reserved():
    with pytest.raises(ValueError, match="64 bytes, not 3"):
        cudamem.IpcHandle(None, CUipcMemHandle(b"abc"), 3)


@pytest.mark.simulator
def test_numba_style_handle_opens_in_another_process(run_py):
    # numba's GetIpcHandleMixin: a CUipcMemHandle, an np-integer size and
    # offset, and get_device_identity() as source_info.
    base = cudamem.to_device(np.arange(16, dtype=np.float32))
    raw = bytes(base.get_ipc_handle()._ipc_handle.handle)
    identity = cudamem.get_current_device().get_device_identity()
    proc = run_py("""
import numpy as np, cudamem
class CUipcMemHandle:
    def __init__(self, reserved):
        self.reserved = reserved
h = cudamem.IpcHandle(None, CUipcMemHandle(%r), np.prod((2, 4)) * 4,
                      source_info=%r, offset=np.int64(16))
ctx = cudamem.current_context()
assert h.can_access_peer(ctx)
a = h.open_array(ctx, np.array([2, 4]), np.dtype(np.float32))
print(a.copy_to_host().tolist())
del a
h.close()
""" % (raw, identity))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(
        np.arange(16, dtype=np.float32)[4:12].reshape(2, 4).tolist())


# numba-cuda's kernel launch reads _strided_memory_view_shim from every
# argument with __cuda_memory__ (numba-cuda 0.30, found on an H200: a
# cudamem array passed to an @cuda.jit kernel raised AttributeError).
# numba builds it from device_ctypes_pointer, shape, dtype, size, strides
# and flags; NumPy's layout of the same view is the reference.

@pytest.mark.parametrize("view", [
    lambda a: a, lambda a: a.T, lambda a: a[:, ::2], lambda a: a[::-1],
    lambda a: a[1], lambda a: a[1:2, 2:3], lambda a: a[:0],
], ids=["c", "f", "strided", "reversed", "row", "one", "empty"])
def test_launch_view_describes_the_array(view):
    h = np.arange(24.0).reshape(4, 6)
    d = view(cudamem.to_device(h))
    ref = view(h)
    v = d._strided_memory_view_shim
    assert v.ptr == d.__cuda_array_interface__["data"][0]
    assert (v.shape, v.dtype, v.size) == (ref.shape, ref.dtype, ref.size)
    lay = v._layout
    assert lay.strides_in_bytes == ref.strides
    assert lay.is_contiguous_c == ref.flags.c_contiguous
    assert lay.is_contiguous_f == ref.flags.f_contiguous
    assert lay.is_contiguous_any == (ref.flags.c_contiguous
                                     or ref.flags.f_contiguous)


@pytest.mark.parametrize("make", [cudamem.mapped_array,
                                  cudamem.managed_array])
def test_launch_view_of_host_side_arrays(make):
    a = make((3, 4), np.int32)[:, 1:]
    v = a._strided_memory_view_shim
    assert v.ptr == a.__cuda_array_interface__["data"][0]
    assert (v.shape, v.size, v._layout.strides_in_bytes) == (
        a.shape, a.size, a.strides)
    assert not v._layout.is_contiguous_any


# numba's error wording where its tests match on it (numba-cuda 0.30's
# test_cuda_array_slicing, test_cuda_ndarray and test_multiprocessing).

def test_assigning_more_dimensions_uses_numba_s_words():
    d = cudamem.to_device(np.arange(5 * 7))
    with pytest.raises(ValueError) as e:
        d[:] = np.ones(shape=(1, 2, 3))
    assert str(e.value) == "Can't assign 3-D array to 1-D self"
    # Leading dimensions of length 1 broadcast, as NumPy's (numba refuses).
    d[:] = np.ones((1, 1, 35))
    np.testing.assert_array_equal(d.copy_to_host(), np.ones(35))


def test_np_array_copy_false_uses_numba_s_words():
    d = cudamem.to_device(np.asarray([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="^`copy=False` is not supported"):
        np.array(d, copy=False)


def test_repeated_transpose_axes_use_numba_s_words():
    d = cudamem.to_device(np.arange(12).reshape(3, 4))
    with pytest.raises(ValueError) as e:
        np.transpose(d, axes=(0, 0))
    assert str(e.value) == "invalid axes list (0, 0)"
