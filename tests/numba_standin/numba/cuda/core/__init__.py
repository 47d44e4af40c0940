"""numba.cuda.core: only ``config`` (test infrastructure)."""
