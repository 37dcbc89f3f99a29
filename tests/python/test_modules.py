# bppsa.nn.RNN/GRU/LSTM against the same torch.nn module with the same weights: outputs and
# every gradient (float32 within 1e-5 relative per tensor), gradcheck in double, state_dict
# round trips, dropout, unbatched input, thread-count independence.
import copy
import io
import random

import pytest
import torch

import bppsa
from util import BPPSA, TORCH, flat_state, rel_err, run, twins

METHODS = ["auto", "blelloch", "hybrid", "bp"]


def _configs():
    """Random configurations (fixed seed): cell, layers, directions, batch_first, bias, hx, T,
    batch, sizes and backward method. A few long sequences up to T = 1000."""
    rng = random.Random(20261123)
    out = []
    for i in range(36):
        kind = ["RNN", "GRU", "LSTM"][i % 3]
        cfg = dict(kind=kind, layers=rng.choice([1, 1, 2, 3]), bidirectional=rng.random() < 0.4,
                   batch_first=rng.random() < 0.5, bias=rng.random() < 0.8, hx=rng.random() < 0.5,
                   steps=rng.choice([1, 2, 5, 17, 64]), batch=rng.choice([1, 3, 8]), input=rng.choice([1, 4, 7]),
                   hidden=rng.choice([1, 5, 16]), method=METHODS[i % 4],
                   relu=kind == "RNN" and rng.random() < 0.5)
        out.append(cfg)
    for j, kind in enumerate(["RNN", "GRU", "LSTM", "RNN"]):  # long sequences, the paper's sizes
        out.append(dict(kind=kind, layers=1 + j % 2, bidirectional=j == 3, batch_first=True, bias=True, hx=j % 2 == 0,
                        steps=1000, batch=4, input=1, hidden=20, method=["blelloch", "hybrid", "auto", "blelloch"][j],
                        relu=False))
    return out


def _proj_configs():
    """LSTMs with proj_size (fixed seed): every backward method, stacked, bidirectional, with and
    without bias and hx, up to T = 200."""
    rng = random.Random(20261127)
    out = []
    for i in range(8):
        hidden = rng.choice([3, 5, 16])
        out.append(dict(kind="LSTM", layers=rng.choice([1, 2, 3]), bidirectional=i % 3 == 1,
                        batch_first=rng.random() < 0.5, bias=i != 5, hx=i % 2 == 0,
                        steps=[1, 2, 9, 33, 200, 5, 17, 64][i], batch=rng.choice([1, 3, 8]),
                        input=rng.choice([1, 4, 7]), hidden=hidden, proj=rng.randint(1, hidden - 1),
                        method=METHODS[i % 4], relu=False))
    return out


CONFIGS = _configs() + _proj_configs()


def _id(c):
    return (f"{c['kind']}{'_relu' if c['relu'] else ''}{'_proj%d' % c['proj'] if c.get('proj') else ''}"
            f"_L{c['layers']}{'_bi' if c['bidirectional'] else ''}"
            f"{'_bf' if c['batch_first'] else ''}{'' if c['bias'] else '_nobias'}{'_hx' if c['hx'] else ''}"
            f"_T{c['steps']}_B{c['batch']}_{c['method']}")


def _inputs(c, dtype, grad_hx=True):
    directions = 2 if c["bidirectional"] else 1
    shape = (c["batch"], c["steps"], c["input"]) if c["batch_first"] else (c["steps"], c["batch"], c["input"])
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    hx = None
    out_size = c.get("proj") or c["hidden"]  # rows of h: the projection's, if any
    if c["hx"]:
        hs = (c["layers"] * directions, c["batch"], out_size)
        cs = (c["layers"] * directions, c["batch"], c["hidden"])
        h0 = (0.5 * torch.randn(hs, dtype=dtype)).requires_grad_(grad_hx)
        hx = (h0, (0.5 * torch.randn(cs, dtype=dtype)).requires_grad_(grad_hx)) if c["kind"] == "LSTM" else h0
    out_shape = shape[:2] + (out_size * directions,)
    head = torch.randn(out_shape, dtype=dtype)
    return x, hx, head


