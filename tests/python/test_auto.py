# backward='auto' and the step cost model (issue 45, items 3 and 4): a model that predicts torch.nn
# faster makes the module run torch.nn's own implementation (outputs and gradients bit-identical to
# torch.nn's, no engine used); one that predicts bppsa faster runs bppsa's engine with the method the
# model picks (per layer); explicit methods ignore the model; bad model files are refused by name.
import ast
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import bppsa
from bppsa import _auto, nn
from util import flat_state, rel_err, twins

FEATURES = ["1", "T", "T*B*S", "T*B*S^2", "T*B*S^3", "T*B*S*I", "T*S^2"]
CELLS = ["RNN", "GRU", "LSTM"]


def write_model(path, per_candidate, cells=("rnn", "gru", "lstm"), span=None):
    """A model predicting a fixed time (ms) per candidate, at every thread count from 1; span: every
    group's (fit_auto's "span"), or None for none (every shape)."""
    groups = [{"cell": c, "candidate": k, "threads": 1, "coef": [ms, 0, 0, 0, 0, 0, 0]}
              for c in cells for k, ms in per_candidate.items()]
    for g in groups if span else ():
        g["span"] = span
    with open(path, "w") as f:
        json.dump({"format": "bppsa-cost-model/1", "fitted_on": "test", "features": FEATURES, "groups": groups}, f)
    return str(path)


@pytest.fixture
def model_file(tmp_path):
    yield lambda per_candidate, **kw: write_model(tmp_path / "model.json", per_candidate, **kw)
    bppsa.load_cost_model("")  # back to the process's default for the other tests


def _step(module, x):
    module.zero_grad(set_to_none=True)
    out, h = module(x)
    (out.square().sum() + sum(s.sum() for s in flat_state(h))).backward()
    return [out.detach(), *[s.detach() for s in flat_state(h)], *[p.grad.clone() for p in module.parameters()]]


@pytest.mark.parametrize("cell", CELLS)
def test_auto_runs_torch_nn_where_the_model_predicts_it_faster(cell, model_file):
    bppsa.load_cost_model(model_file({"bp": 5.0, "blelloch": 6.0, "hybrid": 7.0, "torch.nn": 1.0}))
    ref, ours = twins(cell, 4, 5, num_layers=2, bidirectional=True)
    x = torch.randn(7, 3, 4)
    expected, got = _step(ref, x), _step(ours, x)
    for a, b in zip(got, expected):
        assert torch.equal(a, b)  # torch.nn's own kernels: the same bits
    assert ours.last_backward == ["torch.nn"] * 4
    assert not any(spec._idle for spec in ours._specs), "torch.nn's path must not build bppsa engines"


def test_auto_runs_torch_nn_unless_bppsa_is_predicted_the_margin_faster(model_file):
    # bp predicted at 1 ms: torch.nn predicted slower by 5 % is inside the margin (torch.nn's kernels
    # run), by 20 % outside it (bppsa's bp runs); bench/auto/fit_auto.py reports with the same margin.
    assert _auto.HANDOFF_MARGIN == 1.10
    for torch_ms, ran in ((0.9, "torch.nn"), (1.05, "torch.nn"), (1.2, "bp")):
        bppsa.load_cost_model(model_file({"bp": 1.0, "blelloch": 6.0, "hybrid": 7.0, "torch.nn": torch_ms}))
        ref, ours = twins("GRU", 4, 5)
        x = torch.randn(6, 2, 4)
        for a, b in zip(_step(ours, x), _step(ref, x)):
            assert rel_err(a, b) <= 1e-5
        assert ours.last_backward == [ran], (torch_ms, ours.last_backward)
    fit_auto = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "auto", "fit_auto.py")
    with open(fit_auto) as f:
        tree = ast.parse(f.read())
    margins = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
               and [getattr(t, "id", None) for t in n.targets] == ["HANDOFF_MARGIN"]]
    assert margins == [_auto.HANDOFF_MARGIN], margins


