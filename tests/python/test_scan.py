# bppsa.scan against a loop of matrix-vector products (the definition of BP), exactly on
# small-integer data, with tolerance on floats; its gradients by gradcheck; its errors.
import pytest
import torch

import bppsa
from util import rel_err

ALGORITHMS = ["blelloch", "hybrid", "linear", "auto"]


def loop(mats, g):
    """s_0 = g, s_i = A_i s_(i-1): one matrix-vector product per element and sample. mats[i] is
    (rows, cols) shared or (B, rows, cols) per sample; dense or sparse."""
    out = [g]
    for a in mats:
        if a.layout == torch.sparse_csr:
            a = a.to_dense()
        s = out[-1]
        out.append(torch.einsum("rc,bc->br", a, s) if a.dim() == 2 else torch.einsum("brc,bc->br", a, s))
    return out


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 64, 257])
def test_exact_order_small_integers(algorithm, n):
    # Signed permutation matrices (a non-commutative group: order matters, magnitudes stay put)
    # with up to 8 general {-1, 0, 1} matrices among them keep every product an exactly
    # representable integer, so any algorithm must give exactly the loop's result: a wrong
    # operand order cannot hide behind a tolerance.
    gen = torch.Generator().manual_seed(n)
    B, d = 3, 4
    mats = torch.zeros(n, B, d, d, dtype=torch.float64)
    for i in range(n):
        for b in range(B):
            perm = torch.randperm(d, generator=gen)
            signs = torch.randint(0, 2, (d,), generator=gen).double() * 2 - 1
            mats[i, b, torch.arange(d), perm] = signs
    general = torch.randperm(n, generator=gen)[:8]
    mats[general] = torch.randint(-1, 2, (len(general), B, d, d), generator=gen).double()
    g = torch.randint(-3, 4, (B, d), generator=gen).double()
    got = bppsa.scan(mats, g, algorithm=algorithm)
    want = torch.stack(loop(list(mats.unbind(0)), g))
    assert got.shape == (n + 1, B, d)
    assert torch.equal(got, want)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_shared_per_sample_rectangular_and_csr(algorithm):
    gen = torch.Generator().manual_seed(7)
    B = 5
    dims = [6, 9, 4, 4, 11, 3, 7, 7, 2]  # d_N … d_0, rectangular elements
    mats = []
    for i in range(len(dims) - 1):
        rows, cols = dims[i + 1], dims[i]
        kind = i % 3
        if kind == 0:
            mats.append(torch.randn(rows, cols, generator=gen))  # shared dense
        elif kind == 1:
            mats.append(torch.randn(B, rows, cols, generator=gen))  # per sample
        else:
            dense = torch.randn(rows, cols, generator=gen) * (torch.rand(rows, cols, generator=gen) < 0.4)
            mats.append(dense.to_sparse_csr())  # shared CSR
    g = torch.randn(B, dims[0], generator=gen)
    got = bppsa.scan(mats, g, algorithm=algorithm)
    want = loop(mats, g)
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want]
    for a, b in zip(got, want):
        assert rel_err(a, b) <= 1e-5


@pytest.mark.parametrize("algorithm", ["blelloch", "hybrid"])
def test_long_chain_float(algorithm):
    gen = torch.Generator().manual_seed(3)
    n, B, d = 3000, 4, 8
    mats = torch.randn(n, d, d, generator=gen) / d ** 0.5 + 0.9 * torch.eye(d) / d ** 0.5
    g = torch.randn(B, d, generator=gen)
    got = bppsa.scan(mats.double(), g.double(), algorithm=algorithm)
    want = torch.stack(loop(list(mats.double().unbind(0)), g.double()))
    for k in range(0, n + 1, 97):
        assert rel_err(got[k], want[k]) <= 1e-9
    # float32 over 3000 products: rounding accumulates along the chain in any order (the
    # sequential float32 loop itself is ~1e-4 from double here).
    got32 = bppsa.scan(mats, g, algorithm=algorithm, threads=2)
    assert rel_err(got32[-1], want[-1].float()) <= 1e-3


def test_threads_do_not_change_results():
    gen = torch.Generator().manual_seed(11)
    mats = torch.randn(500, 6, 6, 6, generator=gen) * 0.4
    g = torch.randn(6, 6, generator=gen)
    runs = [bppsa.scan(mats, g, algorithm="blelloch", threads=t) for t in (1, 2, 3)]
    assert all(torch.equal(r, runs[0]) for r in runs)


