"""Fault injection generated from the driver table: every row, through a
public call that reaches it, gives the right exception and leaks nothing
(the autouse leak check). A row added to core/driver.h without an entry in
REACH fails test_every_row_has_a_reach."""
import pickle

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem, driver
from cudamem.errors import CudaAPIError, CudaOutOfMemoryError, CudaStickyError

pytestmark = pytest.mark.simulator

LOAD = "load"  # called while loading: observed in a fresh process
TWO = "two devices"  # needs a second device: observed in a fresh process
IPC = "another process"  # opens a handle this process exported
# The exportable pool (made once per process) and its imports (in a
# multiprocessing child): tests/ipc/test_async_ipc.py injects them.
POOL_IPC = "tests/ipc/test_async_ipc.py"
# synchronize()'s idle probe: a failure is absorbed (the hand-off's
# cuCtxSynchronize runs and reports), checked by
# test_a_failed_probe_falls_back below.
PROBE = "absorbed by synchronize()"


def _dev():
    return cudamem.list_devices()[0]


def _fresh_primary():
    """Retains device 0's primary context anew."""
    _dev().reset()
    _dev().get_primary_context()


def _retained_reset():
    _dev().get_primary_context()
    _dev().reset()


def _push_pop():
    ctx = cudamem.current_context()
    ctx.push()
    ctx.pop()


def _select_twice():
    cudamem.select_device(0)
    cudamem.select_device(0)


def _stream_destroy():
    """A stream dropped, then its queue flushed: cuStreamDestroy."""
    stream = cudamem.stream()
    del stream
    try:
        cudamem.current_context().deallocations.clear()
    except CudaAPIError:
        # A failed destroy is dropped from the queue (it cannot be retried
        # safely) and the stream lives on in its context: destroy it with
        # the context, as a reset does, so that nothing leaks.
        _dev().reset()
        raise


class _ForeignStream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _foreign_stream_device():
    """A foreign stream's device: cuStreamGetCtx."""
    stream = cudamem.stream()  # alive while its handle is parsed
    _cudamem._parse_stream(_ForeignStream(int(stream)))
    del stream


def _event_destroy():
    """An event dropped, then its queue flushed: cuEventDestroy."""
    event = cudamem.event()
    del event
    try:
        cudamem.current_context().deallocations.clear()
    except CudaAPIError:
        _dev().reset()  # as for _stream_destroy
        raise


def _recorded_event():
    event = cudamem.event()
    event.record()
    return event


def _elapsed():
    start, end = _recorded_event(), _recorded_event()
    end.synchronize()
    return start.elapsed_time(end)


def _mem_free():
    """An array dropped, then the memory queue flushed: cuMemFree."""
    cudamem.device_array(4)
    try:
        cudamem.current_context().memory_manager.deallocations.clear()
    except CudaAPIError:
        _dev().reset()  # as for _stream_destroy
        raise


def _async(action):
    """`action(manager)` with the stream-ordered manager on."""
    def run():
        with cudamem.using_memory_manager(
                cudamem.AsyncMemoryManager) as manager:
            action(manager)
    return run


def _async_ipc(action):
    """`action(manager)` with the stream-ordered manager on its exportable
    pool."""
    def run(manager):
        manager.set_ipc(True)
        action(manager)
    return _async(run)


def _async_free(manager):
    """An array of the driver's pool freed at once: cuMemFreeAsync."""
    array = cudamem.device_array(4)
    try:
        array.gpu_data.free()
    except CudaAPIError:
        # The memory stays allocated: it goes with the context.
        _dev().reset()
        raise


def _pinned_block():
    """An array page-locked for a block: cuMemHostRegister, then
    cuMemHostUnregister."""
    try:
        with cudamem.pinned(np.zeros(4)):
            pass
    except CudaAPIError as exc:
        if exc.call == "cuMemHostUnregister":
            # The registry forgot the pages; the driver keeps them
            # page-locked until their context goes: reset it.
            _dev().reset()
        raise


