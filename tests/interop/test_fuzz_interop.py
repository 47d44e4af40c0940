"""Property tests of the imports with malformed input: random
__cuda_array_interface__ dicts (wrong types, huge or negative shapes and
strides, unknown typestrs, bad versions, masks, data tuples of the wrong
length, pointers 0 or outside any allocation, bogus streams) fed to
from_cuda_array_interface and as_cuda_array, and hand-built DLPack
capsules (bad names, used ones, too-new versions, bad ndim, shapes,
strides, dtype codes and device types) fed to from_dlpack. The only
acceptable outcomes are an array equal to NumPy's view of the same bytes,
or an exception of the documented kinds; the autouse leak check sees that
nothing stays allocated, and a taken capsule's deleter runs exactly once.
``make fuzz`` runs them with many more examples."""
import ctypes
import gc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hst

import cudamem
from cudamem.errors import CudaAPIError
from tests.helpers.interop import (
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLTensor,
)

pytestmark = pytest.mark.simulator

BUF = 256  # bytes of the allocation every import points into
CAI_ERRORS = (TypeError, ValueError, KeyError, NotImplementedError,
              CudaAPIError)
DLPACK_ERRORS = (BufferError, TypeError, ValueError, CudaAPIError)

WEIRD = hst.sampled_from([None, True, 1.5, "3", b"x", [1], {}, object(),
                          -1, 2 ** 64, -2 ** 63, 2 ** 63 - 1])
TYPESTRS = ["|u1", "|i1", "<i2", ">u2", "<i4", "<f4", ">f8", "<c8", "|b1",
            "<M8[s]", "<m8[ms]", "|V3", "|S2"]
BAD_TYPESTRS = ["", "zz", "<f3", "|O", "|O8", "<U2", "<i2x", "f4f4"]


def reference_dtype(desc):
    """The dtype a dict describes: its typestr's, or for a typestr of plain
    bytes, the fields of a descr as dtype.descr writes them (the inverse
    NumPy's .npy format uses: padding entries become offsets)."""
    dtype = np.dtype(desc["typestr"])
    descr = desc.get("descr")
    if dtype.kind == "V" and dtype.names is None and descr is not None:
        fields = np.lib.format.descr_to_dtype(descr)
        if fields.names:
            return fields
    return dtype


def reference(host, base, desc):
    """NumPy's reading of a valid dict over host's bytes (allocated at
    base), or None when NumPy refuses it."""
    try:
        return np.ndarray(desc["shape"], reference_dtype(desc),
                          buffer=host, offset=desc["data"][0] - base,
                          strides=desc.get("strides"))
    except (TypeError, ValueError):
        return None


