"""Jupyter's rich display: ``_repr_html_`` of arrays, records, streams,
devices and contexts, and ``memory_stats()``'s MemoryStats (a dict with a
table for a repr). The HTML is parsed with html.parser: every tag closed
in order, every fact in its row as the API reports it, every character
that HTML gives a meaning escaped."""
import html
import html.parser
import pickle

import numpy as np
import pytest

import cudamem
from cudamem import _cli
from cudamem.errors import CudaAPIError

pytestmark = pytest.mark.simulator


class _Table(html.parser.HTMLParser):
    """Checks nesting; collects the caption, the <th>/<td> rows and the
    text of a <pre> block."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.rows, self.caption, self.pre = [], [], "", None
        self.cell = None

    def handle_starttag(self, tag, attrs):
        self.stack.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td"):
            self.cell = ""
        elif tag == "pre":
            self.pre = ""

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (self.stack, tag)
        self.stack.pop()
        if tag in ("th", "td"):
            self.rows[-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
        elif "caption" in self.stack:
            self.caption += data
        elif self.stack and self.stack[-1] == "pre":
            self.pre += data
        else:
            assert not data.strip(), "text outside the table: %r" % data


def _parse(text):
    assert isinstance(text, str)
    table = _Table()
    table.feed(text)
    table.close()
    assert table.stack == []
    return table


def _facts(text):
    table = _parse(text)
    assert all(len(row) == 2 for row in table.rows)
    return table.caption, dict(table.rows), table.pre


def test_array():
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = cudamem.to_device(host)
    caption, facts, pre = _facts(d._repr_html_())
    assert caption == "cudamem.DeviceNDArray"
    assert facts == {"shape": "(3, 4)", "dtype": "float32",
                     "strides": "(16, 4)", "bytes": "48 B",
                     "layout": "C contiguous", "device": "0",
                     "stream": "0"}
    assert pre == str(host)


def test_view_layout_and_stream():
    stream = cudamem.stream()
    d = cudamem.to_device(np.arange(24.0).reshape(4, 6), stream=stream)
    stream.synchronize()
    _, facts, pre = _facts(d[:, ::2]._repr_html_())
    assert facts["layout"] == "not contiguous"
    assert facts["strides"] == "(48, 16)"
    assert facts["stream"] == repr(stream)
    assert pre == str(np.arange(24.0).reshape(4, 6)[:, ::2])
    assert _facts(d.T._repr_html_())[1]["layout"] == "F contiguous"


def test_large_arrays_show_no_values(sim):
    d = cudamem.device_array(1000, np.int16)
    sim.reset()
    _, facts, pre = _facts(d._repr_html_())
    assert facts["bytes"] == _cli._size(2000) == "1.953 KiB"
    assert pre is None
    # Nothing was read from the device.
    assert not any(name.startswith("cuMemcpy") and c["calls"]
                   for name, c in sim.stats()["calls"].items())


def test_escaping_of_dtype_and_record():
    dtype = np.dtype([("a<b>&\"'", np.int32), ("c", np.float64)])
    host = np.zeros(2, dtype)
    d = cudamem.to_device(host)
    text = d._repr_html_()
    assert "a<b>" not in text and "&quot;" in text and "&#x27;" in text
    _, facts, pre = _facts(text)
    assert facts["dtype"] == str(dtype)
    assert pre == str(host)
    caption, facts, _ = _facts(d[0]._repr_html_())
    assert caption == "cudamem.DeviceRecord"
    assert facts["dtype"] == str(dtype) and facts["shape"] == "()"


@pytest.mark.parametrize("make, kind, handle", [
    (lambda: cudamem.stream(), "made by stream()", None),
    (cudamem.default_stream, "default stream", 0),
    (cudamem.legacy_default_stream, "legacy default stream", 1),
    (cudamem.per_thread_default_stream, "per-thread default stream", 2),
])
def test_stream(make, kind, handle):
    s = make()
    caption, facts, pre = _facts(s._repr_html_())
    assert caption == "cudamem.Stream" and pre is None
    assert facts == {"kind": kind, "handle": str(int(s)), "device": "0",
                     "context": repr(cudamem.current_context())}
    if handle is not None:
        assert int(s) == handle


def test_external_stream():
    owner = cudamem.stream()
    s = cudamem.external_stream(int(owner))
    _, facts, _ = _facts(s._repr_html_())
    assert facts["kind"] == "external: cudamem never destroys it"
    assert facts["handle"] == str(int(owner))


def test_stream_of_a_reset_context():
    s = cudamem.stream()
    cudamem.get_current_device().reset()
    _, facts, _ = _facts(s._repr_html_())
    assert facts["context"] == "reset or closed"
    assert "reset or closed" in repr(s)


def test_device():
    dev = cudamem.get_current_device()
    desc = cudamem.driver.devices()[dev.id]
    caption, facts, _ = _facts(dev._repr_html_())
    assert caption == "cudamem.Device"
    assert facts == {
        "id": str(dev.id), "name": dev.name,
        "compute capability": "%d.%d" % dev.compute_capability,
        "memory": _cli._size(desc["total_memory"]),
        "multiprocessors": str(dev.MULTIPROCESSOR_COUNT),
        "UUID": dev.uuid, "PCI bus id": desc["pci_bus_id"]}


def test_device_driver_failure(sim):
    dev = cudamem.get_current_device()
    sim.inject("cuDeviceTotalMem", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError, match="cuDeviceTotalMem"):
        dev._repr_html_()


def test_context():
    ctx = cudamem.current_context()
    info = ctx.get_memory_info()
    caption, facts, _ = _facts(ctx._repr_html_())
    assert caption == "cudamem.Context"
    assert facts["device"] == repr(ctx.device)
    assert facts["total memory"] == _cli._size(info.total)
    assert int(facts["handle"], 16) == ctx.handle
    # The device's repr quotes its name: escaped as html.escape does.
    assert html.escape(repr(ctx.device)) in ctx._repr_html_()


def test_context_driver_failure(sim):
    ctx = cudamem.current_context()
    sim.inject("cuMemGetInfo", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError, match="cuMemGetInfo"):
        ctx._repr_html_()


# ---------------------------------------------------------------------------
# memory_stats()

def test_memory_stats_is_still_a_dict():
    d = cudamem.device_array(1000)
    stats = cudamem.memory_stats()
    assert isinstance(stats, dict) and isinstance(stats, cudamem.MemoryStats)
    plain = dict(stats)
    assert stats == plain and type(plain) is dict
    assert stats.device == 0 and cudamem.memory_stats(0).device == 0
    again = pickle.loads(pickle.dumps(stats))
    assert again == stats and again.device == 0
    del d


def test_memory_stats_repr_is_a_table():
    d = cudamem.device_array(1 << 20, np.uint8)
    stats = cudamem.memory_stats()
    lines = repr(stats).splitlines()
    assert lines[0] == "memory_stats(device=0)"
    assert lines[1].split() == ["kind", "in", "use", "peak", "requested",
                                "peak", "requested", "count", "peak",
                                "count", "allocations", "frees"]
    rows = {line.split()[0]: line for line in lines[2:]}
    device = rows["device"].split()
    assert " ".join(device[1:3]) == _cli._size(stats["device_bytes_in_use"])
    assert device[-4:] == [str(stats["device_count"]),
                           str(stats["device_count_peak"]),
                           str(stats["device_allocations"]),
                           str(stats["device_frees"])]
    for kind in ("managed", "pinned", "mapped", "write_combined"):
        assert kind in rows
    assert rows["pending_free_count"].split()[1] == str(
        stats["pending_free_count"])
    assert rows["oom_rejections"].split()[1] == str(stats["oom_rejections"])
    # The header, the five kinds, then one row per other figure.
    assert len(lines) == 2 + 5 + 6
    del d


def test_memory_stats_html():
    d = cudamem.device_array(3000, np.uint8)
    stats = cudamem.memory_stats()
    table = _parse(stats._repr_html_())
    assert table.caption == "memory_stats(device=0)"
    assert table.rows[0] == ["kind", "in use", "peak", "requested",
                             "peak requested", "count", "peak count",
                             "allocations", "frees"]
    rows = {row[0]: row[1:] for row in table.rows[1:]}
    assert rows["device"] == [
        _cli._size(stats["device_bytes_in_use"]),
        _cli._size(stats["device_bytes_peak"]),
        _cli._size(stats["device_requested_bytes"]),
        _cli._size(stats["device_requested_bytes_peak"]),
        str(stats["device_count"]), str(stats["device_count_peak"]),
        str(stats["device_allocations"]), str(stats["device_frees"])]
    assert rows["pool_cached_bytes"] == [_cli._size(
        stats["pool_cached_bytes"])]
    del d


def test_memory_stats_escapes_unknown_keys():
    stats = cudamem.MemoryStats("<0>")
    stats["x<&>_count"] = 1
    text = stats._repr_html_()
    assert "<0>" not in text and "x<&>" not in text
    table = _parse(text)
    assert table.caption == "memory_stats(device=<0>)"
    assert ["x<&>_count", "1"] in table.rows
    assert html.escape("x<&>_count") in text
