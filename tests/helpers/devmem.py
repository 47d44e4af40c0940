"""A device of a chosen memory size on the simulator, for the tests of
what happens near the end of a device's memory."""
import contextlib
import gc

import cudamem
from cudamem import _cudamem


@contextlib.contextmanager
def device_memory(sim, nbytes):
    """Device 0 reports nbytes of memory inside the block, 1 GiB after it.

    The contexts are closed at both ends: cudamem sizes a device's
    pending-free queue (a share of its memory) from the total the device
    reports when the queue is first used, which a real device never
    changes, so a queue made in the block must not outlive it."""
    gc.collect()
    cudamem.close()
    sim.set_memory(0, nbytes)
    try:
        yield sim
    finally:
        gc.collect()
        _cudamem._flush_pending()
        cudamem.close()
        sim.set_memory(0, 1 << 30)
