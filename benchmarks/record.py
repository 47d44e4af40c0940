"""record.py: the name a run's page gets in benchmarks/results/: its day
and machine, and a number after them for a later run of the same day, so
that no run replaces a page already recorded."""
import os


def unused_stem(directory, stem, exts):
    """The path of `stem` in `directory`, else of stem-2, stem-3, ...: the
    first of them with no file of any extension in `exts`."""
    name, n = stem, 1
    while any(os.path.exists(os.path.join(directory, name + ext))
              for ext in exts):
        n += 1
        name = "%s-%d" % (stem, n)
    return os.path.join(directory, name)
