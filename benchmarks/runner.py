"""The benchmark runner: times cudamem and every importable peer on the same
operations, runs floor.c for the raw driver's cost of them, and writes JSON,
a Markdown table, bandwidth plots and (``--record``) the results page of a
run. The calls timed are the adapters' (adapters.py); nothing here asserts
a speed.
"""
import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time

from benchmarks import adapters, record
from benchmarks.floorlib import Floor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
NBUF = 16  # buffers each latency benchmark rotates through, as floor.c
SMALL = (8, 4 * KIB, MIB)
IMPORTS = {"cudamem": "cudamem", "numba-cuda": "numba.cuda",
           "cupy": "cupy", "pytorch": "torch", "cuda.core": "cuda.core"}
SLICE_OP = "cuMemcpy2D DtoH %dx%d/%d" % (adapters.ROWS, adapters.WIDTH,
                                         adapters.PITCH)


def latency_plan():
    """(op, bytes, floor op, method, args) for every latency benchmark."""
    plan = []
    for pool in (False, True):
        for n in SMALL:
            plan.append(("alloc pool" if pool else "alloc", n,
                         "cuMemAlloc+cuMemFree", "alloc", (n, pool)))
    # The driver's stream-ordered pool (AsyncMemoryManager) beside them.
    for n in SMALL:
        plan.append(("alloc async", n, "cuMemAllocAsync+cuMemFreeAsync",
                     "alloc_async", (n,)))
    for direction, entry in (("htod", "cuMemcpyHtoD"),
                             ("dtoh", "cuMemcpyDtoH")):
        for memory in ("pageable", "pinned"):
            for n in SMALL:
                plan.append(("%s %s" % (direction, memory), n,
                             "%s %s" % (entry, memory), "copy",
                             (direction, memory, n)))
    for memory in ("pageable", "pinned"):
        plan.append(("slice2d dtoh %s" % memory,
                     adapters.ROWS * adapters.WIDTH,
                     "%s %s" % (SLICE_OP, memory), "slice2d", (memory,)))
    plan += [
        ("cai export", 4096, None, "cai_export", ()),
        ("cai import", 4096, None, "cai_import", ()),
        ("event record+query", 0, "cuEventRecord+cuEventQuery",
         "event_record_query", ()),
        ("stream create", 0, "cuStreamCreate+cuStreamDestroy",
         "stream_create", ()),
        ("synchronize idle", 0, "cuCtxSynchronize idle", "synchronize", ()),
    ]
    return plan


def bandwidth_sizes(max_bytes):
    sizes, n = [], 64 * KIB
    while n <= max_bytes:
        sizes.append(n)
        n *= 4
    return sizes


def time_calls(fns, warmup, samples):
    """Median, p10 and p90 ns per call over passes through fns (one call
    per rotating buffer), after warmup passes."""
    clock = time.perf_counter_ns
    for _ in range(warmup):
        for f in fns:
            f()
    per_call = []
    for _ in range(samples):
        t0 = clock()
        for f in fns:
            f()
        per_call.append((clock() - t0) / len(fns))
    return spread(per_call)


def spread(values):
    """(median, p10, p90) of values."""
    v = sorted(values)
    last = len(v) - 1
    return statistics.median(v), v[int(last * 0.1)], v[int(last * 0.9 + 0.5)]


def spread_row(values):
    """{median_ns, p10_ns, p90_ns} of values, rounded to 0.1."""
    return dict(zip(("median_ns", "p10_ns", "p90_ns"),
                    (round(v, 1) for v in spread(values))))


def _error(exc):
    return "%s: %s" % (type(exc).__name__, exc)


def measure_latency(adapter, cfg, floor, overhead_ns, in_process=None):
    """Each latency_plan() row of `adapter`, with its ratio to floor.c's
    own process ({(floor op, bytes): ns}) and to floor.c in this process
    (the same map)."""
    in_process = in_process or {}
    rows = []
    for op, nbytes, floor_op, method, args in latency_plan():
        row = {"op": op, "bytes": nbytes}
        try:
            fns = getattr(adapter, method)(*args, NBUF)
            med, p10, p90 = time_calls(fns, cfg.warmup, cfg.samples)
        except adapters.Unsupported as exc:
            row["unsupported"] = str(exc)
        except Exception as exc:
            row["error"] = _error(exc)
        else:
            # The loop's own cost per call (an empty lambda) is not the
            # library's.
            med, p10, p90 = (max(v - overhead_ns, 0.0)
                             for v in (med, p10, p90))
            row.update(median_ns=round(med, 1), p10_ns=round(p10, 1),
                       p90_ns=round(p90, 1))
            ref = floor.get((floor_op, nbytes)) if floor_op else None
            if ref:
                row.update(floor_ns=ref, overhead_ns=round(med - ref, 1),
                           ratio=round(med / ref, 3))
            ref = in_process.get((floor_op, nbytes)) if floor_op else None
            if ref:
                row.update(floor_in_process_ns=ref,
                           ratio_in_process=round(med / ref, 3))
        finally:
            try:
                adapter.cleanup()
            except Exception as exc:
                row.setdefault("error", "cleanup: " + _error(exc))
        rows.append(row)
    return rows


