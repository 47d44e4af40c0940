"""The simulated driver's context, stream, event and memory entry points
that clients such as cuda.core and numba-cuda ask for (cuCtxGetId,
cuCtxGet/SetLimit, cuCtxGetApiVersion, cuDeviceGetP2PAttribute,
cuStreamGetId, cuStreamGet/SetAttribute, cuEventRecordWithFlags,
cuCtxRecordEvent, cuMemAllocPitch, cuPointerSetAttribute,
cuMemRangeGetAttribute(s), cuMemcpyBatchAsync) against the CUDA driver
documentation, driven through ctypes as such a client drives it. Each case
runs in a fresh process."""
import textwrap

import pytest

from tests.helpers.run import ROOT
from tests.helpers.simdriver import run_entries

pytestmark = pytest.mark.simulator

INVALID_VALUE, INVALID_DEVICE, INVALID_CONTEXT = 1, 101, 201
UNSUPPORTED_LIMIT, INVALID_HANDLE, NOT_READY = 215, 400, 600


def test_context_ids_and_api_version(run_py):
    out = run_entries(run_py, """
        a, b, cur = c_uint64(), c_uint64(), c_uint64()
        ok(lib.cuCtxGetId(ctx0, byref(a)), "id")
        ok(lib.cuCtxGetId(None, byref(cur)), "current id")
        other = c_void_p()
        ok(lib.cuCtxCreate_v2(byref(other), 0, 0), "cuCtxCreate")
        ok(lib.cuCtxGetId(other, byref(b)), "other id")
        show(a.value != 0, a.value == cur.value, a.value != b.value)
        ok(lib.cuCtxDestroy_v2(other), "cuCtxDestroy")
        show(lib.cuCtxGetId(other, byref(b)), lib.cuCtxGetId(ctx0, None))
        v = ctypes.c_uint()
        ok(lib.cuCtxGetApiVersion(None, byref(v)), "api")
        show(v.value, lib.cuCtxGetApiVersion(ctx0, None))
        # A reset primary context is a new context with a new id.
        ok(lib.cuDevicePrimaryCtxReset_v2(0), "reset")
        ctx = primary(0)
        ok(lib.cuCtxSetCurrent(ctx), "set")
        ok(lib.cuCtxGetId(None, byref(b)), "id after reset")
        show(b.value != a.value)
        ok(lib.cuCtxSetCurrent(None), "unset")
        show(lib.cuCtxGetId(None, byref(b)))
    """)
    assert out == ["True True True", "%d %d" % (INVALID_CONTEXT,
                                                INVALID_VALUE),
                   "3020 %d" % INVALID_VALUE, "True", str(INVALID_CONTEXT)]


def test_context_limits(run_py):
    out = run_entries(run_py, """
        STACK, FIFO, HEAP, DEPTH, PENDING, L2_FETCH, PERSIST = range(7)
        SHMEM, CIG, CIG_FALLBACK = 7, 8, 9

        def limit(which):
            v = c_size_t(12345)
            rc = lib.cuCtxGetLimit(byref(v), which)
            return v.value if rc == 0 else "rc%d" % rc

        show(*[limit(i) for i in range(10)])
        show(lib.cuCtxSetLimit(STACK, c_size_t(4096)), limit(STACK))
        show(lib.cuCtxSetLimit(HEAP, c_size_t(1 << 26)), limit(HEAP))
        show(lib.cuCtxSetLimit(L2_FETCH, c_size_t(1000)), limit(L2_FETCH))
        max_l2 = ctypes.c_int()
        ok(lib.cuDeviceGetAttribute(byref(max_l2), 108, 0), "attr")
        show(lib.cuCtxSetLimit(PERSIST, c_size_t(1 << 40)),
             limit(PERSIST) == max_l2.value > 0)
        show(lib.cuCtxSetLimit(DEPTH, c_size_t(4)),
             lib.cuCtxSetLimit(CIG, c_size_t(1)),
             lib.cuCtxSetLimit(99, c_size_t(1)),
             lib.cuCtxGetLimit(None, STACK))
        # Limits belong to the context: a reset gives the defaults back.
        ok(lib.cuDevicePrimaryCtxReset_v2(0), "reset")
        ok(lib.cuCtxSetCurrent(primary(0)), "set")
        show(limit(STACK), limit(HEAP))
    """)
    r = "rc%d" % UNSUPPORTED_LIMIT
    # An H100's defaults; the sync depth limit is below sm_90 only and the
    # CIG limits belong to CIG contexts.
    assert out == [
        "1024 1048576 8388608 %s 2048 64 0 %s 0 %s" % (r, r, r),
        "0 4096", "0 67108864", "0 128", "0 True",
        "%d %d %d %d" % (UNSUPPORTED_LIMIT, INVALID_VALUE, UNSUPPORTED_LIMIT,
                         INVALID_VALUE),
        "1024 8388608"]


