"""Installs cudamem as a user would and checks that it works there.

    python tools/wheel_check.py DIST_DIR WORK_DIR

DIST_DIR holds what `make wheel` made: one sdist and one manylinux wheel.
The wheel's contents are checked, then each of the wheel and the sdist is
installed into a new virtual environment (pip builds the sdist in isolation,
so the CUDA headers must come from the build requirements, not a toolkit;
the compiler lines are checked for that). In each environment, from a
directory outside the source tree: `python -m cudamem info` and the demo on
the simulator, and an import of every public module. Exits non-zero with
the first failure.
"""
import glob
import os
import re
import subprocess
import sys
import venv
import zipfile

# What a wheel must carry besides the Python modules.
REQUIRED = ("cudamem/libcusim.so", "cudamem/py.typed", "cudamem/_cudamem.pyi",
            "cudamem/cudadrv/__init__.py")
# What it must not: sources, and what the simulator makes at run time.
FORBIDDEN = re.compile(r"^cudamem/(_src/|sim-libcuda/)")

IMPORT_ALL = """
import importlib, pkgutil, cudamem
# Public modules; libcusim.so is a driver library, not a Python module.
names = sorted(m.name for m in pkgutil.walk_packages(cudamem.__path__,
                                                     "cudamem.")
               if not m.name.rpartition(".")[2].startswith(("_", "lib")))
for name in names:
    importlib.import_module(name)
missing = [n for n in cudamem.__all__ if not hasattr(cudamem, n)]
assert not missing, missing
assert cudamem.__file__.startswith(%r), cudamem.__file__
print("imported", len(names), "modules;", len(cudamem.__all__), "names")
"""


def fail(msg):
    sys.exit("wheel_check: " + msg)


def one(pattern):
    found = glob.glob(pattern)
    if len(found) != 1:
        fail("expected one %s, found %s" % (pattern, found or "none"))
    return found[0]


def check_contents(wheel):
    if not re.search(r"-manylinux_\d+_\d+_x86_64\.", wheel):
        fail("%s has no manylinux tag" % wheel)
    names = zipfile.ZipFile(wheel).namelist()
    ext = [n for n in names if re.match(r"cudamem/_cudamem\..*\.so$", n)]
    if not ext:
        fail("%s lacks the extension module" % wheel)
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        fail("%s lacks %s" % (wheel, missing))
    extra = [n for n in names if FORBIDDEN.match(n)]
    if extra:
        fail("%s carries %s" % (wheel, extra[:5]))
    print("contents ok:", os.path.basename(wheel), len(names), "files")


def clean_env():
    """The environment of a user without the CUDA toolkit's variables."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH", "CPATH", "C_INCLUDE_PATH",
                        "PYTHONPATH", "CUDAMEM_DRIVER", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep)
        if not os.path.exists(os.path.join(p, "nvcc")))
    return env


def run(cmd, cwd, env, log=None):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True,
                          text=True)
    if log:
        with open(log, "w") as f:
            f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        fail("%s failed (%d):\n%s%s" % (" ".join(cmd), proc.returncode,
                                       proc.stdout[-3000:],
                                       proc.stderr[-3000:]))
    return proc.stdout


def install_and_try(what, target, work):
    env_dir = os.path.join(work, what + "-env")
    venv.create(env_dir, with_pip=True, clear=True)
    py = os.path.join(env_dir, "bin", "python")
    env = clean_env()
    log = os.path.join(work, what + "-install.log")
    # The test extra (pytest) for cudamem.testing, the pytest plugin.
    run([py, "-m", "pip", "install", "-v", target + "[test]"], work, env,
        log)
    if what == "sdist":
        with open(log) as f:
            text = f.read()
        if not re.search(r"-I\S*/nvidia/cu13/include", text):
            fail("the sdist build did not use the wheel's CUDA headers "
                 "(see %s)" % log)
        if "/usr/local/cuda" in text:
            fail("the sdist build reached /usr/local/cuda (see %s)" % log)
    site = run([py, "-c", "import sysconfig; "
                "print(sysconfig.get_paths()['purelib'])"], work, env).strip()
    sim = dict(env, CUDAMEM_SIMULATOR="1")
    info = run([py, "-m", "cudamem", "info"], work, sim)
    if "cudamem's simulated driver: " + site not in info:
        fail("`cudamem info` does not name the simulator:\n" + info)
    demo = run([py, "-m", "cudamem", "demo"], work, sim)
    if "Every result matched NumPy." not in demo:
        fail("the demo did not finish:\n" + demo[-2000:])
    print(what + ":", run([py, "-c", IMPORT_ALL % site], work, sim).strip())


def main(argv):
    if len(argv) != 2:
        fail("usage: wheel_check.py DIST_DIR WORK_DIR")
    dist, work = (os.path.abspath(a) for a in argv)
    os.makedirs(work, exist_ok=True)
    wheel = one(os.path.join(dist, "cudamem-*.whl"))
    sdist = one(os.path.join(dist, "cudamem-*.tar.gz"))
    check_contents(wheel)
    install_and_try("wheel", wheel, work)
    install_and_try("sdist", sdist, work)


if __name__ == "__main__":
    main(sys.argv[1:])
