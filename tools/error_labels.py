"""List every error exit in the given C sources and whether a test reached
it, from the gcov data of a coverage build (`make coverage`).

usage: error_labels.py BUILD_TEMP SRC_DIR [SRC_DIR ...]

An error exit is a goto label or a line that returns failure (`return -1`,
`return NULL`, or returns what cm_fail / cmpy_raise / support_error give).
A label counts as reached when the first executable line after it ran.
Prints one line per exit and a summary; exits 0 (it is a report)."""
import os
import re
import subprocess
import sys

LABEL = re.compile(r"^([A-Za-z_]\w*):\s*$")
FAILURE = re.compile(r"\breturn\s+(-1|NULL|cm_fail\(|cmpy_raise\(|"
                     r"support_error\(|stub_error\()")
IGNORE_LABELS = {"default"}


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


def main(argv):
    build_temp, dirs = argv[1], argv[2:]
    total = reached = 0
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if not name.endswith(".c"):
                continue
            source = os.path.join(d, name)
            lines = open(source).read().splitlines()
            counts = gcov_counts(build_temp, source)
            for i, what in exits(lines):
                total += 1
                hit = None
                if counts is not None:
                    for j in range(i, len(lines) + 1):
                        if counts.get(j) is not None:
                            hit = counts[j]
                            break
                reached += bool(hit)
                state = ("no data" if hit is None else
                         "reached %dx" % hit if hit else "UNREACHED")
                print("%-36s %-12s %s" % ("%s:%d" % (source, i), state, what))
    print("%d of %d error exits reached" % (reached, total))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
