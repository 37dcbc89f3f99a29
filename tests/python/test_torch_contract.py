# bppsa.nn's modules as torch.nn's subclasses (issue 24, item 5): isinstance, the installed
# torch's constructor, non-finite values propagating as in torch, threads following torch, and
# tracing / export recording torch's own operators. Every check compares with torch.nn.
import copy
import io

import pytest
import torch

import bppsa
from util import BPPSA, TORCH, rel_err, twins

KINDS = ["RNN", "GRU", "LSTM"]
METHODS = ["auto", "blelloch", "hybrid", "bp"]


@pytest.mark.parametrize("kind", KINDS)
def test_modules_are_torch_subclasses(kind):
    m = BPPSA[kind](3, 4)
    assert isinstance(m, TORCH[kind]) and isinstance(m, torch.nn.RNNBase)
    # Code keyed on the type (init loops) reaches the module's parameters.
    touched = []
    for mod in torch.nn.Sequential(m).modules():
        if isinstance(mod, torch.nn.RNNBase):
            for name, p in mod.named_parameters():
                touched.append(name)
    assert touched == [n for n, _ in TORCH[kind](3, 4).named_parameters()]


def test_positional_arguments_follow_the_installed_torch():
    # RNN's 4th positional argument is whatever the installed torch says (nonlinearity in 2.x).
    torch.manual_seed(3)
    ref = torch.nn.RNN(3, 4, 2, "relu", False)
    torch.manual_seed(3)
    ours = bppsa.nn.RNN(3, 4, 2, "relu", False)
    assert ours.nonlinearity == ref.nonlinearity == "relu" and ours.bias is ref.bias is False
    x = torch.randn(5, 2, 3)
    assert rel_err(ours(x)[0], ref(x)[0]) < 1e-6
    assert repr(ours).startswith(repr(ref)[:-1])


def test_threads_follow_torch_unless_given():
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert bppsa.default_threads() == 1
        torch.set_num_threads(2)
        assert bppsa.default_threads() == 2
    finally:
        torch.set_num_threads(saved)
    m = bppsa.nn.GRU(3, 4)
    assert m.bppsa_threads is None  # resolved at each call
    m.set_backward("blelloch", 3)
    assert m.bppsa_threads == 3


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", KINDS)
def test_non_finite_values_propagate_as_in_torch(kind, method):
    ref, ours = twins(kind, 3, 4, backward=method)
    x = torch.randn(7, 2, 3)
    go = torch.randn(7, 2, 4)
    go[4, 1, 2] = float("nan")  # one sample's output gradient at one step
    got = torch.autograd.grad(ours(x)[0], list(ours.parameters()), go)
    want = torch.autograd.grad(ref(x)[0], list(ref.parameters()), go)
    for g, w, (name, _) in zip(got, want, ref.named_parameters()):
        assert torch.isnan(w).any(), name  # the oracle: torch's gradient is poisoned
        assert torch.equal(torch.isnan(g), torch.isnan(w)), name
    ours.set_check_finite(True)
    with pytest.raises(FloatingPointError, match="NaN"):
        torch.autograd.grad(ours(x)[0], list(ours.parameters()), go)


