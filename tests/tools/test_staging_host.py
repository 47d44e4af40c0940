"""benchmarks/staging_host.py, the staging pipeline's host-side benchmark
(issue 23): a one-round smoke run at the smallest size checks every path's
bytes against NumPy before timing, covers every configuration, and leaves
the staging tunables as it found them."""
import json
import os

from benchmarks import staging_host
from cudamem import _cudamem


def test_quick_run_covers_every_configuration(tmp_path, monkeypatch):
    for name in staging_host.ENV:
        monkeypatch.delenv(name, raising=False)
    before = _cudamem._staging_reload()
    out = tmp_path / "staging"
    staging_host.main(["--quick", "--sizes", "4M", "--rounds", "1",
                       "--out", str(out)])
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    names = {r["config"] for r in rows}
    # Host baselines, the driver's path both ways, and per staged setting
    # one host-to-device and four device-to-host rows (prefault off/on,
    # written or fresh destination).
    assert {"memcpy, written dst", "memcpy, fresh dst", "driver pageable",
            "driver pageable, written dst",
            "driver pageable, fresh dst"} <= names
    for t in (1, 4):
        tag = f"staged t={t} chunk=4M"
        assert tag in names
        for pf in (0, 1):
            for dst in ("written", "fresh"):
                assert f"{tag} prefault={pf}, {dst} dst" in names
    assert len(rows) == len(names) == 5 + 2 * 5
    assert all(r["size"] == 4 << 20 and r["gbs_median"] > 0 for r in rows)
    assert "| dtoh | staged t=4 chunk=4M prefault=1, fresh dst |" in (
        out.with_suffix(".md").read_text())
    assert not any(name in os.environ for name in staging_host.ENV)
    assert _cudamem._staging_reload() == before
