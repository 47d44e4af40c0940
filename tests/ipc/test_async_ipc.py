"""IPC of AsyncMemoryManager's arrays through the device's exportable pool
(AsyncMemoryManager.set_ipc, PoolIpcHandle): the CUDA driver's
cuMemPoolExportPointer / cuMemPoolImportPointer with the pool's POSIX file
descriptor, which travels to the other process through multiprocessing.

The references: NumPy for the bytes each side reads and writes; the
simulator's call counters for how a handle was opened (one pool import per
exporter and device, one mapping per allocation); its live counts for what
the importer leaves (nothing, once its arrays and handles are gone). The
importers are multiprocessing spawn children (a descriptor reaches only a
process that multiprocessing connects); the exporter is this process,
checked by the autouse leak fixture.
"""
import gc
import multiprocessing
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem, simulator
from cudamem.errors import CudaAPIError
from cudamem.ipc import PoolIpcHandle

pytestmark = pytest.mark.simulator

SPAWN = multiprocessing.get_context("spawn")


def _calls(entry):
    return simulator.stats()["calls"][entry]["calls"]


def _released():
    """What the importer left, after dropping its arrays and flushing."""
    gc.collect()
    _cudamem._flush_pending()
    return simulator.live()


def _in_child(target, *args):
    """Runs target(queue, *args) in a spawn child (args pickled by the
    start: handles' descriptors go as passed descriptors); its results."""
    queue = SPAWN.Queue()
    proc = SPAWN.Process(target=target, args=(queue,) + args)
    proc.start()
    try:
        got = queue.get(timeout=120)
    finally:
        proc.join(120)
    assert proc.exitcode == 0, got
    return got


# ---------------------------------------------------------------------------
# Children (module level: spawn imports this module to find them).

def _read_and_write(queue, handle):
    try:
        with handle as view:
            host = view.copy_to_host()
            view.copy_to_device(-host)
            del view
        queue.put((host, _released()))
    except BaseException as exc:
        queue.put(repr(exc))
        raise


def _open_twice(queue, first, second):
    try:
        a = first.open()
        b = second.open()
        counts = (_calls("cuMemPoolImportFromShareableHandle"),
                  _calls("cuMemPoolImportPointer"))
        same = (a.__cuda_array_interface__["data"][0]
                == b.__cuda_array_interface__["data"][0])
        hosts = (a.copy_to_host(), b.copy_to_host())
        del a
        first.close()
        # The mapping stays while the second array uses it.
        still = b.copy_to_host()
        del b
        second.close()
        queue.put((counts, same, hosts, still, _released()))
    except BaseException as exc:
        queue.put(repr(exc))
        raise


def _from_queue(queue, handles):
    try:
        handle = handles.get(timeout=120)
        with handle as view:
            host = view.copy_to_host()
            del view
        queue.put((host, _released()))
    except BaseException as exc:
        queue.put(repr(exc))
        raise


def _import_faults(queue, handle, row):
    # Each error of `row` raised as the driver's, leaving nothing open;
    # then the open works (the pool cache has nothing stale).
    try:
        got = []
        for code in ("CUDA_ERROR_UNKNOWN", "CUDA_ERROR_OUT_OF_MEMORY"):
            simulator.inject(row, code)
            try:
                handle.open()
            except CudaAPIError as exc:
                got.append((type(exc).__name__, exc.name, exc.call))
            handle.close()
            gc.collect()
        array = handle.open()
        data = array.copy_to_host()
        del array
        handle.close()
        queue.put((got, data, _released()))
    except BaseException as exc:
        queue.put(repr(exc))
        raise


# ---------------------------------------------------------------------------


@pytest.fixture
def manager():
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
        m.set_ipc(True)
        yield m
        m.set_limit(None)
        # Nothing the test made stays reserved in either pool.
        m.trim()
        m.set_ipc(False)
        m.trim()


def _live_in(released):
    return {k: v for k, v in released.items() if k != "contexts" and v}


def test_exporter_writes_and_importer_writes_back(manager):
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    dev = cudamem.to_device(host)
    handle = dev[1:3, ::2].get_ipc_handle()
    assert isinstance(handle._ipc_handle, PoolIpcHandle)
    seen, left = _in_child(_read_and_write, handle)
    np.testing.assert_array_equal(seen, host[1:3, ::2])
    assert _live_in(left) == {}
    expect = host.copy()
    expect[1:3, ::2] *= -1
    np.testing.assert_array_equal(dev.copy_to_host(), expect)


