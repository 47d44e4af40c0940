"""Several devices: the documented example (docs/examples/multigpu.py) on
two simulated devices with and without peer access, and copies between
devices without peer access staged through page-locked host memory.

Each test runs in a fresh process with CUDAMEM_SIM_DEVICES=2. The
simulator's per entry point counters show which copies were made; the API
trace (CUDAMEM_LOG=api) shows that the host side of both legs of a staged
copy lies in memory cudamem registered, never in pageable memory. Staging
buffers come from the host pool (tests/hostmem/test_hostpool.py): they stay
registered for the next copy until the pool is trimmed.
"""
import json
import os
import re

import pytest

from tests.helpers.run import ROOT, run_python

pytestmark = pytest.mark.simulator

EXAMPLE = os.path.join(ROOT, "docs", "examples", "multigpu.py")


def _env(peer, **extra):
    env = {"CUDAMEM_SIM_DEVICES": "2", "CUDA_VISIBLE_DEVICES": None,
           "CUDAMEM_SIM_NO_PEER": None if peer else "1"}
    env.update(extra)
    return env


def _run(code, env):
    proc = run_python(code, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("peer", [True, False])
def test_example(peer):
    proc = _run("""
        import json, runpy, sys
        from cudamem import simulator
        runpy.run_path(%r, run_name="__main__")
        calls = simulator.stats()["calls"]
        print(json.dumps({k: calls[k]["calls"] for k in
                          ("cuMemcpyPeer", "cuMemcpyPeerAsync",
                           "cuMemHostRegister")}))
        """ % os.path.abspath(EXAMPLE), _env(peer))
    lines = proc.stdout.splitlines()
    assert lines[0] == "devices: 2; peer access 0 <-> 1: %s" % peer
    assert lines[-2] == "ok"
    calls = json.loads(lines[-1])
    peer_calls = calls["cuMemcpyPeer"] + calls["cuMemcpyPeerAsync"]
    if peer:
        assert peer_calls == 3
    else:
        # Staging buffers come from the host pool: of the three copies
        # (128 KiB, 256 KiB, 128 KiB) the third reuses the first's
        # page-locked block.
        assert peer_calls == 0 and calls["cuMemHostRegister"] == 2


_STAGED = """
    import json
    import numpy as np
    import cudamem
    from cudamem import simulator
    with cudamem.gpus[1]:
        far = cudamem.to_device(np.arange(10000.0))
    near = cudamem.device_array(5000)
    cudamem.reset_peak_stats(1)
    stream = cudamem.stream() if %(on_stream)r else 0
    before = simulator.stats()["calls"]
    # Strided: made C-ordered on device 1 first, by the local engine.
    near.copy_to_device(far[::2], stream=stream)
    after = simulator.stats()["calls"]
    # The staging buffer went back to the host pool, still registered (an
    # asynchronous copy waited for its stream first); a trim frees it.
    live = simulator.live()
    assert live["registrations"] == 1, live
    assert cudamem.memory_stats(1)["pinned_pool_cached_count"] == 1
    cudamem._cudamem._hostpool_trim()
    live = simulator.live()
    assert live["registrations"] == 0, live
    assert (near.copy_to_host() == np.arange(10000.0)[::2]).all()
    print(json.dumps({
        "calls": {k: after[k]["calls"] - before[k]["calls"] for k in after
                  if after[k]["calls"] != before[k]["calls"]},
        "pinned_peak": cudamem.memory_stats(1)["pinned_count_peak"],
    }))
    """


@pytest.mark.parametrize("on_stream", [False, True])
def test_staged_copy_goes_through_page_locked_memory(on_stream):
    proc = _run(_STAGED % {"on_stream": on_stream},
                _env(False, CUDAMEM_LOG="api"))
    out = json.loads(proc.stdout.splitlines()[-1])
    calls = out["calls"]
    assert "cuMemcpyPeer" not in calls and "cuMemcpyPeerAsync" not in calls
    assert calls["cuMemHostRegister"] == 1
    assert "cuMemHostUnregister" not in calls
    assert out["pinned_peak"] == 1
    assert sum(n for k, n in calls.items()
               if k.startswith("cuMemcpyDtoH")) == 1
    h2d = "cuMemcpyHtoDAsync" if on_stream else "cuMemcpyHtoD"
    assert calls[h2d] == 1
    # The host side of both legs lies in the registered range.
    trace = proc.stderr
    reg = re.search(r"cuMemHostRegister\([^=]*=(\w+), [^=]*=(\w+),", trace)
    lo, size = int(reg.group(1), 0), int(reg.group(2), 0)
    legs = []
    for line in trace.splitlines():
        leg = re.search(r"cuMemcpy(DtoH\w*)\(hdst=(\w+)|"
                        r"cuMemcpy(HtoD\w*)\([^,]*, hsrc=(\w+)", line)
        if leg:
            name = leg.group(1) or leg.group(3)
            legs.append((name, int(leg.group(2) or leg.group(4), 0)))
    # Between the upload of `far` and the final download, every transfer
    # was a leg of the staged copy, in the registered range.
    staged = legs[1:-1]
    assert sorted(n for n, _ in staged) == sorted(
        ["DtoH", h2d[len("cuMemcpy"):]])
    assert all(lo <= a < lo + size for _, a in staged), (hex(lo), staged)
    assert size >= 8 * 5000


def test_staging_failure_leaves_nothing():
    _run("""
        import numpy as np
        import cudamem
        from cudamem import simulator
        from cudamem.errors import CudaAPIError
        with cudamem.gpus[1]:
            far = cudamem.to_device(np.arange(100.0))
        near = cudamem.device_array(100)
        live = simulator.live()
        simulator.inject("cuMemHostRegister", "CUDA_ERROR_UNKNOWN")
        try:
            near.copy_to_device(far)
        except CudaAPIError as exc:
            assert exc.call == "cuMemHostRegister", exc
        else:
            raise SystemExit("no error")
        assert simulator.live() == live, (simulator.live(), live)
        near.copy_to_device(far)
        assert (near.copy_to_host() == np.arange(100.0)).all()
        # The staging buffer waits in the host pool until trimmed.
        cudamem._cudamem._hostpool_trim()
        assert simulator.live() == live
        """, _env(False))


@pytest.mark.parametrize("peer", [True, False])
def test_from_dlpack_across_devices(peer):
    # A tensor on device 1 imported onto device 0: zero-copy on its own
    # device, a copy (peer or staged) when another is asked for, and
    # copy=False refused with the devices named.
    proc = _run("""
        import numpy as np
        import cudamem
        h = np.arange(3000.0).reshape(30, 100)
        with cudamem.gpus[1]:
            far = cudamem.to_device(h)
        same = cudamem.from_dlpack(far)
        assert same.device_ctypes_pointer.value == \\
            far.device_ctypes_pointer.value
        assert same.__dlpack_device__() == (2, 1)
        near = cudamem.from_dlpack(far[::3, 1::2], device=0)
        assert near.__dlpack_device__() == (2, 0)
        assert near.device_ctypes_pointer.value != \\
            far.device_ctypes_pointer.value
        np.testing.assert_array_equal(near.copy_to_host(), h[::3, 1::2])
        try:
            cudamem.from_dlpack(far, device=0, copy=False)
        except BufferError as exc:
            assert "device 0" in str(exc), exc
        else:
            raise AssertionError("copy=False made a copy")
        print("ok")
        """, _env(peer))
    assert proc.stdout.splitlines()[-1] == "ok"
