"""One adapter per library the runners measure: cudamem and its peers
(numba-cuda, CuPy, PyTorch, cuda.core, and raw cuda.bindings for
``benchmarks.peers``), each doing the runner's operations
with that library's own documented calls. Timing, rotation and output are
the runner's (runner.py); an adapter only builds the calls to time.

Every operation method returns a list of zero-argument callables (one per
rotating buffer, each doing one complete call) or raises Unsupported; what
must be undone afterwards is queued with ``self.defer`` and run by
``cleanup()``. Every timed call is complete on return: a library whose copy
is asynchronous is followed by its stream's synchronize.
"""
import importlib

import numpy as np

# The strided slice of floor.c: ROWS rows of WIDTH bytes out of PITCH-byte
# rows (a 2-D device-to-host copy of 128 KiB).
ROWS, WIDTH, PITCH = 256, 512, 4096


class Unsupported(Exception):
    """The library has no documented call for this operation."""


class Adapter:
    name = ""
    module = ""

    def __init__(self):
        self._deferred = []
        self.lib = None

    def defer(self, fn):
        self._deferred.append(fn)

    def cleanup(self):
        while self._deferred:
            self._deferred.pop()()

    def load(self):
        self.lib = importlib.import_module(self.module)
        self.setup()

    def setup(self):
        pass

    def version(self):
        root = importlib.import_module(self.module.split(".")[0])
        return str(getattr(root, "__version__", "?"))

    def host(self, nbytes, memory):
        """A uint8 host array of nbytes in pageable, pinned or registered
        memory."""
        if memory == "pageable":
            return np.ones(nbytes, np.uint8)
        if memory == "pinned":
            return self.pinned(nbytes)
        ary = np.ones(nbytes, np.uint8)
        self.register(ary)
        return ary

    def pinned(self, nbytes):
        raise Unsupported("no pinned host arrays")

    def register(self, ary):
        raise Unsupported("no host registration")

    # Operations (see the module docstring).
    def alloc(self, nbytes, pool, nbuf):
        raise Unsupported("no allocation")

    def alloc_async(self, nbytes, nbuf):
        raise Unsupported("no stream-ordered allocator measured")

    def copy(self, direction, memory, nbytes, nbuf):
        raise Unsupported("no copies")

    def slice2d(self, memory, nbuf):
        raise Unsupported("no strided 2-D copy")

    def cai_export(self, nbuf):
        raise Unsupported("no __cuda_array_interface__ export")

    def cai_import(self, nbuf):
        raise Unsupported("no __cuda_array_interface__ import")

    def event_record_query(self, nbuf):
        raise Unsupported("no events")

    def stream_create(self, nbuf):
        raise Unsupported("no streams")

    def to_device(self, nbytes, nbuf):
        """A new device array holding a copy of an existing pageable host
        array (and its release)."""
        raise Unsupported("no copy of a host array into a new device array")

    def synchronize(self, nbuf):
        """Synchronize the current context with nothing pending."""
        raise Unsupported("no context synchronize")

    # Bandwidth: device events on the default stream around the copies.
    def timer(self):
        """(start, stop) where stop() returns the seconds since start() as
        the library's device events measured them."""
        raise Unsupported("no timing events")

    def bandwidth(self, memory, max_bytes):
        """(htod(n), dtoh(n)) copying the first n bytes of one host and one
        device buffer of max_bytes."""
        raise Unsupported("no copies")


def _cai_holders(dev_arrays):
    """Plain objects exposing each array's __cuda_array_interface__ without
    a stream, so that importers parse it without synchronizing."""
    out = []
    for d in dev_arrays:
        cai = dict(d.__cuda_array_interface__)
        cai.pop("stream", None)
        holder = type("CAIHolder", (), {})()
        holder.__cuda_array_interface__ = cai
        holder.keep = d
        out.append(holder)
    return out


