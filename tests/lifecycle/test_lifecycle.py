"""Process lifecycle: interpreter exit with every kind of object alive or work
pending, fork children, and spawn workers that receive arrays, IPC handles and
exceptions pickled. Each case runs in a fresh interpreter, whose exit must be
clean: status 0, nothing on stderr. Callbacks at exit and single-object fork
checks are in streams/test_callbacks.py, streams/test_streams.py,
streams/test_events.py and devices/test_devices.py.
"""
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cudamem
from tests.helpers.run import FORK_WARNING_OFF

pytestmark = pytest.mark.simulator

# What is alive at exit, one case each; every case ends the script there.
EXIT_CASES = {
    "arrays": """
        a = cudamem.to_device(np.arange(100.0))
        views = [a[::2], a[10:20].reshape(2, 5), a.view(np.int64)]
        rec = cudamem.to_device(np.zeros(1, [("x", "i4")]))[0]
    """,
    "array in a cycle": """
        class Holder:
            pass
        h = Holder()
        h.me, h.array = h, cudamem.to_device(np.arange(10))
        del h  # collected at shutdown, after cudamem's exit hook
    """,
    "streams and events": """
        s = cudamem.stream()
        e = cudamem.event()
        e.record(s)
        ns = cudamem.stream(non_blocking=True)
        ext = cudamem.external_stream(int(s))
    """,
    "host memory": """
        p = cudamem.pinned_array(100, np.int32)
        m = cudamem.mapped_array(100, np.int32)
        g = cudamem.managed_array(100, np.int32)
        host = np.arange(1000)
        cudamem.register(host)
        ctx = cudamem.pinned(np.zeros(500))
        ctx.__enter__()  # left open
    """,
    "pending work": """
        s = cudamem.stream()
        a = cudamem.device_array(1 << 16, np.uint8, stream=s)
        out = cudamem.pinned_array(1 << 16, np.uint8)
        simulator.set_delay_us(300_000)
        a.fill(3, stream=s)
        a.copy_to_host(out, stream=s)
    """,
    "pending and deferred frees": """
        for _ in range(3):
            cudamem.to_device(np.arange(3))  # queued, not yet flushed
        cudamem.defer_cleanup().__enter__()  # left open
        for _ in range(3):
            cudamem.to_device(np.arange(3))
        s = cudamem.stream()
        del s
    """,
    "pending callbacks": """
        s = cudamem.stream()
        a = cudamem.device_array(64, np.uint8)
        simulator.set_delay_us(300_000)
        a.fill(1, stream=s)
        s.add_callback(lambda *args: None, "never")
    """,
    "pool": """
        from cudamem import PoolMemoryManager
        cudamem.set_memory_manager(PoolMemoryManager)
        a = cudamem.to_device(np.arange(1000))
        b = cudamem.to_device(np.arange(10))
        del b  # cached by the pool
    """,
    "closed context": """
        a = cudamem.to_device(np.arange(10))
        s = cudamem.stream()
        cudamem.close()
    """,
    "reset device": """
        a = cudamem.to_device(np.arange(10))
        e = cudamem.event()
        cudamem.get_current_device().reset()
    """,
    "daemon thread waiting": """
        import threading
        s = cudamem.stream()
        a = cudamem.device_array(64, np.uint8)
        simulator.set_delay_us(2_000_000)
        a.fill(1, stream=s)
        waiting = threading.Event()
        def wait():
            waiting.set()
            s.synchronize()
        threading.Thread(target=wait, daemon=True).start()
        waiting.wait()
    """,
    "uninitialized": """
        cudamem.is_available()
    """,
}