def measure_bandwidth(adapter, cfg, floor_bw):
    rows = []
    sizes = bandwidth_sizes(cfg.max_bytes)
    for memory in ("pageable", "pinned", "registered"):
        try:
            start, stop = adapter.timer()
            copies = dict(zip(("htod", "dtoh"),
                              adapter.bandwidth(memory, cfg.max_bytes)))
        except adapters.Unsupported as exc:
            rows.append({"memory": memory, "unsupported": str(exc)})
            adapter.cleanup()
            continue
        except Exception as exc:
            rows.append({"memory": memory, "error": _error(exc)})
            adapter.cleanup()
            continue
        for n in sizes:
            for direction, copy in copies.items():
                row = {"direction": direction, "memory": memory, "bytes": n}
                try:
                    row["gbps"] = round(_gbps(copy, n, start, stop, cfg), 3)
                except Exception as exc:
                    row["error"] = _error(exc)
                else:
                    ref = floor_bw.get((direction, memory, n))
                    if ref:
                        row.update(floor_gbps=ref,
                                   ratio=round(row["gbps"] / ref, 3))
                rows.append(row)
        try:
            adapter.cleanup()
        except Exception as exc:
            rows.append({"memory": memory, "error": "cleanup: " +
                         _error(exc)})
    return rows


