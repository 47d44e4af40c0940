"""Memory managers: the object behind ``Context.memory_manager``, and
numba's External Memory Management (EMM) plugin interface, version 1.

cudamem's default manager allocates with ``cuMemAlloc`` in C and queues
frees in numba's deferred-deallocation queue. A plugin (a
``BaseCUDAMemoryManager`` subclass, usually over
``HostOnlyCUDAMemoryManager``) set with ``set_memory_manager()`` or
``CUDAMEM_MEMORY_MANAGER=<module>`` (numba's ``NUMBA_CUDA_MEMORY_MANAGER``
when that is unset) receives every array allocation of the
contexts whose manager is made afterwards; ``using_memory_manager()``
switches the current context's for a block. Temporaries of cudamem's own
copy engine stay on cudamem's allocator.
"""
import abc
import contextlib
import os

from cudamem import _MANAGER_VARIABLES, _cudamem
from cudamem._cudamem import (
    ManagedMemory,
    MappedMemory,
    MemoryPointer,
    PinnedMemory,
)
from cudamem._history import (
    annotate,
    dump_snapshot,
    record_history,
    snapshot,
)
from cudamem.devices import MemoryInfo
from cudamem.ipc import GetIpcHandleMixin

__all__ = ["BaseCUDAMemoryManager", "HostOnlyCUDAMemoryManager",
           "DefaultMemoryManager", "NumbaCUDAMemoryManager", "ManagedMemory",
           "MappedMemory", "MemoryPointer", "MemoryInfo", "PinnedMemory",
           "UniqueDict", "annotate", "dump_snapshot", "record_history",
           "set_memory_manager", "snapshot", "using_memory_manager"]

_SUPPORTED_EMM_INTERFACE_VERSION = 1

# Values of CUDAMEM_MEMORY_MANAGER that name a manager rather than a
# plugin's module: (module, class).
_NAMED = {"default": ("cudamem.memory", "DefaultMemoryManager"),
          "pool": ("cudamem.pool", "PoolMemoryManager"),
          "async": ("cudamem.pool", "AsyncMemoryManager")}


class UniqueDict(dict):
    """UniqueDict()

    numba's ``utils.UniqueDict``: a dict that refuses (AssertionError) to
    bind a key it holds already."""

    def __setitem__(self, key, value):
        if key in self:
            raise AssertionError("key already in dictionary: %r" % (key,))
        super().__setitem__(key, value)


class BaseCUDAMemoryManager(abc.ABC):
    """BaseCUDAMemoryManager(context)

    The abstract base class of EMM plugins (numba's). A plugin is made
    once per context, as ``cls(context=context)``, then ``initialize()``
    is called; cudamem calls ``memalloc(size)`` for every device array it
    allocates in that context, ``memhostalloc(size, mapped, portable, wc)``
    for pinned and mapped arrays, ``mempin(owner, pointer, size, mapped)``
    for ``pinned()`` and ``mapped()`` and, when the plugin has it,
    ``memallocmanaged(size, attach_global)`` for managed arrays (a
    ManagedMemory; without it managed arrays are cudamem's).
    ``DeviceNDArray.get_ipc_handle()``, ``Context.get_memory_info()``,
    ``reset()`` and ``defer_cleanup()`` delegate to it.

    As numba's, it takes ``context=`` (RuntimeError without it) and
    ignores other arguments; cudamem also takes the context
    positionally."""

    def __init__(self, *args, **kwargs):
        if "context" in kwargs:
            self.context = kwargs.pop("context")
        elif args:
            self.context = args[0]
        else:
            raise RuntimeError("Memory manager requires a context")

    @abc.abstractmethod
    def memalloc(self, size):
        """memalloc(size) -> MemoryPointer

        *size* bytes of device memory in ``self.context``: a
        MemoryPointer, or any object with ``device_pointer`` (an int or a
        ctypes pointer) and ``size``; cudamem keeps it alive while any
        array uses the memory."""

    @abc.abstractmethod
    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        """memhostalloc(size, mapped=False, portable=False, wc=False)

        *size* bytes of page-locked host memory, mapped into the device's
        address space when *mapped*: a PinnedMemory or MappedMemory."""

    @abc.abstractmethod
    def mempin(self, owner, pointer, size, mapped=False):
        """mempin(owner, pointer, size, mapped=False)

        Page-locks the *size* bytes at *pointer*, owned by *owner*: a
        PinnedMemory or (*mapped*) MappedMemory."""

    @abc.abstractmethod
    def initialize(self):
        """initialize()

        Called once, after the manager is made for its context."""

    @abc.abstractmethod
    def get_ipc_handle(self, memory):
        """get_ipc_handle(memory) -> IpcHandle

        An IPC handle for the device memory *memory*."""

    @abc.abstractmethod
    def get_memory_info(self):
        """get_memory_info() -> MemoryInfo

        ``(free, total)`` bytes of the context's device."""

    @abc.abstractmethod
    def reset(self):
        """reset()

        Frees what the manager holds for its context."""

    @abc.abstractmethod
    def defer_cleanup(self):
        """defer_cleanup() -> context manager

        Inside the block the manager frees nothing it has deferred."""

    @property
    @abc.abstractmethod
    def interface_version(self):
        """The EMM interface version the plugin implements: 1."""