class CudamemAdapter(Adapter):
    name = "cudamem"
    module = "cudamem"

    def setup(self):
        self.dev = self.lib.get_current_device()

    def version(self):
        return self.lib.__version__

    def pinned(self, nbytes):
        return self.lib.pinned_array(nbytes, np.uint8)

    def register(self, ary):
        self.lib.register(ary)
        self.defer(lambda: self.lib.deregister(ary))

    def alloc(self, nbytes, pool, nbuf):
        cuda = self.lib
        if pool:
            cm = cuda.using_memory_manager(cuda.PoolMemoryManager)
            cm.__enter__()
            self.defer(lambda: cm.__exit__(None, None, None))
        return [lambda: cuda.device_array(nbytes, np.uint8)] * nbuf

    def alloc_async(self, nbytes, nbuf):
        cuda = self.lib
        cm = cuda.using_memory_manager(cuda.AsyncMemoryManager)
        cm.__enter__()
        self.defer(lambda: cm.__exit__(None, None, None))
        return [lambda: cuda.device_array(nbytes, np.uint8)] * nbuf

    def copy(self, direction, memory, nbytes, nbuf):
        fns = []
        for _ in range(nbuf):
            h = self.host(nbytes, memory)
            d = self.lib.device_array(nbytes, np.uint8)
            if direction == "htod":
                fns.append(lambda d=d, h=h: d.copy_to_device(h))
            else:
                fns.append(lambda d=d, h=h: d.copy_to_host(h))
        return fns

    def slice2d(self, memory, nbuf):
        fns = []
        for _ in range(nbuf):
            h = self.host(ROWS * WIDTH, memory).reshape(ROWS, WIDTH)
            d = self.lib.device_array((ROWS, PITCH), np.uint8)[:, :WIDTH]
            fns.append(lambda d=d, h=h: d.copy_to_host(h))
        return fns

    def cai_export(self, nbuf):
        arrays = [self.lib.device_array(4096, np.uint8) for _ in range(nbuf)]
        return [lambda d=d: d.__cuda_array_interface__ for d in arrays]

    def cai_import(self, nbuf):
        holders = _cai_holders(
            [self.lib.device_array(4096, np.uint8) for _ in range(nbuf)])
        conv = self.lib.as_cuda_array
        return [lambda o=o: conv(o) for o in holders]

    def event_record_query(self, nbuf):
        s = self.lib.stream()
        events = [self.lib.event(timing=False) for _ in range(nbuf)]
        return [lambda e=e: (e.record(s), e.query()) for e in events]

    def stream_create(self, nbuf):
        return [self.lib.stream] * nbuf

    def to_device(self, nbytes, nbuf):
        conv = self.lib.to_device
        hosts = [np.ones(nbytes, np.uint8) for _ in range(nbuf)]
        return [lambda h=h: conv(h) for h in hosts]

    def synchronize(self, nbuf):
        return [self.lib.synchronize] * nbuf

    def timer(self):
        cuda = self.lib
        e0, e1 = cuda.event(), cuda.event()

        def stop():
            e1.record()
            e1.synchronize()
            return cuda.event_elapsed_time(e0, e1) / 1e3
        return e0.record, stop

    def bandwidth(self, memory, max_bytes):
        h = self.host(max_bytes, memory)
        d = self.lib.device_array(max_bytes, np.uint8)
        return (lambda n: d[:n].copy_to_device(h[:n]),
                lambda n: d[:n].copy_to_host(h[:n]))


