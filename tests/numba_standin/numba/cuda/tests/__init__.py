"""numba.cuda.tests: only ``support`` (the harness); the test modules are
loaded from numba-cuda's wheel by tools/numba_tests.py."""
