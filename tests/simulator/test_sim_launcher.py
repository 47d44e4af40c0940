"""The simulator for other programs and libraries: the launcher
(``python -m cudamem.simulator run``) and the pytest plugin's
``--cudamem-simulator`` reaching libraries other than cudamem.

A program is on the simulator when ``dlopen("libcuda.so.1")`` gives a
library with the simulator's control symbols and the driver API answers as
the options asked (cuDeviceGetCount, cuDeviceTotalMem_v2); it is the same
driver instance as cudamem's when the driver knows cudamem's allocation
(cuMemGetAddressRange_v2 gives its base and size)."""
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.run import ROOT

pytestmark = pytest.mark.simulator
pytest_plugins = ["pytester"]

SIM_VARS = ("CUDAMEM_SIMULATOR", "CUDAMEM_DRIVER", "CUDAMEM_SIM_DEVICES",
            "CUDAMEM_SIM_MEMORY", "CUDAMEM_SIM_DELAY_US",
            "CUDAMEM_SIM_HAZARDS", "LD_LIBRARY_PATH")

# Loads the driver by name, as cuda.bindings and numba-cuda do.
PROBE = """
import ctypes, json, os
lib = ctypes.CDLL("libcuda.so.1")
assert lib.cuInit(0) == 0
n = ctypes.c_int()
assert lib.cuDeviceGetCount(ctypes.byref(n)) == 0
dev = ctypes.c_int()
assert lib.cuDeviceGet(ctypes.byref(dev), 0) == 0
total = ctypes.c_size_t()
assert lib.cuDeviceTotalMem_v2(ctypes.byref(total), dev) == 0
print(json.dumps({
    "simulator": hasattr(lib, "cusim_is_simulator"),
    "devices": n.value, "memory": total.value,
    "delay_us": lib.cusim_get_delay_us(),
    "env": {k: os.environ.get(k) for k in (
        "LD_LIBRARY_PATH", "CUDAMEM_SIMULATOR", "CUDAMEM_SIM_HAZARDS")},
}))
"""

# The hazard checker's documented example (docs/guide/simulator.rst): a
# copy on s2 not ordered after s1's copy into its source.
RACE = """
import cudamem as cuda
from cudamem import simulator
s1, s2 = cuda.stream(), cuda.stream()
h = cuda.pinned_array(1 << 16)
d = cuda.to_device(h, stream=s1)
d2 = cuda.device_array_like(d, stream=s2)
d2.copy_to_device(d, stream=s2)
s2.synchronize()
s1.synchronize()
print(simulator.hazard_count())
"""


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in SIM_VARS}
    env["PYTHONPATH"] = ROOT
    env.update(extra)
    return env


def launch(options, program, env=None):
    return subprocess.run(
        [sys.executable, "-m", "cudamem.simulator", "run", *options, "--",
         *program], env=env or clean_env(), capture_output=True, text=True,
        timeout=120)


def launch_py(options, code, env=None):
    return launch(options, [sys.executable, "-c", textwrap.dedent(code)],
                  env)


def libcuda_dir():
    from cudamem import simulator
    return simulator.libcuda_dir()


def test_run_puts_the_simulator_first_with_the_options():
    import json
    proc = launch_py(["--devices", "2", "--memory", str(3 << 28),
                      "--delay-us", "7"], PROBE,
                     clean_env(LD_LIBRARY_PATH="/nonexistent/lib"))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["simulator"]
    assert got["devices"] == 2
    assert got["memory"] == 3 << 28
    assert got["delay_us"] == 7
    assert got["env"] == {
        "LD_LIBRARY_PATH": libcuda_dir() + os.pathsep + "/nonexistent/lib",
        "CUDAMEM_SIMULATOR": "1", "CUDAMEM_SIM_HAZARDS": None}


def test_run_without_options_keeps_the_simulators_defaults():
    import json
    proc = launch_py([], PROBE)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert (got["devices"], got["memory"], got["delay_us"]) == (
        1, 16 << 30, 0)
    assert got["env"]["LD_LIBRARY_PATH"] == libcuda_dir()


def test_run_hazards_switches_the_checker_on():
    on = launch_py(["--hazards", "--delay-us", "3000"], RACE)
    off = launch_py(["--delay-us", "3000"], RACE)
    assert on.returncode == 0, on.stderr
    assert off.returncode == 0, off.stderr
    assert int(on.stdout) >= 1
    assert int(off.stdout) == 0


