"""Test set-up shared by the whole suite.

The suite runs on cudamem's simulated driver unless CUDAMEM_TEST_DRIVER=real
is set or a GPU is present (/dev/nvidiactl). Markers: ``gpu`` tests need real
hardware; ``simulator`` tests need the simulator's control API. Each is
skipped, with its reason, on the other driver.

Every test is checked for leaks: after it, cudamem is quiesced and the
simulator's live counts must be back where they were before it.

The simulator's stress switches pass through the environment (the
simulator reads them at cuInit, and run_python's subprocesses inherit
them): ``CUDAMEM_SIM_DELAY_US=<us>`` delays every stream operation, and
with ``CUDAMEM_SIM_HAZARDS=1`` a test during which the hazard checker
reported a stream-order race fails (the checker itself only counts and
prints); mark a test ``expect_hazards`` when it provokes them on purpose.
``make test-stress`` runs the array suites that way.

Hypothesis profiles: "ci" (the default) and "fuzz" (many more examples,
``CUDAMEM_FUZZ_EXAMPLES``, default 2000), chosen with
``HYPOTHESIS_PROFILE=fuzz`` or ``--hypothesis-profile=fuzz``. Under "fuzz"
a test's own ``@settings(max_examples=...)`` is raised to the profile's.
Every hypothesis test is marked ``fuzz`` (``make fuzz`` runs ``-m fuzz``),
as is any test marked so by hand.
"""
import gc
import os

import pytest

from tests.helpers.run import run_python


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

# The leak and hazard checks, the expect_hazards marker and the cudamem_*
# fixtures come from cudamem's own pytest plugin.
pytest_plugins = ["cudamem.testing"]

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # a GPU box without hypothesis: its tests fail to import
    settings = None
else:
    # "ci": hypothesis's defaults as the suite has always run them, without
    # the per-example deadline (simulated copies of big shapes are slow).
    settings.register_profile(
        "ci", settings.get_profile("default"), deadline=None,
        suppress_health_check=[HealthCheck.too_slow], print_blob=True)
    settings.register_profile(
        "fuzz", settings.get_profile("ci"),
        max_examples=int(os.environ.get("CUDAMEM_FUZZ_EXAMPLES", "2000")),
        suppress_health_check=[HealthCheck.too_slow,
                               HealthCheck.filter_too_much,
                               HealthCheck.data_too_large])
    # --hypothesis-profile (hypothesis's pytest plugin) overrides this.
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "fuzz: a property test run by `make fuzz` (every "
        "hypothesis test is marked so automatically)")


def _fuzz_settings(item):
    """Under the fuzz profile, raise a hypothesis test's own max_examples
    (an explicit @settings wins over any profile) to the profile's."""
    fn = getattr(item, "obj", None)
    own = getattr(fn, "_hypothesis_internal_use_settings", None)
    want = settings.default.max_examples
    if own is not None and own.max_examples < want:
        fn._hypothesis_internal_use_settings = settings(own,
                                                        max_examples=want)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a GPU and the real driver "
                                "(running on the simulated driver)")
    skip_sim = pytest.mark.skip(reason="needs the simulated driver's control "
                                "API (running on the real driver)")
    fuzz = (settings is not None
            and settings.get_current_profile_name() == "fuzz")
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.fuzz)
            if fuzz:
                _fuzz_settings(item)
        # Markers, not keywords: a keyword is also any folder's name, and
        # tests/gpu and tests/simulator are folders.
        if item.get_closest_marker("gpu") and not REAL:
            item.add_marker(skip_gpu)
        if item.get_closest_marker("simulator") and REAL:
            item.add_marker(skip_sim)


_frozen_for = [None]


@pytest.fixture(autouse=True)
def no_leaks(request):
    """Live simulator objects after a test equal those before it (see
    cudamem.testing.leak_check), with any sticky error the test left
    forgotten first. The plugin fails a test during which the hazard
    checker reported, under CUDAMEM_SIM_HAZARDS=1.

    The leak check collects garbage twice a test, and a full collection
    of the suite's heap (every collected item, hypothesis, NumPy) took
    90 ms, three quarters of the suite's time. What survives a test's
    last collection is frozen (gc.freeze) so that the next test's
    collections walk only what was made since; it is thawed at each new
    file, so that cycles among older objects are still collected."""
    # Imported here, after pytest imported the plugin (and rewrote it).
    from cudamem.testing import leak_check
    path = getattr(request.node, "path", None)
    if path != _frozen_for[0]:
        gc.unfreeze()
        _frozen_for[0] = path
    with leak_check():
        yield
        _forget_sticky_errors()
    gc.freeze()


def _forget_sticky_errors():
    """The driver keeps a sticky error until the process ends, and each
    test stands for a new process: a device a test left poisoned is reset
    once the simulator forgets the error (simulator.reset(), a new process
    for it), so the next test does not inherit it."""
    if REAL:
        return
    import cudamem
    if not cudamem.is_available():
        return
    poisoned = [dev for dev in cudamem.list_devices()
                if cudamem.context_is_poisoned(dev)]
    if poisoned:
        from cudamem import simulator
        simulator.reset()
        for dev in poisoned:
            dev.reset()


@pytest.fixture
def sim():
    """The simulator's control module; skips on the real driver."""
    if REAL:
        pytest.skip("needs the simulated driver's control API")
    from cudamem import simulator
    return simulator


@pytest.fixture
def hazards(sim):
    """The hazard checker on for the test, which fails if it reported a
    race; yields the simulator's control module. Afterwards the checker is
    as CUDAMEM_SIM_HAZARDS set it."""
    from cudamem.testing import hazard_check

    sim.set_hazards(True)
    try:
        # hazard_check counts from 0 again after a sim.reset() in the
        # test, which a comparison with the count before would not.
        with hazard_check():
            yield sim
    finally:
        sim.set_hazards(os.environ.get("CUDAMEM_SIM_HAZARDS", "0") not in
                        ("", "0"))


# What only the simulator has: its control module and the settings that
# shape its devices. A test whose subprocess uses them means nothing on a
# GPU (its counts read the simulator while cudamem runs on the GPU), so it
# must be marked ``simulator`` or use the fixture that skips on a GPU;
# checked on every driver.
_SIM_ONLY_CODE = ("cudamem import simulator", "import cudamem.simulator")
_SIM_ONLY_ENV = ("CUDAMEM_SIM_DEVICES", "CUDAMEM_SIM_MEMORY",
                 "CUDAMEM_SIM_ATTRS")


@pytest.fixture
def run_py(request):
    marked = (request.node.get_closest_marker("simulator") is not None
              or "sim" in request.fixturenames)

    def run(code, env=None, timeout=120):
        if not marked and (any(s in code for s in _SIM_ONLY_CODE) or any(
                env and env.get(k) is not None for k in _SIM_ONLY_ENV)):
            pytest.fail("%s runs the simulator's control API or devices in "
                        "a subprocess: mark it simulator" % request.node.name)
        return run_python(code, env, timeout)
    return run
