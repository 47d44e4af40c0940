"""numba's module names and internals as numba-cuda 0.30.4 has them
(numba/cuda/cudadrv/{driver,devicearray,devices}.py, api.py): the
``cudamem.cudadrv`` package and ``cudamem.devicearray`` so that
``sed s/numba.cuda/cudamem/`` on import lines works; the helpers of numba's
``driver`` module checked against NumPy; ``devices.get_context`` and
``require_context``'s refusal of a context switch; numba's Context methods
routed through the memory manager; ``Device.from_identity`` and
``supports_fp8``."""
import ctypes
import importlib

import numpy as np
import pytest

import cudamem
from cudamem import simulator
from cudamem.errors import CudaAPIError, CudaDriverError

pytestmark = pytest.mark.simulator


# --- module layout -------------------------------------------------------

@pytest.mark.parametrize("numba_name, module", [
    ("numba.cuda.cudadrv.driver", "cudamem.driver"),
    ("numba.cuda.cudadrv.devicearray", "cudamem.devicearray"),
    ("numba.cuda.cudadrv.devices", "cudamem.devices"),
    ("numba.cuda.cudadrv.runtime", "cudamem.runtime"),
    ("numba.cuda.cudadrv.error", "cudamem.errors"),
    # numba.cuda re-exports api.py's module imports.
    ("numba.cuda.driver", "cudamem.driver"),
    ("numba.cuda.devicearray", "cudamem.devicearray"),
    ("numba.cuda.devices", "cudamem.devices"),
])
def test_numba_module_paths_import_after_sed(numba_name, module):
    renamed = numba_name.replace("numba.cuda", "cudamem")
    assert importlib.import_module(renamed) is importlib.import_module(
        module)


