"""The memory history (cudamem.memory.record_history, annotate, snapshot,
dump_snapshot): each event against what the test allocated and freed
(addresses from the arrays' own pointers, sizes from NumPy's nbytes,
stream handles, the test's own lines in the frames), the annotations,
the ring bound, recording off, threads, the segments the events leave
live, the pickle, and every error exit. PyTorch's own reading of the
snapshot is tests/peers/test_memory_viz.py's."""
import glob
import os
import pickle
import sys
import threading

import numpy as np
import pytest

import cudamem as cuda
from cudamem import _cudamem, memory
from tests.helpers.run import ROOT

pytestmark = pytest.mark.simulator


@pytest.fixture(autouse=True)
def stopped():
    """Every test starts and ends with recording off and the ring empty."""
    _cudamem._history_start(1, 0)
    memory.record_history(None)
    yield
    memory.record_history(False)


def flush():
    cuda.current_context().memory_manager.deallocations.clear()


def device_events(snap=None, device=0):
    snap = memory.snapshot() if snap is None else snap
    traces = snap["device_traces"]
    return traces[device] if device < len(traces) else []


def here():
    """The caller's next line."""
    return sys._getframe(1).f_lineno + 1


def test_device_array_alloc_and_free_in_order():
    memory.record_history()
    line = here()
    a = cuda.device_array(100, dtype=np.float32)
    addr, nbytes = a.device_ctypes_pointer.value, a.nbytes
    assert addr == a.__cuda_array_interface__["data"][0]
    del a
    free_line = sys._getframe().f_lineno - 1
    flush()
    events = device_events()
    assert [(e["action"], e["addr"], e["size"]) for e in events] == [
        ("segment_alloc", addr, nbytes), ("alloc", addr, nbytes),
        ("free_requested", addr, nbytes), ("free_completed", addr, nbytes),
        ("segment_free", addr, nbytes)]
    assert all(e["stream"] == 0 and e["memory"] == "device"
               and e["device"] == 0 for e in events)
    assert events[1]["frames"][0] == {
        "filename": __file__, "line": line,
        "name": "test_device_array_alloc_and_free_in_order"}
    assert events[2]["frames"][0]["line"] == free_line
    # The queue's flush completed the free.
    assert [e["frames"][0]["name"] for e in events[3:]] == ["flush", "flush"]
    assert events[1]["thread"] == threading.get_ident()
    times = [e["time_us"] for e in events]
    assert times == sorted(times)


def test_stream_handle_recorded():
    s = cuda.stream()
    memory.record_history()
    a = cuda.device_array(10, stream=s)
    alloc = [e for e in device_events() if e["action"] == "alloc"]
    assert [(e["addr"], e["stream"]) for e in alloc] == [
        (a.device_ctypes_pointer.value, s.handle.value)]
    assert s.handle.value != 0
    del a


def test_pending_free_is_requested_until_the_queue_frees_it():
    memory.record_history()
    a = cuda.device_array(64)
    addr = a.device_ctypes_pointer.value
    del a
    snap = memory.snapshot()
    assert [e["action"] for e in device_events(snap)][-1] == "free_requested"
    (seg,) = [s for s in snap["segments"] if s["address"] == addr]
    assert [b["state"] for b in seg["blocks"]] == ["active_pending_free"]
    flush()
    snap = memory.snapshot()
    assert [e["action"] for e in device_events(snap)][-2:] == [
        "free_completed", "segment_free"]
    assert not [s for s in snap["segments"] if s["address"] == addr]


def test_segments_list_the_live_allocations():
    memory.record_history()
    keep = cuda.device_array(1000, dtype=np.int8)
    gone = cuda.device_array(24, dtype=np.int8)
    gone_addr = gone.device_ctypes_pointer.value
    del gone
    flush()
    snap = memory.snapshot()
    (seg,) = snap["segments"]
    assert seg["address"] == keep.device_ctypes_pointer.value != gone_addr
    assert seg["total_size"] == seg["allocated_size"] == keep.nbytes
    assert seg["blocks"] == [{
        "address": seg["address"], "size": 1000, "requested_size": 1000,
        "state": "active_allocated", "frames": seg["blocks"][0]["frames"]}]
    assert seg["blocks"][0]["frames"][0]["filename"] == __file__
    del keep


