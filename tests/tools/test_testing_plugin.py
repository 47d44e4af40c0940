"""cudamem.testing, the pytest plugin for downstream projects: small test
files run by pytest in a fresh process (pytester), their outcomes checked
against what the plugin documents: leaks and stream-order races it must
catch, the code that does it right passing, skips with their reasons.

Each run starts without the simulator's variables, so the plugin's own
options choose the driver and the checks."""
import os
import re
import shutil
import textwrap

import pytest

from tests.helpers.run import ROOT

pytest_plugins = ["pytester"]

PRELUDE = """\
import numpy as np
import pytest

import cudamem

HOST = np.arange(1 << 14, dtype=np.float64)
"""


@pytest.fixture
def downstream(pytester, monkeypatch):
    """Runs a test file (source after PRELUDE) with the plugin enabled and
    the given options; returns pytester's RunResult."""
    for name in ("CUDAMEM_SIMULATOR", "CUDAMEM_DRIVER", "CUDAMEM_SIM_HAZARDS",
                 "CUDAMEM_SIM_DELAY_US"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", ROOT)

    def run(source, *args):
        pytester.makepyfile(
            test_downstream=PRELUDE + textwrap.dedent(source))
        return pytester.runpytest_subprocess(
            "-p", "cudamem.testing", "-p", "no:cacheprovider", "-rA", *args)
    return run


LEAKY = """
kept = []


def test_leaks_a_device_array(cudamem_leak_check):
    kept.append(cudamem.to_device(HOST))


def test_leaks_a_stream(cudamem_leak_check):
    kept.append(cudamem.stream())


def test_lets_go_of_everything(cudamem_leak_check):
    d_ary = cudamem.to_device(HOST, stream=cudamem.stream())
    np.testing.assert_array_equal(d_ary.copy_to_host(), HOST)
"""


def test_leak_check_fixture_catches_what_a_test_keeps(downstream):
    result = downstream(LEAKY, "--cudamem-simulator")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_leaks_a_device_array*",
        "E *live counts changed*'device_allocations': (0, 1)*",
        "*ERROR at teardown of test_leaks_a_stream*",
        "E *live counts changed*'streams': (0, 1)*",
    ])


def test_leak_check_option_checks_every_test(downstream):
    result = downstream("""
        kept = []


        def test_keeps_pinned_memory():
            kept.append(cudamem.pinned_array(16))


        def test_keeps_nothing():
            assert cudamem.to_device(HOST).copy_to_host().sum() == HOST.sum()
    """, "--cudamem-simulator", "--cudamem-leak-check")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_keeps_pinned_memory*",
        "E *live counts changed*'registrations': (0, 1)*",
    ])


def test_without_the_leak_check_a_leak_passes(downstream):
    result = downstream("""
        kept = []


        def test_keeps_a_device_array():
            kept.append(cudamem.to_device(HOST))
    """, "--cudamem-simulator")
    result.assert_outcomes(passed=1)


def test_leak_check_waits_for_the_stream_callbacks_added(downstream):
    # The callback holds its stream until it returns, half a second after
    # the test: the check waits for it rather than counting the stream.
    result = downstream("""
        import time


        def test_lets_go_of_a_stream_with_a_callback():
            stream = cudamem.stream()
            stream.add_callback(lambda s, status, arg: time.sleep(0.5))
    """, "--cudamem-simulator", "--cudamem-leak-check")
    result.assert_outcomes(passed=1)


@pytest.mark.simulator
def test_leak_check_names_the_callbacks_it_stopped_waiting_for(
        monkeypatch):
    import threading

    import cudamem
    import cudamem.testing
    monkeypatch.setattr(cudamem.testing, "CALLBACK_WAIT", 0.05)
    gate = threading.Event()

    def held_open(stream, status, arg):
        gate.wait(30)

    try:
        with pytest.raises(AssertionError) as info:
            with cudamem.testing.leak_check():
                cudamem.stream().add_callback(held_open)
    finally:
        gate.set()
    text = str(info.value)
    assert "'streams': (" in text
    assert "not run after 0.05 s" in text
    assert re.search(r"held_open at 0x[0-9a-f]+> on <CUDA stream .*> "
                     r"\((running|queued|unreached)\)", text), text


