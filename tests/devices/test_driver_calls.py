"""The driver calls of cudamem's small operations, counted by the simulator: at
most one question about the current context per operation (none for a call on a
handle that names its own context: cuEventQuery, cuStreamDestroy, cuMemFree,
cuMemHostUnregister, nor for a CAI import, whose pointer names its device), no
push or pop when the context is current, and synchronize() on an idle
context probes it (cuCtxRecordEvent, cuEventQuery) instead of calling
cuCtxSynchronize. The current context is still asked for
anew by every operation: another library's push between two of cudamem's
calls moves the next one to that context's device."""
import gc

import numpy as np
import pytest

import cudamem

pytestmark = pytest.mark.simulator

N = 20


def _per_call(sim, fn):
    """{entry point: calls per call of fn}, over N calls after a warm-up;
    what the calls return lives until after the count (frees are queued
    and flushed in batches: test_destroy_asks_nothing counts them)."""
    out = [fn()]
    gc.collect()
    before = sim.stats()["calls"]
    for _ in range(N):
        out.append(fn())
    after = sim.stats()["calls"]
    del out
    return {k: (after[k]["calls"] - before.get(k, {"calls": 0})["calls"]) / N
            for k in after
            if after[k]["calls"] != before.get(k, {"calls": 0})["calls"]}


class Holder:
    def __init__(self, d):
        self.__cuda_array_interface__ = d.__cuda_array_interface__


def _operation(op, keep):
    """(the call, the driver calls it makes besides cuCtxGetCurrent); what
    it uses goes into keep."""
    if op == "device_array":
        return (lambda: cudamem.device_array(8, np.uint8),
                {"cuMemAlloc": 1})
    if op == "to_device":
        keep.append(np.arange(8, dtype=np.uint8))
        # A pageable copy is complete on return (DESIGN rule 9): the
        # driver's own may return before the bytes land.
        return (lambda: cudamem.to_device(keep[0]),
                {"cuMemAlloc": 1, "cuMemcpyHtoD": 1,
                 "cuStreamSynchronize": 1})
    if op == "stream":
        return cudamem.stream, {"cuStreamCreate": 1}
    if op == "as_cuda_array":
        keep.append(Holder(cudamem.device_array(64, np.uint8)))
        return (lambda: cudamem.as_cuda_array(keep[0]),
                {"cuPointerGetAttributes": 1})
    if op == "synchronize":
        return cudamem.synchronize, {"cuCtxRecordEvent": 1,
                                     "cuEventQuery": 1}
    keep += [cudamem.stream(), cudamem.event(timing=False)]
    if op == "event.record":
        return lambda: keep[1].record(keep[0]), {"cuEventRecord": 1}
    return keep[1].query, {"cuEventQuery": 1}


# Questions per call: one per operation on the current context, none for
# a call on a handle.
QUESTIONS = {"device_array": 1, "to_device": 1, "stream": 1,
             "event.record": 1, "event.query": 0, "as_cuda_array": 0,
             "synchronize": 1}


@pytest.mark.parametrize("op", sorted(QUESTIONS))
def test_driver_calls_per_operation(sim, op):
    keep = []
    fn, calls = _operation(op, keep)
    made = _per_call(sim, fn)
    del fn, keep
    questions = made.pop("cuCtxGetCurrent", 0)
    assert made == calls
    assert questions == QUESTIONS[op]



@pytest.mark.parametrize("make, destroy", [
    (cudamem.stream, "cuStreamDestroy"),
    (lambda: cudamem.device_array(8), "cuMemFree"),
    (lambda: cudamem.managed_array(8), "cuMemFree"),
    (lambda: cudamem.mapped_array(8, wc=True), "cuMemFreeHost"),
    (lambda: cudamem.pinned_array(8), "cuMemHostUnregister"),
], ids=["stream", "device", "managed", "write-combined", "pinned"])
def test_destroy_asks_nothing(sim, make, destroy):
    """A stream's destroy and a free (queued, then flushed in a batch) need
    no context of theirs current (tests/gpu/driver_facts.py, on an H100):
    no question, no push."""
    made_ = [make() for _ in range(3 * N)]
    cudamem._cudamem._flush_pending()
    before = sim.stats()["calls"]
    del made_
    gc.collect()
    cudamem._cudamem._flush_pending()
    after = sim.stats()["calls"]
    made = {k: after[k]["calls"] - before.get(k, {"calls": 0})["calls"]
            for k in after
            if after[k]["calls"] != before.get(k, {"calls": 0})["calls"]}
    assert made.get(destroy, 0) == 3 * N
    assert set(made) - {"cuDevicePrimaryCtxRelease"} == {destroy}


SCRIPT = """
import numpy as np, cudamem
from cudamem import simulator
from tests.helpers.simref import SimDriver

drv = SimDriver(simulator.library_path())

def device_of(a):
    return a.gpu_data.context.device.id

host = np.arange(6.0)
a = cudamem.to_device(host)
assert device_of(a) == 0
# Another library makes device 1's primary context current between two
# of cudamem's calls: the next ones see it.
other = drv.retain_primary(1)
drv.push(other)
b = cudamem.to_device(host)
c = cudamem.device_array(4)
s = cudamem.stream()
assert (device_of(b), device_of(c)) == (1, 1)
assert s.context.device.id == 1
assert cudamem.get_current_device().id == 1
np.testing.assert_array_equal(b.copy_to_host(), host)
cudamem.synchronize()
assert drv.current() == other
del b, c, s
cudamem.current_context().deallocations.clear()
assert drv.pop() == other
d = cudamem.device_array(4)
assert device_of(d) == 0
del a, d
drv.release_primary(1)
print("ok")
"""


def test_another_librarys_push_between_calls_is_seen(run_py):
    proc = run_py(SCRIPT, env={"CUDAMEM_SIM_DEVICES": "2"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
