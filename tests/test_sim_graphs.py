"""The simulated driver's stream capture and graphs against the CUDA driver
documentation (cuStreamBeginCapture, cuStreamEndCapture,
cuStreamIsCapturing, cuGraphInstantiate, cuGraphLaunch, cuGraphExecDestroy,
cuGraphDestroy), driven through ctypes as cuda.core's graph builder drives
them: captured work is recorded, not run, and runs in order each time the
executable graph is launched. Each case runs in a fresh process."""
import textwrap

import pytest

from tests.test_sim_entries import run_entries

pytestmark = pytest.mark.simulator

INVALID_VALUE, NOT_SUPPORTED, ILLEGAL_STATE = 1, 801, 401
CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED = 900, 901
CAPTURE_MERGE, CAPTURE_UNMATCHED, CAPTURE_ISOLATION = 902, 903, 905
CAPTURE_IMPLICIT, CAPTURED_EVENT, WRONG_THREAD = 906, 907, 908

GRAPHS = """
GLOBAL, THREAD_LOCAL, RELAXED = 0, 1, 2
HOSTFN = ctypes.CFUNCTYPE(None, c_void_p)


def capturing(s):
    st = ctypes.c_int(-1)
    rc = lib.cuStreamIsCapturing(s, byref(st))
    return st.value if rc == 0 else "rc%d" % rc


def end(s):
    g = c_void_p(1)
    rc = lib.cuStreamEndCapture(s, byref(g))
    return rc, g


def instantiate(g):
    e = c_void_p()
    ok(lib.cuGraphInstantiateWithFlags(byref(e), g, c_uint64(0)),
       "cuGraphInstantiate")
    return e


def pinned(n):
    p = c_void_p()
    ok(lib.cuMemAllocHost_v2(byref(p), c_size_t(n)), "cuMemAllocHost")
    return p
"""


def run_graphs(run_py, body, env=None):
    return run_entries(run_py, GRAPHS + textwrap.dedent(body), env=env)


def test_captured_work_runs_at_each_launch_in_order(run_py):
    out = run_graphs(run_py, """
        N = 256
        src, dst = pinned(N), pinned(N)
        d = c_uint64(dalloc(N))
        ctypes.memset(src, 7, N)
        ctypes.memset(dst, 0, N)
        calls = []
        note = HOSTFN(lambda _: calls.append(ctypes.string_at(dst, 4)))
        s = stream()
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        show(capturing(s))
        ok(lib.cuMemcpyHtoDAsync_v2(d, src, c_size_t(N), s), "h2d")
        ok(lib.cuMemsetD8Async(c_uint64(d.value + 1), 9, c_size_t(2), s),
           "memset")
        ok(lib.cuMemcpyDtoHAsync_v2(dst, d, c_size_t(N), s), "d2h")
        ok(lib.cuLaunchHostFunc(s, note, None), "host fn")
        # Recorded, not run: nothing moved and the stream is idle.
        show(ctypes.string_at(dst, 4) == bytes(4), calls)
        rc, g = end(s)
        show(rc, g.value is not None, capturing(s))
        e = instantiate(g)
        ok(lib.cuGraphDestroy(g), "graph destroy")  # the exec stays valid
        ok(lib.cuGraphLaunch(e, s), "launch")
        ok(lib.cuStreamSynchronize(s), "sync")
        show(list(ctypes.string_at(dst, 4)), calls)
        # Each launch runs it again: new input, new output.
        ctypes.memset(src, 1, N)
        other = stream()
        ok(lib.cuGraphLaunch(e, other), "launch 2")
        ok(lib.cuStreamSynchronize(other), "sync")
        show(list(ctypes.string_at(dst, 4)), len(calls))
        ok(lib.cuGraphExecDestroy(e), "exec destroy")
        show(lib.cuGraphExecDestroy(e), lib.cuGraphLaunch(e, s),
             lib.cuGraphDestroy(g))
        ok(lib.cuMemFree_v2(d), "free")
        ok(lib.cuMemFreeHost(src), "free")
        ok(lib.cuMemFreeHost(dst), "free")
    """)
    assert out == ["1", "True []", "0 True 0",
                   "[7, 9, 9, 7] [b'\\x07\\t\\t\\x07']",
                   "[1, 9, 9, 1] 2",
                   "%d %d %d" % ((INVALID_VALUE,) * 3)]


