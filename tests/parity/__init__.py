"""numba-cuda parity: names, handles, host buffers, EMM classes,
subclassing and real-world host code."""
