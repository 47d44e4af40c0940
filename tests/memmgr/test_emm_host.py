"""EMM plugins for host, mapped and managed memory and for IPC: a counting
plugin whose memhostalloc / mempin / memallocmanaged see every pinned,
mapped and managed array and every pinned() / mapped() (their finalizers
all run after), numba's PinnedMemory / MappedMemory / ManagedMemory
constructors, a plugin written as numba-cuda's documentation writes one
(host memory from HostOnlyCUDAMemoryManager), a plugin without
memallocmanaged, get_ipc_handle through a plugin, and plugins that fail.

The references: numba-cuda's EMM documentation for the API, NumPy for the
data, the simulator's live counts (the autouse fixture) for leaks.
"""
import ctypes
import gc
import pickle
import weakref

import numpy as np
import pytest

import cudamem
from cudamem import (
    HostOnlyCUDAMemoryManager,
    ManagedMemory,
    MappedMemory,
    MemoryPointer,
    PinnedMemory,
)
from cudamem.memory import DefaultMemoryManager

pytestmark = pytest.mark.simulator


class CountingManager(HostOnlyCUDAMemoryManager):
    """Counts every call and every finalizer; the memory is cudamem's,
    wrapped in numba's constructors."""

    def __init__(self, context):
        super().__init__(context)
        self.calls = []
        self.freed = []

    def initialize(self):
        self.native = DefaultMemoryManager(context=self.context)

    def _finalizer(self, what):
        return lambda: self.freed.append(what)

    def memalloc(self, size):
        return self.native.memalloc(size)

    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        self.calls.append(("memhostalloc", size, mapped, portable, wc))
        inner = super().memhostalloc(size, mapped, portable, wc)
        make = MappedMemory if mapped else PinnedMemory
        return make(weakref.proxy(self.context), inner.host_pointer, size,
                    owner=inner, finalizer=self._finalizer("memhostalloc"))

    def mempin(self, owner, pointer, size, mapped=False):
        self.calls.append(("mempin", size, mapped))
        inner = super().mempin(owner, pointer, size, mapped=mapped)
        make = MappedMemory if mapped else PinnedMemory
        return make(self.context, ctypes.c_void_p(pointer), size,
                    owner=inner, finalizer=self._finalizer("mempin"))

    def memallocmanaged(self, size, attach_global=True):
        self.calls.append(("memallocmanaged", size, attach_global))
        inner = self.native.memallocmanaged(size, attach_global)
        return ManagedMemory(self.context, inner.device_pointer, size,
                             owner=inner,
                             finalizer=self._finalizer("memallocmanaged"))

    def get_ipc_handle(self, memory):
        self.calls.append(("get_ipc_handle", memory.size))
        return self.native.get_ipc_handle(memory)

    def get_memory_info(self):
        return self.native.get_memory_info()

    @property
    def interface_version(self):
        return 1


from tests.helpers.numba_plugin import NumbaStyleManager  # noqa: E402

# ---------------------------------------------------------------------------


def _round_trip(ary):
    """Writes ary on the host, doubles it through the device, and checks
    the result against NumPy."""
    ary[...] = np.arange(ary.size, dtype=ary.dtype).reshape(ary.shape)
    want = np.array(ary) * 2
    d = cudamem.to_device(ary)
    d.copy_to_device(want)
    d.copy_to_host(ary)
    np.testing.assert_array_equal(ary, want)


def _device_round_trip(ary):
    """The device side of a mapped or managed array sees the host's data
    and the host sees its writes."""
    ary[...] = np.arange(ary.size, dtype=ary.dtype).reshape(ary.shape)
    dev = cudamem.as_cuda_array(ary)
    np.testing.assert_array_equal(dev.copy_to_host(), ary)
    dev.copy_to_device(np.full(ary.shape, 7, ary.dtype))
    cudamem.synchronize()
    np.testing.assert_array_equal(ary, np.full(ary.shape, 7, ary.dtype))


