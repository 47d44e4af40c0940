"""Run numba-cuda's own host-side test modules against cudamem
(``make test-numba``) and compare the outcome with tests/numba_expected.txt.

The modules are copied unchanged from the installed numba-cuda wheel into
``--out`` and run by pytest with the stand-in ``numba`` package
(tests/numba_standin) first on the path, on cudamem's simulated driver.
The modules with tests that need two GPUs (test_multigpu, and
test_context_stack's context-switch tests) run in a second pytest process
with two simulated devices.
The run fails when a test not in the expected list fails, or a listed one
passes, is skipped or is no longer reported. Usage (in a venv with pytest
and NumPy, cudamem built in place):

    python tools/numba_tests.py --tests <wheel>/numba_cuda/numba/cuda/tests
"""
import argparse
import collections
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STANDIN = os.path.join(ROOT, "tests", "numba_standin")
CATEGORIES = {
    "kernel": "compiles or launches a kernel",
    "typing": "numba typing or JIT internals",
    "internals": "numba's driver internals (its Driver object's raw cu* "
                 "calls) or cuda-bindings / cuda.core objects, which bind "
                 "libcuda rather than the driver cudamem loaded",
    "difference": "a deliberate difference listed in docs/migration.rst",
    "missing": "a cudamem gap still being built",
}
MODULES = {
    "cudadrv": (
        "test_array_attr", "test_cuda_array_slicing", "test_cuda_ndarray",
        "test_pinned", "test_streams", "test_events", "test_select_device",
        "test_reset_device", "test_host_alloc", "test_managed_alloc",
        "test_deallocations", "test_emm_plugins", "test_cuda_memory",
        "test_detect", "test_cuda_devicerecord", "test_profiler",
        "test_context_stack", "test_cuda_auto_context"),
    "cudapy": (
        "test_cuda_array_interface", "test_array", "test_stream_api",
        "test_ipc", "test_multiprocessing", "test_multigpu"),
}
# Modules with tests that skip on one GPU: run on two simulated devices.
TWO_DEVICES = ("cudadrv/test_context_stack.py", "cudapy/test_multigpu.py")


def copy_modules(tests_dir, out):
    """Copy the listed modules, byte for byte, into *out*; return their
    paths relative to *out*."""
    paths = []
    for group, names in MODULES.items():
        os.makedirs(os.path.join(out, group), exist_ok=True)
        for name in names:
            rel = f"{group}/{name}.py"
            shutil.copyfile(os.path.join(tests_dir, rel),
                            os.path.join(out, rel))
            paths.append(rel)
    # An ini of its own: the repository's pytest settings and conftest do
    # not apply to numba's tests.
    with open(os.path.join(out, "pytest.ini"), "w") as f:
        f.write("[pytest]\n")
    return paths


def run_pytest(out, paths, name, extra_env, timeout):
    junit = os.path.join(out, f"junit-{name}.xml")
    if os.path.exists(junit):
        os.remove(junit)
    env = dict(os.environ, CUDAMEM_SIMULATOR="1", **extra_env)
    env.pop("CUDAMEM_DRIVER", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [STANDIN, ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p])
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
    if not os.path.exists(junit):
        sys.stdout.write(proc.stdout[-4000:])
        sys.exit(f"pytest wrote no report (exit status {proc.returncode})")
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


def read_expected(path):
    """{test id: category} from lines ``id  category  reason``."""
    expected = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split(None, 2)
            if len(fields) < 3 or fields[1] not in CATEGORIES:
                sys.exit(f"{path}:{lineno}: want 'id category reason' with "
                         f"a category of {sorted(CATEGORIES)}: {line!r}")
            if fields[0] in expected:
                sys.exit(f"{path}:{lineno}: {fields[0]} listed twice")
            expected[fields[0]] = fields[1]
    return expected


def compare(results, expected):
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
        f"{c} {by_category[c]}" for c in CATEGORIES))
    for line in surprises:
        print(line)
    return len(surprises)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", required=True,
                        help="numba_cuda/numba/cuda/tests of the wheel")
    parser.add_argument("--expected",
                        default=os.path.join(ROOT, "tests",
                                             "numba_expected.txt"))
    parser.add_argument("--out", default=os.path.join(ROOT, "build",
                                                      "numba-tests"))
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds for each pytest process")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    if os.path.isdir(out):
        shutil.rmtree(out)
    paths = copy_modules(args.tests, out)
    expected = read_expected(args.expected)
    results = {}
    one = [p for p in paths if p not in TWO_DEVICES]
    reports = [run_pytest(out, one, "one-device", {}, args.timeout),
               run_pytest(out, list(TWO_DEVICES), "two-devices",
                          {"CUDAMEM_SIM_DEVICES": "2"}, args.timeout)]
    for report in reports:
        results.update(read_junit(report))
    surprises = compare(results, expected)
    if surprises:
        sys.exit(f"{surprises} result(s) differ from {args.expected}; "
                 f"logs in {out}")


if __name__ == "__main__":
    main()
