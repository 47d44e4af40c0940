"""The pinned cache's waste bound (core/hostpool.c, issue 25 item 5):
requests up to the round threshold get a power-of-two class, larger ones
their page-rounded size; a cached block is reused for a larger request
only when it holds at most an eighth more than the page-rounded request
(best fit); the bytes cached never pass the cap; the tunables come from
CUDAMEM_PINNED_ROUND_THRESHOLD and CUDAMEM_PINNED_MAX_CACHED, read once,
and from PoolMemoryManager's setters.

The references: the simulator's page-locked bytes (``live()``'s
``registered_bytes``) and registration counts, against the rule the guide
states (docs/guide/hostmem.rst), computed here from the request alone."""
import random

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError
from tests.helpers.run import run_python

pytestmark = pytest.mark.simulator

PAGE = 4096
MIB = 1 << 20
THRESHOLD = MIB             # the documented default
LIMIT = 256 * MIB           # the documented default



def pages(n):
    return -(-n // PAGE) * PAGE


def rule(n, threshold=THRESHOLD):
    """The block a fresh request of n bytes gets, as documented."""
    if n <= threshold:
        return max(PAGE, 1 << (n - 1).bit_length())
    return pages(n)


def registered(sim):
    return sim.live()["registered_bytes"]


def registers(sim):
    return sim.stats()["calls"]["cuMemHostRegister"]["calls"]


def address(ary):
    return ary.__array_interface__["data"][0]


def _sweep():
    sizes = {1, 100, PAGE - 1, PAGE + 1, 5000, 100000, 1000000, 20400000}
    for k in range(12, 31):
        sizes |= {1 << k, (1 << k) + 1}
    for k in range(12, 31, 3):
        sizes.add((1 << k) + (1 << k) // 2)
    return sorted(sizes)


@pytest.mark.parametrize("nbytes", _sweep())
def test_waste_of_a_fresh_request(sim, pool, nbytes):
    before = registered(sim)
    a = cudamem.pinned_array(nbytes, np.uint8)
    pinned = registered(sim) - before
    assert a.base.size == nbytes
    # The documented rule, then the bound it implies.
    assert pinned == rule(nbytes)
    if nbytes <= THRESHOLD:
        assert pinned < 2 * max(nbytes, PAGE)
    else:
        assert pinned - nbytes < PAGE
    # The pool's view and memory_stats() agree with the driver's.
    stats = pool.pinned_stats()
    assert stats["used_blocks"] == 1
    assert stats["requested_bytes"] == nbytes
    assert stats["pinned_bytes"] == pinned
    assert cudamem.memory_stats()["pinned_bytes_in_use"] == pinned
    del a
    stats = pool.pinned_stats()
    assert stats["used_blocks"] == stats["requested_bytes"] == 0
    assert stats["pinned_bytes"] == 0
    # Kept when it fits under the cap, freed otherwise.
    kept = pinned <= LIMIT
    assert stats["cached_bytes"] == (pinned if kept else 0)
    assert registered(sim) - before == stats["cached_bytes"]


def test_a_cached_block_serves_at_most_an_eighth_more(sim, pool):
    a = cudamem.pinned_array(8 * MIB + 1, np.uint8)  # 8 MiB + a page
    first = address(a)
    del a
    count = registers(sim)
    # 7 MiB + 1 needs 7 MiB + a page; 8 MiB + a page is more than an
    # eighth above: a block of its own.
    b = cudamem.pinned_array(7 * MIB + 1, np.uint8)
    assert registers(sim) == count + 1 and address(b) != first
    # 7.5 MiB: 8 MiB + a page is within 7.5 MiB + 7.5 MiB / 8.
    c = cudamem.pinned_array(7 * MIB + MIB // 2, np.uint8)
    assert registers(sim) == count + 1 and address(c) == first
    c[:] = 3
    assert (c == 3).all()
    stats = pool.pinned_stats()
    assert stats["requested_bytes"] == 7 * MIB + 1 + 7 * MIB + MIB // 2
    assert stats["pinned_bytes"] == pages(7 * MIB + 1) + 8 * MIB + PAGE
    del b, c


def test_best_fit_among_cached_blocks(sim, pool):
    sizes = [10 * MIB, 9 * MIB + PAGE, 8 * MIB + 3 * PAGE, 9 * MIB]
    arrays = [cudamem.pinned_array(n, np.uint8) for n in sizes]
    where = {n: address(a) for n, a in zip(sizes, arrays)}
    del arrays
    count = registers(sim)
    # 8 MiB + a page: every block is within an eighth; the smallest wins.
    a = cudamem.pinned_array(8 * MIB + 1, np.uint8)
    assert address(a) == where[8 * MIB + 3 * PAGE]
    b = cudamem.pinned_array(8 * MIB + 1, np.uint8)
    assert address(b) == where[9 * MIB]
    c = cudamem.pinned_array(9 * MIB, np.uint8)
    assert address(c) == where[9 * MIB + PAGE]
    assert registers(sim) == count
    del a, b, c


def test_reuse_follows_the_rule(sim, pool):
    """Random requests and frees of large sizes against a model of the
    documented rule: which cached block (if any) each request takes, what
    the driver holds, and that no block in use holds more than an eighth
    above its page-rounded request."""
    rng = random.Random(25)
    cached = []     # block sizes the model says are cached
    live = []       # (array, block size)
    taken = {"reused": 0, "new": 0}
    base = registered(sim)
    for _ in range(120):
        if live and rng.random() < 0.45:
            block = live.pop(rng.randrange(len(live)))[1]  # its last ref
            cached.append(block)
        else:
            n = rng.randrange(THRESHOLD + 1, 12 * MIB)
            need = pages(n)
            fits = [b for b in cached if need <= b <= need + need // 8]
            count = registers(sim)
            live.append((cudamem.pinned_array(n, np.uint8), None))
            if fits:
                block = min(fits)
                cached.remove(block)
                assert registers(sim) == count
                taken["reused"] += 1
            else:
                block = need
                assert registers(sim) == count + 1
                taken["new"] += 1
            assert (block - need) * 8 <= need
            live[-1] = (live[-1][0], block)
        stats = pool.pinned_stats()
        assert stats["cached_bytes"] == sum(cached)
        assert stats["pinned_bytes"] == sum(b for _, b in live)
        assert (registered(sim) - base
                == stats["pinned_bytes"] + stats["cached_bytes"])
    assert min(taken.values()) >= 5, taken  # both paths were taken
    live.clear()


def test_the_cap_is_never_exceeded(sim, pool):
    limit = 20 * MIB
    pool.set_pinned_limit(limit)
    rng = random.Random(5)
    base = registered(sim)
    for _ in range(4):
        arrays = [cudamem.pinned_array(rng.randrange(1, 9 * MIB), np.uint8)
                  for _ in range(12)]
        rng.shuffle(arrays)
        while arrays:
            arrays.pop()
            stats = pool.pinned_stats()
            assert stats["cached_bytes"] <= limit
            assert (registered(sim) - base
                    == stats["pinned_bytes"] + stats["cached_bytes"])
    assert pool.pinned_stats()["cached_bytes"] > 0


def test_lowering_the_cap_frees_the_largest_first(sim, pool):
    sizes = [2 * MIB + 1, 64 * 1024, 5 * MIB + 1, 512 * 1024]
    arrays = [cudamem.pinned_array(n, np.uint8) for n in sizes]
    del arrays
    blocks = sorted(rule(n) for n in sizes)
    assert pool.pinned_stats()["cached_bytes"] == sum(blocks)
    pool.set_pinned_limit(sum(blocks) - 1)
    assert pool.pinned_stats()["cached_bytes"] == sum(blocks[:-1])
    pool.set_pinned_limit(blocks[0] + blocks[1])
    stats = pool.pinned_stats()
    assert stats["cached_blocks"] == 2
    assert stats["cached_bytes"] == blocks[0] + blocks[1]


def test_set_round_threshold(sim, pool):
    pool.set_pinned_round_threshold(0)
    assert pool.pinned_stats()["round_threshold"] == 0
    before = registered(sim)
    a = cudamem.pinned_array(9000, np.uint8)
    assert registered(sim) - before == pages(9000) == 12288
    pool.set_pinned_round_threshold(64 * MIB)
    b = cudamem.pinned_array(3 * MIB + 1, np.uint8)
    assert registered(sim) - before == 12288 + 4 * MIB
    del a, b
    # A class block serves a request above the threshold within an
    # eighth; the exact block is no power of two.
    pool.set_pinned_round_threshold(THRESHOLD)
    count = registers(sim)
    c = cudamem.pinned_array(4 * MIB - 1, np.uint8)
    assert registers(sim) == count
    del c


@pytest.mark.parametrize("bad, exc, text", [
    ("1", TypeError, "not str"), (None, TypeError, "not NoneType"),
    (True, TypeError, "not bool"), (-1, ValueError, "not -1"),
    (1 << 70, ValueError, str(1 << 70)),
    (64 * MIB + 1, ValueError, str(64 * MIB + 1))])
def test_round_threshold_bad_input(pool, bad, exc, text):
    with pytest.raises(exc, match="nbytes") as info:
        pool.set_pinned_round_threshold(bad)
    assert text in str(info.value)
    assert pool.pinned_stats()["round_threshold"] == THRESHOLD


def test_register_failing_for_an_exact_block(sim, pool):
    live = sim.live()
    sim.inject("cuMemHostRegister", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        cudamem.pinned_array(3 * MIB + 1, np.uint8)
    assert info.value.call == "cuMemHostRegister"
    stats = pool.pinned_stats()
    assert stats["used_blocks"] == stats["pinned_bytes"] == 0
    assert stats["cached_blocks"] == 0
    assert sim.live() == live


_ENV = """
    import os
    import numpy as np
    import cudamem
    from cudamem import _cudamem, simulator

    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as mgr:
        stats = mgr.pinned_stats()
        # Read once: later changes to the environment do not count.
        os.environ["CUDAMEM_PINNED_ROUND_THRESHOLD"] = "0"
        os.environ["CUDAMEM_PINNED_MAX_CACHED"] = "0"
        before = simulator.live()["registered_bytes"]
        a = cudamem.pinned_array(65537, np.uint8)
        print(stats["round_threshold"], stats["limit"],
              simulator.live()["registered_bytes"] - before)
        del a
        mgr.trim()
    """


@pytest.mark.parametrize("threshold, limit, want", [
    (None, None, (THRESHOLD, LIMIT, 131072)),
    ("65536", "1000000", (65536, 1000000, 69632)),
    ("0", "0", (0, 0, 69632)),
    (str(1 << 30), "", (64 * MIB, LIMIT, 131072)),
    ("abc", "-5", (THRESHOLD, LIMIT, 131072)),
    ("1e6", "12MiB", (THRESHOLD, LIMIT, 131072)),
    ("", " 7", (THRESHOLD, LIMIT, 131072)),
    ("+5", " -5", (THRESHOLD, LIMIT, 131072))])
def test_environment(threshold, limit, want):
    proc = run_python(_ENV, env={"CUDAMEM_PINNED_ROUND_THRESHOLD": threshold,
                                 "CUDAMEM_PINNED_MAX_CACHED": limit})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = tuple(int(x) for x in proc.stdout.split())
    assert got == want
