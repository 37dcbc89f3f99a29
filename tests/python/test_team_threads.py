# Whose threads run the engine's teams (bppsa.set_team_threads, docs/pytorch.md "The threads"): the
# package runs them on the OpenMP runtime torch's own ops use, the environment variable and the setter
# choose, bad values are refused naming their source, and the results are the same bits on either.
import os
import subprocess
import sys

import pytest
import torch

import bppsa
import bppsa.nn as bnn


@pytest.fixture
def restore_team_threads():
    before = bppsa.team_threads()
    yield
    bppsa.set_team_threads(before)


def test_the_package_runs_teams_on_openmp_threads_unless_told_otherwise():
    env = {k: v for k, v in os.environ.items() if k != "BPPSA_TEAM_THREADS"}
    code = "import bppsa; print(bppsa.team_threads(), bppsa.build_info()['team_threads'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["openmp", "openmp"]
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, BPPSA_TEAM_THREADS="own"),
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["own", "own"]


def test_a_bad_environment_value_is_refused_at_import_naming_the_variable():
    env = dict(os.environ, BPPSA_TEAM_THREADS="pool")
    out = subprocess.run([sys.executable, "-c", "import bppsa"], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "$BPPSA_TEAM_THREADS is 'pool'" in out.stderr and "'own'" in out.stderr and "'openmp'" in out.stderr


def test_the_setter_refuses_other_values_and_keeps_the_setting(restore_team_threads):
    bppsa.set_team_threads("own")
    with pytest.raises(ValueError, match=r"bppsa.set_team_threads\(threads\) is 'OpenMP'"):
        bppsa.set_team_threads("OpenMP")
    with pytest.raises(TypeError, match="pass 'openmp' or 'own'"):
        bppsa.set_team_threads(None)
    assert bppsa.team_threads() == "own"
    bppsa.set_team_threads("openmp")
    assert bppsa.team_threads() == "openmp"


def test_the_engine_calls_the_openmp_runtime_torch_ships():
    # pip's torch for Linux bundles libgomp in torch/lib; the engine must call that one copy, or its
    # teams would not run on the threads torch's ops leave spinning.
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    if not any(name.startswith("libgomp") for name in os.listdir(lib)):
        pytest.skip("this torch bundles no libgomp")
    runtime = bppsa.build_info()["openmp_runtime"]
    assert os.path.dirname(os.path.realpath(runtime)) == os.path.realpath(lib), runtime


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
def test_the_same_bits_on_either_threads(cell, restore_team_threads):
    torch.manual_seed(3)
    m = getattr(bnn, cell)(5, 160, num_layers=2, backward="bp", threads=2)  # teams of 2 at every step
    x = torch.randn(30, 16, 5)
    results = []
    for threads in ("openmp", "own", "openmp"):
        bppsa.set_team_threads(threads)
        torch.add(torch.ones(1 << 20), 1)  # a parallel torch op first: its threads are then awake
        m.zero_grad()
        y, _ = m(x)
        y.square().sum().backward()
        results.append([y.detach().clone()] + [p.grad.clone() for p in m.parameters()])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


FORK_SCRIPT = r"""
import multiprocessing as mp, sys, torch
torch.set_num_threads(2)
torch.add(torch.ones(1 << 22), 1)  # the parent's main thread now has OpenMP threads, the child a record of them

def child(q):
    torch.set_num_threads(1)  # torch's own parallel ops would hang here (as a DataLoader worker, which does this)
    import bppsa, bppsa.nn as bnn                   # first imported here, after the fork
    torch.manual_seed(0)
    m = bnn.LSTM(5, 160, backward="bp", threads=2)  # teams of 2
    y, _ = m(torch.randn(30, 16, 5))
    y.sum().backward()
    q.put(bppsa.team_threads())

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    p.join(120)
    if p.is_alive():
        p.kill()
        sys.exit("the forked child hung")
    print(q.get(timeout=5))
"""


def test_a_child_forked_before_bppsa_was_imported_runs_its_teams_on_the_own_pool(tmp_path):
    # libgomp in a forked child waits forever for its parent's threads; the child must not enter it.
    script = tmp_path / "fork_first.py"
    script.write_text(FORK_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "BPPSA_TEAM_THREADS"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "own"
