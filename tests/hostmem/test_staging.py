"""The staging pipeline (DESIGN section 4): large contiguous copies between
pageable host memory and the device go through pooled pinned buffers in
chunks, double-buffered; page-locked memory bypasses it.

NumPy is the reference for data; the simulator's call counters show how a
copy was made and, with CUDAMEM_SIM_DELAY_US, that chunk k + 1 is queued
while chunk k is still in flight, and that Ctrl-C stops a copy between
chunks. The tunables come from the environment (CUDAMEM_STAGING_*), reread
by _cudamem._staging_reload()."""
import _thread
import signal
import threading
import time

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem
from cudamem.errors import CudaAPIError

THRESHOLD = 64 << 10
CHUNK = 16 << 10


@pytest.fixture
def staging(monkeypatch):
    """Small tunables, so that tests stay fast; the defaults afterwards."""
    def set_(threshold=THRESHOLD, chunk=CHUNK, threads=4, prefault=1):
        monkeypatch.setenv("CUDAMEM_STAGING_THRESHOLD", str(threshold))
        monkeypatch.setenv("CUDAMEM_STAGING_CHUNK", str(chunk))
        monkeypatch.setenv("CUDAMEM_STAGING_THREADS", str(threads))
        monkeypatch.setenv("CUDAMEM_STAGING_PREFAULT", str(prefault))
        return _cudamem._staging_reload()
    set_()
    yield set_
    monkeypatch.undo()
    _cudamem._staging_reload()


def calls(sim, name):
    return sim.stats()["calls"][name]["calls"]


