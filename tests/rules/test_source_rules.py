"""DESIGN's source rules (docs/design.rst), checked on the sources and on
the built objects:

- nothing under core/, sim/ or lib/ includes a Python or NumPy header
  (nor a py/ header, which would bring one in);
- lib/ depends on nothing of the project: its files include the C
  library's headers and each other's, never core's, the simulator's or
  CUDA's (both libraries build it in, below core's floors);
- core/ calls the driver only through the gate: a ``cu...(`` call appears
  in core/driver.c alone, every other file goes through ``CM_CALL``;
- ``cm__`` symbols are core's own: no other layer's source names one, and
  no object outside core/ (lib/ included) defines or needs one (``nm``); a
  ``cm_`` symbol
  of core is one that py/ needs;
- core/'s files keep to the floors of docs/architecture.rst: a file calls
  only its floor and those below, and no call cycle spans more than three
  files (tools/core_graph.py reads the graph from the objects);
- every type with ``Py_TPFLAGS_HAVE_GC`` whose ``Py_tp_dealloc`` is its
  own calls ``PyObject_GC_UnTrack`` in it;
- ``cm__mem_init`` (core/memory.h) sets every field of ``struct cm_mem``
  before its work set, which it leaves unset for speed, so that a new
  field cannot start as garbage.

That every builtin has a text signature is tests/rules/test_docs.py's
``test_every_builtin_has_a_text_signature``.

Each check is a function of the source root that returns the offenders,
so that it can be run on a deliberately broken copy.
"""
import importlib.util
import os
import re
import shutil
import subprocess

import pytest

from tests.helpers.run import ROOT

SRC = os.path.join("cudamem", "_src")
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.rst")


