"""Drop-in replacements for torch.nn.RNN, GRU and LSTM whose backward pass through time is a
BPPSA scan (or bppsa's BP), plus everything else of torch.nn.

Same constructor, parameter names, shapes, default initialisation and forward() as torch's
modules, so ``import bppsa.nn as nn`` (or ``from bppsa.nn import GRU``) in a PyTorch training
script changes nothing but how the recurrent layers' gradients are computed. Any other name
(``nn.Linear``, ``nn.functional``, ``nn.Module`` …) is torch.nn's own.

bppsa's own options are keyword-only:

- ``backward``: ``'auto'`` (default: the cheaper of BP and the scan for the batch and thread
  count), ``'blelloch'`` (the modified Blelloch scan, Θ(log T) levels), ``'hybrid'`` (chunked
  scan: reduce chunks, scan their totals, push prefixes through), or ``'bp'`` (sequential BP
  through time, bppsa's own).
- ``threads``: threads of the forward's GEMMs and of the backward pass: None (default) follows
  ``torch.get_num_threads()`` at each call, as torch.nn's modules do; 1..1024 fixes it; 0 = every
  core this process may use.
- ``check_finite``: False (default) lets NaN/Inf propagate into the gradients, as torch.nn does;
  True raises FloatingPointError naming the layer.
- ``forward``: ``'auto'`` (default), ``'sequential'`` (one step after another) or ``'newton'``
  (Newton's method on the whole trajectory, each iteration's linear recurrence solved by the scan
  engine; exact by certificate, else that layer's sequential forward; docs/method.md §9; CPU
  tensors only for now, and on a CPU slower than the sequential forward at every size measured).
  ``'auto'`` runs Newton on a layer where the cost model (the one behind ``backward='auto'``)
  predicts its expected iterations faster than the sequential forward, allowing it only the
  iterations that fit in the sequential forward's predicted time, else the sequential forward: on
  CUDA tensors, and with the built-in fit on a CPU, that is the sequential forward everywhere.
  ``last_forward`` then holds each layer-direction's method, iterations, certificate residual and
  fallback (in eager mode: under torch.compile and torch.export the operator's engine keeps its
  report).

The modules subclass torch.nn.RNN, GRU and LSTM (so ``isinstance(m, torch.nn.RNNBase)`` holds and
the constructor is the installed torch's). Under ``torch.compile`` and ``torch.export`` each layer
is a PyTorch custom operator, ``bppsa::layer_forward``, whose backward is ``bppsa::layer_backward``
(it runs the layer's forward again: an operator cannot keep the engine's record). Dynamo traces
into an ``RNNBase`` only with ``torch._dynamo.config.allow_rnn = True``: set it for
``fullgraph=True``; without it the graph breaks at the module, which still runs bppsa. Under
``torch.jit.trace`` and ``torch.onnx.export`` they run torch.nn's own forward, so those tools
record torch's standard operators with the module's weights, and under torch.func's transforms
(grad, vjp, jacrev) they run torch.nn's forward, so the gradients are torch's; ``torch.jit.script``
is refused, naming the fix. ``to_torch()`` returns a plain torch.nn copy of a module and
``bppsa.nn.to_torch(model)`` one of a whole model (for ``quantize_dynamic``, which matches module
types exactly).
A ``PackedSequence`` input runs each sample for its own length (no padding in the scan) and
returns a ``PackedSequence``, as torch.nn does (on the CPU and on CUDA); ``proj_size`` works as
torch's (on the CPU).
On CUDA tensors (``module.cuda()``; a bppsa built with its CUDA backend) every layer runs on the GPU
on PyTorch's tensors and current stream; ``backward='auto'`` is the fused chunked scan there.
Modules may be called from several threads at once (each call records into an engine of its
own). Double backward (``create_graph=True``) raises RuntimeError.
"""
import sys

import torch
from torch.nn.utils.rnn import PackedSequence

