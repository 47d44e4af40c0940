"""DESIGN rule 7 checked at the driver: every call that can wait for the
device (or for the operating system's page locking) is made without the
GIL, so that other Python threads run meanwhile, over the operations that
make them. The reference is the simulator's probe_gil(), which asks
CPython's PyGILState_Check at every entry point (its own test checks it
against ctypes' PyDLL and CDLL)."""
import gc

import numpy as np
import pytest

import cudamem

pytestmark = pytest.mark.simulator

# Calls that can wait: for the device (synchronous copies, memsets and
# synchronizes; cuMemAlloc and cuMemFree, which may synchronize), or for
# the system (page locking, context creation and release). Not
# cuCtxSynchronize: synchronize() on an idle context makes it holding the
# GIL once the idle probe found nothing running (DESIGN rule 7).
WAITS = {
    "cuMemAlloc", "cuMemFree", "cuMemAllocManaged", "cuMemHostRegister",
    "cuMemHostUnregister", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD",
    "cuMemsetD32", "cuStreamSynchronize", "cuEventSynchronize",
    "cuStreamDestroy", "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease",
}


def _operations():
    h = np.arange(1 << 16, dtype=np.float64)
    d = cudamem.to_device(h)
    out = d.copy_to_host()
    d.copy_to_host(out)
    d2 = cudamem.device_array_like(d)
    d2.copy_to_device(d)
    d2[:] = 0
    s = cudamem.stream()
    d.copy_to_host(out, stream=s)
    s.synchronize()
    e = cudamem.event()
    e.record(s)
    e.synchronize()
    p = cudamem.pinned_array(1000)
    d3 = cudamem.to_device(p)
    d3.copy_to_host(p)
    with cudamem.pinned(out):
        pass
    m = cudamem.mapped_array(100)
    mm = cudamem.managed_array(100)
    del d, d2, d3, p, m, mm, s, e
    # Frees queued past numba's count threshold (10) flush from a
    # finalizer.
    for _ in range(30):
        cudamem.device_array(8)
    gc.collect()
    ctx = cudamem.current_context()
    ctx.memory_manager.deallocations.clear()
    ctx.deallocations.clear()
    cudamem.synchronize()
    ctx.reset()


def test_calls_that_can_wait_are_made_without_the_gil(sim):
    cudamem.device_array(8)
    sim.reset()
    with sim.probe_gil():
        _operations()
    calls = sim.stats()["calls"]
    made = {name for name in WAITS if calls[name]["calls"]}
    # Every one of them was reached: the check cannot pass by missing it.
    assert made == WAITS
    held = {name: calls[name] for name in WAITS if calls[name]["gil"]}
    assert held == {}
    # The probe saw the GIL where it is kept: quick calls (no wait).
    assert calls["cuStreamCreate"]["gil"] == calls["cuStreamCreate"]["calls"]


def test_frees_inside_a_release_flush_once_at_the_outermost_end(sim):
    # An EMM plugin's finalizer runs inside the release of its memory, and
    # the cudamem arrays it frees open release sections inside that one:
    # the queue they fill past numba's count (10) is flushed when the
    # outermost section ends, without the GIL, not inside the finalizer.
    ctx = cudamem.current_context()
    ctx.deallocations.clear()
    arrays = [cudamem.device_array(8) for _ in range(30)]
    inside = []

    def finalizer():
        arrays.clear()
        inside.append(sim.stats()["calls"]["cuMemFree"]["calls"])

    mp = cudamem.MemoryPointer(ctx, 0x1000, 64, finalizer=finalizer)
    sim.reset()
    with sim.probe_gil():
        del mp
    frees = sim.stats()["calls"]["cuMemFree"]
    assert inside == [0]
    assert frees == {**frees, "calls": 30, "gil": 0}
    assert len(ctx.deallocations) == 0
