"""numba-cuda 0.30 parity of the EMM base classes, the version checks and
numba's environment variables.

References: numba-cuda 0.30's cudadrv/driver.py (BaseCUDAMemoryManager,
HostOnlyCUDAMemoryManager, utils.UniqueDict, _ensure_memory_manager),
cudadrv/runtime.py and device_init.py (is_supported_version), core/config.py
(NUMBA_CUDA_MEMORY_MANAGER); RMM's rmm/allocators/numba.py, copied into
tests/helpers/rmm_style_plugin.py; NumPy for the data.
"""
import gc
import pickle

import numpy as np
import pytest

import cudamem
from cudamem import HostOnlyCUDAMemoryManager
from cudamem.memory import (
    DefaultMemoryManager,
    NumbaCUDAMemoryManager,
    UniqueDict,
)
from tests.helpers.rmm_style_plugin import RMMNumbaManager
from tests.helpers.run import HELPERS

pytestmark = pytest.mark.simulator


class Minimal(HostOnlyCUDAMemoryManager):
    """The least a HostOnlyCUDAMemoryManager subclass defines."""

    def memalloc(self, size):
        raise NotImplementedError

    def initialize(self):
        pass

    def get_ipc_handle(self, memory):
        raise NotImplementedError

    def get_memory_info(self):
        raise NotImplementedError

    @property
    def interface_version(self):
        return 1


def _queue():
    return cudamem.current_context()._memory_deallocations


# --- the base classes --------------------------------------------------------

def test_unique_dict_refuses_a_rebound_key():
    # numba's utils.UniqueDict.
    d = UniqueDict()
    d[1] = "a"
    with pytest.raises(AssertionError, match="key already in dictionary: 1"):
        d[1] = "b"
    assert d == {1: "a"}
    del d[1]
    d[1] = "c"
    assert d == {1: "c"}


def test_the_context_is_a_keyword_as_in_numba():
    # numba's BaseCUDAMemoryManager.__init__: RuntimeError without
    # context=, other arguments ignored.
    with pytest.raises(RuntimeError, match="Memory manager requires a "
                                           "context"):
        Minimal()
    ctx = cudamem.current_context()
    assert Minimal(context=ctx, logging=True).context is ctx
    assert Minimal(context=None).context is None
    # set_memory_manager()'s dummy has numba's state too.
    assert Minimal(context=None).allocations == {}


def test_host_only_keeps_numba_allocations_and_deallocations():
    ctx = cudamem.current_context()
    a, b = Minimal(context=ctx), Minimal(context=ctx)
    assert type(a.allocations) is UniqueDict and a.allocations == {}
    assert a.allocations is not b.allocations
    # deallocations is the context's memory queue: a free joins it.
    queue = a.deallocations
    queue.clear()
    with cudamem.defer_cleanup():
        d = cudamem.device_array(10)
        del d
        assert (len(a.deallocations), a.deallocations.nbytes) == (1, 80)
        assert len(_queue()) == 1 and a.deallocations.is_disabled
    queue.clear()
    assert len(_queue()) == 0
    # A plugin may assign its own, as numba's attribute allows.
    mine = object()
    a.deallocations = mine
    assert a.deallocations is mine and b.deallocations is not mine
    with pytest.raises(RuntimeError, match="without a context"):
        Minimal(context=None).deallocations


def test_reset_clears_allocations_then_the_queue():
    # numba's HostOnlyCUDAMemoryManager.reset().
    mgr = Minimal(context=cudamem.current_context())
    kept = cudamem.device_array(4)
    mgr.allocations[1] = kept
    del kept
    _queue().clear()
    mgr.reset()
    assert mgr.allocations == {}
    assert len(_queue()) == 0


def test_defer_cleanup_disables_the_queue():
    mgr = Minimal(context=cudamem.current_context())
    with mgr.defer_cleanup():
        assert mgr.deallocations.is_disabled
        with mgr.defer_cleanup():
            pass
        assert mgr.deallocations.is_disabled
    assert not mgr.deallocations.is_disabled


def test_numba_cuda_memory_manager_is_the_default():
    assert NumbaCUDAMemoryManager is DefaultMemoryManager
    mgr = cudamem.current_context().memory_manager
    assert isinstance(mgr, NumbaCUDAMemoryManager)
    assert isinstance(mgr.allocations, UniqueDict)


# --- RMM's plugin -----------------------------------------------------------

