"""Error paths beyond each driver row's first call: every call a public
operation makes, failed in turn (the simulator's inject(..., after=k)),
gives a CudaAPIError naming that call or is absorbed, and leaks nothing;
and failed Python allocations (_testcapi.set_nomemory), each in turn, in
56 operations and in the extension's import, give MemoryError (or the
exception CPython makes of it), never a crash or a leak.
tools/error_labels.py (`make coverage`)
reports which error exits these reach; test_driver_faults.py owns the
per-row exception kinds."""
import gc
import sys
import warnings

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem
from cudamem.errors import CudaAPIError
from tests.faults.test_driver_faults import IN_PROCESS, REACH, ROWS
from tests.helpers.run import ROOT, run_python

pytestmark = pytest.mark.simulator

# Scenarios that release what they made themselves and raise when that
# fails: what the failed release kept goes with its context, as in
# test_driver_faults.py.
RELEASES = {"cuMemHostRegister", "cuMemHostUnregister", "cuMemFree",
            "cuMemFreeHost", "cuStreamDestroy", "cuEventDestroy",
            "pool and context", "host memory after a reset",
            "external host memory", "pool trims",
            "registered async copies"}
# At most this many calls of one row are failed in turn per operation.
MAX_CALLS = 6


def _dev():
    return cudamem.list_devices()[0]


def _reset_all():
    """Every device reset, and its primary context retained again (as the
    sweep's baseline has them)."""
    for dev in cudamem.list_devices():
        dev.reset()
        dev.get_primary_context()


def _views_and_assignment():
    host = np.arange(96, dtype=np.float32).reshape(4, 24)
    d = cudamem.to_device(host)
    d[1:3, ::5] = host[1:3, ::5] * 2
    d[0] = 7
    d[:, 2:4] = d[:, 4:6]
    d.T.copy_to_host()
    d.reshape(8, 12).copy_to_host()
    d[::-1, ::3].copy_to_device(np.ones((4, 8), np.float32))


def _cai_on_stream():
    stream = cudamem.stream()
    a = cudamem.to_device(np.arange(6), stream=stream)
    b = cudamem.from_cuda_array_interface(a.__cuda_array_interface__,
                                          owner=a)
    other = cudamem.stream()
    c = cudamem.as_cuda_array(a, stream=other)
    b.copy_to_host(stream=other)
    del c
    other.synchronize()


def _dlpack_round_trip():
    stream = cudamem.stream()
    a = cudamem.to_device(np.arange(6.0))
    b = cudamem.from_dlpack(a, stream=stream)
    c = cudamem.from_dlpack(np.arange(4), stream=stream)
    d = cudamem.from_dlpack(a, copy=True)
    stream.synchronize()
    del b, c, d


def _host_arrays():
    p = cudamem.pinned_array((3, 4))
    m = cudamem.mapped_array(5)
    g = cudamem.managed_array(4)
    d = cudamem.to_device(p)
    d[0].copy_to_host(m[:4])
    g[:] = 1
    del p, m, g, d


def _events():
    stream = cudamem.stream()
    start, end = cudamem.event(timing=True), cudamem.event(timing=True)
    start.record(stream)
    cudamem.to_device(np.arange(8), stream=stream)
    end.record(stream)
    end.wait(cudamem.stream())
    end.synchronize()
    stream.synchronize()
    start.elapsed_time(end)


def _event_synchronize():
    """An event waited for alone: the poll finds it done, then the final
    synchronize reports its status, each under the event's context."""
    e = cudamem.event()
    e.record()
    e.synchronize()


def _pool_and_context():
    ctx = cudamem.current_context()
    ctx.get_memory_info()
    with cudamem.defer_cleanup():
        a = cudamem.device_array(16)
        del a
    ctx.memory_manager.deallocations.clear()
    ctx.synchronize()


