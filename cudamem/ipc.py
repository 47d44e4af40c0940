"""Sharing device memory with other processes (numba's IPC API):
``IpcArrayHandle`` (from ``DeviceNDArray.get_ipc_handle()``),
``open_ipc_array`` for raw handles, the External Memory Management
pieces ``IpcHandle`` and ``GetIpcHandleMixin``, and ``PoolIpcHandle`` for
memory of AsyncMemoryManager's exportable pool.

This module decides where a handle opens (mapped on the current device, or
copied there when it cannot reach the exporting device) and keeps the plain
data that pickles. Mapping is C's: one driver mapping per handle and device
in a process, shared by every open of it, closed through the context's
pending deallocations once no memory from it is left.
"""
import contextlib
import operator
import os
import threading
import weakref

from cudamem import _cudamem

__all__ = ["GetIpcHandleMixin", "IpcArrayHandle", "IpcHandle",
           "PoolIpcHandle", "open_ipc_array"]

# Which process made a handle: its pid and a nonce drawn once per process
# (a pid can be reused by a later process; a forked child has its own).
_NONCE = os.urandom(8).hex()


def _this_process():
    return "%d-%s" % (os.getpid(), _NONCE)


class IpcMemHandle(bytes):
    """The 64 bytes of a cuIpcMemHandle (``IpcHandle.handle``): bytes, with
    ``reserved`` giving them as cuda.bindings' ``CUipcMemHandle.reserved``
    does for numba's handles."""

    __slots__ = ()

    @property
    def reserved(self) -> bytes:
        return bytes(self)


def _handle_bytes(handle):
    """The 64 bytes of a cuIpcMemHandle given as bytes, anything with the
    buffer protocol (a ctypes array of 64 c_char or c_byte, as numba's
    older plugins and RMM's make), a sequence of ints, or an object with
    ``.reserved`` holding one of those (cuda.bindings' ``CUipcMemHandle``,
    which numba's ``GetIpcHandleMixin`` makes). None stays None: nothing to
    map."""
    if handle is None:
        return None
    if not isinstance(handle, (bytes, bytearray, memoryview)):
        handle = getattr(handle, "reserved", handle)
    if isinstance(handle, int):
        raise TypeError("an IPC handle must be bytes or a sequence of ints, "
                        "not int")
    try:
        data = bytes(handle)
    except (TypeError, ValueError):
        raise TypeError("an IPC handle must be bytes or a sequence of ints "
                        "in range(256), not %r" % (handle,)) from None
    if len(data) != 64:
        raise ValueError("an IPC handle has 64 bytes, not %d: %r"
                         % (len(data), handle))
    return IpcMemHandle(data)


