# The same results as torch.nn where torch.nn's forward has side effects a drop-in must repeat
# (issue 45, item 7): the dropout masks between layers on a PackedSequence (and the RNG state
# they leave), the number and order of a parametrization's evaluations (spectral_norm's power
# iteration), and a whole model saved with torch.save and loaded with weights_only=True. Every
# check compares with torch.nn on the same weights and seeds, in float64.
import copy
import io
import pickle

import pytest
import torch
from torch.nn.utils import parametrize
from torch.nn.utils.rnn import pack_padded_sequence

import bppsa
from util import BPPSA, TORCH, flat_state, rel_err, twins

KINDS = ["RNN", "GRU", "LSTM"]
TOL = 1e-10  # float64: the engine's sums and aten's differ in order only


def _grads(module, packed, hx):
    """Packed output, final states and the gradients of a loss over both (of the input's rows, hx
    and every parameter)."""
    out, h = module(packed, hx)
    loss = (out.data * torch.linspace(-1, 1, out.data.numel(), dtype=out.data.dtype).view_as(out.data)).sum()
    loss = loss + sum((s * (i + 2)).sum() for i, s in enumerate(flat_state(h)))
    inputs = [packed.data] + [s for s in flat_state(hx)]
    return out, flat_state(h), torch.autograd.grad(loss, inputs + list(module.parameters()))


PACKED_DROPOUT = [dict(kind=k, layers=l, bidirectional=b) for k in KINDS for l, b in ((2, False), (3, True))]


@pytest.mark.parametrize("c", PACKED_DROPOUT,
                         ids=[f"{c['kind']}-{c['layers']}l-{'bi' if c['bidirectional'] else 'uni'}" for c in PACKED_DROPOUT])
def test_dropout_on_packed_input_draws_torch_nn_masks(c):
    """torch.nn drops out the packed rows between layers: bppsa.nn draws the same masks from the
    same RNG, so outputs, h_n, gradients and the RNG state afterwards are torch.nn's (samples of
    unequal lengths, unsorted; and of one length, where packed order is padded order)."""
    for lengths in ([9, 4, 1, 7, 4], [6, 6, 6]):
        _check_packed_dropout(c, lengths)


def _check_packed_dropout(c, lengths):
    kind = c["kind"]
    directions = 2 if c["bidirectional"] else 1
    ref, ours = twins(kind, 3, 5, num_layers=c["layers"], bidirectional=c["bidirectional"], dropout=0.4,
                      dtype=torch.float64)
    ref.train(), ours.train()
    torch.manual_seed(1)
    x = torch.randn(max(lengths), len(lengths), 3, dtype=torch.float64)
    hx = torch.randn(c["layers"] * directions, len(lengths), 5, dtype=torch.float64)
    hx = (hx, torch.randn_like(hx)) if kind == "LSTM" else hx
    results = []
    for module in (ref, ours):
        data = x.clone().requires_grad_(True)
        states = tuple(s.clone().requires_grad_(True) for s in flat_state(hx))
        packed = pack_padded_sequence(data, lengths, enforce_sorted=False)
        torch.manual_seed(1234)
        out, h, grads = _grads(module, packed, states if kind == "LSTM" else states[0])
        results.append((out, h, grads, torch.get_rng_state()))
    (o_r, h_r, g_r, rng_r), (o_o, h_o, g_o, rng_o) = results
    assert torch.equal(rng_o, rng_r), "the RNG state after the call is torch.nn's"
    assert torch.equal(o_o.batch_sizes, o_r.batch_sizes)
    assert rel_err(o_o.data, o_r.data) <= TOL
    assert all(rel_err(a, b) <= TOL for a, b in zip(h_o, h_r))
    assert len(g_o) == len(g_r)
    assert all(rel_err(a, b) <= TOL for a, b in zip(g_o, g_r))