def test_modules_are_attributes_after_import_cudamem(run_py):
    # dask: `cuda.devicearray.DeviceNDArray` after only `import ... cuda`.
    proc = run_py("""
        import cudamem as cuda
        assert cuda.devicearray.DeviceNDArray is cuda.DeviceNDArray
        assert cuda.cudadrv.driver.Context is cuda.Context
        assert cuda.cudadrv.devicearray is cuda.devicearray
        assert cuda.devices.get_context is cuda.cudadrv.devices.get_context
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_new_modules_load_no_driver_numpy_or_ctypes(run_py):
    proc = run_py("""
        import sys
        import cudamem.cudadrv.driver, cudamem.devicearray
        maps = open('/proc/self/maps').read()
        assert 'libcusim' not in maps and 'libcuda' not in maps
        for heavy in ('ctypes', 'numpy'):
            assert heavy not in sys.modules, heavy
        print('clean')
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "clean"


# The public names of numba-cuda 0.30.4's cudadrv/driver.py that are host
# API (not its linker, modules, kernels or raw ctypes plumbing).
NUMBA_DRIVER_NAMES = [
    "BaseCUDAMemoryManager", "CU_STREAM_DEFAULT", "Context", "CudaAPIError",
    "CudaDriverError", "CudaSupportError", "Device", "Driver", "Event",
    "GetIpcHandleMixin", "HostOnlyCUDAMemoryManager", "IpcHandle",
    "ManagedMemory", "MappedMemory", "MemoryInfo", "MemoryPointer",
    "NumbaCUDAMemoryManager", "OwnedPointer", "PinnedMemory", "SUPPORTS_IPC",
    "Stream", "device_ctypes_pointer", "device_extents",
    "device_memory_depends", "device_memory_size", "device_memset",
    "device_pointer", "device_to_device", "device_to_host", "driver",
    "event_elapsed_time", "get_version", "host_memory_extents",
    "host_memory_size", "host_pointer", "host_to_device",
    "is_device_memory", "memory_size_from_info", "profile_start",
    "profile_stop", "profiling", "require_device_memory",
    "set_memory_manager",
]
NUMBA_DEVICEARRAY_NAMES = [
    "DeviceNDArray", "DeviceNDArrayBase", "DeviceRecord", "IpcArrayHandle",
    "ManagedNDArray", "MappedNDArray", "array_core", "auto_device",
    "check_array_compatibility", "errmsg_contiguous_buffer",
    "from_array_like", "from_record_like", "is_contiguous",
    "is_cuda_ndarray", "require_cuda_ndarray", "sentry_contiguous",
    "verify_cuda_ndarray_interface",
]


@pytest.mark.parametrize("name", NUMBA_DRIVER_NAMES)
def test_numba_driver_name(name):
    from cudamem.cudadrv import driver
    assert hasattr(driver, name)


@pytest.mark.parametrize("name", NUMBA_DEVICEARRAY_NAMES)
def test_numba_devicearray_name(name):
    from cudamem.cudadrv import devicearray
    assert hasattr(devicearray, name)


def test_driver_names_are_cudamems_objects():
    from cudamem.cudadrv import driver
    assert driver.Context is cudamem.Context
    assert driver.Device is cudamem.Device
    assert driver.MemoryPointer is cudamem.MemoryPointer
    assert driver.CudaAPIError is cudamem.CudaAPIError
    assert driver.NumbaCUDAMemoryManager is \
        cudamem.memory.DefaultMemoryManager
    assert driver.IpcHandle is cudamem.IpcHandle
    assert driver.CU_STREAM_DEFAULT == 0 and driver.SUPPORTS_IPC is True


def test_cudamems_own_driver_functions_still_work():
    from cudamem import driver
    version = driver.info()["version"]
    assert driver.get_version() == (version // 1000, version % 1000 // 10)
    assert [d["id"] for d in driver.devices()] == \
        [d.id for d in cudamem.list_devices()]
    assert any(row[0] == "cuMemAlloc" for row in driver.table())


def test_driver_object():
    from cudamem.cudadrv.driver import driver
    assert driver.is_available is True
    assert driver.get_device_count() == len(cudamem.list_devices())
    assert driver.get_device(0) is cudamem.list_devices()[0]
    assert driver.list_devices() == cudamem.list_devices()
    assert driver.get_version() == cudamem.driver.get_version()
    with pytest.raises(AttributeError, match="cuMemAlloc"):
        driver.cuMemAlloc


# --- driver helpers --------------------------------------------------------

class _Memory:
    """A device memory object of numba's protocol only."""
    __cuda_memory__ = True

    def __init__(self, array):
        self.array = array
        self.device_ctypes_pointer = array.device_ctypes_pointer


def test_is_and_require_device_memory():
    from cudamem.cudadrv import driver
    d = cudamem.device_array(4)
    assert driver.is_device_memory(d) is True
    assert driver.is_device_memory(_Memory(d)) is True
    assert driver.is_device_memory(np.zeros(4)) is False
    driver.require_device_memory(d)
    # numba raises a bare Exception with these words.
    with pytest.raises(Exception, match="^Not a CUDA memory object.$"):
        driver.require_device_memory(np.zeros(4))


def test_device_pointers():
    from cudamem.cudadrv import driver
    d = cudamem.device_array(4)
    address = d.__cuda_array_interface__["data"][0]
    assert driver.device_pointer(d) == address
    assert driver.device_pointer(_Memory(d[1:])) == address + 8
    assert int(driver.device_ctypes_pointer(d)) == address
    null = driver.device_ctypes_pointer(None)
    assert isinstance(null, ctypes.c_void_p) and null.value is None


def test_device_extents_are_the_whole_allocation():
    from cudamem.cudadrv import driver
    d = cudamem.device_array(16, dtype=np.uint8)
    base = driver.device_pointer(d)
    view = d[4:10]
    assert driver.device_extents(view) == (base, base + 16)
    assert driver.device_memory_size(view) == 16
    mem = _Memory(view)
    assert driver.device_memory_size(mem) == 16
    assert mem._cuda_memsize_ == 16  # numba caches it on the object


def test_device_extents_of_unknown_memory():
    from cudamem.cudadrv import driver
    fake = _Memory(cudamem.device_array(1))
    fake.device_ctypes_pointer = ctypes.c_void_p(0x10)
    with pytest.raises(ValueError, match="0x10"):
        driver.device_extents(fake)


def test_device_memory_depends():
    from cudamem.cudadrv import driver
    mem = _Memory(cudamem.device_array(1))
    mem._depends_ = []
    keep = object()
    driver.device_memory_depends(mem, keep)
    assert mem._depends_ == [keep]
    driver.device_memory_depends(cudamem.device_array(1), keep)  # no list


@pytest.mark.parametrize("index", [
    np.s_[:], np.s_[::-1], np.s_[::2], np.s_[::-3], np.s_[2:2], np.s_[5:6],
])
def test_host_memory_extents_against_numpy(index):
    from cudamem.cudadrv import driver
    base = np.arange(24, dtype=np.int32)
    a = base[index]
    b = np.byte_bounds(a) if hasattr(np, "byte_bounds") else \
        np.lib.array_utils.byte_bounds(a)
    if a.size == 0:
        b = (a.__array_interface__["data"][0],) * 2
    assert driver.host_memory_extents(a) == tuple(b)
    assert driver.host_memory_size(a) == b[1] - b[0]
    assert driver.memory_size_from_info(a.shape, a.strides,
                                        a.itemsize) == b[1] - b[0]


def test_host_memory_extents_of_datetimes_and_bytes():
    from cudamem.cudadrv import driver
    t = np.zeros(3, "datetime64[s]")
    start = t.__array_interface__["data"][0]
    assert driver.host_memory_extents(t) == (start, start + 24)
    assert driver.host_memory_size(b"abcd") == 4


def test_host_pointer():
    from cudamem.cudadrv import driver
    a = np.zeros(3)
    assert driver.host_pointer(a) == a.ctypes.data
    assert driver.host_pointer(12345) == 12345
    assert driver.host_pointer(b"xy", readonly=True) != 0
    with pytest.raises(BufferError, match="read-only"):
        driver.host_pointer(b"xy")


def test_memory_size_from_info_checks_lengths():
    from cudamem.cudadrv import driver
    assert driver.memory_size_from_info((2, 3), (24, 8), 8) == 48
    with pytest.raises(ValueError, match="differ in length"):
        driver.memory_size_from_info((2, 3), (8,), 8)


@pytest.mark.parametrize("use_stream", [False, True])
def test_byte_copies_against_numpy(use_stream):
    from cudamem.cudadrv import driver
    stream = cudamem.stream() if use_stream else 0
    host = np.arange(32, dtype=np.uint8)
    d = cudamem.device_array(32, dtype=np.uint8)
    d2 = cudamem.to_device(np.zeros(32, np.uint8))
    expect = np.zeros(32, np.uint8)

    driver.host_to_device(d2, host[8:], 12, stream=stream)
    expect[:12] = host[8:20]
    driver.device_to_device(_Memory(d2[16:]), d2, 10, stream=stream)
    expect[16:26] = expect[:10]
    driver.device_memset(d2[4:], 0xAB, 5, stream=stream)
    expect[4:9] = 0xAB
    out = np.full(32, 7, np.uint8)
    driver.device_to_host(out, d2, 30, stream=stream)
    if use_stream:
        stream.synchronize()
    np.testing.assert_array_equal(out[:30], expect[:30])
    assert out[30] == 7 and out[31] == 7  # only `size` bytes written
    # A host address (int) is numba's too; other dtypes copy their bytes.
    words = np.arange(4, dtype=np.int64)
    driver.host_to_device(d, words.ctypes.data, words.nbytes)
    np.testing.assert_array_equal(d.copy_to_host()[:32].view(np.int64),
                                  words)


def test_byte_copies_refuse_bad_sizes_and_buffers():
    from cudamem.cudadrv import driver
    d = cudamem.device_array(8, dtype=np.uint8)
    with pytest.raises(ValueError, match="9 bytes: the host buffer has 8"):
        driver.host_to_device(cudamem.device_array(16, np.uint8),
                              np.zeros(8, np.uint8), 9)
    # Past the device allocation: cudamem's own check of the memory.
    with pytest.raises(ValueError, match="outside its allocation of 8"):
        driver.device_memset(d, 0, 9)
    with pytest.raises(ValueError, match="negative"):
        driver.device_memset(d, 0, -1)
    with pytest.raises(TypeError):
        driver.device_memset(d, 0, 1.5)
    with pytest.raises(ValueError, match="contiguous"):
        driver.device_to_host(np.zeros(16, np.uint8)[::2], d, 8)
    with pytest.raises(BufferError):
        driver.device_to_host(b"12345678", d, 8)
    with pytest.raises(Exception, match="Not a CUDA memory object"):
        driver.host_to_device(np.zeros(8), np.zeros(8), 8)


def test_owned_pointer_counts_in_refct():
    from cudamem.cudadrv import driver
    mem = cudamem.current_context().memalloc(64)
    before = mem.refct
    owned = driver.OwnedPointer(mem)
    assert mem.refct == before + 1
    assert owned.device_pointer_value == mem.device_pointer_value
    view = driver.OwnedPointer(mem, mem.view(8))
    assert view.device_pointer_value == mem.device_pointer_value + 8
    del owned, view
    assert mem.refct == before


# --- devicearray -----------------------------------------------------------

def test_is_cuda_ndarray_and_verify():
    from cudamem.cudadrv import devicearray
    d = cudamem.device_array((2, 3))
    assert devicearray.is_cuda_ndarray(d) is True
    assert devicearray.is_cuda_ndarray(np.zeros(2)) is False
    devicearray.verify_cuda_ndarray_interface(d)
    with pytest.raises(ValueError, match="require an cuda ndarray object"):
        devicearray.verify_cuda_ndarray_interface(np.zeros(2))

    class Fake:
        __cuda_ndarray__ = True
        shape = (2,)
        strides = [8]
    with pytest.raises(AttributeError, match="strides must be of type"):
        devicearray.verify_cuda_ndarray_interface(Fake())
    Fake.strides = (8,)
    with pytest.raises(AttributeError, match="^dtype$"):
        devicearray.verify_cuda_ndarray_interface(Fake())


def test_from_array_like_and_record_like():
    from cudamem.cudadrv import devicearray
    host = np.zeros((3, 4), order="F")
    d = devicearray.from_array_like(host)
    assert isinstance(d, cudamem.DeviceNDArray)
    assert (d.shape, d.strides, d.dtype) == (host.shape, host.strides,
                                             host.dtype)
    over = devicearray.from_array_like(np.zeros(2), gpu_data=d.gpu_data)
    assert over.device_ctypes_pointer.value == d.device_ctypes_pointer.value
    rec = np.zeros(1, [("a", np.int32), ("b", np.float64)])[0]
    r = devicearray.from_record_like(rec)
    assert isinstance(r, cudamem.DeviceRecord) and r.dtype == rec.dtype


@pytest.mark.parametrize("make", [
    lambda: np.zeros((3, 4)),
    lambda: np.broadcast_to(np.arange(4.0), (3, 4)),
    lambda: np.broadcast_to(np.arange(3.0)[:, None], (3, 4)),
    lambda: np.zeros((3, 4))[:, ::2],
    lambda: np.zeros((0, 4)),
    lambda: np.zeros((1, 5, 1))[:, ::-1],
])
def test_array_core_and_is_contiguous_against_numpy(make):
    from cudamem.cudadrv import devicearray
    a = make()
    core = devicearray.array_core(a)
    # The reference: index 0 along every zero-stride axis.
    if a.size:
        expect = a[tuple(0 if s == 0 else slice(None) for s in a.strides)]
    else:
        expect = a
    assert core.shape == expect.shape and core.strides == expect.strides
    size, contiguous = a.itemsize, True
    for n, s in zip(a.shape[::-1], a.strides[::-1]):
        if n > 1 and s != 0:
            contiguous &= s == size
            size *= n
    assert devicearray.is_contiguous(a) is contiguous
    if core.flags.c_contiguous or core.flags.f_contiguous:
        devicearray.sentry_contiguous(a)
    else:
        with pytest.raises(ValueError, match="non-contiguous buffer"):
            devicearray.sentry_contiguous(a)


def test_auto_device():
    from cudamem.cudadrv import devicearray
    d = cudamem.to_device(np.arange(4.0))
    assert devicearray.auto_device(d) == (d, False)
    host = np.arange(6.0).reshape(2, 3)
    out, new = devicearray.auto_device(host)
    assert new is True
    np.testing.assert_array_equal(out.copy_to_host(), host)
    empty, new = devicearray.auto_device(host, copy=False)
    assert new is True and empty.shape == host.shape
    out, new = devicearray.auto_device([1, 2, 3])
    np.testing.assert_array_equal(out.copy_to_host(), [1, 2, 3])
    rec = np.array([(1, 2.5)], [("a", np.int32), ("b", np.float64)])[0]
    out, new = devicearray.auto_device(rec)
    assert isinstance(out, cudamem.DeviceRecord) and new is True
    assert out.copy_to_host() == rec

    class Foreign:
        def __init__(self, array):
            self.__cuda_array_interface__ = array.__cuda_array_interface__
    out, new = devicearray.auto_device(Foreign(d))
    assert new is False
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(4.0))


def test_check_array_compatibility():
    from cudamem.cudadrv import devicearray
    a = np.zeros((3, 1, 4))
    devicearray.check_array_compatibility(a, np.zeros((3, 4)))
    with pytest.raises(TypeError, match="incompatible dtype"):
        devicearray.check_array_compatibility(a, np.zeros((3, 4), "f4"))
    with pytest.raises(ValueError, match="incompatible shape"):
        devicearray.check_array_compatibility(a, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="incompatible strides"):
        devicearray.check_array_compatibility(a, np.zeros((3, 4), order="F"))
    devicearray.check_array_compatibility(np.zeros((0, 2)),
                                          np.zeros((0, 2), order="F"))


def test_host_ndarray_types():
    from cudamem.cudadrv import devicearray
    assert devicearray.MappedNDArray is cudamem.MappedNDArray
    assert isinstance(cudamem.managed_array(2), devicearray.ManagedNDArray)


# --- devices: get_context, require_context ---------------------------------

def test_get_context_is_current_context():
    from cudamem import devices
    assert devices.get_context() == cudamem.current_context()
    assert devices.get_context(0) == cudamem.list_devices()[0]\
        .get_primary_context()


def test_require_context_allows_its_own_device():
    from cudamem import devices

    @devices.require_context
    def body():
        cudamem.select_device(0)
        with cudamem.gpus[0]:
            pass
        return devices.get_context(0)

    assert body() == cudamem.current_context()


def test_require_context_refuses_a_switch(run_py):
    proc = run_py("""
        import cudamem
        from cudamem import devices

        def refused(call):
            try:
                call()
            except RuntimeError as exc:
                return str(exc)
            return "allowed"

        @devices.require_context
        def body():
            @devices.require_context
            def inner():   # nested: the same context, no switch
                return cudamem.get_current_device().id
            assert inner() == 0
            return [refused(lambda: cudamem.select_device(1)),
                    refused(lambda: devices.get_context(1)),
                    refused(lambda: cudamem.current_context(1)),
                    refused(lambda: cudamem.gpus[1].__enter__())]

        print(body())
        # After the call, switching is allowed again.
        print(cudamem.select_device(1).id)

        @devices.require_context
        def on_one():
            return refused(lambda: cudamem.select_device(0))
        print(on_one())
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == str(["Cannot switch CUDA-context."] * 4)
    assert lines[1:] == ["1", "Cannot switch CUDA-context."]


def test_require_context_detaches_after_an_exception():
    from cudamem import devices

    @devices.require_context
    def body():
        raise KeyError("x")

    with pytest.raises(KeyError):
        body()
    assert cudamem._cudamem._attach_device(None) is None


def test_require_context_keeps_other_threads_free(run_py):
    proc = run_py("""
        import threading
        import cudamem
        from cudamem import devices
        seen = []

        @devices.require_context
        def body():
            t = threading.Thread(
                target=lambda: seen.append(cudamem.select_device(1).id))
            t.start()
            t.join()

        body()
        print(seen)
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1]"


# --- Context methods -------------------------------------------------------

class _Recorder(cudamem.HostOnlyCUDAMemoryManager):
    """A plugin that records what the Context asks of it, allocating with
    cudamem's default manager."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []
        self._inner = None

    def _default(self):
        if self._inner is None:
            self._inner = cudamem.memory.DefaultMemoryManager(
                context=self.context)
        return self._inner

    def initialize(self):
        pass

    def memalloc(self, size):
        self.calls.append(("memalloc", size))
        return self._default().memalloc(size)

    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        self.calls.append(("memhostalloc", size, mapped, portable, wc))
        return super().memhostalloc(size, mapped, portable, wc)

    def mempin(self, owner, pointer, size, mapped=False):
        self.calls.append(("mempin", size, mapped))
        return super().mempin(owner, pointer, size, mapped)

    def get_ipc_handle(self, memory):
        self.calls.append(("get_ipc_handle", memory.size))
        return self._default().get_ipc_handle(memory)

    def get_memory_info(self):
        return self._default().get_memory_info()

    @property
    def interface_version(self):
        return 1


def test_context_methods_delegate_to_the_memory_manager():
    ctx = cudamem.current_context()
    host = np.zeros(4)
    with cudamem.using_memory_manager(_Recorder) as mgr:
        mem = ctx.memalloc(48)
        pinned = ctx.memhostalloc(16, portable=True)
        mapped = ctx.memhostalloc(bytesize=32, mapped=True, wc=True)
        pin = ctx.mempin(host, host.ctypes.data, host.nbytes, mapped=True)
        handle = ctx.get_ipc_handle(mem)
        # A manager without memallocmanaged (numba's HostOnly has one):
        # cudamem's managed memory, which the host can use.
        managed = ctx.memallocmanaged(24)
        assert mgr.calls == [
            ("memalloc", 48), ("memhostalloc", 16, False, True, False),
            ("memhostalloc", 32, True, False, True),
            ("mempin", 32, True), ("get_ipc_handle", 48)]
    assert mem.size == 48 and pinned.size == 16 and mapped.size == 32
    assert pin.size == 32 and handle.size == 48
    assert managed.size == 24
    view = np.ctypeslib.as_array(
        (ctypes.c_uint8 * 24).from_address(managed.device_pointer_value))
    view[:] = 5  # host-accessible
    d = cudamem.DeviceNDArray((24,), (1,), np.uint8, gpu_data=managed)
    np.testing.assert_array_equal(d.copy_to_host(), np.full(24, 5))
    del view, d


def test_memallocmanaged_uses_the_managers_own():
    ctx = cudamem.current_context()
    calls = []

    class Managed(_Recorder):
        def memallocmanaged(self, size, attach_global):
            calls.append((size, attach_global))
            return cudamem.memory.DefaultMemoryManager(
                context=self.context).memallocmanaged(size, attach_global)

    with cudamem.using_memory_manager(Managed):
        mem = ctx.memallocmanaged(bytesize=40, attach_global=False)
    assert calls == [(40, False)] and mem.size == 40


def test_context_memory_with_the_default_manager():
    ctx = cudamem.current_context()
    mem = ctx.memalloc(100)
    assert isinstance(mem, cudamem.MemoryPointer) and mem.size == 100
    d = cudamem.DeviceNDArray((100,), (1,), np.uint8, gpu_data=mem)
    d.copy_to_device(np.arange(100, dtype=np.uint8))
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(100))
    managed = ctx.memallocmanaged(8, attach_global=True)
    assert managed.size == 8
    host = ctx.memhostalloc(64)
    assert host.kind == "pinned" and host.size == 64
    assert ctx.memhostalloc(64, mapped=True).kind == "mapped"
    with pytest.raises(TypeError, match="memalloc"):
        ctx.memalloc()
    with pytest.raises(TypeError, match="memhostalloc"):
        ctx.memhostalloc(8, nonsense=True)


def test_mempin_refuses_mapping_where_the_device_cannot(run_py):
    proc = run_py("""
        import numpy as np
        import cudamem
        ctx = cudamem.current_context()
        a = np.zeros(4)
        ctx.mempin(a, a.ctypes.data, a.nbytes).size  # unmapped: fine
        try:
            ctx.mempin(a, a.ctypes.data, a.nbytes, mapped=True)
        except cudamem.CudaDriverError as exc:
            print(type(exc).__name__, exc)
    """, env={"CUDAMEM_SIM_ATTRS": "19=0"})  # CAN_MAP_HOST_MEMORY
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CudaDriverError <CUDA device 0 ")
    assert proc.stdout.rstrip().endswith("cannot map host memory")


def test_context_streams_and_events():
    ctx = cudamem.current_context()
    ds = ctx.get_default_stream()
    # numba's test_cuda_driver_default_stream and friends.
    assert "Default CUDA stream" in repr(ds) and int(ds) == 0
    assert int(ctx.get_legacy_default_stream()) == 1
    assert int(ctx.get_per_thread_default_stream()) == 2
    s = ctx.create_stream()
    assert int(s) != 0 and not s.external and s.context == ctx
    ext = ctx.create_external_stream(int(s))
    assert ext.external and int(ext) == int(s)
    assert "External CUDA stream" in repr(ext)
    with pytest.raises(TypeError, match="ptr for external stream must be "
                                        "an int"):
        ctx.create_external_stream(s)
    assert ctx.create_event().timing is True
    e = ctx.create_event(timing=False)
    assert e.timing is False
    e.record(s)
    e.synchronize()


def test_context_methods_work_in_their_own_context(run_py):
    proc = run_py("""
        import numpy as np
        import cudamem
        cudamem.select_device(0)
        ctx1 = cudamem.list_devices()[1].get_primary_context()
        s = ctx1.create_stream()
        e = ctx1.create_event()
        mem = ctx1.memalloc(16)
        print(s.context == ctx1, e.record(s), mem.context == ctx1)
        print(cudamem.get_current_device().id)  # still 0: popped
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "None", "True", "0"]


