"""The simulated driver's stream capture and graphs against the CUDA driver
documentation (cuStreamBeginCapture, cuStreamEndCapture,
cuStreamIsCapturing, cuStreamGetCaptureInfo,
cuStreamUpdateCaptureDependencies, cuGraphInstantiate, cuGraphLaunch,
cuGraphExecDestroy, cuGraphDestroy, the node and edge queries), driven
through ctypes as cuda.core's graph builder drives them: captured work is
recorded as graph nodes, not run; streams fork into a capture and join back
through events; the graph runs each node after its dependencies each time
it is launched. Each case runs in a fresh process."""
import textwrap

import pytest

from tests.helpers.simdriver import run_entries

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


def info(s):
    # cuStreamGetCaptureInfo_v3: status, id, graph, dependencies, and
    # whether their edge data is all default.
    st, cid, g = ctypes.c_int(-1), c_uint64(), c_void_p()
    deps, edges = ctypes.POINTER(c_void_p)(), ctypes.POINTER(EdgeData)()
    n = c_size_t(99)
    ok(lib.cuStreamGetCaptureInfo_v3(s, byref(st), byref(cid), byref(g),
                                     byref(deps), byref(edges), byref(n)),
       "capture info")
    nodes = [deps[i] for i in range(n.value)]
    plain = all(bytes(edges[i]) == bytes(ctypes.sizeof(EdgeData))
                for i in range(n.value))
    return st.value, cid.value, g.value, nodes, plain


class EdgeData(ctypes.Structure):
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte),
                ("type", ctypes.c_ubyte), ("reserved", ctypes.c_ubyte * 5)]


def node_list(fn, handle):
    # A node-list query, asked for the count first as clients do.
    n = c_size_t()
    ok(fn(handle, None, byref(n)), "count")
    arr = (c_void_p * (n.value + 1))(*([1] * (n.value + 1)))
    m = c_size_t(n.value + 1)
    ok(fn(handle, arr, byref(m)), "list")
    # One more slot than nodes: cleared, and the count says how many.
    assert m.value == n.value and arr[n.value] is None, (m, arr[n.value])
    return list(arr[:n.value])


def edges(g):
    n = c_size_t()
    ok(lib.cuGraphGetEdges_v2(g, None, None, None, byref(n)), "count")
    fr, to = (c_void_p * n.value)(), (c_void_p * n.value)()
    data = (EdgeData * n.value)()
    ok(lib.cuGraphGetEdges_v2(g, fr, to, data, byref(n)), "edges")
    return set(zip(fr, to))


