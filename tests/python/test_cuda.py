# bppsa.nn on CUDA tensors (issue 26, item 2): the CUDA half of the layer engine against
# torch.nn on the same GPU (cuDNN), against a float64 reference and against bppsa's own CPU engine,
# padded and packed (PackedSequence: each sample at its own length); PyTorch's current stream (work
# queued, never waited for); a training step captured in a CUDA graph; errors for what the GPU does
# not run.
# Skipped without a CUDA device or a bppsa built without CUDA, unless BPPSA_REQUIRE_CUDA=1
# (scripts/gpu_check.sh sets it), where that is a failure.
import os
import random
import sys

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import bppsa
from bppsa import _native
from util import BPPSA, TORCH, flat_state, rel_err, run

_HAVE = _native.cuda_available() and torch.cuda.is_available()
_WHY = (f"no CUDA: bppsa built with CUDA {_native._C.cuda_built()}, {_native._C.cuda_summary()}; torch sees "
        f"{torch.cuda.device_count()} devices")
if not _HAVE and os.environ.get("BPPSA_REQUIRE_CUDA") == "1":
    raise RuntimeError(f"BPPSA_REQUIRE_CUDA=1 but {_WHY}")
pytestmark = pytest.mark.skipif(not _HAVE, reason=_WHY)

METHODS = ["auto", "bp", "blelloch", "hybrid", "linear"]


@pytest.fixture(autouse=True, scope="module")
def _no_tf32():
    """fp32 is fp32 on both sides (cuDNN may otherwise use TF32 tensor cores), through the API this
    PyTorch has (bench/common/precision.py: the two are not to be mixed)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "common"))
    from precision import set_tf32
    set_tf32(False)
    yield


def _configs():
    rng = random.Random(20261127)
    out = []
    for i in range(30):
        kind = ["RNN", "GRU", "LSTM"][i % 3]
        out.append(dict(kind=kind, layers=rng.choice([1, 1, 2, 3]), bidirectional=rng.random() < 0.4,
                        batch_first=rng.random() < 0.5, bias=rng.random() < 0.8, hx=rng.random() < 0.5,
                        steps=rng.choice([1, 2, 7, 33, 100]), batch=rng.choice([1, 3, 16]),
                        input=rng.choice([1, 4, 12]), hidden=rng.choice([1, 5, 20, 64]), method=METHODS[i % 5],
                        relu=kind == "RNN" and rng.random() < 0.5))
    for j, kind in enumerate(["RNN", "GRU", "LSTM"]):  # the paper's sizes, long sequences
        out.append(dict(kind=kind, layers=1, bidirectional=False, batch_first=True, bias=True, hx=False, steps=1000,
                        batch=16, input=1, hidden=20, method="auto", relu=False))
    return out


def _id(c):
    return (f"{c['kind']}{'_relu' if c['relu'] else ''}_L{c['layers']}{'_bi' if c['bidirectional'] else ''}"
            f"{'_bf' if c['batch_first'] else ''}{'' if c['bias'] else '_nobias'}{'_hx' if c['hx'] else ''}"
            f"_T{c['steps']}_B{c['batch']}_I{c['input']}_H{c['hidden']}_{c['method']}")


def _build(c, device, dtype, seed=0):
    """torch.nn and bppsa.nn modules of configuration c with the same weights, on device."""
    kwargs = dict(num_layers=c["layers"], bias=c["bias"], batch_first=c["batch_first"],
                  bidirectional=c["bidirectional"])
    if c["kind"] == "RNN":
        kwargs["nonlinearity"] = "relu" if c["relu"] else "tanh"
    torch.manual_seed(seed)
    ref = TORCH[c["kind"]](c["input"], c["hidden"], **kwargs).to(device=device, dtype=dtype)
    ours = BPPSA[c["kind"]](c["input"], c["hidden"], backward=c["method"], **kwargs).to(device=device, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def _data(c, device, dtype, seed=1):
    """Input, hx and the loss's weights on every output, drawn on the CPU in float64 (the same
    values for every device and dtype)."""
    g = torch.Generator().manual_seed(seed)
    d = 2 if c["bidirectional"] else 1
    shape = (c["batch"], c["steps"], c["input"]) if c["batch_first"] else (c["steps"], c["batch"], c["input"])
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    hx = None
    if c["hx"]:
        s = (c["layers"] * d, c["batch"], c["hidden"])
        hx = (0.5 * torch.randn(s, generator=g, dtype=torch.float64),
              0.5 * torch.randn(s, generator=g, dtype=torch.float64)) if c["kind"] == "LSTM" else \
            0.5 * torch.randn(s, generator=g, dtype=torch.float64)
    head = torch.randn(shape[:2] + (c["hidden"] * d,), generator=g, dtype=torch.float64)

    def put(t):
        return t.to(device=device, dtype=dtype)
    x = put(x).requires_grad_(True)
    if hx is not None:
        hx = tuple(put(s).requires_grad_(True) for s in hx) if isinstance(hx, tuple) else put(hx).requires_grad_(True)
    return x, hx, put(head)


def _everything(module, c, device, dtype):
    x, hx, head = _data(c, device, dtype)
    out, h, grads = run(module, x, hx, head)
    return [out] + list(h) + list(grads)


@pytest.mark.parametrize("c", _configs(), ids=_id)
def test_matches_torch_on_cuda(c):
    """Outputs, final states and every gradient: bppsa on CUDA against torch.nn in float64 (the
    oracle) within 1e-4 relative per tensor, against cuDNN in fp32 and against bppsa's CPU engine."""
    ref64, _ = _build(c, "cuda", torch.float64)
    ref32, ours = _build(c, "cuda", torch.float32)
    _, ours_cpu = _build(c, "cpu", torch.float32)
    want = _everything(ref64, c, "cuda", torch.float64)
    got = _everything(ours, c, "cuda", torch.float32)
    cudnn = _everything(ref32, c, "cuda", torch.float32)
    cpu = _everything(ours_cpu, c, "cpu", torch.float32)
    _assert_close(got, want, cudnn, cpu)


