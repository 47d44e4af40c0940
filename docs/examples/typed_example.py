"""Typed use of cudamem, checked with ``mypy --strict`` (``make typecheck``):
cudamem ships stubs for its extension module (cudamem/_cudamem.pyi) and a
py.typed marker, so arrays, streams and events have precise types.

Run it on a GPU, or on cudamem's simulated driver:

    CUDAMEM_SIMULATOR=1 python docs/examples/typed_example.py
"""
import numpy as np
import numpy.typing as npt

import cudamem


def scale_on_device(host: npt.NDArray[np.float32],
                    stream: cudamem.Stream) -> cudamem.DeviceNDArray:
    """A device copy of ``host``, queued on ``stream``."""
    d_ary = cudamem.device_array(host.shape, host.dtype, stream=stream)
    d_ary.copy_to_device(host, stream=stream)
    return d_ary


def round_trip(batches: list[npt.NDArray[np.float32]]) -> float:
    """Copies every batch to the device and back on one stream; returns
    the milliseconds the stream took, measured with events."""
    stream: cudamem.Stream = cudamem.stream(non_blocking=True)
    start: cudamem.Event = cudamem.event()
    end = cudamem.event()
    start.record(stream=stream)
    d_batches = [scale_on_device(b, stream) for b in batches]
    out: list[npt.NDArray[np.float32]] = []
    for d_batch in d_batches:
        host = cudamem.pinned_array(d_batch.shape, dtype=np.float32)
        d_batch.copy_to_host(host, stream=stream)
        out.append(host)
    end.record(stream=stream)
    with stream.auto_synchronize():
        pass
    for got, want in zip(out, batches):
        np.testing.assert_array_equal(got, want)
    return cudamem.event_elapsed_time(start, end)


def describe(device: cudamem.Device) -> str:
    major, minor = device.compute_capability
    return "%s (compute capability %d.%d)" % (device.name, major, minor)


def main() -> None:
    if not cudamem.is_available():
        print("no CUDA driver; try CUDAMEM_SIMULATOR=1")
        return
    for device in cudamem.list_devices():
        print(describe(device))
    batches = [np.full(1024, i, dtype=np.float32) for i in range(4)]
    print("round trip: %.3f ms" % round_trip(batches))


if __name__ == "__main__":
    main()
