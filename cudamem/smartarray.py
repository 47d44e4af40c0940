"""SmartArray: numba's array that lives on the host and on the device and
moves its data only when the other side changed. Pure Python bookkeeping
over cudamem's public transfer API (to_device, copy_to_host,
copy_to_device, device_array); it makes no copy of its own. NumPy is
imported when first needed, not with cudamem."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cudamem import _cudamem
from cudamem.arrays import device_array_like

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from cudamem._cudamem import DeviceNDArray, _StreamArg

__all__ = ["SmartArray"]

_WHERE = ("host", "gpu")
_KDL_CPU = 1
_KDL_CUDA = 2


def _np() -> Any:
    import numpy
    return numpy


def _check_where(where: object) -> None:
    if where not in _WHERE:
        raise ValueError("where must be 'host' or 'gpu', not %r" % (where,))


class _ReadOnly:
    """`base`'s CUDA Array Interface marked read-only: as_cuda_array() of
    it gives a read-only view, as cudamem's CAI import does."""

    def __init__(self, base: DeviceNDArray) -> None:
        self.base = base

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        desc = dict(self.base.__cuda_array_interface__)
        desc["data"] = (desc["data"][0], True)
        return desc


def _wait(stream: _StreamArg) -> None:
    """Waits for the work queued on `stream` (stream 0 is synchronous)."""
    if stream is None or isinstance(stream, int):
        return  # 0 (None): the only int stream cudamem takes
    event = _cudamem.event(timing=False)
    event.record(stream)
    event.synchronize()


def _host_of(x: Any) -> Any:
    """x with every SmartArray in it (in lists and tuples too) replaced by
    its host array, brought up to date."""
    if isinstance(x, SmartArray):
        return x.host()
    if isinstance(x, (list, tuple)):
        return type(x)(_host_of(y) for y in x)
    return x


def _disables_ufuncs(x: object) -> bool:
    return getattr(type(x), "__array_ufunc__", False) is None


def _binary(name: str) -> Callable[[SmartArray, Any], Any]:
    def op(self: SmartArray, other: Any) -> Any:
        if _disables_ufuncs(other):
            return NotImplemented
        return getattr(_np(), name)(self, other)
    op.__name__ = name
    return op


def _reflected(name: str) -> Callable[[SmartArray, Any], Any]:
    def op(self: SmartArray, other: Any) -> Any:
        if _disables_ufuncs(other):
            return NotImplemented
        return getattr(_np(), name)(other, self)
    op.__name__ = name
    return op


def _inplace(name: str) -> Callable[[SmartArray, Any], SmartArray]:
    def op(self: SmartArray, other: Any) -> SmartArray:
        return getattr(_np(), name)(self, other, out=(self,))  # type: ignore
    op.__name__ = name
    return op


def _unary(name: str) -> Callable[[SmartArray], Any]:
    def op(self: SmartArray) -> Any:
        return getattr(_np(), name)(self)
    op.__name__ = name
    return op


# NumPy functions that write into one of their arguments: its name.
_WRITES_ARGUMENT = {"copyto": "dst", "put": "a", "place": "arr",
                    "putmask": "a", "fill_diagonal": "a",
                    "put_along_axis": "arr"}
# numpy.ndarray methods that write into the array.
_WRITES_SELF = {"fill", "sort", "put", "partition", "itemset", "setfield",
                "byteswap"}