def test_context_allocations_and_deallocations():
    ctx = cudamem.current_context()
    assert ctx.allocations == {}
    ctx.allocations[1] = "x"
    with pytest.raises(AssertionError):  # numba's UniqueDict
        ctx.allocations[1] = "y"
    del ctx.allocations[1]
    queue = ctx.deallocations
    assert isinstance(queue, cudamem.Deallocations)
    mine = object()
    ctx.deallocations = mine
    assert ctx.deallocations is mine
    del ctx.deallocations
    assert isinstance(ctx.deallocations, cudamem.Deallocations)
    replacement = cudamem.memory.UniqueDict()
    ctx.allocations = replacement
    assert ctx.allocations is replacement
    with pytest.raises(AttributeError):
        del ctx.allocations
    ctx.allocations = cudamem.memory.UniqueDict()


def test_open_ipc_handle_in_another_process(run_py):
    ctx = cudamem.current_context()
    d = cudamem.to_device(np.arange(16, dtype=np.uint8))
    handle = ctx.get_ipc_handle(d.gpu_data)
    proc = run_py("""
        import numpy as np
        import cudamem
        ctx = cudamem.current_context()
        mem = ctx.open_ipc_handle(%r, 16)
        arr = cudamem.DeviceNDArray((16,), (1,), np.uint8, gpu_data=mem)
        print(mem.size, arr.copy_to_host().tolist())
    """ % (handle.handle,))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(" ", 1) == ["16", "%s\n" % list(range(16))]
    del handle


