"""Stream glue that is plainer in Python than in C: the lifetime of the
cudamem-callbacks dispatcher thread (started on the first add_callback,
stopped at interpreter exit once the callbacks added have run or a bounded
wait for them ended, forgotten in a forked child), ``async_done()`` and
``auto_synchronize()``. The C Stream methods import this module on first
use; ``import cudamem`` does not (it brings threading; asyncio comes with
the first ``async_done()``).
"""
import atexit
import contextlib
import math
import os
import threading
import warnings

from cudamem import _cudamem
from cudamem.errors import CudaAPIError, CudaWarning

#: Seconds exit waits for the callbacks added to run, unless
#: CUDAMEM_CALLBACK_EXIT_TIMEOUT says otherwise.
EXIT_TIMEOUT = 5.0

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


def _exit_timeout():
    """CUDAMEM_CALLBACK_EXIT_TIMEOUT in seconds, or EXIT_TIMEOUT when unset
    or not a number from 0 to 1e6."""
    try:
        seconds = float(os.environ.get("CUDAMEM_CALLBACK_EXIT_TIMEOUT", ""))
    except ValueError:
        return EXIT_TIMEOUT
    return seconds if math.isfinite(seconds) and 0 <= seconds <= 1e6 else (
        EXIT_TIMEOUT)


_NOT_RUN = {
    "running": "stream callback %r did not return within %g s of "
               "interpreter exit; exiting without it",
    "queued": "stream callback %r was not run: a callback before it had "
              "not returned within %g s of interpreter exit",
    "unreached": "stream callback %r was not run: its stream %r had not "
                 "reached it within %g s of interpreter exit",
}


def _stop():
    """At exit: wait (CUDAMEM_CALLBACK_EXIT_TIMEOUT, default EXIT_TIMEOUT)
    for every callback added to run, streams reaching them included; then
    stop the dispatcher, with a CudaWarning for each callback not run. A
    callback that does not return is left running on its daemon thread:
    exit proceeds."""
    global _stopped
    with _lock:
        _stopped = True
        thread = _thread
    if thread is None or _pid != os.getpid():
        return
    timeout = _exit_timeout()
    try:
        left = _cudamem._dispatch_drain(timeout)
    finally:
        _cudamem._dispatch_stop()
    if not left:
        thread.join(timeout)
        return
    for callback, stream, state in left:
        args = (callback, stream, timeout) if state == "unreached" else (
            callback, timeout)
        message = _NOT_RUN[state] % args + " (CUDAMEM_CALLBACK_EXIT_TIMEOUT)"
        warnings.warn(message, CudaWarning, stacklevel=1)


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
