"""benchmarks/peers.py's own arithmetic: the strace and callgrind counts
and the floor bound of issue 23. The run itself needs the peers venv,
strace and valgrind (`make bench-peers BENCH_ARGS=--quick`, in CI)."""
import json
import os
import subprocess
import sys

from benchmarks import peers
from tests.helpers.run import ROOT

M = peers.MARK


def test_syscalls_between_markers_all_threads_resumed_once():
    loops = [{"lib": "cudamem", "op": "alloc+free 8 B", "calls": 2},
             {"lib": "cuda.core", "op": "alloc+free 8 B", "calls": 4}]
    trace = [
        '10 openat(AT_FDCWD, "/x", O_RDONLY) = 3',  # before: not counted
        '10 newfstatat(AT_FDCWD, "%s/begin/cudamem/alloc-free-8-b", '
        '0x7f, 0) = -1 ENOENT' % M,
        '10 mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, -1, 0) = 0x7f',
        '11 futex(0x7f, FUTEX_WAIT, 0, NULL <unfinished ...>',
        '10 munmap(0x7f, 4096) = 0',
        '11 <... futex resumed>) = 0',
        '12 +++ exited with 0 +++',
        '10 --- SIGCHLD {si_signo=SIGCHLD} ---',
        '10 newfstatat(AT_FDCWD, "%s/end/cudamem/alloc-free-8-b", '
        '0x7f, 0) = -1 ENOENT' % M,
        '10 getpid() = 10',  # between loops: not counted
        '10 newfstatat(AT_FDCWD, "%s/begin/cuda-core/alloc-free-8-b", '
        '0x7f, 0) = -1 ENOENT' % M,
        '10 newfstatat(AT_FDCWD, "%s/end/cuda-core/alloc-free-8-b", '
        '0x7f, 0) = -1 ENOENT' % M,
    ]
    got = peers.syscalls_per_op(trace, loops)
    # mmap, futex (once), munmap over 2 calls; nothing over 4.
    assert got == {("cudamem", "alloc+free 8 B"): 1.5,
                   ("cuda.core", "alloc+free 8 B"): 0.0}


def test_callgrind_costs_split_self_cost_by_object(tmp_path):
    drv = tmp_path / "libcusim.so"
    drv.write_bytes(b"")
    other = tmp_path / "python"
    dump = tmp_path / "callgrind.out.1.1"
    dump.write_text("\n".join([
        "version: 1", "creator: callgrind", "events: Ir", "",
        "ob=(1) %s" % other, "fl=(1) a.c", "fn=(1) f",
        "0 100", "+2 20",
        "cob=(2) %s" % drv, "cfi=(2) s.c", "cfn=(2) cuMemAlloc_v2",
        "calls=1 0", "0 5000",  # inclusive cost of the call: not counted
        "ob=(2)", "fl=(2)", "fn=(2)", "0 700", "* 7",
        "ob=(1)", "fn=(3) g", "-1 3",
        "totals: 830", ""]))
    total, inside = peers._callgrind_costs(str(dump), str(drv))
    assert (total, inside) == (100 + 20 + 700 + 7 + 3, 700 + 7)


def test_summary_bound_is_the_larger_of_ratio_and_excess():
    def result(cm_ns, floor_ns, peer_ns):
        return {"floor": {"DtoH 8 B": floor_ns}, "summary": {},
                "time": {"DtoH 8 B": {
                    "cudamem": {"median_ns": cm_ns},
                    "numba-cuda": {"median_ns": peer_ns},
                    "cuda.core": {"unsupported": "no"}}}}
    cases = [
        # floor 1000 ns: 0.3 us above it is the larger bound (1300).
        (1300.0, 1000.0, True), (1301.0, 1000.0, False),
        # floor 4000 ns: 1.2x is the larger bound (4800).
        (4800.0, 4000.0, True), (4801.0, 4000.0, False),
    ]
    for cm, floor, within in cases:
        r = result(cm, floor, 2 * cm)
        peers.summarize(r)
        s = r["summary"]["DtoH 8 B"]
        assert s["within_bound"] is within, (cm, floor)
        assert s["fastest_peer"] == "numba-cuda"
        assert s["cudamem_over_fastest_peer"] == 0.5
        assert s["cudamem_over_floor"] == round(cm / floor, 3)
        json.dumps(r)  # what the run writes


