"""Docstrings of the public API: every callable in ``cudamem.__all__`` (and
in the ``__all__`` of its public submodules), every type there, and every
public method and attribute of the extension types has one. Every C
function and method has a ``__text_signature__`` (``name($self, ...)`` then
``--`` in its docstring), so ``help()`` and ``inspect.signature`` show its
parameters; a Python function's first line is its signature,
``name(...)``; a type's docstring starts with the type's name or it has a
text signature. The parameters a signature names are accepted by those
names, as numba's are (``select_device(device_id=0)``,
``d.transpose(axes=...)``).
"""
import functools
import importlib
import inspect
import os
import re
import types

import numpy as np
import pytest

import cudamem
from cudamem import _cudamem
from tests.helpers.run import ROOT

EXTENSION_TYPES = [_cudamem.DeviceNDArray, _cudamem.DeviceNDArrayBase,
                   _cudamem.DeviceRecord, _cudamem.Stream, _cudamem.Event,
                   _cudamem.Device, _cudamem.Context,
                   _cudamem.MemoryPointer, _cudamem.Deallocations,
                   _cudamem.HostBuffer, cudamem.ManagedNDArray,
                   cudamem.MappedNDArray]
SUBMODULES = ["driver", "runtime", "simulator", "testing"]
# Protocol members that are public although their names start with "_".
PROTOCOL = {"__array__", "__cuda_array_interface__", "__cuda_memory__",
            "__cuda_ndarray__", "__cuda_stream__", "__dlpack__",
            "__dlpack_device__"}


def _public(name):
    return not name.startswith("_") or name in PROTOCOL


def _rows():
    """(id, name, object, kind): kind is 'type', 'function', 'method',
    'attribute' or 'module'."""
    rows = []
    for name in cudamem.__all__:
        obj = getattr(cudamem, name)
        if isinstance(obj, type):
            rows.append(("cudamem." + name, name, obj, "type"))
        elif isinstance(obj, types.ModuleType):
            rows.append(("cudamem." + name, name, obj, "module"))
        elif callable(obj):
            rows.append(("cudamem." + name, name, obj, "function"))
        else:
            rows.append(("cudamem." + name, name, obj, "attribute"))
    for mod in SUBMODULES:
        module = importlib.import_module("cudamem." + mod)
        for name in module.__all__:
            obj = getattr(module, name)
            kind = "type" if isinstance(obj, type) else (
                "function" if callable(obj) else "attribute")
            rows.append(("cudamem.%s.%s" % (mod, name), name, obj, kind))
    for cls in EXTENSION_TYPES:
        rows.append(("_cudamem." + cls.__name__, cls.__name__, cls, "type"))
        for name, member in sorted(vars(cls).items()):
            if not _public(name):
                continue
            kind = "method" if callable(member) or isinstance(
                member, (classmethod, staticmethod)) else "attribute"
            rows.append(("%s.%s" % (cls.__name__, name), name, member, kind))
    return rows


ROWS = _rows()


def _params(rows):
    return [pytest.param(name, obj, kind, id=rid)
            for rid, name, obj, kind in rows]


def test_the_table_covers_the_api():
    ids = {r[0] for r in ROWS}
    assert "cudamem.to_device" in ids and "DeviceNDArray.reshape" in ids
    assert "DeviceNDArrayBase.copy_to_host" in ids
    assert "Stream.__cuda_stream__" in ids and "Device.reset" in ids
    assert "Deallocations.clear" in ids and "MemoryPointer.view" in ids


def _doc(obj):
    doc = getattr(obj, "__doc__", None)
    if isinstance(obj, (classmethod, staticmethod)):
        doc = obj.__func__.__doc__
    return doc


def _signature_line(name, obj):
    """'name(a, b=1)': from the C function's __text_signature__ (without
    its $self / $module / $type), else the docstring's first line."""
    text_sig = getattr(obj, "__text_signature__", None)
    if text_sig:
        return name + re.sub(r"^\(\$\w+(, )?", "(", text_sig)
    return (_doc(obj) or "").strip()


