"""Devices and contexts, numba.cuda's names: ``gpus``, ``get_context``,
``require_context``, ``profiling()``, ``detect()``, ``MemoryInfo`` and
``MemoryStats`` (also ``cudamem.cudadrv.devices``), and cudamem's
``memory_summary()`` with ``MemorySummary``. Thin Python over the C
functions (``select_device``, ``get_current_device``, ...); nothing here
loads the driver at import. Every call that touches a device does.
"""
import contextlib
import functools
import os
import sys
from collections import namedtuple

from cudamem import _cudamem

__all__ = ["MemoryInfo", "MemoryStats", "MemorySummary", "get_context",
           "gpus", "memory_summary", "require_context", "profiling",
           "detect"]

MemoryInfo = namedtuple("MemoryInfo", "free,total")

# The counters of each kind in memory_stats(), in a table's column order.
_STAT_COLUMNS = (("bytes_in_use", "in use"), ("bytes_peak", "peak"),
                 ("requested_bytes", "requested"),
                 ("requested_bytes_peak", "peak requested"),
                 ("count", "count"), ("count_peak", "peak count"),
                 ("allocations", "allocations"), ("frees", "frees"))


def _size(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return "%.4g %s" % (nbytes, unit)
        nbytes /= 1024.0


class MemoryStats(dict):
    """MemoryStats

    What ``memory_stats()`` returns: a dict (equal to the plain dict of the
    same counters) whose repr is a table of bytes and counts per kind of
    memory, shown as an HTML table in Jupyter. ``device`` is the ordinal of
    the device it describes."""

    __slots__ = ("device",)

    def __init__(self, device):
        super().__init__()
        self.device = device

    def _rows(self, abbreviated=False):
        """([kind, in use, peak, ...] rows in _STAT_COLUMNS' order,
        [(key, value)] of the other counters), sizes written out;
        abbreviated: without the kinds and counters that are all 0."""
        kinds = [k[:-len("_bytes_in_use")] for k in self
                 if k.endswith("_bytes_in_use")]
        rows, seen = [], set()
        for kind in kinds:
            keys = ["%s_%s" % (kind, suffix) for suffix, _ in _STAT_COLUMNS]
            if not all(k in self for k in keys):
                continue
            seen.update(keys)
            if abbreviated and not any(self[k] for k in keys):
                continue
            rows.append([kind] + [_size(self[k]) if "bytes" in k
                                  else str(self[k]) for k in keys])
        rest = [(k, _size(v) if "bytes" in k else str(v))
                for k, v in self.items()
                if k not in seen and not (abbreviated and v == 0)]
        return rows, rest

    def _text(self, title, abbreviated=False):
        rows, rest = self._rows(abbreviated)
        header = ["kind"] + [title for _, title in _STAT_COLUMNS]
        widths = [max(len(r[i]) for r in rows + [header])
                  for i in range(len(header))]
        lines = [title]
        for row in [header] + rows:
            lines.append("  ".join([row[0].ljust(widths[0])] + [
                cell.rjust(w) for cell, w in zip(row[1:], widths[1:])]))
        width = max(len(k) for k, _ in rest) if rest else 0
        lines.extend("%s  %s" % (k.ljust(width), v) for k, v in rest)
        return "\n".join(lines)

    def _html(self, title, abbreviated=False):
        import html

        rows, rest = self._rows(abbreviated)
        cell = '<td style="text-align:right">%s</td>'
        out = ['<table class="cudamem"><caption style="text-align:left">'
               '<b>%s</b></caption>' % html.escape(title),
               "<tr>%s</tr>" % "".join(
                   "<th>%s</th>" % html.escape(t) for t in
                   ["kind"] + [title for _, title in _STAT_COLUMNS])]
        for row in rows:
            out.append("<tr><th style=\"text-align:left\">%s</th>%s</tr>" % (
                html.escape(row[0]),
                "".join(cell % html.escape(v) for v in row[1:])))
        for key, value in rest:
            out.append('<tr><th style="text-align:left">%s</th>'
                       '<td colspan="%d" style="text-align:right">%s</td>'
                       "</tr>" % (html.escape(key), len(_STAT_COLUMNS),
                                  html.escape(value)))
        out.append("</table>")
        return "".join(out)

    def __repr__(self):
        return self._text("memory_stats(device=%s)" % self.device)

    def _repr_html_(self):
        """_repr_html_() -> str

        The table of repr() in HTML, for Jupyter."""
        return self._html("memory_stats(device=%s)" % self.device)


class MemorySummary(str):
    """MemorySummary

    What ``memory_summary()`` returns: the table as a str (print it), shown
    as an HTML table in Jupyter; ``stats`` is the ``MemoryStats`` it was
    made from."""

    __slots__ = ("stats", "abbreviated")

    def __new__(cls, stats, abbreviated=False):
        title = "cudamem memory summary, device %s" % stats.device
        self = super().__new__(cls, stats._text(title, abbreviated))
        self.stats = stats
        self.abbreviated = abbreviated
        return self

    def __reduce__(self):
        return MemorySummary, (self.stats, self.abbreviated)

    def _repr_html_(self):
        """_repr_html_() -> str

        The table in HTML, for Jupyter."""
        return self.stats._html(
            "cudamem memory summary, device %s" % self.stats.device,
            self.abbreviated)


def memory_summary(device=None, abbreviated=False):
    """memory_summary(device=None, abbreviated=False) -> MemorySummary

    ``memory_stats(device)`` as a readable table, as PyTorch's
    ``torch.cuda.memory_summary``: per kind of memory the bytes in use,
    requested and their peaks, the live count and its peak, allocations and
    frees, then the other counters. ``abbreviated`` leaves out the kinds and
    counters that are all 0. A str to print, whose ``_repr_html_`` is an
    HTML table in Jupyter."""
    if not isinstance(abbreviated, bool):
        raise TypeError("memory_summary: abbreviated must be a bool, not %r"
                        % (abbreviated,))
    return MemorySummary(_cudamem.memory_stats(device), abbreviated)


class _DeviceContextManager:
    """Device *i* of ``gpus``: a context manager that pushes the device's
    primary context and pops it on exit, so the previous context is
    current again. Other attributes are the Device's."""

    def __init__(self, device):
        self._device = device

    def __getattr__(self, item):
        return getattr(self._device, item)

    def __enter__(self):
        # Inside a require_context() call only its own device (numba's).
        _cudamem._check_switch(self._device)
        self._device.get_primary_context().push()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        # Pops the device's current primary context; raises if another
        # context is on top (it was not popped inside the block).
        self._device.get_primary_context().pop()

    def __eq__(self, other):
        if isinstance(other, _DeviceContextManager):
            other = other._device
        return self._device == other

    def __hash__(self):
        return hash(self._device)

    def __str__(self):
        return "<Managed Device %d>" % self._device.id

    __repr__ = __str__


class _DeviceList:
    """Every visible device, indexable by ordinal; ``len`` and iteration
    load the driver on first use."""

    def __init__(self):
        self._lst = None

    @property
    def lst(self):
        if self._lst is None:
            self._lst = [_DeviceContextManager(d)
                         for d in _cudamem.list_devices()]
        return self._lst

    def __getitem__(self, devnum):
        if not isinstance(devnum, (int, slice)):
            devnum = int(devnum)
        return self.lst[devnum]

    def __iter__(self):
        return iter(self.lst)

    def __len__(self):
        return len(self.lst)

    def __str__(self):
        return ", ".join(str(d) for d in self.lst)

    @property
    def current(self):
        """The device of the current context, or None when no context is
        current. Makes nothing current."""
        dev = _cudamem._active_device()
        return None if dev is None else self[dev.id]


gpus = _DeviceList()


def get_context(devnum=None):
    """get_context(devnum=None) -> Context

    numba's ``devices.get_context()``: ``current_context(devnum)``. With
    *devnum*, that device's primary context, made current; without, the
    current context (device 0's when none is). Loads the driver."""
    return _cudamem.current_context(devnum)


def require_context(fn):
    """require_context(fn) -> function

    A decorator that makes sure a CUDA context is current when *fn* runs
    (the current device's, else device 0's; see ``get_current_device``).
    While it runs, *fn* cannot switch to another device's context:
    ``select_device()``, ``current_context(devnum)``, ``get_context()``
    and ``with gpus[i]`` for another device raise numba's
    ``RuntimeError("Cannot switch CUDA-context.")`` on that thread."""

    @functools.wraps(fn)
    def _require_cuda_context(*args, **kws):
        previous = _cudamem._attach_device(_cudamem.get_current_device())
        try:
            return fn(*args, **kws)
        finally:
            _cudamem._attach_device(previous)

    return _require_cuda_context


@contextlib.contextmanager
def profiling():
    """profiling()

    Context manager that enables profiling on entry and disables it on
    exit."""
    _cudamem.profile_start()
    try:
        yield
    finally:
        _cudamem.profile_stop()


def detect():
    """detect() -> bool

    Prints a summary of the CUDA devices to ``sys.stdout`` in numba's
    format and returns whether any is supported (compute capability 5.0 or
    newer). Loads the driver."""
    devlist = _cudamem.list_devices()
    out = sys.stdout
    print("Found %d CUDA devices" % len(devlist), file=out)
    supported_count = 0
    for dev in devlist:
        attrs = []
        cc = dev.compute_capability
        kernel_timeout = dev.KERNEL_EXEC_TIMEOUT
        tcc = dev.TCC_DRIVER
        fp32_to_fp64_ratio = dev.SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        attrs += [("Compute Capability", "%d.%d" % cc)]
        attrs += [("PCI Device ID", dev.PCI_DEVICE_ID)]
        attrs += [("PCI Bus ID", dev.PCI_BUS_ID)]
        attrs += [("UUID", dev.uuid)]
        attrs += [("Watchdog", "Enabled" if kernel_timeout else "Disabled")]
        if os.name == "nt":
            attrs += [("Compute Mode", "TCC" if tcc else "WDDM")]
        attrs += [("FP32/FP64 Performance Ratio", fp32_to_fp64_ratio)]
        attrs += [("FP8 Hardware Acceleration",
                   "Yes" if dev.accelerates_fp8 else "No")]
        if cc < (5, 0):
            support = "[NOT SUPPORTED: CC < 5.0]"
        else:
            support = "[SUPPORTED]"
            supported_count += 1
        print("id %d    %20s %40s" % (dev.id, dev.name, support), file=out)
        for key, val in attrs:
            print("%40s: %s" % (key, val), file=out)
    print("Summary:", file=out)
    print("\t%d/%d devices are supported" % (supported_count, len(devlist)),
          file=out)
    return supported_count > 0


def defer_cleanup():
    """defer_cleanup() -> context manager

    numba's ``cuda.defer_cleanup()``: inside the block no pending free of
    the current context runs (streams, events and memory alike); blocks
    nest, and leaving one does not free anything by itself."""
    return _cudamem.current_context().defer_cleanup()
