"""memory_stats()'s requested bytes, allocations and frees per kind of
memory, reset_accumulated_memory_stats(), and memory_summary()'s text and
HTML tables.

The references: the sizes each test asks for (requested), the page and
the pools' rounding of them (bytes in use), the simulator's calls of each
allocating entry point (allocations), and PyTorch's semantics for the
resets (torch.cuda.reset_peak_memory_stats leaves the accumulated counts,
reset_accumulated_memory_stats leaves the current and peak figures).
"""
import gc
import html.parser
import pickle
import threading

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem
from cudamem.devices import _size

pytestmark = pytest.mark.simulator

KINDS = ["device", "managed", "pinned", "mapped", "write_combined"]
FIGURES = ["bytes_in_use", "requested_bytes", "count", "allocations",
           "frees"]
PAGE = 4096


def _flush():
    gc.collect()
    _cudamem._flush_pending()


def _delta(before, after, kind):
    return {f: after[kind + "_" + f] - before[kind + "_" + f]
            for f in FIGURES}


def _calls(sim, name):
    return sim.stats()["calls"][name]["calls"]


@pytest.fixture
def clean():
    """No pinned block cached, no pending free: every allocation below
    reaches the driver."""
    _flush()
    _cudamem._hostpool_trim()
    yield
    _flush()
    _cudamem._hostpool_trim()


def test_device_and_managed(sim, clean):
    before, allocs = cudamem.memory_stats(), _calls(sim, "cuMemAlloc")
    managed_allocs = _calls(sim, "cuMemAllocManaged")
    dev = cudamem.device_array(1001, np.uint8)
    man = cudamem.managed_array(37, np.float32)
    stats = cudamem.memory_stats()
    # cuMemAlloc's size is what was asked: nothing rounds it.
    assert _delta(before, stats, "device") == {
        "bytes_in_use": 1001, "requested_bytes": 1001, "count": 1,
        "allocations": _calls(sim, "cuMemAlloc") - allocs, "frees": 0}
    assert stats["device_allocations"] - before["device_allocations"] == 1
    assert _delta(before, stats, "managed") == {
        "bytes_in_use": 148, "requested_bytes": 148, "count": 1,
        "allocations": _calls(sim, "cuMemAllocManaged") - managed_allocs,
        "frees": 0}
    del dev, man
    _flush()
    stats = cudamem.memory_stats()
    for kind in ("device", "managed"):
        assert _delta(before, stats, kind) == {
            "bytes_in_use": 0, "requested_bytes": 0, "count": 0,
            "allocations": 1, "frees": 1}


