"""Scripts that drive the simulated driver directly through ctypes, as a
client other than cudamem (cuda.core, numba-cuda) would, each run in a
fresh process: PROLOGUE sets the client up, GATE holds a stream's work
until the script opens it, ENTRY_TYPES has the structures and helpers the
newer entry points take."""
import textwrap

# A client of the bare driver: the simulator, initialized, with device 0's
# primary context current. `ok` fails the script with the call's name.
PROLOGUE = """
import ctypes, os, sys
from cudamem import simulator

lib = ctypes.CDLL(simulator.library_path())
c_void_p, c_size_t = ctypes.c_void_p, ctypes.c_size_t
c_uint64 = ctypes.c_uint64
byref = ctypes.byref


def ok(rc, what):
    if rc != 0:
        raise SystemExit("%s returned %d" % (what, rc))


def primary(ordinal):
    dev = ctypes.c_int()
    ok(lib.cuDeviceGet(byref(dev), ordinal), "cuDeviceGet")
    ctx = c_void_p()
    ok(lib.cuDevicePrimaryCtxRetain(byref(ctx), dev),
       "cuDevicePrimaryCtxRetain")
    return ctx


ok(lib.cuInit(0), "cuInit")
ctx0 = primary(0)
ok(lib.cuCtxSetCurrent(ctx0), "cuCtxSetCurrent")
"""


def driver_script(body, prelude=""):
    return PROLOGUE + prelude + textwrap.dedent(body)


def run_driver(run_py, body, env=None, prelude="", timeout=120):
    return run_py(driver_script(body, prelude), env=env, timeout=timeout)


# A host function that holds its stream until `gate` is set: the work
# queued behind it is certainly pending when the free is called. The timer
# opens the gate; a free that waits returns after it, one that does not
# unmaps memory that the stream still writes.
GATE = """
import threading

gate = threading.Event()
HOSTFN = ctypes.CFUNCTYPE(None, c_void_p)
hold = HOSTFN(lambda user: gate.wait())


def stream():
    s = c_void_p()
    ok(lib.cuStreamCreate(byref(s), 0), "cuStreamCreate")
    ok(lib.cuLaunchHostFunc(s, hold, None), "cuLaunchHostFunc")
    return s


def open_gate_soon():
    threading.Timer(0.2, gate.set).start()


def pending(s):
    return lib.cuStreamQuery(s) == 600  # CUDA_ERROR_NOT_READY
"""

ENTRY_TYPES = """
class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Window(ctypes.Structure):
    _fields_ = [("base_ptr", c_void_p), ("num_bytes", c_size_t),
                ("hitRatio", ctypes.c_float), ("hitProp", ctypes.c_int),
                ("missProp", ctypes.c_int)]


class AttrValue(ctypes.Union):
    _fields_ = [("b", ctypes.c_ubyte * 64), ("window", Window),
                ("i", ctypes.c_int)]


class CopyAttrs(ctypes.Structure):
    _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", Location),
                ("dstLocHint", Location), ("flags", ctypes.c_uint)]


def stream(flags=0):
    s = c_void_p()
    ok(lib.cuStreamCreate(byref(s), flags), "cuStreamCreate")
    return s


def dalloc(n):
    p = c_uint64()
    ok(lib.cuMemAlloc_v2(byref(p), c_size_t(n)), "cuMemAlloc")
    return p.value


def show(*values):
    print(" ".join(str(v) for v in values))
"""


def run_entries(run_py, body, env=None):
    proc = run_driver(run_py, body, env=env, prelude=ENTRY_TYPES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()
