"""python -m cudamem [info|bandwidth|demo] [options]

info       the driver cudamem loads (path, version, simulator or not, why
           CUDA is unavailable when it is) and every device.
bandwidth  host <-> device transfer bandwidth: pageable, pinned and
           registered host memory, both directions.
demo       a short tour; without a usable GPU it runs on the simulated
           driver.

`python -m cudamem COMMAND --help` says more; the code is cudamem/_cli.py.
"""
import sys

from cudamem._cli import main

if __name__ == "__main__":
    sys.exit(main())
