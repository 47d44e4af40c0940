"""The seam between the extension and the package's Python
(docs/design.rst, "The seam to Python"): the extension imports nothing of
its package but cudamem.errors, cudamem/__init__.py hands it every other
object by keyword with _cudamem._install(), and a hook it lacks is a clear
RuntimeError, not a crash."""
import pathlib
import re

import pytest

import cudamem
from cudamem import _cudamem, memory
from cudamem.pool import PoolMemoryManager

PY_SRC = pathlib.Path(cudamem.__file__).parent / "_src" / "py"

HOOKS = ("make_memory_manager", "assign_memory_manager",
         "plugin_defer_cleanup", "UniqueDict", "MemoryInfo", "MemoryStats",
         "IpcHandle", "array_handle", "PoolIpcHandle", "load_streams",
         "load_handles", "complete")

# A second instance of the extension, made without the package's
# _install(): its state holds no hook.
BARE = """
import importlib.util
import cudamem
spec = importlib.util.find_spec("cudamem._cudamem")
bare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bare)
assert bare is not cudamem._cudamem
"""


def test_extension_imports_only_errors_from_its_package():
    imported = set()
    for path in sorted(PY_SRC.glob("*.[ch]")):
        imported.update(re.findall(r'PyImport_Import\w*\(\s*"(cudamem[\w.]*)"',
                                   path.read_text()))
    assert imported == {"cudamem.errors"}


def test_install_takes_every_hook_by_keyword():
    with pytest.raises(TypeError, match="missing required argument "
                                        "'make_memory_manager'"):
        _cudamem._install()
    with pytest.raises(TypeError, match="keyword arguments only"):
        _cudamem._install(*range(len(HOOKS)))
    with pytest.raises(TypeError, match="unexpected keyword argument "
                                        "'nonsense'"):
        _cudamem._install(nonsense=1, **dict.fromkeys(HOOKS))
    # None of the failed calls replaced a hook.
    assert isinstance(cudamem.current_context().memory_manager,
                      memory.DefaultMemoryManager)


def test_a_module_without_hooks_raises_runtime_error_naming_the_hook(run_py):
    proc = run_py(BARE + """
for call, hook in [
        (lambda: bare.memory_stats(), "MemoryStats"),
        (lambda: bare.current_context().memory_manager,
         "make_memory_manager"),
        (lambda: bare.current_context().get_memory_info(), "MemoryInfo"),
        (lambda: bare.current_context().open_ipc_handle(b"x" * 64, 8),
         "IpcHandle"),
        (lambda: bare.event().handle, "load_handles"),
        (lambda: bare.stream().add_callback(print), "load_streams"),
        (lambda: bare.to_device([1.0]).get_ipc_handle(), "IpcHandle"),
        (lambda: setattr(bare.current_context(), "memory_manager", None),
         "assign_memory_manager"),
        (lambda: bare.current_context().allocations, "UniqueDict")]:
    try:
        call()
    except RuntimeError as exc:
        assert "no %r hook" % hook in str(exc), (hook, exc)
    else:
        raise AssertionError(hook)
print("ok")
""")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


def test_a_loader_hook_must_return_its_tuple(run_py):
    proc = run_py(BARE + """
hooks = dict.fromkeys(%r)
hooks["load_handles"] = lambda: ("only one",)
hooks["complete"] = lambda: None
bare._install(**hooks)
try:
    bare.event().handle
except TypeError as exc:
    assert "the 'load_handles' hook returned ('only one',), not a tuple " \\
        "of 3" in str(exc), exc
else:
    raise AssertionError("no TypeError")
print("ok")
""" % (HOOKS,))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


def test_the_package_installs_what_the_extension_calls():
    ctx = cudamem.current_context()
    assert type(ctx.allocations) is memory.UniqueDict
    assert type(ctx.get_memory_info()) is cudamem.MemoryInfo
    assert type(cudamem.memory_stats()) is cudamem.MemoryStats
    a = cudamem.to_device([1, 2, 3])
    import ctypes
    assert isinstance(a.device_ctypes_pointer, ctypes.c_void_p)
    assert a.device_ctypes_pointer.value == a.__cuda_array_interface__[
        "data"][0]


def test_manager_modes_are_named_constants():
    assert _cudamem.MANAGER_NATIVE != _cudamem.MANAGER_PLUGIN
    assert memory._manager_mode(memory.DefaultMemoryManager) == \
        _cudamem.MANAGER_NATIVE
    assert memory._manager_mode(PoolMemoryManager) == _cudamem.MANAGER_NATIVE

    class Sub(PoolMemoryManager):
        pass

    # Exactly the native classes: a subclass may override memalloc().
    assert memory._manager_mode(Sub) == _cudamem.MANAGER_PLUGIN
    ctx = cudamem.current_context()
    with pytest.raises(ValueError, match="invalid memory manager mode 7"):
        ctx._set_memory_manager(ctx.memory_manager, 7)


def test_the_version_has_one_source():
    import tomllib
    from setuptools.config.expand import read_attr

    with open(PY_SRC.parents[2] / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "cudamem.__version__"
    # What setuptools reads from the source is what the package says.
    assert read_attr(attr, {"": str(PY_SRC.parents[2])},
                     str(PY_SRC.parents[2])) == cudamem.__version__


def test_a_complete_hook_that_raises_fails_the_first_use_only(run_py):
    # Its error is the first call's; the driver stays loaded, so the next
    # call goes on without asking again.
    proc = run_py(BARE + """
hooks = dict.fromkeys(%r)
asked = []
def complete():
    asked.append(1)
    raise LookupError("complete failed")
hooks["complete"] = complete
bare._install(**hooks)
try:
    bare.synchronize()
except LookupError as exc:
    assert str(exc) == "complete failed", exc
else:
    raise AssertionError("no LookupError")
bare.synchronize()
assert asked == [1], asked
print("ok")
""" % (HOOKS,), env={"CUDAMEM_SIMULATOR": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"
