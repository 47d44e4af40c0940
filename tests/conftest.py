"""Test set-up shared by the whole suite.

The suite runs on cudamem's simulated driver unless CUDAMEM_TEST_DRIVER=real
is set or a GPU is present (/dev/nvidiactl). Markers: ``gpu`` tests need real
hardware; ``simulator`` tests need the simulator's control API. Each is
skipped, with its reason, on the other driver.

Every test is checked for leaks: after it, cudamem is quiesced and the
simulator's live counts must be back where they were before it.
"""
import gc
import os
import subprocess
import sys
import textwrap

import pytest


def _use_real_driver():
    choice = os.environ.get("CUDAMEM_TEST_DRIVER", "")
    if choice in ("real", "sim"):
        return choice == "real"
    if choice:
        raise pytest.UsageError("CUDAMEM_TEST_DRIVER must be 'real' or "
                                "'sim', not %r" % choice)
    return os.path.exists("/dev/nvidiactl")


REAL = _use_real_driver()
if not REAL:
    # Before cudamem loads a driver: the simulator, with a modest device.
    os.environ["CUDAMEM_SIMULATOR"] = "1"
    os.environ.setdefault("CUDAMEM_SIM_MEMORY", str(1 << 30))
    os.environ.pop("CUDAMEM_DRIVER", None)

import cudamem  # noqa: E402


def pytest_report_header(config):
    return "cudamem driver: %s" % ("real" if REAL else "simulated")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a GPU and the real driver "
                                "(running on the simulated driver)")
    skip_sim = pytest.mark.skip(reason="needs the simulated driver's control "
                                "API (running on the real driver)")
    for item in items:
        if "gpu" in item.keywords and not REAL:
            item.add_marker(skip_gpu)
        if "simulator" in item.keywords and REAL:
            item.add_marker(skip_sim)


def quiesce():
    """Release everything cudamem holds that a test let go of, then bring
    the contexts to one fixed state: device 0's primary context retained by
    cudamem. The simulator counts active contexts, and a test may end with
    that context released (close(), Device.reset()) or first retained by
    it; either way the count compared is then the same, while a context a
    test created and did not destroy still shows."""
    gc.collect()
    if not REAL and cudamem.is_available():
        cudamem._cudamem._flush_pending()
        cudamem.list_devices()[0].get_primary_context()


@pytest.fixture(autouse=True)
def no_leaks():
    """Live simulator objects after a test equal those before it."""
    if REAL:
        yield
        return
    from cudamem import simulator
    quiesce()
    before = simulator.live()
    yield
    simulator.clear_faults()
    quiesce()
    after = simulator.live()
    leaked = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert not leaked, "live counts changed (before, after): %r" % leaked


@pytest.fixture
def sim():
    """The simulator's control module; skips on the real driver."""
    if REAL:
        pytest.skip("needs the simulated driver's control API")
    from cudamem import simulator
    return simulator


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter with this suite's environment
    plus `env` (a value of None removes the variable); returns the
    CompletedProcess with text output."""
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=full_env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def run_py():
    return run_python
