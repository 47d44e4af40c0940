"""Build cudamem: the extension (core/ + py/) and the simulated driver.

Only the CUDA headers are needed (cuda.h, cudaTypedefs.h), which the
nvidia-cuda-runtime wheel provides; nothing links against libcuda.
Development builds add flags through the environment: CUDAMEM_DEV_CFLAGS
(the Makefile passes -Werror there; `pip install .` never does),
CUDAMEM_SANITIZE=1 (ASan + UBSan), CUDAMEM_SANITIZE=thread (TSan),
CUDAMEM_COVERAGE=1 (gcov), CUDAMEM_DEBUG=1 (core's lock-order and py/'s
refcount asserts, see core/lockorder.h).
"""
import importlib.util
import os
import shlex
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _wheel_include():
    """The include directory of the nvidia-cuda-runtime wheel (the build
    requirement in pyproject.toml), or None where it is not installed."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        inc = os.path.join(root, "cu13", "include")
        if os.path.exists(os.path.join(inc, "cuda.h")):
            return inc
    return None


def find_cuda_include():
    """The directory holding cuda.h: CUDA_HOME's or CUDA_PATH's include
    directory when one is set (an override), else the nvidia-cuda-runtime
    wheel's, else nvcc's toolkit's or /usr/local/cuda's."""
    places = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            places.append((var, os.path.join(os.environ[var], "include")))
    places.append(("nvidia-cuda-runtime", _wheel_include()))
    nvcc = shutil.which("nvcc")
    if nvcc:
        places.append(("nvcc", os.path.join(os.path.dirname(
            os.path.dirname(os.path.realpath(nvcc))), "include")))
    places.append(("default", "/usr/local/cuda/include"))
    for _, inc in places:
        if inc and os.path.exists(os.path.join(inc, "cuda.h")):
            return inc
    tried = ", ".join("%s=%s" % p for p in places)
    sys.exit("cudamem: cuda.h not found (looked in %s). `pip install "
             "nvidia-cuda-runtime` provides it, as does the CUDA toolkit; "
             "CUDA_HOME=DIR names DIR/include." % tried)


def numpy_include():
    import numpy
    return numpy.get_include()


def sources(*dirs):
    out = []
    for d in dirs:
        out += sorted(os.path.join(d, f) for f in os.listdir(d)
                      if f.endswith(".c"))
    return out


def flags():
    cflags = ["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden",
              "-fno-strict-aliasing"]
    ldflags = []
    cflags += shlex.split(os.environ.get("CUDAMEM_DEV_CFLAGS", ""))
    if os.environ.get("CUDAMEM_SANITIZE") == "1":
        # CPython's own flags carry -fwrapv, which defines signed overflow
        # and so hides it from UBSan; cudamem never relies on wrapping.
        san = ["-fsanitize=address,undefined",
               "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer",
               "-fno-wrapv", "-g", "-O1"]
        cflags += san
        ldflags += san
    if os.environ.get("CUDAMEM_SANITIZE") == "thread":
        san = ["-fsanitize=thread", "-fno-omit-frame-pointer", "-g", "-O1"]
        cflags += san
        ldflags += san
    if os.environ.get("CUDAMEM_DEBUG") == "1":
        # Python's own flags carry -DNDEBUG; asserts are the point here.
        cflags += ["-DCUDAMEM_DEBUG", "-UNDEBUG", "-O1", "-g"]
    if os.environ.get("CUDAMEM_COVERAGE") == "1":
        cflags += ["--coverage", "-O0", "-g"]
        ldflags += ["--coverage"]
    if not any(os.environ.get(v) for v in ("CUDAMEM_SANITIZE", "CUDAMEM_DEBUG",
                                           "CUDAMEM_COVERAGE")):
        # A call is a few hundred nanoseconds of C over some 40 small
        # functions in a dozen files, calling CPython and libc dozens of
        # times: link-time optimization inlines across the files, and
        # -fno-plt calls those libraries through the GOT, without a PLT
        # stub each (benchmarks/NOTES.md: about 30 ns each on the
        # stream-ordered row). Sanitizer, debug and coverage builds keep
        # one plain object per file.
        cflags += ["-flto=auto", "-fno-plt"]
        ldflags += ["-flto=auto"]
    return cflags, ldflags


class BuildExt(build_ext):
    """Names the simulator plainly (libcusim.so): it is a driver library,
    not a Python module, and core dlopens it by that name."""

    def get_ext_filename(self, fullname):
        # Called with the dotted name and with its last part alone.
        parts = fullname.split(".")
        if parts[-1] == "libcusim":
            return os.path.join(*parts[:-1], "libcusim.so")
        return super().get_ext_filename(fullname)

    def get_export_symbols(self, ext):
        if ext.name.endswith("libcusim"):
            return []
        return super().get_export_symbols(ext)


CUDA_INC = find_cuda_include()
if sys.argv[1:] == ["--cuda-include"]:
    # For the Makefile's C tests and linters: the same headers as the build.
    print(CUDA_INC)
    sys.exit(0)
CFLAGS, LDFLAGS = flags()
SRC = os.path.join("cudamem", "_src")

setup(
    ext_modules=[
        Extension(
            "cudamem._cudamem",
            sources=sources(os.path.join(SRC, "core"),
                            os.path.join(SRC, "py"),
                            os.path.join(SRC, "lib")),
            include_dirs=[CUDA_INC, numpy_include(),
                          os.path.join(SRC, "lib")],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_24_API_VERSION")],
            extra_compile_args=CFLAGS,
            extra_link_args=LDFLAGS,
            libraries=["dl", "pthread"],
        ),
        Extension(
            "cudamem.libcusim",
            sources=sources(os.path.join(SRC, "sim"),
                            os.path.join(SRC, "lib")),
            include_dirs=[CUDA_INC, os.path.join(SRC, "core"),
                          os.path.join(SRC, "lib")],
            # It defines the driver's exports, some of which (the _ptds and
            # _ptsz variants) cuda.h declares only under other names.
            extra_compile_args=CFLAGS + ["-pthread",
                                         "-Wno-missing-prototypes"],
            # The driver's SONAME: a library that loads libcuda.so.1 after
            # cudamem loaded the simulator finds the simulator. Never
            # unloaded: its per-thread counters' destructor runs at every
            # thread's exit.
            extra_link_args=LDFLAGS + ["-pthread",
                                       "-Wl,-soname,libcuda.so.1",
                                       "-Wl,-z,nodelete"],
            libraries=["rt", "dl"],
        ),
    ],
    cmdclass={"build_ext": BuildExt},
)
