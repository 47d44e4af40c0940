"""List every error label in the given C sources and whether a test reached
it, from the gcov data of a coverage build.

usage: error_labels.py BUILD_TEMP SRC_DIR [SRC_DIR ...]

A label counts as reached when the first executable line after it ran.
Prints one line per label and a summary; exits 0 (it is a report)."""
import os
import re
import subprocess
import sys
import tempfile

LABEL = re.compile(r"^([A-Za-z_]\w*):\s*$")
# Labels that are not error paths.
IGNORE = {"default"}


def gcov_counts(build_temp, source):
    """{line number: count or None (not executable)} for one source."""
    obj_dir = os.path.join(build_temp, os.path.dirname(source))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["gcov", "-o", os.path.abspath(obj_dir),
                        os.path.abspath(source)], cwd=tmp,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        path = os.path.join(tmp, os.path.basename(source) + ".gcov")
        if not os.path.exists(path):
            return None
        counts = {}
        with open(path) as f:
            for line in f:
                parts = line.split(":", 2)
                if len(parts) < 3:
                    continue
                count, lineno = parts[0].strip(), int(parts[1])
                if count == "-":
                    counts[lineno] = None
                elif count.startswith("#") or count.startswith("="):
                    counts[lineno] = 0
                else:
                    counts[lineno] = int(count.rstrip("*"))
        return counts


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
            for i, text in enumerate(lines, 1):
                m = LABEL.match(text)
                if not m or m.group(1) in IGNORE:
                    continue
                total += 1
                hit = None
                if counts is not None:
                    for j in range(i + 1, len(lines) + 1):
                        if counts.get(j) is not None:
                            hit = counts[j]
                            break
                if hit:
                    reached += 1
                state = ("no data" if hit is None else
                         "reached %dx" % hit if hit else "UNREACHED")
                print("%-40s %-12s %s" % ("%s:%d" % (source, i),
                                          m.group(1), state))
    print("%d of %d error labels reached" % (reached, total))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
