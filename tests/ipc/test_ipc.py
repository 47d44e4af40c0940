"""IPC of device arrays: DeviceNDArray.get_ipc_handle(), IpcArrayHandle,
open_ipc_array, IpcHandle and GetIpcHandleMixin, with numba's documented
behaviour as the reference for the API and NumPy for the data.

Handles travel pickled to fresh interpreters (run_py), which open them,
read the exact bytes, write back and check that nothing is left mapped or
allocated (the simulator's live counts, IPC mappings included); the
exporting side is this process, checked by the autouse leak fixture. The
simulator's per entry point counters show how a handle was opened: one
driver mapping per handle and device, or a staged copy.
"""
import pickle

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem

pytestmark = pytest.mark.simulator

# What every child runs first: `handle` is the pickled object, done() checks
# that the child released everything (after a flush of its queues).
PRELUDE = """
import gc, pickle
import numpy as np
import cudamem
from cudamem import simulator, _cudamem
from cudamem.errors import CudaAPIError
handle = pickle.loads(%r)

def calls(entry):
    return simulator.stats()["calls"][entry]["calls"]

def done():
    gc.collect()
    _cudamem._flush_pending()
    live = simulator.live()
    assert live["ipc_open"] == 0, live
    assert live["device_allocations"] == 0, live
    print("OK")
"""