@pytest.mark.parametrize("name, obj, kind", _params(ROWS))
def test_has_a_docstring(name, obj, kind):
    doc = _doc(obj)
    assert doc and doc.strip(), "%s has no docstring" % name
    first = doc.strip().splitlines()[0]
    if kind == "type":
        assert obj.__text_signature__ or first.startswith(name), \
            "%s's docstring starts %r, not with its name" % (name, first)
    elif kind in ("function", "method"):
        text_sig = getattr(obj, "__text_signature__", None)
        assert text_sig or first.startswith(name + "("), \
            "%s's first line %r is not its signature" % (name, first)


# ---------------------------------------------------------------------------
# The parameters a signature names are accepted by name.

def _signature_params(doc):
    """Names of the parameters in the first line 'name(a, b=1, *c, d=2)':
    those that can be passed by keyword (not *args, **kw, or before '/')."""
    first = doc.strip().splitlines()[0]
    # The first line may wrap (device_array's does): join up to ')'.
    text = doc.strip()
    start = text.index("(")
    depth, end = 0, start
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(text[end], 0)
        if depth == 0:
            break
    inner = text[start + 1:end]
    assert first  # the caller checked it is a signature
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    names = []
    for part in (p.strip() for p in parts):
        if part == "/":
            names = []  # the ones before are positional-only
        elif part.startswith("*"):
            continue
        else:
            names.append(re.split(r"[=:]", part)[0].strip())
    return names


class Samples:
    """Objects to call methods on, made per test."""

    def __init__(self):
        self.array = cudamem.to_device(np.arange(6.0))
        self.record = cudamem.to_device(
            np.zeros(1, [("a", np.int32), ("b", np.float64)]))[0]
        self.stream = cudamem.stream()
        self.event = cudamem.event()
        self.event.record(self.stream)
        self.event.synchronize()
        self.device = cudamem.get_current_device()
        self.context = cudamem.current_context()
        self.managed = cudamem.managed_array(6)
        self.mapped = cudamem.mapped_array(6)
        self.pin = np.zeros(4)

    def mapped_buffer(self):
        base = self.mapped
        while not isinstance(base, _cudamem.HostBuffer):
            base = base.base
        return base


