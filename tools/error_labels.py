"""List every error exit in the given C sources and whether a test reached
it, from the gcov data of a coverage build (`make coverage`).

usage: error_labels.py [--allow FILE] BUILD_TEMP SRC_DIR [SRC_DIR ...]

An error exit is a goto label or a line that returns failure (`return -1`,
`return NULL`, or returns what cm_fail / cmpy_raise / support_error give).
A label counts as reached when the first executable line after it ran.

Each exit gets a kind from the code that leads to it (the condition that
guards it, or that of every goto to a label; for a condition that calls
nothing, with the statement before it): "driver" when that code passes a
cm_error (`err)`, `&err`) or raises one (cmpy_raise), which the fault
injection of tests/faults/test_driver_faults.py and
tests/faults/test_error_paths.py can make fail; "alloc" when it is a
malloc, calloc or realloc of core's; "python" when its only calls are
CPython or NumPy allocations, which _testcapi.set_nomemory fails
(tests/faults/test_error_paths.py); "other" for the rest (bad input, or a
call that fails for more than memory).

FILE (default tools/unreached.txt next to this script) lists exits known
to be unreached, one per line: `path function what  # reason`, where
`what` is the exit as printed (a label with its colon, or the start of the
return line); it covers every such exit of that function. Prints one line
per exit and a summary by kind; exits 1 when a driver, alloc or python
exit is unreached and not listed, so that the report stays true."""
import os
import re
import subprocess
import sys

LABEL = re.compile(r"^([A-Za-z_]\w*):\s*$")
FAILURE = re.compile(r"\breturn\s+(-1|NULL|cm_fail\(|cmpy_raise\(|"
                     r"support_error\(|stub_error\()")
IGNORE_LABELS = {"default"}
FUNCTION = re.compile(r"^([A-Za-z_]\w*)\(")
DRIVER = re.compile(r"\berr\)|&err\b|\bcmpy_raise\(|\bCM_CALL\(")
ALLOC = re.compile(r"\b(malloc|calloc|realloc)\(")
# CPython and NumPy calls that, given valid arguments, fail only when
# memory runs out; a failed allocation of theirs is what
# _testcapi.set_nomemory makes.
PYALLOC = re.compile(
    r"\b(PyLong_From\w+|PyFloat_FromDouble|PyTuple_New|PyTuple_Pack|"
    r"PyList_New|PyList_Append|PyDict_New|PyDict_Copy|PyDict_SetItem\w*|"
    r"PyUnicode_From\w+|PyUnicode_Join|PyBytes_FromStringAndSize|"
    r"Py_BuildValue|PyCapsule_New|PyObject_New|PyObject_GC_New|tp_alloc|"
    r"PyType_GenericAlloc|PyMem_\w*[CM]alloc|PyArray_NewFromDescr|"
    r"PyArray_NewLikeArray|PyArray_DescrFromType|PyType_FromModuleAndSpec|"
    r"PyModule_Add\w+|PyErr_NoMemory|PySequence_Tuple|PySequence_List)\(")
# Calls that neither fail nor raise (reference counting, type checks).
QUIET = re.compile(r"\b(Py_X?DECREF|Py_X?INCREF|Py_CLEAR|Py_X?SETREF|"
                   r"Py_X?NewRef|Py_TYPE|Py\w+_Check\w*|sizeof)\(")
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
KEYWORDS = {"if", "while", "for", "switch", "return"}
GUARD_START = re.compile(r"^\s*(\}\s*)?(if|else|while|for|switch)\b")
DEFAULT_ALLOW = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "unreached.txt")


def gcov_counts(build_temp, source):
    """{line number: count, or None where not executable}, or None when the
    build has no data for `source`."""
    obj_dir = os.path.join(build_temp, os.path.dirname(source))
    proc = subprocess.run(["gcov", "-t", "-o", obj_dir, source],
                          capture_output=True, text=True)
    counts = {}
    current = None
    for line in proc.stdout.splitlines():
        parts = line.split(":", 3)
        if len(parts) < 3:
            continue
        count, lineno = parts[0].strip(), parts[1].strip()
        if lineno == "0":
            if parts[2] == "Source":
                current = parts[3]
            continue
        if current != source or not lineno.isdigit():
            continue
        if count == "-":
            counts[int(lineno)] = None
        elif count[0] in "#=":
            counts[int(lineno)] = 0
        else:
            counts[int(lineno)] = int(count.rstrip("*"))
    return counts or None


def exits(lines):
    """(line number, what) for every error exit."""
    for i, text in enumerate(lines, 1):
        m = LABEL.match(text)
        if m and m.group(1) not in IGNORE_LABELS:
            yield i, m.group(1) + ":"
        elif FAILURE.search(text):
            yield i, text.strip()[:40]


