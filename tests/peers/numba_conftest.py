"""The conftest that numba-cuda's test modules expect of the repository
they run in (its wheel ships the modules without it): the
``initialize_from_pytest_config`` fixture that numba.cuda.testing's
CUDATestCase uses, and the option it reads. tools/numba_tests.py copies
this file into the folder it runs numba-cuda's tests from, as conftest.py.
"""
import pytest


def pytest_addoption(parser):
    parser.addoption("--dump-failed-filechecks", action="store_true",
                     help="dump reproducers of failed FileCheck tests")


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request):
    request.cls._dump_failed_filechecks = request.config.getoption(
        "dump_failed_filechecks")