@hst.composite
def cai_dicts(draw, base, stream):
    """A dict over [base, base + BUF): valid, or with one thing wrong."""
    typestr = draw(hst.sampled_from(TYPESTRS))
    itemsize = np.dtype(typestr).itemsize
    ndim = draw(hst.integers(0, 3))
    shape = tuple(draw(hst.lists(hst.integers(0, 6), min_size=ndim,
                                 max_size=ndim)))
    desc = {"version": draw(hst.sampled_from([0, 1, 2, 3])),
            "shape": shape, "typestr": typestr,
            "data": (base + itemsize * draw(hst.integers(0, 8)), False)}
    if draw(hst.booleans()):
        desc["strides"] = tuple(itemsize * draw(hst.integers(-8, 8))
                                for _ in shape)
    if draw(hst.booleans()):
        desc["stream"] = draw(hst.sampled_from([None, 1, 2, stream]))
    what = draw(hst.sampled_from(
        ["valid", "version", "shape", "shape-len", "strides", "strides-len",
         "typestr", "descr", "data", "data-len", "null", "outside", "mask",
         "stream", "missing"]))
    if what == "version":
        desc["version"] = draw(hst.one_of(WEIRD, hst.integers(4, 2 ** 70)))
    elif what == "shape":
        desc["shape"] = draw(hst.one_of(
            WEIRD, hst.lists(hst.one_of(WEIRD, hst.integers(-2 ** 65,
                                                            2 ** 65)),
                             max_size=4).map(tuple)))
    elif what == "shape-len":
        desc["shape"] = (1,) * draw(hst.integers(33, 80))
    elif what == "strides":
        desc["strides"] = tuple(draw(hst.one_of(
            WEIRD, hst.integers(-2 ** 65, 2 ** 65))) for _ in shape)
    elif what == "strides-len":
        desc["strides"] = (itemsize,) * draw(hst.integers(0, 70))
    elif what == "typestr":
        desc["typestr"] = draw(hst.one_of(
            WEIRD, hst.sampled_from(BAD_TYPESTRS), hst.text(max_size=5)))
    elif what == "descr":
        desc["typestr"] = "|V%d" % draw(hst.sampled_from([1, 3, 4, 8, 16]))
        desc["descr"] = draw(hst.one_of(WEIRD, hst.sampled_from(
            [[("a", "<i4")], [("", "|V4")], [("a",)], "x",
             [("a", "<f8"), ("b", "<f8")], [("a", "<i4"), ("", "|V4")],
             [("a", "<i2"), ("b", "|u1", (2,))]])))
    elif what == "data":
        desc["data"] = (draw(hst.one_of(WEIRD, hst.integers(-2 ** 65,
                                                            2 ** 65))),
                        draw(hst.one_of(hst.booleans(), WEIRD)))
    elif what == "data-len":
        desc["data"] = (base, False, 0)[:draw(hst.sampled_from([0, 1, 3]))]
    elif what == "null":
        desc["data"] = (0, False)
    elif what == "outside":
        desc["data"] = (draw(hst.sampled_from(
            [base + BUF + 4096, base - 4096, 8, 2 ** 63, 2 ** 64 - 8])),
            False)
    elif what == "mask":
        desc["mask"] = draw(hst.one_of(WEIRD, hst.just(desc["data"])))
    elif what == "stream":
        desc["stream"] = draw(hst.one_of(
            WEIRD, hst.sampled_from([0, 3, 0xdeadbeef, stream + 8])))
    elif what == "missing":
        del desc[draw(hst.sampled_from(["version", "shape", "typestr",
                                        "data"]))]
    return desc


def same_bytes(got, ref):
    """Equal elements, byte for byte (so NaNs compare); a structure's
    padding is not data: NumPy's strided copies leave it zero."""
    if ref.dtype.names:
        return all(same_bytes(got[name], ref[name])
                   for name in ref.dtype.names)
    return got.tobytes() == ref.tobytes()


def distinct(got, ref):
    """got and ref with one element kept of every axis along which both
    broadcast (stride 0 on both sides: all its elements are the first),
    so that comparing them compares every element without materialising
    a broadcast view, whose shape may be (2**62,)."""
    sel = tuple(slice(0, 1) if g == 0 and r == 0 else slice(None)
                for g, r in zip(got.strides, ref.strides))
    if all(s == slice(None) for s in sel):
        return got, ref
    return got[sel], ref[sel]


class Producer:
    def __init__(self, desc):
        self.__cuda_array_interface__ = desc


@given(hst.data())
def test_cai_import_of_any_dict(data):
    host = np.random.default_rng(data.draw(hst.integers(0, 2 ** 32))) \
        .integers(0, 256, BUF, dtype=np.uint8)
    owner = cudamem.to_device(host)
    stream = cudamem.stream()
    base = owner.device_ctypes_pointer.value
    desc = data.draw(cai_dicts(base, int(stream)))
    how = data.draw(hst.sampled_from(["from", "as", "as-stream"]))
    try:
        if how == "from":
            arr = cudamem.from_cuda_array_interface(desc, owner=owner)
        else:
            arr = cudamem.as_cuda_array(
                Producer(desc), stream=stream if how == "as-stream" else 0)
    except CAI_ERRORS as exc:
        assert str(exc)
        return
    if arr.size == 0:
        # No memory: any pointer will do.
        assert arr.shape == tuple(desc["shape"])
        assert arr.dtype == reference_dtype(desc)
        return
    ref = reference(host, base, desc)
    assert ref is not None, "imported a dict NumPy refuses: %r" % (desc,)
    assert arr.shape == ref.shape and arr.dtype == ref.dtype
    assert arr.strides == ref.strides
    got, ref = distinct(arr, ref)
    assert same_bytes(got.copy_to_host(), ref)
    stream.synchronize()


# ---------------------------------------------------------------------------
# DLPack capsules built by hand.

# Own prototypes: other tests set ctypes.pythonapi's argtypes their way.
_new_capsule = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        ("PyCapsule_New", ctypes.pythonapi))
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))

DELETED = []
_delete_v = DLManagedTensorVersioned._fields_[3][1](
    lambda p: DELETED.append(p[0].manager_ctx))