def _broadcasts():
    """Copies the engine makes in steps: a source repeated along one or two
    dims (doubling), overlapping views, and fills of a pattern no memset
    unit holds: a short one seeded by copying one element from the host."""
    d = cudamem.device_array((6, 5, 40), np.float64)
    d[0, 0] = np.arange(40.0)
    d[:, 1:] = d[0, 0]
    d[1:, 0] = d[0, 0]
    d[1:4, :, 3:40:2] = d[0:3, :, 0:37:2]
    d[:, :, ::3].fill(1.5)
    d[2:, 1:3].fill(-2.25)
    h = d.copy_to_host()
    assert h[5, 4, 0] == 1.5 and h[3, 2, 1] == -2.25
    z = cudamem.device_array(2, np.complex128)
    z.fill(1 + 2j)
    assert (z.copy_to_host() == 1 + 2j).all()
    # Large enough that a memset seed doubled by copies beats the host.
    big = cudamem.device_array((4096, 1024), np.float64)
    big[:, :512].fill(1.5)
    assert (big[-1, :512].copy_to_host() == 1.5).all()


def _host_memory_after_reset():
    """Host memory made first thing after a reset, so that each kind
    retains the primary context anew inside its registration; a read-only
    array asks the device whether it can page-lock it."""
    _dev().reset()
    frozen = np.arange(1024.0)
    frozen.flags.writeable = False
    with cudamem.pinned(frozen):
        pass
    _dev().reset()
    w = cudamem.mapped_array(4, wc=True)
    _dev().reset()
    m = cudamem.mapped_array(1024)
    host = np.zeros(512)
    with cudamem.mapped(host):
        pass
    p = cudamem.pinned_array(8)
    del w, m, p


def _releases_after_reset():
    """The first release of each kind after a reset makes the device's
    queues again (their size from the device's memory)."""
    _dev().reset()
    with cudamem.defer_cleanup():
        pass
    _dev().reset()
    a = cudamem.device_array(4)
    del a
    _dev().reset()
    s = cudamem.stream()
    del s


def _external_host_memory():
    """numba's MappedMemory and PinnedMemory over pages mapped here: the
    buffer asks the context for the device address of mapped ones."""
    ctx = cudamem.current_context()
    host = np.zeros(512)
    with cudamem.mapped(host):
        m = cudamem.MappedMemory(ctx, host.ctypes.data, host.nbytes)
        p = cudamem.PinnedMemory(ctx, host.ctypes.data, host.nbytes)
        del m, p


def _pool_trims():
    """The memory pool's slabs and events, and the host pool's page-locked
    blocks, given back by trim() and by a lower pinned limit."""
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager):
        mm = cudamem.current_context().memory_manager
        try:
            stream = cudamem.stream()
            a = cudamem.device_array(256, stream=stream)
            p = cudamem.pinned_array(64)
            del a, p
            stream.synchronize()
            mm.trim()
            p = cudamem.pinned_array(64)
            del p
            mm.set_pinned_limit(0)
            mm.set_pinned_limit(None)
        finally:
            # What a failed step left cached (a fault fails one call).
            mm.trim()


def _registered_async_copies():
    """Async copies from registered pages on five streams: each stream's
    work on the pages is noted with an event, and the fifth, every slot
    taken, first waits for the oldest's work."""
    host = np.arange(64.0)
    streams = [cudamem.stream() for _ in range(5)]
    d = cudamem.device_array(64)
    with cudamem.pinned(host):
        for s in streams:
            d.copy_to_device(host, stream=s)
        for s in streams:
            s.synchronize()


def _async_pool_reset():
    """Context.reset() with the stream-ordered pool: the pool is trimmed
    after the context's deallocations are flushed."""
    with cudamem.using_memory_manager(cudamem.AsyncMemoryManager):
        a = cudamem.device_array(256)
        del a
        cudamem.current_context().reset()


def _device_attributes():
    """Attributes read from the driver on each access, the identity numba
    reports, and current_context() selecting a device by number."""
    dev = _dev()
    assert dev.MAX_THREADS_PER_BLOCK > 0
    assert set(dev.get_device_identity()) >= {"pci_bus_id"}
    assert cudamem.current_context(0).device.id == 0


EXTRA = {
    "views and assignment": _views_and_assignment,
    "CAI import on streams": _cai_on_stream,
    "DLPack import": _dlpack_round_trip,
    "host arrays": _host_arrays,
    "events": _events,
    "event synchronize": _event_synchronize,
    "pool and context": _pool_and_context,
    "broadcasts and overlaps": _broadcasts,
    "host memory after a reset": _host_memory_after_reset,
    "releases after a reset": _releases_after_reset,
    "external host memory": _external_host_memory,
    "pool trims": _pool_trims,
    "async pool reset": _async_pool_reset,
    "registered async copies": _registered_async_copies,
    "device attributes": _device_attributes,
}
SCENARIOS = {**{name: REACH[name] for name in IN_PROCESS}, **EXTRA}