def test_scan_propagates_non_finite_values_unless_checked():
    A = torch.randn(5, 4, 4, dtype=torch.float64)
    A[2, 1, 3] = float("inf")
    g = torch.randn(3, 4, dtype=torch.float64)
    s = g
    want = [s]
    for a in A:  # the sequential products, torch's own
        s = s @ a.T
        want.append(s)
    for algorithm in ("linear", "blelloch", "hybrid"):
        got = bppsa.scan(A, g, algorithm=algorithm)
        for k, w in enumerate(want):
            assert torch.equal(torch.isfinite(got[k]), torch.isfinite(w)), (algorithm, k)
    with pytest.raises(FloatingPointError, match="NaN or Inf"):
        bppsa.scan(A, g, check_finite=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("grad", [False, True])
def test_jit_trace_agrees_with_eager_on_new_inputs(kind, grad):
    ref, ours = twins(kind, 3, 5, num_layers=2, bidirectional=True)
    example = torch.randn(6, 2, 3)
    with torch.set_grad_enabled(grad):
        traced = torch.jit.trace(ours, (example,), check_trace=False)
    buf = io.BytesIO()
    torch.jit.save(traced, buf)
    buf.seek(0)
    loaded = torch.jit.load(buf)
    x = torch.randn(6, 2, 3) * 3
    want = ref(x)[0]
    for f in (traced, loaded):
        with torch.set_grad_enabled(grad):
            assert rel_err(f(x)[0], want) < 1e-5
    # A trace records torch's own recurrent operator, not a constant.
    graph = str(traced.graph)
    assert {"RNN": "aten::rnn_tanh", "GRU": "aten::gru", "LSTM": "aten::lstm"}[kind] in graph


@pytest.mark.parametrize("kind", KINDS)
def test_torch_export_agrees_with_eager(kind):
    ref, ours = twins(kind, 3, 5)
    example = torch.randn(6, 2, 3)
    exported = torch.export.export(ours, (example,))
    x = torch.randn(6, 2, 3)
    assert rel_err(exported.module()(x)[0], ref(x)[0]) < 1e-5


@pytest.mark.parametrize("kind", KINDS)
def test_onnx_export_emits_the_standard_node(kind):
    _, ours = twins(kind, 3, 5)
    buf = io.BytesIO()
    try:
        torch.onnx.export(ours, (torch.randn(6, 2, 3),), buf, dynamo=False)
    except (ImportError, torch.onnx.OnnxExporterError) as e:  # the exporter needs the onnx package
        if "not installed" not in str(e) and not isinstance(e, ImportError):
            raise
        pytest.skip(f"torch.onnx.export is not available here: {e}")
    data = buf.getvalue()
    assert {"RNN": b"RNN", "GRU": b"GRU", "LSTM": b"LSTM"}[kind] in data
    # The weights are in the file as the node's inputs (RNN: torch's layout is ONNX's, byte for byte).
    if kind == "RNN":
        assert ours.weight_hh_l0.detach().numpy().tobytes() in data


@pytest.mark.parametrize("kind", KINDS)
def test_contract_copies_and_functional_call(kind):
    ref, ours = twins(kind, 3, 4, num_layers=2)
    x = torch.randn(5, 2, 3)
    want = ref(x)[0]
    for m in (copy.deepcopy(ours), ours.to_torch()):
        assert rel_err(m(x)[0], want) < 1e-6
    buf = io.BytesIO()
    torch.save(ours, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert type(loaded) is type(ours) and rel_err(loaded(x)[0], want) < 1e-6
    params = {k: v * 2 for k, v in ref.named_parameters()}
    got = torch.func.functional_call(ours, params, (x,))[0]
    assert rel_err(got, torch.func.functional_call(ref, params, (x,))[0]) < 1e-5
    ours.flatten_parameters()  # torch's own: nothing to do on the CPU
    assert [w.shape for w in ours._flat_weights] == [w.shape for w in ref._flat_weights]
    assert type(ours.to_torch()) is TORCH[kind]


def test_import_loads_no_cuda_library_and_little_memory():
    # What `import bppsa` adds to a process that has imported torch: its own extension, no CUDA
    # library (the package's extension is built for the CPU), and a few MiB.
    import subprocess
    import sys
    code = r"""
import re, torch
def libs():
    return {l.split()[-1] for l in open('/proc/self/maps') if '.so' in l}
def rss():
    return int(re.search(r'VmRSS:\s+(\d+)', open('/proc/self/status').read()).group(1)) // 1024
before, mb = libs(), rss()
import bppsa, bppsa.nn
print(sorted(libs() - before)); print(rss() - mb)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    new_libs, grown = eval(out[0]), int(out[1])
    assert not [lib for lib in new_libs if any(k in lib.lower() for k in ("cuda", "cublas", "cusparse", "cudnn",
                                                                           "nccl", "nvrtc"))], new_libs
    assert grown < 64, f"import bppsa grew the process by {grown} MiB"


def test_torch_compile_runs_bppsa_layers_eagerly_with_torch_equal_gradients(monkeypatch):
    # torch.compile (graph breaks allowed) compiles the model around the layer; the layer itself
    # runs bppsa's engine (counted), so its gradients are bppsa's, equal to torch.nn's.
    import bppsa.nn as bnn
    calls = []
    real = bnn.run_layer
    monkeypatch.setattr(bnn, "run_layer", lambda *a, **k: calls.append(1) or real(*a, **k))
    ref, ours = twins("GRU", 3, 6, backward="blelloch")
    head_ref, head = torch.nn.Linear(6, 2), torch.nn.Linear(6, 2)
    head.load_state_dict(head_ref.state_dict())

    def model(m, h, x):
        return h(m(x)[0][-1]).square().sum()

    compiled = torch.compile(lambda x: model(ours, head, x))
    x = torch.randn(7, 4, 3)
    loss = compiled(x)
    loss.backward()
    want = model(ref, head_ref, x)
    want.backward()
    assert calls, "bppsa's layer did not run under torch.compile"
    assert rel_err(loss, want) < 1e-5
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        assert rel_err(q.grad, p.grad) < 1e-4, name
