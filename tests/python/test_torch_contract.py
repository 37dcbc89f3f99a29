# bppsa.nn's modules as torch.nn's subclasses (issue 24, item 5): isinstance, the installed
# torch's constructor, non-finite values propagating as in torch, threads following torch, and
# tracing / export recording torch's own operators. Every check compares with torch.nn.
import collections
import copy
import functools
import inspect
import io
import os
import tempfile

import pytest
import torch

import bppsa
from util import BPPSA, TORCH, flat_state, rel_err, twins

KINDS = ["RNN", "GRU", "LSTM"]
# What an older PyTorch lacks (the package's eager mode runs on 1.13: .ci/run tests it there too).
needs_export = pytest.mark.skipif(not hasattr(torch, "export"), reason="this PyTorch has no torch.export")
needs_ops = pytest.mark.skipif(not bppsa._ops.AVAILABLE, reason="this PyTorch has no torch.library.custom_op (< 2.4)")
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


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2, reason="torch 1.x reads the 4th argument as bias")
def test_positional_arguments_follow_the_installed_torch():
    # RNN's 4th positional argument is whatever the installed torch says (nonlinearity in 2.x).
    torch.manual_seed(3)
    ref = torch.nn.RNN(3, 4, 2, "relu", False)
    torch.manual_seed(3)
    ours = bppsa.nn.RNN(3, 4, 2, "relu", False)
    assert ours.nonlinearity == ref.nonlinearity and ours.bias == ref.bias
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


@needs_export
@pytest.mark.parametrize("kind", KINDS)
def test_torch_export_agrees_with_eager(kind):
    ref, ours = twins(kind, 3, 5)
    example = torch.randn(6, 2, 3)
    exported = torch.export.export(ours, (example,))
    x = torch.randn(6, 2, 3)
    assert rel_err(exported.module()(x)[0], ref(x)[0]) < 1e-5


# ONNX export with each of torch's exporters: "legacy" (TorchScript-based, the only one before
# PyTorch 2.5) and "dynamo" (torch.export-based, needs onnxscript; the default from PyTorch 2.9).
# The file a bppsa.nn module exports is the one torch.nn's exports with the same weights: the same
# operators (the standard RNN/GRU/LSTM node where torch's file has it), inputs, outputs and weights;
# onnxruntime runs it like eager torch.nn on a new input of another length and batch size.
ONNX_CASES = {  # 2 layers each
    "RNN-bidirectional": ("RNN", {"bidirectional": True}),
    "GRU-batch_first": ("GRU", {"batch_first": True}),
    "LSTM-bidirectional-batch_first": ("LSTM", {"bidirectional": True, "batch_first": True}),
    # torch exports no projection (PyTorch 2.15: the legacy exporter refuses it, the dynamo one writes
    # a file onnxruntime refuses): bppsa.nn must fail as torch.nn does.
    "LSTM-proj_size": ("LSTM", {"proj_size": 2}),
}
ONNX_EXPORTERS = ["legacy", "dynamo"]
_ONNX_HAS_DYNAMO = "dynamo" in inspect.signature(torch.onnx.export).parameters  # PyTorch ≥ 2.5


def _onnx_dynamic(kind, exporter):
    """The input's axes the file keeps dynamic. torch.export unrolls torch.nn.RNN over the example's
    steps: that file holds for 6 steps only (PyTorch 2.15 still names the axis dynamic in it)."""
    return {"batch"} if exporter == "dynamo" and kind == "RNN" else {"steps", "batch"}


def _export_onnx(module, exporter, dynamic, path):
    """torch.onnx.export of module (a 6-step, 2-sample example) to path, loaded back with onnx."""
    import onnx
    axis = {"steps": 1, "batch": 0} if module.batch_first else {"steps": 0, "batch": 1}
    example = torch.randn(2, 6, 3) if module.batch_first else torch.randn(6, 2, 3)
    if exporter == "legacy":
        outputs = ["output", "h_n", "c_n"][:3 if isinstance(module, torch.nn.LSTM) else 2]
        axes = {"input": {axis[a]: a for a in dynamic}, "output": {axis[a]: a for a in dynamic}}
        axes.update({name: {1: "batch"} for name in outputs[1:] if "batch" in dynamic})
        legacy = {"dynamo": False} if _ONNX_HAS_DYNAMO else {}  # PyTorch 1.13's export has no `dynamo`
        torch.onnx.export(module, (example,), path, input_names=["input"], output_names=outputs, dynamic_axes=axes,
                          **legacy)
    else:
        auto = torch.export.Dim.AUTO
        torch.onnx.export(module, (example,), path, dynamo=True, verbose=False,
                          dynamic_shapes={"input": {axis[a]: auto for a in dynamic}})
    return onnx.load(path)


