"""What `import cudamem` loads (DESIGN rule 1: nothing heavy it does not
need): the extension and cudamem.errors only; the package's Python modules
and the names they define are loaded on first access, and are still all
listed by dir() and reachable. Facts about sys.modules, not timings."""
import ast
import pathlib

import pytest

import cudamem

INIT = pathlib.Path(cudamem.__file__)

# Standard library modules a plain interpreter does not load and that
# `import cudamem` must not load either.
HEAVY = ("numpy", "ctypes", "asyncio", "threading", "typing", "re", "enum",
         "inspect", "dataclasses", "weakref", "collections", "contextlib",
         "functools", "importlib.util", "cudamem.simulator")

LOADS = """
import sys
before = set(sys.modules)
import cudamem
new = set(sys.modules) - before
print(sorted(new))
print(sorted(m for m in %r if m in new))
""" % (HEAVY,)


@pytest.mark.parametrize("simulator", [None, "1"])
def test_import_loads_only_the_extension_and_its_errors(run_py, simulator):
    # CUDAMEM_SIMULATOR unset and set: neither loads a driver at import.
    proc = run_py(LOADS, env={"CUDAMEM_SIMULATOR": simulator,
                              "CUDAMEM_MEMORY_MANAGER": None,
                              "NUMBA_CUDA_MEMORY_MANAGER": None})
    assert proc.returncode == 0, proc.stderr
    new, heavy = proc.stdout.splitlines()
    assert heavy == "[]"
    assert sorted(m for m in eval(new) if m.startswith("cudamem")) == [
        "cudamem", "cudamem._cudamem", "cudamem.errors"]


def test_a_manager_named_in_the_environment_loads_memory_at_import(run_py):
    # Its plugin must be asked for the first allocation's memory.
    proc = run_py("""
        import sys
        import cudamem
        print("cudamem.memory" in sys.modules)
    """, env={"CUDAMEM_MEMORY_MANAGER": "default"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True\n"


def test_every_public_name_is_listed_and_reachable(run_py):
    # In a fresh process, so that nothing is loaded before the lookups.
    proc = run_py("""
        import importlib, sys
        import cudamem
        names = dir(cudamem)
        assert names == sorted(set(names))
        missing = [n for n in cudamem.__all__ if n not in names]
        assert not missing, missing
        for name, module in cudamem._LAZY.items():
            assert name in names and name in cudamem.__all__, name
            got = getattr(cudamem, name)
            assert got is getattr(importlib.import_module(module), name), name
        for name in cudamem._SUBMODULES:
            assert name in names, name
            assert getattr(cudamem, name) is sys.modules["cudamem." + name]
        for name in cudamem._HOST_NDARRAYS:
            assert getattr(cudamem, name).__name__ == name
        star = {}
        exec("from cudamem import *", star)
        for name in cudamem.__all__:
            assert star[name] is getattr(cudamem, name), name
        print("ok")
    """, env={"CUDAMEM_SIMULATOR": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


def test_unknown_names_raise_attribute_error():
    with pytest.raises(AttributeError,
                       match="module 'cudamem' has no attribute 'nonsense'"):
        cudamem.nonsense  # noqa: B018


def test_the_lazy_names_are_the_ones_type_checkers_see():
    # cudamem/__init__.py imports each lazy name under TYPE_CHECKING, so
    # that mypy and IDEs know its type: the two lists agree.
    tree = ast.parse(INIT.read_text())
    [block] = [node for node in tree.body if isinstance(node, ast.If)
               and getattr(node.test, "id", None) == "TYPE_CHECKING"]
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom), ast.dump(node)
        for alias in node.names:
            assert alias.asname is None
            seen[alias.name] = node.module
    assert seen == {**dict.fromkeys(cudamem._SUBMODULES, "cudamem"),
                    **cudamem._LAZY}


def test_the_hooks_load_their_modules_on_first_use(run_py):
    # The extension's first call into a hook installs the real objects.
    proc = run_py("""
        import sys
        import cudamem
        assert "cudamem.devices" not in sys.modules
        stats = cudamem.memory_stats()
        from cudamem import devices, ipc, memory
        assert type(stats) is devices.MemoryStats
        info = cudamem.current_context().get_memory_info()
        assert type(info) is devices.MemoryInfo
        ctx = cudamem.current_context()
        assert type(ctx.allocations) is memory.UniqueDict
        assert type(ctx.memory_manager) is memory.DefaultMemoryManager
        h = cudamem.to_device([1.0, 2.0]).get_ipc_handle()
        assert type(h) is ipc.IpcArrayHandle
        print("ok")
    """, env={"CUDAMEM_SIMULATOR": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


# What the first use binds (cudamem/__init__.py _complete): every lazy
# name, submodule and host array type, the same objects __getattr__ gave.
COMPLETE = """
import dis, importlib, sys
import numpy
import cudamem
assert "__getattr__" in vars(cudamem)

def load():
    return cudamem.device_array

def specialized():
    for _ in range(64):
        load()
    return {i.opname for i in dis.get_instructions(load, adaptive=True)
            if i.opname.startswith("LOAD_ATTR")}

if sys.version_info >= (3, 11):
    # With __getattr__ in the module, CPython leaves the load generic.
    assert "LOAD_ATTR_MODULE" not in specialized(), specialized()
cudamem.device_array(1)
assert "__getattr__" not in vars(cudamem)
for name, module in cudamem._LAZY.items():
    assert vars(cudamem)[name] is getattr(importlib.import_module(module),
                                          name), name
for name in cudamem._SUBMODULES:
    assert vars(cudamem)[name] is sys.modules["cudamem." + name], name
for name in cudamem._HOST_NDARRAYS:
    assert vars(cudamem)[name] is cudamem._cudamem._host_ndarray_type(name)
    assert issubclass(vars(cudamem)[name], numpy.ndarray), name
assert set(dir(cudamem)) >= set(cudamem.__all__)
try:
    cudamem.nonsense
except AttributeError as exc:
    assert str(exc) == "module 'cudamem' has no attribute 'nonsense'", exc
else:
    raise AssertionError("no AttributeError")
if sys.version_info >= (3, 11):
    load.__code__ = load.__code__.replace()  # forget the old warm-up
    assert "LOAD_ATTR_MODULE" in specialized(), specialized()
print("ok")
"""


def test_the_first_use_binds_the_lazy_names_and_drops_getattr(run_py):
    proc = run_py(COMPLETE, env={"CUDAMEM_SIMULATOR": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


def test_without_numpy_the_first_use_leaves_the_names_lazy(run_py):
    # The host array types need NumPy: a program of streams and events
    # only does not load it for them.
    proc = run_py("""
        import sys
        import cudamem
        cudamem.stream().synchronize()
        assert "numpy" not in sys.modules
        assert "__getattr__" in vars(cudamem)
        assert "cudamem.pool" not in sys.modules
        from cudamem.pool import AsyncMemoryManager
        assert cudamem.AsyncMemoryManager is AsyncMemoryManager
        print("ok")
    """, env={"CUDAMEM_SIMULATOR": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"
