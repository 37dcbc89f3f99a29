# bppsa's recurrent layer as PyTorch custom operators (torch.library, PyTorch >= 2.4): schemas, fake
# implementations (shapes for torch.compile, torch.export and fake tensors) and autograd formulas
# whose backward pass is itself an operator; and what every operator of bppsa shares (capturing(),
# the threads' encoding). While torch captures a graph, bppsa.nn calls these instead of its eager
# autograd.Function, so that torch.compile(fullgraph=True) and torch.export record bppsa's forward
# and backward passes. The scan's operator, bppsa::affine_scan, is _scan.py's (it imports this
# module; this one imports nothing of the scan).
#
# The operators are functional: one cannot hand the engine's forward record to the next, so
# bppsa::layer_backward runs the layer's forward again on an engine of its own before its
# backward pass. Eager mode keeps the record and does not recompute.
import torch

from . import _native
from ._recurrent import LayerSpec, _device, _no_double_backward, _run_backward, _run_forward, engine_inputs

AVAILABLE = all(hasattr(torch.library, f) for f in ("custom_op", "register_fake", "register_autograd"))


def capturing(t):
    """True while torch captures a graph (torch.compile, torch.export, make_fx or any other
    dispatch mode) or t is a fake tensor: then bppsa runs through these operators, which a tracer
    records, rather than writing through raw pointers, which it would not see."""
    return AVAILABLE and (_native.is_compiling() or _native.is_exporting() or _native.is_fake(t)
                          or _native.in_dispatch_mode())


def encode_threads(threads):
    """An operator's `threads`: -1 stands for None (follow torch.get_num_threads() when it runs)."""
    return -1 if threads is None else threads


def decode_threads(threads):
    """The `threads` an operator was given, back to bppsa's form (None: follow torch)."""
    return None if threads < 0 else threads


def _sizes(w_hh, w_hr):
    """(hidden_size, rows of h) of a layer from its weights: w_hh is (G·H, P), w_hr (P, H) or None."""
    P = w_hh.shape[1]
    return (P if w_hr is None else w_hr.shape[1]), P


def _spec(cell, x, w_hh, w_hr, nonlinearity):
    """A layer's sizes, with an empty engine pool of its own: an operator call has no module to
    tie a pool to, so it runs on a new engine, freed when the call returns (no pool outlives the
    module, or even the call; a module-level pool would hold its weights after `del model`)."""
    hidden, P = _sizes(w_hh, w_hr)
    return LayerSpec(cell, x.shape[2], hidden, nonlinearity, 0 if w_hr is None else P)


def _absent(like):
    """The empty tensor that stands for an absent result (an operator returns tensors only)."""
    return like.new_empty((0,))


def _layer_forward_impl(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, cell, nonlinearity, method, threads,
                        chunks, check_finite, forward="sequential"):
    spec = _spec(cell, x, w_hh, w_hr, nonlinearity)
    with spec.borrowed(x.dtype, _device(x)) as engine:
        out, h_n, c_n = _run_forward(engine, spec, engine_inputs(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr), lengths,
                                     forward=forward, threads=decode_threads(threads),
                                     record=False)  # layer_backward recomputes
    return out, h_n, _absent(x) if c_n is None else c_n


def _layer_forward_fake(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, cell, nonlinearity, method, threads,
                        chunks, check_finite, forward="sequential"):
    steps, batch = x.shape[0], x.shape[1]
    hidden, P = _sizes(w_hh, w_hr)
    c_n = x.new_empty((batch, hidden)) if cell == "lstm" else _absent(x)
    return x.new_empty((steps, batch, P)), x.new_empty((batch, P)), c_n


def _layer_backward_impl(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, grad_out, grad_hn, grad_cn, cell,
                         nonlinearity, method, threads, chunks, check_finite, needs, forward="sequential"):
    args = engine_inputs(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr)
    spec = _spec(cell, x, w_hh, w_hr, nonlinearity)
    with spec.borrowed(x.dtype, _device(x)) as engine:
        if x.shape[1] > 0:
            # the record it reads: the same forward method, so the gradients are of the same trajectory
            _run_forward(engine, spec, args, lengths, forward=forward, threads=decode_threads(threads))
        grads = _run_backward(engine, args, needs, grad_out, grad_hn, grad_cn if cell == "lstm" else None, method,
                              decode_threads(threads), chunks, check_finite)
    return [_absent(x) if g is None else g for g in grads]