@functools.lru_cache(maxsize=None)
def _onnx_files(case, exporter):
    """torch.nn's and bppsa.nn's modules of the case (the same weights), and what exporting each gave:
    the loaded file (onnx.ModelProto) or the exception."""
    kind, kwargs = ONNX_CASES[case]
    ref, ours = twins(kind, 3, 5, num_layers=2, **kwargs)
    ref.eval(), ours.eval()  # (as one exports a model; the same without dropout)
    files = []
    with tempfile.TemporaryDirectory() as tmp:
        for module in (ref, ours):
            try:
                files.append(_export_onnx(module, exporter, _onnx_dynamic(kind, exporter),
                                          os.path.join(tmp, f"{len(files)}.onnx")))
            except Exception as e:  # compared with torch.nn's below
                files.append(e)
    return ref, ours, files[0], files[1]


def _onnx_files_or_skip(case, exporter, *needs):
    for name in ("onnx", *needs):
        pytest.importorskip(name, reason=f"{name} is not installed (requirements.txt pins it)")
    if exporter == "dynamo":
        if not _ONNX_HAS_DYNAMO:
            pytest.skip("this PyTorch's torch.onnx.export has no dynamo exporter (< 2.5)")
        pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript")
    return _onnx_files(case, exporter)


def _onnx_signature(model):
    """The graph's inputs and outputs with their shapes (a dynamic axis as '?')."""
    def dims(v):
        return [d.dim_value if d.HasField("dim_value") else "?" for d in v.type.tensor_type.shape.dim]
    return [[(v.name, dims(v)) for v in values] for values in (model.graph.input, model.graph.output)]


def _onnx_initializers(model):
    from onnx import numpy_helper
    return sorted((t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes()) for t in model.graph.initializer)


@pytest.mark.parametrize("exporter", ONNX_EXPORTERS)
@pytest.mark.parametrize("case", ONNX_CASES)
def test_onnx_export_writes_the_file_of_torch_nn(case, exporter):
    ref, ours, want, got = _onnx_files_or_skip(case, exporter)
    kind, kwargs = ONNX_CASES[case]
    if isinstance(want, Exception):  # torch cannot export it: bppsa.nn fails the same way
        assert "proj_size" in kwargs, f"torch.nn's module did not export: {want!r}"
        assert type(got) is type(want), f"torch.nn's export raised {want!r}, bppsa.nn's gave {got!r}"
        return
    if isinstance(got, Exception):
        raise got
    ops = collections.Counter(node.op_type for node in got.graph.node)
    assert ops == collections.Counter(node.op_type for node in want.graph.node)
    # One standard node per layer (the dynamo exporter unrolls RNN into MatMul/Tanh, torch.nn's too).
    if exporter == "legacy" or kind != "RNN":
        assert ops[kind] == 2, dict(ops)
    assert _onnx_signature(got) == _onnx_signature(want)
    assert _onnx_initializers(got) == _onnx_initializers(want)
    if "proj_size" in kwargs:
        return  # (no file of torch's holds the projection's weights)
    # The weights are the module's: each gate's rows of each parameter, as stored or transposed
    # (ONNX orders the gates otherwise and joins the biases; the unrolled RNN multiplies by Wᵀ).
    blob = b"".join(t[2] for t in _onnx_initializers(got))
    for name, p in ours.named_parameters():
        for block in p.detach().split(ours.hidden_size):
            assert block.numpy().tobytes() in blob or block.T.numpy().tobytes() in blob, name


