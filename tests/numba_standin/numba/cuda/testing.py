"""numba.cuda.testing: the harness names numba-cuda's host-side tests
import. The skip decorators, ``cc_X_or_above`` and ``ForeignArray`` are
copied from numba-cuda 0.30.4's testing.py (BSD-2-Clause, NVIDIA), with
``devices.get_context()`` resolving to cudamem's; ``CUDATestCase`` is the
minimal equivalent of numba's: its FileCheck helpers inspect compiled
kernels, and numba's module imports the compiler, so it cannot be loaded
here. ``unittest`` is re-exported as numba's module does."""
import os
import platform
import unittest

from numba.cuda.core import config
from numba.cuda.tests.support import TestCase


class CUDATestCase(TestCase):
    """For tests that use a CUDA device (numba's setUp/tearDown keep two
    warning switches, which only kernel launches read)."""

    def setUp(self):
        self._low_occupancy_warnings = config.CUDA_LOW_OCCUPANCY_WARNINGS
        self._warn_on_implicit_copy = config.CUDA_WARN_ON_IMPLICIT_COPY
        config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
        config.CUDA_WARN_ON_IMPLICIT_COPY = 0

    def tearDown(self):
        config.CUDA_LOW_OCCUPANCY_WARNINGS = self._low_occupancy_warnings
        config.CUDA_WARN_ON_IMPLICIT_COPY = self._warn_on_implicit_copy


def skip_on_cudasim(reason):
    """Skip this test if running on the CUDA simulator"""
    assert isinstance(reason, str)
    return unittest.skipIf(config.ENABLE_CUDASIM, reason)


def skip_unless_cudasim(reason):
    """Skip this test if running on CUDA hardware"""
    assert isinstance(reason, str)
    return unittest.skipUnless(config.ENABLE_CUDASIM, reason)


def skip_if_external_memmgr(reason):
    """Skip test if an EMM Plugin is in use"""
    assert isinstance(reason, str)
    return unittest.skipIf(config.CUDA_MEMORY_MANAGER != "default", reason)


def skip_under_cuda_memcheck(reason):
    assert isinstance(reason, str)
    return unittest.skipIf(os.environ.get("CUDA_MEMCHECK") is not None, reason)


def skip_on_arm(reason):
    assert isinstance(reason, str)
    cpu = platform.processor()
    is_arm = cpu.startswith(("arm", "aarch"))
    return unittest.skipIf(is_arm, reason)


def skip_on_wsl2(reason):
    assert isinstance(reason, str)
    rel = platform.release().lower()
    is_wsl2 = ("microsoft-standard-wsl2" in rel) or ("wsl2" in rel)
    return unittest.skipIf(is_wsl2, reason)


def cc_X_or_above(major, minor):
    if not config.ENABLE_CUDASIM:
        from numba.cuda.cudadrv import devices

        cc = devices.get_context().device.compute_capability
        return cc >= (major, minor)
    return True


def skip_unless_cc_50(fn):
    return unittest.skipUnless(cc_X_or_above(5, 0), "requires cc >= 5.0")(fn)


def skip_unless_cc_53(fn):
    return unittest.skipUnless(cc_X_or_above(5, 3), "requires cc >= 5.3")(fn)


def skip_unless_cc_60(fn):
    return unittest.skipUnless(cc_X_or_above(6, 0), "requires cc >= 6.0")(fn)


def skip_unless_cc_75(fn):
    return unittest.skipUnless(cc_X_or_above(7, 5), "requires cc >= 7.5")(fn)


def skip_unless_cc_90(fn):
    return unittest.skipUnless(cc_X_or_above(9, 0), "requires cc >= 9.0")(fn)


def xfail_unless_cudasim(fn):
    if config.ENABLE_CUDASIM:
        return fn
    return unittest.expectedFailure(fn)


class ForeignArray:
    """
    Class for emulating an array coming from another library through the CUDA
    Array interface. This just hides a DeviceNDArray so that it doesn't look
    like a DeviceNDArray.
    """

    def __init__(self, arr):
        self._arr = arr
        self.__cuda_array_interface__ = arr.__cuda_array_interface__
