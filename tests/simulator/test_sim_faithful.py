"""The simulated driver against the CUDA driver documentation ("API
synchronization behavior", cuMemFree, cuMemFreeHost, cuMemHostUnregister,
cuIpcCloseMemHandle), driven directly through ctypes as a client other than
cudamem would drive it. Each case runs in a fresh process: before these
rules held, some of them killed the process."""
import os
import textwrap

import pytest

from tests.helpers.simdriver import GATE, driver_script, run_driver

pytestmark = pytest.mark.simulator

# -- Synchronous memsets into host-visible memory --------------------------

# "The synchronous memset functions are asynchronous with respect to the
# host except when the target is pinned host memory or a Unified Memory
# region, in which case they are fully synchronous."
MEMSETS = """
N = 4096
TRIES = 5
SETS = [
    # name, element size, 2D
    ("cuMemsetD8_v2", 1, False), ("cuMemsetD16_v2", 2, False),
    ("cuMemsetD32_v2", 4, False), ("cuMemsetD2D8_v2", 1, True),
    ("cuMemsetD2D16_v2", 2, True), ("cuMemsetD2D32_v2", 4, True),
]
VALUE = {1: 0xA5, 2: 0xA5B6, 4: 0xA5B6C7D8}


def expect(elsize, n):
    return VALUE[elsize].to_bytes(elsize, "little") * (n // elsize)


def check(kind, host, dptr):
    for name, elsize, two_d in SETS:
        for attempt in range(TRIES):
            ctypes.memset(host, 0, N)
            fn = getattr(lib, name)
            if two_d:
                # 8 rows of N // 8 bytes, pitch N // 8.
                rc = fn(c_uint64(dptr), c_size_t(N // 8),
                        ctypes.c_uint(VALUE[elsize]),
                        c_size_t(N // 8 // elsize), c_size_t(8))
            else:
                rc = fn(c_uint64(dptr), ctypes.c_uint(VALUE[elsize]),
                        c_size_t(N // elsize))
            ok(rc, name)
            got = ctypes.string_at(host, N)  # right after the call
            if got != expect(elsize, N):
                raise SystemExit("%s into %s memory had not landed when it "
                                 "returned (try %d)" % (name, kind, attempt))

"""


