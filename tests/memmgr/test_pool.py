"""The device memory pool (core/pool.c) through _cudamem._pool_*: blocks
of shared cuMemAlloc slabs, best fit, split and coalesce, per-stream
reuse ordered across streams by events, the limit, trim, reset and
close with pooled arrays alive, driver faults and threads.

The references: every live pooled array keeps the bytes written to it
(NumPy), and the simulator's counters and live allocations show how the
pool got its memory; the hazard checker shows that reuse across streams
waits for the stream that freed the block.
"""
import gc
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cudamem
from cudamem import _cudamem
from cudamem.errors import CudaAPIError
from tests.helpers.memmgr import calls as _calls
from tests.helpers.memmgr import ptr as _ptr
from tests.helpers.memmgr import queue_work as _queue_work

pytestmark = pytest.mark.simulator

MIB = 1 << 20
SLAB = 2 * MIB
# Enough queued work that a loaded machine cannot finish it first.
DELAY_US = 25000


def _stats():
    return _cudamem._pool_stats(0)


def _allocs(sim):
    return _calls(sim, "cuMemAlloc")


def test_off_by_default_and_stats_keys():
    stats = _stats()
    assert stats["enabled"] is False
    assert set(stats) == {"enabled", "limit", "slabs", "slab_bytes",
                          "used_blocks", "used_bytes", "free_blocks",
                          "cached_bytes", "pending_blocks"}


def test_small_arrays_share_one_slab(pool, sim):
    sim.reset()
    arrays = [cudamem.to_device(np.full(100, i, np.int64))
              for i in range(100)]
    assert _allocs(sim) == 1
    stats = _stats()
    assert stats["slabs"] == 1 and stats["slab_bytes"] == SLAB
    assert stats["used_blocks"] == 100
    assert stats["used_bytes"] == 100 * 1024  # 800 bytes rounded to 256
    assert sim.live()["device_allocations"] == 1
    for i, arr in enumerate(arrays):
        np.testing.assert_array_equal(arr.copy_to_host(), np.full(100, i))
        assert _ptr(arr) % 256 == 0
    deallocs = cudamem.current_context().memory_manager.deallocations
    pending = len(deallocs)
    del arrays, arr
    # Returned at once, not through numba's deferred queue.
    assert len(deallocs) == pending
    stats = _stats()
    assert stats["used_blocks"] == 0
    assert stats["cached_bytes"] == SLAB
    assert stats["free_blocks"] == 1  # coalesced back into the slab


def test_large_request_gets_its_own_slab(pool, sim):
    sim.reset()
    big = cudamem.device_array(3 * MIB, np.uint8)
    assert _stats()["slab_bytes"] == 4 * MIB
    # The rest of that slab serves small requests.
    small = cudamem.device_array(1000, np.uint8)
    assert _allocs(sim) == 1
    assert _ptr(small) == _ptr(big) + 3 * MIB
    del big, small


def test_coalesced_neighbours_serve_their_sum(pool, sim):
    quarter = MIB // 4
    a, b, c = (cudamem.device_array(quarter, np.uint8) for _ in range(3))
    assert _ptr(b) == _ptr(a) + quarter and _ptr(c) == _ptr(b) + quarter
    base = _ptr(a)
    sim.reset()
    del a, b
    # Best fit: the merged hole, not the larger tail of the slab.
    both = cudamem.device_array(2 * quarter, np.uint8)
    assert _ptr(both) == base
    assert _allocs(sim) == 0
    assert _stats()["slabs"] == 1
    del both, c


def _check_all(live):
    for arr, value, stream in live.values():
        got = arr.copy_to_host(stream=stream)
        if not isinstance(stream, int):
            stream.synchronize()
        assert (got == value).all()


def _run_ops(ops):
    """Allocates, fills, frees in the order `ops` says, on three streams;
    every live array is checked after each step."""
    streams = [0, cudamem.stream(), cudamem.stream()]
    live = {}
    for i, (nbytes, which, drop) in enumerate(ops):
        stream = streams[which]
        value = i % 251
        live[i] = (cudamem.to_device(np.full(nbytes, value, np.uint8),
                                     stream=stream), value, stream)
        if drop < len(live) and drop % 3 == 0:
            del live[sorted(live)[drop]]
        _check_all(live)
    cudamem.synchronize()


