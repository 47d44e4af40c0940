"""Error paths test_error_paths.py's sweep cannot reach from the main
thread: driver calls failed on a thread with no current context (so that
each operation pushes and pops one, nested in its own work), and calls made
once per process (the device table, the cached pitch limit), failed in a
fresh process. The sweep's own checks apply: a CudaAPIError naming the
failed call, or none, and nothing leaked."""
import threading

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaOutOfMemoryError
from tests.faults.test_error_paths import _dev, _run, check_sweep, sweep_faults
from tests.helpers.run import ROOT

pytestmark = pytest.mark.simulator


def _on_new_thread(body, fault=None):
    """body() on a new thread, with fault (row, after) injected there (the
    simulator's faults are per thread); its CudaAPIError re-raised here.
    A failed push or pop leaves only that thread's context stack wrong."""
    from cudamem import simulator
    failed = []

    def target():
        if fault is not None:
            simulator.inject(fault[0], "CUDA_ERROR_UNKNOWN", after=fault[1])
        try:
            body()
        except CudaAPIError as exc:
            failed.append(exc)
        finally:
            simulator.clear_faults()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if failed:
        raise failed.pop()


def _guarded_operations():
    """Operations that push and pop the array's context around their work,
    then a select, a stream and a close of the thread's contexts."""
    a = cudamem.device_array((8, 64), np.float32)

    def body():
        a[:, :16].fill(3)
        a[::2, :16].copy_to_host()
        a[1:5, :16] = a[0, :16]
        cudamem.get_current_device()
        cudamem.select_device(0)
        cudamem.stream().synchronize()
        cudamem.close()

    return body


def _select_after_reset():
    """A select on a new thread, a reset, then the current device: the
    primary context is retained again inside the select and resolve."""
    def body():
        cudamem.select_device(0)
        _dev().reset()
        cudamem.get_current_device()
        _dev().reset()
        cudamem.select_device(0)
        cudamem.close()

    return body


def _freed_after_close():
    """Memory holding a retain of its context, made here, then freed on a
    new thread once close() released the context: the free pushes the
    context the memory was made in, then pops it."""
    held = [cudamem.mapped_array(4, wc=True), cudamem.managed_array(4)]
    cudamem.close()
    return held.clear


def _other_device_objects():
    """Objects of device 1 used on a thread where device 0 is current: each
    operation pushes device 1's context, nested in its own work."""
    cudamem.select_device(1)
    stream = cudamem.stream()
    start, end = cudamem.event(timing=True), cudamem.event(timing=True)
    start.record(stream)
    end.record(stream)
    end.synchronize()
    a = cudamem.device_array((8, 64), np.float32)
    cudamem.select_device(0)

    def body():
        cudamem.get_current_device()
        start.elapsed_time(end)
        start.record(stream)
        a[:, :16].fill(3)
        a[1:5, :16] = a[0, :16]
        stream.synchronize()
        repr(stream), repr(end)
        cudamem.close()

    return body


def _copies_across_devices():
    """Copies between device 0's and device 1's arrays on a thread where
    device 0 is current: peer copies entered under either context, or,
    where the devices cannot reach each other, staged through page-locked
    host memory that the host pool (limit 0) gives back after each."""
    from cudamem import _cudamem
    _cudamem._hostpool_set_limit(0)
    h = np.arange(96.0).reshape(8, 12)
    with cudamem.gpus[1]:
        far = cudamem.to_device(h)
    near = cudamem.device_array_like(h)
    stream = cudamem.stream()

    def body():
        cudamem.get_current_device()
        near.copy_to_device(far)
        far.copy_to_device(near, stream=stream)
        stream.synchronize()
        near[::2] = far[1::2]
        far[:, :6] = near[:, 6:]
        assert (far.copy_to_host() == np.hstack([h[:, 6:], h[:, 6:]])).all()

    return body


