"""Small operations on idle streams cost no wake-up (issue 23), seen
through cudamem: an event recorded on a stream with nothing before it is
complete when record() returns, as on a GPU, and no stream worker thread
is started for it; work before it, the stream delay, the legacy default
stream's implicit synchronization and injected faults are honoured as
before. Idle streams hold no worker thread: many live streams cost few.
tests/c/test_sim_event.c and test_sim_stream.c cover the driver-level
rules."""
import os
import resource
import time

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError

pytestmark = pytest.mark.simulator

DELAY_US = 100_000  # keeps queued work queued while the test looks


def threads():
    return len(os.listdir("/proc/self/task"))


def workers():
    """The simulator's stream worker threads in this process."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read() == "cusim-stream\n"
        except OSError:
            pass  # the thread ended meanwhile
    return n


def idle_streams():
    return [cudamem.stream(), cudamem.default_stream(),
            cudamem.legacy_default_stream(),
            cudamem.per_thread_default_stream()]


def test_record_on_idle_stream_done_at_once(sim):
    streams = idle_streams()
    e = cudamem.event()
    # cudamem's own waits may hand off to a thread of its own: started
    # here, before the count.
    cudamem.synchronize()
    for s in streams:
        s.synchronize()
    e.synchronize()
    before = threads()
    for _ in range(50):
        for s in streams:
            e.record(s)
            assert e.query()
            e.synchronize()
            s.synchronize()
        cudamem.synchronize()
    assert threads() == before


def test_delay_keeps_record_pending(sim):
    s = cudamem.stream()
    e = cudamem.event()
    with sim.delay(DELAY_US):
        e.record(s)
        assert not e.query()
    e.synchronize()
    assert e.query()


def test_record_after_work_waits_for_it(sim):
    s = cudamem.stream()
    first, second = cudamem.event(), cudamem.event()
    a = cudamem.device_array(256, np.uint8)
    first.record(s)
    # The delay is read when an operation starts: on until both have run.
    with sim.delay(DELAY_US):
        a.fill(3, stream=s)
        second.record(s)
        assert first.query()
        assert not second.query()
        second.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(),
                                  np.full(256, 3, np.uint8))
    # Queued after the fill, the second record is stamped after its delay.
    assert first.elapsed_time(second) >= DELAY_US / 1000


def test_legacy_record_waits_for_blocking_stream(sim):
    blocking = cudamem.stream()
    e = cudamem.event()
    a = cudamem.device_array(256, np.uint8)
    with sim.delay(DELAY_US):
        a.fill(5, stream=blocking)
        e.record(cudamem.legacy_default_stream())
        assert not e.query()
        e.synchronize()
        assert blocking.query()
    np.testing.assert_array_equal(a.copy_to_host(),
                                  np.full(256, 5, np.uint8))


def test_elapsed_between_inline_records(sim):
    s = cudamem.stream()
    start, end = cudamem.event(), cudamem.event()
    start.record(s)
    time.sleep(0.02)
    end.record(s)
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 20.0
    assert cudamem.event_elapsed_time(start, end) >= 20.0


def test_injected_fault_records_nothing(sim):
    s = cudamem.stream()
    e = cudamem.event()
    sim.inject("cuEventRecord", "CUDA_ERROR_INVALID_VALUE")
    try:
        with pytest.raises(CudaAPIError, match="cuEventRecord") as info:
            e.record(s)
    finally:
        sim.clear_faults()
    assert info.value.name == "CUDA_ERROR_INVALID_VALUE"
    e.record(s)
    assert e.query()
    assert e.elapsed_time(e) == 0.0


def test_many_live_streams_few_workers(sim):
    n = 10_000
    streams = [cudamem.stream() for _ in range(n)]
    d = cudamem.device_array((n, 4), np.int32)
    host = np.arange(n * 4, dtype=np.int32).reshape(n, 4)
    # A stream with work holds a worker: a hundred at a time bounds the
    # threads (the sanitizer runs have limits of their own).
    for i, s in enumerate(streams):
        d[i].copy_to_device(host[i], stream=s)
        if i % 100 == 99:
            cudamem.synchronize()
    cudamem.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), host)
    # All still alive: the simulator keeps at most 16 workers parked,
    # and one exiting is gone soon.
    deadline = time.monotonic() + 10
    while workers() > 16 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert workers() <= 16
    assert all(s.query() for s in streams)
    del streams


def voluntary_switches():
    """Voluntary context switches of every thread of the process so far,
    ended ones included: one per wait that slept."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def test_a_chain_of_streams_wakes_each_worker_for_its_own_wait(sim):
    # Each stream waits for the one before it: all n workers wait at once
    # while the first op sleeps. A worker is woken by the completion it
    # waits for, not by every completion: n waits cost about n wake-ups,
    # where a wake-up of every waiting worker per completion costs n^2/2.
    n = 200
    streams = [cudamem.stream() for _ in range(n)]
    d = cudamem.device_array((n, 4), np.int32)
    host = cudamem.pinned_array((n, 4), np.int32)
    host[:] = np.arange(n * 4, dtype=np.int32).reshape(n, 4)
    before = voluntary_switches()
    with sim.delay(DELAY_US):
        done = cudamem.event()
        for i, s in enumerate(streams):
            if i:
                done.wait(s)
            d[i].copy_to_device(host[i], stream=s)
            done = cudamem.event()
            done.record(s)
        # The first copy is sleeping: every later one is waiting for it.
        assert not streams[-1].query()
    # The delay is read when an op starts: the rest run without it.
    cudamem.synchronize()
    switches = voluntary_switches() - before
    np.testing.assert_array_equal(d.copy_to_host(), host)
    # About 5n here; the old wake-up of every waiter made 26,000.
    assert switches < 20 * n, switches