def _byte_count(value, name):
    """An int (NumPy's integers and 0-d integer arrays too: numba takes
    np.prod(shape) * itemsize) of at least 0."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an int, not %s"
                        % (name, type(value).__name__)) from None
    if value < 0:
        raise ValueError("%s must not be negative, not %d" % (name, value))
    return value


def _device_of(source_info):
    """The visible device that source_info names (its UUID, or numba's
    ``get_device_identity()`` dict of PCI ids), or None."""
    for device in _cudamem.list_devices():
        if isinstance(source_info, dict):
            if device.get_device_identity() == source_info:
                return device
        elif device.uuid == source_info:
            return device
    return None


class IpcHandle:
    """IpcHandle(base, handle, size, source_info=None, offset=0)

    A CUDA IPC handle for the *size* bytes at *offset* in an exported
    allocation (numba's EMM ``IpcHandle``). *handle* is the driver's
    64-byte ``cuIpcMemHandle`` (bytes, a ctypes array, a sequence of ints,
    or cuda.bindings' ``CUipcMemHandle``; None when *size* is 0: nothing is
    mapped), *size* and *offset* any ints (NumPy's too), *source_info* the
    exporting device's UUID (``Device.uuid``) or numba's
    ``get_device_identity()`` dict (None: unknown), *base* the exported memory,
    which the handle keeps alive in the exporting process (None in
    others). Pickles as plain data, without *base*.

    ``open(context)`` in another process maps the memory on the context's
    device. When that is not the exporting device and cannot access it
    peer to peer, the memory is mapped on the exporting device instead and
    ``open()`` returns a copy on the context's device (numba's staged
    open): writes to the copy do not reach the exporter.
    """

    def __init__(self, base, handle, size, source_info=None, offset=0):
        self.base = base
        self.handle = _handle_bytes(handle)
        self.size = _byte_count(size, "size")
        self.source_info = source_info
        self.offset = _byte_count(offset, "offset")
        if self.handle is None and self.size:
            raise ValueError("an IpcHandle of %d bytes needs a handle"
                             % self.size)
        self._exporter = _this_process() if base is not None else None
        self._opened = None

    def __reduce__(self):
        return (type(self),
                (None, self.handle, self.size, self.source_info,
                 self.offset),
                {"_exporter": self._exporter})

    def can_access_peer(self, context):
        """can_access_peer(context) -> bool

        Whether *context*'s device can use the memory where the exporting
        device has it: it is that device, can access it peer to peer, or
        the exporting device is unknown here (the driver then decides)."""
        source = _device_of(self.source_info)
        device = context.device
        return (source is None or source.id == device.id
                or _cudamem.can_access_peer(device, source))

    def open(self, context):
        """open(context) -> MemoryPointer

        The shared memory in *context*'s device, mapped (or a copy: see the
        class). ValueError in the process that made the handle ("opening
        IpcHandle from original process", numba's words) and when this
        handle is already open."""
        return self._open(context, self.handle is None
                          or self.can_access_peer(context))

    def open_direct(self, context):
        """open_direct(context) -> MemoryPointer

        The shared memory mapped in *context*'s device (numba's), even
        where ``open()`` would copy: the driver refuses a device that
        cannot reach the exporting one. ValueError as ``open()``."""
        return self._open(context, True)

    def open_staged(self, context):
        """open_staged(context) -> MemoryPointer

        A copy of the shared memory on *context*'s device, made through
        the exporting device (numba's staged open): later writes to the
        shared memory are not seen. ValueError as ``open()``."""
        return self._open(context, False)

    def _open(self, context, direct):
        if self._opened is not None:
            raise ValueError("IpcHandle is already opened")
        if self.base is not None or self._exporter == _this_process():
            raise ValueError("opening IpcHandle from original process")
        if direct:
            mapped = self._map(context.device)
            mem = mapped.view(self.offset, self.offset + self.size)
        else:
            mem = self._open_staged(context.device)
        self._opened = mem
        return mem

    def _open_staged(self, device):
        # Mapped on the exporting device, copied peer to peer (the driver
        # stages through the host), unmapped when `source` goes.
        from cudamem.devices import gpus

        mapped = self._map(_device_of(self.source_info))
        source = _cudamem._ipc_array(mapped, self.size, "u1",
                                     offset=self.offset)
        with gpus[device.id]:
            copy = _cudamem.device_array(self.size, "u1")
            copy.copy_to_device(source)
            return copy.gpu_data

    def _map(self, device):
        # The whole exported allocation mapped on `device`.
        return _cudamem._ipc_open(self.handle, device)

    def open_array(self, context, shape, dtype, strides=None):
        """open_array(context, shape, dtype, strides=None) -> DeviceNDArray

        ``open(context)`` as an array of *shape* and *dtype* starting at the
        shared memory's first byte (*strides* in bytes; default
        C-contiguous)."""
        return _cudamem._ipc_array(self.open(context), shape, dtype, strides)

    def close(self):
        """close() -> None

        Drops this handle's reference to what ``open()`` returned; the
        mapping closes once nothing else uses it (arrays from it stay
        valid until then). Closing a handle that is not open does nothing
        (numba raises)."""
        self._opened = None

    def __repr__(self):
        return "<cudamem.IpcHandle of %d bytes at offset %d from %s>" % (
            self.size, self.offset, self.source_info)


# An exporter's pool is its process's and its device's: (exporter,
# source_info). One descriptor received of each: {pool key: fd}; and the
# pools imported in this process: {(pool key, device ordinal): pool}. Both
# are kept for the process, as the exporter keeps its pool.
_POOLS = {}
_FDS = {}
_POOLS_LOCK = threading.Lock()

# The DupFd of each descriptor in the pickle a process start is making:
# one per descriptor, so that pickle's memo sends it once however many
# handles carry it (a descriptor passed twice fails the start).
_SPAWNING = weakref.WeakKeyDictionary()


def _dup_fd(fd):
    from multiprocessing import context, reduction

    popen = context.get_spawning_popen()
    if popen is None:
        return reduction.DupFd(fd)
    sent = _SPAWNING.setdefault(popen, {})
    if fd not in sent:
        sent[fd] = reduction.DupFd(fd)
    return sent[fd]


def _received_fd(key, dupfd):
    # The descriptor kept for pool `key`: the first received; another copy
    # is closed (handles sent by one process start share one).
    fd = dupfd.detach()
    with _POOLS_LOCK:
        kept = _FDS.setdefault(key, fd)
    if kept != fd:
        os.close(fd)
    return kept


def _rebuild_pool_handle(handle, size, source_info, offset, exporter, fd):
    # A PoolIpcHandle unpickled: `fd` is multiprocessing's DupFd.
    self = PoolIpcHandle(None, handle, size, source_info, offset,
                         _received_fd((exporter, source_info), fd))
    self._exporter = exporter
    return self


class PoolIpcHandle(IpcHandle):
    """PoolIpcHandle(base, handle, size, source_info, offset, fd)

    An ``IpcHandle`` of memory from AsyncMemoryManager's exportable pool
    (``AsyncMemoryManager.set_ipc(True)``): *handle* is the allocation's
    64 bytes of ``cuMemPoolExportPointer`` data and *fd* the POSIX file
    descriptor of its pool, which the handle carries to the other process.

    A descriptor only travels between processes that ``multiprocessing``
    connects: the handle pickles it as ``multiprocessing.reduction.DupFd``
    (as cuda.core does), so send it as an argument of a process or pool
    started by ``multiprocessing`` (any start method) or through its
    ``Queue`` or ``Pipe``; a handle pickled to a file or to an unrelated
    process cannot be opened there. The receiving process imports the pool
    once per exporting process and device, then each allocation; a second
    open of the same allocation shares its mapping, and the mapping is
    freed (``cuMemFree``) once no array uses it. The exporting array stays
    alive while the handle does in the exporting process; free the opened
    arrays before the exporter lets its array go, as the driver requires.
    """

    def __init__(self, base, handle, size, source_info, offset, fd):
        super().__init__(base, handle, size, source_info, offset)
        self.fd = fd

    def __reduce__(self):
        return (_rebuild_pool_handle,
                (self.handle, self.size, self.source_info, self.offset,
                 self._exporter, _dup_fd(self.fd)))

    def _map(self, device):
        key = ((self._exporter, self.source_info), device.id)
        with _POOLS_LOCK:
            pool = _POOLS.get(key)
            if pool is None:
                pool = _POOLS[key] = _cudamem._ipc_import_pool(self.fd,
                                                               device)
        return _cudamem._ipc_open_pool(pool, bytes(self.handle), device)

    def __repr__(self):
        return "<cudamem.PoolIpcHandle of %d bytes at offset %d from %s>" % (
            self.size, self.offset, self.source_info)


class IpcArrayHandle:
    """IpcArrayHandle(ipc_handle, array_desc)

    A device array shared with other processes on the same machine
    (numba's), from ``DeviceNDArray.get_ipc_handle()``: an ``IpcHandle``
    and the array's ``shape``, ``strides``, ``dtype`` and ``offset`` (of
    its first element from the handle's first byte). Pickle it to another
    process, where ``open()`` gives a DeviceNDArray over the same memory
    on the current device (a copy when that device cannot reach the
    exporting one) and ``close()`` lets it go. As a context manager::

        with handle as array:
            use(array)
    """

    def __init__(self, ipc_handle, array_desc):
        self._ipc_handle = ipc_handle
        self._array_desc = dict(array_desc)

    def __reduce__(self):
        return (type(self), (self._ipc_handle, self._array_desc))

    def open(self):
        """open() -> DeviceNDArray

        The shared array on the current device. ValueError in the exporting
        process ("opening IpcHandle from original process") and while this
        handle is open."""
        mem = self._ipc_handle.open(_cudamem.current_context())
        try:
            return _cudamem._ipc_array(mem, **self._array_desc)
        except BaseException:
            self._ipc_handle.close()
            raise

    def close(self):
        """close() -> None

        Closes this handle (``IpcHandle.close()``): the memory stays mapped
        while arrays from ``open()`` use it. Closing twice does nothing."""
        self._ipc_handle.close()

    def __enter__(self):
        return self.open()

    def __exit__(self, exc_type, exc_value, traceback):
        self.close()

    def __repr__(self):
        desc = self._array_desc
        return "<cudamem.IpcArrayHandle shape=%r dtype=%s>" % (
            desc.get("shape"), desc.get("dtype"))


def _array_handle(ipc_handle, shape, strides, dtype, first):
    # DeviceNDArray.get_ipc_handle() (py/ipc.c) after the export or the
    # plugin's get_ipc_handle().
    if not isinstance(ipc_handle, IpcHandle):
        raise TypeError("a memory manager's get_ipc_handle() returned %r, "
                        "which is not an IpcHandle" % (ipc_handle,))
    return IpcArrayHandle(
        ipc_handle,
        dict(shape=shape, strides=strides, dtype=dtype, offset=first))


@contextlib.contextmanager
def open_ipc_array(handle, shape, dtype, strides=None, offset=0):
    """open_ipc_array(handle, shape, dtype, strides=None, offset=0)

    A context manager (numba's) that opens a raw IPC *handle* (a
    ``cuIpcMemHandle``: bytes or a sequence of 64 ints) on the current
    device and yields a DeviceNDArray of *shape* and *dtype* (*strides* in
    bytes, default C-contiguous) whose first element lies *offset* bytes
    into the exported allocation. Leaving the block drops the context
    manager's reference: the mapping closes once the array is gone too.
    """
    data = _handle_bytes(handle)
    if data is None:
        raise TypeError("an IPC handle must be bytes or a sequence of ints, "
                        "not None")
    mem = _cudamem._ipc_open(data, _cudamem.get_current_device())
    array = _cudamem._ipc_array(mem, shape, dtype, strides, offset)
    del mem
    yield array


class GetIpcHandleMixin:
    """GetIpcHandleMixin

    numba's default ``get_ipc_handle()`` for External Memory Management
    plugins: mix it into a memory manager (with a ``context``) whose
    allocations are ordinary ``cuMemAlloc`` memory."""

    def get_ipc_handle(self, memory):
        """get_ipc_handle(memory) -> IpcHandle

        An IpcHandle for the bytes of *memory* (a MemoryPointer of this
        manager's context): the allocation around them from
        ``cuMemGetAddressRange``, its handle from ``cuIpcGetMemHandle``,
        and their offset in it. Zero-size memory shares nothing."""
        device = self.context.device
        if not memory.size:
            return IpcHandle(memory, None, 0, device.uuid)
        pointer = memory.device_pointer_value
        handle, base, _ = _cudamem._ipc_get(pointer, device)
        return IpcHandle(memory, handle, memory.size, device.uuid,
                         offset=pointer - base)
