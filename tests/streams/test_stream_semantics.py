"""Stream semantics as numba and CUDA define them, observed through the
simulator: work on a stream is asynchronous until synchronize(); a
blocking stream is ordered against the legacy default stream and a
non-blocking one is not; per-thread default streams are ordered against
the legacy default stream but not against each other; auto_synchronize()
leaves the stream idle, also when its block raises.

The references are the simulator's stream delay (work stays queued while
the test looks) and its hazard checker (it reports an operation that
touches memory with unfinished work of another stream not ordered before
it).
"""
import os
import threading

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError

pytestmark = pytest.mark.simulator

# Long enough that a loaded CI machine does not finish queued work
# before the test looks at it.
DELAY_US = 200_000
HAZARDS_ON = os.environ.get("CUDAMEM_SIM_HAZARDS", "0") not in ("", "0")


@pytest.fixture
def checker(sim):
    """Hazard checker on and the stream delay set; yields a function that
    returns the hazards reported since the test started."""
    sim.set_hazards(True)
    start = sim.hazard_count()
    before = sim.get_delay_us()
    sim.set_delay_us(DELAY_US)
    yield lambda: sim.hazard_count() - start
    sim.set_delay_us(before)
    cudamem.synchronize()
    sim.set_hazards(HAZARDS_ON)


def _arrays(n=4096):
    host = np.arange(n, dtype=np.float64)
    src = cudamem.to_device(host)
    dst = cudamem.device_array_like(host)
    dst.fill(0)
    return host, src, dst


# ---------------------------------------------------------------------------
# Asynchrony and synchronize().


@pytest.mark.expect_hazards
def test_work_is_asynchronous_until_synchronize(checker):
    s = cudamem.stream(non_blocking=True)
    host, src, dst = _arrays()
    for _ in range(5):
        dst.fill(1, stream=s)
    dst.copy_to_device(src, stream=s)
    assert s.query() is False
    # A synchronous read does not wait for a non-blocking stream: it sees
    # what was there before the queued copy, and the checker says why.
    early = dst.copy_to_host()
    assert not np.array_equal(early, host)
    assert checker() >= 1
    s.synchronize()
    assert s.query() is True
    np.testing.assert_array_equal(dst.copy_to_host(), host)


def test_query_follows_the_queue(checker):
    s = cudamem.stream()
    ary = cudamem.device_array(64, np.uint8)
    assert s.query() is True
    ary.fill(1, stream=s)
    assert s.query() is False
    s.synchronize()
    assert s.query() is True
    assert checker() == 0


def test_work_on_one_stream_runs_in_order(checker):
    s = cudamem.stream(non_blocking=True)
    host, src, dst = _arrays()
    tmp = cudamem.device_array_like(host)
    tmp.copy_to_device(src, stream=s)
    dst.copy_to_device(tmp, stream=s)
    tmp.fill(0, stream=s)  # after the copy read it
    s.synchronize()
    np.testing.assert_array_equal(dst.copy_to_host(), host)
    assert checker() == 0


# ---------------------------------------------------------------------------
# The legacy default stream against blocking and non-blocking streams.


def _stream_then_legacy(stream):
    host, src, dst = _arrays()
    dst.copy_to_device(src, stream=stream)
    # The legacy default stream, synchronous: waits for blocking streams.
    got = dst.copy_to_host()
    stream.synchronize()
    return got, host


def _legacy_then_stream(stream):
    host, src, dst = _arrays()
    legacy = cudamem.legacy_default_stream()
    dst.copy_to_device(src, stream=legacy)  # asynchronous on it
    out = cudamem.device_array_like(host)
    out.copy_to_device(dst, stream=stream)
    stream.synchronize()
    legacy.synchronize()
    return out.copy_to_host(), host


@pytest.mark.parametrize("order", [_stream_then_legacy, _legacy_then_stream])
def test_blocking_stream_orders_against_the_legacy_stream(checker, order):
    got, want = order(cudamem.stream())
    np.testing.assert_array_equal(got, want)
    assert checker() == 0


@pytest.mark.expect_hazards
@pytest.mark.parametrize("order", [_stream_then_legacy, _legacy_then_stream])
def test_non_blocking_stream_does_not(checker, order):
    order(cudamem.stream(non_blocking=True))
    assert checker() >= 1


def test_per_thread_stream_orders_against_the_legacy_stream(checker):
    got, want = _stream_then_legacy(cudamem.per_thread_default_stream())
    np.testing.assert_array_equal(got, want)
    assert checker() == 0


@pytest.mark.expect_hazards
def test_per_thread_streams_of_two_threads_are_not_ordered(checker):
    host, src, dst = _arrays()
    dst.copy_to_device(src, stream=cudamem.per_thread_default_stream())
    out = cudamem.device_array_like(host)

    def other():
        mine = cudamem.per_thread_default_stream()
        out.copy_to_device(dst, stream=mine)
        mine.synchronize()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    cudamem.per_thread_default_stream().synchronize()
    assert checker() >= 1


# ---------------------------------------------------------------------------
# auto_synchronize().


def test_auto_synchronize_leaves_the_stream_idle(checker):
    s = cudamem.stream(non_blocking=True)
    host, src, dst = _arrays()
    with s.auto_synchronize() as yielded:
        assert yielded is s
        dst.copy_to_device(src, stream=s)
        assert s.query() is False
    assert s.query() is True
    np.testing.assert_array_equal(dst.copy_to_host(), host)
    assert checker() == 0


def test_auto_synchronize_on_exception(checker):
    s = cudamem.stream(non_blocking=True)
    ary = cudamem.device_array(64, np.uint8)
    with pytest.raises(KeyError, match="inside"):
        with s.auto_synchronize():
            ary.fill(9, stream=s)
            raise KeyError("inside")
    assert s.query() is True
    assert ary.copy_to_host().tolist() == [9] * 64


def test_auto_synchronize_block_exception_wins(sim):
    s = cudamem.stream()
    # synchronize() starts with cuStreamQuery: make it fail.
    with pytest.raises(KeyError, match="inside"):
        with s.auto_synchronize():
            sim.inject("cuStreamQuery", "CUDA_ERROR_UNKNOWN")
            raise KeyError("inside")
    with pytest.raises(CudaAPIError) as info:
        with s.auto_synchronize():
            sim.inject("cuStreamQuery", "CUDA_ERROR_UNKNOWN")
    assert info.value.call == "cuStreamQuery"
    with s.auto_synchronize():
        pass


def test_auto_synchronize_of_default_streams(checker):
    for s in (cudamem.default_stream(), cudamem.legacy_default_stream(),
              cudamem.per_thread_default_stream()):
        ary = cudamem.device_array(64, np.uint8)
        with s.auto_synchronize() as yielded:
            assert yielded is s
            ary.fill(4, stream=s)
        assert s.query() is True
        assert ary.copy_to_host().tolist() == [4] * 64
    assert checker() == 0