@settings(max_examples=30)
@given(st.lists(st.tuples(st.integers(1, 600_000), st.integers(0, 2),
                          st.integers(0, 10)), min_size=1, max_size=40))
def test_live_arrays_keep_their_data(ops):
    _cudamem._pool_enable(0, True)
    try:
        _run_ops(ops)
    finally:
        _cudamem._pool_enable(0, False)
        gc.collect()
        cudamem.synchronize()
        _cudamem._pool_trim(0)
    assert _stats()["slabs"] == 0


def test_limit_fails_with_out_of_memory_then_reuses(pool, sim):
    _cudamem._pool_set_limit(0, 4 * MIB)
    big = cudamem.device_array(3 * MIB, np.uint8)
    before = sim.live()["device_allocations"]
    # The slab's 1 MiB tail still serves this one.
    small = cudamem.device_array(MIB, np.uint8)
    with pytest.raises(CudaAPIError) as info:
        cudamem.device_array(1000, np.uint8)
    assert info.value.code == sim.error_code("CUDA_ERROR_OUT_OF_MEMORY")
    assert sim.live()["device_allocations"] == before
    assert _stats()["used_blocks"] == 2
    del big
    again = cudamem.device_array(2 * MIB, np.uint8)
    assert sim.live()["device_allocations"] == before
    assert _stats()["limit"] == 4 * MIB
    del small, again


def test_limit_trims_free_slabs_to_make_room(pool, sim):
    _cudamem._pool_set_limit(0, 4 * MIB)
    small = cudamem.device_array(1000, np.uint8)
    del small
    assert _stats()["slab_bytes"] == SLAB
    big = cudamem.device_array(3 * MIB, np.uint8)
    assert _stats()["slab_bytes"] == 4 * MIB
    assert sim.live()["device_allocations"] == 1
    del big


def test_trim_frees_wholly_free_slabs_only(pool, sim):
    base = sim.live()["device_allocations"]
    keep = cudamem.device_array(10, np.uint8)
    drop = cudamem.device_array(3 * MIB, np.uint8)
    assert sim.live()["device_allocations"] == base + 2
    del drop
    _cudamem._pool_trim(0)
    assert sim.live()["device_allocations"] == base + 1
    assert _stats()["slabs"] == 1
    del keep
    _cudamem._pool_trim(0)
    assert sim.live()["device_allocations"] == base
    assert _stats()["cached_bytes"] == 0


def test_trim_waits_for_blocks_a_stream_may_still_use(pool, hazards):
    # PyTorch's empty_cache() waits for its blocks' events the same way.
    sim = hazards
    stream = cudamem.stream()
    with sim.delay(DELAY_US):
        arr = cudamem.device_array(SLAB, np.uint8, stream=stream)
        _queue_work(arr, stream)
        del arr
        assert _stats()["pending_blocks"] == 1
        sim.reset()
        _cudamem._pool_trim(0)
        # It waited for the event recorded after the queued work ...
        assert _calls(sim, "cuEventSynchronize") == 1
        assert stream.query()
        # ... then freed the slab.
        assert _calls(sim, "cuMemFree") == 1
        assert _stats()["slabs"] == 0 and _stats()["pending_blocks"] == 0


def test_trim_waits_for_the_stream_of_a_block_without_event(pool, hazards):
    sim = hazards
    stream = cudamem.stream()
    with sim.delay(DELAY_US):
        arr = cudamem.device_array(SLAB, np.uint8, stream=stream)
        _queue_work(arr, stream)
        sim.inject("cuEventRecord", "CUDA_ERROR_OUT_OF_MEMORY")
        del arr
        assert _stats()["pending_blocks"] == 1
        sim.reset()
        _cudamem._pool_trim(0)
        assert _calls(sim, "cuEventSynchronize") == 0
        assert _calls(sim, "cuStreamSynchronize") == 1
        assert stream.query()
        assert _stats()["slabs"] == 0