def test_pinned_requested_before_page_rounding(sim, clean):
    before, registers = cudamem.memory_stats(), _calls(sim,
                                                       "cuMemHostRegister")
    small = cudamem.pinned_array(5000, np.uint8)
    large = cudamem.pinned_array(3_000_001, np.uint8)
    stats = cudamem.memory_stats()
    assert _delta(before, stats, "pinned") == {
        "bytes_in_use": 2 * PAGE + -(-3_000_001 // PAGE) * PAGE,
        "requested_bytes": 5000 + 3_000_001, "count": 2,
        "allocations": _calls(sim, "cuMemHostRegister") - registers,
        "frees": 0}
    assert stats["pinned_allocations"] - before["pinned_allocations"] == 2
    del small, large
    assert _delta(before, cudamem.memory_stats(), "pinned") == {
        "bytes_in_use": 0, "requested_bytes": 0, "count": 0,
        "allocations": 2, "frees": 2}


def test_pinned_pool_requested_before_its_classes(sim, clean):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as mgr:
        before = cudamem.memory_stats()
        registers = _calls(sim, "cuMemHostRegister")
        pool = mgr.pinned_stats()
        # 5000 bytes: the pool's class of 8 KiB; 3 MB: above the round
        # threshold (1 MiB), page-rounded.
        small = cudamem.pinned_array(5000, np.uint8)
        large = cudamem.pinned_array(3_000_001, np.uint8)
        stats = cudamem.memory_stats()
        rounded = -(-3_000_001 // PAGE) * PAGE
        assert _delta(before, stats, "pinned") == {
            "bytes_in_use": 8192 + rounded,
            "requested_bytes": 5000 + 3_000_001, "count": 2,
            "allocations": 2, "frees": 0}
        assert _calls(sim, "cuMemHostRegister") - registers == 2
        # The host pool's own figures are the same bytes.
        now = mgr.pinned_stats()
        assert (now["requested_bytes"] - pool["requested_bytes"] ==
                stats["pinned_requested_bytes"] -
                before["pinned_requested_bytes"])
        assert (now["pinned_bytes"] - pool["pinned_bytes"] ==
                stats["pinned_bytes_in_use"] - before["pinned_bytes_in_use"])
        del small
        # Cached, then handed out again for a smaller request of its
        # class: a free and an allocation, no new registration.
        again = cudamem.pinned_array(4500, np.uint8)
        stats = cudamem.memory_stats()
        assert _calls(sim, "cuMemHostRegister") - registers == 2
        assert _delta(before, stats, "pinned") == {
            "bytes_in_use": 8192 + rounded,
            "requested_bytes": 4500 + 3_000_001, "count": 2,
            "allocations": 3, "frees": 1}
        del again, large
        _flush()
        assert (cudamem.memory_stats()["pinned_pool_cached_count"] -
                before["pinned_pool_cached_count"]) == 2
        mgr.trim()
    # Freeing the cached blocks is not another free.
    assert _delta(before, cudamem.memory_stats(), "pinned") == {
        "bytes_in_use": 0, "requested_bytes": 0, "count": 0,
        "allocations": 3, "frees": 3}


def test_mapped_and_write_combined(sim, clean):
    before = cudamem.memory_stats()
    host_allocs = _calls(sim, "cuMemHostAlloc")
    mapped = cudamem.mapped_array(10, np.uint8)
    wc = cudamem.mapped_array(100, np.float32, wc=True)
    stats = cudamem.memory_stats()
    assert _delta(before, stats, "mapped") == {
        "bytes_in_use": PAGE, "requested_bytes": 10, "count": 1,
        "allocations": 1, "frees": 0}
    # cuMemHostAlloc's size is what was asked.
    assert _delta(before, stats, "write_combined") == {
        "bytes_in_use": 400, "requested_bytes": 400, "count": 1,
        "allocations": _calls(sim, "cuMemHostAlloc") - host_allocs,
        "frees": 0}
    assert stats["write_combined_allocations"] == (
        before["write_combined_allocations"] + 1)
    del mapped, wc
    _flush()
    stats = cudamem.memory_stats()
    for kind in ("mapped", "write_combined"):
        assert _delta(before, stats, kind)["frees"] == 1
        assert _delta(before, stats, kind)["requested_bytes"] == 0


def test_pool_manager_requested_and_block_bytes(sim, clean):
    with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as mgr:
        before, allocs = cudamem.memory_stats(), _calls(sim, "cuMemAlloc")
        pool = mgr.stats()
        arrays = [cudamem.device_array(n, np.uint8) for n in (1, 1000, 300)]
        stats = cudamem.memory_stats()
        # Blocks are whole multiples of 256 bytes: 256, 1024, 512.
        assert _delta(before, stats, "device") == {
            "bytes_in_use": 256 + 1024 + 512, "requested_bytes": 1301,
            "count": 3, "allocations": 3, "frees": 0}
        # The blocks came from one slab: one cuMemAlloc, three allocations.
        assert _calls(sim, "cuMemAlloc") - allocs <= 1
        assert (mgr.stats()["used_bytes"] - pool["used_bytes"] ==
                stats["device_bytes_in_use"] - before["device_bytes_in_use"])
        del arrays
        _flush()
        stats = cudamem.memory_stats()
        assert _delta(before, stats, "device") == {
            "bytes_in_use": 0, "requested_bytes": 0, "count": 0,
            "allocations": 3, "frees": 3}
        assert stats["device_requested_bytes_peak"] >= (
            before["device_requested_bytes"] + 1301)
        mgr.trim()


def test_threads_add_up(sim, clean):
    before = cudamem.memory_stats()
    rounds, nthreads = 50, 4
    errors = []

    def work():
        try:
            for i in range(rounds):
                a = cudamem.device_array(i + 1, np.uint8)
                p = cudamem.pinned_array(i + 1, np.uint8)
                del a, p
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    _flush()
    stats = cudamem.memory_stats()
    for kind in ("device", "pinned"):
        assert _delta(before, stats, kind) == {
            "bytes_in_use": 0, "requested_bytes": 0, "count": 0,
            "allocations": rounds * nthreads, "frees": rounds * nthreads}


def test_reset_semantics(clean):
    keep = cudamem.device_array(64, np.uint8)
    gone = cudamem.device_array(4096, np.uint8)
    del gone
    _flush()
    stats = cudamem.memory_stats()
    assert stats["device_requested_bytes_peak"] >= (
        stats["device_requested_bytes"] + 4096)
    # Peaks only: the counts stay.
    cudamem.reset_peak_stats()
    after = cudamem.memory_stats()
    assert after["device_requested_bytes_peak"] == (
        after["device_requested_bytes"])
    assert after["device_bytes_peak"] == after["device_bytes_in_use"]
    assert after["device_allocations"] == stats["device_allocations"]
    assert after["device_frees"] == stats["device_frees"]
    # Accumulated only: what is in use and the peaks stay.
    more = cudamem.device_array(10, np.uint8)
    peak = cudamem.memory_stats()["device_requested_bytes_peak"]
    cudamem.reset_accumulated_memory_stats()
    after = cudamem.memory_stats()
    for kind in KINDS:
        assert after[kind + "_allocations"] == after[kind + "_frees"] == 0
    assert after["oom_rejections"] == 0
    assert after["device_requested_bytes_peak"] == peak
    assert after["device_count"] == stats["device_count"] + 1
    assert after["device_requested_bytes"] == (
        stats["device_requested_bytes"] + 10)
    del more
    _flush()
    after = cudamem.memory_stats()
    assert after["device_frees"] == 1 and after["device_allocations"] == 0
    del keep


def test_reset_accumulated_clears_oom_rejections():
    cudamem.set_memory_limit(1 << 20)
    try:
        with pytest.raises(cudamem.CudaOutOfMemoryError):
            cudamem.device_array(2 << 20, np.uint8)
        assert cudamem.memory_stats()["oom_rejections"] >= 1
        cudamem.reset_accumulated_memory_stats(device=0)
        assert cudamem.memory_stats()["oom_rejections"] == 0
    finally:
        cudamem.set_memory_limit(None)


class _Table(html.parser.HTMLParser):
    """The caption and the rows of cells (th or td) of an HTML table."""

    def __init__(self, text):
        super().__init__()
        self.caption, self.rows, self._cell, self._in_caption = "", [], None, 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "caption":
            self._in_caption = 1

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.rows[-1].append(self._cell)
            self._cell = None
        elif tag == "caption":
            self._in_caption = 0

    def handle_data(self, data):
        if self._in_caption:
            self.caption += data
        elif self._cell is not None:
            self._cell += data


HEADER = ["kind", "in use", "peak", "requested", "peak requested", "count",
          "peak count", "allocations", "frees"]


SUFFIXES = ["bytes_in_use", "bytes_peak", "requested_bytes",
            "requested_bytes_peak", "count", "count_peak", "allocations",
            "frees"]


def _expected_row(stats, kind):
    def cell(key):
        value = stats[kind + "_" + key]
        return _size(value) if "bytes" in key else str(value)
    return [kind] + [cell(k) for k in SUFFIXES]


def test_summary_text(clean):
    ary = cudamem.device_array(3000, np.uint8)
    summary = cudamem.memory_summary()
    stats = summary.stats
    assert isinstance(summary, str)
    assert isinstance(summary, cudamem.MemorySummary)
    assert stats == cudamem.memory_stats()
    lines = summary.splitlines()
    assert lines[0] == "cudamem memory summary, device 0"
    # Columns are right-aligned under their titles: split on two spaces.
    split = [[c.strip() for c in line.split("  ") if c.strip()]
             for line in lines[1:]]
    assert split[0] == HEADER
    rows = {row[0]: row for row in split[1:]}
    for kind in KINDS:
        assert rows[kind] == _expected_row(stats, kind)
    assert rows["pool_cached_bytes"] == [
        "pool_cached_bytes", _size(stats["pool_cached_bytes"])]
    assert rows["oom_rejections"] == [
        "oom_rejections", str(stats["oom_rejections"])]
    assert len(lines) == 2 + len(KINDS) + 6
    again = pickle.loads(pickle.dumps(summary))
    assert again == summary and again.stats == stats
    assert again._repr_html_() == summary._repr_html_()
    del ary


def test_summary_abbreviated(clean):
    cudamem.reset_accumulated_memory_stats()
    cudamem.reset_peak_stats()
    ary = cudamem.device_array(3000, np.uint8)
    summary = cudamem.memory_summary(abbreviated=True)
    stats = summary.stats
    rows = {line.split()[0]: line for line in summary.splitlines()[2:]}
    # Only what is not all 0: the device's row, here, and the counters
    # that are not 0.
    per_kind = {k + "_" + f for k in KINDS for f in SUFFIXES}
    kinds = [k for k in KINDS if any(stats[k + "_" + f] for f in SUFFIXES)]
    others = [k for k, v in stats.items() if k not in per_kind and v]
    assert "device" in kinds and "write_combined" not in kinds
    assert sorted(rows) == sorted(kinds + others)
    table = _Table(summary._repr_html_())
    assert sorted(row[0] for row in table.rows[1:]) == sorted(rows)
    del ary


def test_summary_html(clean):
    ary = cudamem.managed_array(100, np.uint8)
    summary = cudamem.memory_summary(device=cudamem.get_current_device())
    table = _Table(summary._repr_html_())
    assert table.caption == "cudamem memory summary, device 0"
    assert table.rows[0] == HEADER
    rows = {row[0]: row for row in table.rows[1:]}
    for kind in KINDS:
        assert rows[kind] == _expected_row(summary.stats, kind)
    assert rows["pending_free_count"] == [
        "pending_free_count", str(summary.stats["pending_free_count"])]
    # memory_stats()'s own table is the same rows under its caption.
    stats_table = _Table(summary.stats._repr_html_())
    assert stats_table.caption == "memory_stats(device=0)"
    assert stats_table.rows == table.rows
    del ary


@pytest.mark.parametrize("kwargs, exc, text", [
    ({"abbreviated": 1}, TypeError, "abbreviated must be a bool, not 1"),
    ({"abbreviated": "yes"}, TypeError, "not 'yes'"),
    ({"device": "0"}, TypeError, "not str"),
    ({"device": 99}, ValueError, "99"),
])
def test_summary_bad_arguments(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        cudamem.memory_summary(**kwargs)


def test_reset_accumulated_bad_arguments():
    with pytest.raises(TypeError, match="reset_accumulated_memory_stats"):
        cudamem.reset_accumulated_memory_stats(0, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        cudamem.reset_accumulated_memory_stats(dev=0)
