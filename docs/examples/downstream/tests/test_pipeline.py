"""The pipeline's tests: NumPy is the reference for the data; cudamem's
pytest plugin runs them on the simulated driver in CI (no GPU), checks
that nothing stays allocated (--cudamem-leak-check in pyproject.toml) and,
with --cudamem-hazards, that no copy races with another stream."""
import numpy as np
import pipeline
import pytest

import cudamem
from cudamem.errors import CudaAPIError


def _batches(n=5, size=1000):
    return [np.arange(size, dtype=np.float32) + i * size for i in range(n)]


@pytest.mark.parametrize("nstreams", [1, 2, 3])
def test_round_trip(nstreams):
    batches = _batches()
    got = pipeline.gather(pipeline.stage_in(batches, nstreams))
    np.testing.assert_array_equal(got, np.concatenate(batches))


def test_stage_in_is_complete_when_it_returns(cudamem_sim, cudamem_hazards):
    # Every stream operation slowed down, so that stage_in's copies are
    # still running if it returned early: gather's copies, on a stream of
    # their own, would then race with them.
    batches = _batches(n=4)
    with cudamem_sim.delay(20_000):
        got = pipeline.gather(pipeline.stage_in(batches))
    np.testing.assert_array_equal(got, np.concatenate(batches))
    assert cudamem_hazards() == 0


def test_out_of_memory_leaks_nothing(cudamem_sim, cudamem_leak_check):
    cudamem_sim.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", after=2,
                       count=10)
    with pytest.raises(CudaAPIError):
        pipeline.stage_in(_batches())


def test_rejects_no_streams():
    with pytest.raises(ValueError, match="nstreams must be at least 1"):
        pipeline.stage_in(_batches(), nstreams=0)


@pytest.mark.requires_gpu
def test_on_the_real_driver():
    assert not cudamem.driver.info()["simulator"]
    batches = _batches(n=2, size=1 << 20)
    got = pipeline.gather(pipeline.stage_in(batches))
    np.testing.assert_array_equal(got, np.concatenate(batches))