class HostOnlyCUDAMemoryManager(BaseCUDAMemoryManager):
    """HostOnlyCUDAMemoryManager(context)

    A base for plugins that manage device memory only (numba's): host
    memory comes from cudamem, its frees go through the context's memory
    queue, and ``reset()`` / ``defer_cleanup()`` act on that queue
    (plugins overriding them call ``super()``'s, as numba asks).

    ``allocations`` is numba's: a UniqueDict, empty at first, that plugins
    such as RMM's fill in ``memalloc()`` (and empty in their finalizers)
    to keep their buffers alive; ``reset()`` clears it. ``deallocations``
    is the context's memory queue (a Deallocations) unless the plugin
    assigns its own."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.allocations = UniqueDict()

    @property
    def deallocations(self):
        """The context's queue of pending memory frees, or what the plugin
        assigned."""
        own = self.__dict__.get("_deallocations")
        if own is not None:
            return own
        if self.context is None:
            raise RuntimeError("a memory manager made without a context "
                               "has no deallocations")
        return self.context._memory_deallocations

    @deallocations.setter
    def deallocations(self, value):
        self.__dict__["_deallocations"] = value

    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        """memhostalloc(size, mapped=False, portable=False, wc=False)
        -> HostBuffer

        *size* bytes of cudamem's page-locked memory (mapped into the
        device's address space when *mapped*; *portable* and *wc* apply
        to mapped memory)."""
        return _cudamem._memhostalloc(self.context, size, mapped=mapped,
                                      portable=portable, wc=wc)

    def mempin(self, owner, pointer, size, mapped=False):
        """mempin(owner, pointer, size, mapped=False) -> HostBuffer

        Page-locks the NumPy array *owner*, whose *size* bytes start at
        *pointer*, until the result is released."""
        data = getattr(owner, "__array_interface__", {}).get("data")
        nbytes = getattr(owner, "nbytes", None)
        if data is None or (data[0], nbytes) != (pointer, size):
            raise ValueError("mempin() needs the array whose %r bytes at "
                             "%r it pins, not %r" % (size, pointer, owner))
        return _cudamem._host_register([owner], mapped=mapped)[0]

    def reset(self):
        """reset()

        Clears ``allocations`` (dropping what the plugin keeps there) and
        frees the context's pending frees, as numba's does."""
        self.allocations.clear()
        self.deallocations.clear()

    def defer_cleanup(self):
        """defer_cleanup() -> context manager

        Inside the block the context's memory queue frees nothing."""
        return self.deallocations.disable()


class DefaultMemoryManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    """DefaultMemoryManager(context)

    cudamem's own manager (numba's ``NumbaCUDAMemoryManager``):
    ``cuMemAlloc`` in C with numba's deferred frees, retried once after a
    flush on out-of-memory, and GetIpcHandleMixin's IPC handles. Arrays
    of a context using it never call into Python to allocate; plugins may
    subclass or wrap it."""

    def memalloc(self, size):
        """memalloc(size) -> MemoryPointer

        *size* bytes from cudamem's allocator."""
        return _cudamem._memalloc(self.context, size)

    def memallocmanaged(self, size, attach_global=True):
        """memallocmanaged(size, attach_global=True) -> MemoryPointer

        *size* bytes of cudamem's managed memory (host-accessible), for
        plugins that wrap this manager; attached to the host until a
        stream attaches it unless *attach_global*."""
        return _cudamem._memallocmanaged(self.context, size,
                                         attach_global=attach_global)

    def initialize(self):
        """initialize()

        Nothing to set up: allocation needs no state beyond the
        context."""

    def get_memory_info(self):
        """get_memory_info() -> MemoryInfo

        ``MemoryInfo(free, total)`` of the context's device."""
        return self.context._device_memory_info()

    @property
    def interface_version(self):
        """1: the EMM interface this cudamem implements."""
        return _SUPPORTED_EMM_INTERFACE_VERSION

    def __repr__(self):
        return "<cudamem.DefaultMemoryManager of %r>" % (self.context,)


# numba's name of its default manager.
NumbaCUDAMemoryManager = DefaultMemoryManager


# Managers cudamem allocates for itself, by exact type: their contexts'
# arrays never call memalloc() (mode MANAGER_NATIVE of
# Context._set_memory_manager). Every other manager is a plugin
# (MANAGER_PLUGIN).
_NATIVE = {DefaultMemoryManager}


def _native(cls):
    """Class decorator of a manager that cudamem allocates for itself (the
    pool): exactly *cls*, not its subclasses, gets MANAGER_NATIVE."""
    _NATIVE.add(cls)
    return cls

# set_memory_manager()'s class; None until it or the first manager made.
_manager_class = None

# The classes of the using_memory_manager() blocks in force, per device
# ordinal, innermost last, as (token, class): a context made during a
# block (after a Device.reset() in it) gets the block's manager, not
# set_memory_manager()'s.
_switched = {}


def _manager_mode(cls):
    return (_cudamem.MANAGER_NATIVE if cls in _NATIVE
            else _cudamem.MANAGER_PLUGIN)


def _check_version(manager):
    version = manager.interface_version
    if version != _SUPPORTED_EMM_INTERFACE_VERSION:
        raise RuntimeError("EMM Plugin interface has version %r - version "
                           "%d required" % (version,
                                            _SUPPORTED_EMM_INTERFACE_VERSION))


def _check_class(cls):
    if not isinstance(cls, type):
        raise TypeError("a memory manager must be a class, not %r" % (cls,))
    # numba's check: a dummy instance without a context.
    _check_version(cls(context=None))
    # Any manager but the default must exist before its context's first
    # allocation (a plugin is asked for memory, the pool turns itself on):
    # from now on allocations make it.
    if cls is not DefaultMemoryManager:
        _cudamem._enable_plugins()


def _env_manager():
    """(variable, value) naming the manager: cudamem's variable when it is
    set, else numba's (the first one set wins, as the pending-free
    thresholds in core/pending.c); ("", "default") when neither is."""
    for var in _MANAGER_VARIABLES:
        value = os.environ.get(var)
        if value is not None:
            return var, value or "default"
    return "", "default"


def _class_from_env():
    import importlib
    var, name = _env_manager()
    try:
        if name in _NAMED:
            module, attr = _NAMED[name]
            cls = getattr(importlib.import_module(module), attr)
        else:
            module = importlib.import_module(name)
            cls = getattr(module, "_cudamem_memory_manager", None)
            if cls is None:
                cls = module._numba_memory_manager
    except Exception as exc:
        raise RuntimeError("Failed to use memory manager from %s (set by "
                           "%s)" % (name, var)) from exc
    _check_class(cls)
    return cls


