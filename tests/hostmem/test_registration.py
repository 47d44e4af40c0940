"""Page-locking existing arrays: register / deregister (numba's ROC API),
the pinned() context manager (numba.cuda's), the one registry behind them
(overlapping ranges and shared pages never reach the driver twice), read-only
registrations, bad input and injected failures (nothing stays registered).

The reference is the simulator: its live registrations, its call counters
and its own cuMemHostGetFlags."""
import sys
import threading
import time

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem
from cudamem.errors import CudaAPIError
from tests.helpers.hostmem import PAGE, page_buffer
from tests.helpers.simref import SimDriver

READ_ONLY = 0x8  # CU_MEMHOSTREGISTER_READ_ONLY

pytestmark = pytest.mark.simulator


def registrations(sim):
    return sim.live()["registrations"]


def host_flags(sim, ary):
    return SimDriver(sim.library_path()).host_flags(ary)


def test_register_until_deregister(sim):
    a, b = np.arange(10.0), np.arange(1000.0)
    cudamem.register(a, b)
    assert registrations(sim) == 2
    cudamem.deregister(a)
    assert registrations(sim) == 1
    cudamem.deregister(b)
    assert registrations(sim) == 0


def test_register_as_a_with_block(sim):
    a = np.arange(10.0)
    with cudamem.register(a):
        assert registrations(sim) == 1
        with pytest.raises(ValueError, match="registered already"):
            cudamem.register(a)
    assert registrations(sim) == 0
    with pytest.raises(ValueError, match="is not registered"):
        cudamem.deregister(a)


def test_deregister_inside_the_block_is_fine(sim):
    a, b = np.arange(10.0), np.arange(10.0)
    with cudamem.register(a, b):
        cudamem.deregister(a)
        assert registrations(sim) == 1
    assert registrations(sim) == 0


def test_same_array_twice_in_one_call(sim):
    a = np.arange(10.0)
    with pytest.raises(ValueError, match="registered already"):
        cudamem.register(a, a)
    assert registrations(sim) == 0
    with cudamem.register(a):
        with pytest.raises(ValueError, match="not registered"):
            cudamem.deregister(a, a)
        assert registrations(sim) == 1  # nothing was deregistered


def test_deregister_checks_all_before_any(sim):
    a, b = np.arange(10.0), np.arange(10.0)
    cudamem.register(a)
    with pytest.raises(ValueError, match="shape \\(10,\\).*not registered"):
        cudamem.deregister(a, b)
    assert registrations(sim) == 1
    cudamem.deregister(a)


def test_views_sharing_pages_share_one_registration(sim):
    buf = page_buffer(4)
    left, right = buf[:10], buf[10:20]  # one page
    cudamem.register(left)
    cudamem.register(right)
    assert registrations(sim) == 1
    cudamem.deregister(left)
    assert registrations(sim) == 1  # right still holds the page
    cudamem.deregister(right)
    assert registrations(sim) == 0


def test_overlapping_ranges_register_only_the_gaps(sim):
    buf = page_buffer(4)
    per_page = PAGE // 8
    calls = sim.stats()["calls"]["cuMemHostRegister"]["calls"]
    with cudamem.pinned(buf[per_page:2 * per_page]):       # page 1
        with cudamem.pinned(buf[3 * per_page:]):            # page 3
            with cudamem.pinned(buf):                       # pages 0 and 2
                assert registrations(sim) == 4
                assert sim.live()["registered_bytes"] == 4 * PAGE
            assert registrations(sim) == 2
    assert registrations(sim) == 0
    assert sim.stats()["calls"]["cuMemHostRegister"]["calls"] == calls + 4


def test_pinned_nests_and_unlocks_on_exception(sim):
    a = np.arange(100.0)
    with pytest.raises(KeyError):
        with cudamem.pinned(a):
            with cudamem.pinned(a, a[::3]):
                assert registrations(sim) == 1
            assert registrations(sim) == 1
            raise KeyError("body")
    assert registrations(sim) == 0


def test_pinned_tolerates_memory_already_pinned(sim):
    p = cudamem.pinned_array(100)
    w = cudamem.mapped_array(100, wc=True)  # cuMemHostAlloc'd
    calls = sim.stats()["calls"]["cuMemHostRegister"]["calls"]
    with cudamem.pinned(p, w):
        pass
    # p's pages are shared; so are w's, which the registry knows as
    # page-locked by cuMemHostAlloc: no driver call at all.
    assert sim.stats()["calls"]["cuMemHostRegister"]["calls"] == calls
    assert registrations(sim) == 1
    with cudamem.register(p, w):
        pass
    assert registrations(sim) == 1


