# Issue 22's reliability defects, each against an independent oracle (torch.nn with the same
# weights, a loop of torch products, torch's own autograd errors): thread counts, concurrent
# calls, double backward, autograd's contracts (second backward, in-place changes,
# non-contiguous parameters), zero-size dimensions, expanded (stride-0) scan elements.
import os
import threading
import time

import pytest
import torch

import bppsa
from util import BPPSA, TORCH, flat_state, rel_err, twins

KINDS = ["RNN", "GRU", "LSTM"]
MAX = bppsa._native.MAX_THREADS


# 5. Thread counts ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, MAX + 1, 70000, 10**6, 2**40, 1.5, True, "4"])
def test_thread_counts_out_of_range_are_refused(bad):
    x = torch.randn(5, 2, 3)
    with pytest.raises(ValueError, match=rf"bppsa.scan: threads must be None .* or an int in 0..{MAX}"):
        bppsa.scan(torch.randn(4, 3, 3), torch.randn(2, 3), threads=bad)
    with pytest.raises(ValueError, match=rf"bppsa.nn.GRU: threads must be None .* or an int in 0..{MAX}"):
        bppsa.nn.GRU(3, 4, threads=bad)
    m = bppsa.nn.LSTM(3, 4)
    with pytest.raises(ValueError, match=rf"bppsa.nn.LSTM: threads must be None .* or an int in 0..{MAX}"):
        m.set_backward("blelloch", bad)
    m.bppsa_threads = bad  # set directly: refused when used, before anything runs
    with pytest.raises(ValueError, match=rf"bppsa.nn.LSTM: bppsa_threads must be None .* or an int in 0..{MAX}"):
        m(x)


def test_native_engine_refuses_thread_counts_too():
    e = bppsa._native.layer_engine(torch.float32, "gru", 3, 4, "tanh")
    r = bppsa._native.ref
    x, out, hn = torch.randn(5, 2, 3), torch.empty(5, 2, 4), torch.empty(2, 4)
    w_ih, w_hh = torch.randn(12, 3), torch.randn(12, 4)
    e.forward(r(x), None, None, r(w_ih), r(w_hh), None, None, None, [], r(out), r(hn), None)
    # The tensors themselves are taken as well as their TensorRefs (what bppsa.nn passes), the
    # same result; a required one that is None is refused by name.
    out2, hn2 = torch.empty_like(out), torch.empty_like(hn)
    e.forward(x, None, None, w_ih, r(w_hh), None, None, None, [], out2, hn2, None)
    assert torch.equal(out, out2) and torch.equal(hn, hn2)
    with pytest.raises(ValueError, match=r"\[bppsa.nn\] x is None; pass a tensor"):
        e.forward(None, None, None, w_ih, w_hh, None, None, None, [], out2, hn2, None)
    with pytest.raises(ValueError, match=r"float64"):
        e.forward(x.double(), None, None, w_ih, w_hh, None, None, None, [], out2, hn2, None)
    with pytest.raises(ValueError, match=rf"threads must be in 0..{MAX}"):
        e.backward(r(w_ih), r(w_hh), None, None, None, r(torch.ones(5, 2, 4)), None, None, "blelloch", 70000, 0, None,
                   None, None, None, None, None, None, None, False)
    g = torch.randn(2, 3)
    outs = [torch.empty(2, 3) for _ in range(3)]
    el = [bppsa._native._C.ElementRef("dense", 3, 3, 1, r(torch.randn(1, 3, 3))) for _ in range(2)]
    with pytest.raises(ValueError, match=rf"threads must be in 0..{MAX}"):
        bppsa._native.affine_scan(torch.float32)(el, r(g), [r(o) for o in outs], [], False, "blelloch", 10**6,
                                                  False)


