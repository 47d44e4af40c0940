"""python -m cudamem [info|bandwidth|demo] [options]

info       the driver cudamem loads (path, version, simulator or not, why
           CUDA is unavailable when it is) and every device.
bandwidth  host <-> device transfer bandwidth: pageable, pinned and
           registered host memory, both directions.
demo       a short tour; without a usable GPU it runs on the simulated
           driver.

`python -m cudamem COMMAND --help` says more. This file parses the command
line; the commands are cudamem/_cli.py's (info, bandwidth) and
cudamem/_demo.py's (demo, which uses the other two).
"""
import argparse
import sys

from cudamem._cli import (
    DEFAULT_SIZES,
    DIRECTIONS,
    KINDS,
    _choices,
    bandwidth,
    info,
    parse_sizes,
)


def _arg(parse):
    """An argparse type from a parser that raises ValueError: argparse then
    prints the message, naming the value."""
    def convert(text):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
    return convert


def _positive(text):
    value = int(text)
    if value < 1:
        raise ValueError("not a positive count: %r" % text)
    return value


def parser():
    """The argparse parser of ``python -m cudamem``."""
    top = argparse.ArgumentParser(
        prog="python -m cudamem",
        description="cudamem's command-line tool: the driver and devices, "
                    "transfer bandwidth, a guided tour.")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser(
        "info", help="the driver and devices (the default command)",
        description="The driver cudamem loads (path, version, simulated or "
                    "not; why CUDA is unavailable when it is) and every "
                    "device with its memory and key attributes.")
    p.add_argument("--json", action="store_true",
                   help="print the facts as JSON")
    p = sub.add_parser(
        "bandwidth", help="host <-> device transfer bandwidth",
        description="Times copies between host and device memory with "
                    "events on one stream: pageable NumPy arrays, pinned "
                    "arrays and registered (page-locked in place) NumPy "
                    "arrays, both directions. On the simulated driver the "
                    "numbers mean nothing.")
    p.add_argument("--sizes", type=_arg(parse_sizes), default=DEFAULT_SIZES,
                              help="comma-separated copy sizes, binary units "
                        "(default %s)" % DEFAULT_SIZES)
    p.add_argument("--direction", default="all",
                   type=_arg(lambda s: _choices(s, DIRECTIONS, "all")),
                   help="htod, dtoh or all (default)")
    p.add_argument("--kind", default="all",
                   type=_arg(lambda s: _choices(s, KINDS, "all")),
                   help="comma-separated pageable, pinned, registered, or "
                        "all (default)")
    p.add_argument("--repeat", type=_arg(_positive), default=5,
                   help="timed copies per measurement (default 5)")
    p.add_argument("--plot", metavar="PATH",
                   help="also write a plot to PATH (needs matplotlib)")
    p.add_argument("--json", action="store_true",
                   help="print the results as JSON instead of a table")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar")
    sub.add_parser(
        "demo", help="a guided tour of cudamem",
        description="A short tour: devices, a round trip, a view and an "
                    "assignment, streams and events timing a transfer, "
                    "pinned vs pageable bandwidth, interop. Without a "
                    "usable GPU it runs on the simulated driver.")
    return top


def main(argv=None):
    """Runs ``python -m cudamem`` with *argv* (sys.argv[1:] by default);
    returns the exit status."""
    args = parser().parse_args(argv)
    if args.command in (None, "info"):
        return info(as_json=getattr(args, "json", False))
    if args.command == "bandwidth":
        if args.plot:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                print("python -m cudamem bandwidth: error: --plot needs "
                      "matplotlib, which is not installed (pip install "
                      "matplotlib)", file=sys.stderr)
                return 2
        return bandwidth(args)
    from cudamem import _demo  # NumPy: only for the tour

    return _demo.demo()


if __name__ == "__main__":
    sys.exit(main())
