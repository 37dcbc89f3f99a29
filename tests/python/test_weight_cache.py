# Weights changed between calls (issue 45, item 5): every way of changing them, in place or not,
# must give torch.nn's outputs and gradients at the next call. A cache of the engine's weight
# copies keyed by address and torch version fails these (the optimizer step, the in-place
# changes, the assigned .data; the write through .data bumps no version at all).
import pytest
import torch

from util import flat_state, rel_err, twins

CELLS = ["RNN", "GRU", "LSTM"]
TOL = 1e-10  # float64
TOL32 = 1e-4  # float32 (rounding; a stale weight is off by far more)


def _call(module, x, hx=None):
    """Output, final states and every gradient of a loss on all of them (one forward + backward)."""
    module.zero_grad(set_to_none=True)
    out, h = module(x, hx)
    loss = (out * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum() + sum(
        (s * (i + 2)).sum() for i, s in enumerate(flat_state(h)))
    loss.backward()
    return [out.detach(), *[s.detach() for s in flat_state(h)], *[p.grad.clone() for p in module.parameters()]]


def _same(ref, ours, x, what):
    tol = TOL if x.dtype == torch.float64 else TOL32
    expected, got = _call(ref, x), _call(ours, x)
    assert len(expected) == len(got)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert rel_err(a, b) <= tol, f"{what}: result {i} differs from torch.nn's by {rel_err(a, b):.3g}"
    with torch.no_grad():  # an inference call through the same pool, compared too
        a, b = ours(x)[0], ref(x)[0]
    assert rel_err(a, b) <= tol, f"{what} (no_grad): output differs from torch.nn's"


def _both(ref, ours, change):
    change(ref)
    change(ours)


@pytest.mark.parametrize("cell", CELLS)
def test_weights_changed_between_calls_are_reloaded(cell):
    ref, ours = twins(cell, 5, 6, num_layers=2, dtype=torch.float32)
    x32 = torch.randn(3, 2, 5)
    _same(ref, ours, x32, "float32, first call")
    _same(ref, ours, x32, "float32, unchanged weights")
    # .to(double): new parameters (and another engine pool)
    ref.to(torch.float64)
    ours.to(torch.float64)
    x = x32.double()
    _same(ref, ours, x, ".to(float64)")
    _same(ref, ours, x, "unchanged after .to(float64)")
    # an optimizer step (in place, foreach)
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (ref, ours)]
    for m, opt in zip((ref, ours), opts):
        _call(m, x)
        opt.step()
    _same(ref, ours, x, "after optimizer.step()")
    for m, opt in zip((ref, ours), opts):
        _call(m, x)
        opt.step()
    _same(ref, ours, x, "after a second optimizer.step()")
    # in place under no_grad, one weight and one bias
    def add(m):
        with torch.no_grad():
            m.weight_hh_l0.add_(0.25)
            m.bias_ih_l1.mul_(-2)
    _both(ref, ours, add)
    _same(ref, ours, x, "after w.add_(0.25) under no_grad")
    # through .data, an alias with a version counter of its own (gradcheck's perturbations,
    # word_language_model's `p.data.add_(p.grad, alpha=-lr)`): no version bump to key a cache on
    _both(ref, ours, lambda m: m.weight_ih_l0.data.add_(0.125))
    _same(ref, ours, x, "after w.data.add_(0.125)")
    # load_state_dict (copy_ into the same buffers)
    torch.manual_seed(7)
    other = type(ref)(5, 6, num_layers=2).double().state_dict()
    _both(ref, ours, lambda m: m.load_state_dict(other))
    _same(ref, ours, x, "after load_state_dict")
    # .data assigned (another buffer, same parameter object), several times, an older buffer
    # freed in between (its address may come back)
    for k in range(4):
        new = torch.randn_like(ref.weight_hh_l0) * 0.3
        _both(ref, ours, lambda m: setattr(m.weight_hh_l0, "data", new.clone()))
        _same(ref, ours, x, f"after weight_hh_l0.data = … ({k + 1})")
    # a weight replaced by a non-contiguous tensor (a contiguous copy each call)
    w = torch.randn(ref.weight_ih_l1.shape[::-1], dtype=torch.float64) * 0.3
    _both(ref, ours, lambda m: setattr(m.weight_ih_l1, "data", w.clone().t()))
    _same(ref, ours, x, "after weight_ih_l1.data = a transposed view")
    with torch.no_grad():
        ref.weight_ih_l1.add_(1)
        ours.weight_ih_l1.add_(1)
    _same(ref, ours, x, "after an in-place change of the transposed view")


