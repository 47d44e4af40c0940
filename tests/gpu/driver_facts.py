"""Ask the driver the facts cudamem's free path, pools and synchronize use.

    python tests/gpu/driver_facts.py [--json PATH] [--time]

Each fact is a question put straight to ``libcuda.so.1`` through ctypes
(no cudamem code in between), so the same script answers it for a GPU's
driver and for the simulator (with its folder first on LD_LIBRARY_PATH);
tests/gpu/driver_facts.json holds a GPU's answers (its header says
which), and tests/simulator/test_driver_facts.py holds the simulator to
them.

- ``free_other_context``: cuMemFree of memory from context A while another
  context B of the same device is current; then whether the pointer is
  gone (cuPointerGetAttribute answers CUDA_ERROR_INVALID_VALUE).
- ``free_no_context``: cuMemFree with no context current.
- ``pool_after_reset``: a pool made by cuMemPoolCreate, used after
  cuDevicePrimaryCtxReset (an attribute read and an allocation from it).
- ``free_host`` and ``unregister``: cuMemFreeHost and
  cuMemHostUnregister with another context current and with none.
- ``ranges``: cuPointerGetAttributes' memory type, device ordinal, range
  start and range size for a pointer 100 bytes into device, managed,
  mapped (cuMemHostAlloc) and registered memory, against
  cuMemGetAddressRange, with the memory's context current and with none.
- ``ctx_record_event``: cuCtxRecordEvent (drivers for CUDA 12.5 on) and
  cuEventQuery on an idle context; with a host function holding the
  legacy stream, then a non-blocking one (the query before and after the
  function returns); with a stream capturing in global and in relaxed
  mode (its answer and cuStreamEndCapture's), and cuCtxSynchronize's
  answers in the same place, since cudamem's synchronize() would probe
  with the one before it calls the other.

- ``pool_release``: which synchronize gives back what a stream-ordered
  pool holds over its release threshold. 64 MiB is allocated and freed
  with cuMemAllocAsync / cuMemFreeAsync on a non-blocking or a blocking
  stream of the default pool (threshold 0), cuStreamQuery waits until
  it ran (a query is no synchronize), then one call: cuCtxSynchronize,
  cuStreamSynchronize of the freeing stream, of another or of the legacy
  stream, cuEventSynchronize of an event recorded on the freeing stream
  after the free or before it, on the legacy stream after it, or by
  cuCtxRecordEvent after it. The answer is "released" or "kept"; with a
  threshold of 32 MiB, the bytes a synchronize of the freeing stream
  leaves reserved.

``--time`` also prints what one idle probe (cuCtxRecordEvent +
cuEventQuery) costs against cuCtxSynchronize through ctypes, min of
5 x 20,000; timings are not facts and stay out of the JSON.
"""

import ctypes
import json
import mmap
import sys
import threading
import time

CU_POINTER_ATTRIBUTE_CONTEXT = 1
RANGE_ATTRS = (2, 9, 11, 12)  # type, ordinal, range start, range size
CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4
CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5
SIZE = 1 << 20
CU_EVENT_DISABLE_TIMING = 2
CU_STREAM_NON_BLOCKING = 1
CAPTURE_MODES = (("global", 0), ("relaxed", 2))
HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _PoolProps(ctypes.Structure):
    _fields_ = [
        ("allocType", ctypes.c_int),
        ("handleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32SecurityAttributes", ctypes.c_void_p),
        ("maxSize", ctypes.c_size_t),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 54),
    ]


