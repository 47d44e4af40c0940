"""The producer side of the CUDA Array Interface: an array whose memory has
unfinished work on several streams exports a stream that waits (events, on
the device) for all of them. Checked with the simulator's hazard checker
and counters, with the work held queued by the simulated delay."""
import numpy as np
import pytest

import cudamem
from tests.helpers.interop import Producer


def calls(sim):
    return {k: v["calls"] for k, v in sim.stats()["calls"].items()}


N = 4096


def test_export_waits_for_every_stream(hazards):
    sim = hazards
    a, b, c = cudamem.stream(), cudamem.stream(), cudamem.stream()
    d = cudamem.device_array(2 * N, stream=a)
    with sim.delay(200_000):
        d[:N].copy_to_device(np.full(N, 1.0), stream=a)
        d[N:].copy_to_device(np.full(N, 2.0), stream=b)
        sim.reset()
        cai = d.__cuda_array_interface__
        made = calls(sim)
        assert made["cuEventRecord"] == 1  # b's work, ordered into a
        assert made["cuStreamWaitEvent"] == 1
        assert made["cuStreamSynchronize"] == 0
        assert cai["stream"] == int(a)
        assert not b.query()  # the host did not wait
        imported = cudamem.as_cuda_array(Producer(d), stream=c)
        out = imported.copy_to_host(stream=c)
        c.synchronize()
    np.testing.assert_array_equal(out, np.repeat([1.0, 2.0], N))


def test_a_cudamem_array_imported_onto_a_stream(hazards):
    # as_cuda_array(d) returns d itself (numba); named a stream, it is
    # ordered like a foreign array's import: no host wait, no hazard.
    sim = hazards
    a, b, c = cudamem.stream(), cudamem.stream(), cudamem.stream()
    d = cudamem.device_array(2 * N, stream=a)
    assert cudamem.as_cuda_array(d) is d
    with sim.delay(200_000):
        d[:N].copy_to_device(np.full(N, 3.0), stream=a)
        d[N:].copy_to_device(np.full(N, 4.0), stream=b)
        sim.reset()
        imported = cudamem.as_cuda_array(d, stream=c)
        assert calls(sim)["cuStreamSynchronize"] == 0
        assert imported.stream is c
        out = imported.copy_to_host(stream=c)
        c.synchronize()
    np.testing.assert_array_equal(out, np.repeat([3.0, 4.0], N))


def test_from_interface_with_exported_stream(hazards):
    sim = hazards
    a, b, c = cudamem.stream(), cudamem.stream(), cudamem.stream()
    d = cudamem.device_array(N, stream=a)
    with sim.delay(200_000):
        d.copy_to_device(np.arange(N, dtype=np.float64), stream=b)
        imported = cudamem.from_cuda_array_interface(
            d.__cuda_array_interface__, owner=d, stream=c)
        out = imported.copy_to_host(stream=c)
        c.synchronize()
    np.testing.assert_array_equal(out, np.arange(N, dtype=np.float64))


def test_common_case_makes_no_driver_call(sim):
    a = cudamem.stream()
    d = cudamem.to_device(np.zeros(N), stream=a)
    d.copy_to_device(np.ones(N), stream=a)
    sim.reset()
    cai = d.__cuda_array_interface__
    assert sum(calls(sim).values()) == 0
    assert cai["stream"] == int(a)
    plain = cudamem.to_device(np.zeros(N))
    sim.reset()
    assert plain.__cuda_array_interface__["stream"] is None
    assert sum(calls(sim).values()) == 0
    a.synchronize()


def test_ordered_streams_are_forgotten(sim):
    a, b = cudamem.stream(), cudamem.stream()
    d = cudamem.device_array(N, stream=a)
    d.copy_to_device(np.ones(N), stream=b)
    d.__cuda_array_interface__
    sim.reset()
    d.__cuda_array_interface__
    assert sum(calls(sim).values()) == 0
    b.synchronize()
    a.synchronize()


def test_views_share_the_pending_set(hazards):
    sim = hazards
    a, b, c = cudamem.stream(), cudamem.stream(), cudamem.stream()
    d = cudamem.device_array(2 * N, stream=a)
    with sim.delay(200_000):
        d[N:].bind(b).copy_to_device(np.full(N, 5.0))
        view = d[:N]
        sim.reset()
        assert view.__cuda_array_interface__["stream"] == int(a)
        assert calls(sim)["cuStreamWaitEvent"] == 1
        sim.reset()
        # The view's export ordered b for the whole allocation.
        assert d.__cuda_array_interface__["stream"] == int(a)
        assert sum(calls(sim).values()) == 0
        out = cudamem.as_cuda_array(Producer(d),
                                    stream=c).copy_to_host(stream=c)
        c.synchronize()
    np.testing.assert_array_equal(out[N:], np.full(N, 5.0))