def _counts(sim):
    """{row: calls so far} (a row covers its versioned variants)."""
    calls = sim.stats()["calls"]
    return {row: sum(v["calls"] for k, v in calls.items()
                     if k == row or k.startswith(row + "_"))
            for row in ROWS}


def _run(fn, sim):
    """fn(), then the releases it queued, with the faults injected; then
    the contexts back in the state the leak check compares (as
    tests/conftest.py's quiesce). Returns (the name of the call that failed
    with a CudaAPIError or None, whether a release failed). The exception
    is not kept: its traceback would keep the operation's objects alive."""
    call = None
    with warnings.catch_warnings(record=True) as caught:
        # A failed release is reported as a CudaWarning, not raised.
        warnings.simplefilter("always")
        try:
            fn()
        except CudaAPIError as exc:
            call = exc.call
        gc.collect()
        try:
            _cudamem._flush_pending()
        except CudaAPIError:
            caught.append(None)
    sim.clear_faults()
    # Releases wait for the work queued before them: let it finish.
    try:
        cudamem.synchronize()
    except CudaAPIError:
        pass
    gc.collect()
    _cudamem._flush_pending()
    _dev().get_primary_context()
    released = all(w is not None and not issubclass(w.category,
                                                    cudamem.CudaWarning)
                   for w in caught)
    return call, not released


def sweep_faults(sim, run, keeps=()):
    """Fails each driver call a scenario makes in turn and returns the
    problems found. run(fault) runs it with `fault`, a (row, k) to inject
    or None, and returns _run's result; keeps: the rows whose failure may
    leave what the run made until its context goes."""
    assert cudamem.is_available()
    run(None)  # warm: contexts retained, modules loaded
    before = _counts(sim)
    assert run(None) == (None, False)
    after = _counts(sim)
    made = {row: after[row] - before[row] for row in ROWS
            if after[row] > before[row]}
    assert made, "the scenario calls no driver row"
    problems = []
    for row, n in sorted(made.items()):
        for k in range(min(n, MAX_CALLS)):
            live = sim.live()
            call, release_failed = run((row, k))
            if call not in (None, row):
                problems.append("%s call %d: CudaAPIError from %s"
                                % (row, k, call))
            if ((release_failed or call in keeps)
                    and sim.live() != live):
                # What a failed release kept goes with its context.
                _reset_all()
                _run(lambda: None, sim)
            if sim.live() != live:
                now = sim.live()
                problems.append("%s call %d: leaked %r" % (row, k, {
                    key: now[key] - live[key] for key in live
                    if now[key] != live[key]}))
                _reset_all()
                _run(lambda: None, sim)
    if run(None) != (None, False):
        problems.append("the faults were not used up")
    return problems


def sweep(sim, scenario):
    """Fails each call SCENARIOS[scenario] makes in turn, injected on this
    thread; the problems found."""
    fn = SCENARIOS[scenario]

    def run(fault):
        if fault is not None:
            sim.inject(fault[0], "CUDA_ERROR_UNKNOWN", after=fault[1])
        return _run(fn, sim)

    return sweep_faults(sim, run, ROWS if scenario in RELEASES else ())


SWEEP = """
import sys
sys.path.insert(0, %r)
from cudamem import simulator
from %s import %s as sweep
for problem in sweep(simulator, %r):
    print(problem)
"""