def _assert_close(got, want, cudnn, cpu):
    """bppsa's fp32 tensors on CUDA (got) within 1e-4 relative of the float64 oracle (want), or 4×
    cuDNN's fp32 error (the float error of the record itself), and as close to bppsa's CPU engine."""
    assert len(got) == len(want) == len(cudnn) == len(cpu)
    for i, (g, w, r, p) in enumerate(zip(got, want, cudnn, cpu)):
        assert g.is_cuda and g.dtype == torch.float32 and g.shape == w.shape, i
        assert torch.isfinite(g).all(), i
        err = rel_err(g, w)
        assert err <= max(1e-4, 4 * rel_err(r, w)), f"tensor {i}: {err:.3g} vs float64 (cuDNN fp32 {rel_err(r, w):.3g})"
        assert rel_err(g, p.to("cuda")) <= max(1e-4, 4 * rel_err(p.to("cuda"), w)), f"tensor {i} vs the CPU engine"


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("method", ["auto", "bp", "blelloch"])
def test_float64_on_cuda_is_tight(kind, method):
    c = dict(kind=kind, layers=2, bidirectional=True, batch_first=False, bias=True, hx=True, steps=50, batch=5,
             input=3, hidden=8, method=method, relu=False)
    ref, ours = _build(c, "cuda", torch.float64)
    for g, w in zip(_everything(ours, c, "cuda", torch.float64), _everything(ref, c, "cuda", torch.float64)):
        assert g.dtype == torch.float64 and rel_err(g, w) < 1e-10


def _step(module, x):
    out, h = module(x)
    (out.square().sum() + flat_state(h)[0].sum()).backward()


def test_runs_on_the_current_stream_without_waiting():
    """Forward and backward queue their work on PyTorch's current stream: behind a long sleep
    kernel queued there first, both return while the stream is still busy (neither waits for
    the device), and the results equal those of the default stream."""
    torch.manual_seed(3)
    m = bppsa.nn.GRU(4, 20, num_layers=2).cuda()
    x = torch.randn(300, 16, 4, device="cuda")
    _step(m, x)  # plans and buffers for this shape (allocation may synchronise; it happens once)
    m.zero_grad()
    _step(m, x)
    expected = [p.grad.clone() for p in m.parameters()]
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        m.zero_grad()
        torch.cuda._sleep(2_000_000_000)  # about a second of GPU clock cycles
        _step(m, x)
        busy = not s.query()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert busy, "forward/backward waited for the device"
    for p, e in zip(m.parameters(), expected):
        assert rel_err(p.grad, e) < 1e-6


