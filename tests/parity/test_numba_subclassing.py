"""numba's host types are Python classes that tests patch and code
subclasses; cudamem's C types allow the same: every public type can be
patched with unittest.mock.patch.object, and the array types, which have
numba's constructors, can be subclassed. numba-cuda's devicearray.py is
the reference: a subclass's views (getitem, reshape, ravel) keep its type
(``type(self)(...)``)."""
import gc
import pickle
import weakref
from unittest import mock

import numpy as np
import pytest

import cudamem
import cudamem.testing
from cudamem import _cudamem

PUBLIC = [_cudamem.DeviceNDArrayBase, _cudamem.DeviceNDArray,
          _cudamem.DeviceRecord, _cudamem.Stream, _cudamem.Event,
          _cudamem.Device, _cudamem.Context, _cudamem.MemoryPointer,
          _cudamem.Deallocations, _cudamem.HostBuffer]


class Tagged(cudamem.DeviceNDArray):
    tag = "mine"


class TaggedRecord(cudamem.DeviceRecord):
    pass


@pytest.mark.parametrize("cls", PUBLIC, ids=lambda c: c.__name__)
def test_every_public_type_can_be_patched(cls):
    name = next((n for n, v in vars(cls).items()
                 if callable(v) and not n.startswith("_")), "__repr__")
    original = getattr(cls, name)
    with mock.patch.object(cls, name, return_value=42) as patched:
        assert getattr(cls, name) is patched
    assert getattr(cls, name) is original


def test_a_patched_method_is_what_python_code_calls():
    s = cudamem.stream()
    with mock.patch.object(cudamem.Stream, "synchronize",
                           return_value=None) as sync:
        s.synchronize()
    sync.assert_called_once_with()


def test_a_subclass_is_constructed_like_numba_s():
    h = np.arange(12.0).reshape(3, 4)
    d = Tagged(h.shape, h.strides, h.dtype)
    assert type(d) is Tagged and d.tag == "mine"
    d.copy_to_device(h)
    np.testing.assert_array_equal(d.copy_to_host(), h)
    assert cudamem.is_cuda_array(d)
    assert isinstance(d, cudamem.DeviceNDArray)


@pytest.mark.parametrize("device_view, host_view", [
    (lambda a: a[1:], lambda a: a[1:]),
    (lambda a: a.getitem(slice(0, 2)), lambda a: a[0:2]),
    (lambda a: a.reshape(4, 3), lambda a: a.reshape(4, 3)),
    (lambda a: a.ravel(), lambda a: a.ravel()),
    (lambda a: a.T, lambda a: a.T),
], ids=["getitem", "getitem-method", "reshape", "ravel", "transpose"])
def test_views_of_a_subclass_keep_its_type(device_view, host_view):
    h = np.arange(12.0).reshape(3, 4)
    d = Tagged(h.shape, h.strides, h.dtype)
    d.copy_to_device(h)
    v = device_view(d)
    assert type(v) is Tagged
    np.testing.assert_array_equal(v.copy_to_host(), host_view(h))


def test_a_subclass_over_given_memory_and_stream():
    s = cudamem.stream()
    base = cudamem.to_device(np.arange(6, dtype=np.int32))
    d = Tagged((6,), (4,), np.int32, stream=s, gpu_data=base.gpu_data)
    assert d.stream is s
    assert d.device_ctypes_pointer.value == base.device_ctypes_pointer.value
    np.testing.assert_array_equal(d.copy_to_host(stream=s), np.arange(6))
    s.synchronize()


def test_a_record_subclass():
    dt = np.dtype([("a", np.int32), ("b", np.float64)])
    r = TaggedRecord(dt)
    assert type(r) is TaggedRecord
    host = np.zeros(1, dt)[0]
    host["a"], host["b"] = 7, 2.5
    r.copy_to_device(host)
    back = r.copy_to_host()
    assert (back["a"], back["b"]) == (7, 2.5)
    # A record subclass pickles as a record does: to its numpy.void.
    again = pickle.loads(pickle.dumps(r))
    assert type(again) is cudamem.DeviceRecord
    assert again.copy_to_host()["a"] == 7


class Finalized(cudamem.DeviceNDArray):
    """A subclass with what subtype_dealloc exists for: an instance dict,
    a finalizer and weak references."""

    def __del__(self):
        released.append(self.name)


released = []


@pytest.mark.parametrize("make", [
    lambda: cudamem.device_array(8, np.uint8),
    lambda: cudamem.to_device(np.zeros(1, [("a", np.int32)]))[0],
    lambda: Tagged((8,), (1,), np.uint8),
    lambda: TaggedRecord(np.dtype([("a", np.int32)])),
], ids=["DeviceNDArray", "DeviceRecord", "subclass", "record-subclass"])
def test_releasing_an_array_frees_its_memory_and_calls_weakrefs(make, sim):
    before = sim.live()
    a = make()
    assert sim.live() != before
    called = []
    ref = weakref.ref(a, called.append)
    del a
    cudamem.testing.quiesce()
    assert ref() is None and called == [ref]
    assert sim.live() == before


def test_a_subclass_s_dict_and_finalizer_go_with_it(sim):
    before = sim.live()
    d = Finalized((8,), (1,), np.uint8)
    d.name = "d"
    d.payload = d  # a cycle through the instance dict
    ref = weakref.ref(d)
    del d
    gc.collect()
    cudamem.testing.quiesce()
    assert ref() is None and released == ["d"]
    assert sim.live() == before


def test_types_made_only_by_cudamem_are_not_subclassed():
    for cls in (cudamem.Stream, cudamem.Event, _cudamem.MemoryPointer):
        with pytest.raises(TypeError, match="not an acceptable base type"):
            type("Sub", (cls,), {})