from . import _auto, _native, _ops
from ._recurrent import BACKWARD_METHODS, FORWARD_METHODS, LayerSpec, run_layer

__all__ = ["RNN", "GRU", "LSTM", "to_torch"]


def _records_torch_ops():
    """True under torch.jit.trace and torch.onnx.export: there the module runs torch.nn's own
    forward, which those tools record as the standard RNN/GRU/LSTM operators with the module's
    own weights (a trace or an ONNX file then runs without bppsa)."""
    if torch.jit.is_tracing():
        return True
    onnx = sys.modules.get("torch.onnx")  # not imported: no ONNX export under way (and none imported here)
    is_onnx_exporting = getattr(onnx, "is_in_onnx_export", None)
    return is_onnx_exporting is not None and is_onnx_exporting()


def to_torch(model):
    """A copy of `model` in which every bppsa.nn module is its torch.nn twin (to_torch(): the same
    class, arguments and weights), for tools that match module types exactly, such as
    torch.ao.quantization.quantize_dynamic. `model` itself is left as it is. A twin has its
    module's weights, requires_grad flags and mode, not its hooks."""
    if isinstance(model, _Bppsa):
        return model.to_torch()
    import copy
    out = copy.deepcopy(model)
    twins = {}  # one twin per module, however often it is registered (as deepcopy keeps sharing)
    for parent in list(out.modules()):
        for name, child in list(parent._modules.items()):  # every name (named_children skips repeats)
            if isinstance(child, _Bppsa):
                if id(child) not in twins:
                    twins[id(child)] = child.to_torch()
                setattr(parent, name, twins[id(child)])
    return out


def _under_torch_func(input):
    """A torch.func transform (grad, vjp, jacrev, vmap) runs the module outside any graph capture:
    the engine cannot read functorch's wrapped tensors, so torch.nn's forward and autograd serve.
    (torch.compile's and torch.export's own functorch machinery records bppsa's operators.)"""
    if _native.is_compiling() or _native.is_exporting():
        return False
    data = input.data if isinstance(input, PackedSequence) else input
    return _native.in_functorch_transform() and not _ops.capturing(data)


def _torch_forward_without_ops(input):
    """Without bppsa's custom operators (PyTorch < 2.4): torch.export and fake tensors get torch.nn's
    forward too (torch.compile runs bppsa's layer eagerly, a graph break)."""
    data = input.data if isinstance(input, PackedSequence) else input
    return _native.is_exporting() or _native.is_fake(data)


def _reverse(x, lengths):
    """x (T, B, ·) with each sample's first lengths[b] steps in reverse order (the reverse
    direction's input and output; all T steps without lengths), differentiably."""
    if lengths is None:
        return x.flip(0)
    steps = x.shape[0]
    index = torch.arange(steps).unsqueeze(1).repeat(1, len(lengths))
    for b, n in enumerate(lengths):
        index[:n, b] = torch.arange(n - 1, -1, -1)
    return x.gather(0, index.to(x.device).unsqueeze(2).expand_as(x))


def _outside_dynamo(fn):
    """fn run eagerly under torch.compile (a graph break): the packed-sequence kernels read their
    batch sizes' data, which fake tensors do not have (PyTorch 2.11's dynamo raises on them)."""
    compiler = getattr(torch, "compiler", None)
    disable = getattr(compiler, "disable", None)
    if disable is None:
        return fn
    wrapped = []

    def call(*args):
        if not wrapped:  # decorated at the first call: importing bppsa does not import torch._dynamo
            wrapped.append(disable(fn))
        return wrapped[0](*args)
    return call


