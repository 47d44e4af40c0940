"""Run numba-cuda's own host-side test modules on cudamem's simulated
driver and compare the outcome with a list of expected failures.

Two profiles, one per make target:

``standin`` (``make test-numba``, tests/numba_expected.txt)
    numba-cuda's tests against cudamem: run with the stand-in ``numba``
    package (tests/numba_standin) first on the path, which maps numba.cuda
    onto cudamem.
``peers`` (``make test-peers``, tests/peers_expected.txt)
    numba-cuda's tests against the real numba-cuda, which runs on the
    simulator as its libcuda.so.1 (the launcher's environment):
    every driver-level module (tests/cudadrv) and the host-side ones of
    tests/cudapy, with the pytest fixture numba-cuda's repository provides
    (tests/peers/numba_conftest.py).

The modules are copied unchanged from the installed numba-cuda wheel into
``--out`` and run by pytest on cudamem's simulated driver. The modules with
tests that need two GPUs (test_multigpu, test_context_stack's
context-switch tests, and for the real numba-cuda test_runtime's
CUDA_VISIBLE_DEVICES test and test_ipc's staged IPC) run in a second pytest
process with two simulated devices.
The run fails when a pytest process crashes, a test not in the expected
list fails, or a listed one passes, is skipped or is no longer reported.
Usage (in a venv with pytest and NumPy, and numba-cuda for ``peers``,
cudamem built in place):

    python tools/numba_tests.py --tests <wheel>/numba_cuda/numba/cuda/tests
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STANDIN = os.path.join(ROOT, "tests", "numba_standin")
CUDAPY_HOST = ("test_cuda_array_interface", "test_array", "test_stream_api",
               "test_ipc", "test_multiprocessing", "test_multigpu")
# Modules with tests that skip on one GPU: run on two simulated devices.
TWO_DEVICES = ("cudadrv/test_context_stack.py", "cudapy/test_multigpu.py")


class Profile:
    """What differs between the runs: the modules, the categories of
    expected failures, and how numba is put on the path."""

    def __init__(self, modules, categories, expected, out, two_devices,
                 standin=False, conftest=None):
        self.modules = modules
        self.categories = categories
        self.expected = os.path.join(ROOT, "tests", expected)
        self.out = os.path.join(ROOT, "build", out)
        self.two_devices = two_devices
        self.standin = standin
        self.conftest = conftest

    def environment(self):
        """Variables for the pytest processes."""
        env = dict(os.environ, CUDAMEM_SIMULATOR="1")
        env.pop("CUDAMEM_DRIVER", None)
        if self.standin:
            path = [STANDIN, ROOT]
        else:
            sys.path.insert(0, ROOT)
            from cudamem import simulator
            env = simulator._run_environment(environ=env)
            path = [ROOT]
        env["PYTHONPATH"] = os.pathsep.join(
            path + [p for p in [os.environ.get("PYTHONPATH")] if p])
        return env


PROFILES = {
    "standin": Profile(
        modules={
            "cudadrv": (
                "test_array_attr", "test_cuda_array_slicing",
                "test_cuda_ndarray", "test_pinned", "test_streams",
                "test_events", "test_select_device", "test_reset_device",
                "test_host_alloc", "test_managed_alloc",
                "test_deallocations", "test_emm_plugins", "test_cuda_memory",
                "test_detect", "test_cuda_devicerecord", "test_profiler",
                "test_context_stack", "test_cuda_auto_context"),
            "cudapy": CUDAPY_HOST,
        },
        categories={
            "kernel": "compiles or launches a kernel",
            "typing": "numba typing or JIT internals",
            "internals": "numba's driver internals (its Driver object's raw "
                         "cu* calls) or cuda-bindings / cuda.core objects, "
                         "which bind libcuda rather than the driver cudamem "
                         "loaded",
            "difference": "a deliberate difference listed in "
                          "docs/migration.rst",
            "missing": "a cudamem gap still being built",
        },
        expected="numba_expected.txt", out="numba-tests",
        two_devices=TWO_DEVICES, standin=True),
    "peers": Profile(
        modules={"cudadrv": None, "cudapy": CUDAPY_HOST},
        categories={
            "kernel": "compiles or launches a kernel (the simulator has no "
                      "device code, the venv no CUDA compiler)",
            "missing": "a simulator entry point not yet provided (named)",
            "other": "anything else (said in the reason)",
        },
        expected="peers_expected.txt", out="peers-tests",
        two_devices=TWO_DEVICES + ("cudadrv/test_runtime.py",
                                   "cudapy/test_ipc.py"),
        conftest=os.path.join(ROOT, "tests", "peers", "numba_conftest.py")),
}


def copy_modules(tests_dir, out, profile):
    """Copy the profile's modules (None: every test_*.py of the group),
    byte for byte, into *out*; return their paths relative to *out*."""
    paths = []
    for group, names in profile.modules.items():
        os.makedirs(os.path.join(out, group), exist_ok=True)
        if names is None:
            names = sorted(n[:-3] for n in os.listdir(
                os.path.join(tests_dir, group))
                if n.startswith("test_") and n.endswith(".py"))
        for name in names:
            rel = f"{group}/{name}.py"
            shutil.copyfile(os.path.join(tests_dir, rel),
                            os.path.join(out, rel))
            paths.append(rel)
    # An ini of its own: the repository's pytest settings and conftest do
    # not apply to numba's tests.
    with open(os.path.join(out, "pytest.ini"), "w") as f:
        f.write("[pytest]\n")
    if profile.conftest:
        shutil.copyfile(profile.conftest, os.path.join(out, "conftest.py"))
    return paths


def run_pytest(out, paths, name, env, extra_env, timeout):
    junit = os.path.join(out, f"junit-{name}.xml")
    if os.path.exists(junit):
        os.remove(junit)
    env = dict(env, **extra_env)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "--continue-on-collection-errors",
           "-c", os.path.join(out, "pytest.ini"), "--rootdir", out,
           f"--junitxml={junit}", "-o", "junit_family=xunit1", *paths]
    print(f"== {name}: {' '.join(f'{k}={v}' for k, v in extra_env.items())}"
          f" pytest {' '.join(paths)}", flush=True)
    proc = subprocess.run(cmd, cwd=out, env=env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    with open(os.path.join(out, f"pytest-{name}.log"), "w") as f:
        f.write(proc.stdout)
    # 0: all passed, 1: some failed; anything else (a signal, an internal
    # error) is a crash, whatever the report says.
    if proc.returncode not in (0, 1) or not os.path.exists(junit):
        sys.stdout.write(proc.stdout[-4000:])
        sys.exit(f"pytest {name} crashed or wrote no report (exit status "
                 f"{proc.returncode})")
    return junit


def node_id(case):
    """``group/module.py::Class::test`` from a junit testcase; a module
    that failed to import is ``group/module.py``."""
    classname, name = case.get("classname", ""), case.get("name", "")
    if not classname:
        return name.replace(".", "/") + ".py"
    parts = classname.split(".")
    module = next(i for i, p in enumerate(parts) if p.startswith("test_"))
    path = "/".join(parts[:module + 1]) + ".py"
    return "::".join([path, *parts[module + 1:], name])


def read_junit(path):
    """{test id: (outcome, message)}, outcome passed/failed/skipped."""
    results = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        tid = node_id(case)
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            message = (bad.get("message") or bad.text or "").strip()
            results[tid] = ("failed", message.splitlines()[0][:200]
                            if message else "")
        elif tid not in results:
            skipped = case.find("skipped")
            results[tid] = ("skipped" if skipped is not None else "passed",
                            "")
    return results


def read_expected(path, categories):
    """{test id: category} from lines ``id  category  reason``."""
    expected = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split(None, 2)
            if len(fields) < 3 or fields[1] not in categories:
                sys.exit(f"{path}:{lineno}: want 'id category reason' with "
                         f"a category of {sorted(categories)}: {line!r}")
            if fields[0] in expected:
                sys.exit(f"{path}:{lineno}: {fields[0]} listed twice")
            expected[fields[0]] = fields[1]
    return expected


def compare(results, expected, categories):
    """Print per-module counts and every surprise; return the number of
    surprises."""
    counts = collections.defaultdict(collections.Counter)
    surprises = []
    for tid, (outcome, message) in sorted(results.items()):
        module = tid.split("::", 1)[0]
        if outcome == "failed" and tid in expected:
            counts[module]["expected"] += 1
        elif outcome == "failed":
            counts[module]["failed"] += 1
            surprises.append(f"FAILED (not listed) {tid}: {message}")
        else:
            counts[module][outcome] += 1
            if tid in expected:
                surprises.append(f"{outcome.upper()} but listed as "
                                 f"{expected[tid]} failure: {tid}")
    for tid in sorted(set(expected) - set(results)):
        surprises.append(f"NOT REPORTED but listed: {tid}")
    columns = ("passed", "failed", "expected", "skipped")
    width = max([len(m) for m in counts] + [len("module")])
    print(f"{'module':<{width}}  " + "  ".join(f"{c:>8}" for c in columns))
    total = collections.Counter()
    for module in sorted(counts):
        total.update(counts[module])
        print(f"{module:<{width}}  "
              + "  ".join(f"{counts[module][c]:>8}" for c in columns))
    print(f"{'total':<{width}}  "
          + "  ".join(f"{total[c]:>8}" for c in columns))
    by_category = collections.Counter(
        expected[tid] for tid, (o, _) in results.items()
        if o == "failed" and tid in expected)
    print("expected failures by category: " + ", ".join(
        f"{c} {by_category[c]}" for c in categories))
    for line in surprises:
        print(line)
    return len(surprises)


# How cuda.bindings reports a call of an entry point the driver did not
# give it (cuGetProcAddress answered NULL).
_NOT_FOUND = re.compile(r'[Ff]unction "?(cu\w+)"? (?:is )?not found')


def missing_entry_points(out):
    """Entry points the tests called that the driver lacks, from the
    pytest logs in *out*."""
    names = set()
    for log in glob.glob(os.path.join(out, "pytest-*.log")):
        with open(log) as f:
            names.update(_NOT_FOUND.findall(f.read()))
    return sorted(names)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(PROFILES),
                        default="standin")
    parser.add_argument("--tests", required=True,
                        help="numba_cuda/numba/cuda/tests of the wheel")
    parser.add_argument("--expected",
                        help="the expected failures (default: the "
                        "profile's file under tests/)")
    parser.add_argument("--out", help="where the modules, reports and logs "
                        "go (default: the profile's folder under build/)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds for each pytest process")
    args = parser.parse_args()
    profile = PROFILES[args.profile]
    expected_path = args.expected or profile.expected
    out = os.path.abspath(args.out or profile.out)
    if os.path.isdir(out):
        shutil.rmtree(out)
    paths = copy_modules(args.tests, out, profile)
    expected = read_expected(expected_path, profile.categories)
    env = profile.environment()
    results = {}
    one = [p for p in paths if p not in profile.two_devices]
    reports = [run_pytest(out, one, "one-device", env, {}, args.timeout),
               run_pytest(out, list(profile.two_devices), "two-devices",
                          env, {"CUDAMEM_SIM_DEVICES": "2"}, args.timeout)]
    for report in reports:
        results.update(read_junit(report))
    surprises = compare(results, expected, profile.categories)
    missing = missing_entry_points(out)
    print("entry points called but not in the driver: "
          + (", ".join(missing) if missing else "none"))
    if surprises:
        sys.exit(f"{surprises} result(s) differ from {expected_path}; "
                 f"logs in {out}")


if __name__ == "__main__":
    main()
