"""The simulated driver's stream-ordered allocator and memory pools against
the CUDA driver documentation (cuMemAllocAsync, cuMemFreeAsync,
cuMemAllocFromPoolAsync, cuMemPool*, cuDeviceGet/SetMemPool and the cuMem*
forms of cuda.h 13), driven through ctypes as a client other than cudamem
(cuda.core, CuPy, RMM) drives it. Each case runs in a fresh process."""
import pytest

from tests.helpers.simdriver import PROLOGUE, run_driver

pytestmark = pytest.mark.simulator

INVALID_VALUE, OUT_OF_MEMORY, INVALID_DEVICE = 1, 2, 101
INVALID_CONTEXT, INVALID_HANDLE, NOT_READY = 201, 400, 600
ILLEGAL_ADDRESS, NOT_SUPPORTED = 700, 801

# Pool helpers on top of the simdriver helpers' PROLOGUE.
POOLS = """
ATTR = dict(REUSE_FOLLOW_EVENT_DEPENDENCIES=1, REUSE_ALLOW_OPPORTUNISTIC=2,
            REUSE_ALLOW_INTERNAL_DEPENDENCIES=3, RELEASE_THRESHOLD=4,
            RESERVED_MEM_CURRENT=5, RESERVED_MEM_HIGH=6, USED_MEM_CURRENT=7,
            USED_MEM_HIGH=8)
PINNED, MANAGED = 1, 2
LOC_NONE, LOC_DEVICE, LOC_HOST, LOC_HOST_NUMA, LOC_NUMA_CURRENT = 0, 1, 2, 3, 4
PROT_NONE, PROT_READ, PROT_RW = 0, 1, 3
MEMPOOL_HANDLE, DEVICE_ORDINAL = 17, 9


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


class Props(ctypes.Structure):
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int),
                ("location", Location), ("win32", c_void_p),
                ("maxSize", c_size_t), ("usage", ctypes.c_ushort),
                ("reserved", ctypes.c_ubyte * 54)]


def props(device=0, loc_type=LOC_DEVICE, alloc=PINNED, handles=0, max_size=0):
    return Props(alloc, handles, Location(loc_type, device), None, max_size)


def get(pool, name):
    v = ctypes.c_int() if name.startswith("REUSE") else c_uint64()
    ok(lib.cuMemPoolGetAttribute(c_void_p(pool), ATTR[name], byref(v)),
       name)
    return v.value


def put(pool, name, value):
    v = ctypes.c_int(value) if name.startswith("REUSE") else c_uint64(value)
    return lib.cuMemPoolSetAttribute(c_void_p(pool), ATTR[name], byref(v))


def default_pool(device=0):
    pool = c_void_p()
    ok(lib.cuDeviceGetDefaultMemPool(byref(pool), device),
       "cuDeviceGetDefaultMemPool")
    return pool.value


def stream():
    s = c_void_p()
    ok(lib.cuStreamCreate(byref(s), 0), "cuStreamCreate")
    return s


def alloc(nbytes, s, pool=None):
    p = c_uint64()
    if pool is None:
        ok(lib.cuMemAllocAsync(byref(p), c_size_t(nbytes), s), "alloc")
    else:
        ok(lib.cuMemAllocFromPoolAsync(byref(p), c_size_t(nbytes),
                                       c_void_p(pool), s), "alloc")
    return p.value


def free(p, s):
    ok(lib.cuMemFreeAsync(c_uint64(p), s), "cuMemFreeAsync")


def pool_of(p):
    v = c_void_p()
    ok(lib.cuPointerGetAttribute(byref(v), MEMPOOL_HANDLE, c_uint64(p)),
       "cuPointerGetAttribute")
    return v.value
"""


