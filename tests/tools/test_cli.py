"""``python -m cudamem info | bandwidth | demo``: each command run in a
subprocess and its output's structure checked against the public API in
this process (the numbers themselves are the driver's, and meaningless on
the simulator); the parsers, the progress bars and the measurement's
driver calls in-process."""
import io
import itertools
import json
import os
import re
import subprocess
import sys
import types

import pytest

import cudamem
from cudamem import _cli, driver
from tests.helpers.run import ROOT


def _run(*args, env=None, timeout=120):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "cudamem"] + list(args),
                          capture_output=True, text=True, env=full,
                          timeout=timeout)


def _ok(*args, **kw):
    proc = _run(*args, **kw)
    assert proc.returncode == 0, proc.stderr
    return proc


NO_DRIVER = {"CUDAMEM_DRIVER": "/nonexistent/libcuda.so.1",
             "CUDAMEM_SIMULATOR": ""}


# ---------------------------------------------------------------------------
# The command line

@pytest.mark.parametrize("command", ["info", "bandwidth", "demo"])
def test_each_command_has_help(command):
    proc = _ok(command, "--help")
    assert proc.stdout.startswith("usage: python -m cudamem %s" % command)


def test_top_level_help_lists_the_commands():
    proc = _ok("--help")
    for command in ("info", "bandwidth", "demo"):
        assert re.search(r"^\s+%s\s" % command, proc.stdout, re.M)


def test_an_unknown_command_is_a_usage_error():
    proc = _run("frobnicate")
    assert proc.returncode == 2
    assert "'frobnicate'" in proc.stderr


# ---------------------------------------------------------------------------
# info

def test_info_names_the_driver_and_every_device():
    lines = _ok("info").stdout.splitlines()
    facts = driver.info()
    kind = ("cudamem's simulated driver" if facts["simulator"] else
            "CUDA driver")
    assert lines[0] == "cudamem %s" % cudamem.__version__
    assert lines[1] == "%s: %s" % (kind, facts["path"])
    assert lines[2] == "driver version: %d.%d" % driver.get_version()
    devices = driver.devices()
    assert lines[4] == "%d device%s" % (len(devices),
                                        "" if len(devices) == 1 else "s")
    heads = [line for line in lines if re.match(r"  \[\d+\] ", line)]
    assert heads == [
        "  [%d] %s  compute capability %d.%d  %s  %s  %s" % (
            d["id"], d["name"], d["compute_capability"][0],
            d["compute_capability"][1], _cli._size(d["total_memory"]),
            d["uuid"], d["pci_bus_id"]) for d in devices]
    sms = [line for line in lines if line.strip().startswith(
        "multiprocessors:")]
    assert sms == ["      multiprocessors: %d" % dev.MULTIPROCESSOR_COUNT
                   for dev in cudamem.list_devices()]


def test_info_json_matches_the_api():
    out = json.loads(_ok("info", "--json").stdout)
    assert out["available"] is True
    assert out["driver"]["path"] == driver.info()["path"]
    assert out["driver"]["simulator"] == driver.info()["simulator"]
    assert len(out["devices"]) == len(cudamem.list_devices())
    for desc, dev in zip(out["devices"], cudamem.list_devices()):
        assert desc["name"] == dev.name and desc["uuid"] == dev.uuid
        assert tuple(desc["compute_capability"]) == dev.compute_capability
        assert desc["attributes"] == {
            attr: getattr(dev, attr) for _, attr, _ in _cli.ATTRIBUTES}


def test_info_says_why_cuda_is_unavailable():
    proc = _run("info", env=NO_DRIVER)
    assert proc.returncode == 1
    first = proc.stdout.splitlines()[0]
    assert first.startswith("CUDA is not available: ")
    assert "/nonexistent/libcuda.so.1" in first
    out = json.loads(_run("info", "--json", env=NO_DRIVER).stdout)
    assert out["available"] is False
    assert "/nonexistent/libcuda.so.1" in out["reason"]


# ---------------------------------------------------------------------------
# bandwidth