@pytest.mark.parametrize("make", [
    lambda: torch.randn(5, 2, 3),
    lambda: torch.randn(4, 6, dtype=torch.float64).t(),  # transposed strides
    lambda: torch.randn(8, 5)[2:, 1:4],  # an offset into its storage
    lambda: torch.arange(7),  # int64
    lambda: torch.zeros(3, 0, 2, dtype=torch.float64),
    lambda: torch.tensor(2.5),  # 0-d
], ids=["float32", "transposed", "offset", "int64", "empty", "scalar"])
def test_the_native_view_is_the_tensors(make):
    t = make()
    r = bppsa._native.ref(t)
    assert r.data == t.data_ptr()
    assert r.dtype == str(t.dtype).replace("torch.", "")
    assert r.shape == list(t.shape) and r.strides == list(t.stride())
    assert (r.device, r.device_index) == ("cpu", -1)
    assert bppsa._native.ref(None) is None


def test_the_largest_thread_count_runs():
    A = 0.3 * torch.randn(40, 2, 6, 6, dtype=torch.float64)
    g = torch.randn(2, 6, dtype=torch.float64)
    ref = bppsa.scan(A, g, algorithm="linear", threads=1)
    assert rel_err(bppsa.scan(A, g, algorithm="blelloch", threads=MAX), ref) < 1e-12
    ref_m, ours = twins("GRU", 3, 5, threads=MAX, backward="blelloch")
    x = torch.randn(9, 4, 3)
    (ga,) = torch.autograd.grad(ref_m(x)[0].sum(), [ref_m.weight_hh_l0])
    (gb,) = torch.autograd.grad(ours(x)[0].sum(), [ours.weight_hh_l0])
    assert rel_err(gb, ga) < 1e-5


# 6. Concurrent calls ---------------------------------------------------------------------


def _in_threads(n, fn):
    """Runs fn(i) in n threads at once (started together); returns the results, re-raises errors."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def body(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: B902 - handed to the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _inputs(kind, count, seed, states=2):
    """Distinct inputs of varying shapes (so that pooled engines see different ones); hx has
    `states` layers × directions."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for k in range(count):
        steps, batch = 3 + k % 5, 1 + k % 3
        x = torch.randn(steps, batch, 3, generator=gen)
        h = torch.randn(states, batch, 5, generator=gen)
        hx = (h, torch.randn(states, batch, 5, generator=gen)) if kind == "LSTM" else h
        out.append((x, hx))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_concurrent_inference_is_correct(kind):
    ref, ours = twins(kind, 3, 5, num_layers=2, bidirectional=True)
    n, m = 4, 15
    work = [_inputs(kind, m, 100 + i, states=4) for i in range(n)]
    with torch.no_grad():
        expected = [[ours(x, hx)[0] for x, hx in w] for w in work]  # one thread
        oracle = [[ref(x, hx)[0] for x, hx in w] for w in work]

        def calls(i):
            with torch.no_grad():  # grad mode is per thread
                return [ours(x, hx)[0] for x, hx in work[i]]

        got = _in_threads(n, calls)
    wrong = sum(not torch.equal(a, b) for gs, es in zip(got, expected) for a, b in zip(gs, es))
    assert wrong == 0, f"{wrong} of {n * m} outputs differ from the single-threaded ones"
    assert max(rel_err(a, b) for gs, os in zip(got, oracle) for a, b in zip(gs, os)) < 1e-5


@pytest.mark.parametrize("kind", KINDS)
def test_concurrent_training_is_correct(kind):
    ref, ours = twins(kind, 3, 5, num_layers=2, backward="blelloch")
    n, m = 4, 6
    work = [_inputs(kind, m, 200 + i) for i in range(n)]

    def grads(module, x, hx):
        x = x.clone().requires_grad_(True)
        out, h = module(x, hx)
        loss = (out * out).sum() + sum(s.sum() for s in flat_state(h))
        return torch.autograd.grad(loss, [x] + list(module.parameters()))

    expected = [[grads(ref, x, hx) for x, hx in w] for w in work]  # torch.nn, one thread
    got = _in_threads(n, lambda i: [grads(ours, x, hx) for x, hx in work[i]])
    worst = max(rel_err(a, b) for gs, es in zip(got, expected) for g, e in zip(gs, es) for a, b in zip(g, e))
    assert worst < 1e-5

    # Forwards from several threads first, then the backwards from several threads (each on its
    # own graph), in another order.
    outs = _in_threads(n, lambda i: [ours(x.clone().requires_grad_(True), hx) for x, hx in work[i]])

    def backwards(i):
        res = []
        for out, h in reversed(outs[i]):
            loss = (out * out).sum() + sum(s.sum() for s in flat_state(h))
            res.append(torch.autograd.grad(loss, list(ours.parameters())))
        return res[::-1]

    got = _in_threads(n, backwards)
    worst = max(rel_err(a, b) for gs, es in zip(got, expected) for g, e in zip(gs, es) for a, b in zip(g, e[1:]))
    assert worst < 1e-5