@pytest.mark.parametrize("exporter", ONNX_EXPORTERS)
@pytest.mark.parametrize("case", ONNX_CASES)
def test_onnx_file_runs_like_eager_torch_nn(case, exporter):
    ref, ours, want_file, got_file = _onnx_files_or_skip(case, exporter, "onnxruntime")
    import onnxruntime
    kind, kwargs = ONNX_CASES[case]
    if isinstance(want_file, Exception):  # (test_onnx_export_writes_the_file_of_torch_nn: bppsa.nn's fails alike)
        pytest.skip(f"torch.nn's module does not export here: {type(want_file).__name__}: "
                    f"{str(want_file).split('. ')[0][:100]}")
    if isinstance(got_file, Exception):
        raise got_file
    dynamic = _onnx_dynamic(kind, exporter)
    steps, batch = (9 if "steps" in dynamic else 6), (3 if "batch" in dynamic else 2)
    x = 2 * (torch.randn(batch, steps, 3) if ref.batch_first else torch.randn(steps, batch, 3))

    def run(model):
        try:
            session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            return session.run(None, {session.get_inputs()[0].name: x.numpy()})
        except Exception as e:  # compared with torch.nn's below
            return e

    want, got = run(want_file), run(got_file)
    if "proj_size" in kwargs:  # torch's file drops the projection: bppsa.nn's must do what torch.nn's does
        if isinstance(want, Exception):
            assert type(got) is type(want), f"torch.nn's file: {want!r}; bppsa.nn's: {got!r}"
        else:
            assert not isinstance(got, Exception) and len(got) == len(want), got
            assert all(torch.equal(torch.from_numpy(a), torch.from_numpy(b)) for a, b in zip(got, want))
        return
    out, h = ref(x)
    eager = [out, *flat_state(h)]
    for name, outputs in (("torch.nn", want), ("bppsa.nn", got)):
        if isinstance(outputs, Exception):
            raise AssertionError(f"onnxruntime cannot run {name}'s file: {outputs!r}")
        assert len(outputs) == len(eager), name
        for i, (a, b) in enumerate(zip(outputs, eager)):
            assert rel_err(torch.from_numpy(a), b) < 1e-5, (name, i)


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
    if hasattr(torch, "func"):  # PyTorch ≥ 2.0
        params = {k: v * 2 for k, v in ref.named_parameters()}
        got = torch.func.functional_call(ours, params, (x,))[0]
        assert rel_err(got, torch.func.functional_call(ref, params, (x,))[0]) < 1e-5
    ours.flatten_parameters()  # torch's own: nothing to do on the CPU
    assert [w.shape for w in ours._flat_weights] == [w.shape for w in ref._flat_weights]
    assert type(ours.to_torch()) is TORCH[kind]


@pytest.mark.skipif(bppsa._native._C.cuda_built(), reason="this bppsa was built with its CUDA backend, which "
                    "links the CUDA runtime (the pip package is built without it)")
def test_import_loads_no_cuda_library_and_little_memory():
    # What `import bppsa` adds to a process that has imported torch: its own extension, no CUDA
    # library (the pip package's extension is built without CUDA), and a few MiB.
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


# Custom operators (issue 24, item 1): under torch.compile(fullgraph=True) and torch.export each
# layer is bppsa::layer_forward, whose backward is bppsa::layer_backward. Dynamo refuses to trace
# into any torch.nn.RNNBase (so into these subclasses too) unless torch's own switch allows it.

def _compiled_loss(ours, head, x, h0, backend):
    def loss(x, h0):
        out, h = ours(x, h0)
        h = h[0] if isinstance(h, tuple) else h
        return head(out[-1]).square().sum() + h.sum()
    return torch.compile(loss, fullgraph=True, backend=backend)(x, h0)


@needs_ops
@pytest.mark.parametrize("kind", KINDS)
def test_compile_fullgraph_records_bppsa_operators_with_torch_equal_gradients(kind):
    ref, ours = twins(kind, 3, 6, num_layers=2, bidirectional=True, backward="blelloch")
    head = torch.nn.Linear(12, 2)
    x = torch.randn(7, 4, 3, requires_grad=True)
    h0 = torch.randn(4, 4, 6)
    h0 = (h0, torch.randn(4, 4, 6)) if kind == "LSTM" else h0
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with torch._dynamo.config.patch(allow_rnn=True):
        torch._dynamo.reset()
        _compiled_loss(ours, head, x, h0, recording)
        got = _compiled_loss(ours, head, x, h0, "inductor")
    assert len(graphs) == 1, "torch.compile split the model (a graph break)"
    code = graphs[0].code
    assert code.count("bppsa.layer_forward") == 4 and "aten.gru" not in code and "aten.lstm" not in code
    out, h = ref(x, h0)
    want = head(out[-1]).square().sum() + (h[0] if kind == "LSTM" else h).sum()
    assert rel_err(got, want) < 1e-5
    params = [x, *ours.parameters()]
    mine = torch.autograd.grad(got, params)
    theirs = torch.autograd.grad(want, [x, *ref.parameters()])
    for (name, _), a, b in zip([("input", None), *ref.named_parameters()], mine, theirs):
        assert rel_err(a, b) < 1e-4, name


