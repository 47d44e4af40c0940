"""The file-level call graph of cudamem/_src/core/, read from the built
objects with nm: an edge a -> b when a.o needs (U) a symbol that b.o
defines. Prints the edges, the strongly connected components of more than
one file, and, given the floor plan of docs/architecture.rst, the edges
that climb a floor; --dot writes the graph for Graphviz.

    python tools/core_graph.py                 # after `make build`
    python tools/core_graph.py --dot | dot -Tsvg > core.svg
    python tools/core_graph.py --floors docs/architecture.rst

tests/test_source_rules.py runs the same functions on every build.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join("cudamem", "_src")


def build_temp_dir(root=ROOT):
    """The build directory of the in-place build the Makefile made last
    (build/flavor-X names it), or None."""
    for stamp in glob.glob(os.path.join(root, "build", "flavor-*")):
        flavor = os.path.basename(stamp)[len("flavor-"):]
        temp = os.path.join(root, "build", "tmp-" + flavor)
        if layer_objects(temp, "core"):
            return temp
    return None


def layer_objects(build_temp, layer):
    return sorted(glob.glob(os.path.join(build_temp, SRC, layer, "*.o")))


def nm_symbols(path, undefined):
    out = subprocess.run(["nm", "-u" if undefined else "--defined-only",
                          path], capture_output=True, text=True, check=True)
    syms = []
    for line in out.stdout.splitlines():
        parts = line.split()
        # Local symbols (lower-case type letters) bind nothing across files.
        if parts and (undefined or parts[-2].isupper()):
            syms.append(parts[-1])
    return syms


def unit(path):
    return os.path.splitext(os.path.basename(path))[0]


def symbol_tables(build_temp, layer):
    """{file: (defined symbols, needed symbols)} for a layer's objects."""
    return {unit(o): (set(nm_symbols(o, False)), set(nm_symbols(o, True)))
            for o in layer_objects(build_temp, layer)}


def graph(tables):
    """{file: {callee file: sorted symbols}} within one layer."""
    owner = {}
    for name, (defined, _) in tables.items():
        for sym in defined:
            owner[sym] = name
    edges = {}
    for name, (_, needed) in tables.items():
        out = edges.setdefault(name, {})
        for sym in needed:
            callee = owner.get(sym)
            if callee is not None and callee != name:
                out.setdefault(callee, []).append(sym)
    for out in edges.values():
        for syms in out.values():
            syms.sort()
    return edges


def components(edges):
    """The strongly connected components (Tarjan), each sorted; the list
    sorted by size, largest first."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(comps, key=lambda c: (-len(c), c))


def cycles(edges):
    """The components that are cycles (more than one file)."""
    return [c for c in components(edges) if len(c) > 1]


FLOOR = re.compile(r"^\s*(\d+)\.\s+\*\*([^*]+)\*\*:\s*(.*)$")


def read_floors(path):
    """The floor plan of docs/architecture.rst: lines such as
    ``3. **subsystems**: memory.c, pool.c, ...`` (a file per name, lower
    numbers lower; a name may wrap onto indented lines). Returns
    {file: floor number}."""
    floors, current = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = FLOOR.match(line)
            if m:
                current = int(m.group(1))
                rest = m.group(3)
            elif current is not None and line.startswith("   ") \
                    and line.strip():
                rest = line
            else:
                current = None
                continue
            for name in re.findall(r"([a-z_]+)\.c\b", rest):
                floors[name] = current
    return floors


def floor_violations(edges, floors):
    """Edges from a file to a higher floor, and files the plan misses."""
    bad = ["%s.c: on no floor" % f for f in sorted(edges)
           if f not in floors]
    bad += ["%s.c: on a floor but not built" % f for f in sorted(floors)
            if f not in edges]
    for a in sorted(edges):
        for b, syms in sorted(edges[a].items()):
            if a in floors and b in floors and floors[b] > floors[a]:
                bad.append("%s.c (floor %d) -> %s.c (floor %d): %s" % (
                    a, floors[a], b, floors[b], ", ".join(syms)))
    return bad


def public_unused(core_tables, py_tables):
    """cm_ symbols core defines that no py/ object needs: core-internal,
    so they should be cm__."""
    used = set()
    for _, needed in py_tables.values():
        used |= needed
    bad = []
    for name, (defined, _) in sorted(core_tables.items()):
        for sym in sorted(defined):
            if sym.startswith("cm_") and not sym.startswith("cm__") \
                    and sym not in used:
                bad.append("%s.c: %s" % (name, sym))
    return bad


def dot(edges, floors=None):
    lines = ["digraph core {", "  rankdir=BT;", "  node [shape=box];"]
    if floors:
        for level in sorted(set(floors.values())):
            names = " ".join('"%s"' % f for f in sorted(floors)
                             if floors[f] == level)
            lines.append("  { rank=same; %s }" % names)
    for a in sorted(edges):
        for b in sorted(edges[a]):
            lines.append('  "%s" -> "%s";' % (a, b))
    lines.append("}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-temp", help="default: build/tmp-<flavor>")
    ap.add_argument("--floors", help="an architecture page with the plan")
    ap.add_argument("--dot", action="store_true", help="print DOT only")
    ap.add_argument("--symbols", action="store_true",
                    help="list the symbols behind each edge")
    args = ap.parse_args(argv)
    temp = args.build_temp or build_temp_dir()
    if temp is None:
        sys.exit("no core objects: run `make build` first")
    tables = symbol_tables(temp, "core")
    edges = graph(tables)
    floors = read_floors(args.floors) if args.floors else None
    if args.dot:
        print(dot(edges, floors))
        return 0
    print("edges (%d files):" % len(edges))
    for a in sorted(edges):
        if args.symbols:
            for b, syms in sorted(edges[a].items()):
                print("  %s -> %s: %s" % (a, b, ", ".join(syms)))
        else:
            print("  %s -> %s" % (a, ",".join(sorted(edges[a])) or "-"))
    comps = cycles(edges)
    print("cycles (strongly connected components): %d" % len(comps))
    for c in comps:
        print("  %d files: %s" % (len(c), ", ".join(c)))
    status = 0
    unused = public_unused(tables, symbol_tables(temp, "py"))
    print("cm_ symbols no py/ object uses: %d" % len(unused))
    for line in unused:
        print("  " + line)
    if floors is not None:
        bad = floor_violations(edges, floors)
        print("floor violations: %d" % len(bad))
        for line in bad:
            print("  " + line)
        status = 1 if bad else 0
    return status


if __name__ == "__main__":
    sys.exit(main())
