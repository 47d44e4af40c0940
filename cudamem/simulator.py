"""Control of cudamem's simulated CUDA driver.

The simulator is a shared library with the ABI of ``libcuda.so.1``; cudamem
loads it instead of the real driver when ``CUDAMEM_SIMULATOR=1`` (or when
``CUDAMEM_DRIVER`` names it). This module reaches its control API
(``cusim_*``) through ctypes: fault injection, live counts, per entry point
call counters, memory size, the stream delay, the hazard checker and
strict pitches.

Environment read by the simulator at ``cuInit``: ``CUDAMEM_SIM_DEVICES``
(default 1), ``CUDAMEM_SIM_MEMORY`` (bytes per device, default 16 GiB of
lazily backed address space), ``CUDAMEM_SIM_DELAY_US``,
``CUDAMEM_SIM_HAZARDS=1``, ``CUDAMEM_SIM_STRICT_PITCH=1``,
``CUDAMEM_SIM_IPC_REOPEN=error``, ``CUDAMEM_SIM_DRIVER_VERSION``,
``CUDAMEM_SIM_NO_PEER=1``,
``CUDAMEM_SIM_ATTRS`` (``<attribute number>=<value>,...``, reported by
every device instead of its own) and ``CUDA_VISIBLE_DEVICES``.

The library's SONAME is ``libcuda.so.1``: once cudamem has loaded it, a
library in the same process that loads the driver by that name gets the
simulator. ``libcuda_dir()`` gives a directory to put on
``LD_LIBRARY_PATH`` so that other programs load it too, and
``python -m cudamem.simulator run -- PROGRAM ARGS...`` runs any program on
the simulator (``run --help`` lists its options).
"""
import contextlib
import ctypes
import os
import sys

from cudamem import _cudamem

__all__ = [
    "is_active", "library_path", "libcuda_dir", "stats", "live", "inject",
    "clear_faults", "set_memory", "set_delay_us", "get_delay_us", "delay",
    "probe_gil", "set_hazards",
    "hazard_count", "last_hazard", "set_strict_pitch", "get_strict_pitch",
    "reset", "error_code",
]

_LIVE_FIELDS = (
    "device_allocations", "device_bytes", "host_allocations", "host_bytes",
    "registrations", "registered_bytes", "managed_allocations",
    "managed_bytes", "streams", "events", "ipc_open", "contexts",
)


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_ulonglong) for name in _LIVE_FIELDS]


_lib = None
_codes = None


def library_path():
    """library_path() -> str

    The simulator library cudamem loads (or would load) in this process."""
    explicit = os.environ.get("CUDAMEM_DRIVER")
    if explicit:
        return explicit
    return _cudamem._simulator_path


# Where libcuda_dir() makes its link: beside the simulator when the package
# directory is writable, else in the user's cache directory.
_LINK_DIR_NAME = "sim-libcuda"


def _link_bases(target):
    import hashlib  # the command line and libcuda_dir() only
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    tag = hashlib.sha1(target.encode()).hexdigest()[:12]
    return [os.path.join(os.path.dirname(target), _LINK_DIR_NAME),
            os.path.join(cache, "cudamem", "%s-%s" % (_LINK_DIR_NAME, tag))]


def _make_link(directory, target):
    link = os.path.join(directory, "libcuda.so.1")
    if os.path.realpath(link) == target:
        return
    os.makedirs(directory, exist_ok=True)
    # Made aside and renamed: processes racing here all see a whole link.
    tmp = os.path.join(directory, ".libcuda.so.1.%d" % os.getpid())
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def libcuda_dir():
    """libcuda_dir() -> str

    A directory holding ``libcuda.so.1``, a link to the simulator. Put it
    first on ``LD_LIBRARY_PATH`` and a program that loads the CUDA driver
    by name (numba-cuda, cuda.bindings, CuPy, ...) runs on the simulator.
    Made on demand beside the simulator, or in the user's cache directory
    (``$XDG_CACHE_HOME``, else ``~/.cache``) when that is not writable."""
    target = os.path.realpath(library_path())
    errors = []
    for directory in _link_bases(target):
        try:
            _make_link(directory, target)
        except OSError as exc:
            errors.append("%s: %s" % (directory, exc))
            continue
        return directory
    raise RuntimeError("cannot make a libcuda.so.1 link to %s in any of: %s"
                       % (target, "; ".join(errors)))


