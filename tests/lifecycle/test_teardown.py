"""Teardown under use: close() and Device.reset() while other threads copy wait
for the calls those threads have in flight, and the threads see only
CudaDriverError (a call refused during the teardown, or an object made before
it), never a raw driver error from a destroyed context or freed memory, nor a
crash; a copy that succeeds is right. Host access to managed and write-combined
memory that a reset freed raises instead of crashing. The racing cases run in a
fresh interpreter.
"""
import json
import re
import threading

import numpy as np
import pytest

import cudamem
from cudamem import simulator

pytestmark = pytest.mark.simulator

# Threads copying in a loop with to_device, copy_to_host and assignment
# (host to device, device to device), synchronously and on a stream
# waited for through an event and the stream, while the main thread tears
# down.
RACE = """
    import json, sys, threading, time
    import numpy as np
    import cudamem
    from cudamem import simulator

    how = sys.argv[1] if len(sys.argv) > 1 else %r
    stop = threading.Event()
    seen = []
    wrong = []
    copies = [0]

    def work(k):
        a = np.arange(4096, dtype=np.float64) + k
        while not stop.is_set():
            try:
                d = cudamem.to_device(a)
                h = d.copy_to_host()
                e = cudamem.device_array_like(d)
                e[:] = a[::-1]
                d[:] = e
                back = d.copy_to_host()
                if not (np.array_equal(h, a) and
                        np.array_equal(back, a[::-1])):
                    wrong.append(k)
                # The same on a stream, with polled waits on an event and
                # on the stream.
                s = cudamem.stream()
                ds = cudamem.to_device(a, stream=s)
                # Pageable: a live pinned array would keep the context
                # past close(), and with it what close() forgets.
                hs = ds.copy_to_host(stream=s)
                done = cudamem.event()
                done.record(s)
                done.synchronize()
                s.synchronize()
                if not np.array_equal(hs, a):
                    wrong.append(k)
                copies[0] += 1
            except Exception as exc:
                seen.append([type(exc).__name__,
                             [c.__name__ for c in type(exc).__mro__],
                             str(exc)])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for i in range(40):
        time.sleep(0.005)
        if how == "close":
            cudamem.close()
        else:
            cudamem.get_current_device().reset()
    stop.set()
    for t in threads:
        t.join()
    # Nothing a racing call made is left behind once the arrays are gone.
    cudamem.current_context().deallocations.clear()
    cudamem.current_context().memory_manager.deallocations.clear()
    print(json.dumps({"seen": seen, "wrong": wrong, "copies": copies[0],
                      "live": simulator.live()}))
"""


@pytest.mark.parametrize("how", ["close", "reset"])
def test_teardown_while_threads_copy(run_py, how):
    proc = run_py(RACE % how, env={"CUDAMEM_SIM_DELAY_US": "200"},
                  timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["wrong"] == []
    assert out["copies"] > 0
    for name, mro, message in out["seen"]:
        assert "CudaDriverError" in mro, (name, message)
        # Refused or stale, in cudamem's words: no raw driver error.
        assert "CudaAPIError" not in mro, (name, message)
        assert "CUDA_ERROR" not in message, message
    assert out["live"]["device_allocations"] == 0
    assert out["live"]["device_bytes"] == 0


def _managed():
    a = cudamem.managed_array(8, dtype=np.float64)
    a[:] = np.arange(8.0)
    return a


def _write_combined():
    a = cudamem.mapped_array(8, dtype=np.float64, wc=True)
    a[:] = np.arange(8.0)
    return a


HOST_ACCESS = {
    "repr": repr,
    "str": str,
    "index": lambda a: a[0],
    "slice": lambda a: a[2:4],
    "assign": lambda a: a.__setitem__(0, 1.0),
    "iterate": list,
    "copy_to_host": lambda a: a.copy_to_host(),
    "cai": lambda a: a.__cuda_array_interface__,
    "dlpack": lambda a: a.__dlpack__(),
}


@pytest.mark.parametrize("access", sorted(HOST_ACCESS))
@pytest.mark.parametrize("make", [_managed, _write_combined],
                         ids=["managed", "write-combined"])
def test_host_access_after_reset_raises(make, access):
    a = make()
    view = a[1:5]
    # Live memory reads as NumPy's array of the same values.
    np.testing.assert_array_equal(np.asarray(view), np.arange(1.0, 5.0))
    assert repr(a) == repr(np.arange(8.0)).replace("array", type(a).__name__)
    cudamem.get_current_device().reset()
    for arr in (a, view):
        # Every message names the reset.
        with pytest.raises(cudamem.CudaDriverError, match="reset"):
            HOST_ACCESS[access](arr)


def test_managed_array_survives_close():
    a = _managed()
    cudamem.close()
    # close() leaves managed memory valid while the array lives.
    np.testing.assert_array_equal(a[:], np.arange(8.0))
    assert list(a) == list(np.arange(8.0))


def test_mapped_array_host_side_survives_reset():
    a = cudamem.mapped_array(8, dtype=np.float64)
    a[:] = np.arange(8.0)
    cudamem.get_current_device().reset()
    # cudamem's own pages: the host side stays, only the device side ends.
    np.testing.assert_array_equal(a[:], np.arange(8.0))
    assert str(a) == str(np.arange(8.0))
    with pytest.raises(cudamem.CudaDriverError, match="was reset"):
        a.__cuda_array_interface__


def test_array_made_before_reset_is_refused_not_reused():
    d = cudamem.to_device(np.arange(16.0))
    cudamem.get_current_device().reset()
    fresh = cudamem.to_device(np.full(16, 7.0))
    with pytest.raises(cudamem.CudaDriverError, match="reset or closed"):
        d[:] = np.zeros(16)
    np.testing.assert_array_equal(fresh.copy_to_host(), np.full(16, 7.0))
    assert simulator.live()["device_allocations"] >= 1


def test_fresh_calls_after_another_threads_reset():
    # A Context looked at before another thread's reset is stale, but
    # calls that make new objects afterwards work in the fresh context.
    ctx = cudamem.current_context()
    dev = cudamem.get_current_device()
    t = threading.Thread(target=dev.reset)
    t.start()
    t.join()
    with pytest.raises(cudamem.CudaDriverError, match="reset or closed"):
        ctx.synchronize()
    d = cudamem.to_device(np.arange(6.0))
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(6.0))


