"""Work across two devices ordered like work on one: every copy and export path
between device 0's and device 1's arrays, in both directions, with and without
peer access, under the simulator's stream delay and hazard checker, checked
against NumPy.

The source of each copy was last written on a stream of its own device
(blocking or non-blocking) whose work is still queued when the copy is
asked for: the copy must follow it whichever device issues the copy, and
a synchronous copy must be complete on return on both devices (the source
is overwritten at once afterwards). Each case runs in a fresh process
with CUDAMEM_SIM_DEVICES=2; the child asserts the data and that the
hazard checker reported nothing, and leaves no device memory behind.
"""
import pytest

from tests.helpers.run import run_python

pytestmark = pytest.mark.simulator


def _env(peer):
    return {"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None,
            "CUDAMEM_SIM_NO_PEER": None if peer else "1",
            "CUDAMEM_SIM_DELAY_US": "3000", "CUDAMEM_SIM_HAZARDS": "1"}


def _run(code, peer):
    proc = run_python(PRELUDE + code + EPILOGUE, env=_env(peer),
                      timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "ok", proc.stdout


PRELUDE = """
import copy
import gc
import numpy as np
import cudamem as cuda
from cudamem import simulator as sim

N = 1 << 15
HOST = np.arange(N, dtype=np.float64)
EXPECT = HOST.copy()
EXPECT[: N // 2] = 7.0


def check(what, got, want):
    assert np.array_equal(got, want), (what, got[:4], want[:4])
    assert sim.hazard_count() == 0, (what, sim.last_hazard())


def written(dev, non_blocking):
    # An array of device `dev` whose last two writes are still queued on
    # a stream of that device when this returns.
    with cuda.gpus[dev]:
        s = cuda.stream(non_blocking=non_blocking)
        src = cuda.to_device(HOST, stream=s)
        src[: N // 2] = 7.0
    return src, s


def dest_stream(dev, on_stream):
    if not on_stream:
        return 0
    with cuda.gpus[dev]:
        return cuda.stream()


def finish(t):
    if t != 0:
        t.synchronize()


class Foreign:
    # Another library's array: only the CUDA Array Interface.
    def __init__(self, owner):
        self.owner = owner

    @property
    def __cuda_array_interface__(self):
        return self.owner.__cuda_array_interface__


def overwrite(src, s):
    # A synchronous copy is complete on return: the source may be
    # written at once (on its own stream) without touching the result.
    src[:] = -1.0
    s.synchronize()
"""

EPILOGUE = """
gc.collect()
cuda.close()
live = sim.live()
assert live["device_allocations"] == 0, live
print("ok")
"""

# Each path copies `src` (device a) to device b on `t` (0 or a stream of
# device b) and returns the result; `expect` is what it must hold.
PATHS = {
    "to_device": """
def path(src, a, b, t):
    with cuda.gpus[b]:
        return cuda.to_device(src, stream=t), EXPECT
""",
    "copy_to_device": """
def path(src, a, b, t):
    with cuda.gpus[b]:
        dst = cuda.device_array(N)
    dst.copy_to_device(src, stream=t)
    return dst, EXPECT
""",
    "assignment": """
def path(src, a, b, t):
    with cuda.gpus[b]:
        dst = cuda.device_array(N, stream=t)
    dst[:] = src
    return dst, EXPECT
""",
    # Both sides strided: C-ordered temporaries on either device.
    "strided assignment": """
def path(src, a, b, t):
    with cuda.gpus[b]:
        dst = cuda.to_device(np.zeros(N), stream=t)
    dst[::2] = src[1::2]
    want = np.zeros(N)
    want[::2] = EXPECT[1::2]
    return dst, want
""",
    "from_dlpack": """
def path(src, a, b, t):
    return (cuda.from_dlpack(src, device=b, stream=None if t == 0 else t),
            EXPECT)
""",
    "CAI import": """
def path(src, a, b, t):
    with cuda.gpus[b]:
        return cuda.to_device(Foreign(src), stream=t), EXPECT
""",
    # The host reads the source (on its stream) with device b current: the
    # copy is the source's own device's.
    "copy_to_host": """
def path(src, a, b, t):
    with cuda.gpus[b]:
        got = src.copy_to_host()
        return cuda.to_device(got, stream=t), EXPECT
""",
    "np.asarray": """
def path(src, a, b, t):
    with cuda.gpus[b]:
        got = np.asarray(src)
        return cuda.to_device(got, stream=t), EXPECT
""",
}

CASES = """
for a, b in ((0, 1), (1, 0)):
    for non_blocking in (False, True):
        for on_stream in (False, True):
            what = (a, b, non_blocking, on_stream)
            src, s = written(a, non_blocking)
            t = dest_stream(b, on_stream)
            out, want = path(src, a, b, t)
            assert out.gpu_data.context.device.id == b, (what, out.gpu_data)
            if t == 0:
                overwrite(src, s)
            finish(t)
            check(what, out.copy_to_host(), want)
            del src, s, t, out
"""


@pytest.mark.parametrize("peer", [True, False], ids=["peer", "no-peer"])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_copy_follows_the_source_stream(path, peer):
    _run(PATHS[path] + CASES, peer)


@pytest.mark.parametrize("peer", [True, False], ids=["peer", "no-peer"])
def test_destination_work_is_followed(peer):
    """A copy into an array with work still queued on a non-blocking
    stream of its device (which stream 0 does not wait for) follows that
    work: cudamem remembers it, and the cross-device copy honours it."""
    _run("""
for a, b in ((0, 1), (1, 0)):
    src, s = written(a, False)
    s.synchronize()
    with cuda.gpus[b]:
        u = cuda.stream(non_blocking=True)
        dst = cuda.to_device(np.zeros(N), stream=u)
        dst[:] = 5.0
    dst.bind(0).copy_to_device(src)
    check((a, b), dst.bind(0).copy_to_host(), EXPECT)
    del src, s, u, dst
""", peer)


def test_cross_device_export_of_the_destination():
    """The destination of an asynchronous copy across devices exports its
    stream, after which a consumer reading on that stream (here the CAI
    import's wait and a DLPack import on the same device) sees the copy."""
    _run("""
for a, b in ((0, 1), (1, 0)):
    src, s = written(a, True)
    t = dest_stream(b, True)
    with cuda.gpus[b]:
        dst = cuda.device_array(N, stream=t)
    dst.copy_to_device(src)
    cai = dst.__cuda_array_interface__
    assert cai["stream"] == int(t), cai
    with cuda.gpus[b]:
        via_cai = cuda.as_cuda_array(Foreign(dst)).copy_to_host()
        via_dlpack = cuda.from_dlpack(dst).copy_to_host()
    check((a, b, "cai"), via_cai, EXPECT)
    check((a, b, "dlpack"), via_dlpack, EXPECT)
    t.synchronize()
    del src, s, t, dst
""", True)


@pytest.mark.parametrize("peer", [True, False], ids=["peer", "no-peer"])
def test_source_export_after_an_asynchronous_copy(peer):
    """An asynchronous copy to another device still reading its source: the
    source's CAI export (which a cross-device copy once broke) orders its
    stream after the copy, so that a write there once exported cannot reach the
    copy; further copies from the same source work and follow it too."""
    _run("""
for a, b in ((0, 1), (1, 0)):
    src, s = written(a, False)
    outs = []
    for i in range(3):
        t = dest_stream(b, True)
        with cuda.gpus[b]:
            dst = cuda.device_array(N, stream=t)
        dst.copy_to_device(src)
        outs.append((dst, t))
    cai = src.__cuda_array_interface__
    assert cai["stream"] == int(s), cai
    src[:] = -1.0
    for dst, t in outs:
        t.synchronize()
        check((a, b), dst.copy_to_host(), EXPECT)
    s.synchronize()
    check((a, b, "source"), src.copy_to_host(), np.full(N, -1.0))
    del src, s, outs, dst, t
""", peer)


@pytest.mark.parametrize("peer", [True, False], ids=["peer", "no-peer"])
def test_from_dlpack_on_a_stream_of_another_device(peer):
    """from_dlpack(d, device=1, stream=s1) of a device-0 array: the
    producer orders its work before its own device's stream, and the copy
    is queued on s1 (the result is bound to it) after that work."""
    _run("""
for a, b in ((0, 1), (1, 0)):
    src, s = written(a, False)
    with cuda.gpus[b]:
        t = cuda.stream()
    out = cuda.from_dlpack(src, device=b, stream=t)
    assert out.stream is t and out.gpu_data.context.device.id == b
    t.synchronize()
    check((a, b), out.copy_to_host(), EXPECT)
    # Without device=, the data's own device: a stream must be of it,
    # whichever device is current.
    with cuda.gpus[b]:
        try:
            cuda.from_dlpack(src, stream=t)
        except ValueError as exc:
            assert "belongs to device %d" % b in str(exc), exc
            assert "operation is on device %d" % a in str(exc), exc
        else:
            raise AssertionError("a stream of another device was taken")
    with cuda.gpus[a]:
        u = cuda.stream()
    with cuda.gpus[b]:
        view = cuda.from_dlpack(src, stream=u)
    assert view.stream is u and view.gpu_data.context.device.id == a
    u.synchronize()
    check((a, b, "view"), view.copy_to_host(), EXPECT)
    del src, s, t, out, u, view
""", peer)


def test_stream_waits_for_an_event_of_another_device():
    """s0.wait_event(e1) and e1.wait(s0), e1 on device 1: work queued on
    s0 afterwards runs only once e1's work is done (the simulator's delay
    keeps e1 pending otherwise), as cuStreamWaitEvent allows across
    contexts. Recording still needs a stream of the event's device."""
    _run("""
for a, b in ((0, 1), (1, 0)):
    for form in ("stream.wait_event", "event.wait"):
        with cuda.gpus[b]:
            s1 = cuda.stream()
            e1 = cuda.event(timing=False)
            d1 = cuda.device_array(N, stream=s1)
            for _ in range(8):
                d1[:] = 1.0
            e1.record(s1)
        with cuda.gpus[a]:
            s0 = cuda.stream()
            e0 = cuda.event(timing=False)
        if form == "stream.wait_event":
            s0.wait_event(e1)
        else:
            e1.wait(s0)
        e0.record(s0)
        e0.synchronize()
        assert e1.query(), (a, b, form)
        s1.synchronize()
        try:
            e0.record(s1)
        except ValueError as exc:
            assert "device %d" % b in str(exc), exc
        else:
            raise AssertionError("recorded on another device's stream")
        del s1, e1, d1, s0, e0
""", True)


def test_copy_and_deepcopy_keep_the_device():
    """copy.copy and copy.deepcopy of a device-1 array (and record) with
    device 0 current: a new array on device 1, bound to the same stream,
    with the same elements and layout, as .copy(); deepcopy's memo keeps
    one copy per array."""
    _run("""
host = np.asfortranarray(np.arange(12.0).reshape(3, 4))
rec_host = np.array([(1.5, 7)], dtype=[("a", "f8"), ("b", "i4")])[0]
with cuda.gpus[1]:
    s1 = cuda.stream()
    d1 = cuda.to_device(host, stream=s1)
    r1 = cuda.to_device(rec_host)
assert cuda.get_current_device().id == 0
for fn in (copy.copy, copy.deepcopy, lambda x: x.copy(order="K")):
    c = fn(d1)
    assert type(c) is cuda.DeviceNDArray and c.gpu_data.context.device.id == 1
    assert c.stream is s1 and c.strides == host.strides
    assert c.gpu_data.device_pointer_value != d1.gpu_data.device_pointer_value
    check(fn, c.copy_to_host(), host)
for fn in (copy.copy, copy.deepcopy):
    r = fn(r1)
    assert type(r) is cuda.DeviceRecord and r.gpu_data.context.device.id == 1
    assert r.copy_to_host() == rec_host
pair = copy.deepcopy([d1, d1])
assert pair[0] is pair[1] and pair[0] is not d1
check("memo", pair[0].copy_to_host(), host)
del d1, r1, c, r, pair, s1
""", True)