# name -> function of Samples giving (the callable, keyword arguments to
# call it with: every parameter its signature names).
KEYWORD_CALLS = {
    "cudamem.as_cuda_array": lambda s: (
        cudamem.as_cuda_array, dict(obj=s.array, sync=True, stream=None)),
    "cudamem.can_access_peer": lambda s: (
        cudamem.can_access_peer, dict(device=0, peer=0)),
    "cudamem.from_dlpack": lambda s: (
        cudamem.from_dlpack,
        dict(obj=s.array, device=None, copy=None, stream=None)),
    "cudamem.current_context": lambda s: (
        cudamem.current_context, dict(devnum=None)),
    "cudamem.context_is_poisoned": lambda s: (
        cudamem.context_is_poisoned, dict(device=None)),
    "cudamem.device_array": lambda s: (
        cudamem.device_array, dict(shape=3, dtype=np.float64, strides=None,
                                   order="C", stream=0)),
    "cudamem.device_array_like": lambda s: (
        cudamem.device_array_like, dict(ary=np.zeros(3), stream=0)),
    "cudamem.event": lambda s: (cudamem.event, dict(timing=True)),
    "cudamem.event_elapsed_time": lambda s: (
        cudamem.event_elapsed_time, dict(evtstart=s.event, evtend=s.event)),
    "cudamem.external_stream": lambda s: (
        cudamem.external_stream, dict(ptr=1)),
    "cudamem.from_cuda_array_interface": lambda s: (
        cudamem.from_cuda_array_interface,
        dict(desc=s.array.__cuda_array_interface__, owner=s.array,
             sync=True, stream=None)),
    "cudamem.is_cuda_array": lambda s: (
        cudamem.is_cuda_array, dict(obj=s.array)),
    "cudamem.mapped": lambda s: (cudamem.mapped, dict(stream=0)),
    "cudamem.memory_stats": lambda s: (
        cudamem.memory_stats, dict(device=None)),
    "cudamem.memory_summary": lambda s: (
        cudamem.memory_summary, dict(device=None, abbreviated=True)),
    "cudamem.mapped_array": lambda s: (
        cudamem.mapped_array, dict(shape=3, dtype=np.float64, strides=None,
                                   order="C", stream=0, portable=False,
                                   wc=False)),
    "cudamem.mapped_array_like": lambda s: (
        cudamem.mapped_array_like, dict(ary=np.zeros(3), stream=0,
                                        portable=False, wc=False)),
    # A context manager: the call binds the arguments, opening is on entry.
    "cudamem.open_ipc_array": lambda s: (
        cudamem.open_ipc_array, dict(handle=bytes(64), shape=3,
                                     dtype=np.uint8, strides=None,
                                     offset=0)),
    # Plugins' constructors, over memory the samples own.
    "cudamem.PinnedMemory": lambda s: (
        cudamem.PinnedMemory, dict(context=s.context,
                                   pointer=s.mapped.ctypes.data, size=8,
                                   owner=s.mapped, finalizer=None)),
    "cudamem.MappedMemory": lambda s: (
        cudamem.MappedMemory, dict(context=s.context,
                                   pointer=s.mapped.ctypes.data, size=8,
                                   owner=s.mapped, finalizer=None)),
    "cudamem.ManagedMemory": lambda s: (
        cudamem.ManagedMemory,
        dict(context=s.context, pointer=s.managed.ctypes.data, size=8,
             owner=s.managed, finalizer=None)),
    "cudamem.pinned_array": lambda s: (
        cudamem.pinned_array, dict(shape=3, dtype=np.float64, strides=None,
                                   order="C")),
    "cudamem.pinned_array_like": lambda s: (
        cudamem.pinned_array_like, dict(ary=np.zeros(3))),
    "cudamem.require_context": lambda s: (
        cudamem.require_context, dict(fn=len)),
    "cudamem.reset_peak_stats": lambda s: (
        cudamem.reset_peak_stats, dict(device=0)),
    "cudamem.reset_accumulated_memory_stats": lambda s: (
        cudamem.reset_accumulated_memory_stats, dict(device=0)),
    "cudamem.set_memory_limit": lambda s: (
        cudamem.set_memory_limit, dict(limit=None, device=0)),
    "cudamem.get_memory_limit": lambda s: (
        cudamem.get_memory_limit, dict(device=0)),
    "cudamem.set_oom_observer": lambda s: (
        cudamem.set_oom_observer, dict(observer=None)),
    "cudamem.select_device": lambda s: (
        cudamem.select_device, dict(device_id=0)),
    # Makes the default manager the default again.
    "cudamem.set_memory_manager": lambda s: (
        cudamem.set_memory_manager,
        dict(cls=cudamem.memory.DefaultMemoryManager)),
    # Not entered: the context manager is only made.
    "cudamem.using_memory_manager": lambda s: (
        cudamem.using_memory_manager,
        dict(cls=cudamem.memory.DefaultMemoryManager)),
    "cudamem.stream": lambda s: (
        cudamem.stream, dict(priority=None, non_blocking=False)),
    "cudamem.to_device": lambda s: (
        cudamem.to_device, dict(obj=np.ones(3), stream=0, copy=True,
                                to=None)),
    "DeviceNDArray.copy": lambda s: (s.array.copy, dict(order="C")),
    "DeviceNDArray.fill": lambda s: (s.array.fill, dict(value=1, stream=0)),
    "DeviceNDArray.getitem": lambda s: (s.array.getitem,
                                        dict(item=0, stream=0)),
    "DeviceNDArray.setitem": lambda s: (s.array.setitem,
                                        dict(key=0, value=1, stream=0)),
    "DeviceNDArray.__dlpack__": lambda s: (
        s.array.__dlpack__, dict(stream=None, max_version=None,
                                 dl_device=None, copy=None)),
    "DeviceNDArray.ravel": lambda s: (s.array.ravel,
                                      dict(order="C", stream=0)),
    # *shape cannot be named: given positionally.
    "DeviceNDArray.reshape": lambda s: (
        functools.partial(s.array.reshape, 6), dict(order="C")),
    "DeviceNDArray.split": lambda s: (s.array.split,
                                      dict(section=2, stream=0)),
    "DeviceNDArray.squeeze": lambda s: (s.array.squeeze,
                                        dict(axis=None, stream=0)),
    "DeviceNDArray.transpose": lambda s: (s.array.transpose,
                                          dict(axes=None)),
    "DeviceNDArray.view": lambda s: (s.array.view, dict(dtype=np.int64)),
    "DeviceNDArray.__array__": lambda s: (s.array.__array__,
                                          dict(dtype=None, copy=None)),
    "DeviceNDArrayBase.bind": lambda s: (s.array.bind, dict(stream=0)),
    "DeviceNDArrayBase.copy_to_device": lambda s: (
        s.array.copy_to_device, dict(ary=np.ones(6), stream=0)),
    "DeviceNDArrayBase.copy_to_host": lambda s: (
        s.array.copy_to_host, dict(ary=None, stream=0)),
    "DeviceRecord.getitem": lambda s: (s.record.getitem,
                                       dict(item="a", stream=0)),
    "DeviceRecord.setitem": lambda s: (s.record.setitem,
                                       dict(key="a", value=1, stream=0)),
    "Context.can_access_peer": lambda s: (s.context.can_access_peer,
                                          dict(peer_device=0)),
    "HostBuffer.view": lambda s: (s.mapped_buffer().view,
                                  dict(start=0, stop=None)),
    "HostBuffer.memset": lambda s: (s.mapped_buffer().memset,
                                    dict(byte=0, count=None, stream=0)),
    "MemoryPointer.view": lambda s: (s.array.gpu_data.view,
                                     dict(start=0, stop=None)),
    "MemoryPointer.memset": lambda s: (s.array.gpu_data.memset,
                                       dict(byte=0, count=None, stream=0)),
    "Stream.add_callback": lambda s: (
        s.stream.add_callback, dict(callback=lambda *a: None, arg=None)),
    "Stream.wait_event": lambda s: (s.stream.wait_event,
                                    dict(event=s.event)),
    "Event.record": lambda s: (s.event.record, dict(stream=s.stream)),
    "Event.wait": lambda s: (s.event.wait, dict(stream=s.stream)),
    "Event.elapsed_time": lambda s: (s.event.elapsed_time,
                                     dict(evtend=s.event)),
    "cudamem.managed_array": lambda s: (
        cudamem.managed_array, dict(shape=3, dtype=np.float64, strides=None,
                                    order="C", stream=0,
                                    attach_global=True)),
    "cudamem.managed_array_like": lambda s: (
        cudamem.managed_array_like, dict(ary=np.zeros(3), stream=0,
                                         attach_global=True)),
    "ManagedNDArray.copy_to_host": lambda s: (
        s.managed.copy_to_host, dict(ary=None, stream=0)),
    "ManagedNDArray.copy_to_device": lambda s: (
        s.managed.copy_to_device, dict(ary=np.ones(6), stream=0)),
    "ManagedNDArray.prefetch": lambda s: (
        s.managed.prefetch, dict(device=None, stream=0)),
    "ManagedNDArray.advise": lambda s: (
        s.managed.advise, dict(advice="read_mostly", device=None)),
    "ManagedNDArray.__dlpack__": lambda s: (
        s.managed.__dlpack__, dict(stream=None, max_version=None,
                                   dl_device=None, copy=None)),
    "MappedNDArray.copy_to_host": lambda s: (
        s.mapped.copy_to_host, dict(ary=None, stream=0)),
    "MappedNDArray.copy_to_device": lambda s: (
        s.mapped.copy_to_device, dict(ary=np.ones(6), stream=0)),
    "MappedNDArray.__dlpack__": lambda s: (
        s.mapped.__dlpack__, dict(stream=None, max_version=None,
                                  dl_device=None, copy=None)),
}
# numba's cudadrv.driver names in cudamem.driver, and numba's Context and
# Device methods: the same calls under their other names too.
for _name in ("PinnedMemory", "MappedMemory", "ManagedMemory",
              "event_elapsed_time", "set_memory_manager"):
    KEYWORD_CALLS["cudamem.driver." + _name] = KEYWORD_CALLS[
        "cudamem." + _name]
