"""The type stubs of the extension (cudamem/_cudamem.pyi) against the
extension itself: every function, type, method, attribute and constant it
defines is in the stub, nothing the stub declares is missing from it, and
each signature names the parameters of its docstring's first line. That
the stubs type-check is `make typecheck` (mypy --strict)."""
import ast
import inspect
import os
import re
import types

import pytest

from cudamem import _cudamem
from tests.helpers.run import ROOT

STUB = os.path.join(ROOT, "cudamem", "_cudamem.pyi")

# Dunder members that are part of a type's API (protocols and operators).
DUNDERS = {"__array__", "__cuda_array_interface__", "__cuda_memory__",
           "__cuda_ndarray__", "__cuda_stream__", "__dlpack__",
           "__dlpack_device__", "__getitem__", "__setitem__", "__len__",
           "__iter__", "__int__", "__new__", "__eq__", "__ne__", "__lt__",
           "__le__", "__gt__", "__ge__", "__hash__"}


def _stub():
    """{name: node} for the stub's top level, and {class: {member: node}};
    Protocol classes and type aliases (the stub's own helpers) left out."""
    with open(STUB) as f:
        tree = ast.parse(f.read())
    top, members = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            if any(getattr(b, "id", None) == "Protocol" for b in node.bases):
                continue
            top[node.name] = node
            members[node.name] = {
                m.name if not isinstance(m, ast.AnnAssign) else m.target.id: m
                for m in node.body
                if isinstance(m, (ast.FunctionDef, ast.AnnAssign))}
        elif isinstance(node, ast.FunctionDef):
            top[node.name] = node
        elif (isinstance(node, ast.AnnAssign) and
              getattr(node.annotation, "id", None) != "TypeAlias"):
            top[node.target.id] = node
    return top, members


TOP, MEMBERS = _stub()
TYPES = sorted(n for n in dir(_cudamem)
               if isinstance(getattr(_cudamem, n), type))


def _extension_names():
    return {n for n in dir(_cudamem) if not n.startswith("__")}


def _members(cls):
    """The members a type defines itself (not inherited), as the stub
    must list them: its own names, and the dunders of DUNDERS."""
    out = {}
    for name, value in vars(cls).items():
        if name.startswith("__") and name not in DUNDERS:
            continue
        if name in ("__hash__",) and value is None:
            continue
        out[name] = value
    return out


def test_every_extension_name_is_in_the_stub():
    missing = _extension_names() - set(TOP)
    assert not missing, "add to cudamem/_cudamem.pyi: %s" % sorted(missing)


def test_the_stub_declares_nothing_the_extension_lacks():
    extra = set(TOP) - _extension_names()
    assert not extra, "not in the extension: %s" % sorted(extra)


def test_the_table_covers_the_extension():
    assert {"to_device", "device_array", "Stream", "DeviceNDArray",
            "CUDA_VERSION", "_flush_pending"} <= set(TOP)
    assert "copy_to_host" in MEMBERS["DeviceNDArrayBase"]
    assert "__cuda_stream__" in MEMBERS["Stream"]


@pytest.mark.parametrize("name", TYPES)
def test_every_member_is_in_the_stub(name):
    own = set(_members(getattr(_cudamem, name)))
    stub = set(MEMBERS[name]) - {"__getattr__"}
    assert not own - stub, "add to class %s in the stub: %s" % (
        name, sorted(own - stub))
    assert not stub - own, "class %s in the stub has %s, the type does " \
        "not" % (name, sorted(stub - own))


def _doc_params(doc):
    """The parameter names of a docstring's signature line(s), "name(a,
    b=0, *, c=None) -> T": ["a", "b", "c"]; None without one."""
    head = " ".join((doc or "").split("\n\n")[0].split())
    m = re.match(r"[\w.]+\((.*?)\)(\s*->.*)?$", head)
    if m is None:
        return None
    params = []
    depth = 0
    part = ""
    for ch in m.group(1) + ",":
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            name = part.split("=")[0].strip().lstrip("*")
            if name and name not in ("/", "self"):
                params.append(name)
            part = ""
        else:
            part += ch
    return params


def _signature_doc(obj):
    """The signature line of a builtin: its __text_signature__ (without
    $self / $module / $type) when it has one, else its docstring."""
    own = isinstance(obj, (type, types.MethodDescriptorType,
                           types.ClassMethodDescriptorType,
                           types.BuiltinFunctionType))
    text_sig = getattr(obj, "__text_signature__", None)
    # Slot wrappers and tp_new carry CPython's own signatures.
    if own and text_sig and getattr(obj, "__name__", "") != "__new__":
        return "f" + re.sub(r"^\(\$\w+(, )?", "(", text_sig)
    return obj.__doc__


def _stub_params(node):
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    if args.vararg is not None:
        names.insert(len(args.posonlyargs + args.args), args.vararg.arg)
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return names


def _callables():
    rows = []
    for name, node in sorted(TOP.items()):
        obj = getattr(_cudamem, name)
        if isinstance(node, ast.FunctionDef):
            rows.append(pytest.param(_signature_doc(obj), node, id=name))
        elif isinstance(node, ast.ClassDef):
            for mname, mnode in sorted(MEMBERS[name].items()):
                member = vars(obj).get(mname)
                if (isinstance(mnode, ast.FunctionDef)
                        and inspect.isroutine(member)
                        or isinstance(member, classmethod)):
                    rows.append(pytest.param(
                        _signature_doc(member), mnode,
                        id="%s.%s" % (name, mname)))
            doc = _signature_doc(obj)
            if doc and "(" in doc.split("\n")[0]:
                rows.append(pytest.param(doc, MEMBERS[name]["__new__"],
                                         id=name + ".__new__"))
    return rows


@pytest.mark.parametrize("doc, node", _callables())
def test_signature_matches_the_docstring(doc, node):
    want = _doc_params(doc)
    if want is None:  # slot wrappers: "Return self==value."
        return
    assert _stub_params(node) == want, "the docstring says %r" % (
        doc.split("\n")[0],)


def test_doc_params_parser():
    assert _doc_params("f(a, b=(1, 2), *, c=None) -> T\n\nx") == ["a", "b",
                                                                 "c"]
    assert _doc_params("reshape(*shape, order='C') -> X") == ["shape",
                                                             "order"]
    assert _doc_params("g() -> int") == []
    assert _doc_params("int(self)") == []
    assert _doc_params("Return self==value.") is None


def test_stub_and_marker_are_package_data():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    assert {"py.typed", "*.pyi"} <= set(data["cudamem"])
    assert os.path.exists(os.path.join(ROOT, "cudamem", "py.typed"))
