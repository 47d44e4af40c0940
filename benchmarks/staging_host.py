"""The staging pipeline's host side (issue 23, item 4), on any driver.

Times large contiguous copies between pageable host memory and the device
through cudamem's staging pipeline (core/staging.c) for each combination
of CUDAMEM_STAGING_THREADS and CUDAMEM_STAGING_CHUNK, device to host with
the destination pre-faulting on and off (CUDAMEM_STAGING_PREFAULT), beside
the driver's own pageable path (staging off) and two host baselines: one
thread's np.copyto between two written buffers, and into a freshly
allocated (not yet faulted) destination.

The tunables are read once, so each configuration sets the environment and
rereads it with ``_cudamem._staging_reload()`` (the tests' hook) in this one
process. Rounds are interleaved: every configuration once per round, in an
order shuffled per round, many rounds; the table gives the median and the
10th and 90th percentiles of each configuration's GB/s (10^9 bytes per
second) and its CPU seconds per wall second (threads actually used).

    python -m benchmarks.staging_host [--quick] [--rounds N]
        [--sizes 4M,16M,...] [--out PATH]   # PATH.json and PATH.md

On the simulator (CUDAMEM_SIMULATOR=1) a "DMA" is a memcpy on the stream's
worker thread, so these numbers are the host side only; see
benchmarks/NOTES.md for what they can and cannot decide.
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time

import numpy as np

import cudamem
from cudamem import _cudamem

MIB = 1 << 20
THREADS = (1, 2, 4)
CHUNKS = (1 * MIB, 4 * MIB, 16 * MIB)
ENV = ("CUDAMEM_STAGING_THRESHOLD", "CUDAMEM_STAGING_CHUNK",
       "CUDAMEM_STAGING_THREADS", "CUDAMEM_STAGING_PREFAULT")


def parse_size(text):
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": MIB, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * mult


def label(n):
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def configure(threshold, chunk=4 * MIB, threads=4, prefault=1):
    """Sets the tunables and checks the pipeline took them."""
    values = (threshold, chunk, threads, prefault)
    for name, value in zip(ENV, values):
        os.environ[name] = str(value)
    cfg = _cudamem._staging_reload()
    want = {"threshold": threshold, "chunk": chunk, "threads": threads,
            "prefault": bool(prefault)}
    if cfg != want:
        raise RuntimeError(f"staging config {cfg} is not {want}")


class Case:
    """One configuration: the tunables `env` (None: no staging involved)
    and `run`, the timed call."""

    def __init__(self, name, direction, env, run, group):
        self.name, self.direction, self.env = name, direction, env
        self.run, self.group = run, group


def cases(n, src, dev, warm, quick):
    """The configurations for one size, over the buffers given."""
    out = []

    # Each returns what it wrote, for the check before timing.
    def htod():
        dev.copy_to_device(src)

    def dtoh_warm():
        return dev.copy_to_host(warm)

    def dtoh_fresh():
        return dev.copy_to_host()

    def memcpy_warm():
        np.copyto(warm, src)
        return warm

    def memcpy_fresh():
        fresh = np.empty_like(src)
        np.copyto(fresh, src)
        return fresh

    off = {"threshold": 0}
    out.append(Case("memcpy, written dst", "host", None, memcpy_warm,
                    "baseline"))
    out.append(Case("memcpy, fresh dst", "host", None, memcpy_fresh,
                    "baseline"))
    out.append(Case("driver pageable", "htod", off, htod, "driver"))
    out.append(Case("driver pageable, written dst", "dtoh", off, dtoh_warm,
                    "driver"))
    out.append(Case("driver pageable, fresh dst", "dtoh", off, dtoh_fresh,
                    "driver"))
    threads = (1, 4) if quick else THREADS
    chunks = (4 * MIB,) if quick else CHUNKS
    for t in threads:
        for c in chunks:
            env = {"threshold": 1, "chunk": c, "threads": t}
            tag = f"t={t} chunk={c >> 20}M"
            out.append(Case(f"staged {tag}", "htod", env, htod, "staged"))
            for pf in (0, 1):
                penv = dict(env, prefault=pf)
                out.append(Case(f"staged {tag} prefault={pf}, written dst",
                                "dtoh", penv, dtoh_warm, "staged"))
                out.append(Case(f"staged {tag} prefault={pf}, fresh dst",
                                "dtoh", penv, dtoh_fresh, "staged"))
    return out


def warm_pool(case, n):
    """The staging buffers of this chunk size into the host pool, so that
    the timed copy finds them there (as every copy after the first does)."""
    chunk = case.env.get("chunk", 4 * MIB)
    m = min(n, 2 * chunk)
    host = np.ones(m, np.uint8)
    d = cudamem.to_device(host)
    d.copy_to_host(host)
    del d


def measure(case, n):
    """Wall and CPU seconds of one call, and what it wrote."""
    configure(**(case.env or {"threshold": 0}))
    if case.env and case.env["threshold"]:
        warm_pool(case, n)
    w0, c0 = time.perf_counter(), time.process_time()
    result = case.run()
    w1, c1 = time.perf_counter(), time.process_time()
    return w1 - w0, c1 - c0, result


def pct(values, q):
    values = sorted(values)
    k = (len(values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def run_size(n, rounds, quick, seed, log):
    rng = np.random.default_rng(n)
    src = rng.integers(0, 256, n, dtype=np.uint8)
    dev = cudamem.to_device(src)
    warm = np.zeros(n, np.uint8)
    todo = cases(n, src, dev, warm, quick)
    # Every path once, checked against NumPy, before anything is timed.
    for case in todo:
        if case.direction == "htod":
            dev.copy_to_device(np.zeros_like(src))
        result = measure(case, n)[2]
        if case.direction == "htod":
            configure(0)
            result = dev.copy_to_host()
        if not np.array_equal(result, src):
            raise RuntimeError(f"{label(n)} {case.name}: wrong bytes")
        warm[:] = 0
    times = {c.name: [] for c in todo}
    cpu = {c.name: [] for c in todo}
    order = list(todo)
    shuffle = random.Random(seed + n)
    for r in range(rounds):
        shuffle.shuffle(order)
        for case in order:
            wall, used, _ = measure(case, n)
            times[case.name].append(wall)
            cpu[case.name].append(used)
        log(f"  {label(n)} round {r + 1}/{rounds}")
    rows = []
    for case in todo:
        gbs = [n / t / 1e9 for t in times[case.name]]
        rows.append({
            "size": n, "direction": case.direction, "group": case.group,
            "config": case.name, "env": case.env,
            "gbs_median": statistics.median(gbs),
            "gbs_p10": pct(gbs, 0.1), "gbs_p90": pct(gbs, 0.9),
            "ms_median": statistics.median(times[case.name]) * 1e3,
            "cpu_per_wall": statistics.median(
                c / t for c, t in zip(cpu[case.name], times[case.name])),
            "rounds": rounds})
    del dev
    return rows


def machine():
    info = {"python": platform.python_version(), "numpy": np.__version__,
            "cpus": os.cpu_count(), "platform": platform.platform(),
            "simulator": os.environ.get("CUDAMEM_SIMULATOR") == "1"}
    for key, path in (("thp", "/sys/kernel/mm/transparent_hugepage/enabled"),
                      ("loadavg", "/proc/loadavg")):
        try:
            with open(path) as f:
                info[key] = f.read().strip()
        except OSError:
            pass
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f
                               if line.startswith("model name"))
        info["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True,
            text=True, check=False).stdout.strip()
    except (OSError, StopIteration):
        pass
    return info


def markdown(rows, meta):
    lines = [f"Command: `{meta['command']}`", "",
             "Machine: " + ", ".join(f"{k} {v}" for k, v in
                                     meta["machine"].items()), "",
             "GB/s = 10^9 bytes / s; median (p10 to p90) over interleaved "
             "rounds; cpu = process CPU seconds per wall second, median.", ""]
    for n in sorted({r["size"] for r in rows}):
        lines += [f"### {label(n)} ({rows[0]['rounds']} rounds)", "",
                  "| direction | configuration | GB/s | p10 to p90 | ms "
                  "| cpu |",
                  "|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["size"] == n):
            lines.append(
                f"| {r['direction']} | {r['config']} | "
                f"{r['gbs_median']:.2f} | {r['gbs_p10']:.2f} to "
                f"{r['gbs_p90']:.2f} | {r['ms_median']:.1f} | "
                f"{r['cpu_per_wall']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 4 and 16 MiB, 2 rounds, fewer configs")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--sizes", default=None,
                    help="comma-separated, e.g. 4M,16M,64M,256M,1G")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--out", default=None,
                    help="writes OUT.json and OUT.md (no suffix)")
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in (
        args.sizes or ("4M,16M" if args.quick else "4M,16M,64M,256M,1G")
    ).split(",")]
    rounds = args.rounds or (2 if args.quick else 9)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    saved = {k: os.environ.get(k) for k in ENV}
    rows = []
    try:
        for n in sizes:
            log(f"{label(n)}:")
            rows += run_size(n, rounds, args.quick, args.seed, log)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _cudamem._staging_reload()
    meta = {"command": " ".join(["python -m benchmarks.staging_host"]
                                + (argv if argv is not None
                                   else sys.argv[1:])),
            "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    text = markdown(rows, meta)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
