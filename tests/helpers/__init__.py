"""What the tests import, in one place (fixtures stay in tests/conftest.py):

- run: in_thread and run_python (a fresh interpreter with the suite's
  environment), ROOT and HELPERS for a subprocess's PYTHONPATH;
- interop: Producer, a foreign array seen only through its CUDA Array
  Interface;
- simref: SimDriver, the simulated driver called through ctypes as a
  second client of the driver;
- numba_plugin and rmm_style_plugin: EMM plugins as numba's and RMM's
  documentation write them (the latter is also loaded by name, from
  HELPERS, through NUMBA_CUDA_MEMORY_MANAGER).
"""
