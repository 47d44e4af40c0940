"""Read-only memory travels everywhere: CAI imports, DLPack export and import
(device and host arrays), the device side of read-only mapped and registered
host memory, and their views and copies. NumPy is the reference: a view of a
read-only array is read-only, a copy is writable, a versioned DLPack capsule
carries the read-only flag and a legacy one of read-only memory is refused.
Also sub-array dtypes, which NumPy expands into the shape."""
import contextlib
import re

import numpy as np
import pytest

import cudamem
from tests.helpers.hostmem import PAGE, page_buffer
from tests.helpers.interop import KDL_CPU
from tests.helpers.interop import managed as tensor_of

pytestmark = pytest.mark.simulator

READ_ONLY_FLAG = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
LEGACY = [{}, {"max_version": None}, {"max_version": (0, 8)}]


class CAI:
    """A foreign producer of `base`'s memory whose CUDA Array Interface
    says read-only, or passes base's own through (readonly None)."""

    def __init__(self, base, readonly=True):
        self.base = base
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self):
        desc = dict(self.base.__cuda_array_interface__)
        if self.readonly is not None:
            desc["data"] = (desc["data"][0], self.readonly)
        return desc


def host(shape=(4, 6)):
    return np.arange(np.prod(shape), dtype=np.float64).reshape(shape)