def _library():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(library_path())
        if not hasattr(lib, "cusim_is_simulator"):
            raise RuntimeError("%s is not cudamem's simulated driver"
                               % library_path())
        lib.cusim_inject.argtypes = [ctypes.c_char_p, ctypes.c_int,
                                     ctypes.c_uint, ctypes.c_uint]
        lib.cusim_get_stats.argtypes = [ctypes.POINTER(_Stats)]
        lib.cusim_entry_stats.argtypes = [
            ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong),
            ctypes.POINTER(ctypes.c_ulonglong)]
        lib.cusim_entry_stats.restype = ctypes.c_char_p
        lib.cusim_entry_probed.argtypes = [ctypes.c_int]
        lib.cusim_entry_probed.restype = ctypes.c_ulonglong
        lib.cusim_set_probe.argtypes = [ctypes.c_void_p]
        lib.cusim_set_memory.argtypes = [ctypes.c_int, ctypes.c_ulonglong]
        lib.cusim_set_delay_us.argtypes = [ctypes.c_uint]
        lib.cusim_get_delay_us.restype = ctypes.c_uint
        lib.cusim_set_hazards.argtypes = [ctypes.c_int]
        lib.cusim_set_strict_pitch.argtypes = [ctypes.c_int]
        lib.cusim_get_strict_pitch.restype = ctypes.c_int
        lib.cusim_hazard_count.restype = ctypes.c_ulonglong
        lib.cusim_last_hazard.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def is_active():
    """is_active() -> bool

    True when the driver cudamem uses is the simulator. Loads the driver;
    never raises."""
    try:
        return bool(_cudamem.driver_info()["simulator"])
    except Exception:
        return False


def error_code(code):
    """error_code(code) -> int

    A CUresult from its number or its name (``"CUDA_ERROR_OUT_OF_MEMORY"``).
    """
    global _codes
    if isinstance(code, int):
        return code
    if _codes is None:
        _codes = {name: value for value, name in _cudamem._error_names()}
    try:
        return _codes[code]
    except KeyError:
        raise ValueError("unknown CUDA error name %r" % (code,)) from None


def _observed():
    """The control library, for a question about what cudamem did: refused
    when cudamem's driver is another one, whose work this copy of the
    simulator never saw (it would answer zeros)."""
    global _serves_cudamem
    if not _serves_cudamem:
        if not is_active():
            try:
                where = "the driver %r" % _cudamem.driver_info()["path"]
            except Exception as e:
                where = "no driver (%s)" % e
            raise RuntimeError(
                "cudamem runs on %s, not on the simulator: the simulator's "
                "counts would describe nothing it did" % where)
        _serves_cudamem = True
    return _library()


_serves_cudamem = False


def live():
    """live() -> dict[str, int]

    Live objects in the simulator: allocations and bytes per kind, streams,
    events, open IPC mappings and active contexts. RuntimeError when
    cudamem's driver is not the simulator."""
    out = _Stats()
    _observed().cusim_get_stats(ctypes.byref(out))
    return {name: getattr(out, name) for name in _LIVE_FIELDS}


def stats():
    """stats() -> dict

    ``live()`` plus ``calls``: for every entry point the simulator has,
    ``{"calls": n, "bytes": b, "gil": g}`` counted over all threads since
    the last ``reset()``; ``g`` counts the calls made holding the GIL
    inside ``probe_gil()``."""
    lib = _observed()
    result = live()
    calls = {}
    n, nbytes = ctypes.c_ulonglong(), ctypes.c_ulonglong()
    for i in range(lib.cusim_entry_count()):
        name = lib.cusim_entry_stats(i, ctypes.byref(n), ctypes.byref(nbytes))
        calls[name.decode()] = {"calls": n.value, "bytes": nbytes.value,
                                "gil": lib.cusim_entry_probed(i)}
    result["calls"] = calls
    return result