def _modules(c, dtype=torch.float32):
    kwargs = dict(num_layers=c["layers"], bias=c["bias"], batch_first=c["batch_first"],
                  bidirectional=c["bidirectional"])
    if c["relu"]:
        kwargs["nonlinearity"] = "relu"
    if c.get("proj"):
        kwargs["proj_size"] = c["proj"]
    return twins(c["kind"], c["input"], c["hidden"], dtype=dtype, backward=c["method"], **kwargs)


@pytest.mark.parametrize("c", CONFIGS, ids=[_id(c) for c in CONFIGS])
def test_matches_torch(c):
    ref, ours = _modules(c)
    for p, q in zip(ref.parameters(), ours.parameters()):
        assert torch.equal(p, q), "same seed, same initial weights"
    x, hx, head = _inputs(c, torch.float32)
    out_r, h_r, g_r = run(ref, x, hx, head)
    out_o, h_o, g_o = run(ours, x, hx, head)
    assert out_o.shape == out_r.shape and out_o.dtype == out_r.dtype
    assert rel_err(out_o, out_r) <= 1e-5
    for a, b in zip(h_o, h_r):
        assert a.shape == b.shape
        assert rel_err(a, b) <= 1e-5
    names = ["x"] + (["h0", "c0"] if c["kind"] == "LSTM" else ["h0"]) * c["hx"] + [n for n, _ in ref.named_parameters()]
    assert len(g_o) == len(g_r) == len(names)
    for name, a, b in zip(names, g_o, g_r):
        assert a.shape == b.shape, name
        assert rel_err(a, b) <= 1e-5, f"{name}: relative error {rel_err(a, b):.3g}"


COMPILED = CONFIGS[:40:4] + CONFIGS[38:39] + CONFIGS[40:42]  # every cell, method and option, one long sequence, proj


@pytest.mark.skipif(not bppsa._ops.AVAILABLE, reason="this PyTorch has no torch.library.custom_op (< 2.4)")
@pytest.mark.parametrize("c", COMPILED, ids=[_id(c) for c in COMPILED])
def test_compiled_fullgraph_matches_torch(c):
    # The same check under torch.compile(fullgraph=True): the layers are bppsa's custom operators,
    # the backward graph AOTAutograd's (backend aot_eager: no code generation, the same graphs).
    ref, ours = _modules(c)
    x, hx, head = _inputs(c, torch.float32)
    out_r, h_r, g_r = run(ref, x, hx, head)
    with torch._dynamo.config.patch(allow_rnn=True):
        torch._dynamo.reset()
        out_o, h_o, g_o = run(torch.compile(ours, fullgraph=True, backend="aot_eager"), x, hx, head)
    assert rel_err(out_o, out_r) <= 1e-5
    for a, b in zip(h_o, h_r):
        assert rel_err(a, b) <= 1e-5
    assert len(g_o) == len(g_r)
    for (i, a), b in zip(enumerate(g_o), g_r):
        assert rel_err(a, b) <= 1e-5, f"gradient {i}: relative error {rel_err(a, b):.3g}"


