"""The import side of the CUDA Array Interface (v3): as_cuda_array,
from_cuda_array_interface and is_cuda_array, as in numba-cuda. Imports
round trip every layout, share the producer's memory, keep the producer
alive, find the device from the pointer, bind and wait for the producer's
stream, and reject every malformed dict before making anything."""
import gc
import inspect
import weakref

import numpy as np
import pytest

import cudamem
from tests.helpers.run import run_python


def calls(sim):
    """Driver calls per entry point since sim.reset()."""
    return {k: v["calls"] for k, v in sim.stats()["calls"].items()}


class Producer:
    """A foreign library's array: device memory (a cudamem array it holds)
    and the interface dict it hands out (its own, or the array's)."""

    def __init__(self, base, desc=None):
        self.base = base
        self.desc = desc

    @property
    def __cuda_array_interface__(self):
        if self.desc is not None:
            return self.desc
        return self.base.__cuda_array_interface__


def _host(shape, dtype=np.float64, order="C"):
    n = int(np.prod(shape)) if shape else 1
    dtype = np.dtype(dtype)
    if dtype.fields:
        out = np.zeros(n, dtype)
        for i, name in enumerate(dtype.names):
            out[name] = np.arange(n) * (i + 1) + 0.5 * i
    else:
        out = (np.arange(n) * 3 - 7).astype(dtype)
    return np.asarray(out.reshape(shape), order=order)


def _desc(base, **changes):
    """A hand-made v3 dict for all of `base` (a cudamem array), as a
    foreign producer writes it."""
    desc = {"shape": base.shape, "strides": base.strides,
            "typestr": base.dtype.str,
            "data": (base.device_ctypes_pointer.value or 0, False),
            "version": 3}
    if base.dtype.fields:
        desc["descr"] = base.dtype.descr
    desc.update(changes)
    return desc


ALIGNED = np.dtype([("a", np.int32), ("b", np.float64)], align=True)

# name -> a cudamem array made from host data, and its host reference.
LAYOUTS = {
    "C": lambda: cudamem.to_device(_host((3, 5))),
    "F": lambda: cudamem.to_device(_host((3, 5), np.float32, "F")),
    "strided": lambda: cudamem.to_device(_host((6, 8), np.int16))[::2, 1::3],
    "negative": lambda: cudamem.to_device(_host((4, 6), np.int32))[::-1, ::-2],
    "zero-size": lambda: cudamem.to_device(_host((0, 3))),
    "structured": lambda: cudamem.to_device(_host((5,), ALIGNED)),
    "0-d": lambda: cudamem.to_device(np.float64(3.5)),
    "3-d": lambda: cudamem.to_device(_host((2, 3, 4), np.complex64))[:, ::-1],
}


def _same_layout(imported, base):
    assert type(imported) is cudamem.DeviceNDArray
    assert imported.shape == base.shape
    assert imported.strides == base.strides
    assert imported.dtype == base.dtype
    assert imported.size == base.size
    assert (imported.device_ctypes_pointer.value ==
            base.device_ctypes_pointer.value)
    np.testing.assert_array_equal(imported.copy_to_host(),
                                  base.copy_to_host())


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_round_trip_through_the_arrays_own_interface(layout):
    base = LAYOUTS[layout]()
    producer = Producer(base)
    imported = cudamem.as_cuda_array(producer)
    _same_layout(imported, base)
    assert imported.gpu_data.owner is producer
    assert imported.stream == 0
    # And back out: the import exports what the array did.
    assert imported.__cuda_array_interface__ == base.__cuda_array_interface__


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_round_trip_through_a_hand_made_dict(layout):
    base = LAYOUTS[layout]()
    producer = Producer(base, _desc(base))
    imported = cudamem.as_cuda_array(producer)
    _same_layout(imported, base)
    assert imported.gpu_data.owner is producer


def test_structured_dtype_needs_descr():
    base = cudamem.to_device(_host((4,), ALIGNED))
    desc = _desc(base)
    assert desc["typestr"] == "|V16"
    assert cudamem.from_cuda_array_interface(desc, owner=base).dtype == ALIGNED
    # Without descr (numba reads only typestr) the elements are raw bytes.
    del desc["descr"]
    raw = cudamem.from_cuda_array_interface(desc, owner=base)
    assert raw.dtype == np.dtype("V16")
    # A descr without fields says nothing more than the typestr.
    desc["descr"] = [("", "|V16")]
    assert (cudamem.from_cuda_array_interface(desc, owner=base).dtype ==
            np.dtype("V16"))


