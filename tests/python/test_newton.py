# bppsa.nn's forward='newton' (docs/method.md §9): outputs, final states and every gradient equal
# torch.nn's (the independent oracle) for every cell, stacked and bidirectional, packed; the
# report of the last forward; refusals; forward='auto' (the default) running what a cost model
# picks, with the iterations it allows.
import json
import os

import pytest
import torch

import bppsa
import bppsa.nn

NO_COST_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cost_model_none.json")  # no fit


CASES = [("RNN", {}), ("RNN", {"nonlinearity": "relu"}), ("GRU", {}), ("LSTM", {}), ("LSTM", {"proj_size": 3})]


def _pair(name, dtype, **kw):
    torch.manual_seed(3)
    ref = getattr(torch.nn, name)(4, 6, num_layers=2, bidirectional=True, dtype=dtype, **kw)
    mod = getattr(bppsa.nn, name)(4, 6, num_layers=2, bidirectional=True, dtype=dtype, forward="newton", **kw)
    mod.load_state_dict(ref.state_dict())
    return ref, mod


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp(min=1)).item()


@pytest.mark.parametrize("name,kw", CASES)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_newton_equals_torch_nn(name, kw, dtype, tol):
    ref, mod = _pair(name, dtype, **kw)
    x = torch.randn(30, 3, 4, dtype=dtype)
    outs, grads = [], []
    for m in (ref, mod):
        xi = x.clone().requires_grad_()
        out, state = m(xi)
        h = state[0] if isinstance(state, tuple) else state
        (out.square().sum() + h.sum()).backward()
        outs.append((out.detach(), h.detach()))
        grads.append([xi.grad] + [p.grad for p in m.parameters()])
    assert _rel(outs[1][0], outs[0][0]) <= tol and _rel(outs[1][1], outs[0][1]) <= tol
    for g_mod, g_ref in zip(grads[1], grads[0]):
        assert _rel(g_mod, g_ref) <= 10 * tol
    report = mod.last_forward
    assert len(report) == 4 and all(r is not None for r in report)
    for r in report:
        assert r["method"] == "newton" and r["fell_back"] is False and 1 <= r["iterations"] < 30, r
        assert r["residual"] <= 16 * torch.finfo(dtype).eps


@pytest.mark.parametrize("name,kw", CASES)
def test_newton_packed_sequences(name, kw):
    # Per-sample lengths, unsorted, every cell: outputs, final states and every gradient.
    ref, mod = _pair(name, torch.float64, **kw)
    seqs = [torch.randn(n, 4, dtype=torch.float64) for n in (9, 4, 7)]
    results = []
    for m in (ref, mod):
        xs = [s.clone().requires_grad_() for s in seqs]
        packed = torch.nn.utils.rnn.pack_sequence(xs, enforce_sorted=False)
        out, state = m(packed)
        h = state[0] if isinstance(state, tuple) else state
        (out.data.square().sum() + h.sum()).backward()
        results.append((out.data.detach(), h.detach(), [x.grad for x in xs] + [p.grad for p in m.parameters()]))
    (o_ref, h_ref, g_ref), (o_mod, h_mod, g_mod) = results
    assert _rel(o_mod, o_ref) <= 1e-10 and _rel(h_mod, h_ref) <= 1e-10
    for a, b in zip(g_mod, g_ref):
        assert _rel(a, b) <= 1e-9
    assert all(not r["fell_back"] for r in mod.last_forward)


def test_newton_safeguard_converges_where_the_linear_model_overflows():
    # An RNN whose W_hh has spectral norm 3, in float32, T 300: at the first iterate (h_0 carried
    # through every step) the linear recurrence expands by about 3 a step and overflows, which
    # made the plain iteration give up at step 2. The safeguard (method.md §9.2) clips the states
    # back into (−1, 1), where tanh puts every true state: certified in 10 iterations, and the
    # result is torch.nn's.
    torch.manual_seed(2)
    mod = bppsa.nn.RNN(4, 20, forward="newton", threads=1)
    ref = torch.nn.RNN(4, 20)
    with torch.no_grad():
        w = mod.weight_hh_l0
        w.mul_(3.0 / torch.linalg.matrix_norm(w.double(), ord=2).item())
    ref.load_state_dict(mod.state_dict())
    x = torch.randn(300, 4, 4)
    with torch.no_grad():
        out, h = mod(x)
        want, h_want = ref(x)
    r = mod.last_forward[0]
    assert r["fell_back"] is False and r["iterations"] < 30, r
    assert _rel(out, want) <= 1e-5 and _rel(h, h_want) <= 1e-5


