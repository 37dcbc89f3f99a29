# One recurrent layer in one direction as a torch.autograd.Function: the forward runs bppsa's
# cell, the backward pass is bppsa's (a BPPSA scan over the layer's transposed Jacobians, or
# BP) and gives the gradients of the input, the initial state and every parameter.
import contextlib
import threading
import weakref

import torch

from . import _native

BACKWARD_METHODS = ("auto", "blelloch", "hybrid", "bp", "linear")
FORWARD_METHODS = ("auto", "sequential", "newton")


class LayerSpec:
    """What a layer's engines are built from, and a pool of idle engines. An engine holds the
    record of ONE forward (and its scan plan and buffers): every forward takes one of its own
    from the pool (or a new one), so calls from several threads never share one. A forward that
    a backward may need keeps its engine until the autograd graph that uses it is freed (its
    record goes when the backward ends); an inference forward gives it back at once. An engine
    comes back without its record (release), so the pool holds only weight-sized state."""

    def __init__(self, cell, input_size, hidden_size, nonlinearity, proj_size=0):
        self.cell = cell
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.nonlinearity = nonlinearity
        self.proj_size = proj_size  # LSTM: rows of h (0 = hidden_size, no projection)
        self.last_forward = None  # the last newton or auto forward's report (_run_forward)
        self.last_backward = None  # the method of the last backward (_run_backward), or "torch.nn" (nn.py)
        self._idle = {}
        self._captured = []  # engines that ran inside a CUDA graph capture: the graph's, never reused
        # Reentrant: an engine may come back (weakref.finalize, run by the garbage collector)
        # while this thread is inside acquire() or release().
        self._lock = threading.RLock()

    def acquire(self, dtype, device):
        """An engine for tensors of `dtype` on `device` (a CUDA engine holds its buffers on its device)."""
        key = (dtype, device)
        with self._lock:
            idle = self._idle.get(key)
            engine = idle.pop() if idle else None
        if engine is None:
            engine = _native.layer_engine(dtype, self.cell, self.input_size, self.hidden_size, self.nonlinearity,
                                          self.proj_size, device)
        return engine

    def release(self, key, engine):
        """key: (dtype, device), as given to acquire. The engine's forward record goes (kept only
        when it is small: a few steps × samples), so nothing sized by a call's steps and batch
        outlives the call's backward, or the call itself under no_grad; the pool keeps its weights'
        copies and small buffers, and lives as long as the module. An engine that ran inside a CUDA
        graph capture is the graph's: its buffers are what the replays read and write, so it is
        kept apart, alive and never lent again, for as long as the module lives."""
        if getattr(engine, "bppsa_captured", False):
            with self._lock:
                if not any(e is engine for e in self._captured):
                    self._captured.append(engine)
            return
        engine.release_record()
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < 4:
                idle.append(engine)

    @contextlib.contextmanager
    def borrowed(self, dtype, device):
        """An engine for one call, back in the pool when the call ends (whatever way it ends)."""
        engine = self.acquire(dtype, device)
        try:
            yield engine
        finally:
            self.release((dtype, device), engine)

    def __getstate__(self):  # engines and locks are not picklable: a copied module starts with none
        state = dict(self.__dict__)
        state["_idle"] = {}
        state["_captured"] = []
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("_captured", [])  # pickled by a bppsa without it
        self._lock = threading.RLock()

    def __deepcopy__(self, memo):
        return LayerSpec(self.cell, self.input_size, self.hidden_size, self.nonlinearity, self.proj_size)


def _empty(shape, like):
    return like.new_empty(shape)


def _device(x):
    """The device a call runs on: x's, with the CUDA index made explicit (the engine pool's key)."""
    d = x.device
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _contiguous(t):
    return None if t is None else t.contiguous()


def engine_inputs(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr):
    """What the engine reads: each tensor itself, or a contiguous copy of one that is not (a weight
    set to a transposed view, say): the engine reads C-order buffers. The CPU engine reads the
    weights and x in place, in the forward and again in the backward: the caller keeps this list
    alive (and its tensors unchanged) until the backward has run."""
    return [_contiguous(t) for t in (x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr)]


