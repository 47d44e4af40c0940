"""The pool's statistics are counters kept as blocks move (core/pool.c),
not a walk of its lists: after a seeded random sequence of allocations and
frees they equal a recount made from outside the pool: the live arrays,
their slabs (cuMemGetAddressRange through device_extents) and the
simulator's own count of cuMemAlloc allocations. Frees on the legacy
stream coalesce at once, so every gap between live blocks of a slab is one
free block, and a slab without live blocks is one."""
import random

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem, driver

pytestmark = pytest.mark.simulator

ALIGN = 256



def recount(sim, live):
    """The statistics the pool must report, from the live arrays alone."""
    blocks = {}
    for arr in live.values():
        ptr = arr.__cuda_array_interface__["data"][0]
        size = -(-arr.nbytes // ALIGN) * ALIGN
        blocks.setdefault(driver.device_extents(arr), []).append((ptr, size))
    free = 0
    for (start, end), used in blocks.items():
        at = start
        for ptr, size in sorted(used):
            free += ptr > at
            at = ptr + size
        free += at < end
    slabs = sim.live()["device_allocations"]
    slab_bytes = sim.live()["device_bytes"]
    used_bytes = sum(size for used in blocks.values() for _, size in used)
    return {
        "slabs": slabs,
        "slab_bytes": slab_bytes,
        "used_blocks": len(live),
        "used_bytes": used_bytes,
        "free_blocks": free + slabs - len(blocks),
        "cached_bytes": slab_bytes - used_bytes,
        "pending_blocks": 0,
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stats_equal_a_recount(sim, pool, seed):
    rng = random.Random(seed)
    live, values = {}, {}
    for step in range(400):
        if live and rng.random() < 0.45:
            key = rng.choice(sorted(live))
            np.testing.assert_array_equal(live[key].copy_to_host(),
                                          values.pop(key))
            del live[key]
        else:
            # Mostly small blocks sharing slabs, some of their own slab.
            n = (rng.randint(1, 40_000) if rng.random() < 0.95
                 else rng.randint(140_000, 400_000))
            values[step] = np.full(n, step, dtype=np.float64)
            live[step] = cudamem.to_device(values[step])
        if step % 25 == 0:
            stats = _cudamem._pool_stats(0)
            expected = recount(sim, live)
            assert {k: stats[k] for k in expected} == expected
    stats = _cudamem._pool_stats(0)
    assert {k: stats[k] for k in recount(sim, live)} == recount(sim, live)
    for key in live:
        np.testing.assert_array_equal(live[key].copy_to_host(), values[key])
    live.clear()
    stats = _cudamem._pool_stats(0)
    assert stats["used_blocks"] == 0
    assert stats["free_blocks"] == stats["slabs"]  # each slab whole again


def test_best_fit_takes_the_smallest_block_that_fits(sim, pool):
    # Free blocks of 2, 3, 5 and 9 units (ALIGN bytes) between live ones:
    # each request takes the smallest that fits, exact fits first, across
    # size classes.
    sizes = [2, 1, 3, 1, 5, 1, 9, 1]
    arrays = [cudamem.device_array(k * ALIGN, dtype=np.uint8)
              for k in sizes]
    ptrs = [a.__cuda_array_interface__["data"][0] for a in arrays]
    for i in (0, 2, 4, 6):
        arrays[i] = None
    for want, slot in [(3, 2), (1, 0), (4, 4), (6, 6)]:
        got = cudamem.device_array(want * ALIGN, dtype=np.uint8)
        assert got.__cuda_array_interface__["data"][0] == ptrs[slot]
        arrays.append(got)
