"""What the tests import, in one place (fixtures stay in tests/conftest.py):

- run: in_thread and run_python (a fresh interpreter with the suite's
  environment), ROOT and HELPERS for a subprocess's PYTHONPATH;
- interop: Producer, a foreign array seen only through its CUDA Array
  Interface, and DLPack's structures read back through ctypes;
- hostmem: page-aligned host buffers;
- memmgr: driver call counts, device addresses and queued work of the
  memory-manager tests;
- devmem: device_memory, device 0 with a chosen memory size;
- simref: SimDriver, the simulated driver called through ctypes as a
  second client of the driver;
- simdriver: scripts that drive the simulated driver through ctypes in a
  fresh process;
- numba_plugin and rmm_style_plugin: EMM plugins as numba's and RMM's
  documentation write them (the latter is also loaded by name, from
  HELPERS, through NUMBA_CUDA_MEMORY_MANAGER).

The fault tests share their driver-row table and sweep inside
tests/faults (test_error_paths imports test_driver_faults's REACH table,
test_error_paths_more the sweep of test_error_paths): the table is what
those tests are about, and stays beside them.
"""