_delete_l = DLManagedTensor._fields_[2][1](
    lambda p: DELETED.append(p[0].manager_ctx))

# (code, bits) NumPy has, and some it has not.
DL_DTYPES = [(0, 8), (0, 16), (0, 32), (0, 64), (1, 8), (1, 32), (2, 16),
             (2, 32), (2, 64), (5, 64), (6, 8)]
KDL_CPU, KDL_CUDA = 1, 2
# Three axes of up to 4 elements, strides of -4 to 4 elements: a valid
# tensor reaches 36 elements either side of its offset, 36 to 48 elements
# in, so it stays within 85 elements of 8 bytes.
DL_BUF = 1024


@hst.composite
def tensors(draw, host, dev_base):
    """A tensor over host (CPU) or the allocation at dev_base (CUDA),
    within its DL_BUF bytes, or with one detectable thing wrong."""
    code, bits = draw(hst.sampled_from(DL_DTYPES))
    lanes = 1
    itemsize = bits // 8
    ndim = draw(hst.integers(0, 3))
    shape = [draw(hst.integers(0, 4)) for _ in range(ndim)]
    strides = None
    if draw(hst.booleans()):
        strides = [draw(hst.integers(-4, 4)) for _ in range(ndim)]
    offset = itemsize * draw(hst.integers(36, 48))
    device = draw(hst.sampled_from([KDL_CPU, KDL_CUDA]))
    device_id = 0
    data = host.ctypes.data if device == KDL_CPU else dev_base
    what = draw(hst.sampled_from(
        ["valid", "ndim", "shape", "strides", "dtype", "lanes", "device",
         "device_id", "null"]))
    if what == "ndim":
        ndim = draw(hst.sampled_from([-1, -2 ** 31, 65, 2 ** 31 - 1]))
    elif what == "shape" and ndim:
        shape[draw(hst.integers(0, ndim - 1))] = draw(hst.sampled_from(
            [-1, -2 ** 63, 2 ** 62, 2 ** 63 - 1]))
        # No other axis of 0 (an empty array may have any shape).
        shape = [max(n, 1) if n <= 4 else n for n in shape]
    elif what == "strides" and ndim:
        strides = strides or [1] * ndim
        strides[draw(hst.integers(0, ndim - 1))] = draw(hst.sampled_from(
            [2 ** 63 - 1, -2 ** 63]))
        shape = [max(n, 2) for n in shape]
    elif what == "dtype":
        code, bits = draw(hst.sampled_from(
            [(0, 7), (0, 128), (2, 8), (3, 32), (4, 32), (5, 32), (6, 16),
             (7, 16), (15, 8), (16, 8), (255, 8), (2, 0)]))
    elif what == "lanes":
        lanes = draw(hst.sampled_from([0, 2, 4, 65535]))
    elif what == "device":
        device = draw(hst.sampled_from([0, 4, 7, 8, 10, 14, -1, 2 ** 31 - 1]))
    elif what == "device_id" and device == KDL_CUDA:
        device_id = draw(hst.sampled_from([-1, 1, 7, 2 ** 31 - 1]))
    elif what == "null":
        data = None
        shape = [max(n, 1) for n in shape]
    return dict(code=code, bits=bits, lanes=lanes, ndim=ndim, shape=shape,
                strides=strides, offset=offset, device=device,
                device_id=device_id, data=data, what=what)


class Capsule:
    """A DLManagedTensor(Versioned) in a capsule, and what it points to
    (kept here, alive until the deleter has run)."""

    def __init__(self, t, name, versioned, major, tag):
        n = max(len(t["shape"]), 1)
        self.shape = (ctypes.c_int64 * n)(*t["shape"])
        self.strides = (None if t["strides"] is None
                        else (ctypes.c_int64 * n)(*t["strides"]))
        tensor = DLTensor(data=t["data"], ndim=t["ndim"],
                          shape=self.shape, strides=self.strides,
                          byte_offset=t["offset"])
        tensor.device.device_type = t["device"]
        tensor.device.device_id = t["device_id"]
        tensor.dtype.code, tensor.dtype.bits = t["code"], t["bits"]
        tensor.dtype.lanes = t["lanes"]
        if versioned:
            self.managed = DLManagedTensorVersioned(
                major=major, minor=0, manager_ctx=tag, deleter=_delete_v,
                flags=0, dl_tensor=tensor)
        else:
            self.managed = DLManagedTensor(dl_tensor=tensor, manager_ctx=tag,
                                           deleter=_delete_l)
        self.name = ctypes.create_string_buffer(name)
        self.capsule = _new_capsule(ctypes.addressof(self.managed),
                                    ctypes.addressof(self.name), None)