def test_stream0_array_exports_no_stream_once_complete(hazards):
    # A stream-0 array is synchronous: it exports None, which consumers
    # wait for nothing on, so work queued on its memory elsewhere is
    # complete before the export returns (and its own importers stay
    # synchronous).
    sim = hazards
    b = cudamem.stream()
    d = cudamem.device_array(N)
    with sim.delay(200_000):
        d.copy_to_device(np.full(N, 4.0), stream=b)
        cai = d.__cuda_array_interface__
        assert cai["stream"] is None
        assert b.query()  # b's work is done
        imported = cudamem.as_cuda_array(Producer(d))
        assert imported.stream == 0
        imported[:2] = -1  # synchronous: complete on return
        np.testing.assert_array_equal(d.copy_to_host()[:3], [-1, -1, 4])
    assert d.__cuda_array_interface__["stream"] is None


def test_overflow_orders_the_oldest(hazards):
    sim = hazards
    streams = [cudamem.stream() for _ in range(6)]
    own = cudamem.stream()
    d = cudamem.device_array(6 * N, stream=own)
    with sim.delay(200_000):
        for i, s in enumerate(streams):
            d[i * N:(i + 1) * N].copy_to_device(np.full(N, float(i)),
                                                stream=s)
        sim.reset()
        stream = d.__cuda_array_interface__["stream"]
        assert stream == int(own)
        # Four remembered at most: the two oldest were ordered on the way.
        assert calls(sim)["cuStreamWaitEvent"] == 4
        out = cudamem.as_cuda_array(Producer(d),
                                    stream=own).copy_to_host(stream=own)
        own.synchronize()
    np.testing.assert_array_equal(out, np.repeat(np.arange(6.0), N))


@pytest.mark.parametrize("row", ["cuEventCreate", "cuEventRecord",
                                 "cuStreamWaitEvent"])
def test_event_failures_raise_and_leak_nothing(sim, row):
    a, b = cudamem.stream(), cudamem.stream()
    d = cudamem.device_array(N, stream=a)
    d.copy_to_device(np.ones(N), stream=b)
    sim.inject(row, "CUDA_ERROR_UNKNOWN")
    with pytest.raises(cudamem.CudaAPIError, match=row):
        d.__cuda_array_interface__
    sim.clear_faults()
    # b is still to be ordered: the next export does it.
    sim.reset()
    assert d.__cuda_array_interface__["stream"] == int(a)
    assert calls(sim)["cuStreamWaitEvent"] == 1
    b.synchronize()
    a.synchronize()


def test_a_retired_stream_is_never_touched(hazards):
    # Work on a stream that is gone by the export: its handle may be
    # destroyed (and reused), so the export waits for the event its
    # release recorded after that work instead of touching the handle.
    sim = hazards
    own = cudamem.stream()
    d = cudamem.device_array(2 * N, stream=own)
    with sim.delay(200_000):
        temp = cudamem.stream()
        d[N:].copy_to_device(np.full(N, 5.0), stream=temp)
        sim.reset()
        del temp
        assert calls(sim)["cuEventRecord"] == 1
        cudamem.current_context().deallocations.clear()
        sim.reset()
        assert d.__cuda_array_interface__["stream"] == int(own)
        made = calls(sim)
        assert made["cuEventRecord"] == 0
        assert made["cuStreamWaitEvent"] == 1
        assert made["cuCtxSynchronize"] == 0
        out = cudamem.as_cuda_array(Producer(d), stream=own).copy_to_host(
            stream=own)
        own.synchronize()
    np.testing.assert_array_equal(out[N:], np.full(N, 5.0))


class ForeignStream:
    """A stream owned by another library: cudamem sees only its handle."""

    def __init__(self):
        self.stream = cudamem.stream()

    def __cuda_stream__(self):
        return (0, int(self.stream))


