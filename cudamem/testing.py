"""cudamem's pytest plugin: test GPU data movement in CI without a GPU.

Owns the plugin's options, markers and fixtures, and the leak and hazard
checks behind them (this project's own suite uses them too). It does not
switch drivers once one is loaded: a process uses one driver for its life.

Enable it with ``-p cudamem.testing`` or ``pytest_plugins =
["cudamem.testing"]`` (an installed cudamem registers it through the
``pytest11`` entry point, so it is on by default). Choosing the driver:

``--cudamem-simulator`` (or ``CUDAMEM_SIMULATOR=1``)
    Run the session on cudamem's simulated driver. The plugin selects it
    when pytest is configured, before any test loads a driver; it is a usage
    error if a real driver is already loaded in the process by then. With
    the option (not with the variable alone) the plugin loads the simulator
    at once, under its SONAME ``libcuda.so.1``, so other libraries in the
    process that load the driver by that name (numba-cuda, cuda.bindings,
    cuda.core, CuPy) get it too, and puts it first on ``LD_LIBRARY_PATH``
    for the processes tests start. A library that loaded a driver before
    pytest was configured cannot be switched: run pytest under ``python -m
    cudamem.simulator run -- pytest ...`` then.
``--cudamem-hazards`` (or ``CUDAMEM_SIM_HAZARDS=1``)
    Turn the simulator's stream-order hazard checker on and fail every test
    during which it reported a race (mark a test ``expect_hazards`` when it
    provokes them on purpose).
``--cudamem-leak-check``
    Apply the ``cudamem_leak_check`` fixture to every test.

Markers: ``requires_gpu`` skips a test unless cudamem runs on a real GPU
driver; ``expect_hazards`` exempts a test from the hazard check.

Fixtures: ``cudamem_sim`` (the ``cudamem.simulator`` control module; skips
when the process runs on a real driver, and clears injected faults and
restores the stream delay afterwards), ``cudamem_leak_check`` (fails the
test when device or host allocations, registrations, streams, events, IPC
mappings or contexts it created are still live once cudamem is quiesced; a
no-op on a real driver, which cannot count them) and ``cudamem_hazards``
(the hazard checker on for one test, which fails if it reports a race;
yields a function returning the hazards reported so far). The checks run
after the test's other fixtures are torn down, so a failed check is
reported as an error in the test's teardown.
"""
import contextlib
import gc
import os

import pytest

from cudamem import _cudamem

__all__ = ["on_simulator", "quiesce", "leak_check", "hazard_check"]

_SIM_ENV = "CUDAMEM_SIMULATOR"
_HAZARD_ENV = "CUDAMEM_SIM_HAZARDS"
# quiesce()'s wait for stream callbacks, in seconds.
CALLBACK_WAIT = 10.0


def _env_true(name):
    # As core/driver.c reads its switches: set, non-empty and not "0".
    return os.environ.get(name, "0") not in ("", "0")


def _driver_loaded():
    # The table's rows are resolved once a driver is loaded.
    return any(row[4] for row in _cudamem._driver_rows())


def on_simulator():
    """on_simulator() -> bool

    True when cudamem runs, or will run once loaded, on its simulated
    driver in this process. Never loads a real driver."""
    if _driver_loaded():
        from cudamem import simulator
        return simulator.is_active()
    return _env_true(_SIM_ENV) and not os.environ.get("CUDAMEM_DRIVER")


def quiesce():
    """quiesce()

    Release everything cudamem holds that the program let go of, then
    bring the contexts to one fixed state: device 0's primary context
    retained by cudamem, and every context cudamem holds with the event
    ``synchronize()`` probes it with. A context released by ``close()`` or
    a device reset, or first retained during a test, then counts the same
    before and after it, while a context created and not destroyed still
    shows. Stream callbacks added are waited for first, up to
    CALLBACK_WAIT seconds: each holds its stream, callable and argument
    until it has run. Does nothing unless cudamem runs on the simulated
    driver."""
    sim = on_simulator() and _cudamem.is_available()
    if sim:
        _cudamem._dispatch_drain(CALLBACK_WAIT)
    gc.collect()
    if sim:
        # Trimmed first: a freed block gives its events to the queues.
        _cudamem._hostpool_trim()  # staging buffers, cached blocks
        _cudamem._flush_pending()
        _cudamem.list_devices()[0].get_primary_context()
        # synchronize()'s probe event lives as long as its context.
        _cudamem._sync_probe_ready()


