"""The ctypes types of cudamem's handles and pointers.

``Stream.handle``, ``Event.handle``, ``MemoryPointer.handle`` and the other
handle and pointer attributes are ctypes objects, as numba's were before
cuda-bindings: ``.value`` and passing them to ctypes functions work. numba's
are now cuda-bindings objects that convert with ``int()``; these do too,
and with ``operator.index()``, giving the address (0 for NULL). The
extension imports this module on first use (importing cudamem loads no
ctypes).
"""

import ctypes


class Handle(ctypes.c_void_p):
    """A handle or address: a ``ctypes.c_void_p`` that converts with
    ``int()`` and ``operator.index()`` (0 for NULL, whose ``.value`` is
    None) and compares equal to another handle of the same address."""

    def __int__(self) -> int:
        return self.value or 0

    __index__ = __int__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Handle):
            return NotImplemented
        return int(self) == int(other)

    def __hash__(self) -> int:
        return hash(int(self))

    def __repr__(self) -> str:
        return f"Handle({self.value})"


class DevicePointer(ctypes.c_size_t):
    """numba's ``device_ctypes_pointer``: a ``ctypes.c_size_t`` (``.value``
    is 0, not None, for NULL) that also converts with ``int()`` and
    ``operator.index()``."""

    def __int__(self) -> int:
        return int(self.value)

    __index__ = __int__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DevicePointer):
            return NotImplemented
        return int(self) == int(other)

    def __hash__(self) -> int:
        return hash(int(self))

    def __repr__(self) -> str:
        return f"DevicePointer({self.value})"


class StridedLayout:
    """The layout part of :class:`LaunchView`."""

    __slots__ = ("strides_in_bytes", "is_contiguous_c", "is_contiguous_f",
                 "is_contiguous_any")

    def __init__(self, strides: tuple, c: bool, f: bool) -> None:
        self.strides_in_bytes = strides
        self.is_contiguous_c = c
        self.is_contiguous_f = f
        self.is_contiguous_any = c or f


class LaunchView:
    """What numba-cuda's kernel launch reads from an argument that has
    ``__cuda_memory__`` (its ``_strided_memory_view_shim``): the address,
    shape, dtype, size and layout of a device-accessible array."""

    __slots__ = ("ptr", "shape", "dtype", "size", "_layout")

    def __init__(self, array) -> None:
        flags = array.flags
        self.ptr = int(array.device_ctypes_pointer.value or 0)
        self.shape = tuple(array.shape)
        self.dtype = array.dtype
        self.size = array.size
        self._layout = StridedLayout(tuple(array.strides),
                                     bool(flags["C_CONTIGUOUS"]),
                                     bool(flags["F_CONTIGUOUS"]))
