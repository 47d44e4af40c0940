"""Checks the results directory of tests/gpu/check.sh: every file a run
writes is there and readable, and every step passed.

    python tests/gpu/check_results.py RESULTS_DIR
        [--present NAME ...] [--absent NAME ...]

--present / --absent: packages machine.txt must list with a version or as
absent (the dry run's two machines: with numba-cuda and cuda.core, and
without). Prints one line per problem and exits 1 if there is any; only
the standard library, so it runs with any machine's Python.
"""
import argparse
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

# check.sh's steps, in its order.
STEPS = ("build", "info", "floor-build", "interop", "pytest", "floor",
         "bench")
# The data a run writes (not empty), and each step's log (maybe empty:
# make -s prints nothing).
DATA = ("machine.txt", "steps.txt", "interop.xml", "pytest.xml",
        "floor.json", "bench/results.json", "bench/results.md")
LOGS = tuple("%s.log" % s for s in STEPS)
STEP_LINE = re.compile(r"^(\S+) rc=(\d+) (\d+)s \(budget (\d+)s\)$")


def check_steps(text):
    problems = []
    seen = []
    for line in text.splitlines():
        m = STEP_LINE.match(line)
        if not m:
            problems.append("steps.txt: unreadable line %r" % line)
            continue
        name, rc = m.group(1), int(m.group(2))
        seen.append(name)
        if rc != 0:
            problems.append("step %s: rc=%d%s (see %s.log)"
                            % (name, rc, " (over its budget)"
                               if rc in (124, 137) else "", name))
    if tuple(seen) != STEPS:
        problems.append("steps.txt: steps %s, expected %s"
                        % (" ".join(seen) or "none", " ".join(STEPS)))
    return problems


def check_junit(path, need_run):
    """No failure or error in a junit file; need_run: at least one test
    that was not skipped."""
    name = os.path.basename(path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        return ["%s: not XML (%s)" % (name, exc)]
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    count = {k: sum(int(s.get(k, 0)) for s in suites)
             for k in ("tests", "failures", "errors", "skipped")}
    problems = []
    if count["failures"] or count["errors"]:
        problems.append("%s: %d failed, %d errors" % (
            name, count["failures"], count["errors"]))
    if need_run and count["tests"] <= count["skipped"]:
        problems.append("%s: no test ran (%d tests, %d skipped)"
                        % (name, count["tests"], count["skipped"]))
    return problems


def check_json(results, name, test):
    try:
        with open(os.path.join(results, name)) as f:
            data = json.load(f)
    except ValueError as exc:
        return ["%s: not JSON (%s)" % (name, exc)]
    return test(data)


def check_floor(data):
    if not data.get("latency"):
        return ["floor.json: no latency measured"]
    return []


def check_bench(data):
    problems = []
    status = data.get("libraries", {}).get("cudamem", {}).get("status")
    if status != "ok":
        problems.append("bench/results.json: cudamem's status is %r, not "
                        "'ok'" % status)
    in_process = data.get("floor_in_process", {})
    if not in_process.get("latency"):
        problems.append("bench/results.json: no floor in process: %s"
                        % in_process.get("error", "no latency measured"))
    return problems


def check_packages(text, present, absent):
    versions = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            versions[parts[0]] = parts[1]
    problems = []
    for name in present:
        if versions.get(name, "absent") == "absent":
            problems.append("machine.txt: %s should be present, is %s"
                            % (name, versions.get(name, "not listed")))
    for name in absent:
        if versions.get(name) != "absent":
            problems.append("machine.txt: %s should be absent, is %s"
                            % (name, versions.get(name, "not listed")))
    return problems


def check(results, present=(), absent=()):
    """The list of problems with the results directory (empty: all well)."""
    def path(name):
        return os.path.join(results, name)

    def text(name):
        with open(path(name)) as f:
            return f.read()

    missing = [f for f in DATA + LOGS if not os.path.isfile(path(f))
               or (f in DATA and os.path.getsize(path(f)) == 0)]
    problems = ["missing%s: %s" % (" or empty" if f in DATA else "", f)
                for f in missing]
    # The recorded results page (--record): <date>-<device>.md.
    if not glob.glob(path("bench/[0-9][0-9][0-9][0-9]-[0-9][0-9]-*.md")):
        problems.append("missing: bench/<date>-<device>.md (--record)")
    readers = {
        "steps.txt": lambda: check_steps(text("steps.txt")),
        "interop.xml": lambda: check_junit(path("interop.xml"), False),
        "pytest.xml": lambda: check_junit(path("pytest.xml"), True),
        "floor.json": lambda: check_json(results, "floor.json",
                                         check_floor),
        "bench/results.json": lambda: check_json(
            results, "bench/results.json", check_bench),
        "machine.txt": lambda: check_packages(text("machine.txt"), present,
                                              absent),
    }
    for name, read in readers.items():
        if name not in missing:
            problems += read()
    return problems


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results")
    p.add_argument("--present", action="append", default=[], metavar="NAME")
    p.add_argument("--absent", action="append", default=[], metavar="NAME")
    args = p.parse_args(argv)
    problems = check(args.results, args.present, args.absent)
    for line in problems:
        print("check_results: %s" % line)
    if not problems:
        print("check_results: %s: every file there, every step passed"
              % args.results)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