def test_launches_are_ordered_on_the_launch_stream(run_py):
    out = run_graphs(run_py, """
        N = 64
        out = pinned(N)
        d = c_uint64(dalloc(N))
        s = stream()
        ok(lib.cuStreamBeginCapture_v2(s, RELAXED), "begin")
        ok(lib.cuMemsetD8Async(d, 5, c_size_t(N), s), "memset")
        rc, g = end(s)
        e = instantiate(g)
        # Work before the launch runs before it, work after it after it.
        simulator.set_delay_us(30000)
        ok(lib.cuMemsetD8Async(d, 1, c_size_t(N), s), "before")
        ok(lib.cuGraphLaunch(e, s), "launch")
        ok(lib.cuMemcpyDtoHAsync_v2(out, d, c_size_t(N), s), "after")
        ok(lib.cuStreamSynchronize(s), "sync")
        show(set(ctypes.string_at(out, N)))
        simulator.set_delay_us(0)
        ok(lib.cuGraphExecDestroy(e), "exec")
        ok(lib.cuGraphDestroy(g), "graph")
        ok(lib.cuMemFree_v2(d), "free")
        ok(lib.cuMemFreeHost(out), "free")
    """)
    assert out == ["{5}"]


def test_launches_of_one_graph_follow_each_other(run_py):
    out = run_graphs(run_py, """
        N = 4096
        out = pinned(N)
        d = c_uint64(dalloc(N))
        ctypes.memset(out, 0, N)
        s1, s2 = stream(), stream()
        ok(lib.cuStreamBeginCapture_v2(s1, GLOBAL), "begin")
        ok(lib.cuMemsetD8Async(d, 4, c_size_t(N), s1), "memset")
        ok(lib.cuMemcpyDtoHAsync_v2(out, d, c_size_t(N), s1), "d2h")
        rc, g = end(s1)
        e = instantiate(g)
        # "Each launch is ordered behind ... any previous launches of
        # hGraphExec": two streams, no event, and no race between them.
        simulator.set_hazards(True)
        simulator.set_delay_us(20000)
        ok(lib.cuGraphLaunch(e, s1), "launch 1")
        ok(lib.cuGraphLaunch(e, s2), "launch 2")
        ok(lib.cuStreamSynchronize(s2), "sync")
        show(lib.cuStreamQuery(s1), simulator.hazard_count(),
             set(ctypes.string_at(out, N)))
        simulator.set_delay_us(0)
        ok(lib.cuGraphExecDestroy(e), "exec")
        ok(lib.cuGraphDestroy(g), "graph")
        ok(lib.cuMemFree_v2(d), "free")
        ok(lib.cuMemFreeHost(out), "free")
    """)
    assert out == ["0 0 {4}"]