def test_rmm_plugin_allocates_copies_and_frees_through_its_allocations(sim):
    host = np.arange(24.0).reshape(4, 6)
    with cudamem.using_memory_manager(RMMNumbaManager) as mgr:
        ctx = cudamem.current_context()
        d = cudamem.to_device(host)
        ptr = d.gpu_data.device_pointer_value
        assert list(mgr.allocations) == [ptr]
        e = cudamem.device_array_like(host)
        e.copy_to_device(d)
        np.testing.assert_array_equal(e.copy_to_host(), host)
        np.testing.assert_array_equal(d[1:3, ::2].copy_to_host(),
                                      host[1:3, ::2])
        d[0] = -1.0
        want = host.copy()
        want[0] = -1.0
        np.testing.assert_array_equal(d.copy_to_host(), want)
        assert len(mgr.allocations) == 2
        # numba's Context.get_memory_info() asks the plugin.
        with pytest.raises(NotImplementedError):
            ctx.get_memory_info()
        # The finalizer empties allocations; the buffer's free is
        # deferred in the context's queue, as numba's would be.
        _queue().clear()
        live = sim.live()["device_allocations"]
        del d
        gc.collect()
        assert ptr not in mgr.allocations and len(mgr.allocations) == 1
        assert (len(_queue()), _queue().nbytes) == (1, host.nbytes)
        assert sim.live()["device_allocations"] == live
        _queue().clear()
        assert sim.live()["device_allocations"] == live - 1
        del e


def test_rmm_plugin_frees_wait_for_defer_cleanup(sim):
    with cudamem.using_memory_manager(RMMNumbaManager) as mgr:
        _queue().clear()
        live = sim.live()["device_allocations"]
        with cudamem.defer_cleanup():
            for _ in range(15):  # past numba's count threshold of 10
                cudamem.device_array(8)
            assert mgr.allocations == {}
            assert len(_queue()) == 15
            assert sim.live()["device_allocations"] == live + 15
        _queue().clear()
        assert sim.live()["device_allocations"] == live


def test_rmm_plugin_reset_frees_what_allocations_held(sim):
    # numba's Context.reset() -> the plugin's reset(): allocations are
    # cleared, so their buffers go; RMM's finalizer guard then skips.
    with cudamem.using_memory_manager(RMMNumbaManager) as mgr:
        ctx = cudamem.current_context()
        _queue().clear()
        live = sim.live()["device_allocations"]
        d = cudamem.device_array(16)
        assert sim.live()["device_allocations"] == live + 1
        ctx.reset()
        assert mgr.allocations == {}
        assert sim.live()["device_allocations"] == live
        del d  # the finalizer finds allocations empty
        assert mgr.allocations == {}


def test_rmm_plugin_exports_ipc_handles(run_py):
    host = np.arange(12, dtype=np.int32)
    with cudamem.using_memory_manager(RMMNumbaManager):
        d = cudamem.to_device(host)
        view = d.gpu_data.view(8, 40)
        handle = cudamem.current_context().memory_manager.get_ipc_handle(
            view)
        assert (handle.size, handle.offset) == (32, 8)
        assert handle.source_info == \
            cudamem.get_current_device().get_device_identity()
        whole = d.get_ipc_handle()
        payload = pickle.dumps((handle, whole))
        proc = run_py("""
            import pickle
            import numpy as np
            import cudamem
            handle, whole = pickle.loads(%r)
            ctx = cudamem.current_context()
            a = handle.open_array(ctx, 8, np.int32)
            print(a.copy_to_host().tolist())
            handle.close()
            with whole as b:
                print(b.copy_to_host().tolist())
        """ % payload)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split("\n")[:2] == [str(host[2:10].tolist()),
                                               str(host.tolist())]
        del d, view, handle, whole


# --- version checks -------------------------------------------------------

def test_is_supported_version_is_numbas():
    # numba: runtime.get_version()[0] in (12, 13).
    want = cudamem.runtime.get_version()[0] in (12, 13)
    assert cudamem.is_supported_version() is want
    assert cudamem.runtime.is_supported_version() is want
    assert cudamem.runtime.runtime.is_supported_version() is want
    assert cudamem.runtime.runtime.get_version() == \
        cudamem.runtime.get_version()
    assert cudamem.runtime.SUPPORTED_TOOLKIT_MAJOR_VERSIONS == (12, 13)