def inject(entry_point, error_code_, after=0, count=1):
    """inject(entry_point, error_code, after=0, count=1)

    Make the next ``count`` calls of ``entry_point`` made on this thread,
    after ``after`` further successful ones, return ``error_code`` (a number
    or a ``CUDA_ERROR_*`` name). A plain name such as ``"cuMemAlloc"`` covers
    every versioned variant of it."""
    code = error_code(error_code_)
    if after < 0 or count < 1:
        raise ValueError("need after >= 0 and count >= 1, got after=%r "
                         "count=%r" % (after, count))
    if _library().cusim_inject(entry_point.encode(), code, after, count):
        raise ValueError("the simulator has no entry point %r"
                         % (entry_point,))


def clear_faults():
    """clear_faults()

    Forget every fault injected on this thread."""
    _library().cusim_clear_faults()


def set_memory(device, nbytes):
    """set_memory(device, nbytes)

    Set a simulated device's memory size; only while nothing is allocated
    on it."""
    rc = _library().cusim_set_memory(device, nbytes)
    if rc:
        raise ValueError("cannot set the memory of simulated device %r to %r "
                         "bytes (CUresult %d): it must exist and have "
                         "nothing allocated" % (device, nbytes, rc))


def set_delay_us(us):
    """set_delay_us(us)

    Delay every stream operation by ``us`` microseconds before it runs."""
    _library().cusim_set_delay_us(us)


def get_delay_us():
    """get_delay_us() -> int"""
    return _library().cusim_get_delay_us()


@contextlib.contextmanager
def delay(us):
    """delay(us): a context manager that sets the stream delay and restores
    the previous one."""
    before = get_delay_us()
    set_delay_us(us)
    try:
        yield
    finally:
        set_delay_us(before)


_probing = False


@contextlib.contextmanager
def probe_gil():
    """probe_gil(): a context manager inside which every entry point asks
    whether its calling thread holds the GIL (CPython's
    ``PyGILState_Check``), counting those calls in ``stats()``'s ``gil``.
    A call that can block should be made without it, so that other Python
    threads run meanwhile. One at a time: RuntimeError when nested."""
    global _probing
    lib = _observed()
    if _probing:
        raise RuntimeError("probe_gil() is already active")
    _probing = True
    lib.cusim_set_probe(ctypes.cast(ctypes.pythonapi.PyGILState_Check,
                                    ctypes.c_void_p))
    try:
        yield
    finally:
        lib.cusim_set_probe(None)
        _probing = False


def set_hazards(on):
    """set_hazards(on)

    Switch the stream-order hazard checker on or off."""
    _library().cusim_set_hazards(1 if on else 0)


def set_strict_pitch(on):
    """set_strict_pitch(on)

    Switch strict pitches on or off (also ``CUDAMEM_SIM_STRICT_PITCH=1``):
    ``cuMemcpy2D`` and ``cuMemcpy2DAsync`` between device memory then fail
    with ``CUDA_ERROR_INVALID_VALUE`` unless both pitches are multiples of
    the device's ``CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT``, as
    ``cuda.h`` lets a driver refuse pitches that ``cuMemAllocPitch`` did
    not compute."""
    _library().cusim_set_strict_pitch(1 if on else 0)


def get_strict_pitch():
    """get_strict_pitch() -> bool"""
    return bool(_library().cusim_get_strict_pitch())


def hazard_count():
    """hazard_count() -> int

    Hazards reported since the last ``reset()``."""
    return _observed().cusim_hazard_count()


def last_hazard():
    """last_hazard() -> str | None"""
    text = _observed().cusim_last_hazard()
    return text.decode() if text else None


