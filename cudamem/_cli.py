"""The commands ``info`` (the driver and devices) and ``bandwidth`` (host
<-> device transfer rates, timed with events) of ``python -m cudamem``
(cudamem/__main__.py, which parses the command line; the tour is
cudamem/_demo.py's). Only the public API is used; nothing here is
imported by ``import cudamem``.
"""
import contextlib
import json
import sys

from cudamem.devices import _size

KINDS = ("pageable", "pinned", "registered")
DIRECTIONS = ("htod", "dtoh")
DEFAULT_SIZES = "64K,1M,16M,256M"
SIMULATOR_NOTE = ("cudamem's simulated driver: these numbers time memcpy in "
                  "this process, not a GPU link; they mean nothing as GPU "
                  "bandwidth.")
# Device facts `info` prints: (label, attribute, how to write the value).
ATTRIBUTES = (
    ("multiprocessors", "MULTIPROCESSOR_COUNT", str),
    ("clock", "CLOCK_RATE", lambda khz: "%g MHz" % (khz / 1000)),
    ("memory clock", "MEMORY_CLOCK_RATE",
     lambda khz: "%g MHz" % (khz / 1000)),
    ("memory bus", "GLOBAL_MEMORY_BUS_WIDTH", lambda bits: "%d bits" % bits),
    ("L2 cache", "L2_CACHE_SIZE", _size),
    ("copy engines", "ASYNC_ENGINE_COUNT", str),
    ("maps host memory", "CAN_MAP_HOST_MEMORY",
     lambda v: "yes" if v else "no"),
    ("concurrent managed access", "CONCURRENT_MANAGED_ACCESS",
     lambda v: "yes" if v else "no"),
    ("ECC", "ECC_ENABLED", lambda v: "on" if v else "off"))


# ---------------------------------------------------------------------------
# Progress: tqdm.auto (a notebook widget in Jupyter) when it is installed
# and someone watches, else a text bar.

def _watched(file):
    """Whether a person sees *file* as it is written: a terminal or a
    notebook. A log or a pipe gets the finished bar only."""
    return "ipykernel" in sys.modules or bool(
        getattr(file, "isatty", lambda: False)())


class TextBar:
    """A one-line progress bar with tqdm's methods that cudamem uses,
    redrawn with carriage returns where someone watches (a terminal, a
    notebook); elsewhere (a log, a pipe) written once, when closed."""

    def __init__(self, total, desc, file, width=30):
        self.total, self.desc, self.file, self.width = total, desc, file, width
        self.n, self.postfix, self._shown = 0, "", 0
        self.live = _watched(file)
        self._draw()

    def _draw(self, final=False):
        if not (self.live or final):
            return
        done = self.width * self.n // self.total if self.total else self.width
        line = "%s [%s%s] %d/%d %s" % (
            self.desc, "#" * done, " " * (self.width - done), self.n,
            self.total, self.postfix)
        # Blanks over what a longer line before left.
        self.file.write("\r" + line.ljust(self._shown))
        self._shown = len(line)
        self.file.flush()

    def set_postfix_str(self, text):
        self.postfix = text
        self._draw()

    def update(self, n=1):
        self.n += n
        self._draw()

    def close(self):
        self.postfix = ""
        self._draw(final=True)
        self.file.write("\n")
        self.file.flush()


def progress(total, desc, file=None):
    """A progress bar over *total* steps on *file* (stderr): tqdm.auto's
    when tqdm is installed and someone watches, else a TextBar (tqdm would
    write every redraw into a log)."""
    file = sys.stderr if file is None else file
    if not _watched(file):
        return TextBar(total, desc, file)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return TextBar(total, desc, file)
    return tqdm(total=total, desc=desc, file=file, leave=False)


# ---------------------------------------------------------------------------
# info