def function_of(lines, i):
    """(name, first line) of the function that line i is in."""
    for j in range(i, 0, -1):
        m = FUNCTION.match(lines[j - 1])
        if m:
            return m.group(1), j
    return "?", 1


def guard(lines, i, start, assignment=False):
    """The code that leads to the statement on line i: back to the
    condition that guards it, at most 12 lines, not before `start`. With
    `assignment`, a condition that calls nothing (`if (x == NULL)`) comes
    with the statement before it, which made x."""
    text = [lines[i - 1]]
    j = i - 1
    while j >= max(start, i - 12):
        line = lines[j - 1]
        if line.rstrip().endswith("}") or LABEL.match(line):
            break
        text.append(line)
        j -= 1
        if GUARD_START.match(line):
            break
    condition = text[-1].partition("(")[2]
    if assignment and GUARD_START.match(text[-1]) and condition and \
            not CALL.search(condition):
        while j > start:
            text.append(lines[j - 1])
            j -= 1
            if lines[j - 1].rstrip().endswith((";", "{", "}")):
                break
    return "\n".join(text)


def kind(lines, i, what, start, end):
    """"driver", "alloc", "python" or "other" for the exit on line i."""
    def code(assignment):
        if not what.endswith(":"):
            return guard(lines, i, start, assignment)
        goto = re.compile(r"\bgoto\s+%s\s*;" % re.escape(what[:-1]))
        return "\n".join(guard(lines, j, start, assignment)
                         for j in range(start, end + 1)
                         if goto.search(lines[j - 1]))

    if DRIVER.search(code(False)):
        return "driver"
    if ALLOC.search(code(True)):
        return "alloc"
    if python_only(code(True)):
        return "python"
    return "other"


def python_only(code):
    """Whether code fails only through the CPython and NumPy allocations
    it calls: it makes at least one, and no other call."""
    others = [m.group(1) for m in CALL.finditer(QUIET.sub("", code))
              if m.group(1) not in KEYWORDS and
              not PYALLOC.match(m.group(0))]
    return bool(PYALLOC.search(code)) and not others


def read_allow(path):
    """{(path, function, what): reason} from an allowlist file."""
    allow = {}
    if not os.path.exists(path):
        return allow
    with open(path) as f:
        text = f.read()
    for n, line in enumerate(text.splitlines(True), 1):
        body, _, reason = line.partition("#")
        if not body.strip():
            continue
        parts = body.split(None, 2)
        if len(parts) != 3 or not reason.strip():
            raise SystemExit("%s:%d: want `path function what  # reason`"
                             % (path, n))
        allow[tuple(p.strip() for p in parts)] = reason.strip()
    return allow


def function_end(lines, start):
    for j in range(start, len(lines) + 1):
        if lines[j - 1].startswith("}"):
            return j
    return len(lines)


def main(argv):
    allow_path = DEFAULT_ALLOW
    if len(argv) > 2 and argv[1] == "--allow":
        allow_path, argv = argv[2], argv[:1] + argv[3:]
    allow = read_allow(allow_path)
    used = set()
    build_temp, dirs = argv[1], argv[2:]
    # kind -> [exits, reached, unreached but listed]
    totals = {k: [0, 0, 0] for k in ("driver", "alloc", "python", "other")}
    missing = []
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if not name.endswith(".c"):
                continue
            source = os.path.join(d, name)
            with open(source) as f:
                lines = f.read().splitlines()
            counts = gcov_counts(build_temp, source)
            for i, what in exits(lines):
                func, start = function_of(lines, i)
                k = kind(lines, i, what, start, function_end(lines, start))
                hit = None
                if counts is not None:
                    for j in range(i, len(lines) + 1):
                        if counts.get(j) is not None:
                            hit = counts[j]
                            break
                key = (source, func, what)
                totals[k][0] += 1
                totals[k][1] += bool(hit)
                if hit:
                    state = "reached %dx" % hit
                elif hit is None:
                    state = "no data"
                elif key in allow:
                    used.add(key)
                    totals[k][2] += 1
                    state = "listed"
                else:
                    state = "UNREACHED"
                    if k != "other":
                        missing.append("%s:%d %s" % (source, i, what))
                print("%-36s %-12s %-6s %s" % ("%s:%d" % (source, i), state,
                                               k, what))
    for k, (n, hit, listed) in totals.items():
        print("%s exits: %d of %d reached, %d unreached and listed, "
              "%d unreached" % (k, hit, n, listed, n - hit - listed))
    print("%d of %d error exits reached"
          % (sum(t[1] for t in totals.values()),
             sum(t[0] for t in totals.values())))
    for key in sorted(set(allow) - used):
        print("listed in %s but reached or gone: %s" % (allow_path,
                                                       " ".join(key)))
    if missing:
        print("%d driver, allocation or Python allocation exit(s) "
              "unreached and not in %s:"
              % (len(missing), allow_path))
        print("\n".join("  " + m for m in missing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
