"""``python -m benchmarks``: the benchmark runner (see runner.py)."""
import sys

from benchmarks.runner import main

sys.exit(main())
