"""SmartArray (numba's seed documentation): an array with a host and a device
side that copies between them only when the side asked for is out of date.
NumPy is the reference for values; the simulator's call counters show each
transfer happens exactly when needed, once, moving the array's bytes."""
import numpy as np
import pytest

import cudamem
from cudamem import SmartArray

pytestmark = pytest.mark.simulator

NUMPY_HAS_DL_DEVICE = tuple(map(int, np.__version__.split(".")[:2])) >= (2, 1)


def moved(sim):
    """{direction: (calls, bytes)} of the copies since sim.reset()."""
    out = {}
    for name, v in sim.stats()["calls"].items():
        if not name.startswith("cuMemcpy") or not v["calls"]:
            continue
        key = next((k for k in ("HtoD", "DtoH", "DtoD") if k in name),
                   "other")
        calls, nbytes = out.get(key, (0, 0))
        out[key] = (calls + v["calls"], nbytes + v["bytes"])
    return out


def data(shape=(3, 4), dtype=np.float64, order="C"):
    return np.asarray(np.arange(np.prod(shape)).reshape(shape),
                      dtype=dtype, order=order)


def allocations(sim):
    return sim.stats()["calls"]["cuMemAlloc"]["calls"]


class Foreign:
    """A CAI consumer or producer: `base`'s interface, read-only if
    asked."""

    def __init__(self, base, readonly=False):
        self.base = base
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self):
        desc = dict(self.base.__cuda_array_interface__)
        if self.readonly:
            desc["data"] = (desc["data"][0], True)
        return desc


def kernel_writes(sa, index, value):
    """What a kernel launched on `sa` does: takes its CAI (writable) and
    writes through it."""
    d = cudamem.as_cuda_array(sa)
    d[index] = value


# ---------------------------------------------------------------------------
# Data moves only when the other side changed, once.

def test_round_trip_moves_each_way_once(sim):
    a = data()
    sim.reset()
    sa = SmartArray(a)
    assert moved(sim) == {}
    d = sa.gpu()
    assert moved(sim) == {"HtoD": (1, a.nbytes)}
    np.testing.assert_array_equal(d.copy_to_host(), a)
    sim.reset()
    assert sa.gpu() is d and sa.host() is sa.host()
    np.testing.assert_array_equal(sa.host(), a)
    assert moved(sim) == {}


def test_kernel_write_through_cai_copies_back_once(sim):
    a = data()
    sa = SmartArray(a)
    kernel_writes(sa, (1, 2), 42.0)
    ref = a.copy()
    ref[1, 2] = 42.0
    sim.reset()
    np.testing.assert_array_equal(sa.host(), ref)
    assert moved(sim) == {"DtoH": (1, a.nbytes)}
    sim.reset()
    np.testing.assert_array_equal(np.asarray(sa), ref)
    assert sa[1, 2] == 42.0 and float(np.sum(sa)) == ref.sum()
    # Reading the host changed nothing on the device: no copy back to it.
    sa.gpu()
    assert moved(sim) == {}


def test_repeated_launches_move_nothing_until_the_host_reads(sim):
    a = data((100,))
    sa = SmartArray(a)
    kernel_writes(sa, 0, 1.0)
    sim.reset()
    for i in range(1, 4):
        kernel_writes(sa, i, 1.0)
    # Only the "kernels'" own element writes: no whole-array transfer.
    assert moved(sim) == {"HtoD": (3, 3 * a.itemsize)}
    ref = a.copy()
    ref[:4] = 1.0
    np.testing.assert_array_equal(sa.host(), ref)
    assert moved(sim)["DtoH"] == (1, a.nbytes)


def test_host_write_by_setitem_copies_to_device_once(sim):
    a = data()
    sa = SmartArray(a)
    d = sa.gpu()
    sim.reset()
    sa[0] = -1.0
    sa[2, 1:3] = [7.0, 8.0]
    assert moved(sim) == {}
    ref = a.copy()
    ref[0] = -1.0
    ref[2, 1:3] = [7.0, 8.0]
    assert sa.gpu() is d
    assert moved(sim) == {"HtoD": (1, a.nbytes)}
    np.testing.assert_array_equal(d.copy_to_host(), ref)