def _packed_configs():
    """Packed batches (fixed seed): every cell (LSTM with and without proj_size), 1–3 layers, both
    directions, every backward method, sorted and unsorted, with and without hx; lengths from 1
    to T, T up to 60, batches of 1 too."""
    rng = random.Random(20261128)
    out = []
    for i in range(24):
        kind = ["RNN", "GRU", "LSTM"][i % 3]
        hidden = rng.choice([3, 5, 16])
        out.append(dict(kind=kind, layers=rng.choice([1, 2, 3]), bidirectional=i % 4 in (1, 2),
                        batch_first=rng.random() < 0.5, bias=i % 7 != 3, hx=i % 2 == 0,
                        steps=rng.choice([1, 3, 17, 60]), batch=rng.choice([1, 4, 9]), input=rng.choice([1, 4]),
                        hidden=hidden, proj=rng.randint(1, hidden - 1) if kind == "LSTM" and i % 2 else 0,
                        method=METHODS[(i // 3) % 4], relu=kind == "RNN" and rng.random() < 0.3,
                        sorted=i % 5 == 4))
    for c in out:
        lr = random.Random(c["steps"] * 100 + c["batch"])
        lengths = [lr.randint(1, c["steps"]) for _ in range(c["batch"])]
        lengths[lr.randrange(c["batch"])] = c["steps"]
        c["lengths"] = sorted(lengths, reverse=True) if c["sorted"] else lengths
    return out


# (kind, relu, proj): RNN tanh, RNN relu, GRU, LSTM, LSTM with proj_size.
PACKED_CELLS = [("RNN", False, False), ("RNN", True, False), ("GRU", False, False), ("LSTM", False, False),
                ("LSTM", False, True)]


def _packed_grid():
    """Every cell × backward method × 1 or 2 layers × 1 or 2 directions, and one 3-layer stack per
    cell (fixed seed): B 3–5 samples of unequal lengths (1, T and a repeated length among them),
    T 3–12, H 3–5; sorted (enforce_sorted=True) for half, batch_first for a third, hx for half."""
    rng = random.Random(20261129)
    combos = [(cell, method, layers, bi) for cell in PACKED_CELLS for method in METHODS
              for layers in (1, 2) for bi in (False, True)]
    combos += [(cell, METHODS[(i + 1) % 4], 3, i % 2 == 0) for i, cell in enumerate(PACKED_CELLS)]
    out = []
    for i, ((kind, relu, proj), method, layers, bi) in enumerate(combos):
        j = i % 16  # within a cell: method * 4 + (layers - 1) * 2 + bidirectional
        steps, batch, hidden = rng.randint(3, 12), rng.choice([3, 4, 5]), rng.choice([3, 4, 5])
        if batch == 3:  # 1, T and one of them again
            lengths = [steps, 1, steps if i % 2 else 1]
        else:  # 1, T, a length between them twice, any others
            mid = rng.randint(2, steps - 1)
            lengths = [steps, 1, mid, mid] + [rng.randint(1, steps) for _ in range(batch - 4)]
        srt = (j + j // 4) % 2 == 1 if layers < 3 else i % 2 == 0
        if srt:
            lengths.sort(reverse=True)
        else:
            while lengths == sorted(lengths, reverse=True):
                rng.shuffle(lengths)
        out.append(dict(kind=kind, relu=relu, layers=layers, bidirectional=bi, batch_first=i % 3 == 0,
                        bias=i % 7 != 3, hx=(j // 2 + j // 8) % 2 == 0 if layers < 3 else i % 2 == 1,
                        steps=steps, batch=batch, input=rng.choice([2, 3]), hidden=hidden,
                        proj=rng.randint(1, hidden - 1) if proj else 0, method=method, sorted=srt,
                        lengths=lengths))
    return out


PACKED = _packed_configs()
PACKED_GRID = _packed_grid()


def _packed_id(c):
    return _id(c) + ("_sorted" if c["sorted"] else "") + "_len" + "-".join(map(str, c["lengths"]))


def _packed_run(m, c, x, hx):
    """A PackedSequence of x at c's lengths through m: the output PackedSequence, the final states
    and the gradients of x, hx and m's parameters of a loss on every output step and state."""
    from torch.nn.utils.rnn import pack_padded_sequence
    packed = pack_padded_sequence(x, torch.tensor(c["lengths"]), batch_first=c["batch_first"],
                                  enforce_sorted=c["sorted"])
    out, h = m(packed, hx)
    assert type(out) is torch.nn.utils.rnn.PackedSequence
    loss = (out.data * torch.randn(out.data.shape, generator=torch.Generator().manual_seed(3))).sum()
    loss = loss + sum((s * (i + 2)).sum() for i, s in enumerate(flat_state(h)))
    inputs = [t for t in [x] + flat_state(hx if hx is not None else ()) if t is not None and t.requires_grad]
    return out, flat_state(h), torch.autograd.grad(loss, inputs + list(m.parameters()))


def _assert_packed_close(c, names, got, want, tol=1e-5):
    (out_o, h_o, g_o), (out_r, h_r, g_r) = got, want
    assert torch.equal(out_o.batch_sizes, out_r.batch_sizes)
    for a, b in ((out_o.sorted_indices, out_r.sorted_indices), (out_o.unsorted_indices, out_r.unsorted_indices)):
        assert (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
    assert out_o.data.shape == out_r.data.shape
    assert rel_err(out_o.data, out_r.data) <= tol, f"output: relative error {rel_err(out_o.data, out_r.data):.3g}"
    assert len(h_o) == len(h_r)
    for name, a, b in zip(["h_n", "c_n"], h_o, h_r):
        assert a.shape == b.shape, name
        assert rel_err(a, b) <= tol, f"{name}: relative error {rel_err(a, b):.3g}"
    assert len(g_o) == len(g_r) == len(names)
    for name, a, b in zip(names, g_o, g_r):
        assert a.shape == b.shape, name
        assert rel_err(a, b) <= tol, f"{name}: relative error {rel_err(a, b):.3g}"


def _grad_names(c, ref):
    return ["x"] + (["h0", "c0"] if c["kind"] == "LSTM" else ["h0"]) * c["hx"] + [n for n, _ in ref.named_parameters()]


def _check_packed(c):
    # PackedSequence in, PackedSequence out (data, batch_sizes, sorted_indices, unsorted_indices),
    # h_n (c_n) in the caller's order, and the gradients of x, hx and every parameter, as torch.nn's
    # module with the same weights gives them.
    ref, ours = _modules(c)
    x, hx, _ = _inputs(c, torch.float32)
    want = _packed_run(ref, c, x, hx)
    got = _packed_run(ours, c, x, hx)
    _assert_packed_close(c, _grad_names(c, ref), got, want)


@pytest.mark.parametrize("c", PACKED, ids=[_packed_id(c) for c in PACKED])
def test_packed_sequence_matches_torch(c):
    _check_packed(c)


@pytest.mark.parametrize("c", PACKED_GRID, ids=[_packed_id(c) for c in PACKED_GRID])
def test_packed_sequence_grid_matches_torch(c):
    _check_packed(c)


def _pick(kind, relu, proj, method, layers, bidirectional):
    (c,) = [c for c in PACKED_GRID if (c["kind"], c["relu"], bool(c["proj"]), c["method"], c["layers"],
                                       c["bidirectional"]) == (kind, relu, proj, method, layers, bidirectional)]
    return c


# Every cell, every backward method, unequal lengths, sorted and not, with and without hx.
PACKED_COMPILED = [_pick("RNN", False, False, "blelloch", 2, True), _pick("RNN", True, False, "hybrid", 2, False),
                   _pick("GRU", False, False, "bp", 2, False), _pick("LSTM", False, False, "auto", 1, True),
                   _pick("LSTM", False, True, "blelloch", 2, True)]


@pytest.mark.skipif(not bppsa._ops.AVAILABLE, reason="this PyTorch has no torch.library.custom_op (< 2.4)")
@pytest.mark.parametrize("c", PACKED_COMPILED, ids=[_packed_id(c) for c in PACKED_COMPILED])
def test_packed_sequence_compiled_matches_torch(c):
    # Under torch.compile (not fullgraph: the lengths are read from the PackedSequence in Python,
    # a graph break), the packed output, the states and every gradient as torch.nn's eager module
    # gives them, and as bppsa's eager module does.
    ref, ours = _modules(c)
    x, hx, _ = _inputs(c, torch.float32)
    names = _grad_names(c, ref)
    want = _packed_run(ref, c, x, hx)
    eager = _packed_run(ours, c, x, hx)
    with torch._dynamo.config.patch(allow_rnn=True):
        torch._dynamo.reset()
        got = _packed_run(torch.compile(ours, backend="aot_eager"), c, x, hx)
    _assert_packed_close(c, names, got, want)
    _assert_packed_close(c, names, got, eager, tol=1e-6)


GRADCHECK = [
    dict(kind="RNN", layers=2, bidirectional=True, relu=False, method="blelloch"),
    dict(kind="RNN", layers=1, bidirectional=False, relu=True, method="hybrid"),
    dict(kind="GRU", layers=2, bidirectional=False, relu=False, method="blelloch"),
    dict(kind="GRU", layers=1, bidirectional=True, relu=False, method="bp"),
    dict(kind="LSTM", layers=2, bidirectional=True, relu=False, method="blelloch"),
    dict(kind="LSTM", layers=1, bidirectional=False, relu=False, method="auto"),
    dict(kind="LSTM", layers=2, bidirectional=True, relu=False, method="hybrid", proj=2),
    dict(kind="LSTM", layers=1, bidirectional=False, relu=False, method="bp", proj=3),
]


def _functional_call(module, params, args):
    try:
        from torch.func import functional_call  # PyTorch ≥ 2.0
    except ImportError:
        from torch.nn.utils.stateless import functional_call  # PyTorch 1.13
    return functional_call(module, params, args)


@pytest.mark.parametrize("c", GRADCHECK,
                         ids=lambda c: f"{c['kind']}{'_proj%d' % c['proj'] if c.get('proj') else ''}_L{c['layers']}_"
                                       f"{c['method']}")
def test_gradcheck_double(c):
    kwargs = dict(num_layers=c["layers"], bidirectional=c["bidirectional"])
    if c["relu"]:
        kwargs["nonlinearity"] = "relu"
    if c.get("proj"):
        kwargs["proj_size"] = c["proj"]
    torch.manual_seed(5)
    m = BPPSA[c["kind"]](3, 4, backward=c["method"], **kwargs).double()
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().clone().requires_grad_(True) for p in m.parameters()]
    d = 2 if c["bidirectional"] else 1
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(c["layers"] * d, 2, c.get("proj") or 4, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(c["layers"] * d, 2, 4, dtype=torch.float64, requires_grad=True)
    lstm = c["kind"] == "LSTM"

    def f(x, h0, c0, *ps):
        out, h = _functional_call(m, dict(zip(names, ps)), (x, (h0, c0) if lstm else h0))
        return (out,) + tuple(flat_state(h))

    assert torch.autograd.gradcheck(f, (x, h0, c0, *params), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_unbatched_input_matches_torch():
    for kind in ("RNN", "GRU", "LSTM"):
        for batch_first in (False, True):
            ref, ours = twins(kind, 3, 6, num_layers=2, batch_first=batch_first, backward="blelloch")
            x = torch.randn(9, 3, requires_grad=True)
            h = torch.randn(2, 6)
            hx = (h, torch.randn(2, 6)) if kind == "LSTM" else h
            head = torch.randn(9, 6)
            out_r, h_r, g_r = run(ref, x, hx, head)
            out_o, h_o, g_o = run(ours, x, hx, head)
            assert out_o.shape == out_r.shape == (9, 6)
            assert all(a.shape == b.shape == (2, 6) for a, b in zip(h_o, h_r))
            assert rel_err(out_o, out_r) <= 1e-5
            assert all(rel_err(a, b) <= 1e-5 for a, b in zip(g_o, g_r))


def test_state_dict_round_trip():
    for kind in ("RNN", "GRU", "LSTM"):
        ref = TORCH[kind](4, 8, num_layers=2, bidirectional=True, bias=True)
        ours = BPPSA[kind](4, 8, num_layers=2, bidirectional=True, bias=True)
        assert list(ref.state_dict().keys()) == list(ours.state_dict().keys())
        ours.load_state_dict(ref.state_dict(), strict=True)
        for (n1, p1), (n2, p2) in zip(ref.named_parameters(), ours.named_parameters()):
            assert n1 == n2 and torch.equal(p1, p2)
        with torch.no_grad():
            for p in ours.parameters():
                p.mul_(0.5)
        back = TORCH[kind](4, 8, num_layers=2, bidirectional=True)
        back.load_state_dict(ours.state_dict(), strict=True)
        x = torch.randn(6, 3, 4)
        assert rel_err(ours(x)[0], back(x)[0]) <= 1e-5
        # Shapes that do not match fail strictly, as with torch's module.
        with pytest.raises(RuntimeError):
            BPPSA[kind](4, 8, num_layers=1).load_state_dict(ref.state_dict(), strict=True)


def test_lstm_proj_size_like_torch():
    # weight_hr_l<k> in torch's places and shapes, both ways; to_torch(); unbatched input;
    # h_0 of the projection's size and c_0 of the hidden size, checked as torch checks them.
    ref, ours = twins("LSTM", 4, 6, num_layers=2, bidirectional=True, proj_size=3, backward="blelloch")
    assert list(ref.state_dict().keys()) == list(ours.state_dict().keys())
    assert [tuple(p.shape) for p in ours.parameters()] == [tuple(p.shape) for p in ref.parameters()]
    assert repr(ours).startswith(repr(ref)[:-1] + ", backward=")  # torch's repr, proj_size included
    back = ours.to_torch()
    assert type(back) is torch.nn.LSTM and back.proj_size == 3
    x = torch.randn(5, 2, 4)
    assert rel_err(ours(x)[0], back(x)[0]) <= 1e-5
    xu = torch.randn(7, 4, requires_grad=True)
    hx = (torch.randn(4, 3), torch.randn(4, 6))
    head = torch.randn(7, 6)
    out_r, h_r, g_r = run(ref, xu, hx, head)
    out_o, h_o, g_o = run(ours, xu, hx, head)
    assert out_o.shape == out_r.shape == (7, 6)
    assert [tuple(h.shape) for h in h_o] == [tuple(h.shape) for h in h_r] == [(4, 3), (4, 6)]
    assert rel_err(out_o, out_r) <= 1e-5
    assert len(g_o) == len(g_r) and all(rel_err(a, b) <= 1e-5 for a, b in zip(g_o, g_r))
    x3 = torch.randn(5, 2, 4)
    for bad in ((torch.zeros(4, 2, 6), torch.zeros(4, 2, 6)), (torch.zeros(4, 2, 3), torch.zeros(4, 2, 3))):
        with pytest.raises(RuntimeError, match="Expected hidden size"):
            ours(x3, bad)


def test_module_attributes_and_repr_like_torch():
    for kind in ("RNN", "GRU", "LSTM"):
        ref, ours = twins(kind, 3, 5, num_layers=2, bias=False, batch_first=True, dropout=0.25, bidirectional=True)
        for attr in ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional",
                     "mode", "_flat_weights_names"):
            assert getattr(ours, attr) == getattr(ref, attr), attr
        assert [[tuple(w.shape) for w in ws] for ws in ours.all_weights] == \
            [[tuple(w.shape) for w in ws] for ws in ref.all_weights]
        assert repr(ours).startswith(kind + "(3, 5, num_layers=2, bias=False, batch_first=True, dropout=0.25")
        ours.flatten_parameters()  # compatibility no-op
    # The installed torch's positional order (torch ≥ 2 reads a fourth positional argument as the
    # nonlinearity, torch 1.13 as bias).
    ours, ref = bppsa.nn.RNN(2, 3, 1, "relu"), torch.nn.RNN(2, 3, 1, "relu")
    for attr in ("nonlinearity", "mode", "bias"):
        assert getattr(ours, attr) == getattr(ref, attr), attr


def test_dropout_between_layers():
    for kind in ("RNN", "GRU", "LSTM"):
        ref, ours = twins(kind, 3, 5, num_layers=3, dropout=0.4)
        x = torch.randn(7, 4, 3)
        ours.train()
        torch.manual_seed(99)
        a = ours(x)[0]
        torch.manual_seed(99)
        b = ours(x)[0]
        torch.manual_seed(100)
        c = ours(x)[0]
        assert torch.equal(a, b), "the same RNG state gives the same masks"
        assert not torch.equal(a, c), "training mode drops units"
        ours.eval()
        ref.eval()
        assert rel_err(ours(x)[0], ref(x)[0]) <= 1e-5, "no dropout in eval mode"
        # Training mode against a stack of one-layer torch modules with F.dropout in between, under
        # the same RNG state: the masks, the outputs and the gradients all match.
        ours.train()
        layers = []
        for layer in range(3):
            m = TORCH[kind](3 if layer == 0 else 5, 5)
            m.load_state_dict({k.replace(f"_l{layer}", "_l0"): v for k, v in ours.state_dict().items()
                               if k.endswith(f"_l{layer}")})
            layers.append(m)
        x.requires_grad_(True)
        torch.manual_seed(7)
        out = ours(x)[0]
        g_ours = torch.autograd.grad((out ** 2).sum(), [x] + list(ours.parameters()))
        torch.manual_seed(7)
        h = x
        for layer, m in enumerate(layers):
            h = m(h)[0]
            if layer < 2:
                h = torch.nn.functional.dropout(h, p=0.4, training=True)
        params = [p for m in layers for p in m.parameters()]
        g_ref = torch.autograd.grad((h ** 2).sum(), [x] + params)
        assert rel_err(out, h) <= 1e-5
        assert all(rel_err(a, b) <= 1e-5 for a, b in zip(g_ours, g_ref))


def test_no_grad_eval_and_requires_grad_combinations():
    ref, ours = twins("GRU", 3, 6, num_layers=2)
    x = torch.randn(5, 2, 3)
    with torch.no_grad():
        out, h = ours(x)
    assert not out.requires_grad and out.grad_fn is None
    assert rel_err(out, ref(x)[0]) <= 1e-5
    for p in ours.parameters():
        p.requires_grad_(False)
    out, _ = ours(x)
    assert out.grad_fn is None
    x.requires_grad_(True)  # only the input needs a gradient
    out, _ = ours(x)
    (g,) = torch.autograd.grad(out.sum(), [x])
    (g_ref,) = torch.autograd.grad(ref(x)[0].sum(), [x])
    assert rel_err(g, g_ref) <= 1e-5


@pytest.mark.parametrize("kind,kwargs", [("RNN", {}), ("GRU", {"bidirectional": True}),
                                         ("LSTM", {"num_layers": 2}), ("LSTM", {"proj_size": 5})])
@pytest.mark.parametrize("steps,batch", [(300, 3), (70, 16), (1, 1)])
def test_an_inference_call_gives_the_training_calls_bits(kind, kwargs, steps, batch):
    """Under no_grad the engine keeps no record and runs the steps in chunks; the outputs and final
    states must be those of the same call with autograd recording, bit for bit, and torch.nn's."""
    ref, ours = twins(kind, 40, 12, **kwargs)
    x = torch.randn(steps, batch, 40)
    with torch.no_grad():
        out0, h0 = ours(x)
    out1, h1 = ours(x)
    assert out1.grad_fn is not None
    assert torch.equal(out0, out1.detach())
    for a, b in zip(h0 if kind == "LSTM" else (h0,), h1 if kind == "LSTM" else (h1,)):
        assert torch.equal(a, b.detach())
    assert rel_err(out0, ref(x)[0]) <= 1e-5


def test_retain_graph_and_two_forwards_before_backward():
    ref, ours = twins("LSTM", 2, 4, num_layers=2, backward="blelloch")
    x1, x2 = torch.randn(6, 3, 2), torch.randn(9, 3, 2)
    l_o = ours(x1)[0].sum() + 2 * ours(x2)[0].sum()  # two graphs alive at once
    l_r = ref(x1)[0].sum() + 2 * ref(x2)[0].sum()
    g_o = torch.autograd.grad(l_o, list(ours.parameters()), retain_graph=True)
    g_o2 = torch.autograd.grad(l_o, list(ours.parameters()))  # the retained graph again
    g_r = torch.autograd.grad(l_r, list(ref.parameters()))
    for a, b, c in zip(g_o, g_o2, g_r):
        assert torch.equal(a, b)
        assert rel_err(a, c) <= 1e-5


@pytest.mark.parametrize("method", ["blelloch", "bp", "hybrid"])
def test_threads_do_not_change_results(method):
    torch.manual_seed(3)
    base = bppsa.nn.GRU(3, 8, num_layers=2, bidirectional=True)
    x = torch.randn(300, 5, 3, requires_grad=True)
    results = []
    for threads in (1, 2, 3, 1):
        m = copy.deepcopy(base)
        m.set_backward(method, threads)
        out, _ = m(x)
        results.append(torch.autograd.grad((out * out).sum(), [x] + list(m.parameters())))
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            if method == "hybrid":  # hybrid's chunk count follows the thread count: reassociated sums
                assert rel_err(a, b) <= 1e-5
            else:
                assert torch.equal(a, b)


def test_pickle_deepcopy_and_double():
    m = bppsa.nn.LSTM(3, 4, num_layers=2, backward="blelloch")
    x = torch.randn(5, 2, 3)
    m(x)[0].sum().backward()  # engines now in its pools
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    m2 = torch.load(buf, weights_only=False)  # a whole module (torch ≥ 2.6 loads plain weights by default)
    m3 = copy.deepcopy(m)
    for other in (m2, m3):
        assert torch.equal(other(x)[0], m(x)[0])
    md = copy.deepcopy(m).double()
    assert md(x.double())[0].dtype == torch.float64
    assert rel_err(md(x.double())[0], m(x)[0]) <= 1e-5


def test_caller_keeps_ieee_subnormals():
    """bppsa flushes subnormals on its own compute only: torch's thread keeps its mode."""
    torch.set_flush_denormal(False)
    rnn = bppsa.nn.RNN(1, 8, batch_first=True)
    out, _ = rnn(torch.randn(2, 300, 1, requires_grad=True))
    out[:, -1].sum().backward()
    tiny = torch.tensor([1e-30], dtype=torch.float32) * torch.tensor([1e-10], dtype=torch.float32)
    assert tiny.item() != 0.0
