"""numba.cuda.cudadrv.error -> cudamem.errors."""
from numba._standin import alias

alias(__name__, "cudamem.errors")
