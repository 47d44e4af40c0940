"""Streams: numba's Stream and its constructors, the one parser of every
``stream=`` argument (DESIGN rule 8), waits that Ctrl-C interrupts (rule 7),
stale streams after reset/close (rule 4), deferred destruction (rule 5),
fork (rule 10) and bad input (rule 11).

The reference is the simulator's own driver API through ctypes (simref): it
reads back the flags, priority, context and state of the handles cudamem
made, and queues slow work (a memset under the simulator's stream delay) on
them.
"""
import contextlib
import ctypes
import gc
import inspect
import operator
import re
import sys
import threading
import time
import warnings
import weakref

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem
from cudamem.errors import (
    CudaAPIError,
    CudaDriverError,
    CudaOutOfMemoryError,
    CudaStickyError,
    CudaWarning,
)
from tests.helpers.run import in_thread
from tests.helpers.simref import SimDriver

pytestmark = pytest.mark.simulator

NOT_READY = 600  # CUDA_ERROR_NOT_READY
INVALID_HANDLE = 400  # CUDA_ERROR_INVALID_HANDLE
STALE = "reset or closed"
TWO_DEVICES = {"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None}


class Raw(SimDriver):
    """simref plus the stream calls these tests compare with."""

    def stream_create(self, flags=0):
        handle = ctypes.c_void_p()
        self.call("cuStreamCreate", ctypes.byref(handle), ctypes.c_uint(flags))
        return handle.value

    def stream_destroy(self, handle):
        self.call("cuStreamDestroy_v2", ctypes.c_void_p(handle))

    def stream_flags(self, handle):
        flags = ctypes.c_uint()
        self.call("cuStreamGetFlags", ctypes.c_void_p(handle),
                  ctypes.byref(flags))
        return flags.value

    def stream_priority(self, handle):
        priority = ctypes.c_int()
        self.call("cuStreamGetPriority", ctypes.c_void_p(handle),
                  ctypes.byref(priority))
        return priority.value

    def stream_ctx(self, handle):
        ctx = ctypes.c_void_p()
        self.call("cuStreamGetCtx", ctypes.c_void_p(handle),
                  ctypes.byref(ctx))
        return ctx.value

    def stream_query(self, handle):
        return self.rc("cuStreamQuery", ctypes.c_void_p(handle))

    def priority_range(self):
        least, greatest = ctypes.c_int(), ctypes.c_int()
        self.call("cuCtxGetStreamPriorityRange", ctypes.byref(least),
                  ctypes.byref(greatest))
        return least.value, greatest.value

    def memset_async(self, ptr, nbytes, handle):
        self.call("cuMemsetD8Async", ctypes.c_uint64(ptr), ctypes.c_ubyte(7),
                  ctypes.c_size_t(nbytes), ctypes.c_void_p(handle))


@pytest.fixture
def ref(sim):
    cudamem.is_available()
    return Raw(sim.library_path())


@pytest.fixture
def slow_work(ref, sim):
    """slow_work(stream, us): queues one memset on the stream that takes
    `us` microseconds (the simulator's delay, kept while the test runs)."""
    ptrs = []
    before = sim.get_delay_us()

    def queue(stream, us):
        if not ptrs:
            cudamem.current_context()  # raw calls need it current
            ptrs.append(ref.mem_alloc(4096))
        sim.set_delay_us(us)
        ref.memset_async(ptrs[0], 4096, int(stream))

    yield queue
    cudamem.synchronize()
    sim.set_delay_us(before)
    for ptr in ptrs:
        ref.mem_free(ptr)


class Foreign:
    """Another library's stream: __cuda_stream__ gives `value`."""

    def __init__(self, value):
        self.value = value

    def __cuda_stream__(self):
        return self.value


class ForeignProperty:
    """cuda.core 0.1's form: __cuda_stream__ is the tuple itself."""

    def __init__(self, value):
        self.__cuda_stream__ = value


def live_streams(sim):
    return sim.live()["streams"]


def flush():
    gc.collect()
    cudamem.current_context().deallocations.clear()


@contextlib.contextmanager
def no_warnings():
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        yield
    assert not log, [str(w.message) for w in log]


# ---------------------------------------------------------------------------
# Constructors and attributes.


def test_stream_is_made_in_the_primary_context(ref, sim):
    before = live_streams(sim)
    s = cudamem.stream()
    ctx = cudamem.current_context()
    assert type(s) is cudamem.Stream
    assert live_streams(sim) == before + 1
    h = int(s)
    assert h > 2
    assert ref.stream_ctx(h) == ctx.handle
    assert ref.stream_flags(h) == 0
    assert ref.stream_priority(h) == 0
    assert ref.stream_query(h) == 0
    assert s.external is False
    assert s.context is ctx
    assert isinstance(s.handle, ctypes.c_void_p)
    assert s.handle.value == h
    assert s.__cuda_stream__() == (0, h)
    assert bool(s) is True
    assert repr(s) == "<CUDA stream %d on %r>" % (h, ctx)
    assert cudamem.stream() is not s
    assert int(cudamem.stream()) != h
    del s
    flush()
    assert live_streams(sim) == before
    assert ref.rc("cuStreamQuery", ctypes.c_void_p(h)) == INVALID_HANDLE


def test_non_blocking_and_priority(ref, sim):
    cudamem.current_context()
    least, greatest = ref.priority_range()
    assert cudamem.Stream.priority_range() == (least, greatest)
    assert cudamem.default_stream().priority_range() == (least, greatest)
    assert greatest < least
    s = cudamem.stream(non_blocking=True)
    assert ref.stream_flags(int(s)) == 1  # CU_STREAM_NON_BLOCKING
    assert ref.stream_priority(int(s)) == 0
    s = cudamem.stream(priority=greatest, non_blocking=False)
    assert ref.stream_flags(int(s)) == 0
    assert ref.stream_priority(int(s)) == greatest
    s = cudamem.stream(greatest, True)
    assert (ref.stream_flags(int(s)), ref.stream_priority(int(s))) == (
        1, greatest)
    # The driver clamps into its range; so does cudamem beyond an int.
    for asked, got in [(greatest - 100, greatest), (least + 100, least),
                       (-10**30, greatest), (10**30, least),
                       (np.int16(greatest), greatest), (None, 0)]:
        s = cudamem.stream(priority=asked)
        assert ref.stream_priority(int(s)) == got, asked
    del s


def test_priority_none_uses_cu_stream_create(sim):
    cudamem.current_context()
    sim.reset()
    cudamem.stream()
    cudamem.stream(non_blocking=True)
    calls = sim.stats()["calls"]
    assert calls["cuStreamCreate"]["calls"] == 2
    assert calls["cuStreamCreateWithPriority"]["calls"] == 0
    cudamem.stream(priority=0)
    calls = sim.stats()["calls"]
    assert calls["cuStreamCreateWithPriority"]["calls"] == 1


def test_stream_argument_errors(sim):
    before = live_streams(sim)
    for bad in ["1", 1.0, True, [], object()]:
        with pytest.raises(TypeError, match="priority must be an int or "
                           "None, not %s" % type(bad).__name__):
            cudamem.stream(priority=bad)
    with pytest.raises(TypeError, match="at most 2 arguments"):
        cudamem.stream(0, False, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument "
                       "'flags'"):
        cudamem.stream(flags=1)
    with pytest.raises(TypeError, match="multiple values for argument "
                       "'priority'"):
        cudamem.stream(0, priority=0)

    class Bad:
        def __bool__(self):
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        cudamem.stream(non_blocking=Bad())
    assert live_streams(sim) == before


def test_default_streams(ref):
    ctx = cudamem.current_context()
    cases = [(cudamem.default_stream, 0, "Default CUDA stream"),
             (cudamem.legacy_default_stream, 1, "Legacy default CUDA stream"),
             (cudamem.per_thread_default_stream, 2,
              "Per-thread default CUDA stream")]
    for make, value, name in cases:
        s = make()
        assert type(s) is cudamem.Stream
        assert int(s) == value
        assert s.handle.value == (value or None)  # numba's c_void_p
        assert s.__cuda_stream__() == (0, value)
        assert bool(s) is True  # even with int(s) == 0
        assert s.external is False
        assert s.context is ctx
        assert repr(s) == "<%s on %r>" % (name, ctx)
        assert make() is not s
        s.synchronize()
        assert s.query() is True


def test_external_stream(ref, sim):
    ctx = cudamem.current_context()
    h = ref.stream_create()
    try:
        before = live_streams(sim)
        s = cudamem.external_stream(h)
        assert type(s) is cudamem.Stream
        assert s.external is True
        assert int(s) == h and s.handle.value == h
        assert s.__cuda_stream__() == (0, h)
        assert s.context is ctx
        assert repr(s) == "<External CUDA stream %d on %r>" % (h, ctx)
        s.synchronize()
        assert s.query() is True
        assert _cudamem._parse_stream(s) == (h, True)
        assert int(cudamem.external_stream(np.uint64(h))) == h
        del s
        flush()
        # Never destroyed by cudamem.
        assert live_streams(sim) == before
        assert ref.stream_query(h) == 0
    finally:
        ref.stream_destroy(h)


def test_external_stream_of_default_handles(ref):
    ctx = cudamem.current_context()
    s = cudamem.external_stream(1)
    assert s.external is True
    assert repr(s) == "<Legacy default CUDA stream on %r>" % ctx
    assert _cudamem._parse_stream(s) == (1, True)
    s = cudamem.external_stream(2)
    assert repr(s) == "<Per-thread default CUDA stream on %r>" % ctx


def test_external_stream_rejects_bad_pointers():
    for bad in ["1", 1.0, True, None, object()]:
        with pytest.raises(TypeError, match="external_stream\\(\\) needs an "
                           "int stream handle, not %s" % type(bad).__name__):
            cudamem.external_stream(bad)
    with pytest.raises(ValueError, match="0 is the default stream"):
        cudamem.external_stream(0)
    for bad in [-1, -(2**70), 2**64]:
        with pytest.raises(ValueError, match="invalid stream handle %d"
                           % bad):
            cudamem.external_stream(bad)


def test_stream_type():
    s = cudamem.stream()
    with pytest.raises(TypeError):
        cudamem.Stream()
    with pytest.raises(AttributeError):
        s.handle = None
    with pytest.raises(AttributeError):
        s.external = True
    with pytest.raises(AttributeError):
        s.anything = 1
    # An int for int(), never an index (numba's Stream has no __index__).
    with pytest.raises(TypeError):
        operator.index(s)
    with pytest.raises(TypeError):
        [0, 1][cudamem.legacy_default_stream()]
    assert not hasattr(cudamem.Stream, "__index__")
    assert hash(s) == hash(s) and s == s and s != cudamem.stream()
    w = weakref.ref(s)
    assert w() is s
    del s
    assert w() is None
    assert cudamem.Stream.__module__ == "cudamem"
    assert cudamem.Stream.synchronize.__text_signature__ == "($self)"
    assert str(inspect.signature(cudamem.stream)) == \
        "(priority=None, non_blocking=False)"


def test_dropped_stream_is_queued_then_destroyed(ref, sim):
    ctx = cudamem.current_context()
    flush()
    before = live_streams(sim)
    s = cudamem.stream()
    h = int(s)
    del s
    assert len(ctx.deallocations) == 1
    assert live_streams(sim) == before + 1
    assert ref.stream_query(h) == 0  # still alive while queued
    ctx.deallocations.clear()
    assert len(ctx.deallocations) == 0
    assert live_streams(sim) == before
    # Deferred: nothing is destroyed inside the block.
    with ctx.defer_cleanup():
        s = cudamem.stream()
        del s
        ctx.deallocations.clear()
        assert live_streams(sim) == before + 1
    ctx.deallocations.clear()
    assert live_streams(sim) == before


def test_external_and_default_streams_are_never_queued():
    ctx = cudamem.current_context()
    flush()
    s = cudamem.external_stream(12345)
    d = cudamem.default_stream()
    del s, d
    assert len(ctx.deallocations) == 0


# ---------------------------------------------------------------------------
# Waiting.


def test_query_and_synchronize_with_delayed_work(ref, slow_work):
    s = cudamem.stream()
    h = int(s)
    assert s.query() is True
    slow_work(s, 300_000)
    assert s.query() is False
    assert ref.stream_query(h) == NOT_READY
    start = time.monotonic()
    s.synchronize()
    assert time.monotonic() - start > 0.1
    assert ref.stream_query(h) == 0
    assert s.query() is True
    s.synchronize()  # idle: at once


def test_synchronize_waits_for_its_own_stream_only(ref, slow_work):
    busy = cudamem.stream(non_blocking=True)
    idle = cudamem.stream(non_blocking=True)
    slow_work(busy, 300_000)
    start = time.monotonic()
    idle.synchronize()
    assert idle.query() is True
    assert busy.query() is False
    assert time.monotonic() - start < 0.25
    busy.synchronize()
    assert busy.query() is True


def test_synchronize_releases_the_gil(slow_work):
    s = cudamem.stream()
    slow_work(s, 300_000)
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    try:
        s.synchronize()
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 20


def test_synchronize_in_threads(slow_work):
    s = cudamem.stream()
    slow_work(s, 200_000)
    threads = [threading.Thread(target=s.synchronize) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.query() is True


def test_synchronize_off_the_main_thread_is_its_own_call(sim, slow_work):
    # Only the main thread runs signal handlers, so elsewhere nothing could
    # end the wait early: cudamem.synchronize() makes the call on the
    # calling thread (fault injection there reaches it) and still waits.
    s = cudamem.stream()
    slow_work(s, 100_000)

    def body():
        cudamem.synchronize()
        assert s.query() is True
        sim.inject("cuCtxSynchronize", "CUDA_ERROR_UNKNOWN")
        with pytest.raises(CudaAPIError) as info:
            cudamem.synchronize()
        sim.clear_faults()
        _api_error(info, "cuCtxSynchronize")
        cudamem.current_context().synchronize()

    in_thread(body)


def _calls(sim, *rows):
    calls = sim.stats()["calls"]
    return [calls[row]["calls"] for row in rows]


def test_synchronize_probes_an_idle_context(sim, slow_work):
    # Idle, the probe answers (cuCtxRecordEvent, cuEventQuery) and no
    # cuCtxSynchronize is made, nor cuEventSynchronize (a GPU's pools do
    # not give memory back at the probe's event, driver_facts.json). Work
    # on a non-blocking stream, which the
    # legacy stream does not wait for, makes the probe say "not ready":
    # the hand-off's cuCtxSynchronize then waits for it.
    rows = ("cuCtxSynchronize", "cuCtxRecordEvent", "cuEventQuery",
            "cuEventSynchronize")
    # A delay on every op (make test-stress) keeps even the record pending;
    # slow_work gives the delay back after the test.
    sim.set_delay_us(0)
    cudamem.synchronize()
    before = _calls(sim, *rows)
    cudamem.synchronize()
    idle = _calls(sim, *rows)
    assert idle == [before[0], before[1] + 1, before[2] + 1, before[3]]
    s = cudamem.stream(non_blocking=True)
    slow_work(s, 200_000)
    cudamem.synchronize()
    assert s.query() is True
    busy = _calls(sim, *rows)
    assert busy[:2] == [idle[0] + 1, idle[1] + 1]


def test_close_destroys_the_probe_event_that_another_retain_keeps(ref, sim):
    # Another library (numba-cuda) retains the same primary context, so
    # it outlives cudamem's close(); the probe's event must not, or each
    # close and synchronize would leave one more event in it.
    cudamem.synchronize()
    events = sim.live()["events"]
    ref.retain_primary(0)
    try:
        for _ in range(3):
            cudamem.close()
            assert ref.primary_active(0)
            assert sim.live()["events"] == events - 1
            cudamem.synchronize()
            assert sim.live()["events"] == events
    finally:
        ref.release_primary(0)


def test_synchronize_without_ctx_record_event(run_py):
    # A driver before CUDA 12.5 has no cuCtxRecordEvent: the row stays
    # unresolved and every synchronize() is the hand-off's cuCtxSynchronize.
    proc = run_py("""
        import cudamem
        from cudamem import driver, simulator
        cudamem.synchronize()
        cudamem.synchronize()
        present = {row[0]: row[4] for row in driver.table()}
        calls = simulator.stats()["calls"]
        print(present["cuCtxRecordEvent"],
              calls["cuCtxRecordEvent"]["calls"],
              calls["cuCtxSynchronize"]["calls"])
    """, env={"CUDAMEM_SIM_DRIVER_VERSION": "12040"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "0", "2"]


def test_ctrl_c_interrupts_synchronize(run_py):
    proc = run_py("""
        import ctypes, os, signal, threading, time
        import cudamem
        from cudamem import simulator

        lib = ctypes.CDLL(simulator.library_path())
        s = cudamem.stream()
        ptr = ctypes.c_uint64()
        assert lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(64)) == 0
        simulator.set_delay_us(1_500_000)
        assert lib.cuMemsetD8Async(ptr, ctypes.c_ubyte(1), ctypes.c_size_t(64),
                                   ctypes.c_void_p(int(s))) == 0
        main = threading.main_thread().ident

        def interrupt():
            time.sleep(0.2)
            signal.pthread_kill(main, signal.SIGINT)

        threading.Thread(target=interrupt).start()
        start = time.monotonic()
        try:
            s.synchronize()
        except KeyboardInterrupt:
            print("interrupted after %.2f s" % (time.monotonic() - start))
        else:
            raise SystemExit("synchronize() was not interrupted")
        assert s.query() is False  # the work goes on
        simulator.set_delay_us(0)
        s.synchronize()
        assert s.query() is True
        assert lib.cuMemFree_v2(ptr) == 0
        del s
        cudamem.current_context().deallocations.clear()
        cudamem.close()
        print(simulator.live())
    """, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    waited = float(lines[0].split()[2])
    assert 0.15 < waited < 1.0, lines
    live = eval(lines[1])
    assert all(v == 0 for v in live.values()), live


# ---------------------------------------------------------------------------
# Stale streams, threads, fork.


def _stale_checks(s):
    for call in (s.synchronize, s.query, s.__cuda_stream__,
                 lambda: s.context, lambda: _cudamem._parse_stream(s)):
        with pytest.raises(CudaDriverError, match=STALE):
            call()
    assert re.fullmatch(r"<(External )?CUDA stream \d+ on device 0 \(its "
                        r"context was reset or closed\)>", repr(s))
    assert int(s) > 2 and s.handle.value == int(s)


@pytest.mark.parametrize("how", ["close", "reset"])
def test_stale_streams(ref, sim, how):
    before = live_streams(sim)
    s = cudamem.stream()
    ext = cudamem.external_stream(ref.stream_create())
    default = cudamem.default_stream()
    legacy = cudamem.legacy_default_stream()
    ext_legacy = cudamem.external_stream(1)
    if how == "close":
        cudamem.close()
    else:
        cudamem.get_current_device().reset()
    # Both were destroyed with their context.
    assert live_streams(sim) == before
    _stale_checks(s)
    _stale_checks(ext)
    # Default streams belong to whatever context the device has now.
    for d in (default, legacy, ext_legacy):
        d.synchronize()
        assert d.query() is True
        assert d.context is cudamem.current_context()
        assert repr(d).endswith(" on %r>" % cudamem.current_context())
        assert _cudamem._parse_stream(d)[1] is True
    # Dropping a stale stream is silent and destroys nothing.
    with no_warnings():
        del s, ext
        gc.collect()
    assert len(cudamem.current_context().deallocations) == 0


def test_stream_made_after_reset_works(ref):
    cudamem.get_current_device().reset()
    s = cudamem.stream()
    assert ref.stream_ctx(int(s)) == cudamem.current_context().handle
    s.synchronize()


def test_stream_used_and_freed_in_another_thread(ref, sim):
    before = live_streams(sim)
    box = [cudamem.stream()]
    h = int(box[0])

    def use():
        s = box.pop()
        s.synchronize()
        assert s.query() is True
        assert _cudamem._parse_stream(s) == (h, True)
        assert _cudamem._parse_stream(s, device=0) == (h, True)
        del s  # the last reference goes on this thread

    in_thread(use)
    assert not box
    flush()
    assert live_streams(sim) == before


def test_stream_made_in_a_thread_used_here(ref, sim):
    s = in_thread(cudamem.stream)
    assert ref.stream_ctx(int(s)) == cudamem.current_context().handle
    s.synchronize()
    assert _cudamem._parse_stream(s) == (int(s), True)
    assert repr(s) == "<CUDA stream %d on %r>" % (int(s),
                                                   cudamem.current_context())


def test_streams_in_many_threads(sim):
    before = live_streams(sim)
    errors = []

    def work():
        try:
            for _ in range(20):
                s = cudamem.stream()
                s.synchronize()
                _cudamem._parse_stream(s)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    flush()
    assert live_streams(sim) == before


def test_fork_child_neither_uses_nor_frees(run_py):
    proc = run_py("""
        import os, sys
        import cudamem
        from cudamem import _cudamem
        from cudamem.errors import CudaDriverError

        s = cudamem.stream()
        d = cudamem.default_stream()
        pid = os.fork()
        if pid == 0:
            code = 0
            for call in (s.synchronize, d.synchronize, s.query,
                         lambda: _cudamem._parse_stream(s),
                         lambda: _cudamem._parse_stream(d),
                         cudamem.stream, cudamem.default_stream):
                try:
                    call()
                except CudaDriverError as exc:
                    if "fork" not in str(exc):
                        code = 3
                else:
                    code = 2
            assert _cudamem._parse_stream(0) == (0, False)
            del s  # a finalizer in the child does nothing
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, status
        s.synchronize()
        del s
        cudamem.current_context().deallocations.clear()
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert proc.stderr == ""


# ---------------------------------------------------------------------------
# The stream= parser.


def test_parse_zero_means_synchronous():
    for arg in (0, None, False, np.int64(0), np.uint8(0)):
        assert _cudamem._parse_stream(arg) == (0, False), arg
        assert _cudamem._parse_stream(arg, device=0) == (0, False)
        assert _cudamem._parse_stream(arg=arg, device=None) == (0, False)


def test_parse_streams_means_asynchronous():
    s = cudamem.stream()
    assert _cudamem._parse_stream(s) == (int(s), True)
    assert _cudamem._parse_stream(s, device=0) == (int(s), True)
    assert _cudamem._parse_stream(s, cudamem.list_devices()[0]) == (
        int(s), True)
    assert _cudamem._parse_stream(cudamem.default_stream()) == (0, True)
    assert _cudamem._parse_stream(cudamem.legacy_default_stream()) == (
        1, True)
    assert _cudamem._parse_stream(cudamem.per_thread_default_stream()) == (
        2, True)


def test_parse_rejects_non_zero_ints():
    for arg in (1, 2, -1, True, 2**70, np.int64(5), int(cudamem.stream())):
        with pytest.raises(ValueError, match=r"cudamem\.external_stream") as \
                info:
            _cudamem._parse_stream(arg)
        assert repr(arg) in str(info.value)


def test_parse_rejects_other_types():
    for arg in ("0", 0.0, 1.5, [], (0, 0), object(), b"", 0j):
        with pytest.raises(TypeError, match="stream must be 0, a cudamem "
                           "Stream or an object with __cuda_stream__, not "
                           "%s" % type(arg).__name__):
            _cudamem._parse_stream(arg)
    with pytest.raises(TypeError, match="missing required argument"):
        _cudamem._parse_stream()
    with pytest.raises(TypeError):
        _cudamem._parse_stream(0, 0, 0)
    with pytest.raises(TypeError):
        _cudamem._parse_stream(0, devnum=0)


def test_parse_device_argument():
    with pytest.raises(ValueError, match="device ordinal 5 out of range"):
        _cudamem._parse_stream(0, device=5)
    with pytest.raises(TypeError, match="device must be an int ordinal or "
                       "a Device, not str"):
        _cudamem._parse_stream(0, device="0")


def test_parse_foreign_streams(ref):
    s = cudamem.stream()
    h = int(s)
    assert _cudamem._parse_stream(Foreign((0, h))) == (h, True)
    assert _cudamem._parse_stream(Foreign((0, h)), device=0) == (h, True)
    assert _cudamem._parse_stream(ForeignProperty((0, h))) == (h, True)
    # Another cudamem Stream through the protocol.
    assert _cudamem._parse_stream(Foreign(s.__cuda_stream__())) == (h, True)
    # Default handles belong to no device.
    for special in (0, 1, 2):
        assert _cudamem._parse_stream(Foreign((0, special))) == (special,
                                                                  True)
    # A stream another library made in the primary context.
    raw = ref.stream_create()
    try:
        assert _cudamem._parse_stream(Foreign((0, raw))) == (raw, True)
    finally:
        ref.stream_destroy(raw)


def test_parse_bad_foreign_streams(ref):
    s = cudamem.stream()
    h = int(s)
    for value in ([0, h], (0,), (0, h, 0), None, h):
        with pytest.raises(TypeError, match="__cuda_stream__\\(\\) of "
                           "Foreign must return a \\(version, handle\\) "
                           "tuple"):
            _cudamem._parse_stream(Foreign(value))
    for value in ((0, "1"), (0, 1.0), ("0", h), (0, True), (False, h),
                  (0, None)):
        with pytest.raises(TypeError, match="must return two ints"):
            _cudamem._parse_stream(Foreign(value))
    for version in (1, -1, 2**70):
        with pytest.raises(ValueError, match="returned version %d: cudamem "
                           "understands version 0" % version):
            _cudamem._parse_stream(Foreign((version, h)))
    for handle in (-1, 2**64):
        with pytest.raises(ValueError, match="invalid stream handle %d"
                           % handle):
            _cudamem._parse_stream(Foreign((0, handle)))

    class Raises:
        def __cuda_stream__(self):
            raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError, match="boom"):
        _cudamem._parse_stream(Raises())

    class BadAttr:
        @property
        def __cuda_stream__(self):
            raise RuntimeError("attribute failed")

    with pytest.raises(RuntimeError, match="attribute failed"):
        _cudamem._parse_stream(BadAttr())


def test_parse_foreign_dead_handle(ref):
    raw = ref.stream_create()
    ref.stream_destroy(raw)
    with pytest.raises(CudaAPIError) as info:
        _cudamem._parse_stream(Foreign((0, raw)))
    assert info.value.call == "cuStreamGetCtx"


def test_parse_foreign_stream_of_a_non_primary_context(ref):
    cudamem.current_context()
    ctx = ref.create_context(0)  # pushed
    try:
        raw = ref.stream_create()
        assert ref.pop() == ctx
        with pytest.raises(ValueError, match="cudamem cannot use CUDA "
                           "stream %d: .*not a primary context" % raw):
            _cudamem._parse_stream(Foreign((0, raw)))
    finally:
        ref.destroy_context(ctx)


def test_two_devices(run_py):
    proc = run_py("""
        import cudamem
        from cudamem import _cudamem, simulator

        class Foreign:
            def __init__(self, value):
                self.value = value

            def __cuda_stream__(self):
                return self.value

        def fails(call, match):
            try:
                call()
            except ValueError as exc:
                assert match in str(exc), str(exc)
            else:
                raise SystemExit("no error: " + match)

        cudamem.select_device(1)
        s1 = cudamem.stream()
        ctx1 = cudamem.current_context()
        h1 = int(s1)
        assert s1.context is ctx1
        assert repr(s1) == "<CUDA stream %d on %r>" % (h1, ctx1), repr(s1)
        assert "of device 1>" in repr(s1)
        cudamem.select_device(0)
        s0 = cudamem.stream()
        assert s0.context.device.id == 0
        # Used from device 0's thread state: the stream's context is used.
        s1.synchronize()
        assert s1.query() is True
        assert _cudamem._parse_stream(s1, device=1) == (h1, True)
        fails(lambda: _cudamem._parse_stream(s1),
              "belongs to device 1, but the operation is on device 0")
        fails(lambda: _cudamem._parse_stream(s1, device=0),
              "belongs to device 1, but the operation is on device 0")
        fails(lambda: _cudamem._parse_stream(s0, device=1),
              "belongs to device 0, but the operation is on device 1")
        f1 = Foreign((0, h1))
        assert _cudamem._parse_stream(f1, device=1) == (h1, True)
        fails(lambda: _cudamem._parse_stream(f1, device=0),
              "(CUDA stream %d) belongs to device 1, but the operation is "
              "on device 0" % h1)
        # Default streams are any device's.
        for d in (cudamem.default_stream(), cudamem.legacy_default_stream(),
                  cudamem.per_thread_default_stream(),
                  cudamem.external_stream(1)):
            assert _cudamem._parse_stream(d, device=1)[1] is True
        assert _cudamem._parse_stream(Foreign((0, 1)), device=1) == (1, True)
        # Resetting device 1 makes only its streams stale.
        cudamem.list_devices()[1].reset()
        s0.synchronize()
        try:
            s1.synchronize()
        except cudamem.CudaDriverError as exc:
            assert "device 1" in str(exc)
        else:
            raise SystemExit("stale stream used")
        del s0, s1
        cudamem.current_context().deallocations.clear()
        cudamem.close()
        print(simulator.live())
    """, env=TWO_DEVICES)
    assert proc.returncode == 0, proc.stderr
    live = eval(proc.stdout)
    assert all(v == 0 for v in live.values()), live


# ---------------------------------------------------------------------------
# Driver failures: every stream entry point.


def _api_error(info, call, code=999):
    assert type(info.value) is CudaAPIError
    assert info.value.call == call
    assert info.value.code == code


@pytest.mark.parametrize("call, kwargs", [
    ("cuStreamCreate", {}),
    ("cuStreamCreate", {"non_blocking": True}),
    ("cuStreamCreateWithPriority", {"priority": -1}),
])
def test_create_failure(sim, call, kwargs):
    cudamem.current_context()
    before = live_streams(sim)
    sim.inject(call, "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        cudamem.stream(**kwargs)
    _api_error(info, call)
    sim.inject(call, "CUDA_ERROR_OUT_OF_MEMORY")
    with pytest.raises(CudaOutOfMemoryError):
        cudamem.stream(**kwargs)
    assert live_streams(sim) == before
    assert len(cudamem.current_context().deallocations) == 0
    cudamem.stream(**kwargs)


def test_priority_range_failure(sim):
    cudamem.current_context()
    sim.inject("cuCtxGetStreamPriorityRange", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        cudamem.Stream.priority_range()
    _api_error(info, "cuCtxGetStreamPriorityRange")
    assert cudamem.Stream.priority_range() == (0, -5)


def test_query_failure(sim):
    s = cudamem.stream()
    sim.inject("cuStreamQuery", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        s.query()
    _api_error(info, "cuStreamQuery")
    sim.inject("cuStreamQuery", "CUDA_ERROR_INVALID_HANDLE")
    with pytest.raises(CudaAPIError) as info:
        s.synchronize()
    _api_error(info, "cuStreamQuery", INVALID_HANDLE)
    assert s.query() is True


def test_query_failure_while_waiting(sim, slow_work):
    s = cudamem.stream()
    slow_work(s, 300_000)
    # The first polls see the work running; a later one fails.
    sim.inject("cuStreamQuery", "CUDA_ERROR_INVALID_VALUE", after=3)
    with pytest.raises(CudaAPIError) as info:
        s.synchronize()
    assert info.value.call == "cuStreamQuery"
    assert info.value.name == "CUDA_ERROR_INVALID_VALUE"
    sim.clear_faults()
    s.synchronize()


def test_synchronize_failure(sim):
    s = cudamem.stream()
    sim.inject("cuStreamSynchronize", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        s.synchronize()
    _api_error(info, "cuStreamSynchronize")
    sim.inject("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(CudaStickyError) as info:
        cudamem.default_stream().synchronize()
    assert info.value.call == "cuStreamSynchronize"
    # The context is poisoned until the process ends: a reset keeps it.
    with pytest.raises(CudaStickyError) as info:
        cudamem.get_current_device().reset()
    assert info.value.call == "cuStreamSynchronize"
    # In a new process (the simulator's reset) a reset makes a fresh one.
    sim.reset()
    cudamem.get_current_device().reset()
    with pytest.raises(CudaDriverError, match=STALE):
        s.synchronize()
    cudamem.stream().synchronize()


def test_get_ctx_failure(sim):
    s = cudamem.stream()
    foreign = Foreign((0, int(s)))
    sim.inject("cuStreamGetCtx", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        _cudamem._parse_stream(foreign)
    _api_error(info, "cuStreamGetCtx")
    # cudamem's own Stream needs no driver call to be parsed.
    sim.inject("cuStreamGetCtx", "CUDA_ERROR_UNKNOWN")
    assert _cudamem._parse_stream(s) == (int(s), True)
    sim.clear_faults()
    assert _cudamem._parse_stream(foreign) == (int(s), True)


def test_destroy_failure_on_clear(sim):
    ctx = cudamem.current_context()
    flush()
    before = live_streams(sim)
    streams = [cudamem.stream() for _ in range(3)]
    del streams
    assert len(ctx.deallocations) == 3
    sim.inject("cuStreamDestroy", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        ctx.deallocations.clear()
    _api_error(info, "cuStreamDestroy")
    # The failed destroy is reported and dropped; the rest stay queued.
    assert len(ctx.deallocations) == 2
    ctx.deallocations.clear()
    assert len(ctx.deallocations) == 0
    # The one the driver refused lives on until its context goes.
    assert live_streams(sim) == before + 1
    cudamem.get_current_device().reset()
    assert live_streams(sim) == before


def _fill_to_flush_threshold(ctx):
    """Queues streams until the next release flushes the queue."""
    flush()
    previous = 0
    while True:
        s = cudamem.stream()
        del s
        count = len(ctx.deallocations)
        if count < previous:  # that release flushed
            break
        previous = count
    for _ in range(previous):
        s = cudamem.stream()
        del s
    assert len(ctx.deallocations) == previous


def test_destroy_failure_in_a_finalizer_warns(sim):
    ctx = cudamem.current_context()
    before = live_streams(sim)
    _fill_to_flush_threshold(ctx)
    last = cudamem.stream()
    sim.inject("cuStreamDestroy", "CUDA_ERROR_UNKNOWN")
    with pytest.warns(CudaWarning, match="cuStreamDestroy results in "
                      "CUDA_ERROR_UNKNOWN"):
        del last
    cudamem.get_current_device().reset()
    assert live_streams(sim) == before


def test_finalizer_warning_keeps_the_exception_being_raised(sim):
    ctx = cudamem.current_context()
    before = live_streams(sim)
    _fill_to_flush_threshold(ctx)

    def key(i):
        if i == 1:
            sim.inject("cuStreamDestroy", "CUDA_ERROR_UNKNOWN")
            raise ZeroDivisionError("the key failed")
        return cudamem.stream()

    # sorted() drops the keys it made while the key's exception is set: the
    # stream's finalizer runs then, and warns without losing it.
    with pytest.warns(CudaWarning, match="cuStreamDestroy"):
        with pytest.raises(ZeroDivisionError, match="the key failed"):
            sorted(range(2), key=key)
    cudamem.get_current_device().reset()
    assert live_streams(sim) == before


def test_finalizer_warning_as_error_is_unraisable(sim):
    ctx = cudamem.current_context()
    before = live_streams(sim)
    _fill_to_flush_threshold(ctx)
    last = cudamem.stream()
    sim.inject("cuStreamDestroy", "CUDA_ERROR_UNKNOWN")
    seen = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", CudaWarning)
            del last
    finally:
        sys.unraisablehook = old_hook
    assert len(seen) == 1
    cudamem.get_current_device().reset()
    assert live_streams(sim) == before