def test_auto_runs_torch_nn_only_inside_the_shapes_its_fit_measured(model_file):
    # torch.nn predicted 5× faster everywhere, by a fit of T 5..50, B 2..8, H 4..64: a decoder's T 1
    # step, a batch of 16 and H 128 lie outside it and run bppsa's engine; T 7, B 3, H 5 runs torch.nn.
    span = {"steps": [5, 50], "batch": [2, 8], "hidden": [4, 64]}
    bppsa.load_cost_model(model_file({"bp": 5.0, "blelloch": 6.0, "hybrid": 7.0, "torch.nn": 1.0}, span=span))
    for hidden, steps, batch, ran in ((5, 7, 3, "torch.nn"), (5, 1, 3, "bp"), (5, 51, 3, "bp"), (5, 7, 1, "bp"),
                                      (5, 7, 16, "bp"), (128, 7, 3, "bp")):
        ref, ours = twins("LSTM", 4, hidden)
        x = torch.randn(steps, batch, 4)
        for a, b in zip(_step(ours, x), _step(ref, x)):
            assert rel_err(a, b) <= 1e-5
        assert ours.last_backward == [ran], (hidden, steps, batch, ours.last_backward)
    # The call's T and B as the module reads them: batch_first, unbatched (2-D), packed.
    ref, ours = twins("GRU", 4, 5, batch_first=True)
    for x, ran in ((torch.randn(3, 7, 4), "torch.nn"), (torch.randn(7, 3, 4), "bp"), (torch.randn(7, 4), "bp")):
        for a, b in zip(_step(ours, x), _step(ref, x)):
            assert rel_err(a, b) <= 1e-5
        assert ours.last_backward == [ran], (tuple(x.shape), ours.last_backward)
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(3, 7, 4), [7, 6, 2], batch_first=True)
    ours(packed)[0].data.sum().backward()
    assert ours.last_backward == ["torch.nn"]  # T 7 (its longest), B 3
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(1, 7, 4), [7], batch_first=True)
    ours(packed)[0].data.sum().backward()
    assert ours.last_backward == ["bp"]  # B 1, below the span


def test_auto_stays_out_of_a_jit_trace(model_file, monkeypatch):
    # Under torch.jit.trace the module runs torch.nn's forward (so the trace records torch's
    # operators) without consulting the model: a trace's sizes are tensors, which the decision
    # would turn into TracerWarnings of its own and cache keys that never match.
    bppsa.load_cost_model(model_file({"bp": 5.0, "blelloch": 6.0, "hybrid": 7.0, "torch.nn": 1.0}))
    ref, ours = twins("GRU", 4, 5)
    x = torch.randn(6, 2, 4)
    asked = []
    runs_torch = _auto.runs_torch
    monkeypatch.setattr(_auto, "runs_torch", lambda *a: asked.append(a) or runs_torch(*a))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # torch.nn's own forward warns too
        traced = torch.jit.trace(ours, (x,), check_trace=False)  # (a check re-runs it eagerly)
    assert not asked and ours.last_backward == [None]
    assert torch.equal(traced(x)[0], ref(x)[0])
    ours(x)  # eager: the model decides
    assert len(asked) == 1 and ours.last_backward == ["torch.nn"]


def test_auto_runs_bp_at_one_step(model_file):
    # blelloch predicted fastest, torch.nn slowest: at T 1 (one step, nothing to scan) auto runs BP,
    # and predictions() counts BP's time for bppsa there.
    bppsa.load_cost_model(model_file({"bp": 5.0, "blelloch": 1.0, "hybrid": 7.0, "torch.nn": 50.0}))
    ref, ours = twins("LSTM", 4, 5)
    for steps, ran in ((1, "bp"), (2, "blelloch")):
        x = torch.randn(steps, 3, 4)
        for a, b in zip(_step(ours, x), _step(ref, x)):
            assert rel_err(a, b) <= 1e-5
        assert ours.last_backward == [ran], (steps, ours.last_backward)
        p = _auto.predictions(ours, steps, 3, 1)
        assert p["bppsa"] == (5.0 if steps == 1 else 1.0), p


@pytest.mark.parametrize("cell", CELLS)
def test_auto_runs_the_method_the_model_predicts_fastest(cell, model_file):
    for fastest in ("blelloch", "hybrid", "bp"):
        times = {"bp": 5.0, "blelloch": 6.0, "hybrid": 7.0, "torch.nn": 50.0}
        times[fastest] = 1.0
        bppsa.load_cost_model(model_file(times))
        ref, ours = twins(cell, 4, 5, num_layers=2)
        x = torch.randn(9, 2, 4, dtype=torch.float64)
        ref.double()
        ours.double()
        for a, b in zip(_step(ours, x), _step(ref, x)):
            assert rel_err(a, b) <= 1e-10
        assert ours.last_backward == [fastest, fastest], (fastest, ours.last_backward)


def test_explicit_methods_and_no_fit_never_run_torch_nn(model_file):
    bppsa.load_cost_model(model_file({"bp": 5.0, "blelloch": 6.0, "hybrid": 7.0, "torch.nn": 1.0}))
    _, ours = twins("GRU", 3, 4, backward="hybrid")
    _step(ours, torch.randn(6, 2, 3))
    assert ours.last_backward == ["hybrid"]
    # a model with no torch.nn prediction for the cell: bppsa, by the model's least method
    bppsa.load_cost_model(model_file({"bp": 5.0, "blelloch": 1.0, "hybrid": 7.0}, cells=("gru",)))
    _, ours = twins("GRU", 3, 4)
    _step(ours, torch.randn(6, 2, 3))
    assert ours.last_backward == ["blelloch"]
    # no fit for the cell at all: the batch rule (threads < 2·batch: bp)
    _, ours = twins("LSTM", 3, 4, threads=2)
    _step(ours, torch.randn(6, 4, 3))
    assert ours.last_backward == ["bp"]