def test_nested_structured_dtype_round_trips():
    dtype = np.dtype([("a", np.int16), ("b", [("c", np.float32),
                                              ("d", np.uint8, (3,))])])
    base = cudamem.to_device(np.zeros(3, dtype))
    imported = cudamem.as_cuda_array(Producer(base, _desc(base)))
    assert imported.dtype == dtype


def test_zero_size_with_a_pointer_or_none():
    base = cudamem.to_device(_host((4, 0)))
    for ptr in (0, 0x1000):
        desc = _desc(base, data=(ptr, False), strides=None)
        imported = cudamem.from_cuda_array_interface(desc)
        assert imported.shape == (4, 0) and imported.size == 0
        assert imported.copy_to_host().shape == (4, 0)
        assert imported.gpu_data.context.device.id == (
            cudamem.get_current_device().id)


def test_v2_dict_without_strides_or_stream():
    base = cudamem.to_device(_host((2, 3)))
    desc = _desc(base, version=2)
    del desc["strides"]
    imported = cudamem.from_cuda_array_interface(desc, owner=base)
    _same_layout(imported, base)


def test_numpy_integers_and_readonly_are_accepted():
    base = cudamem.to_device(_host((2, 3)))
    ptr = base.device_ctypes_pointer.value
    desc = _desc(base, shape=(np.int64(2), np.int32(3)),
                 strides=(np.int64(24), 8), data=(np.uint64(ptr), True))
    _same_layout(cudamem.from_cuda_array_interface(desc, owner=base), base)


def test_import_shares_memory():
    host = _host((4, 6), np.float32)
    base = cudamem.to_device(host)
    imported = cudamem.as_cuda_array(Producer(base))
    # Through the import, read through the producer's array ...
    imported[1:3, ::2] = -1
    expect = host.copy()
    expect[1:3, ::2] = -1
    np.testing.assert_array_equal(base.copy_to_host(), expect)
    # ... and the other way.
    base.copy_to_device(host * 2)
    np.testing.assert_array_equal(imported.copy_to_host(), host * 2)


def test_import_of_a_view_shares_memory():
    host = _host((6, 8), np.int64)
    base = cudamem.to_device(host)
    view = base[::-2, 1::3]
    imported = cudamem.as_cuda_array(Producer(view))
    imported.copy_to_device(np.full(view.shape, 42, np.int64))
    expect = host.copy()
    expect[::-2, 1::3] = 42
    np.testing.assert_array_equal(base.copy_to_host(), expect)


def test_owner_is_kept_alive():
    base = cudamem.to_device(_host((8,)))
    producer = Producer(base)
    alive = weakref.ref(producer)
    imported = cudamem.as_cuda_array(producer)
    del producer, base
    gc.collect()
    assert alive() is not None
    assert imported.gpu_data.owner is alive()
    np.testing.assert_array_equal(imported.copy_to_host(), _host((8,)))
    # A view of the import keeps it alive too, and names the same owner.
    view = imported[2:5]
    del imported
    gc.collect()
    assert alive() is not None
    assert view.gpu_data.owner is alive()
    np.testing.assert_array_equal(view.copy_to_host(), _host((8,))[2:5])
    del view
    gc.collect()
    assert alive() is None


def test_owner_cycle_is_collected():
    base = cudamem.to_device(_host((8,)))
    producer = Producer(base)
    producer.imported = cudamem.as_cuda_array(producer)
    alive = weakref.ref(producer)
    del producer, base
    gc.collect()
    assert alive() is None


def test_from_desc_owner():
    base = cudamem.to_device(_host((3,)))
    desc = base.__cuda_array_interface__
    imported = cudamem.from_cuda_array_interface(desc, owner=base)
    assert imported.gpu_data.owner is base
    assert imported[1:].gpu_data.owner is base
    # Without an owner the pointer owns itself, as numba's does.
    for bare in (cudamem.from_cuda_array_interface(desc),
                 cudamem.from_cuda_array_interface(desc, owner=None)):
        assert bare.gpu_data.owner is bare.gpu_data
        assert bare[1:].gpu_data.owner is bare.gpu_data


