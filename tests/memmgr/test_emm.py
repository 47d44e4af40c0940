"""External Memory Management plugins (interface version 1): a counting
plugin that must see every allocation and free, a plugin written as
numba-cuda's documentation writes one (only its import line changed),
numba's MemoryPointer constructor, set_memory_manager /
using_memory_manager / CUDAMEM_MEMORY_MANAGER, the delegation of
Context.get_memory_info / reset / defer_cleanup, and plugins that fail.

The references: numba-cuda's EMM documentation for the API, NumPy for the
data, the simulator's live counts (the autouse fixture) for leaks.
"""
import ctypes
import gc
import warnings
import weakref

import numpy as np
import pytest

import cudamem
from cudamem import MemoryPointer
from cudamem.memory import DefaultMemoryManager
from tests.helpers.memmgr import CountingManager
from tests.helpers.numba_plugin import NumbaStyleManager

# ---------------------------------------------------------------------------


def _exercise():
    """Arrays, views, copies, to_device, device_array_like; returns the
    host results and what NumPy gives."""
    host = np.arange(24.0).reshape(4, 6)
    d = cudamem.to_device(host)
    e = cudamem.device_array_like(host)
    e.copy_to_device(host * 2)
    f = d.copy()
    view = d[1:3, ::2]
    t = d.T
    g = cudamem.device_array((3, 5), dtype=np.int32)
    g.copy_to_device(np.ones((3, 5), np.int32))
    got = [d.copy_to_host(), e.copy_to_host(), f.copy_to_host(),
           view.copy_to_host(), t.copy_to_host(), g.copy_to_host()]
    want = [host, host * 2, host, host[1:3, ::2], host.T,
            np.ones((3, 5), np.int32)]
    return got, want, [d, e, f, view, t, g]


def test_counting_plugin_sees_every_allocation_and_free():
    with cudamem.using_memory_manager(CountingManager) as mgr:
        assert mgr.initialized and mgr.context == cudamem.current_context()
        assert cudamem.current_context().memory_manager is mgr
        got, want, arrays = _exercise()
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        # Every array's memory is the plugin's: one memalloc per new
        # allocation (to_device, device_array_like, copy, device_array).
        assert len(mgr.sizes) == 4
        assert sorted(mgr.sizes) == sorted([192, 192, 192, 60])
        assert mgr.freed == []
    # Arrays made inside outlive the block.
    np.testing.assert_array_equal(arrays[3].copy_to_host(), want[3])
    del arrays, got
    gc.collect()
    assert len(mgr.freed) == len(mgr.sizes) == 4
    assert not isinstance(cudamem.current_context().memory_manager,
                          CountingManager)


def test_views_share_the_finalizer():
    with cudamem.using_memory_manager(CountingManager) as mgr:
        d = cudamem.to_device(np.arange(10))
    view = d[3:]
    sub = view.gpu_data.view(8)
    del d
    gc.collect()
    assert mgr.freed == []
    del view
    gc.collect()
    assert mgr.freed == []
    del sub
    assert len(mgr.freed) == 1


def test_zero_size_arrays_ask_no_plugin():
    with cudamem.using_memory_manager(CountingManager) as mgr:
        d = cudamem.device_array(0)
        assert d.size == 0 and mgr.sizes == []


def test_numba_style_plugin():
    with cudamem.using_memory_manager(NumbaStyleManager) as mgr:
        got, want, arrays = _exercise()
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        assert len(mgr.allocations) == 4
        assert cudamem.current_context().get_memory_info() == (0, 0)
    del arrays
    gc.collect()
    assert mgr.allocations == {}


def test_default_manager_is_cudamems_allocator(sim):
    ctx = cudamem.current_context()
    mgr = ctx.memory_manager
    assert type(mgr) is DefaultMemoryManager
    assert isinstance(mgr, cudamem.BaseCUDAMemoryManager)
    assert mgr.interface_version == 1
    mem = mgr.memalloc(256)
    assert type(mem) is MemoryPointer and mem.size == 256
    assert ctx.get_memory_info() == mgr.get_memory_info()
    before = sim.live()["device_allocations"]
    del mem
    ctx.reset()
    assert sim.live()["device_allocations"] == before - 1


class ForeignBuffer:
    """Not a MemoryPointer: a pointer and a size, like a library's
    buffer; freeing it is its own business."""
    released = []

    def __init__(self, context, size):
        self._mem = DefaultMemoryManager(context).memalloc(size)
        self.device_pointer = ctypes.c_void_p(self._mem.device_pointer_value)
        self.size = size

    def __del__(self):
        ForeignBuffer.released.append(self.size)


class ForeignManager(CountingManager):
    def memalloc(self, size):
        self.sizes.append(size)
        return ForeignBuffer(self.context, size)


