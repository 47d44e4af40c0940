"""Array constructors written in Python on top of the C ones: the layout
rules numba applies in Python, which are not on a hot path."""
from cudamem import _cudamem

__all__ = ["device_array_like", "managed_array_like"]


def _strides_like(ary):
    """numba's _contiguous_strides_like_array: None when the default order
    gives a contiguous layout, else strides that keep ``ary``'s axis order
    (NumPy's PyArray_NewLikeArrayWithShape)."""
    flags = ary.flags
    if flags["C_CONTIGUOUS"] or flags["F_CONTIGUOUS"] or ary.ndim <= 1:
        return None
    perm = sorted(range(ary.ndim), key=lambda i: ary.strides[i])
    strides = [0] * ary.ndim
    step = ary.dtype.itemsize
    for i in perm:
        strides[i] = step
        step *= ary.shape[i]
    return tuple(strides)


def _order_like(ary):
    flags = ary.flags
    return "F" if flags["F_CONTIGUOUS"] and not flags["C_CONTIGUOUS"] else "C"


def _check_like(fname, ary):
    if not all(hasattr(ary, name) for name in ("shape", "dtype", "flags",
                                                "strides", "ndim")):
        raise TypeError("%s() needs a NumPy or device array, not %s"
                        % (fname, type(ary).__name__))


def device_array_like(ary, stream=0):
    """device_array_like(ary, stream=0) -> DeviceNDArray

    An uninitialized device array with ``ary``'s shape and dtype, laid out
    as numba does: ``ary``'s order when it is contiguous, else contiguous
    strides that keep its axis order. ``ary`` is a NumPy or device array."""
    _check_like("device_array_like", ary)
    return _cudamem.device_array(ary.shape, dtype=ary.dtype,
                                 strides=_strides_like(ary),
                                 order=_order_like(ary), stream=stream)


def managed_array_like(ary, stream=0, attach_global=True):
    """managed_array_like(ary, stream=0, attach_global=True) -> ManagedNDArray

    An uninitialized managed array with ``ary``'s shape and dtype, laid out
    as device_array_like() lays out a device array."""
    _check_like("managed_array_like", ary)
    return _cudamem.managed_array(ary.shape, dtype=ary.dtype,
                                  strides=_strides_like(ary),
                                  order=_order_like(ary), stream=stream,
                                  attach_global=attach_global)
