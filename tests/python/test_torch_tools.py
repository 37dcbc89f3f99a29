# torch's tools that match module types exactly or cannot run bppsa's engine, on models holding
# bppsa.nn modules: dynamic quantization (through bppsa.nn.to_torch), torch.jit.script, and
# torch.func's transforms. Every check compares with the same model built from torch.nn.
import copy
import warnings

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import bppsa
from util import BPPSA, TORCH, rel_err, twins

KINDS = ["RNN", "GRU", "LSTM"]
needs_func = pytest.mark.skipif(not hasattr(torch, "func"), reason="this PyTorch has no torch.func (< 2.0)")


def _model(kind, cls_map, seed=0):
    """Linear → 2-layer bidirectional recurrent layer → Linear on the last step, from one seed."""
    torch.manual_seed(seed)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(3, 4)
            self.rnn = cls_map[kind](4, 5, num_layers=2, bidirectional=True)
            self.head = torch.nn.Sequential(torch.nn.Linear(10, 2))

        def forward(self, x):
            return self.head(self.rnn(self.inp(x))[0][-1])
    return Net()


@pytest.mark.parametrize("kind", KINDS)
def test_to_torch_replaces_every_bppsa_module_in_a_copy(kind):
    ours, ref = _model(kind, BPPSA), _model(kind, TORCH)
    before = copy.deepcopy(ours.state_dict())
    plain = bppsa.nn.to_torch(ours)
    assert type(plain.rnn) is TORCH[kind]
    assert not any(isinstance(m, bppsa.nn._Bppsa) for m in plain.modules())
    assert type(ours.rnn) is BPPSA[kind]  # the model itself is untouched
    assert all(torch.equal(before[k], v) for k, v in ours.state_dict().items())
    x = torch.randn(7, 2, 3)
    assert torch.equal(plain(x), ref(x))
    with torch.no_grad():  # a copy: changing it leaves the original alone
        plain.rnn.weight_hh_l0.add_(1)
    assert torch.equal(ours.rnn.weight_hh_l0, before["rnn.weight_hh_l0"])
    # One module registered twice stays one (shared) module; frozen weights stay frozen.
    shared = torch.nn.Sequential(ours.rnn, ours.rnn)
    ours.rnn.weight_hh_l0.requires_grad_(False)
    twin = bppsa.nn.to_torch(shared)
    assert twin[0] is twin[1] and type(twin[0]) is TORCH[kind]
    assert not twin[0].weight_hh_l0.requires_grad and twin[0].weight_ih_l0.requires_grad
    ours.rnn.weight_hh_l0.requires_grad_(True)
    single = bppsa.nn.to_torch(ours.rnn)  # a bppsa module alone: its own to_torch()
    y = torch.randn(7, 2, 4)
    assert type(single) is TORCH[kind] and torch.equal(single(y)[0], ref.rnn(y)[0])


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_quantization_through_to_torch_matches_torch(kind):
    quantize_dynamic = torch.ao.quantization.quantize_dynamic
    ours, ref = _model(kind, BPPSA), _model(kind, TORCH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notice
        q_ours, q_ref = quantize_dynamic(bppsa.nn.to_torch(ours)), quantize_dynamic(ref)
        # What the docs say: quantize_dynamic matches types exactly, so it leaves a bppsa.nn module
        # (like any subclass of torch's) in floating point.
        untouched = quantize_dynamic(ours)
    assert type(untouched.rnn) is BPPSA[kind]
    assert [type(m) for m in list(q_ours.modules())[1:]] == [type(m) for m in list(q_ref.modules())[1:]]
    if kind != "RNN":  # torch quantizes GRU and LSTM (RNN stays float, in torch's model too)
        assert ".quantized.dynamic." in type(q_ours.rnn).__module__
    x = torch.randn(9, 3, 3)
    assert torch.equal(q_ours(x), q_ref(x))


@pytest.mark.parametrize("kind", KINDS)
def test_jit_script_is_refused_naming_to_torch_which_scripts(kind):
    ours, ref = _model(kind, BPPSA), _model(kind, TORCH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script's deprecation notice
        with pytest.raises(RuntimeError, match=r"torch\.jit\.script .*bppsa\.nn\.to_torch\(model\)"):
            torch.jit.script(ours)
        assert type(ours.rnn) is BPPSA[kind]  # the failed attempt left the model as it was
        scripted = torch.jit.script(bppsa.nn.to_torch(ours))
    x = torch.randn(8, 3, 3)
    assert torch.equal(scripted(x), ref(x))
    assert rel_err(ours(x), ref(x)) < 1e-5


@needs_func
@pytest.mark.parametrize("kind", KINDS)
def test_torch_func_transforms_give_torch_nn_gradients(kind):
    from torch.func import functional_call, grad, jacrev, vjp
    kw = {"proj_size": 2} if kind == "LSTM" else {}
    ref, ours = twins(kind, 3, 4, num_layers=2, bidirectional=True, dtype=torch.float64, **kw)
    x = torch.randn(6, 3, 3, dtype=torch.float64)

    def loss(params, module, x):
        return functional_call(module, params, (x,))[0].square().sum()

    p_ours, p_ref = dict(ours.named_parameters()), dict(ref.named_parameters())
    g_ours = grad(loss, argnums=(0, 2))(p_ours, ours, x)
    g_ref = grad(loss, argnums=(0, 2))(p_ref, ref, x)
    for k in p_ref:
        assert rel_err(g_ours[0][k], g_ref[0][k]) < 1e-12, k
    assert rel_err(g_ours[1], g_ref[1]) < 1e-12
    # The same gradients as bppsa's own backward pass in eager mode (an independent path).
    x_eager = x.clone().requires_grad_()
    loss(p_ours, ours, x_eager).backward()
    assert rel_err(x_eager.grad, g_ref[1]) < 1e-10
    for k, p in ours.named_parameters():
        assert rel_err(p.grad, g_ref[0][k]) < 1e-10, k
    _, pull = vjp(lambda x: ours(x)[0], x)
    _, pull_ref = vjp(lambda x: ref(x)[0], x)
    cot = torch.randn(6, 3, 4 if kind == "LSTM" else 8, dtype=torch.float64)
    assert rel_err(pull(cot)[0], pull_ref(cot)[0]) < 1e-12
    small = x[:3, :1]
    assert rel_err(jacrev(lambda x: ours(x)[0])(small), jacrev(lambda x: ref(x)[0])(small)) < 1e-12


@needs_func
@pytest.mark.parametrize("kind", KINDS)
def test_torch_func_on_a_packed_sequence_fails_as_torch_nn_does(kind):
    ref, ours = twins(kind, 3, 4)
    x, lengths = torch.randn(6, 3, 3), torch.tensor([6, 2, 4])

    def loss(module):
        def f(params):
            packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
            return torch.func.functional_call(module, params, (packed,))[0].data.sum()
        return torch.func.grad(f)(dict(module.named_parameters()))
    with pytest.raises(RuntimeError) as want:
        loss(ref)
    with pytest.raises(RuntimeError) as got:
        loss(ours)
    assert str(got.value) == str(want.value)


@needs_func
@pytest.mark.parametrize("kind", KINDS)
def test_vmap_is_refused_as_torch_nn_refuses_it(kind):
    ref, ours = twins(kind, 3, 4)
    xs = torch.randn(2, 5, 3)
    with pytest.raises(RuntimeError) as want:
        torch.func.vmap(lambda x: ref(x)[0])(xs)
    with pytest.raises(RuntimeError) as got:
        torch.func.vmap(lambda x: ours(x)[0])(xs)
    assert str(got.value) == str(want.value)