def _gbps(copy, n, start, stop, cfg):
    reps = max(1, min(cfg.bw_reps, (256 * MIB) // n))
    copy(n)
    seconds = []
    for _ in range(cfg.bw_repeats):
        start()
        for _ in range(reps):
            copy(n)
        seconds.append(stop())
    return n * reps / statistics.median(seconds) / 1e9


def measure_imports(names, repeats):
    """Best-of-N ms of importing each module in a fresh interpreter, after
    numpy (whose own import time is reported beside them)."""
    code = ("import time; t0 = time.perf_counter_ns(); import numpy; "
            "t1 = time.perf_counter_ns(); import %s; "
            "print(t1 - t0, time.perf_counter_ns() - t1)")
    out = {}
    numpy_ns = []
    for name in names:
        best, err = None, None
        for _ in range(repeats):
            p = subprocess.run([sys.executable, "-c", code % IMPORTS[name]],
                               capture_output=True, text=True, cwd=ROOT)
            if p.returncode != 0:
                err = p.stderr.strip().splitlines()[-1:] or ["failed"]
                break
            np_ns, ns = map(int, p.stdout.split())
            numpy_ns.append(np_ns)
            best = ns if best is None else min(best, ns)
        out[name] = ({"error": err[0]} if err is not None
                     else {"ms": round(best / 1e6, 2)})
    return {"numpy_ms": round(min(numpy_ns) / 1e6, 2) if numpy_ns else None,
            "libraries": out}


def run_floor(cfg, driver):
    exe = cfg.floor
    if not os.path.exists(exe):
        subprocess.run(["make", "-s", "build/floor"], cwd=ROOT, check=False,
                       stdout=subprocess.DEVNULL)
    if not os.path.exists(exe):
        return {"error": "%s is missing (make build/floor)" % exe}
    path = os.path.join(cfg.out, "floor.json")
    cmd = [exe, "--json", path, "--max-bytes", str(cfg.max_bytes)]
    if cfg.quick:
        cmd.append("--quick")
    env = dict(os.environ, CUDAMEM_DRIVER=driver)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip()}
    with open(path) as f:
        return json.load(f)


def run_floor_in_process(cfg, driver):
    """floor.c's latency rows of latency_plan() timed in this process
    (benchmarks/floorlib.py), as time_calls times a library: NBUF calls a
    sample, timed inside C. {"latency": [{op, bytes, median_ns, p10_ns,
    p90_ns}]} or {"error": message}."""
    wanted = []
    for _op, n, floor_op, _m, _a in latency_plan():
        if floor_op is not None and (floor_op, n) not in wanted:
            wanted.append((floor_op, n))
    try:
        floor = Floor(driver)
    except Exception as exc:
        return {"error": _error(exc)}
    rows, failed = [], None
    try:
        for row in wanted:
            if row[0] not in floor.rows:
                continue  # the 2-D slices: floor.c's program only
            for _ in range(cfg.warmup):
                floor.time(row, NBUF)
            rows.append({"op": row[0], "bytes": row[1],
                         **spread_row(floor.time(row, NBUF)
                                      for _ in range(cfg.samples))})
    except Exception as exc:
        failed = _error(exc)
    try:
        floor.close()
    except Exception as exc:
        failed = failed or _error(exc)
    return {"error": failed} if failed else {"latency": rows}


def _floor_maps(floor):
    lat = {(r["op"], r["bytes"]): r["median_ns"]
           for r in floor.get("latency", ())}
    bw = {}
    for r in floor.get("bandwidth", ()):
        key = (r["direction"].lower(), r["memory"], r["bytes"])
        bw[key] = r["gbps"]
        if r["memory"] == "pinned":
            # Registered memory is page-locked like pinned memory: the
            # driver's pinned figure is its floor.
            bw[key[:1] + ("registered",) + key[2:]] = r["gbps"]
    return lat, bw


def loop_overhead_ns(cfg):
    fns = [lambda: None] * NBUF
    return time_calls(fns, cfg.warmup, max(cfg.samples, 50))[0]


def measure_library(adapter, cfg, floor_lat, floor_bw, overhead,
                    in_process=None):
    entry = {}
    try:
        adapter.load()
        entry["version"] = adapter.version()
    except Exception as exc:
        entry.update(status="error", error=_error(exc))
        return entry
    entry["status"] = "ok"
    entry["latency"] = measure_latency(adapter, cfg, floor_lat, overhead,
                                       in_process)
    entry["bandwidth"] = measure_bandwidth(adapter, cfg, floor_bw)
    return entry


def _peer_status(cls, cfg, simulator):
    if cfg.peers not in ("auto", "all") and \
            cls.name not in cfg.peers.split(","):
        return "skipped: --peers %s" % cfg.peers
    if simulator and cfg.peers == "auto":
        return ("skipped: the simulator is no GPU for peers "
                "(--peers all to try)")
    try:
        found = importlib.util.find_spec(cls.module.split(".")[0])
    except (ImportError, ValueError):
        found = None
    return None if found is not None else "not importable"


def _slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "device"


# ---------------------------------------------------------------------------
# Output.

def _fmt_ns(v):
    return "%.0f" % v if v >= 100 else "%.1f" % v


def _cell(row, key, fmt):
    if "error" in row:
        return "error"
    if "unsupported" in row:
        return "n/a"
    return fmt(row[key]) if key in row else "-"


def _size(n):
    for unit, div in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= div:
            return "%d %s" % (n // div, unit)
    return "%d B" % n if n else "-"


def markdown(result):
    libs = [n for n, e in result["libraries"].items() if e.get("latency")]
    meta = result["meta"]
    out = ["# Benchmarks: %s" % meta["device"], "",
           "- date: %s" % meta["date"],
           "- command: `%s`" % meta["command"],
           "- driver: %s%s" % (meta["driver"], " (simulator)"
                               if meta["simulator"] else ""),
           "- python %s, numpy %s, %s" % (meta["python"], meta["numpy"],
                                          meta["platform"]),
           "- quick: %s; timer loop overhead %.1f ns/call subtracted"
           % (meta["quick"], meta["loop_overhead_ns"])]
    for name, e in result["libraries"].items():
        out.append("- %s: %s%s" % (name, e.get("status"),
                                   " " + e["version"] if "version" in e
                                   else ""))
        if "error" in e:
            out.append("  - %s" % e["error"])
    for key, what in (("floor", "floor"),
                      ("floor_in_process", "floor in process")):
        if "error" in result[key]:
            out.append("- %s: error: %s" % (what, result[key]["error"]))
    out += ["", "## Latency (median ns per call)", "",
            "The floor is floor.c's same driver calls in a process of its "
            "own; the floor in process, the same calls timed in this one "
            "(benchmarks/floorlib.py).", "",
            "| operation | bytes | floor | floor in process | " +
            " | ".join(libs) + " | cudamem / floor | cudamem / floor in "
            "process |",
            "|---|---|---|---|" + "---|" * len(libs) + "---|---|"]
    rows = {n: result["libraries"][n]["latency"] for n in libs}
    for i, (op, nbytes, *_rest) in enumerate(latency_plan()):
        first = rows[libs[0]][i] if libs else {}
        refs = [first.get(k) for k in ("floor_ns", "floor_in_process_ns")]
        cells = [_cell(rows[n][i], "median_ns", _fmt_ns) for n in libs]
        cm = rows.get("cudamem", [{}] * (i + 1))[i]
        ratio = ("%.2fx (%+.0f ns)" % (cm["ratio"], cm["overhead_ns"])
                 if "ratio" in cm else "-")
        ratio_in = ("%.2fx" % cm["ratio_in_process"]
                    if "ratio_in_process" in cm else "-")
        out.append("| %s | %s | %s | %s | %s | %s |" % (
            op, _size(nbytes),
            " | ".join(_fmt_ns(r) if r else "-" for r in refs),
            " | ".join(cells), ratio, ratio_in))
    out += ["", "## Bandwidth (GB/s)", "",
            "| direction | memory | bytes | floor | " + " | ".join(libs) +
            " | cudamem / floor |",
            "|---|---|---|---|" + "---|" * len(libs) + "---|"]
    keyed = {n: {(r["direction"], r["memory"], r["bytes"]): r
                 for r in result["libraries"][n]["bandwidth"]
                 if "direction" in r} for n in libs}
    missing = {n: {r["memory"]: r for r in result["libraries"][n]["bandwidth"]
                   if "direction" not in r} for n in libs}
    for memory in ("pageable", "pinned", "registered"):
        for n in bandwidth_sizes(meta["max_bytes"]):
            for d in ("htod", "dtoh"):
                cells, ref, ratio = [], None, "-"
                for lib in libs:
                    r = (keyed[lib].get((d, memory, n))
                         or missing[lib].get(memory, {"error": 1}))
                    cells.append(_cell(r, "gbps", lambda v: "%.2f" % v))
                    ref = ref or r.get("floor_gbps")
                    if lib == "cudamem" and "ratio" in r:
                        ratio = "%.2f" % r["ratio"]
                out.append("| %s | %s | %s | %s | %s | %s |" % (
                    d, memory, _size(n), "%.2f" % ref if ref else "-",
                    " | ".join(cells), ratio))
    imp = result["import_time"]
    out += ["", "## Import time (ms after numpy, best of %d)"
            % meta["import_repeats"], "",
            "numpy itself: %s ms" % imp["numpy_ms"], "",
            "| library | ms |", "|---|---|"]
    for name, r in imp["libraries"].items():
        out.append("| %s | %s |" % (name, r.get("ms", r.get("error"))))
    errors = [(n, r) for n in libs for r in rows[n] if "error" in r]
    errors += [(n, r) for n in libs for r in result["libraries"][n]
               ["bandwidth"] if "error" in r]
    if errors:
        out += ["", "## Errors", ""]
        out += ["- %s %s %s: %s" % (n, r.get("op", r.get("direction", "")),
                                    r.get("memory", _size(r.get("bytes", 0))),
                                    r["error"]) for n, r in errors]
    out += ["", "## Plots", ""]
    if result["plots"]:
        out += ["- %s" % os.path.basename(p) for p in result["plots"]]
    else:
        out.append(result["plots_note"])
    return "\n".join(out) + "\n"


def plots(result, out_dir):
    """One PNG per library: GB/s against bytes, a line per direction and
    memory, the floor's dashed beside it. ([], note) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "matplotlib is not importable: no plots were made."
    paths = []
    floor = list(result["floor"].get("bandwidth", ()))
    for name, entry in result["libraries"].items():
        rows = [r for r in entry.get("bandwidth", ()) if "gbps" in r]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for d in ("htod", "dtoh"):
            for memory in ("pageable", "pinned", "registered"):
                pts = [(r["bytes"], r["gbps"]) for r in rows
                       if r["direction"] == d and r["memory"] == memory]
                if pts:
                    ax.plot(*zip(*pts), marker="o",
                            label="%s %s" % (d, memory))
        for d in ("HtoD", "DtoH"):
            for memory in ("pageable", "pinned"):
                pts = [(r["bytes"], r["gbps"]) for r in floor
                       if r["direction"] == d and r["memory"] == memory]
                if pts:
                    ax.plot(*zip(*pts), linestyle="--", alpha=0.5,
                            label="floor %s %s" % (d.lower(), memory))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes")
        ax.set_ylabel("GB/s")
        ax.set_title("%s on %s" % (name, result["meta"]["device"]))
        ax.legend(fontsize="small")
        path = os.path.join(out_dir, "bandwidth-%s.png" % _slug(name))
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths, ""


# ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="cudamem against the raw driver floor and its peers")
    p.add_argument("--quick", action="store_true",
                   help="few samples and small sizes (CI smoke run)")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "bench"),
                   help="directory for results.json, results.md, plots")
    p.add_argument("--max-bytes", type=int, default=None,
                   help="largest bandwidth size (default 1 GiB on a GPU, "
                   "64 MiB on the simulator, 1 MiB with --quick)")
    p.add_argument("--peers", default="auto",
                   help="auto (peers only on a real GPU), all, none, or "
                   "names: numba-cuda,cupy,pytorch,cuda.core")
    p.add_argument("--floor", default=os.path.join(ROOT, "build", "floor"),
                   help="floor.c's executable")
    p.add_argument("--record", action="store_true",
                   help="also write <results-dir>/<date>-<device>.md")
    p.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    cfg = p.parse_args(argv)
    names = {c.name for c in adapters.PEERS}
    unknown = set(cfg.peers.split(",")) - names - {"auto", "all", "none"}
    if unknown:
        p.error("--peers: unknown %s (known: %s)"
                % (", ".join(sorted(unknown)), ", ".join(sorted(names))))
    cfg.warmup, cfg.samples = (2, 5) if cfg.quick else (20, 100)
    cfg.bw_reps, cfg.bw_repeats = (2, 2) if cfg.quick else (10, 5)
    cfg.import_repeats = 2 if cfg.quick else 10
    return cfg


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(cfg.out, exist_ok=True)
    import numpy

    import cudamem
    import cudamem.simulator

    device = cudamem.get_current_device().name
    if isinstance(device, bytes):
        device = device.decode()
    simulator = cudamem.simulator.is_active()
    driver = (cudamem.simulator.library_path() if simulator
              else os.environ.get("CUDAMEM_DRIVER") or "libcuda.so.1")
    if cfg.max_bytes is None:
        cfg.max_bytes = (MIB if cfg.quick else
                         64 * MIB if simulator else GIB)
    argv_used = sys.argv[1:] if argv is None else argv
    now = datetime.datetime.now(datetime.UTC)
    result = {"meta": {
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(["python -m benchmarks"] +
                            [shlex.quote(a) for a in argv_used]),
        "device": device, "driver": driver, "simulator": simulator,
        "python": platform.python_version(), "numpy": numpy.__version__,
        "platform": platform.platform(), "quick": cfg.quick,
        "max_bytes": cfg.max_bytes, "import_repeats": cfg.import_repeats,
        "warmup_passes": cfg.warmup, "samples": cfg.samples,
        "rotating_buffers": NBUF}}

    result["floor"] = run_floor(cfg, driver)
    floor_lat, floor_bw = _floor_maps(result["floor"])
    result["floor_in_process"] = run_floor_in_process(cfg, driver)
    in_process, _ = _floor_maps(result["floor_in_process"])
    overhead = loop_overhead_ns(cfg)
    result["meta"]["loop_overhead_ns"] = round(overhead, 1)

    libs = {}
    order = [adapters.CudamemAdapter] + list(adapters.PEERS)
    for cls in order:
        status = None if cls is adapters.CudamemAdapter else \
            _peer_status(cls, cfg, simulator)
        if status is not None:
            libs[cls.name] = {"status": status}
            continue
        print("benchmarks: %s ..." % cls.name, file=sys.stderr, flush=True)
        libs[cls.name] = measure_library(cls(), cfg, floor_lat, floor_bw,
                                         overhead, in_process)
    result["libraries"] = libs
    measured = [n for n, e in libs.items()
                if e["status"] in ("ok", "error") and "version" in e]
    result["import_time"] = measure_imports(measured, cfg.import_repeats)
    result["plots"], result["plots_note"] = plots(result, cfg.out)

    with open(os.path.join(cfg.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    md = markdown(result)
    with open(os.path.join(cfg.out, "results.md"), "w") as f:
        f.write(md)
    if cfg.record:
        # The page of this run, in the repository and beside the outputs.
        os.makedirs(cfg.results_dir, exist_ok=True)
        page = record.unused_stem(
            cfg.results_dir, "%s-%s" % (now.strftime("%Y-%m-%d"),
                                        _slug(device)), (".md",)) + ".md"
        for path in (page, os.path.join(cfg.out, os.path.basename(page))):
            with open(path, "w") as f:
                f.write(md)
        print("benchmarks: recorded %s" % page, file=sys.stderr)
    sys.stdout.write(md)
    return 0
