"""Helpers of the interop tests."""


class Producer:
    """A foreign array: a cudamem array seen only through its CUDA Array
    Interface."""

    def __init__(self, base):
        self.base = base

    @property
    def __cuda_array_interface__(self):
        return self.base.__cuda_array_interface__
