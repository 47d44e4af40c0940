"""numba.cuda.cudadrv.devices -> cudamem.devices."""
from numba._standin import alias

alias(__name__, "cudamem.devices")