def _late_callbacks():
    """The stream callbacks quiesce() stopped waiting for, as text: each
    holds its stream, which the error's traceback must not keep."""
    return ", ".join("%r on %r (%s)" % late
                     for late in _cudamem._dispatch_drain(0.0))


@contextlib.contextmanager
def leak_check():
    """leak_check(): a context manager that raises AssertionError when the
    simulator's live counts after its block (injected faults cleared,
    cudamem quiesced) differ from those before it, naming the stream
    callbacks quiesce() stopped waiting for. Does nothing on a real
    driver."""
    if not on_simulator():
        yield
        return
    from cudamem import simulator
    quiesce()
    before = simulator.live()
    yield
    simulator.clear_faults()
    quiesce()
    after = simulator.live()
    leaked = {k: (before[k], after[k]) for k in before
              if before[k] != after[k]}
    if leaked:
        message = "cudamem: live counts changed (before, after): %r" % (
            leaked,)
        late = _late_callbacks()
        if late:
            message += ("; stream callbacks not run after %g s, each "
                        "holding its stream: %s" % (CALLBACK_WAIT, late))
        raise AssertionError(message)


@contextlib.contextmanager
def hazard_check():
    """hazard_check(): a context manager that raises AssertionError when
    the simulator's hazard checker reported a stream-order race during its
    block. It does not switch the checker on (``--cudamem-hazards``,
    ``CUDAMEM_SIM_HAZARDS=1`` or ``cudamem.simulator.set_hazards``); does
    nothing on a real driver."""
    if not on_simulator():
        yield
        return
    from cudamem import simulator
    start = simulator.hazard_count()
    yield
    now = simulator.hazard_count()
    # simulator.reset() inside the block restarts the count from 0.
    new = now - start if now >= start else now
    if new:
        raise AssertionError("cudamem: %d stream-order hazard(s) reported; "
                             "the last: %s" % (new, simulator.last_hazard()))


# ---------------------------------------------------------------------------
# The plugin.

def pytest_addoption(parser):
    group = parser.getgroup("cudamem")
    group.addoption(
        "--cudamem-simulator", action="store_true", default=False,
        help="run on cudamem's simulated driver (as CUDAMEM_SIMULATOR=1)")
    group.addoption(
        "--cudamem-hazards", action="store_true", default=False,
        help="switch the simulator's stream-order hazard checker on and "
        "fail tests during which it reported a race "
        "(as CUDAMEM_SIM_HAZARDS=1)")
    group.addoption(
        "--cudamem-leak-check", action="store_true", default=False,
        help="fail every test that leaves cudamem objects live "
        "(simulated driver only)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "requires_gpu: needs a GPU and the real CUDA driver "
        "(skipped on cudamem's simulated driver and without a GPU)")
    config.addinivalue_line(
        "markers", "expect_hazards: the test provokes stream-order hazards "
        "on purpose (not failed by cudamem's hazard check)")
    if config.getoption("cudamem_simulator"):
        if _driver_loaded() and not on_simulator():
            raise pytest.UsageError(
                "--cudamem-simulator: this process already loaded the real "
                "CUDA driver (%s); cudamem cannot switch drivers, so select "
                "the simulator before anything uses cudamem"
                % _cudamem.driver_info()["path"])
        os.environ[_SIM_ENV] = "1"
        os.environ.pop("CUDAMEM_DRIVER", None)
    if config.getoption("cudamem_hazards"):
        # The simulator reads it at cuInit; a loaded one is switched below.
        os.environ[_HAZARD_ENV] = "1"
        if _driver_loaded() and on_simulator():
            from cudamem import simulator
            simulator.set_hazards(True)
    if config.getoption("cudamem_simulator"):
        _simulator_for_everyone()


