"""numba.cuda.np: numba's NumPy typing support; only numpy_support."""
