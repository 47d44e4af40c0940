"""The pool's free list of a stream is found by its handle and dropped
when the stream is released (core/pool.c): its blocks wait for their
events among the blocks of released streams, so a new stream that gets the
same handle (the simulator, as the driver, reuses them) never finds its
list, and nothing is kept for a stream that is gone. Checked with the hazard
checker, the simulator's counters and the pool's statistics."""
import warnings

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem

pytestmark = pytest.mark.simulator

N = 4096
BIG = 262144  # float64: 2 MiB, a slab of its own with nothing left over



def calls(sim, entry):
    return sim.stats()["calls"][entry]["calls"]


def ptr(arr):
    return arr.__cuda_array_interface__["data"][0]


def release(stream_list):
    stream_list.clear()
    cudamem.current_context().deallocations.clear()


def test_a_released_streams_blocks_wait_for_its_work(hazards, pool):
    sim = hazards
    temp = [cudamem.stream()]
    src = cudamem.to_device(np.full(BIG, 1.0))
    with sim.delay(200_000):
        a = cudamem.device_array(BIG, stream=temp[0])
        a.copy_to_device(src, stream=temp[0])  # device to device: queued
        freed = ptr(a)
        del a
        # Released (its destroy stays queued: the simulator's would wait).
        temp.clear()
        assert _cudamem._pool_stats(0)["pending_blocks"] == 1
        b = cudamem.stream()
        # The released stream's write is still queued: not b's to take.
        c = cudamem.device_array(BIG, stream=b)
        assert ptr(c) != freed
        c.copy_to_device(np.full(BIG, 2.0), stream=b)
        np.testing.assert_array_equal(c.copy_to_host(stream=b),
                                      np.full(BIG, 2.0))
        b.synchronize()
    cudamem.synchronize()
    # Its work done, the block is anyone's (a miss settles it), with no
    # new slab.
    sim.reset()
    d = cudamem.device_array(BIG, stream=b)
    assert ptr(d) == freed
    assert calls(sim, "cuMemAlloc") == 0
    assert _cudamem._pool_stats(0)["pending_blocks"] == 0


def test_a_block_freed_without_an_event_waits_for_the_release(sim, pool):
    temp = [cudamem.stream()]
    a = cudamem.device_array(N, stream=temp[0])
    freed = ptr(a)
    sim.inject("cuEventRecord", "CUDA_ERROR_UNKNOWN")
    del a  # no event: the block waits for its whole stream
    sim.clear_faults()
    assert _cudamem._pool_stats(0)["pending_blocks"] == 1
    sim.reset()
    release(temp)
    assert calls(sim, "cuStreamSynchronize") == 1
    assert _cudamem._pool_stats(0)["pending_blocks"] == 0
    other = cudamem.stream()
    b = cudamem.device_array(N, stream=other)
    assert ptr(b) == freed
    assert calls(sim, "cuMemAlloc") == 0


def test_a_failed_wait_at_the_release_is_reported(sim, pool):
    temp = [cudamem.stream()]
    a = cudamem.device_array(N, stream=temp[0])
    sim.inject("cuEventRecord", "CUDA_ERROR_UNKNOWN")
    del a
    sim.clear_faults()
    sim.inject("cuStreamSynchronize", "CUDA_ERROR_UNKNOWN")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        release(temp)
    sim.clear_faults()
    assert any("cuStreamSynchronize" in str(w.message) for w in caught)
    # The stream is released all the same (the autouse fixture checks).
    assert sim.live()["streams"] == 0


def test_temporary_streams_share_one_slab(sim, pool):
    # One stream per batch: each batch's block, freed on a stream released
    # since, is the next batch's once its work is done.
    sim.reset()
    for i in range(20):
        temp = [cudamem.stream()]
        a = cudamem.to_device(np.full(BIG, float(i)), stream=temp[0])
        out = a.copy_to_host(stream=temp[0])
        temp[0].synchronize()
        np.testing.assert_array_equal(out, np.full(BIG, float(i)))
        del a
        release(temp)
        cudamem.synchronize()  # the event its free recorded is complete
    other = cudamem.stream()
    b = cudamem.device_array(BIG, stream=other)
    assert calls(sim, "cuMemAlloc") == 1  # one slab for all of them
    assert _cudamem._pool_stats(0)["pending_blocks"] == 0
    del b


def polls(sim):
    return calls(sim, "cuEventQuery") + calls(sim, "cuStreamQuery")


def test_a_miss_polls_a_busy_stream_once(hazards, pool):
    # K blocks freed on a stream still busy with a queued copy: a miss on
    # another stream (a slab of its own) asks for the oldest free's event
    # only (the CUDA driver API: work on one stream completes in the order
    # it was queued, so the newer frees' events are not complete either).
    sim = hazards
    K = 16
    s, t = cudamem.stream(), cudamem.stream()
    src = cudamem.to_device(np.full(N, 7.0))
    with sim.delay(100_000):
        arrays = [cudamem.device_array(N, stream=s) for _ in range(2 * K)]
        arrays[1].copy_to_device(src, stream=s)
        freed = {ptr(a) for a in arrays[::2]}
        del arrays[::2]  # no two of them neighbours: K blocks
        assert _cudamem._pool_stats(0)["pending_blocks"] == K
        sim.reset()
        c = cudamem.device_array(BIG, stream=t)
        assert polls(sim) == 1
        assert _cudamem._pool_stats(0)["pending_blocks"] == K
    s.synchronize()
    # Complete now: the next miss moves every block, one poll each; then
    # a block of their size is one of them.
    sim.reset()
    d = cudamem.device_array(BIG, stream=t)
    assert polls(sim) == K
    assert _cudamem._pool_stats(0)["pending_blocks"] == 0
    e = cudamem.device_array(N, stream=t)
    assert ptr(e) in freed
    np.testing.assert_array_equal(arrays[0].copy_to_host(stream=s),
                                  np.full(N, 7.0))
    del arrays, c, d, e