def _mapped_libcudas():
    """Paths of the libcuda.so* files mapped into this process."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return set()
    paths = (line.split(None, 5)[5:] for line in lines)
    return {os.path.realpath(path[0]) for path in paths
            if path and os.path.basename(path[0]).startswith("libcuda.so")}


def _simulator_for_everyone():
    # A library that loads the driver by name (dlopen("libcuda.so.1"):
    # numba-cuda through cuda.bindings, cuda.core, CuPy) finds the
    # simulator only once it is in the process under its SONAME, or when
    # the directory holding it was on LD_LIBRARY_PATH at process start.
    # So cudamem loads it now, before test modules are imported, and
    # child processes get the directory.
    from cudamem import simulator
    target = os.path.realpath(simulator.library_path())
    others = _mapped_libcudas() - {target}
    if others:
        raise pytest.UsageError(
            "--cudamem-simulator: this process already loaded another CUDA "
            "driver (%s) before the plugin was configured; run pytest as "
            "`python -m cudamem.simulator run -- pytest ...` instead"
            % ", ".join(sorted(others)))
    try:
        env = simulator._run_environment()
        _cudamem.driver_info()
    except Exception as exc:
        raise pytest.UsageError("--cudamem-simulator: cannot load the "
                                "simulator: %s" % exc) from exc
    os.environ["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"]


def pytest_report_header(config):
    if not on_simulator():
        return "cudamem driver: real%s" % (
            "" if _driver_loaded() else " (not loaded yet)")
    return ("cudamem driver: simulated (hazard checker %s, stream delay "
            "CUDAMEM_SIM_DELAY_US=%s)"
            % ("on" if _env_true(_HAZARD_ENV) else "off",
               os.environ.get("CUDAMEM_SIM_DELAY_US", "0")))


def _no_gpu_reason():
    if on_simulator():
        return ("needs a GPU and the real CUDA driver (running on "
                "cudamem's simulated driver)")
    if not _cudamem.is_available():
        return "needs a GPU: no usable CUDA driver or device"
    return None


def pytest_runtest_setup(item):
    if item.get_closest_marker("requires_gpu") is not None:
        reason = _no_gpu_reason()
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture(autouse=True)
def _cudamem_checks(request):
    """The session-wide checks the options ask for."""
    config = request.config
    leaks = config.getoption("cudamem_leak_check") and on_simulator()
    hazards = (_env_true(_HAZARD_ENV) and on_simulator()
               and request.node.get_closest_marker("expect_hazards") is None)
    with contextlib.ExitStack() as checks:
        if leaks:
            checks.enter_context(leak_check())
        if hazards:
            checks.enter_context(hazard_check())
        yield


@pytest.fixture
def cudamem_sim():
    """The simulator's control module (cudamem.simulator) for a test that
    needs the simulated driver; skips on a real driver."""
    if not on_simulator():
        pytest.skip("needs cudamem's simulated driver: run pytest with "
                    "--cudamem-simulator or CUDAMEM_SIMULATOR=1 (cudamem "
                    "cannot switch a process's driver once chosen)")
    from cudamem import simulator
    before = simulator.get_delay_us()
    yield simulator
    simulator.clear_faults()
    simulator.set_delay_us(before)


@pytest.fixture
def cudamem_leak_check():
    """Fails the test when cudamem objects it created are still live after
    it, once cudamem is quiesced (simulated driver only)."""
    with leak_check():
        yield


@pytest.fixture
def cudamem_hazards(request, cudamem_sim):
    """The hazard checker on for this test, which fails if it reports a
    race (unless marked expect_hazards); yields a function returning the
    hazards reported so far."""
    expected = request.node.get_closest_marker("expect_hazards") is not None
    cudamem_sim.set_hazards(True)
    start = cudamem_sim.hazard_count()
    try:
        with contextlib.ExitStack() as checks:
            if not expected:
                checks.enter_context(hazard_check())
            yield lambda: cudamem_sim.hazard_count() - start
    finally:
        cudamem_sim.set_hazards(_env_true(_HAZARD_ENV))
