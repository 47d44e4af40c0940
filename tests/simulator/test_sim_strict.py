"""The simulator's strict modes and undefined-behaviour reports against the
CUDA driver documentation, driven through ctypes as a client other than
cudamem would drive it, each case in a fresh process.

"API synchronization behavior" (driver API): a synchronous copy from
pageable memory to the device "will return once the pageable buffer has
been copied to the staging memory"; one from the device to host memory
"returns only once the copy has completed". For the asynchronous forms,
"for transfers between device memory and pageable host memory, the
function might be synchronous with respect to host", and "if pageable
memory must first be staged to pinned memory, the driver may synchronize
with the stream and stage the copy into pinned memory". The strict modes
take the latest answer the text allows: CUDAMEM_SIM_STRICT_STAGING reads a
pageable source of an async copy when the stream runs,
CUDAMEM_SIM_STRICT_DTOH returns from an async copy into pageable memory
before it completes, CUDAMEM_SIM_STRICT_HTOD from a synchronous copy out of
pageable memory once the stream's earlier work is done and the source is
read ("the DMA to final destination may not have completed"). Copies
between overlapping ranges are undefined on the driver, not an error: the
simulator copies them as memmove does and the hazard checker reports
them."""
import pytest

from tests.helpers.simdriver import GATE, run_driver

pytestmark = pytest.mark.simulator

STAGING = {"CUDAMEM_SIM_STRICT_STAGING": "1"}
DTOH = {"CUDAMEM_SIM_STRICT_DTOH": "1"}
HTOD = {"CUDAMEM_SIM_STRICT_HTOD": "1"}
OFF = {"CUDAMEM_SIM_STRICT_STAGING": None, "CUDAMEM_SIM_STRICT_DTOH": None,
       "CUDAMEM_SIM_STRICT_HTOD": None}

# A device buffer `d` of N bytes and a pageable host buffer `host`.
BUFFERS = """
N = 1 << 16
d = c_uint64()
ok(lib.cuMemAlloc_v2(byref(d), c_size_t(N)), "cuMemAlloc")
host = ctypes.create_string_buffer(b"\\x01" * N, N)


def device_bytes():
    out = ctypes.create_string_buffer(N)
    ok(lib.cuMemcpyDtoH_v2(out, d, c_size_t(N)), "cuMemcpyDtoH")
    return out.raw
"""


def _run(run_py, body, env, prelude=""):
    return run_driver(run_py, prelude=GATE + BUFFERS + prelude, body=body,
                      env=env)


ASYNC_FROM_PAGEABLE = """
    s = stream()
    ok(lib.cuMemcpyHtoDAsync_v2(d, host, c_size_t(N), s), "cuMemcpyHtoDAsync")
    assert pending(s)
    ctypes.memset(host, 2, N)       # the caller reuses its buffer at once
    gate.set()
    ok(lib.cuStreamSynchronize(s), "cuStreamSynchronize")
    got = set(device_bytes())
    ok(lib.cuStreamDestroy_v2(s), "cuStreamDestroy")
    ok(lib.cuMemFree_v2(d), "cuMemFree")
    print(sorted(got))
"""


@pytest.mark.parametrize("env, seen", [(OFF, 1), (STAGING, 2)],
                         ids=["at-call", "strict"])
