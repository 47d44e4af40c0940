# Sphinx configuration for cudamem's documentation (`make docs`). The build
# imports cudamem from the repository root (the in-place build) and runs the
# examples as doctests on the simulated driver; it reaches no network.
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("CUDAMEM_SIMULATOR", "1")

import cudamem  # noqa: E402 (the in-place build in ROOT)

project = "cudamem"
author = "the cudamem developers"
copyright = "the cudamem developers"
release = version = cudamem.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.doctest"]
exclude_patterns = ["_build", "examples/*.ipynb"]
root_doc = "index"
html_theme = "alabaster"
html_static_path = []

# C functions carry text signatures (inspect.signature reads them); Python
# functions' docstrings may start with a signature line, shown as given.
autodoc_docstring_signature = True
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True}

# No intersphinx (no network): names outside cudamem (int, numpy.ndarray,
# "context manager" in a signature) cannot be resolved, so only cudamem's
# own cross-references are held to -n.
nitpick_ignore_regex = [(r"py:.*", r"(?!cudamem\.).*")]

doctest_global_setup = """
import numpy as np
import cudamem as cuda
"""