def _wc_free():
    """Write-combined memory dropped, then the memory queue flushed:
    cuMemFreeHost."""
    cudamem.mapped_array(4, wc=True)
    try:
        cudamem.current_context().memory_manager.deallocations.clear()
    except CudaAPIError:
        _dev().reset()  # as for _stream_destroy
        raise


def _to_host(stream=None):
    ary = cudamem.to_device(np.arange(4))
    ary.copy_to_host(stream=stream if stream is not None else 0)
    if stream is not None:
        stream.synchronize()


def _device_to_device(stream=None):
    src = cudamem.to_device(np.arange(4))
    dst = cudamem.device_array(4, src.dtype)
    dst.copy_to_device(src, stream=stream if stream is not None else 0)
    if stream is not None:
        stream.synchronize()


def _strided_to_host(shape, key, stream=None):
    """copy_to_host of a view the copy engine moves with one cuMemcpy2D
    ((8, 64)[::2, :16]) or cuMemcpy3D ((8, 8, 64)[:, :4, :16])."""
    view = cudamem.device_array(shape, np.float32)[key]
    view.copy_to_host(stream=stream if stream is not None else 0)
    if stream is not None:
        stream.synchronize()


def _strided_on_device(stream=None):
    """A device-to-device copy of column 3 of an int8 (100, 10) array:
    rows at pitches 10 and 1, which cudamem gives cuMemcpy2DUnaligned when
    synchronous and one slice of cuMemcpy3DAsync on a stream."""
    src = cudamem.device_array((100, 10), np.int8)
    dst = cudamem.device_array(100, np.int8)
    dst.copy_to_device(src[:, 3], stream=stream if stream is not None else 0)
    if stream is not None:
        stream.synchronize()


def _fill(dtype, value, strided, stream=None):
    """A fill the engine makes one memset of: D8/D16/D32 by the pattern's
    unit, D2D for the rows of a strided view."""
    ary = cudamem.device_array((8, 64), dtype)
    if strided:
        ary = ary[:, :16]
    ary.fill(value, stream=stream if stream is not None else 0)
    if stream is not None:
        stream.synchronize()


_2D = ((8, 64), (slice(None, None, 2), slice(None, 16)))
_3D = ((8, 8, 64), (slice(None), slice(None, 4), slice(None, 16)))
_UNITS = {"D8": (np.uint8, 3), "D16": (np.int16, 0x0102),
          "D32": (np.int32, 7)}