def test_counting_plugin_sees_every_host_allocation_and_pin():
    host = np.arange(12.0)
    with cudamem.using_memory_manager(CountingManager) as m:
        p = cudamem.pinned_array((3, 4), dtype=np.float32)
        q = cudamem.pinned_array_like(host)
        mp = cudamem.mapped_array(10, dtype=np.int64, portable=True)
        mw = cudamem.mapped_array_like(host, wc=True)
        ma = cudamem.managed_array((2, 5), dtype=np.int32,
                                   attach_global=False)
        mb = cudamem.managed_array_like(host)
        for ary in (p, q):
            _round_trip(ary)
        for ary in (mp, ma, mb):
            _device_round_trip(ary)
        mw[...] = 3.0
        np.testing.assert_array_equal(
            cudamem.as_cuda_array(mw).copy_to_host(), np.full(12, 3.0))
        with cudamem.pinned(host):
            _round_trip(host)
        with cudamem.mapped(host) as dhost:
            np.testing.assert_array_equal(dhost.copy_to_host(), host)
        assert m.calls == [
            ("memhostalloc", 48, False, False, False),
            ("memhostalloc", 96, False, False, False),
            ("memhostalloc", 80, True, True, False),
            ("memhostalloc", 96, True, False, True),
            ("memallocmanaged", 40, False),
            ("memallocmanaged", 96, True),
            ("mempin", 96, False),
            ("mempin", 96, True),
        ]
        assert type(p.base) is cudamem.HostBuffer
        assert p.base.kind == "external"
        assert mp.base.base.kind == "external_mapped"
        assert type(ma.gpu_data) is MemoryPointer
        del dhost
        gc.collect()
        assert m.freed == ["mempin", "mempin"]
        del p, q, mp, mw, ma, mb, ary
        gc.collect()
    assert sorted(m.freed) == sorted(
        ["mempin"] * 2 + ["memhostalloc"] * 4 + ["memallocmanaged"] * 2)


def test_default_manager_asks_no_python():
    class Spy(DefaultMemoryManager):
        def memhostalloc(self, *args, **kwargs):
            raise AssertionError("called")

        mempin = memallocmanaged = get_ipc_handle = memhostalloc

    from cudamem import memory
    memory._native(Spy)
    try:
        with cudamem.using_memory_manager(Spy):
            a = cudamem.pinned_array(4)
            b = cudamem.mapped_array(4)
            c = cudamem.managed_array(4)
            with cudamem.pinned(a), cudamem.mapped(np.zeros(3)):
                pass
            cudamem.to_device(a).get_ipc_handle()
    finally:
        memory._NATIVE.remove(Spy)
    assert a.base.kind == "pinned" and b.base.base.kind == "mapped"
    assert c.gpu_data.size == 32


def test_numba_style_plugin_host_memory_from_hostonly():
    with cudamem.using_memory_manager(NumbaStyleManager):
        p = cudamem.pinned_array(6, dtype=np.float64)
        mp = cudamem.mapped_array(6, dtype=np.float64)
        ma = cudamem.managed_array(6, dtype=np.float64)
        _round_trip(p)
        _device_round_trip(mp)
        _device_round_trip(ma)
        host = np.arange(5.0)
        with cudamem.pinned(host):
            _round_trip(host)
        with cudamem.mapped(host) as d:
            np.testing.assert_array_equal(d.copy_to_host(), host)
        # No memallocmanaged: managed memory is cudamem's own.
        assert ma.gpu_data.owner is ma.gpu_data
        assert p.base.kind == "pinned"
        assert mp.base.base.kind == "mapped"
        del p, mp, ma, d
        gc.collect()