def test_open_ipc_handle_checks_its_arguments():
    ctx = cudamem.current_context()
    with pytest.raises(ValueError, match="64 bytes"):
        ctx.open_ipc_handle(b"x", 1)
    with pytest.raises(TypeError, match="size must be an int"):
        ctx.open_ipc_handle(bytes(64), "1")


# --- Device --------------------------------------------------------------

@pytest.mark.parametrize("cc, fp8, fp16", [
    ((8, 6), False, True), ((8, 9), True, True), ((9, 0), True, True),
    ((5, 2), False, False), ((5, 3), False, True),
])
def test_supports_fp8_and_float16_follow_numbas_thresholds(run_py, cc, fp8,
                                                           fp16):
    proc = run_py("""
        import cudamem
        d = cudamem.list_devices()[0]
        print(d.compute_capability, d.supports_fp8, d.supports_float16,
              d.accelerates_fp8)
    """, env={"CUDAMEM_SIM_ATTRS": "75=%d,76=%d" % cc})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "%s %s %s %s" % (cc, fp8, fp16, fp8)


def test_from_identity():
    for device in cudamem.list_devices():
        assert cudamem.Device.from_identity(
            device.get_device_identity()) is device
    identity = dict(cudamem.list_devices()[0].get_device_identity(),
                    pci_bus_id=9999)
    with pytest.raises(RuntimeError, match="No device of .* is found. "
                                           "Target device may not be "
                                           "visible in this process."):
        cudamem.Device.from_identity(identity)


