"""The simulated driver against the CUDA driver documentation ("API
synchronization behavior", cuMemFree, cuMemFreeHost, cuMemHostUnregister,
cuIpcCloseMemHandle), driven directly through ctypes as a client other than
cudamem would drive it. Each case runs in a fresh process: before these
rules held, some of them killed the process."""
import textwrap

import pytest

pytestmark = pytest.mark.simulator

# A client of the bare driver: the simulator, initialized, with device 0's
# primary context current. `ok` fails the script with the call's name.
PROLOGUE = """
import ctypes, os, sys
from cudamem import simulator

lib = ctypes.CDLL(simulator.library_path())
c_void_p, c_size_t, c_uint64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64
byref = ctypes.byref


def ok(rc, what):
    if rc != 0:
        raise SystemExit("%s returned %d" % (what, rc))


def primary(ordinal):
    dev = ctypes.c_int()
    ok(lib.cuDeviceGet(byref(dev), ordinal), "cuDeviceGet")
    ctx = c_void_p()
    ok(lib.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    return ctx


ok(lib.cuInit(0), "cuInit")
ctx0 = primary(0)
ok(lib.cuCtxSetCurrent(ctx0), "cuCtxSetCurrent")
"""


def run_driver(run_py, body, env=None, timeout=120):
    code = PROLOGUE + textwrap.dedent(body)
    return run_py(code, env=env, timeout=timeout)


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