def test_constructors_attributes_and_buffer():
    backing = cudamem.pinned_array(16, dtype=np.uint8)
    backing[:] = np.arange(16)
    ptr = backing.ctypes.data
    freed = []
    ctx = cudamem.current_context()
    pin = PinnedMemory(ctx, ptr, 16, owner=backing,
                       finalizer=lambda: freed.append("pin"))
    assert pin.host_pointer == ptr and pin.size == 16
    assert pin.handle.value == ptr and pin.device_pointer is None
    np.testing.assert_array_equal(np.frombuffer(pin, np.uint8),
                                  np.arange(16))
    reg = cudamem.HostOnlyCUDAMemoryManager.mempin(
        None, backing, ptr, 16, mapped=True)
    mapped = MappedMemory(ctx, ctypes.c_void_p(ptr), 16, owner=reg,
                          finalizer=lambda: freed.append("mapped"))
    assert mapped.device_pointer_value == reg.device_pointer_value
    assert mapped.kind == "external_mapped"
    managed = cudamem.memory.DefaultMemoryManager(ctx).memallocmanaged(8)
    mm = ManagedMemory(ctx, managed.device_pointer_value, 8, owner=managed,
                       finalizer=lambda: freed.append("managed"))
    view = memoryview(mm)
    view[:] = bytes(range(8))
    assert bytes(memoryview(managed)) == bytes(range(8))
    assert mm.view(2, 4).owner is managed
    del view
    del pin, mapped, reg
    assert freed == ["pin", "mapped"]
    sub = mm.view(0, 4)
    del mm
    assert freed == ["pin", "mapped"]
    del sub
    assert freed == ["pin", "mapped", "managed"]


@pytest.mark.parametrize("ctor", [PinnedMemory, MappedMemory, ManagedMemory])
def test_constructor_bad_arguments(ctor):
    ctx = cudamem.current_context()
    with pytest.raises(TypeError, match="Context, not 3"):
        ctor(3, 0, 8)
    with pytest.raises(TypeError, match="pointer must be an int"):
        ctor(ctx, "x", 8)
    with pytest.raises(ValueError, match="size -1 is not a byte count"):
        ctor(ctx, 0, -1)
    with pytest.raises(TypeError, match="finalizer must be callable"):
        ctor(ctx, 0, 0, finalizer=5)


def test_finalizer_raising_becomes_cuda_warning():
    backing = cudamem.pinned_array(8, dtype=np.uint8)

    def boom():
        raise RuntimeError("boom")

    buf = PinnedMemory(cudamem.current_context(), backing.ctypes.data, 8,
                       owner=backing, finalizer=boom)
    with pytest.warns(cudamem.CudaWarning, match="boom"):
        del buf


class NoManaged(HostOnlyCUDAMemoryManager):
    def initialize(self):
        self.native = DefaultMemoryManager(context=self.context)

    def memalloc(self, size):
        return self.native.memalloc(size)

    def get_ipc_handle(self, memory):
        raise NotImplementedError

    def get_memory_info(self):
        return self.native.get_memory_info()

    @property
    def interface_version(self):
        return 1


def test_plugin_without_memallocmanaged_gets_cudamem_managed_memory(sim):
    before = sim.stats()["calls"]["cuMemAllocManaged"]["calls"]
    with cudamem.using_memory_manager(NoManaged):
        ma = cudamem.managed_array(5, dtype=np.int16)
        _device_round_trip(ma)
    assert sim.stats()["calls"]["cuMemAllocManaged"]["calls"] == before + 1
    assert ma.gpu_data.owner is ma.gpu_data


class Failing(CountingManager):
    """memhostalloc / mempin / memallocmanaged raise or return garbage as
    `mode` says."""

    mode = "raise"

    def _fail(self, name, *args, **kwargs):
        self.calls.append(name)
        if self.mode == "raise":
            raise MemoryError("%s refused" % name)
        return self.mode

    def memhostalloc(self, *args, **kwargs):
        return self._fail("memhostalloc")

    def mempin(self, *args, **kwargs):
        return self._fail("mempin")

    def memallocmanaged(self, *args, **kwargs):
        return self._fail("memallocmanaged")