def reset():
    """reset()

    Forget injected faults (every thread), call counters, hazard reports
    and the devices' sticky errors, as a new process would: the driver
    keeps a sticky error until the process ends, so a device reset alone
    does not clear it."""
    _library().cusim_reset()


def _integer(minimum, what):
    import argparse  # the command line only

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(
                "want %s, not %r" % (what, text))
        return value
    return parse


def _run_environment(devices=None, memory=None, delay_us=None,
                     hazards=False, environ=None):
    """A copy of ``environ`` (default ``os.environ``) in which a program runs
    on the simulator: ``libcuda_dir()`` first on ``LD_LIBRARY_PATH``,
    ``CUDAMEM_SIMULATOR=1``, and the simulator's variables for the
    arguments given (``CUDAMEM_SIM_DEVICES``, ``CUDAMEM_SIM_MEMORY``,
    ``CUDAMEM_SIM_DELAY_US``, ``CUDAMEM_SIM_HAZARDS``). Raises
    RuntimeError when ``CUDAMEM_DRIVER`` names a library that is not the
    simulator."""
    _library()  # a CUDAMEM_DRIVER that is not the simulator raises here
    env = dict(os.environ if environ is None else environ)
    first = libcuda_dir()
    rest = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep)
            if p and p != first]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([first] + rest)
    env["CUDAMEM_SIMULATOR"] = "1"
    for name, value in (("CUDAMEM_SIM_DEVICES", devices),
                        ("CUDAMEM_SIM_MEMORY", memory),
                        ("CUDAMEM_SIM_DELAY_US", delay_us)):
        if value is not None:
            env[name] = str(value)
    if hazards:
        env["CUDAMEM_SIM_HAZARDS"] = "1"
    return env


def _parser():
    import argparse  # the command line only

    parser = argparse.ArgumentParser(
        prog="python -m cudamem.simulator",
        description="cudamem's simulated CUDA driver.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run", help="run a program on the simulator",
        description="Run PROGRAM with the simulator as its libcuda.so.1 "
        "(first on LD_LIBRARY_PATH) and CUDAMEM_SIMULATOR=1, so that "
        "cudamem and every library that loads the CUDA driver by name "
        "(numba-cuda, cuda.bindings, cuda.core, CuPy, ...) run on it. "
        "Exits with PROGRAM's status.",
        usage="python -m cudamem.simulator run [options] -- PROGRAM "
        "[ARGS...]")
    run.add_argument("--devices", type=_integer(1, "a positive integer"),
                     metavar="N",
                     help="simulated devices (CUDAMEM_SIM_DEVICES)")
    run.add_argument("--memory", type=_integer(1, "a positive integer"),
                     metavar="BYTES",
                     help="memory of each device (CUDAMEM_SIM_MEMORY)")
    run.add_argument("--delay-us", type=_integer(0, "an integer >= 0"),
                     metavar="US",
                     help="delay every stream operation by US microseconds "
                     "(CUDAMEM_SIM_DELAY_US)")
    run.add_argument("--hazards", action="store_true",
                     help="report stream-order races (CUDAMEM_SIM_HAZARDS=1)")
    run.add_argument("program", nargs=argparse.REMAINDER,
                     help="the program and its arguments, after --")
    return parser


def main(argv=None):
    """The command line: ``python -m cudamem.simulator run ...``."""
    parser = _parser()
    args = parser.parse_args(argv)
    program = args.program
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        parser.error("run: no program given (put it after --)")
    try:
        env = _run_environment(args.devices, args.memory, args.delay_us,
                              args.hazards)
    except (OSError, RuntimeError) as exc:
        print("cudamem.simulator run: %s" % exc, file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        # The program replaces this process: its status is ours.
        os.execvpe(program[0], program, env)
    except OSError as exc:
        print("cudamem.simulator run: cannot run %r: %s"
              % (program[0], exc.strerror or exc), file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126


if __name__ == "__main__":
    sys.exit(main())
