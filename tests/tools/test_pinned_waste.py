"""benchmarks/pinned_waste.py, the pinned cache's waste table (issue 25):
every row's page-locked bytes follow the documented rule (the one
tests/hostmem/test_pinned_cache.py checks), and the pool keeps no more
than its cap after the sweep's frees. It reads the simulator's page-locked
bytes, so it needs the simulator (on a GPU it read zeros until
simulator.live() refused to answer for another driver)."""
import re

import pytest

from benchmarks import pinned_waste
from cudamem import _cudamem
from tests.hostmem.test_pinned_cache import LIMIT, rule

pytestmark = pytest.mark.simulator


def test_the_table_follows_the_rule(tmp_path):
    out = tmp_path / "waste.md"
    pinned_waste.main(["--out", str(out)])
    text = out.read_text()
    rows = re.findall(r"^\| (\d+) \([^)]*\) \| (\d+) \| ", text, re.M)
    assert len(rows) == len(pinned_waste.sizes())
    for requested, pinned in rows:
        assert int(pinned) == rule(int(requested)), requested
    kept = re.search(r"(\d+) blocks, (\d+) bytes .* cached \(limit (\d+)\)",
                     text)
    blocks, cached, limit = (int(x) for x in kept.groups())
    assert limit == LIMIT and 0 < cached <= limit and blocks >= 1
    assert _cudamem._hostpool_stats()["cached_bytes"] == 0
    assert _cudamem._hostpool_stats()["limit"] == LIMIT