KEYWORD_CALLS.update({
    "cudamem.driver.OwnedPointer": lambda s: (
        cudamem.driver.OwnedPointer,
        dict(memptr=s.array.gpu_data, view=None)),
    "cudamem.driver.is_device_memory": lambda s: (
        cudamem.driver.is_device_memory, dict(obj=s.array)),
    "cudamem.driver.require_device_memory": lambda s: (
        cudamem.driver.require_device_memory, dict(obj=s.array)),
    "cudamem.driver.device_ctypes_pointer": lambda s: (
        cudamem.driver.device_ctypes_pointer, dict(obj=s.array)),
    "cudamem.driver.device_pointer": lambda s: (
        cudamem.driver.device_pointer, dict(obj=s.array)),
    "cudamem.driver.device_extents": lambda s: (
        cudamem.driver.device_extents, dict(devmem=s.array)),
    "cudamem.driver.device_memory_size": lambda s: (
        cudamem.driver.device_memory_size, dict(devmem=s.array)),
    "cudamem.driver.device_memory_depends": lambda s: (
        cudamem.driver.device_memory_depends, dict(devmem=s.array)),
    "cudamem.driver.host_pointer": lambda s: (
        cudamem.driver.host_pointer, dict(obj=np.zeros(2), readonly=False)),
    "cudamem.driver.host_memory_extents": lambda s: (
        cudamem.driver.host_memory_extents, dict(obj=np.zeros(2))),
    "cudamem.driver.host_memory_size": lambda s: (
        cudamem.driver.host_memory_size, dict(obj=np.zeros(2))),
    "cudamem.driver.memory_size_from_info": lambda s: (
        cudamem.driver.memory_size_from_info,
        dict(shape=(2,), strides=(8,), itemsize=8)),
    "cudamem.driver.host_to_device": lambda s: (
        cudamem.driver.host_to_device,
        dict(dst=s.array, src=np.zeros(2), size=16, stream=0)),
    "cudamem.driver.device_to_host": lambda s: (
        cudamem.driver.device_to_host,
        dict(dst=np.zeros(2), src=s.array, size=16, stream=0)),
    "cudamem.driver.device_to_device": lambda s: (
        cudamem.driver.device_to_device,
        dict(dst=s.array, src=s.array[3:], size=16, stream=0)),
    "cudamem.driver.device_memset": lambda s: (
        cudamem.driver.device_memset,
        dict(dst=s.array, val=0, size=16, stream=0)),
    "Device.from_identity": lambda s: (
        type(s.device).from_identity,
        dict(identity=s.device.get_device_identity())),
    "Context.memalloc": lambda s: (s.context.memalloc, dict(bytesize=8)),
    "Context.memallocmanaged": lambda s: (
        s.context.memallocmanaged, dict(bytesize=8, attach_global=True)),
    "Context.memhostalloc": lambda s: (
        s.context.memhostalloc,
        dict(bytesize=8, mapped=False, portable=False, wc=False)),
    "Context.mempin": lambda s: (
        s.context.mempin, dict(owner=s.pin, pointer=s.pin.ctypes.data,
                               size=s.pin.nbytes, mapped=False)),
    "Context.get_ipc_handle": lambda s: (
        s.context.get_ipc_handle, dict(memory=s.array.gpu_data)),
    "Context.open_ipc_handle": lambda s: (
        s.context.open_ipc_handle, dict(handle=None, size=0)),
    "Context.create_external_stream": lambda s: (
        s.context.create_external_stream, dict(ptr=1)),
    "Context.create_event": lambda s: (
        s.context.create_event, dict(timing=True)),
})
# Signatures with parameters whose calls would change global state.
NOT_CALLED = {"Context.enable_peer_access", "cudamem.simulator.inject",
              "cudamem.simulator.set_memory", "cudamem.simulator.set_delay_us",
              "cudamem.simulator.delay", "cudamem.simulator.set_hazards",
              "cudamem.simulator.set_strict_pitch",
              "cudamem.simulator.error_code"}