def test_setitem_on_a_stale_host_copies_back_first(sim):
    a = data()
    sa = SmartArray(a)
    kernel_writes(sa, (0, 0), 5.0)
    sim.reset()
    sa[1, 1] = 6.0
    assert moved(sim) == {"DtoH": (1, a.nbytes)}
    ref = a.copy()
    ref[0, 0], ref[1, 1] = 5.0, 6.0
    np.testing.assert_array_equal(sa.gpu().copy_to_host(), ref)


def test_setitem_takes_a_smartarray_value():
    a, b = data(), data() * 2
    sa, sb = SmartArray(a), SmartArray(b)
    kernel_writes(sb, (0, 0), -3.0)
    sa[...] = sb
    ref = b.copy()
    ref[0, 0] = -3.0
    np.testing.assert_array_equal(sa.gpu().copy_to_host(), ref)


def test_host_changed_and_gpu_changed(sim):
    a = data()
    sa = SmartArray(a)
    h, d = sa.host(), sa.gpu()
    h[0, 0] = 100.0
    sim.reset()
    sa.host_changed()
    assert sa.gpu() is d
    assert moved(sim) == {"HtoD": (1, a.nbytes)}
    ref = a.copy()
    ref[0, 0] = 100.0
    np.testing.assert_array_equal(d.copy_to_host(), ref)
    d[2, 3] = -1.0
    sa.gpu_changed()
    sim.reset()
    assert sa.host() is h
    assert moved(sim) == {"DtoH": (1, a.nbytes)}
    ref[2, 3] = -1.0
    np.testing.assert_array_equal(h, ref)


def test_get_and_mark_changed_are_numbas_spelling(sim):
    sa = SmartArray(data())
    assert sa.get() is sa.host() and sa.get("gpu") is sa.gpu()
    sa.get("gpu")[0, 0] = 9.0
    sa.mark_changed("gpu")
    assert sa.get("host")[0, 0] == 9.0
    with pytest.raises(ValueError, match="where must be 'host' or 'gpu', "
                                         "not 'cpu'"):
        sa.get("cpu")
    with pytest.raises(ValueError, match="not 'device'"):
        sa.mark_changed("device")


def test_marking_a_stale_side_changed_raises():
    sa = SmartArray(data())
    with pytest.raises(ValueError, match=r"mark_changed\('gpu'\): the gpu "
                                         r"side .* out of date"):
        sa.gpu_changed()   # no device side yet
    kernel_writes(sa, 0, 1.0)
    with pytest.raises(ValueError, match=r"the host side .* call host\(\)"):
        sa.host_changed()  # the host is stale: its writes would be lost
    sa.host()
    sa.host_changed()
    with pytest.raises(ValueError, match="gpu side"):
        sa.gpu_changed()


def test_repr_moves_nothing(sim):
    sa = SmartArray(data(), where="gpu")
    sim.reset()
    assert repr(sa) == ("<SmartArray of shape (3, 4) and dtype float64, "
                        "current on gpu>")
    sa.host()
    sim.reset()
    assert "current on host and gpu" in repr(sa)
    assert moved(sim) == {}
    assert str(sa) == str(data())


# ---------------------------------------------------------------------------
# Construction.

@pytest.mark.parametrize("order", ["C", "F"])
def test_where_gpu_keeps_no_host_copy_until_asked(sim, order):
    a = data((5, 3), np.float32, order)
    sim.reset()
    sa = SmartArray(a, where="gpu")
    assert moved(sim) == {"HtoD": (1, a.nbytes)}
    a[...] = 0  # the SmartArray copied its data
    assert "current on gpu>" in repr(sa)
    h = sa.host()
    assert moved(sim) == {"HtoD": (1, a.nbytes), "DtoH": (1, a.nbytes)}
    np.testing.assert_array_equal(h, data((5, 3), np.float32))
    assert h.flags.writeable


