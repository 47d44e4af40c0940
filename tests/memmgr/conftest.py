"""The memory-manager tests' shared fixture."""
import gc

import pytest

import cudamem
from cudamem import _cudamem


@pytest.fixture
def pool():
    """Device 0's pool, on; afterwards off, trimmed and without a limit, so
    that the leak check sees nothing of it."""
    _cudamem._pool_enable(0, True)
    yield
    _cudamem._pool_enable(0, False)
    _cudamem._pool_set_limit(0, None)
    gc.collect()
    cudamem.synchronize()
    _cudamem._pool_trim(0)
    assert _cudamem._pool_stats(0)["slabs"] == 0