def test_import_never_frees(sim):
    base = cudamem.to_device(_host((16,)))
    sim.reset()
    for _ in range(30):
        cudamem.as_cuda_array(Producer(base))
    gc.collect()
    cudamem._cudamem._flush_pending()
    made = calls(sim)
    assert made["cuMemFree"] == 0 and made["cuMemAlloc"] == 0
    assert made["cuPointerGetAttributes"] == 30
    np.testing.assert_array_equal(base.copy_to_host(), _host((16,)))


def test_the_desc_is_not_changed():
    base = cudamem.to_device(_host((2, 2)))
    desc = _desc(base)
    before = dict(desc)
    cudamem.from_cuda_array_interface(desc, owner=base)
    assert desc == before


def test_cudamem_arrays_are_returned_as_they_are(sim):
    base = cudamem.to_device(_host((3,)))
    sim.reset()
    assert cudamem.as_cuda_array(base) is base
    assert cudamem.as_cuda_array(base, sync=False) is base
    assert calls(sim)["cuPointerGetAttributes"] == 0


def test_is_cuda_array():
    base = cudamem.to_device(_host((3,)))

    class Raises:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("broken producer")

    assert cudamem.is_cuda_array(base) is True
    assert cudamem.is_cuda_array(base[1:]) is True
    assert cudamem.is_cuda_array(Producer(base)) is True
    assert cudamem.is_cuda_array(np.arange(3)) is False
    assert cudamem.is_cuda_array(None) is False
    assert cudamem.is_cuda_array(obj=[1]) is False
    with pytest.raises(RuntimeError, match="broken producer"):
        cudamem.is_cuda_array(Raises())


def test_as_cuda_array_needs_the_interface():
    for obj in (np.arange(3), None, object()):
        with pytest.raises(TypeError, match="doesn't implement the cuda "
                           "array interface"):
            cudamem.as_cuda_array(obj)


def test_arguments():
    base = cudamem.to_device(_host((3,)))
    desc = base.__cuda_array_interface__
    with pytest.raises(TypeError, match="missing required argument 'desc'"):
        cudamem.from_cuda_array_interface()
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        cudamem.as_cuda_array(base, streams=0)
    with pytest.raises(TypeError, match="at most"):
        cudamem.from_cuda_array_interface(desc, None, True, None, 1)
    assert cudamem.from_cuda_array_interface(
        desc=desc, owner=base, sync=False).shape == (3,)
    assert (str(inspect.signature(cudamem.as_cuda_array)) ==
            "(obj, sync=True, stream=None)")
    assert (str(inspect.signature(cudamem.from_cuda_array_interface)) ==
            "(desc, owner=None, sync=True, stream=None)")
    assert str(inspect.signature(cudamem.is_cuda_array)) == "(obj)"


# ---------------------------------------------------------------------------
# Streams.

def _on_stream(stream):
    """A producer whose dict names `stream` (its work is queued there)."""
    base = cudamem.to_device(_host((256,)), stream=stream)
    return Producer(base)


def test_stream_is_bound_and_synchronized_once(sim):
    s = cudamem.stream()
    producer = _on_stream(s)
    s.synchronize()
    assert producer.__cuda_array_interface__["stream"] == int(s)
    with sim.delay(2000):
        producer.base.fill(1.0, stream=s)  # the producer's pending work
        sim.reset()
        imported = cudamem.as_cuda_array(producer)
        assert s.query()  # done: the import waited for it
    assert calls(sim)["cuStreamSynchronize"] == 1
    assert isinstance(imported.stream, cudamem.Stream)
    assert imported.stream.external
    assert int(imported.stream) == int(s)
    # Operations on the import use that stream (asynchronous).
    sim.reset()
    out = imported.copy_to_host()
    s.synchronize()
    assert calls(sim)["cuMemcpyDtoHAsync"] == 1
    np.testing.assert_array_equal(out, np.ones(256))
    assert imported.__cuda_array_interface__["stream"] == int(s)


def test_sync_false_does_not_synchronize(sim):
    s = cudamem.stream()
    producer = _on_stream(s)
    sim.reset()
    imported = cudamem.as_cuda_array(producer, sync=False)
    imported2 = cudamem.from_cuda_array_interface(
        producer.__cuda_array_interface__, owner=producer, sync=False)
    made = calls(sim)
    assert made["cuStreamSynchronize"] == 0 and made["cuStreamQuery"] == 0
    assert int(imported.stream) == int(imported2.stream) == int(s)
    s.synchronize()


