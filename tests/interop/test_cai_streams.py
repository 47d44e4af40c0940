"""Stream ordering of CUDA Array Interface imports beyond numba: with
stream= the consumer's stream waits for the producer's on the device (an
event), never the host; without it numba's one host synchronize. Checked
with the simulator's counters and its hazard checker, with the producer's
work held queued by the simulated delay."""
import numpy as np
import pytest

import cudamem
from tests.helpers.interop import Producer


def calls(sim):
    return {k: v["calls"] for k, v in sim.stats()["calls"].items()}


class ForeignStream:
    """A stream of another library, through __cuda_stream__."""

    def __init__(self, stream):
        self.stream = stream

    def __cuda_stream__(self):
        return (0, int(self.stream))


def _queued(stream, n=4096):
    """A producer whose array has 200 ms of work still queued on stream."""
    base = cudamem.to_device(np.zeros(n), stream=stream)
    stream.synchronize()
    return Producer(base)


@pytest.mark.parametrize("how", ["as_cuda_array",
                                 "from_cuda_array_interface"])
@pytest.mark.parametrize("wrap", [lambda s: s, ForeignStream],
                         ids=["Stream", "__cuda_stream__"])
def test_consumer_stream_waits_on_the_device(hazards, how, wrap):
    sim = hazards
    a, b = cudamem.stream(), cudamem.stream()
    producer = _queued(a)
    consumer = wrap(b)
    with sim.delay(200_000):
        producer.base.fill(7.0, stream=a)
        sim.reset()
        if how == "as_cuda_array":
            imported = cudamem.as_cuda_array(producer, stream=consumer)
        else:
            imported = cudamem.from_cuda_array_interface(
                producer.__cuda_array_interface__, owner=producer,
                stream=consumer)
        made = calls(sim)
        assert made["cuStreamSynchronize"] == 0
        assert made["cuEventSynchronize"] == 0
        assert made["cuEventRecord"] == 1
        assert made["cuStreamWaitEvent"] == 1
        assert not a.query()  # the host did not wait
        # Bound to the consumer's stream: its work is ordered after a's.
        assert imported.stream is consumer
        out = imported.copy_to_host(stream=b)
        b.synchronize()
    np.testing.assert_array_equal(out, np.full(4096, 7.0))


def test_without_stream_numba_synchronizes(hazards):
    sim = hazards
    a = cudamem.stream()
    producer = _queued(a)
    with sim.delay(200_000):
        producer.base.fill(3.0, stream=a)
        sim.reset()
        imported = cudamem.as_cuda_array(producer)
        made = calls(sim)
        assert made["cuStreamSynchronize"] == 1
        assert made["cuStreamWaitEvent"] == 0
        assert a.query()
    assert int(imported.stream) == int(a)
    np.testing.assert_array_equal(imported.copy_to_host(),
                                  np.full(4096, 3.0))


@pytest.mark.parametrize("stream", [None, 0])
def test_stream_none_or_0_is_numbas_rule(sim, stream):
    a = cudamem.stream()
    producer = _queued(a)
    sim.reset()
    imported = cudamem.as_cuda_array(producer, stream=stream)
    assert calls(sim)["cuStreamSynchronize"] == 1
    assert int(imported.stream) == int(a)


def test_same_stream_needs_no_wait(sim):
    a = cudamem.stream()
    producer = _queued(a)
    sim.reset()
    imported = cudamem.as_cuda_array(producer, stream=a)
    made = calls(sim)
    assert made["cuStreamSynchronize"] == 0
    assert made["cuEventRecord"] == made["cuStreamWaitEvent"] == 0
    assert imported.stream is a


def test_sync_false_with_stream_only_binds(sim):
    a, b = cudamem.stream(), cudamem.stream()
    producer = _queued(a)
    sim.reset()
    imported = cudamem.as_cuda_array(producer, sync=False, stream=b)
    made = calls(sim)
    assert made["cuStreamSynchronize"] == 0
    assert made["cuEventRecord"] == made["cuStreamWaitEvent"] == 0
    assert imported.stream is b


def test_no_producer_stream_only_binds(sim):
    b = cudamem.stream()
    base = cudamem.to_device(np.arange(4.0))
    sim.reset()
    imported = cudamem.as_cuda_array(Producer(base), stream=b)
    assert calls(sim)["cuEventRecord"] == 0
    assert imported.stream is b


@pytest.mark.simulator
@pytest.mark.parametrize("env", ["CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC",
                                 "NUMBA_CUDA_ARRAY_INTERFACE_SYNC"])
def test_sync_environment_turns_the_event_wait_off(run_py, env):
    code = """
        import numpy as np
        import cudamem
        from cudamem import simulator as sim

        class P:
            def __init__(self, base):
                self.base = base
            @property
            def __cuda_array_interface__(self):
                return self.base.__cuda_array_interface__

        a, b = cudamem.stream(), cudamem.stream()
        p = P(cudamem.to_device(np.zeros(4), stream=a))
        sim.reset()
        for s in (b, None):
            imported = cudamem.as_cuda_array(p, stream=s)
        made = {k: v["calls"] for k, v in sim.stats()["calls"].items()}
        assert made["cuStreamSynchronize"] == 0, made
        assert made["cuEventRecord"] == made["cuStreamWaitEvent"] == 0
        assert imported.stream is not None
        print("ok")
    """
    other = ("NUMBA_CUDA_ARRAY_INTERFACE_SYNC"
             if env.startswith("CUDAMEM") else
             "CUDAMEM_CUDA_ARRAY_INTERFACE_SYNC")
    done = run_py(code, env={env: "0", other: None,
                             "CUDAMEM_SIMULATOR": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_bad_consumer_stream_is_refused_before_anything(sim):
    a = cudamem.stream()
    producer = _queued(a)
    sim.reset()
    with pytest.raises(TypeError):
        cudamem.as_cuda_array(producer, stream="b")
    with pytest.raises(ValueError):
        cudamem.as_cuda_array(producer, stream=5)
    made = calls(sim)
    assert made["cuStreamSynchronize"] == 0
    assert made["cuEventCreate"] == 0


@pytest.mark.parametrize("row", ["cuEventCreate", "cuEventRecord",
                                 "cuStreamWaitEvent"])
def test_event_failures_raise_and_leak_nothing(sim, row):
    a, b = cudamem.stream(), cudamem.stream()
    producer = _queued(a)
    sim.inject(row, "CUDA_ERROR_UNKNOWN")
    with pytest.raises(cudamem.CudaAPIError, match=row):
        cudamem.as_cuda_array(producer, stream=b)
    sim.clear_faults()
    # The event, if one was made, is released: the autouse fixture checks
    # the live counts; the import works again.
    imported = cudamem.as_cuda_array(producer, stream=b)
    assert imported.stream is b