class NumbaAdapter(Adapter):
    """numba-cuda: the API cudamem mirrors, so the calls are the same."""
    name = "numba-cuda"
    module = "numba.cuda"

    def setup(self):
        self.lib.get_current_device()

    def version(self):
        try:
            return importlib.import_module("numba_cuda").__version__
        except ImportError:
            return super().version()

    def pinned(self, nbytes):
        return self.lib.pinned_array(nbytes, np.uint8)

    def register(self, ary):
        cm = self.lib.pinned(ary)
        cm.__enter__()
        self.defer(lambda: cm.__exit__(None, None, None))

    def alloc(self, nbytes, pool, nbuf):
        if pool:
            raise Unsupported("numba-cuda has no built-in pool manager")
        cuda = self.lib
        return [lambda: cuda.device_array(nbytes, np.uint8)] * nbuf

    copy = CudamemAdapter.copy
    cai_export = CudamemAdapter.cai_export
    cai_import = CudamemAdapter.cai_import
    event_record_query = CudamemAdapter.event_record_query
    stream_create = CudamemAdapter.stream_create
    to_device = CudamemAdapter.to_device
    synchronize = CudamemAdapter.synchronize
    timer = CudamemAdapter.timer
    bandwidth = CudamemAdapter.bandwidth

    def slice2d(self, memory, nbuf):
        # numba's copy_to_host of a non-contiguous view copies the view's
        # whole extent into a new host array; no out= of another layout.
        if memory != "pageable":
            raise Unsupported("numba copies strided views only into a new "
                              "pageable array")
        fns = []
        for _ in range(nbuf):
            d = self.lib.device_array((ROWS, PITCH), np.uint8)[:, :WIDTH]
            fns.append(d.copy_to_host)
        return fns


class CupyAdapter(Adapter):
    name = "cupy"
    module = "cupy"

    def _sync(self):
        self.lib.cuda.get_current_stream().synchronize()

    def pinned(self, nbytes):
        return importlib.import_module("cupyx").empty_pinned(nbytes,
                                                              np.uint8)

    def register(self, ary):
        rt = self.lib.cuda.runtime
        rt.hostRegister(ary.ctypes.data, ary.nbytes, 0)
        self.defer(lambda: rt.hostUnregister(ary.ctypes.data))

    def alloc(self, nbytes, pool, nbuf):
        cp = self.lib
        if not pool:
            # Documented: set_allocator(None) disables the memory pool.
            cp.cuda.set_allocator(None)
            self.defer(lambda: cp.cuda.set_allocator(
                cp.get_default_memory_pool().malloc))
        return [lambda: cp.empty(nbytes, np.uint8)] * nbuf

    def alloc_async(self, nbytes, nbuf):
        cp = self.lib
        # Documented: MemoryAsyncPool allocates with cudaMallocAsync on the
        # current stream.
        cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
        self.defer(lambda: cp.cuda.set_allocator(
            cp.get_default_memory_pool().malloc))
        return [lambda: cp.empty(nbytes, np.uint8)] * nbuf

    def copy(self, direction, memory, nbytes, nbuf):
        fns = []
        for _ in range(nbuf):
            h = self.host(nbytes, memory)
            d = self.lib.empty(nbytes, np.uint8)
            if direction == "htod":
                fns.append(lambda d=d, h=h: (d.set(h), self._sync()))
            else:
                fns.append(lambda d=d, h=h: d.get(out=h))
        return fns

    def slice2d(self, memory, nbuf):
        fns = []
        for _ in range(nbuf):
            h = self.host(ROWS * WIDTH, memory).reshape(ROWS, WIDTH)
            d = self.lib.empty((ROWS, PITCH), np.uint8)[:, :WIDTH]
            fns.append(lambda d=d, h=h: d.get(out=h))
        return fns

    def cai_export(self, nbuf):
        arrays = [self.lib.empty(4096, np.uint8) for _ in range(nbuf)]
        return [lambda d=d: d.__cuda_array_interface__ for d in arrays]

    def cai_import(self, nbuf):
        holders = _cai_holders(
            [self.lib.empty(4096, np.uint8) for _ in range(nbuf)])
        return [lambda o=o: self.lib.asarray(o) for o in holders]

    def event_record_query(self, nbuf):
        s = self.lib.cuda.Stream(non_blocking=True)
        events = [self.lib.cuda.Event(disable_timing=True)
                  for _ in range(nbuf)]
        return [lambda e=e: (e.record(s), e.done) for e in events]

    def stream_create(self, nbuf):
        return [self.lib.cuda.Stream] * nbuf

    def synchronize(self, nbuf):
        return [self.lib.cuda.Device().synchronize] * nbuf

    def timer(self):
        cuda = self.lib.cuda
        e0, e1 = cuda.Event(), cuda.Event()

        def stop():
            e1.record()
            e1.synchronize()
            return cuda.get_elapsed_time(e0, e1) / 1e3
        return e0.record, stop

    def bandwidth(self, memory, max_bytes):
        h = self.host(max_bytes, memory)
        d = self.lib.empty(max_bytes, np.uint8)
        return (lambda n: d[:n].set(h[:n]),
                lambda n: d[:n].get(out=h[:n]))