@pytest.mark.parametrize("kind, setup, teardown", [
    ("page-locked", """
        p = c_void_p()
        ok(lib.cuMemHostAlloc(byref(p), c_size_t(N), 0), "cuMemHostAlloc")
        host = dptr = p.value
    """, """ok(lib.cuMemFreeHost(c_void_p(host)), "cuMemFreeHost")"""),
    ("mapped", """
        p = c_void_p()
        ok(lib.cuMemHostAlloc(byref(p), c_size_t(N), 0x2), "cuMemHostAlloc")
        host = p.value
        d = c_uint64()
        ok(lib.cuMemHostGetDevicePointer_v2(byref(d), p, 0),
           "cuMemHostGetDevicePointer")
        dptr = d.value
    """, """ok(lib.cuMemFreeHost(c_void_p(host)), "cuMemFreeHost")"""),
    ("registered", """
        import mmap
        buf = mmap.mmap(-1, N)
        host = dptr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        ok(lib.cuMemHostRegister_v2(c_void_p(host), c_size_t(N), 0),
           "cuMemHostRegister")
    """, """ok(lib.cuMemHostUnregister(c_void_p(host)), "cuMemHostUnregister")
    """),
    ("managed", """
        d = c_uint64()
        ok(lib.cuMemAllocManaged(byref(d), c_size_t(N), 1),
           "cuMemAllocManaged")
        host = dptr = d.value
    """, """ok(lib.cuMemFree_v2(c_uint64(host)), "cuMemFree")"""),
], ids=["page-locked", "mapped", "registered", "managed"])
def test_synchronous_memset_into_host_visible_memory_is_synchronous(
        run_py, kind, setup, teardown):
    proc = run_driver(run_py, MEMSETS + textwrap.dedent(setup) + """
check(%r, host, dptr)
""" % kind + textwrap.dedent(teardown) + """
print("done")
""", env={"CUDAMEM_SIM_DELAY_US": "2000"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["done"]


# -- Frees wait for queued work in any context -----------------------------

def test_free_host_waits_for_a_queued_copy_into_it(run_py):
    # cuMemcpyDtoHAsync into cuMemHostAlloc memory, then cuMemFreeHost at
    # once: a free that did not wait killed the process (SIGSEGV).
    proc = run_driver(run_py, prelude=GATE, body="""
        N = 1 << 16
        d = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(d), c_size_t(N)), "cuMemAlloc")
        ok(lib.cuMemsetD8_v2(d, ctypes.c_ubyte(7), c_size_t(N)), "cuMemsetD8")
        h = c_void_p()
        ok(lib.cuMemHostAlloc(byref(h), c_size_t(N), 0), "cuMemHostAlloc")
        s = stream()
        ok(lib.cuMemcpyDtoHAsync_v2(h, d, c_size_t(N), s), "cuMemcpyDtoHAsync")
        assert pending(s)
        open_gate_soon()
        ok(lib.cuMemFreeHost(h), "cuMemFreeHost")
        # Freed only once the copy into it was done.
        ok(lib.cuStreamQuery(s), "cuStreamQuery")
        ok(lib.cuStreamDestroy_v2(s), "cuStreamDestroy")
        ok(lib.cuMemFree_v2(d), "cuMemFree")
        print(simulator.live()["host_allocations"])
    """, env={"CUDAMEM_SIM_DELAY_US": "20000"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["0"]


@pytest.mark.parametrize("handle", ["None", "c_void_p(1)"],
                         ids=["NULL", "CU_STREAM_LEGACY"])
def test_the_legacy_stream_waits_for_blocking_streams_before_its_first_use(
        run_py, handle):
    # "The legacy default stream ... synchronizes with all other blocking
    # streams": a query and a synchronize of it wait for a busy blocking
    # stream even when nothing was ever queued on the legacy stream itself
    # (then made, it answered at once).
    proc = run_driver(run_py, prelude=GATE, body="""
        legacy = %s
        s = stream()
        print(lib.cuStreamQuery(legacy))
        open_gate_soon()
        ok(lib.cuStreamSynchronize(legacy), "cuStreamSynchronize")
        print(pending(s))
        ok(lib.cuStreamDestroy_v2(s), "cuStreamDestroy")
    """ % handle)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["600", "False"]


def test_unregister_waits_for_a_queued_copy_into_it(run_py):
    proc = run_driver(run_py, prelude=GATE, body="""
        import mmap
        N = 1 << 16
        d = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(d), c_size_t(N)), "cuMemAlloc")
        ok(lib.cuMemsetD8_v2(d, ctypes.c_ubyte(9), c_size_t(N)), "cuMemsetD8")
        buf = mmap.mmap(-1, N)
        host = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        ok(lib.cuMemHostRegister_v2(c_void_p(host), c_size_t(N), 0),
           "cuMemHostRegister")
        s = stream()
        ok(lib.cuMemcpyDtoHAsync_v2(c_void_p(host), d, c_size_t(N), s),
           "cuMemcpyDtoHAsync")
        assert pending(s)
        open_gate_soon()
        ok(lib.cuMemHostUnregister(c_void_p(host)), "cuMemHostUnregister")
        ok(lib.cuStreamQuery(s), "cuStreamQuery")
        # The pages stay the caller's: the copy landed in them.
        assert buf[:] == bytes([9]) * N
        ok(lib.cuStreamDestroy_v2(s), "cuStreamDestroy")
        ok(lib.cuMemFree_v2(d), "cuMemFree")
        print("done")
    """, env={"CUDAMEM_SIM_DELAY_US": "20000"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["done"]


def test_free_waits_for_another_contexts_copy(run_py):
    # A copy queued in device 1's context reads device 0's memory; the free
    # in device 0's context orders after it.
    proc = run_driver(run_py, prelude=GATE, body="""
        N = 1 << 16
        src = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(src), c_size_t(N)), "cuMemAlloc")
        ok(lib.cuMemsetD8_v2(src, ctypes.c_ubyte(0x5A), c_size_t(N)),
           "cuMemsetD8")
        ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        ctx1 = primary(1)
        ok(lib.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent")
        dst = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(dst), c_size_t(N)), "cuMemAlloc")
        s = stream()
        ok(lib.cuMemcpyDtoDAsync_v2(dst, src, c_size_t(N), s),
           "cuMemcpyDtoDAsync")
        assert pending(s)
        ok(lib.cuCtxSetCurrent(ctx0), "cuCtxSetCurrent")
        open_gate_soon()
        ok(lib.cuMemFree_v2(src), "cuMemFree")
        ok(lib.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent")
        ok(lib.cuStreamSynchronize(s), "cuStreamSynchronize")
        out = ctypes.create_string_buffer(N)
        ok(lib.cuMemcpyDtoH_v2(out, dst, c_size_t(N)), "cuMemcpyDtoH")
        assert out.raw == bytes([0x5A]) * N
        ok(lib.cuStreamDestroy_v2(s), "cuStreamDestroy")
        ok(lib.cuMemFree_v2(dst), "cuMemFree")
        print("done")
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDAMEM_SIM_DELAY_US": "20000"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["done"]


def test_ipc_close_waits_for_another_contexts_copy(run_py):
    # numba-cuda's staged IPC test: the importer copies from the mapping on
    # another device, then closes the mapping in the context that opened it.
    importer = driver_script(prelude=GATE, body="""
        N = int(sys.argv[2])

        class Handle(ctypes.Structure):
            _fields_ = [("reserved", ctypes.c_char * 64)]

        mapped = c_uint64()
        handle = Handle.from_buffer_copy(bytes.fromhex(sys.argv[1]))
        ok(lib.cuIpcOpenMemHandle_v2(byref(mapped), handle, 1),
           "cuIpcOpenMemHandle")
        ctx1 = primary(1)
        ok(lib.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent")
        dst = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(dst), c_size_t(N)), "cuMemAlloc")
        s = stream()
        ok(lib.cuMemcpyDtoDAsync_v2(dst, mapped, c_size_t(N), s),
           "cuMemcpyDtoDAsync")
        assert pending(s)
        ok(lib.cuCtxSetCurrent(ctx0), "cuCtxSetCurrent")
        open_gate_soon()
        ok(lib.cuIpcCloseMemHandle(mapped), "cuIpcCloseMemHandle")
        ok(lib.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent")
        ok(lib.cuStreamQuery(s), "cuStreamQuery")
        out = ctypes.create_string_buffer(N)
        ok(lib.cuMemcpyDtoH_v2(out, dst, c_size_t(N)), "cuMemcpyDtoH")
        assert out.raw == bytes([0x3C]) * N
        ok(lib.cuStreamDestroy_v2(s), "cuStreamDestroy")
        ok(lib.cuMemFree_v2(dst), "cuMemFree")
        print("importer done")
    """)
    proc = run_driver(run_py, """
        import subprocess
        N = 1 << 16
        src = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(src), c_size_t(N)), "cuMemAlloc")
        ok(lib.cuMemsetD8_v2(src, ctypes.c_ubyte(0x3C), c_size_t(N)),
           "cuMemsetD8")
        ok(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        handle = ctypes.create_string_buffer(64)
        ok(lib.cuIpcGetMemHandle(handle, src), "cuIpcGetMemHandle")
        child = subprocess.run(
            [sys.executable, "-c", os.environ["IMPORTER"], handle.raw.hex(),
             str(N)], capture_output=True, text=True, timeout=60)
        sys.stdout.write(child.stdout)
        sys.stdout.write("importer rc %d\\n" % child.returncode)
        sys.stderr.write(child.stderr)
        ok(lib.cuMemFree_v2(src), "cuMemFree")
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDAMEM_SIM_DELAY_US": "20000",
              "IMPORTER": importer})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["importer done", "importer rc 0"], \
        proc.stderr


# -- Work on memory already gone -------------------------------------------

@pytest.mark.parametrize("op", ["memset", "copy"])
def test_queued_op_on_memory_a_reset_freed_is_an_illegal_address(run_py, op):
    # Resetting device 0's primary context frees its memory at once, as the
    # driver does; device 1's stream still has work queued on it. That
    # work fails when it runs, and its context keeps the error.
    proc = run_driver(run_py, prelude=GATE, body="""
        N = 4096
        mem = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(mem), c_size_t(N)), "cuMemAlloc")
        ctx1 = primary(1)
        ok(lib.cuCtxSetCurrent(ctx1), "cuCtxSetCurrent")
        host = c_void_p()
        ok(lib.cuMemHostAlloc(byref(host), c_size_t(N), 0), "cuMemHostAlloc")
        s = stream()
        if sys.argv[1] == "memset":
            ok(lib.cuMemsetD8Async(mem, ctypes.c_ubyte(1), c_size_t(N), s),
               "cuMemsetD8Async")
        else:
            ok(lib.cuMemcpyDtoHAsync_v2(host, mem, c_size_t(N), s),
               "cuMemcpyDtoHAsync")
        assert pending(s)
        dev0 = ctypes.c_int()
        ok(lib.cuDeviceGet(byref(dev0), 0), "cuDeviceGet")
        ok(lib.cuDevicePrimaryCtxReset_v2(dev0), "cuDevicePrimaryCtxReset")
        gate.set()
        print(lib.cuStreamSynchronize(s))
        more = c_uint64()
        print(lib.cuMemAlloc_v2(byref(more), c_size_t(N)))  # sticky
        print("0x%x" % mem.value, "0x%x" % s.value)
    """.replace("sys.argv[1]", repr(op)), env={
        "CUDAMEM_SIM_DEVICES": "2", "CUDAMEM_SIM_HAZARDS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sync_rc, alloc_rc, mem, stream = proc.stdout.split()
    assert int(sync_rc) == 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    assert int(alloc_rc) == 700
    entry, access = {"memset": ("cuMemsetD8Async", "writes"),
                     "copy": ("cuMemcpyDtoHAsync", "reads")}[op]
    assert ("cusim hazard: %s on stream %s %s [%s, +4096), memory freed "
            "before it ran: CUDA_ERROR_ILLEGAL_ADDRESS"
            % (entry, stream, access, mem)) in proc.stderr


@pytest.mark.parametrize("op", ["dtoh", "htod", "memset", "sync dtoh",
                                "sync dtoh here"])
def test_registered_pages_unmapped_under_queued_work(run_py, op):
    # The owner unmaps registered pages before unregistering them while
    # work on them is queued. A GPU goes on using the pages the driver
    # pinned; the simulator cannot, so the op stops where it faults, fails
    # with CUDA_ERROR_ILLEGAL_ADDRESS (sticky for its context) and the
    # hazard checker names it. The process lives on. "here": the legacy
    # stream is idle, so the copy runs on the calling thread, whose signal
    # mask is as it was before the fault.
    proc = run_driver(run_py, prelude=GATE, body="""
        import mmap
        N = 1 << 16
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = c_void_p
        libc.mmap.argtypes = [c_void_p, c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [c_void_p, c_size_t]
        host = libc.mmap(None, N, mmap.PROT_READ | mmap.PROT_WRITE,
                         mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        ok(lib.cuMemHostRegister_v2(c_void_p(host), c_size_t(N), 0),
           "cuMemHostRegister")
        d = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(d), c_size_t(N)), "cuMemAlloc")
        s = stream()
        op = sys.argv[1]
        if op == "dtoh":
            ok(lib.cuMemcpyDtoHAsync_v2(c_void_p(host), d, c_size_t(N), s),
               "cuMemcpyDtoHAsync")
        elif op == "htod":
            ok(lib.cuMemcpyHtoDAsync_v2(d, c_void_p(host), c_size_t(N), s),
               "cuMemcpyHtoDAsync")
        elif op == "memset":
            ok(lib.cuMemsetD8Async(c_uint64(host), ctypes.c_ubyte(7),
                                   c_size_t(N), s), "cuMemsetD8Async")
        assert libc.munmap(host, N) == 0
        gate.set()
        if op.startswith("sync dtoh"):
            # The legacy stream runs it; the call waits and answers.
            if op == "sync dtoh here":
                ok(lib.cuStreamSynchronize(s), "cuStreamSynchronize")
            s = c_void_p(0)
            print(lib.cuMemcpyDtoH_v2(c_void_p(host), d, c_size_t(N)))
            import signal
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            assert signal.SIGSEGV not in blocked, blocked
        else:
            print(lib.cuStreamSynchronize(s))
        print(lib.cuMemAlloc_v2(byref(c_uint64()), c_size_t(N)))  # sticky
        print("0x%x" % host, s.value or 0)
    """.replace("sys.argv[1]", repr(op)), env={"CUDAMEM_SIM_HAZARDS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sync_rc, alloc_rc, host, stream = proc.stdout.split()
    stream = ("legacy default stream of context 0x"
              if op.startswith("sync dtoh") else "stream 0x%x" % int(stream))
    assert int(sync_rc) == 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    assert int(alloc_rc) == 700
    entry, access = {"dtoh": ("cuMemcpyDtoHAsync", "writes"),
                     "htod": ("cuMemcpyHtoDAsync", "reads"),
                     "memset": ("cuMemsetD8Async", "writes"),
                     "sync dtoh": ("cuMemcpyDtoH", "writes"),
                     "sync dtoh here": ("cuMemcpyDtoH", "writes")}[op]
    assert ("cusim hazard: %s on %s" % (entry, stream)) in proc.stderr
    assert ("%s [%s, +65536), registered "
            "pages unmapped by their owner: CUDA_ERROR_ILLEGAL_ADDRESS"
            % (access, host)) in proc.stderr
    assert "fatal signal" not in proc.stderr


def test_crash_on_a_stream_worker_is_reported(run_py):
    # A host function that dereferences a wild pointer crashes on the
    # stream's worker thread, which says what it was running before the
    # process dies of the signal.
    proc = run_driver(run_py, prelude=GATE, body="""
        s = stream()
        crash = HOSTFN(lambda user: ctypes.string_at(16, 1))
        ok(lib.cuLaunchHostFunc(s, crash, None), "cuLaunchHostFunc")
        print("0x%x" % s.value, flush=True)
        gate.set()
        lib.cuStreamSynchronize(s)
        print("survived")
    """, env={
        # Under make test-asan, ASan would take the signal and report it as
        # its own failure: the simulator's report must pass it to the
        # default action.
        "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":handle_segv=0"})
    assert proc.returncode == -11, proc.stdout + proc.stderr  # SIGSEGV
    stream = proc.stdout.split()[0]
    assert ("cusim: fatal signal 11 (fault address 0x10) on the worker of "
            "stream %s while running cuLaunchHostFunc (operation #2)\n"
            % stream) in proc.stderr


def test_crash_in_a_synchronous_copy_is_reported_on_its_caller(run_py):
    # A synchronous copy on an idle stream runs on the calling thread: a
    # wild host pointer crashes there, and the report names that thread,
    # the stream and the copy.
    proc = run_driver(run_py, body="""
        d = c_uint64()
        ok(lib.cuMemAlloc_v2(byref(d), c_size_t(16)), "cuMemAlloc")
        ctx = c_void_p()
        ok(lib.cuCtxGetCurrent(byref(ctx)), "cuCtxGetCurrent")
        print("0x%x 0x%x" % (ctx.value, d.value), flush=True)
        lib.cuMemcpyHtoD_v2(d, c_void_p(16), c_size_t(16))
        print("survived")
    """, env={
        "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":handle_segv=0"})
    assert proc.returncode == -11, proc.stdout + proc.stderr  # SIGSEGV
    ctx, dptr = proc.stdout.split()[:2]
    assert ("cusim: fatal signal 11 (fault address 0x10) on the calling "
            "thread of the legacy default stream of context %s while "
            "running cuMemcpyHtoD (operation #1), writes [%s, +16), reads "
            "[0x10, +16)\n" % (ctx, dptr)) in proc.stderr, proc.stderr
