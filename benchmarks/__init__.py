"""cudamem's benchmarks: ``python -m benchmarks`` (runner.py) times cudamem
and its peers against the raw driver floor of floor.c. Not installed with
cudamem; run from the repository root.
"""
