"""A test that asks the simulator anything is marked ``simulator`` or takes
a fixture that skips on the real driver (conftest.py).

On a GPU (``make gpu-check``), an unmarked test that reads
``simulator.live()`` fails with "cudamem runs on the driver
'libcuda.so.1'", and one that expects ``leak_check`` to raise fails
because the check does nothing there: six tests did so on an H100 on
2026-11-27 (tests/gpu/RESULTS.md). The suite runs on the simulator
everywhere else, so only this rule sees it. It reads the test files:
a test function is offending when, unmarked (by ``pytestmark``, its
class or itself) and without a skipping fixture, it or a helper of its
module imports ``cudamem.simulator``, uses the driver scripts of
tests/helpers/simdriver.py or calls ``leak_check``. Code run in a
subprocess through ``run_py`` is checked when it runs (conftest.py)."""
import ast
import pathlib

import pytest

TESTS = pathlib.Path(__file__).resolve().parents[1]

# Fixtures that skip the test on the real driver: conftest.py's and the
# plugin's (cudamem/testing.py).
SKIPPING_FIXTURES = {"sim", "hazards", "cudamem_sim", "cudamem_hazards"}
SIM_HELPERS = "tests.helpers.simdriver"


def _is_simulator_mark(node):
    return "mark.simulator" in ast.unparse(node)


def _why_simulator(fn, helpers):
    """What in fn needs the simulator, or None."""
    for n in ast.walk(fn):
        if isinstance(n, ast.ImportFrom):
            if n.module == SIM_HELPERS or (
                    n.module == "cudamem"
                    and any(a.name == "simulator" for a in n.names)):
                return "imports %s" % ast.unparse(n)
        elif isinstance(n, ast.Import):
            if any(a.name in ("cudamem.simulator", SIM_HELPERS)
                   for a in n.names):
                return "imports %s" % ast.unparse(n)
        elif isinstance(n, ast.Attribute):
            if n.attr == "simulator" and ast.unparse(n.value) == "cudamem":
                return "uses cudamem.simulator"
        elif isinstance(n, ast.Call):
            f = n.func
            name = getattr(f, "id", None) or getattr(f, "attr", None)
            if name == "leak_check":
                return "calls leak_check, which does nothing on a GPU"
            if name in helpers:
                return "calls %s, which %s" % (name, helpers[name])
    return None


def unmarked_simulator_tests(source, where="<test>"):
    """The test functions of one test module's source that need the
    simulator and would run on a GPU, as 'where:line name: why'."""
    tree = ast.parse(source)
    if any(isinstance(s, ast.Assign)
           and any(getattr(t, "id", None) == "pytestmark" for t in s.targets)
           and _is_simulator_mark(s.value) for s in tree.body):
        return []
    helpers = {}
    for s in tree.body:
        if isinstance(s, ast.ImportFrom) and s.module == SIM_HELPERS:
            helpers.update((a.asname or a.name, "drives the simulator")
                           for a in s.names)
    functions = [s for s in tree.body if isinstance(s, ast.FunctionDef)
                 and not s.name.startswith("test_")]
    # Helpers that call helpers: until nothing more is found.
    grew = True
    while grew:
        grew = False
        for f in functions:
            if f.name not in helpers:
                why = _why_simulator(f, helpers)
                if why:
                    helpers[f.name] = why
                    grew = True
    found = []

    def check(fn, marked):
        if not fn.name.startswith("test_") or marked or any(
                _is_simulator_mark(d) for d in fn.decorator_list):
            return
        if {a.arg for a in fn.args.args} & SKIPPING_FIXTURES:
            return
        why = _why_simulator(fn, helpers)
        if why:
            found.append("%s:%d %s: %s" % (where, fn.lineno, fn.name, why))

    for s in tree.body:
        if isinstance(s, ast.FunctionDef):
            check(s, False)
        elif isinstance(s, ast.ClassDef):
            marked = any(_is_simulator_mark(d) for d in s.decorator_list)
            for m in s.body:
                if isinstance(m, ast.FunctionDef):
                    check(m, marked)
    return found


def test_every_test_that_asks_the_simulator_is_marked():
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        found += unmarked_simulator_tests(path.read_text(),
                                          str(path.relative_to(TESTS)))
    assert found == [], "\n".join(found)


def test_the_skipping_fixtures_skip_on_the_real_driver():
    # The exemption is only as good as the fixtures: each is defined in
    # conftest.py or the plugin, and calls pytest.skip or takes one that
    # does.
    import cudamem.testing
    defined = {}
    for path in (TESTS / "conftest.py",
                 pathlib.Path(cudamem.testing.__file__)):
        for s in ast.parse(path.read_text()).body:
            if isinstance(s, ast.FunctionDef) and s.name in SKIPPING_FIXTURES:
                defined[s.name] = s
    assert set(defined) == SKIPPING_FIXTURES
    for name, fn in defined.items():
        skips = any(isinstance(n, ast.Call)
                    and ast.unparse(n.func) == "pytest.skip"
                    for n in ast.walk(fn))
        takes = {a.arg for a in fn.args.args} & SKIPPING_FIXTURES
        assert skips or takes, name


@pytest.mark.parametrize("code, offends", [
    ("def test_a():\n    from cudamem import simulator\n"
     "    simulator.live()\n", True),
    ("import cudamem.simulator\n\ndef test_a():\n"
     "    cudamem.simulator.live()\n", True),
    ("def helper():\n    from cudamem import simulator\n"
     "    return simulator.live()\n\n"
     "def other():\n    return helper()\n\n"
     "def test_a():\n    other()\n", True),
    ("from tests.helpers.simdriver import run_driver\n\n"
     "def test_a():\n    run_driver('')\n", True),
    ("def test_a():\n    with cudamem.testing.leak_check():\n"
     "        pass\n", True),
    ("class TestA:\n    def test_a(self):\n"
     "        from cudamem import simulator\n", True),
    ("import pytest\npytestmark = pytest.mark.simulator\n\n"
     "def test_a():\n    from cudamem import simulator\n", False),
    ("import pytest\n\n@pytest.mark.simulator\n"
     "def test_a():\n    from cudamem import simulator\n", False),
    ("import pytest\n\n@pytest.mark.simulator\nclass TestA:\n"
     "    def test_a(self):\n        from cudamem import simulator\n",
     False),
    ("def test_a(sim):\n    sim.live()\n", False),
    ("def test_a(run_py):\n    run_py('from cudamem import simulator')\n",
     False),
])
def test_the_rule_finds_what_it_names(code, offends):
    assert bool(unmarked_simulator_tests(code)) == offends
