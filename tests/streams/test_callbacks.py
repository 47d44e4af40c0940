"""Stream callbacks (numba's Stream.add_callback and async_done): order and
arguments, the one dispatcher thread (DESIGN rule 7: no Python on a driver
thread; the stream does not wait for the callback), callbacks after the
work before them, exceptions as CudaWarning, references released, failed
adds, interpreter exit and fork, and asyncio futures.

The reference is numba's documented behaviour (callback(stream, status,
arg) once all preceding work is complete; async_done() resolves to the
stream) and the simulator: its stream delay keeps work queued, and a
sticky error makes the callbacks of a context see a failed status.
"""
import _thread
import asyncio
import gc
import sys
import textwrap
import threading
import warnings
import weakref

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaDriverError, CudaWarning
from tests.helpers.run import FORK_WARNING_OFF

pytestmark = pytest.mark.simulator

# Long enough that a loaded CI machine does not finish queued work
# before the test looks at it.
DELAY_US = 100_000
TIMEOUT = 30


class Recorder:
    """A callback that records (stream, status, arg, thread) and sets
    `done` once it has seen `expect` calls."""

    def __init__(self, expect=1):
        self.calls = []
        self.expect = expect
        self.done = threading.Event()

    def __call__(self, stream, status, arg):
        self.calls.append((stream, status, arg, threading.get_ident()))
        if len(self.calls) >= self.expect:
            self.done.set()

    def wait(self):
        assert self.done.wait(TIMEOUT), "callbacks did not run"
        return self.calls


def barrier(stream=None):
    """Waits until every callback queued on `stream` (default: the legacy
    default stream, which follows the blocking streams) so far has run on
    the dispatcher."""
    last = Recorder()
    (stream or cudamem.legacy_default_stream()).add_callback(last)
    last.wait()


@pytest.fixture
def delayed(sim):
    before = sim.get_delay_us()
    sim.set_delay_us(DELAY_US)
    yield
    sim.set_delay_us(before)
    cudamem.synchronize()


# ---------------------------------------------------------------------------
# Order, arguments, thread.


def test_order_and_arguments_on_one_stream():
    s = cudamem.stream()
    rec = Recorder(50)
    for i in range(50):
        s.add_callback(rec, i)
    calls = rec.wait()
    assert [c[2] for c in calls] == list(range(50))
    assert all(c[0] is s and c[1] == 0 for c in calls)
    threads = {c[3] for c in calls}
    assert len(threads) == 1 and threading.get_ident() not in threads
    names = [t.name for t in threading.enumerate() if t.ident in threads]
    assert names == ["cudamem-callbacks"]


def test_arg_defaults_to_none_and_keywords():
    s = cudamem.stream()
    rec = Recorder(2)
    s.add_callback(rec)
    s.add_callback(callback=rec, arg="x")
    assert [c[2] for c in rec.wait()] == [None, "x"]


def test_order_across_streams(delayed):
    streams = [cudamem.stream(non_blocking=True) for _ in range(3)]
    arrays = [cudamem.device_array(256, np.uint8) for _ in streams]
    rec = Recorder(30)
    for i in range(10):
        for k, s in enumerate(streams):
            if i % 3 == k:
                arrays[k].fill(k, stream=s)
            s.add_callback(rec, (k, i))
    calls = rec.wait()
    # Each stream's callbacks in its own order; all on one thread.
    for k, s in enumerate(streams):
        mine = [c[2][1] for c in calls if c[2][0] == k]
        assert mine == list(range(10))
        assert all(c[0] is s for c in calls if c[2][0] == k)
    assert len({c[3] for c in calls}) == 1


@pytest.mark.parametrize("make", [cudamem.default_stream,
                                  cudamem.legacy_default_stream,
                                  cudamem.per_thread_default_stream])
def test_default_streams_accept_callbacks(make):
    s = make()
    rec = Recorder()
    s.add_callback(rec, "default")
    (stream, status, arg, _), = rec.wait()
    assert (stream, status, arg) == (s, 0, "default")