@pytest.mark.parametrize("name,kw", [("GRU", {}), ("LSTM", {"proj_size": 5}), ("LSTM", {})])
def test_newton_safeguard_keeps_large_initial_states_certified(name, kw):
    # The boxes that depend on the initial state (GRU |h_t| ≤ max(1, ‖h0‖∞); LSTM |c_t| ≤ ‖c0‖∞ + t,
    # and with a projection |h_t| ≤ W_hr's row sums) must hold every true state: a box too tight
    # would clip the trajectory at every iteration, and the certificate would never hold. Expanding
    # W_hh (‖·‖₂ 3 for the GRU, 2 for the LSTMs), h0 of norm about 5, c0 about 50, float32, T 300.
    torch.manual_seed(1)
    mod = getattr(bppsa.nn, name)(4, 20, forward="newton", threads=1, **kw)
    ref = getattr(torch.nn, name)(4, 20, **kw)
    with torch.no_grad():
        w = mod.weight_hh_l0
        w.mul_((3.0 if name == "GRU" else 2.0) / torch.linalg.matrix_norm(w.double(), ord=2).item())
    ref.load_state_dict(mod.state_dict())
    x = torch.randn(300, 4, 4)
    h0 = 5 * torch.randn(1, 4, kw.get("proj_size", 20))
    hx = (h0, 50 * torch.randn(1, 4, 20)) if name == "LSTM" else h0
    with torch.no_grad():
        out, _ = mod(x, hx)
        want, _ = ref(x, hx)
    r = mod.last_forward[0]
    assert r["fell_back"] is False and r["iterations"] < 30, r
    assert _rel(out, want) <= 1e-5


def test_newton_falls_back_and_reports_it():
    # A NaN input: the certificate's residual is not finite, each layer falls back to the
    # sequential forward, whose result (NaN from there on, as torch.nn's) is returned.
    ref, mod = _pair("RNN", torch.float64)
    x = torch.randn(12, 2, 4, dtype=torch.float64)
    x[5, 1, 0] = float("nan")
    o_ref, _ = ref(x)
    o_mod, _ = mod(x)
    assert torch.equal(o_ref.isnan(), o_mod.isnan())
    assert _rel(o_mod.nan_to_num(), o_ref.nan_to_num()) <= 1e-10
    assert mod.last_forward[0]["fell_back"] is True and mod.last_forward[0]["fallback_step"] >= 1


@pytest.mark.skipif(not bppsa._ops.AVAILABLE, reason="this PyTorch has no torch.library.custom_op (< 2.4)")
@pytest.mark.parametrize("name,kw", CASES)
def test_newton_compiles_fullgraph_and_equals_torch_nn(name, kw, monkeypatch):
    # Under torch.compile(fullgraph=True) each layer is bppsa::layer_forward with forward='newton';
    # its backward recomputes the same Newton forward. Outputs, h_n and every gradient against
    # torch.nn's, in float64; every forward the operators ran was Newton's.
    ran = []
    run_forward = bppsa._ops._run_forward

    def spy(*args, **kwargs):
        ran.append(kwargs.get("forward"))
        return run_forward(*args, **kwargs)

    monkeypatch.setattr(bppsa._ops, "_run_forward", spy)
    ref, mod = _pair(name, torch.float64, **kw)
    x = torch.randn(20, 3, 4, dtype=torch.float64)
    results = []
    for m in (ref, mod):
        xi = x.clone().requires_grad_()
        if m is mod:
            torch._dynamo.reset()
            with torch._dynamo.config.patch(allow_rnn=True):
                out, state = torch.compile(m, fullgraph=True, backend="aot_eager")(xi)
                h = state[0] if isinstance(state, tuple) else state
                (out.square().sum() + h.sum()).backward()
        else:
            out, state = m(xi)
            h = state[0] if isinstance(state, tuple) else state
            (out.square().sum() + h.sum()).backward()
        results.append((out.detach(), h.detach(), [xi.grad] + [p.grad for p in m.parameters()]))
    (o_ref, h_ref, g_ref), (o_mod, h_mod, g_mod) = results
    assert len(ran) == 8 and set(ran) == {"newton"}, ran  # 4 layer-directions, forward and backward
    assert _rel(o_mod, o_ref) <= 1e-10 and _rel(h_mod, h_ref) <= 1e-10
    for a, b in zip(g_mod, g_ref):
        assert _rel(a, b) <= 1e-9


def test_forward_option_errors_and_repr():
    with pytest.raises(ValueError, match="unknown forward method 'deer'"):
        bppsa.nn.GRU(3, 4, forward="deer")
    m = bppsa.nn.GRU(3, 4)
    assert m.bppsa_forward == "auto" and "forward=" not in repr(m) and m.last_forward == [None]
    m.set_forward("sequential")
    assert "forward='sequential'" in repr(m)
    m.set_forward("newton")
    assert "forward='newton'" in repr(m)
    m.bppsa_forward = "bogus"
    with pytest.raises(ValueError, match="unknown forward method"):
        m(torch.randn(5, 1, 3))