@needs_ops
def test_compile_without_torch_switch_breaks_the_graph_and_runs_bppsa(monkeypatch):
    # torch.compile without allow_rnn: dynamo breaks the graph at the module; the module's own
    # frame still runs bppsa's engine (counted), so the gradients are bppsa's, equal to torch.nn's.
    from bppsa._recurrent import LayerSpec
    calls = []
    real = LayerSpec.acquire
    monkeypatch.setattr(LayerSpec, "acquire", lambda *a, **k: calls.append(1) or real(*a, **k))
    ref, ours = twins("GRU", 3, 6, backward="blelloch")
    head_ref, head = torch.nn.Linear(6, 2), torch.nn.Linear(6, 2)
    head.load_state_dict(head_ref.state_dict())

    def model(m, h, x):
        return h(m(x)[0][-1]).square().sum()

    torch._dynamo.reset()
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


@needs_ops
@pytest.mark.parametrize("kind", KINDS)
def test_torch_export_records_bppsa_operators_and_trains_like_torch(kind, tmp_path):
    ref, ours = twins(kind, 3, 5, num_layers=2, backward="hybrid")
    exported = torch.export.export(ours, (torch.randn(6, 2, 3),))
    assert "bppsa.layer_forward" in str(exported.graph)
    path = tmp_path / "m.pt2"
    torch.export.save(exported, str(path))
    loaded = torch.export.load(str(path)).module()
    x = torch.randn(6, 2, 3, requires_grad=True)
    got, want = loaded(x)[0], ref(x)[0]
    assert rel_err(got, want) < 1e-5
    w = torch.randn_like(want)
    assert rel_err(torch.autograd.grad((got * w).sum(), x)[0], torch.autograd.grad((want * w).sum(), x)[0]) < 1e-4


@needs_ops
def test_operators_pass_torch_opcheck():
    # torch.library.opcheck: schema, fake (meta) implementation, autograd registration and
    # AOTAutograd (static and dynamic shapes) against eager.
    torch.manual_seed(0)
    x = torch.randn(5, 2, 3, requires_grad=True)
    h0, c0 = torch.randn(2, 4, requires_grad=True), torch.randn(2, 4, requires_grad=True)
    for cell, gates in (("rnn", 1), ("gru", 3), ("lstm", 4)):
        w_ih = torch.randn(gates * 4, 3, requires_grad=True)
        w_hh = torch.randn(gates * 4, 4, requires_grad=True)
        b = torch.randn(gates * 4, requires_grad=True)
        torch.library.opcheck(torch.ops.bppsa.layer_forward.default,
                              (x, h0, c0 if cell == "lstm" else None, w_ih, w_hh, b, b, None, [], cell, "tanh", "blelloch",
                               -1, 0, False, "sequential"))
    # Samples of different lengths (longest first), as a PackedSequence runs them.
    w_ih, w_hh, b = torch.randn(12, 3, requires_grad=True), torch.randn(12, 4, requires_grad=True), torch.randn(12)
    torch.library.opcheck(torch.ops.bppsa.layer_forward.default,
                          (x, h0, None, w_ih, w_hh, b, b, None, [5, 2], "gru", "tanh", "blelloch", -1, 0, False,
                           "sequential"))
    # An LSTM with a projection (proj 2 of hidden 4): h0 and w_hh have the projection's size.
    w_ih, w_hh = torch.randn(16, 3, requires_grad=True), torch.randn(16, 2, requires_grad=True)
    w_hr, b = torch.randn(2, 4, requires_grad=True), torch.randn(16, requires_grad=True)
    torch.library.opcheck(torch.ops.bppsa.layer_forward.default,
                          (x, torch.randn(2, 2, requires_grad=True), c0, w_ih, w_hh, b, b, w_hr, [], "lstm", "tanh",
                           "hybrid", -1, 0, False, "sequential"))
    # The Newton forward (method.md §9), with its backward on the trajectory it found.
    d = dict(dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.bppsa.layer_forward.default,
                          (torch.randn(5, 2, 3, **d), torch.randn(2, 4, **d), None, torch.randn(12, 3, **d),
                           torch.randn(12, 4, **d), torch.randn(12, **d), torch.randn(12, **d), None, [], "gru",
                           "tanh", "blelloch", -1, 0, False, "newton"))
    elements = [torch.randn(4, 4, requires_grad=True), torch.randn(2, 5, 4, requires_grad=True),
                torch.randn(1, 3, 5, requires_grad=True)]
    g = torch.randn(2, 4, requires_grad=True)
    torch.library.opcheck(torch.ops.bppsa.affine_scan.default, (elements, g, [], False, "blelloch", -1, False))