def _layer_backward_fake(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, grad_out, grad_hn, grad_cn, cell,
                         nonlinearity, method, threads, chunks, check_finite, needs, forward="sequential"):
    inputs = (x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr)
    return [t.new_empty(t.shape) if need and t is not None else _absent(x) for need, t in zip(needs, inputs)]


def _layer_setup(ctx, inputs, output):
    x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, lengths, *options = inputs
    ctx.save_for_backward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr)
    ctx.lengths = lengths
    ctx.given = len(options)  # the backward returns one None per option given
    ctx.options = list(options) + ["sequential"] * (7 - len(options))  # cell, nonlinearity, method, threads,
    # chunks, check_finite, forward (a call that left the default)


def _layer_backward_formula(ctx, grad_out, grad_hn, grad_cn):
    saved = ctx.saved_tensors
    x = saved[0]
    cell = ctx.options[0]
    zeros = lambda g, shape: torch.zeros(shape, dtype=x.dtype, device=x.device) if g is None else g  # noqa: E731
    batch = x.shape[1]
    hidden, P = _sizes(saved[4], saved[7])
    grad_out = zeros(grad_out, (x.shape[0], batch, P))
    grad_hn = zeros(grad_hn, (batch, P))
    grad_cn = zeros(grad_cn, (batch, hidden) if cell == "lstm" else (0,))
    needs = list(ctx.needs_input_grad[:8])
    grads = torch.ops.bppsa.layer_backward(*saved, ctx.lengths, grad_out, grad_hn, grad_cn, *ctx.options[:-1], needs,
                                           ctx.options[-1])
    return (*[g if need else None for g, need in zip(grads, needs)], None, *([None] * ctx.given))


def _refuse_double_backward(what):
    def formula(ctx, *grads):
        _no_double_backward(what)
    return formula


def layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, cell, nonlinearity, method, threads, chunks, check_finite,
          lengths=None, forward="sequential"):
    """One layer-direction through the operators: (out, h_n, c_n or None)."""
    out, h_n, c_n = torch.ops.bppsa.layer_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, list(lengths or ()),
                                                  cell, nonlinearity, method, encode_threads(threads), chunks,
                                                  check_finite, forward)
    return out, h_n, (c_n if cell == "lstm" else None)


if AVAILABLE:
    _OPTIONS = "str cell, str nonlinearity, str method, int threads, int chunks, bool check_finite"
    # Last and defaulted, so that a program exported before it existed still loads (sequential).
    _FORWARD = 'str forward="sequential"'
    _LAYER = ("Tensor x, Tensor? h0, Tensor? c0, Tensor w_ih, Tensor w_hh, Tensor? b_ih, Tensor? b_hh, Tensor? w_hr, "
              "int[] lengths")
    _layer_forward = torch.library.custom_op(
        "bppsa::layer_forward", _layer_forward_impl, mutates_args=(),
        schema=f"({_LAYER}, {_OPTIONS}, {_FORWARD}) -> (Tensor, Tensor, Tensor)")
    _layer_forward.register_fake(_layer_forward_fake)
    _layer_backward = torch.library.custom_op(
        "bppsa::layer_backward", _layer_backward_impl, mutates_args=(),
        schema=f"({_LAYER}, Tensor grad_out, Tensor grad_hn, Tensor grad_cn, {_OPTIONS}, bool[] needs, {_FORWARD}) "
               "-> Tensor[]")
    _layer_backward.register_fake(_layer_backward_fake)
    _layer_forward.register_autograd(_layer_backward_formula, setup_context=_layer_setup)
    _layer_backward.register_autograd(_refuse_double_backward("bppsa.nn (a recurrent layer)"))
