"""numba.cuda.core.config: the configuration names numba-cuda's tests and
harness read, from numba's environment variables with numba's defaults
(as numba-cuda's core/config.py reads them). Test infrastructure: cudamem
reads its own settings (and numba's variables) itself; assigning here
changes nothing in cudamem, so a test that expects an assignment to take
effect fails."""
import os


def _readenv(name, ctor, default):
    value = os.environ.get(name)
    return default if value is None else ctor(value)


# Not numba's CUDA simulator: tests take their hardware path.
ENABLE_CUDASIM = _readenv("NUMBA_ENABLE_CUDASIM", int, 0)
CUDA_MEMORY_MANAGER = _readenv("NUMBA_CUDA_MEMORY_MANAGER", str, "default")
CUDA_DEALLOCS_COUNT = _readenv(
    "NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT", int, 10)
CUDA_DEALLOCS_RATIO = _readenv(
    "NUMBA_CUDA_MAX_PENDING_DEALLOCS_RATIO", float, 0.2)
CUDA_ARRAY_INTERFACE_SYNC = _readenv("NUMBA_CUDA_ARRAY_INTERFACE_SYNC", int, 1)
CUDA_PER_THREAD_DEFAULT_STREAM = _readenv(
    "NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM", int, 0)
CUDA_LOW_OCCUPANCY_WARNINGS = _readenv(
    "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", int, 1)
CUDA_WARN_ON_IMPLICIT_COPY = _readenv(
    "NUMBA_CUDA_WARN_ON_IMPLICIT_COPY", int, 1)
