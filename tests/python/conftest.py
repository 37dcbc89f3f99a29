# pytest configuration of the bppsa Python tests: the package as installed (never the source
# tree's python/bppsa), a fixed seed per test.
import atexit
import importlib.metadata
import json
import os
import shutil
import tempfile
import urllib.parse

# torch.compile's on-disk caches are the machine's, shared by every run and every version of bppsa:
# a graph compiled against an older operator schema would be replayed as it was. The suite compiles
# into a cache of its own.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bppsa-tests-inductor-")
atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], True)

import pytest  # noqa: E402
import torch  # noqa: E402

import bppsa  # noqa: E402

_ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
if os.path.realpath(bppsa.__file__).startswith(os.path.join(_ROOT, "python") + os.sep):
    raise RuntimeError(f"bppsa was imported from the source tree ({bppsa.__file__}), not from an installed "
                       "package: install it with `pip install .` (scripts/setup.sh does)")


def _installed_from():
    """The folder `pip install` took the imported bppsa from (None: not installed by pip, e.g. a build tree)."""
    try:
        dist = importlib.metadata.distribution("bppsa")
        if os.path.realpath(dist.locate_file("bppsa")) != os.path.realpath(os.path.dirname(bppsa.__file__)):
            return None
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    return os.path.realpath(urllib.parse.unquote(urllib.parse.urlparse(url).path)) if url.startswith("file:") else None


# The environment is shared by every clone on the machine: the package must be this checkout's.
_FROM = _installed_from()
if _FROM is not None and _FROM != _ROOT:
    raise RuntimeError(f"the installed bppsa was built from {_FROM}, not from this checkout ({_ROOT}): run "
                       "scripts/setup.sh here (it installs this checkout's package)")


# The suite tests bppsa's engine against torch.nn, so backward='auto' must run it: with the built-in step
# cost model, auto would run torch.nn's own kernels wherever the fit predicts them faster, and those
# tests would compare torch.nn with itself. No fit here (the batch rule picks bppsa's method);
# test_auto.py tests the fallback with models of its own and the built-in model in a process of its own.
NO_COST_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cost_model_none.json")
os.environ.setdefault("BPPSA_COST_MODEL", NO_COST_MODEL)


def pytest_report_header(config):
    return f"bppsa {bppsa.__version__} from {os.path.dirname(bppsa.__file__)}; torch {torch.__version__}"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)
    yield
