"""cudamem's memory snapshot read by PyTorch's own script,
torch/cuda/_memory_viz.py (standard library only): its trace_plot and
segment_plot commands render the pickle dump_snapshot wrote, and its
parsers (trace, segsum, segments) read back the allocations this test
made, at their addresses and sizes.

Run by ``make test-peers``, whose venv holds the script (taken from
PyTorch's CPU wheel, see the Makefile's TORCH_VIZ_VERSION);
CUDAMEM_MEMORY_VIZ names another copy. Skipped where there is none.
"""
import base64
import importlib.util
import json
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

import cudamem as cuda
from cudamem import memory
from tests.helpers.run import ROOT

VIZ = os.environ.get("CUDAMEM_MEMORY_VIZ") or os.path.join(
    ROOT, "build", "peers-venv", "memory_viz", "_memory_viz.py")
if not os.path.exists(VIZ):
    pytest.skip("needs torch/cuda/_memory_viz.py (make test-peers)",
                allow_module_level=True)

pytestmark = pytest.mark.simulator


@pytest.fixture(scope="module")
def viz():
    spec = importlib.util.spec_from_file_location("_memory_viz", VIZ)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def recorded(tmp_path):
    """Two live arrays on two streams and one freed, recorded and dumped:
    (the pickle's path, [(address, nbytes, stream) of the live ones],
    the freed one's (address, nbytes, stream))."""
    s = cuda.stream()
    memory.record_history()
    try:
        with memory.annotate("viz"):
            a = cuda.device_array(1000, dtype=np.float32)
            b = cuda.device_array((3, 5), dtype=np.int16, stream=s)
            c = cuda.device_array(77, dtype=np.int8)
        gone = (c.device_ctypes_pointer.value, c.nbytes, 0)
        del c
        cuda.current_context().memory_manager.deallocations.clear()
        path = tmp_path / "snap.pickle"
        memory.dump_snapshot(path)
    finally:
        memory.record_history(False)
    live = [(a.device_ctypes_pointer.value, a.nbytes, 0),
            (b.device_ctypes_pointer.value, b.nbytes, s.handle.value)]
    yield path, live, gone
    del a, b


@pytest.mark.parametrize("command", ["trace_plot", "segment_plot"])
def test_plots_render_the_snapshot(recorded, command, tmp_path):
    path, _, _ = recorded
    out = tmp_path / "out.html"
    subprocess.run([sys.executable, VIZ, command, str(path), "-o", str(out)],
                   check=True, timeout=120)
    html = out.read_text()
    assert "add_local_files" in html
    (files,) = re.findall(r"const local_files = (\[.*\])", html)
    (entry,) = json.loads(files)
    # The page embeds the snapshot as the script read it.
    data = pickle.loads(base64.b64decode(entry["base64"]).rstrip(b"\0"))
    with open(path, "rb") as f:
        assert data == pickle.load(f)


def test_trace_reads_each_allocation(recorded, viz):
    path, live, gone = recorded
    with open(path, "rb") as f:
        text = viz.trace(pickle.load(f))
    for addr, nbytes, _ in live + [gone]:
        # Each allocation is its own driver allocation (a segment).
        assert "= cudaMalloc(%d, %s)" % (addr, viz.Bytes(nbytes)) in text
    assert "cudaFree(" in text and "free completed for" in text
    assert text.count("cudaMalloc(") == 3


def test_segsum_and_segments_read_the_live_memory(recorded, viz):
    path, live, _ = recorded
    with open(path, "rb") as f:
        data = pickle.load(f)
    summary = viz.segsum(data)  # asserts its sums itself
    total = sum(nbytes for _, nbytes, _ in live)
    assert "segments: 2\n" in summary
    assert "total_reserved: %s\n" % viz.Bytes(total) in summary
    assert "total_allocated: %s\n" % viz.Bytes(total) in summary
    lines = viz.segments(data, format_flamegraph=lambda lines: lines)
    found = sorted(line.rsplit(" ", 1)[0].split(";")[:3]
                   + [int(line.rsplit(" ", 1)[1])]
                   for line in lines.splitlines())
    assert [f[:2] + f[3:] for f in found] == sorted(
        ["stream_%d" % stream, "seg_%d" % addr, nbytes]
        for addr, nbytes, stream in live)
    assert {f[2] for f in found} == {"active_allocated"}
    assert "test_memory_viz.py" in lines