def test_callback_runs_after_the_work_before_it(delayed, sim):
    """On a non-blocking stream a synchronous (legacy default stream) read
    does not wait for the stream: only the callback's place in the stream
    makes the data it reads complete. It also calls cudamem."""
    s = cudamem.stream(non_blocking=True)
    host = np.arange(2048, dtype=np.float64)
    src = cudamem.to_device(host)
    dst = cudamem.device_array_like(host)
    dst.fill(0, stream=s)
    for _ in range(3):
        dst.copy_to_device(src, stream=s)
    seen = []
    rec = Recorder()

    def read(stream, status, arg):
        seen.append(dst.copy_to_host())
        rec(stream, status, arg)

    s.add_callback(read)
    assert s.query() is False
    rec.wait()
    np.testing.assert_array_equal(seen[0], host)


def test_stream_does_not_wait_for_the_callback():
    s = cudamem.stream()
    release = threading.Event()
    rec = Recorder()

    def slow(stream, status, arg):
        release.wait(TIMEOUT)
        rec(stream, status, arg)

    s.add_callback(slow)
    ary = cudamem.device_array(16, np.uint8)
    ary.fill(3, stream=s)
    s.synchronize()  # returns while the callback still blocks
    assert not rec.done.is_set()
    assert ary.copy_to_host().tolist() == [3] * 16
    release.set()
    rec.wait()


def test_callbacks_may_use_cudamem():
    s = cudamem.stream()
    results = []
    rec = Recorder()

    def work(stream, status, arg):
        d = cudamem.to_device(arg)
        d2 = cudamem.device_array_like(arg)
        d2.copy_to_device(d, stream=stream)
        stream.synchronize()
        results.append(d2.copy_to_host())
        # Another callback from inside one.
        stream.add_callback(rec, "nested")

    s.add_callback(work, np.arange(10))
    rec.wait()
    np.testing.assert_array_equal(results[0], np.arange(10))
    assert rec.calls[0][2] == "nested"


# ---------------------------------------------------------------------------
# Exceptions.


def _raiser(stream, status, arg):
    raise ValueError("boom %s" % arg)


def test_exception_becomes_a_warning():
    s = cudamem.stream()
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        s.add_callback(_raiser, 1)
        barrier(s)
    msgs = [w for w in log if issubclass(w.category, CudaWarning)]
    assert len(msgs) == 1
    text = str(msgs[0].message)
    assert text.startswith("stream callback <function _raiser")
    assert text.endswith("raised ValueError('boom 1')")
    # The dispatcher lives on.
    barrier(s)


