"""numba's module names and internals as numba-cuda 0.30.4 has them
(numba/cuda/cudadrv/{driver,devicearray,devices}.py, api.py): the
``cudamem.cudadrv`` package and ``cudamem.devicearray`` so that
``sed s/numba.cuda/cudamem/`` on import lines works; the helpers of numba's
``driver`` module checked against NumPy; ``devices.get_context`` and
``require_context``'s refusal of a context switch; numba's Context methods
routed through the memory manager; ``Device.from_identity`` and
``supports_fp8``."""
import ctypes
import importlib

import numpy as np
import pytest

import cudamem
from cudamem import simulator
from cudamem.errors import CudaAPIError, CudaDriverError

pytestmark = pytest.mark.simulator


# --- Device --------------------------------------------------------------

@pytest.mark.parametrize("cc, fp8, fp16", [
    ((8, 6), False, True), ((8, 9), True, True), ((9, 0), True, True),
    ((5, 2), False, False), ((5, 3), False, True),
])
def test_supports_fp8_and_float16_follow_numbas_thresholds(run_py, cc, fp8,
                                                           fp16):
    proc = run_py("""
        import cudamem
        d = cudamem.list_devices()[0]
        print(d.compute_capability, d.supports_fp8, d.supports_float16,
              d.accelerates_fp8)
    """, env={"CUDAMEM_SIM_ATTRS": "75=%d,76=%d" % cc})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "%s %s %s %s" % (cc, fp8, fp16, fp8)


def test_from_identity():
    for device in cudamem.list_devices():
        assert cudamem.Device.from_identity(
            device.get_device_identity()) is device
    identity = dict(cudamem.list_devices()[0].get_device_identity(),
                    pci_bus_id=9999)
    with pytest.raises(RuntimeError, match="No device of .* is found. "
                                           "Target device may not be "
                                           "visible in this process."):
        cudamem.Device.from_identity(identity)


# --- driver failures -------------------------------------------------------

@pytest.fixture
def faults():
    yield simulator
    simulator.clear_faults()


def test_from_identity_attribute_failure(faults):
    device = cudamem.list_devices()[0]
    faults.inject("cuDeviceGetAttribute", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError, match="cuDeviceGetAttribute"):
        cudamem.Device.from_identity(device.get_device_identity())