def test_a_failed_wait_is_reported_and_the_block_kept(pool, sim):
    stream = cudamem.stream()
    with sim.delay(DELAY_US):
        arr = cudamem.device_array(SLAB, np.uint8, stream=stream)
        _queue_work(arr, stream)
        del arr
        sim.inject("cuEventSynchronize", "CUDA_ERROR_INVALID_VALUE")
        with pytest.raises(CudaAPIError) as info:
            _cudamem._pool_trim(0)
        assert (info.value.call, info.value.name) == (
            "cuEventSynchronize", "CUDA_ERROR_INVALID_VALUE")
        # Still pending: the trim did not take it as idle.
        assert _stats()["slabs"] == 1
        stream.synchronize()
    _cudamem._pool_trim(0)
    assert _stats()["slabs"] == 0


def test_legacy_stream_frees_need_no_event(pool, sim):
    sim.reset()
    arr = cudamem.device_array(1000)
    del arr
    assert _calls(sim, "cuEventRecord") == 0
    assert _stats()["pending_blocks"] == 0


def test_same_stream_reuse_is_immediate(pool, sim):
    stream = cudamem.stream()
    sim.set_hazards(True)
    try:
        with sim.delay(DELAY_US):
            arr = cudamem.device_array(SLAB, np.uint8, stream=stream)
            first = _ptr(arr)
            _queue_work(arr, stream)
            sim.reset()
            del arr
            # The stream's own order makes the block safe to reuse now.
            again = cudamem.device_array(SLAB, np.uint8, stream=stream)
            assert _ptr(again) == first
            assert _allocs(sim) == 0
            assert _calls(sim, "cuEventQuery") == 0
            assert _calls(sim, "cuEventSynchronize") == 0
            _queue_work(again, stream)
            stream.synchronize()
        assert sim.hazard_count() == 0, sim.last_hazard()
    finally:
        sim.set_hazards(False)
    del again


def test_cross_stream_reuse_waits_for_the_freeing_stream(pool, sim):
    a_stream, b_stream = cudamem.stream(), cudamem.stream()
    sim.set_hazards(True)
    sim.reset()
    try:
        with sim.delay(DELAY_US):
            a = cudamem.device_array(SLAB, np.uint8, stream=a_stream)
            first = _ptr(a)
            _queue_work(a, a_stream)
            del a
            assert _stats()["pending_blocks"] == 1
            # a_stream may still write the block: b_stream gets another.
            b = cudamem.device_array(SLAB, np.uint8, stream=b_stream)
            assert _ptr(b) != first
            assert _allocs(sim) == 2
            _queue_work(b, b_stream)
            a_stream.synchronize()
            # Its event has completed: reused without a new slab.
            c = cudamem.device_array(SLAB, np.uint8, stream=b_stream)
            assert _ptr(c) == first
            assert _allocs(sim) == 2
            _queue_work(c, b_stream)
            b_stream.synchronize()
        assert sim.hazard_count() == 0, sim.last_hazard()
    finally:
        sim.set_hazards(False)
    del b, c


def test_events_are_recycled(pool, sim):
    stream = cudamem.stream()
    for _ in range(3):
        arr = cudamem.device_array(100, stream=stream)
        del arr
        stream.synchronize()
        # Taken by the next allocation (ready), its event kept spare.
        nxt = cudamem.device_array(100, stream=cudamem.stream())
        del nxt
    sim.reset()
    arr = cudamem.device_array(100, stream=stream)
    del arr
    assert _calls(sim, "cuEventCreate") == 0
    assert _calls(sim, "cuEventRecord") == 1


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "close"])
def test_stale_blocks_do_not_return_into_the_new_pool(pool, sim, reset):
    stream = cudamem.stream()
    old = [cudamem.device_array(1000, stream=s) for s in (0, stream)]
    if reset:
        cudamem.get_current_device().reset()
    else:
        cudamem.close()
    stats = _stats()
    assert stats["slabs"] == 0 and not stats["enabled"]
    # The pool went with the context; the new context's manager (here the
    # test) turns it on again.
    _cudamem._pool_enable(0, True)
    fresh = cudamem.to_device(np.arange(100))
    stats = _stats()
    assert stats["slabs"] == 1 and stats["used_blocks"] == 1
    del old, stream
    gc.collect()
    stats = _stats()
    assert stats["used_blocks"] == 1 and stats["free_blocks"] == 1
    np.testing.assert_array_equal(fresh.copy_to_host(), np.arange(100))
    other = cudamem.to_device(np.arange(100) * 2)
    np.testing.assert_array_equal(fresh.copy_to_host(), np.arange(100))
    assert _ptr(other) != _ptr(fresh)
    del fresh, other


