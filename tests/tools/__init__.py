"""The command line, the benchmark runner and the pytest plugin for
downstream projects."""
