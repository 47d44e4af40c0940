"""numba.types: numba's type system (typing); not provided by cudamem."""
from numba._standin import unprovided_module

__getattr__ = unprovided_module(__name__, "typing")
