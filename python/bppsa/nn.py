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
- ``threads``: OpenMP threads of the backward pass, 0..1024 (0 = all cores).

Modules may be called from several threads at once (each call records into an engine of its
own). Double backward (``create_graph=True``) raises RuntimeError.
"""
import math
import numbers
import warnings

import torch
from torch.nn.utils.rnn import PackedSequence

from . import _native
from ._recurrent import BACKWARD_METHODS, LayerSpec, run_layer

__all__ = ["RNN", "GRU", "LSTM"]

_GATES = {"rnn": 1, "gru": 3, "lstm": 4}


class _RecurrentBase(torch.nn.Module):
    """nn.RNNBase's parameters and forward() with bppsa's engine underneath."""

    def __init__(self, cell, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None, *, nonlinearity="tanh",
                 backward="auto", threads=0):
        super().__init__()
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}")
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
            if value <= 0:
                raise ValueError(f"{name} must be greater than zero")
        if proj_size != 0:
            raise NotImplementedError(f"bppsa.nn.LSTM does not support proj_size (got {proj_size}); "
                                      "use torch.nn.LSTM for projections")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        if dtype is not None and dtype not in _native.SUPPORTED_FLOATS:
            raise NotImplementedError(f"bppsa: dtype {dtype} is not supported; use torch.float32 or torch.float64")
        if device is not None and torch.device(device).type != "cpu":
            raise NotImplementedError(f"bppsa: device {device} is not supported from Python yet; use the CPU")
        self._cell = cell
        self.mode = {"rnn": "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", "gru": "GRU",
                     "lstm": "LSTM"}[cell]
        self.nonlinearity = nonlinearity
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = 0
        self.set_backward(backward, threads)

        num_directions = 2 if bidirectional else 1
        gate_size = _GATES[cell] * hidden_size
        factory = {"device": device, "dtype": dtype}
        self._flat_weights_names = []
        self._all_weights = []
        self._specs = []
        # Registered in torch's order (layer, direction, w_ih, w_hh, b_ih, b_hh): the same
        # seed then draws the same initial weights as torch.nn's module.
        for layer in range(num_layers):
            for direction in range(num_directions):
                layer_input = input_size if layer == 0 else hidden_size * num_directions
                suffix = "_reverse" if direction == 1 else ""
                names = [f"weight_ih_l{layer}{suffix}", f"weight_hh_l{layer}{suffix}"]
                shapes = [(gate_size, layer_input), (gate_size, hidden_size)]
                if bias:
                    names += [f"bias_ih_l{layer}{suffix}", f"bias_hh_l{layer}{suffix}"]
                    shapes += [(gate_size,), (gate_size,)]
                for name, shape in zip(names, shapes):
                    setattr(self, name, torch.nn.Parameter(torch.empty(shape, **factory)))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
                self._specs.append(LayerSpec(cell, layer_input, hidden_size, nonlinearity))
        self.reset_parameters()

    def set_backward(self, backward="auto", threads=0):
        """Chooses how the backward pass is computed (see the module docstring)."""
        if backward not in BACKWARD_METHODS:
            raise ValueError(f"bppsa: unknown backward method '{backward}'; use 'auto', 'blelloch', 'hybrid' or "
                             "'bp'")
        _native.check_threads(f"bppsa.nn.{type(self).__name__}", threads)
        self.bppsa_backward = backward
        self.bppsa_threads = threads

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            torch.nn.init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self):
        """Kept for compatibility with torch.nn's modules (cuDNN's weight layout): nothing to do."""

    @property
    def all_weights(self):
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    @property
    def _flat_weights(self):
        return [getattr(self, name) for name in self._flat_weights_names]

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self._cell == "rnn" and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        s += ", backward={bppsa_backward!r}"
        if self.bppsa_threads:
            s += ", threads={bppsa_threads}"
        return s.format(**self.__dict__)

    def _check_input(self, input, hx):
        name = type(self).__name__
        if isinstance(input, PackedSequence):
            raise NotImplementedError(f"bppsa.nn.{name} does not take a PackedSequence; pad the batch "
                                      "(torch.nn.utils.rnn.pad_packed_sequence) or use torch.nn." + name)
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"bppsa.nn.{name}: input must be a Tensor, got {type(input).__name__}")
        if input.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D tensor instead")
        _native.check_float("input", input)
        weight = self.weight_ih_l0
        _native.check_float("the module's parameters", weight)
        if input.dtype != weight.dtype:
            raise RuntimeError(f"bppsa.nn.{name}: input is {input.dtype} but the parameters are {weight.dtype}; "
                               "convert one of them (module.to(dtype) or input.to(dtype))")
        if input.size(-1) != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.size(-1)}")
        states = hx if isinstance(hx, tuple) else (hx,)
        for s in states:
            if s is not None:
                _native.check_float("hx", s)
                if s.dtype != input.dtype:
                    raise RuntimeError(f"bppsa.nn.{name}: hx is {s.dtype} but input is {input.dtype}")

    def forward(self, input, hx=None):
        self._check_input(input, hx)
        lstm = self._cell == "lstm"
        if lstm and hx is not None and not (isinstance(hx, tuple) and len(hx) == 2):
            raise RuntimeError("bppsa.nn.LSTM: hx must be a tuple (h_0, c_0)")
        if not lstm and isinstance(hx, tuple):
            raise RuntimeError(f"bppsa.nn.{type(self).__name__}: hx must be a Tensor, not a tuple")
        batched = input.dim() == 3
        states = list(hx) if lstm and hx is not None else [hx]
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
        x = input.transpose(0, 1) if self.batch_first else input
        steps, batch = x.shape[0], x.shape[1]
        if steps == 0:  # torch's own check (a batch of 0 is fine: empty outputs)
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        # Checked again here: bppsa_threads may have been assigned directly.
        threads = _native.check_threads(f"bppsa.nn.{type(self).__name__}", self.bppsa_threads, "bppsa_threads")
        directions = 2 if self.bidirectional else 1
        expected = (self.num_layers * directions, batch, self.hidden_size)
        for s in states:
            if s is not None and tuple(s.shape) != expected:
                raise RuntimeError(f"Expected hidden size {expected}, got {list(s.shape)}")
        h0 = states[0]
        c0 = states[1] if lstm and len(states) > 1 else None

        layer_input = x.contiguous()
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                k = layer * directions + direction
                names = self._all_weights[k]
                w_ih, w_hh = getattr(self, names[0]), getattr(self, names[1])
                b_ih, b_hh = (getattr(self, names[2]), getattr(self, names[3])) if self.bias else (None, None)
                xin = layer_input if direction == 0 else layer_input.flip(0)
                out, hk, ck = run_layer(self._specs[k], xin,
                                        None if h0 is None else h0[k].contiguous(),
                                        None if c0 is None else c0[k].contiguous(),
                                        w_ih, w_hh, b_ih, b_hh, self.bppsa_backward, threads, 0)
                outputs.append(out if direction == 0 else out.flip(0))
                h_n.append(hk)
                if lstm:
                    c_n.append(ck)
            layer_output = outputs[0] if directions == 1 else torch.cat(outputs, dim=2)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_output = torch.nn.functional.dropout(layer_output, p=self.dropout, training=True)
            layer_input = layer_output

        output = layer_input.transpose(0, 1) if self.batch_first else layer_input
        h_n = torch.stack(h_n)
        c_n = torch.stack(c_n) if lstm else None
        if not batched:
            output = output.squeeze(0 if self.batch_first else 1)
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if lstm else None
        return (output, (h_n, c_n)) if lstm else (output, h_n)


class RNN(_RecurrentBase):
    """torch.nn.RNN (tanh or relu) with a BPPSA backward pass.

    RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True, batch_first=False,
    dropout=0.0, bidirectional=False, device=None, dtype=None, *, backward='auto', threads=0)
    """

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None, *, backward="auto", threads=0):
        super().__init__("rnn", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype, nonlinearity=nonlinearity, backward=backward, threads=threads)


class GRU(_RecurrentBase):
    """torch.nn.GRU with a BPPSA backward pass.

    GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, device=None, dtype=None, *, backward='auto', threads=0)
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None, *, backward="auto", threads=0):
        super().__init__("gru", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype, backward=backward, threads=threads)


class LSTM(_RecurrentBase):
    """torch.nn.LSTM with a BPPSA backward pass (no proj_size).

    LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, proj_size=0, device=None, dtype=None, *, backward='auto', threads=0)
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None, *, backward="auto", threads=0):
        super().__init__("lstm", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype, backward=backward, threads=threads)


def __getattr__(name):
    # Everything that is not a recurrent layer is torch.nn's own (nn.Linear, nn.functional, …).
    return getattr(torch.nn, name)


def __dir__():
    return sorted(set(globals()) | set(dir(torch.nn)))
