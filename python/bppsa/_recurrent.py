# One recurrent layer in one direction as a torch.autograd.Function: the forward runs bppsa's
# cell, the backward pass is bppsa's (a BPPSA scan over the layer's transposed Jacobians, or
# BP) and gives the gradients of the input, the initial state and every parameter.
import weakref

import torch
from torch.autograd.function import once_differentiable

from . import _native

BACKWARD_METHODS = ("auto", "blelloch", "hybrid", "bp", "linear")


class LayerSpec:
    """What a layer's engines are built from, and a pool of idle engines: an engine keeps the
    records of its forward (and its scan plan and buffers) until the autograd graph that uses
    it is freed, then serves the next forward of the same shape without re-planning."""

    def __init__(self, cell, input_size, hidden_size, nonlinearity):
        self.cell = cell
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.nonlinearity = nonlinearity
        self._idle = {}
        self._inference = {}

    def acquire(self, dtype):
        idle = self._idle.get(dtype)
        if idle:
            return idle.pop()
        return _native.layer_engine(dtype, self.cell, self.input_size, self.hidden_size, self.nonlinearity)

    def release(self, dtype, engine):
        idle = self._idle.setdefault(dtype, [])
        if len(idle) < 4:
            idle.append(engine)

    def inference(self, dtype):
        """The engine for forwards that record nothing for a backward pass (no_grad, eval)."""
        engine = self._inference.get(dtype)
        if engine is None:
            engine = self._inference[dtype] = _native.layer_engine(
                dtype, self.cell, self.input_size, self.hidden_size, self.nonlinearity)
        return engine

    def __getstate__(self):  # engines are not picklable: a copied module starts with none
        state = dict(self.__dict__)
        state["_idle"] = {}
        state["_inference"] = {}
        return state

    def __deepcopy__(self, memo):
        return LayerSpec(self.cell, self.input_size, self.hidden_size, self.nonlinearity)


def _empty(shape, like):
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _run_forward(engine, spec, x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    T, B = x.shape[0], x.shape[1]
    H = spec.hidden_size
    out = _empty((T, B, H), x)
    h_n = _empty((B, H), x)
    c_n = _empty((B, H), x) if spec.cell == "lstm" else None
    r = _native.ref
    engine.forward(r(x), r(h0), r(c0), r(w_ih), r(w_hh), r(b_ih), r(b_hh), r(out), r(h_n), r(c_n))
    return out, h_n, c_n


class LayerFunction(torch.autograd.Function):
    """apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, spec, method, threads, chunks) →
    (out, h_n) or (out, h_n, c_n) for LSTM. x is (T, B, I) contiguous; h0, c0 (B, H) or None;
    b_ih, b_hh None when the layer has no bias."""

    @staticmethod
    def forward(ctx, x, h0, c0, w_ih, w_hh, b_ih, b_hh, spec, method, threads, chunks):
        engine = spec.acquire(x.dtype)
        try:
            out, h_n, c_n = _run_forward(engine, spec, x, h0, c0, w_ih, w_hh, b_ih, b_hh)
        except BaseException:
            spec.release(x.dtype, engine)
            raise
        ctx.engine = engine
        ctx.options = (method, threads, chunks)
        # Only shapes and dtypes: the gradients' buffers are allocated in backward.
        ctx.shapes = tuple(None if t is None else (t.shape, t.dtype) for t in (x, h0, c0, w_ih, w_hh, b_ih, b_hh))
        ctx.set_materialize_grads(False)
        # The engine goes back to the pool when the graph holding this node is freed (after
        # backward, or when the outputs are dropped), never while a retained graph needs it.
        weakref.finalize(ctx, spec.release, x.dtype, engine)
        return (out, h_n, c_n) if c_n is not None else (out, h_n)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_hn, grad_cn=None):
        method, threads, chunks = ctx.options
        need = ctx.needs_input_grad

        def buffer(i):
            if not need[i] or ctx.shapes[i] is None:
                return None
            shape, dtype = ctx.shapes[i]
            return torch.empty(shape, dtype=dtype)

        grads = [buffer(i) for i in range(7)]
        r = _native.ref

        def contiguous(g):
            return None if g is None else g.contiguous()

        grad_out, grad_hn, grad_cn = contiguous(grad_out), contiguous(grad_hn), contiguous(grad_cn)
        ctx.engine.backward(r(grad_out), r(grad_hn), r(grad_cn), method, _native.resolve_threads(threads), chunks,
                            *[r(g) for g in grads])
        return (*grads, None, None, None, None)


def run_layer(spec, x, h0, c0, w_ih, w_hh, b_ih, b_hh, method, threads, chunks):
    """One layer-direction: through autograd when a gradient is needed, else straight through
    the module's inference engine (nothing recorded for a backward pass)."""
    tensors = (x, h0, c0, w_ih, w_hh, b_ih, b_hh)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        res = LayerFunction.apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, spec, method, threads, chunks)
        return res if len(res) == 3 else (res[0], res[1], None)
    with torch.no_grad():
        return _run_forward(spec.inference(x.dtype), spec, x, h0, c0, w_ih, w_hh, b_ih, b_hh)
