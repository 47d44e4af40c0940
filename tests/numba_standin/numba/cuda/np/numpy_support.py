"""numba.cuda.np.numpy_support: numba typing (from_dtype, carray, farray);
not provided by cudamem."""
from numba._standin import unprovided_module

__getattr__ = unprovided_module(__name__, "typing")
