"""Managed (unified) memory: managed_array() and managed_array_like() laid
out as numpy.empty lays out arrays, ManagedNDArray's host and device sides
over the same memory, its views, the buffer protocol of host-accessible
MemoryPointers, deferred frees, lifetime across close() and reset(),
prefetch() and advise().

NumPy is the reference for layouts and data. The simulator's per entry
point counters and cudamem's API trace (CUDAMEM_LOG=api, in a fresh
process) show which driver calls were made, with which range and location.
"""
import gc
import re
import warnings

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaDriverError

pytestmark = pytest.mark.simulator

ADVICES = ["read_mostly", "unset_read_mostly", "preferred_location",
           "unset_preferred_location", "accessed_by", "unset_accessed_by"]


def _calls(sim, entry):
    return sim.stats()["calls"][entry]["calls"]


def _managed(sim):
    return sim.live()["managed_allocations"]


def _deallocs():
    return cudamem.current_context().memory_manager.deallocations


def _reference(shape, dtype, strides, order):
    """What numpy.empty (or, with strides, numpy.ndarray over a buffer of
    the layout's extent) makes."""
    dtype = np.dtype(dtype)
    if strides is None:
        return np.empty(shape, dtype, order=order)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n)
    high = dtype.itemsize + sum((n - 1) * s for n, s in zip(shape, strides)
                                if s > 0 and n)
    buf = bytearray(max(high - low, 0) if all(shape) else 0)
    return np.ndarray(shape, dtype, buffer=buf, offset=-low if all(shape)
                      else 0, strides=strides)


LAYOUTS = [
    (5, np.float64, None, "C"),
    ((3, 4), np.float32, None, "C"),
    ((3, 4), np.int16, None, "F"),
    ((2, 3, 4), np.complex128, None, "F"),
    ((), np.int32, None, "C"),
    ((4, 3), np.float64, (8, 32), "C"),
    ((4, 3), np.int32, (-12, 4), "C"),
    ((3, 2), np.uint8, (4, 1), "C"),
    ((2, 2), [("a", np.int32), ("b", np.float64)], None, "C"),
]


@pytest.mark.parametrize("shape, dtype, strides, order", LAYOUTS)
def test_layout_as_numpy(sim, shape, dtype, strides, order):
    ref = _reference(shape, dtype, strides, order)
    m = cudamem.managed_array(shape, dtype=dtype, strides=strides,
                              order=order)
    assert type(m) is cudamem.ManagedNDArray
    assert isinstance(m, np.ndarray)
    assert (m.shape, m.strides, m.dtype) == (ref.shape, ref.strides,
                                             ref.dtype)
    for flag in ("C_CONTIGUOUS", "F_CONTIGUOUS", "WRITEABLE", "ALIGNED"):
        assert m.flags[flag] == ref.flags[flag], flag
    assert not m.flags["OWNDATA"]
    assert type(m.base) is cudamem.MemoryPointer
    assert m.gpu_data is m.base
    extent = ref.nbytes if strides is None else len(ref.base)
    assert m.gpu_data.size == extent
    assert _managed(sim) == 1


def test_zero_size_allocates_nothing(sim):
    sim.reset()
    for shape in (0, (3, 0), (0, 4)):
        m = cudamem.managed_array(shape, np.float32)
        assert m.shape == np.empty(shape).shape and m.size == 0
        assert m.gpu_data.size == 0
        assert memoryview(m.gpu_data).nbytes == 0
        assert m.__cuda_array_interface__["data"] == (0, False)
        m.prefetch()
        m.advise("read_mostly")
    assert _calls(sim, "cuMemAllocManaged") == 0
    assert _calls(sim, "cuMemPrefetchAsync") == 0
    assert _calls(sim, "cuMemAdvise") == 0
    assert _managed(sim) == 0


def test_bad_input_allocates_nothing(sim):
    before = _calls(sim, "cuMemAllocManaged")
    with pytest.raises(ValueError, match="negative dimensions"):
        cudamem.managed_array((2, -1))
    with pytest.raises(ValueError, match="order must be 'C' or 'F'"):
        cudamem.managed_array(3, order="K")
    with pytest.raises(TypeError, match="Python objects"):
        cudamem.managed_array(3, dtype=object)
    with pytest.raises(ValueError, match="do not match"):
        cudamem.managed_array((2, 2), strides=(8,))
    with pytest.raises(ValueError, match="must be 0"):
        cudamem.managed_array(3, stream=5)
    with pytest.raises(TypeError):
        cudamem.ManagedNDArray((3,))
    assert _calls(sim, "cuMemAllocManaged") == before