@pytest.mark.parametrize("env, synced", [
    ({"CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC": "0"}, False),
    ({"NUMBA_CUDA_ARRAY_INTERFACE_SYNC": "0"}, False),
    ({"NUMBA_CUDA_ARRAY_INTERFACE_SYNC": "1"}, True),
    ({"CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC": "1",
      "NUMBA_CUDA_ARRAY_INTERFACE_SYNC": "0"}, True),
    ({"CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC": "0",
      "NUMBA_CUDA_ARRAY_INTERFACE_SYNC": "1"}, False),
    ({"CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC": ""}, True),
])
def test_sync_environment(sim, monkeypatch, env, synced):
    monkeypatch.delenv("CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC", raising=False)
    monkeypatch.delenv("NUMBA_CUDA_ARRAY_INTERFACE_SYNC", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s = cudamem.stream()
    producer = _on_stream(s)
    sim.reset()
    cudamem.as_cuda_array(producer)
    assert calls(sim)["cuStreamSynchronize"] == (1 if synced else 0)
    s.synchronize()


def test_env_is_read_at_each_import(sim, monkeypatch):
    monkeypatch.delenv("NUMBA_CUDA_ARRAY_INTERFACE_SYNC", raising=False)
    s = cudamem.stream()
    producer = _on_stream(s)
    monkeypatch.setenv("CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC", "0")
    sim.reset()
    cudamem.as_cuda_array(producer)
    assert calls(sim)["cuStreamSynchronize"] == 0
    monkeypatch.setenv("CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC", "1")
    cudamem.as_cuda_array(producer)
    assert calls(sim)["cuStreamSynchronize"] == 1


def test_no_stream_no_synchronization(sim):
    base = cudamem.to_device(_host((4,)))
    sim.reset()
    imported = cudamem.as_cuda_array(Producer(base, _desc(base, stream=None)))
    assert calls(sim)["cuStreamSynchronize"] == 0
    assert imported.stream == 0


@pytest.mark.parametrize("handle, maker", [
    (1, cudamem.legacy_default_stream),
    (2, cudamem.per_thread_default_stream),
])
def test_default_stream_handles(sim, handle, maker):
    base = cudamem.to_device(_host((4,)))
    sim.reset()
    imported = cudamem.as_cuda_array(Producer(base, _desc(base,
                                                          stream=handle)))
    assert calls(sim)["cuStreamSynchronize"] == 1
    assert int(imported.stream) == handle
    assert not imported.stream.external
    assert repr(imported.stream) == repr(maker())
    assert imported.__cuda_array_interface__["stream"] == handle


def test_zero_size_array_takes_the_streams_device():
    s = cudamem.stream()
    base = cudamem.to_device(_host((0,)))
    imported = cudamem.from_cuda_array_interface(
        _desc(base, stream=int(s)), sync=False)
    assert imported.size == 0 and int(imported.stream) == int(s)


def test_unknown_stream_handle_is_rejected(sim):
    base = cudamem.to_device(_host((4,)))
    desc = _desc(base, stream=0x5000)
    with pytest.raises(cudamem.CudaAPIError, match="cuStreamGetCtx"):
        cudamem.from_cuda_array_interface(desc, owner=base)


# ---------------------------------------------------------------------------
# Validation: every malformed dict raises, naming the value, and nothing
# is made or waited for.

def _base():
    return cudamem.to_device(_host((2, 3)))


def _without(key):
    def change(desc):
        del desc[key]
    return change


def _with(**values):
    def change(desc):
        desc.update(values)
    return change


BAD = [
    ("no shape", _without("shape"), KeyError, "'shape'"),
    ("no typestr", _without("typestr"), KeyError, "'typestr'"),
    ("no data", _without("data"), KeyError, "'data'"),
    ("no version", _without("version"), KeyError, "'version'"),
    ("version 4", _with(version=4), ValueError,
     "unsupported CUDA Array Interface version 4: cudamem reads versions 0 "
     "to 3"),
    ("version -1", _with(version=-1), ValueError, "version -1"),
    ("version str", _with(version="3"), ValueError, "version '3'"),
    ("version bool", _with(version=True), ValueError, "version True"),
    ("version huge", _with(version=1 << 80), ValueError, "version 1208"),
    ("shape list", _with(shape=[2, 3]), TypeError,
     r"'shape' must be a tuple of ints, not \[2, 3\]"),
    ("shape int", _with(shape=6), TypeError, "not 6"),
    ("shape negative", _with(shape=(2, -3)), ValueError,
     r"negative dimensions are not allowed: .* shape is \(2, -3\)"),
    ("shape float", _with(shape=(2, 3.0)), TypeError,
     r"'shape' \(2, 3.0\) holds 3.0, which is not an int"),
    ("shape bool", _with(shape=(2, True)), TypeError, "holds True"),
    ("shape huge", _with(shape=(2, 1 << 70)), ValueError,
     "too large for an index"),
    ("shape dims", _with(shape=(1,) * 65, strides=None), ValueError,
     "has 65 dimensions"),
    ("shape overflow", _with(shape=(1 << 40, 1 << 40), strides=None),
     ValueError, "array is too big"),
    ("strides length", _with(strides=(8,)), ValueError,
     r"strides \(8,\) do not match the 2 dimensions of its shape \(2, 3\)"),
    ("strides list", _with(strides=[24, 8]), TypeError,
     r"'strides' must be a tuple of ints, not \[24, 8\]"),
    ("strides float", _with(strides=(24.0, 8)), TypeError, "holds 24.0"),
    ("strides overflow", _with(strides=(1 << 62, 8)), ValueError,
     "array is too big"),
    ("strides wrap", _with(typestr="|u1", strides=(2 ** 63 - 1, 1)),
     ValueError, "array is too big"),
    ("typestr type", _with(typestr=8), TypeError,
     "typestr must be a str, not 8"),
    ("typestr bad", _with(typestr="<q9"), ValueError,
     "typestr '<q9' is not a NumPy dtype"),
    ("typestr object", _with(typestr="|O"), TypeError,
     "holds Python objects"),
    ("typestr empty", _with(typestr="|V0"), ValueError, "has no size"),
    ("descr size", _with(typestr="|V8", descr=[("a", "<f8"), ("b", "<f8")]),
     ValueError, r"describes 16 bytes, but its typestr '\|V8' has 8"),
    ("descr bad", _with(typestr="|V8", descr=[("a", "<q9")]), ValueError,
     "invalid 'descr'"),
    ("data list", _with(data=[0x1000, False]), TypeError,
     r"data must be a tuple \(ptr, readonly\), not \[4096, False\]"),
    ("data short", _with(data=(0x1000,)), TypeError, "not \\(4096,\\)"),
    ("data ptr", _with(data=("0x1000", False)), TypeError,
     "data pointer must be an int, not '0x1000'"),
    ("data ptr negative", _with(data=(-4096, False)), ValueError,
     "data pointer -4096 is not an address"),
    ("data ptr huge", _with(data=(1 << 64, False)), ValueError,
     "is not an address"),
    ("data readonly", _with(data=(0x1000, 0)), TypeError,
     "readonly flag must be a bool, not 0"),
    ("data null", _with(data=(0, False)), ValueError,
     "data pointer is 0 for an array of 6 elements"),
    ("below zero", _with(data=(16, False), strides=(-24, 8)), ValueError,
     "outside the address space"),
    ("mask", _with(mask=np.zeros((2, 3), bool)), NotImplementedError,
     "^Masked arrays are not supported$"),
    ("stream 0", _with(stream=0), ValueError,
     "invalid stream 0 in the CUDA Array Interface: 0 is ambiguous"),
    ("stream negative", _with(stream=-2), ValueError, "invalid stream -2"),
    ("stream str", _with(stream="1"), TypeError,
     "stream must be None or an int, not '1'"),
    ("stream float", _with(stream=1.0), TypeError, "not 1.0"),
    ("unknown pointer", _with(data=(0x1234500, False)), ValueError,
     "pointer 0x1234500 is not memory the CUDA driver knows"),
]


@pytest.mark.parametrize("change, exc, match", [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_invalid_desc(sim, change, exc, match):
    base = _base()
    desc = _desc(base)
    change(desc)
    sim.reset()
    with pytest.raises(exc, match=match):
        cudamem.from_cuda_array_interface(desc, owner=base)
    with pytest.raises(exc, match=match):
        cudamem.as_cuda_array(Producer(base, desc))
    made = calls(sim)
    assert made["cuStreamSynchronize"] == 0
    if "pointer" not in match:
        # Rejected before the driver is asked about the pointer.
        assert made["cuPointerGetAttributes"] == 0


def test_desc_must_be_a_dict():
    class Broken:
        __cuda_array_interface__ = None

    with pytest.raises(TypeError, match="must be a dict, not list"):
        cudamem.from_cuda_array_interface([1, 2])
    with pytest.raises(TypeError, match="must be a dict, not NoneType"):
        cudamem.as_cuda_array(Broken())


def test_a_mask_of_none_is_no_mask():
    base = _base()
    imported = cudamem.from_cuda_array_interface(_desc(base, mask=None),
                                                 owner=base)
    _same_layout(imported, base)


@pytest.mark.parametrize("change", [
    {"shape": (8,)},
    {"data": "offset"},
    {"strides": (-8,)},
], ids=["past the end", "offset past the end", "below the start"])
def test_extent_outside_the_allocation_is_refused(sim, change):
    base = cudamem.to_device(_host((4,)))
    desc = _desc(base, **change)
    if change.get("data") == "offset":
        desc["data"] = (base.device_ctypes_pointer.value + 8, False)
    sim.reset()
    with pytest.raises(ValueError, match="outside its allocation of 32 "
                                         "bytes"):
        cudamem.from_cuda_array_interface(desc, owner=base)
    # The owner and the range come from one question, asked in no context.
    made = calls(sim)
    assert made["cuPointerGetAttributes"] == 1
    assert made["cuMemGetAddressRange"] == made["cuCtxGetCurrent"] == 0


def test_extent_inside_the_allocation_is_accepted():
    base = cudamem.to_device(_host((8,)))
    # The last four elements, backwards, from the last one.
    desc = _desc(base[4:], strides=(-8,),
                 data=(base[7:].device_ctypes_pointer.value, False))
    imported = cudamem.from_cuda_array_interface(desc, owner=base)
    np.testing.assert_array_equal(imported.copy_to_host(),
                                  _host((8,))[7:3:-1])


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_version_up_to_3_is_read(version):
    base = _base()
    imported = cudamem.from_cuda_array_interface(_desc(base, version=version),
                                                 owner=base)
    _same_layout(imported, base)


# ---------------------------------------------------------------------------
# Read-only imports: every write is refused, through the import and its
# views; reads work, and the export says read-only too.

def _readonly():
    base = cudamem.to_device(_host((4, 6)))
    desc = _desc(base, data=(base.device_ctypes_pointer.value, True))
    return base, cudamem.from_cuda_array_interface(desc, owner=base)


WRITES = {
    "copy_to_device": lambda a: a.copy_to_device(np.zeros(a.shape)),
    "copy_to_device stream": lambda a: a.copy_to_device(
        np.zeros(a.shape), stream=cudamem.stream()),
    "copy_to_device device": lambda a: a.copy_to_device(
        cudamem.device_array_like(a)),
    "setitem scalar": lambda a: a.__setitem__(0, 1.0),
    "setitem array": lambda a: a.__setitem__(Ellipsis, np.ones(a.shape)),
    "setitem slice": lambda a: a.__setitem__(slice(None, None, 2), 5),
    "fill": lambda a: a.fill(2.0),
    "to_device to": lambda a: cudamem.to_device(np.zeros(a.shape), to=a),
}

VIEWS = {
    "itself": lambda a: a,
    "slice": lambda a: a[1:, ::2],
    "transpose": lambda a: a.T,
    "reshape": lambda a: a.reshape(24),
    "view dtype": lambda a: a.view(np.int64),
    "bound": lambda a: a.bind(cudamem.stream()),
    "reimport": lambda a: cudamem.as_cuda_array(Producer(a)),
    "split": lambda a: a.ravel().split(6)[1],
}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("write", sorted(WRITES))
def test_readonly_import_refuses_writes(sim, view, write):
    base, imported = _readonly()
    target = VIEWS[view](imported)
    sim.reset()
    with pytest.raises(ValueError, match="assignment destination is "
                                         "read-only"):
        WRITES[write](target)
    made = calls(sim)
    assert not any(made[k] for k in made if k.startswith(("cuMemcpy",
                                                          "cuMemset")))
    np.testing.assert_array_equal(base.copy_to_host(), _host((4, 6)))


def test_readonly_import_reads():
    base, imported = _readonly()
    host = _host((4, 6))
    np.testing.assert_array_equal(imported.copy_to_host(), host)
    np.testing.assert_array_equal(imported[1:, ::2].copy_to_host(),
                                  host[1:, ::2])
    assert imported[2, 3] == host[2, 3]
    # A copy is the consumer's own memory, writable.
    copied = imported.copy_to_host()
    dev = cudamem.to_device(copied)
    dev.fill(1.0)
    # Copies out of it into a writable array work.
    out = cudamem.device_array_like(base)
    out.copy_to_device(imported)
    np.testing.assert_array_equal(out.copy_to_host(), host)
    assert imported.__cuda_array_interface__["data"][1] is True
    assert imported.T.__cuda_array_interface__["data"][1] is True
    assert base.__cuda_array_interface__["data"][1] is False


def test_writable_import_writes():
    base = cudamem.to_device(_host((4,)))
    imported = cudamem.from_cuda_array_interface(_desc(base), owner=base)
    imported.fill(3.0)
    np.testing.assert_array_equal(base.copy_to_host(), np.full(4, 3.0))
    assert imported.__cuda_array_interface__["data"][1] is False


# ---------------------------------------------------------------------------
# Several devices: the pointer decides.

@pytest.mark.simulator
def test_device_comes_from_the_pointer(run_py):
    proc = run_py("""
        import numpy as np, cudamem
        from cudamem import simulator

        class Producer:
            def __init__(self, base, **changes):
                self.base = base
                self.changes = changes

            @property
            def __cuda_array_interface__(self):
                desc = dict(self.base.__cuda_array_interface__)
                desc.update(self.changes)
                return desc

        with cudamem.gpus[1]:
            b = cudamem.to_device(np.arange(6) * 3)
            s1 = cudamem.stream()
            empty = cudamem.to_device(np.zeros(0))
        s0 = cudamem.stream()
        a = cudamem.to_device(np.arange(4))
        assert cudamem.get_current_device().id == 0
        imp = cudamem.as_cuda_array(Producer(b))
        assert imp.gpu_data.context.device.id == 1
        assert list(imp.copy_to_host()) == [0, 3, 6, 9, 12, 15]
        imp[::2] = 7
        assert list(b.copy_to_host()) == [7, 3, 7, 9, 7, 15]
        on0 = cudamem.as_cuda_array(Producer(a))
        assert on0.gpu_data.context.device.id == 0
        # The stream comes with the data's device.
        simulator.reset()
        on1 = cudamem.as_cuda_array(Producer(b, stream=int(s1)))
        calls = simulator.stats()["calls"]
        assert calls["cuStreamSynchronize"]["calls"] == 1, calls
        assert on1.stream.context.device.id == 1
        out = on1.copy_to_host()
        s1.synchronize()
        assert list(out) == [7, 3, 7, 9, 7, 15]
        try:
            cudamem.as_cuda_array(Producer(b, stream=int(s0)))
        except ValueError as exc:
            assert "device 0" in str(exc) and "device 1" in str(exc), exc
        else:
            raise SystemExit("a stream of device 0 accepted for device 1")
        # A zero-size array has no pointer: its stream's device, else the
        # current one.
        z = cudamem.as_cuda_array(Producer(empty, stream=int(s1)))
        assert z.gpu_data.context.device.id == 1
        z0 = cudamem.as_cuda_array(Producer(empty))
        assert z0.gpu_data.context.device.id == 0
        del a, b, s0, s1, empty, imp, on0, on1, out, z, z0
        cudamem.close()
        print(simulator.live())
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    live = eval(proc.stdout)
    assert live["device_allocations"] == 0 and live["contexts"] == 0, live


def test_cai_objects_are_sources_everywhere(sim):
    """to_device wraps a CAI object without copying; copy_to_device and
    assignment take it as a device-to-device source."""
    h = _host((4, 6))
    base = cudamem.to_device(h)
    producer = Producer(base)
    sim.reset()
    wrapped = cudamem.to_device(producer)
    made = calls(sim)
    assert not any(n for k, n in made.items() if k.startswith("cuMemcpy"))
    assert type(wrapped) is cudamem.DeviceNDArray
    assert wrapped.gpu_data.owner is producer
    assert (wrapped.device_ctypes_pointer.value
            == base.device_ctypes_pointer.value)
    dst = cudamem.device_array((4, 6))
    sim.reset()
    dst.copy_to_device(producer)
    made = calls(sim)
    assert made.get("cuMemcpyDtoD", 0) == 1 and not made.get("cuMemcpyHtoD")
    np.testing.assert_array_equal(dst.copy_to_host(), h)
    # Assignment into a strided view, broadcast from a CAI row.
    dst[::-2, 1:] = Producer(base[0, 1:])
    want = h.copy()
    want[::-2, 1:] = h[0, 1:]
    np.testing.assert_array_equal(dst.copy_to_host(), want)
    with pytest.raises(TypeError, match="incompatible dtype"):
        dst.copy_to_device(Producer(cudamem.to_device(h.astype(np.float32))))


@pytest.mark.simulator
def test_to_device_copies_a_cai_object_of_another_device(run_py):
    proc = run_py("""
        import numpy as np, cudamem
        from cudamem import simulator

        class Producer:
            def __init__(self, base):
                self.base = base
            @property
            def __cuda_array_interface__(self):
                return self.base.__cuda_array_interface__

        h = np.arange(12.0).reshape(3, 4)
        with cudamem.gpus[1]:
            p = Producer(cudamem.to_device(h))
        near = cudamem.to_device(p)
        assert near.gpu_data.context.device.id == 0
        assert near.gpu_data.owner is not p
        np.testing.assert_array_equal(near.copy_to_host(), h)
        del p, near
        cudamem.close()
        print(simulator.live())
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    live = eval(proc.stdout)
    assert live["device_allocations"] == 0, live


def test_copy_from_an_ndarray_subclass_follows_its_interface():
    # Only an exact ndarray skips the interface lookup: a subclass that
    # names device memory (as mapped and managed arrays do) is copied from
    # that memory, not from its own host elements.
    src = cudamem.to_device(np.arange(4.0))

    class Carrier(np.ndarray):
        @property
        def __cuda_array_interface__(self):
            return src.__cuda_array_interface__

    host = np.full(4, -1.0).view(Carrier)
    d = cudamem.device_array(4)
    d.copy_to_device(host)
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(4.0))
    d.copy_to_device(np.full(4, 7.0))
    np.testing.assert_array_equal(d.copy_to_host(), np.full(4, 7.0))


@pytest.mark.simulator
def test_first_use_of_the_device_is_the_import():
    # Memory another library made before cudamem did anything: the import
    # asks its pointer in no context, so its record's retain of the
    # device's primary context is cudamem's first, and its failure leaves
    # nothing behind.
    out = run_python("""
        import ctypes
        import numpy as np
        import cudamem
        from cudamem import simulator
        from tests.helpers.simref import SimDriver

        drv = SimDriver(simulator.library_path())
        drv.call("cuInit", 0)
        ctx = drv.retain_primary(0)
        drv.set_current(ctx)
        host = np.arange(8.0)
        ptr = drv.mem_alloc(host.nbytes)
        drv.call("cuMemcpyHtoD_v2", ctypes.c_uint64(ptr),
                 ctypes.c_void_p(host.ctypes.data),
                 ctypes.c_size_t(host.nbytes))
        drv.set_current(None)
        desc = {"shape": (8,), "typestr": "<f8", "data": (ptr, False),
                "version": 3, "strides": None, "stream": None}
        simulator.inject("cuDevicePrimaryCtxRetain", "CUDA_ERROR_UNKNOWN")
        try:
            cudamem.from_cuda_array_interface(desc)
        except cudamem.CudaAPIError as e:
            print("refused", e.name, "cuDevicePrimaryCtxRetain" in str(e))
        simulator.clear_faults()
        d = cudamem.from_cuda_array_interface(desc)
        print("data", (d.copy_to_host() == host).all())
        del d
        cudamem.close()
        print("live", simulator.live()["device_allocations"])
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [
        "refused CUDA_ERROR_UNKNOWN True", "data True", "live 1"]
