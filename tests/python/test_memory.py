# bppsa.nn's memory against torch.nn's, in this process (issue 45, item 6): nothing of a forward's
# record outlives its backward (or a no_grad call), and nothing of a module outlives it, under
# torch.compile too. Measured as the process's resident memory (the engine allocates in C++,
# which tracemalloc does not see) after gc.collect() and malloc_trim(0), as a growth over the
# resident memory just before each case; the peak through VmHWM, reset by /proc/self/clear_refs.
# The shapes make a held (T, B) record some 100 MB, far above the margins.
import ctypes
import gc
import os

import pytest
import torch

import bppsa.nn

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc")

MB = 1 << 20
MARGIN = 20 * MB  # allocator slack and the engines' small state (weights' copies: under 1 MB here)
SHAPE = dict(input_size=32, hidden_size=64, num_layers=2, bidirectional=True)
T, B = 300, 64  # bppsa's record of one forward: about 130 MB

_LIBC = ctypes.CDLL("libc.so.6")


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _settle():
    gc.collect()
    _LIBC.malloc_trim(0)
    return _status("VmRSS")


def _reset_peak():
    base = _settle()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return base


def _model(family):
    torch.manual_seed(0)
    return family.LSTM(**SHAPE)


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(T, B, SHAPE["input_size"], generator=g)


def _step(model, x, opt=None):
    out, _ = model(x)
    out.sum().backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=False)


def _measure(case):
    """case(family) → bytes, for torch.nn then bppsa.nn (torch.nn first: bppsa's figure cannot
    profit from memory torch's run freed, since each starts from a settled process)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # and FTZ in that thread: torch.nn runs many times slower on subnormals
    flush = torch.set_flush_denormal(True)
    try:
        for family in (torch.nn, bppsa.nn):  # first use: code pages, thread pools, allocator arenas
            _step(_model(family), _data()[:, :16])
        return case(torch.nn), case(bppsa.nn)
    finally:
        torch.set_num_threads(threads)
        if flush:
            torch.set_flush_denormal(False)


def _check(what, ref, ours):
    print(f"{what}: torch.nn {ref / MB:.1f} MB, bppsa.nn {ours / MB:.1f} MB")
    assert ours <= ref + MARGIN, (f"{what}: bppsa.nn {ours / MB:.1f} MB against torch.nn's {ref / MB:.1f} MB "
                                  f"(margin {MARGIN / MB:.0f} MB)")


def test_memory_after_a_training_step():
    def case(family):
        x = _data()
        base = _settle()
        model = _model(family)
        _step(model, x, torch.optim.SGD(model.parameters(), lr=0.1))
        held = _settle() - base
        del model
        return held
    _check("resident after one training step", *_measure(case))


def test_memory_under_gradient_accumulation():
    def case(family):
        x = _data()
        base = _reset_peak()
        model = _model(family)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for k in range(4):  # four micro-batches, one optimizer step (out holds the last graph meanwhile)
            out, _ = model(x[:, 16 * k:16 * k + 16])
            out.sum().backward()
        opt.step()
        peak = _status("VmHWM") - base
        del out
        held = _settle() - base
        del model, opt
        return peak, held
    (ref_peak, ref_held), (peak, held) = _measure(case)
    _check("peak of 4-step gradient accumulation", ref_peak, peak)
    _check("resident after 4-step gradient accumulation", ref_held, held)


def test_memory_after_a_no_grad_forward():
    def case(family):
        x = _data()
        model = _model(family)
        base = _settle()
        with torch.no_grad():
            out, (h, c) = model(x)
        del out, h, c
        held = _settle() - base
        del model
        return held
    _check("resident after a no_grad forward", *_measure(case))


def test_peak_of_a_no_grad_forward():
    """An inference call keeps no record for a backward: its peak is the outputs' and a few steps'
    buffers, like torch.nn's (which holds each layer's input projection of every step)."""
    def case(family):
        x = _data()
        model = _model(family)
        base = _reset_peak()
        with torch.no_grad():
            out, (h, c) = model(x)
        peak = _status("VmHWM") - base
        del out, h, c, model
        return peak
    _check("peak of a no_grad forward", *_measure(case))


def test_memory_after_del_model():
    def case(family):
        x = _data()
        base = _settle()
        model = _model(family)
        _step(model, x, torch.optim.SGD(model.parameters(), lr=0.1))
        with torch.no_grad():
            model(x)
        del model
        return _settle() - base
    _check("resident after del model", *_measure(case))


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="needs torch.compile")
def test_memory_after_del_compiled_model():
    def case(family):
        x = _data()
        torch._dynamo.reset()
        _settle()
        base = _settle()
        model = _model(family)
        compiled = torch.compile(model)
        _step(compiled, x)
        with torch.no_grad():
            compiled(x)
        del compiled, model
        torch._dynamo.reset()
        return _settle() - base
    _check("resident after del of a compiled model and torch._dynamo.reset()", *_measure(case))


@pytest.mark.parametrize("cell", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("kept_mb", ["0", None])
def test_retained_graph_backward_after_the_record_is_freed(cell, kept_mb, monkeypatch):
    """The record goes at the end of a backward: a second backward of a retained graph (T·B past
    the kept bound: BPPSA_KEPT_RECORD_MB=0) runs the forward again and gives torch.nn's gradients;
    under the default budget the record stays and serves the second backward."""
    if kept_mb is not None:
        monkeypatch.setenv("BPPSA_KEPT_RECORD_MB", kept_mb)
    results = []
    for family in (torch.nn, bppsa.nn):
        torch.manual_seed(0)
        m = getattr(family, cell)(3, 5, num_layers=2, bidirectional=True).double()
        x = torch.randn(100, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        out = m(x)[0]
        loss = (out * out).sum()
        first = torch.autograd.grad(loss, list(m.parameters()), retain_graph=True)
        second = torch.autograd.grad(loss, list(m.parameters()))
        results.append(first + second)
    for a, b in zip(*results):
        assert (a - b).abs().max().item() <= 1e-10 * max(1.0, a.abs().max().item())