# Row name -> the public call that reaches it.
REACH = {
    "cuInit": LOAD,
    "cuDriverGetVersion": LOAD,
    "cuDeviceGetCount": driver.devices,
    "cuDeviceGet": lambda: _cudamem.device_info(0),
    "cuDeviceGetName": lambda: _cudamem.device_info(0),
    "cuDeviceGetAttribute": lambda: _cudamem.device_attribute(0, 16),
    "cuDeviceTotalMem": lambda: _cudamem.device_info(0),
    "cuDeviceGetUuid": lambda: _cudamem.device_info(0),
    "cuDeviceGetPCIBusId": lambda: _cudamem.device_info(0),
    "cuDevicePrimaryCtxRetain": _fresh_primary,
    "cuDevicePrimaryCtxRelease": _retained_reset,
    "cuDevicePrimaryCtxReset": lambda: _dev().reset(),
    "cuCtxGetCurrent": cudamem.get_current_device,
    "cuCtxSetCurrent": _select_twice,
    "cuCtxPushCurrent": _push_pop,
    "cuCtxPopCurrent": _push_pop,
    "cuCtxGetDevice": lambda: cudamem.gpus.current,
    # cudamem.synchronize() calls it on a worker thread, where a fault
    # injected on this one does not reach (tests/faults/test_sticky.py
    # checks that the worker's verdict is raised): reset() calls it here.
    "cuCtxSynchronize": lambda: cudamem.current_context().reset(),
    "cuCtxRecordEvent": PROBE,
    "cuMemGetInfo": lambda: cudamem.current_context().get_memory_info(),
    "cuDeviceCanAccessPeer": lambda: cudamem.can_access_peer(0, 0),
    "cuCtxEnablePeerAccess": TWO,
    "cuMemcpyPeer": TWO,
    "cuMemcpyPeerAsync": TWO,
    "cuProfilerStart": cudamem.profile_start,
    "cuProfilerStop": cudamem.profile_stop,
    "cuStreamCreate": cudamem.stream,
    "cuStreamCreateWithPriority": lambda: cudamem.stream(priority=0),
    "cuStreamDestroy": _stream_destroy,
    "cuStreamSynchronize": lambda: cudamem.default_stream().synchronize(),
    "cuStreamQuery": lambda: cudamem.default_stream().query(),
    "cuStreamGetCtx": _foreign_stream_device,
    "cuMemAlloc": lambda: cudamem.device_array(4),
    "cuMemFree": _mem_free,
    "cuPointerGetAttributes": lambda: cudamem.from_cuda_array_interface(
        (a := cudamem.device_array(4)).__cuda_array_interface__, owner=a),
    "cuMemcpyHtoD": lambda: cudamem.to_device(np.arange(4)),
    "cuMemcpyDtoH": _to_host,
    "cuMemcpyDtoD": _device_to_device,
    "cuMemcpyHtoDAsync":
        lambda: cudamem.to_device(np.arange(4), stream=cudamem.stream()),
    "cuMemcpyDtoHAsync": lambda: _to_host(cudamem.stream()),
    "cuMemcpyDtoDAsync": lambda: _device_to_device(cudamem.stream()),
    "cuMemcpy2D": lambda: _strided_to_host(*_2D),
    "cuMemcpy2DUnaligned": _strided_on_device,
    "cuMemcpy2DAsync": lambda: _strided_to_host(*_2D, cudamem.stream()),
    "cuMemcpy3D": lambda: _strided_to_host(*_3D),
    "cuMemcpy3DAsync": lambda: _strided_to_host(*_3D, cudamem.stream()),
    **{"cuMemset%s%s" % (two, unit):
       (lambda u=unit, t=two: _fill(*_UNITS[u], strided=bool(t)))
       for unit in _UNITS for two in ("", "D2")},
    **{"cuMemset%s%sAsync" % (two, unit):
       (lambda u=unit, t=two: _fill(*_UNITS[u], strided=bool(t),
                                    stream=cudamem.stream()))
       for unit in _UNITS for two in ("", "D2")},
    "cuCtxGetStreamPriorityRange": cudamem.Stream.priority_range,
    "cuEventCreate": cudamem.event,
    "cuEventDestroy": _event_destroy,
    "cuEventRecord": _recorded_event,
    # A wait polls cuEventQuery, then ends with cuEventSynchronize.
    "cuEventSynchronize": lambda: _recorded_event().synchronize(),
    "cuEventQuery": lambda: cudamem.event().query(),
    "cuEventElapsedTime": _elapsed,
    "cuStreamWaitEvent": lambda: cudamem.stream().wait_event(
        _recorded_event()),
    "cuStreamAddCallback": lambda: cudamem.default_stream().add_callback(
        lambda stream, status, arg: None),
    "cuMemAllocManaged": lambda: cudamem.managed_array(4),
    "cuMemPrefetchAsync": lambda: cudamem.managed_array(4).prefetch(),
    "cuMemAdvise": lambda: cudamem.managed_array(4).advise("read_mostly"),
    "cuMemHostRegister": _pinned_block,
    "cuMemHostUnregister": _pinned_block,
    "cuMemHostGetDevicePointer": lambda: cudamem.mapped_array(4),
    "cuMemHostAlloc": lambda: cudamem.mapped_array(4, wc=True),
    "cuMemFreeHost": _wc_free,
    "cuMemGetAddressRange": lambda: cudamem.device_array(4).get_ipc_handle(),
    "cuMemAllocAsync": _async(lambda m: cudamem.device_array(4)),
    "cuMemFreeAsync": _async(_async_free),
    "cuDeviceGetMemPool": _async(lambda m: m.stats()),
    "cuMemPoolGetAttribute": _async(lambda m: m.stats()),
    "cuMemPoolSetAttribute": _async(lambda m: m.set_release_threshold(0)),
    "cuMemPoolTrimTo": _async(lambda m: m.trim()),
    "cuIpcGetMemHandle": lambda: cudamem.device_array(4).get_ipc_handle(),
    "cuMemAllocFromPoolAsync": _async_ipc(lambda m: cudamem.device_array(4)),
    "cuMemPoolExportPointer": _async_ipc(
        lambda m: cudamem.device_array(4).get_ipc_handle()),
    "cuMemPoolCreate": POOL_IPC,
    "cuMemPoolExportToShareableHandle": POOL_IPC,
    "cuMemPoolImportFromShareableHandle": POOL_IPC,
    "cuMemPoolImportPointer": POOL_IPC,
    "cuIpcOpenMemHandle": IPC,
    "cuIpcCloseMemHandle": IPC,
}

