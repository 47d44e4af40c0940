"""Helpers of the memory-manager tests: driver call counts, an array's
address, and work queued on a stream long enough to observe."""
import numpy as np

QUEUED = 8  # copies: 200 ms with the tests' 25 ms stream delay


def calls(sim, entry):
    """How many times the driver's `entry` was called so far."""
    return sim.stats()["calls"][entry]["calls"]


def ptr(arr):
    """arr's device address."""
    return arr.__cuda_array_interface__["data"][0]


def queue_work(arr, stream):
    """At least 200 ms of work on `stream` that writes arr (zeros)."""
    host = np.zeros(arr.shape, arr.dtype)
    for _ in range(QUEUED):
        arr.copy_to_device(host, stream=stream)