def _driver_facts():
    """(driver dict, list of device dicts with their attributes) or raises
    CudaSupportError."""
    import cudamem
    from cudamem import driver

    facts = dict(driver.info())
    facts["version_text"] = "%d.%d" % driver.get_version()
    devices = []
    for dev, desc in zip(cudamem.list_devices(), driver.devices()):
        desc = dict(desc)
        desc["attributes"] = {attr: getattr(dev, attr)
                              for _, attr, _ in ATTRIBUTES}
        devices.append(desc)
    return facts, devices


def _unavailable_reason():
    import cudamem
    from cudamem import driver

    try:
        driver.info()
    except cudamem.CudaSupportError as exc:
        return str(exc)
    return None


def info(out=None, as_json=False):
    """Prints the driver and devices; 0, or 1 when CUDA is unavailable
    (saying why)."""
    import cudamem

    out = sys.stdout if out is None else out
    try:
        facts, devices = _driver_facts()
    except cudamem.CudaSupportError as exc:
        if as_json:
            json.dump({"available": False, "reason": str(exc)}, out,
                      indent=2)
            out.write("\n")
        else:
            print("CUDA is not available: %s" % exc, file=out)
            print("(CUDAMEM_SIMULATOR=1 runs cudamem on its simulated "
                  "driver.)", file=out)
        return 1
    if as_json:
        json.dump({"available": True, "cudamem": cudamem.__version__,
                   "driver": facts, "devices": devices}, out, indent=2)
        out.write("\n")
        return 0
    kind = ("cudamem's simulated driver" if facts["simulator"] else
            "CUDA driver")
    print("cudamem %s" % cudamem.__version__, file=out)
    print("%s: %s" % (kind, facts["path"]), file=out)
    print("driver version: %s" % facts["version_text"], file=out)
    print("default stream: %s" % ("per-thread" if
                                  facts["per_thread_default_stream"] else
                                  "legacy"), file=out)
    print("%d device%s" % (len(devices), "" if len(devices) == 1 else "s"),
          file=out)
    for dev in devices:
        print("  [%d] %s  compute capability %d.%d  %s  %s  %s" % (
            dev["id"], dev["name"], dev["compute_capability"][0],
            dev["compute_capability"][1], _size(dev["total_memory"]),
            dev["uuid"], dev["pci_bus_id"]), file=out)
        for label, attr, write in ATTRIBUTES:
            print("      %s: %s" % (label, write(dev["attributes"][attr])),
                  file=out)
    return 0


# ---------------------------------------------------------------------------
# bandwidth

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10,
          "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text):
    """'64K', '16MiB', '1G' or '4096' -> bytes (binary units)."""
    stripped = text.strip().upper()
    digits = stripped.rstrip("KMGIB")
    unit = stripped[len(digits):]
    if not digits.isdigit() or unit not in _UNITS or int(digits) == 0:
        raise ValueError("not a positive size: %r (e.g. 4096, 64K, 16M, "
                         "1G)" % text)
    return int(digits) * _UNITS[unit]


def parse_sizes(text):
    """'64K,1M' -> [65536, 1048576]."""
    sizes = [parse_size(x) for x in text.split(",") if x.strip()]
    if not sizes:
        raise ValueError("no sizes in %r" % text)
    return sizes


def _choices(text, allowed, everything):
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == [everything]:
        return list(allowed)
    for name in names:
        if name not in allowed:
            raise ValueError("%r is not one of %s or %s" % (
                name, ", ".join(allowed), everything))
    if not names:
        raise ValueError("nothing to measure in %r" % text)
    return names


