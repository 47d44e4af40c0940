"""A stand-in ``numba`` package that runs numba-cuda's own host-side tests
against cudamem (``make test-numba``, driven by tools/numba_tests.py).

It maps names only; nothing here reimplements behaviour or produces a
result a test checks:

- ``numba.cuda`` forwards every attribute to ``cudamem``;
- ``numba.cuda.cudadrv.driver`` / ``.devicearray`` / ``.devices`` /
  ``.error`` and ``numba.cuda.devicearray`` *are* the cudamem modules of
  the same role (the module object is replaced in ``sys.modules``), so a
  test that patches them patches cudamem. Where cudamem lacks the module,
  the stand-in module stays empty and every attribute access raises
  ``AttributeError`` naming the missing cudamem module: the test fails on
  its own, at the point where it needs the name;
- what runs on the device or is numba typing (``cuda.jit``,
  ``cuda.vectorize``, ``numba.types``, ``numpy_support.from_dtype``, ...)
  is an ``Unprovided`` placeholder that raises ``NotImplementedError`` when
  touched, so a test that compiles a kernel fails at that line;
- the test harness (``numba.cuda.testing``, ``numba.cuda.tests.support``,
  ``numba.cuda.core.config``) is test infrastructure, not behaviour. It is
  given as minimal equivalents of numba-cuda's (each module says which
  parts are copied): numba-cuda's own modules import its compiler, typing,
  NRT and dispatcher at import time and cannot be loaded without them.

The test modules themselves are numba-cuda's, unchanged, from its wheel.
"""