@pytest.mark.parametrize("where", ["host", "gpu"])
@pytest.mark.parametrize("order", [None, "C", "F"])
@pytest.mark.parametrize("dtype", [None, np.int16, np.complex64])
def test_allocation_from_shape_like_numpy(sim, where, order, dtype):
    ref = np.empty((4, 6), dtype, order or "C")
    sim.reset()
    sa = SmartArray(shape=(4, 6), dtype=dtype, order=order, where=where)
    assert moved(sim) == {}
    assert allocations(sim) == (where == "gpu")
    assert (sa.shape, sa.dtype, sa.strides, sa.ndim, sa.size, sa.nbytes,
            sa.itemsize, len(sa)) == (
        ref.shape, ref.dtype, ref.strides, ref.ndim, ref.size, ref.nbytes,
        ref.itemsize, len(ref))
    sa[...] = 3
    np.testing.assert_array_equal(sa.gpu().copy_to_host(),
                                  np.full_like(ref, 3))
    assert sa.host().strides == ref.strides


def test_shape_takes_numpy_integers():
    sa = SmartArray(shape=np.array([2, 3]), dtype="u1", where="gpu")
    assert sa.shape == (2, 3) and sa.host().shape == (2, 3)


def test_copy_true_copies_and_copy_false_adopts(sim):
    a = data()
    copied = SmartArray(a)
    adopted = SmartArray(a, copy=False)
    assert copied.host() is not a and not np.shares_memory(copied.host(), a)
    assert adopted.host() is a
    kernel_writes(adopted, (2, 2), -5.0)
    kernel_writes(copied, (0, 0), -6.0)
    ref = data()
    ref[2, 2] = -5.0
    # The copy back lands in the caller's array.
    assert adopted.host() is a
    np.testing.assert_array_equal(a, ref)
    ref = data()
    ref[0, 0] = -6.0
    np.testing.assert_array_equal(copied.host(), ref)


def test_copy_false_where_gpu_adopts_and_copies_now(sim):
    a = data()
    sim.reset()
    sa = SmartArray(a, copy=False, where="gpu")
    assert moved(sim) == {"HtoD": (1, a.nbytes)}
    assert "current on host and gpu" in repr(sa)
    assert sa.host() is a
    assert moved(sim) == {"HtoD": (1, a.nbytes)}


def test_copy_false_of_a_strided_view_writes_back_into_it(sim):
    base = data((6, 8))
    view = base[::2, 1::3]
    sa = SmartArray(view, copy=False)
    assert sa.strides == view.strides
    kernel_writes(sa, (1, 1), 99.0)
    ref = data((6, 8))
    ref[2, 4] = 99.0
    assert sa.host() is view
    np.testing.assert_array_equal(base, ref)


def test_array_likes_dtype_and_order_as_numpy_array():
    nested = [[1, 2, 3], [4, 5, 6]]
    for kwargs in ({}, {"dtype": np.float32}, {"order": "F"},
                   {"dtype": "i2", "order": "F"}):
        ref = np.array(nested, **kwargs)
        sa = SmartArray(nested, **kwargs)
        assert (sa.dtype, sa.strides) == (ref.dtype, ref.strides)
        np.testing.assert_array_equal(sa.gpu().copy_to_host(), ref)
    scalar = SmartArray(2.5)
    assert scalar.shape == () and float(scalar) == 2.5
    with pytest.raises(TypeError, match="len.. of unsized object"):
        len(scalar)


def test_from_a_device_array(sim):
    a = data()
    d = cudamem.to_device(a)
    sim.reset()
    adopted = SmartArray(d, copy=False, where="gpu")
    assert adopted.gpu() is d
    assert moved(sim) == {}
    copied = SmartArray(d, where="gpu")
    assert moved(sim) == {"DtoD": (1, a.nbytes)}
    assert (copied.gpu().__cuda_array_interface__["data"][0]
            != d.__cuda_array_interface__["data"][0])
    d[0, 0] = -1.0
    np.testing.assert_array_equal(copied.host(), a)
    assert adopted.host()[0, 0] == -1.0
    # where='host' (the default) brings the host copy at once.
    sim.reset()
    on_host = SmartArray(Foreign(d), copy=False)
    assert moved(sim) == {"DtoH": (1, a.nbytes)}
    assert "current on host and gpu" in repr(on_host)
    f = SmartArray(d, order="F", where="gpu")
    assert f.strides == np.asfortranarray(a).strides
    np.testing.assert_array_equal(f.host(), d.copy_to_host())