def _weight_refs(engine, weights):
    """The TensorRefs of weights (w_ih, w_hh, b_ih, b_hh, w_hr; contiguous), kept on the engine
    while the weights keep their addresses and shapes: only the references are kept, never the
    values (the engine reads the tensors' memory at every call, so a write through an alias with
    a version counter of its own, w.data.add_(…) as word_language_model's update, is seen). The
    weights' storages are held with them, so that no other buffer can take one of their
    addresses meanwhile."""
    key = tuple(None if t is None else (t.data_ptr(), t.shape) for t in weights)
    held = getattr(engine, "bppsa_weight_refs", None)
    if held is None or held[0] != key:
        r = _native.ref
        held = engine.bppsa_weight_refs = (key, [_storage_of(t) for t in weights if t is not None],
                                           [r(t) for t in weights])
    return held[2]


def _run_forward(engine, spec, args, lengths=None, forward="sequential", threads=None, record=True):
    """Runs the layer on args (engine_inputs: x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, contiguous).
    w_hr: the LSTM's projection or None; lengths: per sample, longest first, or None (every sample
    runs every step). forward: "sequential", "newton" or "auto" (newton's and auto's report kept on
    the spec: spec.last_forward); threads: as the module's (None follows torch.get_num_threads()); record:
    False when no backward follows (the engine keeps nothing for one)."""
    x = args[0]
    T, B = x.shape[0], x.shape[1]
    H = spec.hidden_size
    P = spec.proj_size or H  # rows of h
    out = _empty((T, B, P), x)
    h_n = _empty((B, P), x)
    c_n = _empty((B, H), x) if spec.cell == "lstm" else None
    if B == 0:  # nothing to compute (torch returns the empty tensors too)
        return out, h_n, c_n
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        engine.bppsa_captured = True  # the graph's from now on (LayerSpec.release)
    engine.set_forward(forward, _native.resolve_threads(threads))
    engine.forward(x, args[1], args[2], *_weight_refs(engine, args[3:]), list(lengths or ()), out, h_n, c_n,
                   _native.stream_of(x), record)
    if forward != "sequential":
        ran, max_iterations, iterations, residual, fell_back, fallback_step = engine.forward_report()
        spec.last_forward = {"method": ran, "asked": forward, "max_iterations": max_iterations,
                             "iterations": iterations, "residual": residual, "fell_back": fell_back,
                             "fallback_step": fallback_step}
    return out, h_n, c_n


def _storage_of(t):
    """t's storage, held to keep its address (untyped_storage from PyTorch 2.0; storage on 1.13)."""
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def _run_backward(engine, saved, needs, grad_out, grad_hn, grad_cn, method, threads, chunks, check_finite,
                  spec=None):
    """The engine's backward pass after its forward on saved (the engine_inputs it read: x, h0,
    c0, w_ih, w_hh, b_ih, b_hh, w_hr): the gradients of those that `needs` asks for, None for the
    others. A CUDA engine reads every step's output gradient: zeros stand in for an absent one.
    With spec: spec.last_backward is the method that ran ('auto' resolved)."""
    x = saved[0]
    grads = [torch.empty_like(t) if need and t is not None else None
             for t, need in zip(saved, needs)]
    if x.shape[1] == 0:  # empty batch: nothing flows back (zero parameter gradients, as torch)
        return [None if g is None else g.zero_() for g in grads]
    if grad_out is None and x.device.type == "cuda":
        P = saved[4].shape[1]  # w_hh is (G·H, P)
        grad_out = torch.zeros((x.shape[0], x.shape[1], P), dtype=x.dtype, device=x.device)
    # Named, so that the contiguous copies outlive the call that reads them.
    grad_out, grad_hn, grad_cn = _contiguous(grad_out), _contiguous(grad_hn), _contiguous(grad_cn)
    ran = engine.backward(*_weight_refs(engine, saved[3:]), grad_out, grad_hn, grad_cn, method,
                          _native.resolve_threads(threads), chunks, *grads, check_finite, _native.stream_of(x))
    if spec is not None:
        spec.last_backward = ran
    return grads


