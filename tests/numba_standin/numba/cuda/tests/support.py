"""numba.cuda.tests.support: the parts of numba-cuda's harness its host-side
tests import. ``linux_only``, ``windows_only``, ``captured_stdout``,
``captured_stderr`` and ``override_config`` are copied from numba-cuda
0.30.4's tests/support.py (BSD-2-Clause, NVIDIA); ``TestCase`` is a
minimal equivalent of numba's (its ``assertPreciseEqual`` checks what
numba's does for arrays, sequences and scalars: type family, dtype, shape,
mutability, strides of dimensions longer than 1, exact values, the sign of
zeros), because numba's imports numba typing and NRT."""
import contextlib
import io
import math
import sys
import unittest

import numpy as np

from numba.cuda.core import config

_lnx_reason = "linux only test"
linux_only = unittest.skipIf(not sys.platform.startswith("linux"), _lnx_reason)
_win_reason = "Windows only test"
windows_only = unittest.skipIf(not sys.platform.startswith("win"), _win_reason)

IS_NUMPY_2 = tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 0)


@contextlib.contextmanager
def override_config(name, value):
    """Temporarily set config variable *name* to *value*."""
    old_value = getattr(config, name)
    setattr(config, name, value)
    try:
        yield
    finally:
        setattr(config, name, old_value)


def captured_stdout():
    return contextlib.redirect_stdout(io.StringIO())


def captured_stderr():
    return contextlib.redirect_stderr(io.StringIO())


def _family(obj):
    if isinstance(obj, np.ndarray):
        return "ndarray"
    if isinstance(obj, (tuple, list)):
        return "sequence"
    if isinstance(obj, (bool, np.bool_, int, np.integer)):
        return "exact"
    if isinstance(obj, (complex, np.complexfloating)):
        return "complex"
    if isinstance(obj, (float, np.floating)):
        return "approximate"
    return "unknown"


def _strides(arr):
    if arr.size == 0:
        return [0] * arr.ndim
    return [s // arr.itemsize for s, n in zip(arr.strides, arr.shape) if n > 1]


class TestCase(unittest.TestCase):
    def assertPreciseEqual(self, first, second, msg=None):
        try:
            self._precise(first, second, msg)
        except AssertionError as exc:
            failure = str(exc)
        else:
            return
        self.fail(f"when comparing {first} and {second}: {failure}")

    def _precise(self, first, second, msg):
        family = _family(first)
        self.assertEqual(family, _family(second), "type family mismatch")
        if family == "ndarray":
            self.assertEqual(first.dtype, second.dtype, msg)
            self.assertEqual(first.shape, second.shape, "different shapes")
            self.assertEqual(first.flags.writeable, second.flags.writeable,
                             "different mutability")
            self.assertEqual(_strides(first), _strides(second),
                             "different strides")
            for a, b in zip(first.flat, second.flat):
                self._precise(a, b, msg)
        elif family == "sequence":
            self.assertEqual(len(first), len(second), msg)
            for a, b in zip(first, second):
                self._precise(a, b, msg)
        elif family in ("approximate", "complex"):
            for a, b in ([(first.real, second.real), (first.imag, second.imag)]
                         if family == "complex" else [(first, second)]):
                if math.isnan(a) or math.isnan(b):
                    self.assertEqual(math.isnan(a), math.isnan(b), msg)
                else:
                    self.assertEqual(a, b, msg)
                    self.assertEqual(math.copysign(1, a), math.copysign(1, b),
                                     f"{a} != {b}: sign of zero")
        else:
            self.assertEqual(first, second, msg)