def test_plugin_objects_are_kept_alive_by_every_view():
    ForeignBuffer.released.clear()
    with cudamem.using_memory_manager(ForeignManager):
        d = cudamem.to_device(np.arange(8, dtype=np.int64))
    view = d[2:4]
    del d
    gc.collect()
    assert ForeignBuffer.released == []
    np.testing.assert_array_equal(view.copy_to_host(), [2, 3])
    del view
    gc.collect()
    assert ForeignBuffer.released == [64]


def test_context_delegates_to_the_plugin():
    calls = []

    class Recording(CountingManager):
        def reset(self):
            calls.append("reset")
            super().reset()

        def defer_cleanup(self):
            calls.append("defer_cleanup")
            return super().defer_cleanup()

    ctx = cudamem.current_context()
    with cudamem.using_memory_manager(Recording):
        assert ctx.get_memory_info() == (1, 2)
        ctx.reset()
        with cudamem.defer_cleanup():
            assert ctx.deallocations.is_disabled
            assert ctx.memory_manager.deallocations.is_disabled
    assert calls == ["reset", "defer_cleanup"]
    assert not ctx.deallocations.is_disabled
    assert ctx.get_memory_info().total > 2


def test_memory_pointer_constructor():
    ctx = cudamem.current_context()
    fired = []
    mp = MemoryPointer(ctx, 0x1000, 64, finalizer=lambda: fired.append(1))
    assert mp.device_pointer_value == 0x1000 and mp.size == 64
    assert mp.owner is mp and mp.context == ctx
    view = mp.view(16, 32)
    assert view.device_pointer_value == 0x1010 and view.owner is mp
    del mp
    assert fired == []
    del view
    assert fired == [1]
    owner = object()
    mp = MemoryPointer(context=weakref.proxy(ctx),
                       pointer=ctypes.c_void_p(0x2000), size=8, owner=owner)
    assert mp.owner is owner and mp.device_pointer_value == 0x2000
    assert MemoryPointer(ctx, ctypes.c_void_p(0), 0).device_pointer_value \
        is None


def test_a_pointer_is_collected_through_its_owner():
    # A pointer with an owner is the collector's to see: a cycle through
    # the owner is freed. One without refers to nothing but its type and
    # is left untracked, as CPython leaves a tuple of ints.
    class Owner:
        pass

    fired = []
    owner = Owner()
    owner.pointer = MemoryPointer(cudamem.current_context(), 0x3000, 8,
                                  owner=owner,
                                  finalizer=lambda: fired.append(1))
    assert gc.is_tracked(owner.pointer)
    del owner
    gc.collect()
    assert fired == [1]
    arr = cudamem.device_array(4)
    assert arr.gpu_data.owner is arr.gpu_data
    assert not gc.is_tracked(arr.gpu_data)


@pytest.mark.parametrize("args, exc, match", [
    ((None, 0x1000, 8), TypeError, "needs a cudamem Context, not None"),
    (("ctx", "0x10", 8), TypeError, "pointer must be an int.*'0x10'"),
    (("ctx", -1, 8), ValueError, "pointer -1 is not an address"),
    (("ctx", 0x1000, -8), ValueError, "size -8 is not a byte count"),
    (("ctx", 0x1000, 8.0), TypeError, "size must be an int, not 8.0"),
    (("ctx", 0x1000, 8, None, 3), TypeError, "finalizer must be callable"),
])
def test_memory_pointer_constructor_bad_input(args, exc, match):
    ctx = cudamem.current_context()
    args = tuple(ctx if a == "ctx" else a for a in args)
    with pytest.raises(exc, match=match):
        MemoryPointer(*args)


def test_stale_context_is_refused():
    dev = cudamem.get_current_device()
    ctx = cudamem.current_context()
    dev.reset()
    with pytest.raises(cudamem.CudaDriverError):
        MemoryPointer(ctx, 0x1000, 8)


# --- set_memory_manager and CUDAMEM_MEMORY_MANAGER (fresh processes) ----

_PLUGIN_MODULE = '''
import cudamem
from cudamem.memory import DefaultMemoryManager
log = []

class Logging(DefaultMemoryManager):
    def memalloc(self, size):
        log.append(size)
        return super().memalloc(size)
'''


def _module(tmp_path, text):
    (tmp_path / "emm_plugin.py").write_text(_PLUGIN_MODULE + text)
    return {"PYTHONPATH": str(tmp_path)}