# 7. Double backward ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_double_backward_raises(kind):
    m = BPPSA[kind](3, 4)
    x = torch.randn(5, 2, 3, requires_grad=True)
    out, _ = m(x)
    loss = out.sum()  # linear in the output: the grad_output does not require grad
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(loss, list(m.parameters()), create_graph=True)
    out, _ = m(x)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad((out ** 2).sum(), [x], create_graph=True)


def test_scan_double_backward_raises():
    A = torch.randn(4, 3, 3, requires_grad=True)
    g = torch.randn(2, 3, requires_grad=True)
    s = bppsa.scan(A, g)
    with pytest.raises(RuntimeError, match="bppsa.scan: double backward"):
        torch.autograd.grad(s.sum(), [A, g], create_graph=True)


# 8. Autograd's contracts -----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_second_backward_needs_retain_graph(kind):
    ref, ours = twins(kind, 3, 4, backward="blelloch")
    x = torch.randn(6, 2, 3)
    out, h = ours(x)
    loss = out.sum() + sum(s.sum() for s in flat_state(h))  # linear: torch's own nodes keep nothing
    loss.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        loss.backward()
    # retain_graph=True: the same gradients again, as torch's.
    out_r, _ = ref(x)
    (g_ref,) = torch.autograd.grad((out_r ** 2).sum(), [ref.weight_hh_l0])
    out, _ = ours(x)
    loss = (out ** 2).sum()
    (g1,) = torch.autograd.grad(loss, [ours.weight_hh_l0], retain_graph=True)
    (g2,) = torch.autograd.grad(loss, [ours.weight_hh_l0], retain_graph=True)
    (g3,) = torch.autograd.grad(loss, [ours.weight_hh_l0])
    assert torch.equal(g1, g2) and torch.equal(g1, g3)
    assert rel_err(g1, g_ref) < 1e-5


def test_scan_second_backward_needs_retain_graph():
    A = torch.randn(4, 3, 3, requires_grad=True)
    s = bppsa.scan(A, torch.randn(2, 3)).sum()  # linear: torch's own nodes keep nothing
    s.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        s.backward()


@pytest.mark.parametrize("kind", KINDS)
def test_weight_changed_in_place_before_backward_raises(kind):
    m = BPPSA[kind](3, 4, bias=True)
    out, _ = m(torch.randn(5, 2, 3))
    with torch.no_grad():
        m.weight_hh_l0.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    out, _ = m(torch.randn(5, 2, 3))
    with torch.no_grad():
        m.bias_ih_l0.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_scan_element_changed_in_place_before_backward_raises():
    A = torch.randn(4, 3, 3, requires_grad=True)
    B = torch.randn(2, 3, 3)
    s = bppsa.scan([A[0], B, A[1]], torch.randn(2, 3))
    with torch.no_grad():
        B.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        sum(t.sum() for t in s).backward()