def _child(run_py, obj, body, env=None):
    """Runs `body` after PRELUDE with `obj` as `handle`; its stdout."""
    proc = run_py(PRELUDE % pickle.dumps(obj) + body, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("OK\n"), proc.stdout
    return proc.stdout


class CAI:
    """A plain CUDA Array Interface object over someone's device memory."""

    def __init__(self, owner, cai):
        self.owner = owner
        self.__cuda_array_interface__ = cai


# Each case: (the allocation, the array shared, the index of that array's
# elements in the allocation).
def _whole():
    base = cudamem.to_device(np.arange(24, dtype=np.float64))
    return base, base, Ellipsis


def _slice():
    base = cudamem.to_device(np.arange(24, dtype=np.int32))
    return base, base[5:17], slice(5, 17)


def _strided_2d():
    base = cudamem.to_device(np.arange(48, dtype=np.int16).reshape(6, 8))
    key = (slice(1, 5), slice(1, None, 3))
    return base, base[key], key


def _negative_strides():
    base = cudamem.to_device(np.arange(48, dtype=np.int64).reshape(6, 8))
    key = (slice(None, None, -2), slice(None, None, -3))
    return base, base[key], key


def _zero_size():
    base = cudamem.device_array((0, 3), np.float32)
    return base, base, Ellipsis


def _records():
    dtype = np.dtype([("a", np.int32), ("b", np.float64), ("c", "S3")])
    host = np.zeros(7, dtype)
    host["a"] = np.arange(7)
    host["b"] = np.arange(7) / 4
    host["c"] = [b"x%d" % i for i in range(7)]
    base = cudamem.to_device(host)
    return base, base[2:], slice(2, None)


def _imported():
    """as_cuda_array over a plain-Python CAI object that points 64 bytes
    into a cudamem allocation (foreign memory to cudamem)."""
    base = cudamem.to_device(np.arange(32, dtype=np.float32))
    view = base[16:]
    return base, cudamem.as_cuda_array(
        CAI(base, view.__cuda_array_interface__)), slice(16, None)


CASES = {"whole": _whole, "slice": _slice, "strided_2d": _strided_2d,
         "negative_strides": _negative_strides, "zero_size": _zero_size,
         "records": _records, "imported": _imported}


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip(run_py, case):
    base, array, key = CASES[case]()
    before = base.copy_to_host()
    expected = array.copy_to_host()
    handle = array.get_ipc_handle()
    assert isinstance(handle, cudamem.IpcArrayHandle)
    new = np.zeros_like(expected)
    if expected.dtype.names:
        new["a"] = -np.arange(expected.size)
        new["c"] = b"new"
    else:
        new[...] = -1 - np.arange(expected.size).reshape(expected.shape)
    _child(run_py, (handle, array.strides, expected, new), """
handle, strides, expected, new = handle
with handle as array:
    assert isinstance(array, cudamem.DeviceNDArray)
    assert array.shape == expected.shape, array.shape
    assert array.strides == strides, array.strides
    assert array.dtype == expected.dtype, array.dtype
    host = array.copy_to_host()
    assert host.tobytes() == expected.tobytes(), (host, expected)
    array.copy_to_device(new)
    assert calls("cuIpcOpenMemHandle") == (1 if expected.size else 0)
del array
done()
""")
    # The child wrote through the shared memory: the view changed, and
    # nothing else in the allocation did.
    np.testing.assert_array_equal(array.copy_to_host(), new)
    after = base.copy_to_host()
    changed = np.zeros(before.shape, bool)
    changed[key] = True
    np.testing.assert_array_equal(after[~changed], before[~changed])


def test_round_trip_of_a_pooled_array(run_py, sim):
    """A pooled array is a block inside a cuMemAlloc slab: its handle is
    the slab's plus an offset, and a child opening it twice shares one
    mapping."""
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as pool:
        neighbour = cudamem.to_device(np.full(64, 7.0))
        array = cudamem.to_device(np.arange(100.0))
        assert pool.stats()["slabs"] == 1 and pool.stats()["used_blocks"] == 2
        handle = array.get_ipc_handle()
        _child(run_py, handle, """
again = pickle.loads(pickle.dumps(handle))
a, b = handle.open(), again.open()
assert calls("cuIpcOpenMemHandle") == 1
assert list(a.copy_to_host()) == list(np.arange(100.0))
b.copy_to_device(-np.arange(100.0))
assert list(a.copy_to_host()) == list(-np.arange(100.0))
handle.close()
again.close()
del a, b
done()
""")
        np.testing.assert_array_equal(array.copy_to_host(), -np.arange(100.0))
        np.testing.assert_array_equal(neighbour.copy_to_host(), 7.0)
        # The handle keeps the exported memory alive, as numba's does.
        del array, neighbour, handle
        pool.trim()
    assert sim.live()["device_allocations"] == 0


def test_handle_carries_the_layout_and_the_device():
    base = cudamem.to_device(np.arange(40, dtype=np.float64).reshape(5, 8))
    view = base[1:4, 2::2]
    handle = view.get_ipc_handle()
    ipc = handle._ipc_handle
    assert ipc.base is view.gpu_data
    assert len(ipc.handle) == 64
    assert ipc.offset == (1 * 8 + 2) * 8  # the view's first byte
    assert ipc.size == (2 * 8 + 4) * 8 + 8  # the bytes its elements span
    assert ipc.source_info == cudamem.get_current_device().uuid
    assert handle._array_desc == dict(shape=(3, 3), strides=(64, 16),
                                      dtype=np.dtype(np.float64), offset=0)
    reversed_ = base[::-1].get_ipc_handle()
    assert reversed_._ipc_handle.offset == 0
    assert reversed_._array_desc["offset"] == 4 * 64


@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_pickles_as_plain_data(protocol):
    array = cudamem.to_device(np.arange(6, dtype=np.uint8))
    handle = array[1:].get_ipc_handle()
    data = pickle.dumps(handle, protocol=protocol)
    # Nothing of the exporting process travels: not the array, not its
    # memory pointer.
    assert b"DeviceNDArray" not in data and b"MemoryPointer" not in data
    copy = pickle.loads(data)
    assert copy._ipc_handle.base is None
    for name in ("handle", "size", "offset", "source_info"):
        assert getattr(copy._ipc_handle, name) == \
            getattr(handle._ipc_handle, name)
    assert copy._array_desc == handle._array_desc


def test_opening_in_the_exporting_process_raises():
    array = cudamem.to_device(np.arange(4))
    handle = array.get_ipc_handle()
    msg = "opening IpcHandle from original process"
    with pytest.raises(ValueError, match=msg):
        handle.open()
    with pytest.raises(ValueError, match=msg):
        with handle:
            pass
    # A pickled copy has no reference to the memory, yet it is still this
    # process's own handle.
    with pytest.raises(ValueError, match=msg):
        pickle.loads(pickle.dumps(handle)).open()
    empty = cudamem.device_array(0).get_ipc_handle()
    with pytest.raises(ValueError, match=msg):
        empty.open()


def test_close_twice_is_harmless():
    handle = cudamem.to_device(np.arange(4)).get_ipc_handle()
    handle.close()
    handle.close()


def test_context_manager_and_close_in_the_child(run_py):
    array = cudamem.to_device(np.arange(10, dtype=np.int32))
    _child(run_py, array.get_ipc_handle(), """
with handle as a:
    assert list(a.copy_to_host()) == list(range(10))
    try:
        handle.open()
    except ValueError as exc:
        assert str(exc) == "IpcHandle is already opened", exc
    else:
        raise SystemExit("opened twice")
# Closing drops the handle's reference; the array keeps the mapping.
assert list(a.copy_to_host()) == list(range(10))
handle.close()
handle.close()
# Open again after a close.
b = handle.open()
assert list(b.copy_to_host()) == list(range(10))
handle.close()
del a, b
done()
""")


@pytest.mark.parametrize("reopen", ["refcount", "error"])
def test_same_allocation_opened_several_times(run_py, reopen):
    base = cudamem.to_device(np.arange(16, dtype=np.int32))
    handles = (base[:8].get_ipc_handle(), base[4:].get_ipc_handle())
    _child(run_py, handles, """
first, second = handle
again = pickle.loads(pickle.dumps(first))
a, b, c = first.open(), second.open(), again.open()
assert list(a.copy_to_host()) == list(range(8))
assert list(b.copy_to_host()) == list(range(4, 16))
# One mapping of the allocation, shared by the three opens.
assert calls("cuIpcOpenMemHandle") == 1
assert simulator.live()["ipc_open"] == 1
a[0] = 100
assert c.copy_to_host()[0] == 100
for h in (first, second, again):
    h.close()
del a, b, c
gc.collect()
# The close is queued; opening again meanwhile works with either behaviour
# of the driver (an error one gets the queue flushed and tries again).
d = first.open()
assert list(d.copy_to_host()) == [100] + list(range(1, 8))
# refcount: mapped again; error: refused, the queue flushed, mapped again.
assert calls("cuIpcOpenMemHandle") == %d
first.close()
del d
done()
""" % (2 if reopen == "refcount" else 3),
           env={"CUDAMEM_SIM_IPC_REOPEN":
                None if reopen == "refcount" else "error"})
    assert base.copy_to_host()[0] == 100


def test_open_ipc_array(run_py):
    base = cudamem.to_device(np.arange(20, dtype=np.int32))
    handle = Manager(cudamem.current_context()).get_ipc_handle(base.gpu_data)
    raw = tuple(handle.handle)  # numba's form: a sequence of 64 ints
    _child(run_py, raw, """
with cudamem.open_ipc_array(handle, (3, 2), np.int32, strides=(12, 4),
                            offset=8) as a:
    expected = np.arange(20, dtype=np.int32)[2:].reshape(6, 3)[:3, :2]
    np.testing.assert_array_equal(a.copy_to_host(), expected)
    a[2, 1] = -7
with cudamem.open_ipc_array(bytes(handle), 20, "i4") as a:
    assert a.copy_to_host()[2 * 3 + 2 + 1] == -7
try:
    with cudamem.open_ipc_array(handle, 21, np.int32):
        pass
except ValueError as exc:
    assert "outside" in str(exc), exc
else:
    raise SystemExit("an array past the allocation was opened")
del a
done()
""")
    assert base.copy_to_host()[2 * 3 + 2 + 1] == -7


def test_open_ipc_array_rejects_bad_handles():
    with pytest.raises(ValueError, match="64 bytes, not 3"):
        with cudamem.open_ipc_array(b"abc", 1, np.uint8):
            pass
    with pytest.raises(TypeError, match="not int"):
        with cudamem.open_ipc_array(64, 1, np.uint8):
            pass
    with pytest.raises(TypeError, match="sequence of ints"):
        with cudamem.open_ipc_array([1.5] * 64, 1, np.uint8):
            pass


class Manager(cudamem.GetIpcHandleMixin):
    """The smallest memory manager that uses the mixin."""

    def __init__(self, context):
        self.context = context


def test_get_ipc_handle_mixin(run_py):
    base = cudamem.to_device(np.arange(10, dtype=np.int32))
    view = base.gpu_data.view(8, 24)
    handle = Manager(cudamem.current_context()).get_ipc_handle(view)
    assert isinstance(handle, cudamem.IpcHandle)
    assert (handle.base, handle.size, handle.offset) == (view, 16, 8)
    assert handle.source_info == cudamem.get_current_device().uuid
    with pytest.raises(ValueError, match="original process"):
        handle.open(cudamem.current_context())
    _child(run_py, handle, """
ctx = cudamem.current_context()
mem = handle.open(ctx)
assert isinstance(mem, cudamem.MemoryPointer) and mem.size == 16
handle.close()
a = handle.open_array(ctx, 4, np.int32)
assert list(a.copy_to_host()) == [2, 3, 4, 5]
handle.close()
del a, mem
done()
""")


def test_ipc_handle_arguments():
    with pytest.raises(TypeError, match="size must be an int"):
        cudamem.IpcHandle(None, bytes(64), "8")
    with pytest.raises(ValueError, match="offset must not be negative"):
        cudamem.IpcHandle(None, bytes(64), 8, offset=-1)
    with pytest.raises(ValueError, match="needs a handle"):
        cudamem.IpcHandle(None, None, 8)
    with pytest.raises(ValueError, match="64 bytes, not 63"):
        cudamem.IpcHandle(None, bytes(63), 8)
    with pytest.raises(ValueError, match="not a device address"):
        _cudamem._ipc_get(0, 0)
    with pytest.raises(TypeError, match="MemoryPointer"):
        _cudamem._ipc_array(b"", 1, np.uint8)


def test_a_failed_size_lookup_leaves_nothing_mapped(run_py):
    array = cudamem.to_device(np.arange(4))
    _child(run_py, array.get_ipc_handle(), """
simulator.inject("cuMemGetAddressRange", "CUDA_ERROR_UNKNOWN")
try:
    handle.open()
except CudaAPIError as exc:
    assert exc.call == "cuMemGetAddressRange", exc
else:
    raise SystemExit("no error")
# Closed at once, not queued.
assert simulator.live()["ipc_open"] == 0
assert calls("cuIpcCloseMemHandle") == 1
with handle as a:
    assert list(a.copy_to_host()) == [0, 1, 2, 3]
del a
done()
""")


def test_stale_mapping_after_reset(run_py):
    array = cudamem.to_device(np.arange(4))
    _child(run_py, array.get_ipc_handle(), """
from cudamem.errors import CudaDriverError
a = handle.open()
handle.close()
cudamem.get_current_device().reset()  # unmaps it with the context
try:
    a.copy_to_host()
except CudaDriverError:
    pass
else:
    raise SystemExit("a stale mapping was used")
assert simulator.live()["ipc_open"] == 0
# A new open maps the handle again.
with handle as b:
    assert list(b.copy_to_host()) == [0, 1, 2, 3]
del a, b
done()
""")


# ---------------------------------------------------------------------------
# Two devices: the exporter and the opener are fresh processes with two
# simulated devices; the opener's current device is not the exporter's.

TWO_DEVICES = """
import pickle, subprocess, sys
import numpy as np
import cudamem
from cudamem import simulator
with cudamem.gpus[1]:
    array = cudamem.to_device(np.arange(8, dtype=np.int32))
child = subprocess.run([sys.executable, "-c", %r],
                       input=pickle.dumps(array.get_ipc_handle()),
                       capture_output=True)
sys.stderr.write(child.stderr.decode())
assert child.returncode == 0
print(child.stdout.decode().strip(), array.copy_to_host().tolist())
"""

OPENER = """
import gc, pickle, sys
import cudamem
from cudamem import simulator, _cudamem
handle = pickle.loads(sys.stdin.buffer.read())
with handle as a:
    assert a.gpu_data.context.device.id == 0
    assert list(a.copy_to_host()) == list(range(8))
    a[0] = -1
calls = simulator.stats()["calls"]
del a
gc.collect()
_cudamem._flush_pending()
live = simulator.live()
assert live["ipc_open"] == 0 and live["device_allocations"] == 0, live
print(calls["cuIpcOpenMemHandle"]["calls"], calls["cuMemAlloc"]["calls"])
"""


@pytest.mark.parametrize("peer", [True, False])
def test_two_devices(run_py, peer):
    env = {"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None,
           "CUDAMEM_SIM_NO_PEER": None if peer else "1"}
    proc = run_py(TWO_DEVICES % OPENER, env=env)
    assert proc.returncode == 0, proc.stderr
    opens, allocs, values = proc.stdout.split(" ", 2)
    assert opens == "1"
    if peer:
        # Mapped on device 0 with peer access: the child's write shows.
        assert allocs == "0"
        assert values.strip() == str([-1] + list(range(1, 8)))
    else:
        # Mapped on device 1, copied to a new allocation on device 0 (the
        # copy engine stages it through the host): not shared.
        assert allocs == "1"
        assert values.strip() == str(list(range(8)))


def test_mapping_dropped_under_queued_download(run_py):
    """The last reference to an opened mapping goes while a delayed stream
    still copies from it; the close waits for the copy."""
    array = cudamem.to_device(np.arange(1 << 16, dtype=np.float64))
    _child(run_py, array.get_ipc_handle(), """
from cudamem import simulator as sim
sim.set_hazards(True)
s = cudamem.stream()
out = cudamem.pinned_array(1 << 16)
with sim.delay(20000):
    a = handle.open()
    a.copy_to_host(out, stream=s)
    handle.close()
    del a
    cudamem.current_context().deallocations.clear()  # cuIpcCloseMemHandle
    s.synchronize()
assert (out == np.arange(1 << 16)).all()
assert sim.hazard_count() == 0, sim.last_hazard()
del out
done()
""")


def test_handle_bytes_read_as_cuda_bindings_reserved():
    # numba's tests serialize handle.reserved (cuda.bindings'
    # CUipcMemHandle) and compare it after pickling.
    d = cudamem.to_device(np.arange(16, dtype=np.int32))
    ipch = cudamem.current_context().get_ipc_handle(d.gpu_data)
    raw = ipch.handle.reserved
    assert type(raw) is bytes and len(raw) == 64 and raw == ipch.handle
    again = pickle.loads(pickle.dumps(ipch))
    assert again.base is None and again.size == ipch.size
    assert again.handle.reserved == raw
    rebuilt = cudamem.cudadrv.driver.IpcHandle(None, raw, ipch.size)
    assert rebuilt.handle == ipch.handle


def test_open_direct_maps_and_open_staged_copies(run_py):
    # numba's IpcHandle.open_direct / open_staged: the same bytes, a
    # mapping that sees the exporter's memory, a copy that does not.
    array = cudamem.to_device(np.arange(10, dtype=np.int32))
    ipch = cudamem.current_context().get_ipc_handle(array.gpu_data)
    _child(run_py, ipch, """
ctx = cudamem.current_context()
twin = pickle.loads(pickle.dumps(handle))
staged = handle.open_staged(ctx)
direct = twin.open_direct(ctx)
for mem in (staged, direct):
    got = np.zeros(10, np.int32)
    cudamem.cudadrv.driver.device_to_host(got, mem, 40)
    assert list(got) == list(range(10)), got
cudamem.cudadrv.driver.device_memset(staged, 0, 40)
cudamem.cudadrv.driver.device_memset(direct, 1, 4)
for h in (handle, twin):
    try:
        h.open_direct(ctx)
    except ValueError as exc:
        assert str(exc) == "IpcHandle is already opened", exc
    else:
        raise SystemExit("opened twice")
    h.close()
del staged, direct, mem
done()
""")
    expect = np.arange(10, dtype=np.int32)
    expect[0] = 0x01010101
    np.testing.assert_array_equal(array.copy_to_host(), expect)
