"""tests/gpu/check_results.py, the checker of `make gpu-check`'s results
directory, on directories laid out as tests/gpu/check.sh writes them: it
passes a whole one and names each kind of fault. Needs no GPU."""
import importlib.util
import json
import os
import re

import pytest

# Not in tests/gpu: conftest skips everything there on the simulator.
HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "gpu")
_spec = importlib.util.spec_from_file_location(
    "check_results", os.path.join(HERE, "check_results.py"))
cr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cr)

JUNIT = ('<?xml version="1.0" encoding="utf-8"?><testsuites>'
         '<testsuite name="pytest" errors="{e}" failures="{f}" '
         'skipped="{s}" tests="{t}"></testsuite></testsuites>')
MACHINE = """Thu Nov 26 06:41:03 UTC 2026
nvidia-smi: not on PATH
/usr/bin/python3 3.12.3 (main)
numpy 2.4.6
numba-cuda 0.30.4
cupy-cuda13x absent
"""


def step_line(name, rc):
    # check.sh's step(): "NAME rc=RC SECONDSs (budget BUDGETs)".
    return "%s rc=%d 3s (budget 90s)\n" % (name, rc)


@pytest.fixture
def results(tmp_path):
    """A results directory as a run that passed leaves it."""
    files = {
        "machine.txt": MACHINE,
        "steps.txt": "".join(step_line(s, 0) for s in cr.STEPS),
        "interop.xml": JUNIT.format(e=0, f=0, s=9, t=9),
        "pytest.xml": JUNIT.format(e=0, f=0, s=2, t=151),
        "floor.json": json.dumps({"latency": [{"op": "cuMemAlloc"}]}),
        "bench/results.json": json.dumps(
            {"libraries": {"cudamem": {"status": "ok"}},
             "floor_in_process": {"latency": [{"op": "x"}]}}),
        "bench/results.md": "# Benchmarks\n",
        "bench/2026-11-26-nvidia-h200.md": "# Benchmarks\n",
    }
    files.update(("%s.log" % s, "") for s in cr.STEPS)  # may be empty
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_steps_are_check_sh_steps():
    with open(os.path.join(HERE, "check.sh")) as f:
        script = f.read()
    assert tuple(re.findall(r"^step (\S+) \d+ ", script, re.M)) == cr.STEPS


def test_a_whole_run_passes(results):
    assert cr.check(str(results)) == []
    assert cr.main([str(results)]) == 0


@pytest.mark.parametrize("name", cr.DATA + cr.LOGS)
def test_missing_file(results, name):
    (results / name).unlink()
    assert any(name in p for p in cr.check(str(results)))
    assert cr.main([str(results)]) == 1


@pytest.mark.parametrize("name", cr.DATA)
def test_empty_data_file(results, name):
    (results / name).write_text("")
    assert "missing or empty: %s" % name in cr.check(str(results))


def test_missing_recorded_page(results):
    (results / "bench/2026-11-26-nvidia-h200.md").unlink()
    assert cr.check(str(results)) == [
        "missing: bench/<date>-<device>.md (--record)"]


@pytest.mark.parametrize("rc, note", [(1, ""), (124, " (over its budget)")])
def test_failed_step(results, rc, note):
    lines = (results / "steps.txt").read_text().splitlines(True)
    lines[cr.STEPS.index("pytest")] = step_line("pytest", rc)
    (results / "steps.txt").write_text("".join(lines))
    assert cr.check(str(results)) == [
        "step pytest: rc=%d%s (see pytest.log)" % (rc, note)]


def test_missing_step(results):
    steps = [s for s in cr.STEPS if s != "bench"]
    (results / "steps.txt").write_text("".join(step_line(s, 0)
                                               for s in steps))
    assert cr.check(str(results)) == [
        "steps.txt: steps %s, expected %s"
        % (" ".join(steps), " ".join(cr.STEPS))]


def test_failed_tests(results):
    (results / "pytest.xml").write_text(JUNIT.format(e=1, f=2, s=0, t=9))
    assert cr.check(str(results)) == ["pytest.xml: 2 failed, 1 errors"]


def test_suite_that_ran_nothing(results):
    (results / "pytest.xml").write_text(JUNIT.format(e=0, f=0, s=5, t=5))
    assert cr.check(str(results)) == [
        "pytest.xml: no test ran (5 tests, 5 skipped)"]


def test_interop_may_skip_everything(results):
    # Without a GPU, or without the peers, every interop test skips.
    (results / "interop.xml").write_text(JUNIT.format(e=0, f=0, s=9, t=9))
    assert cr.check(str(results)) == []


def test_cudamem_benchmark_error(results):
    (results / "bench/results.json").write_text(json.dumps(
        {"libraries": {"cudamem": {"status": "error"}},
         "floor_in_process": {"latency": [{"op": "x"}]}}))
    assert cr.check(str(results)) == [
        "bench/results.json: cudamem's status is 'error', not 'ok'"]


def test_unreadable_files(results):
    (results / "floor.json").write_text("{")
    (results / "interop.xml").write_text("<testsuites>")
    problems = cr.check(str(results))
    assert len(problems) == 2
    assert problems[0].startswith("interop.xml: not XML")
    assert problems[1].startswith("floor.json: not JSON")


def test_expected_packages(results):
    assert cr.check(str(results), present=["numba-cuda"],
                    absent=["cupy-cuda13x"]) == []
    assert cr.check(str(results), present=["cupy-cuda13x", "jax"],
                    absent=["numba-cuda"]) == [
        "machine.txt: cupy-cuda13x should be present, is absent",
        "machine.txt: jax should be present, is not listed",
        "machine.txt: numba-cuda should be absent, is 0.30.4"]


def test_floor_in_process_error(results):
    (results / "bench/results.json").write_text(json.dumps(
        {"libraries": {"cudamem": {"status": "ok"}},
         "floor_in_process": {"error": "RuntimeError: floor_open: x"}}))
    assert cr.check(str(results)) == [
        "bench/results.json: no floor in process: RuntimeError: "
        "floor_open: x"]
