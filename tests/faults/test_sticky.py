"""Sticky errors: after a CUDA_ERROR_ILLEGAL_ADDRESS or another sticky code,
the device's context is poisoned. cudamem raises CudaStickyError naming the
device and saying the process must restart, context_is_poisoned() reports it,
every later operation on the device fails fast without calling the driver, and
finalizers, close() and interpreter exit stay quiet.

The reference is the CUDA driver's documented rule for these codes: "any
further CUDA work will return the same error. To continue using CUDA, the
process must be terminated and relaunched". The simulator keeps an
injected sticky error as the driver does, so a device reset keeps the
poison; cudamem.simulator.reset() forgets it, which models a new process,
and only then does a reset give a usable context (as one would in a
process that never saw the error). Faults are injected through the
simulator; what must outlive the test runs in a fresh interpreter.
"""
import gc
import pickle
import warnings

import numpy as np
import pytest

import cudamem
from cudamem.errors import CudaAPIError, CudaDriverError, CudaStickyError
from tests.helpers.simref import SimDriver

pytestmark = pytest.mark.simulator

RESTART = "unusable after this error; restart the process"

# Calls that do not work in a context (the driver answers them in a
# poisoned one): the device's attributes, the primary context's retain
# count, which context is current.
CONTEXT_FREE = {"cuCtxGetCurrent", "cuDeviceGet", "cuDeviceGetAttribute",
                "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease"}


def _poison(sim, call="cuMemAlloc", code="CUDA_ERROR_ILLEGAL_ADDRESS"):
    sim.inject(call, code)
    with pytest.raises(CudaStickyError) as info:
        cudamem.device_array(4)
    return info.value


def _calls(sim):
    return {name: c["calls"] for name, c in sim.stats()["calls"].items()}


def _driver_calls_between(sim, before):
    after = _calls(sim)
    return {name for name in after if after[name] != before.get(name, 0)}


@pytest.fixture
def recover(sim):
    """After the test, device 0 as a new process finds it: the driver keeps
    a sticky error until the process ends, so a reset alone still raises;
    the simulator's reset forgets it (a new process, for this), and a
    device reset then gives the rest of the suite a clean context."""
    yield
    with pytest.raises(CudaStickyError):
        cudamem.list_devices()[0].reset()
    assert cudamem.context_is_poisoned(0)
    sim.reset()
    cudamem.list_devices()[0].reset()
    assert not cudamem.context_is_poisoned(0)


def test_sticky_error_names_device_and_restart(sim, recover):
    assert cudamem.context_is_poisoned() is False
    exc = _poison(sim)
    assert (exc.code, exc.name, exc.call, exc.device) == (
        700, "CUDA_ERROR_ILLEGAL_ADDRESS", "cuMemAlloc", 0)
    assert str(exc) == ("[700] Call to cuMemAlloc results in "
                        "CUDA_ERROR_ILLEGAL_ADDRESS: the CUDA context of "
                        "device 0 is " + RESTART + " to use CUDA again")
    assert isinstance(exc, CudaAPIError)
    assert cudamem.context_is_poisoned() is True
    assert cudamem.context_is_poisoned(0) is True
    assert cudamem.context_is_poisoned(device=cudamem.list_devices()[0])


@pytest.mark.parametrize("code", ["CUDA_ERROR_LAUNCH_FAILED",
                                  "CUDA_ERROR_ECC_UNCORRECTABLE",
                                  "CUDA_ERROR_MISALIGNED_ADDRESS"])
def test_every_sticky_code_poisons(sim, recover, code):
    exc = _poison(sim, code=code)
    assert exc.name == code and exc.device == 0
    assert cudamem.context_is_poisoned()


def test_non_sticky_error_does_not_poison(sim):
    sim.inject("cuMemAlloc", "CUDA_ERROR_INVALID_VALUE")
    with pytest.raises(CudaAPIError) as info:
        cudamem.device_array(4)
    assert type(info.value) is CudaAPIError
    assert not cudamem.context_is_poisoned()
    cudamem.device_array(4)


