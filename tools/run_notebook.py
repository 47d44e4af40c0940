"""Executes a notebook with nbclient in the repository root and fails on the
first cell that raises (`make notebook`). It only runs the notebook: it
writes nothing back, so the committed notebook stays free of outputs.
"""
import os
import sys

import nbclient
import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(paths):
    if not paths:
        sys.exit("usage: run_notebook.py NOTEBOOK...")
    # The kernel imports the in-place build of cudamem from the root.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(
            nb, timeout=120, kernel_name="python3",
            resources={"metadata": {"path": ROOT}})
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as exc:
            sys.exit("%s: %s" % (path, exc))
        cells = sum(c.cell_type == "code" for c in nb.cells)
        print("%s: %d code cells ran" % (path, cells))


if __name__ == "__main__":
    main(sys.argv[1:])