def test_host_writes_seen_by_the_device(sim):
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    m = cudamem.managed_array(data.shape, data.dtype)
    m[...] = data
    d = cudamem.device_array_like(m)
    sim.reset()
    d.copy_to_device(m)  # the device reads the managed memory
    assert _calls(sim, "cuMemcpyDtoD") == 1
    assert _calls(sim, "cuMemcpyHtoD") == 0
    np.testing.assert_array_equal(d.copy_to_host(), data)
    np.testing.assert_array_equal(m.copy_to_host(), data)


@pytest.mark.parametrize("use_stream", [False, True])
def test_device_writes_seen_by_the_host(sim, use_stream):
    data = np.arange(12.0).reshape(3, 4)
    src = cudamem.to_device(data)
    m = cudamem.managed_array(data.shape)
    m[...] = 0
    stream = cudamem.stream() if use_stream else 0
    with sim.delay(2000):
        m.copy_to_device(src, stream=stream)
        if use_stream:
            stream.synchronize()
    np.testing.assert_array_equal(m, data)
    # Assignment through the device side (the CUDA Array Interface).
    cudamem.as_cuda_array(m)[1:, ::2] = -1
    expect = data.copy()
    expect[1:, ::2] = -1
    np.testing.assert_array_equal(m, expect)
    out = np.empty_like(data)
    assert m.copy_to_host(out) is out
    np.testing.assert_array_equal(out, expect)


def test_views_are_managed_arrays_of_their_own_elements(sim):
    m = cudamem.managed_array((6, 8), np.int32)
    m[...] = np.arange(48).reshape(6, 8)
    for key in [np.s_[2:5, 1::3], np.s_[::-1, ::2], np.s_[3], np.s_[:, 5]]:
        v = m[key]
        assert type(v) is cudamem.ManagedNDArray
        assert v.gpu_data is m.gpu_data
        cai = v.__cuda_array_interface__
        assert cai["data"] == (v.ctypes.data, False)
        assert cai["shape"] == v.shape
        assert cai["strides"] in (None, v.strides)
        if cai["strides"] is None:
            assert v.flags["C_CONTIGUOUS"]
        assert v.device_ctypes_pointer.value == v.ctypes.data
        np.testing.assert_array_equal(v.copy_to_host(), np.asarray(v))
    t = m.T
    assert type(t) is cudamem.ManagedNDArray
    np.testing.assert_array_equal(t.copy_to_host(), np.asarray(m).T)


def test_view_layout_changed_in_place(sim):
    m = cudamem.managed_array(12, np.int16)
    m[...] = np.arange(12)
    assert m.__cuda_array_interface__["shape"] == (12,)
    # NumPy 2.5 deprecates setting .shape; while NumPy allows it, the
    # interface must follow the new layout.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        m.shape = (3, 4)
    assert m.__cuda_array_interface__["shape"] == (3, 4)
    np.testing.assert_array_equal(m.copy_to_host(),
                                  np.arange(12).reshape(3, 4))


def test_stream_is_kept_by_views(sim):
    s = cudamem.stream()
    m = cudamem.managed_array((4, 4), stream=s)
    assert m.stream is s and m[1:].stream is s
    assert m[1:].__cuda_array_interface__["stream"] == int(s)
    plain = cudamem.managed_array(3)
    assert plain.stream == 0
    assert plain.__cuda_array_interface__["stream"] is None


def test_cuda_array_interface_consumers(sim):
    m = cudamem.managed_array(5)
    assert cudamem.is_cuda_array(m)
    d = cudamem.as_cuda_array(m)
    assert d.device_ctypes_pointer.value == m.ctypes.data
    assert m.__cuda_memory__ is True


def test_arrays_numpy_makes_have_no_device_side(sim):
    m = cudamem.managed_array(4)
    m[...] = 1
    for other in (m + 1, m.copy()):
        assert type(other) is cudamem.ManagedNDArray
        with pytest.raises(ValueError, match="not in managed memory"):
            other.gpu_data
        with pytest.raises(ValueError, match="not in managed memory"):
            other.prefetch()
        with pytest.raises(ValueError, match="not in managed memory"):
            other.__cuda_array_interface__


