"""A downstream project's GPU data movement: batches of host data staged
onto the device on two streams, and results gathered back into one host
array. Nothing here computes on the GPU; kernels (numba, CuPy, ...) would
consume the device arrays stage_in returns."""
import numpy as np

import cudamem


def stage_in(batches, nstreams=2):
    """stage_in(batches, nstreams=2) -> list[DeviceNDArray]

    A device copy of every host batch, the copies spread over ``nstreams``
    non-blocking streams; complete when it returns."""
    if nstreams < 1:
        raise ValueError("nstreams must be at least 1, got %r" % (nstreams,))
    streams = [cudamem.stream(non_blocking=True) for _ in range(nstreams)]
    out = []
    for i, batch in enumerate(batches):
        stream = streams[i % nstreams]
        d_batch = cudamem.device_array(batch.shape, batch.dtype, stream=stream)
        d_batch.copy_to_device(batch, stream=stream)
        out.append(d_batch)
    # Non-blocking streams are not ordered against the default stream that
    # the caller's next synchronous copy uses: wait for all of them here.
    for stream in streams:
        stream.synchronize()
    return out


def gather(d_batches):
    """gather(d_batches) -> numpy.ndarray

    The device batches concatenated into one host array, through one
    page-locked buffer and one stream."""
    total = sum(d.size for d in d_batches)
    dtype = d_batches[0].dtype if d_batches else np.float64
    host = cudamem.pinned_array(total, dtype=dtype)
    stream = cudamem.stream()
    start = 0
    for d_batch in d_batches:
        stop = start + d_batch.size
        d_batch.reshape(d_batch.size).copy_to_host(host[start:stop],
                                                   stream=stream)
        start = stop
    stream.synchronize()
    return np.array(host)