def test_out_of_memory_in_the_pool_leaves_nothing(pool, sim):
    sim.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", count=2)
    with pytest.raises(CudaAPIError) as info:
        cudamem.device_array(1000)
    assert info.value.code == sim.error_code("CUDA_ERROR_OUT_OF_MEMORY")
    stats = _stats()
    assert stats["slabs"] == 0 and stats["used_blocks"] == 0


def test_out_of_memory_trims_the_pool_and_retries(pool, sim):
    small = cudamem.device_array(1000)
    del small
    assert _stats()["slabs"] == 1
    sim.clear_faults()
    sim.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
    big = cudamem.device_array(3 * MIB, np.uint8)
    stats = _stats()
    assert stats["slabs"] == 1 and stats["slab_bytes"] == 4 * MIB
    assert sim.live()["device_allocations"] == 1
    del big


@pytest.mark.parametrize("entry", ["cuEventCreate", "cuEventRecord"])
def test_failed_event_at_free_waits_for_the_whole_stream(pool, sim, entry):
    a_stream, b_stream = cudamem.stream(), cudamem.stream()
    with sim.delay(DELAY_US):
        a = cudamem.device_array(SLAB, np.uint8, stream=a_stream)
        first = _ptr(a)
        _queue_work(a, a_stream)
        sim.inject(entry, "CUDA_ERROR_OUT_OF_MEMORY")
        sim.reset()
        del a  # no error: the block is returned all the same
        assert _stats()["pending_blocks"] == 1
        # Not for another stream while a_stream is busy ...
        b = cudamem.device_array(SLAB, np.uint8, stream=b_stream)
        assert _ptr(b) != first
        # ... but at once for its own.
        again = cudamem.device_array(SLAB, np.uint8, stream=a_stream)
        assert _ptr(again) == first
        del again
        a_stream.synchronize()
    c = cudamem.device_array(SLAB, np.uint8, stream=b_stream)
    assert _ptr(c) == first
    del b, c


def test_threads_on_their_own_streams(pool):
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        stream = cudamem.stream()
        live = []
        try:
            for i in range(60):
                n = int(rng.integers(1, 200_000))
                value = (seed * 61 + i) % 256
                live.append((cudamem.to_device(np.full(n, value, np.uint8),
                                               stream=stream), value))
                if len(live) > 4:
                    live.pop(int(rng.integers(0, len(live))))
                for arr, val in live:
                    got = arr.copy_to_host(stream=stream)
                    stream.synchronize()
                    assert (got == val).all()
            del live[:]
            stream.synchronize()
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _stats()["used_blocks"] == 0


def test_copy_temporaries_come_from_the_pool(pool, sim):
    ref = np.arange(4096.0).reshape(64, 64)
    arr = cudamem.to_device(ref)
    _cudamem._pool_enable(0, False)
    sim.reset()
    arr[1:].copy_to_device(arr[:-1])  # overlapping: through a temporary
    assert _allocs(sim) == 1
    _cudamem._pool_enable(0, True)
    sim.reset()
    arr[1:].copy_to_device(arr[:-1])
    assert _allocs(sim) == 0
    for _ in range(2):
        ref[1:] = ref[:-1].copy()
    np.testing.assert_array_equal(arr.copy_to_host(), ref)
    assert _stats()["used_blocks"] == 1
    del arr


@pytest.mark.parametrize("call, exc", [
    (lambda: _cudamem._pool_enable("0", True), TypeError),
    (lambda: _cudamem._pool_enable(7, True), ValueError),
    (lambda: _cudamem._pool_trim(None), TypeError),
    (lambda: _cudamem._pool_set_limit(0, -1), ValueError),
    (lambda: _cudamem._pool_set_limit(0, 1.5), TypeError),
    (lambda: _cudamem._pool_stats(-1), ValueError),
    (lambda: _cudamem._pool_enable(0), TypeError),
])
def test_bad_arguments(call, exc):
    with pytest.raises(exc):
        call()
    assert _stats()["enabled"] is False
