"""``make bench-peers``: cudamem, numba-cuda, cuda.core and raw cuda.bindings
in one process on cudamem's simulated driver, timed on the same small
operations in interleaved rounds, beside floor.c making the same driver
calls; then, per operation and library, the system calls, the driver calls
and the instructions outside the driver that one operation costs.

Run it inside the peers venv on the simulator (the Makefile does):

    PYTHONPATH=. build/peers-venv/bin/python -m cudamem.simulator run -- \\
        build/peers-venv/bin/python -m benchmarks.peers [--quick]

Method (benchmarks/README.md says more):

- time: for each operation, round r times a batch of calls of every
  library in turn (the starting library rotates), so load drifts on a
  shared machine hit every library alike, each batch right after one
  untimed pass of its own calls; median, p10 and p90 over rounds
  of ns per call, minus the cost of an empty call timed in the same rounds;
  the floor is floor.c's same driver calls, built as build/libfloor.so and
  timed inside it in this process, taking its turn in every round; floor.c
  as a process of its own (``--quick``) runs every few rounds of the same
  operation too, and the median of its medians is shown beside it;
- driver calls: ``cudamem.simulator.stats()["calls"]`` before and after a
  counted loop (the simulator counts every entry point on every thread);
- system calls: one child process under ``strace -f`` runs every counted
  loop between two marker ``stat`` calls of a path that names it; the
  lines between the markers, all threads, divided by the calls;
- instructions: one child process under ``valgrind --tool=callgrind`` with
  collection off, running every counted loop from inside a C callback
  (CPython's ctypes ``closure_fcn``, called back by libc ``bsearch``) that
  callgrind toggles collection on and dumps after; per dump, all
  instructions minus those whose code is in the simulator's library (its
  own functions: libc work the simulator calls counts as outside), minus
  the same count for an empty call.
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks import adapters, record
from benchmarks.floorlib import Floor
from benchmarks.runner import spread_row

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NBUF = 16
LIBS = (adapters.CudamemAdapter, adapters.NumbaAdapter,
        adapters.CudaCoreAdapter, adapters.BindingsAdapter)
# (op, adapter method, args, floor.c's row of the same driver calls; None:
# no driver counterpart).
OPS = (
    ("alloc+free 8 B", "alloc", (8, False),
     ("cuMemAlloc+cuMemFree", 8)),
    ("alloc+free 8 B stream-ordered", "alloc_async", (8,),
     ("cuMemAllocAsync+cuMemFreeAsync", 8)),
    ("to_device 8 B", "to_device", (8,),
     ("cuMemAlloc+cuMemcpyHtoD+cuMemFree", 8)),
    ("DtoH 8 B", "copy", ("dtoh", "pageable", 8),
     ("cuMemcpyDtoH pageable", 8)),
    ("pinned HtoD 8 B", "copy", ("htod", "pinned", 8),
     ("cuMemcpyHtoD pinned", 8)),
    ("stream create+destroy", "stream_create", (),
     ("cuStreamCreate+cuStreamDestroy", 0)),
    ("event record+query", "event_record_query", (),
     ("cuEventRecord+cuEventQuery", 0)),
    ("CAI export", "cai_export", (), None),
    ("CAI import", "cai_import", (), None),
    ("synchronize() idle", "synchronize", (),
     ("cuCtxSynchronize idle", 0)),
)
LOOP = "(empty call)"
FLOOR = "C floor"
FLOOR_ROWS = {op: row for op, _m, _a, row in OPS if row}
# floor.c's rows making an op's calls in the order of numba's deferred
# frees (the eleventh pending one frees all), which cudamem and numba-cuda
# follow: timed in the same rounds, reported beside the floor, never the
# bound's.
DEFERRED = "C floor, frees deferred"
DEFERRED_ROWS = {"alloc+free 8 B": ("cuMemAlloc+cuMemFree deferred", 8)}
MARK = "/benchmarks-peers-marker"
# CPython's ctypes callback entry (Modules/_ctypes/callbacks.c): the counted
# loop runs inside it, called back by libc's bsearch.
MARK_FN = "closure_fcn"
# The bound of issue 23: within 1.2x the floor or 0.3 us above it.
BOUND_RATIO, BOUND_NS = 1.2, 300.0


def _error(exc):
    return "%s: %s" % (type(exc).__name__, exc)


def load_libraries():
    """{name: loaded adapter or error string}, in LIBS order."""
    out = {}
    for cls in LIBS:
        a = cls()
        try:
            a.load()
            a.ver = a.version()
        except Exception as exc:
            out[cls.name] = _error(exc)
        else:
            out[cls.name] = a
    return out


def _fns(adapter, method, args):
    if adapter is None:
        return [lambda: None] * NBUF
    return getattr(adapter, method)(*args, NBUF)


def _cleanup(adapter):
    if adapter is not None:
        adapter.cleanup()


def each_op(libs):
    """(op, [(lib name, adapter, fns or exception)]) for every op, the
    empty call first, over the loaded libraries; each adapter is cleaned
    up after its op."""
    live = [(n, a) for n, a in libs.items() if not isinstance(a, str)]
    for op, method, args, _floor in ((LOOP, None, (), None),) + OPS:
        made = []
        for name, a in live:
            try:
                made.append((name, a if method else None,
                             _fns(a if method else None, method, args)))
            except Exception as exc:
                made.append((name, a, exc))
        yield op, made
        for _name, a, _fns_or_exc in made:
            _cleanup(a if method else None)


# ---------------------------------------------------------------------------
# Time, interleaved.

def _batch(fns, passes):
    clock = time.perf_counter_ns
    t0 = clock()
    for _ in range(passes):
        for f in fns:
            f()
    return (clock() - t0) / (passes * len(fns))


def time_interleaved(libs, cfg, floor, floor_once):
    """({op: {lib: {median_ns, p10_ns, p90_ns} | {error} | {unsupported}}},
    {op: floor's {median_ns, p10_ns, p90_ns}},
    {op: floor's own process's {median_ns, p10_ns, p90_ns}},
    {op: the deferred floor's {median_ns, p10_ns, p90_ns}}); the empty
    call's median is subtracted from every library's row of the same op.
    The floor (a Floor) takes its turn in every round like a library, its
    calls timed inside floor.c. floor_once() runs floor.c as a process of
    its own every cfg.floor_every rounds: its medians over those runs are
    the second floor, sampled through the same stretch of the machine's
    load."""
    out, floors, process_floors, deferred_floors = {}, {}, {}, {}
    for op, made in each_op(libs):
        row = FLOOR_ROWS.get(op)
        floor_rows = {FLOOR: row, DEFERRED: DEFERRED_ROWS.get(op)}
        process_ns = []
        rows = {}
        ok = [(n, None) for n, r in floor_rows.items() if r]
        for name, _a, fns in made:
            if isinstance(fns, adapters.Unsupported):
                rows[name] = {"unsupported": str(fns)}
            elif isinstance(fns, Exception):
                rows[name] = {"error": _error(fns)}
            else:
                ok.append((name, fns))
        empty = [lambda: None] * NBUF
        samples = {name: [] for name, _ in ok}
        samples[LOOP] = []

        def one(name, fns, passes, floor_rows=floor_rows):
            if name in floor_rows:
                return floor.time(floor_rows[name], passes * NBUF)
            return _batch(fns, passes)
        for name, fns in list(ok):  # warm-up
            try:
                one(name, fns, cfg.warmup)
            except Exception as exc:
                rows[name] = {"error": _error(exc)}
                ok.remove((name, fns))
        for r in range(cfg.rounds):
            if row and r % cfg.floor_every == 0:
                process_ns += [v for k, v in floor_once().items() if k == op]
            order = ok[r % len(ok):] + ok[:r % len(ok)] if ok else []
            samples[LOOP].append(_batch(empty, cfg.passes))
            for name, fns in order:
                try:
                    # Untimed, one pass: what the library before left in
                    # the caches is not this library's cost per call.
                    one(name, fns, cfg.rewarm)
                    samples[name].append(one(name, fns, cfg.passes))
                except Exception as exc:
                    rows[name] = {"error": _error(exc)}
                    ok.remove((name, fns))
        loop = statistics.median(samples[LOOP])
        for name, _ in ok:
            if name == FLOOR:
                floors[op] = spread_row(samples[name])
            elif name == DEFERRED:
                deferred_floors[op] = spread_row(samples[name])
            else:
                rows[name] = spread_row([max(v - loop, 0.0)
                                     for v in samples[name]])
        for name in floor_rows:
            if name in rows:
                raise RuntimeError("floor.c in process, %s: %s"
                                   % (op, rows[name]["error"]))
        if process_ns:
            process_floors[op] = spread_row(process_ns)
        if op != LOOP:
            out[op] = rows
        else:
            out[LOOP] = {"median_ns": round(loop, 1)}
        print("bench-peers: timed %s" % op, file=sys.stderr, flush=True)
    return out, floors, process_floors, deferred_floors


def driver_calls(libs, cfg):
    """{op: {lib: {"per_op": n, "entries": {entry: n per op}}}}."""
    import cudamem.simulator as sim
    out = {}
    for op, made in each_op(libs):
        if op == LOOP:
            continue
        rows = out[op] = {}
        for name, _a, fns in made:
            if isinstance(fns, Exception):
                continue
            try:
                for f in fns:
                    f()
                before = sim.stats()["calls"]
                n = cfg.count_passes * len(fns)
                for _ in range(cfg.count_passes):
                    for f in fns:
                        f()
                after = sim.stats()["calls"]
            except Exception:
                continue  # the time table reports the error
            entries = {k: round((after[k]["calls"] - before[k]["calls"]) / n,
                                2) for k in after
                       if after[k]["calls"] != before[k]["calls"]}
            rows[name] = {"per_op": round(sum(entries.values()), 2),
                          "entries": entries}
    return out


# ---------------------------------------------------------------------------
# Child processes under strace and callgrind.

def child(cfg):
    """Runs every counted loop once, marked for strace or callgrind."""
    libs = load_libraries()
    for name, a in libs.items():
        if isinstance(a, str):
            print("bench-peers: %s child: %s: %s" % (cfg.child, name, a),
                  file=sys.stderr)
    loops = []
    libc = ctypes.CDLL(None)
    cmp_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    key = ctypes.c_int(0)
    for op, made in each_op(libs):
        for name, _a, fns in made:
            if isinstance(fns, Exception):
                continue
            try:
                for _ in range(cfg.warmup):
                    for f in fns:
                        f()
            except Exception:
                continue  # the time table reports the error
            n = cfg.count_passes * len(fns)

            def run(fns=fns):
                for _ in range(cfg.count_passes):
                    for f in fns:
                        f()
            if cfg.child == "strace":
                _mark("begin", name, op)
                run()
                _mark("end", name, op)
            else:
                def cb(_k, _e, run=run):
                    run()
                    return 0
                fn = cmp_t(cb)
                libc.bsearch(ctypes.byref(key), ctypes.byref(key), 1, 4, fn)
            loops.append({"lib": name, "op": op, "calls": n})
    with open(cfg.child_out, "w") as f:
        json.dump(loops, f)
    return 0


def _mark(what, lib, op):
    try:
        os.stat("%s/%s/%s/%s" % (MARK, what, _slug(lib), _slug(op)))
    except OSError:
        pass


def _slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def _child_cmd(cfg, kind, out):
    cmd = [sys.executable, "-m", "benchmarks.peers", "--child", kind,
           "--child-out", out]
    if cfg.quick:
        cmd.append("--quick")
    return cmd


def count_syscalls(cfg):
    """{(lib, op): system calls per op, all threads}."""
    trace = os.path.join(cfg.out, "strace.txt")
    loops_path = os.path.join(cfg.out, "strace-loops.json")
    cmd = ["strace", "-f", "-qq", "-o", trace] + \
        _child_cmd(cfg, "strace", loops_path)
    subprocess.run(cmd, check=True, cwd=ROOT)
    with open(loops_path) as f:
        loops = json.load(f)
    with open(trace, errors="replace") as f:
        return syscalls_per_op(f, loops)


def syscalls_per_op(lines, loops):
    """{(lib, op): system calls per op} from the lines of ``strace -f``:
    the calls of every thread between a loop's begin and end markers (a
    call resumed after another thread's counts once), over its calls."""
    loops = {(_slug(x["lib"]), _slug(x["op"])): x for x in loops}
    out, open_marks = {}, {}
    pat = re.compile(r'^\d+\s+(newfstatat|stat|statx)\(.*"%s/'
                     r'(begin|end)/([^/]+)/([^"]+)"' % re.escape(MARK))
    for line in lines:
        m = pat.match(line)
        if m:
            key = (m.group(3), m.group(4))
            if m.group(2) == "begin":
                open_marks[key] = 0
            else:
                x = loops[key]
                out[(x["lib"], x["op"])] = round(
                    open_marks.pop(key) / x["calls"], 2)
            continue
        if not open_marks or "resumed>" in line:
            continue
        body = line.split(None, 1)[1] if " " in line else ""
        if body.startswith(("+++", "---")):
            continue
        for k in open_marks:
            open_marks[k] += 1
    return out


def count_instructions(cfg, driver):
    """{(lib, op): instructions per op outside the driver library}."""
    prefix = os.path.join(cfg.out, "callgrind.out")
    for old in os.listdir(cfg.out):
        if old.startswith("callgrind.out"):
            os.remove(os.path.join(cfg.out, old))
    loops_path = os.path.join(cfg.out, "callgrind-loops.json")
    cmd = ["valgrind", "--tool=callgrind", "-q", "--collect-atstart=no",
           "--toggle-collect=" + MARK_FN, "--dump-after=" + MARK_FN,
           "--callgrind-out-file=" + prefix + ".%p"] + \
        _child_cmd(cfg, "callgrind", loops_path)
    subprocess.run(cmd, check=True, cwd=ROOT)
    with open(loops_path) as f:
        loops = json.load(f)
    dumps = sorted((p for p in os.listdir(cfg.out)
                    if re.match(r"callgrind\.out\.\d+\.\d+$", p)),
                   key=lambda p: int(p.rsplit(".", 1)[1]))
    if len(dumps) != len(loops):
        raise RuntimeError("callgrind wrote %d dumps for %d loops"
                           % (len(dumps), len(loops)))
    drv = os.path.realpath(driver)
    per = {}
    for x, dump in zip(loops, dumps):
        total, inside = _callgrind_costs(os.path.join(cfg.out, dump), drv)
        per[(x["lib"], x["op"])] = (total - inside) / x["calls"]
    out = {}
    for (lib, op), v in per.items():
        if op != LOOP:
            out[(lib, op)] = round(v - per.get((lib, LOOP), 0.0))
    return out


def _callgrind_costs(path, driver):
    """(all Ir, Ir of functions in the object `driver`) of one dump: self
    costs only (the cost line after calls= is inclusive and skipped)."""
    names, obj = {}, None
    total = inside = 0
    skip = False
    with open(path) as f:
        for line in f:
            if skip:
                skip = False
                continue
            if line.startswith(("ob=", "cob=")):
                # Objects share one table of compressed names: the first
                # mention of (n), as ob= or cob=, gives its name.
                m = re.match(r"c?ob=(?:\((\d+)\))?\s*(.*)",
                             line.rstrip("\n"))
                ident, name = m.group(1), m.group(2)
                if ident and name:
                    names[ident] = name
                if line.startswith("ob="):
                    obj = names.get(ident, name) if ident else name
            elif line.startswith("calls="):
                skip = True
            elif line[:1] in "0123456789+-*":
                parts = line.split()
                if len(parts) >= 2:
                    ir = int(parts[1])
                    total += ir
                    if obj and os.path.realpath(obj) == driver:
                        inside += ir
    return total, inside


# ---------------------------------------------------------------------------
# Floor and output.

def floor_once(cfg, driver):
    """{op: ns} from one quick run of floor.c on the same simulator."""
    exe = os.path.join(ROOT, "build", "floor")
    if not os.path.exists(exe):
        raise SystemExit("bench-peers: %s is missing (make build/floor)"
                         % exe)
    path = os.path.join(cfg.out, "floor.json")
    subprocess.run([exe, "--quick", "--json", path, "--max-bytes", "64K"],
                   check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, CUDAMEM_DRIVER=driver))
    with open(path) as f:
        lat = {(r["op"], r["bytes"]): r["median_ns"]
               for r in json.load(f)["latency"]}
    return {op: lat[row] for op, row in FLOOR_ROWS.items()}


def _us(ns):
    return "%.2f" % (ns / 1e3)


def _spread(row):
    if "median_ns" in row:
        return "%s [%s-%s]" % (_us(row["median_ns"]), _us(row["p10_ns"]),
                               _us(row["p90_ns"]))
    return "n/a" if "unsupported" in row else "error"


def summarize(result):
    """Per op: cudamem's ratio to the floor and to the fastest peer."""
    for op, rows in result["time"].items():
        floor = result["floor"].get(op)
        peers = {n: r["median_ns"] for n, r in rows.items()
                 if n != "cudamem" and "median_ns" in r}
        cm = rows.get("cudamem", {})
        s = {}
        if peers:
            best = min(peers, key=peers.get)
            s.update(fastest_peer=best, fastest_peer_ns=peers[best])
        if "median_ns" in cm:
            if peers:
                s["cudamem_over_fastest_peer"] = round(
                    cm["median_ns"] / max(peers[best], 1e-9), 3)
            if floor:
                s["cudamem_over_floor"] = round(cm["median_ns"] / floor, 3)
                s["cudamem_minus_floor_ns"] = round(cm["median_ns"] - floor,
                                                    1)
                s["within_bound"] = cm["median_ns"] <= max(
                    floor * BOUND_RATIO, floor + BOUND_NS)
        result["summary"][op] = s


def markdown(result):
    meta = result["meta"]
    names = meta["libraries"]
    out = ["# Benchmarks: peers on the simulator", "",
           "- date: %s" % meta["date"],
           "- command: `%s`" % meta["command"],
           "- machine: %s; %s CPUs; load average %s before, %s after"
           % (meta["cpu"], meta["cpus"], meta["load_before"],
              meta["load_after"]),
           "- python %s, numpy %s, %s" % (meta["python"], meta["numpy"],
                                          meta["platform"]),
           "- driver: %s (simulator)" % meta["driver"],
           "- rounds %d x %d calls per library and op, interleaved; empty "
           "call %.1f ns subtracted" % (meta["rounds"],
                                        meta["calls_per_batch"],
                                        result["time_loop_ns"])]
    for n in names:
        out.append("- %s: %s" % (n, meta["versions"][n]))
    head = "| op | C floor | C floor, own process | " + " | ".join(names)
    out += ["", "## Time (us per op, median [p10-p90])", "",
            "The C floor is floor.c's same driver calls timed in this "
            "process, in the same rounds; the bound and every ratio use it. "
            "Its own process is floor.c run apart, for comparison.", "",
            head + " | cudamem / floor | cudamem - floor | fastest peer | "
            "cudamem / fastest peer | within bound |",
            "|---|---|---|" + "---|" * (len(names) + 5)]
    for op, _m, _a, _f in OPS:
        rows = result["time"][op]
        s = result["summary"].get(op, {})
        cells = [_spread(rows.get(n, {})) for n in names]
        f = result["floor_spread"].get(op)
        fp = result["floor_process_spread"].get(op)
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            op, _spread(f) if f else "-", _spread(fp) if fp else "-",
            " | ".join(cells),
            "%.2fx" % s["cudamem_over_floor"]
            if "cudamem_over_floor" in s else "-",
            "%+.2f" % (s["cudamem_minus_floor_ns"] / 1e3)
            if "cudamem_minus_floor_ns" in s else "-",
            s.get("fastest_peer", "-"),
            "%.2fx" % s["cudamem_over_fastest_peer"]
            if "cudamem_over_fastest_peer" in s else "-",
            {True: "yes", False: "**no**"}.get(s.get("within_bound"), "-")))
    deferred = result.get("floor_deferred_spread", {})
    if deferred:
        out += ["", "## The same calls in the order of deferred frees", "",
                "numba's API defers frees: the eleventh pending one frees "
                "them all, oldest first (cudamem and numba-cuda do so; "
                "cuda.bindings frees each at once). floor.c's deferred row "
                "makes the C floor's calls in that order, in the same "
                "rounds: its difference from the C floor is what the order "
                "costs the driver, whichever library makes the calls. For "
                "information; the bound uses the C floor.", "",
                "| op | C floor | C floor, frees deferred | deferred - floor "
                "| cudamem | cudamem - deferred floor |",
                "|---|---|---|---|---|---|"]
        for op, d in deferred.items():
            f = result["floor_spread"][op]
            cm = result["time"][op].get("cudamem", {})
            out.append("| %s | %s | %s | %+.2f | %s | %s |" % (
                op, _spread(f), _spread(d),
                (d["median_ns"] - f["median_ns"]) / 1e3, _spread(cm),
                "%+.2f" % ((cm["median_ns"] - d["median_ns"]) / 1e3)
                if "median_ns" in cm else "-"))
    out += ["", "## Ratio to the C floor (median / floor's median)", "",
            "| op | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names)]
    for op, _m, _a, _f in OPS:
        floor = result["floor"].get(op)
        cells = []
        for n in names:
            r = result["time"][op].get(n, {})
            cells.append("%.2fx" % (r["median_ns"] / floor)
                         if floor and "median_ns" in r else "-")
        out.append("| %s | %s |" % (op, " | ".join(cells)))
    for title, key in (("System calls per op (strace -f, all threads)",
                        "syscalls"),
                       ("Driver calls per op (simulator counters)",
                        "driver_calls"),
                       ("Instructions per op outside the driver "
                        "(callgrind)", "instructions")):
        out += ["", "## " + title, "", "| op | " + " | ".join(names) + " |",
                "|---|" + "---|" * len(names)]
        for op, _m, _a, _f in OPS:
            cells = []
            for n in names:
                v = result[key].get(op, {}).get(n)
                if isinstance(v, dict):
                    v = v["per_op"]
                cells.append("-" if v is None else
                             "%d" % v if key == "instructions" else "%g" % v)
            out.append("| %s | %s |" % (op, " | ".join(cells)))
    out += ["", "Driver entry points per op:", ""]
    for op, _m, _a, _f in OPS:
        for n in names:
            e = result["driver_calls"].get(op, {}).get(n)
            if e and e["entries"]:
                out.append("- %s, %s: %s" % (op, n, ", ".join(
                    "%s %g" % kv for kv in sorted(e["entries"].items()))))
    errors = [(op, n, r) for op, rows in result["time"].items()
              for n, r in rows.items() if "error" in r]
    if errors:
        out += ["", "## Errors", ""]
        out += ["- %s, %s: %s" % (op, n, r["error"]) for op, n, r in errors]
    return "\n".join(out) + "\n"


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.peers",
        description="cudamem against numba-cuda, cuda.core and raw "
        "cuda.bindings on the simulator, interleaved")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: few rounds, results not recorded")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "bench",
                                                 "peers"))
    p.add_argument("--results-dir", default=os.path.join(HERE, "results"),
                   help="where a full run records <date>-simulator.md/.json")
    p.add_argument("--child", choices=("strace", "callgrind"),
                   help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    cfg = p.parse_args(argv)
    # Short batches, many rounds: on a loaded machine a batch the scheduler
    # cut into is an outlier the median drops, not a share of every sample.
    cfg.rounds, cfg.passes, cfg.warmup = (11, 1, 2) if cfg.quick else \
        (301, 2, 20)
    cfg.rewarm = 1
    cfg.count_passes = 2 if cfg.quick else 10
    cfg.floor_every = 5 if cfg.quick else 30
    return cfg


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cfg = parse_args(argv)
    if cfg.child:
        return child(cfg)
    missing = [t for t in ("strace", "valgrind") if not shutil.which(t)]
    if missing:
        raise SystemExit("bench-peers: %s not found (apt-get install %s)"
                         % (" and ".join(missing), " ".join(missing)))
    import numpy

    import cudamem
    import cudamem.simulator as sim
    if not sim.is_active():
        raise SystemExit("bench-peers: runs on the simulator only (python "
                         "-m cudamem.simulator run -- ...)")
    os.makedirs(cfg.out, exist_ok=True)
    cudamem.get_current_device()
    driver = sim.library_path()
    now = datetime.datetime.now(datetime.UTC)
    load_before = "%.2f" % os.getloadavg()[0]
    libs = load_libraries()
    result = {"meta": {
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(
            ["python -m cudamem.simulator run -- python -m benchmarks.peers"]
            + [shlex.quote(a) for a in argv]) + " (make bench-peers)",
        "cpu": _cpu(), "cpus": os.cpu_count(), "load_before": load_before,
        "python": platform.python_version(), "numpy": numpy.__version__,
        "platform": platform.platform(), "driver": driver,
        "quick": cfg.quick, "rounds": cfg.rounds,
        "calls_per_batch": cfg.passes * NBUF,
        "libraries": list(libs),
        "versions": {n: a if isinstance(a, str) else a.ver
                     for n, a in libs.items()}}, "summary": {}}
    floor = Floor(driver)
    try:
        (result["time"], floors, result["floor_process_spread"],
         result["floor_deferred_spread"]) = time_interleaved(
            libs, cfg, floor, lambda: floor_once(cfg, driver))
    finally:
        floor.close()
    result["floor"] = {op: f["median_ns"] for op, f in floors.items()}
    result["floor_spread"] = floors
    result["time_loop_ns"] = result["time"].pop(LOOP)["median_ns"]
    result["driver_calls"] = driver_calls(libs, cfg)
    for a in libs.values():
        if not isinstance(a, str):
            a.cleanup()
    print("bench-peers: strace ...", file=sys.stderr, flush=True)
    result["syscalls"] = _by_op(count_syscalls(cfg))
    print("bench-peers: callgrind ...", file=sys.stderr, flush=True)
    result["instructions"] = _by_op(count_instructions(cfg, driver))
    result["meta"]["load_after"] = "%.2f" % os.getloadavg()[0]
    summarize(result)
    md = markdown(result)
    with open(os.path.join(cfg.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(cfg.out, "results.md"), "w") as f:
        f.write(md)
    if not cfg.quick:
        os.makedirs(cfg.results_dir, exist_ok=True)
        base = record.unused_stem(cfg.results_dir,
                                  "%s-simulator" % now.strftime("%Y-%m-%d"),
                                  (".md", ".json"))
        with open(base + ".md", "w") as f:
            f.write(md)
        with open(base + ".json", "w") as f:
            json.dump(result, f, indent=1)
        print("bench-peers: recorded %s.md" % base, file=sys.stderr)
    sys.stdout.write(md)
    return 0


def _by_op(flat):
    out = {}
    for (lib, op), v in flat.items():
        out.setdefault(op, {})[lib] = v
    return out


if __name__ == "__main__":
    sys.exit(main())