def test_what_capture_refuses(run_py):
    out = run_graphs(run_py, """
        N = 64
        d = c_uint64(dalloc(N))
        host = (ctypes.c_ubyte * N)()
        s = stream()
        # The legacy stream cannot be captured; bad modes.
        show(lib.cuStreamBeginCapture_v2(None, GLOBAL),
             lib.cuStreamBeginCapture_v2(c_void_p(1), GLOBAL),
             lib.cuStreamBeginCapture_v2(s, 7))
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        show(lib.cuStreamBeginCapture_v2(s, GLOBAL))
        # Synchronizing with the capture invalidates it.
        show(lib.cuStreamSynchronize(s), capturing(s))
        show(lib.cuMemsetD8Async(d, 1, c_size_t(N), s))
        rc, g = end(s)
        show(rc, g.value, capturing(s))
        # Pageable memory and the legacy stream's implicit wait.
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        show(lib.cuMemcpyHtoDAsync_v2(d, host, c_size_t(N), s), capturing(s))
        show(end(s)[0])
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        show(lib.cuMemsetD8_v2(d, 1, c_size_t(N)), capturing(None),
             capturing(s))
        show(end(s)[0])
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        show(lib.cuCtxSynchronize(), lib.cuStreamQuery(s))
        show(end(s)[0])
        # cuStreamAddCallback cannot be captured (cuLaunchHostFunc can).
        CB = ctypes.CFUNCTYPE(None, c_void_p, ctypes.c_int, c_void_p)
        cb = CB(lambda *a: None)
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        show(lib.cuStreamAddCallback(s, cb, None, 0), end(s)[0])
        # Memory nodes are not modelled; the allocation is not made.
        p = c_uint64()
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        show(lib.cuMemAllocAsync(byref(p), c_size_t(N), s), end(s)[0],
             simulator.live()["device_allocations"])
        # A non-blocking stream does not sync with the legacy stream.
        nb = stream(1)
        ok(lib.cuStreamBeginCapture_v2(nb, GLOBAL), "begin")
        ok(lib.cuMemsetD8_v2(d, 1, c_size_t(N)), "legacy memset")
        ok(lib.cuMemsetD8Async(d, 2, c_size_t(N), nb), "captured")
        rc, g = end(nb)
        show(rc, capturing(nb), end(nb)[0])
        ok(lib.cuGraphDestroy(g), "destroy")
        # Ending from another thread: not in GLOBAL / THREAD_LOCAL mode.
        import threading
        for mode in (THREAD_LOCAL, RELAXED):
            ok(lib.cuStreamBeginCapture_v2(s, mode), "begin")
            res = []

            def other():
                ok(lib.cuCtxSetCurrent(ctx0), "set")
                res.append(end(s))
            t = threading.Thread(target=other)
            t.start()
            t.join()
            show(res[0][0])
            if res[0][0] == 0:
                ok(lib.cuGraphDestroy(res[0][1]), "destroy")
            else:
                rc, g = end(s)
                ok(lib.cuGraphDestroy(g), "destroy")
        show(simulator.live()["device_allocations"])
        ok(lib.cuStreamSynchronize(None), "sync")
        ok(lib.cuMemFree_v2(d), "free")
    """)
    assert out == [
        "%d %d %d" % (CAPTURE_UNSUPPORTED, CAPTURE_UNSUPPORTED, INVALID_VALUE),
        str(ILLEGAL_STATE),
        "%d 2" % CAPTURE_UNSUPPORTED,
        str(CAPTURE_INVALIDATED),
        "%d None 0" % CAPTURE_INVALIDATED,
        "%d 2" % CAPTURE_UNSUPPORTED, str(CAPTURE_INVALIDATED),
        "%d rc%d 2" % (CAPTURE_IMPLICIT, CAPTURE_IMPLICIT),
        str(CAPTURE_INVALIDATED),
        "%d %d" % (CAPTURE_UNSUPPORTED, CAPTURE_UNSUPPORTED),
        str(CAPTURE_INVALIDATED),
        "%d %d" % (CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED),
        "%d %d 1" % (CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED),
        "0 0 %d" % ILLEGAL_STATE,
        str(WRONG_THREAD), "0",
        "1"]


