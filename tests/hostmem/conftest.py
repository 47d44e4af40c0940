"""The host-memory tests' shared fixture."""
import pytest

import cudamem
from cudamem import _cudamem


@pytest.fixture
def pool():
    """The pool on for the current context; afterwards both pools trimmed
    and the host pool's tunables back to their documented defaults (a
    256 MiB cap, exact sizes above 1 MiB)."""
    _cudamem._hostpool_trim()
    try:
        with cudamem.using_memory_manager(cudamem.PoolMemoryManager) as mgr:
            yield mgr
            mgr.trim()
    finally:
        _cudamem._hostpool_set_limit(256 << 20)
        _cudamem._hostpool_set_round_threshold(1 << 20)
        _cudamem._hostpool_trim()