def test_foreign_stream_work_is_remembered_by_event(hazards):
    # The foreign stream dies before the export: the event recorded right
    # after its work orders it, and its handle is never used again.
    sim = hazards
    own = cudamem.stream()
    d = cudamem.device_array(2 * N, stream=own)
    with sim.delay(200_000):
        foreign = ForeignStream()
        sim.reset()
        d[N:].copy_to_device(np.full(N, 6.0), stream=foreign)
        assert calls(sim)["cuEventRecord"] == 1
        del foreign
        cudamem.current_context().deallocations.clear()
        sim.reset()
        assert d.__cuda_array_interface__["stream"] == int(own)
        made = calls(sim)
        assert made["cuEventRecord"] == 0
        assert made["cuStreamWaitEvent"] == 1
        assert made["cuCtxSynchronize"] == 0
        out = cudamem.as_cuda_array(Producer(d), stream=own).copy_to_host(
            stream=own)
        own.synchronize()
    np.testing.assert_array_equal(out[N:], np.full(N, 6.0))


def test_foreign_stream_events_are_released_with_the_memory(sim):
    foreign = ForeignStream()
    d = cudamem.device_array(N)
    d.copy_to_device(np.ones(N), stream=foreign)
    sim.reset()
    del d
    cudamem.current_context().deallocations.clear()
    assert calls(sim)["cuEventDestroy"] == 1
    foreign.stream.synchronize()


@pytest.mark.parametrize("row", ["cuEventCreate", "cuEventRecord"])
def test_foreign_event_failure_waits_for_the_work(hazards, row):
    # The copy is queued but cannot be remembered: the stream is waited
    # for, so an export has nothing left to order.
    sim = hazards
    foreign = ForeignStream()
    d = cudamem.device_array(N)
    with sim.delay(100_000):
        sim.inject(row, "CUDA_ERROR_UNKNOWN")
        with pytest.raises(cudamem.CudaAPIError, match=row):
            d.copy_to_device(np.full(N, 7.0), stream=foreign)
        sim.clear_faults()
        assert foreign.stream.query()
    assert d.__cuda_array_interface__["stream"] is None
    np.testing.assert_array_equal(d.copy_to_host(), np.full(N, 7.0))


@pytest.mark.parametrize("row", ["cuEventCreate", "cuEventRecord",
                                 "cuStreamWaitEvent"])
def test_full_set_failing_to_order_its_oldest(hazards, row):
    # The fifth stream's work finds the set full: ordering the oldest
    # fails, the copy is not queued, and the oldest stays remembered for
    # the export to order.
    sim = hazards
    streams = [cudamem.stream() for _ in range(5)]
    own = cudamem.stream()
    d = cudamem.device_array(5 * N, stream=own)
    for i, s in enumerate(streams[:4]):
        d[i * N:(i + 1) * N].copy_to_device(np.full(N, float(i)), stream=s)
    sim.inject(row, "CUDA_ERROR_UNKNOWN")
    with pytest.raises(cudamem.CudaAPIError, match=row):
        d[4 * N:].copy_to_device(np.full(N, 4.0), stream=streams[4])
    sim.clear_faults()
    d[4 * N:].copy_to_device(np.full(N, 4.0), stream=streams[4])
    sim.reset()
    assert d.__cuda_array_interface__["stream"] == int(own)
    assert calls(sim)["cuStreamWaitEvent"] == 4  # streams 1 to 4
    out = cudamem.as_cuda_array(Producer(d), stream=own).copy_to_host(
        stream=own)
    own.synchronize()
    np.testing.assert_array_equal(out, np.repeat(np.arange(5.0), N))


def test_each_access_is_a_new_dict_with_numbas_fields():
    # numba builds the dict on each access, so a consumer may change its
    # own; the dtypes alternate so that no remembered typestr answers for
    # another dtype ('>i8' and '<i8' are distinct).
    base = np.arange(12, dtype=np.int16)
    cases = [
        (np.arange(6, dtype=np.float32).reshape(2, 3), None),
        (np.arange(4, dtype=">i8"), None),
        (np.arange(4, dtype="<i8"), None),
        (base, slice(None, None, 3)),
        (np.zeros(3, dtype=[("a", "<f8"), ("b", "u1")]), None),
        (np.arange(6, dtype=np.float32), None),
    ]
    for h, index in cases * 2:
        d = cudamem.to_device(h)
        if index is not None:
            d, h = d[index], h[index]
        want = {
            "shape": h.shape,
            "strides": None if h.flags.c_contiguous else h.strides,
            "data": (d.device_ctypes_pointer.value, False),
            "typestr": h.dtype.str,
            "stream": None,
            "version": 3,
        }
        if h.dtype.names:
            want["descr"] = h.dtype.descr
        first = d.__cuda_array_interface__
        assert first == want
        first["shape"] = (0,)
        first["descr"] = []
        second = d.__cuda_array_interface__
        assert second is not first
        assert second == want
