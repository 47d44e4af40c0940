"""Exceptions and warnings raised by cudamem.

The names and the ``CudaAPIError`` wording follow numba.cuda, so code that
catches numba's exceptions by name keeps working after ``import cudamem as
cuda``. Every exception pickles with its attributes.
"""

__all__ = [
    "CudaSupportError",
    "CudaDriverError",
    "CudaAPIError",
    "CudaOutOfMemoryError",
    "CudaStickyError",
    "CudaWarning",
]


class CudaSupportError(ImportError):
    """CudaSupportError

    CUDA cannot be used: no driver, the toolkit's stub, too old, or cuInit
    failed. Raised by the first call that needs the driver, and again by every
    later one."""


class CudaDriverError(Exception):
    """CudaDriverError

    A misuse of the driver that is not a failed call, such as using CUDA
    in a child of a process that initialized it."""


class CudaAPIError(CudaDriverError):
    """CudaAPIError(code, call, name=None, hint=None)

    A driver call failed. ``code`` is the ``CUresult``, ``name`` its
    ``CUDA_ERROR_*`` name and ``call`` the driver entry point. ``hint``,
    when cudamem knows why the call failed (an event made with
    ``timing=False``), is appended to the message."""

    def __init__(self, code, call, name=None, hint=None):
        if hint is None:
            super().__init__(code, call, name)
        else:
            super().__init__(code, call, name, hint)
        self.code = code
        self.call = call
        self.name = name if name is not None else "CUDA_ERROR_%d" % code
        self.hint = hint

    def __str__(self):
        text = "[%d] Call to %s results in %s" % (self.code, self.call,
                                                  self.name)
        return text if self.hint is None else "%s: %s" % (text, self.hint)


class CudaOutOfMemoryError(CudaAPIError):
    """CudaOutOfMemoryError(code, call, name=None, requested=None, free=None,
    total=None, pending=None, pool_cached=None, limit=None, pool_used=None,
    held=None)

    An allocation failed for lack of device memory even after pending frees
    were flushed. The byte counts say what was asked for and what was there.
    When the limit of a PoolMemoryManager refused it rather than the device,
    ``call`` is None, ``limit`` is that limit and ``pool_used`` the bytes of
    the pool's blocks in use. When ``set_memory_limit()``'s limit refused
    it, no driver call was made: ``call`` is None, ``limit`` is that limit
    and ``held`` the bytes cudamem held from the driver on the device.
    """

    def __init__(self, code, call, name=None, requested=None, free=None,
                 total=None, pending=None, pool_cached=None, limit=None,
                 pool_used=None, held=None):
        super().__init__(code, call, name)
        self.args = (code, call, name, requested, free, total, pending,
                     pool_cached, limit, pool_used, held)
        self.requested = requested
        self.free = free
        self.total = total
        self.pending = pending
        self.pool_cached = pool_cached
        self.limit = limit
        self.pool_used = pool_used
        self.held = held

    def __str__(self):
        if self.held is not None:
            return ("[%d] %s: requested %d bytes with %d bytes held, beyond "
                    "the memory limit of %d bytes (set_memory_limit); %d "
                    "bytes pending release, %d cached by the pool; the "
                    "device has %d of %d bytes free" % (
                        self.code, self.name, self.requested or 0,
                        self.held, self.limit or 0, self.pending or 0,
                        self.pool_cached or 0, self.free or 0,
                        self.total or 0))
        if self.limit is not None:
            return ("[%d] %s: requested %d bytes beyond the pool's limit of "
                    "%d bytes (%d bytes in use and %d cached by the pool); "
                    "the device has %d of %d bytes free, %d pending "
                    "release" % (
                        self.code, self.name, self.requested or 0,
                        self.limit, self.pool_used or 0,
                        self.pool_cached or 0, self.free or 0,
                        self.total or 0, self.pending or 0))
        text = super().__str__()
        if self.requested is None:
            return text
        return ("%s: requested %d bytes; %d of %d bytes free, %d pending "
                "release, %d cached by the pool" % (
                    text, self.requested, self.free or 0, self.total or 0,
                    self.pending or 0, self.pool_cached or 0))


class CudaStickyError(CudaAPIError):
    """CudaStickyError(code, call, name=None, device=None)

    The context hit an error that leaves it unusable (an illegal address,
    a failed launch, an uncorrectable ECC error): every later call in it
    fails with the same error, and the process must be restarted to use
    the device again. ``device`` is the ordinal of the poisoned device
    when known. cudamem then fails fast: every later operation on that
    device raises this error again without calling the driver (see
    ``context_is_poisoned``)."""

    def __init__(self, code, call, name=None, device=None):
        super().__init__(code, call, name)
        self.args = (code, call, name, device)
        self.device = device

    def __str__(self):
        where = ("the CUDA context" if self.device is None else
                 "the CUDA context of device %d" % self.device)
        return ("%s: %s is unusable after this error; restart the process "
                "to use CUDA again" % (super().__str__(), where))


class CudaWarning(UserWarning):
    """CudaWarning

    Something failed where raising was impossible (a finalizer, a callback,
    shutdown)."""