def test_wait_ended_by_another_threads_reset():
    # The reset drains the stream's delayed work before it destroys the
    # context, so the waiting thread is polling by then: a poll during
    # the teardown is refused, and one after it does not query the
    # destroyed stream.
    s = cudamem.stream()
    d = cudamem.device_array(1024, np.uint8, stream=s)
    started = threading.Event()
    box = {}

    def wait():
        started.set()
        try:
            s.synchronize()
        except Exception as exc:  # handed to the main thread
            box["error"] = exc

    with simulator.delay(300_000):
        d.fill(1, stream=s)
        waiter = threading.Thread(target=wait)
        waiter.start()
        started.wait()
        cudamem.get_current_device().reset()
        waiter.join()
    assert isinstance(box.get("error"), cudamem.CudaDriverError), box
    assert "CUDA_ERROR" not in str(box["error"])
    assert re.search("another thread (is resetting or closing|during this "
                     "wait)", str(box["error"]))


def test_call_during_a_teardown_is_refused():
    # A synchronize in flight holds the context while the delayed work
    # runs, and the reset drains that work: meanwhile a new call is
    # refused, naming the teardown.
    s = cudamem.stream()
    d = cudamem.device_array(1024, np.uint8, stream=s)
    dev = cudamem.get_current_device()
    refused, box = [], {}

    def sync():
        try:
            cudamem.synchronize()
        except Exception as exc:  # handed to the main thread
            box["error"] = exc

    with simulator.delay(300_000):
        d.fill(1, stream=s)
        syncer = threading.Thread(target=sync)
        syncer.start()
        resetter = threading.Thread(target=dev.reset)
        resetter.start()
        while resetter.is_alive() and not refused:
            try:
                cudamem.current_context().get_memory_info()
            except cudamem.CudaDriverError as exc:
                refused.append(str(exc))
        resetter.join()
        syncer.join()
    assert refused, "no call was refused during the reset"
    assert re.search("another thread is resetting or closing|reset or "
                     "closed", refused[0])
    # The synchronize in flight finished, or ended naming the reset.
    assert box.get("error") is None or (
        isinstance(box["error"], cudamem.CudaDriverError) and
        "CUDA_ERROR" not in str(box["error"]))
    # Afterwards the fresh context works.
    np.testing.assert_array_equal(
        cudamem.to_device(np.arange(4)).copy_to_host(), np.arange(4))


# A signal handler that resets the device runs inside the staged copy's
# poll for signals, while the copy holds the context: the reset is
# refused (it would wait for itself), and the copy stops with that error.
RESET_FROM_HANDLER = """
    import json, signal, threading, time
    import numpy as np
    import cudamem
    from cudamem import simulator

    refused = []

    def handler(signum, frame):
        try:
            cudamem.get_current_device().reset()
        except cudamem.CudaDriverError as exc:
            refused.append(str(exc))
            raise

    signal.signal(signal.SIGUSR1, handler)
    n = 64 * (16 << 10)
    src = np.arange(n, dtype=np.uint8)
    d = cudamem.to_device(np.zeros(n, np.uint8))
    simulator.reset()

    def kick():
        # Once the first chunk is queued: the main thread is in the copy.
        while simulator.stats()["calls"]["cuMemcpyHtoDAsync"]["calls"] == 0:
            time.sleep(0.001)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    kicker = threading.Thread(target=kick)
    with simulator.delay(20000):
        kicker.start()
        try:
            d.copy_to_device(src)
            result = ["finished", ""]
        except Exception as exc:
            result = [type(exc).__name__, str(exc)]
        kicker.join()
    # The context is still there and works.
    d.copy_to_device(src)
    print(json.dumps({"refused": refused, "result": result,
                      "exact": bool((d.copy_to_host() == src).all())}))
"""


def test_reset_from_a_signal_handler_inside_a_copy_is_refused(run_py):
    proc = run_py(RESET_FROM_HANDLER,
                  env={"CUDAMEM_STAGING_THRESHOLD": str(64 << 10),
                       "CUDAMEM_STAGING_CHUNK": str(16 << 10)})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["refused"] and "from inside an operation" in out["refused"][0]
    assert out["result"] == ["CudaDriverError", out["refused"][0]]
    assert out["exact"]