# --- driver failures -------------------------------------------------------

@pytest.fixture
def faults():
    yield simulator
    simulator.clear_faults()


def test_pointer_range_failures(faults):
    from cudamem.cudadrv import driver
    d = cudamem.device_array(4)
    faults.inject("cuPointerGetAttributes", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError, match="cuPointerGetAttributes"):
        driver.device_extents(d)
    with pytest.raises(TypeError, match="must be an int"):
        cudamem._cudamem._pointer_range(1.0)
    with pytest.raises(ValueError, match="invalid device pointer"):
        cudamem._cudamem._pointer_range(-1)


def test_mempin_attribute_failure(faults):
    ctx = cudamem.current_context()
    a = np.zeros(2)
    faults.inject("cuDeviceGetAttribute", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError, match="cuDeviceGetAttribute"):
        ctx.mempin(a, a.ctypes.data, a.nbytes, mapped=True)


def test_from_identity_attribute_failure(faults):
    device = cudamem.list_devices()[0]
    faults.inject("cuDeviceGetAttribute", "CUDA_ERROR_UNKNOWN")
    with pytest.raises(CudaAPIError, match="cuDeviceGetAttribute"):
        cudamem.Device.from_identity(device.get_device_identity())


def test_context_switch_failures(run_py):
    proc = run_py("""
        import cudamem
        from cudamem import simulator
        cudamem.select_device(0)
        ctx1 = cudamem.list_devices()[1].get_primary_context()
        for call in ("cuCtxGetCurrent", "cuCtxPushCurrent",
                     "cuCtxPopCurrent"):
            simulator.inject(call, "CUDA_ERROR_UNKNOWN")
            try:
                ctx1.create_event()
            except cudamem.CudaAPIError as exc:
                print(exc.call)
            simulator.clear_faults()
        cudamem.close()
    """, env={"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cuCtxGetCurrent", "cuCtxPushCurrent",
                                   "cuCtxPopCurrent"]


def test_stale_context_refuses_the_methods():
    ctx = cudamem.current_context()
    ctx.device.reset()
    with pytest.raises(CudaDriverError):
        ctx.create_stream()
    with pytest.raises(CudaDriverError):
        ctx.memalloc(8)


def test_memory_pointer_is_device_memory_as_numba_s():
    ctx = cudamem.current_context()
    mp = ctx.memalloc(64)
    assert mp.__cuda_memory__ is True
    assert cudamem.cudadrv.driver.is_device_memory(mp)
    assert cudamem.cudadrv.driver.device_pointer(mp) == mp.device_pointer_value
    host = np.arange(64, dtype=np.uint8)
    cudamem.cudadrv.driver.host_to_device(mp, host, 64)
    back = np.zeros(64, np.uint8)
    cudamem.cudadrv.driver.device_to_host(back, mp, 64)
    np.testing.assert_array_equal(back, host)
