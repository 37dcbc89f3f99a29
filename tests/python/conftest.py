# pytest configuration of the bppsa Python tests: a fixed seed per test, and one thread for
# PyTorch so that its reference runs are reproducible.
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)
    yield