def node_type(nd):
    t = ctypes.c_int(-1)
    ok(lib.cuGraphNodeGetType(c_void_p(nd), byref(t)), "type")
    return t.value


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
                 "cuStreamIsCapturing", "cuStreamGetCaptureInfo",
                 "cuStreamUpdateCaptureDependencies", "cuGraphCreate",
                 "cuGraphDestroy", "cuGraphInstantiate",
                 "cuGraphInstantiateWithFlags", "cuGraphExecDestroy",
                 "cuGraphLaunch", "cuGraphGetNodes", "cuGraphGetRootNodes",
                 "cuGraphGetEdges", "cuGraphNodeGetType",
                 "cuGraphNodeGetDependencies",
                 "cuGraphNodeGetDependentNodes",
                 "cuGraphInstantiateWithParams", "cuGraphUpload",
                 "cuUserObjectCreate", "cuUserObjectRetain",
                 "cuUserObjectRelease", "cuGraphRetainUserObject",
                 "cuGraphReleaseUserObject"]
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
        simulator.inject("cuStreamGetCaptureInfo", "CUDA_ERROR_UNKNOWN")
        simulator.inject("cuGraphGetNodes", "CUDA_ERROR_UNKNOWN")
        st, n = ctypes.c_int(), c_size_t()
        show(lib.cuGraphLaunch(e, None),
             lib.cuStreamBeginCapture_v2(stream(), GLOBAL),
             lib.cuStreamGetCaptureInfo_v3(None, byref(st), None, None, None,
                                           None, None),
             lib.cuGraphGetNodes(g, None, byref(n)))
        calls = simulator.stats()["calls"]
        show(calls["cuGraphLaunch"]["calls"],
             calls["cuStreamBeginCapture"]["calls"],
             calls["cuStreamGetCaptureInfo"]["calls"],
             calls["cuGraphGetNodes"]["calls"])
        ok(lib.cuGraphExecDestroy(e), "exec")
        ok(lib.cuGraphDestroy(g), "graph")
    """)
    assert out == ["True", "%d %d" % (INVALID_VALUE, INVALID_VALUE),
                   "999 999 999 999", "1 1 1 1"]


MEMCPY, MEMSET, HOST, EMPTY, EVENT_RECORD = 1, 2, 3, 5, 7
UNJOINED = 904


def test_fork_join_builds_a_graph_that_replays_in_order(run_py):
    out = run_graphs(run_py, """
        import numpy as np
        N = 4096
        x = np.arange(N, dtype=np.uint8) * 7
        src, out1, out2 = pinned(N), pinned(N), pinned(N)
        ctypes.memmove(src, x.ctypes.data, N)
        da, db, dc = (c_uint64(dalloc(N)) for _ in range(3))
        s0, s1 = stream(), stream()
        fork, join = c_void_p(), c_void_p()
        for ev in (fork, join):
            ok(lib.cuEventCreate(byref(ev), 2), "event")
        ok(lib.cuStreamBeginCapture_v2(s0, GLOBAL), "begin")
        st, cid, g, deps, plain = info(s0)
        show(st, deps, g is not None)
        ok(lib.cuMemcpyHtoDAsync_v2(da, src, c_size_t(N), s0), "A")
        A = info(s0)[3]
        # Fork: s1 joins the capture and depends on what s0 recorded.
        ok(lib.cuEventRecord(fork, s0), "record fork")
        ok(lib.cuStreamWaitEvent(s1, fork, 0), "wait fork")
        st1, cid1, g1, deps1, plain1 = info(s1)
        show(st1, cid1 == cid, g1 == g, deps1 == A, plain1)
        ok(lib.cuMemcpyDtoDAsync_v2(db, da, c_size_t(N), s1), "B")
        B = info(s1)[3]
        ok(lib.cuMemsetD8Async(dc, 9, c_size_t(N), s0), "C")
        C = info(s0)[3]
        # Join: s0 now depends on both branches.
        ok(lib.cuEventRecord(join, s1), "record join")
        ok(lib.cuStreamWaitEvent(s0, join, 0), "wait join")
        show(sorted(info(s0)[3]) == sorted(C + B))
        ok(lib.cuMemcpyDtoHAsync_v2(out1, db, c_size_t(N), s0), "D")
        D = info(s0)[3]
        ok(lib.cuMemcpyDtoHAsync_v2(out2, dc, c_size_t(N), s0), "E")
        E = info(s0)[3]
        rc, graph = end(s0)
        show(rc, graph.value == g, capturing(s1), info(s1)[0])
        # The graph holds those nodes and exactly the edges of the DAG.
        A, B, C, D, E = A[0], B[0], C[0], D[0], E[0]
        show(node_list(lib.cuGraphGetNodes, graph) == [A, B, C, D, E],
             node_list(lib.cuGraphGetRootNodes, graph) == [A],
             edges(graph) == {(A, B), (A, C), (B, D), (C, D), (D, E)})
        show([node_type(n) for n in (A, B, C, D, E)])
        show(sorted(node_list(lib.cuGraphNodeGetDependencies,
                              c_void_p(D))) == sorted([B, C]),
             sorted(node_list(lib.cuGraphNodeGetDependentNodes,
                              c_void_p(A))) == sorted([B, C]),
             node_list(lib.cuGraphNodeGetDependentNodes, c_void_p(E)))
        # Replayed: each node after its dependencies, nothing racing.
        e = instantiate(graph)
        simulator.set_hazards(True)
        simulator.set_delay_us(3000)
        for fill in (3, 5):
            ctypes.memset(out1, 0, N)
            ctypes.memset(out2, 0, N)
            x = (np.arange(N, dtype=np.uint8) * fill)
            ctypes.memmove(src, x.ctypes.data, N)
            ok(lib.cuGraphLaunch(e, s1), "launch")
            ok(lib.cuStreamSynchronize(s1), "sync")
            got1 = np.frombuffer(ctypes.string_at(out1, N), np.uint8)
            got2 = np.frombuffer(ctypes.string_at(out2, N), np.uint8)
            show(np.array_equal(got1, x),
                 np.array_equal(got2, np.full(N, 9, np.uint8)))
        show(simulator.hazard_count())
        simulator.set_delay_us(0)
        ok(lib.cuGraphExecDestroy(e), "exec")
        ok(lib.cuGraphDestroy(graph), "graph")
        # Node handles go with their graph.
        show(lib.cuGraphNodeGetType(c_void_p(A), byref(ctypes.c_int())))
        for ev in (fork, join):
            ok(lib.cuEventDestroy_v2(ev), "destroy")
        for p in (da, db, dc):
            ok(lib.cuMemFree_v2(p), "free")
        for p in (src, out1, out2):
            ok(lib.cuMemFreeHost(p), "free")
    """)
    assert out == ["1 [] True", "1 True True True True", "True",
                   "0 True 0 0", "True True True",
                   str([MEMCPY, MEMCPY, MEMSET, MEMCPY, MEMCPY]),
                   "True True []", "True True", "True True", "0",
                   str(INVALID_VALUE)]


def test_capture_join_rules(run_py):
    out = run_graphs(run_py, """
        N = 64
        d = c_uint64(dalloc(N))
        s0, s1, s2 = stream(), stream(), stream()
        ev, ev2 = c_void_p(), c_void_p()
        ok(lib.cuEventCreate(byref(ev), 2), "event")
        ok(lib.cuEventCreate(byref(ev2), 2), "event")

        def fork(origin, other, mode=GLOBAL):
            ok(lib.cuStreamBeginCapture_v2(origin, mode), "begin")
            ok(lib.cuEventRecord(ev, origin), "record")
            ok(lib.cuStreamWaitEvent(other, ev, 0), "fork")

        # Work on a forked stream that never joins back.
        fork(s0, s1)
        ok(lib.cuMemsetD8Async(d, 1, c_size_t(N), s1), "forked work")
        rc, g = end(s0)
        show(rc, g.value, capturing(s0), capturing(s1))
        # Only the origin stream ends the capture; asking elsewhere
        # invalidates it.
        fork(s0, s1)
        show(end(s1)[0], capturing(s0), capturing(s1))
        show(end(s0)[0], capturing(s1))
        # Joining through an event recorded after the forked work.
        fork(s0, s1)
        ok(lib.cuMemsetD8Async(d, 1, c_size_t(N), s1), "forked work")
        ok(lib.cuEventRecord(ev2, s1), "record")
        ok(lib.cuStreamWaitEvent(s0, ev2, 0), "join")
        rc, g = end(s0)
        show(rc, capturing(s1))
        ok(lib.cuGraphDestroy(g), "graph")
        # Two captures cannot merge: both are invalidated.
        ok(lib.cuStreamBeginCapture_v2(s0, GLOBAL), "begin")
        ok(lib.cuStreamBeginCapture_v2(s2, GLOBAL), "begin")
        ok(lib.cuEventRecord(ev, s0), "record")
        show(lib.cuStreamWaitEvent(s2, ev, 0), capturing(s0), capturing(s2))
        show(end(s0)[0], end(s2)[0])
        # A synchronous call on the legacy stream while a forked blocking
        # stream captures is an implicit dependency (GLOBAL mode).
        fork(s0, s1)
        show(lib.cuMemsetD8_v2(d, 1, c_size_t(N)), capturing(s1))
        show(end(s0)[0])
        # Synchronizing the forked stream invalidates the capture.
        fork(s0, s1, RELAXED)
        show(lib.cuStreamSynchronize(s1), capturing(s0))
        show(end(s0)[0])
        # The legacy stream cannot join a capture; the capture's graph is
        # the capture's until it ends.
        fork(s0, s1)
        show(lib.cuGraphDestroy(c_void_p(info(s0)[2])),
             lib.cuStreamWaitEvent(None, ev, 0), capturing(s0))
        show(end(s0)[0])
        # A stream destroyed after forking leaves the capture joinable.
        tmp = stream()
        fork(s0, tmp)
        ok(lib.cuStreamDestroy_v2(tmp), "destroy")
        rc, g = end(s0)
        show(rc)
        ok(lib.cuGraphDestroy(g), "graph")
        for e in (ev, ev2):
            ok(lib.cuEventDestroy_v2(e), "destroy")
        ok(lib.cuMemFree_v2(d), "free")
    """)
    assert out == ["%d None 0 0" % UNJOINED,
                   "%d 2 2" % CAPTURE_UNMATCHED,
                   "%d 0" % CAPTURE_INVALIDATED,
                   "0 0",
                   "%d 2 2" % CAPTURE_MERGE,
                   "%d %d" % (CAPTURE_INVALIDATED, CAPTURE_INVALIDATED),
                   "%d 2" % CAPTURE_IMPLICIT, str(CAPTURE_INVALIDATED),
                   "%d 2" % CAPTURE_UNSUPPORTED, str(CAPTURE_INVALIDATED),
                   "%d %d 2" % (ILLEGAL_STATE, CAPTURE_IMPLICIT),
                   str(CAPTURE_INVALIDATED),
                   "0"]


def test_capture_info_and_dependency_updates(run_py):
    out = run_graphs(run_py, """
        N = 64
        d = c_uint64(dalloc(N))
        out = pinned(N)
        s, other = stream(), stream()
        st, cid = ctypes.c_int(-1), c_uint64(7)
        deps = ctypes.POINTER(c_void_p)()
        edges_out = ctypes.POINTER(EdgeData)()
        n = c_size_t()
        # Not capturing: status NONE; bad arguments.
        show(info(s)[0], lib.cuStreamGetCaptureInfo_v3(s, None, None, None,
                                                       None, None, None),
             lib.cuStreamGetCaptureInfo_v3(s, byref(st), None, None, None,
                                           byref(edges_out), byref(n)))
        show(lib.cuStreamUpdateCaptureDependencies_v2(s, None, None,
                                                      c_size_t(0), 0))
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        # The first ABIs: status and id; then graph and dependencies.
        ok(lib.cuStreamGetCaptureInfo(s, byref(st), byref(cid)), "v1")
        g2 = c_void_p()
        ok(lib.cuStreamGetCaptureInfo_v2(s, byref(st), byref(cid),
                                         byref(g2), byref(deps), byref(n)),
           "v2")
        show(st.value, cid.value == info(s)[1], g2.value == info(s)[2],
             n.value)
        # The legacy stream may not ask while a blocking stream captures.
        show(lib.cuStreamGetCaptureInfo_v3(None, byref(st), None, None,
                                           None, None, None))
        ok(lib.cuMemsetD8Async(d, 1, c_size_t(N), s), "A")
        A = info(s)[3]
        ok(lib.cuMemsetD8Async(c_uint64(d.value + 8), 2, c_size_t(8), s),
           "B")
        B = info(s)[3]
        # SET replaces the set: the next node depends on A alone, as B
        # does (two branches from A).
        arr = (c_void_p * 1)(A[0])
        ok(lib.cuStreamUpdateCaptureDependencies_v2(s, arr, None,
                                                    c_size_t(1), 1), "set")
        show(info(s)[3] == A)
        ok(lib.cuMemsetD8Async(c_uint64(d.value + 16), 3, c_size_t(8), s),
           "C")
        C = info(s)[3]
        # ADD (flags 0, the first ABI) adds B back: D joins both branches.
        arr = (c_void_p * 1)(B[0])
        ok(lib.cuStreamUpdateCaptureDependencies(s, arr, c_size_t(1), 0),
           "add")
        show(sorted(info(s)[3]) == sorted(C + B))
        # Adding a node already there changes nothing.
        ok(lib.cuStreamUpdateCaptureDependencies(s, arr, c_size_t(1), 0),
           "add again")
        show(len(info(s)[3]))
        # Bad flags, bad nodes, edge data the simulator has no use for.
        bad = (c_void_p * 1)(12345)
        prog = (EdgeData * 1)()
        prog[0].type = 1
        show(lib.cuStreamUpdateCaptureDependencies(s, arr, c_size_t(1), 2),
             lib.cuStreamUpdateCaptureDependencies(s, bad, c_size_t(1), 0),
             lib.cuStreamUpdateCaptureDependencies(s, None, c_size_t(1), 0),
             lib.cuStreamUpdateCaptureDependencies_v2(s, arr, prog,
                                                      c_size_t(1), 0))
        ok(lib.cuMemcpyDtoHAsync_v2(out, d, c_size_t(N), s), "D")
        D = info(s)[3][0]
        rc, g = end(s)
        A, B, C = A[0], B[0], C[0]
        show(rc, edges(g) == {(A, B), (A, C), (B, D), (C, D)})
        # A node of one graph is not a node of another capture.
        ok(lib.cuStreamBeginCapture_v2(other, GLOBAL), "begin")
        arr = (c_void_p * 1)(A)
        show(lib.cuStreamUpdateCaptureDependencies(other, arr, c_size_t(1),
                                                   0), end(other)[0])
        # SET to nothing makes the next node a root.
        ok(lib.cuStreamBeginCapture_v2(other, GLOBAL), "begin")
        ok(lib.cuMemsetD8Async(d, 1, c_size_t(N), other), "X")
        ok(lib.cuStreamUpdateCaptureDependencies(other, None, c_size_t(0),
                                                 1), "clear")
        ok(lib.cuMemsetD8Async(d, 1, c_size_t(N), other), "Y")
        rc, g3 = end(other)
        show(rc, len(node_list(lib.cuGraphGetRootNodes, g3)),
             len(edges(g3)))
        e = instantiate(g)
        ok(lib.cuGraphLaunch(e, s), "launch")
        ok(lib.cuStreamSynchronize(s), "sync")
        show(list(ctypes.string_at(out, 24)))
        ok(lib.cuGraphExecDestroy(e), "exec")
        for graph in (g, g3):
            ok(lib.cuGraphDestroy(graph), "graph")
        # Query arguments: counts needed, both edge lists or none.
        show(lib.cuGraphGetNodes(g, None, None),
             lib.cuGraphGetEdges_v2(g, None, None, None, byref(n)))
        ok(lib.cuMemFree_v2(d), "free")
        ok(lib.cuMemFreeHost(out), "free")
    """)
    assert out == ["0 %d %d" % (INVALID_VALUE, INVALID_VALUE),
                   str(ILLEGAL_STATE),
                   "1 True True 0", str(CAPTURE_IMPLICIT),
                   "True", "True", "2",
                   "%d %d %d %d" % ((INVALID_VALUE,) * 4),
                   "0 True",
                   "%d 0" % INVALID_VALUE,
                   "0 2 0",
                   str([1] * 8 + [2] * 8 + [3] * 8),
                   "%d %d" % (INVALID_VALUE, INVALID_VALUE)]


def test_user_objects_live_as_long_as_the_graph_can_run(run_py):
    out = run_graphs(run_py, """
        import threading
        N = 64
        d = c_uint64(dalloc(N))
        out = pinned(N)
        s = stream()
        gone = threading.Event()
        dtor = HOSTFN(lambda p: gone.set())
        NO_SYNC, MOVE = 1, 1
        obj = c_void_p()
        # The flag is required; a first count of zero is refused.
        show(lib.cuUserObjectCreate(byref(obj), None, dtor, 1, 0),
             lib.cuUserObjectCreate(byref(obj), None, dtor, 0, NO_SYNC),
             lib.cuUserObjectCreate(byref(obj), None, None, 1, NO_SYNC))
        ok(lib.cuUserObjectCreate(byref(obj), None, dtor, 1, NO_SYNC),
           "create")
        ok(lib.cuUserObjectRetain(obj, 2), "retain")
        ok(lib.cuUserObjectRelease(obj, 2), "release")
        ok(lib.cuStreamBeginCapture_v2(s, GLOBAL), "begin")
        ok(lib.cuMemsetD8Async(d, 6, c_size_t(N), s), "memset")
        ok(lib.cuMemcpyDtoHAsync_v2(out, d, c_size_t(N), s), "d2h")
        g = end(s)[1]
        show(lib.cuGraphRetainUserObject(g, obj, 0, MOVE),
             lib.cuGraphRetainUserObject(g, obj, 1, 2),
             lib.cuGraphReleaseUserObject(g, obj, 1))
        # The caller's reference moves to the graph.
        ok(lib.cuGraphRetainUserObject(g, obj, 1, MOVE), "graph retain")
        # Instantiated with parameters (cuda.core's GraphBuilder.complete).
        PARAMS = type("P", (ctypes.Structure,), {"_fields_": [
            ("flags", c_uint64), ("upload", c_void_p), ("err", c_void_p),
            ("result", ctypes.c_int)]})
        prm = PARAMS(1 << 40, None, None, -1)
        e = c_void_p()
        show(lib.cuGraphInstantiateWithParams(byref(e), g, None),
             lib.cuGraphInstantiateWithParams(byref(e), g, byref(prm)),
             prm.result)
        prm = PARAMS(2, s, None, -1)  # CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
        ok(lib.cuGraphInstantiateWithParams(byref(e), g, byref(prm)),
           "instantiate")
        show(prm.result, prm.err, lib.cuGraphUpload(e, s),
             lib.cuGraphUpload(c_void_p(5), s))
        # The executable graph keeps the object after the graph is gone.
        ok(lib.cuGraphDestroy(g), "graph")
        ok(lib.cuGraphLaunch(e, s), "launch")
        ok(lib.cuStreamSynchronize(s), "sync")
        show(gone.is_set(), set(ctypes.string_at(out, N)))
        ok(lib.cuGraphExecDestroy(e), "exec")
        # The destructor runs on a driver thread of its own.
        show(gone.wait(60), lib.cuUserObjectRetain(obj, 1))
        ok(lib.cuMemFree_v2(d), "free")
        ok(lib.cuMemFreeHost(out), "free")
    """)
    assert out == ["%d %d %d" % ((INVALID_VALUE,) * 3),
                   "%d %d %d" % ((INVALID_VALUE,) * 3),
                   "%d %d 1" % (INVALID_VALUE, INVALID_VALUE),
                   "0 None 0 %d" % INVALID_VALUE,
                   "False {6}", "True %d" % INVALID_VALUE]
