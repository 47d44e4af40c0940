"""The stand-in's two tools: ``alias`` (a stand-in module becomes the
cudamem module of the same role) and ``Unprovided`` (a name for device or
typing code that cudamem does not provide)."""
import importlib
import sys


def alias(name, target):
    """Make module *name* be cudamem's module *target* in ``sys.modules``.

    Called from the stand-in module's own body: the import system hands
    out whatever ``sys.modules[name]`` holds once the body has run. When
    cudamem has no *target*, module *name* is left empty and raises
    ``AttributeError`` for every name (a ``from ... import`` of it fails
    with ``ImportError``), saying which cudamem module is missing."""
    try:
        sys.modules[name] = importlib.import_module(target)
    except ImportError as exc:
        reason = f"cudamem has no module {target!r} ({exc})"

        def __getattr__(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            raise AttributeError(f"{name}.{attr}: {reason}")

        sys.modules[name].__getattr__ = __getattr__


class Unprovided:
    """A numba name cudamem deliberately does not provide (it compiles or
    runs device code, or is numba typing). Calling it or reading any of
    its attributes raises ``NotImplementedError``; a test that uses it
    fails there."""

    def __init__(self, name, category):
        self._name = name
        self._category = category

    def _refuse(self):
        raise NotImplementedError(
            f"{self._name} ({self._category}) is not provided by cudamem")

    def __call__(self, *args, **kwargs):
        self._refuse()

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._refuse()

    def __getitem__(self, key):
        self._refuse()

    def __repr__(self):
        return f"<not provided by cudamem: {self._name}>"


def unprovided_module(name, category):
    """A module ``__getattr__`` whose every name is ``Unprovided``."""

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Unprovided(f"{name}.{attr}", category)

    return __getattr__
