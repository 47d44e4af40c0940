"""Pinned cache waste (issue 25, item 5), on the simulator.

For a sweep of request sizes (powers of two, one byte above them, and a
few odd sizes from 1 B to 1 GiB), makes one ``pinned_array`` of each size
under ``PoolMemoryManager`` with the host pool empty and reads how many
bytes the driver holds page-locked while it lives: the simulator's
``live()["registered_bytes"]``. Waste is (page-locked - requested) / requested.
Then, with the pool's default cap on cached bytes, frees every array of
the sweep and reports what the pool kept.

    CUDAMEM_SIMULATOR=1 python -m benchmarks.pinned_waste [--out PATH]

Counts bytes only: no timing, so the numbers are the same on any machine.
"""
import argparse
import os
import sys

import numpy as np

import cudamem
from cudamem import _cudamem, simulator

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def sizes():
    out = {1, 100, 3000, 5000, 100000, 1000000, 20400000}
    for k in range(12, 31, 2):
        out |= {1 << k, (1 << k) + 1, (1 << k) + (1 << k) // 2}
    return sorted(out)


def human(n):
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size:
            return "%.4g %s" % (n / size, unit)
    return "%d B" % n


def registered():
    return simulator.live()["registered_bytes"]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", help="write the Markdown table here")
    args = parser.parse_args(argv)
    rows = []
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as mgr:
        mgr.trim()
        for n in sizes():
            before = registered()
            a = cudamem.pinned_array(n, np.uint8)
            pinned = registered() - before
            del a
            mgr.trim()
            rows.append((n, pinned))
        arrays = [cudamem.pinned_array(n, np.uint8) for n in sizes()]
        del arrays
        kept = _cudamem._hostpool_stats()
        mgr.trim()
    lines = ["| requested | page-locked | waste |", "|---:|---:|---:|"]
    for n, pinned in rows:
        lines.append("| %d (%s) | %d | %.2f%% |"
                     % (n, human(n), pinned, 100 * (pinned - n) / n))
    lines.append("")
    mid = [(n, p) for n, p in rows if MIB < n <= 64 * MIB]
    req, pin = sum(n for n, _ in mid), sum(p for _, p in mid)
    lines.append("Requests above 1 MiB up to 64 MiB: %s requested, %s "
                 "page-locked (%.2f%% waste), worst %.2f%%."
                 % (human(req), human(pin), 100 * (pin - req) / req,
                    max(100 * (p - n) / n for n, p in mid)))
    lines.append("After freeing the whole sweep: %d blocks, %d bytes (%s) "
                 "cached (limit %d)." % (kept["cached_blocks"],
                                         kept["cached_bytes"],
                                         human(kept["cached_bytes"]),
                                         kept["limit"]))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    if not os.environ.get("CUDAMEM_SIMULATOR"):
        sys.exit("run on the simulator: CUDAMEM_SIMULATOR=1")
    main()