def test_p2p_attributes_follow_can_access_peer(run_py):
    out = run_entries(run_py, """
        v, can = ctypes.c_int(-7), ctypes.c_int()
        ok(lib.cuDeviceCanAccessPeer(byref(can), 0, 1), "peer")
        vals = []
        for attrib in (1, 2, 3, 4, 5):
            ok(lib.cuDeviceGetP2PAttribute(byref(v), attrib, 0, 1), attrib)
            vals.append(v.value)
        show(can.value, *vals)
        show(lib.cuDeviceGetP2PAttribute(byref(v), 2, 0, 0),
             lib.cuDeviceGetP2PAttribute(byref(v), 2, 0, 7),
             lib.cuDeviceGetP2PAttribute(byref(v), 42, 0, 1),
             lib.cuDeviceGetP2PAttribute(None, 2, 0, 1))
    """, env={"CUDAMEM_SIM_DEVICES": "2"})
    assert out == ["1 0 1 1 1 0",
                   "%d %d %d %d" % (INVALID_DEVICE, INVALID_DEVICE,
                                    INVALID_VALUE, INVALID_VALUE)]
    out = run_entries(run_py, """
        v = ctypes.c_int(-7)
        ok(lib.cuDeviceGetP2PAttribute(byref(v), 2, 0, 1), "access")
        show(v.value)
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDAMEM_SIM_NO_PEER": "1"})
    assert out == ["0"]


def test_stream_ids(run_py):
    out = run_entries(run_py, """
        def sid(s, fn=lib.cuStreamGetId):
            v = c_uint64()
            rc = fn(s, byref(v))
            return v.value if rc == 0 else "rc%d" % rc

        a, b = stream(), stream()
        ids = [sid(a), sid(b), sid(None), sid(c_void_p(1)),
               sid(c_void_p(2))]
        # NULL and CU_STREAM_LEGACY name the same stream.
        show(len(set(ids)) == 4, ids[2] == ids[3], sid(a) == ids[0],
             sid(None, lib.cuStreamGetId_ptsz) == ids[4])
        ok(lib.cuStreamDestroy_v2(b), "destroy")
        show(sid(b), lib.cuStreamGetId(a, None))
    """)
    assert out == ["True True True True",
                   "rc%d %d" % (INVALID_HANDLE, INVALID_VALUE)]


def test_stream_attributes(run_py):
    out = run_entries(run_py, """
        WINDOW, POLICY, PRIORITY, DOMAIN_MAP, DOMAIN = 1, 3, 8, 9, 10

        def get(s, attr):
            v = AttrValue()
            rc = lib.cuStreamGetAttribute(s, attr, byref(v))
            return v if rc == 0 else rc

        def put(s, attr, **fields):
            v = AttrValue()
            for k, x in fields.items():
                setattr(v, k, x)
            return lib.cuStreamSetAttribute(s, attr, byref(v))

        s = stream()
        # Synchronization policy: AUTO until set; 1..4 are the policies.
        show(get(s, POLICY).i, put(s, POLICY, i=3), get(s, POLICY).i,
             put(s, POLICY, i=0), put(s, POLICY, i=5))
        # Priority: clamped to the range, as cuStreamCreateWithPriority.
        prio = ctypes.c_int()
        show(put(s, PRIORITY, i=-100), get(s, PRIORITY).i,
             lib.cuStreamGetPriority(s, byref(prio)), prio.value)
        show(put(None, PRIORITY, i=-1), get(None, PRIORITY).i)
        # Memory synchronization domains: default 0, map {0, 1}.
        dm = get(s, DOMAIN_MAP).b
        show(get(s, DOMAIN).i, dm[0], dm[1], put(s, DOMAIN, i=1),
             get(s, DOMAIN).i, put(s, DOMAIN, i=2))
        # An access policy window is a hint, checked and kept.
        w = Window(None, 4096, 0.5, 2, 1)
        v = AttrValue(window=w)
        show(lib.cuStreamSetAttribute(s, WINDOW, byref(v)),
             get(s, WINDOW).window.num_bytes, get(s, WINDOW).window.hitRatio)
        v.window.hitRatio = 1.5
        show(lib.cuStreamSetAttribute(s, WINDOW, byref(v)))
        v.window.hitRatio, v.window.missProp = 0.5, 2  # PERSISTING
        show(lib.cuStreamSetAttribute(s, WINDOW, byref(v)))
        # Launch attributes streams do not take; bad arguments.
        show(get(s, 2), put(s, 2, i=1), lib.cuStreamGetAttribute(s, 3, None),
             get(c_void_p(0xdead), POLICY))
    """)
    assert out == [
        "1 0 3 %d %d" % (INVALID_VALUE, INVALID_VALUE),
        "0 -5 0 -5",
        "%d 0" % INVALID_VALUE,
        "0 0 1 0 1 %d" % INVALID_VALUE,
        "0 4096 0.5",
        str(INVALID_VALUE), str(INVALID_VALUE),
        "%d %d %d %d" % (INVALID_VALUE, INVALID_VALUE, INVALID_VALUE,
                         INVALID_HANDLE)]


def test_event_record_with_flags(run_py):
    out = run_entries(run_py, """
        ev = c_void_p()
        ok(lib.cuEventCreate(byref(ev), 0), "cuEventCreate")
        s = stream()
        ok(lib.cuEventRecordWithFlags(ev, s, 0), "record")
        ok(lib.cuEventSynchronize(ev), "sync")
        show(lib.cuEventQuery(ev))
        # EXTERNAL is for stream capture only; other bits are unknown.
        show(lib.cuEventRecordWithFlags(ev, s, 1),
             lib.cuEventRecordWithFlags(ev, s, 2),
             lib.cuEventRecordWithFlags(c_void_p(0xdead), s, 0))
        # The record is ordered on the stream like cuEventRecord's.
        simulator.set_delay_us(200000)
        hold = c_uint64(dalloc(64))
        ok(lib.cuMemsetD8Async(hold, 1, c_size_t(64), s), "memset")
        ok(lib.cuEventRecordWithFlags(ev, s, 0), "record")
        show(lib.cuEventQuery(ev))
        ok(lib.cuEventSynchronize(ev), "sync")
        show(lib.cuStreamQuery(s))
        ok(lib.cuMemFree_v2(hold), "free")
    """)
    assert out == ["0", "%d %d %d" % (INVALID_VALUE, INVALID_VALUE,
                                      INVALID_HANDLE),
                   str(NOT_READY), "0"]


# Holds a stream with a host function until its gate is set.
HOLD = """
import threading
HOSTFN = ctypes.CFUNCTYPE(None, c_void_p)


def hold(s, launch=lib.cuLaunchHostFunc):
    gate = threading.Event()
    fn = HOSTFN(lambda _: gate.wait(30))
    ok(launch(s, fn, None), "cuLaunchHostFunc")
    return gate, fn


def event(flags=2):
    ev = c_void_p()
    ok(lib.cuEventCreate(byref(ev), flags), "cuEventCreate")
    return ev
"""


def run_held(run_py, body):
    return run_entries(run_py, HOLD + textwrap.dedent(body))


def test_ctx_record_event_arguments(run_py):
    # "hEvent and hCtx must be from the same CUDA context, otherwise
    # CUDA_ERROR_INVALID_HANDLE" (cuda.h); no current context is needed.
    out = run_held(run_py, """
        ev = event()
        other = c_void_p()
        ok(lib.cuCtxCreate_v2(byref(other), 0, 0), "cuCtxCreate")
        theirs = event()
        ok(lib.cuCtxPopCurrent_v2(byref(c_void_p())), "pop")
        show(lib.cuCtxRecordEvent(None, ev),
             lib.cuCtxRecordEvent(c_void_p(0xdead), ev),
             lib.cuCtxRecordEvent(ctx0, c_void_p(0xdead)),
             lib.cuCtxRecordEvent(ctx0, theirs),
             lib.cuCtxRecordEvent(other, ev))
        ok(lib.cuCtxSetCurrent(None), "none current")
        show(lib.cuCtxRecordEvent(ctx0, ev), lib.cuEventQuery(ev))
        ok(lib.cuCtxSetCurrent(ctx0), "current")
        ok(lib.cuEventDestroy_v2(theirs), "destroy")
        ok(lib.cuCtxDestroy_v2(other), "cuCtxDestroy")
        ok(lib.cuEventDestroy_v2(ev), "destroy")
    """)
    assert out == ["%d %d %d %d %d" % (INVALID_CONTEXT, INVALID_CONTEXT,
                                       INVALID_HANDLE, INVALID_HANDLE,
                                       INVALID_HANDLE),
                   "0 0"]


def test_ctx_record_event_covers_every_stream(run_py):
    # The event completes once every stream of the context has run what it
    # held at the record: the legacy stream, a blocking and a non-blocking
    # stream, another thread's per-thread default stream.
    out = run_held(run_py, """
        ev = event()
        ok(lib.cuCtxRecordEvent(ctx0, ev), "idle")
        show(lib.cuEventQuery(ev))
        ptds = c_void_p(2)  # CU_STREAM_PER_THREAD


        def held_elsewhere(box):
            ok(lib.cuCtxSetCurrent(ctx0), "current")
            box.append(hold(ptds, lib.cuLaunchHostFunc_ptsz))


        for name, where in (("legacy", None), ("blocking", stream(0)),
                            ("non-blocking", stream(1)), ("per-thread", 0)):
            if where == 0:
                box = []
                t = threading.Thread(target=held_elsewhere, args=(box,))
                t.start()
                t.join()
                gate = box[0][0]
            else:
                gate, fn = hold(where)
            ok(lib.cuCtxRecordEvent(ctx0, ev), name)
            busy = lib.cuEventQuery(ev)
            gate.set()
            ok(lib.cuEventSynchronize(ev), "cuEventSynchronize")
            show(name, busy, lib.cuEventQuery(ev))
        ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
    """)
    assert out == ["0", "legacy %d 0" % NOT_READY,
                   "blocking %d 0" % NOT_READY,
                   "non-blocking %d 0" % NOT_READY,
                   "per-thread %d 0" % NOT_READY]


def test_ctx_record_event_orders_like_a_record(run_py):
    # Work queued after the record does not move it ("uses of hCtx after
    # this call do not modify hEvent"); a stream waiting for the event
    # waits for all it covers; cuCtxSynchronize leaves it complete; timing
    # events give an elapsed time.
    out = run_held(run_py, """
        a, b, c = stream(1), stream(1), stream(1)
        ev = event()
        gate, fn = hold(a)
        ok(lib.cuCtxRecordEvent(ctx0, ev), "record")
        gate2, fn2 = hold(b)
        ok(lib.cuStreamWaitEvent(c, ev, 0), "wait")
        show(lib.cuEventQuery(ev), lib.cuStreamQuery(c))
        gate.set()
        ok(lib.cuStreamSynchronize(c), "c")
        show(lib.cuEventQuery(ev), lib.cuStreamQuery(b))
        gate2.set()
        gate3, fn3 = hold(a)
        ok(lib.cuCtxRecordEvent(ctx0, ev), "record")
        threading.Timer(0.1, gate3.set).start()
        ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        show(lib.cuEventQuery(ev))
        t0, t1 = event(0), event(0)
        ok(lib.cuCtxRecordEvent(ctx0, t0), "t0")
        gate4, fn4 = hold(a)
        ok(lib.cuCtxRecordEvent(ctx0, t1), "t1")
        threading.Timer(0.05, gate4.set).start()
        ok(lib.cuEventSynchronize(t1), "t1")
        ms = ctypes.c_float()
        ok(lib.cuEventElapsedTime_v2(byref(ms), t0, t1), "elapsed")
        show(ms.value >= 40)
    """)
    assert out == ["%d %d" % (NOT_READY, NOT_READY), "0 %d" % NOT_READY,
                   "0", "True"]


def test_mem_alloc_pitch(run_py):
    out = run_entries(run_py, """
        p, pitch = c_uint64(), c_size_t()
        ok(lib.cuMemAllocPitch_v2(byref(p), byref(pitch), c_size_t(100), 3,
                                  4), "pitch")
        base, size = c_uint64(), c_size_t()
        ok(lib.cuMemGetAddressRange_v2(byref(base), byref(size), p), "range")
        align = ctypes.c_int()
        ok(lib.cuDeviceGetAttribute(byref(align), 51, 0), "tex pitch align")
        show(pitch.value >= 100, pitch.value % align.value,
             size.value == pitch.value * 3, base.value == p.value)
        # Rows copied in through the pitch come back: with strict pitches
        # a pitch from cuMemAllocPitch is one the driver must take.
        src = (ctypes.c_ubyte * 300)(*range(256), *range(44))
        dst = (ctypes.c_ubyte * 300)()
        q = c_uint64(dalloc(pitch.value * 3))

        class Copy2D(ctypes.Structure):
            _fields_ = [("srcXInBytes", c_size_t), ("srcY", c_size_t),
                        ("srcMemoryType", ctypes.c_int),
                        ("srcHost", c_void_p), ("srcDevice", c_uint64),
                        ("srcArray", c_void_p), ("srcPitch", c_size_t),
                        ("dstXInBytes", c_size_t), ("dstY", c_size_t),
                        ("dstMemoryType", ctypes.c_int),
                        ("dstHost", c_void_p), ("dstDevice", c_uint64),
                        ("dstArray", c_void_p), ("dstPitch", c_size_t),
                        ("WidthInBytes", c_size_t), ("Height", c_size_t)]

        h2d = Copy2D(srcMemoryType=1, srcHost=ctypes.addressof(src),
                     srcPitch=100, dstMemoryType=2, dstDevice=p.value,
                     dstPitch=pitch.value, WidthInBytes=100, Height=3)
        d2d = Copy2D(srcMemoryType=2, srcDevice=p.value, srcPitch=pitch.value,
                     dstMemoryType=2, dstDevice=q.value, dstPitch=pitch.value,
                     WidthInBytes=100, Height=3)
        d2h = Copy2D(srcMemoryType=2, srcDevice=q.value, srcPitch=pitch.value,
                     dstMemoryType=1, dstHost=ctypes.addressof(dst),
                     dstPitch=100, WidthInBytes=100, Height=3)
        for c in (h2d, d2d, d2h):
            ok(lib.cuMemcpy2D_v2(byref(c)), "cuMemcpy2D")
        show(bytes(dst) == bytes(src))
        show(lib.cuMemAllocPitch_v2(byref(p), byref(pitch), c_size_t(100), 3,
                                    3),
             lib.cuMemAllocPitch_v2(byref(p), byref(pitch), c_size_t(0), 3,
                                    4),
             lib.cuMemAllocPitch_v2(byref(p), byref(pitch), c_size_t(100), 0,
                                    8),
             lib.cuMemAllocPitch_v2(byref(p), None, c_size_t(100), 3, 16),
             simulator.live()["device_allocations"])
        ok(lib.cuMemFree_v2(c_uint64(base.value)), "free")
        ok(lib.cuMemFree_v2(q), "free")
    """, env={"CUDAMEM_SIM_STRICT_PITCH": "1"})
    assert out == ["True 0 True True", "True",
                   "%d %d %d %d 2" % ((INVALID_VALUE,) * 4)]


def test_pointer_sync_memops(run_py):
    out = run_entries(run_py, """
        SYNC_MEMOPS = 6
        p = c_uint64(dalloc(1 << 16))
        q = c_uint64(dalloc(1 << 16))
        v = ctypes.c_uint(7)
        ok(lib.cuPointerGetAttribute(byref(v), SYNC_MEMOPS, p), "get")
        show(v.value)
        one, zero = ctypes.c_uint(1), ctypes.c_uint(0)
        ok(lib.cuPointerSetAttribute(byref(one), SYNC_MEMOPS,
                                     c_uint64(p.value + 8)), "set")
        ok(lib.cuPointerGetAttribute(byref(v), SYNC_MEMOPS, p), "get")
        show(v.value)
        # Synchronous copies and memsets touching the range are now fully
        # synchronous: the legacy stream is idle when they return.
        simulator.set_delay_us(100000)
        ok(lib.cuMemsetD8_v2(p, 3, c_size_t(1 << 16)), "memset")
        a = lib.cuStreamQuery(None)
        ok(lib.cuMemcpyDtoD_v2(q, p, c_size_t(1 << 16)), "copy")
        b = lib.cuStreamQuery(None)
        show(a, b)
        simulator.set_delay_us(0)
        ok(lib.cuPointerSetAttribute(byref(zero), SYNC_MEMOPS, p), "unset")
        ok(lib.cuPointerGetAttribute(byref(v), SYNC_MEMOPS, p), "get")
        show(v.value,
             lib.cuPointerSetAttribute(byref(one), 1, p),  # CONTEXT
             lib.cuPointerSetAttribute(None, SYNC_MEMOPS, p),
             lib.cuPointerSetAttribute(byref(one), SYNC_MEMOPS,
                                       c_uint64(0x10)))
        ok(lib.cuMemFree_v2(p), "free")
        ok(lib.cuMemFree_v2(q), "free")
    """)
    assert out == ["0", "1", "0 0",
                   "0 %d %d %d" % ((INVALID_VALUE,) * 3)]


def test_managed_range_attributes(run_py):
    out = run_entries(run_py, """
        READ_MOSTLY, PREFERRED, ACCESSED_BY, LAST_PREFETCH = 1, 2, 3, 4
        PREF_TYPE, PREF_ID, LAST_TYPE, LAST_ID = 5, 6, 7, 8
        DEVICE, HOST = 1, 2
        N = 1 << 16
        m = c_uint64()
        ok(lib.cuMemAllocManaged(byref(m), c_size_t(N), 1), "managed")

        def attr(which, size=4, ptr=None, count=N):
            n = max(1, size // 4)
            buf = (ctypes.c_int * n)(*([99] * n))
            rc = lib.cuMemRangeGetAttribute(buf, c_size_t(size), which,
                                            c_uint64(ptr or m.value),
                                            c_size_t(count))
            return list(buf) if rc == 0 else "rc%d" % rc

        def advise(advice, loc_type, loc_id=0):
            ok(lib.cuMemAdvise_v2(m, c_size_t(N), advice,
                                  Location(loc_type, loc_id)), "advise")

        # Nothing advised or prefetched yet.
        show(attr(READ_MOSTLY), attr(PREFERRED), attr(ACCESSED_BY, 8),
             attr(LAST_PREFETCH), attr(PREF_TYPE), attr(LAST_TYPE))
        advise(1, DEVICE)      # SET_READ_MOSTLY
        advise(3, DEVICE, 0)   # SET_PREFERRED_LOCATION device 0
        advise(5, DEVICE, 0)   # SET_ACCESSED_BY device 0
        advise(5, HOST)        # SET_ACCESSED_BY the CPU
        ok(lib.cuMemPrefetchAsync_v2(m, c_size_t(N), Location(HOST, 0), 0,
                                     None), "prefetch")
        show(attr(READ_MOSTLY), attr(PREFERRED), attr(ACCESSED_BY, 12),
             attr(LAST_PREFETCH), attr(PREF_TYPE), attr(PREF_ID),
             attr(LAST_TYPE))
        # Only as many devices as fit.
        show(attr(ACCESSED_BY, 4))
        advise(2, DEVICE)      # UNSET_READ_MOSTLY
        advise(4, DEVICE)      # UNSET_PREFERRED_LOCATION
        advise(6, DEVICE, 0)   # UNSET_ACCESSED_BY device 0
        show(attr(READ_MOSTLY), attr(PREFERRED), attr(ACCESSED_BY, 8))
        # Several at once.
        a, b = ctypes.c_int(9), ctypes.c_int(9)
        data = (c_void_p * 2)(ctypes.addressof(a), ctypes.addressof(b))
        sizes = (c_size_t * 2)(4, 4)
        which = (ctypes.c_int * 2)(LAST_PREFETCH, READ_MOSTLY)
        ok(lib.cuMemRangeGetAttributes(data, sizes, which, c_size_t(2), m,
                                       c_size_t(N)), "attributes")
        show(a.value, b.value)
        d = dalloc(64)
        show(attr(READ_MOSTLY, 8), attr(ACCESSED_BY, 6), attr(42),
             attr(READ_MOSTLY, ptr=d, count=64),
             attr(READ_MOSTLY, count=N + 1),
             lib.cuMemRangeGetAttribute(None, c_size_t(4), 1, m, c_size_t(N)),
             lib.cuMemRangeGetAttributes(data, sizes, which, c_size_t(0), m,
                                         c_size_t(N)))
        ok(lib.cuMemFree_v2(c_uint64(d)), "free")
        ok(lib.cuStreamSynchronize(None), "sync")
        ok(lib.cuMemFree_v2(m), "free")
    """)
    r = "rc%d" % INVALID_VALUE
    # CU_DEVICE_CPU is -1, CU_DEVICE_INVALID -2; location types 0 INVALID,
    # 1 DEVICE, 2 HOST.
    assert out == [
        "[0] [-2] [-2, -2] [-2] [0] [0]",
        "[1] [0] [0, -1, -2] [-1] [1] [0] [2]",
        "[0]",
        "[0] [-2] [-1, -2]",
        "-1 0",
        " ".join([r] * 5) + " %d %d" % (INVALID_VALUE, INVALID_VALUE)]


def test_memcpy_batch_async(run_py):
    out = run_entries(run_py, """
        STREAM_ORDER, DURING_CALL, ANY = 1, 2, 3
        N = 4096
        pinned = c_void_p()
        ok(lib.cuMemAllocHost_v2(byref(pinned), c_size_t(N)), "pinned")
        ctypes.memmove(pinned, bytes(range(256)) * (N // 256), N)
        pageable = (ctypes.c_ubyte * N)()
        d1, d2 = dalloc(N), dalloc(N)
        s = stream()

        def batch(dsts, srcs, sizes, attrs, idxs, st=None):
            n = len(dsts)
            return lib.cuMemcpyBatchAsync_v2(
                (c_uint64 * n)(*dsts), (c_uint64 * n)(*srcs),
                (c_size_t * n)(*sizes), c_size_t(n),
                (CopyAttrs * len(attrs))(*attrs),
                (c_size_t * len(idxs))(*idxs), c_size_t(len(attrs)),
                s if st is None else st)

        order = CopyAttrs(STREAM_ORDER)
        # Host to device, then device to device and device to pageable
        # host in a second batch: each batch is in stream order.
        ok(batch([d1], [pinned.value], [N], [order], [0]), "batch 1")
        ok(batch([d2, ctypes.addressof(pageable)], [d1, d1], [N, N],
                 [order, CopyAttrs(ANY)], [0, 1]), "batch 2")
        ok(lib.cuStreamSynchronize(s), "sync")
        show(bytes(pageable) == ctypes.string_at(pinned, N))
        # DURING_API_CALL: the source is read before the call returns, so
        # changing it afterwards does not change what arrives.
        simulator.set_delay_us(50000)
        ok(batch([d2], [pinned.value], [N], [CopyAttrs(DURING_CALL)], [0]),
           "batch 3")
        ctypes.memset(pinned, 0xEE, N)
        ok(lib.cuMemcpyDtoHAsync_v2(pageable, c_uint64(d2), c_size_t(N), s),
           "back")
        ok(lib.cuStreamSynchronize(s), "sync")
        simulator.set_delay_us(0)
        show(bytes(pageable) == bytes(range(256)) * (N // 256))
        # Every copy is checked before any is queued: a freed device
        # address fails the second, and the first did not happen.
        gone = dalloc(N)
        ok(lib.cuMemFree_v2(c_uint64(gone)), "free")
        before = bytes(pageable)
        rc = batch([ctypes.addressof(pageable), gone], [d1, d1], [N, N],
                   [order], [0])
        ok(lib.cuStreamSynchronize(s), "sync")
        show(rc, bytes(pageable) == before)
        show(batch([d1], [d2], [N], [order], [0], st=c_void_p(0)),
             batch([d1], [d2], [N], [order], [0], st=c_void_p(1)),
             batch([d1], [d2], [N], [order], [1]),
             batch([d1], [d2], [N], [CopyAttrs(0)], [0]),
             batch([d1], [d2], [N], [CopyAttrs(1, flags=2)], [0]),
             batch([d1], [d2], [N], [order, order], [0, 1]),
             batch([d1, d1], [d2, d2], [N, N], [order, order], [0, 0]))
        ok(lib.cuMemFree_v2(c_uint64(d1)), "free")
        ok(lib.cuMemFree_v2(c_uint64(d2)), "free")
        ok(lib.cuMemFreeHost(pinned), "free host")
    """)
    assert out == ["True", "True", "%d True" % INVALID_VALUE,
                   " ".join([str(INVALID_VALUE)] * 7)]


NEW_ENTRIES = [
    "cuCtxGetId", "cuCtxGetLimit", "cuCtxSetLimit", "cuCtxGetApiVersion",
    "cuDeviceGetP2PAttribute", "cuMemAllocPitch", "cuPointerSetAttribute",
    "cuMemRangeGetAttribute", "cuMemRangeGetAttributes",
    "cuMemcpyBatchAsync", "cuStreamGetId", "cuStreamGetAttribute",
    "cuStreamSetAttribute", "cuEventRecordWithFlags", "cuCtxRecordEvent"]


def test_found_counted_and_faulted(run_py):
    out = run_entries(run_py, """
        names = %r
        status = ctypes.c_int()
        found = []
        for name in names:
            pfn = c_void_p()
            ok(lib.cuGetProcAddress_v2(name.encode(), byref(pfn), 13000,
                                       c_uint64(0), byref(status)), name)
            found.append(pfn.value is not None and status.value == 0)
        show(all(found))
        # cuStreamGetId appeared in 12.0: not there for an 11.8 client.
        pfn = c_void_p()
        ok(lib.cuGetProcAddress_v2(b"cuStreamGetId", byref(pfn), 11080,
                                   c_uint64(0), byref(status)), "old")
        show(pfn.value, status.value)
        simulator.reset()
        for name in names:
            simulator.inject(name, "CUDA_ERROR_UNKNOWN")
        v, n = c_uint64(), c_size_t()
        show(lib.cuCtxGetId(None, byref(v)),
             lib.cuCtxGetLimit(byref(n), 0),
             lib.cuStreamGetId(None, byref(v)))
        ok(lib.cuCtxGetId(None, byref(v)), "after the fault")
        calls = simulator.stats()["calls"]
        show(calls["cuCtxGetId"]["calls"], calls["cuStreamGetId"]["calls"])
    """ % NEW_ENTRIES)
    assert out == ["True", "None 2", "999 999 999", "2 1"]


# The importer of test_ipc_event_waits_for_the_exporters_record: opens the
# handle given in argv, shows the event pending, queues a wait on it and
# tells the exporter; then waits for the exporter's record to complete.
IPC_IMPORTER = """
import binascii
handle = (ctypes.c_ubyte * 64).from_buffer_copy(
    binascii.unhexlify(sys.argv[1]))


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


ev = c_void_p()
ok(lib.cuIpcOpenEventHandle(byref(ev), Handle(handle)), "open")
s = c_void_p()
ok(lib.cuStreamCreate(byref(s), 0), "stream")
ok(lib.cuStreamWaitEvent(s, ev, 0), "wait")
print(lib.cuEventQuery(ev), lib.cuStreamQuery(s), flush=True)
sys.stdin.readline()  # the exporter's record may run from now on
ok(lib.cuEventSynchronize(ev), "cuEventSynchronize")
ok(lib.cuStreamSynchronize(s), "cuStreamSynchronize")
print(lib.cuEventQuery(ev), lib.cuStreamQuery(s), flush=True)
ok(lib.cuEventDestroy_v2(ev), "destroy")
"""


def test_ipc_event_waits_for_the_exporters_record(run_py):
    out = run_entries(run_py, """
        import binascii, subprocess, threading
        from tests.simulator.test_sim_entries import IPC_IMPORTER
        from tests.helpers.simdriver import PROLOGUE
        INTERPROCESS, DISABLE_TIMING = 4, 2

        class Handle(ctypes.Structure):
            _fields_ = [("reserved", ctypes.c_ubyte * 64)]

        ev, plain = c_void_p(), c_void_p()
        ok(lib.cuEventCreate(byref(ev), INTERPROCESS | DISABLE_TIMING), "ev")
        ok(lib.cuEventCreate(byref(plain), DISABLE_TIMING), "plain")
        h = Handle()
        show(lib.cuIpcGetEventHandle(byref(h), plain),
             lib.cuIpcGetEventHandle(None, ev),
             lib.cuIpcGetEventHandle(byref(h), c_void_p(0xdead)))
        ok(lib.cuIpcGetEventHandle(byref(h), ev), "cuIpcGetEventHandle")
        # The record cannot run before `go` is set.
        go = threading.Event()
        HOSTFN = ctypes.CFUNCTYPE(None, c_void_p)
        hold = HOSTFN(lambda _: go.wait())
        s = stream()
        ok(lib.cuLaunchHostFunc(s, hold, None), "hold")
        ok(lib.cuEventRecord(ev, s), "record")
        child = subprocess.Popen(
            [sys.executable, "-c", PROLOGUE + IPC_IMPORTER,
             binascii.hexlify(bytes(h.reserved)).decode()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        show("before", child.stdout.readline().strip())
        go.set()
        child.stdin.write("go\\n")
        child.stdin.flush()
        show("after", child.stdout.readline().strip())
        show(child.wait(60))
        ok(lib.cuStreamSynchronize(s), "sync")
        # Destroyed by its exporter, the handle opens nothing.
        ok(lib.cuEventDestroy_v2(ev), "destroy")
        again, bad = c_void_p(), Handle()
        show(lib.cuIpcOpenEventHandle(byref(again), h),
             lib.cuIpcOpenEventHandle(byref(again), bad),
             simulator.live()["events"])
        ok(lib.cuEventDestroy_v2(plain), "destroy")
    """, env={"PYTHONPATH": ROOT})
    assert out == ["%d %d %d" % (INVALID_VALUE, INVALID_VALUE,
                                 INVALID_HANDLE),
                   "before %d %d" % (NOT_READY, NOT_READY),
                   "after 0 0", "0",
                   "%d %d 1" % (INVALID_HANDLE, INVALID_HANDLE)]