@needs_ops
def test_scan_compiles_fullgraph_with_gradients_of_the_sequential_products():
    torch.manual_seed(1)
    B = 3
    elements = [torch.randn(4, 4, requires_grad=True), torch.randn(B, 5, 4, requires_grad=True),
                torch.randn(2, 5, requires_grad=True)]
    g = torch.randn(B, 4, requires_grad=True)
    weights = [torch.randn(B, d) for d in (4, 4, 5, 2)]

    def loss(elements, g):
        return sum((y * w).sum() for y, w in zip(bppsa.scan(elements, g), weights))

    def oracle(elements, g):  # the products one after another, in double precision
        ys = [g.double()]
        for a in elements:
            a = a.double()
            ys.append(torch.einsum("brc,bc->br", a.expand(B, -1, -1), ys[-1]) if a.dim() == 3 else ys[-1] @ a.T)
        return sum((y * w.double()).sum() for y, w in zip(ys, weights))

    torch._dynamo.reset()
    got = torch.compile(loss, fullgraph=True)(elements, g)
    want = oracle(elements, g)
    assert rel_err(got, want) < 1e-5
    for a, b in zip(torch.autograd.grad(got, [g, *elements]), torch.autograd.grad(want, [g, *elements])):
        assert rel_err(a, b) < 1e-5


@needs_ops
def test_operators_refuse_double_backward_clearly():
    _, ours = twins("GRU", 3, 4)
    x = torch.randn(5, 2, 3, requires_grad=True)
    out, _ = torch.export.export(ours, (x.detach(),)).module()(x)
    (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(gx.sum(), x)


@needs_ops
def test_fake_tensors_get_the_shapes_of_torch():
    from torch._subclasses.fake_tensor import FakeTensorMode
    _, ours = twins("LSTM", 3, 5, num_layers=2, bidirectional=True, batch_first=True)
    with FakeTensorMode(allow_non_fake_inputs=True):
        out, (h, c) = ours(torch.randn(2, 7, 3))
    assert out.shape == (2, 7, 10) and h.shape == c.shape == (4, 2, 5)


def test_gradgradcheck_is_refused_with_the_reason():
    # Double backward is not supported (bppsa's backward pass is not itself differentiable):
    # torch.autograd.gradgradcheck gets a clear RuntimeError, never a silently first-order answer.
    _, ours = twins("GRU", 2, 3, dtype=torch.float64)
    x = torch.randn(4, 2, 2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.gradgradcheck(lambda x: ours(x)[0], (x,))
    a = torch.randn(3, 2, 2, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.gradgradcheck(lambda a, g: bppsa.scan(a, g), (a, g))


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, DataParallel runs the module on it (tested in "
                    "test_cuda.py)")
@pytest.mark.parametrize("kind", KINDS)
def test_data_parallel_on_the_cpu_runs_the_module_like_torch(kind):
    # nn.DataParallel without GPUs calls the module itself: outputs and gradients are torch.nn's.
    ref, ours = twins(kind, 3, 4, num_layers=2, batch_first=True)
    x = torch.randn(2, 6, 3)
    got, want = torch.nn.DataParallel(ours)(x)[0], torch.nn.DataParallel(ref)(x)[0]
    assert rel_err(got, want) < 1e-5
    got.square().sum().backward()
    want.square().sum().backward()
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        assert rel_err(q.grad, p.grad) < 1e-4, name


@needs_ops
@pytest.mark.parametrize("grad", [False, True])
def test_make_fx_records_the_operators_not_a_stale_buffer(grad):
    # make_fx with real tensors traces through a dispatch mode: the layer and the scan must be
    # recorded as operators, so that the graph computes new inputs (not the example's memory).
    from torch.fx.experimental.proxy_tensor import make_fx
    ref, ours = twins("GRU", 3, 4)
    a = torch.randn(3, 2, 2)

    def f(x, g):
        return ours(x)[0], bppsa.scan(a, g)[-1]

    with torch.set_grad_enabled(grad):
        gm = make_fx(f, tracing_mode="real")(torch.randn(5, 2, 3), torch.randn(2, 2))
    assert "bppsa.layer_forward" in gm.code and "bppsa.affine_scan" in gm.code
    x, g = torch.randn(5, 2, 3) * 3, torch.randn(2, 2)
    out, s = gm(x, g)
    assert rel_err(out, ref(x)[0]) < 1e-5
    assert rel_err(s, bppsa.scan(a, g)[-1]) < 1e-6