class TorchAdapter(Adapter):
    name = "pytorch"
    module = "torch"

    def setup(self):
        self.lib.cuda.init()

    def _tensors(self, nbytes, memory):
        torch = self.lib
        h = torch.from_numpy(self.host(nbytes, memory))
        return h, torch.empty(nbytes, dtype=torch.uint8, device="cuda")

    def pinned(self, nbytes):
        t = self.lib.empty(nbytes, dtype=self.lib.uint8, pin_memory=True)
        return t.numpy()

    def register(self, ary):
        rt = self.lib.cuda.cudart()
        rc = rt.cudaHostRegister(ary.ctypes.data, ary.nbytes, 0)
        if int(rc) != 0:
            raise RuntimeError("cudaHostRegister failed: %s" % (rc,))
        self.defer(lambda: rt.cudaHostUnregister(ary.ctypes.data))

    def alloc(self, nbytes, pool, nbuf):
        torch = self.lib
        # The caching allocator is PyTorch's default and its pool; it can
        # only be turned off before CUDA starts (PYTORCH_NO_CUDA_MEMORY_
        # CACHING), so both rows measure it.
        return [lambda: torch.empty(nbytes, dtype=torch.uint8,
                                    device="cuda")] * nbuf

    def copy(self, direction, memory, nbytes, nbuf):
        fns = []
        for _ in range(nbuf):
            h, d = self._tensors(nbytes, memory)
            if direction == "htod":
                fns.append(lambda d=d, h=h: d.copy_(h))
            else:
                fns.append(lambda d=d, h=h: h.copy_(d))
        return fns

    def slice2d(self, memory, nbuf):
        torch = self.lib
        fns = []
        for _ in range(nbuf):
            h = torch.from_numpy(
                self.host(ROWS * WIDTH, memory).reshape(ROWS, WIDTH))
            d = torch.empty((ROWS, PITCH), dtype=torch.uint8,
                            device="cuda")[:, :WIDTH]
            fns.append(lambda d=d, h=h: h.copy_(d))
        return fns

    def cai_export(self, nbuf):
        torch = self.lib
        ts = [torch.empty(4096, dtype=torch.uint8, device="cuda")
              for _ in range(nbuf)]
        return [lambda t=t: t.__cuda_array_interface__ for t in ts]

    def cai_import(self, nbuf):
        torch = self.lib
        holders = _cai_holders(
            [torch.empty(4096, dtype=torch.uint8, device="cuda")
             for _ in range(nbuf)])
        return [lambda o=o: torch.as_tensor(o, device="cuda")
                for o in holders]

    def event_record_query(self, nbuf):
        cuda = self.lib.cuda
        s = cuda.Stream()
        events = [cuda.Event() for _ in range(nbuf)]
        return [lambda e=e: (e.record(s), e.query()) for e in events]

    def stream_create(self, nbuf):
        return [self.lib.cuda.Stream] * nbuf

    def synchronize(self, nbuf):
        return [self.lib.cuda.synchronize] * nbuf

    def timer(self):
        cuda = self.lib.cuda
        e0 = cuda.Event(enable_timing=True)
        e1 = cuda.Event(enable_timing=True)

        def stop():
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1) / 1e3
        return e0.record, stop

    def bandwidth(self, memory, max_bytes):
        h, d = self._tensors(max_bytes, memory)
        return (lambda n: d[:n].copy_(h[:n]),
                lambda n: h[:n].copy_(d[:n]))


