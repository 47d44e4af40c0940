"""numba's ``numba.cuda.cudadrv`` package layout, for code that imports
from there: ``cudamem.cudadrv.driver``, ``.devicearray``, ``.devices`` and
``.runtime`` are the very modules ``cudamem.driver``,
``cudamem.devicearray``, ``cudamem.devices`` and ``cudamem.runtime`` (one
module each, so patching one patches both names), and ``.error`` holds
numba's exception names. Nothing here loads the driver.
"""
import sys

from cudamem import devicearray, devices, driver, errors, runtime

__all__ = ["devicearray", "devices", "driver", "error", "runtime"]

error = errors
for _name, _module in (("devicearray", devicearray), ("devices", devices),
                       ("driver", driver), ("error", errors),
                       ("runtime", runtime)):
    sys.modules["%s.%s" % (__name__, _name)] = _module
del _name, _module