def test_strided_array_registers_its_extent(sim):
    buf = page_buffer(3)
    view = buf[::PAGE // 8]  # one element per page
    (hb,) = _cudamem._host_register([view])
    assert hb.kind == "registered" and hb.registered
    assert hb.host_pointer == buf.__array_interface__["data"][0]
    assert hb.size == 2 * PAGE + 8
    assert sim.live()["registered_bytes"] == 3 * PAGE
    _cudamem._host_unregister([hb])
    assert not hb.registered and registrations(sim) == 0
    _cudamem._host_unregister([hb])  # twice is nothing


def test_read_only_arrays_are_registered_read_only(sim):
    buf = page_buffer(1)
    ro = buf.view()
    ro.flags.writeable = False
    with cudamem.pinned(ro):
        assert host_flags(sim, buf) & READ_ONLY
        # The driver refuses to write into read-only registered memory,
        # even through a writable NumPy view of it.
        d = cudamem.to_device(np.ones(buf.size))
        with pytest.raises(CudaAPIError, match="INVALID_VALUE"):
            d.copy_to_host(buf)
        with pytest.raises(ValueError, match="registered read-only"):
            with cudamem.pinned(buf[:3]):
                pass
        assert registrations(sim) == 1
        with cudamem.pinned(ro[:3]):  # read-only over read-only is fine
            pass
    assert registrations(sim) == 0
    with cudamem.pinned(buf):
        assert not host_flags(sim, buf) & READ_ONLY
        with cudamem.pinned(ro):  # read-only over writable is fine
            pass


def test_read_only_registration_needs_the_capability(run_py):
    # CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED is 113.
    proc = run_py("""
        import cudamem, numpy as np
        from cudamem import simulator as sim
        ro = np.arange(8.0)
        ro.flags.writeable = False
        cudamem.current_context()
        before = sim.live()
        try:
            cudamem.register(ro)
        except cudamem.CudaSupportError as e:
            print(e)
        with cudamem.pinned(np.arange(8.0)):  # writable memory still works
            pass
        print(sim.live() == before)
        """, env={"CUDAMEM_SIM_ATTRS": "113=0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "device 0 cannot page-lock read-only host memory (no "
        "READ_ONLY_HOST_REGISTER_SUPPORTED): make the array writable",
        "True"]


def test_read_only_host_buffer_exports_read_only(sim):
    ro = np.arange(8.0)
    ro.flags.writeable = False
    (hb,) = _cudamem._host_register([ro])
    assert hb.readonly and memoryview(hb).readonly
    _cudamem._host_unregister([hb])


@pytest.mark.parametrize("bad, exc, match", [
    (1, TypeError, "only NumPy arrays"),
    ([1.0, 2.0], TypeError, "only NumPy arrays"),
    (np.array([None, 1]), TypeError, "Python objects")])
@pytest.mark.parametrize("api", ["register", "pinned", "mapped"])
def test_bad_input_registers_nothing(sim, api, bad, exc, match):
    good = np.arange(10.0)
    calls = sim.stats()["calls"]["cuMemHostRegister"]["calls"]
    with pytest.raises(exc, match=match):
        fn = getattr(cudamem, api)
        if api == "register":
            fn(good, bad)
        else:
            with fn(good, bad):
                pass
    assert sim.stats()["calls"]["cuMemHostRegister"]["calls"] == calls
    cudamem.register(good)  # not left registered
    cudamem.deregister(good)


def test_failure_on_a_later_array_rolls_back(sim):
    buf = page_buffer(2)
    a, b = buf[:10], buf[PAGE // 8:]  # one page each
    sim.inject("cuMemHostRegister", "CUDA_ERROR_UNKNOWN", after=1)
    with pytest.raises(CudaAPIError, match="cuMemHostRegister"):
        cudamem.register(a, b)
    assert registrations(sim) == 0
    cudamem.register(a, b)  # neither is left in the table
    cudamem.deregister(a, b)


def test_failure_on_a_later_gap_rolls_back(sim):
    buf = page_buffer(3)
    per_page = PAGE // 8
    with cudamem.pinned(buf[per_page:2 * per_page]):
        sim.inject("cuMemHostRegister", "CUDA_ERROR_OUT_OF_MEMORY", after=1)
        with pytest.raises(cudamem.CudaOutOfMemoryError):
            with cudamem.pinned(buf):
                pass
        assert registrations(sim) == 1
    assert registrations(sim) == 0


def test_failed_deregister_forgets_the_array(sim):
    a = np.arange(10.0)
    cudamem.register(a)
    sim.inject("cuMemHostUnregister", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError, match="cuMemHostUnregister"):
        cudamem.deregister(a)
    with pytest.raises(ValueError, match="not registered"):
        cudamem.deregister(a)
    # The driver still holds the pages until their context goes.
    cudamem.get_current_device().reset()


def test_registration_after_a_reset(sim):
    a = np.arange(10.0)
    unregisters = sim.stats()["calls"]["cuMemHostUnregister"]["calls"]
    with cudamem.pinned(a):
        cudamem.get_current_device().reset()
        # The driver dropped it: registering again registers anew.
        with cudamem.pinned(a):
            assert registrations(sim) == 1
    assert registrations(sim) == 0
    assert sim.stats()["calls"]["cuMemHostUnregister"]["calls"] == \
        unregisters + 1


def test_registration_survives_close(sim):
    a = np.arange(10.0)
    calls = sim.stats()["calls"]
    with cudamem.pinned(a):
        cudamem.close()
        assert registrations(sim) == 1
        with cudamem.pinned(a):  # shared, not registered again
            pass
    assert registrations(sim) == 0
    after = sim.stats()["calls"]
    assert after["cuMemHostRegister"]["calls"] == \
        calls["cuMemHostRegister"]["calls"] + 1
    assert after["cuMemHostUnregister"]["calls"] == \
        calls["cuMemHostUnregister"]["calls"] + 1


def test_threads_share_pages(sim):
    buf = page_buffer(2)
    errors = []

    def work(i):
        try:
            for _ in range(50):
                with cudamem.pinned(buf[i::4]):
                    with cudamem.pinned(buf[i:i + 1]):
                        pass
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert registrations(sim) == 0


def test_register_errors_name_the_array_and_leave_nothing_entered(sim):
    a = np.arange(3.0)
    with cudamem.register(a):
        with pytest.raises(ValueError) as info:
            cudamem.register(a)
    assert str(info.value) == (
        "the array of shape (3,) and dtype float64 at %#x (24 bytes) is "
        "registered already" % a.ctypes.data)
    # A failure after the checks (an object array cannot be page-locked)
    # leaves neither array registered nor entered in the registry.
    with pytest.raises(TypeError, match="holds Python objects"):
        cudamem.register(a, np.array([None]))
    assert registrations(sim) == 0
    with pytest.raises(ValueError, match="is not registered"):
        cudamem.deregister(a)
    with cudamem.register(a):
        assert registrations(sim) == 1
    assert registrations(sim) == 0


def test_a_block_ends_only_its_own_registrations(sim):
    a = np.arange(10.0)
    block = cudamem.register(a)
    cudamem.deregister(a)
    cudamem.register(a)  # a new registration of the same array
    block.__exit__(None, None, None)
    assert registrations(sim) == 1
    cudamem.deregister(a)
    assert registrations(sim) == 0


def test_host_register_keeps_the_arrays_a_list_held(sim):
    """_host_register() of a list registers the arrays the list held when
    called, though another thread replaces them while the GIL is released
    around each registration (it read the list again after checking it:
    clang-tidy's uninitialized argument). Tried until the thread ran during
    a call."""
    arrays = [page_buffer(1) for _ in range(64)]
    ran_inside = 0
    for attempt in range(20):
        items = list(arrays)
        go, mutated = threading.Event(), threading.Event()

        def replace(items=items, go=go, mutated=mutated):
            go.wait()
            items[:] = ["not an array"] * len(items)
            mutated.set()

        thread = threading.Thread(target=replace)
        thread.start()
        interval = sys.getswitchinterval()
        sys.setswitchinterval(60)  # the thread runs when the GIL is let go
        try:
            go.set()
            # Holding the GIL until the thread waits for it.
            end = time.perf_counter() + 0.01 * (attempt + 1)
            while time.perf_counter() < end:
                pass
            # go.set() may have let the GIL go: then the thread ran first.
            early = mutated.is_set()
            if not early:
                buffers = _cudamem._host_register(items)
                inside = mutated.is_set()
        finally:
            sys.setswitchinterval(interval)
            thread.join()
        if early:
            continue
        try:
            assert [b.host_pointer for b in buffers] == [
                a.__array_interface__["data"][0] for a in arrays
            ]
            assert registrations(sim) == len(arrays)
        finally:
            _cudamem._host_unregister(buffers)
        assert registrations(sim) == 0
        ran_inside += inside
        if inside:
            break
    assert ran_inside, "the other thread never ran during _host_register()"