def test_error_seen_by_a_sync_poisons(sim, recover):
    """An error that surfaces in a wait (the common case: a kernel failed
    earlier) poisons the device as well."""
    s = cudamem.stream()
    sim.inject("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(CudaStickyError) as info:
        cudamem.default_stream().synchronize()
    assert info.value.call == "cuStreamSynchronize"
    assert cudamem.context_is_poisoned()
    with pytest.raises(CudaStickyError):
        s.synchronize()


def test_synchronize_raises_the_workers_verdict(sim, recover):
    """cudamem.synchronize() waits for cuCtxSynchronize on a worker thread
    and raises what the driver returned there, without asking again: here
    a sticky error the context took from a call cudamem did not make."""
    cudamem.synchronize()
    assert not cudamem.context_is_poisoned()
    sim.inject("cuCtxSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert SimDriver(sim.library_path()).rc("cuCtxSynchronize") == 700
    assert not cudamem.context_is_poisoned()
    before = _calls(sim)
    with pytest.raises(CudaStickyError) as info:
        cudamem.synchronize()
    assert (info.value.code, info.value.call, info.value.device) == (
        700, "cuCtxSynchronize", 0)
    assert cudamem.context_is_poisoned()
    assert _calls(sim)["cuCtxSynchronize"] == before["cuCtxSynchronize"] + 1


def _operations():
    host = np.arange(16, dtype=np.float32)
    ary = cudamem.to_device(host)
    s = cudamem.stream()
    ev = cudamem.event()
    return [
        ("device_array", lambda: cudamem.device_array(8)),
        ("to_device", lambda: cudamem.to_device(host)),
        ("copy_to_host", lambda: ary.copy_to_host()),
        ("copy_to_device", lambda: ary.copy_to_device(host)),
        ("fill", lambda: ary[:4].copy_to_device(host[:4], stream=s)),
        ("stream", lambda: cudamem.stream()),
        ("stream.synchronize", lambda: s.synchronize()),
        ("stream.query", lambda: s.query()),
        ("event.record", lambda: ev.record(s)),
        ("synchronize", cudamem.synchronize),
        ("get_memory_info",
         lambda: cudamem.current_context().get_memory_info()),
        ("pinned_array", lambda: cudamem.pinned_array(4)),
        ("mapped_array", lambda: cudamem.mapped_array(4)),
        ("managed_array", lambda: cudamem.managed_array(4)),
        ("getitem", lambda: ary[3]),
    ]


def test_fails_fast_without_the_driver(sim, recover):
    ops = _operations()
    first = _poison(sim)
    for name, op in ops:
        before = _calls(sim)
        with pytest.raises(CudaStickyError) as info:
            op()
        exc = info.value
        assert (exc.code, exc.call, exc.device) == (700, "cuMemAlloc", 0), \
            name
        assert str(exc) == str(first), name
        # No call that works in the context.
        assert _driver_calls_between(sim, before) <= CONTEXT_FREE, name
    del ops
    gc.collect()


def test_finalizers_are_quiet(sim, recover):
    ary = cudamem.device_array(64)
    s = cudamem.stream()
    ev = cudamem.event()
    pinned = cudamem.pinned_array(8)
    _poison(sim)
    before = _calls(sim)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del ary, s, ev, pinned
        gc.collect()
        cudamem._cudamem._flush_pending()
    # The frees are dropped: they would fail in the poisoned context.
    assert not {"cuMemFree", "cuStreamDestroy", "cuEventDestroy",
                "cuMemFreeHost"} & _driver_calls_between(sim, before)


def test_reset_keeps_the_error_the_driver_keeps(sim, recover):
    """The driver answers the reset's new context with the sticky error:
    reset() raises the first one, and the device stays poisoned."""
    first = _poison(sim)
    with pytest.raises(CudaStickyError) as info:
        cudamem.get_current_device().reset()
    assert str(info.value) == str(first)
    assert cudamem.context_is_poisoned()
    with pytest.raises(CudaStickyError) as info:
        cudamem.device_array(4)
    assert str(info.value) == str(first)


def test_reset_clears_when_the_driver_gives_a_usable_context(sim):
    old = cudamem.to_device(np.arange(4))
    _poison(sim)
    sim.reset()  # the device's sticky error gone, as in a new process
    cudamem.get_current_device().reset()
    assert not cudamem.context_is_poisoned()
    with pytest.raises(CudaDriverError):
        old.copy_to_host()
    new = cudamem.to_device(np.arange(5))
    np.testing.assert_array_equal(new.copy_to_host(), np.arange(5))


def test_error_pickles_with_its_device():
    exc = CudaStickyError(700, "cuMemcpyDtoH", "CUDA_ERROR_ILLEGAL_ADDRESS",
                          3)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is CudaStickyError
    assert back.device == 3 and str(back) == str(exc)
    assert "device 3 is " + RESTART in str(back)
    assert "the CUDA context is " + RESTART in str(
        CudaStickyError(719, "cuCtxSynchronize"))


# In a fresh interpreter: what the driver does (the reset's first call in
# the new context fails again), then exit with everything still alive.
DRIVER_KEEPS_IT = """
    import gc, warnings
    import numpy as np
    import cudamem
    from cudamem import simulator
    from cudamem.errors import CudaStickyError
    warnings.simplefilter("error")

    ary = cudamem.to_device(np.arange(1024, dtype=np.float64))
    view = ary[::2]
    s = cudamem.stream()
    ev = cudamem.event()
    ev.record(s)
    pinned = cudamem.pinned_array(64)
    mapped = cudamem.mapped_array(64)
    managed = cudamem.managed_array(64)
    gone = cudamem.device_array(256)
    del gone  # a pending free
    s.add_callback(lambda st, status, arg: None)
    with cudamem.defer_cleanup():
        simulator.inject("cuMemcpyDtoH", "CUDA_ERROR_ILLEGAL_ADDRESS")
        try:
            ary.copy_to_host()
        except CudaStickyError as exc:
            print(exc.call, exc.device)
    assert cudamem.context_is_poisoned()
    # The driver answers the new context with the same error.
    try:
        cudamem.get_current_device().reset()
    except CudaStickyError as exc:
        print("reset", exc.call)
    print(cudamem.context_is_poisoned())
    try:
        cudamem.device_array(4)
    except CudaStickyError as exc:
        print("later", exc.call)
    %s
"""


@pytest.mark.parametrize("ending", ["", "cudamem.close()",
                                    "del ary, view, s, ev; gc.collect()"])
def test_driver_keeps_the_error_and_exit_is_clean(run_py, ending):
    proc = run_py(DRIVER_KEEPS_IT % ending)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == [
        "cuMemcpyDtoH 0", "reset cuMemcpyDtoH", "True",
        "later cuMemcpyDtoH"]


def test_other_devices_stay_usable(run_py):
    proc = run_py("""
        import numpy as np
        import cudamem
        from cudamem import simulator
        from cudamem.errors import CudaStickyError
        cudamem.select_device(1)
        simulator.inject("cuMemAlloc", "CUDA_ERROR_ILLEGAL_ADDRESS")
        try:
            cudamem.device_array(4)
        except CudaStickyError as exc:
            print(exc.device)
        print(cudamem.context_is_poisoned(), cudamem.context_is_poisoned(0),
              cudamem.context_is_poisoned(1))
        cudamem.select_device(0)
        print(cudamem.to_device(np.arange(3)).copy_to_host().sum())
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == ["1", "True False True", "3"]


def test_context_is_poisoned_bad_input():
    with pytest.raises(TypeError, match="'str'|str"):
        cudamem.context_is_poisoned("0")
    with pytest.raises(ValueError, match="ordinal 7"):
        cudamem.context_is_poisoned(7)