def test_allocations_come_from_the_exportable_pool(manager, sim):
    sim.reset()
    arr = cudamem.device_array(1000, np.uint8)
    assert _calls("cuMemAllocFromPoolAsync") == 1
    assert _calls("cuMemAllocAsync") == 0
    # stats() reads the pool in use, not the device's current one.
    assert manager.stats()["used_bytes"] >= 1000
    assert _calls("cuDeviceGetMemPool") == 0
    del arr
    manager.trim()
    assert manager.stats()["reserved_bytes"] == 0


def test_pool_keeps_the_release_threshold(sim):
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
        m.set_release_threshold(1 << 20)
        try:
            m.set_ipc(True)
            # Copied when the pool is made: once for the process, so set
            # it on the pool in use as well (an earlier test made it).
            m.set_release_threshold(1 << 20)
            assert m.stats()["release_threshold"] == 1 << 20
            m.set_ipc(False)
            assert m.stats()["release_threshold"] == 1 << 20
        finally:
            m.set_release_threshold(0)
            m.set_ipc(True)
            m.set_release_threshold(0)
            m.set_ipc(False)


def test_set_ipc_copies_the_threshold_in_a_fresh_process(run_py):
    proc = run_py("""
        import cudamem
        with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
            m.set_release_threshold(12345)
            m.set_ipc(True)
            print(m.stats()["release_threshold"])
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["12345"]


def test_open_twice_shares_one_mapping(manager):
    host = np.arange(16, dtype=np.int64)
    dev = cudamem.to_device(host)
    first, second = dev.get_ipc_handle(), dev[4:].get_ipc_handle()
    counts, same, hosts, still, left = _in_child(_open_twice, first, second)
    assert counts == (1, 1)
    assert not same  # second starts 4 elements in
    np.testing.assert_array_equal(hosts[0], host)
    np.testing.assert_array_equal(hosts[1], host[4:])
    np.testing.assert_array_equal(still, host[4:])
    assert _live_in(left) == {}


def test_handle_travels_through_a_queue(manager):
    host = np.linspace(0, 1, 7)
    dev = cudamem.to_device(host)
    handles = SPAWN.Queue()
    queue = SPAWN.Queue()
    proc = SPAWN.Process(target=_from_queue, args=(queue, handles))
    proc.start()
    try:
        # Pickled by the queue's feeder: the descriptor goes through
        # multiprocessing's resource sharer.
        handles.put(dev.get_ipc_handle())
        seen, left = queue.get(timeout=120)
    finally:
        proc.join(120)
    assert proc.exitcode == 0
    np.testing.assert_array_equal(seen, host)
    assert _live_in(left) == {}


def test_handle_pickles_its_layout(manager):
    dev = cudamem.device_array((3, 5), np.int16)
    handle = dev[:, 1:4].get_ipc_handle()
    ipc = handle._ipc_handle
    # Bytes 2 (row 0, column 1) to 28 (past row 2, column 3).
    assert (ipc.size, ipc.offset) == (26, 2)
    got = pickle.loads(pickle.dumps(handle))
    assert got._array_desc == handle._array_desc
    assert (bytes(got._ipc_handle.handle), got._ipc_handle.size,
            got._ipc_handle.offset, got._ipc_handle.source_info) == (
        bytes(ipc.handle), ipc.size, ipc.offset, ipc.source_info)
    # The exporter cannot open its own handle, pickled or not.
    for h in (handle, got):
        with pytest.raises(ValueError, match="original process"):
            h.open()


def test_handle_keeps_the_exporting_array_alive(manager):
    host = np.arange(5, dtype=np.int32)
    dev = cudamem.to_device(host)
    handle = dev.get_ipc_handle()
    mem = dev.gpu_data
    assert handle._ipc_handle.base is mem
    del dev, mem
    gc.collect()
    seen, left = _in_child(_read_and_write, handle)
    np.testing.assert_array_equal(seen, host)


def test_array_from_before_set_ipc_says_why(sim):
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
        before = cudamem.device_array(4)
        m.set_ipc(True)
        after = cudamem.device_array(4)
        why = r"default memory pool.*set_ipc\(True\)"
        with pytest.raises(NotImplementedError, match=why):
            before.get_ipc_handle()
        with pytest.raises(NotImplementedError, match=why):
            m.get_ipc_handle(before.gpu_data)
        assert isinstance(m.get_ipc_handle(after.gpu_data), PoolIpcHandle)
        # set_ipc(False): back to the default pool; arrays keep theirs.
        m.set_ipc(False)
        again = cudamem.device_array(4)
        with pytest.raises(NotImplementedError):
            again.get_ipc_handle()
        assert after.get_ipc_handle() is not None
        del before, after, again
        m.trim()
        m.set_ipc(True)
        m.trim()


class _NoTruth:
    def __bool__(self):
        raise RuntimeError("no truth value")


def test_set_ipc_takes_a_truth_value(manager):
    with pytest.raises(RuntimeError, match="no truth value"):
        manager.set_ipc(_NoTruth())
    # Still on the exportable pool.
    assert isinstance(
        manager.get_ipc_handle(cudamem.device_array(4).gpu_data),
        PoolIpcHandle)


def test_a_new_manager_starts_on_the_default_pool(sim):
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
        m.set_ipc(True)
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager):
        with pytest.raises(NotImplementedError):
            cudamem.device_array(4).get_ipc_handle()


def test_zero_size_memory_shares_nothing(manager):
    arr = cudamem.device_array(0)
    handle = manager.get_ipc_handle(arr.gpu_data)
    assert handle.handle is None and handle.size == 0


def test_get_ipc_handle_rejects_other_memory(manager):
    with pytest.raises(TypeError, match="AsyncMemoryManager"):
        _cudamem._ipc_pool_handle(object())


def test_open_pool_rejects_bad_arguments():
    dev = cudamem.get_current_device()
    with pytest.raises(ValueError, match="pool must be"):
        _cudamem._ipc_open_pool(0, bytes(64), dev)
    with pytest.raises(ValueError, match="64 bytes"):
        _cudamem._ipc_open_pool(1, b"x", dev)
    with pytest.raises(TypeError):
        _cudamem._ipc_import_pool("fd", dev)


def test_set_ipc_refused_without_posix_descriptors(run_py):
    # CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES (119) is 0.
    proc = run_py("""
        import cudamem
        from cudamem import simulator
        from cudamem.errors import CudaSupportError
        with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
            try:
                m.set_ipc(True)
            except CudaSupportError as exc:
                print(exc)
            arr = cudamem.device_array(4)
            assert simulator.stats()["calls"]["cuMemPoolCreate"]["calls"] == 0
            try:
                arr.get_ipc_handle()
            except NotImplementedError:
                print("default pool")
    """, env={"CUDAMEM_SIM_ATTRS": "119=0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "device 0's memory pools cannot be shared with other processes: "
        "CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES is 0, without "
        "POSIX file descriptors",
        "default pool"]


# ---------------------------------------------------------------------------
# Fault injection of the rows IPC through the pool adds.

# Made once per process: reached in a fresh one.
FRESH = """
import cudamem
from cudamem import simulator
from cudamem.errors import CudaAPIError
with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
    for code in ("CUDA_ERROR_UNKNOWN", "CUDA_ERROR_OUT_OF_MEMORY"):
        simulator.inject(%r, code)
        try:
            m.set_ipc(True)
        except CudaAPIError as exc:
            print(type(exc).__name__, exc.name, exc.call)
        arr = cudamem.device_array(4)
        try:
            arr.get_ipc_handle()
        except NotImplementedError:
            print("default pool")
        del arr
    m.set_ipc(True)
    arr = cudamem.device_array(4)
    arr.get_ipc_handle()
    print(simulator.stats()["calls"]["cuMemPoolCreate"]["calls"])
    del arr
    m.trim()
    m.set_ipc(False)
    m.trim()
print(simulator.live()["device_allocations"])
"""


@pytest.mark.parametrize("row", ["cuMemPoolCreate", "cuDeviceGetMemPool",
                                 "cuMemPoolGetAttribute",
                                 "cuMemPoolSetAttribute",
                                 "cuMemPoolExportToShareableHandle"])
def test_pool_made_once_after_failures(run_py, row):
    proc = run_py(FRESH % row)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "CudaAPIError CUDA_ERROR_UNKNOWN %s" % row, "default pool",
        "CudaOutOfMemoryError CUDA_ERROR_OUT_OF_MEMORY %s" % row,
        "default pool",
        # Tried until made, then kept whatever failed after it.
        "3" if row == "cuMemPoolCreate" else "1",
        "0"]


@pytest.mark.parametrize("row", ["cuMemPoolImportFromShareableHandle",
                                 "cuMemPoolImportPointer",
                                 # The mapping's size, then its free.
                                 "cuMemGetAddressRange",
                                 # Entering the context to import.
                                 "cuCtxGetCurrent"])
def test_import_row_failures(manager, row):
    host = np.arange(6, dtype=np.uint16)
    dev = cudamem.to_device(host)
    got, data, left = _in_child(_import_faults, dev.get_ipc_handle(), row)
    assert got == [("CudaAPIError", "CUDA_ERROR_UNKNOWN", row),
                   ("CudaOutOfMemoryError", "CUDA_ERROR_OUT_OF_MEMORY", row)]
    np.testing.assert_array_equal(data, host)
    assert _live_in(left) == {}


def test_export_row_failure_leaves_the_array(manager, sim):
    dev = cudamem.to_device(np.arange(3))
    # Matched by message: a kept ExceptionInfo would hold this frame, and
    # `dev` with it, past the manager's trim.
    for row in ("cuMemPoolExportPointer", "cuCtxSynchronize",
                "cuCtxGetCurrent"):
        sim.inject(row, "CUDA_ERROR_UNKNOWN")
        with pytest.raises(CudaAPIError,
                           match=r"^\[999\] Call to %s results" % row):
            dev.get_ipc_handle()
    assert dev.get_ipc_handle() is not None
    np.testing.assert_array_equal(dev.copy_to_host(), np.arange(3))


@pytest.mark.parametrize("row", ["cuDeviceGetAttribute", "cuCtxGetCurrent"])
def test_set_ipc_refused_by_a_failed_call(sim, row):
    # The support check, then entering the context.
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as m:
        sim.inject(row, "CUDA_ERROR_UNKNOWN")
        with pytest.raises(CudaAPIError) as info:
            m.set_ipc(True)
        assert info.value.call == row
        with pytest.raises(NotImplementedError):
            cudamem.device_array(4).get_ipc_handle()



# Two devices: each has its own exportable pool (and descriptor); one
# process start carries handles of both to a child, which opens them on
# device 0 (peer access maps device 1's there).
TWO_DEVICES = """
import multiprocessing as mp
import numpy as np
import cudamem
from cudamem import simulator

def child(queue, handles):
    seen = []
    for handle in handles:
        with handle as view:
            seen.append(view.copy_to_host().tolist())
            del view
    calls = simulator.stats()["calls"]
    queue.put((seen, calls["cuMemPoolImportFromShareableHandle"]["calls"]))

if __name__ == "__main__":
    arrays, handles = [], []
    for device in (0, 1):
        cudamem.select_device(device)
        cudamem.set_memory_manager(cudamem.AsyncMemoryManager)
        cudamem.current_context().memory_manager.set_ipc(True)
        arrays.append(cudamem.to_device(np.arange(4) + 10 * device))
        handles += [arrays[-1].get_ipc_handle(),
                    arrays[-1][1:].get_ipc_handle()]
    cudamem.select_device(0)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue, handles))
    proc.start()
    print(queue.get(timeout=120))
    proc.join()
    print(proc.exitcode)
"""


def test_pools_of_two_devices(tmp_path):
    script = tmp_path / "two.py"
    script.write_text(TWO_DEVICES)
    env = dict(os.environ, CUDAMEM_SIM_DEVICES="2")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(cudamem.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, str(script)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    host = [np.arange(4), np.arange(4) + 10]
    expect = [host[0].tolist(), host[0][1:].tolist(),
              host[1].tolist(), host[1][1:].tolist()]
    # Each device's pool imported once.
    assert proc.stdout.splitlines() == [str((expect, 2)), "0"]
