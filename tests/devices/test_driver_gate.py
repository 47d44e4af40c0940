"""The driver gate: loading, failures, devices, tracing, fork, errors."""
import pickle
import re
import textwrap

import pytest

import cudamem
from cudamem import driver
from cudamem.errors import (
    CudaAPIError,
    CudaDriverError,
    CudaOutOfMemoryError,
    CudaStickyError,
    CudaSupportError,
    CudaWarning,
)
from tests.helpers.simref import SimDriver as _SimDriver


def test_import_touches_no_driver(run_py):
    proc = run_py("""
        import sys
        import cudamem
        maps = open('/proc/self/maps').read()
        assert 'libcusim' not in maps and 'libcuda' not in maps, maps
        for heavy in ('ctypes', 'asyncio', 'cudamem.simulator'):
            assert heavy not in sys.modules, heavy
        print('clean')
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "clean"


def test_is_available():
    assert cudamem.is_available() is True


def test_get_version_matches_info():
    major, minor = driver.get_version()
    version = driver.info()["version"]
    assert (major, minor) == (version // 1000, version % 1000 // 10)
    assert version >= 12000


@pytest.mark.simulator
def test_loaded_driver_is_the_bundled_simulator(sim):
    info = driver.info()
    assert info["simulator"] is True
    assert info["path"] == sim.library_path()
    assert info["path"].endswith("/libcusim.so")
    assert sim.is_active()


@pytest.fixture
def ref(sim):
    cudamem.is_available()  # cuInit, so the reference calls are allowed
    return _SimDriver(sim.library_path())


CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11


@pytest.mark.simulator
def test_devices_match_the_driver(ref):
    devices = driver.devices()
    assert len(devices) == 1
    dev = devices[0]
    assert dev["id"] == 0
    assert dev["name"] == ref.name(0)
    assert dev["compute_capability"] == (
        ref.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0),
        ref.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0))
    assert dev["total_memory"] == ref.total_mem(0) == 1 << 30
    assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",
                        dev["uuid"])
    assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0",
                        dev["pci_bus_id"].lower())


@pytest.mark.simulator
@pytest.mark.parametrize("attr", [CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                  CU_DEVICE_ATTRIBUTE_MAX_PITCH])
def test_device_attribute_matches_the_driver(ref, attr):
    assert cudamem._cudamem.device_attribute(0, attr) == ref.attribute(attr, 0)


def test_device_attribute_unknown_is_a_driver_error():
    with pytest.raises(CudaAPIError) as info:
        cudamem._cudamem.device_attribute(0, 100000)
    assert info.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert info.value.call == "cuDeviceGetAttribute"


def test_device_info_ordinal_past_the_end():
    count = cudamem._cudamem.device_count()
    text = "device ordinal %d out of range: %d device%s visible" % (
        count, count, "" if count == 1 else "s")
    with pytest.raises(ValueError, match=re.escape(text)):
        cudamem._cudamem.device_info(count)


@pytest.mark.parametrize("bad, exc, text", [
    (-1, ValueError, "device ordinal -1 out of range"),
    (1 << 70, ValueError, "device ordinal %d out of range" % (1 << 70)),
    ("0", TypeError, "device must be an int ordinal or a Device, not str"),
    (True, TypeError, "device must be an int ordinal or a Device, not bool"),
    (0.0, TypeError, "device must be an int ordinal or a Device, not float"),
])
def test_device_info_bad_ordinal(bad, exc, text):
    with pytest.raises(exc, match=re.escape(text)):
        cudamem._cudamem.device_info(bad)


@pytest.mark.simulator
def test_several_devices_and_visible_devices(run_py):
    code = """
        import json
        from cudamem import driver
        print(json.dumps([(d['id'], d['uuid']) for d in driver.devices()]))
    """
    import json
    full = run_py(code, env={"CUDAMEM_SIM_DEVICES": "3",
                             "CUDA_VISIBLE_DEVICES": None})
    assert full.returncode == 0, full.stderr
    uuids = [u for _, u in json.loads(full.stdout)]
    assert len(uuids) == 3 and len(set(uuids)) == 3

    picked = run_py(code, env={"CUDAMEM_SIM_DEVICES": "3",
                               "CUDA_VISIBLE_DEVICES": "2,0"})
    assert picked.returncode == 0, picked.stderr
    assert json.loads(picked.stdout) == [[0, uuids[2]], [1, uuids[0]]]

    by_uuid = run_py(code, env={"CUDAMEM_SIM_DEVICES": "3",
                                "CUDA_VISIBLE_DEVICES": uuids[1]})
    assert json.loads(by_uuid.stdout) == [[0, uuids[1]]]

    # Parsing stops at the first invalid entry, as the driver's does.
    cut = run_py(code, env={"CUDAMEM_SIM_DEVICES": "3",
                            "CUDA_VISIBLE_DEVICES": "1,7,0"})
    assert json.loads(cut.stdout) == [[0, uuids[1]]]


LOAD_FAILURE = """
    import cudamem
    from cudamem import driver
    assert cudamem.is_available() is False
    for _ in range(2):  # the failure is kept, not retried
        try:
            driver.info()
        except cudamem.CudaSupportError as exc:
            print(exc)
        else:
            raise SystemExit('no CudaSupportError')
"""


def _inject_then_load(entry, code, after=0):
    return ("from cudamem import simulator\n"
            "simulator.inject(%r, %r, after=%d)\n" % (entry, code, after)
            + textwrap.dedent(LOAD_FAILURE))


def _lines(proc):
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0] == lines[1]
    return lines[0]


def test_library_not_found_names_every_path(run_py):
    msg = _lines(run_py(LOAD_FAILURE, env={
        "CUDAMEM_DRIVER": "/nonexistent/libcuda.so.1"}))
    assert msg.startswith("CUDA driver library not found; tried: "
                          "/nonexistent/libcuda.so.1 (")


@pytest.mark.simulator
def test_default_search_names_libcuda(run_py):
    # Only meaningful where no real driver is installed, as on CI.
    proc = run_py(LOAD_FAILURE, env={"CUDAMEM_SIMULATOR": None,
                                     "CUDAMEM_DRIVER": None})
    assert "; tried: " in _lines(proc)
    assert "libcuda.so.1 (" in _lines(proc)


@pytest.mark.simulator
def test_driver_too_old(run_py):
    msg = _lines(run_py(LOAD_FAILURE, env={
        "CUDAMEM_SIM_DRIVER_VERSION": "11080"}))
    assert "is version 11.8; cudamem needs 12.0 or newer" in msg


@pytest.mark.simulator
def test_stub_library_is_named(run_py):
    msg = _lines(run_py(_inject_then_load("cuDriverGetVersion",
                                          "CUDA_ERROR_STUB_LIBRARY")))
    assert "stub library (CUDA_ERROR_STUB_LIBRARY)" in msg
    assert "Install the NVIDIA driver" in msg


@pytest.mark.simulator
def test_init_failure_message(run_py):
    msg = _lines(run_py(_inject_then_load("cuInit", "CUDA_ERROR_NO_DEVICE")))
    assert msg == "Error at driver init: CUDA_ERROR_NO_DEVICE (100)"


@pytest.mark.simulator
def test_proc_address_failure_names_the_entry(run_py):
    msg = _lines(run_py(_inject_then_load("cuGetProcAddress",
                                          "CUDA_ERROR_UNKNOWN", after=2)))
    assert re.match(r'cuGetProcAddress\("\w+", \d+\) failed in .*: '
                    r'CUDA_ERROR_UNKNOWN \(999\)$', msg), msg


@pytest.mark.simulator
def test_api_trace(run_py):
    proc = run_py("""
        from cudamem import driver
        driver.devices()
    """, env={"CUDAMEM_LOG": "api"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert "cudamem api: cuInit(0) -> CUDA_SUCCESS (0)" in lines
    assert any(re.fullmatch(r"cudamem api: cuDeviceGetCount\(count=0x[0-9a-f]+"
                            r"\) -> CUDA_SUCCESS \(0\)", ln)
               for ln in lines), lines
    assert any(ln.startswith("cudamem api: cuDeviceGetName(info->name=0x")
               for ln in lines), lines


def test_no_trace_by_default(run_py):
    proc = run_py("from cudamem import driver; driver.devices()",
                  env={"CUDAMEM_LOG": None})
    assert proc.returncode == 0 and "cudamem api" not in proc.stderr


@pytest.mark.parametrize("env, expected", [
    ({}, False),
    ({"CUDAMEM_PER_THREAD_DEFAULT_STREAM": "1"}, True),
    ({"NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM": "1"}, True),
    ({"CUDAMEM_PER_THREAD_DEFAULT_STREAM": "0",
      "NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM": "1"}, False),
])
def test_per_thread_default_stream_switch(run_py, env, expected):
    base = {"CUDAMEM_PER_THREAD_DEFAULT_STREAM": None,
            "NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM": None}
    base.update(env)
    proc = run_py("from cudamem import driver; "
                  "print(driver.info()['per_thread_default_stream'])",
                  env=base)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(expected)


FORK = """
    import os
    import cudamem
    from cudamem import driver
    {before}
    pid = os.fork()
    if pid == 0:
        try:
            print(len(driver.devices()), flush=True)
        except cudamem.CudaDriverError as exc:
            print(type(exc).__name__, exc, flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_fork_after_init_raises(run_py):
    proc = run_py(FORK.format(before="driver.devices()"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "CudaDriverError CUDA initialized before forking; use the spawn "
        "start method")


def test_fork_before_init_works(run_py):
    proc = run_py(FORK.format(before="pass"))
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) >= 1


@pytest.mark.parametrize("exc", [
    CudaAPIError(2, "cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY"),
    CudaOutOfMemoryError(2, "cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", 100,
                         10, 1000, 5, 7),
    # The pool's limit refused it.
    CudaOutOfMemoryError(2, None, "CUDA_ERROR_OUT_OF_MEMORY", 100, 10, 1000,
                         5, 7, 4096, 64),
    CudaStickyError(700, "cuCtxSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    CudaSupportError("no driver"),
    CudaDriverError("forked"),
    CudaWarning("late free failed"),
])
def test_errors_pickle(exc):
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert back.__dict__ == exc.__dict__


def test_api_error_wording():
    exc = CudaAPIError(2, "cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
    assert str(exc) == ("[2] Call to cuMemAlloc results in "
                        "CUDA_ERROR_OUT_OF_MEMORY")
    assert (exc.code, exc.call, exc.name) == (2, "cuMemAlloc",
                                              "CUDA_ERROR_OUT_OF_MEMORY")
    assert isinstance(exc, CudaDriverError)
    assert issubclass(CudaSupportError, ImportError)
    oom = CudaOutOfMemoryError(2, "cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY",
                               100, 10, 1000, 5, 7)
    assert str(oom).endswith("requested 100 bytes; 10 of 1000 bytes free, 5 "
                             "pending release, 7 cached by the pool")
    assert "restart the process" in str(
        CudaStickyError(700, "cuMemcpy", "CUDA_ERROR_ILLEGAL_ADDRESS"))


def test_error_names_are_the_headers():
    names = dict(cudamem._cudamem._error_names())
    assert names[0] == "CUDA_SUCCESS"
    assert names[2] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert names[34] == "CUDA_ERROR_STUB_LIBRARY"
    assert names[700] == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert len(names) > 90


def test_cli_info(run_py):
    proc = run_py("import sys, runpy; sys.argv = ['cudamem', 'info']; "
                  "runpy.run_module('cudamem', run_name='__main__')")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"driver version: \d+\.\d+", proc.stdout)
    assert re.search(r"\[0\] .* compute capability \d+\.\d", proc.stdout)


@pytest.mark.simulator
def test_demo_falls_back_to_the_simulator(run_py):
    proc = run_py("import sys, runpy; sys.argv = ['cudamem', 'demo']; "
                  "runpy.run_module('cudamem', run_name='__main__')",
                  env={"CUDAMEM_SIMULATOR": None,
                       "CUDAMEM_DRIVER": "/nonexistent/libcuda.so.1"})
    assert proc.returncode == 0, proc.stderr
    assert "running the tour on cudamem's simulated driver" in proc.stdout
    assert "cudamem's simulated driver: " in proc.stdout
