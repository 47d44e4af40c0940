"""python -m cudamem [info|demo]

info  the driver cudamem loads (path, version, simulator or not, why CUDA
      is unavailable when it is) and every device.
demo  a short tour; without a usable GPU it runs on the simulated driver.
"""
import os
import subprocess
import sys


def _size(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return "%.4g %s" % (nbytes, unit)
        nbytes /= 1024.0


def info(out=sys.stdout):
    """Prints the driver and devices; returns 0, or 1 when CUDA is
    unavailable (saying why)."""
    import cudamem
    from cudamem import driver

    try:
        d = driver.info()
    except cudamem.CudaSupportError as exc:
        print("CUDA is not available: %s" % exc, file=out)
        return 1
    kind = "cudamem's simulated driver" if d["simulator"] else "CUDA driver"
    version = d["version"]
    print("%s: %s" % (kind, d["path"]), file=out)
    print("driver version: %d.%d" % (version // 1000, version % 1000 // 10),
          file=out)
    print("default stream: %s" % ("per-thread" if
                                  d["per_thread_default_stream"] else
                                  "legacy"), file=out)
    devices = driver.devices()
    print("%d device%s" % (len(devices), "" if len(devices) == 1 else "s"),
          file=out)
    for dev in devices:
        print("  [%d] %s  compute capability %d.%d  %s  %s  %s" % (
            dev["id"], dev["name"], dev["compute_capability"][0],
            dev["compute_capability"][1], _size(dev["total_memory"]),
            dev["uuid"], dev["pci_bus_id"]), file=out)
    return 0


def demo(out=sys.stdout):
    """The tour. Re-runs itself on the simulated driver when no real driver
    is usable, so it works on any machine."""
    import cudamem

    if not cudamem.is_available() and not os.environ.get("CUDAMEM_SIMULATOR"):
        print("No usable CUDA driver here; running the tour on cudamem's "
              "simulated driver (CUDAMEM_SIMULATOR=1).\n", file=out)
        out.flush()
        env = dict(os.environ, CUDAMEM_SIMULATOR="1")
        env.pop("CUDAMEM_DRIVER", None)
        return subprocess.call([sys.executable, "-m", "cudamem", "demo"],
                               env=env)
    print("== cudamem %s: which driver, which devices" % cudamem.__version__,
          file=out)
    return info(out)


def main(argv):
    command = argv[1] if len(argv) > 1 else "info"
    if command == "info":
        return info()
    if command == "demo":
        return demo()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