THREAD_SCENARIOS = {
    "guarded operations": _guarded_operations,
    "select after a reset": _select_after_reset,
    "freed after close": _freed_after_close,
    "other device's objects": _other_device_objects,
    "copies across devices": _copies_across_devices,
    "copies across devices through the host": _copies_across_devices,
}
# Scenarios run with two simulated devices, and their environment.
TWO = {"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None}
TWO_DEVICES = {
    "other device's objects": TWO,
    "copies across devices": TWO,
    "copies across devices through the host": {**TWO,
                                               "CUDAMEM_SIM_NO_PEER": "1"},
}
# The rows of a scenario's release whose failure keeps the memory until
# its context goes: the staging buffer's unregistration, in the context
# it pushes.
THREAD_RELEASES = {"copies across devices through the host": {
    "cuMemHostUnregister", "cuCtxPushCurrent"}}


def thread_sweep(sim, scenario):
    """test_error_paths.sweep for a body run on a new thread, with the
    fault injected there: the problems found."""
    make = THREAD_SCENARIOS[scenario]
    return sweep_faults(
        sim, lambda fault: _run(lambda: _on_new_thread(make(), fault), sim),
        THREAD_RELEASES.get(scenario, ()))


@pytest.mark.parametrize("scenario", sorted(THREAD_SCENARIOS))
def test_every_call_on_a_thread_can_fail(run_py, scenario):
    check_sweep(run_py, __name__, "thread_sweep", scenario,
                TWO_DEVICES.get(scenario))


# Calls made once per process, failed in a fresh one: the operation raises
# a CudaAPIError naming the call, the next try works, and nothing is left.
ONCE = """
import numpy as np
import cudamem
from cudamem import _cudamem, simulator
from cudamem.errors import CudaAPIError, CudaOutOfMemoryError
assert cudamem.is_available()
%s
simulator.inject(%r, "CUDA_ERROR_UNKNOWN")
try:
    op()
except CudaAPIError as exc:
    print(exc.call)
op()
cudamem.close()
print(all(v == 0 for v in simulator.live().values()))
"""

ONCE_OPS = {
    # The device table, built on first use.
    "device info": ("cuDeviceGetCount",
                    "op = lambda: _cudamem.device_info(0)"),
    "device list": ("cuDeviceGet", "op = cudamem.list_devices"),
    # The Device objects, made once with their names.
    "device names": ("cuDeviceGetName", "op = cudamem.list_devices"),
    "flush": ("cuDeviceGetCount", "op = _cudamem._flush_pending"),
    "close": ("cuDeviceGetCount", "op = cudamem.close"),
    # The device's release queues, made by the first release or deferral
    # (their limits from the device's memory).
    "deferred cleanup": ("cuDeviceTotalMem",
                         "ctx = cudamem.current_context()\n"
                         "def op():\n"
                         "    with ctx.defer_cleanup():\n"
                         "        pass"),
    # The pitch limit, read by the first strided copy or fill.
    "strided copy": ("cuDeviceGetAttribute",
                     "a = cudamem.device_array((8, 64))\n"
                     "op = lambda: a[::2, :16].copy_to_host()"),
    "strided fill": ("cuDeviceGetAttribute",
                     "a = cudamem.device_array((8, 64))\n"
                     "op = lambda: a[::2, :16].fill(2.5)"),
    # The pitch alignment, read by the first asynchronous device-to-device
    # 2-D copy (after a strided copy read the pitch limit).
    "rows on the device on a stream": (
        "cuDeviceGetAttribute",
        "a = cudamem.device_array((100, 10), np.int8)\n"
        "a[::2, :4].copy_to_host()\n"
        "b, s = cudamem.device_array(100, np.int8), cudamem.stream()\n"
        "def op():\n"
        "    b.copy_to_device(a[:, 3], stream=s)\n"
        "    s.synchronize()"),
}


@pytest.mark.parametrize("name", sorted(ONCE_OPS))
def test_first_call_failure(run_py, name):
    row, setup = ONCE_OPS[name]
    proc = run_py(ONCE % (setup, row))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [row, "True"]


def test_first_release_without_queues_warns_and_keeps(run_py):
    # The device's release queues are sized from its memory on the first
    # release. A release runs in a dealloc, which cannot raise: a failed
    # cuDeviceTotalMem there is a CudaWarning naming the call, and the
    # memory stays until its context goes, as any failed release's.
    proc = run_py("""
        import gc, warnings
        import cudamem
        from cudamem import _cudamem, simulator
        a = cudamem.device_array(4)
        simulator.inject("cuDeviceTotalMem", "CUDA_ERROR_UNKNOWN")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del a
            gc.collect()
        for w in caught:
            print(w.category.__name__, w.message)
        b = cudamem.device_array(8)
        del b
        _cudamem._flush_pending()
        print(simulator.live()["device_bytes"])
        cudamem.close()
        print(simulator.live()["device_bytes"])
        """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "CudaWarning cudamem could not free a resource: [999] Call to "
        "cuDeviceTotalMem results in CUDA_ERROR_UNKNOWN", "32", "0"]


@pytest.mark.parametrize("after", [0, 1])
def test_reset_with_a_deferred_managed_free_failing(run_py, after):
    # A reset releases cudamem's retain of the context (call 0), then gives
    # back the retain a deferred managed free holds (call 1): either
    # failure raises, naming the call, and a second reset frees the memory.
    # In a fresh process: a retain the driver failed to release stays.
    proc = run_py("""
        import cudamem
        from cudamem import simulator
        from cudamem.errors import CudaAPIError
        dev = cudamem.get_current_device()
        with cudamem.current_context().defer_cleanup():
            g = cudamem.managed_array(4)
            del g
            simulator.inject("cuDevicePrimaryCtxRelease",
                             "CUDA_ERROR_UNKNOWN", after=%d)
            try:
                dev.reset()
            except CudaAPIError as exc:
                print(exc.call)
        dev.reset()
        print(simulator.live()["managed_allocations"])
        """ % after)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["cuDevicePrimaryCtxRelease", "0"]


# Another library's objects cudamem meets first: device 1's primary
# context, retained and made current by that library, and an allocation
# and a stream in it. cudamem has retained only device 0's, so it asks the
# driver which device each belongs to and retains that device's primary
# context; each call of that failed in turn (after=k) in a fresh process
# gives a CudaAPIError naming it, the next try works, and nothing is left.
FOREIGN = """
import ctypes, sys
sys.path.insert(0, %(tests)r)
import numpy as np
import cudamem
from cudamem import simulator
from cudamem.errors import CudaAPIError
from tests.helpers.simref import SimDriver
drv = SimDriver(simulator.library_path())
cudamem.device_array(1)
ctx1 = drv.retain_primary(1)
drv.push(ctx1)
ptr = drv.mem_alloc(64)
handle = ctypes.c_void_p()
drv.call("cuStreamCreate", ctypes.byref(handle), 0)
drv.pop()
%(op)s
simulator.inject(%(row)r, "CUDA_ERROR_UNKNOWN", after=%(after)d)
try:
    op()
except CudaAPIError as exc:
    print(exc.call)
simulator.clear_faults()
op()
drv.push(ctx1)
drv.call("cuStreamDestroy_v2", handle)
drv.mem_free(ptr)
drv.pop()
cudamem.close()
drv.release_primary(1)
print(all(v == 0 for v in simulator.live().values()))
"""

FOREIGN_OPS = {
    # Its memory, imported: the record retains device 1's context.
    "CAI import": """
desc = dict(shape=(8,), typestr="<f8", data=(ptr, False), version=3)
def op():
    a = cudamem.from_cuda_array_interface(desc)
    assert a.gpu_data.context.device.id == 1
    del a
""",
    # Its stream, for a copy onto device 1: the stream's context names
    # the device, which must be the copy's.
    "DLPack import on its stream": """
class Foreign:
    def __cuda_stream__(self):
        return (0, handle.value)
def op():
    a = cudamem.from_dlpack(np.arange(4.0), device=1, stream=Foreign())
    assert a.gpu_data.context.device.id == 1
    assert (a.copy_to_host() == np.arange(4.0)).all()
""",
    # Its context, made current on this thread: numba's rule takes
    # another library's primary context as the current device's.
    "current context": """
def op():
    drv.set_current(ctx1)
    a = cudamem.device_array(4)
    assert a.gpu_data.context.device.id == 1
    del a
""",
}
FOREIGN_FAULTS = [
    ("CAI import", "cuDevicePrimaryCtxRetain", 0),
    ("DLPack import on its stream", "cuStreamGetCtx", 0),
    ("DLPack import on its stream", "cuCtxPushCurrent", 0),
    ("DLPack import on its stream", "cuCtxGetDevice", 0),
    ("DLPack import on its stream", "cuCtxPopCurrent", 0),
    ("DLPack import on its stream", "cuDevicePrimaryCtxRetain", 0),
    ("current context", "cuCtxGetDevice", 0),
    ("current context", "cuDevicePrimaryCtxRetain", 0),
]


@pytest.mark.parametrize("name, row, after", FOREIGN_FAULTS)
def test_another_librarys_objects(run_py, name, row, after):
    proc = run_py(FOREIGN % dict(
        tests=ROOT,
        op=FOREIGN_OPS[name], row=row, after=after), env=TWO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [row, "True"]


# Allocation failures the out-of-memory recovery handles: the report of
# free memory failing too, and the pool's retry after a trim.
def test_oom_report_survives_a_failed_meminfo(sim):
    cudamem.device_array(4)
    sim.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", count=2)
    sim.inject("cuMemGetInfo", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaOutOfMemoryError) as info:
        cudamem.device_array(4)
    assert info.value.call == "cuMemAlloc"
    assert "requested 32 bytes" in str(info.value)
    assert cudamem.device_array(4).size == 4


@pytest.mark.parametrize("code, count, kind", [
    ("CUDA_ERROR_UNKNOWN", 1, CudaAPIError),
    ("CUDA_ERROR_OUT_OF_MEMORY", 2, CudaOutOfMemoryError)])
def test_pool_allocation_failure(sim, code, count, kind):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager):
        mm = cudamem.current_context().memory_manager
        try:
            cudamem.device_array(4)
            sim.inject("cuMemAlloc", code, count=count)
            with pytest.raises(kind) as info:
                cudamem.device_array(1 << 24)
            assert type(info.value) is kind
            assert info.value.call == "cuMemAlloc"
            assert cudamem.device_array(1 << 24).size == 1 << 24
        finally:
            mm.trim()