def check_sweep(run_py, module, sweep_name, scenario, env=None):
    """module.sweep_name(simulator, scenario) in a fresh process: no
    problem found, no crash."""
    proc = run_py(SWEEP % (ROOT, module, sweep_name, scenario), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "", proc.stdout


# In a fresh process each: a failed push or pop, say, leaves the thread's
# context stack as the driver left it, which later tests must not inherit.
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_call_can_fail(run_py, scenario):
    check_sweep(run_py, __name__, "sweep", scenario)


# Python allocation failures: in a fresh process, each operation with the
# n-th allocation after the start failing (a one-allocation window), for
# each n below 1000 (the longest, the HTML repr, raises for n up to about
# 760). MemoryError, another exception CPython or NumPy makes of the
# failure, or success; a SystemError of ours, a traceback or an ignored
# exception on stderr, a leak or a crash is a bug. Each operation is a
# statement over `np`, `cudamem`, a device array `d` (3 x 4 float64), a
# stream `s` and an event `e`, made before the window.
NOMEMORY_OPS = {
    "device_array": "cudamem.device_array((3, 4), order='F')",
    "device_array_like": "cudamem.device_array_like(d[:, 1:])",
    "to_device": "cudamem.to_device(np.arange(6))",
    "to_device strided": "cudamem.to_device(np.arange(24.0)[::2])",
    "to_device stream": "cudamem.to_device(np.arange(6), stream=s)",
    "copy_to_host": "d.copy_to_host()",
    "copy_to_host strided": "d[:, ::2].copy_to_host()",
    "copy_to_host into": "d.T.copy_to_host(np.empty((4, 3)), stream=s)",
    "copy_to_device": "d.copy_to_device(np.ones((3, 4)))",
    "copy": "d[1:].copy()",
    "view": "d[1:, ::2].T",
    "reshape": "d.reshape(4, 3).ravel()",
    "split": "d.ravel().split(5)",
    "view dtype": "d.view(np.int32)",
    "getitem": "d[1, 2]",
    "setitem": "d.__setitem__((slice(1, 3), 0), np.ones(2))",
    "setitem scalar": "d.__setitem__(slice(None), 2.5)",
    # More live 1-d views than the module keeps for reuse (16).
    "setitem device": "d.__setitem__(0, [d[2] for _ in range(20)][-1])",
    "fill": "d[:, 1:3].fill(-1.0)",
    "repr": "repr(d), d._repr_html_(), repr(s), repr(e)",
    "attributes": "d.flags, d.strides, d.device_ctypes_pointer, d.gpu_data",
    "cai import": "cudamem.as_cuda_array(types.SimpleNamespace("
                  "__cuda_array_interface__=d.__cuda_array_interface__), "
                  "stream=s)",
    "cai export": "d[::2].__cuda_array_interface__",
    "cai dict": "cudamem.from_cuda_array_interface("
                "d.__cuda_array_interface__, owner=d)",
    "dlpack import": "cudamem.from_dlpack(np.arange(4.0))",
    "dlpack device": "cudamem.from_dlpack(d, stream=s)",
    "dlpack export": "d.__dlpack__(), d.__dlpack_device__()",
    "pinned": "cudamem.pinned_array(4)",
    "pinned like": "cudamem.pinned_array_like(np.zeros((2, 3)))",
    "mapped": "cudamem.mapped_array((2, 2))",
    "managed": "cudamem.managed_array(4)",
    "pinned context": "with cudamem.pinned(np.zeros(8)): pass",
    "stream": "cudamem.stream().synchronize()",
    "stream query": "s.query(), s.priority_range, int(s)",
    "event": "cudamem.event(timing=True).record(s)",
    "event wait": "e.record(s), e.wait(cudamem.stream()), e.query()",
    "callback": "s.add_callback(lambda *a: None, 1), s.synchronize()",
    "context": "cudamem.current_context().get_memory_info()",
    "device": "cudamem.get_current_device().name, "
              "cudamem.list_devices()[0].compute_capability",
    "memory stats": "cudamem.memory_stats()",
    "defer cleanup": "with cudamem.defer_cleanup(): cudamem.device_array(4)",
    "pickle": "pickle.loads(pickle.dumps(d))",
    "ipc handle": "pickle.dumps(d.get_ipc_handle())",
    # More live pointers than the module keeps for reuse (16): the rest
    # are allocated, and their allocation fails in turn.
    "memalloc": "[cudamem.current_context().memory_manager.memalloc(64)"
                ".view(8, 16) for _ in range(12)]",
    "memhostalloc": "cudamem.current_context().memory_manager"
                    ".memhostalloc(64, mapped=True).device_pointer",
    "memallocmanaged": "[cudamem.current_context().memory_manager"
                       ".memallocmanaged(64) for _ in range(20)]",
    "mapped context": "with cudamem.mapped(np.zeros(8)) as m: "
                      "m.copy_to_host()",
    "mapped like": "cudamem.mapped_array_like(np.zeros((2, 3)), "
                   "wc=True).__cuda_array_interface__",
    "context methods": "c = cudamem.current_context(); "
                       "repr(c), c.device, c.deallocations, c.handle",
    "devices": "[(x.id, x.uuid, x.name, repr(x)) for x in cudamem.gpus]",
    "external_stream": "cudamem.external_stream(int(s)).synchronize()",
    "memory pointer": "p = d.gpu_data; p.view(8), p.device_pointer, "
                      "p.owner, repr(p)",
    "pool stats": "with cudamem.using_memory_manager("
                  "cudamem.PoolMemoryManager): "
                  "mm = cudamem.current_context().memory_manager; "
                  "mm.set_limit(1 << 30); mm.set_pinned_limit(1 << 30); "
                  "mm.stats(), cudamem._cudamem._hostpool_stats(); "
                  "mm.set_limit(None); "
                  "mm.set_pinned_limit(256 << 20)",
    "async pool stats": "with cudamem.using_memory_manager("
                        "cudamem.AsyncMemoryManager) as mm: "
                        "mm.set_release_threshold(1 << 40); mm.stats(); "
                        "mm.set_release_threshold(0); mm.trim(1 << 40)",
    "driver tables": "cudamem.driver.table(), "
                     "cudamem._cudamem._error_names()",
    "index": "d[1], d[::2], d[..., 1]",
    # reversed() asks for row 299 by the sequence protocol: an int that
    # is not cached.
    "numba constructors and iteration":
        "cudamem.DeviceNDArray((2, 3), (24, 8), 'f8'), "
        "cudamem.DeviceNDArray(3, 8, 'f8', gpu_data=d.gpu_data), "
        "cudamem.DeviceRecord([('a', 'i4')], stream=s), list(d), "
        "next(reversed(cudamem.device_array((300, 1)))), "
        "d.getitem(1, stream=s), d.setitem(0, 1.0, stream=s)",
    "memory limit": "cudamem.set_memory_limit(1 << 40), "
                    "cudamem.get_memory_limit(), "
                    "cudamem.set_memory_limit(None)",
    "pool manager": "with cudamem.using_memory_manager("
                    "cudamem.PoolMemoryManager): cudamem.device_array(4)",
}

# Put into the sweeps below after their first, unfailed run.
# CPython 3.12 and 3.13's MAKE_FUNCTION, when PyFunction_New fails,
# releases the code object twice (python/cpython#122752; a script without
# cudamem that fails a lambda's allocation this way crashes 3.12.1 and
# 3.13.0): a lambda of the op, a generator expression of cudamem's *_like,
# NumPy's array printing or importlib's module locks would free a code
# object still in use. give_back(refs) gives each code object that a live
# function can make the references it lost since code_refs() (increments
# no one owns), so the sweeps still fail those allocations. They also keep
# the collector from starting inside the window: 3.12 and 3.13 allocate
# the phase name for gc.callbacks at each start (invoke_gc_callback) and
# print a failure there as an unraisable MemoryError, whichever code was
# running (a script without cudamem shows it; 3.11 does not).
GIVE_BACK = """
import ctypes
CODES = []
if sys.version_info >= (3, 12):
    todo = [f.__code__ for f in gc.get_objects()
            if isinstance(f, types.FunctionType)]
    seen = set()
    while todo:
        c = todo.pop()
        if id(c) not in seen:
            seen.add(id(c))
            CODES.append(c)
            todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]


def code_refs():
    return [sys.getrefcount(c) for c in CODES]


def give_back(refs):
    for c, before, now in zip(CODES, refs, code_refs()):
        for _ in range(before - now):
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(c))
"""

NOMEMORY = """
import gc
import pickle
import sys
import types
import numpy as np
import cudamem
from cudamem import simulator
import _testcapi

d = cudamem.to_device(np.arange(12.0).reshape(3, 4))
s = cudamem.stream()
e = cudamem.event()
def op():
    %s
op()
s.synchronize()
gc.collect()
cudamem._cudamem._flush_pending()
base = simulator.live()
failed = 0
%s
for n in range(%d):
    refs = code_refs()
    gc.disable()  # see GIVE_BACK
    _testcapi.set_nomemory(n, n + 1)
    try:
        op()
    except MemoryError:
        failed += 1
    except SystemError as exc:
        # NumPy 2's __reduce__ returns with MemoryError set; ours never.
        if "numpy" not in str(exc):
            raise
    except Exception:
        # CPython's or NumPy's own reading of a failed allocation, such
        # as an attribute lookup that gives AttributeError.
        pass
    finally:
        _testcapi.remove_mem_hooks()
        gc.enable()
    give_back(refs)
    s.synchronize()
gc.collect()
cudamem._cudamem._flush_pending()
print(failed, simulator.live() == base)
"""


# CPython 3.13.0's dict_setdefault_ref_lock_held (dict.setdefault,
# PyDict_SetDefaultRef: type dicts, interned strings) counts the new item
# and reports success when growing the table fails, so the dict is
# corrupt and a later resize crashes (the script below shows it without
# cudamem; 3.10 to 3.12 raise MemoryError). No sweep of Python's
# allocations can run on such an interpreter.
SETDEFAULT_PROBE = """
import _testcapi
d = {"k%d" % i: i for i in range(5)}
_testcapi.set_nomemory(0, 1)
try:
    d.setdefault("new", 1)
    print("broken")
except MemoryError:
    print("ok")
except SystemError:
    print("broken")
finally:
    _testcapi.remove_mem_hooks()
"""


@pytest.fixture(scope="module")
def nomemory_sweeps():
    pytest.importorskip("_testcapi")
    proc = run_python(SETDEFAULT_PROBE)
    if proc.stdout.strip() != "ok":
        pytest.skip("dict.setdefault loses a failed allocation on Python "
                    "%s (%s)" % (sys.version.split()[0],
                                 proc.stdout.strip() or proc.stderr[-200:]))


@pytest.mark.parametrize("op", sorted(NOMEMORY_OPS))
def test_python_allocation_failures(run_py, op, nomemory_sweeps):
    proc = run_py(NOMEMORY % (NOMEMORY_OPS[op], GIVE_BACK, 1000))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Only a callback that failed in its thread is reported, as a warning.
    assert "Traceback" not in proc.stderr and \
        "Exception ignored" not in proc.stderr, proc.stderr[-2000:]
    failed, same = proc.stdout.split()
    assert int(failed) > 0  # the window did make allocations fail
    assert same == "True", "live counts changed"


# The extension's module exec with each of its allocations failed in turn:
# a new instance of cudamem._cudamem each time (multi-phase init), in one
# fresh process.
IMPORT_NOMEMORY = """
import ctypes
import gc
import importlib
import os
import sys
import types
import _testcapi
import cudamem

failed = 0
%s
for n in range(%d):
    refs = code_refs()
    sys.modules.pop("cudamem._cudamem")
    gc.disable()  # see GIVE_BACK
    _testcapi.set_nomemory(n, n + 1)
    try:
        # With its first devices and a context: built on first use.
        module = importlib.import_module("cudamem._cudamem")
        module.list_devices()[0].get_primary_context()
    except MemoryError:
        failed += 1
    except RuntimeError as exc:
        # The import system's own lock.
        assert "can't allocate lock" in str(exc), exc
    except SystemError as exc:
        # CPython 3.11 loses the MemoryError of a heap type made by
        # PyType_FromModuleAndSpec; its own _csv, _queue and array do the
        # same under this sweep.
        assert "without setting an exception" in str(exc) or \\
            "must be called with an exception raised" in str(exc), exc
        failed += 1
    finally:
        _testcapi.remove_mem_hooks()
        gc.enable()
    give_back(refs)
    sys.modules.setdefault("cudamem._cudamem", cudamem._cudamem)
module = importlib.import_module("cudamem._cudamem")
print(failed, len(module.list_devices()), flush=True)
# Each instance registers its exit hook with atexit, and CPython 3.11's
# atexit.register, when growing its table fails, keeps the larger length
# and later writes past the table (it does so without cudamem too): leave
# without walking that table. libc's exit skips Python's finalization as
# os._exit does, but runs the C destructors, gcov's among them, so that a
# coverage build records what the sweep reached.
ctypes.CDLL(None).exit(0)
"""


def test_import_with_allocation_failures(run_py, nomemory_sweeps):
    proc = run_py(IMPORT_NOMEMORY % (GIVE_BACK, 1100), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    failed, devices = proc.stdout.split()
    assert int(failed) > 500  # the exec's allocations, nearly all failed
    assert int(devices) >= 1