class _Count(torch.nn.Module):
    """A parametrization that counts its evaluations (and changes nothing)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, w):
        self.calls += 1
        return w * 1


@pytest.mark.parametrize("kind", KINDS)
def test_parametrization_is_evaluated_as_often_as_in_torch_nn(kind):
    counts = []
    for module in twins(kind, 3, 4, num_layers=2, bidirectional=True, dtype=torch.float64):
        tags = {name: _Count() for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l1", "weight_hh_l1_reverse")}
        for name, p in tags.items():
            parametrize.register_parametrization(module, name, p)
        x = torch.randn(5, 2, 3, dtype=torch.float64)
        module(x)
        module(x)
        with torch.no_grad():
            module(x)
        counts.append({name: p.calls for name, p in tags.items()})
    assert counts[0]["weight_hh_l0"] > 0
    assert counts[1] == counts[0]


@pytest.mark.parametrize("kind", KINDS)
def test_parametrized_weight_hh_matches_torch_nn(kind):
    """spectral_norm in train mode advances its power iteration at every evaluation: after one and
    several forwards, outputs, gradients and its vectors u, v equal torch.nn's (with an orthogonal
    weight_hh_l1 beside it)."""
    modules = []
    for module in twins(kind, 3, 4, num_layers=2, dtype=torch.float64):
        torch.manual_seed(5)  # spectral_norm draws u and v at registration
        torch.nn.utils.parametrizations.spectral_norm(module, "weight_hh_l0")
        torch.nn.utils.parametrizations.orthogonal(module, "weight_hh_l1")
        module.train()
        modules.append(module)
    ref, ours = modules
    torch.manual_seed(6)
    xs = [torch.randn(6, 2, 3, dtype=torch.float64) for _ in range(3)]
    for x in xs:
        res = []
        for module in (ref, ours):
            out, h = module(x)
            loss = (out ** 2).sum() + sum(s.sum() for s in flat_state(h))
            res.append((out, torch.autograd.grad(loss, list(module.parameters()))))
        (o_r, g_r), (o_o, g_o) = res
        assert rel_err(o_o, o_r) <= TOL
        assert all(rel_err(a, b) <= TOL for a, b in zip(g_o, g_r))
        buffers_r, buffers_o = dict(ref.named_buffers()), dict(ours.named_buffers())
        assert buffers_r.keys() == buffers_o.keys()
        for name, b in buffers_r.items():  # spectral_norm's _u and _v
            assert torch.equal(buffers_o[name], b), name


class WordModel(torch.nn.Module):
    """pytorch/examples' word_language_model.RNNModel in small: Embedding → dropout → recurrent
    layer → dropout → Linear."""

    def __init__(self, rnn_cls, tokens=11, embed=6, hidden=5, layers=2):
        super().__init__()
        self.drop = torch.nn.Dropout(0.2)
        self.encoder = torch.nn.Embedding(tokens, embed)
        self.rnn = rnn_cls(embed, hidden, layers, dropout=0.3)
        self.decoder = torch.nn.Linear(hidden, tokens)

    def forward(self, tokens, hidden=None):
        out, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)
        return self.decoder(self.drop(out)), hidden


def _step(model, tokens, target, seed):
    torch.manual_seed(seed)
    logits, _ = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    return logits, torch.autograd.grad(loss, list(model.parameters()))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.skipif(not hasattr(torch.serialization, "safe_globals"),
                    reason="this PyTorch has no torch.serialization.safe_globals (the allowlist of weights_only)")
def test_whole_model_loads_with_weights_only_allowlisting_the_public_class(kind):
    torch.manual_seed(0)
    model = WordModel(BPPSA[kind]).double()
    tokens, target = torch.randint(0, 11, (7, 3)), torch.randint(0, 11, (7, 3))
    _step(model, tokens, target, 1)  # engines now in the layer's pools
    with torch.no_grad():
        model(tokens)
    buf = io.BytesIO()
    torch.save(model, buf)
    assert b"LayerSpec" not in buf.getvalue() and b"bppsa._recurrent" not in buf.getvalue()
    buf.seek(0)
    with torch.serialization.safe_globals([WordModel, torch.nn.Dropout, torch.nn.Embedding, torch.nn.Linear,
                                           BPPSA[kind]]):
        loaded = torch.load(buf, weights_only=True)
    torch.manual_seed(0)
    twin = WordModel(TORCH[kind]).double()
    twin.load_state_dict(model.state_dict())
    copies = {"weights_only": loaded, "deepcopy": copy.deepcopy(model), "pickle": pickle.loads(pickle.dumps(model))}
    ref_logits, ref_grads = _step(twin, tokens, target, 2)
    for how, other in copies.items():
        assert type(other.rnn) is BPPSA[kind], how
        assert all(not any(spec._idle.values()) for spec in other.rnn._specs), how  # no engine came along
        for _ in range(2):  # the rebuilt pools serve again
            logits, grads = _step(other, tokens, target, 2)
            assert rel_err(logits, ref_logits) <= TOL, how
            assert all(rel_err(a, b) <= TOL for a, b in zip(grads, ref_grads)), how
    # The original keeps its engines and options; a copy keeps the options.
    model.rnn.set_backward("blelloch", 1)
    again = copy.deepcopy(model.rnn)
    assert (again.bppsa_backward, again.bppsa_threads) == ("blelloch", 1)
    assert again._specs is not model.rnn._specs


def test_module_saved_with_its_specs_still_loads():
    """A file from a bppsa that pickled its LayerSpecs loads (weights_only=False) with fresh pools."""
    m = bppsa.nn.GRU(3, 4)
    state = m.__dict__.copy()
    state.pop("_flat_weight_refs", None)
    fresh = bppsa.nn.GRU.__new__(bppsa.nn.GRU)
    fresh.__setstate__(state)  # what unpickling an old file does: its state still holds _specs
    assert fresh._specs is not m._specs and len(fresh._specs) == 1
    x = torch.randn(4, 2, 3)
    assert torch.equal(fresh(x)[0], m(x)[0])