def _packed_rows(batch_sizes, device):
    """Where a PackedSequence's data rows go in the padded time-major batch, sorted longest first:
    row r (step t, sample k: the k-th of step t's batch_sizes[t]) to row t·B + k of its (T·B, ·)
    view, B = batch_sizes[0]. Returns (rows on `device`, T, B, the samples' lengths as a list)."""
    sizes = batch_sizes.to("cpu", torch.int64)
    steps, batch = sizes.numel(), int(sizes[0])
    first = torch.cumsum(sizes, 0) - sizes  # each step's first data row
    step = torch.repeat_interleave(torch.arange(steps), sizes)
    rows = step * batch + torch.arange(int(sizes.sum())) - torch.repeat_interleave(first, sizes)
    lengths = (sizes.unsqueeze(0) > torch.arange(batch).unsqueeze(1)).sum(1)
    if torch.device(device).type == "cuda":  # a copy that does not wait for the device
        rows = rows.pin_memory().to(device, non_blocking=True)
    else:
        rows = rows.to(device)
    return rows, steps, batch, [int(n) for n in lengths]


@_outside_dynamo
def _unpack(packed, states, check_states):
    """A PackedSequence as a padded time-major batch sorted longest first (zeros past each length,
    one differentiable scatter of its rows), the rows' places (for _repack), the lengths (a list)
    and the initial states in that order (check_states(states, batch) first)."""
    rows, steps, batch, lengths = _packed_rows(packed.batch_sizes, packed.data.device)
    check_states(states, batch)
    data = packed.data
    if rows.numel() == steps * batch:  # every sample runs every step: the data is the padded batch
        padded = data
    else:
        padded = data.new_zeros((steps * batch,) + tuple(data.shape[1:])).index_copy(0, rows, data)
    if packed.sorted_indices is not None:
        states = [None if s is None else s.index_select(1, packed.sorted_indices) for s in states]
    return padded.reshape((steps, batch) + tuple(data.shape[1:])), rows, lengths, states


@_outside_dynamo
def _repack(output, rows, packed):
    """The padded output (sorted as _unpack's) as a PackedSequence with packed's batch sizes and
    order: its rows gathered back, differentiably."""
    data = output.reshape(-1, output.shape[-1])
    if rows.numel() < data.shape[0]:
        data = data.index_select(0, rows)
    return PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)


def _dropout_between(output, p, rows):
    """torch.nn's dropout between layers, drawing its masks as torch.nn does: over the (T, B, ·)
    output, or with rows (_unpack's) over a PackedSequence's data (its rows in packed order, as
    torch.nn drops out the packed layer output), then put back into the padded batch (zeros past each
    length). The same RNG draws, in the same order: the same masks and RNG state afterwards."""
    dropout = torch.nn.functional.dropout
    if rows is None or rows.numel() == output.shape[0] * output.shape[1]:  # packed order is padded order
        return dropout(output, p=p, training=True)
    flat = output.reshape(-1, output.shape[-1])
    data = dropout(flat.index_select(0, rows), p=p, training=True)
    return flat.new_zeros(flat.shape).index_copy(0, rows, data).reshape(output.shape)


def _autocast_dtype(input, weight):
    """The dtype torch.nn's recurrent layers return under autocast for the input's device (they run
    in autocast's lower precision there), or None: autocast off, or weights that are not float32."""
    if weight.dtype != torch.float32:
        return None
    device = (input.data if isinstance(input, PackedSequence) else input).device.type
    try:  # PyTorch >= 2.4
        return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    except (AttributeError, TypeError, RuntimeError):
        if device == "cpu":
            return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
        if device == "cuda":
            return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
        return None


class _InputDtypeError(NotImplementedError, ValueError):
    """An input in a dtype bppsa does not compute in (float16, bfloat16, integer, complex), for a
    module in one it does: torch.nn raises ValueError for an input whose dtype is not its weights'."""


class _InputDtypeMismatch(RuntimeError, ValueError):
    """An input in another of bppsa's dtypes than the module's parameters (float64 into a float32
    module): torch.nn's ValueError for the same call."""