def _load_core_graph():
    spec = importlib.util.spec_from_file_location(
        "core_graph", os.path.join(ROOT, "tools", "core_graph.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


core_graph = _load_core_graph()
objects = core_graph.layer_objects

PYTHON_HEADER = re.compile(
    r"^(Python\.h|[Pp]y\w*\.h|structmember\.h|frameobject\.h|"
    r"(numpy|cpython|internal)/.*|.*\bpy/.*)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
DRIVER_CALL = re.compile(r"\bcu[A-Z]\w*\s*\(")
INTERNAL = re.compile(r"\bcm__\w+")


def sources(root, layer, exts=(".c", ".h")):
    d = os.path.join(root, SRC, layer)
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if f.endswith(exts))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def code_only(text):
    """The C text with comments, string and character literals blanked
    (newlines kept, so line numbers hold)."""
    pattern = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'
                         r"'(?:\\.|[^'\\\n])*'", re.S)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def where(path, text, pos, root):
    return "%s:%d" % (os.path.relpath(path, root),
                      text.count("\n", 0, pos) + 1)


def python_includes(root):
    """Includes of Python, NumPy or py/ headers under core/, sim/, lib/."""
    bad = []
    for layer in ("core", "sim", "lib"):
        for path in sources(root, layer):
            text = read(path)
            for m in INCLUDE.finditer(text):
                if PYTHON_HEADER.match(m.group(1)):
                    bad.append("%s: %s" % (where(path, text, m.start(), root),
                                           m.group(1)))
    return bad


FOREIGN_TO_LIB = re.compile(r"^(cuda\w*|cusim|nv\w*)\.h$")


def lib_project_includes(root):
    """Includes under lib/ of anything of the project outside lib/, or of
    CUDA's headers: a quoted include must name a lib/ file."""
    bad = []
    own = {os.path.basename(p) for p in sources(root, "lib")}
    for path in sources(root, "lib"):
        text = read(path)
        for m in INCLUDE.finditer(text):
            quoted = text[m.start():m.end()].rstrip().endswith('"')
            name = m.group(1)
            if (quoted and name not in own) or FOREIGN_TO_LIB.match(name):
                bad.append("%s: %s" % (where(path, text, m.start(), root),
                                       name))
    return bad


def driver_calls(root):
    """Direct driver calls in core/ outside core/driver.c."""
    bad = []
    for path in sources(root, "core"):
        if os.path.basename(path) == "driver.c":
            continue
        text = code_only(read(path))
        for m in DRIVER_CALL.finditer(text):
            bad.append("%s: %s" % (where(path, text, m.start(), root),
                                   m.group().rstrip("( ")))
    return bad


def internal_names(root):
    """cm__ names in the sources of py/, sim/ and lib/."""
    bad = []
    for layer in ("py", "sim", "lib"):
        for path in sources(root, layer):
            text = code_only(read(path))
            for m in INTERNAL.finditer(text):
                bad.append("%s: %s" % (where(path, text, m.start(), root),
                                       m.group()))
    return bad


def c_function_body(text, name):
    """The body of the definition of `name` (return type on the line
    before, as clang-format writes it), or None."""
    m = re.search(r"^%s\([^;{]*\)\s*\n\{\n(.*?)^\}" % re.escape(name),
                  text, re.M | re.S)
    return m.group(1) if m else None


def gc_deallocs_without_untrack(root):
    """GC types whose own tp_dealloc does not call PyObject_GC_UnTrack."""
    bad = []
    for path in sources(root, "py", (".c",)):
        text = code_only(read(path))
        raw = read(path)
        slots = {}
        for m in re.finditer(r"PyType_Slot\s+(\w+)\[\]\s*=\s*\{(.*?)\};",
                             raw, re.S):
            dealloc = re.search(r"\{\s*Py_tp_dealloc\s*,\s*(\w+)\s*\}",
                                m.group(2))
            slots[m.group(1)] = dealloc.group(1) if dealloc else None
        for m in re.finditer(r"PyType_Spec\s+\w+\s*=\s*\{(.*?)\};", raw,
                             re.S):
            spec = m.group(1)
            flags = re.search(r"\.flags\s*=([^.]*)", spec)
            table = re.search(r"\.slots\s*=\s*(\w+)", spec)
            if not (flags and table and
                    "Py_TPFLAGS_HAVE_GC" in flags.group(1)):
                continue
            if table.group(1) not in slots:
                bad.append("%s: slots %s not found" % (
                    where(path, raw, m.start(), root), table.group(1)))
                continue
            fn = slots[table.group(1)]
            if fn is None:
                continue  # inherits a dealloc that untracks
            body = c_function_body(text, fn)
            # One dealloc may serve the types of several files.
            for other in sources(root, "py", (".c",)):
                if body is None:
                    body = c_function_body(code_only(read(other)), fn)
            if body is None or "PyObject_GC_UnTrack" not in body:
                bad.append("%s: %s" % (where(path, raw, m.start(), root),
                                       fn))
    return bad


def record_fields_not_set(root):
    """Fields of struct cm_mem before its work set (`pending`) that
    cm__mem_init does not assign."""
    path = os.path.join(root, SRC, "core", "memory.h")
    text = code_only(read(path))
    struct = re.search(r"^struct cm_mem \{\n(.*?)^\};", text, re.M | re.S)
    head = struct.group(1).split("cm_mem_work pending[")[0]
    fields = re.findall(r"(\w+)(?:\[[^]]*\])?\s*;", head)
    body = c_function_body(text, "cm__mem_init") or ""
    return [f for f in fields
            if not re.search(r"\bm->%s\s*=" % re.escape(f), body)]


def build_temp_dir(root):
    """The build directory of the in-place build the Makefile made last
    (build/flavor-X names it), or None."""
    temp = core_graph.build_temp_dir(root)
    return temp if temp is not None and objects(temp, "py") else None


def nm_symbols(path, undefined):
    out = subprocess.run(["nm", "-u" if undefined else "--defined-only",
                          path], capture_output=True, text=True, check=True)
    return [line.split()[-1] for line in out.stdout.splitlines()
            if line.strip()]


def foreign_internal_symbols(build_temp):
    """cm__ symbols that an object outside core/ defines or needs."""
    bad = []
    for layer in ("py", "sim", "lib"):
        for obj in objects(build_temp, layer):
            for undefined in (True, False):
                for sym in nm_symbols(obj, undefined):
                    if sym.startswith("cm__"):
                        bad.append("%s: %s %s" % (
                            os.path.relpath(obj, build_temp),
                            "needs" if undefined else "defines", sym))
    return bad


def test_core_and_sim_include_no_python_header():
    assert python_includes(ROOT) == []


def test_lib_includes_nothing_of_the_project():
    assert sources(ROOT, "lib", (".c",))
    assert lib_project_includes(ROOT) == []


def test_a_new_record_sets_every_field_before_its_work_set():
    assert record_fields_not_set(ROOT) == []


def test_the_record_rule_finds_a_field_left_unset(tmp_path):
    core = tmp_path / SRC / "core"
    core.mkdir(parents=True)
    text = read(os.path.join(ROOT, SRC, "core", "memory.h"))
    (core / "memory.h").write_text(
        text.replace("    m->released = 0;\n", ""))
    assert record_fields_not_set(str(tmp_path)) == ["released"]


def test_the_lib_rule_finds_a_project_include(tmp_path):
    lib = tmp_path / SRC / "lib"
    lib.mkdir(parents=True)
    (lib / "own.h").write_text("")
    (lib / "x.c").write_text('#include "own.h"\n#include <stdint.h>\n'
                             '#include "status.h"\n#include <cuda.h>\n')
    assert lib_project_includes(str(tmp_path)) == [
        "%s:3: status.h" % os.path.join(SRC, "lib", "x.c"),
        "%s:4: cuda.h" % os.path.join(SRC, "lib", "x.c")]


def test_core_calls_the_driver_only_through_the_gate():
    assert driver_calls(ROOT) == []


def test_core_goes_through_the_gate():
    # The check above has calls to look at: core's files call CM_CALL.
    calls = sum(len(re.findall(r"\bCM_CALL0?\(", read(p)))
                for p in sources(ROOT, "core", (".c",)))
    assert calls >= 50


def test_no_cm__name_outside_core_sources():
    assert internal_names(ROOT) == []


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_no_cm__symbol_outside_core_objects():
    temp = build_temp_dir(ROOT)
    if temp is None:
        pytest.skip("no objects of a Makefile build (build/tmp-*)")
    core = set()
    for obj in objects(temp, "core"):
        core.update(s for s in nm_symbols(obj, False)
                    if s.startswith("cm__"))
    # The objects are the ones core's internal names live in.
    assert core
    assert foreign_internal_symbols(temp) == []


def test_every_gc_type_untracks_in_its_dealloc():
    assert gc_deallocs_without_untrack(ROOT) == []


@pytest.mark.parametrize("untracks", [True, False])
def test_the_untrack_rule_reads_a_dealloc_of_another_file(tmp_path, untracks):
    py = tmp_path / SRC / "py"
    py.mkdir(parents=True)
    (py / "a.c").write_text(
        "void\nshared_dealloc(PyObject *op)\n{\n%s    tp_free(op);\n}\n"
        % ("    PyObject_GC_UnTrack(op);\n" if untracks else ""))
    (py / "b.c").write_text(
        "static PyType_Slot b_slots[] = {\n"
        "    {Py_tp_dealloc, shared_dealloc},\n    {0, NULL},\n};\n"
        "static PyType_Spec b_spec = {\n    .name = \"b\",\n"
        "    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,\n"
        "    .slots = b_slots,\n};\n")
    bad = gc_deallocs_without_untrack(str(tmp_path))
    assert bad == ([] if untracks else
                   ["%s:5: shared_dealloc" % os.path.join(SRC, "py", "b.c")])


def test_gc_types_are_found():
    # The parser sees the GC types (it would pass vacuously otherwise).
    count = 0
    for path in sources(ROOT, "py", (".c",)):
        count += len(re.findall(r"\.flags\s*=[^.]*Py_TPFLAGS_HAVE_GC",
                                read(path)))
    assert count >= 10


needs_objects = pytest.mark.skipif(shutil.which("nm") is None,
                                   reason="needs binutils' nm")


def core_objects_or_skip():
    temp = build_temp_dir(ROOT)
    if temp is None:
        pytest.skip("no objects of a Makefile build (build/tmp-*)")
    return temp


@needs_objects
def test_every_cm_symbol_of_core_is_used_by_py():
    temp = core_objects_or_skip()
    core = core_graph.symbol_tables(temp, "core")
    assert core_graph.public_unused(
        core, core_graph.symbol_tables(temp, "py")) == []


@needs_objects
def test_the_cm_rule_finds_an_unused_name():
    # The rule on a py/ that needs nothing: every cm_ function is unused.
    temp = core_objects_or_skip()
    core = core_graph.symbol_tables(temp, "core")
    unused = core_graph.public_unused(core, {})
    assert "memory.c: cm_mem_alloc_from" in unused
    assert not any(": cm__" in line for line in unused)


@needs_objects
def test_core_keeps_to_the_floors_of_the_architecture_page():
    temp = core_objects_or_skip()
    edges = core_graph.graph(core_graph.symbol_tables(temp, "core"))
    floors = core_graph.read_floors(ARCHITECTURE)
    assert core_graph.floor_violations(edges, floors) == []


def test_the_architecture_page_lists_floors():
    # The page's list is what the check above reads: every core file once.
    floors = core_graph.read_floors(ARCHITECTURE)
    files = {os.path.basename(p)[:-2] for p in sources(ROOT, "core", (".c",))}
    assert set(floors) == files
    assert floors["errors"] == 1 and floors["oom"] == max(floors.values())


def test_the_floor_check_finds_a_call_upward():
    edges = {"stats": {"pool": ["cm_pool_trim"]}, "pool": {"stats": ["x"]}}
    floors = {"stats": 1, "pool": 6}
    assert core_graph.floor_violations(edges, floors) == [
        "stats.c (floor 1) -> pool.c (floor 6): cm_pool_trim"]


@needs_objects
def test_no_call_cycle_in_core_spans_more_than_three_files():
    temp = core_objects_or_skip()
    edges = core_graph.graph(core_graph.symbol_tables(temp, "core"))
    assert len(edges) >= 20
    assert [c for c in core_graph.cycles(edges) if len(c) > 3] == []


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}
    assert core_graph.cycles(edges) == [["a", "b", "c"]]
