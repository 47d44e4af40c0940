"""Hostile input (DESIGN rule 11): wrong calls to the array, stream and
device API, each checked for its exception, for a message that names the
offending value, and for having done nothing: no allocation, copy, memset
or stream made (the simulator's per entry point counters), the same live
objects, and every device array and host destination as it was.

The cases are tables, one row per call, grouped by what is wrong: types,
shapes, strides, dtypes, streams, foreign objects, malformed CUDA Array
Interface dicts and DLPack producers, stale objects (after ``close()`` or
``Device.reset()``) and the wrong device (two simulated devices, in one
subprocess). test_every_category_has_eight_cases counts them.
"""
import collections
import gc
import json
import re

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import cudamem
from cudamem.errors import CudaDriverError

pytestmark = pytest.mark.simulator

BIG = 2 ** 70  # fits no C integer
BIG_TEXT = str(BIG)
TWO_DEVICES = {"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None}
# Entry points that allocate, write or create: none may run for a call
# that fails validation.
WORK_PREFIXES = ("cuMemAlloc", "cuMemHost", "cuMemcpy", "cuMemset",
                 "cuStreamCreate", "cuEventCreate", "cuMemFree")


# ---------------------------------------------------------------------------
# Foreign objects.


class IndexRaises:
    def __index__(self):
        raise ZeroDivisionError("__index__ boom")


class ArrayRaises:
    def __array__(self, dtype=None, copy=None):
        raise ZeroDivisionError("__array__ boom")


class BoolRaises:
    def __bool__(self):
        raise ZeroDivisionError("__bool__ boom")


class DtypeRaises:
    """numpy.dtype() reads a .dtype attribute: this one raises."""

    @property
    def dtype(self):
        raise ZeroDivisionError("dtype boom")


# What NumPy makes of DtypeRaises, the reference for cudamem's dtype=:
# NumPy 2.2 (the newest for Python 3.10) gives its own TypeError in place
# of the property's error, later versions pass the error on.
try:
    np.dtype(DtypeRaises())
except ZeroDivisionError:
    DTYPE_RAISES = (ZeroDivisionError, r"dtype boom")
except TypeError:
    DTYPE_RAISES = (TypeError, r"Cannot interpret '<.*DtypeRaises object "
                               r"at 0x[0-9a-f]+>' as a data type")


class Foreign:
    """Another library's stream: __cuda_stream__() returns `value`."""

    def __init__(self, value):
        self.value = value

    def __cuda_stream__(self):
        return self.value


class InterfaceRaises:
    """A foreign array whose __cuda_array_interface__ raises."""

    @property
    def __cuda_array_interface__(self):
        raise ZeroDivisionError("__cuda_array_interface__ boom")


class InterfaceNotADict:
    __cuda_array_interface__ = [1, 2]


class ForeignSelf:
    def __cuda_stream__(self):
        return self


class ForeignRaises:
    def __cuda_stream__(self):
        raise ZeroDivisionError("__cuda_stream__ boom")


class ForeignPropertyRaises:
    @property
    def __cuda_stream__(self):
        raise RuntimeError("__cuda_stream__ attribute boom")


RECURSIVE = []
RECURSIVE.append(RECURSIVE)


class Exporter:
    """A producer with a CUDA Array Interface dict of its own."""

    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


def bad_cai(array, drop=None, **changes):
    """array's CUDA Array Interface with `changes` and without `drop`."""
    cai = dict(array.__cuda_array_interface__, **changes)
    cai.pop(drop, None)
    return cai


class DLProducer:
    """A DLPack producer whose two methods return what the test says."""

    def __init__(self, device, capsule):
        self.device = device
        self.capsule = capsule

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        return self.capsule


def wrong_capsule():
    import ctypes
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(8, b"not_dltensor", None)


def consumed(array):
    capsule = array.__dlpack__()
    cudamem.from_dlpack(capsule)
    return capsule


# ---------------------------------------------------------------------------
# The objects every case works on, and the checks that nothing happened.


class Env:
    """Device arrays with known contents, a host destination, a stream."""

    def __init__(self):
        self.h = np.arange(12.0).reshape(3, 4)
        self.d = cudamem.to_device(self.h)                 # float64 (3, 4)
        self.di = cudamem.to_device(np.arange(12, dtype=np.int32)
                                    .reshape(3, 4))       # int32 (3, 4)
        self.flat = cudamem.to_device(np.arange(10.0))     # float64 (10,)
        self.small = cudamem.to_device(np.full(3, 5.0))    # float64 (3,)
        self.zero_d = cudamem.to_device(np.float32(2.5))   # float32 ()
        self.recs = cudamem.to_device(
            np.array([(1, 2.5), (3, 4.5)], [("a", "<i4"), ("b", "<f8")]))
        self.rec = self.recs[0]                            # a DeviceRecord
        self.v = self.d[:, ::2]                            # a strided view
        self.out = np.full((3, 4), -1.0)                   # host destination
        self.s = cudamem.stream()
        self.dev = cudamem.get_current_device()
        self.arrays = {"d": self.d, "di": self.di, "flat": self.flat,
                       "small": self.small, "zero_d": self.zero_d,
                       "recs": self.recs}

    def contents(self):
        return {k: a.copy_to_host() for k, a in self.arrays.items()}


def work_counts(sim):
    calls = sim.stats()["calls"]
    return {k: v["calls"] for k, v in calls.items()
            if k.startswith(WORK_PREFIXES)}


def settle():
    gc.collect()
    cudamem._cudamem._flush_pending()


class NothingHappened:
    """Snapshots live objects, work counters, device contents and host
    buffers; check() asserts they are unchanged."""

    def __init__(self, sim, contents, hosts=()):
        self.sim = sim
        self.contents_fn = contents
        self.hosts = list(hosts)
        self.before_contents = contents()
        self.before_hosts = [h.copy() for h in self.hosts]
        settle()
        self.before_live = sim.live()
        self.before_work = work_counts(sim)

    def check(self):
        settle()
        work = {k: (self.before_work[k], v)
                for k, v in work_counts(self.sim).items()
                if v != self.before_work[k]}
        assert not work, "allocated, wrote or created (before, after): %r" \
            % work
        assert self.sim.live() == self.before_live
        after = self.contents_fn()
        for key, before in self.before_contents.items():
            np.testing.assert_array_equal(after[key], before,
                                          err_msg="device array %s" % key)
        for host, before in zip(self.hosts, self.before_hosts):
            np.testing.assert_array_equal(host, before,
                                          err_msg="host destination")


CATEGORIES = collections.Counter()


def case(category, name, call, exc, match):
    """One row: `call(env)` raises `exc` with a message matching `match`."""
    CATEGORIES[category] += 1
    return pytest.param(call, exc, match, id="%s-%s" % (category, name))



def writeable_strided(shape, strides):
    return as_strided(np.full(64, -1.0), shape, strides, writeable=True)


# A few host buffers made once: checked for being unchanged too.
ZERO_STRIDE_DEST = writeable_strided((3, 4), (0, 8))
ZERO_STRIDE_DEST_1 = writeable_strided((3, 4), (32, 0))
OVERLAPPING_DEST = writeable_strided((3, 4), (8, 8))

CASES = [
    # -- types ------------------------------------------------------------
    case("types", "to_device-to-str",
         lambda e: cudamem.to_device(e.h, to="x"),
         TypeError, r"to= must be a device array, not str"),
    case("types", "copy_to_host-int",
         lambda e: e.d.copy_to_host(3),
         TypeError, r"needs a numpy\.ndarray for ary, not int"),
    case("types", "copy_to_host-list",
         lambda e: e.d.copy_to_host([0.0] * 12),
         TypeError, r"needs a numpy\.ndarray for ary, not list"),
    case("types", "device_array-float-shape",
         lambda e: cudamem.device_array(1.5),
         TypeError, r"shape must be an int or a sequence of ints, not float"),
    case("types", "device_array-None-shape",
         lambda e: cudamem.device_array(None),
         TypeError, r"shape must be an int .* not NoneType"),
    case("types", "device_array-str-in-shape",
         lambda e: cudamem.device_array((2, "x")),
         TypeError, r"shape \(2, 'x'\): str is not an int"),
    case("types", "fill-str",
         lambda e: e.d.fill("a"),
         TypeError, r"fill\(\) needs a scalar, not str"),
    case("types", "fill-None",
         lambda e: e.d.fill(None),
         TypeError, r"fill\(\) needs a scalar, not NoneType"),
    case("types", "fill-ndarray",
         lambda e: e.d.fill(np.ones(3)),
         TypeError, r"fill\(\) needs a scalar, not numpy\.ndarray"),
    case("types", "reshape-float",
         lambda e: e.d.reshape(1.5),
         TypeError, r"shape must be an int or a sequence of ints, not float"),
    case("types", "reshape-str",
         lambda e: e.d.reshape("ab"),
         TypeError, r"shape 'ab': str is not an int"),
    case("types", "squeeze-axis-str",
         lambda e: e.d.squeeze(axis="a"),
         TypeError, r"axis must be an int, not str"),
    case("types", "squeeze-axis-list",
         lambda e: e.d.squeeze(axis=[0]),
         TypeError, r"axis must be an int, not list"),
    case("types", "transpose-str-axes",
         lambda e: e.d.transpose(("a", "b")),
         TypeError, r"axis must be an int, not str"),
    case("types", "getitem-str",
         lambda e: e.d["a"],
         IndexError, r"valid indices, not str"),
    case("types", "getitem-float",
         lambda e: e.d[1.5],
         IndexError, r"valid indices, not float"),
    case("types", "getitem-int-array",
         lambda e: e.d[np.array([0, 1])],
         TypeError, r"such as array\(\[0, 1\]\) are not supported"),
    case("types", "getitem-device-int-array",
         lambda e: e.d[e.di],
         TypeError, r"integer-array .*not supported"),
    case("types", "setitem-dict",
         lambda e: e.d.__setitem__(0, {}),
         TypeError, r"not 'dict'"),
    case("types", "split-str",
         lambda e: e.flat.split("a"),
         TypeError, r"'str' object cannot be interpreted as an integer"),
    case("types", "view-int",
         lambda e: e.d.view(3),
         TypeError, r"Cannot interpret '3' as a data type"),
    case("types", "select_device-str",
         lambda e: cudamem.select_device("0"),
         TypeError, r"device must be an int ordinal or a Device, not str"),
    case("types", "select_device-float",
         lambda e: cudamem.select_device(1.0),
         TypeError, r"device must be an int ordinal or a Device, not float"),
    case("types", "current_context-str",
         lambda e: cudamem.current_context("0"),
         TypeError, r"device must be an int ordinal or a Device, not str"),
    case("types", "can_access_peer-str",
         lambda e: cudamem.can_access_peer("a", 0),
         TypeError, r"device must be an int ordinal or a Device, not str"),
    case("types", "stream-priority-str",
         lambda e: cudamem.stream(priority="a"),
         TypeError, r"priority must be an int or None, not str"),
    case("types", "external_stream-float",
         lambda e: cudamem.external_stream(1.0),
         TypeError, r"needs an int stream handle, not float"),
    case("types", "device_array_like-int",
         lambda e: cudamem.device_array_like(3),
         TypeError, r"\bint\b"),
    case("types", "device-attribute-set",
         lambda e: setattr(e.dev, "MULTIPROCESSOR_COUNT", 3),
         AttributeError, r"MULTIPROCESSOR_COUNT.*(read-only|not writable)"),
    case("types", "device-attribute-unknown",
         lambda e: e.dev.NOT_AN_ATTRIBUTE,
         AttributeError, r"no attribute 'NOT_AN_ATTRIBUTE'"),
    case("types", "device-attribute-lowercase",
         lambda e: e.dev.multiprocessor_count,
         AttributeError, r"no attribute 'multiprocessor_count'"),
    case("types", "device-id-set",
         lambda e: setattr(e.dev, "id", 3),
         AttributeError, r"'id' of 'cudamem\.Device' objects is not writable"),
    case("types", "device-reset-args",
         lambda e: e.dev.reset(1),
         TypeError, r"reset\(\) takes no arguments \(1 given\)"),
    case("types", "record-unknown-field",
         lambda e: e.rec["zz"],
         KeyError, r"no field of name 'zz'"),
    case("types", "record-field-str",
         lambda e: e.rec.__setitem__("a", "x"),
         ValueError, r"invalid literal for int\(\) with base 10: 'x'"),
    case("types", "record-delete-field",
         lambda e: e.rec.__delitem__("a"),
         ValueError, r"cannot delete record fields"),
    case("types", "array-shape-set",
         lambda e: setattr(e.d, "shape", (12,)),
         AttributeError, r"'shape' of 'cudamem\.DeviceNDArray(Base)?' "
         r"objects is not writable"),

    # -- shapes -----------------------------------------------------------
    case("shapes", "device_array-negative",
         lambda e: cudamem.device_array((-1,)),
         ValueError, r"negative dimensions are not allowed: shape \(-1,\)"),
    case("shapes", "device_array-negative-2d",
         lambda e: cudamem.device_array((2, -3)),
         ValueError, r"negative dimensions .* shape \(2, -3\)"),
    case("shapes", "device_array-too-many-dims",
         lambda e: cudamem.device_array((1,) * 65),
         ValueError, r"has 65 dimensions; at most 64"),
    case("shapes", "device_array-too-big",
         lambda e: cudamem.device_array((2 ** 62, 2 ** 62)),
         ValueError, r"array is too big"),
    case("shapes", "device_array-huge-int",
         lambda e: cudamem.device_array(BIG),
         ValueError, BIG_TEXT),
    case("shapes", "device_array-huge-int-in-tuple",
         lambda e: cudamem.device_array((2, BIG)),
         ValueError, BIG_TEXT),
    case("shapes", "copy_to_host-shape",
         lambda e: e.d.copy_to_host(e.out.reshape(4, 3)),
         ValueError, r"incompatible shape: \(3, 4\) vs\. \(4, 3\)"),
    case("shapes", "copy_to_device-shape",
         lambda e: e.d.copy_to_device(np.zeros(12)),
         ValueError, r"incompatible shape: \(3, 4\) vs\. \(12,\)"),
    case("shapes", "copy_to_device-scalar",
         lambda e: e.d.copy_to_device(1.0),
         ValueError, r"incompatible shape: \(3, 4\) vs\. \(\)"),
    case("shapes", "copy_to_device-device-shape",
         lambda e: e.d.copy_to_device(e.d.T),
         ValueError, r"incompatible shape: \(3, 4\) vs\. \(4, 3\)"),
    case("shapes", "to_device-to-shape",
         lambda e: cudamem.to_device(np.ones(5), to=e.d),
         ValueError, r"incompatible shape: \(3, 4\) vs\. \(5,\)"),
    case("shapes", "setitem-broadcast",
         lambda e: e.d.__setitem__(Ellipsis, np.zeros(3)),
         ValueError, r"could not broadcast input array from shape \(3,\) "
         r"into shape \(3, 4\)"),
    case("shapes", "setitem-broadcast-device",
         lambda e: e.d.__setitem__(slice(None), e.small),
         ValueError, r"from shape \(3,\) into shape \(3, 4\)"),
    case("shapes", "setitem-row-broadcast",
         lambda e: e.d.__setitem__(0, np.zeros((2, 4))),
         ValueError, r"^Can't assign 2-D array to 1-D self$"),
    case("shapes", "reshape-size",
         lambda e: e.d.reshape(5),
         ValueError, r"cannot reshape array of size 12 into shape \(5,\)"),
    case("shapes", "reshape-unknown",
         lambda e: e.d.reshape(-1, 5),
         ValueError, r"cannot reshape array of size 12 into shape \(-1, 5\)"),
    case("shapes", "reshape-two-unknown",
         lambda e: e.d.reshape(-1, -1),
         ValueError, r"invalid shape \(-1, -1\) for reshape"),
    case("shapes", "reshape-huge-int",
         lambda e: e.d.reshape(BIG),
         ValueError, BIG_TEXT),
    case("shapes", "squeeze-not-one",
         lambda e: e.d.squeeze(axis=0),
         ValueError, r"axis 0 has size 3"),
    case("shapes", "squeeze-out-of-bounds",
         lambda e: e.d.squeeze(axis=5),
         ValueError, r"axis 5 is out of bounds for array of dimension 2"),
    case("shapes", "split-2d",
         lambda e: e.d.split(2),
         ValueError, r"only support split on 1D array \(this one has 2 "
         r"dimensions\)"),
    case("shapes", "split-zero",
         lambda e: e.flat.split(0),
         ValueError, r"split section must be positive, not 0"),
    case("shapes", "getitem-out-of-bounds",
         lambda e: e.d[3],
         IndexError, r"index 3 is out of bounds for axis 0 with size 3"),
    case("shapes", "getitem-out-of-bounds-axis-1",
         lambda e: e.d[0, -5],
         IndexError, r"index -5 is out of bounds for axis 1 with size 4"),
    case("shapes", "getitem-too-many",
         lambda e: e.d[0, 0, 0],
         IndexError, r"array is 2-dimensional, but 3 were indexed"),
    case("shapes", "getitem-too-many-new-axes",
         lambda e: e.d[(None,) * 70],
         IndexError, r"more than 64 dimensions"),
    case("shapes", "getitem-huge-int",
         lambda e: e.d[BIG],
         IndexError, BIG_TEXT),
    case("shapes", "setitem-out-of-bounds",
         lambda e: e.d.__setitem__((1, 4), 0.0),
         IndexError, r"index 4 is out of bounds for axis 1 with size 4"),
    case("shapes", "transpose-axes-count",
         lambda e: e.d.transpose((0,)),
         ValueError, r"axes \(0,\) don't match array of 2 dimensions"),
    case("shapes", "transpose-repeated",
         lambda e: e.d.transpose((1, 1)),
         ValueError, r"invalid axes list \(1, 1\)"),
    case("shapes", "delitem",
         lambda e: e.d.__delitem__(0),
         ValueError, r"cannot delete device array elements"),

    # -- strides ----------------------------------------------------------
    case("strides", "device_array-count",
         lambda e: cudamem.device_array((2, 2), strides=(8,)),
         ValueError, r"strides \(8,\) do not match the 2 dimensions of the "
         r"shape \(2, 2\)"),
    case("strides", "device_array-empty",
         lambda e: cudamem.device_array((2, 2), strides=[]),
         ValueError, r"strides \[\] do not match"),
    case("strides", "device_array-str",
         lambda e: cudamem.device_array(3, strides="x"),
         TypeError, r"strides 'x': str is not an int"),
    case("strides", "device_array-float",
         lambda e: cudamem.device_array((2, 2), strides=(8, 1.5)),
         TypeError, r"strides \(8, 1\.5\): float is not an int"),
    case("strides", "device_array-object",
         lambda e: cudamem.device_array(3, strides=object()),
         TypeError, r"strides must be an int or a sequence of ints, not "
         r"object"),
    case("strides", "device_array-huge-int",
         lambda e: cudamem.device_array(3, strides=(BIG,)),
         ValueError, BIG_TEXT),
    case("strides", "device_array-extent-too-big",
         lambda e: cudamem.device_array(3, strides=(2 ** 62,)),
         ValueError, r"strides \(4611686018427387904,\)"),
    case("strides", "copy_to_host-zero-stride",
         lambda e: e.d.copy_to_host(ZERO_STRIDE_DEST),
         ValueError, r"destination stride 0 in dimension 0 of length 3"),
    case("strides", "copy_to_host-zero-stride-inner",
         lambda e: e.d.copy_to_host(ZERO_STRIDE_DEST_1),
         ValueError, r"destination stride 0 in dimension 1 of length 4"),
    case("strides", "copy_to_host-overlapping",
         lambda e: e.d.copy_to_host(OVERLAPPING_DEST),
         ValueError, r"\(8, 8\)"),
    case("strides", "copy_to_host-broadcast-readonly",
         lambda e: e.d.copy_to_host(np.broadcast_to(np.zeros(4), (3, 4))),
         ValueError, r"copy_to_host destination is read-only"),
    case("strides", "copy_to_host-strided-shape",
         lambda e: e.v.copy_to_host(e.out[::2, ::2]),
         ValueError, r"incompatible shape: \(3, 2\) vs\. \(2, 2\)"),
    case("strides", "copy_to_host-transposed",
         lambda e: e.d.T.copy_to_host(e.out),
         ValueError, r"incompatible shape: \(4, 3\) vs\. \(3, 4\)"),
    case("strides", "copy_to_device-strided-view",
         lambda e: e.v.copy_to_device(np.zeros((3, 4))),
         ValueError, r"incompatible shape: \(3, 2\) vs\. \(3, 4\)"),
    case("strides", "copy_to_device-negative-strides",
         lambda e: e.d[::-1, ::-2].copy_to_device(
             np.zeros((4, 3))[::-1, ::-1]),
         ValueError, r"incompatible shape: \(3, 2\) vs\. \(4, 3\)"),
    case("strides", "setitem-strided-broadcast",
         lambda e: e.v.__setitem__(Ellipsis, np.zeros((3, 4))[:, ::-1]),
         ValueError, r"from shape \(3, 4\) into shape \(3, 2\)"),
    case("strides", "slice-step-zero",
         lambda e: e.d[::0],
         ValueError, r"slice step cannot be zero"),
    case("strides", "view-noncontiguous-last-axis",
         lambda e: e.v.view(np.int32),
         ValueError, r"the last axis must be contiguous"),

    # -- dtypes -----------------------------------------------------------
    case("dtypes", "device_array-object",
         lambda e: cudamem.device_array(3, dtype=object),
         TypeError, r"dtype\('O'\) holds Python objects"),
    case("dtypes", "device_array-object-field",
         lambda e: cudamem.device_array(2, [("a", "f8"), ("b", "O")]),
         TypeError, r"\('b', 'O'\).* holds Python objects"),
    case("dtypes", "device_array-unknown",
         lambda e: cudamem.device_array(3, dtype="foo"),
         TypeError, r"data type 'foo' not understood"),
    case("dtypes", "device_array-no-size",
         lambda e: cudamem.device_array(3, dtype="V0"),
         ValueError, r"dtype\('V'\) has no size"),
    case("dtypes", "to_device-objects",
         lambda e: cudamem.to_device(np.array([object()])),
         TypeError, r"dtype\('O'\) holds Python objects"),
    case("dtypes", "to_device-none",
         lambda e: cudamem.to_device(None),
         TypeError, r"dtype\('O'\) holds Python objects"),
    case("dtypes", "copy_to_host-dtype",
         lambda e: e.d.copy_to_host(np.zeros((3, 4), np.float32)),
         TypeError, r"incompatible dtype: dtype\('float64'\) vs\. "
         r"dtype\('float32'\)"),
    case("dtypes", "copy_to_device-dtype",
         lambda e: e.d.copy_to_device(np.zeros((3, 4), np.int64)),
         TypeError, r"incompatible dtype: dtype\('float64'\) vs\. "
         r"dtype\('int64'\)"),
    case("dtypes", "copy_to_device-device-dtype",
         lambda e: e.d.copy_to_device(e.di),
         TypeError, r"vs\. dtype\('int32'\)"),
    case("dtypes", "to_device-to-dtype",
         lambda e: cudamem.to_device(np.zeros((3, 4), np.float32), to=e.d),
         TypeError, r"vs\. dtype\('float32'\)"),
    case("dtypes", "setitem-device-dtype",
         lambda e: e.d.__setitem__(Ellipsis, e.di),
         TypeError, r"device array of dtype dtype\('int32'\) to one of "
         r"dtype dtype\('float64'\)"),
    case("dtypes", "setitem-str",
         lambda e: e.d.__setitem__(0, "abc"),
         ValueError, r"could not convert string to float: 'abc'"),
    case("dtypes", "setitem-int-overflow",
         lambda e: e.di.__setitem__((0, 0), 2 ** 40),
         OverflowError, r"Python integer 1099511627776 out of bounds for "
         r"int32"),
    case("dtypes", "setitem-None-int",
         lambda e: e.di.__setitem__((0, 0), None),
         TypeError, r"not 'NoneType'"),
    case("dtypes", "fill-int-overflow",
         lambda e: e.di.fill(2 ** 40),
         OverflowError, r"1099511627776 out of bounds for int32"),
    case("dtypes", "fill-complex",
         lambda e: e.d.fill(1j),
         TypeError, r"not 'complex'"),
    case("dtypes", "view-object",
         lambda e: e.d.view(object),
         TypeError, r"dtype\('O'\) holds Python objects"),
    case("dtypes", "view-unknown",
         lambda e: e.d.view("foo"),
         TypeError, r"data type 'foo' not understood"),
    case("dtypes", "view-no-size",
         lambda e: e.d.view("S0"),
         ValueError, r"dtype\('S'\) has no size"),
    case("dtypes", "view-0d-itemsize",
         lambda e: e.zero_d.view(np.int64),
         ValueError, r"0d array is only supported if the itemsize is "
         r"unchanged"),
    # numba's rule and words (the remainder of the last axis's bytes, "a
    # larger dtype" even for a smaller one); NumPy refuses V3 of float64
    # outright, but numba's message is the reference (DESIGN rule 11).
    case("dtypes", "view-itemsize-not-divisor",
         lambda e: e.d.view("V3"),
         ValueError, r"When changing to a larger dtype, its size must be a "
         r"divisor of the total size in bytes of the last axis"),
    case("dtypes", "array-dtype-unknown",
         lambda e: e.d.__array__("foo"),
         TypeError, r"data type 'foo' not understood"),

    # -- streams ----------------------------------------------------------
    case("streams", "copy_to_host-str",
         lambda e: e.d.copy_to_host(stream="x"),
         TypeError, r"stream must be 0, a cudamem Stream or an object with "
         r"__cuda_stream__, not str"),
    case("streams", "to_device-float",
         lambda e: cudamem.to_device(e.h, stream=1.5),
         TypeError, r"__cuda_stream__, not float"),
    case("streams", "fill-list",
         lambda e: e.d.fill(1, stream=[]),
         TypeError, r"__cuda_stream__, not list"),
    case("streams", "bind-str",
         lambda e: e.d.bind("x"),
         TypeError, r"__cuda_stream__, not str"),
    case("streams", "copy_to_host-int",
         lambda e: e.d.copy_to_host(stream=3),
         ValueError, r"invalid stream 3: .*external_stream"),
    case("streams", "copy_to_host-true",
         lambda e: e.d.copy_to_host(e.out, stream=True),
         ValueError, r"invalid stream True"),
    case("streams", "copy_to_host-huge",
         lambda e: e.d.copy_to_host(stream=BIG),
         ValueError, r"invalid stream %s" % BIG_TEXT),
    case("streams", "copy_to_device-negative",
         lambda e: e.d.copy_to_device(e.h, stream=-1),
         ValueError, r"invalid stream -1"),
    case("streams", "copy_to_device-raw-handle",
         lambda e: e.d.copy_to_device(e.h, stream=int(e.s)),
         ValueError, r"invalid stream \d{4,}: .*external_stream\(handle\)"),
    case("streams", "device_array-numpy-int",
         lambda e: cudamem.device_array(3, stream=np.int64(5)),
         ValueError, r"invalid stream (np\.int64\()?5\b"),
    case("streams", "split-int",
         lambda e: e.flat.split(2, stream=3),
         ValueError, r"invalid stream 3"),
    case("streams", "ravel-int",
         lambda e: e.d.T.ravel(stream=3),
         ValueError, r"invalid stream 3"),
    case("streams", "record-getitem-str",
         lambda e: e.rec.getitem("a", stream="x"),
         TypeError, r"__cuda_stream__, not str"),
    case("streams", "squeeze-int",
         lambda e: e.d.squeeze(stream=7),
         ValueError, r"invalid stream 7"),
    case("streams", "device_array_like-str",
         lambda e: cudamem.device_array_like(e.d, stream="x"),
         TypeError, r"__cuda_stream__, not str"),
    case("streams", "external_stream-zero",
         lambda e: cudamem.external_stream(0),
         ValueError, r"invalid stream handle 0 .*use default_stream\(\)"),
    case("streams", "external_stream-negative",
         lambda e: cudamem.external_stream(-1),
         ValueError, r"invalid stream handle -1 for external_stream"),
    case("streams", "external_stream-too-big",
         lambda e: cudamem.external_stream(2 ** 64),
         ValueError, r"invalid stream handle 18446744073709551616"),
    case("streams", "external_stream-bool",
         lambda e: cudamem.external_stream(True),
         TypeError, r"needs an int stream handle, not bool"),
    case("streams", "stream-priority-bool",
         lambda e: cudamem.stream(priority=True),
         TypeError, r"priority must be an int or None, not bool"),
    case("streams", "stream-unknown-keyword",
         lambda e: cudamem.stream(flags=1),
         TypeError, r"unexpected keyword argument 'flags'"),
    case("streams", "synchronize-args",
         lambda e: e.s.synchronize(3),
         TypeError, r"synchronize\(\) takes no arguments \(1 given\)"),

    # -- foreign objects --------------------------------------------------
    case("foreign", "to_device-array-raises",
         lambda e: cudamem.to_device(ArrayRaises()),
         ZeroDivisionError, r"__array__ boom"),
    case("foreign", "copy_to_device-array-raises",
         lambda e: e.d.copy_to_device(ArrayRaises()),
         ZeroDivisionError, r"__array__ boom"),
    case("foreign", "setitem-array-raises",
         lambda e: e.d.__setitem__(Ellipsis, ArrayRaises()),
         ZeroDivisionError, r"__array__ boom"),
    case("foreign", "copy_to_device-interface-raises",
         lambda e: e.d.copy_to_device(InterfaceRaises()),
         ZeroDivisionError, r"__cuda_array_interface__ boom"),
    case("foreign", "setitem-interface-raises",
         lambda e: e.d.__setitem__(Ellipsis, InterfaceRaises()),
         ZeroDivisionError, r"__cuda_array_interface__ boom"),
    case("foreign", "to_device-interface-not-a-dict",
         lambda e: cudamem.to_device(InterfaceNotADict()),
         TypeError, r"Interface must be a dict, not list"),
    case("foreign", "setitem-interface-not-a-dict",
         lambda e: e.d.__setitem__(Ellipsis, InterfaceNotADict()),
         TypeError, r"Interface must be a dict, not list"),
    case("foreign", "device_array-index-raises",
         lambda e: cudamem.device_array((2, IndexRaises())),
         ZeroDivisionError, r"__index__ boom"),
    case("foreign", "getitem-index-raises",
         lambda e: e.d[IndexRaises()],
         ZeroDivisionError, r"__index__ boom"),
    case("foreign", "setitem-index-raises",
         lambda e: e.d.__setitem__((0, IndexRaises()), 1.0),
         ZeroDivisionError, r"__index__ boom"),
    case("foreign", "slice-index-raises",
         lambda e: e.d[IndexRaises():],
         ZeroDivisionError, r"__index__ boom"),
    case("foreign", "reshape-index-raises",
         lambda e: e.d.reshape(IndexRaises()),
         ZeroDivisionError, r"__index__ boom"),
    case("foreign", "select_device-index-raises",
         lambda e: cudamem.select_device(IndexRaises()),
         ZeroDivisionError, r"__index__ boom"),
    case("foreign", "external_stream-index-raises",
         lambda e: cudamem.external_stream(IndexRaises()),
         ZeroDivisionError, r"__index__ boom"),
    case("foreign", "priority-index-raises",
         lambda e: cudamem.stream(priority=IndexRaises()),
         ZeroDivisionError, r"__index__ boom"),
    case("foreign", "to_device-copy-bool-raises",
         lambda e: cudamem.to_device(e.h, copy=BoolRaises()),
         ZeroDivisionError, r"__bool__ boom"),
    case("foreign", "device_array-dtype-raises",
         lambda e: cudamem.device_array(2, dtype=DtypeRaises()),
         *DTYPE_RAISES),
    case("foreign", "stream-returns-None",
         lambda e: e.d.copy_to_host(stream=Foreign(None)),
         TypeError, r"__cuda_stream__\(\) of Foreign must return a "
         r"\(version, handle\) tuple, not None"),
    case("foreign", "stream-returns-self",
         lambda e: e.d.copy_to_host(stream=ForeignSelf()),
         TypeError, r"__cuda_stream__\(\) of ForeignSelf must return a "
         r"\(version, handle\) tuple"),
    case("foreign", "stream-returns-str-handle",
         lambda e: e.d.copy_to_device(e.h, stream=Foreign((0, "1"))),
         TypeError, r"must return two ints \(version, handle\), not "
         r"\(0, '1'\)"),
    case("foreign", "stream-version-1",
         lambda e: e.d.fill(0, stream=Foreign((1, int(e.s)))),
         ValueError, r"returned version 1: cudamem understands version 0"),
    case("foreign", "stream-negative-handle",
         lambda e: cudamem.to_device(e.h, stream=Foreign((0, -1))),
         ValueError, r"returned an invalid stream handle -1"),
    case("foreign", "stream-huge-handle",
         lambda e: cudamem.device_array(3, stream=Foreign((0, BIG))),
         ValueError, r"invalid stream handle %s" % BIG_TEXT),
    case("foreign", "stream-raises",
         lambda e: e.d.copy_to_host(stream=ForeignRaises()),
         ZeroDivisionError, r"__cuda_stream__ boom"),
    case("foreign", "stream-attribute-raises",
         lambda e: e.d.bind(ForeignPropertyRaises()),
         RuntimeError, r"__cuda_stream__ attribute boom"),
    case("foreign", "recursive-list-to_device",
         lambda e: cudamem.to_device(RECURSIVE),
         ValueError, r"maximum number of dimension of 64"),
    case("foreign", "recursive-list-copy_to_device",
         lambda e: e.d.copy_to_device(RECURSIVE),
         ValueError, r"maximum number of dimension of 64"),
    case("foreign", "recursive-list-setitem",
         lambda e: e.d.__setitem__(Ellipsis, RECURSIVE),
         ValueError, r"maximum number of dimension of 64"),
    case("foreign", "recursive-list-shape",
         lambda e: cudamem.device_array(RECURSIVE),
         TypeError, r"shape \[\[\.\.\.\]\]: list is not an int"),
    case("foreign", "recursive-list-index",
         lambda e: e.d[RECURSIVE],
         TypeError, r"such as \[\[\.\.\.\]\] are not supported"),
    case("foreign", "huge-int-squeeze-axis",
         lambda e: e.d.squeeze(axis=BIG),
         ValueError, r"axis %s is out of bounds" % BIG_TEXT),
    case("foreign", "huge-int-transpose-axis",
         lambda e: e.d.transpose(BIG, 0),
         ValueError, r"axis %s is out of bounds" % BIG_TEXT),
    case("foreign", "huge-int-select_device",
         lambda e: cudamem.select_device(BIG),
         ValueError, r"device ordinal %s out of range" % BIG_TEXT),
    case("foreign", "huge-int-memory-view",
         lambda e: e.d.gpu_data.view(0, BIG),
         (IndexError, ValueError), BIG_TEXT),

    # -- malformed CUDA Array Interface / DLPack --------------------------
    case("cai_dlpack", "cai-shape-str",
         lambda e: cudamem.from_cuda_array_interface(bad_cai(e.d,
                                                             shape="12")),
         TypeError, r"'shape' must be a tuple of ints, not '12'"),
    case("cai_dlpack", "cai-negative-shape",
         lambda e: cudamem.as_cuda_array(Exporter(bad_cai(e.flat,
                                                          shape=(-1,)))),
         ValueError, r"negative dimensions .* shape is \(-1,\)"),
    case("cai_dlpack", "cai-typestr-unknown",
         lambda e: cudamem.from_cuda_array_interface(bad_cai(e.d,
                                                             typestr="<q9")),
         ValueError, r"typestr '<q9' is not a NumPy dtype"),
    case("cai_dlpack", "cai-typestr-int",
         lambda e: cudamem.as_cuda_array(Exporter(bad_cai(e.d, typestr=8))),
         TypeError, r"typestr must be a str, not 8"),
    case("cai_dlpack", "cai-data-int",
         lambda e: cudamem.from_cuda_array_interface(bad_cai(e.d, data=5)),
         TypeError, r"data must be a tuple \(ptr, readonly\), not 5"),
    case("cai_dlpack", "cai-pointer-str",
         lambda e: cudamem.from_cuda_array_interface(
             bad_cai(e.d, data=("0x10", False))),
         TypeError, r"data pointer must be an int, not '0x10'"),
    case("cai_dlpack", "cai-negative-pointer",
         lambda e: cudamem.as_cuda_array(Exporter(bad_cai(e.d,
                                                          data=(-8, False)))),
         ValueError, r"data pointer -8 is not an address"),
    case("cai_dlpack", "cai-readonly-str",
         lambda e: cudamem.from_cuda_array_interface(
             bad_cai(e.d, data=(e.d.device_ctypes_pointer.value, "no"))),
         TypeError, r"readonly flag must be a bool, not 'no'"),
    case("cai_dlpack", "cai-version-9",
         lambda e: cudamem.from_cuda_array_interface(bad_cai(e.d,
                                                             version=9)),
         ValueError, r"unsupported CUDA Array Interface version 9"),
    case("cai_dlpack", "cai-strides-length",
         lambda e: cudamem.from_cuda_array_interface(
             bad_cai(e.flat, strides=(8, 8))),
         ValueError, r"strides \(8, 8\) do not match the 1 dimensions of "
         r"its shape \(10,\)"),
    case("cai_dlpack", "cai-stream-zero",
         lambda e: cudamem.as_cuda_array(Exporter(bad_cai(e.d, stream=0))),
         ValueError, r"invalid stream 0 in the CUDA Array Interface"),
    case("cai_dlpack", "cai-stream-str",
         lambda e: cudamem.from_cuda_array_interface(bad_cai(e.d,
                                                             stream="x")),
         TypeError, r"stream must be None or an int, not 'x'"),
    case("cai_dlpack", "cai-no-data",
         lambda e: cudamem.from_cuda_array_interface(bad_cai(e.d,
                                                             drop="data")),
         KeyError, r"has no 'data'"),
    case("cai_dlpack", "dlpack-int",
         lambda e: cudamem.from_dlpack(5),
         TypeError, r"__dlpack__ or a DLPack capsule, not int"),
    case("cai_dlpack", "dlpack-returns-None",
         lambda e: cudamem.from_dlpack(DLProducer((2, 0), None)),
         TypeError, r"__dlpack__\(\) must return a PyCapsule, not NoneType"),
    case("cai_dlpack", "dlpack-capsule-name",
         lambda e: cudamem.from_dlpack(DLProducer((2, 0), wrong_capsule())),
         ValueError, r"its name is not_dltensor, not 'dltensor'"),
    case("cai_dlpack", "dlpack-consumed-capsule",
         lambda e: cudamem.from_dlpack(consumed(e.d)),
         ValueError, r"already consumed \(named used_dltensor\)"),
    case("cai_dlpack", "dlpack-device-int",
         lambda e: cudamem.from_dlpack(DLProducer(2, e.d.__dlpack__())),
         TypeError, r"\(device_type, device_id\) tuple of ints, not 2$"),
    case("cai_dlpack", "dlpack-device-str",
         lambda e: cudamem.from_dlpack(DLProducer(("cuda", 0),
                                                  e.d.__dlpack__())),
         TypeError, r"tuple of ints, not \('cuda', 0\)"),
    case("cai_dlpack", "dlpack-device-triple",
         lambda e: cudamem.from_dlpack(DLProducer((2, 0, 0),
                                                  e.d.__dlpack__())),
         TypeError, r"tuple of ints, not \(2, 0, 0\)"),
    case("cai_dlpack", "dlpack-device-keyword-str",
         lambda e: cudamem.from_dlpack(e.d, device="x"),
         TypeError, r"device must be an int ordinal or a Device, not str"),
    case("cai_dlpack", "dlpack-stream-str",
         lambda e: cudamem.from_dlpack(e.d, stream="s"),
         TypeError, r"__cuda_stream__, not str"),
]


@pytest.fixture
def env():
    e = Env()
    yield e
    e.__dict__.clear()  # before the leak check: pytest keeps the fixture


@pytest.mark.parametrize("call, exc, match", CASES)
def test_wrong_call_raises_and_does_nothing(env, sim, call, exc, match):
    nothing = NothingHappened(
        sim, env.contents,
        hosts=[env.h, env.out, ZERO_STRIDE_DEST, ZERO_STRIDE_DEST_1,
               OVERLAPPING_DEST])
    with pytest.raises(exc, match=match):
        call(env)
    nothing.check()


def test_split_with_a_section_longer_than_the_array():
    # numba: ceil(size / section) parts; one part here.
    dev = cudamem.to_device(np.arange(4))
    assert [p.shape for p in dev.split(10)] == [(4,)]


def test_split_with_a_huge_section():
    dev = cudamem.to_device(np.arange(4))
    assert [p.shape for p in dev.split(BIG)] == [(4,)]


# ---------------------------------------------------------------------------
# Stale objects: arrays and streams made before close() or Device.reset().

STALE_ARRAY = (r"device 0 cannot be used: the context was reset or closed")
STALE_STREAM = (r"CUDA stream \d+ of device 0 cannot be used: its context "
                r"was reset or closed")


class StaleEnv:
    """Objects made before the context died, and fresh ones made after."""

    def __init__(self, kill):
        self.d = cudamem.to_device(np.arange(12.0).reshape(3, 4))
        self.s = cudamem.stream()
        self.h = np.arange(12.0).reshape(3, 4)
        if kill == "close":
            cudamem.close()
        else:
            cudamem.get_current_device().reset()
        self.fresh = cudamem.to_device(np.full((3, 4), 9.0))
        self.out = np.full((3, 4), -1.0)

    def contents(self):
        return {"fresh": self.fresh.copy_to_host()}


@pytest.fixture(params=["close", "reset"])
def stale(request):
    e = StaleEnv(request.param)
    yield e
    e.__dict__.clear()


STALE_CASES = [
    ("copy_to_host", lambda e: e.d.copy_to_host(), STALE_ARRAY),
    ("copy_to_host-into", lambda e: e.d.copy_to_host(e.out), STALE_ARRAY),
    ("copy_to_host-fresh-stream",
     lambda e: e.d.copy_to_host(stream=cudamem.default_stream()),
     STALE_ARRAY),
    ("copy_to_device", lambda e: e.d.copy_to_device(e.h), STALE_ARRAY),
    ("getitem-scalar", lambda e: e.d[1, 2], STALE_ARRAY),
    ("setitem-scalar", lambda e: e.d.__setitem__(0, 1.0), STALE_ARRAY),
    ("setitem-array", lambda e: e.d.__setitem__(Ellipsis, e.h),
     STALE_ARRAY),
    ("fill", lambda e: e.d.fill(1), STALE_ARRAY),
    ("copy", lambda e: e.d.copy(), STALE_ARRAY),
    ("reshape-copy", lambda e: e.d[:, :3].reshape(9), STALE_ARRAY),
    ("ravel-copy", lambda e: e.d.T.ravel(), STALE_ARRAY),
    ("asarray", lambda e: np.asarray(e.d), STALE_ARRAY),
    ("cuda_array_interface", lambda e: e.d.__cuda_array_interface__,
     STALE_ARRAY),
    ("memory-context", lambda e: e.d.gpu_data.context, STALE_ARRAY),
    ("source-of-copy_to_device", lambda e: e.fresh.copy_to_device(e.d),
     STALE_ARRAY),
    ("source-of-setitem", lambda e: e.fresh.__setitem__(Ellipsis, e.d),
     STALE_ARRAY),
    ("to_device-to", lambda e: cudamem.to_device(e.h, to=e.d), STALE_ARRAY),
    ("to_device-stream", lambda e: cudamem.to_device(e.h, stream=e.s),
     STALE_STREAM),
    ("device_array-stream", lambda e: cudamem.device_array(3, stream=e.s),
     STALE_STREAM),
    ("copy_to_host-stream", lambda e: e.fresh.copy_to_host(stream=e.s),
     STALE_STREAM),
    ("copy_to_device-stream",
     lambda e: e.fresh.copy_to_device(e.h, stream=e.s), STALE_STREAM),
    ("fill-stream", lambda e: e.fresh.fill(1, stream=e.s), STALE_STREAM),
    ("bind-stream", lambda e: e.fresh.bind(e.s), STALE_STREAM),
    ("stream-synchronize", lambda e: e.s.synchronize(), STALE_STREAM),
    ("stream-query", lambda e: e.s.query(), STALE_STREAM),
    ("stream-protocol", lambda e: e.s.__cuda_stream__(), STALE_STREAM),
]
for _ in ("close", "reset"):
    CATEGORIES["stale"] += len(STALE_CASES)


@pytest.mark.parametrize("call, match",
                         [pytest.param(c, m, id=n) for n, c, m in STALE_CASES])
def test_stale_object_raises_and_does_nothing(sim, stale, call, match):
    nothing = NothingHappened(sim, stale.contents, hosts=[stale.out, stale.h])
    with pytest.raises(CudaDriverError, match=match):
        call(stale)
    nothing.check()


def test_stale_array_message_names_the_array():
    d = cudamem.to_device(np.arange(12.0).reshape(3, 4))
    cudamem.close()
    with pytest.raises(CudaDriverError, match=r"array.*\(3, 4\)"):
        d.copy_to_host()


# ---------------------------------------------------------------------------
# The wrong device: two simulated devices, every case in one subprocess.

# name -> (expression, exception type name, regex). The expression runs
# with a0 (device 0), a1 (device 1), s0, s1 (streams), f1 (a foreign
# stream of device 1), out (a host destination) and h (host data), with
# device 0 current unless the name says otherwise.
WRONG_DEVICE = {
    "copy_to_host-stream-of-1":
        ("a0.copy_to_host(out, stream=s1)", "ValueError",
         r"CUDA stream \d+ on .*device 1.* belongs to device 1, but the "
         r"operation is on device 0"),
    "copy_to_device-stream-of-1":
        ("a0.copy_to_device(h, stream=s1)", "ValueError",
         r"belongs to device 1, but the operation is on device 0"),
    "fill-stream-of-1":
        ("a0.fill(7, stream=s1)", "ValueError",
         r"belongs to device 1, but the operation is on device 0"),
    "bind-stream-of-1":
        ("a0.bind(s1)", "ValueError",
         r"belongs to device 1, but the operation is on device 0"),
    "squeeze-stream-of-1":
        ("a0.squeeze(stream=s1)", "ValueError",
         r"belongs to device 1, but the operation is on device 0"),
    "split-stream-of-1":
        ("a0.ravel().split(2, stream=s1)", "ValueError",
         r"belongs to device 1, but the operation is on device 0"),
    "to_device-stream-of-1":
        ("cudamem.to_device(h, stream=s1)", "ValueError",
         r"belongs to device 1, but the operation is on device 0"),
    "device_array-stream-of-1":
        ("cudamem.device_array(3, stream=s1)", "ValueError",
         r"belongs to device 1, but the operation is on device 0"),
    "device_array_like-stream-of-1":
        ("cudamem.device_array_like(a1, stream=s1)", "ValueError",
         r"belongs to device 1, but the operation is on device 0"),
    "to_device-to-stream-of-1":
        ("cudamem.to_device(h, to=a0, stream=s1)", "ValueError",
         r"belongs to device 1, but the operation is on device 0"),
    "copy_to_host-foreign-stream-of-1":
        ("a0.copy_to_host(out, stream=f1)", "ValueError",
         r"stream <Foreign> \(CUDA stream \d+\) belongs to device 1, but "
         r"the operation is on device 0"),
    "external-stream-of-1":
        ("a0.copy_to_device(h, stream=x1)", "ValueError",
         r"External CUDA stream \d+ .* belongs to device 1, but the "
         r"operation is on device 0"),
    "device-1-array-stream-of-0":
        ("a1.copy_to_host(out, stream=s0)", "ValueError",
         r"belongs to device 0, but the operation is on device 1"),
    "device-1-array-fill-stream-of-0":
        ("a1.fill(7, stream=s0)", "ValueError",
         r"belongs to device 0, but the operation is on device 1"),
    "in-device-1-to_device-stream-of-0":
        ("in_gpu1(lambda: cudamem.to_device(h, stream=s0))", "ValueError",
         r"belongs to device 0, but the operation is on device 1"),
    "cross-device-copy-shape":
        ("a0.copy_to_device(a1.T)", "ValueError",
         r"incompatible shape: \(3, 4\) vs\. \(4, 3\)"),
    "cross-device-copy-dtype":
        ("a0.copy_to_device(i1)", "TypeError",
         r"incompatible dtype: dtype\('float64'\) vs\. dtype\('int32'\)"),
    "cross-device-setitem-dtype":
        ("a0.__setitem__(Ellipsis, i1)", "TypeError",
         r"device array of dtype dtype\('int32'\) to one of dtype "
         r"dtype\('float64'\)"),
    "cross-device-setitem-broadcast":
        ("a0.__setitem__(Ellipsis, a1[:, :3])", "ValueError",
         r"from shape \(3, 3\) into shape \(3, 4\)"),
    "select_device-2":
        ("cudamem.select_device(2)", "ValueError",
         r"device ordinal 2 out of range: 2 devices visible"),
    "current_context-minus-1":
        ("cudamem.current_context(-1)", "ValueError",
         r"device ordinal -1 out of range: 2 devices visible"),
    # Last: resetting device 1 leaves device 0's objects working.
    "stale-device-1-array":
        ("reset1(lambda: a1.copy_to_host(out))", "CudaDriverError",
         r"device 1 cannot be used: the context was reset or closed"),
    "stale-device-1-stream":
        ("a0.copy_to_host(out, stream=s1)", "CudaDriverError",
         r"CUDA stream \d+ of device 1 cannot be used"),
    "stale-device-1-source":
        ("a0.copy_to_device(a1)", "CudaDriverError",
         r"device 1 cannot be used: the context was reset or closed"),
}
CATEGORIES["device"] += len(WRONG_DEVICE)

WRONG_DEVICE_SCRIPT = r"""
import gc, json
import numpy as np
import cudamem
from cudamem import simulator as sim

CASES = json.loads(%r)
WORK = %r

class Foreign:
    def __init__(self, value):
        self.value = value
    def __cuda_stream__(self):
        return self.value
    def __repr__(self):
        return "<Foreign>"

def in_gpu1(fn):
    with cudamem.gpus[1]:
        return fn()

def reset1(fn):
    cudamem.list_devices()[1].reset()
    snap()
    return fn()

h = np.arange(12.0).reshape(3, 4)
a0 = cudamem.to_device(h)
with cudamem.gpus[1]:
    a1 = cudamem.to_device(h * 2)
    i1 = cudamem.to_device(np.arange(12, dtype=np.int32).reshape(3, 4))
    s1 = cudamem.stream()
    x1 = cudamem.external_stream(int(s1))
f1 = Foreign((0, int(s1)))
s0 = cudamem.stream()
out = np.full((3, 4), -1.0)
assert cudamem.get_current_device().id == 0

def work():
    return {k: v["calls"] for k, v in sim.stats()["calls"].items()
            if k.startswith(tuple(WORK))}

def contents():
    got = {"a0": a0.copy_to_host().tolist()}
    try:
        got["a1"] = a1.copy_to_host().tolist()
    except cudamem.CudaDriverError:
        pass  # device 1 was reset on purpose
    return got

state = {}

def snap():
    gc.collect()
    cudamem._cudamem._flush_pending()
    state["contents"] = contents()
    state["out"] = out.tolist()
    gc.collect()
    cudamem._cudamem._flush_pending()
    state["live"] = sim.live()
    state["work"] = work()

results = {}
for name, (expr, _, _) in CASES.items():
    snap()
    try:
        eval(expr)
    except Exception as exc:
        raised = [type(exc).__name__, str(exc)]
    else:
        raised = None
    gc.collect()
    cudamem._cudamem._flush_pending()
    after_work = work()
    changed = {k: (state["work"][k], v) for k, v in after_work.items()
               if v != state["work"][k]}
    live_same = sim.live() == state["live"]
    same = contents() == state["contents"] and out.tolist() == state["out"]
    results[name] = {"raised": raised, "work": changed,
                     "live_same": live_same, "contents_same": same,
                     "device": cudamem.get_current_device().id}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def wrong_device_results():
    from tests.helpers.run import run_python
    script = WRONG_DEVICE_SCRIPT % (json.dumps(WRONG_DEVICE),
                                    list(WORK_PREFIXES))
    proc = run_python(script, env=TWO_DEVICES)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(WRONG_DEVICE))
def test_wrong_device_raises_and_does_nothing(wrong_device_results, name):
    _, exc, match = WRONG_DEVICE[name]
    got = wrong_device_results[name]
    assert got["raised"] is not None, "no exception"
    assert got["raised"][0] == exc, got["raised"]
    assert re.search(match, got["raised"][1]), \
        got["raised"][1]
    assert got["work"] == {}, "allocated, wrote or created: %r" % got["work"]
    assert got["live_same"], "live counts changed"
    assert got["contents_same"], "device or host contents changed"
    assert got["device"] == 0, "the current device changed"


def test_every_category_has_eight_cases():
    assert set(CATEGORIES) == {"types", "shapes", "strides", "dtypes",
                               "streams", "foreign", "stale", "device",
                               "cai_dlpack"}
    assert all(n >= 8 for n in CATEGORIES.values()), CATEGORIES
    assert sum(CATEGORIES.values()) >= 100
