"""numba.cuda -> cudamem: every attribute is cudamem's of the same name.

The stand-in's own submodules (cudadrv, core, config, np, testing, tests,
devicearray) are imported on first access; names that compile or run
device code are ``Unprovided``."""
import importlib

import cudamem as _cudamem
from numba._standin import Unprovided

_SUBMODULES = frozenset(
    ("cudadrv", "core", "config", "np", "testing", "tests", "devicearray"))
# Device code and numba types: cudamem does not provide them.
_KERNEL = frozenset(
    ("jit", "vectorize", "guvectorize", "reduce", "Reduce", "grid",
     "gridsize", "threadIdx", "blockIdx", "blockDim", "gridDim",
     "syncthreads", "shared", "local", "const", "atomic", "compile_ptx",
     "compile_ptx_for_current_device", "declare_device"))
_TYPING = frozenset(
    ("float16", "float32", "float64", "int32", "int64", "void"))


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _KERNEL:
        return Unprovided(f"numba.cuda.{name}", "kernel")
    if name in _TYPING:
        return Unprovided(f"numba.cuda.{name}", "typing")
    return getattr(_cudamem, name)


def __dir__():
    return sorted(set(dir(_cudamem)) | _SUBMODULES | _KERNEL | _TYPING)
