"""Threads under load: many threads, each on its own stream, mixing
allocations, copies, views, events, callbacks and frees while the garbage
collector runs; and a thread blocked in a wait that neither holds the GIL nor
ignores Ctrl-C. Other files test single thread-safety facts; this one runs them
all at once. The data is checked against NumPy, leaks by the autouse fixture,
races by CUDAMEM_SIM_HAZARDS=1 (`make test-stress`).

CUDAMEM_STRESS_ITERS sets the iterations per thread (default 60).
"""
import gc
import os
import threading

import numpy as np
import pytest

import cudamem

THREADS = 8
ITERS = int(os.environ.get("CUDAMEM_STRESS_ITERS", "60"))
DTYPES = (np.int8, np.int32, np.float64, np.complex64)


class Cycle:
    """A reference cycle holding an array: only the collector frees it."""

    def __init__(self, array):
        self.array = array
        self.me = self


def _collector(stop, counts):
    # A pause between collections: a loop that takes the GIL back at once
    # leaves each worker up to a switch interval (5 ms) to regain it after
    # every driver call.
    while not stop.wait(0.001):
        gc.collect()
        counts.append(1)


def _work(k, errors, callbacks):
    """One thread's mixed workload on its own stream; every result is
    compared with the same operation on NumPy."""
    rng = np.random.default_rng(k)
    s = cudamem.stream()
    seen = []

    def on_done(stream, status, arg):
        seen.append((status, arg))

    try:
        for i in range(ITERS):
            dtype = DTYPES[(k + i) % len(DTYPES)]
            shape = (int(rng.integers(1, 40)), int(rng.integers(1, 40)))
            host = (rng.integers(-100, 100, shape)).astype(dtype)
            dev = cudamem.to_device(host, stream=s)
            view = dev[::2, ::-1]
            other = cudamem.device_array(view.shape, dtype, stream=s)
            other.copy_to_device(view, stream=s)
            if i % 3 == 0:
                out = cudamem.pinned_array(other.shape, dtype)
                other.copy_to_host(out, stream=s)
            else:
                out = other.copy_to_host(stream=s)
            evt = cudamem.event(timing=False)
            evt.record(s)
            s.add_callback(on_done, i)
            if i % 4 == 0:
                Cycle(dev)  # freed later by the collector thread
            dev.fill(7, stream=s)
            tail = cudamem.pinned_array(dev.shape, dtype)
            dev.copy_to_host(tail, stream=s)
            evt.synchronize()  # `out` is complete
            s.synchronize()  # `tail` is complete
            if not np.array_equal(out, host[::2, ::-1]):
                errors.append((k, i, "copy"))
            if not (tail == 7).all():
                errors.append((k, i, "fill"))
            del dev, view, other, evt
        # Callbacks run in order on one thread: the last one done means
        # all are.
        last = threading.Event()
        s.add_callback(lambda *args: last.set())
        if not last.wait(60):
            errors.append((k, "callbacks did not run"))
        callbacks[k] = seen
    except BaseException as exc:  # reported by the main thread
        errors.append((k, repr(exc)))


def test_threads_gc_and_streams():
    errors = []
    callbacks = {}
    stop = threading.Event()
    collected = []
    gc_thread = threading.Thread(target=_collector, args=(stop, collected))
    workers = [threading.Thread(target=_work, args=(k, errors, callbacks))
               for k in range(THREADS)]
    gc_thread.start()
    try:
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    finally:
        stop.set()
        gc_thread.join()
    assert errors == []
    assert collected  # the collector ran during the work
    # Every callback ran, after its stream's work, in queue order.
    for k in range(THREADS):
        assert callbacks[k] == [(0, i) for i in range(ITERS)], k


# A thread blocked in a wait: the others go on using cudamem, and Ctrl-C
# (here _thread.interrupt_main, raised in the main thread) ends the wait.
BLOCKED = """
import _thread, ctypes, threading
import numpy as np
import cudamem
from cudamem import simulator

lib = ctypes.CDLL(simulator.library_path())
ptr = ctypes.c_uint64()
cudamem.current_context()
assert lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(64)) == 0
s = cudamem.stream()
dev = cudamem.device_array(8, np.int64, stream=s)
evt = cudamem.event()

def slow():
    # 300 ms of work on s, until the wait is over: the other thread
    # queues no stream work, so the delay does not hold it up.
    simulator.set_delay_us(300_000)
    assert lib.cuMemsetD8Async(ptr, ctypes.c_ubyte(1), ctypes.c_size_t(64),
                               ctypes.c_void_p(int(s))) == 0
    evt.record(s)

def other(entering, out):
    entering.wait()
    # Driver calls that queue no stream work: allocations, pinned memory,
    # events (kept: a device free would wait for the context's work, as
    # the driver's does), then an interrupt while the main thread waits.
    kept = []
    for i in range(50):
        kept.append((cudamem.device_array(1000 + i, np.uint8),
                     cudamem.pinned_array(1000 + i, np.uint8),
                     cudamem.event()))
    out.append(s.query())
    _thread.interrupt_main()

for name, wait in [("stream", s.synchronize), ("event", evt.synchronize),
                   ("array", lambda: np.asarray(dev)),
                   ("device", cudamem.synchronize),
                   ("context", cudamem.current_context().synchronize)]:
    slow()
    out = []
    entering = threading.Event()
    t = threading.Thread(target=other, args=(entering, out))
    t.start()
    try:
        entering.set()
        wait()
    except KeyboardInterrupt:
        result = "interrupted"
    else:
        result = "not interrupted"
    t.join()
    print(name, result, out)
    simulator.set_delay_us(0)
    s.synchronize()
assert lib.cuMemFree_v2(ptr) == 0
"""


@pytest.mark.simulator
def test_blocked_wait_lets_others_run_and_is_interrupted(run_py):
    proc = run_py(BLOCKED, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    # While the main thread waited, the other made 50 rounds of driver
    # calls and found the work unfinished.
    assert proc.stdout.splitlines() == [
        "%s interrupted [False]" % name
        for name in ("stream", "event", "array", "device", "context")]