ROWS = [row[0] for row in driver.table()]


def test_every_row_has_a_reach():
    assert sorted(ROWS) == sorted(REACH)


def test_rows_are_resolved():
    cudamem.is_available()
    for name, version, required, _, present in driver.table():
        assert version >= 2000
        if required:
            assert present, name


IN_PROCESS = [name for name in ROWS
              if REACH.get(name) not in (LOAD, TWO, IPC, POOL_IPC, PROBE)]
AT_LOAD = [name for name in ROWS if REACH.get(name) is LOAD]
IN_TWO = [name for name in ROWS if REACH.get(name) is TWO]
IN_IPC = [name for name in ROWS if REACH.get(name) is IPC]

# Rows reached only with two devices, in a fresh process with two
# simulated devices: the public call for each.
# An array made on device 1, then copied to device 0 (the current one).
_FAR = ("(cudamem.select_device(1), "
        "far := cudamem.to_device(__import__('numpy').arange(4)), "
        "cudamem.select_device(0))[1]")
TWO_DEVICE_REACH = {
    "cuCtxEnablePeerAccess":
        "cudamem.list_devices()[0].get_primary_context()"
        ".enable_peer_access(1)",
    "cuMemcpyPeer": "cudamem.to_device(%s)" % _FAR,
    "cuMemcpyPeerAsync":
        "cudamem.to_device(%s, stream=cudamem.stream())" % _FAR,
}


@pytest.mark.parametrize("row", IN_PROCESS)
def test_row_failure_raises_api_error(sim, row):
    assert cudamem.is_available()
    sim.inject(row, "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        REACH[row]()
    exc = info.value
    assert type(exc) is CudaAPIError
    assert (exc.code, exc.name, exc.call) == (999, "CUDA_ERROR_UNKNOWN", row)
    assert str(exc) == "[999] Call to %s results in CUDA_ERROR_UNKNOWN" % row
    REACH[row]()  # the fault was used up: the next call works


def _calls(sim, *rows):
    calls = sim.stats()["calls"]
    return [calls[row]["calls"] for row in rows]


# The probe's calls: its event is made on the first synchronize() of a
# context, so a reset comes before the cuEventCreate case.
@pytest.mark.parametrize("row", ["cuCtxRecordEvent", "cuEventQuery",
                                 "cuEventCreate"])
@pytest.mark.parametrize("code", ["CUDA_ERROR_UNKNOWN",
                                  "CUDA_ERROR_OUT_OF_MEMORY"])
def test_a_failed_probe_falls_back(sim, row, code):
    # An idle context answers the probe: no cuCtxSynchronize. When a
    # probe call fails, synchronize() hands the cuCtxSynchronize off as
    # on a busy context, and succeeds; the next one probes again.
    cudamem.synchronize()
    if row == "cuEventCreate":
        _dev().reset()
    rows = ("cuCtxSynchronize", "cuCtxRecordEvent", row)
    before = _calls(sim, *rows)
    sim.inject(row, code)
    cudamem.synchronize()
    failed = _calls(sim, *rows)
    cudamem.synchronize()
    again = _calls(sim, *rows)
    assert failed[0] - before[0] == 1 and failed[2] - before[2] == 1
    assert again[0] == failed[0] and again[1] == failed[1] + 1


def test_a_failed_release_in_the_probe_falls_back(sim):
    # After a stream-ordered free the probe of an idle context ends with
    # cuCtxSynchronize (where the pool gives the memory back). When that
    # fails, synchronize() hands a cuCtxSynchronize off as on a busy
    # context, which releases it; the next synchronize() releases again
    # (the probe cannot know the hand-off did), the one after does not.
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager) as mgr:
        mgr.set_release_threshold(0)
        stream = cudamem.stream(non_blocking=True)
        arr = cudamem.device_array(1 << 20, np.uint8, stream=stream)
        del arr
        stream.query()
        before = _calls(sim, "cuCtxSynchronize")[0]
        sim.inject("cuCtxSynchronize", "CUDA_ERROR_UNKNOWN")
        cudamem.synchronize()
        assert _calls(sim, "cuCtxSynchronize")[0] == before + 2
        assert mgr.stats()["reserved_bytes"] == 0
        cudamem.synchronize()
        cudamem.synchronize()
        assert _calls(sim, "cuCtxSynchronize")[0] == before + 3