RACES = """
def _copy_in(stream):
    d_ary = cudamem.device_array_like(HOST)
    d_ary.copy_to_device(HOST, stream=stream)
    return d_ary


def test_missing_synchronization():
    stream = cudamem.stream(non_blocking=True)
    d_ary = _copy_in(stream)
    # Reads on the legacy default stream, which a non-blocking stream is
    # not ordered against: the stream must be synchronized first.
    d_ary.copy_to_host()
    stream.synchronize()


def test_synchronized():
    stream = cudamem.stream(non_blocking=True)
    d_ary = _copy_in(stream)
    stream.synchronize()
    np.testing.assert_array_equal(d_ary.copy_to_host(), HOST)


@pytest.mark.expect_hazards
def test_race_on_purpose():
    stream = cudamem.stream(non_blocking=True)
    _copy_in(stream).copy_to_host()
    stream.synchronize()
"""


# The checker reports work that is unordered and not yet complete when the
# other side is queued; a delay keeps the copy in flight however fast the
# machine, so the race is there to report on every run.
RACE_DELAY_US = "20000"


def test_hazards_option_catches_a_missing_synchronization(downstream,
                                                          monkeypatch):
    monkeypatch.setenv("CUDAMEM_SIM_DELAY_US", RACE_DELAY_US)
    result = downstream(RACES, "--cudamem-simulator", "--cudamem-hazards")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines([
        "cudamem driver: simulated (hazard checker on*",
        "*ERROR at teardown of test_missing_synchronization*",
        "E *1 stream-order hazard(s) reported; the last: *",
    ])


def test_without_the_hazard_checker_the_race_passes(downstream):
    result = downstream(RACES, "--cudamem-simulator")
    result.assert_outcomes(passed=3)


def test_hazards_fixture_checks_one_test(downstream, monkeypatch):
    monkeypatch.setenv("CUDAMEM_SIM_DELAY_US", RACE_DELAY_US)
    result = downstream("""
        def _copy_in(stream):
            d_ary = cudamem.device_array_like(HOST)
            d_ary.copy_to_device(HOST, stream=stream)
            return d_ary


        def test_missing_synchronization(cudamem_hazards):
            stream = cudamem.stream(non_blocking=True)
            d_ary = _copy_in(stream)
            d_ary.copy_to_host()
            stream.synchronize()


        def test_event_orders_the_streams(cudamem_hazards):
            producer = cudamem.stream(non_blocking=True)
            consumer = cudamem.stream(non_blocking=True)
            d_ary = _copy_in(producer)
            done = cudamem.event()
            done.record(stream=producer)
            done.wait(stream=consumer)
            out = d_ary.copy_to_host(stream=consumer)
            consumer.synchronize()
            np.testing.assert_array_equal(out, HOST)
            assert cudamem_hazards() == 0


        @pytest.mark.expect_hazards
        def test_counts_what_it_expects(cudamem_hazards):
            stream = cudamem.stream(non_blocking=True)
            _copy_in(stream).copy_to_host()
            stream.synchronize()
            assert cudamem_hazards() >= 1


        def test_checker_is_off_again(cudamem_sim):
            stream = cudamem.stream(non_blocking=True)
            before = cudamem_sim.hazard_count()
            _copy_in(stream).copy_to_host()
            stream.synchronize()
            assert cudamem_sim.hazard_count() == before
    """, "--cudamem-simulator")
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_missing_synchronization*",
        "E *stream-order hazard(s) reported*",
    ])


def test_simulator_option_and_markers(downstream):
    result = downstream("""
        @pytest.mark.requires_gpu
        def test_on_hardware():
            pass


        def test_on_the_simulator(cudamem_sim):
            assert cudamem.driver.info()["simulator"] is True
            assert cudamem_sim.live()["device_allocations"] == 0
    """, "--cudamem-simulator")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "cudamem driver: simulated*",
        "SKIPPED *needs a GPU and the real CUDA driver (running on "
        "cudamem's simulated driver)",
    ])


def test_cudamem_sim_restores_faults_and_delay(downstream):
    result = downstream("""
        from cudamem.errors import CudaAPIError


        def test_breaks_things(cudamem_sim):
            cudamem_sim.set_delay_us(1000)
            cudamem_sim.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY",
                               count=5)
            with pytest.raises(CudaAPIError):
                cudamem.device_array(4)


        def test_finds_them_undone(cudamem_sim):
            assert cudamem_sim.get_delay_us() == 0
            assert cudamem.device_array(4).size == 4
    """, "--cudamem-simulator")
    result.assert_outcomes(passed=2)


