"""The DLPack capsule exporter (py/dlpack.c) on NumPy arrays: what pinned,
mapped and managed arrays' __dlpack__ build on. NumPy is the consumer and
the reference; the capsule's fields are read back through ctypes."""
import ctypes
import gc
import sys
import threading

import numpy as np
import pytest

from cudamem import _cudamem
from tests.helpers.interop import (
    KDL_CPU,
    KDL_CUDA_HOST,
    KDL_CUDA_MANAGED,
    managed,
)

_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype = ctypes.c_int
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Producer:
    """The smallest __dlpack__ over _dlpack_export, as a CPU array."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None,
                   copy=None):
        return _cudamem._dlpack_export(self.array, KDL_CPU, 0, max_version)

    def __dlpack_device__(self):
        return (KDL_CPU, 0)


LAYOUTS = [
    (np.arange(24, dtype=np.float32).reshape(4, 6), ()),
    (np.arange(24, dtype=np.float64).reshape(4, 6), (slice(None, None, 2),
                                                     slice(None, None, -3))),
    (np.arange(60, dtype=np.int16).reshape(3, 4, 5).T, ()),
    (np.arange(10, dtype=np.uint8), (slice(7, 2, -2),)),
    (np.array([True, False, True]), ()),
    (np.arange(6, dtype=np.complex128) * 1j, ()),
    (np.full((), 3.5, np.float32), ()),
    (np.zeros((0, 3), np.int64), ()),
    # A zero stride, writable (broadcast_to's result is read-only, which a
    # legacy capsule cannot carry).
    (np.lib.stride_tricks.as_strided(np.arange(3, dtype=np.int32), (4, 3),
                                     (0, 4)), ()),
]


@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("case", range(len(LAYOUTS)))
def test_numpy_reads_what_was_exported(case, versioned):
    base, index = LAYOUTS[case]
    a = base[index] if index else base
    max_version = (1, 0) if versioned else None
    capsule = _cudamem._dlpack_export(a, KDL_CPU, 0, max_version)
    t = managed(capsule, versioned).dl_tensor
    assert t.ndim == a.ndim
    assert t.data == a.__array_interface__["data"][0]
    assert t.byte_offset == 0
    assert [t.shape[i] for i in range(a.ndim)] == list(a.shape)
    assert [t.strides[i] for i in range(a.ndim)] == [
        s // a.itemsize for s in a.strides]
    assert t.dtype.bits == a.itemsize * 8 and t.dtype.lanes == 1
    del t, capsule
    b = np.from_dlpack(Producer(a))
    np.testing.assert_array_equal(b, a)
    assert b.dtype == a.dtype
    assert b.__array_interface__["data"][0] == a.__array_interface__[
        "data"][0]


@pytest.mark.parametrize("dtype,code", [
    (np.bool_, 6), (np.int8, 0), (np.int64, 0), (np.uint32, 1),
    (np.float16, 2), (np.float64, 2), (np.complex64, 5)])
def test_dtype_codes(dtype, code):
    capsule = _cudamem._dlpack_export(np.zeros(2, dtype), KDL_CPU, 0)
    dt = managed(capsule, False).dl_tensor.dtype
    assert (dt.code, dt.bits) == (code, np.dtype(dtype).itemsize * 8)


def test_device_and_version_fields():
    a = np.ones(4)
    capsule = _cudamem._dlpack_export(a, KDL_CUDA_HOST, 3, (1, 5))
    m = managed(capsule, True)
    assert (m.major, m.minor) == (1, 1)
    assert (m.dl_tensor.device.device_type,
            m.dl_tensor.device.device_id) == (KDL_CUDA_HOST, 3)
    assert m.flags == 0
    a.flags.writeable = False
    m = managed(_cudamem._dlpack_export(a, KDL_CUDA_MANAGED, 0, (2, 0)),
                True)
    assert m.flags & 1 and m.dl_tensor.device.device_type == KDL_CUDA_MANAGED
    assert not np.from_dlpack(Producer(a)).flags.writeable


@pytest.mark.parametrize("max_version", [None, (0, 8)])
def test_old_consumers_get_the_legacy_capsule(max_version):
    capsule = _cudamem._dlpack_export(np.ones(2), KDL_CPU, 0, max_version)
    assert repr(capsule).startswith('<capsule object "dltensor"')


@pytest.mark.parametrize("dtype", ["M8[s]", "m8[ns]", ">f4", "O", "U3",
                                   [("a", "i4")], np.longdouble, "V8"])
def test_dtypes_dlpack_cannot_describe(dtype):
    a = np.zeros(2, dtype)
    if a.dtype.kind == "f" and a.itemsize == 8:
        pytest.skip("long double is double on this platform")
    with pytest.raises(BufferError, match="DLPack cannot describe dtype"):
        _cudamem._dlpack_export(a, KDL_CPU, 0)


def test_strides_that_are_not_whole_elements():
    raw = np.zeros(16, np.uint8)
    a = np.ndarray((2,), np.float32, raw.data, strides=(6,))
    with pytest.raises(BufferError, match="stride 6 of axis 0"):
        _cudamem._dlpack_export(a, KDL_CPU, 0)


@pytest.mark.parametrize("bad", [(1,), [1, 0], (1.0, 0), "1.0"])
def test_malformed_max_version(bad):
    with pytest.raises(TypeError, match="max_version"):
        _cudamem._dlpack_export(np.ones(2), KDL_CPU, 0, bad)


def test_bad_arguments():
    with pytest.raises(TypeError, match="NumPy array"):
        _cudamem._dlpack_export([1, 2], KDL_CPU, 0)
    with pytest.raises(ValueError, match="device_id 4294967296"):
        _cudamem._dlpack_export(np.ones(2), KDL_CPU, 2**32)


@pytest.mark.parametrize("versioned", [False, True])
def test_an_unconsumed_capsule_releases_its_array(versioned):
    a = np.ones(3)
    before = sys.getrefcount(a)
    capsule = _cudamem._dlpack_export(a, KDL_CPU, 0,
                                      (1, 0) if versioned else None)
    assert sys.getrefcount(a) == before + 1
    del capsule
    gc.collect()
    assert sys.getrefcount(a) == before


@pytest.mark.parametrize("versioned", [False, True])
def test_a_consumer_may_delete_on_another_thread(versioned):
    # The consumer renames the capsule, owns the tensor, and calls the
    # deleter later from a thread of its own without the GIL (ctypes drops
    # it around the call).
    a = np.ones(3)
    before = sys.getrefcount(a)
    capsule = _cudamem._dlpack_export(a, KDL_CPU, 0,
                                      (1, 0) if versioned else None)
    m = managed(capsule, versioned)
    assert _set_name(capsule, b"used_dltensor_versioned" if versioned
                     else b"used_dltensor") == 0
    del capsule
    assert sys.getrefcount(a) == before + 1
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
        ctypes.cast(m.deleter, ctypes.c_void_p).value)
    t = threading.Thread(target=deleter, args=(ctypes.addressof(m),))
    t.start()
    t.join()
    assert sys.getrefcount(a) == before
