"""Fault injection generated from the driver table: every row, through a
public call that reaches it, gives the right exception and leaks nothing
(the autouse leak check). A row added to core/driver.h without an entry in
REACH fails test_every_row_has_a_reach."""
import pytest

import cudamem
from cudamem import _cudamem, driver
from cudamem.errors import (CudaAPIError, CudaOutOfMemoryError,
                            CudaStickyError)

pytestmark = pytest.mark.simulator

LOAD = "load"  # called while loading: observed in a fresh process

# Row name -> the public call that reaches it.
REACH = {
    "cuInit": LOAD,
    "cuDriverGetVersion": LOAD,
    "cuDeviceGetCount": driver.devices,
    "cuDeviceGet": lambda: _cudamem.device_info(0),
    "cuDeviceGetName": lambda: _cudamem.device_info(0),
    "cuDeviceGetAttribute": lambda: _cudamem.device_attribute(0, 16),
    "cuDeviceTotalMem": lambda: _cudamem.device_info(0),
    "cuDeviceGetUuid": lambda: _cudamem.device_info(0),
    "cuDeviceGetPCIBusId": lambda: _cudamem.device_info(0),
}

ROWS = [row[0] for row in driver.table()]


def test_every_row_has_a_reach():
    assert sorted(ROWS) == sorted(REACH)


def test_rows_are_resolved():
    cudamem.is_available()
    for name, version, required, _, present in driver.table():
        assert version >= 2000
        if required:
            assert present, name


IN_PROCESS = [name for name in ROWS if REACH.get(name) is not LOAD]
AT_LOAD = [name for name in ROWS if REACH.get(name) is LOAD]


@pytest.mark.parametrize("row", IN_PROCESS)
def test_row_failure_raises_api_error(sim, row):
    assert cudamem.is_available()
    sim.inject(row, "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError) as info:
        REACH[row]()
    exc = info.value
    assert type(exc) is CudaAPIError
    assert (exc.code, exc.name, exc.call) == (999, "CUDA_ERROR_UNKNOWN", row)
    assert str(exc) == "[999] Call to %s results in CUDA_ERROR_UNKNOWN" % row
    REACH[row]()  # the fault was used up: the next call works


@pytest.mark.parametrize("row", IN_PROCESS)
def test_row_failure_kinds(sim, row):
    assert cudamem.is_available()
    sim.inject(row, "CUDA_ERROR_OUT_OF_MEMORY")
    with pytest.raises(CudaOutOfMemoryError):
        REACH[row]()
    sim.inject(row, "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(CudaStickyError) as info:
        REACH[row]()
    assert info.value.call == row


@pytest.mark.parametrize("row", AT_LOAD)
def test_load_row_failure(run_py, row):
    proc = run_py("""
        import cudamem
        from cudamem import driver, simulator
        simulator.inject(%r, 'CUDA_ERROR_UNKNOWN')
        assert cudamem.is_available() is False
        try:
            driver.info()
        except cudamem.CudaSupportError as exc:
            print(exc)
    """ % row)
    assert proc.returncode == 0, proc.stderr
    msg = proc.stdout.strip()
    if row == "cuInit":
        assert msg == "Error at driver init: CUDA_ERROR_UNKNOWN (999)"
    else:
        assert msg.startswith(row + " failed in ")
        assert msg.endswith(": CUDA_ERROR_UNKNOWN (999)")