def test_events_in_capture(run_py):
    out = run_graphs(run_py, """
        N = 64
        d = c_uint64(dalloc(N))
        s = stream()
        inside, outside, ext = c_void_p(), c_void_p(), c_void_p()
        for ev in (inside, outside, ext):
            ok(lib.cuEventCreate(byref(ev), 0), "event")
        ok(lib.cuEventRecord(outside, s), "record outside")
        ok(lib.cuStreamSynchronize(s), "sync")
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        ok(lib.cuMemsetD8Async(d, 3, c_size_t(N), s), "memset")
        # A record in capture stands for captured work: the event cannot
        # be asked about, and waiting for it in the capture is in order.
        ok(lib.cuEventRecord(inside, s), "record inside")
        ms = ctypes.c_float()
        show(lib.cuEventQuery(inside), lib.cuEventSynchronize(inside),
             lib.cuEventElapsedTime_v2(byref(ms), outside, inside),
             lib.cuStreamWaitEvent(s, inside, 0))
        # Waiting for it forks another stream into the capture; with no
        # work of its own there is nothing for it to join back.
        other = stream()
        show(lib.cuStreamWaitEvent(other, inside, 0), capturing(other))
        # An external record is a node of the graph.
        ok(lib.cuEventRecordWithFlags(ext, s, 1), "external")
        rc, g = end(s)
        show(rc, capturing(other))
        e = instantiate(g)
        simulator.set_delay_us(30000)
        ok(lib.cuGraphLaunch(e, s), "launch")
        show(lib.cuEventQuery(ext))
        ok(lib.cuEventSynchronize(ext), "sync ext")
        show(lib.cuEventQuery(ext))
        simulator.set_delay_us(0)
        # Waiting for work outside the capture crosses its boundary.
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        show(lib.cuStreamWaitEvent(s, outside, 0), end(s)[0])
        ok(lib.cuGraphExecDestroy(e), "exec")
        ok(lib.cuGraphDestroy(g), "graph")
        for ev in (inside, outside, ext):
            ok(lib.cuEventDestroy_v2(ev), "destroy")
        ok(lib.cuMemFree_v2(d), "free")
    """)
    assert out == ["%d %d %d 0" % ((CAPTURED_EVENT,) * 3),
                   "0 1", "0 0", str(600), "0",
                   "%d %d" % (CAPTURE_ISOLATION, CAPTURE_INVALIDATED)]


def test_graph_entries_found_counted_and_faulted(run_py):
    out = run_graphs(run_py, """
        names = ["cuStreamBeginCapture", "cuStreamEndCapture",
                 "cuStreamIsCapturing", "cuGraphCreate", "cuGraphDestroy",
                 "cuGraphInstantiate", "cuGraphInstantiateWithFlags",
                 "cuGraphExecDestroy", "cuGraphLaunch"]
        status = ctypes.c_int()
        found = []
        for name in names:
            pfn = c_void_p()
            ok(lib.cuGetProcAddress_v2(name.encode(), byref(pfn), 13000,
                                       c_uint64(0), byref(status)), name)
            found.append(pfn.value is not None and status.value == 0)
        show(all(found))
        g = c_void_p()
        ok(lib.cuGraphCreate(byref(g), 0), "create")
        show(lib.cuGraphCreate(byref(g), 1), lib.cuGraphCreate(None, 0))
        e = instantiate(g)   # an empty graph launches and does nothing
        ok(lib.cuGraphLaunch(e, None), "launch")
        simulator.reset()
        simulator.inject("cuGraphLaunch", "CUDA_ERROR_UNKNOWN")
        simulator.inject("cuStreamBeginCapture", "CUDA_ERROR_UNKNOWN")
        show(lib.cuGraphLaunch(e, None),
             lib.cuStreamBeginCapture_v2(stream(), GLOBAL))
        calls = simulator.stats()["calls"]
        show(calls["cuGraphLaunch"]["calls"],
             calls["cuStreamBeginCapture"]["calls"])
        ok(lib.cuGraphExecDestroy(e), "exec")
        ok(lib.cuGraphDestroy(g), "graph")
    """)
    assert out == ["True", "%d %d" % (INVALID_VALUE, INVALID_VALUE),
                   "999 999", "1 1"]