def _keyword_rows():
    rows = []
    for rid, name, obj, kind in ROWS:
        line = _signature_line(name, obj)
        if kind not in ("function", "method") or \
                not line.startswith(name + "("):
            continue
        if _signature_params(line) and rid not in NOT_CALLED:
            rows.append(pytest.param(rid, _signature_params(line), id=rid))
    return rows


KEYWORD_ROWS = _keyword_rows()


def test_every_signature_with_parameters_has_a_call():
    ids = {p.values[0] for p in KEYWORD_ROWS}
    assert not ids - set(KEYWORD_CALLS), (
        "add a row to KEYWORD_CALLS (or NOT_CALLED) for %s"
        % sorted(ids - set(KEYWORD_CALLS)))
    assert not set(KEYWORD_CALLS) - ids, (
        "KEYWORD_CALLS rows without a documented signature: %s"
        % sorted(set(KEYWORD_CALLS) - ids))


@pytest.mark.parametrize("rid, names", KEYWORD_ROWS)
def test_signature_parameters_are_accepted_by_name(rid, names):
    if rid not in KEYWORD_CALLS:
        pytest.fail("no KEYWORD_CALLS row for %s" % rid)
    samples = Samples()
    fn, kwargs = KEYWORD_CALLS[rid](samples)
    assert sorted(kwargs) == sorted(names), \
        "the signature names %r" % (names,)
    try:
        fn(**kwargs)
    except TypeError as exc:
        error = str(exc)  # not the traceback: it would keep the samples
    else:
        error = None
    del samples, fn, kwargs
    assert error is None, error
    # select_device / current_context leave device 0 current, as before.
    assert cudamem.get_current_device().id == 0


