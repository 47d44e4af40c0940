"""One operation repeated with a given number of live registrations or
allocations, for callgrind (benchmarks/NOTES.md, issue 23 "Cost
independent of what is live"):

    python benchmarks/live_tables.py pinned LIVE CALLS
        `with cudamem.pinned(page): pass` with LIVE pages registered
        around it (cudamem.register), each its own registration;
    python benchmarks/live_tables.py simalloc LIVE CALLS
        cuMemAlloc_v2(1) + cuMemFree_v2 on the simulator, through ctypes,
        with LIVE one-byte allocations live.
"""
import ctypes
import mmap
import os
import sys

import numpy as np


def pinned(live, calls):
    import cudamem

    page = mmap.PAGESIZE
    buf = np.zeros((live + 1) * page, dtype=np.uint8)
    base = -buf.ctypes.data % page
    pages = [buf[base + i * page:base + (i + 1) * page]
             for i in range(live + 1)]
    # The measured page in the middle: half the table on either side.
    target = pages.pop(live // 2)
    cudamem.register(*pages)
    for _ in range(calls):
        with cudamem.pinned(target):
            pass
    cudamem.deregister(*pages)


def simalloc(live, calls):
    import cudamem

    lib = ctypes.CDLL(os.path.join(os.path.dirname(cudamem.__file__),
                                   "libcusim.so"))
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()

    def ok(rc):
        if rc != 0:
            raise RuntimeError("CUresult %d" % rc)

    ok(lib.cuInit(0))
    ok(lib.cuDeviceGet(ctypes.byref(dev), 0))
    ok(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    ok(lib.cuCtxSetCurrent(ctx))
    held = []
    for _ in range(live):
        ok(lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1)))
        held.append(ptr.value)
    for _ in range(calls):
        ok(lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1)))
        ok(lib.cuMemFree_v2(ctypes.c_uint64(ptr.value)))
    for p in held:
        ok(lib.cuMemFree_v2(ctypes.c_uint64(p)))
    ok(lib.cuDevicePrimaryCtxRelease(dev))


if __name__ == "__main__":
    {"pinned": pinned, "simalloc": simalloc}[sys.argv[1]](
        int(sys.argv[2]), int(sys.argv[3]))