class CudaCoreAdapter(Adapter):
    """cuda.core: Buffers and explicit streams; it has no pageable or
    strided copies and no __cuda_array_interface__."""
    name = "cuda.core"
    module = "cuda.core"

    def load(self):
        try:
            self.lib = importlib.import_module("cuda.core")
            self.lib.Device
        except (ImportError, AttributeError):
            self.lib = importlib.import_module("cuda.core.experimental")
        self.dev = self.lib.Device()
        self.dev.set_current()
        self.stream = self.dev.create_stream()

    def version(self):
        return str(getattr(importlib.import_module("cuda.core"),
                           "__version__", "?"))

    def _event(self, timing):
        # The option's name changed between releases.
        try:
            return self.dev.create_event({"timing_enabled": timing})
        except (TypeError, ValueError):
            return self.dev.create_event({"enable_timing": timing})

    def _pinned_buffer(self, nbytes):
        return self.lib.LegacyPinnedMemoryResource().allocate(nbytes)

    def alloc(self, nbytes, pool, nbuf):
        if not pool:
            raise Unsupported("cuda.core allocates only from the driver's "
                              "stream-ordered pool")
        return self.alloc_async(nbytes, nbuf)

    def alloc_async(self, nbytes, nbuf):
        dev, s = self.dev, self.stream

        def one():
            dev.allocate(nbytes, stream=s).close(s)
        return [one] * nbuf

    def copy(self, direction, memory, nbytes, nbuf):
        if memory != "pinned":
            raise Unsupported("cuda.core copies only between Buffers")
        s = self.stream
        fns = []
        for _ in range(nbuf):
            h = self._pinned_buffer(nbytes)
            d = self.dev.allocate(nbytes, stream=s)
            if direction == "htod":
                fns.append(lambda d=d, h=h: (d.copy_from(h, stream=s),
                                             s.sync()))
            else:
                fns.append(lambda d=d, h=h: (d.copy_to(h, stream=s),
                                             s.sync()))
        return fns

    def event_record_query(self, nbuf):
        s = self.stream
        events = [self._event(False) for _ in range(nbuf)]
        return [lambda e=e: (s.record(e), e.is_done) for e in events]

    def stream_create(self, nbuf):
        dev = self.dev
        return [lambda: dev.create_stream().close()] * nbuf

    def synchronize(self, nbuf):
        return [self.dev.sync] * nbuf

    def timer(self):
        s = self.stream
        e0, e1 = self._event(True), self._event(True)

        def stop():
            s.record(e1)
            e1.sync()
            return (e1 - e0) / 1e3
        return lambda: s.record(e0), stop

    def bandwidth(self, memory, max_bytes):
        if memory != "pinned":
            raise Unsupported("cuda.core copies only between Buffers")
        # A Buffer cannot be sliced: one pair per size, made on first use.
        s = self.stream
        pairs = {}

        def pair(n):
            if n not in pairs:
                pairs[n] = (self._pinned_buffer(n),
                            self.dev.allocate(n, stream=s))
            return pairs[n]
        return (lambda n: pair(n)[1].copy_from(pair(n)[0], stream=s),
                lambda n: pair(n)[1].copy_to(pair(n)[0], stream=s))