def test_signature_parser():
    assert _signature_params("f(a, b=1, *c, d=2, **e) -> x") == \
        ["a", "b", "d"]
    assert _signature_params("f(a, /, b)") == ["b"]
    assert _signature_params("device_array(shape, dtype=np.float64, "
                             "strides=None, order='C', stream=0)\n-> D") == \
        ["shape", "dtype", "strides", "order", "stream"]
    assert _signature_params("reshape(*shape, order='C') -> D") == ["order"]
    assert _signature_params("priority_range() -> (least, greatest)") == []


def test_api_reference_documents_every_public_name():
    # docs/api.rst is the API reference: a name added to __all__ must be
    # added there too, or it is missing from the documentation.
    path = os.path.join(ROOT, "docs", "api.rst")
    with open(path) as f:
        text = f.read()
    documented = set(re.findall(r"^\.\. auto\w+:: (?:cudamem\.)?(\w+)\s*$",
                                text, re.M))
    missing = sorted(set(cudamem.__all__) - documented)
    assert not missing, "missing from docs/api.rst: %s" % missing


# ---------------------------------------------------------------------------
# Every builtin has a text signature, so help(), inspect.signature, IDEs
# and notebooks show its parameters.

def _builtins():
    for name, obj in sorted(vars(_cudamem).items()):
        if isinstance(obj, types.BuiltinFunctionType):
            yield name, obj
        elif isinstance(obj, type) and obj.__module__.startswith("cudamem"):
            for mname, member in sorted(vars(obj).items()):
                if isinstance(member, (types.MethodDescriptorType,
                                       types.ClassMethodDescriptorType)):
                    yield "%s.%s" % (name, mname), member


BUILTINS = list(_builtins())


def test_the_walk_finds_the_builtins():
    names = {name for name, _ in BUILTINS}
    assert {"to_device", "DeviceNDArrayBase.copy_to_host",
            "Stream.synchronize", "Stream.priority_range",
            "MemoryPointer.view"} <= names


@pytest.mark.parametrize("name, obj", BUILTINS, ids=[n for n, _ in BUILTINS])
def test_every_builtin_has_a_text_signature(name, obj):
    assert obj.__text_signature__, "%s has no text signature" % name
    sig = inspect.signature(obj)
    # The docstring no longer repeats the signature line.
    assert not (obj.__doc__ or "").startswith(name.split(".")[-1] + "(")
    assert all(p.name.isidentifier() for p in sig.parameters.values())


@pytest.mark.parametrize("cls", [_cudamem.DeviceNDArray,
                                 _cudamem.DeviceRecord,
                                 _cudamem.MemoryPointer])
def test_constructible_types_have_a_text_signature(cls):
    assert list(inspect.signature(cls).parameters) == {
        "DeviceNDArray": ["shape", "strides", "dtype", "stream", "gpu_data"],
        "DeviceRecord": ["dtype", "stream", "gpu_data"],
        "MemoryPointer": ["context", "pointer", "size", "owner",
                          "finalizer"],
    }[cls.__name__]


def test_help_shows_the_parameters():
    import pydoc
    text = pydoc.render_doc(cudamem.to_device, renderer=pydoc.plaintext)
    assert "to_device(obj, stream=0, copy=True, to=None)" in text