@pytest.mark.parametrize("kind", KINDS)
def test_non_contiguous_parameters_match_torch(kind):
    ref, ours = twins(kind, 3, 4, num_layers=2, backward="blelloch")
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind] * 4
    # weight_hh_l0 as a transposed view, weight_ih_l1 as a strided slice; same values in both.
    w_hh = torch.randn(4, gates).t()
    w_ih = torch.randn(gates, 8)[:, ::2]
    b = torch.randn(2 * gates)[::2]
    ref.weight_hh_l0 = torch.nn.Parameter(w_hh.contiguous())
    ref.weight_ih_l1 = torch.nn.Parameter(w_ih.contiguous())
    ref.bias_hh_l1 = torch.nn.Parameter(b.contiguous())
    ours.weight_hh_l0 = torch.nn.Parameter(w_hh)
    ours.weight_ih_l1 = torch.nn.Parameter(w_ih)
    ours.bias_hh_l1 = torch.nn.Parameter(b)
    assert not any(p.is_contiguous() for p in (ours.weight_hh_l0, ours.weight_ih_l1, ours.bias_hh_l1))
    x = torch.randn(6, 2, 3)
    outs, grads = [], []
    for mod in (ref, ours):
        out, _ = mod(x)
        outs.append(out)
        grads.append(torch.autograd.grad((out ** 2).sum(), list(mod.parameters())))
    assert rel_err(outs[1], outs[0]) < 1e-5
    for a, b_ in zip(grads[1], grads[0]):
        assert a.shape == b_.shape and rel_err(a, b_) < 1e-5


# 9. Zero-size dimensions -----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch_first", [False, True])
def test_empty_batch_matches_torch(kind, batch_first):
    ref, ours = twins(kind, 4, 6, num_layers=2, bidirectional=True, batch_first=batch_first)
    shape = (0, 5, 4) if batch_first else (5, 0, 4)
    for hx_given in (False, True):
        res = []
        for mod in (ref, ours):
            x = torch.randn(shape, requires_grad=True)
            hx = None
            if hx_given:
                h = torch.randn(4, 0, 6, requires_grad=True)
                hx = (h, torch.randn(4, 0, 6)) if kind == "LSTM" else h
            out, h = mod(x, hx)
            loss = out.sum() + sum(s.sum() for s in flat_state(h))
            loss.backward()
            res.append((out, flat_state(h), x.grad, [p.grad.clone() for p in mod.parameters()]))
            mod.zero_grad()
        (o_r, h_r, gx_r, gp_r), (o_o, h_o, gx_o, gp_o) = res
        assert o_o.shape == o_r.shape and [s.shape for s in h_o] == [s.shape for s in h_r]
        assert gx_o.shape == gx_r.shape
        assert all(torch.equal(a, b) for a, b in zip(gp_o, gp_r))  # zeros, as torch's


@pytest.mark.parametrize("kind", KINDS)
def test_empty_sequence_raises_torchs_error(kind):
    ref, ours = twins(kind, 4, 6)
    for shape in [(0, 3, 4), (0, 0, 4), (0, 4)]:
        with pytest.raises(RuntimeError) as e_ref:
            ref(torch.randn(shape))
        with pytest.raises(RuntimeError) as e_ours:
            ours(torch.randn(shape))
        assert str(e_ours.value) == str(e_ref.value)


def _loop(jacobians, g):
    s, outs = g, [g]
    for a in jacobians:
        s = s @ a.T if a.dim() == 2 else torch.einsum("brc,bc->br", a.expand(s.shape[0], -1, -1), s)
        outs.append(s)
    return outs


@pytest.mark.parametrize("case", ["batch0_shared", "batch0_per_sample", "dim0", "rect_dim0", "batch0_list"])
def test_scan_empty_shapes(case):
    d = torch.float64
    if case == "batch0_shared":
        jac, g = torch.randn(4, 3, 3, dtype=d), torch.randn(0, 3, dtype=d)
    elif case == "batch0_per_sample":
        jac, g = torch.randn(4, 0, 3, 3, dtype=d), torch.randn(0, 3, dtype=d)
    elif case == "dim0":
        jac, g = torch.randn(4, 0, 0, dtype=d), torch.randn(2, 0, dtype=d)
    elif case == "rect_dim0":
        jac, g = [torch.randn(0, 3, dtype=d), torch.randn(2, 4, 0, dtype=d), torch.randn(5, 4, dtype=d)], \
            torch.randn(2, 3, dtype=d)
    else:
        jac, g = [torch.randn(2, 3, dtype=d), torch.randn(0, 4, 2, dtype=d)], torch.randn(0, 3, dtype=d)
    tensors = list(jac) if isinstance(jac, list) else [jac]
    for t in tensors + [g]:
        t.requires_grad_(True)
    outs = bppsa.scan(jac, g)
    ref = _loop(list(jac.unbind(0)) if isinstance(jac, torch.Tensor) else jac, g)
    outs = list(outs.unbind(0)) if isinstance(jac, torch.Tensor) else outs
    assert [o.shape for o in outs] == [r.shape for r in ref]
    assert all(torch.equal(o, r) for o, r in zip(outs, ref))
    heads = [torch.randn(r.shape, dtype=d) for r in ref]
    ga = torch.autograd.grad(sum((o * h).sum() for o, h in zip(outs, heads)), tensors + [g])
    gb = torch.autograd.grad(sum((r * h).sum() for r, h in zip(ref, heads)), tensors + [g])
    assert all(a.shape == b.shape and torch.allclose(a, b) for a, b in zip(ga, gb))


