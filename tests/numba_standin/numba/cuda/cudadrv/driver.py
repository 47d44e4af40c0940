"""numba.cuda.cudadrv.driver -> cudamem.cudadrv.driver."""
from numba._standin import alias

alias(__name__, "cudamem.cudadrv.driver")