def _run_script(script):
    """Runs a script file (spawn re-imports it in the workers) with this
    suite's environment and cudamem importable."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(cudamem.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, str(script)], env=env,
                          capture_output=True, text=True, timeout=120)


PRELUDE = """
import numpy as np
import cudamem
from cudamem import simulator
"""


@pytest.mark.parametrize("case", sorted(EXIT_CASES))
def test_exit_is_clean(run_py, case):
    proc = run_py(PRELUDE + textwrap.dedent(EXIT_CASES[case]), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_exit_with_everything_alive(run_py):
    body = "".join(textwrap.dedent(EXIT_CASES[case]) for case in (
        "arrays", "array in a cycle", "streams and events", "host memory",
        "pending and deferred frees", "pending work", "pending callbacks"))
    proc = run_py(PRELUDE + body, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_exit_with_an_open_ipc_mapping(run_py):
    """A process that opened another's memory exits with it open; then the
    exporter frees it."""
    h = np.arange(64, dtype=np.int32)
    dev = cudamem.to_device(h)
    proc = run_py("""
        import pickle, numpy as np, cudamem
        handle = pickle.loads(%r)
        view = handle.open()
        print(view.copy_to_host().sum())
        view.fill(5)
    """ % pickle.dumps(dev.get_ipc_handle()))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert int(proc.stdout) == h.sum()
    np.testing.assert_array_equal(dev.copy_to_host(), np.full(64, 5))


# ---------------------------------------------------------------------------
# Fork: the child of an initialized parent cannot use CUDA (numba's rule:
# CudaDriverError naming the spawn start method) and exits cleanly with the
# parent's objects; the child of an uninitialized parent works.


def test_fork_child_exits_cleanly_with_the_parents_objects(run_py):
    proc = run_py(FORK_WARNING_OFF + PRELUDE + textwrap.dedent("""
        import gc, os
        a = cudamem.to_device(np.arange(10))
        s = cudamem.stream()
        e = cudamem.event()
        p = cudamem.pinned_array(10)
        g = cudamem.managed_array(10)
        cudamem.to_device(np.arange(3))  # a queued free
        pid = os.fork()
        if pid == 0:
            try:
                a.copy_to_host()
            except cudamem.CudaDriverError as exc:
                print(exc, flush=True)
            # The child's finalizers and exit touch no driver.
            del a, s, e, p, g
            gc.collect()
            raise SystemExit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        print(a.copy_to_host().sum(), simulator.live()["streams"])
    """))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == [
        "CUDA initialized before forking; use the spawn start method",
        "45 1"]


# What the child of an initialized parent tries with the parent's objects,
# one public way into each part of the C core; each must raise the spawn
# error. Where the parent's object hands C its device or context without
# the usual first check, a comment names the fork check that refuses it
# (tools/unreached.txt's fork-only exits).
FORK_OPS = [
    ("list_devices", "cudamem.list_devices()"),
    ("get_current_device", "cudamem.get_current_device()"),
    ("driver.devices", "cudamem.driver.devices()"),
    # A Device object is not looked up in the device table.
    ("Device.get_primary_context", "dev.get_primary_context()"),  # primary
    ("Device.reset", "dev.reset()"),  # cm_device_reset
    ("can_access_peer", "cudamem.can_access_peer(dev, dev)"),  # peer
    ("pinned_array", "cudamem.pinned_array(4)"),
    ("mapped_array", "cudamem.mapped_array(4)"),
    ("pinned", "cudamem.pinned(np.zeros(4)).__enter__()"),
    # The parent's registrations: cm_host_unregister.
    ("pinned exit", "pinned.__exit__(None, None, None)"),
    ("deregister", "cudamem.deregister(host)"),
    ("PinnedMemory", "cudamem.PinnedMemory(ctx, m.ctypes.data, 8)"),
    ("mapped __dlpack__", "m.__dlpack__()"),  # cm_host_check
    ("managed prefetch", "g.prefetch()"),  # cm_mem_check, managed branch
    # The manager's Context gives its Device: pool_get and its callers,
    # the host pool, cm_host_alloc.
    ("pool set_limit", "pool.set_limit(1 << 20)"),
    ("pool initialize", "pool.initialize()"),
    ("pool trim", "pool.trim()"),
    ("pool set_pinned_limit", "pool.set_pinned_limit(0)"),  # a cached block
    ("pool memhostalloc", "pool.memhostalloc(64)"),
    ("pool memhostalloc mapped", "pool.memhostalloc(64, mapped=True)"),
    ("pool memalloc", "pool.memalloc(64)"),
    ("using_memory_manager exit", "using.__exit__(None, None, None)"),
    ("_flush_pending", "cudamem._cudamem._flush_pending()"),
    ("Context.defer_cleanup", "ctx.defer_cleanup().__enter__()"),
    ("Event.elapsed_time", "e0.elapsed_time(e1)"),
    ("repr(event)", "repr(e0)"),  # event_repr
    ("Stream.synchronize", "s.synchronize()"),  # stream_check, bound
    # stream=: a default stream is no context's (stream_check's and
    # foreign_arg's own fork checks); a foreign handle first needs the
    # driver (foreign_arg).
    ("default stream", "a.copy_to_host(stream=ds)"),
    ("foreign default stream", "a.copy_to_host(stream=Foreign(2))"),
    ("foreign stream", "a.copy_to_host(stream=Foreign(handle))"),
    ("external_stream", "cudamem.external_stream(handle)"),
    ("_ipc_open", "cudamem._cudamem._ipc_open(ipc._ipc_handle.handle, dev)"),
]


def test_fork_child_refuses_every_operation(run_py):
    proc = run_py(FORK_WARNING_OFF + PRELUDE + textwrap.dedent("""
        import gc, os

        class Foreign:
            def __init__(self, handle):
                self.handle = handle  # 2: the per-thread default stream

            def __cuda_stream__(self):
                return (0, self.handle)

        dev = cudamem.get_current_device()
        ctx = cudamem.current_context()
        a = cudamem.to_device(np.arange(10))
        s = cudamem.stream()
        handle = int(s)
        ds = cudamem.default_stream()
        e0, e1 = cudamem.event(), cudamem.event()
        e0.record(s)
        e1.record(s)
        m = cudamem.mapped_array(10, np.int64)
        m[:] = np.arange(10)
        g = cudamem.managed_array(10)
        host = np.arange(10.0)
        cudamem.register(host)
        pinned = cudamem.pinned(np.zeros(8))
        pinned.__enter__()
        ipc = a.get_ipc_handle()
        using = cudamem.using_memory_manager(cudamem.PoolMemoryManager)
        pool = using.__enter__()
        pa = cudamem.to_device(np.arange(5))  # a pool block
        pp = cudamem.pinned_array(5)  # a host pool block
        cudamem.pinned_array(5)  # cached by the host pool
        cudamem.to_device(np.arange(3))  # a pool block freed
        s.synchronize()
        OPS = %r
        pid = os.fork()
        if pid == 0:
            for name, expr in OPS:
                try:
                    eval(expr)
                except cudamem.CudaDriverError as exc:
                    print("%%s: %%s" %% (name, exc), flush=True)
                except Exception as exc:
                    print("%%s: %%r" %% (name, exc), flush=True)
                else:
                    print("%%s: no error" %% name, flush=True)
            # Pool and host pool blocks go back, registrations drop: in
            # the child, all without the driver and without a warning.
            del a, s, ds, e0, e1, m, g, host, pinned, ipc, using, pool, pa, pp
            gc.collect()
            raise SystemExit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        # The parent's objects still work, the child's frees and failed
        # calls notwithstanding.
        a.copy_to_device(np.arange(10) * 2)
        assert (a.copy_to_host() == np.arange(10) * 2).all()
        assert (pa.copy_to_host() == np.arange(5)).all()
        # The mapped array through its device side.
        assert (cudamem.to_device(m).copy_to_host() == np.arange(10)).all()
        assert e0.elapsed_time(e1) >= 0
        cudamem.deregister(host)
        pinned.__exit__(None, None, None)
        using.__exit__(None, None, None)
        del a, s, ds, e0, e1, m, g, host, pinned, ipc, using, pool, pa, pp
        gc.collect()
        cudamem.close()
        print(simulator.live())
    """ % (FORK_OPS,)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    spawn = "CUDA initialized before forking; use the spawn start method"
    assert lines[:-1] == ["%s: %s" % (name, spawn) for name, _ in FORK_OPS]
    live = eval(lines[-1])
    assert set(live.values()) == {0}, live


def test_fork_pool_of_an_uninitialized_parent(tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import numpy as np
        import cudamem

        def work(k):
            return int(cudamem.to_device(np.arange(k)).copy_to_host().sum())

        if __name__ == "__main__":
            with mp.get_context("fork").Pool(2) as pool:
                print(pool.map(work, [3, 4]))
    """))
    proc = _run_script(script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == ["[3, 6]"]


# ---------------------------------------------------------------------------
# Spawn: arrays, IPC handles and exceptions pickled into workers.

SPAWN = """
import multiprocessing as mp
import numpy as np
import cudamem
from cudamem import CudaAPIError, CudaOutOfMemoryError

def total(array):
    # A pickled array arrives as a copy on the worker's device.
    assert type(array) is cudamem.DeviceNDArray, type(array)
    return array.copy_to_host().tolist()

def add_one(handle):
    # An IPC handle opens the parent's memory.
    with handle as view:
        host = view.copy_to_host()
        view.copy_to_device(host + 1)
    return host.tolist()

def fail(kind):
    if kind == "api":
        raise CudaAPIError(1, "cuMemAlloc", "CUDA_ERROR_INVALID_VALUE")
    cudamem.device_array(1 << 40, np.uint8)  # out of memory

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    host = np.arange(12, dtype=np.int32).reshape(3, 4)
    dev = cudamem.to_device(host)
    with ctx.Pool(1) as pool:
        print(pool.apply(total, (dev[:, ::-2],)))
        print(pool.apply(add_one, (dev.get_ipc_handle(),)))
        print(dev.copy_to_host().tolist())
        for kind in ("api", "oom"):
            try:
                pool.apply(fail, (kind,))
            except CudaAPIError as exc:
                print(type(exc).__name__, exc.code, exc.call,
                      getattr(exc, "requested", None))
"""


def test_spawn_workers_get_arrays_handles_and_errors(tmp_path):
    script = tmp_path / "spawn.py"
    script.write_text(SPAWN)
    proc = _run_script(script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    host = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert proc.stdout.splitlines() == [
        str(host[:, ::-2].tolist()),
        str(host.tolist()),
        str((host + 1).tolist()),
        "CudaAPIError 1 cuMemAlloc None",
        "CudaOutOfMemoryError 2 cuMemAlloc %d" % (1 << 40)]