def test_exception_with_warnings_as_errors_goes_to_unraisablehook(
        monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    s = cudamem.stream()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.add_callback(_raiser, 2)
        barrier(s)
    assert len(seen) == 1
    assert isinstance(seen[0].exc_value, ValueError)
    assert str(seen[0].exc_value) == "boom 2"
    assert seen[0].object is _raiser
    barrier(s)


# ---------------------------------------------------------------------------
# References, failures, bad input.


class Target:
    def __call__(self, stream, status, arg):
        pass


class Arg:
    pass


def test_references_held_until_the_callback_ran(sim, delayed):
    # Half a second of queued work: a loaded machine must not finish it
    # before the first check.
    sim.set_delay_us(500_000)
    s = cudamem.stream()
    ary = cudamem.device_array(64, np.uint8)
    ary.fill(1, stream=s)
    cb, arg = Target(), Arg()
    refs = [weakref.ref(cb), weakref.ref(arg), weakref.ref(s)]
    s.add_callback(cb, arg)
    del cb, arg, s
    assert all(r() is not None for r in refs)  # queued: kept alive
    barrier()
    gc.collect()
    assert all(r() is None for r in refs)


def test_failed_add_holds_nothing(sim):
    s = cudamem.stream()
    cb, arg = Target(), Arg()
    refs = [weakref.ref(cb), weakref.ref(arg)]
    sim.inject("cuStreamAddCallback", "CUDA_ERROR_INVALID_VALUE")
    with pytest.raises(CudaAPIError) as info:
        s.add_callback(cb, arg)
    assert (info.value.code, info.value.call) == (1, "cuStreamAddCallback")
    del cb, arg, info
    gc.collect()
    assert all(r() is None for r in refs)


def test_bad_callbacks(sim):
    s = cudamem.stream()
    before = sim.stats()["calls"]["cuStreamAddCallback"]["calls"]
    for bad in (None, 1, "f"):
        with pytest.raises(TypeError, match="callback must be callable, "
                           "not %s" % type(bad).__name__):
            s.add_callback(bad)
    with pytest.raises(TypeError, match="missing required argument "
                       "'callback'"):
        s.add_callback()
    with pytest.raises(TypeError, match="at most 2 arguments"):
        s.add_callback(Target(), 1, 2)
    assert sim.stats()["calls"]["cuStreamAddCallback"]["calls"] == before


def test_stale_stream_refuses_callbacks():
    s = cudamem.stream()
    cudamem.get_current_device().reset()
    with pytest.raises(CudaDriverError, match="reset or closed"):
        s.add_callback(Target())
    with pytest.raises(CudaDriverError, match="reset or closed"):
        s.async_done()


# ---------------------------------------------------------------------------
# Interpreter exit and fork.


# Exit waits for every callback added, up to CUDAMEM_CALLBACK_EXIT_TIMEOUT
# seconds (numba leaves what the driver has not reached unrun, silently),
# then warns about each one not run, naming it; exit is clean either way.
EXIT_SCRIPT = """
    import sys, threading
    import numpy as np
    import cudamem
    from cudamem import simulator

    def write(stream, status, path):
        with open(path, "w") as f:
            f.write("ran %d" % status)

    def stuck(stream, status, arg):
        threading.Event().wait()

    done = cudamem.stream()
    done.add_callback(write, sys.argv[1] + "/done")
    done.synchronize()  # its callback reached the queue
    pending = cudamem.stream()
    ary = cudamem.device_array(64, np.uint8)
    simulator.set_delay_us(int(sys.argv[2]))
    ary.fill(1, stream=pending)
    if sys.argv[3] == "stuck":
        pending.add_callback(stuck)
    pending.add_callback(write, sys.argv[1] + "/pending")
    print("exit")
"""


def _exit_run(run_py, tmp_path, delay_us, first="", timeout=None):
    code = "import sys; sys.argv[1:] = %r\n" % [
        str(tmp_path), str(delay_us), first] + textwrap.dedent(EXIT_SCRIPT)
    proc = run_py(code, env={"CUDAMEM_CALLBACK_EXIT_TIMEOUT": timeout},
                  timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "exit\n"
    assert (tmp_path / "done").read_text() == "ran 0"
    return proc, tmp_path / "pending"


def test_exit_runs_callbacks_the_stream_has_not_reached(run_py, tmp_path):
    """The stream reaches the callback a second or two after exit began,
    within the default wait."""
    proc, pending = _exit_run(run_py, tmp_path, 500_000)
    assert pending.read_text() == "ran 0"
    assert proc.stderr == ""


def test_exit_warns_about_callbacks_not_reached_in_time(run_py, tmp_path):
    proc, pending = _exit_run(run_py, tmp_path, 3_000_000, timeout="0.2")
    assert not pending.exists()
    assert "CudaWarning: stream callback <function write at " in proc.stderr
    assert ("was not run: its stream <CUDA stream " in proc.stderr)
    assert ("had not reached it within 0.2 s of interpreter exit "
            "(CUDAMEM_CALLBACK_EXIT_TIMEOUT)") in proc.stderr


def test_exit_does_not_hang_on_a_callback_that_never_returns(run_py,
                                                            tmp_path):
    """The stuck callback is named, and the one after it on its stream
    reported as not run; exit proceeds (run_py would time out)."""
    proc, pending = _exit_run(run_py, tmp_path, 0, "stuck", timeout="0.5")
    assert not pending.exists()
    assert ("stream callback <function stuck at " in proc.stderr and
            "> did not return within 0.5 s of interpreter exit; exiting "
            "without it (CUDAMEM_CALLBACK_EXIT_TIMEOUT)" in proc.stderr)
    assert ("stream callback <function write at " in proc.stderr and
            "> was not run: a callback before it had not returned within "
            "0.5 s of interpreter exit" in proc.stderr)


@pytest.mark.parametrize("value, seconds", [
    (None, 5.0), ("", 5.0), ("soon", 5.0), ("-1", 5.0), ("nan", 5.0),
    ("inf", 5.0), ("0", 0.0), ("0.25", 0.25), ("30", 30.0)])
def test_exit_timeout_from_the_environment(monkeypatch, value, seconds):
    from cudamem import _streams
    if value is None:
        monkeypatch.delenv("CUDAMEM_CALLBACK_EXIT_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("CUDAMEM_CALLBACK_EXIT_TIMEOUT", value)
    assert _streams._exit_timeout() == seconds


def test_drain_reports_what_has_not_run(sim, delayed):
    """What exit waits for: a callback the stream has not reached, then
    one the dispatcher is in; none once they have run."""
    from cudamem import _cudamem
    assert _cudamem._dispatch_drain(TIMEOUT) == []
    release = threading.Event()
    entered = threading.Event()

    def blocker(stream, status, arg):
        entered.set()
        release.wait(TIMEOUT)

    s = cudamem.stream()
    cudamem.device_array(8, np.uint8).fill(0, stream=s)
    s.add_callback(blocker)
    assert _cudamem._dispatch_drain(0) == [(blocker, s, "unreached")]
    assert entered.wait(TIMEOUT)
    assert _cudamem._dispatch_drain(0.01) == [(blocker, s, "running")]
    # Ctrl-C ends the wait, as it ends others: the callback (which waits
    # for `release` at most half as long as this drain would) is still in.
    timer = threading.Timer(0.2, _thread.interrupt_main)
    with pytest.raises(KeyboardInterrupt):
        timer.start()
        _cudamem._dispatch_drain(2 * TIMEOUT)
    timer.join()
    assert _cudamem._dispatch_drain(0) == [(blocker, s, "running")]
    release.set()
    assert _cudamem._dispatch_drain(TIMEOUT) == []
    with pytest.raises(ValueError, match="timeout must be"):
        _cudamem._dispatch_drain(-1)
    with pytest.raises(TypeError):
        _cudamem._dispatch_drain("1")


def test_exit_with_a_busy_dispatcher(run_py):
    """A callback still running at exit finishes; exit is clean."""
    proc = run_py("""
        import time
        import cudamem

        def slow(stream, status, arg):
            time.sleep(0.3)
            print("slow done")

        s = cudamem.stream()
        s.add_callback(slow)
        s.synchronize()
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.split() == ["slow", "done"]


def test_fork_child_does_not_inherit_the_dispatcher(run_py):
    proc = run_py(FORK_WARNING_OFF + textwrap.dedent("""
        import os, threading
        import cudamem
        from cudamem.errors import CudaDriverError

        ran = threading.Event()
        s = cudamem.stream()
        s.add_callback(lambda *a: ran.set())
        assert ran.wait(30)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                s.add_callback(lambda *a: None)
            except CudaDriverError as exc:
                code = 0 if "fork" in str(exc) else 3
            else:
                code = 2
            try:
                cudamem.default_stream().add_callback(lambda *a: None)
            except CudaDriverError:
                pass
            else:
                code = 4
            if code:
                os._exit(code)
            # A normal exit: the atexit stop must not wait for a thread
            # the child does not have.
            raise SystemExit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        again = threading.Event()
        s.add_callback(lambda *a: again.set())
        assert again.wait(30)
        print("ok")
    """), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert proc.stderr == ""


def test_import_does_not_start_or_import_the_glue(run_py):
    proc = run_py("""
        import sys, threading
        import cudamem
        cudamem.stream().synchronize()
        print("cudamem._streams" in sys.modules, "asyncio" in sys.modules,
              threading.active_count())
        cudamem.stream().add_callback(lambda *a: None)
        print("cudamem._streams" in sys.modules, "asyncio" in sys.modules,
              [t.name for t in threading.enumerate()][1:])
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["False False 1",
                                        "True False ['cudamem-callbacks']"]


# ---------------------------------------------------------------------------
# async_done.


def _run(coro):
    errors = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, ctx: errors.append(ctx))
        return await coro()

    result = asyncio.run(main())
    assert errors == []
    return result


def test_async_done_outside_a_loop():
    with pytest.raises(RuntimeError, match="no running event loop"):
        cudamem.stream().async_done()


def test_async_done_resolves_to_the_stream(delayed):
    s = cudamem.stream(non_blocking=True)
    ary = cudamem.device_array(64, np.uint8)
    ary.fill(0)

    async def go():
        ary.fill(5, stream=s)
        fut = s.async_done()
        assert isinstance(fut, asyncio.Future)
        assert not fut.done()
        result = await fut
        # The legacy default stream does not wait for a non-blocking
        # one: the fill is done because the future said so.
        assert ary.copy_to_host().tolist() == [5] * 64
        return result

    assert _run(go) is s


def test_async_done_several_streams_and_futures(delayed):
    streams = [cudamem.stream(non_blocking=True) for _ in range(3)]
    arrays = [cudamem.device_array(32, np.uint8) for _ in streams]

    async def go():
        futs = []
        for k, (s, a) in enumerate(zip(streams, arrays)):
            a.fill(k, stream=s)
            futs.append(s.async_done())
            futs.append(s.async_done())  # two on one stream
        return await asyncio.gather(*futs)

    done = _run(go)
    assert done == [s for s in streams for _ in range(2)]
    for k, a in enumerate(arrays):
        assert a.copy_to_host().tolist() == [k] * 32


def test_async_done_cancelled(delayed):
    s = cudamem.stream()
    ary = cudamem.device_array(64, np.uint8)

    async def go():
        ary.fill(1, stream=s)
        fut = s.async_done()
        fut.cancel()
        with pytest.raises(asyncio.CancelledError):
            await fut
        # The callback comes later and must leave the future alone.
        after = s.async_done()
        await after
        await asyncio.sleep(0.05)
        return fut

    fut = _run(go)
    assert fut.cancelled()


def test_async_done_on_a_closed_loop(delayed):
    s = cudamem.stream()
    ary = cudamem.device_array(64, np.uint8)
    loop = asyncio.new_event_loop()

    async def start():
        ary.fill(1, stream=s)
        return s.async_done()

    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        fut = loop.run_until_complete(start())
        loop.close()  # before the stream is done
        barrier(s)
    assert [str(w.message) for w in log] == []
    assert not fut.done()


def test_async_done_of_a_failed_stream(run_py):
    """A sticky error in the context makes the stream's later callbacks
    see it as their status; the future raises instead of hanging."""
    proc = run_py("""
        import asyncio, threading
        import numpy as np
        import cudamem
        from cudamem import simulator
        from cudamem.errors import CudaAPIError, CudaStickyError

        s = cudamem.stream()
        ary = cudamem.device_array(64, np.uint8)
        statuses = []
        seen = threading.Event()

        async def main():
            simulator.set_delay_us(300_000)
            ary.fill(1, stream=s)
            fut = s.async_done()
            s.add_callback(lambda st, status, a: (statuses.append(status),
                                                  seen.set()))
            simulator.inject("cuMemAlloc", "CUDA_ERROR_ILLEGAL_ADDRESS")
            try:
                cudamem.device_array(4)
            except CudaStickyError:
                pass
            try:
                await asyncio.wait_for(fut, 30)
            except CudaAPIError as exc:
                print(exc.code, exc.name, exc.call)
                print(exc)

        asyncio.run(main())
        assert seen.wait(30)
        print(statuses)
        simulator.set_delay_us(0)
        # The driver keeps the error until the process ends: it ends here.
    """, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "700 CUDA_ERROR_ILLEGAL_ADDRESS cuStreamAddCallback"
    assert lines[1].endswith("the stream failed before its work was done")
    assert lines[2] == "[700]"
