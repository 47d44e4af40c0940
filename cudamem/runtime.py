"""The CUDA runtime's version, as ``numba.cuda.runtime.get_version()``.

cudamem itself needs only the driver. ``get_version()`` asks a CUDA runtime
library (``libcudart.so*``, loaded through ctypes on the first call) when
one can be loaded, and otherwise answers the CUDA version of the headers
cudamem was built with (``cudamem._cudamem.CUDA_VERSION``).
``is_supported_version()`` is numba's check of that version's major
against the toolkits it supports (12 and 13). None of them loads the
driver or creates a context. ``runtime`` is numba's ``Runtime`` object
with the same two methods (``from numba.cuda.cudadrv.runtime import
runtime``).
"""
from cudamem import _cudamem

__all__ = ["Runtime", "SUPPORTED_TOOLKIT_MAJOR_VERSIONS", "get_version",
           "is_runtime_present", "is_supported_version", "runtime"]

# numba-cuda 0.30's (cudadrv/runtime.py).
SUPPORTED_TOOLKIT_MAJOR_VERSIONS = (12, 13)

_NAMES = ("libcudart.so", "libcudart.so.13", "libcudart.so.12",
          "libcudart.so.11.0")
_cached = None


def _split(version):
    # 12040 -> (12, 4): the driver's and the runtime's version numbers.
    return (version // 1000, version % 1000 // 10)


def _runtime_version():
    """The loaded runtime's version number, or None."""
    import ctypes  # lazily: importing cudamem must not load ctypes

    for name in _NAMES:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int()
        fn = getattr(lib, "cudaRuntimeGetVersion", None)
        if fn is not None and fn(ctypes.byref(version)) == 0:
            return version.value
    return None


def is_runtime_present():
    """is_runtime_present() -> bool

    Whether a CUDA runtime library could be loaded."""
    get_version()
    return _cached[1]


def get_version():
    """get_version() -> tuple[int, int]

    ``(major, minor)`` of the CUDA runtime library when one loads, else of
    the CUDA headers cudamem was built with."""
    global _cached
    if _cached is None:
        version = _runtime_version()
        if version is None:
            _cached = (_split(_cudamem.CUDA_VERSION), False)
        else:
            _cached = (_split(version), True)
    return _cached[0]


def is_supported_version():
    """is_supported_version() -> bool

    Whether ``get_version()``'s major is one numba supports
    (SUPPORTED_TOOLKIT_MAJOR_VERSIONS), as numba's
    ``runtime.is_supported_version()``."""
    return get_version()[0] in SUPPORTED_TOOLKIT_MAJOR_VERSIONS


class Runtime:
    """Runtime()

    numba's ``Runtime``: this module's ``get_version()`` and
    ``is_supported_version()`` as methods."""

    def get_version(self):
        """get_version() -> tuple[int, int]

        The module's ``get_version()``."""
        return get_version()

    def is_supported_version(self):
        """is_supported_version() -> bool

        The module's ``is_supported_version()``."""
        return is_supported_version()


runtime = Runtime()
