# pytest configuration of the bppsa Python tests: the package as installed (never the source
# tree's python/bppsa), a fixed seed per test.
import os

import pytest
import torch

import bppsa

_SOURCE = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))
if os.path.realpath(bppsa.__file__).startswith(_SOURCE + os.sep):
    raise RuntimeError(f"bppsa was imported from the source tree ({bppsa.__file__}), not from an installed "
                       "package: install it with `pip install .` (scripts/setup.sh does)")


def pytest_report_header(config):
    return f"bppsa {bppsa.__version__} from {os.path.dirname(bppsa.__file__)}; torch {torch.__version__}"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)
    yield
