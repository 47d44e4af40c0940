"""The simulator answers tests/gpu/driver_facts.py's questions as the GPU
recorded in tests/gpu/driver_facts.json did: freeing with another context
current or none, a pool used after a primary context reset, a pointer's
range from cuPointerGetAttributes, cuCtxRecordEvent's answers and which
synchronize gives back a stream-ordered pool's memory. cudamem's free
path, CAI import and synchronize() rely on these answers (release.c,
memory.c, ctxsync.c)."""
import json
import os
import subprocess
import sys

import pytest

from cudamem import simulator

pytestmark = pytest.mark.simulator

HERE = os.path.join(os.path.dirname(__file__), os.pardir, "gpu")


def test_the_simulator_answers_as_the_gpu(tmp_path):
    out = tmp_path / "facts.json"
    env = dict(os.environ, LD_LIBRARY_PATH=simulator.libcuda_dir())
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "driver_facts.py"), "--json",
         str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(HERE, "driver_facts.json")) as f:
        recorded = json.load(f)
    with open(out) as f:
        answers = json.load(f)
    assert answers.keys() == recorded["answers"].keys()
    for fact, answer in recorded["answers"].items():
        assert answers[fact] == answer, (fact, recorded["device"])
