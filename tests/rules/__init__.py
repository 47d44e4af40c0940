"""House rules checked on the sources: docstrings and api.rst, DESIGN's
source rules, the seam to Python, the type stubs."""
