"""Events: numba's Event (record, query, synchronize, wait, elapsed_time),
event() and event_elapsed_time(), Stream.wait_event(), stale events after
reset/close (DESIGN rule 4), deferred destruction (rule 5), waits that
Ctrl-C interrupts (rule 7) and bad input (rule 11).

The references are the simulator's: its stream delay keeps work queued
while the test looks, its event timestamps are taken after each delayed
operation ran (so they bound elapsed times from below), and its hazard
checker reports work of two streams that is not ordered.
"""
import gc
import os
import re
import warnings
import weakref

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaDriverError

pytestmark = pytest.mark.simulator

INVALID_HANDLE = 400  # CUDA_ERROR_INVALID_HANDLE
NOT_READY = 600  # CUDA_ERROR_NOT_READY
STALE = "reset or closed"
# Long enough that a loaded CI machine does not finish queued work
# before the test looks at it.
DELAY_US = 100_000
HAZARDS_ON = os.environ.get("CUDAMEM_SIM_HAZARDS", "0") not in ("", "0")
TWO_DEVICES = {"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None}


class Foreign:
    def __init__(self, stream):
        self.stream = stream

    def __cuda_stream__(self):
        return (0, int(self.stream))


def flush():
    gc.collect()
    cudamem.current_context().deallocations.clear()


@pytest.fixture
def slow(sim):
    """slow(stream, n=1): queues n fills of a small array on the stream,
    each delayed by DELAY_US while the test runs."""
    arrays = []

    def queue(stream, n=1):
        if not arrays:
            arrays.append(cudamem.device_array(256, np.uint8))
        sim.set_delay_us(DELAY_US)
        for _ in range(n):
            arrays[0].fill(7, stream=stream)

    before = sim.get_delay_us()
    yield queue
    cudamem.synchronize()
    sim.set_delay_us(before)
    arrays.clear()


@pytest.fixture
def hazards(sim):
    """The hazard checker on for the test; yields the count before."""
    sim.set_hazards(True)
    yield sim.hazard_count()
    cudamem.synchronize()
    sim.set_hazards(HAZARDS_ON)


# ---------------------------------------------------------------------------
# The type and its attributes.


def test_event_type(sim):
    before = sim.live()["events"]
    e = cudamem.event()
    assert type(e) is cudamem.Event
    assert sim.live()["events"] == before + 1
    assert e.timing is True
    assert cudamem.event(timing=False).timing is False
    assert cudamem.event(False).timing is False
    assert e.handle.value is not None and e.handle.value > 0
    assert re.fullmatch(r"<CUDA event %d on %s>" % (
        e.handle.value, re.escape(repr(cudamem.current_context()))), repr(e))
    assert weakref.ref(e)() is e
    with pytest.raises(TypeError):
        cudamem.Event()
    with pytest.raises(AttributeError):
        e.timing = False


def test_bad_arguments():
    e = cudamem.event()
    with pytest.raises(TypeError, match="stream must be 0, a cudamem Stream"):
        e.record("stream")
    with pytest.raises(ValueError, match="cannot record .*CUDA event.* on "
                       "stream 5: invalid stream 5"):
        e.record(5)
    with pytest.raises(ValueError, match="cannot wait for .* on stream 3"):
        e.wait(3)
    with pytest.raises(TypeError, match="evtend must be a cudamem Event, "
                       "not int"):
        e.elapsed_time(5)
    with pytest.raises(TypeError, match="evtstart must be a cudamem Event, "
                       "not NoneType"):
        cudamem.event_elapsed_time(None, e)
    with pytest.raises(TypeError, match="event must be a cudamem Event, "
                       "not cudamem.Stream"):
        cudamem.stream().wait_event(cudamem.stream())
    with pytest.raises(TypeError, match="unexpected keyword"):
        cudamem.event(timings=True)
    with pytest.raises(TypeError, match="missing required argument 'event'"):
        cudamem.default_stream().wait_event()


# ---------------------------------------------------------------------------
# Record, query, synchronize.


def test_never_recorded_event_has_occurred():
    e = cudamem.event()
    assert e.query() is True
    e.synchronize()  # at once


def test_record_query_synchronize(slow):
    s = cudamem.stream()
    e = cudamem.event()
    slow(s, 3)
    e.record(s)
    assert e.query() is False
    assert s.query() is False
    e.synchronize()
    assert e.query() is True
    # Everything queued before the record is done: the stream is idle.
    assert s.query() is True


def test_record_captures_only_earlier_work(slow):
    s = cudamem.stream()
    e = cudamem.event()
    e.record(s)
    slow(s, 3)
    e.synchronize()
    assert e.query() is True
    assert s.query() is False  # the later work goes on
    s.synchronize()


@pytest.mark.parametrize("kind", ["zero", "default", "legacy", "per-thread",
                                  "foreign", "keyword"])
def test_record_on_any_stream_argument(slow, kind):
    if kind == "foreign":
        stream = cudamem.stream()
        arg = Foreign(stream)
    else:
        stream = {"zero": None, "default": cudamem.default_stream(),
                  "legacy": cudamem.legacy_default_stream(),
                  "per-thread": cudamem.per_thread_default_stream(),
                  "keyword": cudamem.stream()}[kind]
        arg = 0 if stream is None else stream
    slow(0 if stream is None else stream, 2)
    e = cudamem.event()
    if kind == "keyword":
        e.record(stream=arg)
    else:
        e.record(arg)
    assert e.query() is False
    e.synchronize()
    assert e.query() is True


def test_record_again_moves_the_record_point(slow):
    s = cudamem.stream()
    e = cudamem.event()
    e.record(s)
    e.synchronize()
    slow(s, 2)
    e.record(s)
    assert e.query() is False
    e.synchronize()
    assert s.query() is True


# ---------------------------------------------------------------------------
# Elapsed time.


def test_elapsed_time_covers_the_work_between(slow):
    s = cudamem.stream()
    start, end = cudamem.event(), cudamem.event()
    start.record(s)
    slow(s, 3)
    end.record(s)
    end.synchronize()
    ms = start.elapsed_time(end)
    assert type(ms) is float
    # The simulator stamps a record after its own delay, and each op on a
    # stream sleeps at least the delay after the previous one ran: the
    # three fills and the end record lie between the two stamps.
    assert ms >= 4 * DELAY_US / 1000 * 0.999
    assert cudamem.event_elapsed_time(start, end) == ms
    assert cudamem.event_elapsed_time(evtstart=start, evtend=end) == ms
    assert end.elapsed_time(evtend=start) == -ms


def test_elapsed_time_of_back_to_back_records_is_small_and_ordered():
    s = cudamem.stream()
    events = [cudamem.event() for _ in range(4)]
    for e in events:
        e.record(s)
    events[-1].synchronize()
    times = [events[0].elapsed_time(e) for e in events]
    assert times[0] == 0.0
    assert times == sorted(times)


@pytest.mark.parametrize("which", ["evtstart", "evtend"])
def test_elapsed_time_without_timing(which):
    timed, untimed = cudamem.event(), cudamem.event(timing=False)
    timed.record()
    untimed.record()
    untimed.synchronize()
    timed.synchronize()
    pair = (untimed, timed) if which == "evtstart" else (timed, untimed)
    with pytest.raises(CudaAPIError) as info:
        cudamem.event_elapsed_time(*pair)
    exc = info.value
    assert type(exc) is CudaAPIError
    # The driver's own code and call, and why.
    assert (exc.code, exc.call) == (INVALID_HANDLE, "cuEventElapsedTime")
    assert exc.hint.startswith("%s was made with timing=False" % which)
    assert str(exc).startswith("[400] Call to cuEventElapsedTime results in "
                               "CUDA_ERROR_INVALID_HANDLE: %s was made with "
                               "timing=False" % which)


def test_elapsed_time_never_recorded():
    """numba raises the driver's error; cudamem too (a CudaAPIError, as
    code that catches numba's expects), with a hint saying which event
    was never recorded."""
    recorded, fresh = cudamem.event(), cudamem.event()
    recorded.record()
    recorded.synchronize()
    for pair, which in (((fresh, recorded), "evtstart"),
                        ((recorded, fresh), "evtend")):
        with pytest.raises(CudaAPIError) as info:
            pair[0].elapsed_time(pair[1])
        assert info.value.code == INVALID_HANDLE
        assert info.value.hint == ("%s was never recorded; call its record() "
                                   "first" % which)


def test_elapsed_time_before_completion(slow):
    s = cudamem.stream()
    start, end = cudamem.event(), cudamem.event()
    start.record(s)
    slow(s, 2)
    end.record(s)
    with pytest.raises(CudaAPIError) as info:
        start.elapsed_time(end)
    assert info.value.code == NOT_READY
    assert "evtend.synchronize()" in str(info.value)
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_api_error_hint_pickles():
    import pickle
    exc = CudaAPIError(400, "cuEventElapsedTime", "CUDA_ERROR_INVALID_HANDLE",
                       "evtend was never recorded")
    back = pickle.loads(pickle.dumps(exc))
    assert str(back) == str(exc) and back.hint == exc.hint
    assert CudaAPIError(1, "cuX").hint is None


# ---------------------------------------------------------------------------
# Waits between streams.


def _copy_through_two_streams(order):
    """Writes `host` into `mid` on stream a (slowly), then copies `mid`
    into `out` on stream b, ordered by `order(event_on_a, b)`; returns
    what `out` holds and the expected data."""
    a = cudamem.stream(non_blocking=True)
    b = cudamem.stream(non_blocking=True)
    host = np.arange(4096, dtype=np.float64)
    mid = cudamem.device_array_like(host)
    out = cudamem.device_array_like(host)
    mid.fill(0, stream=a)
    mid.copy_to_device(host, stream=a)
    e = cudamem.event(timing=False)
    e.record(a)
    order(e, b)
    out.copy_to_device(mid, stream=b)
    b.synchronize()
    a.synchronize()
    return out.copy_to_host(), host


@pytest.mark.parametrize("how", ["wait_event", "wait", "wait keyword"])
def test_wait_orders_two_streams(sim, hazards, how):
    def order(e, b):
        if how == "wait_event":
            b.wait_event(e)
        elif how == "wait":
            e.wait(b)
        else:
            e.wait(stream=b)

    with sim.delay(DELAY_US):
        got, want = _copy_through_two_streams(order)
    np.testing.assert_array_equal(got, want)
    assert sim.hazard_count() == hazards, sim.last_hazard()


@pytest.mark.expect_hazards
def test_without_wait_the_checker_reports(sim, hazards):
    with sim.delay(DELAY_US):
        _copy_through_two_streams(lambda e, b: None)
    assert sim.hazard_count() > hazards
    assert "cuMemcpyDtoDAsync" in sim.last_hazard()


def test_wait_on_the_default_stream(sim, hazards):
    """wait() with no stream: the legacy default stream waits."""
    a = cudamem.stream(non_blocking=True)
    host = np.arange(512, dtype=np.int32)
    mid = cudamem.device_array_like(host)
    with sim.delay(DELAY_US):
        mid.copy_to_device(host, stream=a)
        e = cudamem.event()
        e.record(a)
        e.wait()
        got = mid.copy_to_host()  # synchronous, on the default stream
    np.testing.assert_array_equal(got, host)
    assert sim.hazard_count() == hazards, sim.last_hazard()


# ---------------------------------------------------------------------------
# Lifetime: deferred destruction, stale events, Ctrl-C, fork.


def test_dropped_event_is_queued_then_destroyed(sim):
    before = sim.live()["events"]
    ctx = cudamem.current_context()
    ctx.deallocations.clear()
    e = cudamem.event()
    e.record()
    del e
    gc.collect()
    assert len(ctx.deallocations) == 1
    assert sim.live()["events"] == before + 1
    ctx.deallocations.clear()
    assert sim.live()["events"] == before


def test_event_freed_while_deferred(sim):
    before = sim.live()["events"]
    with cudamem.defer_cleanup():
        e = cudamem.event()
        del e
        gc.collect()
        cudamem.current_context().deallocations.clear()
        assert sim.live()["events"] == before + 1
    flush()
    assert sim.live()["events"] == before


@pytest.mark.parametrize("how", ["close", "reset"])
def test_stale_events(sim, how):
    e = cudamem.event()
    other = cudamem.event()
    e.record()
    s = cudamem.default_stream()
    if how == "close":
        cudamem.close()
    else:
        cudamem.get_current_device().reset()
    # Every event went with the context (synchronize()'s probe too).
    assert sim.live()["events"] == 0
    fresh = cudamem.event()
    # The lambdas run before the `del` below (ruff's F821 sees the del).
    calls = [e.record, e.query, e.synchronize, e.wait,
             lambda: e.elapsed_time(other),  # noqa: F821
             lambda: fresh.elapsed_time(e),  # noqa: F821
             lambda: s.wait_event(e)]  # noqa: F821
    for call in calls:
        with pytest.raises(CudaDriverError, match=STALE) as info:
            call()
        assert str(info.value).startswith(
            "CUDA event %d of device 0 cannot be used" % e.handle.value)
    assert repr(e) == ("<CUDA event %d on device 0 (its context was reset "
                       "or closed)>" % e.handle.value)
    assert e.timing is True
    # Dropping a stale event is silent and queues nothing.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del e, other
        gc.collect()
    assert len(cudamem.current_context().deallocations) == 0
    del fresh
    flush()
    assert sim.live()["events"] == 0


def test_event_made_after_reset_works():
    cudamem.get_current_device().reset()
    e = cudamem.event()
    e.record()
    e.synchronize()
    assert e.query() is True


def test_ctrl_c_interrupts_event_synchronize(run_py):
    proc = run_py("""
        import signal, threading, time
        import numpy as np
        import cudamem
        from cudamem import simulator

        s = cudamem.stream()
        a = cudamem.device_array(64, np.uint8)
        simulator.set_delay_us(1_500_000)
        a.fill(1, stream=s)
        e = cudamem.event()
        e.record(s)
        main = threading.main_thread().ident

        def interrupt():
            time.sleep(0.2)
            signal.pthread_kill(main, signal.SIGINT)

        threading.Thread(target=interrupt).start()
        try:
            e.synchronize()
        except KeyboardInterrupt:
            print("interrupted")
        else:
            raise SystemExit("synchronize() was not interrupted")
        assert e.query() is False  # the work goes on
        simulator.set_delay_us(0)
        e.synchronize()
        assert e.query() is True
        del e, a, s
        cudamem.current_context().deallocations.clear()
        cudamem.current_context().memory_manager.deallocations.clear()
        cudamem.close()
        print(simulator.live()["events"])
    """, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["interrupted", "0"]


def test_fork_child_cannot_use_events(run_py):
    proc = run_py("""
        import os
        import cudamem
        from cudamem.errors import CudaDriverError

        e = cudamem.event()
        pid = os.fork()
        if pid == 0:
            code = 0
            for call in (e.record, e.query, e.synchronize, e.wait,
                         cudamem.event):
                try:
                    call()
                except CudaDriverError as exc:
                    if "fork" not in str(exc):
                        code = 3
                else:
                    code = 2
            del e  # a finalizer in the child does nothing
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, status
        e.record()
        e.synchronize()
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert proc.stderr == ""


def test_events_and_streams_of_two_devices(run_py):
    proc = run_py("""
        import numpy as np
        import cudamem
        from cudamem import simulator

        e0 = cudamem.event()
        with cudamem.gpus[1]:
            s1 = cudamem.stream()
            e1 = cudamem.event()
            e1.record(s1)  # its own device's stream
            e1.synchronize()
            assert "device 1" in repr(e1)
        e0.record()
        e0.synchronize()
        errors = []
        # A wait takes an event of another device (cuStreamWaitEvent
        # does); tests/devices/test_multi_device_order.py checks the ordering.
        e0.wait(s1)
        s1.wait_event(e0)
        for call in (lambda: e0.record(s1),
                     lambda: e0.elapsed_time(e1),
                     lambda: cudamem.event_elapsed_time(e1, e0)):
            try:
                call()
            except ValueError as exc:
                errors.append(str(exc))
            else:
                raise SystemExit("no error")
        for msg in errors:
            print(msg)
        # Device 1's event works from device 0's thread: its own context.
        e1.record(s1)
        e1.synchronize()
        s1.wait_event(e1)
        del e0, e1, s1
        cudamem.close()
        print(simulator.live()["events"])
    """, env=TWO_DEVICES)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "0"
    rec, el1, el2 = lines[:3]
    assert re.match(r"cannot record <CUDA event \d+ on <CUDA context \S+ of "
                    r"device 0>> on stream <CUDA stream \d+ on <CUDA "
                    r"context \S+ of device 1>>: .*belongs to device 1, "
                    r"but the operation is on device 0", rec), rec
    assert re.match(r"cannot time <CUDA event .* device 0>> against <CUDA "
                    r"event .* device 1>>: the events belong to devices 0 "
                    r"and 1", el1), el1
    assert "devices 1 and 0" in el2
