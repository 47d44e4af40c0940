"""numba.cuda.devicearray -> cudamem.devicearray."""
from numba._standin import alias

alias(__name__, "cudamem.devicearray")