class BindingsAdapter(Adapter):
    """Raw cuda.bindings: the driver API one call at a time, the call
    sequences of floor.c on device 0's primary context, each result checked
    as floor.c checks it."""
    name = "cuda.bindings"
    module = "cuda.bindings.driver"

    def version(self):
        return str(importlib.import_module("cuda.bindings").__version__)

    def setup(self):
        drv = self.lib
        _ck(drv.cuInit(0), "cuInit")
        dev = _ck(drv.cuDeviceGet(0), "cuDeviceGet")
        ctx = _ck(drv.cuDevicePrimaryCtxRetain(dev),
                  "cuDevicePrimaryCtxRetain")
        _ck(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.stream = _ck(drv.cuStreamCreate(0), "cuStreamCreate")

    def _dev(self, nbytes):
        drv = self.lib
        d = _ck(drv.cuMemAlloc(nbytes), "cuMemAlloc")
        self.defer(lambda: _ck(drv.cuMemFree(d), "cuMemFree"))
        return d

    def alloc(self, nbytes, pool, nbuf):
        if pool:
            raise Unsupported("floor.c's calls have no pool")
        alloc, free = self.lib.cuMemAlloc, self.lib.cuMemFree

        def one():
            err, d = alloc(nbytes)
            if err or free(d)[0]:
                raise RuntimeError("cuMemAlloc/cuMemFree failed")
        return [one] * nbuf

    def alloc_async(self, nbytes, nbuf):
        alloc, free = self.lib.cuMemAllocAsync, self.lib.cuMemFreeAsync
        s = self.stream

        def one():
            err, d = alloc(nbytes, s)
            if err or free(d, s)[0]:
                raise RuntimeError("cuMemAllocAsync/cuMemFreeAsync failed")
        return [one] * nbuf

    def copy(self, direction, memory, nbytes, nbuf):
        drv = self.lib
        fns = []
        for _ in range(nbuf):
            if memory == "pageable":
                keep = np.ones(nbytes, np.uint8)
                h = keep.ctypes.data
            elif memory == "pinned":
                h = keep = _ck(drv.cuMemHostAlloc(nbytes, 0),
                               "cuMemHostAlloc")
                self.defer(lambda h=h: _ck(drv.cuMemFreeHost(h),
                                           "cuMemFreeHost"))
            else:
                raise Unsupported("registered copies are not timed here")
            d = self._dev(nbytes)
            if direction == "htod":
                fns.append(_checked(drv.cuMemcpyHtoD, d, h, nbytes, keep))
            else:
                fns.append(_checked(drv.cuMemcpyDtoH, h, d, nbytes, keep))
        return fns

    def to_device(self, nbytes, nbuf):
        drv = self.lib
        alloc, copy, free = drv.cuMemAlloc, drv.cuMemcpyHtoD, drv.cuMemFree

        def one(h):
            err, d = alloc(nbytes)
            if err or copy(d, h, nbytes)[0] or free(d)[0]:
                raise RuntimeError("cuMemAlloc/cuMemcpyHtoD/cuMemFree "
                                   "failed")
        hosts = [np.ones(nbytes, np.uint8) for _ in range(nbuf)]
        self.defer(hosts.clear)
        return [lambda p=h.ctypes.data: one(p) for h in hosts]

    def event_record_query(self, nbuf):
        drv = self.lib
        flags = drv.CUevent_flags.CU_EVENT_DISABLE_TIMING
        record, query = drv.cuEventRecord, drv.cuEventQuery
        not_ready = drv.CUresult.CUDA_ERROR_NOT_READY
        s = self.stream
        fns = []
        for _ in range(nbuf):
            e = _ck(drv.cuEventCreate(flags), "cuEventCreate")
            self.defer(lambda e=e: _ck(drv.cuEventDestroy(e),
                                       "cuEventDestroy"))

            def one(e=e):
                if record(e, s)[0]:
                    raise RuntimeError("cuEventRecord failed")
                err = query(e)[0]
                if err and err != not_ready:
                    raise RuntimeError("cuEventQuery: %s" % (err,))
            fns.append(one)
        return fns

    def stream_create(self, nbuf):
        create, destroy = self.lib.cuStreamCreate, self.lib.cuStreamDestroy

        def one():
            err, s = create(0)
            if err or destroy(s)[0]:
                raise RuntimeError("cuStreamCreate/cuStreamDestroy failed")
        return [one] * nbuf

    def synchronize(self, nbuf):
        sync = self.lib.cuCtxSynchronize

        def one():
            if sync()[0]:
                raise RuntimeError("cuCtxSynchronize failed")
        return [one] * nbuf


def _checked(entry, dst, src, nbytes, keep):
    """One copy through entry, checked inline as floor.c's CHECK does;
    keep holds the host array alive."""
    def one(keep=keep):
        if entry(dst, src, nbytes)[0]:
            raise RuntimeError("%s failed" % entry.__name__)
    return one


def _ck(result, call):
    """The value of a cuda.bindings call's (CUresult, value...) tuple;
    RuntimeError naming the call when it failed."""
    if result[0]:
        raise RuntimeError("%s failed: %s" % (call, result[0]))
    return result[1] if len(result) > 1 else None


PEERS = (NumbaAdapter, CupyAdapter, TorchAdapter, CudaCoreAdapter)
