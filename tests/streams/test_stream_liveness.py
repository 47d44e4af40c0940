"""Stream liveness is decided per stream: releasing one stream changes
nothing for work remembered on others, and work remembered on a released
stream is ordered by an event its release recorded, never by a
synchronize of the whole context (core/stream.c's table of live streams,
core/memory.c's pending set). Checked with the simulator's call counters
and its hazard checker, with the work held queued by the simulated
delay."""
import warnings

import numpy as np
import pytest

import cudamem
from tests.helpers.interop import Producer


def calls(sim):
    return {k: v["calls"] for k, v in sim.stats()["calls"].items()}


N = 4096


def destroy_unrelated_stream():
    temp = cudamem.stream()
    del temp
    cudamem.current_context().deallocations.clear()


def test_an_unrelated_stream_costs_nothing(hazards):
    sim = hazards
    a, b, own = cudamem.stream(), cudamem.stream(), cudamem.stream()
    d = cudamem.device_array(2 * N, stream=own)
    with sim.delay(200_000):
        d[:N].copy_to_device(np.full(N, 1.0), stream=a)
        d[N:].copy_to_device(np.full(N, 2.0), stream=b)
        sim.reset()
        destroy_unrelated_stream()
        made = calls(sim)
        # Nothing remembered work on it: its release records no event.
        assert made["cuEventCreate"] == 0
        assert made["cuStreamDestroy"] == 1
        sim.reset()
        assert d.__cuda_array_interface__["stream"] == int(own)
        made = calls(sim)
        assert made["cuCtxSynchronize"] == 0
        assert made["cuEventRecord"] == 2  # a's and b's work, into own
        assert made["cuStreamWaitEvent"] == 2
        out = cudamem.as_cuda_array(Producer(d), stream=own).copy_to_host(
            stream=own)
        own.synchronize()
    np.testing.assert_array_equal(out, np.repeat([1.0, 2.0], N))


def test_a_full_pending_set_after_a_release_orders_by_events(hazards):
    # Copies on five streams fill the four-slot set; streams released
    # in between (one of them with remembered work) force no synchronize.
    sim = hazards
    streams = [cudamem.stream() for _ in range(5)]
    own = cudamem.stream()
    d = cudamem.device_array(6 * N, stream=own)
    with sim.delay(100_000):
        sim.reset()
        temp = cudamem.stream()
        d[5 * N:].copy_to_device(np.full(N, 9.0), stream=temp)
        del temp
        for i, s in enumerate(streams):
            destroy_unrelated_stream()
            d[i * N:(i + 1) * N].copy_to_device(np.full(N, float(i)),
                                                stream=s)
        cai = d.__cuda_array_interface__
        assert calls(sim)["cuCtxSynchronize"] == 0
        assert cai["stream"] == int(own)
        out = cudamem.as_cuda_array(Producer(d), stream=own).copy_to_host(
            stream=own)
        own.synchronize()
    expected = np.concatenate([np.repeat(np.arange(5.0), N),
                               np.full(N, 9.0)])
    np.testing.assert_array_equal(out, expected)


def test_a_copy_after_a_release_is_ordered(hazards):
    # A copy on another stream reads memory written on a stream released
    # since: the hazard checker sees it ordered, without a synchronize.
    sim = hazards
    own = cudamem.stream()
    src = cudamem.device_array(N, stream=own)
    with sim.delay(200_000):
        temp = cudamem.stream()
        src.copy_to_device(np.arange(N, dtype=np.float64), stream=temp)
        del temp
        cudamem.current_context().deallocations.clear()
        sim.reset()
        imported = cudamem.as_cuda_array(Producer(src), stream=own)
        out = imported.copy_to_host(stream=own)
        own.synchronize()
        assert calls(sim)["cuCtxSynchronize"] == 0
    np.testing.assert_array_equal(out, np.arange(N, dtype=np.float64))


def test_a_release_after_complete_work_records_no_event(hazards):
    # Its user waited for the work: the release asks the driver once
    # (cuStreamQuery) and records nothing; the export then waits for
    # nothing either (the CUDA driver API: a stream whose query returns
    # CUDA_SUCCESS has completed all its work).
    sim = hazards
    own = cudamem.stream()
    d = cudamem.device_array(N, stream=own)
    with sim.delay(20_000):
        temp = cudamem.stream()
        d.copy_to_device(np.full(N, 4.0), stream=temp)
        temp.synchronize()
        sim.reset()
        del temp
        made = calls(sim)
        assert made["cuStreamQuery"] == 1
        assert made["cuEventCreate"] == 0
        assert made["cuEventRecord"] == 0
        cudamem.current_context().deallocations.clear()
        sim.reset()
        assert d.__cuda_array_interface__["stream"] == int(own)
        made = calls(sim)
        assert made["cuCtxSynchronize"] == 0
        assert made["cuStreamWaitEvent"] == 0
        out = cudamem.as_cuda_array(Producer(d), stream=own).copy_to_host(
            stream=own)
        own.synchronize()
    np.testing.assert_array_equal(out, np.full(N, 4.0))


def test_a_release_with_queued_work_records_one_event(hazards):
    sim = hazards
    own = cudamem.stream()
    d = cudamem.device_array(N, stream=own)
    with sim.delay(100_000):
        temp = cudamem.stream()
        d.copy_to_device(np.full(N, 5.0), stream=temp)
        sim.reset()
        del temp
        made = calls(sim)
        assert made["cuStreamQuery"] == 1
        assert made["cuEventRecord"] == 1
        cudamem.current_context().deallocations.clear()
        sim.reset()
        assert d.__cuda_array_interface__["stream"] == int(own)
        made = calls(sim)
        assert made["cuCtxSynchronize"] == 0
        assert made["cuStreamWaitEvent"] == 1
        out = cudamem.as_cuda_array(Producer(d), stream=own).copy_to_host(
            stream=own)
        own.synchronize()
    np.testing.assert_array_equal(out, np.full(N, 5.0))


@pytest.mark.parametrize("row", ["cuStreamQuery", "cuEventCreate",
                                 "cuEventRecord"])
def test_a_failed_release_event_falls_back_to_a_synchronize(hazards, row):
    # The stream is released all the same (the autouse fixture checks
    # that nothing leaks); its work is then ordered by a synchronize.
    sim = hazards
    own = cudamem.stream()
    d = cudamem.device_array(N, stream=own)
    with sim.delay(100_000):
        temp = cudamem.stream()
        d.copy_to_device(np.full(N, 3.0), stream=temp)
        sim.inject(row, "CUDA_ERROR_UNKNOWN")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del temp
        sim.clear_faults()
        assert any(row in str(w.message) for w in caught)
        cudamem.current_context().deallocations.clear()
        sim.reset()
        assert d.__cuda_array_interface__["stream"] == int(own)
        assert calls(sim)["cuCtxSynchronize"] == 1
        out = cudamem.as_cuda_array(Producer(d), stream=own).copy_to_host(
            stream=own)
        own.synchronize()
    np.testing.assert_array_equal(out, np.full(N, 3.0))