def test_run_exits_with_the_programs_status():
    assert launch_py([], "raise SystemExit(7)").returncode == 7
    killed = launch_py([], "import os, signal\n"
                           "os.kill(os.getpid(), signal.SIGTERM)")
    assert killed.returncode == -signal.SIGTERM


def test_run_finds_the_program_on_path():
    proc = launch(["--devices", "3"], ["env"])
    assert proc.returncode == 0, proc.stderr
    assert "CUDAMEM_SIM_DEVICES=3" in proc.stdout.splitlines()


def test_run_of_a_missing_program_says_so():
    proc = launch([], ["no-such-program-cudamem"])
    assert proc.returncode == 127
    assert "cannot run 'no-such-program-cudamem'" in proc.stderr


@pytest.mark.parametrize("options, message", [
    (["--devices", "0"], "argument --devices: want a positive integer, "
                         "not '0'"),
    (["--memory", "lots"], "argument --memory: want a positive integer, "
                           "not 'lots'"),
    (["--delay-us", "-1"], "argument --delay-us: want an integer >= 0, "
                           "not '-1'"),
])
def test_run_refuses_bad_options(options, message):
    proc = launch(options, ["true"])
    assert proc.returncode == 2
    assert message in proc.stderr


def test_run_needs_a_program():
    proc = subprocess.run(
        [sys.executable, "-m", "cudamem.simulator", "run", "--"],
        env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "no program given" in proc.stderr


def test_run_refuses_a_driver_that_is_not_the_simulator():
    proc = launch([], ["true"], clean_env(CUDAMEM_DRIVER="libc.so.6"))
    assert proc.returncode == 2
    assert "is not cudamem's simulated driver" in proc.stderr


# The pytest plugin: a downstream test file whose other library loads the
# driver by name, in the process and in a child process.
DOWNSTREAM = """
import ctypes
import subprocess
import sys

import numpy as np

import cudamem


def test_other_library_shares_cudamems_driver():
    d = cudamem.to_device(np.arange(100, dtype=np.float64))
    lib = ctypes.CDLL("libcuda.so.1")
    assert hasattr(lib, "cusim_is_simulator")
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                     ctypes.c_uint64(d.device_ctypes_pointer
                                                     .value))
    assert (rc, base.value, size.value) == (
        0, d.device_ctypes_pointer.value, 800)


def test_child_process_loads_the_simulator():
    code = ("import ctypes; lib = ctypes.CDLL('libcuda.so.1'); "
            "print(hasattr(lib, 'cusim_is_simulator'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True).stdout
    assert out == "True\\n"
"""


@pytest.fixture
def downstream(pytester, monkeypatch):
    for name in SIM_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", ROOT)

    def run(source, *args, conftest=None):
        pytester.makepyfile(test_downstream=textwrap.dedent(source))
        if conftest is not None:
            pytester.makeconftest(textwrap.dedent(conftest))
        return pytester.runpytest_subprocess(
            "-p", "cudamem.testing", "-p", "no:cacheprovider", "-rA", *args)
    return run


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"),
                    reason="a GPU is present: libcuda.so.1 is the real one")
def test_simulator_option_reaches_other_libraries(downstream):
    result = downstream(DOWNSTREAM, "--cudamem-simulator")
    result.assert_outcomes(passed=2)


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"),
                    reason="a GPU is present: libcuda.so.1 is the real one")
def test_variable_alone_selects_the_simulator_for_cudamem_only(
        downstream, monkeypatch):
    # Without the option nothing but cudamem finds the simulator: the
    # reason the option loads it early.
    monkeypatch.setenv("CUDAMEM_SIMULATOR", "1")
    result = downstream("""
        import ctypes
        import pytest


        def test_by_name():
            with pytest.raises(OSError, match="libcuda.so.1"):
                ctypes.CDLL("libcuda.so.1")
    """)
    result.assert_outcomes(passed=1)


def test_simulator_option_refuses_another_loaded_driver(downstream,
                                                          tmp_path):
    # A copy of the simulator under another name stands for a driver that
    # a library loaded before the plugin was configured.
    from cudamem import simulator
    other = tmp_path / "libcuda.so.1"
    shutil.copyfile(simulator.library_path(), other)
    result = downstream("def test_nothing():\n    pass\n",
                        "--cudamem-simulator", conftest=f"""
        import ctypes
        ctypes.CDLL({str(other)!r})
    """)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--cudamem-simulator: this process already loaded another CUDA "
        f"driver ({other}) before the plugin was configured; run pytest as "
        "`python -m cudamem.simulator run -- pytest ...` instead"])
