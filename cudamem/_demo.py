"""The tour that ``python -m cudamem demo`` (and ``make demo``) prints: each
step shows the code it runs and checks its result against NumPy. The
command line is cudamem/__main__.py's; the driver facts and the bandwidth
measurement it shows are cudamem/_cli.py's, which never imports this.
"""
import importlib.util
import os
import subprocess
import sys

import numpy as np

import cudamem
from cudamem import _cli
from cudamem.devices import _size

# Pinned vs pageable: one size, a few copies each way.
BANDWIDTH_SIZE = 32 << 20
BANDWIDTH_REPEAT = 3


def _section(out, title):
    print("\n== %s" % title, file=out)


def _show(out, code, result=None):
    print("   >>> %s" % code, file=out)
    if result is not None:
        for line in str(result).splitlines():
            print("   %s" % line, file=out)


def _check(out, what, ok):
    print("   %s %s" % ("ok:" if ok else "MISMATCH:", what), file=out)
    return ok


def devices(out):
    _section(out, "1. cudamem %s: which driver, which devices"
             % cudamem.__version__)
    status = _cli.info(out)
    dev = cudamem.get_current_device()
    _show(out, "cuda.get_current_device()", repr(dev))
    return status == 0


def round_trip(out):
    _section(out, "2. A round trip: NumPy -> device -> NumPy")
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    _show(out, "host = np.arange(12, dtype=np.float32).reshape(3, 4)")
    d = cudamem.to_device(host)
    _show(out, "d = cuda.to_device(host)", repr(d))
    back = d.copy_to_host()
    _show(out, "d.copy_to_host()", back)
    return _check(out, "the copy back equals the original",
                  np.array_equal(back, host))


def views(out):
    _section(out, "3. Views share memory; assignment writes through")
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = cudamem.to_device(host)
    col = d[:, 1]
    _show(out, "col = d[:, 1]    # a strided view, no copy", repr(col))
    d[1:, ::2] = -1
    host[1:, ::2] = -1
    _show(out, "d[1:, ::2] = -1  # a scalar fill of a strided region")
    _show(out, "d.copy_to_host()", d.copy_to_host())
    ok = _check(out, "equals the same assignment on NumPy",
                np.array_equal(d.copy_to_host(), host))
    _show(out, "col.copy_to_host()", col.copy_to_host())
    return _check(out, "the view sees the assignment",
                  np.array_equal(col.copy_to_host(), host[:, 1])) and ok


def streams(out):
    _section(out, "4. Streams and events: an asynchronous, timed transfer")
    n = 4 << 20
    host = cudamem.pinned_array(n, np.float32)
    host[:] = np.arange(n, dtype=np.float32)
    stream = cudamem.stream()
    start, end = cudamem.event(), cudamem.event()
    _show(out, "stream = cuda.stream(); start, end = cuda.event(), "
          "cuda.event()")
    _show(out, "host = cuda.pinned_array(%d, np.float32)  # %s" % (
        n, _size(host.nbytes)))
    start.record(stream)
    d = cudamem.to_device(host, stream=stream)
    end.record(stream)
    _show(out, "start.record(stream); d = cuda.to_device(host, "
          "stream=stream); end.record(stream)")
    end.synchronize()
    ms = cudamem.event_elapsed_time(start, end)
    _show(out, "end.synchronize(); cuda.event_elapsed_time(start, end)",
          "%.3f ms (%.2f GB/s)" % (ms, host.nbytes / ms / 1e6
                                    if ms > 0 else float("nan")))
    return _check(out, "the device copy equals the host array",
                  np.array_equal(d.copy_to_host(stream=stream), host))


def bandwidth(out):
    _section(out, "5. Pinned vs pageable host memory (%s per copy)"
             % _size(BANDWIDTH_SIZE))
    if cudamem.driver.info()["simulator"]:
        print("   NOTE: " + _cli.SIMULATOR_NOTE, file=out)
    results = _cli.measure([BANDWIDTH_SIZE], ["pageable", "pinned"],
                           list(_cli.DIRECTIONS), BANDWIDTH_REPEAT)
    for r in results:
        print("   %-8s %-4s  %8.2f GB/s" % (r["kind"], r["direction"],
                                            r["gbps"] or 0.0), file=out)
    print("   (python -m cudamem bandwidth measures more sizes and "
          "registered memory)", file=out)
    return len(results) == 4


def interop(out):
    _section(out, "6. Interop")
    host = np.linspace(0, 1, 5)
    d = cudamem.to_device(host)
    _show(out, "d.__cuda_array_interface__['shape'], ['typestr']",
          (d.__cuda_array_interface__["shape"],
           d.__cuda_array_interface__["typestr"]))
    _show(out, "np.asarray(d)  # copies to the host", np.asarray(d))
    ok = _check(out, "NumPy sees the device's values",
                np.array_equal(np.asarray(d), host))
    mapped = cudamem.mapped_array(5)
    _show(out, "m = cuda.mapped_array(5); isinstance(m, np.ndarray)  "
          "# the device reads it too", isinstance(mapped, np.ndarray))
    simulator = cudamem.driver.info()["simulator"]
    for name, code in (("cupy", "cupy.asarray(d)"),
                       ("torch", "torch.from_dlpack(d)")):
        if importlib.util.find_spec(name) is None:
            print("   %s: not installed (%s would share d's memory)"
                  % (name, code), file=out)
        elif simulator:
            print("   %s: installed, but simulated device memory is not "
                  "a GPU's; %s needs a real one" % (name, code), file=out)
        else:
            ok = _foreign(out, name, code, d, host) and ok
    return ok


def _foreign(out, name, code, d, host):
    mod = importlib.import_module(name)
    other = mod.asarray(d) if name == "cupy" else mod.from_dlpack(d)
    _show(out, code, repr(other))
    back = (mod.asnumpy(other) if name == "cupy" else
            other.cpu().numpy())
    return _check(out, "%s sees the same values" % name,
                  np.array_equal(back, host))


def stats(out):
    _section(out, "7. What cudamem holds: cuda.memory_stats()")
    d = cudamem.device_array((1024, 1024), np.float32)
    _show(out, "d = cuda.device_array((1024, 1024), np.float32)")
    stats = cudamem.memory_stats()
    _show(out, "cuda.memory_stats()", repr(stats))
    return _check(out, "d's 4 MiB are counted in use",
                  stats["device_bytes_in_use"] >= d.nbytes)


STEPS = (devices, round_trip, views, streams, bandwidth, interop, stats)


def tour(out):
    """Runs every step; 0 when each result matched NumPy, else 1."""
    failed = [step.__name__ for step in STEPS if not step(out)]
    print("\n%s" % ("Every result matched NumPy." if not failed else
                    "FAILED: %s" % ", ".join(failed)), file=out)
    return 1 if failed else 0


def demo(out=None):
    """The tour. Re-runs itself on the simulated driver when no real driver
    is usable, so it works on any machine."""
    out = sys.stdout if out is None else out
    if not cudamem.is_available() and not os.environ.get("CUDAMEM_SIMULATOR"):
        print("No usable CUDA driver here (%s); running the tour on "
              "cudamem's simulated driver (CUDAMEM_SIMULATOR=1).\n"
              % _cli._unavailable_reason(), file=out)
        out.flush()
        env = dict(os.environ, CUDAMEM_SIMULATOR="1")
        env.pop("CUDAMEM_DRIVER", None)
        return subprocess.call([sys.executable, "-m", "cudamem", "demo"],
                               env=env)
    return tour(out)
