"""Several GPUs with cudamem: arrays on each device, copies between them,
and one stream per device.

Run it with two GPUs, or on cudamem's simulated driver:

    CUDAMEM_SIMULATOR=1 CUDAMEM_SIM_DEVICES=2 python docs/examples/multigpu.py

(add CUDAMEM_SIM_NO_PEER=1 for devices without peer access).

What it shows:

* ``cudamem.gpus`` lists the devices; ``with cudamem.gpus[i]:`` makes
  device i current for the arrays and streams made inside the block
  (numba's idiom). Every array remembers its device.
* A copy between arrays on different devices (``copy_to_device``, slice
  assignment, ``to_device`` of another device's array) is one
  ``cuMemcpyPeer`` when the devices can access each other's memory
  (``can_access_peer``), else it goes through page-locked host memory:
  device to host, then host to device (the staging buffers stay
  page-locked in cudamem's host pool for the next such copy). Either way
  the result is the same.
* Each device has its own streams; a stream belongs to the device that
  was current when it was made, and copies on it are asynchronous until
  ``synchronize()``.
* ``memory_stats(ordinal)`` says what cudamem holds on each device.
"""
import numpy as np

import cudamem


def main():
    devices = cudamem.gpus
    if len(devices) < 2:
        raise SystemExit("this example needs two devices (on the "
                         "simulator: CUDAMEM_SIM_DEVICES=2)")
    first, second = devices[0], devices[1]
    peer = cudamem.can_access_peer(first.id, second.id)
    print("devices: %d; peer access 0 <-> 1: %s" % (len(devices), peer))

    host = np.arange(1 << 16, dtype=np.float32)
    halves = np.split(host, 2)

    # One array and one stream per device; each half is uploaded on its
    # own device's stream, so the two uploads are independent.
    parts, streams = [], []
    for device, half in zip((first, second), halves):
        with device:
            stream = cudamem.stream()
            parts.append(cudamem.to_device(half, stream=stream))
            streams.append(stream)
    for stream in streams:
        stream.synchronize()

    # Gather both halves on device 0: the first is local, the second comes
    # from device 1 (peer to peer, or staged through page-locked memory).
    with first:
        whole = cudamem.device_array(host.shape, dtype=host.dtype)
        whole[:halves[0].size].copy_to_device(parts[0], stream=streams[0])
        whole[halves[0].size:].copy_to_device(parts[1], stream=streams[0])
        streams[0].synchronize()
        assert np.array_equal(whole.copy_to_host(), host)

    # And back the other way: a reversed copy of device 0's array on
    # device 1, made by assignment from a view of the other device's array.
    with second:
        reverse = cudamem.device_array(host.shape, dtype=host.dtype)
        reverse[:] = whole[::-1]
        assert np.array_equal(reverse.copy_to_host(), host[::-1])

    # to_device of another device's array copies it to the current device.
    with second:
        moved = cudamem.to_device(parts[0])
    assert np.array_equal(moved.copy_to_host(), halves[0])

    for device in (first, second):
        stats = cudamem.memory_stats(device.id)
        print("device %d: %d bytes in %d arrays" % (
            device.id, stats["device_bytes_in_use"], stats["device_count"]))
    print("ok")


if __name__ == "__main__":
    main()