@pytest.mark.parametrize("mode", ["raise", "garbage", "short"])
def test_plugin_errors_allocate_nothing(sim, mode):
    host = np.zeros(4)
    Failing.mode = {"raise": "raise", "garbage": object(),
                    "short": None}[mode]
    before = sim.live()
    with cudamem.using_memory_manager(Failing) as m:
        if mode == "short":
            # A real buffer of too few bytes: ValueError naming it.
            small = PinnedMemory(m.context, host.ctypes.data, 1)
            Failing.mode = small
            exc, match = ValueError, "not 32 bytes"
        elif mode == "garbage":
            exc, match = TypeError, "returned <object object"
        else:
            exc, match = MemoryError, "refused"
        with pytest.raises(exc, match=match):
            cudamem.pinned_array(4)
        with pytest.raises(exc, match=match):
            cudamem.mapped_array(4)
        if mode != "short":
            with pytest.raises(exc, match=match):
                cudamem.managed_array(4)
            with pytest.raises(TypeError if mode == "garbage" else exc,
                               match=match if mode != "garbage"
                               else "mempin"):
                with cudamem.pinned(host):
                    pass
        with pytest.raises(TypeError if mode != "raise" else exc,
                           match="mempin" if mode != "raise" else match):
            with cudamem.mapped(host):
                pass
    del m, Failing.mode
    gc.collect()
    assert sim.live() == before


def test_garbage_memallocmanaged_names_it():
    class Garbage(CountingManager):
        def memallocmanaged(self, size, attach_global=True):
            return self.native.memalloc(size)  # device, not managed

    with cudamem.using_memory_manager(Garbage):
        with pytest.raises(TypeError, match="not a ManagedMemory"):
            cudamem.managed_array(4)


def test_mapped_memhostalloc_must_be_mapped():
    class Unmapped(CountingManager):
        def memhostalloc(self, size, mapped=False, portable=False,
                         wc=False):
            return super().memhostalloc(size)

    with cudamem.using_memory_manager(Unmapped):
        with pytest.raises(ValueError, match="mapped on the current"):
            cudamem.mapped_array(4)


def test_default_manager_get_ipc_handle_is_the_mixin(run_py):
    ctx = cudamem.current_context()
    assert isinstance(ctx.memory_manager, cudamem.GetIpcHandleMixin)
    d = cudamem.to_device(np.arange(8, dtype=np.int32))
    h = DefaultMemoryManager(ctx).get_ipc_handle(d.gpu_data)
    assert isinstance(h, cudamem.IpcHandle) and h.size == 32


IPC_CHILD = """
import gc, pickle
import numpy as np
import cudamem
from cudamem import simulator, _cudamem
handle, expected = pickle.loads(%r)
with handle as array:
    assert (array.copy_to_host() == expected).all(), array.copy_to_host()
    array.copy_to_device(-expected)
del array
gc.collect()
_cudamem._flush_pending()
assert simulator.live()["ipc_open"] == 0
print("OK")
"""


def test_get_ipc_handle_through_plugin(run_py):
    host = np.arange(30, dtype=np.float32).reshape(5, 6)
    with cudamem.using_memory_manager(CountingManager) as m:
        d = cudamem.to_device(host)
        view = d[1:4, ::2]
        handle = view.get_ipc_handle()
    assert m.calls == [("get_ipc_handle", (2 * 6 + 5) * 4)]
    with cudamem.using_memory_manager(DefaultMemoryManager):
        direct = view.get_ipc_handle()
    assert handle._array_desc == direct._array_desc
    assert handle._ipc_handle.handle == direct._ipc_handle.handle
    assert handle._ipc_handle.offset == direct._ipc_handle.offset
    assert handle._ipc_handle.size == direct._ipc_handle.size
    proc = run_py(IPC_CHILD % pickle.dumps((handle, host[1:4, ::2])))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "OK\n"
    np.testing.assert_array_equal(view.copy_to_host(), -host[1:4, ::2])


def test_get_ipc_handle_garbage_from_plugin():
    class Garbage(CountingManager):
        def get_ipc_handle(self, memory):
            return "nope"

    with cudamem.using_memory_manager(Garbage):
        d = cudamem.to_device(np.arange(4))
        with pytest.raises(TypeError, match="'nope'"):
            d.get_ipc_handle()
