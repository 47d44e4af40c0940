"""cudamem's test suite: one package per area (arrays, streams, hostmem,
memmgr, interop, ipc, devices, faults, lifecycle, simulator, tools, rules,
parity), with the modules tests import in tests.helpers and the fixtures
in tests/conftest.py. Packages, so that same-named modules in two areas
do not clash."""