def dl_reference(t, host, dev_host, dev_base):
    """NumPy's reading of a valid tensor: over host for CPU, over the
    device allocation's host copy for CUDA."""
    dtype = {(0, 8): "i1", (0, 16): "i2", (0, 32): "i4", (0, 64): "i8",
             (1, 8): "u1", (1, 32): "u4", (2, 16): "f2", (2, 32): "f4",
             (2, 64): "f8", (5, 64): "c8", (6, 8): "?"}[t["code"], t["bits"]]
    dtype = np.dtype(dtype)
    buf = host if t["device"] == KDL_CPU else dev_host
    strides = (None if t["strides"] is None else
               tuple(s * dtype.itemsize for s in t["strides"]))
    return np.ndarray(tuple(t["shape"]), dtype, buffer=buf,
                      offset=t["offset"], strides=strides)


def import_capsule(t, name, versioned, major, host, dev_host, owner):
    """from_dlpack of a capsule over tensor t: an array equal to NumPy's
    view of the same bytes, or an exception of the documented kinds; the
    deleter runs once if the import took the capsule. Whether it
    imported."""
    tag = len(DELETED) + 1000
    cap = Capsule(t, name, versioned, major, tag)
    arr = None
    try:
        arr = cudamem.from_dlpack(cap.capsule)
    except DLPACK_ERRORS as exc:
        assert str(exc)
    taken = _capsule_name(cap.capsule).startswith(b"used_") and \
        not name.startswith(b"used_")
    imported = arr is not None
    if imported:
        ref = dl_reference(t, host, dev_host, owner.device_ctypes_pointer
                           .value)
        assert arr.shape == ref.shape and arr.dtype == ref.dtype
        got, ref = distinct(arr, ref)
        assert got.copy_to_host().tobytes() == ref.tobytes()
        del arr, got
    cudamem.synchronize()
    gc.collect()
    cudamem._cudamem._flush_pending()
    assert DELETED.count(tag) == (1 if taken else 0)
    del cap
    return imported


def dl_buffers(seed, boolean):
    """Host bytes for a CPU tensor, and a device allocation's bytes (with
    their host copy) for a CUDA tensor."""
    rng = np.random.default_rng(seed)
    host = rng.integers(0, 256, DL_BUF, dtype=np.uint8)
    dev_host = rng.integers(0, 256, DL_BUF, dtype=np.uint8)
    if boolean:
        # bool elements must be 0 or 1
        host &= 1
        dev_host &= 1
    return host, dev_host, cudamem.to_device(dev_host)


@given(hst.data())
def test_dlpack_import_of_any_capsule(data):
    host, dev_host, owner = dl_buffers(data.draw(hst.integers(0, 2 ** 32)),
                                       data.draw(hst.booleans()))
    t = data.draw(tensors(host, owner.device_ctypes_pointer.value))
    versioned = data.draw(hst.booleans())
    name = data.draw(hst.sampled_from(
        [b"dltensor_versioned" if versioned else b"dltensor"] * 4 +
        [b"used_dltensor", b"used_dltensor_versioned", b"", b"other"]))
    major = data.draw(hst.sampled_from([1, 1, 1, 0, 2, 2 ** 32 - 1]))
    import_capsule(t, name, versioned, major, host, dev_host, owner)


# hypothesis takes no @example for a test that draws from data(): the
# example it once drew, a broadcast of 2**62 elements, runs here always.
@pytest.mark.parametrize("device", [KDL_CPU, KDL_CUDA])
def test_dlpack_import_of_huge_broadcast(device):
    host, dev_host, owner = dl_buffers(7, False)
    base = owner.device_ctypes_pointer.value
    t = dict(code=1, bits=8, lanes=1, ndim=1, shape=[2 ** 62], strides=[0],
             offset=40, device=device, device_id=0,
             data=host.ctypes.data if device == KDL_CPU else base,
             what="shape")
    imported = import_capsule(t, b"dltensor", False, 1, host, dev_host,
                              owner)
    # A CUDA tensor is imported without a copy (a CPU one is copied, and
    # 4 EiB of device memory is out of memory, a documented outcome).
    assert imported == (device == KDL_CUDA)