def _check_factory(name, dtype, device):
    """Refuses a dtype or device the engine cannot run (None: not given)."""
    if dtype is not None and dtype not in _native.SUPPORTED_FLOATS:
        raise NotImplementedError(f"bppsa: dtype {dtype} is not supported; use torch.float32 or torch.float64")
    if device is not None and torch.device(device).type not in ("cpu", "cuda", "meta"):
        raise NotImplementedError(f"bppsa.nn.{name}: device {device} is not supported; bppsa runs on the CPU and on "
                                  "CUDA devices")


class _Bppsa:
    """bppsa's forward (and through it, its backward pass) on top of torch.nn.RNNBase: the
    parameters, their order and initialisation, the constructor's checks, repr, state_dict,
    _flat_weights and all_weights are torch's own."""

    _cell = None  # "rnn", "gru", "lstm"

    def __init__(self, *args, backward="auto", threads=None, check_finite=False, forward="auto", **kwargs):
        # Before torch allocates anything (a CUDA device, say); again after, for positional arguments.
        _check_factory(type(self).__name__, kwargs.get("dtype"), kwargs.get("device"))
        super().__init__(*args, **kwargs)  # torch.nn.RNN's, GRU's or LSTM's (the next class in the MRO)
        self._bppsa_init(backward, threads, check_finite, forward)

    def _bppsa_init(self, backward, threads, check_finite, forward="auto"):
        name = type(self).__name__
        _check_factory(name, self.weight_ih_l0.dtype, self.weight_ih_l0.device)
        self._specs = self._layer_specs()
        self.set_backward(backward, threads)
        self.set_check_finite(check_finite)
        self.set_forward(forward)

    def _layer_specs(self):
        """Each layer-direction's LayerSpec (its sizes and a pool of idle engines, empty at first)."""
        nonlinearity = getattr(self, "nonlinearity", "tanh")
        directions = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size  # rows of h: LSTM's projection, if any
        return [LayerSpec(self._cell, self.input_size if layer == 0 else out_size * directions,
                          self.hidden_size, nonlinearity, self.proj_size)
                for layer in range(self.num_layers) for _ in range(directions)]

    def __getstate__(self):
        """torch.nn's state (pickle, torch.save of the whole module, copy.deepcopy) without the
        engines: only torch.nn's attributes and bppsa's options (strings, numbers, None), so
        torch.load(weights_only=True) needs no class but the module's own allowlisted."""
        state = dict(super().__getstate__())  # a copy: object.__getstate__ may return the live __dict__
        state.pop("_specs", None)
        state.pop("_bppsa_auto_cache", None)  # auto's decisions, remade on the loaded machine
        return state

    def __setstate__(self, state):
        state = dict(state)
        state.pop("_specs", None)  # saved by a bppsa that pickled them: rebuilt, empty, below
        super().__setstate__(state)
        self._specs = self._layer_specs()

    def set_backward(self, backward="auto", threads=None):
        """Chooses how the backward pass is computed (see the module docstring)."""
        if backward not in BACKWARD_METHODS:
            raise ValueError(f"bppsa: unknown backward method '{backward}'; use 'auto', 'blelloch', 'hybrid' or "
                             "'bp'")
        _native.check_threads(f"bppsa.nn.{type(self).__name__}", threads)
        self.bppsa_backward = backward
        self.bppsa_threads = threads

    def set_forward(self, forward="auto"):
        """Chooses how the forward pass is computed: 'auto', 'sequential' or 'newton' (see the module
        docstring)."""
        if forward not in FORWARD_METHODS:
            raise ValueError(f"bppsa: unknown forward method {forward!r}; use 'auto', 'sequential' or 'newton'")
        self.bppsa_forward = forward

    @property
    def last_backward(self):
        """The backward method of each layer-direction's last call (layer-major, as h_n): 'bp',
        'blelloch' or 'hybrid' (what 'auto' resolved to), or 'torch.nn' where backward='auto' ran
        torch.nn's own implementation (the step cost model, fitted on shapes spanning the call's,
        predicted it faster); None before a backward. Not updated under torch.compile (its operator
        runs an engine of its own)."""
        return [spec.last_backward for spec in self._specs]

    @property
    def last_forward(self):
        """The last forward of each layer-direction (layer-major, as h_n) under forward='newton' or
        'auto': a dict of the method asked ("asked") and the one it ran ("method": 'newton' or
        'sequential', auto resolved), the iterations Newton was allowed ("max_iterations": auto's
        from the cost model; 0 for a sequential forward) and took, its certificate residual, whether
        it fell back to the sequential forward and from which step (fallback_step, 1-based; 0:
        none); None before such a forward, or when backward='auto' ran torch.nn's implementation.
        Not updated under torch.compile or torch.export (their operator runs an engine of its own)."""
        return [spec.last_forward for spec in self._specs]

    def set_check_finite(self, check_finite=False):
        """check_finite=True: a NaN/Inf state gradient raises FloatingPointError naming the layer.
        False (default): non-finite values propagate into the gradients, as in torch.nn."""
        if not isinstance(check_finite, bool):
            raise TypeError(f"bppsa.nn.{type(self).__name__}: check_finite must be True or False, got "
                            f"{check_finite!r}")
        self.bppsa_check_finite = check_finite

    def extra_repr(self):
        s = super().extra_repr()
        if self._cell == "rnn" and self.nonlinearity != "tanh":
            s += f", nonlinearity={self.nonlinearity!r}"
        s += f", backward={self.bppsa_backward!r}"
        if self.bppsa_threads is not None:
            s += f", threads={self.bppsa_threads}"
        if self.bppsa_check_finite:
            s += ", check_finite=True"
        if getattr(self, "bppsa_forward", "sequential") != "auto":
            s += f", forward={self.bppsa_forward!r}"
        return s

    def __prepare_scriptable__(self):
        """torch.jit.script: refused, naming the fix (TorchScript cannot compile bppsa's forward, and
        a module put in this one's place would also replace it in the caller's model)."""
        raise RuntimeError(f"bppsa.nn.{type(self).__name__}: torch.jit.script cannot compile bppsa's forward; "
                           "script bppsa.nn.to_torch(model) instead (a copy with torch.nn's modules and the same "
                           "weights, which then run torch.nn's forward and backward), or use torch.compile or "
                           "torch.export, which record bppsa's operators")

    def to_torch(self):
        """A torch.nn module of the same class and arguments holding copies of these weights (and
        their requires_grad flags)."""
        base = {"rnn": torch.nn.RNN, "gru": torch.nn.GRU, "lstm": torch.nn.LSTM}[self._cell]
        kwargs = dict(num_layers=self.num_layers, bias=self.bias, batch_first=self.batch_first,
                      dropout=self.dropout, bidirectional=self.bidirectional, device=self.weight_ih_l0.device,
                      dtype=self.weight_ih_l0.dtype)
        if self._cell == "rnn":
            kwargs["nonlinearity"] = self.nonlinearity
        if self.proj_size:
            kwargs["proj_size"] = self.proj_size
        m = base(self.input_size, self.hidden_size, **kwargs)
        m.load_state_dict(self.state_dict())
        for name, p in self.named_parameters():
            m.get_parameter(name).requires_grad_(p.requires_grad)
        m.train(self.training)
        return m

    def _check_input(self, input, hx):
        name = type(self).__name__
        packed = isinstance(input, PackedSequence)
        if packed:
            input = input.data
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"bppsa.nn.{name}: input must be a Tensor, got {type(input).__name__}")
        if packed and input.dim() != 2:
            raise ValueError(f"{name}: Expected the data of a PackedSequence to be 2D, got {input.dim()}D")
        if input.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D tensor instead")
        weight = self._flat_weights[0]  # as torch.nn reads it (a parametrization is not evaluated here)
        try:
            _native.check_float("input", input)
        except NotImplementedError as e:
            if input.dtype not in _native.SUPPORTED_FLOATS and input.dtype != weight.dtype:
                raise _InputDtypeError(str(e)) from None
            raise
        _native.check_float("the module's parameters", weight)
        if input.dtype != weight.dtype:
            raise _InputDtypeMismatch(f"bppsa.nn.{name}: input is {input.dtype} but the parameters are "
                                      f"{weight.dtype}; convert one of them (module.to(dtype) or input.to(dtype))")
        if input.device != weight.device:
            raise RuntimeError(f"bppsa.nn.{name}: input is on {input.device} but the parameters are on "
                               f"{weight.device}; move one of them (module.to(device) or input.to(device))")
        if input.size(-1) != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.size(-1)}")
        states = hx if isinstance(hx, tuple) else (hx,)
        for s in states:
            if s is not None:
                _native.check_float("hx", s)
                if s.dtype != input.dtype:
                    raise RuntimeError(f"bppsa.nn.{name}: hx is {s.dtype} but input is {input.dtype}")
                if s.device != input.device:
                    raise RuntimeError(f"bppsa.nn.{name}: hx is on {s.device} but input is on {input.device}; "
                                       "move it with hx.to(input.device)")

    def _check_states(self, states, batch):
        """torch's check of h_0 (the projection's size: torch's get_expected_hidden_size) and c_0
        (the hidden size)."""
        directions = 2 if self.bidirectional else 1
        for i, s in enumerate(states):
            expected = (self.num_layers * directions, batch,
                        self.proj_size if i == 0 and self.proj_size else self.hidden_size)
            if s is not None and tuple(s.shape) != expected:
                raise RuntimeError(f"Expected hidden size {expected}, got {list(s.shape)}")

    def forward(self, input, hx=None):
        # auto's fallback first: a call it hands to torch.nn runs torch.nn's forward whatever the
        # checks below would find (the cheapest path for a decoder's T 1 call of a plain RNN).
        if self._auto_runs_torch(input):
            for spec in self._specs:
                spec.last_backward = "torch.nn"
            return super().forward(input, hx)
        if _records_torch_ops() or _under_torch_func(input):
            return super().forward(input, hx)
        # The weights' dtype from _flat_weights: reading weight_ih_l0 would evaluate a parametrization.
        flat = getattr(self, "_flat_weights", None)
        cast = _autocast_dtype(input, flat[0] if flat else next(self.parameters()))
        if cast is not None:
            return self._autocast_forward(input, hx, cast)
        if not _ops.AVAILABLE:
            if _native.is_compiling():  # (decorating would import torch._dynamo with bppsa)
                return torch.compiler.disable(self._bppsa_forward)(input, hx)
            if _torch_forward_without_ops(input):
                return super().forward(input, hx)
        return self._bppsa_forward(input, hx)

    def _auto_runs_torch(self, input):
        """backward='auto' on CPU tensors in eager mode, where the step cost model predicts torch.nn's
        own kernels faster than bppsa for this module and call's shape (_auto.py)."""
        if (self.bppsa_backward != "auto" or _native.is_compiling() or _native.is_exporting()
                or torch.jit.is_tracing()):  # a trace's sizes are tensors: forward's own check sends it to torch.nn
            return False
        if isinstance(input, PackedSequence):
            data = input.data
            steps, batch = len(input.batch_sizes), int(input.batch_sizes[0]) if len(input.batch_sizes) else 0
        else:
            data = input
            if not isinstance(input, torch.Tensor) or input.dim() not in (2, 3):
                return False  # torch's or bppsa's own checks report it
            steps = input.shape[1 if self.batch_first and input.dim() == 3 else 0]
            batch = 1 if input.dim() == 2 else input.shape[0 if self.batch_first else 1]
        if not data.is_cpu or steps == 0 or batch == 0 or _native.is_fake(data):
            return False
        threads = self.bppsa_threads
        if threads is not None:  # None follows torch.get_num_threads(), as resolve_threads does
            threads = _native.check_threads(f"bppsa.nn.{type(self).__name__}", threads, "bppsa_threads")
        return _auto.runs_torch(self, steps, batch, _native.resolve_threads(threads))

    def _autocast_forward(self, input, hx, dtype):
        """Under autocast: the layers computed in the weights' float32 (the input and hx converted
        up, autocast off inside), the results converted to the dtype torch.nn returns there."""
        data = input.data if isinstance(input, PackedSequence) else input
        w = torch.float32  # what _autocast_dtype found the weights to be
        up = lambda t: None if t is None else t.to(w)  # noqa: E731
        if isinstance(input, PackedSequence):
            input = PackedSequence(up(input.data), input.batch_sizes, input.sorted_indices, input.unsorted_indices)
        else:
            input = up(input)
        hx = tuple(up(t) for t in hx) if isinstance(hx, tuple) else up(hx)
        with torch.autocast(device_type=data.device.type, enabled=False):
            out, state = self.forward(input, hx)
        if isinstance(out, PackedSequence):
            out = PackedSequence(out.data.to(dtype), out.batch_sizes, out.sorted_indices, out.unsorted_indices)
        else:
            out = out.to(dtype)
        state = tuple(t.to(dtype) for t in state) if isinstance(state, tuple) else state.to(dtype)
        return out, state

    def _forward_weights(self):
        """The weights of this forward, by name, read as torch.nn's forward reads them: its
        _flat_weights, refreshed first by _update_flat_weights (PyTorch >= 2.0) when any weight is no
        longer the tensor they hold (a parametrization, functional_call, an assigned tensor). A
        parametrized weight is thus evaluated as often, and in the same order, as in torch.nn's
        forward: spectral_norm's power iteration advances as torch.nn's does."""
        update = getattr(self, "_update_flat_weights", None)
        if update is not None:
            update()
        return dict(zip(self._flat_weights_names, self._flat_weights))

    def _bppsa_forward(self, input, hx):
        """bppsa's forward. While torch captures a graph (torch.compile, torch.export, fake tensors)
        each layer is one bppsa::layer_forward operator, whose backward is bppsa::layer_backward."""
        weights = self._forward_weights()
        self._check_input(input, hx)
        lstm = self._cell == "lstm"
        if lstm and hx is not None and not (isinstance(hx, tuple) and len(hx) == 2):
            raise RuntimeError("bppsa.nn.LSTM: hx must be a tuple (h_0, c_0)")
        if not lstm and isinstance(hx, tuple):
            raise RuntimeError(f"bppsa.nn.{type(self).__name__}: hx must be a Tensor, not a tuple")
        states = list(hx) if lstm and hx is not None else [hx]
        # A PackedSequence runs as a padded time-major batch sorted longest first, each sample for
        # its own length only (bppsa's lengths path: no step past a length is computed, and the
        # scan runs each sample's chain at its length); hx and h_n in the caller's order, as torch.
        packed, lengths = None, None
        if isinstance(input, PackedSequence):
            packed = input
            input, rows, lengths, states = _unpack(packed, states, self._check_states)
        batched = packed is not None or input.dim() == 3
        if not batched:
            input = input.unsqueeze(0 if self.batch_first else 1)
            for i, s in enumerate(states):
                if s is not None:
                    if s.dim() != 2:
                        raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got {s.dim()}-D "
                                           "tensor")
                    states[i] = s.unsqueeze(1)
        else:
            for s in states:
                if s is not None and s.dim() != 3:
                    raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {s.dim()}-D tensor")
        x = input.transpose(0, 1) if self.batch_first and packed is None else input
        steps, batch = x.shape[0], x.shape[1]
        if steps == 0:  # torch's own check (a batch of 0 is fine: empty outputs)
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        # Checked again here: bppsa_threads may have been assigned directly.
        threads = _native.check_threads(f"bppsa.nn.{type(self).__name__}", self.bppsa_threads, "bppsa_threads")
        check_finite = self.bppsa_check_finite
        directions = 2 if self.bidirectional else 1
        self._check_states(states, batch)
        h0 = states[0]
        c0 = states[1] if lstm and len(states) > 1 else None

        layer_input = x.contiguous()
        capture = _ops.capturing(layer_input)
        forward = getattr(self, "bppsa_forward", "sequential")  # absent in a module pickled before it existed
        if forward not in FORWARD_METHODS:  # assigned directly
            raise ValueError(f"bppsa: unknown forward method {forward!r}; use 'auto', 'sequential' or 'newton'")
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                k = layer * directions + direction
                names = self._all_weights[k]
                w_ih, w_hh = weights[names[0]], weights[names[1]]
                b_ih, b_hh = (weights[names[2]], weights[names[3]]) if self.bias else (None, None)
                w_hr = weights[names[-1]] if self.proj_size else None  # torch puts weight_hr last
                xin = layer_input if direction == 0 else _reverse(layer_input, lengths)
                h0k = None if h0 is None else h0[k].contiguous()
                c0k = None if c0 is None else c0[k].contiguous()
                if capture:
                    spec = self._specs[k]
                    out, hk, ck = _ops.layer(xin, h0k, c0k, w_ih, w_hh, b_ih, b_hh, w_hr, spec.cell,
                                             spec.nonlinearity, self.bppsa_backward, threads, 0, check_finite,
                                             lengths, forward)
                else:
                    out, hk, ck = run_layer(self._specs[k], xin, h0k, c0k, w_ih, w_hh, b_ih, b_hh, w_hr,
                                            self.bppsa_backward, threads, 0, check_finite, lengths, forward)
                outputs.append(out if direction == 0 else _reverse(out, lengths))
                h_n.append(hk)
                if lstm:
                    c_n.append(ck)
            layer_output = outputs[0] if directions == 1 else torch.cat(outputs, dim=2)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_output = _dropout_between(layer_output, self.dropout, rows if packed is not None else None)
            layer_input = layer_output

        h_n = torch.stack(h_n)  # a tensor of its own, as torch.nn's (a view could not be detach_()ed)
        c_n = torch.stack(c_n) if lstm else None
        if packed is not None:
            output = _repack(layer_input, rows, packed)
            if packed.unsorted_indices is not None:
                h_n = h_n.index_select(1, packed.unsorted_indices)
                c_n = c_n.index_select(1, packed.unsorted_indices) if lstm else None
            return (output, (h_n, c_n)) if lstm else (output, h_n)
        output = layer_input.transpose(0, 1) if self.batch_first else layer_input
        if not batched:
            output = output.squeeze(0 if self.batch_first else 1)
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if lstm else None
        return (output, (h_n, c_n)) if lstm else (output, h_n)