def chunks(n, chunk=CHUNK):
    """The chunks of a staged copy: at least two, of whole pages."""
    half = -(-((n + 1) // 2) // 4096) * 4096
    size = min(chunk, half)
    return -(-n // size)


SIZES = [THRESHOLD, THRESHOLD + 1, 5 * CHUNK - 1, 5 * CHUNK, 5 * CHUNK + 1,
         200001]


def test_defaults_and_bad_values(monkeypatch):
    assert _cudamem._staging_reload() == {
        "threshold": 4 << 20, "chunk": 4 << 20, "threads": 4,
        "prefault": True}
    monkeypatch.setenv("CUDAMEM_STAGING_CHUNK", "5000")
    monkeypatch.setenv("CUDAMEM_STAGING_THREADS", "0")
    monkeypatch.setenv("CUDAMEM_STAGING_THRESHOLD", "lots")
    monkeypatch.setenv("CUDAMEM_STAGING_PREFAULT", "2")
    cfg = _cudamem._staging_reload()
    monkeypatch.setenv("CUDAMEM_STAGING_PREFAULT", "0")
    off = _cudamem._staging_reload()["prefault"]
    monkeypatch.undo()
    _cudamem._staging_reload()
    # The chunk is rounded up to whole pages; the rest keep the defaults.
    assert cfg == {"threshold": 4 << 20, "chunk": 8192, "threads": 4,
                   "prefault": True}
    assert off is False


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("on_stream", [False, True])
def test_to_device_is_exact_in_chunks(sim, staging, n, on_stream):
    src = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    stream = cudamem.stream() if on_stream else 0
    sim.reset()
    d = cudamem.to_device(src, stream=stream)
    # Complete on return, like the driver's own pageable copies: the
    # source may be reused at once.
    src_copy = src.copy()
    src[:] = 0
    assert calls(sim, "cuMemcpyHtoDAsync") == chunks(n)
    assert calls(sim, "cuMemcpyHtoD") == 0
    got = d.copy_to_host()
    if on_stream:
        stream.synchronize()  # the copy back is queued on d's stream
    np.testing.assert_array_equal(got, src_copy)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("on_stream", [False, True])
def test_copy_to_host_is_exact_in_chunks(sim, staging, n, on_stream):
    src = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    d = cudamem.to_device(src)
    out = np.full(n, 7, np.uint8)
    stream = cudamem.stream() if on_stream else 0
    sim.reset()
    d.copy_to_host(out, stream=stream)
    assert calls(sim, "cuMemcpyDtoHAsync") == chunks(n)
    assert calls(sim, "cuMemcpyDtoH") == 0
    np.testing.assert_array_equal(out, src)


@pytest.mark.parametrize("prefault", [0, 1])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("fresh", [False, True])
def test_copy_to_host_with_and_without_prefault(sim, staging, prefault,
                                                threads, fresh):
    # CUDAMEM_STAGING_PREFAULT=0 skips the workers' touch of each chunk's
    # destination pages; either way every byte arrives, into a fresh
    # (unfaulted) destination or a written one, with the workers or not.
    cfg = staging(threshold=4 << 20, chunk=2 << 20, threads=threads,
                  prefault=prefault)
    assert cfg["prefault"] is bool(prefault)
    n = (9 << 20) + 5
    src = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    d = cudamem.to_device(src)
    sim.reset()
    if fresh:
        out = d.copy_to_host()
    else:
        out = np.full(n, 7, np.uint8)
        d.copy_to_host(out)
    assert calls(sim, "cuMemcpyDtoHAsync") == chunks(n, 2 << 20)
    np.testing.assert_array_equal(out, src)


def test_workers_split_large_chunks(sim, staging):
    staging(threshold=4 << 20, chunk=2 << 20, threads=3)
    n = (9 << 20) + 3
    src = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    sim.reset()
    d = cudamem.to_device(src)
    back = d.copy_to_host()
    assert calls(sim, "cuMemcpyHtoDAsync") == 5
    assert calls(sim, "cuMemcpyDtoHAsync") == 5
    np.testing.assert_array_equal(back, src)


def test_typed_arrays_and_device_setitem(staging):
    ref = np.arange(50000, dtype=np.float64).reshape(250, 200)
    d = cudamem.to_device(ref)
    np.testing.assert_array_equal(d.copy_to_host(), ref)
    d.copy_to_device(ref[::-1].copy())
    np.testing.assert_array_equal(d.copy_to_host(), ref[::-1])


def test_below_threshold_is_one_direct_copy(sim, staging):
    src = np.arange(THRESHOLD - 1, dtype=np.uint8)
    sim.reset()
    d = cudamem.to_device(src)
    d.copy_to_host()
    assert calls(sim, "cuMemcpyHtoD") == calls(sim, "cuMemcpyDtoH") == 1
    assert calls(sim, "cuMemcpyHtoDAsync") == 0
    assert calls(sim, "cuMemcpyDtoHAsync") == 0


def test_page_locked_memory_bypasses_staging(sim, staging):
    pinned = cudamem.pinned_array(THRESHOLD * 2, np.uint8)
    pinned[:] = np.arange(pinned.size) % 251
    pageable = np.arange(THRESHOLD * 2, dtype=np.uint8)
    sim.reset()
    # cudamem's pinned and registered memory (the registry).
    d = cudamem.to_device(pinned)
    d.copy_to_host(pinned)
    with cudamem.pinned(pageable):
        cudamem.to_device(pageable).copy_to_host(pageable)
    assert calls(sim, "cuMemcpyHtoD") == calls(sim, "cuMemcpyDtoH") == 2
    assert calls(sim, "cuMemcpyHtoDAsync") == 0
    assert calls(sim, "cuMemcpyDtoHAsync") == 0
    np.testing.assert_array_equal(d.copy_to_host(), pinned)


def test_staging_off(sim, staging):
    staging(threshold=0)
    sim.reset()
    cudamem.to_device(np.zeros(THRESHOLD * 4, np.uint8)).copy_to_host()
    assert calls(sim, "cuMemcpyHtoD") == calls(sim, "cuMemcpyDtoH") == 1


def test_buffers_are_pooled_and_reused(sim, staging):
    src = np.arange(THRESHOLD, dtype=np.uint8)
    _cudamem._hostpool_trim()
    sim.reset()
    for _ in range(3):
        cudamem.to_device(src).copy_to_host()
    assert calls(sim, "cuMemHostRegister") == 2
    stats = _cudamem._hostpool_stats()
    assert stats["cached_blocks"] == 2
    # Two events per copy, none left.
    assert calls(sim, "cuEventCreate") == calls(sim, "cuEventDestroy") == 12


# Every driver call the pipeline makes, and the count of successful calls
# of it before the one that fails (a failure in the middle of the chunks
# too): the error names the call, nothing leaks (the autouse fixture), and
# the next copy works.
FAULTS = [("cuDeviceGetAttribute", 0), ("cuPointerGetAttributes", 0),
          ("cuPointerGetAttributes", 1), ("cuMemHostRegister", 0),
          ("cuMemHostRegister", 1), ("cuEventCreate", 0),
          ("cuEventCreate", 1), ("cuEventRecord", 0), ("cuEventRecord", 2),
          ("cuEventSynchronize", 0), ("cuEventSynchronize", 2)]


@pytest.mark.parametrize("direction", ["htod", "dtoh"])
@pytest.mark.parametrize("entry, after", FAULTS + [("copy", 0), ("copy", 3)])
def test_fault_at_every_step(sim, staging, direction, entry, after):
    n = 5 * CHUNK + 1
    src = np.arange(n, dtype=np.uint8)
    d = cudamem.to_device(np.zeros(n, np.uint8))
    out = np.zeros(n, np.uint8)
    _cudamem._hostpool_trim()
    _cudamem._staging_reload()  # the device attribute is read again
    if entry == "copy":
        entry = ("cuMemcpyHtoDAsync" if direction == "htod"
                 else "cuMemcpyDtoHAsync")
    sim.inject(entry, "CUDA_ERROR_UNKNOWN", after=after)
    with pytest.raises(CudaAPIError) as info:
        if direction == "htod":
            d.copy_to_device(src)
        else:
            d.copy_to_host(out)
    assert info.value.call == entry
    sim.clear_faults()
    d.copy_to_device(src)
    d.copy_to_host(out)
    np.testing.assert_array_equal(out, src)


def test_chunk_k_plus_1_is_queued_while_chunk_k_is_in_flight(sim, staging):
    """Device to host on a stream with every stream operation delayed by
    0.2 s: the DMA of chunk 1 is queued before the host copies chunk 0
    out (that waits for chunk 0's DMA, so for its delay). A copy that
    waited for each chunk before queueing the next would have written
    chunk 0 by the time the second DMA shows in the counters."""
    n = 4 * CHUNK
    src = np.arange(n, dtype=np.uint8) % 251 + 1
    d = cudamem.to_device(src)
    out = np.zeros(n, np.uint8)
    stream = cudamem.stream()
    sim.reset()
    seen = {}

    def copy():
        d.copy_to_host(out, stream=stream)

    with sim.delay(200000):
        worker = threading.Thread(target=copy)
        worker.start()
        while calls(sim, "cuMemcpyDtoHAsync") < 2 and worker.is_alive():
            pass
        # Byte 1 of chunk 0: not a page start, which the workers touch.
        seen["chunk0"] = int(out[1])
        seen["done"] = not worker.is_alive()
        worker.join()
    assert seen == {"chunk0": 0, "done": False}
    np.testing.assert_array_equal(out, src)


def test_host_to_device_waits_only_to_reuse_a_buffer(sim, staging):
    """Host to device in four chunks: the host waits for chunk 0's DMA
    before refilling buffer 0 with chunk 2, for chunk 1's before chunk 3,
    and for the last chunk before returning; never for a chunk it has just
    queued."""
    n = 4 * CHUNK
    src = np.arange(n, dtype=np.uint8) % 251 + 1
    d = cudamem.device_array(n, np.uint8)
    sim.reset()
    with sim.delay(2000):
        d.copy_to_device(src, stream=cudamem.stream())
    assert calls(sim, "cuMemcpyHtoDAsync") == 4
    assert calls(sim, "cuEventRecord") == 4
    assert calls(sim, "cuEventSynchronize") == 3
    assert calls(sim, "cuStreamSynchronize") == 0
    np.testing.assert_array_equal(d.copy_to_host(), src)


def test_device_that_reads_pageable_memory_bypasses_staging(sim, run_py):
    """CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES
    (100): the device reads pageable memory through the host's page
    tables, so the driver's own copy needs no staging."""
    code = """
        import numpy as np, cudamem
        from cudamem import simulator as sim
        src = np.arange(1 << 17, dtype=np.uint8)
        sim.reset()
        back = cudamem.to_device(src).copy_to_host()
        calls = sim.stats()["calls"]
        print(calls["cuMemcpyHtoD"]["calls"], calls["cuMemcpyDtoH"]["calls"],
              calls["cuMemcpyHtoDAsync"]["calls"], (back == src).all())
        """
    env = {"CUDAMEM_STAGING_THRESHOLD": str(THRESHOLD),
           "CUDAMEM_STAGING_CHUNK": str(CHUNK)}
    staged = run_py(code, env=env)
    direct = run_py(code, env=dict(env, CUDAMEM_SIM_ATTRS="100=1"))
    assert staged.returncode == direct.returncode == 0, (staged.stderr,
                                                         direct.stderr)
    assert staged.stdout.split() == ["0", "0", "8", "True"]
    assert direct.stdout.split() == ["1", "1", "0", "True"]


def _interrupt(how):
    if how == "interrupt_main":
        _thread.interrupt_main()  # as if SIGINT had arrived
    else:
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


@pytest.mark.parametrize("how", ["interrupt_main", "SIGINT"])
@pytest.mark.parametrize("direction", ["htod", "dtoh", "to_device"])
@pytest.mark.parametrize("on_stream", [False, True])
def test_ctrl_c_stops_a_copy_between_chunks(sim, staging, how, direction,
                                            on_stream):
    """Ctrl-C while a staged copy runs (every stream operation delayed, so
    that its 64 chunks take seconds): KeyboardInterrupt, raised after the
    chunk in flight, not at the end. Fewer chunks were issued than the
    copy needs, the chunks queued were waited for before both buffers went
    back to the pool, and the next copy is exact."""
    n = 64 * CHUNK
    src = np.arange(n, dtype=np.uint8) % 251 + 1
    d = cudamem.to_device(np.zeros(n, np.uint8))
    out = np.zeros(n, np.uint8)
    stream = cudamem.stream() if on_stream else 0
    entry = "cuMemcpyDtoHAsync" if direction == "dtoh" else (
        "cuMemcpyHtoDAsync")
    copies = {"htod": lambda: d.copy_to_device(src, stream=stream),
              "dtoh": lambda: d.copy_to_host(out, stream=stream),
              "to_device": lambda: cudamem.to_device(src, stream=stream)}
    _cudamem._hostpool_trim()
    sim.reset()
    finished = threading.Event()

    def interrupter():
        # Once the first chunk is queued: the main thread is in the copy.
        while calls(sim, entry) == 0 and not finished.is_set():
            time.sleep(0.001)
        if not finished.is_set():
            _interrupt(how)

    thread = threading.Thread(target=interrupter)
    with sim.delay(20000):
        thread.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                copies[direction]()
        finally:
            finished.set()
            thread.join()
        issued = calls(sim, entry)
    assert 0 < issued < chunks(n)
    # Both buffers are back in the pool, both events destroyed; the
    # autouse fixture sees nothing else left.
    assert _cudamem._hostpool_stats()["cached_blocks"] == 2
    assert calls(sim, "cuEventCreate") == calls(sim, "cuEventDestroy") == 2
    d.copy_to_device(src, stream=stream)
    d.copy_to_host(out, stream=stream)
    np.testing.assert_array_equal(out, src)