def test_a_new_model_replaces_cached_decisions(model_file):
    ref, ours = twins("RNN", 3, 4)
    x = torch.randn(5, 2, 3)
    bppsa.load_cost_model(model_file({"bp": 5.0, "blelloch": 6.0, "hybrid": 7.0, "torch.nn": 1.0}))
    _step(ours, x)
    assert ours.last_backward == ["torch.nn"]
    bppsa.load_cost_model(model_file({"bp": 1.0, "blelloch": 6.0, "hybrid": 7.0, "torch.nn": 50.0}))
    _step(ours, x)
    assert ours.last_backward == ["bp"]
    assert "model.json" in bppsa.cost_model_source()


def test_bad_model_files_are_refused_by_name(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"format": "bppsa-cost-model/1", "features": ["1"], "groups": []}')
    with pytest.raises(ValueError, match="broken.json"):
        bppsa.load_cost_model(str(bad))
    with pytest.raises(OSError, match="missing.json"):
        bppsa.load_cost_model(str(tmp_path / "missing.json"))
    # through the environment: the first forward names the variable's file
    code = ("import torch, bppsa.nn as nn\n"
            "m = nn.GRU(3, 4)\n"
            "m(torch.randn(5, 2, 3))[0].sum().backward()\n")
    env = dict(os.environ, BPPSA_COST_MODEL=str(bad))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "broken.json" in r.stderr, r.stderr[-2000:]


BUILT_IN = r"""
import json, torch, bppsa
from bppsa import nn, _auto, _native
out = {"source": bppsa.cost_model_source(), "predictions": [], "decisions": []}
for cell in ("rnn", "gru", "lstm"):
    for hidden, steps, batch in ((16, 30, 1), (256, 300, 16), (64, 3000, 64), (256, 1, 1)):
        for threads in (1, 2):
            out["predictions"].append(_native._C.predict_step(cell, hidden, hidden, 0, steps, batch, threads))
# T 1 (a decoder step's call) is in the grid too: there auto follows the fit as anywhere else
for kind, hidden, steps, batch in (("RNN", 16, 30, 1), ("GRU", 64, 30, 16), ("LSTM", 256, 30, 16),
                                   ("RNN", 256, 1, 1), ("GRU", 256, 1, 1), ("LSTM", 256, 1, 1)):
    torch.manual_seed(0)
    m = getattr(nn, kind)(hidden, hidden)
    m(torch.randn(steps, batch, hidden))[0].square().sum().backward()
    threads = _native.resolve_threads(_native.check_threads("test", m.bppsa_threads, "bppsa_threads"))
    p = _auto.predictions(m, steps, batch, threads)
    out["decisions"].append({"kind": kind, "predicted": p, "ran": m.last_backward})
print(json.dumps(out))
"""


def test_the_built_in_model_is_the_default_and_decides_auto():
    """Outside the suite's pin (conftest.py), backward='auto' consults the fit built into the library
    (src/nn/cost_model_fit.inc, bench/auto/run.sh --builtin): it predicts every candidate for every
    cell at 1 and 2 threads, spans the shapes of the grid it was fitted on (a T 1 call's among them),
    and there a module runs torch.nn's kernels exactly where the sum of its layer-directions'
    predictions does not put bppsa HANDOFF_MARGIN ahead of torch.nn."""
    env = {k: v for k, v in os.environ.items() if k != "BPPSA_COST_MODEL"}
    r = subprocess.run([sys.executable, "-c", BUILT_IN], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["source"].startswith("built-in ("), out["source"]
    candidates = {"bp", "blelloch", "hybrid", "torch.nn"}
    for p in out["predictions"]:
        assert set(p) == candidates | {c + " spans" for c in candidates}, p
        assert all(p[c] > 0 for c in candidates), p  # finite and positive (NaN fails too)
        assert all(p[c + " spans"] is True for c in candidates), p  # shapes of the grid it was fitted on
    for d in out["decisions"]:
        p = d["predicted"]
        assert p["torch.nn spans"] is True, d
        if p["torch.nn"] < _auto.HANDOFF_MARGIN * p["bppsa"]:
            assert d["ran"] == ["torch.nn"], d
        else:
            assert d["ran"] and all(m in ("bp", "blelloch", "hybrid") for m in d["ran"]), d