def test_set_memory_manager_applies_to_contexts_made_afterwards(run_py,
                                                                tmp_path):
    env = _module(tmp_path, "")
    proc = run_py("""
        import numpy as np, cudamem, emm_plugin
        cudamem.list_devices()[0].get_primary_context().memory_manager
        cudamem.set_memory_manager(emm_plugin.Logging)
        cudamem.to_device(np.zeros(4))
        assert emm_plugin.log == [], emm_plugin.log
        cudamem.get_current_device().reset()
        cudamem.to_device(np.zeros(4))
        assert emm_plugin.log == [32], emm_plugin.log
        mgr = cudamem.current_context().memory_manager
        assert type(mgr) is emm_plugin.Logging
        print("ok")
    """, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_interface_version_is_checked(run_py, tmp_path):
    env = _module(tmp_path, """
class Version2(Logging):
    interface_version = 2

class Changing(Logging):
    version = 1
    @property
    def interface_version(self):
        return Changing.version
""")
    proc = run_py("""
        import numpy as np, cudamem, emm_plugin
        try:
            cudamem.set_memory_manager(emm_plugin.Version2)
        except RuntimeError as exc:
            assert str(exc).endswith("version 1 required"), exc
        else:
            raise AssertionError("version 2 accepted")
        cudamem.set_memory_manager(emm_plugin.Changing)
        emm_plugin.Changing.version = 3
        try:
            cudamem.to_device(np.zeros(4))
        except RuntimeError as exc:
            assert "version 3 - version 1 required" in str(exc), exc
        else:
            raise AssertionError("version 3 accepted")
        try:
            cudamem.set_memory_manager(emm_plugin.Logging(None))
        except TypeError as exc:
            assert "must be a class" in str(exc), exc
        print("ok")
    """, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize("attr", ["_cudamem_memory_manager",
                                  "_numba_memory_manager"])
def test_environment_names_the_plugin_module(run_py, tmp_path, attr):
    env = _module(tmp_path, "%s = Logging\n" % attr)
    env["CUDAMEM_MEMORY_MANAGER"] = "emm_plugin"
    proc = run_py("""
        import numpy as np, cudamem, emm_plugin
        d = cudamem.to_device(np.arange(3.0))
        assert emm_plugin.log == [24], emm_plugin.log
        print(type(cudamem.current_context().memory_manager).__name__)
    """, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Logging"


def test_environment_default_and_bad_module(run_py):
    proc = run_py("""
        import numpy as np, cudamem
        cudamem.to_device(np.zeros(2))
        print(type(cudamem.current_context().memory_manager).__name__)
    """, env={"CUDAMEM_MEMORY_MANAGER": "default"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "DefaultMemoryManager"
    proc = run_py("""
        import numpy as np, cudamem
        cudamem.to_device(np.zeros(2))
    """, env={"CUDAMEM_MEMORY_MANAGER": "no_such_emm_module"})
    assert proc.returncode != 0
    assert "Failed to use memory manager from no_such_emm_module" \
        in proc.stderr


# --- plugins that fail -----------------------------------------------------

class Raising(CountingManager):
    def memalloc(self, size):
        raise MemoryError("plugin pool exhausted")


def test_memalloc_raising_propagates_and_allocates_nothing(sim):
    before = sim.live()
    with cudamem.using_memory_manager(Raising):
        with pytest.raises(MemoryError, match="plugin pool exhausted"):
            cudamem.to_device(np.arange(4.0))
        with pytest.raises(MemoryError):
            cudamem.device_array(7)
    assert sim.live() == before


class Garbage(CountingManager):
    result = None

    def memalloc(self, size):
        return Garbage.result


class NoSize:
    device_pointer = 0x1000


class BadPointer:
    device_pointer = "here"
    size = 64


class Small:
    device_pointer = 0x1000
    size = 1


@pytest.mark.parametrize("result, exc, match", [
    (None, TypeError, r"memalloc\(32\) returned None, which is not a "
                      "MemoryPointer"),
    (NoSize(), TypeError, "NoSize.*not a MemoryPointer"),
    (BadPointer(), TypeError, "device_pointer must be an int.*'here'"),
    (Small(), ValueError, r"memalloc\(32\) returned .*Small.*not 32 bytes"),
])
def test_memalloc_returning_garbage(result, exc, match):
    Garbage.result = result
    with cudamem.using_memory_manager(Garbage):
        with pytest.raises(exc, match=match):
            cudamem.device_array(4)
    Garbage.result = None


def test_memalloc_returning_too_little_cudamem_memory():
    class Short(CountingManager):
        def memalloc(self, size):
            return DefaultMemoryManager.memalloc(self, size - 1)

    with cudamem.using_memory_manager(Short):
        with pytest.raises(ValueError, match=r"not 32 bytes on device 0"):
            cudamem.device_array(4)


def test_finalizer_raising_becomes_a_cuda_warning():
    def finalizer():
        raise RuntimeError("plugin free failed")

    mp = MemoryPointer(cudamem.current_context(), 0x1000, 8,
                       finalizer=finalizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del mp
    assert [w.category for w in caught] == [cudamem.CudaWarning]
    assert "plugin free failed" in str(caught[0].message)


def test_finalizer_raising_under_error_warnings_is_unraisable(monkeypatch):
    seen = []
    monkeypatch.setattr("sys.unraisablehook", seen.append)

    def finalizer():
        raise RuntimeError("plugin free failed")

    mp = MemoryPointer(cudamem.current_context(), 0x1000, 8,
                       finalizer=finalizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del mp
    assert len(seen) == 1