def _table(stdout):
    """(header cells, rows of cells) of the bandwidth table."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("GB/s")) + 1
    header = re.split(r"\s{2,}", lines[start].strip())
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[start + 1:]]
    return header, rows


def test_bandwidth_table():
    proc = _ok("bandwidth", "--sizes", "4K,64K", "--repeat", "2")
    dev = cudamem.get_current_device()
    assert proc.stdout.splitlines()[0] == "device %d: %s" % (dev.id,
                                                               dev.name)
    assert ("NOTE: " + _cli.SIMULATOR_NOTE in proc.stdout) == (
        driver.info()["simulator"])
    header, rows = _table(proc.stdout)
    assert header == ["size"] + ["%s %s" % c for c in itertools.product(
        _cli.KINDS, _cli.DIRECTIONS)]
    assert [r[0] for r in rows] == ["4 KiB", "64 KiB"]
    for row in rows:
        assert len(row) == len(header)
        assert all(float(cell) >= 0 for cell in row[1:])
    # The bar, written once at the end when stderr is not a terminal.
    assert proc.stderr.strip().endswith("12/12")


def test_bandwidth_json_measures_what_was_asked():
    proc = _ok("bandwidth", "--sizes", "8K,1M", "--kind",
               "pinned,registered", "--direction", "dtoh", "--repeat", "3",
               "--json", "--no-progress")
    assert proc.stderr == ""
    out = json.loads(proc.stdout)
    assert out["simulator"] == driver.info()["simulator"]
    assert (out["note"] == _cli.SIMULATOR_NOTE) == out["simulator"]
    assert out["repeat"] == 3
    assert [(r["size"], r["kind"], r["direction"])
            for r in out["results"]] == [
        (8192, "pinned", "dtoh"), (8192, "registered", "dtoh"),
        (1 << 20, "pinned", "dtoh"), (1 << 20, "registered", "dtoh")]
    for r in out["results"]:
        assert 0 < r["best_seconds"] <= r["seconds"]
        assert r["gbps"] == pytest.approx(r["size"] / r["seconds"] / 1e9)


@pytest.mark.parametrize("args, message", [
    (["--sizes", "4X"], "'4X'"),
    (["--sizes", "0"], "'0'"),
    (["--sizes", ","], "','"),
    (["--kind", "pageable,foo"], "'foo'"),
    (["--direction", "sideways"], "'sideways'"),
    (["--repeat", "0"], "'0'"),
    (["--repeat", "many"], "'many'"),
])
def test_bandwidth_refuses_bad_arguments(args, message):
    proc = _run("bandwidth", *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m cudamem bandwidth: error: argument ")
    assert message in last


def test_plot_without_matplotlib_is_a_clear_error(tmp_path):
    # A matplotlib that cannot be imported, whether or not one is
    # installed.
    (tmp_path / "matplotlib.py").write_text("raise ImportError('hidden')\n")
    path = tmp_path / "out.png"
    proc = _run("bandwidth", "--sizes", "4K", "--plot", str(path),
                env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 2
    assert "--plot needs matplotlib" in proc.stderr
    assert proc.stdout == "" and not path.exists()


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "out.png"
    _ok("bandwidth", "--sizes", "4K,64K", "--repeat", "1", "--plot",
        str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bandwidth_without_cuda():
    proc = _run("bandwidth", "--sizes", "4K", env=NO_DRIVER)
    assert proc.returncode == 1
    assert proc.stderr.startswith("CUDA is not available: ")


def test_each_timed_copy_is_one_copy_between_two_events(sim):
    """One untimed copy, then per repeat: record, the copy, record."""
    sim.reset()
    repeat = 3
    results = _cli.measure([1 << 16], ["pinned"], ["htod", "dtoh"], repeat)
    calls = sim.stats()["calls"]

    def moved(prefix):
        return sum(c["bytes"] for name, c in calls.items()
                   if name.startswith(prefix))

    assert moved("cuMemcpyHtoD") == (repeat + 1) << 16
    assert moved("cuMemcpyDtoH") == (repeat + 1) << 16
    # Two timing events per timed copy, and one event after every copy
    # of page-locked memory on a stream, which its release waits for.
    assert sum(c["calls"] for name, c in calls.items()
               if name.startswith("cuEventRecord")) == (
                   2 * 2 * repeat + 2 * (repeat + 1))
    assert [(r["kind"], r["direction"]) for r in results] == [
        ("pinned", "htod"), ("pinned", "dtoh")]


def test_registered_memory_is_page_locked_only_while_measured(sim):
    before = sim.live()["registrations"]
    seen = []

    class Bar:
        def set_postfix_str(self, text):
            seen.append(sim.live()["registrations"])

        def update(self):
            pass

    _cli.measure([1 << 16], ["pageable", "registered"], ["htod"], 1, Bar())
    assert seen == [before, before + 1]
    assert sim.live()["registrations"] == before


# ---------------------------------------------------------------------------
# Parsers and progress bars

@pytest.mark.parametrize("text, size", [
    ("4096", 4096), ("64K", 65536), ("64kib", 65536), ("16M", 16 << 20),
    ("1G", 1 << 30), ("2GB", 2 << 30), ("512B", 512)])
def test_parse_size(text, size):
    assert _cli.parse_size(text) == size


def test_parse_sizes_and_choices():
    assert _cli.parse_sizes("4K, 1M,") == [4096, 1 << 20]
    assert _cli._choices("all", _cli.KINDS, "all") == list(_cli.KINDS)
    assert _cli._choices("pinned", _cli.KINDS, "all") == ["pinned"]
    with pytest.raises(ValueError, match="'x'"):
        _cli._choices("pinned,x", _cli.KINDS, "all")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_text_bar_redraws_on_a_terminal():
    out = _Terminal()
    bar = _cli.TextBar(3, "work", out, width=6)
    bar.set_postfix_str("a long description")
    bar.update()
    bar.update(2)
    bar.close()
    frames = out.getvalue().rstrip("\n").split("\r")[1:]
    assert frames[0].startswith("work [      ] 0/3")
    assert frames[-1].rstrip() == "work [######] 3/3"
    # Each frame covers the one before it.
    assert all(len(b) >= len(a.rstrip()) for a, b in zip(frames, frames[1:]))


def test_text_bar_writes_once_elsewhere():
    out = io.StringIO()
    bar = _cli.TextBar(2, "work", out, width=4)
    bar.update()
    bar.update()
    assert out.getvalue() == ""
    bar.close()
    assert out.getvalue() == "\rwork [####] 2/2 \n"


@pytest.fixture
def fake_tqdm(monkeypatch):
    """tqdm.auto, installed: the keyword arguments of each bar made."""
    made = []

    class FakeTqdm:
        def __init__(self, **kw):
            made.append(kw)

    auto = types.ModuleType("tqdm.auto")
    auto.tqdm = FakeTqdm
    monkeypatch.setitem(sys.modules, "tqdm", types.ModuleType("tqdm"))
    monkeypatch.setitem(sys.modules, "tqdm.auto", auto)
    return FakeTqdm, made


def test_progress_uses_tqdm_auto_on_a_terminal(fake_tqdm):
    out = _Terminal()
    bar = _cli.progress(5, "x", file=out)
    assert isinstance(bar, fake_tqdm[0])
    assert fake_tqdm[1] == [dict(total=5, desc="x", file=out, leave=False)]


def test_progress_writes_a_log_once_even_with_tqdm(fake_tqdm):
    # Found on a GPU machine that has tqdm: each redraw went into the log.
    bar = _cli.progress(2, "x", file=io.StringIO())
    assert isinstance(bar, _cli.TextBar)
    assert fake_tqdm[1] == []


def test_progress_falls_back_to_text(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    assert isinstance(_cli.progress(5, "x", file=io.StringIO()),
                      _cli.TextBar)


# ---------------------------------------------------------------------------
# demo

SECTIONS = ["1. cudamem", "2. A round trip", "3. Views", "4. Streams",
            "5. Pinned vs pageable", "6. Interop", "7. What cudamem holds"]


def _sections(stdout):
    return [line[3:] for line in stdout.splitlines()
            if line.startswith("== ")]


def test_demo_runs_every_step_and_matches_numpy():
    proc = _ok("demo")
    titles = _sections(proc.stdout)
    assert [t for t, s in zip(titles, SECTIONS) if t.startswith(s)] == \
        titles
    assert len(titles) == len(SECTIONS)
    assert "MISMATCH" not in proc.stdout
    assert proc.stdout.rstrip().endswith("Every result matched NumPy.")
    assert ("NOTE: " + _cli.SIMULATOR_NOTE in proc.stdout) == (
        driver.info()["simulator"])


def test_demo_falls_back_to_the_simulator():
    proc = _ok("demo", env=NO_DRIVER)
    assert proc.stdout.startswith("No usable CUDA driver here (")
    assert "cudamem's simulated driver: " in proc.stdout
    assert len(_sections(proc.stdout)) == len(SECTIONS)
    assert proc.stdout.rstrip().endswith("Every result matched NumPy.")


def test_make_demo_runs_the_demo():
    """`make -n`: what the target would run, without building."""
    proc = subprocess.run(["make", "-n", "demo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"-m cudamem demo$", proc.stdout, re.M)