class SmartArray:
    """SmartArray(obj=None, copy=True, shape=None, dtype=None, order=None,
    where='host', stream=0)

    An array with a host side (a NumPy array) and a device side (a
    DeviceNDArray) that copies between them only when the side asked for
    is out of date. Made from ``obj`` (anything ``numpy.asarray`` takes, or
    a device array: anything with ``__cuda_array_interface__``), adopted
    with ``copy=False``, or allocated uninitialized from ``shape``,
    ``dtype`` and ``order`` ('C' or 'F'). ``where`` ('host' or 'gpu') says
    where the data is placed first; the other side is made when first
    asked for. ``stream`` orders this array's transfers (0: the legacy
    default stream, synchronous)."""

    def __init__(self, obj: Any = None, copy: bool = True,
                 shape: Any = None, dtype: npt.DTypeLike | None = None,
                 order: str | None = None, where: str = "host", *,
                 stream: _StreamArg = 0) -> None:
        _check_where(where)
        if order not in (None, "C", "F"):
            raise ValueError("order must be 'C', 'F' or None, not %r"
                             % (order,))
        _cudamem._parse_stream(stream)
        self._stream: _StreamArg = 0 if stream is None else stream
        self._host: np.ndarray[Any, Any] | None = None
        self._gpu: DeviceNDArray | None = None
        self._host_valid = self._gpu_valid = False
        self._readonly = False
        if obj is None:
            if shape is None:
                raise TypeError("SmartArray() needs obj or shape")
            if where == "host":
                self._host = _np().empty(shape, dtype, order or "C")
                self._host_valid = True
            else:
                self._gpu = _cudamem.device_array(
                    shape, "f8" if dtype is None else dtype,
                    order=order or "C", stream=self._stream)
                self._gpu_valid = True
            return
        if shape is not None:
            raise TypeError("SmartArray() takes obj or shape, not both "
                            "(shape=%r)" % (shape,))
        if isinstance(obj, SmartArray):
            if not copy:
                raise ValueError("copy=False cannot adopt a SmartArray: "
                                 "two SmartArrays would track one memory")
            obj = obj.get(where)
        if _cudamem.is_cuda_array(obj):
            self._init_device(obj, copy, dtype, order, where)
        else:
            self._init_host(obj, copy, dtype, order, where)

    def _init_host(self, obj: Any, copy: bool,
                   dtype: npt.DTypeLike | None,
                   order: str | None, where: str) -> None:
        np = _np()
        if copy and where == "host":
            host = np.array(obj, dtype=dtype, order=order or "K", copy=True)
        else:
            # Adopted, or only the source of the device copy.
            host = np.asarray(obj, dtype=dtype, order=order)
        if host.dtype.hasobject:
            raise TypeError("SmartArray() cannot hold dtype %s: Python "
                            "objects cannot live in device memory"
                            % host.dtype)
        self._readonly = not copy and not host.flags.writeable
        if where == "gpu":
            self._gpu = self._to_device(host, self._stream)
            self._gpu_valid = True
            if copy:
                return
        self._host = host
        self._host_valid = True

    def _init_device(self, obj: Any, copy: bool,
                     dtype: npt.DTypeLike | None,
                     order: str | None, where: str) -> None:
        src = _cudamem.as_cuda_array(obj)
        if dtype is not None and _np().dtype(dtype) != src.dtype:
            raise ValueError("dtype %s differs from the device array's %s: "
                             "SmartArray() converts no data on the device"
                             % (_np().dtype(dtype), src.dtype))
        if copy:
            if order is None:
                gpu = device_array_like(  # type: ignore[no-untyped-call]
                    src, stream=self._stream)
            else:
                gpu = _cudamem.device_array(src.shape, src.dtype,
                                            order=order, stream=self._stream)
            gpu.copy_to_device(src, stream=self._stream)
        else:
            if order is not None and not src.flags[order + "_CONTIGUOUS"]:
                raise ValueError("copy=False adopts the device array as it "
                                 "is, which is not %r-contiguous" % order)
            gpu = src
            self._readonly = bool(src.__cuda_array_interface__["data"][1])
        self._gpu = gpu
        self._gpu_valid = True
        if where == "host":
            self.host()

    def _to_device(self, host: np.ndarray[Any, Any],
                   stream: _StreamArg) -> DeviceNDArray:
        gpu = _cudamem.to_device(host, stream=stream)
        if self._readonly:
            gpu = _cudamem.as_cuda_array(_ReadOnly(gpu))
        return gpu

    # -- the two sides -----------------------------------------------------

    def get(self, where: str = "host",
            stream: _StreamArg | None = None) -> Any:
        """get(where='host', stream=None)

        The array on ``where`` ('host' or 'gpu'), copied there first if
        the other side changed; see host() and gpu()."""
        _check_where(where)
        return self.host(stream) if where == "host" else self.gpu(stream)

    def host(self, stream: _StreamArg | None = None) -> npt.NDArray[Any]:
        """host(stream=None) -> numpy.ndarray

        The host array, copied from the device first if the device side
        changed; the copy is queued on ``stream`` (None: this array's)
        and complete on return. Call host_changed() after writing to it."""
        if not self._host_valid:
            assert self._gpu is not None
            stream = self._stream if stream is None else stream
            if self._host is None:
                host = self._gpu.copy_to_host(stream=stream)
                _wait(stream)
                host.flags.writeable = not self._readonly
                self._host = host
            else:
                self._gpu.copy_to_host(self._host, stream=stream)
                _wait(stream)
            self._host_valid = True
        assert self._host is not None
        return self._host

    def gpu(self, stream: _StreamArg | None = None) -> DeviceNDArray:
        """gpu(stream=None) -> DeviceNDArray

        The device array, copied from the host first if the host side
        changed; the copy is queued on ``stream`` (None: this array's).
        Call gpu_changed() after a kernel wrote to it."""
        if not self._gpu_valid:
            assert self._host is not None
            stream = self._stream if stream is None else stream
            if self._gpu is None:
                self._gpu = self._to_device(self._host, stream)
            else:
                self._gpu.copy_to_device(self._host, stream=stream)
            self._gpu_valid = True
        assert self._gpu is not None
        return self._gpu

    def mark_changed(self, where: str = "host") -> None:
        """mark_changed(where='host')

        Says that the data on ``where`` changed: the other side is copied
        again when next asked for. The side must be up to date when it is
        written (ValueError otherwise, as for a read-only array)."""
        _check_where(where)
        if self._readonly:
            raise ValueError("mark_changed(%r): this SmartArray of shape %s "
                             "is read-only" % (where, self.shape))
        if not (self._host_valid if where == "host" else self._gpu_valid):
            raise ValueError(
                "mark_changed(%r): the %s side of this SmartArray is out of "
                "date, so writes to it were made over stale data; call "
                "%s() before writing" % (where, where, where))
        if where == "host":
            self._gpu_valid = False
        else:
            self._host_valid = False

    def host_changed(self) -> None:
        """host_changed()

        Says that the host array was written: the device copy is made
        again when next asked for."""
        self.mark_changed("host")

    def gpu_changed(self) -> None:
        """gpu_changed()

        Says that the device array was written: the host copy is made
        again when next asked for."""
        self.mark_changed("gpu")

    # -- attributes --------------------------------------------------------

    def _any(self) -> Any:
        return self._host if self._host is not None else self._gpu

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return tuple(self._any().shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The array's dtype."""
        return self._any().dtype  # type: ignore[no-any-return]

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return int(self._any().ndim)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(self._any().size)

    @property
    def itemsize(self) -> int:
        """The size of an element in bytes."""
        return int(self._any().itemsize)

    @property
    def nbytes(self) -> int:
        """The size of the data in bytes."""
        return int(self._any().nbytes)

    @property
    def strides(self) -> tuple[int, ...]:
        """The host array's strides; the device array's until there is a
        host array."""
        return tuple(self._any().strides)

    @property
    def stream(self) -> _StreamArg:
        """The stream this array's transfers are queued on by default."""
        return self._stream

    def __getattr__(self, name: str) -> Any:
        # numba's SmartArray forwards other attributes to the host array.
        # Names NumPy arrays lack are refused before anything is copied;
        # resize would leave the device array of the old shape.
        if (name.startswith("_") or name == "resize"
                or not hasattr(_np().ndarray, name)):
            raise AttributeError("'SmartArray' object has no attribute %r"
                                 % name)
        attr = getattr(self.host(), name)
        if name not in _WRITES_SELF:
            return attr

        def write(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            self._gpu_valid = False
            return result
        return write

    def __copy__(self) -> SmartArray:
        # As copy.copy() of a NumPy array: a copy of the data (from the
        # side that is current), not a second tracker of the same memory.
        return SmartArray(self, where="host" if self._host_valid else "gpu",
                          stream=self._stream)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        sides = " and ".join(w for w, ok in zip(
            _WHERE, (self._host_valid, self._gpu_valid)) if ok)
        return "<SmartArray of shape %s and dtype %s, current on %s>" % (
            self.shape, self.dtype, sides)

    def __str__(self) -> str:
        return str(self.host())

    # -- the host side: NumPy's protocols ------------------------------------

    def __array__(self, dtype: npt.DTypeLike | None = None,
                  copy: bool | None = None) -> npt.NDArray[Any]:
        np = _np()
        host = self.host()
        if copy:
            return np.array(host, dtype=dtype, copy=True)  # type: ignore
        if dtype is None or np.dtype(dtype) == host.dtype:
            return host
        if copy is False:
            raise ValueError("__array__(dtype=%s, copy=False): the host "
                             "array is %s, so a copy is needed"
                             % (np.dtype(dtype), host.dtype))
        return host.astype(dtype)

    def __getitem__(self, key: Any) -> Any:
        return self.host()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.host()[key] = _host_of(value)
        self._gpu_valid = False

    def __iter__(self) -> Any:
        return iter(self.host())

    def __contains__(self, value: Any) -> bool:
        return value in self.host()

    def __bool__(self) -> bool:
        return bool(self.host())

    def __int__(self) -> int:
        return int(self.host())

    def __float__(self) -> float:
        return float(self.host())

    def __complex__(self) -> complex:
        return complex(self.host())

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any,
                        **kwargs: Any) -> Any:
        out = kwargs.get("out", ())
        for x in inputs + out:
            handler = getattr(type(x), "__array_ufunc__", None)
            if handler is not None and not isinstance(
                    x, (SmartArray, _np().ndarray, _np().generic)):
                return NotImplemented
        if out:
            kwargs["out"] = _host_of(out)
        result = getattr(ufunc, method)(*_host_of(inputs), **kwargs)
        written = [x for x in out if isinstance(x, SmartArray)]
        if method == "at" and isinstance(inputs[0], SmartArray):
            written.append(inputs[0])
        for x in written:
            x._gpu_valid = False
        if not out:
            return result
        results = result if isinstance(result, tuple) else (result,)
        mapped = tuple(o if isinstance(o, SmartArray) else r
                       for o, r in zip(out, results))
        return mapped if len(mapped) > 1 else mapped[0]

    def __array_function__(self, func: Any, types: Any, args: Any,
                           kwargs: Any) -> Any:
        np = _np()
        if not all(issubclass(t, (SmartArray, np.ndarray)) for t in types):
            return NotImplemented
        result = func(*_host_of(args),
                      **{k: _host_of(v) for k, v in kwargs.items()})
        written = kwargs.get("out")
        written = list(written) if isinstance(written, tuple) else [written]
        name = _WRITES_ARGUMENT.get(func.__name__)
        if name is not None and getattr(np, func.__name__, None) is func:
            written.append(args[0] if args else kwargs.get(name))
        for x in written:
            if isinstance(x, SmartArray):
                x._gpu_valid = False
        if isinstance(kwargs.get("out"), SmartArray):
            return kwargs["out"]
        return result

    # Operators, as NumPy's NDArrayOperatorsMixin defines them (written out
    # so that cudamem does not import NumPy with itself).
    __lt__ = _binary("less")
    __le__ = _binary("less_equal")
    __eq__ = _binary("equal")
    __ne__ = _binary("not_equal")
    __gt__ = _binary("greater")
    __ge__ = _binary("greater_equal")
    __add__, __radd__, __iadd__ = (
        _binary("add"), _reflected("add"), _inplace("add"))
    __sub__, __rsub__, __isub__ = (
        _binary("subtract"), _reflected("subtract"), _inplace("subtract"))
    __mul__, __rmul__, __imul__ = (
        _binary("multiply"), _reflected("multiply"), _inplace("multiply"))
    __matmul__, __rmatmul__, __imatmul__ = (
        _binary("matmul"), _reflected("matmul"), _inplace("matmul"))
    __truediv__, __rtruediv__, __itruediv__ = (
        _binary("true_divide"), _reflected("true_divide"),
        _inplace("true_divide"))
    __floordiv__, __rfloordiv__, __ifloordiv__ = (
        _binary("floor_divide"), _reflected("floor_divide"),
        _inplace("floor_divide"))
    __mod__, __rmod__, __imod__ = (
        _binary("remainder"), _reflected("remainder"), _inplace("remainder"))
    __divmod__, __rdivmod__ = _binary("divmod"), _reflected("divmod")
    __pow__, __rpow__, __ipow__ = (
        _binary("power"), _reflected("power"), _inplace("power"))
    __lshift__, __rlshift__, __ilshift__ = (
        _binary("left_shift"), _reflected("left_shift"),
        _inplace("left_shift"))
    __rshift__, __rrshift__, __irshift__ = (
        _binary("right_shift"), _reflected("right_shift"),
        _inplace("right_shift"))
    __and__, __rand__, __iand__ = (
        _binary("bitwise_and"), _reflected("bitwise_and"),
        _inplace("bitwise_and"))
    __xor__, __rxor__, __ixor__ = (
        _binary("bitwise_xor"), _reflected("bitwise_xor"),
        _inplace("bitwise_xor"))
    __or__, __ror__, __ior__ = (
        _binary("bitwise_or"), _reflected("bitwise_or"),
        _inplace("bitwise_or"))
    __neg__ = _unary("negative")
    __pos__ = _unary("positive")
    __abs__ = _unary("absolute")
    __invert__ = _unary("invert")
    __hash__ = None  # type: ignore[assignment]

    # -- the device side: CAI and DLPack -------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The device array's CUDA Array Interface, copied to the device
        first if the host changed. A writable export lets its consumer
        write, so the host copy is made again when next asked for."""
        desc = self.gpu().__cuda_array_interface__
        if not desc["data"][1]:
            self._host_valid = False
        return desc

    def __dlpack__(self, *, stream: Any = None,
                   max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None,
                   copy: bool | None = None) -> Any:
        """The device array's DLPack capsule, or, for ``dl_device`` (1, 0),
        the host array's. Unless it is a copy or read-only, its consumer
        may write, so the other side is made again when next asked for."""
        if dl_device is not None and dl_device[0] == _KDL_CPU:
            given = {"stream": stream, "max_version": max_version,
                     "dl_device": dl_device, "copy": copy}
            capsule = self.host().__dlpack__(
                **{k: v for k, v in given.items() if v is not None})
            if not copy and not self._readonly:
                self._gpu_valid = False
            return capsule
        capsule = self.gpu().__dlpack__(stream=stream,
                                        max_version=max_version,
                                        dl_device=dl_device, copy=copy)
        if not copy and not self._readonly:
            self._host_valid = False
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        """(kDLCUDA, device): the device array's, or the current device's,
        where gpu() would make it; nothing is copied."""
        if self._gpu is not None:
            return self._gpu.__dlpack_device__()
        return (_KDL_CUDA, _cudamem.get_current_device().id)