def test_training_on_cuda_follows_torch():
    """Ten Adam steps of a GRU classifier on CUDA: bppsa's losses follow cuDNN's."""
    torch.manual_seed(5)
    ref = torch.nn.GRU(3, 16, num_layers=2, batch_first=True).cuda()
    ours = bppsa.nn.GRU(3, 16, num_layers=2, batch_first=True).cuda()
    ours.load_state_dict(ref.state_dict())
    head_r, head_o = torch.nn.Linear(16, 4).cuda(), torch.nn.Linear(16, 4).cuda()
    head_o.load_state_dict(head_r.state_dict())
    x = torch.randn(32, 200, 3, device="cuda")
    y = torch.randint(0, 4, (32,), device="cuda")
    losses = []
    for rnn, head in ((ref, head_r), (ours, head_o)):
        opt = torch.optim.Adam(list(rnn.parameters()) + list(head.parameters()), lr=1e-2)
        seq = []
        for _ in range(10):
            opt.zero_grad()
            out, _ = rnn(x)
            loss = torch.nn.functional.cross_entropy(head(out[:, -1]), y)
            loss.backward()
            opt.step()
            seq.append(loss.item())
        losses.append(seq)
    assert losses[1][-1] < losses[1][0]
    for a, b in zip(*losses):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), losses


@pytest.mark.parametrize("cell,bias,backward", [("GRU", True, "auto"), ("GRU", True, "bp"), ("LSTM", False, "auto")])
def test_a_training_step_captured_in_a_cuda_graph_replays_as_eager(cell, bias, backward):
    """Issue 42, item 3: on CUDA the layer reads PyTorch's weights and input and writes its gradients
    in place, and in steady state neither waits for the GPU nor allocates, so torch.cuda.graph can
    capture a whole training step (forward, loss on the last output and h_n, backward, SGD). Three
    eager warm-up steps, then three replays of the captured step, each on a new batch copied into
    the static input, against six eager steps of a twin on the same batches: the same losses and
    weights (the same kernels in the same order: to float rounding). The engines that ran in the
    capture stay the graph's (kept out of the pool)."""
    def make():
        torch.manual_seed(11)
        rnn = getattr(bppsa.nn, cell)(3, 16, num_layers=2, bias=bias, backward=backward).cuda()
        head = torch.nn.Linear(16, 4).cuda()
        params = list(rnn.parameters()) + list(head.parameters())
        return rnn, head, params, torch.optim.SGD(params, lr=0.1)

    torch.manual_seed(12)
    batches = [(torch.randn(300, 8, 3, device="cuda"), torch.randint(0, 4, (8,), device="cuda")) for _ in range(6)]

    def step(rnn, head, opt, x, y):
        opt.zero_grad(set_to_none=False)
        out, state = rnn(x)
        h = state[0] if isinstance(state, tuple) else state
        loss = torch.nn.functional.cross_entropy(head(out[-1] + h[-1]), y)
        loss.backward()
        opt.step()
        return loss

    rnn_e, head_e, params_e, opt_e = make()
    eager = [step(rnn_e, head_e, opt_e, x, y).item() for x, y in batches]
    rnn_g, head_g, params_g, opt_g = make()
    sx, sy = batches[0][0].clone(), batches[0][1].clone()  # the graph's static input
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: plans, buffers and gradients allocated here
        warm = []
        for x, y in batches[:3]:
            sx.copy_(x)
            sy.copy_(y)
            warm.append(step(rnn_g, head_g, opt_g, sx, sy).item())
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step(rnn_g, head_g, opt_g, sx, sy)
    assert all(m in (("fused", "bp") if backward == "auto" else ("bp",)) for m in rnn_g.last_backward), \
        rnn_g.last_backward
    assert all(len(spec._captured) == 1 for spec in rnn_g._specs)
    replayed = []
    for x, y in batches[3:]:
        sx.copy_(x)
        sy.copy_(y)
        graph.replay()
        replayed.append(static_loss.item())
    got = warm + replayed
    for a, b in zip(got, eager):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (got, eager)
    for a, b in zip(params_g, params_e):
        assert rel_err(a, b) < 1e-5