def test_pooled_blocks_live_in_the_slab_segment(pool):
    memory.record_history()
    a = cuda.device_array(100, dtype=np.int8)
    b = cuda.device_array(300, dtype=np.int8)
    snap = memory.snapshot()
    events = device_events(snap)
    (slab,) = [e for e in events if e["action"] == "segment_alloc"]
    blocks = [e for e in events if e["action"] == "alloc"]
    assert [(e["addr"], e["size"]) for e in blocks] == [
        (a.device_ctypes_pointer.value, 100),
        (b.device_ctypes_pointer.value, 300)]
    for e in blocks:
        assert slab["addr"] <= e["addr"]
        assert e["addr"] + e["size"] <= slab["addr"] + slab["size"]
    (seg,) = snap["segments"]
    active = [bl for bl in seg["blocks"] if bl["state"] != "inactive"]
    assert [(bl["address"], bl["size"]) for bl in active] == [
        (e["addr"], e["size"]) for e in blocks]
    assert sum(bl["size"] for bl in seg["blocks"]) == seg["total_size"]
    addr = a.device_ctypes_pointer.value
    del a
    # A pooled block is back in the pool at its last reference.
    assert [(e["action"], e["addr"]) for e in device_events()[-2:]] == [
        ("free_requested", addr), ("free_completed", addr)]
    del b
    memory.record_history(False)


def test_stream_ordered_frees_complete_with_their_segment():
    # cuMemFreeAsync hands the memory to the driver's pool in stream
    # order: cudamem's part of the free is done, and each allocation was
    # a segment of its own.
    with cuda.using_memory_manager(cuda.AsyncMemoryManager):
        stream = cuda.stream()
        memory.record_history()
        a = cuda.device_array(100, dtype=np.int8, stream=stream)
        addr = a.device_ctypes_pointer.value
        del a
        stream.synchronize()
        memory.record_history(False)
    assert [(e["action"], e["addr"], e["size"], e["stream"])
            for e in device_events()] == [
        (action, addr, 100, stream.handle.value)
        for action in ("segment_alloc", "alloc", "free_requested",
                       "free_completed", "segment_free")]
    assert memory.snapshot()["segments"] == []


def test_host_and_managed_memory():
    memory.record_history()
    p = cuda.pinned_array(10)
    m = cuda.mapped_array(3, dtype=np.int16)
    g = cuda.managed_array(7, dtype=np.int32)
    snap = memory.snapshot()
    host = [(e["action"], e["memory"], e["addr"], e["size"])
            for e in snap["host_traces"] if e["action"] == "alloc"]
    assert host == [("alloc", "pinned", p.ctypes.data, p.nbytes),
                    ("alloc", "mapped", m.ctypes.data, m.nbytes)]
    seg = [e for e in snap["host_traces"] if e["action"] == "segment_alloc"]
    assert [e["size"] >= 4096 for e in seg] == [True, True]
    # A pinned allocation releases the GIL: its frames come afterwards.
    assert snap["host_traces"][1]["frames"][0]["filename"] == __file__
    (managed,) = [e for e in device_events(snap) if e["action"] == "alloc"]
    assert (managed["memory"], managed["addr"], managed["size"]) == (
        "managed", g.__cuda_array_interface__["data"][0], g.nbytes)
    paddr = p.ctypes.data
    del p, m, g
    flush()
    freed = [(e["action"], e["addr"]) for e in memory.snapshot()["host_traces"]
             if e["addr"] == paddr]
    assert freed[2:] == [("free_requested", paddr), ("free_completed", paddr),
                         ("segment_free", paddr)]