def measure(sizes, kinds, directions, repeat, bar=None):
    """Times each copy with events on one stream: per (size, kind,
    direction), one untimed copy, then *repeat* timed ones. Returns a list
    of dicts: size, kind, direction, seconds (the median), best_seconds
    and gbps (size / median, 10**9 bytes per second)."""
    import numpy as np

    import cudamem

    stream = cudamem.stream()
    start, end = cudamem.event(), cudamem.event()
    results = []
    for size in sizes:
        dev = cudamem.device_array(size, np.uint8)
        pageable = np.ones(size, np.uint8)
        for kind in kinds:
            if kind == "pinned":
                host, hold = cudamem.pinned_array(size, np.uint8), None
                host[:] = 1
            else:
                host = pageable
                hold = cudamem.pinned(host) if kind == "registered" else None
            with hold if hold is not None else contextlib.nullcontext():
                for direction in directions:
                    if bar is not None:
                        bar.set_postfix_str("%s %s %s" % (
                            _size(size), kind, direction))
                    times = _time(dev, host, direction, repeat, stream,
                                  start, end)
                    median = sorted(times)[len(times) // 2]
                    results.append({
                        "size": size, "kind": kind, "direction": direction,
                        "seconds": median, "best_seconds": min(times),
                        "gbps": size / median / 1e9 if median > 0 else None})
                    if bar is not None:
                        bar.update()
    return results


def _time(dev, host, direction, repeat, stream, start, end):
    import cudamem

    if direction == "htod":
        def copy():
            dev.copy_to_device(host, stream=stream)
    else:
        def copy():
            dev.copy_to_host(host, stream=stream)
    copy()
    stream.synchronize()
    times = []
    for _ in range(repeat):
        start.record(stream)
        copy()
        end.record(stream)
        end.synchronize()
        times.append(cudamem.event_elapsed_time(start, end) / 1e3)
    return times


def _table(results, out):
    columns = sorted({(r["kind"], r["direction"]) for r in results},
                     key=lambda c: (KINDS.index(c[0]),
                                    DIRECTIONS.index(c[1])))
    by_key = {(r["size"], r["kind"], r["direction"]): r for r in results}
    header = ["size"] + ["%s %s" % c for c in columns]
    rows = []
    for size in sorted({r["size"] for r in results}):
        row = [_size(size)]
        for kind, direction in columns:
            gbps = by_key[(size, kind, direction)]["gbps"]
            row.append("-" if gbps is None else "%.2f" % gbps)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows + [header])
              for i in range(len(header))]
    print("GB/s (10^9 bytes per second; median of the timed copies)",
          file=out)
    for row in [header] + rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)),
              file=out)


def _plot(results, path, simulator):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind in KINDS:
        for direction in DIRECTIONS:
            points = [(r["size"], r["gbps"]) for r in results
                      if r["kind"] == kind and r["direction"] == direction
                      and r["gbps"] is not None]
            if points:
                ax.plot(*zip(*points), marker="o",
                        label="%s %s" % (kind, direction))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per copy")
    ax.set_ylabel("GB/s")
    ax.set_title("cudamem transfer bandwidth" +
                 (" (simulated driver: meaningless)" if simulator else ""))
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def bandwidth(args, out=None):
    """The `bandwidth` command; returns the exit status."""
    import cudamem
    from cudamem import driver

    out = sys.stdout if out is None else out
    reason = _unavailable_reason()
    if reason is not None:
        print("CUDA is not available: %s" % reason, file=sys.stderr)
        return 1
    simulator = driver.info()["simulator"]
    total = len(args.sizes) * len(args.kind) * len(args.direction)
    bar = progress(total, "bandwidth") if args.progress else None
    try:
        results = measure(args.sizes, args.kind, args.direction,
                          args.repeat, bar)
    finally:
        if bar is not None:
            bar.close()
    dev = cudamem.get_current_device()
    if args.json:
        json.dump({"device": {"id": dev.id, "name": dev.name},
                   "simulator": simulator,
                   "note": SIMULATOR_NOTE if simulator else None,
                   "repeat": args.repeat, "results": results}, out,
                  indent=2)
        out.write("\n")
    else:
        print("device %d: %s" % (dev.id, dev.name), file=out)
        if simulator:
            print("NOTE: " + SIMULATOR_NOTE, file=out)
        _table(results, out)
    if args.plot:
        _plot(results, args.plot, simulator)
        print("plot written to %s" % args.plot, file=sys.stderr)
    return 0
