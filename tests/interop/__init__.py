"""Interop: the CUDA Array Interface (import, export, stream ordering) and
DLPack (device arrays, host arrays, the capsule exporter)."""
