"""The benchmark runner (benchmarks/): a quick run on the simulator in a
subprocess, as CI's smoke test, checked for the structure of its JSON and a
number from every operation; a peer that fails at run time reported in the
output rather than ending the run; the plumbing of adapters.
Speeds are never asserted here (DESIGN section 9).
"""
import json
import os
import subprocess
import sys

import pytest

from tests.helpers.run import ROOT

sys.path.insert(0, ROOT)

from benchmarks import adapters, record, runner  # noqa: E402

# A CuPy whose every CUDA call fails at run time, as on a machine whose
# CuPy does not match its driver.
FAKE_CUPY = '''
__version__ = "0.0-fake"

def _fail(*args, **kwargs):
    raise RuntimeError("fake cupy: cudaErrorNoDevice")

empty = asarray = get_default_memory_pool = _fail

class _Cuda:
    def __getattr__(self, name):
        return _fail

cuda = _Cuda()
'''


def run_quick(tmp_path, *extra, env_extra=None):
    env = dict(os.environ, CUDAMEM_SIMULATOR="1")
    for name in ("CUDAMEM_DRIVER", "CUDAMEM_SIM_DELAY_US",
                 "CUDAMEM_SIM_HAZARDS"):
        env.pop(name, None)
    env.update(env_extra or {})
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out),
           *extra]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=50)
    assert p.returncode == 0, p.stderr
    with open(out / "results.json") as f:
        return json.load(f), out, p


def test_quick_run_on_the_simulator(tmp_path):
    rec = tmp_path / "rec"
    result, out, proc = run_quick(tmp_path, "--record", "--results-dir",
                                  str(rec))
    meta = result["meta"]
    assert meta["simulator"] is True and meta["quick"] is True
    assert meta["command"].startswith("python -m benchmarks --quick")
    assert meta["driver"].endswith("libcusim.so")

    floor = result["floor"]
    assert "error" not in floor, floor
    assert floor["simulator"] is True
    floor_ops = {(r["op"], r["bytes"]) for r in floor["latency"]}
    # The same rows timed in this process: all of floor.c's but the 2-D
    # slices, which only its program times.
    in_process = result["floor_in_process"]
    assert "error" not in in_process, in_process
    in_ops = {(r["op"], r["bytes"]) for r in in_process["latency"]}
    assert in_ops == {(op, n) for _o, n, op, *_r in runner.latency_plan()
                      if op is not None and not op.startswith("cuMemcpy2D")}
    for r in in_process["latency"]:
        assert 0 < r["p10_ns"] <= r["median_ns"] <= r["p90_ns"], r

    cm = result["libraries"]["cudamem"]
    assert cm["status"] == "ok"
    plan = runner.latency_plan()
    assert [(r["op"], r["bytes"]) for r in cm["latency"]] == \
        [(op, n) for op, n, *_ in plan]
    for row, (_op, n, floor_op, *_rest) in zip(cm["latency"], plan):
        assert "error" not in row and "unsupported" not in row, row
        assert isinstance(row["median_ns"], float) and \
            row["p10_ns"] <= row["median_ns"] <= row["p90_ns"], row
        if floor_op is not None:
            # Every cudamem figure with a driver counterpart is also a
            # ratio to floor.c's.
            assert (floor_op, n) in floor_ops
            assert row["ratio"] == pytest.approx(
                row["median_ns"] / row["floor_ns"], rel=1e-2, abs=1e-3)
        if (floor_op, n) in in_ops:
            assert row["ratio_in_process"] == pytest.approx(
                row["median_ns"] / row["floor_in_process_ns"], rel=1e-2,
                abs=1e-3)
        else:
            assert "floor_in_process_ns" not in row, row

    sizes = runner.bandwidth_sizes(meta["max_bytes"])
    assert sizes == [64 << 10, 256 << 10, 1 << 20]
    got = {(r["direction"], r["memory"], r["bytes"]): r
           for r in cm["bandwidth"]}
    assert len(got) == len(cm["bandwidth"]) == 2 * 3 * len(sizes)
    for d in ("htod", "dtoh"):
        for memory in ("pageable", "pinned", "registered"):
            for n in sizes:
                row = got[(d, memory, n)]
                assert row["gbps"] > 0 and row["floor_gbps"] > 0, row

    # Peers do not run on the simulator by default, and say why.
    for name in ("numba-cuda", "cupy", "pytorch", "cuda.core"):
        assert result["libraries"][name]["status"].startswith(
            ("skipped", "not importable"))
    assert result["import_time"]["numpy_ms"] > 0
    assert result["import_time"]["libraries"]["cudamem"]["ms"] > 0

    md = (out / "results.md").read_text()
    assert "| alloc pool | 8 B |" in md and "## Bandwidth" in md
    assert "| alloc async | 8 B |" in md
    if result["plots"]:
        assert all(os.path.exists(p) for p in result["plots"])
    else:
        assert "matplotlib is not importable" in md
    records = list(rec.iterdir())
    assert len(records) == 1 and records[0].name.endswith(
        "-cudamem-simulated-device-0-h100-class.md")
    assert "`python -m benchmarks --quick" in records[0].read_text()
    assert (out / records[0].name).read_text() == records[0].read_text()