@pytest.mark.parametrize("cell", CELLS)
def test_weights_changed_between_decoder_steps_are_reloaded(cell):
    """T 1 calls carrying the state, as a decoder runs, under no_grad and with gradients, a weight
    changed in place between two steps."""
    ref, ours = twins(cell, 4, 4, dtype=torch.float64)
    hr = ho = None
    for step in range(6):
        x = torch.randn(1, 1, 4, dtype=torch.float64)
        if step % 2:
            with torch.no_grad():
                (or_, hr), (oo, ho) = ref(x, hr), ours(x, ho)
        else:
            (or_, hr), (oo, ho) = ref(x, hr), ours(x, ho)
            hr = tuple(s.detach() for s in hr) if isinstance(hr, tuple) else hr.detach()
            ho = tuple(s.detach() for s in ho) if isinstance(ho, tuple) else ho.detach()
        assert rel_err(oo, or_) <= TOL, f"step {step}"
        with torch.no_grad():
            for m in (ref, ours):
                m.weight_hh_l0[0, step % 4] += 0.5


@pytest.mark.parametrize("cell", CELLS)
def test_final_state_of_one_layer_is_a_tensor_of_its_own(cell):
    """h_n (and c_n) of a one-layer module can be detach_()ed in place, as torch.nn's (truncated
    BPTT loops do): not a view of the layer's state."""
    ref, ours = twins(cell, 4, 4)
    x = torch.randn(3, 2, 4)
    for m in (ref, ours):
        _, h = m(x)
        for s in flat_state(h):
            s.detach_()
            assert not s.requires_grad


@pytest.mark.parametrize("cell", CELLS)
def test_weights_written_through_data_between_t1_calls(cell):
    """The CPU engine reads the module's weights in place at every call: writes through .data (no
    version bump, as word_language_model's update) between two T 1 calls reach the next forward and
    its backward, which equal torch.nn's on the same weights; so does an inference call."""
    ref, ours = twins(cell, 4, 5, dtype=torch.float64)
    gen = torch.Generator().manual_seed(3)
    h = None
    for step in range(5):
        x = torch.randn(1, 1, 4, dtype=torch.float64, generator=gen)
        versions = [p._version for p in ours.parameters()]
        for m in (ref, ours):
            for k, p in enumerate(m.parameters()):
                p.data.add_(0.05 * (k + 1) * (-1) ** step)
        assert [p._version for p in ours.parameters()] == versions  # what a version-keyed cache would miss
        expected, got = _call(ref, x, h), _call(ours, x, h)
        for i, (a, b) in enumerate(zip(got, expected)):
            assert rel_err(a, b) <= TOL, f"step {step}: result {i} differs from torch.nn's by {rel_err(a, b):.3g}"
        with torch.no_grad():
            assert rel_err(ours(x, h)[0], ref(x, h)[0]) <= TOL, f"step {step} (no_grad)"
        h = tuple(s.detach() for s in got[1:3]) if cell == "LSTM" else got[1]


@pytest.mark.parametrize("cell", CELLS)
def test_optimizer_steps_between_t1_calls(cell):
    """An optimizer step (Adam, in place) between two T 1 training calls: the next call's output,
    state and gradients are torch.nn's after the same step."""
    ref, ours = twins(cell, 4, 5, dtype=torch.float64)
    opts = [torch.optim.Adam(m.parameters(), lr=0.05) for m in (ref, ours)]
    gen = torch.Generator().manual_seed(4)
    for step in range(4):
        x = torch.randn(1, 2, 4, dtype=torch.float64, generator=gen)
        expected, got = _call(ref, x, None), _call(ours, x, None)
        for i, (a, b) in enumerate(zip(got, expected)):
            assert rel_err(a, b) <= TOL, f"step {step}: result {i} differs from torch.nn's by {rel_err(a, b):.3g}"
        for opt in opts:
            opt.step()