def test_each_timed_batch_follows_an_untimed_pass_of_its_own(monkeypatch):
    # What the library before left in the caches is not the next one's
    # cost: every batch (the floor's too) follows one untimed pass of the
    # same calls, in the same round, and only the batch is a sample.
    class Lib:
        def __init__(self, name):
            self.name = name

        def __getattr__(self, method):
            return lambda *args: [(self.name, i) for i in range(args[-1])]

        def cleanup(self):
            pass

    class FakeFloor:
        def time(self, row, calls):
            seq.append((row[0], calls // peers.NBUF))
            if calls != cfg.passes * peers.NBUF:
                return 5000.0
            return 7.0 if row[0] == "r" else 11.0

    seq = []

    def batch(fns, passes):
        name = fns[0][0] if isinstance(fns[0], tuple) else None
        if name is None:
            return 1.0  # the empty call
        seq.append((name, passes))
        return 10.0 if passes == cfg.passes else 1000.0

    cfg = peers.parse_args(["--quick"])
    cfg.rounds, cfg.passes, cfg.rewarm, cfg.warmup = 3, 2, 1, 0
    monkeypatch.setattr(peers, "OPS", (("DtoH 8 B", "copy", (), ("r", 8)),))
    monkeypatch.setattr(peers, "FLOOR_ROWS", {"DtoH 8 B": ("r", 8)})
    monkeypatch.setattr(peers, "DEFERRED_ROWS", {"DtoH 8 B": ("d", 8)})
    monkeypatch.setattr(peers, "_batch", batch)
    libs = {"a": Lib("a"), "b": Lib("b")}
    time, floors, _, deferred = peers.time_interleaved(
        libs, cfg, FakeFloor(), dict)
    # Per round: each of the floor, the deferred floor, a and b as
    # (rewarm, timed) in a row (warmup 0 left empty calls before the
    # rounds).
    seq = [call for call in seq if call[1] > 0]
    assert len(seq) == cfg.rounds * 4 * 2
    assert {name for name, _ in seq} == {"r", "d", "a", "b"}
    for i in range(0, len(seq), 2):
        assert seq[i][0] == seq[i + 1][0]
        assert (seq[i][1], seq[i + 1][1]) == (cfg.rewarm, cfg.passes)
    assert time["DtoH 8 B"]["a"]["median_ns"] == 9.0
    assert time["DtoH 8 B"]["b"]["median_ns"] == 9.0
    assert floors["DtoH 8 B"]["median_ns"] == 7.0
    assert deferred["DtoH 8 B"]["median_ns"] == 11.0


FLOOR_SCRIPT = r'''
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
import cudamem, cudamem.simulator as sim
from benchmarks import peers

cudamem.device_array(1)  # cudamem's context current, as in a run
drv = ctypes.CDLL(sim.library_path())


def current():
    c = ctypes.c_void_p()
    assert drv.cuCtxGetCurrent(ctypes.byref(c)) == 0
    return c.value


ctx, live = current(), sim.live()
floor = peers.Floor(sim.library_path())
out = {"calls": {}, "rows": sorted(floor.rows)}
try:
    peers.Floor(sim.library_path())
except RuntimeError as exc:
    out["second"] = str(exc)
for row in [*peers.FLOOR_ROWS.values(), *peers.DEFERRED_ROWS.values()]:
    floor.time(row, 4)
    before = sim.stats()["calls"]
    ns = floor.time(row, 16)
    after = sim.stats()["calls"]
    out["calls"][row[0]] = {
        k: after[k]["calls"] - before[k]["calls"] for k in after
        if after[k]["calls"] != before[k]["calls"]}
    assert ns > 0, (row, ns)
floor.close()
out["closed"] = [current() == ctx, sim.live() == live]
floor = peers.Floor(sim.library_path())
errors = []
for row in (("cuNoSuchCall", 8), peers.FLOOR_ROWS["DtoH 8 B"]):
    try:
        floor.time(row, 1)
    except RuntimeError as exc:
        errors.append(str(exc))
out["errors"] = errors
out["after_error"] = [current() == ctx, sim.live() == live]
# A driver call failing inside a timed batch: floor.c names it, and what
# the floor set up is given back all the same, the deferred row's pending
# frees too.
for key, row, after in (
        ("driver", peers.FLOOR_ROWS["alloc+free 8 B"], 3),
        ("deferred", peers.DEFERRED_ROWS["alloc+free 8 B"], 5)):
    floor = peers.Floor(sim.library_path())
    sim.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", after=after)
    try:
        floor.time(row, 16)
    except RuntimeError as exc:
        out[key + "_error"] = str(exc)
    out["after_%s_error" % key] = [current() == ctx, sim.live() == live]
print(json.dumps(out))
'''


def test_the_in_process_floor_makes_the_calls_its_rows_name(tmp_path):
    # The bound's floor: build/libfloor.so inside the benchmark's process,
    # on the simulator cudamem also runs on. Each row makes exactly the
    # driver calls its name lists, 16 of each for 16 calls; closing gives
    # back what it set up and the context that was current; a second open
    # is refused and leaves the first open; a failure (a bad row, or a
    # driver call the simulator fails mid-batch) reports floor.c's message
    # and closes the floor the same way.
    # This interpreter finds the CUDA headers, with or without a .venv (a
    # GPU machine has none: tests/gpu/check.sh builds it the same way).
    subprocess.run(["make", "-s", "VENV=none", "PY=" + sys.executable,
                    "build/libfloor.so"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    script = tmp_path / "floor_check.py"
    script.write_text(FLOOR_SCRIPT)
    env = dict(os.environ, CUDAMEM_SIMULATOR="1")
    env.pop("CUDAMEM_DRIVER", None)
    p = subprocess.run([sys.executable, str(script), ROOT], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    want = {row[0]: dict.fromkeys(row[0].split()[0].split("+"), 16)
            for row in peers.FLOOR_ROWS.values()}
    # Deferred: after 4 calls, 16 more allocate 16 and free the first 11
    # (the eleventh pending); closing frees the 9 left.
    want["cuMemAlloc+cuMemFree deferred"] = {"cuMemAlloc": 16,
                                             "cuMemFree": 11}
    assert out["second"] == "floor_open: already open"
    assert out["calls"] == want
    # floor_rows() lists what floor_time takes, bench-peers' rows among it.
    assert set(want) <= set(out["rows"])
    assert "cuMemcpyDtoH pinned" in out["rows"]
    assert out["closed"] == [True, True]
    assert out["errors"] == ['no latency row named "cuNoSuchCall"',
                             "floor_time: not open"]
    assert out["after_error"] == [True, True]
    assert out["driver_error"] == ("cuMemAlloc failed: CUresult 2 "
                                   "(CUDA_ERROR_OUT_OF_MEMORY)")
    assert out["after_driver_error"] == [True, True]
    assert out["deferred_error"] == out["driver_error"]
    assert out["after_deferred_error"] == [True, True]


def test_the_deferred_floor_is_reported_beside_the_floor(monkeypatch):
    # For information: the deferred row's difference from the C floor,
    # and cudamem's from the deferred row; the bound stays the floor's.
    op = "alloc+free 8 B"
    monkeypatch.setattr(peers, "OPS", ((op, "alloc", (8, False),
                                        ("cuMemAlloc+cuMemFree", 8)),))

    def spread(ns):
        return {"median_ns": ns, "p10_ns": ns, "p90_ns": ns}
    result = {
        "meta": {"date": "d", "command": "c", "cpu": "x", "cpus": 2,
                 "load_before": "0", "load_after": "0", "python": "3",
                 "numpy": "2", "platform": "p", "driver": "s",
                 "rounds": 1, "calls_per_batch": 32,
                 "libraries": ["cudamem"], "versions": {"cudamem": "0"}},
        "time": {op: {"cudamem": spread(1610.0)}}, "summary": {},
        "floor": {op: 1200.0}, "floor_spread": {op: spread(1200.0)},
        "floor_process_spread": {}, "time_loop_ns": 30.0,
        "floor_deferred_spread": {op: spread(1330.0)},
        "syscalls": {}, "driver_calls": {}, "instructions": {}}
    peers.summarize(result)
    md = peers.markdown(result)
    assert ("| alloc+free 8 B | 1.20 [1.20-1.20] | 1.33 [1.33-1.33] | "
            "+0.13 | 1.61 [1.61-1.61] | +0.28 |") in md
    assert result["summary"][op]["within_bound"] is False
    json.dumps(result)