def test_a_sticky_error_in_the_probe_is_raised_by_the_synchronize(sim):
    # The probe does not report what it sees: the cuCtxSynchronize after it
    # does, as before the probe existed.
    cudamem.synchronize()
    sim.inject("cuCtxRecordEvent", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(CudaStickyError) as info:
        cudamem.synchronize()
    assert info.value.call == "cuCtxSynchronize"
    assert cudamem.context_is_poisoned()
    sim.reset()
    cudamem.get_current_device().reset()
    cudamem.synchronize()


def test_a_failed_enter_while_making_the_probe_event_is_raised(sim):
    # cudamem.testing.quiesce() makes the probe's event for a context that
    # has none yet (after a reset): entering it asks the driver for the
    # current context, and that call's failure is raised, naming it, with
    # nothing made; the next try makes the event.
    _dev().reset()
    cudamem.current_context()
    before = sim.live()
    sim.inject("cuCtxGetCurrent", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        _cudamem._sync_probe_ready()
    assert info.value.call == "cuCtxGetCurrent"
    assert info.value.name == "CUDA_ERROR_UNKNOWN"
    assert sim.live() == before
    _cudamem._sync_probe_ready()
    assert sim.live()["events"] == before["events"] + 1


# Rows whose out-of-memory cudamem recovers from with one more try
# (tests/memmgr/test_oom.py): both tries must fail for the error to show.
OOM_RETRIED = {"cuMemAlloc", "cuMemAllocManaged", "cuMemHostAlloc",
               "cuMemHostGetDevicePointer", "cuMemAllocAsync",
               "cuMemAllocFromPoolAsync"}


@pytest.mark.parametrize("row", IN_PROCESS)
def test_row_failure_kinds(sim, row):
    assert cudamem.is_available()
    sim.inject(row, "CUDA_ERROR_OUT_OF_MEMORY",
               count=2 if row in OOM_RETRIED else 1)
    with pytest.raises(CudaOutOfMemoryError):
        REACH[row]()
    sim.inject(row, "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(CudaStickyError) as info:
        REACH[row]()
    assert info.value.call == row
    # The sticky error poisoned the device until the process ends: a reset
    # keeps it. The simulator's reset models a new process, after which a
    # device reset gives later tests a working context: check that it works.
    with pytest.raises(CudaStickyError) as info:
        cudamem.get_current_device().reset()
    assert info.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert cudamem.context_is_poisoned()
    sim.reset()
    cudamem.get_current_device().reset()
    REACH[row]()
    assert cudamem.current_context().get_memory_info().total > 0


# After each error of the loops below a reset gives a working context,
# except after a sticky error, which the driver keeps until the process
# ends: the simulator's reset models the new process.
RECOVER = """
def recover(code, cls):
    if cls is CudaStickyError:
        try:
            cudamem.get_current_device().reset()
        except CudaStickyError as exc:
            assert exc.name == code, exc
        else:
            raise SystemExit("a reset cleared " + code)
        simulator.reset()
    cudamem.get_current_device().reset()
""".replace("\n", "\n        ")


@pytest.mark.parametrize("row", IN_TWO)
def test_two_device_row_failures(run_py, row):
    proc = run_py("""
        import cudamem
        from cudamem import simulator
        from cudamem.errors import (CudaAPIError, CudaOutOfMemoryError,
                                    CudaStickyError)
        reach = lambda: %s
        %s
        for code, cls in [("CUDA_ERROR_UNKNOWN", CudaAPIError),
                          ("CUDA_ERROR_OUT_OF_MEMORY", CudaOutOfMemoryError),
                          ("CUDA_ERROR_ILLEGAL_ADDRESS", CudaStickyError)]:
            simulator.inject(%r, code)
            try:
                reach()
            except CudaAPIError as exc:
                assert type(exc) is cls, (code, exc)
                assert exc.call == %r, exc.call
            else:
                raise SystemExit("no error for " + code)
            recover(code, cls)
            reach()
        cudamem.close()
        print(simulator.live())
    """ % (TWO_DEVICE_REACH[row], RECOVER, row, row),
        env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    live = eval(proc.stdout)
    assert all(v == 0 for v in live.values()), live


# Rows reached only by opening an IPC handle, which the driver refuses in the
# process that exported it: a fresh process opens one exported here, then
# closes it (the close is queued: flushing the queue runs it).
IPC_REACH = """
def reach():
    array = handle.open()
    handle.close()
    del array
    try:
        cudamem.current_context().memory_manager.deallocations.clear()
    except CudaAPIError:
        # A failed close leaves the mapping: it goes with the context (a
        # reset after a sticky error destroys it, then raises that error).
        try:
            cudamem.get_current_device().reset()
        except CudaStickyError:
            pass
        raise
"""


@pytest.mark.parametrize("row", IN_IPC)
def test_ipc_row_failures(run_py, row):
    array = cudamem.device_array(4)
    proc = run_py("""
        import pickle
        import cudamem
        from cudamem import simulator
        from cudamem.errors import (CudaAPIError, CudaOutOfMemoryError,
                                    CudaStickyError)
        handle = pickle.loads(%r)
        %s
        %s
        for code, cls in [("CUDA_ERROR_UNKNOWN", CudaAPIError),
                          ("CUDA_ERROR_OUT_OF_MEMORY", CudaOutOfMemoryError),
                          ("CUDA_ERROR_ILLEGAL_ADDRESS", CudaStickyError)]:
            simulator.inject(%r, code)
            try:
                reach()
            except CudaAPIError as exc:
                assert type(exc) is cls, (code, exc)
                assert exc.call == %r, exc.call
            else:
                raise SystemExit("no error for " + code)
            recover(code, cls)
            reach()
        cudamem.close()
        print(simulator.live())
    """ % (pickle.dumps(array.get_ipc_handle()),
           IPC_REACH.replace("\n", "\n        "), RECOVER, row, row))
    assert proc.returncode == 0, proc.stderr
    live = eval(proc.stdout)
    assert all(v == 0 for v in live.values()), live


@pytest.mark.parametrize("row", AT_LOAD)
def test_load_row_failure(run_py, row):
    proc = run_py("""
        import cudamem
        from cudamem import driver, simulator
        simulator.inject(%r, 'CUDA_ERROR_UNKNOWN')
        assert cudamem.is_available() is False
        try:
            driver.info()
        except cudamem.CudaSupportError as exc:
            print(exc)
    """ % row)
    assert proc.returncode == 0, proc.stderr
    msg = proc.stdout.strip()
    if row == "cuInit":
        assert msg == "Error at driver init: CUDA_ERROR_UNKNOWN (999)"
    else:
        assert msg.startswith(row + " failed in ")
        assert msg.endswith(": CUDA_ERROR_UNKNOWN (999)")
