"""cudamem.simulator: the control API seen from Python, checked against what
cudamem observes through the driver."""
import ctypes
import os
import threading

import pytest

import cudamem
from cudamem import _cudamem, driver
from cudamem.errors import CudaAPIError
from tests.helpers.run import run_python

pytestmark = pytest.mark.simulator


def calls(sim, entry):
    return sim.stats()["calls"][entry]["calls"]


def test_stats_shape(sim):
    stats = sim.stats()
    for key in ("device_allocations", "device_bytes", "host_allocations",
                "host_bytes", "registrations", "streams", "events",
                "ipc_open", "calls"):
        assert key in stats
    assert {"cuMemAlloc", "cuMemcpy2DAsync", "cuStreamAddCallback",
            "cuIpcOpenMemHandle"} <= set(stats["calls"])
    assert stats["calls"]["cuMemAlloc"].keys() == {"calls", "bytes", "gil"}


def test_call_counters_follow_driver_calls(sim):
    cudamem.is_available()
    before = calls(sim, "cuDeviceGetName")
    for _ in range(3):
        _cudamem.device_info(0)
    assert calls(sim, "cuDeviceGetName") == before + 3
    sim.reset()
    assert calls(sim, "cuDeviceGetName") == 0


def test_call_counters_add_every_thread_live_or_exited(sim):
    # Each thread counts into a block of its own: the totals hold the
    # calls of threads that exited and of one still running, and a reset
    # drops them all. The reference is the calls each thread made.
    get = ctypes.CDLL(sim.library_path()).cuDriverGetVersion
    parked, resume = threading.Event(), threading.Event()

    def call(n):
        version = ctypes.c_int()
        for _ in range(n):
            get(ctypes.byref(version))

    def sleeper():
        call(5)
        parked.set()
        resume.wait()
        call(7)

    sim.reset()
    workers = [threading.Thread(target=call, args=(100 + i,))
               for i in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    s = threading.Thread(target=sleeper)
    s.start()
    parked.wait()
    call(1)
    assert calls(sim, "cuDriverGetVersion") == 406 + 5 + 1
    sim.reset()
    assert calls(sim, "cuDriverGetVersion") == 0
    resume.set()
    s.join()
    assert calls(sim, "cuDriverGetVersion") == 7


def test_probe_gil_counts_the_calls_made_holding_it(sim):
    """ctypes' PyDLL calls a C function holding the GIL and CDLL releases
    it first: the reference for what the probe must see."""
    version = ctypes.c_int()
    held = ctypes.PyDLL(sim.library_path()).cuDriverGetVersion
    released = ctypes.CDLL(sim.library_path()).cuDriverGetVersion

    def gil_calls():
        entry = sim.stats()["calls"]["cuDriverGetVersion"]
        return entry["calls"], entry["gil"]

    sim.reset()
    released(ctypes.byref(version))
    held(ctypes.byref(version))
    assert gil_calls() == (2, 0)
    with sim.probe_gil():
        held(ctypes.byref(version))
        held(ctypes.byref(version))
        released(ctypes.byref(version))
        # Another thread holding the GIL counts; the probe is global.
        t = threading.Thread(target=held, args=(ctypes.byref(version),))
        t.start()
        t.join()
        assert gil_calls() == (6, 3)
        with pytest.raises(RuntimeError, match="already active"):
            with sim.probe_gil():
                pass
    held(ctypes.byref(version))
    assert gil_calls() == (7, 3)
    sim.reset()
    assert gil_calls() == (0, 0)


def test_inject_after_and_count(sim):
    cudamem.is_available()
    sim.inject("cuDeviceGetUuid", "CUDA_ERROR_INVALID_DEVICE", after=1,
               count=2)
    _cudamem.device_info(0)  # the one allowed success
    for _ in range(2):
        with pytest.raises(CudaAPIError) as info:
            _cudamem.device_info(0)
        assert info.value.name == "CUDA_ERROR_INVALID_DEVICE"
    _cudamem.device_info(0)


def test_faults_are_per_thread(sim):
    cudamem.is_available()
    sim.inject("cuDeviceGetName", 999)
    seen = []
    t = threading.Thread(target=lambda: seen.append(_cudamem.device_info(0)))
    t.start()
    t.join()
    assert seen and seen[0]["id"] == 0  # the other thread was not affected
    with pytest.raises(CudaAPIError):
        _cudamem.device_info(0)


def test_clear_faults(sim):
    cudamem.is_available()
    sim.inject("cuDeviceGetName", 999, count=5)
    sim.clear_faults()
    _cudamem.device_info(0)


@pytest.mark.parametrize("args, text", [
    (("cuNoSuchCall", 1), "the simulator has no entry point 'cuNoSuchCall'"),
    (("cuMemAlloc", "CUDA_ERROR_NOPE"), "unknown CUDA error name"),
    (("cuMemAlloc", 2, -1), "need after >= 0 and count >= 1"),
    (("cuMemAlloc", 2, 0, 0), "need after >= 0 and count >= 1"),
])
def test_inject_rejects_bad_arguments(sim, args, text):
    with pytest.raises(ValueError, match=text):
        sim.inject(*args)


def test_error_code(sim):
    assert sim.error_code("CUDA_ERROR_OUT_OF_MEMORY") == 2
    assert sim.error_code(700) == 700


def test_set_memory_changes_total(sim):
    cudamem.is_available()
    before = driver.devices()[0]["total_memory"]
    sim.set_memory(0, 64 << 20)
    try:
        assert driver.devices()[0]["total_memory"] == 64 << 20
    finally:
        sim.set_memory(0, before)
    assert driver.devices()[0]["total_memory"] == before


def test_set_memory_bad_device(sim):
    cudamem.is_available()
    with pytest.raises(ValueError, match="simulated device 7"):
        sim.set_memory(7, 1 << 20)


def test_delay(sim):
    before = sim.get_delay_us()  # CUDAMEM_SIM_DELAY_US sets it
    with sim.delay(1500):
        assert sim.get_delay_us() == 1500
    assert sim.get_delay_us() == before


def test_hazard_counter_starts_clean(sim):
    sim.reset()
    assert sim.hazard_count() == 0
    assert sim.last_hazard() is None


def test_libcuda_dir_links_the_simulator(sim):
    directory = sim.libcuda_dir()
    link = os.path.join(directory, "libcuda.so.1")
    assert os.path.realpath(link) == os.path.realpath(sim.library_path())
    assert sim.libcuda_dir() == directory  # the link is reused


def test_libcuda_dir_places(sim, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target = os.path.realpath(sim.library_path())
    beside, cache = sim._link_bases(target)
    assert os.path.dirname(beside) == os.path.dirname(target)
    assert os.path.dirname(cache) == str(tmp_path / "cudamem")


def test_libcuda_dir_falls_back_to_the_cache(sim, monkeypatch, tmp_path):
    # A package directory that cannot take the link (root writes anywhere,
    # so a file stands where the directory would be).
    (tmp_path / "pkg").write_text("")
    monkeypatch.setattr(sim, "_link_bases", lambda target: [
        str(tmp_path / "pkg" / "sim-libcuda"), str(tmp_path / "cache")])
    directory = sim.libcuda_dir()
    assert directory == str(tmp_path / "cache")
    assert os.path.realpath(os.path.join(directory, "libcuda.so.1")) == \
        os.path.realpath(sim.library_path())


def test_libcuda_dir_reports_when_no_place_works(sim, monkeypatch, tmp_path):
    (tmp_path / "pkg").write_text("")
    monkeypatch.setattr(sim, "_link_bases",
                        lambda target: [str(tmp_path / "pkg" / "x")])
    with pytest.raises(RuntimeError, match="cannot make a libcuda.so.1 link"):
        sim.libcuda_dir()


def test_programs_load_the_simulator_as_libcuda(run_py, sim):
    # By its SONAME in a process that loaded it, and through libcuda_dir()
    # on LD_LIBRARY_PATH in one that did not.
    proc = run_py("""
        import ctypes
        import cudamem
        from cudamem import simulator
        assert cudamem.is_available()
        by_name = ctypes.CDLL("libcuda.so.1")
        by_path = ctypes.CDLL(simulator.library_path())
        addr = lambda lib: ctypes.cast(lib.cuInit, ctypes.c_void_p).value
        print(addr(by_name) == addr(by_path))
    """, env={"LD_LIBRARY_PATH": None})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"]
    proc = run_py("""
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        print(lib.cusim_is_simulator(), lib.cuInit(0))
    """, env={"LD_LIBRARY_PATH": sim.libcuda_dir()})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "0"]


def test_counts_are_refused_for_another_driver():
    # Without the simulator, this copy of it saw none of cudamem's work: its
    # counts would be zeros, which a check could take for no leak.
    out = run_python("""
        from cudamem import simulator
        for ask in (simulator.live, simulator.stats, simulator.hazard_count,
                    simulator.last_hazard):
            try:
                ask()
            except RuntimeError as e:
                print(ask.__name__, e)
    """, env={"CUDAMEM_SIMULATOR": None, "CUDAMEM_DRIVER": None,
              "LD_LIBRARY_PATH": None})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [
        "live", "stats", "hazard_count", "last_hazard"]
    for line in lines:
        assert "not on the simulator" in line and "cudamem runs on" in line