# 10. Expanded (stride-0) scan elements ---------------------------------------------------


def test_expanded_shared_jacobian_runs_shared():
    # Copied per sample this is 256 · 1024 · 128² doubles = 34 GB, more than this machine has.
    N, B, dim = 256, 1024, 128
    A = torch.randn(dim, dim, dtype=torch.float64) / dim ** 0.5
    g = torch.randn(B, dim, dtype=torch.float64)
    t0 = time.monotonic()
    s = bppsa.scan(A.expand(N, B, dim, dim), g, algorithm="linear")
    assert time.monotonic() - t0 < 30
    assert s.shape == (N + 1, B, dim)
    ref = g
    for i in range(10):
        ref = ref @ A.T
        assert rel_err(s[i + 1], ref) < 1e-12
    assert rel_err(s[N], g @ torch.linalg.matrix_power(A, N).T) < 1e-9
    # A list element expanded over the batch likewise, with the gradient of the shared matrix.
    a = A[:8, :8].clone().requires_grad_(True)
    gs = g[:, :8].clone().requires_grad_(True)
    outs = bppsa.scan([a.expand(B, 8, 8), a], gs)
    ref = _loop([a, a], gs)
    assert all(rel_err(o, r) < 1e-12 for o, r in zip(outs, ref))
    heads = [torch.randn(B, 8, dtype=torch.float64) for _ in outs]
    ga = torch.autograd.grad(sum((o * h).sum() for o, h in zip(outs, heads)), [a, gs])
    gb = torch.autograd.grad(sum((r * h).sum() for r, h in zip(ref, heads)), [a, gs])
    assert all(rel_err(x, y) < 1e-12 for x, y in zip(ga, gb))


def test_expanded_per_sample_jacobian_too_large_raises_memory_error():
    # Shared over the steps but one matrix per sample: N · 1024 · 128² doubles, twice this
    # machine's memory, must be copied into the scan: refused before anything is allocated.
    B, dim = 1024, 128
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    N = max(256, int(2 * total / (B * dim * dim * 8)) + 1)
    P = torch.randn(B, dim, dim, dtype=torch.float64)
    g = torch.randn(B, dim, dtype=torch.float64)
    t0 = time.monotonic()
    with pytest.raises(MemoryError, match="bppsa.scan"):
        bppsa.scan(P.expand(N, B, dim, dim), g)
    assert time.monotonic() - t0 < 10


def test_a_hybrid_scan_that_cannot_fit_is_refused_not_killed():
    # LSTM H 256, T 1000, batch 16: 16.8 GB of dense 512 × 512 Jacobians and as much again in the
    # hybrid's chunk products. On a machine of less than 40 GB the backward must raise
    # MemoryError before allocating (it was killed by the OOM killer at 25 GB).
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if total > 40e9:
        pytest.skip(f"this machine has {total / 1e9:.0f} GB: the scan would fit")
    m = bppsa.nn.LSTM(1, 256, backward="hybrid", threads=1)
    out, _ = m(torch.randn(1000, 16, 1))
    with pytest.raises(MemoryError, match="hybrid scan backward of 1000 steps"):
        out[-1].sum().backward()