def test_environment_selects_the_simulator(downstream, monkeypatch):
    monkeypatch.setenv("CUDAMEM_SIMULATOR", "1")
    monkeypatch.setenv("CUDAMEM_SIM_HAZARDS", "1")
    monkeypatch.setenv("CUDAMEM_SIM_DELAY_US", RACE_DELAY_US)
    result = downstream(RACES)
    result.assert_outcomes(passed=3, errors=1)


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"),
                    reason="a GPU is present: the real driver is usable")
def test_without_the_simulator_gpu_tests_skip(downstream):
    result = downstream("""
        @pytest.mark.requires_gpu
        def test_on_hardware():
            pass


        def test_on_the_simulator(cudamem_sim):
            pass


        def test_leak_check_is_quiet(cudamem_leak_check):
            pass
    """, "--cudamem-hazards")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([
        "SKIPPED *needs a GPU: no usable CUDA driver or device",
        "SKIPPED *needs cudamem's simulated driver: run pytest with "
        "--cudamem-simulator or CUDAMEM_SIMULATOR=1*",
    ])


def test_helpers_outside_pytest(run_py):
    # leak_check and hazard_check as context managers in a plain program.
    proc = run_py("""
        import numpy as np
        import cudamem
        from cudamem import testing
        assert testing.on_simulator()
        with testing.leak_check():
            cudamem.to_device(np.zeros(8))
        kept = []
        try:
            with testing.leak_check():
                kept.append(cudamem.to_device(np.zeros(8)))
        except AssertionError as exc:
            print("caught:", exc)
    """, env={"CUDAMEM_SIMULATOR": "1", "CUDAMEM_DRIVER": None})
    assert proc.returncode == 0, proc.stderr
    assert "caught: cudamem: live counts changed" in proc.stdout
    assert "'device_allocations': (0, 1)" in proc.stdout


def test_registered_as_a_pytest11_entry_point():
    try:
        import tomllib
    except ImportError:  # Python 3.10: its predecessor on the index
        import tomli as tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    entry = project["entry-points"]["pytest11"]
    assert entry == {"cudamem.testing": "cudamem.testing"}


def test_import_cudamem_does_not_load_the_plugin(run_py):
    proc = run_py("""
        import sys
        import cudamem
        print("cudamem.testing" in sys.modules, "pytest" in sys.modules)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


EXAMPLE = os.path.join(ROOT, "docs", "examples", "downstream")


@pytest.fixture
def example(pytester, monkeypatch):
    """A copy of the downstream example project; runs its tests as its CI
    would, without a GPU."""
    monkeypatch.setenv("PYTHONPATH", ROOT)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    for name in ("CUDAMEM_SIMULATOR", "CUDAMEM_DRIVER", "CUDAMEM_SIM_HAZARDS",
                 "CUDAMEM_SIM_DELAY_US"):
        monkeypatch.delenv(name, raising=False)
    shutil.copytree(EXAMPLE, pytester.path, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))

    def run():
        return pytester.runpytest_subprocess(
            "-p", "cudamem.testing", "-p", "no:cacheprovider",
            "--cudamem-simulator", "--cudamem-hazards")
    return run


def test_downstream_example_passes(example):
    result = example()
    result.assert_outcomes(passed=6, skipped=1)


def test_downstream_example_catches_a_missing_synchronization(
        example, pytester):
    # The bug the example's hazard test guards against: stage_in returning
    # before its streams are done.
    source = pytester.path / "pipeline.py"
    text = source.read_text()
    sync = "    for stream in streams:\n        stream.synchronize()\n"
    assert sync in text
    source.write_text(text.replace(sync, ""))
    result = example()
    assert result.parseoutcomes().get("errors", 0) >= 1
    result.stdout.fnmatch_lines([
        "ERROR *::test_stage_in_is_complete_when_it_returns - *",
    ])


# The suite's own rule (tests/conftest.py): a subprocess that needs the
# simulator is refused unless its test is marked so, on either driver, so
# a test that would pass vacuously on a GPU fails on the simulator first.

@pytest.mark.parametrize("code, env", [
    ("from cudamem import simulator", None),
    ("import cudamem.simulator", None),
    ("pass", {"CUDAMEM_SIM_DEVICES": "2"}),
    ("pass", {"CUDAMEM_SIM_ATTRS": "100=1"}),
])
def test_run_py_refuses_unmarked_simulator_code(run_py, code, env):
    with pytest.raises(pytest.fail.Exception, match="mark it simulator"):
        run_py(code, env=env)


@pytest.mark.simulator
def test_run_py_runs_marked_simulator_code(run_py):
    proc = run_py("from cudamem import simulator; print('ran')",
                  env={"CUDAMEM_SIM_DEVICES": "2"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran\n"