def test_from_a_smartarray_copies_the_side_asked_for(sim):
    src = SmartArray(data(), where="gpu")
    sim.reset()
    on_gpu = SmartArray(src, where="gpu")
    assert moved(sim) == {"DtoD": (1, data().nbytes)}
    on_host = SmartArray(src)
    assert moved(sim)["DtoH"] == (1, data().nbytes)
    src[0, 0] = 50.0
    np.testing.assert_array_equal(on_gpu.host(), data())
    np.testing.assert_array_equal(on_host.host(), data())


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_copies_are_independent(sim, how):
    import copy
    import pickle
    sa = SmartArray(data(), where="gpu")
    dup = {"copy": copy.copy, "deepcopy": copy.deepcopy,
           "pickle": lambda x: pickle.loads(pickle.dumps(x))}[how](sa)
    assert type(dup) is SmartArray
    kernel_writes(sa, (0, 0), -1.0)
    dup[1, 1] = -2.0
    ref = data()
    ref[1, 1] = -2.0
    np.testing.assert_array_equal(dup.gpu().copy_to_host(), ref)
    ref = data()
    ref[0, 0] = -1.0
    np.testing.assert_array_equal(sa.host(), ref)


def test_exported_from_cudamem():
    assert cudamem.SmartArray is SmartArray
    assert "SmartArray" in cudamem.__all__


