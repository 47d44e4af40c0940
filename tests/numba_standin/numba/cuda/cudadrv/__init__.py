"""numba.cuda.cudadrv: its submodules map onto cudamem's (see each)."""
import importlib

_SUBMODULES = frozenset(("driver", "devicearray", "devices", "error"))


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