def test_buffer_protocol(sim):
    m = cudamem.managed_array((3, 5), np.float64)
    m[...] = np.arange(15).reshape(3, 5)
    view = memoryview(m.gpu_data)
    assert not view.readonly
    assert view.nbytes == m.nbytes
    assert bytes(view) == m.tobytes()
    np.frombuffer(view, np.float64)[2] = -7
    assert m[0, 2] == -7
    del view
    d = cudamem.device_array(4)
    with pytest.raises(BufferError,
                       match=r"is device memory, which the host cannot "
                             r"read: get a host copy with the array's "
                             r"copy_to_host\(\)"):
        memoryview(d.gpu_data)
    with pytest.raises(BufferError, match="copy_to_host"):
        memoryview(d)


def test_freed_when_the_last_reference_goes(sim):
    _deallocs().clear()
    m = cudamem.managed_array(100)
    v = m[10:20]
    del m
    gc.collect()
    assert _managed(sim) == 1  # the view holds the allocation
    del v
    gc.collect()
    assert len(_deallocs()) == 1  # queued like device memory
    _deallocs().clear()
    assert _managed(sim) == 0


def test_deferred_free(sim):
    _deallocs().clear()
    frees = _calls(sim, "cuMemFree")
    with cudamem.defer_cleanup():
        for _ in range(20):  # past numba's count threshold
            cudamem.managed_array(8)
        gc.collect()
        assert _managed(sim) == 20
        assert _calls(sim, "cuMemFree") == frees
    _deallocs().clear()
    assert _managed(sim) == 0
    assert _calls(sim, "cuMemFree") == frees + 20


def test_survives_close(sim):
    m = cudamem.managed_array((4, 4), np.int64)
    m[...] = np.arange(16).reshape(4, 4)
    cudamem.close()
    assert _managed(sim) == 1
    np.testing.assert_array_equal(m, np.arange(16).reshape(4, 4))
    assert bytes(memoryview(m.gpu_data)) == m.tobytes()
    np.testing.assert_array_equal(m.copy_to_host(), m)
    frees = _calls(sim, "cuMemFree")
    del m
    gc.collect()
    # Its generation's queue is gone: freed at once.
    assert _managed(sim) == 0
    assert _calls(sim, "cuMemFree") == frees + 1


def test_close_frees_queued_managed_memory(sim):
    _deallocs().clear()
    keep = cudamem.managed_array(4)
    keep[...] = 3
    cudamem.managed_array(4)
    gc.collect()
    assert len(_deallocs()) == 1
    frees = _calls(sim, "cuMemFree")
    cudamem.close()
    # The context lives on for `keep`: the queued one was freed in it.
    assert _calls(sim, "cuMemFree") == frees + 1
    assert _managed(sim) == 1
    assert (keep == 3).all()
    del keep
    assert _managed(sim) == 0


def test_reset_frees_managed_memory(sim):
    m = cudamem.managed_array(4)
    _deallocs().clear()
    cudamem.managed_array(4)  # queued when the reset comes
    gc.collect()
    cudamem.get_current_device().reset()
    assert _managed(sim) == 0
    # The host array is over freed memory now: only its checks are safe.
    with pytest.raises(CudaDriverError, match="was reset"):
        memoryview(m.gpu_data)
    with pytest.raises(CudaDriverError, match="reset or closed"):
        m.copy_to_host()
    with pytest.raises(CudaDriverError, match="was reset"):
        m.prefetch()
    frees = _calls(sim, "cuMemFree")
    del m
    gc.collect()
    assert _calls(sim, "cuMemFree") == frees
    # The retains were given back: a close now destroys the context.
    cudamem.close()
    assert sim.live()["contexts"] == 0


