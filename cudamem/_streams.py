"""Stream glue that is plainer in Python than in C: the lifetime of the
cudamem-callbacks dispatcher thread (started on the first add_callback,
stopped at interpreter exit, forgotten in a forked child), ``async_done()``
and ``auto_synchronize()``. The C Stream methods import this module on first
use; ``import cudamem`` does not (it brings threading; asyncio comes with
the first ``async_done()``).
"""
import atexit
import contextlib
import os
import threading

from cudamem import _cudamem
from cudamem.errors import CudaAPIError

_lock = threading.Lock()
_thread = None
_pid = None
_stopped = False


def ensure_dispatcher(_=None):
    """Starts the dispatcher thread unless this process has a live one.
    After the exit stop it does nothing: later callbacks never run."""
    global _thread, _pid
    if _thread is not None and _pid == os.getpid():
        return
    with _lock:
        if _thread is not None or _stopped:
            return
        thread = threading.Thread(target=_cudamem._dispatch_loop,
                                  name="cudamem-callbacks", daemon=True)
        thread.start()
        _thread, _pid = thread, os.getpid()


def _stop():
    """At exit: run what is queued, then stop and join the dispatcher."""
    global _stopped
    with _lock:
        _stopped = True
        thread = _thread
    if thread is None or _pid != os.getpid():
        return
    _cudamem._dispatch_stop()
    thread.join()


def _forget_in_child():
    # The thread did not survive the fork; a lock held then would never
    # be released. CUDA in the child starts from nothing anyway.
    global _lock, _thread, _pid
    _lock = threading.Lock()
    _thread = _pid = None


atexit.register(_stop)
os.register_at_fork(after_in_child=_forget_in_child)


# ---------------------------------------------------------------------------
# async_done and auto_synchronize.


def _error_name(code):
    names = dict(_cudamem._error_names())
    return names.get(code)


def _resolve(future, stream, status):
    # On the loop's thread. A future cancelled meanwhile stays cancelled.
    if future.done():
        return
    if status:
        future.set_exception(CudaAPIError(
            status, "cuStreamAddCallback", _error_name(status),
            "the stream failed before its work was done"))
    else:
        future.set_result(stream)


def _done(stream, status, data):
    loop, future = data
    try:
        loop.call_soon_threadsafe(_resolve, future, stream, status)
    except RuntimeError:
        pass  # the loop is closed: nobody can await the future any more


def async_done(stream):
    import asyncio
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    stream.add_callback(_done, (loop, future))
    return future


@contextlib.contextmanager
def auto_synchronize(stream):
    try:
        yield stream
    except BaseException:
        # The block's exception wins over a failed synchronize.
        try:
            stream.synchronize()
        except Exception:
            pass
        raise
    stream.synchronize()