def run_pools(run_py, body, env=None):
    proc = run_driver(run_py, body, env=env, prelude=POOLS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_pools_supported_and_the_default_pool(run_py):
    proc = run_pools(run_py, """
        v = ctypes.c_int()
        ok(lib.cuDeviceGetAttribute(byref(v), 115, 0), "attr")  # POOLS
        print(v.value)
        dflt = default_pool()
        cur, by_loc, cur_loc = c_void_p(), c_void_p(), c_void_p()
        ok(lib.cuDeviceGetMemPool(byref(cur), 0), "cuDeviceGetMemPool")
        loc = Location(LOC_DEVICE, 0)
        ok(lib.cuMemGetDefaultMemPool(byref(by_loc), byref(loc), PINNED), "d")
        ok(lib.cuMemGetMemPool(byref(cur_loc), byref(loc), PINNED), "g")
        print(dflt is not None, cur.value == dflt, by_loc.value == dflt,
              cur_loc.value == dflt)
        # The documented defaults.
        print(get(dflt, "RELEASE_THRESHOLD"),
              get(dflt, "REUSE_FOLLOW_EVENT_DEPENDENCIES"),
              get(dflt, "REUSE_ALLOW_OPPORTUNISTIC"),
              get(dflt, "REUSE_ALLOW_INTERNAL_DEPENDENCIES"))
        p = c_void_p()
        host, managed = Location(LOC_HOST, 0), Location(LOC_NONE, 0)
        print(lib.cuDeviceGetDefaultMemPool(None, 0),
              lib.cuDeviceGetDefaultMemPool(byref(p), 7),
              lib.cuDeviceGetMemPool(None, 0),
              lib.cuMemGetDefaultMemPool(byref(p), None, PINNED),
              lib.cuMemGetDefaultMemPool(byref(p), byref(loc), 7),
              lib.cuMemGetMemPool(byref(p), byref(host), PINNED),
              lib.cuMemGetMemPool(byref(p), byref(managed), MANAGED),
              lib.cuMemGetMemPool(byref(p), byref(managed), PINNED),
              # "A device's default memory pool cannot be destroyed."
              lib.cuMemPoolDestroy(c_void_p(dflt)))
    """)
    support, same, defaults, errors = proc.stdout.splitlines()
    assert support == "1"
    assert same.split() == ["True"] * 4
    assert defaults.split() == ["0", "1", "1", "1"]
    assert [int(e) for e in errors.split()] == [
        INVALID_VALUE, INVALID_DEVICE, INVALID_VALUE, INVALID_VALUE,
        INVALID_VALUE, NOT_SUPPORTED, NOT_SUPPORTED, INVALID_VALUE,
        INVALID_VALUE]


def test_alloc_async_memory_is_device_memory_of_its_pool(run_py):
    proc = run_pools(run_py, """
        s = stream()
        p = alloc(1000, s)
        src = bytes(range(256)) * 4
        out = ctypes.create_string_buffer(1000)
        ok(lib.cuMemcpyHtoDAsync_v2(c_uint64(p), src, c_size_t(1000), s), "h")
        ok(lib.cuMemsetD8Async(c_uint64(p + 10), 0xEE, c_size_t(5), s), "m")
        ok(lib.cuMemcpyDtoHAsync_v2(out, c_uint64(p), c_size_t(1000), s), "d")
        ok(lib.cuStreamSynchronize(s), "sync")
        want = bytearray(src[:1000])
        want[10:15] = b"\\xee" * 5
        print(out.raw == bytes(want))
        base, size, ordinal = c_uint64(), c_size_t(), ctypes.c_int()
        ok(lib.cuMemGetAddressRange_v2(byref(base), byref(size),
                                       c_uint64(p + 7)), "range")
        ok(lib.cuPointerGetAttribute(byref(ordinal), DEVICE_ORDINAL,
                                     c_uint64(p)), "ordinal")
        print(base.value == p, size.value, ordinal.value,
              pool_of(p) == default_pool())
        # Memory from cuMemAlloc belongs to no pool.
        q = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(q), c_size_t(64)), "cuMemAlloc")
        print(pool_of(q.value))
        ok(lib.cuMemFree_v2(q), "cuMemFree")
        free(p, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        print(simulator.live()["device_allocations"])
    """)
    same, attrs, plain, left = proc.stdout.splitlines()
    assert same == "True"
    assert attrs.split() == ["True", "1000", "0", "True"]
    assert plain == "None"
    assert left == "0"


def test_alloc_and_free_async_errors(run_py):
    proc = run_pools(run_py, """
        s = stream()
        p = c_uint64()
        plain = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(plain), c_size_t(64)), "cuMemAlloc")
        good = alloc(256, s)
        print(lib.cuMemAllocAsync(None, c_size_t(8), s),
              lib.cuMemAllocAsync(byref(p), c_size_t(0), s),
              lib.cuMemAllocAsync(byref(p), c_size_t(8), c_void_p(0x1234)),
              lib.cuMemAllocFromPoolAsync(byref(p), c_size_t(8), None, s),
              lib.cuMemAllocFromPoolAsync(byref(p), c_size_t(8),
                                          c_void_p(0x1234), s),
              lib.cuMemAllocAsync(byref(p), c_size_t(1 << 62), s),
              lib.cuMemFreeAsync(c_uint64(0), s),
              lib.cuMemFreeAsync(plain, s),
              lib.cuMemFreeAsync(c_uint64(good + 8), s),
              lib.cuMemFreeAsync(c_uint64(good), c_void_p(0x1234)))
        ok(lib.cuCtxSetCurrent(None), "cuCtxSetCurrent")
        # "default stream specified with no current context"
        print(lib.cuMemAllocAsync(byref(p), c_size_t(8), None),
              lib.cuMemFreeAsync(c_uint64(good), None))
        ok(lib.cuCtxSetCurrent(ctx0), "cuCtxSetCurrent")
        free(good, s)
        ok(lib.cuMemFree_v2(plain), "cuMemFree")
        ok(lib.cuStreamSynchronize(s), "sync")
        print(simulator.live()["device_allocations"],
              get(default_pool(), "USED_MEM_CURRENT"))
    """)
    errors, no_ctx, left = proc.stdout.splitlines()
    assert [int(e) for e in errors.split()] == [
        INVALID_VALUE, INVALID_VALUE, INVALID_HANDLE, INVALID_VALUE,
        INVALID_VALUE, OUT_OF_MEMORY, INVALID_VALUE, INVALID_VALUE,
        INVALID_VALUE, INVALID_HANDLE]
    assert [int(e) for e in no_ctx.split()] == [INVALID_CONTEXT] * 2
    assert left.split() == ["0", "0"]


def test_stream_order_of_alloc_use_and_free(run_py):
    # With every operation delayed, the free runs only after the work
    # queued before it, and the memory stays in use until then.
    proc = run_pools(run_py, """
        s = stream()
        dflt = default_pool()
        p = alloc(4096, s)
        out = c_void_p()  # page-locked: the copy is queued, not run now
        ok(lib.cuMemAllocHost_v2(byref(out), c_size_t(4096)), "pinned")
        ok(lib.cuMemsetD8Async(c_uint64(p), 0x5A, c_size_t(4096), s), "m")
        ok(lib.cuMemcpyDtoHAsync_v2(out, c_uint64(p), c_size_t(4096), s),
           "d")
        free(p, s)
        print(lib.cuStreamQuery(s), get(dflt, "USED_MEM_CURRENT") >= 4096)
        ok(lib.cuStreamSynchronize(s), "sync")
        print(ctypes.string_at(out, 4096) == b"\\x5a" * 4096,
              get(dflt, "USED_MEM_CURRENT"), simulator.hazard_count())
        ok(lib.cuMemFreeHost(out), "cuMemFreeHost")
    """, env={"CUDAMEM_SIM_DELAY_US": "20000", "CUDAMEM_SIM_HAZARDS": "1"})
    queued, done = proc.stdout.splitlines()
    assert queued.split() == [str(NOT_READY), "True"]
    assert done.split() == ["True", "0", "0"]


def test_other_streams_must_order_after_the_alloc(run_py):
    # "Stream query, stream synchronize, and CUDA events can be used to
    # guarantee that the allocation operation completes before work
    # submitted in a separate stream runs": without one it is a race.
    proc = run_pools(run_py, """
        s1, s2 = stream(), stream()
        ev = c_void_p()
        ok(lib.cuEventCreate(byref(ev), 0), "cuEventCreate")
        p = alloc(512, s1)
        ok(lib.cuEventRecord(ev, s1), "record")
        ok(lib.cuStreamWaitEvent(s2, ev, 0), "wait")
        ok(lib.cuMemsetD8Async(c_uint64(p), 1, c_size_t(512), s2), "m")
        ok(lib.cuCtxSynchronize(), "sync")
        print(simulator.hazard_count())
        q = alloc(512, s1)
        ok(lib.cuMemsetD8Async(c_uint64(q), 1, c_size_t(512), s2), "m")
        ok(lib.cuCtxSynchronize(), "sync")
        print(simulator.hazard_count(), simulator.last_hazard())
        free(p, s2)
        free(q, s2)
        ok(lib.cuCtxSynchronize(), "sync")
    """, env={"CUDAMEM_SIM_DELAY_US": "20000", "CUDAMEM_SIM_HAZARDS": "1"})
    ordered, racing = proc.stdout.splitlines()
    assert ordered == "0"
    assert racing.startswith("1 cuMemsetD8Async")
    assert "cuMemAllocAsync" in racing


def test_work_ordered_after_the_free_faults(run_py):
    # "The allocation must not be accessed after stream execution reaches
    # the free": a GPU faults, the simulator returns the sticky
    # CUDA_ERROR_ILLEGAL_ADDRESS, and a later call on the freed pointer
    # is refused.
    proc = run_pools(run_py, """
        s1, s2 = stream(), stream()
        ev = c_void_p()
        ok(lib.cuEventCreate(byref(ev), 0), "cuEventCreate")
        p = alloc(256, s1)
        free(p, s1)
        ok(lib.cuEventRecord(ev, s1), "record")
        ok(lib.cuStreamWaitEvent(s2, ev, 0), "wait")
        print(lib.cuMemsetD8Async(c_uint64(p), 1, c_size_t(256), s2))
        print(lib.cuStreamSynchronize(s2), "freed" in simulator.last_hazard())
    """, env={"CUDAMEM_SIM_DELAY_US": "50000", "CUDAMEM_SIM_HAZARDS": "1"})
    queued, ran = proc.stdout.splitlines()
    assert queued == "0"
    assert ran.split() == [str(ILLEGAL_ADDRESS), "True"]


def test_release_threshold_applies_at_synchronize_points(run_py):
    # "When more than the release threshold bytes of memory are held by
    # the memory pool, the allocator will try to release memory back to
    # the OS on the next call to stream, event or context synchronize."
    # Each here waits for the free through its stream; those that do not
    # keep the memory (test_driver_facts.py, as an H100 answered).
    proc = run_pools(run_py, """
        s = stream()
        ev = c_void_p()
        ok(lib.cuEventCreate(byref(ev), 0), "cuEventCreate")
        dflt = default_pool()
        free_before = c_size_t()
        total = c_size_t()
        ok(lib.cuMemGetInfo_v2(byref(free_before), byref(total)), "info")
        syncs = {
            "stream": lambda: lib.cuStreamSynchronize(s),
            "event": lambda: (lib.cuEventRecord(ev, s),
                              lib.cuEventSynchronize(ev))[1],
            "context": lambda: lib.cuCtxSynchronize(),
        }
        for name, sync in syncs.items():
            p = alloc(1 << 20, s)
            free(p, s)
            while lib.cuStreamQuery(s) == 600:
                pass
            held = get(dflt, "RESERVED_MEM_CURRENT")
            ok(sync(), name)
            print(name, held >= 1 << 20, get(dflt, "RESERVED_MEM_CURRENT"))
        ok(put(dflt, "RELEASE_THRESHOLD", 4 << 20), "threshold")
        p = alloc(1 << 20, s)
        free(p, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        kept = get(dflt, "RESERVED_MEM_CURRENT")
        free_now = c_size_t()
        ok(lib.cuMemGetInfo_v2(byref(free_now), byref(total)), "info")
        # Reserved memory is memory the device has given the pool.
        print(kept >= 1 << 20, free_before.value - free_now.value == kept)
        ok(put(dflt, "RELEASE_THRESHOLD", 0), "threshold")
        ok(lib.cuStreamSynchronize(s), "sync")
        print(get(dflt, "RESERVED_MEM_CURRENT"))
    """)
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["stream True 0", "event True 0", "context True 0"]
    assert lines[3:] == ["True True", "0"]


@pytest.mark.parametrize("handles", [0, 1], ids=["plain", "ipc-capable"])
def test_a_pool_gives_back_part_of_a_block_down_to_its_threshold(run_py,
                                                                 handles):
    # An H100 keeps exactly the threshold: 32 MiB of a freed 64 MiB block
    # (tests/gpu/driver_facts.json, "pool_release"). The block's end goes
    # back to the device (cuMemGetInfo), its start stays memory that holds
    # data, for the block's next allocation; a trim goes down the same way,
    # and an IPC-capable pool's file loses the pages given back.
    proc = run_pools(run_py, """
        MIB = 1 << 20
        s = stream()
        pool = c_void_p()
        ok(lib.cuMemPoolCreate(byref(pool), byref(props(handles=%d))),
           "create")
        free_mem, total = c_size_t(), c_size_t()

        def device_free():
            ok(lib.cuMemGetInfo_v2(byref(free_mem), byref(total)), "info")
            return free_mem.value

        start = device_free()

        def device_used():
            return (start - device_free()) // MIB

        ok(put(pool.value, "RELEASE_THRESHOLD", 32 * MIB), "threshold")
        p = alloc(64 * MIB, s, pool.value)
        free(p, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        print(get(pool.value, "RESERVED_MEM_CURRENT") // MIB, device_used())
        q = alloc(32 * MIB, s, pool.value)
        src = bytes(range(256)) * (32 * MIB // 256)
        out = ctypes.create_string_buffer(32 * MIB)
        ok(lib.cuMemcpyHtoDAsync_v2(c_uint64(q), src, c_size_t(32 * MIB), s),
           "HtoD")
        ok(lib.cuMemcpyDtoHAsync_v2(out, c_uint64(q), c_size_t(32 * MIB), s),
           "DtoH")
        ok(lib.cuStreamSynchronize(s), "sync")
        print(q == p, out.raw == src,
              get(pool.value, "RESERVED_MEM_CURRENT") // MIB)
        free(q, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        ok(lib.cuMemPoolTrimTo(pool, c_size_t(8 * MIB)), "trim")
        print(get(pool.value, "RESERVED_MEM_CURRENT") // MIB, device_used())
        ok(lib.cuMemPoolDestroy(pool), "destroy")
        print(device_used())
    """ % handles)
    assert proc.stdout.splitlines() == ["32 32", "True True 32", "8 8", "0"]


def test_statistics_trim_and_reuse(run_py):
    proc = run_pools(run_py, """
        s = stream()
        dflt = default_pool()
        ok(put(dflt, "RELEASE_THRESHOLD", 2 ** 64 - 1), "threshold")
        a = alloc(4096, s)
        b = alloc(8192, s)
        print(get(dflt, "USED_MEM_CURRENT") >= 12288,
              get(dflt, "RESERVED_MEM_CURRENT") >= 12288)
        free(a, s)
        free(b, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        reserved = get(dflt, "RESERVED_MEM_CURRENT")
        print(get(dflt, "USED_MEM_CURRENT"), reserved >= 12288,
              get(dflt, "USED_MEM_HIGH") >= 12288,
              get(dflt, "RESERVED_MEM_HIGH") >= 12288)
        # A later allocation of the same size on the stream reuses a block.
        c = alloc(4096, s)
        print(c == a, get(dflt, "RESERVED_MEM_CURRENT") == reserved)
        free(c, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        # Highs reset to the current value; only 0 may be written.
        print(put(dflt, "USED_MEM_HIGH", 5), put(dflt, "RESERVED_MEM_HIGH", 5),
              put(dflt, "USED_MEM_CURRENT", 0),
              put(dflt, "RESERVED_MEM_CURRENT", 0))
        ok(put(dflt, "USED_MEM_HIGH", 0), "reset")
        print(get(dflt, "USED_MEM_HIGH"))
        # Trim keeps at least minBytesToKeep reserved.
        ok(lib.cuMemPoolTrimTo(c_void_p(dflt), c_size_t(5000)), "trim")
        kept = get(dflt, "RESERVED_MEM_CURRENT")
        print(5000 <= kept < reserved)
        ok(put(dflt, "RESERVED_MEM_HIGH", 0), "reset")
        print(get(dflt, "RESERVED_MEM_HIGH") == kept)
        ok(lib.cuMemPoolTrimTo(c_void_p(dflt), c_size_t(0)), "trim")
        v = c_uint64()
        print(get(dflt, "RESERVED_MEM_CURRENT"),
              lib.cuMemPoolTrimTo(c_void_p(0x1234), c_size_t(0)),
              lib.cuMemPoolGetAttribute(c_void_p(dflt), 99, byref(v)),
              lib.cuMemPoolGetAttribute(c_void_p(dflt), 5, None),
              lib.cuMemPoolSetAttribute(c_void_p(dflt), 4, None),
              lib.cuMemPoolGetAttribute(c_void_p(0x1234), 5, byref(v)))
    """)
    lines = proc.stdout.splitlines()
    assert lines[0] == "True True"
    assert lines[1] == "0 True True True"
    assert lines[2] == "True True"
    assert [int(e) for e in lines[3].split()] == [INVALID_VALUE] * 4
    assert lines[4] == "0"
    assert lines[5:7] == ["True", "True"]
    assert [int(e) for e in lines[7].split()] == [0] + [INVALID_VALUE] * 5


def test_reuse_across_streams_follows_the_reuse_flags(run_py):
    # A completed free may be reused by any stream while
    # REUSE_ALLOW_OPPORTUNISTIC is set; without it (and without a
    # dependency on the free) the block is not handed to another stream.
    proc = run_pools(run_py, """
        s1, s2 = stream(), stream()
        dflt = default_pool()
        ok(put(dflt, "RELEASE_THRESHOLD", 2 ** 64 - 1), "threshold")
        a = alloc(4096, s1)
        free(a, s1)
        ok(lib.cuStreamSynchronize(s1), "sync")
        b = alloc(4096, s2)
        print(b == a)
        free(b, s2)
        ok(lib.cuStreamSynchronize(s2), "sync")
        ok(put(dflt, "REUSE_ALLOW_OPPORTUNISTIC", 0), "reuse")
        print(get(dflt, "REUSE_ALLOW_OPPORTUNISTIC"))
        c = alloc(4096, s1)
        d = alloc(4096, s2)
        print(c != b, d == b)
        free(c, s1)
        free(d, s2)
        ok(lib.cuCtxSynchronize(), "sync")
    """)
    assert proc.stdout.split() == ["True", "0", "True", "True"]


def test_a_free_serves_the_next_allocation_on_its_stream(run_py):
    # Stream order puts an allocation after the free before it on the same
    # stream, so the driver's pool hands it that block at once: a loop of
    # allocations and frees with no synchronize holds one block, on a
    # created stream and on the legacy one.
    proc = run_pools(run_py, """
        dflt = default_pool()
        ok(put(dflt, "RELEASE_THRESHOLD", 2 ** 64 - 1), "threshold")
        for s in (stream(), c_void_p(0)):
            first = alloc(4096, s)
            reserved = get(dflt, "RESERVED_MEM_CURRENT")
            free(first, s)
            same = 0
            for _ in range(1000):
                p = alloc(4096, s)
                same += p == first
                free(p, s)
            print(same, get(dflt, "RESERVED_MEM_HIGH") == reserved)
            ok(lib.cuStreamSynchronize(s), "sync")
    """)
    assert proc.stdout.split() == ["1000", "True"] * 2


def test_a_free_behind_queued_work_waits_for_it(run_py):
    # Only a free on an idle stream completes as it is queued: one behind
    # work still queued returns its block when the stream reaches it, so
    # another stream cannot take the block before then.
    proc = run_pools(run_py, """
        import threading
        s1, s2 = stream(), stream()
        dflt = default_pool()
        ok(put(dflt, "RELEASE_THRESHOLD", 2 ** 64 - 1), "threshold")
        a = alloc(4096, s1)
        go = threading.Event()
        hold = ctypes.CFUNCTYPE(None, c_void_p)(lambda _: go.wait())
        ok(lib.cuLaunchHostFunc(s1, hold, None), "hold")
        free(a, s1)
        b = alloc(4096, s2)
        print(b != a, lib.cuStreamQuery(s1))
        go.set()
        ok(lib.cuStreamSynchronize(s1), "sync")
        c = alloc(4096, s2)
        print(c == a)
        free(b, s2)
        free(c, s2)
        ok(lib.cuCtxSynchronize(), "sync")
    """)
    assert proc.stdout.split() == ["True", str(NOT_READY), "True"]


def test_created_pools(run_py):
    proc = run_pools(run_py, """
        s = stream()
        pool = c_void_p()
        pr = props(max_size=4096)
        ok(lib.cuMemPoolCreate(byref(pool), byref(pr)), "cuMemPoolCreate")
        p = c_void_p()
        print(lib.cuMemPoolCreate(None, byref(pr)),
              lib.cuMemPoolCreate(byref(p), None),
              lib.cuMemPoolCreate(byref(p), byref(props(alloc=MANAGED))),
              lib.cuMemPoolCreate(byref(p), byref(props(device=9))),
              lib.cuMemPoolCreate(byref(p), byref(props(loc_type=LOC_HOST))),
              lib.cuMemPoolCreate(byref(p),
                                  byref(props(loc_type=LOC_NUMA_CURRENT))),
              # Win32 handles: only POSIX descriptors are supported.
              lib.cuMemPoolCreate(byref(p), byref(props(handles=2))))
        a = alloc(4096, s, pool.value)
        q = c_uint64()
        # maxSize bounds the pool.
        print(pool_of(a) == pool.value,
              lib.cuMemAllocFromPoolAsync(byref(q), c_size_t(256), pool, s))
        # The current pool is where cuMemAllocAsync allocates.
        ok(lib.cuDeviceSetMemPool(0, pool), "cuDeviceSetMemPool")
        cur = c_void_p()
        ok(lib.cuDeviceGetMemPool(byref(cur), 0), "cuDeviceGetMemPool")
        free(a, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        b = alloc(1024, s)
        print(cur.value == pool.value, pool_of(b) == pool.value)
        # Destroyed with an allocation outstanding: the call returns, the
        # device's current pool is its default again, the memory stays
        # usable until freed, and the handle is gone.
        ok(lib.cuMemPoolDestroy(pool), "cuMemPoolDestroy")
        ok(lib.cuDeviceGetMemPool(byref(cur), 0), "cuDeviceGetMemPool")
        ok(lib.cuMemsetD8Async(c_uint64(b), 3, c_size_t(1024), s), "memset")
        v = c_uint64()
        print(cur.value == default_pool(),
              lib.cuMemPoolGetAttribute(pool, 5, byref(v)),
              lib.cuMemPoolDestroy(pool),
              lib.cuMemAllocFromPoolAsync(byref(q), c_size_t(256), pool, s),
              lib.cuDeviceSetMemPool(0, pool))
        free(b, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        print(simulator.live()["device_allocations"])
    """)
    lines = proc.stdout.splitlines()
    assert [int(e) for e in lines[0].split()] == [
        INVALID_VALUE, INVALID_VALUE, INVALID_VALUE, INVALID_VALUE,
        NOT_SUPPORTED, INVALID_VALUE, NOT_SUPPORTED]
    assert lines[1] == "True %d" % OUT_OF_MEMORY
    assert lines[2] == "True True"
    assert lines[3].split() == ["True"] + [str(INVALID_VALUE)] * 4
    assert lines[4] == "0"


def test_pool_access_between_devices(run_py):
    proc = run_pools(run_py, """
        dflt0, dflt1 = default_pool(0), default_pool(1)
        flags = ctypes.c_int()

        def access(pool, device):
            loc = Location(LOC_DEVICE, device)
            ok(lib.cuMemPoolGetAccess(byref(flags), c_void_p(pool),
                                      byref(loc)), "cuMemPoolGetAccess")
            return flags.value

        print(access(dflt0, 0), access(dflt0, 1), dflt0 != dflt1)
        grant = (AccessDesc * 1)(AccessDesc(Location(LOC_DEVICE, 1), PROT_RW))
        ok(lib.cuMemPoolSetAccess(c_void_p(dflt0), grant, 1), "grant")
        print(access(dflt0, 1))
        grant[0].flags = PROT_NONE
        ok(lib.cuMemPoolSetAccess(c_void_p(dflt0), grant, 1), "revoke")
        print(access(dflt0, 1))
        own = (AccessDesc * 1)(AccessDesc(Location(LOC_DEVICE, 0), PROT_NONE))
        host = (AccessDesc * 1)(AccessDesc(Location(LOC_HOST, 0), PROT_RW))
        far = (AccessDesc * 1)(AccessDesc(Location(LOC_DEVICE, 5), PROT_RW))
        loc = Location(LOC_HOST, 0)
        print(lib.cuMemPoolSetAccess(c_void_p(dflt0), own, 1),
              lib.cuMemPoolSetAccess(c_void_p(dflt0), host, 1),
              lib.cuMemPoolSetAccess(c_void_p(dflt0), far, 1),
              lib.cuMemPoolSetAccess(c_void_p(dflt0), None, 1),
              lib.cuMemPoolGetAccess(byref(flags), c_void_p(dflt0),
                                     byref(loc)),
              lib.cuMemPoolGetAccess(None, c_void_p(dflt0), byref(loc)),
              # "The memory pool must be local to the specified device."
              lib.cuDeviceSetMemPool(1, c_void_p(dflt0)))
        # A pool of device 1 serves a stream of device 0.
        s = stream()
        p = alloc(256, s, dflt1)
        ordinal = ctypes.c_int()
        ok(lib.cuPointerGetAttribute(byref(ordinal), DEVICE_ORDINAL,
                                     c_uint64(p)), "ordinal")
        print(ordinal.value)
        free(p, s)
        ok(lib.cuStreamSynchronize(s), "sync")
    """, env={"CUDAMEM_SIM_DEVICES": "2"})
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["3 0 True", "3", "0"]
    assert [int(e) for e in lines[3].split()] == [INVALID_VALUE] * 7
    assert lines[4] == "1"


def test_cumemfree_of_async_memory_waits_for_its_work(run_py):
    # cuMemFree takes memory from cuMemAllocAsync "without implicit
    # synchronization": the caller must have finished with it. The
    # simulator frees it only once queued work on it is done, as it does
    # every free, and the hazard checker reports the caller's mistake.
    proc = run_pools(run_py, """
        s = stream()
        done = alloc(64, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        ok(lib.cuMemFree_v2(c_uint64(done)), "cuMemFree")
        print(simulator.hazard_count())
        dflt = default_pool()
        p = alloc(1 << 16, s)
        # Page-locked, so that the copy is queued and not run at the call.
        out = c_void_p()
        ok(lib.cuMemAllocHost_v2(byref(out), c_size_t(1 << 16)), "pinned")
        ok(lib.cuMemsetD8Async(c_uint64(p), 0x77, c_size_t(1 << 16), s), "m")
        ok(lib.cuMemcpyDtoHAsync_v2(out, c_uint64(p), c_size_t(1 << 16), s),
           "d")
        ok(lib.cuMemFree_v2(c_uint64(p)), "cuMemFree")
        print(ctypes.string_at(out, 1 << 16) == b"\\x77" * (1 << 16),
              get(dflt, "USED_MEM_CURRENT"),
              simulator.live()["device_allocations"],
              lib.cuMemFreeAsync(c_uint64(p), s))
        print(simulator.hazard_count(), simulator.last_hazard())
        ok(lib.cuMemFreeHost(out), "cuMemFreeHost")
    """, env={"CUDAMEM_SIM_DELAY_US": "20000", "CUDAMEM_SIM_HAZARDS": "1"})
    quiet, freed, reported = proc.stdout.splitlines()
    assert quiet == "0"
    assert freed.split() == ["True", "0", "0", str(INVALID_VALUE)]
    assert reported.startswith("1 cuMemFree of stream-ordered memory")


def test_entry_points_are_found_counted_and_take_faults(run_py):
    names = ["cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemFreeAsync",
             "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPoolSetAttribute",
             "cuMemPoolGetAttribute", "cuMemPoolTrimTo", "cuMemPoolSetAccess",
             "cuMemPoolGetAccess", "cuDeviceGetDefaultMemPool",
             "cuDeviceGetMemPool", "cuDeviceSetMemPool",
             "cuMemGetDefaultMemPool", "cuMemGetMemPool", "cuMemSetMemPool",
             "cuMemPoolExportToShareableHandle",
             "cuMemPoolImportFromShareableHandle", "cuMemPoolExportPointer",
             "cuMemPoolImportPointer"]
    proc = run_pools(run_py, """
        names = %r
        status = ctypes.c_int()
        found = []
        for name in names:
            pfn = c_void_p()
            ok(lib.cuGetProcAddress_v2(name.encode(), byref(pfn), 13000,
                                       c_uint64(0), byref(status)), name)
            found.append(pfn.value is not None and status.value == 0)
        print(all(found))
        # The per-thread default stream variant is a function of its own.
        plain, ptds = c_void_p(), c_void_p()
        ok(lib.cuGetProcAddress_v2(b"cuMemAllocAsync", byref(plain), 13000,
                                   c_uint64(0), byref(status)), "plain")
        ok(lib.cuGetProcAddress_v2(b"cuMemAllocAsync", byref(ptds), 13000,
                                   c_uint64(2), byref(status)), "ptds")
        print(plain.value != ptds.value and ptds.value is not None)
        # Too old an ABI: the cuda.h 13 forms do not exist at 12.x.
        pfn = c_void_p()
        ok(lib.cuGetProcAddress_v2(b"cuMemGetMemPool", byref(pfn), 12080,
                                   c_uint64(0), byref(status)), "old")
        print(pfn.value, status.value)
        simulator.reset()
        simulator.inject("cuMemAllocAsync", "CUDA_ERROR_OUT_OF_MEMORY")
        simulator.inject("cuMemPoolTrimTo", "CUDA_ERROR_UNKNOWN")
        s = stream()
        p = c_uint64()
        print(lib.cuMemAllocAsync(byref(p), c_size_t(8), s),
              lib.cuMemPoolTrimTo(c_void_p(default_pool()), c_size_t(0)),
              simulator.live()["device_allocations"])
        q = alloc(8, s)
        free(q, s)
        ok(lib.cuStreamSynchronize(s), "sync")
        calls = simulator.stats()["calls"]
        print(calls["cuMemAllocAsync"]["calls"],
              calls["cuMemFreeAsync"]["calls"],
              calls["cuMemPoolTrimTo"]["calls"])
    """ % names)
    found, ptds, old, faulted, counted = proc.stdout.splitlines()
    assert found == "True"
    assert ptds == "True"
    assert old == "None 2"  # CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
    assert faulted.split() == [str(OUT_OF_MEMORY), "999", "0"]
    assert counted.split() == ["2", "1", "1"]


def test_log_missing_names_each_unanswered_symbol_once(run_py):
    body = """
        status = ctypes.c_int()
        pfn = c_void_p()
        for name, version in [(b"cuNoSuchEntryPoint", 13000),
                              (b"cuNoSuchEntryPoint", 12000),
                              (b"cuLibraryLoadData", 11080),
                              (b"cuMemAllocAsync", 13000)]:
            ok(lib.cuGetProcAddress_v2(name, byref(pfn), version,
                                       c_uint64(0), byref(status)), name)
    """
    logged = run_pools(run_py, body, env={"CUDAMEM_SIM_LOG_MISSING": "1"})
    lines = [line for line in logged.stderr.splitlines()
             if line.startswith("cusim: cuGetProcAddress")]
    assert lines == [
        'cusim: cuGetProcAddress("cuNoSuchEntryPoint", 13000): '
        'not in the simulator',
        'cusim: cuGetProcAddress("cuLibraryLoadData", 11080): '
        'not at this version']
    quiet = run_pools(run_py, body, env={"CUDAMEM_SIM_LOG_MISSING": None})
    assert "cuGetProcAddress" not in quiet.stderr


# The importer: maps the exported allocation, checks and marks it, frees
# its mapping. argv: the pool's descriptor, the pointer's export data.
IMPORTER = PROLOGUE + POOLS + """
fd, data = int(sys.argv[1]), bytes.fromhex(sys.argv[2])
share = (ctypes.c_ubyte * 64).from_buffer_copy(data)
pool, p = c_void_p(), c_uint64()
ok(lib.cuMemPoolImportFromShareableHandle(byref(pool), c_void_p(fd), 1,
                                          c_uint64(0)), "import pool")
ok(lib.cuMemPoolImportPointer(byref(p), pool, share), "import pointer")
out = ctypes.create_string_buffer(4096)
ok(lib.cuMemcpyDtoH_v2(out, p, c_size_t(4096)), "cuMemcpyDtoH")
bad = (ctypes.c_ubyte * 64)()
q = c_uint64()
s = stream()
print(out.raw == bytes(range(256)) * 16, pool_of(p.value) == pool.value,
      lib.cuMemPoolImportPointer(byref(q), pool, bad),
      # "imported pools cannot be used to allocate"
      lib.cuMemAllocFromPoolAsync(byref(q), c_size_t(64), pool, s))
ok(lib.cuMemsetD8_v2(p, 0x42, c_size_t(16)), "cuMemsetD8")
ok(lib.cuMemFree_v2(p), "cuMemFree")
ok(lib.cuMemPoolDestroy(pool), "cuMemPoolDestroy")
print(simulator.live()["device_allocations"])
"""


def test_pool_ipc_by_posix_file_descriptor(run_py):
    proc = run_pools(run_py, """
        import subprocess
        v = ctypes.c_int()
        ok(lib.cuDeviceGetAttribute(byref(v), 119, 0), "attr")  # HANDLE_TYPES
        print(v.value)
        s = stream()
        pool = c_void_p()
        ok(lib.cuMemPoolCreate(byref(pool), byref(props(handles=1))), "create")
        p = alloc(4096, s, pool.value)
        src = bytes(range(256)) * 16
        ok(lib.cuMemcpyHtoDAsync_v2(c_uint64(p), src, c_size_t(4096), s), "h")
        ok(lib.cuStreamSynchronize(s), "sync")
        fd = ctypes.c_int(-1)
        ok(lib.cuMemPoolExportToShareableHandle(byref(fd), pool, 1,
                                                c_uint64(0)), "export pool")
        share = (ctypes.c_ubyte * 64)()
        ok(lib.cuMemPoolExportPointer(share, c_uint64(p)), "export pointer")
        child = subprocess.run(
            [sys.executable, "-c", %r, str(fd.value), bytes(share).hex()],
            pass_fds=[fd.value], capture_output=True, text=True, timeout=60)
        print(child.stdout.strip().replace("\\n", " "), child.stderr.strip())
        out = ctypes.create_string_buffer(4096)
        ok(lib.cuMemcpyDtoH_v2(out, c_uint64(p), c_size_t(4096)), "d")
        print(out.raw[:16] == b"\\x42" * 16, out.raw[16:] == src[16:])
        # Errors: a pool without handle types, flags, a handle type the
        # pool lacks, memory not from an IPC-capable pool.
        plain = c_void_p()
        ok(lib.cuMemPoolCreate(byref(plain), byref(props())), "create")
        q = alloc(64, s, plain.value)
        print(lib.cuMemPoolExportToShareableHandle(byref(fd), plain, 1,
                                                   c_uint64(0)),
              lib.cuMemPoolExportToShareableHandle(byref(fd), pool, 1,
                                                   c_uint64(1)),
              lib.cuMemPoolExportToShareableHandle(byref(fd), pool, 2,
                                                   c_uint64(0)),
              lib.cuMemPoolExportPointer(share, c_uint64(q)),
              lib.cuMemPoolExportPointer(share, c_uint64(p + 64)),
              lib.cuMemPoolImportFromShareableHandle(byref(plain),
                                                     c_void_p(-1), 1,
                                                     c_uint64(0)))
        free(p, s)
        free(q, s)
        ok(lib.cuStreamSynchronize(s), "sync")
    """ % IMPORTER)
    lines = proc.stdout.splitlines()
    assert lines[0] == "1"  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    assert lines[1].split()[:5] == ["True", "True", str(INVALID_VALUE),
                                    str(INVALID_VALUE), "0"], lines[1]
    assert lines[2] == "True True"
    assert [int(e) for e in lines[3].split()] == [INVALID_VALUE] * 6