def test_attribute_query_failure_allocates_nothing(sim):
    cudamem.get_current_device()
    sim.reset()
    sim.inject("cuDeviceGetAttribute", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(cudamem.CudaAPIError) as info:
        cudamem.managed_array(4)
    assert info.value.call == "cuDeviceGetAttribute"
    assert _calls(sim, "cuMemAllocManaged") == 0


# CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, _CONCURRENT_MANAGED_ACCESS.
MANAGED_MEMORY, CONCURRENT_MANAGED_ACCESS = 83, 89

MISSING_CAPABILITY = """
import cudamem, numpy as np
from cudamem import simulator as sim

def message(call):
    try:
        call()
    except cudamem.CudaSupportError as e:
        return str(e)
    return None

cudamem.current_context()  # the context is no failure's leftover
before = sim.live()
if EXPECT == "no managed memory":
    print(message(lambda: cudamem.managed_array(4)))
else:
    m = cudamem.managed_array(4)
    print(message(m.prefetch))
    print(message(lambda: m.advise("preferred_location", device="host")))
    print(message(lambda: m.advise("accessed_by")))
    print(message(lambda: m.advise("read_mostly")))
    del m
    cudamem.current_context().memory_manager.deallocations.clear()
print(sim.live() == before)
"""


def test_missing_capability(run_py):
    # A device without managed memory, then one without concurrent managed
    # access (Windows, WSL): clear errors before any driver call, and the
    # hints that need no location still work.
    proc = run_py('EXPECT = "no managed memory"\n' + MISSING_CAPABILITY,
                  env={"CUDAMEM_SIM_ATTRS": "%d=0" % MANAGED_MEMORY})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out == ["device 0 does not support managed memory "
                   "(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is 0)", "True"]
    proc = run_py('EXPECT = "no concurrent access"\n' + MISSING_CAPABILITY,
                  env={"CUDAMEM_SIM_ATTRS":
                       "%d=0" % CONCURRENT_MANAGED_ACCESS})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == ("device 0 does not support prefetching managed "
                      "memory: CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS "
                      "is 0")
    hint = ("device 0 does not support managed memory location hints: "
            "CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS is 0")
    assert out[1:] == [hint, hint, "None", "True"]


# ---------------------------------------------------------------------------
# prefetch and advise.

def test_prefetch_calls(sim):
    m = cudamem.managed_array(64)
    dev = cudamem.get_current_device()
    sim.reset()
    m.prefetch()
    m.prefetch(0)
    m.prefetch(dev)
    m.prefetch("host")
    s = cudamem.stream()
    m[8:16].prefetch(stream=s)
    s.synchronize()
    assert _calls(sim, "cuMemPrefetchAsync") == 5


def test_prefetch_on_stream_0_is_synchronous(sim):
    m = cudamem.managed_array(64)
    with sim.delay(20000):
        m.prefetch()
        assert cudamem.legacy_default_stream().query()


def test_advise_calls(sim):
    m = cudamem.managed_array(64)
    sim.reset()
    for advice in ADVICES:
        m.advise(advice)
    for number in range(1, 7):
        m[4:8].advise(number, device=0)
    for advice in ("preferred_location", "accessed_by", "unset_accessed_by"):
        m.advise(advice, "host")
    assert _calls(sim, "cuMemAdvise") == 15


def test_bad_hints_call_nothing(sim):
    m = cudamem.managed_array(8)
    sim.reset()
    with pytest.raises(ValueError, match="unknown advice 'mostly_read'"):
        m.advise("mostly_read")
    with pytest.raises(ValueError, match="unknown advice 7"):
        m.advise(7)
    with pytest.raises(TypeError, match="advice must be a str or an int"):
        m.advise(1.0)
    with pytest.raises(TypeError, match="advice must be a str or an int"):
        m.advise(True)
    for advice in ("read_mostly", "unset_read_mostly",
                   "unset_preferred_location"):
        with pytest.raises(ValueError, match="'host' is not a location"):
            m.advise(advice, "host")
    with pytest.raises(ValueError, match="device ordinal 9 out of range"):
        m.advise("accessed_by", 9)
    with pytest.raises(ValueError, match="not 'cpu'"):
        m.prefetch("cpu")
    with pytest.raises(ValueError, match="device ordinal -1 out of range"):
        m.prefetch(-1)
    with pytest.raises(TypeError, match="device must be an int"):
        m.prefetch(0.0)
    with pytest.raises(ValueError, match="must be 0"):
        m.prefetch(stream=3)
    assert _calls(sim, "cuMemPrefetchAsync") == 0
    assert _calls(sim, "cuMemAdvise") == 0


TRACE = """
    import numpy as np, cudamem
    m = cudamem.managed_array(100, np.float64)
    h = cudamem.managed_array(4, attach_global=False)
    base = m.ctypes.data
    print("BASE", base)
    m[10:20].prefetch()
    m[20:10:-2].prefetch("host")
    m.reshape(10, 10)[2:4, 1:3].advise("preferred_location", "host")
    m[::-1].advise("read_mostly")
    cudamem.managed_array(0).prefetch()
"""


def _trace(run_py, env=None):
    proc = run_py(TRACE, env=dict({"CUDAMEM_LOG": "api"}, **(env or {})))
    assert proc.returncode == 0, proc.stderr
    base = int(re.search(r"BASE (\d+)", proc.stdout).group(1))
    calls = re.findall(r"cudamem api: (cuMem(?:AllocManaged|PrefetchAsync|"
                       r"Advise))\((.*)\) -> CUDA_SUCCESS", proc.stderr)
    return base, [(name, dict(re.findall(r"(\w+)=(\w+)", args)))
                  for name, args in calls]


def test_ranges_locations_and_flags(run_py):
    base, calls = _trace(run_py)
    names = [name for name, _ in calls]
    assert names == ["cuMemAllocManaged"] * 2 + ["cuMemPrefetchAsync"] * 2 \
        + ["cuMemAdvise"] * 2
    assert calls[0][1]["flags"] == "1"  # CU_MEM_ATTACH_GLOBAL
    assert calls[1][1]["flags"] == "2"  # CU_MEM_ATTACH_HOST
    expect = [
        # (first byte, bytes, CUmemLocation as one 8-byte word)
        (base + 80, 80, 1),        # device 0: {TYPE_DEVICE, 0}
        (base + 96, 72, 2),        # m[12..20] to {TYPE_HOST}
        (base + 168, 96, 2),       # rows 2-3, columns 1-2
        (base, 800, 1),            # the whole reversed array
    ]
    for (_, args), (ptr, nbytes, loc) in zip(calls[2:], expect):
        assert int(args["ptr"], 16) == ptr
        assert int(args["nbytes"]) == nbytes
        assert int(args["loc"], 0) == loc
    assert calls[4][1]["advice"] == "3"  # CU_MEM_ADVISE_SET_PREFERRED_...
    assert calls[5][1]["advice"] == "1"  # CU_MEM_ADVISE_SET_READ_MOSTLY


def test_driver_without_the_12020_entry_points(run_py):
    proc = run_py("""
        import cudamem
        m = cudamem.managed_array(4)
        m[...] = 2
        for call in (m.prefetch, lambda: m.advise("read_mostly")):
            try:
                call()
            except cudamem.CudaSupportError as exc:
                print(exc)
        print(m.copy_to_host())
    """, env={"CUDAMEM_SIM_DRIVER_VERSION": "12000"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "cuMemPrefetchAsync" in lines[0]
    assert "cuMemAdvise" in lines[1]
    assert lines[2] == "[2. 2. 2. 2.]"


# ---------------------------------------------------------------------------
# managed_array_like.

@pytest.mark.parametrize("make", [
    lambda: np.zeros((3, 4), order="C"),
    lambda: np.zeros((3, 4), order="F"),
    lambda: np.zeros((4, 6, 2)).transpose(2, 0, 1),
    lambda: cudamem.device_array((5, 2), np.int16, order="F"),
])
def test_managed_array_like(sim, make):
    ary = make()
    s = cudamem.stream()
    m = cudamem.managed_array_like(ary, stream=s)
    ref = cudamem.device_array_like(ary)
    assert type(m) is cudamem.ManagedNDArray
    assert (m.shape, m.strides, m.dtype) == (ref.shape, ref.strides,
                                             ref.dtype)
    assert m.stream is s


def test_managed_array_like_attach_host(run_py):
    proc = run_py("""
        import numpy as np, cudamem
        cudamem.managed_array_like(np.zeros(3), attach_global=False)
    """, env={"CUDAMEM_LOG": "api"})
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"cuMemAllocManaged\(.*flags=2\)", proc.stderr)


def test_managed_array_like_needs_an_array():
    with pytest.raises(TypeError, match="managed_array_like\\(\\) needs a "
                       "NumPy or device array, not list"):
        cudamem.managed_array_like([1, 2])


def test_copies_with_managed_host_arrays_are_complete(sim):
    # A managed array given where a host array goes is device memory to
    # the driver: a device copy, whose synchronous form may return before
    # it ran (rule 9). Under a delay, the data must still be there on
    # return, both ways, and for plain NumPy views of managed memory too.
    d = cudamem.to_device(np.arange(1000.0))
    m = cudamem.managed_array(1000)
    sim.reset()
    with sim.delay(200_000):
        d.copy_to_host(m)
        np.testing.assert_array_equal(m, np.arange(1000.0))
        np.asarray(m)[:] = -1
        back = cudamem.to_device(np.asarray(m)[::2])
        np.testing.assert_array_equal(back.copy_to_host(), -1)
        d.copy_to_device(m)
        np.testing.assert_array_equal(d.copy_to_host(), -1)
    assert _calls(sim, "cuMemcpyDtoD") >= 2
    assert _calls(sim, "cuMemcpyDtoH") == 2  # the two reads into NumPy
