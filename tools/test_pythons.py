"""Builds cudamem for other CPython versions and runs tests on each.

    python tools/test_pythons.py [--versions 3.10.13,3.12.1,3.13.0]
                                 [--out build/pythons] [PYTEST_ARGS...]

For each version (found through pyenv): a virtual environment
build/py3.X-venv with the test requirements, a copy of the source tree in
OUT/3.X (so that each build stays apart from the others and from the
development build), an in-place build with the development warnings as
errors (CUDAMEM_DEV_CFLAGS from the environment), and pytest on SUBSET (or
the PYTEST_ARGS given). Writes OUT/summary.md: per version, the build's
warnings and the test counts. Exits non-zero when a build or a test fails.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERSIONS = "3.10.13,3.12.1,3.13.0"
REQUIREMENTS = ["numpy>=1.24", "pytest", "hypothesis", "ml_dtypes",
                "setuptools", "wheel", "nvidia-cuda-runtime==13.0.*",
                "nvidia-cuda-profiler-api==13.0.*",
                "tomli; python_version < '3.11'"]
# What may differ between interpreters, in about 3 minutes per version on a
# 2-core machine, its venv included (the main Python runs the whole suite in
# `make test`, about 4 minutes): every module of cudamem (each public module
# is imported by test_numba_names, runtime too) through the C-API paths that
# changed between 3.10 and 3.13: finalizers, fork and exit (lifecycle), the
# buffer protocol, DLPack capsules and the interfaces (interop, host memory,
# records, views, repr), threads and driver-thread callbacks (streams),
# Python subclasses called from C (memmgr), pickling and child processes
# (ipc), hostile Python objects, and every failed Python allocation of 56
# operations and of the import (error paths). Left out: the driver-fault
# sweeps and the simulator's own tests (pure C below the interpreter), the
# fuzz, copy and multi-device files (the same C paths as the views), the
# benchmark tools, tests/rules and tests/gpu.
SUBSET = ["tests/lifecycle", "tests/interop", "tests/hostmem",
          "tests/streams", "tests/memmgr", "tests/ipc",
          "tests/arrays/test_views.py", "tests/arrays/test_records.py",
          "tests/arrays/test_repr_html.py",
          "tests/arrays/test_smartarray.py",
          "tests/devices/test_contexts.py", "tests/devices/test_devices.py",
          "tests/parity/test_numba_names.py", "tests/tools/test_cli.py",
          "tests/tools/test_testing_plugin.py",
          "tests/faults/test_hostile.py",
          "tests/faults/test_error_paths.py::"
          "test_python_allocation_failures",
          "tests/faults/test_error_paths.py::"
          "test_import_with_allocation_failures"]


def interpreter(version):
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.exit("test_pythons: pyenv is needed to find Python %s (%s)"
                 % (version, exc))
    path = os.path.join(root, "versions", version, "bin", "python3")
    if not os.access(path, os.X_OK):
        sys.exit("test_pythons: Python %s is not installed (%s); "
                 "`pyenv install %s`" % (version, path, version))
    return path


def venv_python(version):
    short = ".".join(version.split(".")[:2])
    env_dir = os.path.join(ROOT, "build", "py%s-venv" % short)
    stamp = os.path.join(env_dir, ".stamp")
    want = "\n".join(REQUIREMENTS)
    py = os.path.join(env_dir, "bin", "python")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read() == want:
                return py
    shutil.rmtree(env_dir, ignore_errors=True)
    subprocess.run([interpreter(version), "-m", "venv", env_dir], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q"] + REQUIREMENTS,
                   check=True)
    with open(stamp, "w") as f:
        f.write(want)
    return py


def copy_tree(dest):
    """The tracked and untracked-but-not-ignored files, as a clone has."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others",
         "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    shutil.rmtree(dest, ignore_errors=True)
    for name in filter(None, (f.decode() for f in files)):
        src = os.path.join(ROOT, name)
        if not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, name))


def build(py, tree, log):
    t0 = time.monotonic()
    proc = subprocess.run([py, "setup.py", "build_ext", "--inplace",
                           "--force"], cwd=tree, capture_output=True,
                          text=True)
    text = proc.stdout + proc.stderr
    with open(log, "w") as f:
        f.write(text)
    warnings = [line for line in text.splitlines()
                if re.search(r"\bwarning:", line)]
    return proc.returncode, warnings, time.monotonic() - t0


def counts(text):
    """pytest's summary line as {outcome: n}."""
    last = [line for line in text.splitlines() if " in " in line and
            re.search(r"\d+ (passed|failed|error)", line)]
    if not last:
        return {}
    return {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", last[-1])}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--versions", default=VERSIONS)
    p.add_argument("--out", default=os.path.join(ROOT, "build", "pythons"))
    p.add_argument("pytest_args", nargs="*")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows, ok = [], True
    for version in args.versions.split(","):
        short = ".".join(version.split(".")[:2])
        py = venv_python(version)
        tree = os.path.join(args.out, short)
        copy_tree(tree)
        rc, warnings, secs = build(py, tree, os.path.join(
            args.out, "build-%s.log" % short))
        row = {"version": version, "warnings": len(warnings),
               "build": "ok (%.0f s)" % secs if rc == 0 else "failed"}
        if rc == 0:
            t0 = time.monotonic()
            proc = subprocess.run(
                [py, "-m", "pytest", "-q", "-p", "no:cacheprovider"] +
                (args.pytest_args or SUBSET), cwd=tree, capture_output=True,
                text=True)
            with open(os.path.join(args.out, "pytest-%s.log" % short),
                      "w") as f:
                f.write(proc.stdout + proc.stderr)
            row["tests"] = counts(proc.stdout)
            row["secs"] = time.monotonic() - t0
            rc = proc.returncode
            print(proc.stdout[-2000:])
        ok = ok and rc == 0
        rows.append(row)
        print("Python %s: build %s, %d warnings, tests %s"
              % (version, row["build"], row["warnings"],
                 row.get("tests", "not run")), flush=True)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("| Python | build | warnings | passed | failed | skipped "
                "| seconds |\n|---|---|---|---|---|---|---|\n")
        for r in rows:
            t = r.get("tests", {})
            f.write("| %s | %s | %d | %s | %s | %s | %.0f |\n" % (
                r["version"], r["build"], r["warnings"], t.get("passed", 0),
                t.get("failed", 0) + t.get("error", 0) + t.get("errors", 0),
                t.get("skipped", 0), r.get("secs", 0)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