def test_import_cudamem_still_imports_no_numpy(run_py):
    proc = run_py("""
        import sys
        import cudamem
        assert 'numpy' not in sys.modules
        print(cudamem.SmartArray.__name__)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "SmartArray"


# ---------------------------------------------------------------------------
# The host side: NumPy's protocols.

def test_attributes_len_and_iteration_as_numpy():
    a = data((3, 5), np.int32, "F")
    sa = SmartArray(a)
    assert (sa.shape, sa.dtype, sa.size, sa.ndim, sa.strides, len(sa)) == (
        a.shape, a.dtype, a.size, a.ndim, a.strides, len(a))
    for row, ref in zip(sa, a, strict=True):
        np.testing.assert_array_equal(row, ref)
    assert 7 in sa and 100 not in sa
    np.testing.assert_array_equal(sa[1:, ::2], a[1:, ::2])
    np.testing.assert_array_equal(sa[a > 4], a[a > 4])


def test_other_attributes_are_the_host_arrays(sim):
    a = data()
    sa = SmartArray(a)
    sa.gpu()
    sim.reset()
    assert sa.sum() == a.sum() and sa.tolist() == a.tolist()
    np.testing.assert_array_equal(sa.mean(axis=0), a.mean(axis=0))
    np.testing.assert_array_equal(sa.reshape(2, 6), a.reshape(2, 6))
    np.testing.assert_array_equal(sa.T, a.T)
    assert sa.astype(np.int8).dtype == np.int8
    assert moved(sim) == {} and "host and gpu" in repr(sa)
    # Names a NumPy array lacks, private names and resize() are refused
    # before anything is copied.
    kernel_writes(sa, 0, 1.0)
    sim.reset()
    for name in ("copy_to_host", "_host_cache", "resize"):
        with pytest.raises(AttributeError, match="'SmartArray' object has "
                                                 "no attribute '%s'" % name):
            getattr(sa, name)
    assert moved(sim) == {}


@pytest.mark.parametrize("write", [
    lambda x: x.fill(3.0),
    lambda x: x.sort(axis=0),
    lambda x: x.put([1, 4], -2.0),
    lambda x: x.partition(1),
    lambda x: x.byteswap(inplace=True),
])
def test_ndarray_methods_that_write_mark_the_host_changed(write, sim):
    sa, ref = SmartArray(data()[::-1].copy()), data()[::-1].copy()
    d = sa.gpu()
    write(sa)
    write(ref)
    sim.reset()
    np.testing.assert_array_equal(sa.gpu().copy_to_host(), ref)
    assert sa.gpu() is d and moved(sim)["HtoD"][0] == 1


def test_array_protocol():
    a = data()
    sa = SmartArray(a)
    assert np.asarray(sa) is sa.host()
    c = np.array(sa)
    assert c is not sa.host()
    np.testing.assert_array_equal(c, a)
    f32 = np.asarray(sa, dtype=np.float32)
    assert f32.dtype == np.float32
    np.testing.assert_array_equal(f32, a.astype(np.float32))
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":  # copy= is new
        with pytest.raises(ValueError, match=r"__array__\(dtype=float32, "
                                             r"copy=False\)"):
            np.asarray(sa, dtype=np.float32, copy=False)


BINARY = ["__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__",
          "__mod__", "__pow__", "__lt__", "__le__", "__eq__", "__ne__",
          "__gt__", "__ge__", "__radd__", "__rsub__", "__rmul__",
          "__rtruediv__", "__rfloordiv__", "__rmod__", "__rpow__",
          "__divmod__", "__rdivmod__"]
INTEGER = ["__and__", "__or__", "__xor__", "__lshift__", "__rshift__",
           "__rand__", "__ror__", "__rxor__", "__rlshift__", "__rrshift__"]


@pytest.mark.parametrize("op", BINARY + INTEGER)
def test_operators_as_numpy(op, sim):
    a = data((2, 3), np.int64) + 1
    b = np.array([3, 1, 2])
    sa = SmartArray(a)
    sa.gpu()
    sim.reset()
    got, ref = getattr(sa, op)(b), getattr(a, op)(b)
    for g, r in zip(got if isinstance(got, tuple) else (got,),
                    ref if isinstance(ref, tuple) else (ref,)):
        assert type(g) is np.ndarray
        np.testing.assert_array_equal(g, r)
    # Reading the host side moved nothing and left the device current.
    assert moved(sim) == {} and "host and gpu" in repr(sa)


@pytest.mark.parametrize("op", ["__iadd__", "__isub__", "__imul__",
                                "__ifloordiv__", "__imod__", "__ipow__",
                                "__iand__", "__ior__", "__ixor__",
                                "__ilshift__", "__irshift__"])
def test_inplace_operators_mark_the_host_changed(op, sim):
    a = data((2, 3), np.int64) + 1
    sa = SmartArray(a)
    d = sa.gpu()
    ref = a.copy()
    ref = getattr(ref, op)(2)
    assert getattr(sa, op)(2) is sa
    sim.reset()
    np.testing.assert_array_equal(sa.gpu().copy_to_host(), ref)
    assert sa.gpu() is d
    assert moved(sim)["HtoD"] == (1, a.nbytes)


def test_unary_operators_and_matmul():
    a = data((3, 3)) - 4
    sa = SmartArray(a)
    for op in (abs, lambda x: -x, lambda x: +x, lambda x: x @ x,
               lambda x: a @ x):
        np.testing.assert_array_equal(op(sa), op(a))
    ints = SmartArray(data((2,), np.int32))
    np.testing.assert_array_equal(~ints, ~data((2,), np.int32))
    m = SmartArray(np.eye(3) * 2)
    m @= np.eye(3) * 3
    np.testing.assert_array_equal(m.gpu().copy_to_host(), np.eye(3) * 6)
    with pytest.raises(ValueError, match="truth value"):
        bool(sa)
    assert bool(SmartArray([1])) and int(SmartArray(7)) == 7
    assert complex(SmartArray(1j)) == 1j
    with pytest.raises(TypeError, match="unhashable"):
        hash(sa)


def test_ufuncs_read_the_host_side(sim):
    a = data() / 7
    sa = SmartArray(a)
    kernel_writes(sa, (0, 1), 2.0)
    ref = a.copy()
    ref[0, 1] = 2.0
    sim.reset()
    np.testing.assert_array_equal(np.sin(sa), np.sin(ref))
    np.testing.assert_array_equal(np.add(sa, sa), ref + ref)
    np.testing.assert_array_equal(np.add.reduce(sa, axis=1),
                                  np.add.reduce(ref, axis=1))
    np.testing.assert_array_equal(np.maximum.accumulate(sa),
                                  np.maximum.accumulate(ref))
    np.testing.assert_array_equal(np.multiply.outer(sa[0], sa[1]),
                                  np.multiply.outer(ref[0], ref[1]))
    q, r = np.divmod(sa, 0.3)
    np.testing.assert_array_equal(q, np.divmod(ref, 0.3)[0])
    assert moved(sim) == {"DtoH": (1, a.nbytes)}


def test_ufunc_outputs_mark_the_host_changed(sim):
    a = data()
    sa, out = SmartArray(a), SmartArray(shape=a.shape)
    out.gpu()
    assert np.multiply(sa, 2, out=out) is out
    np.testing.assert_array_equal(out.gpu().copy_to_host(), a * 2)
    q, r = SmartArray(shape=a.shape), np.empty(a.shape)
    got = np.divmod(sa, 4, out=(q, r))
    assert got[0] is q and got[1] is r
    np.testing.assert_array_equal(q.gpu().copy_to_host(), a // 4)
    np.testing.assert_array_equal(r, a % 4)
    np.add.at(sa, [0, 0, 2], 1.0)
    ref = a.copy()
    np.add.at(ref, [0, 0, 2], 1.0)
    np.testing.assert_array_equal(sa.gpu().copy_to_host(), ref)
    total = SmartArray(shape=(4,))
    total.gpu()
    np.add.reduce(sa, axis=0, out=total)
    np.testing.assert_array_equal(total.gpu().copy_to_host(), ref.sum(0))


def test_array_functions(sim):
    a = data()
    sa = SmartArray(a)
    sa.gpu()
    np.testing.assert_array_equal(np.concatenate([sa, a, sa]),
                                  np.concatenate([a, a, a]))
    assert np.mean(sa) == np.mean(a) and np.shape(sa) == a.shape
    np.testing.assert_array_equal(np.where(sa > 5, sa, -sa),
                                  np.where(a > 5, a, -a))
    np.testing.assert_array_equal(np.sum(sa, axis=0), a.sum(axis=0))
    assert "host and gpu" in repr(sa)
    ones = SmartArray(np.ones(4))
    assert np.sum(sa, axis=0, out=ones) is ones
    np.testing.assert_array_equal(ones.gpu().copy_to_host(), a.sum(axis=0))


@pytest.mark.parametrize("write", [
    lambda x: np.copyto(x, np.full((3, 4), 9.0)),
    lambda x: np.copyto(dst=x, src=9.0),
    lambda x: np.put(x, [0, 5], 9.0),
    lambda x: np.place(x, np.ones((3, 4), bool), 9.0),
    lambda x: np.putmask(x, np.ones((3, 4), bool), 9.0),
    lambda x: np.fill_diagonal(x, 9.0),
    lambda x: np.put_along_axis(x, np.zeros((3, 1), int), 9.0, axis=1),
])
def test_array_functions_that_write_mark_the_host_changed(write):
    sa, ref = SmartArray(data()), data()
    sa.gpu()
    write(sa)
    write(ref)
    np.testing.assert_array_equal(sa.gpu().copy_to_host(), ref)


def test_defers_to_other_array_libraries():
    class Other:
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return "other"

        def __array_function__(self, func, types, args, kwargs):
            return "other"
    sa = SmartArray(data())
    assert np.add(sa, Other()) == "other"
    assert np.concatenate([sa, Other()]) == "other"

    class NoUfuncs:
        __array_ufunc__ = None

        def __radd__(self, other):
            return "reflected"
    assert sa + NoUfuncs() == "reflected"


# ---------------------------------------------------------------------------
# The device side: CUDA Array Interface and DLPack.

def test_cai_is_the_device_arrays(sim):
    a = data()
    sa = SmartArray(a)
    desc = sa.__cuda_array_interface__
    assert desc == sa.gpu().__cuda_array_interface__
    assert desc["data"][1] is False and desc["shape"] == a.shape
    assert cudamem.is_cuda_array(sa)
    np.testing.assert_array_equal(cudamem.as_cuda_array(sa).copy_to_host(),
                                  a)


def test_dlpack_export_marks_the_device_changed(sim):
    a = data()
    sa = SmartArray(a)
    assert sa.__dlpack_device__() == (2, 0)
    d = cudamem.from_dlpack(sa)
    d[1, 1] = -7.0
    ref = a.copy()
    ref[1, 1] = -7.0
    sim.reset()
    np.testing.assert_array_equal(sa.host(), ref)
    assert moved(sim) == {"DtoH": (1, a.nbytes)}
    # A copy leaves this array's device side its own: nothing to bring back.

    class CopyingConsumer:
        def __dlpack__(self, **kwargs):
            return sa.__dlpack__(copy=True, **kwargs)

        def __dlpack_device__(self):
            return sa.__dlpack_device__()
    cudamem.from_dlpack(CopyingConsumer())[0, 0] = 1000.0
    sim.reset()
    np.testing.assert_array_equal(sa.host(), ref)
    assert moved(sim) == {}


def test_dlpack_device_makes_nothing(sim):
    sa = SmartArray(data())
    sim.reset()
    assert sa.__dlpack_device__() == (2, 0)
    assert allocations(sim) == 0 and moved(sim) == {}


@pytest.mark.skipif(not NUMPY_HAS_DL_DEVICE,
                    reason="np.from_dlpack(device=) needs NumPy 2.1")
def test_dlpack_to_the_cpu_is_the_host_array(sim):
    a = data()
    sa = SmartArray(a)
    sa.gpu()
    sim.reset()
    h = np.from_dlpack(sa, device="cpu")
    assert np.shares_memory(h, sa.host()) and moved(sim) == {}
    h[0, 0] = 77.0
    ref = a.copy()
    ref[0, 0] = 77.0
    np.testing.assert_array_equal(sa.gpu().copy_to_host(), ref)
    assert moved(sim)["HtoD"] == (1, a.nbytes)


# ---------------------------------------------------------------------------
# Read-only data.

def readonly(a):
    a.flags.writeable = False
    return a


def test_readonly_host_array_stays_readonly(sim):
    a = readonly(data())
    sa = SmartArray(a, copy=False)
    desc = sa.__cuda_array_interface__
    assert desc["data"][1] is True
    with pytest.raises(ValueError, match="read-only"):
        sa.gpu()[0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        sa[0, 0] = 1.0
    with pytest.raises(ValueError, match=r"mark_changed\('host'\): this "
                                         r"SmartArray of shape \(3, 4\) is "
                                         r"read-only"):
        sa.host_changed()
    with pytest.raises(ValueError, match="read-only"):
        sa.gpu_changed()
    # Read-only exports cannot be written: nothing comes back.
    sim.reset()
    cudamem.from_dlpack(sa)
    assert sa.host() is a and moved(sim) == {}


def test_copy_of_a_readonly_array_is_writable():
    a = readonly(data())
    for sa in (SmartArray(a), SmartArray(a, where="gpu")):
        assert sa.__cuda_array_interface__["data"][1] is False
        kernel_writes(sa, (0, 0), 1.0)
        assert sa.host()[0, 0] == 1.0 and sa.host().flags.writeable
    assert np.array(a).flags.writeable  # NumPy's rule for copies


def test_readonly_device_array_gives_a_readonly_host_copy():
    d = cudamem.to_device(data())
    sa = SmartArray(Foreign(d, readonly=True), copy=False, where="gpu")
    h = sa.host()
    np.testing.assert_array_equal(h, data())
    assert not h.flags.writeable
    assert sa.__cuda_array_interface__["data"][1] is True
    with pytest.raises(ValueError, match="read-only"):
        sa.gpu_changed()


# ---------------------------------------------------------------------------
# Streams.

def test_transfers_queue_on_the_arrays_stream(sim, hazards):
    s = cudamem.stream(non_blocking=True)
    a = data((64, 64))
    sa = SmartArray(a, stream=s)
    assert sa.stream is s
    sim.reset()
    d = sa.gpu()
    s.synchronize()  # the simulator counts a copy's bytes when it runs
    assert moved(sim) == {"HtoD": (1, a.nbytes)}
    assert sim.stats()["calls"]["cuMemcpyHtoDAsync"]["calls"] == 1
    assert sa.__cuda_array_interface__["stream"] == int(s.handle)
    # A "kernel" on the stream writes the array; the host copy is ordered
    # after it and complete when host() returns.
    d.copy_to_device(a * 3, stream=s)
    sa.gpu_changed()
    sim.reset()
    np.testing.assert_array_equal(sa.host(), a * 3)
    assert sim.stats()["calls"]["cuMemcpyDtoHAsync"]["calls"] == 1


def test_a_stream_per_call(sim, hazards):
    s = cudamem.stream(non_blocking=True)
    a = data((32, 32))
    sa = SmartArray(a, where="gpu")
    sa.gpu().copy_to_device(a + 1, stream=s)
    sa.gpu_changed()
    sim.reset()
    np.testing.assert_array_equal(sa.host(stream=s), a + 1)
    assert sim.stats()["calls"]["cuMemcpyDtoHAsync"]["calls"] == 1
    sa[0, 0] = 0.0
    sa.gpu(stream=s)
    s.synchronize()
    assert sim.stats()["calls"]["cuMemcpyHtoDAsync"]["calls"] == 1


def test_host_waits_for_a_delayed_stream(run_py):
    # A copy into page-locked memory returns before it is done: host()
    # must wait for it.
    proc = run_py("""
        import numpy as np, cudamem
        s = cudamem.stream(non_blocking=True)
        a = cudamem.pinned_array(4096)
        a[:] = np.arange(4096.0)
        sa = cudamem.SmartArray(a, copy=False, stream=s)
        sa.gpu().copy_to_device(np.arange(4096.0) * 2, stream=s)
        sa.gpu_changed()
        assert sa.host() is a
        assert (a == np.arange(4096.0) * 2).all()
        print("ok")
    """, env={"CUDAMEM_SIM_DELAY_US": "3000"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


# ---------------------------------------------------------------------------
# Bad input: a clear error naming the value, nothing allocated.

@pytest.mark.parametrize("kwargs, error, message", [
    ({"obj": [1], "where": "cpu"}, ValueError,
     "where must be 'host' or 'gpu', not 'cpu'"),
    ({"shape": 3, "order": "K"}, ValueError,
     "order must be 'C', 'F' or None, not 'K'"),
    ({}, TypeError, "needs obj or shape"),
    ({"obj": [1, 2], "shape": (2,)}, TypeError,
     r"obj or shape, not both \(shape=\(2,\)\)"),
    ({"obj": [object()]}, TypeError, "cannot hold dtype object"),
    ({"obj": [object()], "where": "gpu"}, TypeError,
     "cannot hold dtype object"),
    ({"obj": [1], "stream": "fast"}, TypeError,
     "stream must be 0, a cudamem Stream .* not str"),
    ({"obj": [1], "stream": 7}, ValueError, "invalid stream 7"),
    ({"shape": (2, -1)}, ValueError, "negative dimensions"),
    ({"shape": (2, -1), "where": "gpu"}, ValueError, "-1"),
    ({"shape": (2,), "dtype": "nope"}, TypeError, "nope"),
])
def test_bad_arguments(sim, kwargs, error, message):
    sim.reset()
    with pytest.raises(error, match=message):
        SmartArray(**kwargs)
    assert allocations(sim) == 0


def test_bad_device_sources(sim):
    d = cudamem.to_device(data())
    sim.reset()
    with pytest.raises(ValueError, match="dtype float32 differs from the "
                                         "device array's float64"):
        SmartArray(d, dtype=np.float32)
    with pytest.raises(ValueError, match="not 'F'-contiguous"):
        SmartArray(d, copy=False, order="F")
    with pytest.raises(ValueError, match="copy=False cannot adopt a "
                                         "SmartArray"):
        SmartArray(SmartArray(data()), copy=False)
    assert allocations(sim) == 0 and moved(sim) == {}