@pytest.mark.parametrize("algorithm", ["blelloch", "hybrid", "linear"])
def test_kept_plans_follow_every_call(algorithm):
    # The CPU scan keeps its Scanners (plan, SpGEMM patterns, workspace) per chain structure from call
    # to call: calls alternating between structures, between two CSR patterns of the same shape and
    # nnz, with and without injections (the backward), and from several threads at once must each give
    # the loop's result for their own data.
    gen = torch.Generator().manual_seed(5)
    B, d, n = 3, 6, 40

    def csr(seed):
        g2 = torch.Generator().manual_seed(seed)
        mask = torch.zeros(d * d, dtype=torch.bool)
        mask[torch.randperm(d * d, generator=g2)[:12]] = True  # the same nnz, another pattern
        return (torch.randn(d, d, generator=g2) * mask.view(d, d)).to_sparse_csr()

    chains = [torch.randn(n, d, d, generator=gen) * 0.4, torch.randn(n, B, d, d, generator=gen) * 0.4,
              [csr(1)] * 9, [csr(2)] * 9, torch.randn(n + 3, d, d, generator=gen) * 0.4]
    for _ in range(2):
        for mats in chains:
            g = torch.randn(B, d, generator=gen)
            got = bppsa.scan(mats, g, algorithm=algorithm)
            want = loop(list(mats.unbind(0)) if isinstance(mats, torch.Tensor) else mats, g)
            assert all(rel_err(a, b) <= 1e-5 for a, b in zip(got, want))
    # The backward of a chain just scanned forward: the same elements transposed, with injections.
    mats = (torch.randn(n, d, d, generator=gen) * 0.4).double().requires_grad_()
    g = torch.randn(B, d, generator=gen, dtype=torch.float64, requires_grad=True)
    for _ in range(2):
        w = torch.randn(n + 1, B, d, generator=gen, dtype=torch.float64)
        got = torch.autograd.grad((bppsa.scan(mats, g, algorithm=algorithm) * w).sum(), (mats, g))
        want = torch.autograd.grad((torch.stack(loop(list(mats.unbind(0)), g)) * w).sum(), (mats, g))
        assert all(rel_err(a, b) <= 1e-10 for a, b in zip(got, want))
    import threading
    errors, mats = [], torch.randn(2000, 12, 12, generator=gen) * 0.3
    gs = [torch.randn(B, 12, generator=gen) for _ in range(8)]
    wants = [torch.stack(loop(list(mats.unbind(0)), g)) for g in gs]

    def worker(i):  # long enough scans (the GIL released) that the threads overlap
        for _ in range(5):
            got = bppsa.scan(mats, gs[i], algorithm=algorithm, threads=1)
            errors.append(rel_err(got, wants[i]))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 40 and max(errors) <= 1e-5


def test_gradcheck_double():
    gen = torch.Generator().manual_seed(2)
    B = 2
    shared = (torch.randn(4, 3, generator=gen, dtype=torch.float64) * 0.7).requires_grad_()
    per_sample = (torch.randn(B, 5, 4, generator=gen, dtype=torch.float64) * 0.7).requires_grad_()
    square = (torch.randn(6, 5, 5, generator=gen, dtype=torch.float64) * 0.6).requires_grad_()
    g = torch.randn(B, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    fixed_csr = (torch.randn(2, 5, dtype=torch.float64) * (torch.rand(2, 5) < 0.5)).to_sparse_csr()

    def f(shared, per_sample, square, g):
        mats = [shared, per_sample] + list(square.unbind(0)) + [fixed_csr]
        return tuple(bppsa.scan(mats, g, algorithm="blelloch"))

    assert torch.autograd.gradcheck(f, (shared, per_sample, square, g), eps=1e-6, atol=1e-8)

    def stacked(square, g):
        return bppsa.scan(square, torch.cat([g, g[:, :2]], dim=1), algorithm="hybrid")

    assert torch.autograd.gradcheck(stacked, (square, g), eps=1e-6, atol=1e-8)


def test_errors():
    g = torch.randn(2, 4)
    with pytest.raises(ValueError, match=r"jacobians\[1\] is 3×5 but jacobians\[0\] gives vectors of length 3"):
        bppsa.scan([torch.randn(3, 4), torch.randn(3, 5)], g)
    with pytest.raises(ValueError, match=r"jacobians\[0\] is 4×3 but g_last gives vectors of length 4"):
        bppsa.scan([torch.randn(4, 3)], g)
    with pytest.raises(ValueError, match="3 matrices"):
        bppsa.scan([torch.randn(3, 4, 4)], g)
    with pytest.raises(ValueError, match="unknown algorithm 'fast'"):
        bppsa.scan(torch.randn(2, 4, 4), g, algorithm="fast")
    with pytest.raises(ValueError, match="threads"):
        bppsa.scan(torch.randn(2, 4, 4), g, threads=-1)
    with pytest.raises(ValueError, match="g_last has shape"):
        bppsa.scan(torch.randn(2, 4, 4), torch.randn(4))
    with pytest.raises(NotImplementedError, match="float16"):
        bppsa.scan(torch.randn(2, 4, 4).half(), g.half())
    with pytest.raises(ValueError, match="float64 but g_last is torch.float32"):
        bppsa.scan(torch.randn(2, 4, 4, dtype=torch.float64), g)
    with pytest.raises(NotImplementedError, match="meta"):
        bppsa.scan(torch.randn(2, 4, 4), torch.empty(2, 4, device="meta"))
    with pytest.raises(FloatingPointError, match="NaN or Inf"):
        bad = torch.randn(3, 4, 4)
        bad[1, 2, 2] = float("nan")
        bppsa.scan(bad, g, check_finite=True)
    with pytest.raises(TypeError):
        bppsa.scan("not a tensor", g)
