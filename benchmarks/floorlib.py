"""floor.c's latency rows timed inside the calling process, through
build/libfloor.so (floor.c built with -DFLOOR_LIBRARY): the driver calls
the libraries make, in the address space, heap and threads they make them
in. bench-peers and the benchmark runner use it beside floor.c's own
process."""
import ctypes
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PATH = os.path.join(ROOT, "build", "libfloor.so")


class Floor:
    """Floor(driver): floor.c set up on `driver` (the library path the
    process already uses, so that they share its state), its primary
    context current. The library is made first if it is missing, with
    this interpreter finding the CUDA headers."""

    def __init__(self, driver):
        if not os.path.exists(PATH):
            subprocess.run(["make", "-s", "VENV=none", "PY=" + sys.executable,
                            "build/libfloor.so"], cwd=ROOT, check=False,
                           stdout=subprocess.DEVNULL)
        if not os.path.exists(PATH):
            raise RuntimeError("%s is missing (make build/libfloor.so)"
                               % PATH)
        lib = ctypes.CDLL(PATH)
        lib.floor_open.argtypes = [ctypes.c_char_p]
        lib.floor_time.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                   ctypes.c_uint]
        lib.floor_time.restype = ctypes.c_double
        lib.floor_error.restype = ctypes.c_char_p
        lib.floor_rows.restype = ctypes.c_char_p
        self.lib = lib
        self.rows = frozenset(
            r for r in lib.floor_rows().decode().split("\n") if r)
        if lib.floor_open(os.fsencode(driver)) != 0:
            raise RuntimeError("floor_open: " + self._error())

    def _error(self):
        return self.lib.floor_error().decode(errors="replace")

    def time(self, row, calls):
        """ns per call of `calls` calls of floor.c's (name, bytes) row."""
        ns = self.lib.floor_time(row[0].encode(), row[1], calls)
        if ns < 0:
            raise RuntimeError(self._error())
        return ns

    def close(self):
        if self.lib.floor_close() != 0:
            raise RuntimeError("floor_close: " + self._error())