class RNN(_Bppsa, torch.nn.RNN):
    """torch.nn.RNN (tanh or relu) with a BPPSA backward pass: a subclass of torch.nn.RNN taking
    the installed torch's arguments, plus keyword-only backward='auto', threads=None,
    check_finite=False and forward='auto'."""

    _cell = "rnn"


class GRU(_Bppsa, torch.nn.GRU):
    """torch.nn.GRU with a BPPSA backward pass: a subclass of torch.nn.GRU taking the installed
    torch's arguments, plus keyword-only backward='auto', threads=None, check_finite=False and
    forward='auto'."""

    _cell = "gru"


class LSTM(_Bppsa, torch.nn.LSTM):
    """torch.nn.LSTM with a BPPSA backward pass, proj_size included (h_t = W_hr (o_t ⊙ tanh c_t),
    scanned with its own Jacobian): a subclass of torch.nn.LSTM taking the installed torch's
    arguments, plus keyword-only backward='auto', threads=None, check_finite=False and
    forward='auto'."""

    _cell = "lstm"


def __getattr__(name):
    # Everything that is not a recurrent layer is torch.nn's own (nn.Linear, nn.functional, …).
    return getattr(torch.nn, name)


def __dir__():
    return sorted(set(globals()) | set(dir(torch.nn)))