def test_failing_peer_is_reported_not_fatal(tmp_path):
    fake = tmp_path / "fake"
    (fake / "cupy").mkdir(parents=True)
    (fake / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    (fake / "cupyx").mkdir()
    (fake / "cupyx" / "__init__.py").write_text(
        "from cupy import _fail as empty_pinned\n")
    path = os.pathsep.join([str(fake), ROOT])
    result, out, _ = run_quick(tmp_path, "--peers", "cupy",
                               env_extra={"PYTHONPATH": path})
    cupy = result["libraries"]["cupy"]
    assert cupy["status"] == "ok" and cupy["version"] == "0.0-fake"
    assert [r["op"] for r in cupy["latency"]] == \
        [op for op, *_ in runner.latency_plan()]
    for row in cupy["latency"]:
        assert "fake cupy: cudaErrorNoDevice" in row["error"], row
    assert all("error" in r for r in cupy["bandwidth"])
    # cudamem's numbers are unaffected, and the table says what failed.
    assert all("median_ns" in r
               for r in result["libraries"]["cudamem"]["latency"])
    assert result["libraries"]["pytorch"]["status"] == \
        "skipped: --peers cupy"
    assert result["import_time"]["libraries"]["cupy"]["ms"] >= 0
    md = (out / "results.md").read_text()
    assert "| cudamem | cupy |" in md
    assert "- cupy alloc" in md and "cudaErrorNoDevice" in md


def test_unknown_peer_is_a_usage_error(tmp_path):
    p = subprocess.run([sys.executable, "-m", "benchmarks", "--peers",
                        "cupy,jax", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=50)
    assert p.returncode == 2
    assert "unknown jax" in p.stderr


class FakeAdapter(adapters.Adapter):
    """Events and streams work, allocation is missing, copies fail."""
    name = "fake"

    def __init__(self):
        super().__init__()
        self.cleaned = 0
        self.calls = 0

    def _count(self):
        self.calls += 1

    def alloc(self, nbytes, pool, nbuf):
        raise adapters.Unsupported("fake: no allocator")

    def copy(self, direction, memory, nbytes, nbuf):
        self.defer(self._cleaned)
        raise RuntimeError("fake: copy failed")

    def event_record_query(self, nbuf):
        self.defer(self._cleaned)
        return [self._count] * nbuf

    def _cleaned(self):
        self.cleaned += 1


def test_adapter_plumbing():
    cfg = runner.parse_args(["--quick"])
    fake = FakeAdapter()
    floor = {("cuEventRecord+cuEventQuery", 0): 50.0}
    rows = {r["op"] + " %d" % r["bytes"]: r
            for r in runner.measure_latency(fake, cfg, floor, 0.0)}
    assert rows["alloc 8"] == {"op": "alloc", "bytes": 8,
                               "unsupported": "fake: no allocator"}
    assert rows["htod pinned 4096"]["error"] == \
        "RuntimeError: fake: copy failed"
    assert "unsupported" in rows["stream create 0"]
    ev = rows["event record+query 0"]
    assert ev["floor_ns"] == 50.0 and ev["ratio"] == pytest.approx(
        ev["median_ns"] / 50.0, rel=1e-2, abs=1e-3)
    # Every call of every pass, warm-up included, over the 16 buffers.
    assert fake.calls == (cfg.warmup + cfg.samples) * runner.NBUF
    # What an operation deferred is undone after it, failed or not.
    assert fake.cleaned == 12 + 1 and fake._deferred == []


def test_time_calls_rotates_and_orders_percentiles():
    seen = []
    fns = [lambda i=i: seen.append(i) for i in range(4)]
    med, p10, p90 = runner.time_calls(fns, warmup=1, samples=3)
    assert seen == [0, 1, 2, 3] * 4
    assert 0 <= p10 <= med <= p90


def test_a_later_run_of_the_day_gets_a_page_of_its_own(tmp_path):
    stem = "2026-11-27-simulator"
    exts = (".md", ".json")
    assert record.unused_stem(str(tmp_path), stem, exts) == \
        str(tmp_path / stem)
    (tmp_path / (stem + ".json")).write_text("{}")
    assert record.unused_stem(str(tmp_path), stem, exts) == \
        str(tmp_path / (stem + "-2"))
    (tmp_path / (stem + "-2.md")).write_text("")
    assert record.unused_stem(str(tmp_path), stem, exts) == \
        str(tmp_path / (stem + "-3"))
    # Another machine's pages of the day do not count.
    assert record.unused_stem(str(tmp_path), "2026-11-27-nvidia-h200",
                              exts) == str(tmp_path / "2026-11-27-nvidia-h200")


def test_the_runner_reports_a_floor_in_process_it_could_not_open(tmp_path):
    # floor.c's message, as the result's error; the run goes on without it.
    cfg = runner.parse_args(["--quick", "--out", str(tmp_path)])
    missing = str(tmp_path / "no-such-libcuda.so")
    got = runner.run_floor_in_process(cfg, missing)
    assert got == {"error": "RuntimeError: floor_open: cannot load %s: %s: "
                   "cannot open shared object file: No such file or "
                   "directory" % (missing, missing)}