def test_annotations_nest_and_end():
    memory.record_history()
    with memory.annotate("outer"):
        a = cuda.device_array(1)
        with memory.annotate("inner"):
            b = cuda.device_array(2)
        c = cuda.device_array(3)
    d = cuda.device_array(4)
    alloc = [e for e in device_events() if e["action"] == "alloc"]
    assert [e["annotations"] for e in alloc] == [
        ["outer"], ["outer", "inner"], ["outer"], []]
    assert [e["user_metadata"] for e in alloc] == [
        "outer", "outer/inner", "outer", ""]
    del a, b, c, d


def test_threads_keep_their_own_annotations():
    memory.record_history()
    arrays, idents = {}, {}

    def worker(i):
        idents[i] = threading.get_ident()
        with memory.annotate("t%d" % i):
            arrays[i] = [cuda.device_array(8 + i) for _ in range(5)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    with memory.annotate("main"):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    alloc = [e for e in device_events() if e["action"] == "alloc"]
    assert len(alloc) == 20
    for e in alloc:
        i = e["size"] // 8 - 8
        assert e["addr"] in [x.device_ctypes_pointer.value
                             for x in arrays[i]]
        assert e["annotations"] == ["t%d" % i]
        assert e["thread"] == idents[i]
        assert e["frames"][0]["name"] in ("worker", "<listcomp>")
    arrays.clear()


def test_ring_keeps_the_last_max_entries():
    memory.record_history(max_entries=3)
    x = cuda.device_array(1)
    y = cuda.device_array(2)
    events = device_events()
    ya = y.device_ctypes_pointer.value
    assert [(e["action"], e["addr"]) for e in events] == [
        ("alloc", x.device_ctypes_pointer.value), ("segment_alloc", ya),
        ("alloc", ya)]
    del x, y


def test_ring_grows_then_wraps():
    memory.record_history(max_entries=100)
    arrays = [cuda.device_array(1 + i % 7) for i in range(60)]
    events = device_events()
    expect = []
    for a in arrays:
        expect += [("segment_alloc", a.device_ctypes_pointer.value),
                   ("alloc", a.device_ctypes_pointer.value)]
    assert [(e["action"], e["addr"]) for e in events] == expect[-100:]
    del arrays


def test_off_records_nothing():
    a = cuda.device_array(1)
    memory.record_history()
    memory.record_history(False)
    b = cuda.device_array(2)
    del a, b
    flush()
    assert memory.snapshot() == {"segments": [], "device_traces": [[]],
                                 "host_traces": []}


def test_stopping_keeps_and_starting_drops():
    memory.record_history()
    a = cuda.device_array(1)
    memory.record_history(False)
    kept = device_events()
    assert [e["action"] for e in kept] == ["segment_alloc", "alloc"]
    memory.record_history("all")
    assert device_events() == []
    del a


def test_stack_depth_bounds_the_frames():
    def inner():
        return cuda.device_array(1)

    def middle():
        return inner()

    memory.record_history(stack_depth=2)
    a = middle()
    (alloc,) = [e for e in device_events() if e["action"] == "alloc"]
    assert [f["name"] for f in alloc["frames"]] == ["inner", "middle"]
    memory.record_history(stacks=None)
    b = middle()
    (alloc,) = [e for e in device_events() if e["action"] == "alloc"]
    assert alloc["frames"] == []
    memory.record_history(stack_depth=0)
    c = middle()
    (alloc,) = [e for e in device_events() if e["action"] == "alloc"]
    assert alloc["frames"] == []
    del a, b, c


def test_dump_snapshot_pickles_the_snapshot(tmp_path):
    memory.record_history()
    with memory.annotate("phase"):
        a = cuda.device_array(5)
    memory.record_history(False)
    path = tmp_path / "snap.pickle"
    memory.dump_snapshot(path)
    with open(path, "rb") as f:
        assert pickle.load(f) == memory.snapshot()
    del a


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"enabled": "yes"}, ValueError, "enabled must be .* not 'yes'"),
    ({"stacks": "cpp"}, ValueError, "stacks must be .* not 'cpp'"),
    ({"max_entries": 0}, ValueError, "max_entries must be positive, not 0"),
    ({"max_entries": 1.5}, TypeError, "max_entries must be an int, not 1.5"),
    ({"stack_depth": 65}, ValueError, "stack_depth must be 0 to 64, not 65"),
    ({"stack_depth": True}, TypeError, "stack_depth must be an int, not True"),
])
def test_bad_arguments_are_named(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        memory.record_history(**kwargs)
    a = cuda.device_array(1)
    assert device_events() == []  # still off
    del a


def test_annotate_needs_a_str():
    with pytest.raises(TypeError, match="must be a str, not 3"):
        with memory.annotate(3):
            pass


@pytest.mark.parametrize("args, exc, match", [
    ((0, 1), ValueError, "max_entries must be positive, not 0"),
    ((1, 65), ValueError, "depth must be 0 to 64, not 65"),
    ((1, -1), ValueError, "depth must be 0 to 64, not -1"),
    (("a", 1), TypeError, "integer"),
    ((1, "a"), TypeError, "integer"),
])
def test_extension_checks_its_arguments(args, exc, match):
    with pytest.raises(exc, match=match):
        _cudamem._history_start(*args)


def test_failed_python_allocations_drop_only_frames():
    """Python's allocator failed at each point in turn while recording an
    allocation and reading the ring back: MemoryError or a recorded event,
    never a crash; the events recorded stay readable."""
    _testcapi = pytest.importorskip("_testcapi")
    memory.record_history()
    with memory.annotate("sweep"):
        arrays = [cuda.device_array(4)]
    failed = 0
    for n in range(40):
        _testcapi.set_nomemory(n, n + 1)
        try:
            with memory.annotate("x%d" % n):
                arrays.append(cuda.device_array(4))
            _cudamem._history_entries()
        except MemoryError:
            failed += 1
        finally:
            _testcapi.remove_mem_hooks()
    assert failed > 0
    live = {a.device_ctypes_pointer.value for a in arrays}
    events = device_events()
    alloc = [e["addr"] for e in events if e["action"] == "alloc"]
    freed = [e["addr"] for e in events if e["action"] == "free_requested"]
    # An allocation whose array could not be made was given back.
    assert sorted(alloc) == sorted(list(live) + freed)
    assert not live & set(freed)
    assert events[1]["annotations"] == ["sweep"]
    del arrays


def test_every_gil_release_adopts_its_entries():
    """py/history.c's rule: the events a thread records while it released
    the GIL take that call's frames, so py/ ends each GIL release with
    CMPY_END_ALLOW_THREADS (module.h), which adopts them, never with
    Python's own macro."""
    sources = glob.glob(os.path.join(ROOT, "cudamem", "_src", "py", "*.c"))
    ends = 0
    for path in sources:
        with open(path) as f:
            text = f.read()
        ends += text.count("CMPY_END_ALLOW_THREADS")
        assert "Py_END_ALLOW_THREADS" not in text.replace(
            "CMPY_END_ALLOW_THREADS", ""), path
    assert ends > 10


def test_each_device_has_its_trace(run_py):
    """Two simulated devices: each allocation is in its own device's trace,
    and the segments name their device."""
    r = run_py("""
        import cudamem as cuda
        from cudamem import memory
        memory.record_history()
        with cuda.gpus[1]:
            b = cuda.device_array(30)
            bp = b.device_ctypes_pointer.value
        a = cuda.device_array(10)
        snap = memory.snapshot()
        memory.record_history(False)
        t0, t1 = snap["device_traces"]
        print([(e["action"], e["addr"] == a.device_ctypes_pointer.value)
               for e in t0])
        print([(e["action"], e["addr"] == bp, e["device"]) for e in t1])
        print(sorted((s["device"], s["total_size"])
                     for s in snap["segments"]))
        del a, b
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines == [
        "[('segment_alloc', True), ('alloc', True)]",
        "[('segment_alloc', True, 1), ('alloc', True, 1)]",
        "[(0, 80), (1, 240)]"]