FEATURES = ["1", "T", "T*B*S", "T*B*S^2", "T*B*S^3", "T*B*S*I", "T*S^2"]


def _forward_model(path, sequential_per_step, iteration_ms, iterations, cells=("rnn", "gru", "lstm")):
    """A cost model of the forward alone: the sequential forward sequential_per_step ms a step, one
    Newton iteration iteration_ms, `iterations` expected; at every thread count from 1."""
    groups = []
    for c in cells:
        groups.append({"cell": c, "candidate": "sequential forward", "threads": 1,
                       "coef": [0, sequential_per_step, 0, 0, 0, 0, 0]})
        groups.append({"cell": c, "candidate": "newton iteration", "threads": 1, "iterations": iterations,
                       "coef": [iteration_ms, 0, 0, 0, 0, 0, 0]})
    with open(path, "w") as f:
        json.dump({"format": "bppsa-cost-model/1", "fitted_on": "test", "features": FEATURES, "groups": groups}, f)
    return str(path)


@pytest.fixture
def forward_model(tmp_path):
    yield lambda *a, **kw: _forward_model(tmp_path / "forward.json", *a, **kw)
    bppsa.load_cost_model("")  # back to the process's default for the other tests


@pytest.mark.parametrize("name,kw", CASES)
def test_auto_forward_runs_what_the_cost_model_picks(name, kw, forward_model):
    # forward='auto' (the default): at T 30 the sequential forward is predicted 30 × 0.2 = 6 ms and an
    # iteration 0.5 ms, so Newton runs, allowed 12 iterations (4 expected); every output and gradient
    # equals torch.nn's. A model predicting Newton slower, or none at all: the sequential forward's bits.
    torch.manual_seed(3)
    ref = getattr(torch.nn, name)(4, 6, num_layers=2, bidirectional=True, dtype=torch.float64, **kw)
    mod = getattr(bppsa.nn, name)(4, 6, num_layers=2, bidirectional=True, dtype=torch.float64, **kw)
    seq = getattr(bppsa.nn, name)(4, 6, num_layers=2, bidirectional=True, dtype=torch.float64,
                                  forward="sequential", **kw)
    mod.load_state_dict(ref.state_dict())
    seq.load_state_dict(ref.state_dict())
    assert mod.bppsa_forward == "auto"
    x = torch.randn(30, 3, 4, dtype=torch.float64)

    def run(m):
        m.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        out, state = m(xi)
        h = state[0] if isinstance(state, tuple) else state
        (out.square().sum() + h.sum()).backward()
        return [out.detach(), h.detach(), xi.grad] + [p.grad for p in m.parameters()]

    expected, sequential = run(ref), run(seq)
    bppsa.load_cost_model(forward_model(0.2, 0.5, 4))
    got = run(mod)
    for g, e in zip(got, expected):
        assert _rel(g, e) <= 1e-9
    for r in mod.last_forward:
        assert r["asked"] == "auto" and r["method"] == "newton" and r["max_iterations"] == 12, r
        assert 1 <= r["iterations"] <= 12 and r["fell_back"] is False, r
    bppsa.load_cost_model(forward_model(0.2, 5.0, 4))  # an iteration predicted at 5 ms: 1 affordable
    assert all(torch.equal(g, s) for g, s in zip(run(mod), sequential))
    assert all(r["method"] == "sequential" and r["iterations"] == 0 and r["max_iterations"] == 0
               for r in mod.last_forward)
    bppsa.load_cost_model(NO_COST_MODEL)  # no fit: sequential
    assert all(torch.equal(g, s) for g, s in zip(run(mod), sequential))
    assert all(r["method"] == "sequential" for r in mod.last_forward)


def test_auto_forward_bounds_newton_by_the_sequential_forward(forward_model):
    # Allowed 2 iterations (sequential 30 × 0.01 ms, an iteration 0.15 ms, 1 expected): too few to
    # certify 30 steps, so each layer falls back after 2 and returns torch.nn's result.
    torch.manual_seed(5)
    ref = torch.nn.GRU(4, 6, dtype=torch.float64)
    mod = bppsa.nn.GRU(4, 6, dtype=torch.float64)
    mod.load_state_dict(ref.state_dict())
    bppsa.load_cost_model(forward_model(0.01, 0.15, 1))
    x = torch.randn(30, 2, 4, dtype=torch.float64)
    with torch.no_grad():  # the inference path too
        o_ref, _ = ref(x)
        o_mod, _ = mod(x)
    assert _rel(o_mod, o_ref) <= 1e-10
    (r,) = mod.last_forward
    assert r["method"] == "newton" and r["max_iterations"] == 2 and r["iterations"] == 2 and r["fell_back"], r