def test_is_supported_version_on_the_toolkit_cudamem_was_built_with():
    # cudamem is built with a CUDA 12 or 13 toolkit: supported, so code
    # gating its GPU path on it (NeMo) keeps it.
    assert cudamem._cudamem.CUDA_VERSION // 1000 in (12, 13)
    if not cudamem.runtime.is_runtime_present():
        assert cudamem.is_supported_version() is True


def test_is_supported_version_follows_the_runtime(monkeypatch):
    from cudamem import runtime
    monkeypatch.setattr(runtime, "_cached", ((11, 8), True))
    assert cudamem.is_supported_version() is False
    assert runtime.runtime.is_supported_version() is False
    monkeypatch.setattr(runtime, "_cached", ((13, 0), True))
    assert cudamem.is_supported_version() is True


# --- numba's environment variables (fresh processes) ------------------------

_WHICH = """
    import numpy as np, cudamem
    d = cudamem.to_device(np.arange(3.0))
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(3.0))
    mgr = cudamem.current_context().memory_manager
    print(type(mgr).__name__, len(mgr.allocations))
"""


def _env(**variables):
    env = {"PYTHONPATH": HELPERS, "CUDAMEM_MEMORY_MANAGER": None,
           "NUMBA_CUDA_MEMORY_MANAGER": None}
    env.update(variables)
    return env


def test_numba_memory_manager_variable_names_the_plugin(run_py):
    # RMM's documentation: NUMBA_CUDA_MEMORY_MANAGER=<module with
    # _numba_memory_manager>.
    proc = run_py(_WHICH, env=_env(
        NUMBA_CUDA_MEMORY_MANAGER="rmm_style_plugin"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["RMMNumbaManager", "1"]


def test_cudamem_memory_manager_variable_wins(run_py):
    proc = run_py(_WHICH, env=_env(
        NUMBA_CUDA_MEMORY_MANAGER="rmm_style_plugin",
        CUDAMEM_MEMORY_MANAGER="default"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["DefaultMemoryManager", "0"]


def test_numba_memory_manager_variable_default_and_bad(run_py):
    proc = run_py(_WHICH, env=_env(NUMBA_CUDA_MEMORY_MANAGER="default"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["DefaultMemoryManager", "0"]
    proc = run_py(_WHICH, env=_env(
        NUMBA_CUDA_MEMORY_MANAGER="no_such_emm_module"))
    assert proc.returncode != 0
    assert ("RuntimeError: Failed to use memory manager from "
            "no_such_emm_module (set by NUMBA_CUDA_MEMORY_MANAGER)"
            in proc.stderr), proc.stderr


_RATIO = """
    import numpy as np, cudamem
    queue = cudamem.current_context().memory_manager.deallocations
    total = cudamem.current_context().get_memory_info().total
    d = cudamem.device_array(int(total * 0.5), dtype=np.uint8)
    del d
    print(len(queue))
"""


@pytest.mark.parametrize("env,pending", [
    # numba flushes when the bytes pending exceed total * ratio.
    ({}, "0"),
    ({"NUMBA_CUDA_MAX_PENDING_DEALLOCS_RATIO": "0.6"}, "1"),
    ({"NUMBA_CUDA_MAX_PENDING_DEALLOCS_RATIO": "0.6",
      "CUDAMEM_MAX_PENDING_DEALLOCS_RATIO": "0.2"}, "0"),
])
def test_pending_ratio_from_numba_variable(run_py, env, pending):
    full = {"CUDAMEM_MAX_PENDING_DEALLOCS_RATIO": None,
            "NUMBA_CUDA_MAX_PENDING_DEALLOCS_RATIO": None}
    full.update(env)
    proc = run_py(_RATIO, env=full)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == pending


def test_cudamem_pending_count_wins_over_numbas(run_py):
    proc = run_py("""
        import numpy as np, cudamem
        queue = cudamem.current_context().memory_manager.deallocations
        counts = []
        for i in range(6):
            cudamem.to_device(np.arange(1))
            counts.append(len(queue))
        print(counts)
    """, env={"NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT": "2",
              "CUDAMEM_MAX_PENDING_DEALLOCS_COUNT": "4"})
    assert proc.returncode == 0, proc.stderr
    # numba: flush once the count exceeds the limit (strictly).
    assert proc.stdout.strip() == "[1, 2, 3, 4, 0, 1]"