def test_compiled_on_cuda_matches_eager():
    """torch.compile(fullgraph=True) records bppsa's custom operators with CUDA tensors."""
    import torch._dynamo
    torch._dynamo.config.allow_rnn = True
    torch.manual_seed(7)
    m = bppsa.nn.LSTM(3, 8, num_layers=2).cuda()
    x = torch.randn(40, 4, 3, device="cuda", requires_grad=True)

    def loss(x):
        out, (h, c) = m(x)
        return out.square().sum() + h.sum() + c.sum()
    eager = loss(x)
    ge = torch.autograd.grad(eager, [x] + list(m.parameters()))
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")(x)
    gc = torch.autograd.grad(compiled, [x] + list(m.parameters()))
    assert rel_err(compiled, eager) < 1e-5
    for a, b in zip(gc, ge):
        assert a.is_cuda and rel_err(a, b) < 1e-5


def test_check_finite_on_cuda():
    m = bppsa.nn.RNN(3, 4, check_finite=True).cuda()
    x = torch.randn(6, 2, 3, device="cuda")
    x[2, 1, 0] = float("nan")
    out, _ = m(x)
    with pytest.raises(FloatingPointError, match="not finite"):
        out.sum().backward()


def _packed_configs():
    """Packed batches on CUDA (fixed seed): every cell, 1–3 layers, both directions, every backward
    method, sorted and unsorted, hx or not; lengths from 1 to T, one sample of length T."""
    rng = random.Random(20261129)
    out = []
    for i in range(15):
        kind = ["RNN", "GRU", "LSTM"][i % 3]
        out.append(dict(kind=kind, layers=rng.choice([1, 2, 3]), bidirectional=i % 4 in (1, 2),
                        batch_first=rng.random() < 0.5, bias=i % 7 != 3, hx=i % 2 == 0,
                        steps=rng.choice([1, 3, 17, 60, 400]), batch=rng.choice([1, 4, 9, 16]),
                        input=rng.choice([1, 4]), hidden=rng.choice([3, 5, 20]), method=METHODS[i % 5],
                        relu=kind == "RNN" and rng.random() < 0.3, sorted=i % 3 == 2))
    return out


PACKED = _packed_configs()


def _packed_run(module, c, lengths, device, dtype):
    """PackedSequence output, final states and every gradient of a loss on the packed output and
    the final states (inputs drawn in float64 on the CPU: the same values for every device)."""
    x, hx, _ = _data(c, device, dtype)
    packed = pack_padded_sequence(x, torch.tensor(lengths), batch_first=c["batch_first"], enforce_sorted=c["sorted"])
    out, h = module(packed, hx)
    assert type(out) is torch.nn.utils.rnn.PackedSequence
    weights = torch.randn(out.data.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    loss = (out.data * weights.to(device=device, dtype=dtype)).sum()
    loss = loss + sum((s * (i + 2)).sum() for i, s in enumerate(flat_state(h)))
    inputs = [t for t in [x] + flat_state(hx if hx is not None else ()) if t is not None and t.requires_grad]
    grads = torch.autograd.grad(loss, inputs + list(module.parameters()))
    return out, [out.data] + flat_state(h) + list(grads)


@pytest.mark.parametrize("c", PACKED, ids=[_id(c) + ("_sorted" if c["sorted"] else "") for c in PACKED])
def test_packed_sequence_on_cuda_matches_torch(c):
    """A PackedSequence on CUDA: the same PackedSequence (batch_sizes, sorted and unsorted indices)
    as torch.nn's, h_n in the caller's order, every gradient; against torch.nn in float64 (the
    oracle, with cuDNN's fp32 error as the scale) and against bppsa's CPU engine."""
    rng = random.Random(c["steps"] * 100 + c["batch"])
    lengths = [rng.randint(1, c["steps"]) for _ in range(c["batch"])]
    lengths[rng.randrange(c["batch"])] = c["steps"]
    if c["sorted"]:
        lengths.sort(reverse=True)
    ref64, _ = _build(c, "cuda", torch.float64)
    ref32, ours = _build(c, "cuda", torch.float32)
    _, ours_cpu = _build(c, "cpu", torch.float32)
    out_w, want = _packed_run(ref64, c, lengths, "cuda", torch.float64)
    out_g, got = _packed_run(ours, c, lengths, "cuda", torch.float32)
    _, cudnn = _packed_run(ref32, c, lengths, "cuda", torch.float32)
    _, cpu = _packed_run(ours_cpu, c, lengths, "cpu", torch.float32)
    assert torch.equal(out_g.batch_sizes, out_w.batch_sizes)
    for a, b in ((out_g.sorted_indices, out_w.sorted_indices), (out_g.unsorted_indices, out_w.unsorted_indices)):
        assert (a is None and b is None) or torch.equal(a.cpu(), b.cpu())
    _assert_close(got, want, cudnn, cpu)


def test_what_cuda_does_not_run_is_refused_clearly():
    m = bppsa.nn.GRU(3, 4).cuda()
    with pytest.raises(RuntimeError, match="input is on cpu but the parameters are on cuda:0"):
        m(torch.randn(5, 2, 3))
    with pytest.raises(RuntimeError, match="hx is on cpu but input is on cuda:0"):
        m(torch.randn(5, 2, 3, device="cuda"), torch.zeros(1, 2, 4))
    with pytest.raises(NotImplementedError, match="proj_size"):
        bppsa.nn.LSTM(3, 4, proj_size=2).cuda()(torch.randn(5, 2, 3, device="cuda"))
    # The engine itself: a weight on another device than the input.
    engine = _native.layer_engine(torch.float32, "gru", 3, 4, "tanh", device="cuda:0")
    r = _native.ref
    x = torch.randn(5, 2, 3, device="cuda")
    w_ih, w_hh = torch.randn(12, 3), torch.randn(12, 4, device="cuda")
    out, h = torch.empty(5, 2, 4, device="cuda"), torch.empty(2, 4, device="cuda")
    with pytest.raises(ValueError, match="weight_ih is on cpu but this call runs on cuda:0"):
        engine.forward(r(x), None, None, r(w_ih), r(w_hh), None, None, None, [], r(out), r(h), None,
                       _native.stream_of(x))


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
def test_data_parallel_on_cuda_runs_the_module_like_torch(kind):
    """nn.DataParallel on the GPUs there are (one replica per device): outputs and gradients are
    torch.nn's (cuDNN, TF32 off) on the same devices."""
    torch.manual_seed(11)
    ref = TORCH[kind](3, 4, num_layers=2, batch_first=True).cuda()
    ours = BPPSA[kind](3, 4, num_layers=2, batch_first=True).cuda()
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2 * max(1, torch.cuda.device_count()), 6, 3, device="cuda")
    got, want = torch.nn.DataParallel(ours)(x)[0], torch.nn.DataParallel(ref)(x)[0]
    assert got.is_cuda and rel_err(got, want) < 1e-5
    got.square().sum().backward()
    want.square().sum().backward()
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        assert rel_err(q.grad, p.grad) < 1e-4, name