class Driver:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check("cuInit", 0)
        dev = ctypes.c_int()
        self.check("cuDeviceGet", ctypes.byref(dev), 0)
        self.dev = dev.value

    def call(self, name, *args):
        return getattr(self.lib, name)(*args)

    def check(self, name, *args):
        rc = self.call(name, *args)
        if rc != 0:
            raise RuntimeError(f"{name} returned {self.error_name(rc)}")

    def error_name(self, rc):
        s = ctypes.c_char_p()
        if self.lib.cuGetErrorName(rc, ctypes.byref(s)) != 0 or not s.value:
            return str(rc)
        return s.value.decode()

    def primary(self):
        ctx = ctypes.c_void_p()
        self.check("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self.dev)
        self.check("cuCtxSetCurrent", ctx)
        return ctx

    def alloc(self):
        ptr = ctypes.c_uint64()
        self.check("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(SIZE))
        return ptr

    def pointer_context(self, ptr):
        ctx = ctypes.c_void_p()
        rc = self.call("cuPointerGetAttribute", ctypes.byref(ctx),
                       CU_POINTER_ATTRIBUTE_CONTEXT, ptr)
        return self.error_name(rc)


def free_other_context(d):
    d.primary()
    ptr = d.alloc()
    other = ctypes.c_void_p()
    d.check("cuCtxCreate_v2", ctypes.byref(other), 0, d.dev)
    rc = d.error_name(d.call("cuMemFree_v2", ptr))
    after = d.pointer_context(ptr)
    d.check("cuCtxDestroy_v2", other)
    d.primary()
    if rc != "CUDA_SUCCESS":
        d.check("cuMemFree_v2", ptr)
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    return {"cuMemFree": rc, "cuPointerGetAttribute after": after}


def free_no_context(d):
    d.primary()
    ptr = d.alloc()
    d.check("cuCtxSetCurrent", None)
    rc = d.error_name(d.call("cuMemFree_v2", ptr))
    d.primary()
    after = d.pointer_context(ptr)
    if rc != "CUDA_SUCCESS":
        d.check("cuMemFree_v2", ptr)
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    return {"cuMemFree": rc, "cuPointerGetAttribute after": after}


def pool_after_reset(d):
    d.primary()
    props = _PoolProps(allocType=1, location=_Location(1, d.dev))
    pool = ctypes.c_void_p()
    d.check("cuMemPoolCreate", ctypes.byref(pool), ctypes.byref(props))
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    d.check("cuDevicePrimaryCtxReset_v2", d.dev)
    d.primary()
    value = ctypes.c_uint64()
    attr = d.error_name(d.call("cuMemPoolGetAttribute", pool,
                               CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                               ctypes.byref(value)))
    ptr = ctypes.c_uint64()
    alloc = d.error_name(d.call("cuMemAllocFromPoolAsync", ctypes.byref(ptr),
                                ctypes.c_size_t(SIZE), pool, None))
    if alloc == "CUDA_SUCCESS":
        d.check("cuMemFreeAsync", ptr, None)
        d.check("cuCtxSynchronize")
    destroy = d.error_name(d.call("cuMemPoolDestroy", pool))
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    return {"cuMemPoolGetAttribute": attr, "cuMemAllocFromPoolAsync": alloc,
            "cuMemPoolDestroy": destroy}


def with_none_or_other(d, run):
    """run(d) with another context current, then with none; both
    answers, each as an error name."""
    out = {}
    for where in ("other context", "no context"):
        d.primary()
        other = ctypes.c_void_p()
        if where == "other context":
            # cuCtxCreate pushes; popped, so that the stack stays one deep
            # and cuCtxSetCurrent(NULL) leaves none current.
            d.check("cuCtxCreate_v2", ctypes.byref(other), 0, d.dev)
            d.check("cuCtxPopCurrent_v2", ctypes.byref(ctypes.c_void_p()))
        out[where] = run(d, other if where == "other context" else None)
        if other:
            d.check("cuCtxDestroy_v2", other)
        d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    return out


def free_host(d):
    def run(d, other):
        p = ctypes.c_void_p()
        d.check("cuCtxSetCurrent", None)
        d.primary()
        d.check("cuMemHostAlloc", ctypes.byref(p), ctypes.c_size_t(SIZE), 0)
        d.check("cuCtxSetCurrent", other)
        rc = d.error_name(d.call("cuMemFreeHost", p))
        d.primary()
        if rc != "CUDA_SUCCESS":
            d.check("cuMemFreeHost", p)
        d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
        return rc
    return with_none_or_other(d, run)


def unregister(d):
    buf = mmap.mmap(-1, SIZE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))

    def run(d, other):
        d.primary()
        d.check("cuMemHostRegister_v2", ctypes.c_void_p(addr),
                ctypes.c_size_t(SIZE), 0)
        d.check("cuCtxSetCurrent", other)
        rc = d.error_name(d.call("cuMemHostUnregister", ctypes.c_void_p(addr)))
        d.primary()
        if rc != "CUDA_SUCCESS":
            d.check("cuMemHostUnregister", ctypes.c_void_p(addr))
        d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
        return rc
    return with_none_or_other(d, run)


def pointer_range(d, ptr):
    """Both ways of asking for ptr's allocation, with the memory's context
    current and with none."""
    out = {}
    for where in ("current", "no context"):
        if where == "no context":
            d.check("cuCtxSetCurrent", None)
        vals = [ctypes.c_uint(), ctypes.c_int(), ctypes.c_uint64(),
                ctypes.c_size_t()]
        data = (ctypes.c_void_p * 4)(*(ctypes.addressof(v) for v in vals))
        attrs = (ctypes.c_int * 4)(*RANGE_ATTRS)
        rc = d.error_name(d.call("cuPointerGetAttributes", 4, attrs, data,
                                 ctypes.c_uint64(ptr)))
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        rc2 = d.error_name(d.call("cuMemGetAddressRange_v2",
                                  ctypes.byref(base), ctypes.byref(size),
                                  ctypes.c_uint64(ptr)))
        out[where] = {
            "cuPointerGetAttributes": rc,
            "type, ordinal, ptr - start, size": [
                vals[0].value, vals[1].value, ptr - vals[2].value,
                vals[3].value],
            "cuMemGetAddressRange": rc2,
            "ptr - base, size": ([ptr - base.value, size.value]
                                 if rc2 == "CUDA_SUCCESS" else None)}
        d.primary()
        d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    return out


def ranges(d):
    d.primary()
    out = {}
    ptr = d.alloc()
    out["device"] = pointer_range(d, ptr.value + 100)
    d.check("cuMemFree_v2", ptr)
    d.check("cuMemAllocManaged", ctypes.byref(ptr), ctypes.c_size_t(SIZE), 1)
    out["managed"] = pointer_range(d, ptr.value + 100)
    d.check("cuMemFree_v2", ptr)
    host = ctypes.c_void_p()
    d.check("cuMemHostAlloc", ctypes.byref(host), ctypes.c_size_t(SIZE), 2)
    d.check("cuMemHostGetDevicePointer_v2", ctypes.byref(ptr), host, 0)
    out["mapped"] = pointer_range(d, ptr.value + 100)
    d.check("cuMemFreeHost", host)
    buf = mmap.mmap(-1, SIZE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    d.check("cuMemHostRegister_v2", ctypes.c_void_p(addr),
            ctypes.c_size_t(SIZE), 2)
    d.check("cuMemHostGetDevicePointer_v2", ctypes.byref(ptr),
            ctypes.c_void_p(addr), 0)
    out["registered"] = pointer_range(d, ptr.value + 100)
    d.check("cuMemHostUnregister", ctypes.c_void_p(addr))
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    return out


def _stream(d, flags):
    s = ctypes.c_void_p()
    if flags is not None:
        d.check("cuStreamCreate", ctypes.byref(s), flags)
    return s


def _held(d, ev, flags):
    """Record ev on the context while a host function holds a stream:
    the record's answer, the query's while held and after release."""
    s = _stream(d, flags)
    gate = threading.Event()
    fn = HOSTFN(lambda _: gate.wait(10))
    d.check("cuLaunchHostFunc", s, fn, None)
    ctx = ctypes.c_void_p()
    d.check("cuCtxGetCurrent", ctypes.byref(ctx))
    rec = d.error_name(d.call("cuCtxRecordEvent", ctx, ev))
    held = d.error_name(d.call("cuEventQuery", ev))
    gate.set()
    d.check("cuStreamSynchronize", s)
    d.check("cuEventSynchronize", ev)
    after = d.error_name(d.call("cuEventQuery", ev))
    if flags is not None:
        d.check("cuStreamDestroy_v2", s)
    return {"cuCtxRecordEvent": rec, "cuEventQuery held": held,
            "cuEventQuery after": after}


def _during_capture(d, mode, call):
    """call() while another stream captures in mode: its answer and
    cuStreamEndCapture's."""
    s = _stream(d, CU_STREAM_NON_BLOCKING)
    d.check("cuStreamBeginCapture_v2", s, mode)
    rc = d.error_name(call())
    graph = ctypes.c_void_p()
    end = d.error_name(d.call("cuStreamEndCapture", s, ctypes.byref(graph)))
    if graph:
        d.check("cuGraphDestroy", graph)
    d.check("cuStreamDestroy_v2", s)
    return [rc, end]


def ctx_record_event(d):
    try:
        d.lib.cuCtxRecordEvent
    except AttributeError:
        return {"cuCtxRecordEvent": "absent"}
    ctx = d.primary()
    ev = ctypes.c_void_p()
    d.check("cuEventCreate", ctypes.byref(ev), CU_EVENT_DISABLE_TIMING)
    out = {"idle": [d.error_name(d.call("cuCtxRecordEvent", ctx, ev)),
                    d.error_name(d.call("cuEventQuery", ev))]}
    out["legacy stream held"] = _held(d, ev, None)
    out["non-blocking stream held"] = _held(d, ev, CU_STREAM_NON_BLOCKING)
    for name, mode in CAPTURE_MODES:
        out["capture " + name] = {
            "cuCtxRecordEvent, cuStreamEndCapture": _during_capture(
                d, mode, lambda: d.call("cuCtxRecordEvent", ctx, ev)),
            "cuCtxSynchronize, cuStreamEndCapture": _during_capture(
                d, mode, lambda: d.call("cuCtxSynchronize"))}
    d.check("cuEventDestroy_v2", ev)
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    return out


class _Pool:
    """The default pool, at a release threshold, emptied."""

    def __init__(self, d, threshold=0):
        self.d = d
        self.pool = ctypes.c_void_p()
        d.check("cuDeviceGetDefaultMemPool", ctypes.byref(self.pool), d.dev)
        self.set_threshold(threshold)

    def set_threshold(self, nbytes):
        value = ctypes.c_uint64(nbytes)
        self.d.check("cuMemPoolSetAttribute", self.pool,
                     CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, ctypes.byref(value))
        self.d.check("cuMemPoolTrimTo", self.pool, ctypes.c_size_t(0))

    def reserved(self):
        value = ctypes.c_uint64()
        self.d.check("cuMemPoolGetAttribute", self.pool,
                     CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, ctypes.byref(value))
        return value.value

    def free_on(self, stream, nbytes=64 << 20):
        """nbytes allocated and freed on stream, run (by queries only):
        the pool holds them."""
        ptr = ctypes.c_uint64()
        self.d.check("cuMemAllocAsync", ctypes.byref(ptr),
                     ctypes.c_size_t(nbytes), stream)
        self.d.check("cuMemFreeAsync", ptr, stream)
        while self.d.error_name(self.d.call("cuStreamQuery", stream)) \
                == "CUDA_ERROR_NOT_READY":
            pass
        if self.reserved() < nbytes:
            raise RuntimeError(f"the pool holds {self.reserved()} bytes "
                               f"after a free of {nbytes}")


def pool_release(d):
    ctx = d.primary()
    pool = _Pool(d)
    other = _stream(d, CU_STREAM_NON_BLOCKING)
    ev = ctypes.c_void_p()
    d.check("cuEventCreate", ctypes.byref(ev), CU_EVENT_DISABLE_TIMING)
    legacy = ctypes.c_void_p()

    def record_sync(stream):
        d.check("cuEventRecord", ev, stream)
        return d.call("cuEventSynchronize", ev)

    calls = {
        "cuStreamQuery of the freeing stream":
            lambda s: d.call("cuStreamQuery", s),
        "cuCtxSynchronize": lambda s: d.call("cuCtxSynchronize"),
        "cuStreamSynchronize of the freeing stream":
            lambda s: d.call("cuStreamSynchronize", s),
        "cuStreamSynchronize of another stream":
            lambda s: d.call("cuStreamSynchronize", other),
        "cuStreamSynchronize of the legacy stream":
            lambda s: d.call("cuStreamSynchronize", legacy),
        "cuEventSynchronize, recorded on the freeing stream after":
            record_sync,
        "cuEventSynchronize, recorded on the legacy stream after":
            lambda s: record_sync(legacy),
        "cuEventSynchronize, recorded by cuCtxRecordEvent after":
            lambda s: (d.check("cuCtxRecordEvent", ctx, ev),
                       d.call("cuEventSynchronize", ev))[1],
    }
    out = {}
    for kind, flags in (("non-blocking", CU_STREAM_NON_BLOCKING),
                        ("blocking", 0)):
        s = _stream(d, flags)
        answers = out[kind + " stream frees"] = {}
        for name, call in calls.items():
            pool.free_on(s)
            rc = call(s)
            if rc != 0:
                raise RuntimeError(f"{name} returned {d.error_name(rc)}")
            answers[name] = "released" if pool.reserved() == 0 else "kept"
            pool.set_threshold(0)
        d.check("cuEventRecord", ev, s)
        pool.free_on(s)
        d.check("cuEventSynchronize", ev)
        answers["cuEventSynchronize, recorded on the freeing stream "
                "before"] = "released" if pool.reserved() == 0 else "kept"
        pool.set_threshold(0)
        d.check("cuStreamDestroy_v2", s)
    s = _stream(d, CU_STREAM_NON_BLOCKING)
    pool.set_threshold(32 << 20)
    pool.free_on(s)
    d.check("cuStreamSynchronize", s)
    out["threshold 32 MiB, 64 MiB freed, its stream synchronized: "
        "reserved"] = pool.reserved()
    pool.set_threshold(0)
    for stream in (s, other):
        d.check("cuStreamDestroy_v2", stream)
    d.check("cuEventDestroy_v2", ev)
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)
    return out


def _best(fn, rounds=5, n=20000):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e9


def timings(d):
    """ns per idle probe against ns per cuCtxSynchronize, through
    ctypes, whose own cost cuDriverGetVersion shows."""
    ctx = d.primary()
    ev = ctypes.c_void_p()
    d.check("cuEventCreate", ctypes.byref(ev), CU_EVENT_DISABLE_TIMING)
    lib, version = d.lib, ctypes.c_int()
    rows = {"cuDriverGetVersion": lambda: lib.cuDriverGetVersion(
                ctypes.byref(version)),
            "cuCtxSynchronize": lib.cuCtxSynchronize}
    if hasattr(lib, "cuCtxRecordEvent"):
        rows["cuCtxRecordEvent + cuEventQuery"] = lambda: (
            lib.cuCtxRecordEvent(ctx, ev), lib.cuEventQuery(ev))
        rows["cuEventQuery"] = lambda: lib.cuEventQuery(ev)
    for name, fn in rows.items():
        print(f"{name}: {_best(fn):.0f} ns")
    d.check("cuEventDestroy_v2", ev)
    d.check("cuDevicePrimaryCtxRelease_v2", d.dev)


FACTS = (free_other_context, free_no_context, pool_after_reset, free_host,
         unregister, ranges, ctx_record_event, pool_release)


def main(argv):
    d = Driver()
    if "--time" in argv:
        argv = [a for a in argv if a != "--time"]
        timings(d)
    out = {}
    for fact in FACTS:
        try:
            out[fact.__name__] = fact(d)
        except RuntimeError as e:
            out[fact.__name__] = {"failed": str(e)}
    for name, answer in out.items():
        print(name, json.dumps(answer))
    if len(argv) == 2 and argv[0] == "--json":
        with open(argv[1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