def numpy_readonly(shape=(4, 6)):
    """A read-only host(shape) in pages of its own: registration is
    page-rounded, and a page registered read-only must not hold the arrays
    a test copies into (with PYTHONMALLOC=malloc it could)."""
    n = int(np.prod(shape))
    a = page_buffer(-(-n * 8 // PAGE))[:n].reshape(shape)
    a[...] = host(shape)
    a.flags.writeable = False
    return a


def copies(sim):
    """Copy and memset calls since sim.reset()."""
    return sum(v["calls"] for k, v in sim.stats()["calls"].items()
               if k.startswith(("cuMemcpy", "cuMemset")))


def flags(capsule):
    return tensor_of(capsule, True).flags


def is_readonly(d):
    return d.__cuda_array_interface__["data"][1]


WHY_CAI = "that a CUDA Array Interface exported read-only"
WHY_DLPACK = "that a DLPack producer exported read-only"


# ---------------------------------------------------------------------------
# Every way of getting a read-only device array: context managers that
# yield (the array, its host values, the words the refusal gives for why).

@contextlib.contextmanager
def from_cai():
    base = cudamem.to_device(host())
    yield cudamem.as_cuda_array(CAI(base)), host(), WHY_CAI


@contextlib.contextmanager
def from_dlpack_of_cai():
    with from_cai() as (ro, ref, _):
        yield cudamem.from_dlpack(ro), ref, WHY_DLPACK


@contextlib.contextmanager
def from_mapped():
    a = numpy_readonly()
    with cudamem.mapped(a) as d:
        yield d, a, (r"that is page-locked read-only \(a read-only host "
                     r"array\)")


@contextlib.contextmanager
def from_mapped_array_view():
    m = cudamem.mapped_array((4, 6))
    m[...] = host()
    view = m[...]
    view.flags.writeable = False
    yield view.device_array(), host(), "mapped from a read-only host array"


SOURCES = {"cai": from_cai, "dlpack": from_dlpack_of_cai,
           "mapped": from_mapped, "mapped_array view": from_mapped_array_view}
ALL_SOURCES = pytest.mark.parametrize("source", sorted(SOURCES))


WRITES = {
    "setitem": lambda a: a.__setitem__(0, 1.0),
    "setitem slice": lambda a: a.__setitem__(slice(None, None, 2), 5.0),
    "setitem array": lambda a: a.__setitem__(Ellipsis, np.ones(a.shape)),
    "fill": lambda a: a.fill(2.0),
    "copy_to_device host": lambda a: a.copy_to_device(np.zeros(a.shape)),
    "copy_to_device device": lambda a: a.copy_to_device(
        cudamem.device_array(a.shape)),
    "copy_to_device stream": lambda a: a.copy_to_device(
        np.zeros(a.shape), stream=cudamem.stream()),
    "to_device to": lambda a: cudamem.to_device(np.zeros(a.shape), to=a),
}

VIEWS = {
    "itself": lambda a: a,
    "slice": lambda a: a[1:, ::2],
    "transpose": lambda a: a.T,
    "reshape": lambda a: a.reshape(24),
    "view dtype": lambda a: a.view(np.int64),
    "bound": lambda a: a.bind(cudamem.stream()),
    "split": lambda a: a.ravel().split(6)[1],
    "cai reimport": lambda a: cudamem.as_cuda_array(CAI(a, None)),
    "dlpack reimport": lambda a: cudamem.from_dlpack(a),
}


def test_numpy_views_of_read_only_are_read_only_copies_are_not():
    # The reference for the view and copy cases below.
    ro = numpy_readonly()
    for view in (ro[1:, ::2], ro.T, ro.reshape(24), ro.view(np.int64)):
        assert not view.flags.writeable
    assert ro.copy().flags.writeable
    assert not np.from_dlpack(ro).flags.writeable
    assert np.from_dlpack(ro, copy=True).flags.writeable


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("write", sorted(WRITES))
@ALL_SOURCES
def test_writes_are_refused_before_the_driver(sim, source, view, write):
    with SOURCES[source]() as (ro, ref, why):
        target = VIEWS[view](ro)
        # A re-import says which producer flagged it.
        why = {"cai reimport": WHY_CAI, "dlpack reimport": WHY_DLPACK}.get(
            view, why)
        assert is_readonly(target)
        sim.reset()
        with pytest.raises(ValueError, match="assignment destination is "
                           "read-only: this device array of shape %s and "
                           "dtype %s on device 0 is over memory %s"
                           % (re.escape(str(target.shape)), target.dtype,
                              why)):
            WRITES[write](target)
        assert copies(sim) == 0
        np.testing.assert_array_equal(ro.copy_to_host(), ref)


@ALL_SOURCES
def test_reads_work_and_copies_are_writable(source):
    with SOURCES[source]() as (ro, ref, _):
        np.testing.assert_array_equal(ro.copy_to_host(), ref)
        np.testing.assert_array_equal(ro[1:, ::2].copy_to_host(),
                                      ref[1:, ::2])
        assert ro[2, 3] == ref[2, 3]
        made = [ro.copy(), cudamem.device_array_like(ro),
                cudamem.from_dlpack(ro, copy=True)]
        fresh = cudamem.device_array(ro.shape)
        fresh.copy_to_device(ro)
        made.append(fresh)
        for d in made:
            assert not is_readonly(d)
            d.fill(-1.0)
            np.testing.assert_array_equal(d.copy_to_host(),
                                          np.full(ro.shape, -1.0))
        # Reading a read-only array into a writable one is fine.
        np.testing.assert_array_equal(ro.copy_to_host(), ref)


@ALL_SOURCES
def test_the_device_side_exports_read_only(source):
    with SOURCES[source]() as (ro, _, _):
        assert is_readonly(ro) is True
        assert flags(ro.__dlpack__(max_version=(1, 0))) & READ_ONLY_FLAG
        assert flags(ro[1:].__dlpack__(max_version=(1, 1))) & READ_ONLY_FLAG


# ---------------------------------------------------------------------------
# DLPack export: the flag on versioned capsules, legacy ones refused as
# NumPy refuses them.

@pytest.mark.parametrize("kw", LEGACY)
@ALL_SOURCES
def test_legacy_export_of_read_only_is_refused_as_numpy_does(source, kw):
    with SOURCES[source]() as (ro, _, _):
        with pytest.raises(BufferError) as numpy_said:
            numpy_readonly().__dlpack__(**kw)
        with pytest.raises(BufferError,
                           match=r"max_version=\(1, 0\)") as got:
            ro.__dlpack__(**kw)
        assert str(got.value).startswith(str(numpy_said.value).rstrip("."))


def test_numpy_flags_its_read_only_export():
    # The reference for the flag on versioned capsules.
    assert flags(numpy_readonly().__dlpack__(
        max_version=(1, 0))) & READ_ONLY_FLAG
    assert flags(host().__dlpack__(max_version=(1, 0))) == 0


def test_writable_arrays_export_writable():
    d = cudamem.to_device(host())
    assert flags(d.__dlpack__(max_version=(1, 0))) == 0
    assert repr(d.__dlpack__()).startswith('<capsule object "dltensor"')
    got = cudamem.from_dlpack(d)
    assert not is_readonly(got)
    got.fill(1.0)


@pytest.mark.parametrize("kw", LEGACY)
@ALL_SOURCES
def test_copies_export_writable_even_legacy(source, kw):
    with SOURCES[source]() as (ro, ref, _):
        # NumPy's own rule: a copy of a read-only array may go to a legacy
        # consumer.
        numpy_readonly().__dlpack__(copy=True, **kw)
        capsule = ro.__dlpack__(copy=True, **kw)
        assert repr(capsule).startswith('<capsule object "dltensor"')
        capsule = ro.__dlpack__(copy=True, max_version=(1, 0))
        assert flags(capsule) == 0
        cpu = ro.__dlpack__(copy=True, dl_device=(KDL_CPU, 0), **kw)
        t = tensor_of(cpu, False).dl_tensor
        assert t.device.device_type == KDL_CPU
        got = np.ctypeslib.as_array(
            (np.ctypeslib.ctypes.c_double * ref.size).from_address(t.data))
        np.testing.assert_array_equal(got.reshape(ref.shape), ref)


@ALL_SOURCES
def test_refused_exports_queue_nothing(sim, source):
    with SOURCES[source]() as (ro, _, _):
        sim.reset()
        with pytest.raises(BufferError):
            ro.__dlpack__(stream=cudamem.stream().handle.value)
        made = sim.stats()["calls"]
        assert not any(made[k]["calls"] for k in made
                       if k.startswith(("cuEvent", "cuStreamWait")))


# ---------------------------------------------------------------------------
# DLPack import: a flagged capsule gives a read-only array, as NumPy's
# from_dlpack does.

def test_from_dlpack_of_a_read_only_device_array():
    with from_cai() as (ro, ref, _):
        got = cudamem.from_dlpack(ro)
        assert got.__cuda_array_interface__["data"] == (
            ro.__cuda_array_interface__["data"][0], True)
        again = cudamem.from_dlpack(got)
        assert is_readonly(again)
        with pytest.raises(ValueError, match=WHY_DLPACK):
            again.fill(0.0)
        np.testing.assert_array_equal(again.copy_to_host(), ref)


def test_from_dlpack_of_a_flagged_foreign_capsule():
    # NumPy is the foreign producer: its read-only array's versioned
    # capsule on the CPU is copied to the device, and the copy is ours.
    ro = numpy_readonly()
    capsule = ro.__dlpack__(max_version=(1, 0))
    assert flags(capsule) & READ_ONLY_FLAG
    got = cudamem.from_dlpack(capsule)
    assert not is_readonly(got)
    np.testing.assert_array_equal(got.copy_to_host(), ro)


@pytest.mark.parametrize("kind", ["mapped", "managed"])
def test_host_arrays_read_only_both_ways(kind):
    make = cudamem.mapped_array if kind == "mapped" else cudamem.managed_array
    m = make((4, 6))
    m[...] = host()
    view = m[1:]
    view.flags.writeable = False
    # Exported to NumPy (versioned): read-only; legacy: refused, as NumPy.
    assert not np.from_dlpack(view).flags.writeable
    with pytest.raises(BufferError, match="Cannot export readonly array"):
        view.__dlpack__()
    with pytest.raises(BufferError, match="Cannot export readonly array"):
        cudamem._cudamem._dlpack_export(view, KDL_CPU, 0)
    assert repr(view.__dlpack__(copy=True)).startswith(
        '<capsule object "dltensor"')
    # Imported by cudamem: zero-copy, read-only.
    got = cudamem.from_dlpack(view)
    assert got.device_ctypes_pointer.value == view.device_ctypes_pointer.value
    assert is_readonly(got)
    with pytest.raises(ValueError, match="DLPack producer exported"):
        got[0, 0] = 1.0
    np.testing.assert_array_equal(got.copy_to_host(), host()[1:])
    # The writable array is still writable both ways.
    assert np.from_dlpack(m).flags.writeable
    assert not is_readonly(cudamem.from_dlpack(m))


# ---------------------------------------------------------------------------
# Mapped and registered host memory.

def test_mapped_read_only_array(sim):
    a = numpy_readonly()
    with cudamem.mapped(a) as d:
        assert d.__cuda_array_interface__["data"] == (
            d.device_ctypes_pointer.value, True)
        assert flags(d.__dlpack__(max_version=(1, 0))) & READ_ONLY_FLAG
        sim.reset()
        with pytest.raises(ValueError, match="page-locked read-only"):
            d[0] = 1.0
        assert copies(sim) == 0
        np.testing.assert_array_equal(d.copy_to_host(), a)
        np.testing.assert_array_equal(d[::2, 1].copy_to_host(), a[::2, 1])


def test_mapped_writable_array_stays_writable():
    a = host()
    with cudamem.mapped(a) as d:
        assert d.__cuda_array_interface__["data"][1] is False
        assert flags(d.__dlpack__(max_version=(1, 0))) == 0
        d[0] = -1.0
        cudamem.synchronize()
        np.testing.assert_array_equal(a[0], np.full(6, -1.0))


def test_mapped_several_arrays_each_their_own():
    # Pages of their own: a read-only registration's pages are its own.
    ro, rw = page_buffer(1), page_buffer(1)
    ro.flags.writeable = False
    with cudamem.mapped(ro, rw) as (dro, drw):
        assert is_readonly(dro) and not is_readonly(drw)


def test_mapped_array_device_side_follows_writeable():
    m = cudamem.mapped_array(6)
    m[:] = np.arange(6.0)
    assert not is_readonly(m.device_array())
    m.flags.writeable = False
    # The cached device side is remade: NumPy lets the flag change.
    assert m.__cuda_array_interface__["data"][1] is True
    with pytest.raises(ValueError, match="mapped from a read-only host "
                       "array"):
        m.copy_to_device(np.zeros(6))
    np.testing.assert_array_equal(m.copy_to_host(), np.arange(6.0))
    m.flags.writeable = True
    m.copy_to_device(np.zeros(6))
    np.testing.assert_array_equal(m, np.zeros(6))


def test_registered_read_only_buffer_is_read_only_through_any_view():
    # A page of its own: registration is page-rounded, and a read-only
    # page must not hold the array copy_to_host() makes.
    writable = page_buffer(1)[:8]
    writable[:] = np.arange(8.0)
    ro = writable.view()
    ro.flags.writeable = False
    (buf,) = cudamem._cudamem._host_register([ro], mapped=True)
    try:
        # Even through a writable NumPy array over the memory: the
        # registration is read-only, so the driver would refuse the write.
        assert writable.flags.writeable
        d = cudamem._cudamem._host_device_array(writable, buf)
        with pytest.raises(ValueError, match="page-locked read-only"):
            d.fill(0.0)
        np.testing.assert_array_equal(d.copy_to_host(), ro)
    finally:
        cudamem._cudamem._host_unregister([buf])


# ---------------------------------------------------------------------------
# Sub-array dtypes: NumPy appends their axes (view() only at the same
# itemsize); no array keeps one.

SUB = np.dtype(("f8", (2,)))

VIEW_CASES = [
    (np.zeros(4, "V16"), ..., SUB),
    (np.arange(12.0).reshape(2, 6), (slice(None), slice(None, None, 3)),
     np.dtype(("f4", (2,)))),
    (np.arange(6.0).reshape(3, 2), (slice(None, None, -1),),
     np.dtype(("i2", (2, 2)))),
    (np.arange(4.0), ..., np.dtype(("f8", (1,)))),
    (np.full((), 1.5), ..., np.dtype(("u1", (8,)))),
    (np.arange(4.0), ..., np.dtype((("f4", (2,)), (1,)))),
]


@pytest.mark.parametrize("case", range(len(VIEW_CASES)))
def test_view_as_a_subarray_dtype_as_numpy(case):
    base, index, dtype = VIEW_CASES[case]
    want = base[index].view(dtype)
    got = cudamem.to_device(base)[index].view(dtype)
    assert (got.shape, got.strides, got.dtype) == (
        want.shape, want.strides, want.dtype)
    assert got.__cuda_array_interface__["typestr"] == want.dtype.str
    np.testing.assert_array_equal(got.copy_to_host(), want)


def test_view_as_a_subarray_of_another_itemsize_raises_as_numpy():
    with pytest.raises(ValueError) as numpy_said:
        np.zeros(4).view(SUB)
    d = cudamem.device_array(4)
    with pytest.raises(ValueError, match="^%s$" % str(numpy_said.value)):
        d.view(SUB)


MAKERS = {
    "device_array": cudamem.device_array,
    "managed_array": cudamem.managed_array,
    "pinned_array": cudamem.pinned_array,
    "mapped_array": cudamem.mapped_array,
}


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape, dtype", [
    (3, SUB), ((3, 4), np.dtype(("f4", (2, 5)))), ((), np.dtype(("i2", 3))),
    (2, np.dtype((("f4", (2,)), (3,))))])
@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_empty_with_a_subarray_dtype_as_numpy(maker, shape, dtype, order):
    want = np.empty(shape, dtype, order=order)
    got = MAKERS[maker](shape, dtype, order=order)
    assert (got.shape, got.strides, got.dtype) == (
        want.shape, want.strides, want.dtype)


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_explicit_strides_with_a_subarray_dtype_as_numpy(maker):
    buf = np.zeros(12)
    want = np.ndarray((3,), SUB, buffer=buf, strides=(32,))
    got = MAKERS[maker]((3,), SUB, strides=(32,))
    assert (got.shape, got.strides, got.dtype) == (
        want.shape, want.strides, want.dtype)


def test_too_many_dimensions_from_a_subarray():
    with pytest.raises(ValueError) as numpy_said:
        np.empty((1,) * 64, SUB)
    with pytest.raises(ValueError, match=r"number of dimensions must be "
                       r"within \[0, 64\]") as got:
        cudamem.device_array((1,) * 64, SUB)
    assert str(got.value).startswith(str(numpy_said.value))
    with pytest.raises(ValueError, match=r"within \[0, 64\]"):
        cudamem.device_array((1,) * 64).view(np.dtype(("f8", (1,))))
