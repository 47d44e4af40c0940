"""The CUDA driver cudamem loaded: which library, which version, devices.

Every function here loads the driver on first use (and raises
``CudaSupportError`` when it cannot be used), except ``table()``.
Loading order: ``CUDAMEM_DRIVER=<path>``; else the bundled simulated driver
when ``CUDAMEM_SIMULATOR=1``; else ``/usr/lib/wsl/lib/libcuda.so.1`` when
it exists, then ``libcuda.so.1``.
"""
from cudamem import _cudamem

__all__ = ["get_version", "info", "devices", "table"]


def get_version():
    """get_version() -> tuple[int, int]

    The driver's CUDA version as ``(major, minor)``, e.g. ``(12, 4)``."""
    version = _cudamem.driver_info()["version"]
    return (version // 1000, version % 1000 // 10)


def info():
    """info() -> dict

    ``path`` of the library loaded, ``version`` as the driver reports it
    (12040 for 12.4), ``simulator`` (bool) and ``per_thread_default_stream``
    (whether stream 0 means the per-thread default stream)."""
    return _cudamem.driver_info()


def devices():
    """devices() -> list[dict]

    One dict per visible device: ``id``, ``name``, ``compute_capability``,
    ``total_memory`` (bytes), ``uuid`` and ``pci_bus_id``."""
    return [_cudamem.device_info(i) for i in range(_cudamem.device_count())]


def table():
    """table() -> list[tuple[str, int, bool, bool, bool]]

    The driver entry points cudamem uses: ``(name, ABI version, required,
    has a per-thread-stream variant, resolved)``. Does not load the driver.
    """
    return _cudamem._driver_rows()