# bppsa.scan on CUDA tensors: the resident GPU scan against the CPU engine in float64.

def _chain(kinds, batch, dims, device, dtype, seed=21):
    """Elements A_1 … A_N (A_i: dims[i+1] × dims[i]) of the given kinds and g_last (batch, dims[0])."""
    g = torch.Generator().manual_seed(seed)
    els = []
    for i, kind in enumerate(kinds):
        r, c = dims[i + 1], dims[i]
        a = torch.randn(r, c, generator=g, dtype=torch.float64) / c ** 0.5
        if kind == "per_sample":
            a = torch.randn(batch, r, c, generator=g, dtype=torch.float64) / c ** 0.5
        elif kind == "csr":
            a = a * (torch.rand(r, c, generator=g) < 0.4)
        t = a.to(device=device, dtype=dtype)
        if kind == "expanded":
            t = t.expand(batch, r, c)
        elif kind == "csr":
            t = t.to_sparse_csr()
        els.append(t)
    g_last = torch.randn(batch, dims[0], generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
    return els, g_last


SCAN_CASES = [
    (["shared"] * 40, [6] * 41),
    (["per_sample"] * 9, [5] * 10),
    (["shared", "per_sample", "expanded", "shared", "csr", "shared"], [4, 7, 3, 5, 6, 2, 8]),
    (["csr"] * 12, [9] * 13),
]


@pytest.mark.parametrize("algorithm", ["blelloch", "hybrid", "linear", "auto"])
@pytest.mark.parametrize("case", range(len(SCAN_CASES)))
def test_scan_on_cuda_matches_the_cpu_engine(case, algorithm):
    kinds, dims = SCAN_CASES[case]
    els, g = _chain(kinds, 3, dims, "cuda", torch.float32)
    want_els, want_g = _chain(kinds, 3, dims, "cpu", torch.float64)
    got = bppsa.scan(els, g, algorithm=algorithm)
    want = bppsa.scan(want_els, want_g, algorithm="linear")
    assert len(got) == len(want) == len(dims)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.is_cuda and a.dtype == torch.float32
        assert rel_err(a.cpu(), b) < 1e-5, f"s_{i}: {rel_err(a.cpu(), b):.3g}"
    got64 = bppsa.scan(_chain(kinds, 3, dims, "cuda", torch.float64)[0], want_g.cuda(), algorithm=algorithm)
    for a, b in zip(got64, want):
        assert rel_err(a.cpu(), b) < 1e-12


@pytest.mark.parametrize("algorithm", ["blelloch", "hybrid"])
def test_scan_gradients_on_cuda_match_the_cpu_engine(algorithm):
    """The backward pass (a scan over the transposed elements with injections) on the GPU."""
    kinds, dims = SCAN_CASES[2]
    sides = []
    for device, dtype in (("cuda", torch.float32), ("cpu", torch.float64)):
        els, g = _chain(kinds, 3, dims, device, dtype)
        dense = [e.requires_grad_(True) if not e.is_sparse_csr and e.stride(0) != 0 else e for e in els]
        g.requires_grad_(True)
        outs = bppsa.scan(dense, g, algorithm=algorithm if device == "cuda" else "linear")
        loss = sum((o * (i + 1)).sum() for i, o in enumerate(outs))
        wrt = [g] + [e for e in dense if e.requires_grad]
        sides.append(torch.autograd.grad(loss, wrt))
    for a, b in zip(*sides):
        assert a.is_cuda and rel_err(a.cpu(), b) < 1e-5


def test_scan_on_cuda_uses_the_current_stream_and_keeps_its_plan():
    els, g = _chain(["shared"] * 64, 4, [8] * 65, "cuda", torch.float32)
    first = bppsa.scan(els, g)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        bppsa.scan(els, g)  # plans for this stream
        torch.cuda._sleep(2_000_000_000)
        again = bppsa.scan(els, g)
        busy = not s.query()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert busy, "bppsa.scan waited for the device"
    for a, b in zip(again, first):
        assert rel_err(a, b) < 1e-6


def test_scan_on_cuda_errors():
    els, g = _chain(["shared"] * 3, 2, [4] * 4, "cuda", torch.float32)
    with pytest.raises(ValueError, match=r"jacobians\[1\] is on cpu but g_last is on cuda:0"):
        bppsa.scan([els[0], els[1].cpu(), els[2]], g)
    bad = [e.clone() for e in els]
    bad[2][0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match=r"jacobians\[2\] has NaN/Inf"):
        bppsa.scan(bad, g, check_finite=True)
    assert torch.isnan(bppsa.scan(bad, g)[-1]).any()  # unchecked: NaN propagates, as torch's products


def test_scan_on_cuda_check_finite_names_what_is_not_finite():
    """The CUDA half's checks (the resident scan's flags), in scan order: g_last, an element given
    untransposed or as CSR, an injection of the backward scan, then a result that overflowed."""
    els, g = _chain(["shared", "csr", "per_sample"], 2, [4] * 4, "cuda", torch.float32)
    with pytest.raises(FloatingPointError, match="g_last has NaN/Inf"):
        bppsa.scan(els, torch.full_like(g, float("inf")), check_finite=True)
    values = els[1].values().clone()
    values[0] = float("nan")
    bad = torch.sparse_csr_tensor(els[1].crow_indices(), els[1].col_indices(), values, els[1].shape)
    with pytest.raises(FloatingPointError, match=r"jacobians\[1\] has NaN/Inf"):
        bppsa.scan([els[0], bad, els[2]], g, check_finite=True)
    big = [torch.eye(4, device="cuda") * 1e30 for _ in range(3)]
    with pytest.raises(FloatingPointError, match="the result s_2 has NaN/Inf"):
        bppsa.scan(big, g.abs() + 1, check_finite=True)
    dense = [e.clone().requires_grad_(True) for e in (els[0], els[2])]
    outs = bppsa.scan([dense[0], els[1], dense[1]], g, check_finite=True)
    with pytest.raises(FloatingPointError, match="injection 2 has NaN/Inf"):
        (outs[1] * float("nan")).sum().backward()


def test_scan_compiled_on_cuda():
    els, g = _chain(["shared"] * 10, 3, [5] * 11, "cuda", torch.float32)
    stacked = torch.stack(els)
    compiled = torch.compile(lambda a, b: bppsa.scan(a, b), fullgraph=True, backend="aot_eager")(stacked, g)
    eager = bppsa.scan(stacked, g)
    assert compiled.is_cuda and rel_err(compiled, eager) < 1e-6