def _make(cls, context):
    manager = cls(context=context)
    # Checked again: a class may change its version after it was set.
    _check_version(manager)
    manager.initialize()
    return manager, _manager_mode(type(manager))


def _make_memory_manager(context):
    """The (manager, mode) a context without one gets (py/context.c)."""
    global _manager_class
    switched = _switched.get(context.device.id)
    if switched:
        return _make(switched[-1][1], context)
    if _manager_class is None:
        _manager_class = _class_from_env()
    return _make(_manager_class, context)


@contextlib.contextmanager
def _plugin_defer_cleanup(context, manager):
    # numba's Context.defer_cleanup() with a plugin.
    with manager.defer_cleanup(), context.deallocations.disable():
        yield


def set_memory_manager(cls):
    """set_memory_manager(cls)

    Makes the EMM plugin class *cls* (a BaseCUDAMemoryManager) the memory
    manager of every context whose manager is made afterwards, as numba's
    does: a context gets its manager when it first allocates or is asked
    for ``memory_manager``; contexts that have one already keep it (use
    ``using_memory_manager()`` to switch one). Raises RuntimeError unless
    ``cls(context=None).interface_version`` is 1; the version is checked
    again for each context."""
    global _manager_class
    _check_class(cls)
    _manager_class = cls


def _assign_memory_manager(context, manager):
    """``context.memory_manager = manager``, as numba's tests do: installs
    an instance made for *context*, with the mode its class needs,
    initialized as numba's next ``current_context()`` would do. A manager
    it replaces that switched something on in C (the pool) switches it
    off first."""
    mode = _manager_mode(type(manager))
    if mode == _cudamem.MANAGER_PLUGIN:
        _check_version(manager)
        _cudamem._enable_plugins()
    manager.initialize()
    previous = context.memory_manager
    detach = getattr(previous, "_detach", None)
    if detach is not None and previous is not manager:
        detach()
    context._set_memory_manager(manager, mode)


@contextlib.contextmanager
def using_memory_manager(cls):
    """using_memory_manager(cls)

    A context manager that makes a new *cls* (a BaseCUDAMemoryManager) the
    current context's memory manager for the ``with`` block, yielding it,
    and restores the previous manager at its end. Arrays allocated inside
    keep working after it: each keeps its memory alive. A context that a
    ``Device.reset()`` (or ``close()``) in the block replaces gets a new
    *cls* manager too (numba makes a manager per context), made on its
    first allocation; at the block's end it gets the manager a new context
    would have had without the block."""
    context = _cudamem.current_context()
    device = context.device
    previous = context.memory_manager
    # Any manager but the default must exist before its context's first
    # allocation (a plugin is asked for memory, the pool turns itself
    # on): the context after a reset in the block makes it then.
    if cls is not DefaultMemoryManager:
        _cudamem._enable_plugins()
    manager, mode = _make(cls, context)
    context._set_memory_manager(manager, mode)
    entry = (object(), cls)
    _switched.setdefault(device.id, []).append(entry)
    try:
        yield manager
    finally:
        blocks = _switched[device.id]
        blocks[:] = [e for e in blocks if e is not entry]
        # A manager that switched something on in C (the pool) switches
        # it off before the previous one is back.
        detach = getattr(manager, "_detach", None)
        if detach is not None:
            detach()
        live = device._live_context()
        if live is context or live is None:
            context._set_memory_manager(previous,
                                        _manager_mode(type(previous)))
        else:
            # Reset in the block: the new context's manager was the
            # block's (or is still to be made).
            live._set_memory_manager(*_make_memory_manager(live))


# A manager named in the environment is made with the first context's
# manager; allocations must ask for it from the start (with either
# variable set, cudamem/__init__.py imports this module at once).
if _env_manager()[1] != "default":
    _cudamem._enable_plugins()
