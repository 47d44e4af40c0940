"""The memory history: record_history(), annotate(), snapshot() and
dump_snapshot(), exported by cudamem.memory.

py/history.c records each allocation and free of device, managed, pinned
and mapped memory that cudamem makes (a ring of the last *max_entries*);
this module turns the ring into PyTorch's memory snapshot format, the
dict that ``torch.cuda.memory._snapshot()`` returns and PyTorch's memory
visualizer (pytorch.org/memory_viz, ``python -m torch.cuda._memory_viz``)
reads.
"""
import contextlib
import sys

from cudamem import _cudamem

__all__ = ["annotate", "dump_snapshot", "record_history", "snapshot"]

# The frames an entry keeps at most (py/history.c's DEPTH_MAX).
_DEPTH_MAX = 64
_STACKS = ("python", "all", "none", None)


def record_history(enabled=True, max_entries=sys.maxsize, stacks="python",
                   stack_depth=16):
    """record_history(enabled=True, max_entries=sys.maxsize, \
stacks="python", stack_depth=16)

    Starts (*enabled* true or ``"all"``) or stops (*enabled* False or
    None) recording every allocation and free of device, managed, pinned
    and mapped memory that cudamem makes, as
    ``torch.cuda.memory._record_memory_history`` does for PyTorch's
    allocator. Starting drops what an earlier recording kept; stopping
    keeps it for snapshot(). The last *max_entries* events are kept (a
    ring: the oldest go first). *stacks* ``"python"`` (or ``"all"``: there
    are no C++ frames to add) records the innermost *stack_depth* (0 to
    64) Python frames of each event; None or ``"none"`` records none."""
    if enabled is None or enabled is False:
        _cudamem._history_stop()
        return
    if enabled is not True and enabled != "all":
        raise ValueError(
            "enabled must be True, 'all', False or None, not %r"
            % (enabled,))
    if stacks not in _STACKS:
        raise ValueError(
            "stacks must be 'python', 'all', 'none' or None, not %r"
            % (stacks,))
    for name, value in (("max_entries", max_entries),
                        ("stack_depth", stack_depth)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError("%s must be an int, not %r" % (name, value))
    if max_entries <= 0:
        raise ValueError(
            "max_entries must be positive, not %r" % (max_entries,))
    if not 0 <= stack_depth <= _DEPTH_MAX:
        raise ValueError("stack_depth must be 0 to %d, not %r"
                         % (_DEPTH_MAX, stack_depth))
    _cudamem._history_start(
        max_entries, 0 if stacks in ("none", None) else stack_depth)


@contextlib.contextmanager
def annotate(name):
    """annotate(name)

    A context manager that tags the events recorded in its block with
    *name* (a str). Blocks nest: an event carries the names of every
    enclosing block, outermost first. The names live in a context
    variable: each thread, and each asyncio task, has its own."""
    if not isinstance(name, str):
        raise TypeError("annotation name must be a str, not %r" % (name,))
    var = _cudamem._history_annotation
    token = var.set(var.get(()) + (name,))
    try:
        yield
    finally:
        var.reset(token)


def _frames(frames):
    return [{"filename": f, "line": line, "name": name}
            for f, line, name in frames]


def _entry(raw):
    (_, time_ns, thread, action, memory, device, addr, size, stream,
     frames, annotation) = raw
    names = list(annotation) if annotation is not None else []
    return {"action": action, "addr": addr, "size": size, "stream": stream,
            "time_us": time_ns // 1000, "frames": _frames(frames),
            "device": device, "memory": memory, "thread": thread,
            "annotations": names, "user_metadata": "/".join(names),
            "compile_context": ""}


def _block(address, size, state, frames):
    return {"address": address, "size": size,
            "requested_size": size if state != "inactive" else 0,
            "state": state, "frames": frames}


def _segment(seg):
    """PyTorch's segment dict of seg, its blocks in address order with
    the gaps between them inactive."""
    blocks, at = [], seg["address"]
    end = at + seg["total_size"]
    for addr in sorted(seg["blocks"]):
        size, state, frames = seg["blocks"][addr]
        if addr > at:
            blocks.append(_block(at, addr - at, "inactive", []))
        blocks.append(_block(addr, size, state, frames))
        at = addr + size
    if at < end:
        blocks.append(_block(at, end - at, "inactive", []))
    used = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {"device": seg["device"], "address": seg["address"],
            "total_size": seg["total_size"], "allocated_size": used,
            "active_size": used, "requested_size": used,
            "stream": seg["stream"], "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": seg["frames"], "memory": seg["memory"],
            "blocks": blocks}


def _replay(traces):
    """The device segments that the recorded events leave live, each with
    the blocks live in it. Memory allocated before the events kept begin
    is not known, nor listed."""
    live = {}
    for trace in traces:
        for e in trace:
            action, addr = e["action"], e["addr"]
            if action == "segment_alloc":
                live[(e["device"], addr)] = {
                    "device": e["device"], "address": addr,
                    "total_size": e["size"], "stream": e["stream"],
                    "frames": e["frames"], "memory": e["memory"],
                    "blocks": {}}
            elif action == "segment_free":
                live.pop((e["device"], addr), None)
            else:
                seg = _containing(live, e["device"], addr)
                if seg is None:
                    continue
                if action == "alloc":
                    seg["blocks"][addr] = (e["size"], "active_allocated",
                                           e["frames"])
                elif action == "free_requested" and addr in seg["blocks"]:
                    size, _, frames = seg["blocks"][addr]
                    seg["blocks"][addr] = (size, "active_pending_free",
                                           frames)
                elif action == "free_completed":
                    seg["blocks"].pop(addr, None)
    return [_segment(seg) for _, seg in sorted(live.items())]


def _containing(live, device, addr):
    seg = live.get((device, addr))
    if seg is not None:
        return seg
    for (dev, start), seg in live.items():
        if dev == device and start <= addr < start + seg["total_size"]:
            return seg
    return None


def snapshot():
    """snapshot()

    The recorded history in PyTorch's memory snapshot format: a dict with
    ``"device_traces"`` (per device ordinal, its events oldest first:
    dicts with ``action`` (``"segment_alloc"``, ``"alloc"``,
    ``"free_requested"``, ``"free_completed"``, ``"segment_free"``),
    ``addr``, ``size``, ``stream`` (the handle, 0 for none), ``time_us``,
    ``frames`` (``filename``, ``line``, ``name``; innermost first),
    ``annotations`` (the annotate() names, outermost first; joined by
    "/" in ``user_metadata``), ``memory`` (``"device"`` or ``"managed"``),
    ``device`` and ``thread``); ``"segments"``, the device segments the
    recorded events leave allocated, with their blocks; and
    ``"host_traces"``, the events of pinned and mapped host memory (their
    ``memory``), which PyTorch's tools ignore."""
    device_traces, host = [], []
    for raw in _cudamem._history_entries():
        e = _entry(raw)
        if e["memory"] in ("pinned", "mapped"):
            host.append(e)
            continue
        while len(device_traces) <= e["device"]:
            device_traces.append([])
        device_traces[e["device"]].append(e)
    if not device_traces:
        device_traces.append([])
    return {"segments": _replay(device_traces),
            "device_traces": device_traces, "host_traces": host}


def dump_snapshot(path):
    """dump_snapshot(path)

    Writes snapshot() to *path* (a str or os.PathLike) with pickle, as
    ``torch.cuda.memory._dump_snapshot`` does: the file opens in
    pytorch.org/memory_viz and in ``python -m torch.cuda._memory_viz``."""
    import pickle

    data = snapshot()
    with open(path, "wb") as f:
        pickle.dump(data, f)
