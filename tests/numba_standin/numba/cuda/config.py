"""numba.cuda.config is numba.cuda.core.config (as in numba-cuda)."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("numba.cuda.core.config")
