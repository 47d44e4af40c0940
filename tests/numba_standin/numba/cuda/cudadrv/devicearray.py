"""numba.cuda.cudadrv.devicearray -> cudamem.cudadrv.devicearray."""
from numba._standin import alias

alias(__name__, "cudamem.cudadrv.devicearray")
