"""Streams, events and callbacks: the ordering numba and the CUDA driver
define."""