def _no_double_backward(what):
    raise RuntimeError(f"{what}: double backward (torch.autograd.grad or backward with create_graph=True through "
                       "this layer) is not supported: bppsa's backward pass is not itself differentiable. Use "
                       "torch.nn's module for gradient penalties and other higher-order gradients")


class LayerFunction(torch.autograd.Function):
    """apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, spec, options, lengths) →
    (out, h_n) or (out, h_n, c_n) for LSTM. x is (T, B, I); h0 (B, P), c0 (B, H) or None (P: the
    LSTM's proj_size, else H); b_ih, b_hh None when the layer has no bias; w_hr (P, H) or None
    without a projection; options = (method, threads, chunks, check_finite, forward); lengths: per
    sample, longest first, or None. Any strides (contiguous copies are made for the engine).

    The tensors are saved with ctx.save_for_backward, so torch enforces its contracts: a second
    backward without retain_graph=True, or one after an in-place change of a weight or of the
    input, raises torch's own error. A backward with create_graph=True raises (no double
    backward)."""

    @staticmethod
    def forward(ctx, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, spec, options, lengths):
        key = (x.dtype, _device(x))
        engine = spec.acquire(*key)
        args = engine_inputs(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr)
        try:
            out, h_n, c_n = _run_forward(engine, spec, args, lengths, options[4], options[1])
        except BaseException:
            spec.release(key, engine)
            raise
        ctx.engine = engine
        # What the engine read, held until the graph goes: the backward reads the same memory
        # (the tensors themselves when contiguous, which save_for_backward below guards).
        ctx.engine_args = args
        ctx.spec = spec
        ctx.options = options
        ctx.lengths = lengths
        ctx.lock = threading.Lock()  # one backward at a time through this engine (retained graphs)
        # Saved for torch's checks (version counters, freed graphs); the engine holds the
        # record the backward pass reads.
        ctx.save_for_backward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr)
        ctx.set_materialize_grads(False)
        # The engine goes back to the pool when the graph holding this node is freed (after
        # backward, or when the outputs are dropped), never while a retained graph needs it.
        weakref.finalize(ctx, spec.release, key, engine)
        return (out, h_n, c_n) if c_n is not None else (out, h_n)

    @staticmethod
    def backward(ctx, grad_out, grad_hn, grad_cn=None):
        if torch.is_grad_enabled():  # create_graph=True: the result would be silently first-order only
            _no_double_backward(f"bppsa.nn ({ctx.spec.cell.upper()} layer)")
        saved = ctx.saved_tensors  # raises torch's errors: graph freed, or a tensor changed in place
        method, threads, chunks, check_finite, forward = ctx.options
        with ctx.lock:
            engine = ctx.engine
            args = ctx.engine_args
            if engine.steps == 0 and args[0].shape[1] > 0:
                # An earlier backward of a retained graph freed the record: the forward again.
                _run_forward(engine, ctx.spec, args, ctx.lengths, forward, threads)
            grads = _run_backward(engine, args, ctx.needs_input_grad[:8], grad_out, grad_hn, grad_cn, method,
                                  threads, chunks, check_finite, ctx.spec)
            # The record goes with its backward, not with the graph (which lives as long as the
            # caller holds an output): a forward of the next micro-batch, run while the last
            # one's output is still referenced, does not find it held.
            engine.release_record()
        return (*grads, None, None, None)


def run_layer(spec, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, method, threads, chunks, check_finite=False,
              lengths=None, forward="sequential"):
    """One layer-direction: through autograd when a gradient is needed, else on an engine of
    its own for this call (nothing recorded for a backward pass)."""
    tensors = (x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        res = LayerFunction.apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, spec,
                                  (method, threads, chunks, check_finite, forward), lengths)
        return res if len(res) == 3 else (res[0], res[1], None)
    key = (x.dtype, _device(x))
    engine = spec.acquire(*key)
    try:  # (spec.borrowed's work, without a context manager's cost at every T 1 call)
        with torch.no_grad():
            return _run_forward(engine, spec, engine_inputs(*tensors), lengths, forward, threads, record=False)
    finally:
        spec.release(key, engine)
