"""Page-locked host memory: numba's pinned and mapped arrays, and the
context managers and functions that page-lock existing arrays. Thin Python
over the C registry (one registration per page range, shared by
reference; register()'s own, by address and size, is py/hostbuf.c's):
nothing here imports NumPy or loads the driver at import."""
import contextlib

from cudamem import _cudamem
from cudamem.arrays import _check_like, _order_like, _strides_like

__all__ = ["pinned_array_like", "mapped_array_like",
           "register", "deregister", "pinned", "mapped"]

def pinned_array_like(ary):
    """pinned_array_like(ary) -> numpy.ndarray

    An uninitialized page-locked array with ``ary``'s shape and dtype,
    laid out as numba does: ``ary``'s order when it is contiguous, else
    contiguous strides that keep its axis order."""
    _check_like("pinned_array_like", ary)
    return _cudamem.pinned_array(ary.shape, dtype=ary.dtype,
                                 strides=_strides_like(ary),
                                 order=_order_like(ary))


def mapped_array_like(ary, stream=0, portable=False, wc=False):
    """mapped_array_like(ary, stream=0, portable=False, wc=False)
    -> MappedNDArray

    mapped_array() with ``ary``'s shape and dtype, laid out as
    pinned_array_like() does."""
    _check_like("mapped_array_like", ary)
    return _cudamem.mapped_array(ary.shape, dtype=ary.dtype,
                        strides=_strides_like(ary), order=_order_like(ary),
                        stream=stream, portable=portable, wc=wc)


class _Registration:
    """What register() returns: a context manager that deregisters, at
    exit, the arrays it registered that are still registered."""

    def __init__(self, buffers):
        self._buffers = buffers

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        buffers, self._buffers = self._buffers, []
        _cudamem._release(buffers)


def register(*arrays):
    """register(*arrays) -> context manager

    Page-locks every array until deregister() or the end of the ``with``
    block the result is used in (numba's ROC ``register``). Read-only
    arrays are registered read-only. Arrays sharing pages share the
    page-locking. Registering an array that is registered already (the
    same address and size) raises ValueError; on any error nothing is
    registered."""
    return _Registration(_cudamem._register(arrays))


def deregister(*arrays):
    """deregister(*arrays) -> None

    Ends what register() did for every array (numba's ROC
    ``deregister``). An array that is not registered raises ValueError
    before anything is deregistered."""
    _cudamem._deregister(arrays)


def _pin(arrays, mapped):
    """HostBuffers page-locking the arrays (with a device address when
    *mapped*): the current context's EMM plugin's mempin() for each
    (numba's Context.mempin) when it has one, else cudamem's registrations.
    All or none: what a failure leaves is released with the list."""
    manager = _cudamem._plugin_manager()
    if manager is None:
        return _cudamem._host_register(arrays, mapped=mapped)
    extents = [_cudamem._host_extent(ary) for ary in arrays]
    buffers = []
    for ary, (pointer, size) in zip(arrays, extents):
        buf = manager.mempin(ary, pointer, size, mapped=mapped)
        if not isinstance(buf, _cudamem.HostBuffer) or (
                mapped and buf.device is None):
            raise TypeError("%r.mempin(mapped=%r) returned %r, which is not "
                            "a %s" % (manager, mapped, buf,
                                      "MappedMemory" if mapped
                                      else "PinnedMemory"))
        buffers.append(buf)
    return buffers


@contextlib.contextmanager
def pinned(*arrays):
    """pinned(*arrays)

    A context manager that page-locks the arrays for the ``with`` block
    and unlocks them at its end, also on an exception (numba's
    ``pinned``). It nests, and memory already page-locked (a
    pinned_array(), a registered array, memory another library pinned) is
    fine. With an EMM plugin, its ``mempin()`` page-locks them."""
    buffers = _pin(arrays, False)
    try:
        yield
    finally:
        _cudamem._host_unregister(buffers)


@contextlib.contextmanager
def mapped(*arrays, stream=0):
    """mapped(*arrays, stream=0)

    A context manager that page-locks the arrays mapped into the current
    device's address space for the ``with`` block (numba's ``mapped``) and
    yields their device side: a DeviceNDArray over the same memory, or a
    list of them for several arrays. The device side of a read-only array
    is read-only too (its CUDA Array Interface and DLPack export say so,
    and writes through it raise ValueError). With an EMM plugin, its
    ``mempin(..., mapped=True)`` maps them."""
    buffers = _pin(arrays, True)
    try:
        devices = [_cudamem._host_device_array(ary, buf, stream=stream)
                   for ary, buf in zip(arrays, buffers)]
        yield devices[0] if len(devices) == 1 else devices
    finally:
        _cudamem._host_unregister(buffers)