def test_async_copy_from_pageable_reads_when_staged(run_py, env, seen):
    # By default the source is staged at the call; strictly, when the
    # stream reaches the copy, so a reused source is what lands.
    proc = _run(run_py, ASYNC_FROM_PAGEABLE, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["[%d]" % seen]


def test_strict_staging_keeps_synchronous_copies_staged(run_py):
    # cuMemcpyHtoD returns once the pageable buffer is staged, in every
    # mode: reusing it right after the call cannot change what lands,
    # however late the copy runs.
    proc = _run(run_py, """
        ok(lib.cuMemcpyHtoD_v2(d, host, c_size_t(N)), "cuMemcpyHtoD")
        ctypes.memset(host, 2, N)
        ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        print(sorted(set(device_bytes())))
        ok(lib.cuMemFree_v2(d), "cuMemFree")
    """, dict(STAGING, CUDAMEM_SIM_DELAY_US="20000"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["[1]"]


def test_strict_staging_leaves_pinned_sources_alone(run_py):
    # Pinned memory is read by the stream in every mode (it is never
    # staged): the strict mode changes pageable sources only.
    proc = _run(run_py, """
        p = c_void_p()
        ok(lib.cuMemHostAlloc(byref(p), c_size_t(N), 0), "cuMemHostAlloc")
        ctypes.memset(p, 1, N)
        s = stream()
        ok(lib.cuMemcpyHtoDAsync_v2(d, p, c_size_t(N), s),
           "cuMemcpyHtoDAsync")
        ctypes.memset(p, 2, N)
        gate.set()
        ok(lib.cuStreamSynchronize(s), "cuStreamSynchronize")
        print(sorted(set(device_bytes())))
        ok(lib.cuStreamDestroy_v2(s), "cuStreamDestroy")
        ok(lib.cuMemFreeHost(p), "cuMemFreeHost")
        ok(lib.cuMemFree_v2(d), "cuMemFree")
    """, OFF)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["[2]"]


ASYNC_INTO_PAGEABLE = """
    ok(lib.cuMemsetD8_v2(d, ctypes.c_ubyte(7), c_size_t(N)), "cuMemsetD8")
    ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
    s = stream()
    threading.Timer(0.3, gate.set).start()
    ok(lib.cuMemcpyDtoHAsync_v2(host, d, c_size_t(N), s),
       "cuMemcpyDtoHAsync")
    early = (pending(s), sorted(set(host.raw)))
    ok(lib.cuStreamSynchronize(s), "cuStreamSynchronize")
    print(*early, sorted(set(host.raw)))
    ok(lib.cuStreamDestroy_v2(s), "cuStreamDestroy")
    ok(lib.cuMemFree_v2(d), "cuMemFree")
"""


@pytest.mark.parametrize("env, early", [
    (OFF, "False [7]"), (DTOH, "True [1]")], ids=["synchronous", "strict"])
def test_async_copy_into_pageable_may_return_early(run_py, env, early):
    # The stream is held by a host function until the timer opens it. By
    # default the call waits for the copy; strictly, it returns with the
    # copy still queued and the destination untouched.
    proc = _run(run_py, ASYNC_INTO_PAGEABLE, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == (early + " [7]").split()


def test_strict_dtoh_keeps_synchronous_copies_synchronous(run_py):
    # "For transfers from device to either pageable or pinned host memory,
    # the function returns only once the copy has completed."
    proc = _run(run_py, """
        ok(lib.cuMemsetD8_v2(d, ctypes.c_ubyte(7), c_size_t(N)), "cuMemsetD8")
        ok(lib.cuMemcpyDtoH_v2(host, d, c_size_t(N)), "cuMemcpyDtoH")
        print(sorted(set(host.raw)))
        ok(lib.cuMemFree_v2(d), "cuMemFree")
    """, dict(DTOH, CUDAMEM_SIM_DELAY_US="20000"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["[7]"]


def test_strict_dtoh_is_ordered_by_the_hazard_checker(run_py):
    # A copy into pageable memory returning early is stream work like any
    # other: reading it back on another stream without ordering is a race.
    proc = _run(run_py, """
        ok(lib.cuMemsetD8_v2(d, ctypes.c_ubyte(7), c_size_t(N)), "cuMemsetD8")
        ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        s = stream()
        s2 = c_void_p()
        ok(lib.cuStreamCreate(byref(s2), 1), "cuStreamCreate")
        ok(lib.cuMemcpyDtoHAsync_v2(host, d, c_size_t(N), s),
           "cuMemcpyDtoHAsync")
        ok(lib.cuMemcpyHtoDAsync_v2(d, host, c_size_t(N), s2),
           "cuMemcpyHtoDAsync")
        gate.set()
        ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        print(simulator.hazard_count())
        for st in (s, s2):
            ok(lib.cuStreamDestroy_v2(st), "cuStreamDestroy")
        ok(lib.cuMemFree_v2(d), "cuMemFree")
    """, dict(DTOH, **STAGING, CUDAMEM_SIM_HAZARDS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["1"]
    assert "cuMemcpyHtoDAsync" in proc.stderr
    assert "while cuMemcpyDtoHAsync" in proc.stderr


# Device 1's legacy stream fills `d` from pageable memory with cuMemcpyHtoD;
# then device 0's context, without any ordering, copies device 0's ones over
# it and reads it back. A blocked stream on device 1 (the gate, on a
# non-blocking stream the legacy stream does not wait for) holds nothing:
# the fill is the legacy stream's only work.
CROSS_CONTEXT = """
    ctx1 = primary(1)
    ones = c_uint64()
    ok(lib.cuMemAlloc_v2(byref(ones), c_size_t(N)), "cuMemAlloc")
    ok(lib.cuMemsetD8_v2(ones, ctypes.c_ubyte(1), c_size_t(N)), "cuMemsetD8")
    ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
    ok(lib.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent")
    d1 = c_uint64()
    ok(lib.cuMemAlloc_v2(byref(d1), c_size_t(N)), "cuMemAlloc")
    zeros = ctypes.create_string_buffer(N)
    ok(lib.cuMemcpyHtoD_v2(d1, zeros, c_size_t(N)), "cuMemcpyHtoD")
    landed = lib.cuStreamQuery(None) == 0
    ok(lib.cuCtxSetCurrent(ctx0), "cuCtxSetCurrent")
    ok(lib.cuMemcpyDtoD_v2(d1, ones, c_size_t(N)), "cuMemcpyDtoD")
    ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
    ok(lib.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent")
    ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
    print(landed, simulator.hazard_count())
"""


@pytest.mark.parametrize("strict", [False, True])
def test_synchronous_copy_from_pageable_memory(run_py, strict):
    # By default the copy has landed when cuMemcpyHtoD returns, as on a GPU
    # whose DMA beats the caller (numba-cuda's peer-copy test relies on
    # it). Strict, it is still queued: the other context's copy is a race,
    # which the hazard checker reports.
    env = dict(HTOD if strict else OFF, CUDAMEM_SIM_DEVICES="2",
               CUDAMEM_SIM_HAZARDS="1", CUDAMEM_SIM_DELAY_US="20000")
    proc = _run(run_py, CROSS_CONTEXT, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if strict:
        assert proc.stdout.split() == ["False", "1"]
        assert ("cuMemcpyDtoD on legacy default stream of context" in
                proc.stderr)
        assert "while cuMemcpyHtoD on legacy default stream" in proc.stderr
    else:
        assert proc.stdout.split() == ["True", "0"], proc.stderr


def test_strict_htod_waits_for_the_streams_earlier_work(run_py):
    # "For transfers from pageable host memory to device memory, a stream
    # sync is performed before the copy is initiated": the call returns
    # only after the legacy stream's earlier work, here a host function
    # held by a gate that a timer opens.
    proc = _run(run_py, """
        HOSTFN2 = ctypes.CFUNCTYPE(None, c_void_p)
        ran = []
        later = HOSTFN2(lambda user: ran.append(gate.wait(5)))
        ok(lib.cuLaunchHostFunc(None, later, None), "cuLaunchHostFunc")
        open_gate_soon()
        ok(lib.cuMemcpyHtoD_v2(d, host, c_size_t(N)), "cuMemcpyHtoD")
        print(ran)
        ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        print(sorted(set(device_bytes())))
        ok(lib.cuMemFree_v2(d), "cuMemFree")
    """, HTOD)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["[True]", "[1]"]


# -- Overlapping copies ------------------------------------------------------

OVERLAP = """
import numpy as np

ref = np.frombuffer(bytes(range(256)) * (N // 256), np.uint8).copy()
ok(lib.cuMemcpyHtoD_v2(d, c_void_p(ref.ctypes.data), c_size_t(N)),
   "cuMemcpyHtoD")
"""


@pytest.mark.parametrize("call", ["sync", "async"])
@pytest.mark.parametrize("shift", [100, -100])
def test_overlapping_copy_is_a_memmove_and_a_hazard(run_py, call, shift):
    proc = _run(run_py, """
        SHIFT, CALL = %d, %r
        src, dst = (0, SHIFT) if SHIFT > 0 else (-SHIFT, 0)
        n = 4000
        if CALL == "sync":
            rc = lib.cuMemcpyDtoD_v2(c_uint64(d.value + dst),
                                     c_uint64(d.value + src), c_size_t(n))
        else:
            rc = lib.cuMemcpyDtoDAsync_v2(c_uint64(d.value + dst),
                                          c_uint64(d.value + src),
                                          c_size_t(n), None)
        print(rc)
        ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        ref[dst:dst + n] = ref[src:src + n].copy()
        got = np.frombuffer(device_bytes(), np.uint8)
        print(np.array_equal(got, ref), simulator.hazard_count())
        print(hex(d.value + dst), hex(d.value + src))
        ok(lib.cuMemFree_v2(d), "cuMemFree")
    """ % (shift, call), {"CUDAMEM_SIM_HAZARDS": "1"}, OVERLAP)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["0", "True 1"]
    dst, src = lines[2].split()
    name = "cuMemcpyDtoD" + ("Async" if call == "async" else "")
    assert ("cusim hazard: %s writes [%s, +4000) overlapping its source "
            "[%s, +4000)" % (name, dst, src)) in proc.stderr


def test_overlapping_2d_rows_are_a_memmove(run_py):
    # Rows shifted by one row and 3 bytes: each destination row overlaps
    # the next source row. NumPy's assignment from a copy is the memmove.
    proc = _run(run_py, """
        P, W, H = 256, 200, 50
        class M2D(ctypes.Structure):
            _fields_ = [(f, t) for f, t in [
                ("srcXInBytes", c_size_t), ("srcY", c_size_t),
                ("srcMemoryType", ctypes.c_int), ("srcHost", c_void_p),
                ("srcDevice", c_uint64), ("srcArray", c_void_p),
                ("srcPitch", c_size_t),
                ("dstXInBytes", c_size_t), ("dstY", c_size_t),
                ("dstMemoryType", ctypes.c_int), ("dstHost", c_void_p),
                ("dstDevice", c_uint64), ("dstArray", c_void_p),
                ("dstPitch", c_size_t),
                ("WidthInBytes", c_size_t), ("Height", c_size_t)]]
        p = M2D(srcXInBytes=3, srcY=1, srcMemoryType=2, srcDevice=d.value,
                srcPitch=P, dstMemoryType=2, dstDevice=d.value, dstPitch=P,
                WidthInBytes=W, Height=H)
        ok(lib.cuMemcpy2D_v2(byref(p)), "cuMemcpy2D")
        grid = ref[:P * (H + 1)].reshape(H + 1, P)
        grid[:H, :W] = grid[1:H + 1, 3:3 + W].copy()
        got = np.frombuffer(device_bytes(), np.uint8)
        print(np.array_equal(got, ref), simulator.hazard_count())
        ok(lib.cuMemFree_v2(d), "cuMemFree")
    """, {"CUDAMEM_SIM_HAZARDS": "1"}, OVERLAP)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["True", "1"]
    assert "cusim hazard: cuMemcpy2D writes" in proc.stderr


def test_overlapping_copy_without_the_checker_is_silent(run_py):
    proc = _run(run_py, """
        ok(lib.cuMemcpyDtoD_v2(c_uint64(d.value + 1), d, c_size_t(100)),
           "cuMemcpyDtoD")
        ref[1:101] = ref[0:100].copy()
        got = np.frombuffer(device_bytes(), np.uint8)
        print(np.array_equal(got, ref), simulator.hazard_count())
        ok(lib.cuMemFree_v2(d), "cuMemFree")
    """, {"CUDAMEM_SIM_HAZARDS": None}, OVERLAP)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["True", "0"]
    assert proc.stderr == ""


# -- Injected context-stack failures -----------------------------------------

def test_failed_pop_leaves_the_context_stack(run_py):
    # A failing cuCtxPopCurrent pops nothing: the context stays current
    # and a later pop takes it.
    proc = run_driver(run_py, """
        other = c_void_p()
        ok(lib.cuCtxCreate_v2(byref(other), 0, 0), "cuCtxCreate")
        simulator.inject("cuCtxPopCurrent", "CUDA_ERROR_INVALID_CONTEXT")
        popped = c_void_p()
        print(lib.cuCtxPopCurrent_v2(byref(popped)), popped.value is None)
        cur = c_void_p()
        ok(lib.cuCtxGetCurrent(byref(cur)), "cuCtxGetCurrent")
        print(cur.value == other.value)
        d = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(d), c_size_t(64)), "cuMemAlloc")
        ok(lib.cuMemFree_v2(d), "cuMemFree")
        ok(lib.cuCtxPopCurrent_v2(byref(popped)), "cuCtxPopCurrent")
        ok(lib.cuCtxGetCurrent(byref(cur)), "cuCtxGetCurrent")
        print(popped.value == other.value, cur.value == ctx0.value)
        ok(lib.cuCtxDestroy_v2(other), "cuCtxDestroy")
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["201", "True", "True", "True", "True"]


# -- Sticky errors outlive a reset -------------------------------------------

def test_sticky_error_survives_a_primary_context_reset(run_py):
    # "Any further CUDA work will return the same error. To continue using
    # CUDA, the process must be terminated and relaunched." Device 1's
    # queued copy reads memory device 0's reset freed: an illegal address
    # in device 1's context. Resetting device 1 does not clear it, nor does
    # a new context of device 1; device 0 stays usable; the simulator's
    # own reset (a new process, for this) forgets it.
    proc = run_driver(run_py, prelude=GATE, body="""
        N = 4096
        mem = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(mem), c_size_t(N)), "cuMemAlloc")
        dev0, dev1 = ctypes.c_int(), ctypes.c_int()
        ok(lib.cuDeviceGet(byref(dev0), 0), "cuDeviceGet")
        ok(lib.cuDeviceGet(byref(dev1), 1), "cuDeviceGet")
        ctx1 = primary(1)
        ok(lib.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent")
        host = c_void_p()
        ok(lib.cuMemHostAlloc(byref(host), c_size_t(N), 0), "cuMemHostAlloc")
        s = stream()
        ok(lib.cuMemcpyDtoHAsync_v2(host, mem, c_size_t(N), s),
           "cuMemcpyDtoHAsync")
        ok(lib.cuDevicePrimaryCtxReset_v2(dev0), "cuDevicePrimaryCtxReset")
        gate.set()
        more = c_uint64()

        def alloc():
            rc = lib.cuMemAlloc_v2(byref(more), c_size_t(N))
            if rc == 0:
                ok(lib.cuMemFree_v2(more), "cuMemFree")
            return rc

        print(lib.cuStreamSynchronize(s), alloc())
        ok(lib.cuDevicePrimaryCtxReset_v2(dev1), "cuDevicePrimaryCtxReset")
        ctx1 = primary(1)
        ok(lib.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent")
        print(alloc())
        other = c_void_p()
        ok(lib.cuCtxCreate_v2(byref(other), 0, dev1), "cuCtxCreate")
        print(alloc())
        ok(lib.cuCtxDestroy_v2(other), "cuCtxDestroy")
        ok(lib.cuCtxSetCurrent(primary(0)), "cuCtxSetCurrent")
        print(alloc())
        simulator.reset()
        ok(lib.cuDevicePrimaryCtxReset_v2(dev1), "cuDevicePrimaryCtxReset")
        ok(lib.cuCtxSetCurrent(primary(1)), "cuCtxSetCurrent")
        print(alloc())
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDAMEM_SIM_HAZARDS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["700", "700", "700", "700", "0", "0"]
