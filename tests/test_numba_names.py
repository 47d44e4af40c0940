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
