# bppsa.scan: the scan engine from PyTorch, differentiable (its backward pass is itself a
# BPPSA scan, over the transposed elements in reverse order).
import torch

from . import _native, _ops
from ._recurrent import _no_double_backward

ALGORITHMS = ("blelloch", "hybrid", "linear", "auto")


class _Element:
    """One scan element a_i, checked: dense (count, rows, cols) or a shared CSR matrix."""

    def __init__(self, index, t, batch):
        what = f"jacobians[{index}]"
        self.tensor = t
        if t.layout == torch.sparse_csr:
            if t.dim() != 2:
                raise NotImplementedError(f"bppsa.scan: {what} is a batched sparse CSR tensor; only 2-D CSR "
                                          "matrices (shared by the batch) are supported")
            if t.dtype not in _native.SUPPORTED_FLOATS:
                raise NotImplementedError(f"bppsa.scan: {what} has dtype {t.dtype}; use float32 or float64")
            if t.device.type not in ("cpu", "cuda"):
                raise NotImplementedError(f"bppsa.scan: {what} is on {t.device}; the scan runs on the CPU and on "
                                          "CUDA devices")
            self.kind = "csr"
            self.rows, self.cols = t.shape
            self.count = 1
            self.per_sample = False
            self.values = t.values().contiguous()
            self.crow = t.crow_indices().contiguous()
            self.col = t.col_indices().contiguous()
            return
        _native.check_float(what, t)
        if t.dim() == 2:
            self.count = 1
            self.rows, self.cols = t.shape
        elif t.dim() == 3:
            self.count, self.rows, self.cols = t.shape
            if self.count not in (1, batch):
                raise ValueError(f"bppsa.scan: {what} has {self.count} matrices (shape {list(t.shape)}); expected "
                                 f"a 2-D matrix shared by the batch or one per sample ({batch}, rows, cols)")
        else:
            raise ValueError(f"bppsa.scan: {what} has shape {list(t.shape)}; expected (rows, cols) or "
                             f"(batch, rows, cols)")
        self.kind = "dense"
        self.per_sample = self.count > 1  # the gradient is one matrix per sample
        # One matrix expanded over the batch (stride 0, e.g. A.expand(B, d, d)) is shared: the
        # scan takes it once instead of B copies.
        self.source = t[0] if self.count > 1 and t.stride(0) == 0 else t
        if self.source is not t:
            self.count = 1
        self.crow = self.col = None
        self.values = None  # made by materialize(), after the memory check

    def copy_bytes(self):
        """Bytes of the contiguous copy materialize() makes (0: none, the tensor is used as it is)."""
        if self.kind == "csr" or self.source.is_contiguous():
            return 0
        return self.count * self.rows * self.cols * self.source.element_size()

    def chain_bytes(self):
        """Bytes of the native scan's copy of this element."""
        if self.kind == "csr":
            return self.values.numel() * (self.values.element_size() + 8)
        return self.count * self.rows * self.cols * self.source.element_size()

    def materialize(self):
        if self.kind == "dense" and self.values is None:
            self.values = self.source.reshape(self.count, self.rows, self.cols).contiguous()

    def native(self):
        r = _native.ref
        if self.kind == "csr":
            return _native._C.ElementRef("csr", self.rows, self.cols, 1, r(self.values), r(self.crow), r(self.col))
        return _native._C.ElementRef("dense", self.rows, self.cols, self.count, r(self.values))


def _elements(jacobians, batch):
    if isinstance(jacobians, torch.Tensor):
        if jacobians.layout != torch.strided:
            raise NotImplementedError("bppsa.scan: give sparse elements as a list of 2-D torch.sparse_csr tensors")
        if jacobians.dim() not in (3, 4):
            raise ValueError(f"bppsa.scan: jacobians has shape {list(jacobians.shape)}; expected (N, d, d) shared "
                             "by the batch, (N, B, d, d) per sample, or a list of 2-D / 3-D tensors")
        jacobians = list(jacobians.unbind(0))
    elif not isinstance(jacobians, (list, tuple)):
        raise TypeError(f"bppsa.scan: jacobians must be a tensor or a list of tensors, got {type(jacobians).__name__}")
    out = []
    for i, t in enumerate(jacobians):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"bppsa.scan: jacobians[{i}] is a {type(t).__name__}, expected a tensor")
        out.append(_Element(i, t, batch))
    return out


def _check_chain(elements, g_last):
    device = g_last.device
    for i, e in enumerate(elements):
        if e.tensor.device != device:
            raise ValueError(f"bppsa.scan: jacobians[{i}] is on {e.tensor.device} but g_last is on {device}: every "
                             f"tensor of a scan must be on one device; move it with .to({str(device)!r})")
    d = g_last.shape[1]
    for i, e in enumerate(elements):
        if e.cols != d:
            prev = "g_last" if i == 0 else f"jacobians[{i - 1}]"
            raise ValueError(f"bppsa.scan: jacobians[{i}] is {e.rows}×{e.cols} but {prev} gives vectors of length "
                             f"{d}: element i must be (len(s_i) × len(s_(i-1))), i.e. J^T of the layer one step "
                             "closer to the input")
        if e.tensor.dtype != g_last.dtype:
            raise ValueError(f"bppsa.scan: jacobians[{i}] is {e.tensor.dtype} but g_last is {g_last.dtype}")
        d = e.rows


def _check_memory(elements, g_last):
    """The host-memory guard before anything is copied: the contiguous copies of strided elements,
    the native scan's copies of the elements and the outputs (the scan checks its own workspace).
    For tensors in device memory torch checks its own allocations and the scan its plan."""
    if not g_last.is_cpu:
        for e in elements:
            e.materialize()
        return
    size = g_last.element_size()
    batch = g_last.shape[0]
    outputs = batch * (g_last.shape[1] + sum(e.rows for e in elements)) * size
    _native.check_memory("bppsa.scan", f"a scan over {len(elements)} elements of batch {batch}",
                         [("contiguous copies of strided elements", sum(e.copy_bytes() for e in elements)),
                          ("the elements in the scan", sum(e.chain_bytes() for e in elements)),
                          ("the outputs", outputs)],
                         "pass fewer or smaller elements; a matrix the batch shares should be given once "
                         "(rows, cols) or expanded (stride 0), not repeated per sample")
    for e in elements:
        e.materialize()


def _torch_scan(elements, g_last):
    """The scan as a loop of torch products, for empty shapes (a batch of 0, a dimension of 0),
    where there is nothing to compute but torch's autograd still wants its graph."""
    s = g_last
    outs = [s]
    for e in elements:
        t = e.tensor
        if e.kind == "csr":
            s = (t.to_dense() @ s.T).T
        elif t.dim() == 2:
            s = s @ t.T
        else:
            s = torch.einsum("brc,bc->br", t.expand(s.shape[0], -1, -1), s)
        outs.append(s)
    return outs


def _run(elements, g_last, injections, transpose, algorithm, threads, check_finite):
    """The native scan on g_last's device (the extension's front picks the half), queued there on
    PyTorch's current stream."""
    batch = g_last.shape[0]
    dims = [g_last.shape[1]] + [e.cols if transpose else e.rows for e in elements]
    outs = [torch.empty((batch, d), dtype=g_last.dtype, device=g_last.device) for d in dims]
    r = _native.ref
    inj = [] if injections is None else [_native._C.TensorRef() if e is None else r(e) for e in injections]
    _native.affine_scan(g_last.dtype)([e.native() for e in elements], r(g_last), [r(o) for o in outs], inj,
                                      transpose, algorithm, _native.resolve_threads(threads), check_finite,
                                      _native.stream_of(g_last))
    return outs


def element_gradient(lam, y_prev, per_sample, shape):
    """∂ℓ/∂A_i = λ_i y_(i-1)^T: one matrix per sample (B, rows, cols), or for an element the batch
    shares the sum over the batch as one product (no (B, rows, cols) intermediate)."""
    g = torch.einsum("br,bc->brc", lam, y_prev) if per_sample else lam.T @ y_prev
    return g.reshape(shape)


class _ScanFunction(torch.autograd.Function):
    # y_0 = g, y_i = A_i y_(i-1). With ȳ_i the incoming gradients, λ_N = ȳ_N and
    # λ_(i-1) = A_i^T λ_i + ȳ_(i-1): the same scan over A_N^T … A_1^T with injections (docs/method.md §1).
    # Then ∂/∂g = λ_0 and ∂/∂A_i = λ_i y_(i-1)^T (summed over the batch when A_i is shared).

    @staticmethod
    def forward(ctx, elements, options, g_last, *tensors):
        algorithm, threads, check_finite = options
        outs = _run(elements, g_last, None, False, algorithm, threads, check_finite)
        ctx.elements, ctx.options = elements, options
        # The dense elements are saved too, so that torch checks their version counters (an
        # element changed in place before backward raises torch's error).
        ctx.save_for_backward(*outs, *[t if e.kind == "dense" else None for e, t in zip(elements, tensors)])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():  # create_graph=True: the result would be silently first-order only
            _no_double_backward("bppsa.scan")
        elements = ctx.elements
        n = len(elements)
        ys = ctx.saved_tensors[:n + 1]  # raises torch's errors: graph freed, or an element changed in place
        batch = ys[0].shape[0]
        per_sample = [e for i, e in enumerate(elements) if e.per_sample and ctx.needs_input_grad[3 + i]]
        if per_sample:
            _native.check_memory("bppsa.scan", "the gradients of the per-sample elements",
                                 [("one matrix per sample and element",
                                   sum(batch * e.rows * e.cols for e in per_sample) * ys[0].element_size())],
                                 "give a matrix the batch shares as a 2-D (rows, cols) tensor: its gradient is then "
                                 "one matrix, summed over the batch")
        grads = [torch.zeros_like(y) if g is None else g.contiguous() for g, y in zip(grads, ys)]
        # Reverse the array: s'_0 = ȳ_N, s'_j = A_(N-j+1)^T s'_(j-1) + ȳ_(N-j).
        rev = list(reversed(elements))
        lam = _run(rev, grads[n], list(reversed(grads[:n])), True, *ctx.options)
        lam = list(reversed(lam))  # lam[i] = λ_i
        out = [None, None, lam[0]]
        for i, e in enumerate(elements, start=1):
            if not ctx.needs_input_grad[2 + i]:
                out.append(None)
                continue
            if e.kind == "csr":
                raise NotImplementedError("bppsa.scan: gradients with respect to sparse CSR elements are not "
                                          "supported; detach them (they need no gradient as inputs)")
            out.append(element_gradient(lam[i], ys[i - 1], e.per_sample, e.tensor.shape))
        return tuple(out)


def scan(jacobians, g_last, *, algorithm="blelloch", threads=None, check_finite=False):
    r"""Every gradient of a chain by parallel scan: s_0 = g_last, s_i = A_i · s_(i-1).

    For a chain x_k = f_k(x_(k-1)), k = 1..N, with J_k = ∂x_k/∂x_(k-1) and g_k = ∂ℓ/∂x_k,
    back-propagation computes g_(k-1) = J_k^T g_k. Give

    - ``jacobians``: A_1 … A_N = J_N^T, J_(N-1)^T, …, J_1^T — the transposed Jacobians from the
      loss side to the input side (element i is J^T of layer N − i, i counted from 0). A_i has
      one row per element of s_i (the layer's input) and one column per element of s_(i-1)
      (its output): g_in = J^T g_out. As

      * a tensor (N, d, d): square elements shared by the whole batch;
      * a tensor (N, B, d, d): one matrix per sample;
      * a list of N tensors, each (rows, cols) shared, (B, rows, cols) per sample, or a 2-D
        ``torch.sparse_csr`` tensor (shared); rectangular elements are fine as long as
        consecutive ones chain.

    - ``g_last``: (B, d_N), the gradient of the loss with respect to the chain's output, one
      row per sample.

    Returns the inclusive scan s_0 … s_N = g_N, g_(N-1), …, g_0 (g_0 included): a tensor
    (N+1, B, d) when ``jacobians`` was a tensor, else a list of N+1 tensors (B, d_k).

    ``algorithm``: ``'blelloch'`` (Θ(log N) levels, docs/method.md §2), ``'hybrid'`` (chunked),
    ``'linear'`` (sequential BP, the reference), ``'auto'`` (bppsa's cost model).
    ``threads``: threads of the scan; None (default) follows ``torch.get_num_threads()``, 0 = every
    core this process may use. The parallel algorithms reassociate the products, so results may
    differ from the sequential order in the last bits.
    ``check_finite``: raise FloatingPointError when an input or a result is NaN/Inf, naming the
    element; by default (False) non-finite values propagate into the results, as torch's products do.

    On CUDA tensors (every tensor on one device) the scan runs on that GPU: the resident GPU scan,
    planned once per layout and stream and kept, queued on PyTorch's current stream; ``'auto'`` is
    ``'blelloch'`` there and ``threads`` is not used. A CSR element's indices are copied to the host
    for the plan.

    Differentiable with respect to ``g_last`` and dense elements; the backward pass is itself a
    scan over the transposed elements in reverse order. Under ``torch.compile`` and
    ``torch.export`` a scan of dense elements is the custom operator ``bppsa::affine_scan``.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"bppsa.scan: unknown algorithm '{algorithm}'; use one of {', '.join(ALGORITHMS)}")
    threads = _native.check_threads("bppsa.scan", threads)
    if not isinstance(check_finite, bool):
        raise TypeError(f"bppsa.scan: check_finite must be True or False, got {check_finite!r}")
    if not isinstance(g_last, torch.Tensor):
        raise TypeError(f"bppsa.scan: g_last must be a tensor, got {type(g_last).__name__}")
    _native.check_float("g_last", g_last)
    if g_last.dim() != 2:
        raise ValueError(f"bppsa.scan: g_last has shape {list(g_last.shape)}; expected (batch, d_N)")
    stacked = isinstance(jacobians, torch.Tensor)
    elements = _elements(jacobians, g_last.shape[0])
    _check_chain(elements, g_last)
    tensors = [e.tensor for e in elements]
    if g_last.numel() == 0 or any(e.rows == 0 or e.cols == 0 for e in elements):
        # Empty shapes: nothing to scan; torch's own products give the (empty or zero) results
        # and their gradients.
        outs = _torch_scan(elements, g_last)
        return torch.stack(outs) if stacked else outs
    if _ops.capturing(g_last):  # torch.compile, torch.export: the scan as a custom operator
        if any(e.kind == "csr" for e in elements):
            if _native.is_compiling():  # run eagerly, outside the graph (a graph break)
                return torch.compiler.disable(scan)(jacobians, g_last, algorithm=algorithm, threads=threads,
                                                    check_finite=check_finite)
            raise NotImplementedError("bppsa.scan: sparse CSR elements cannot be recorded by torch.export or run on "
                                      "fake tensors; give dense elements, or call bppsa.scan outside the export")
        outs = _operator_scan(tensors, g_last, algorithm, threads, check_finite)
        return torch.stack(list(outs)) if stacked else list(outs)
    _check_memory(elements, g_last)
    g = g_last.contiguous()
    if torch.is_grad_enabled() and (g.requires_grad or any(t.requires_grad for t in tensors)):
        outs = _ScanFunction.apply(elements, (algorithm, threads, check_finite), g, *tensors)
    else:
        outs = _run(elements, g, None, False, algorithm, threads, check_finite)
    return torch.stack(list(outs)) if stacked else list(outs)


# bppsa::affine_scan, the scan as a PyTorch custom operator (the layer's operators are in _ops.py): what
# torch.compile and torch.export record; its backward formula is the scan again, as _ScanFunction's.
def _scan_dims(elements, g, transpose):
    return [g.shape[1]] + [e.shape[-1] if transpose else e.shape[-2] for e in elements]


def _affine_scan_impl(elements, g, injections, transpose, algorithm, threads, check_finite):
    wrapped = [_Element(i, t, g.shape[0]) for i, t in enumerate(elements)]
    _check_memory(wrapped, g)
    injections = [t.contiguous() for t in injections] if injections else None
    return _run(wrapped, g.contiguous(), injections, transpose, algorithm, _ops.decode_threads(threads), check_finite)


def _affine_scan_fake(elements, g, injections, transpose, algorithm, threads, check_finite):
    return [g.new_empty((g.shape[0], d)) for d in _scan_dims(elements, g, transpose)]


def _scan_setup(ctx, inputs, output):
    elements, g, injections, transpose, algorithm, threads, check_finite = inputs
    ctx.count = len(elements)
    ctx.plain = not transpose and not injections  # the only form bppsa.scan records for autograd
    ctx.options = (algorithm, threads, check_finite)
    ctx.save_for_backward(*elements, *output)


def _scan_backward_formula(ctx, grads):
    # As _ScanFunction.backward (docs/method.md §1): λ by the scan over the transposed elements in
    # reverse order with the incoming gradients injected, then ∂/∂A_i = λ_i y_(i-1)^T.
    if not ctx.plain:
        _no_double_backward("bppsa.scan")
    n = ctx.count
    saved = ctx.saved_tensors
    elements, ys = saved[:n], saved[n:]
    grads = [torch.zeros_like(y) if g is None else g for g, y in zip(grads, ys)]
    lam = torch.ops.bppsa.affine_scan(list(reversed(elements)), grads[n], list(reversed(grads[:n])), True,
                                      *ctx.options)
    lam = list(reversed(lam))
    needs = ctx.needs_input_grad[0]
    needs = list(needs) if isinstance(needs, (list, tuple)) else [needs] * n
    out = [element_gradient(lam[i], ys[i - 1], e.dim() == 3 and e.shape[0] > 1, e.shape) if needs[i - 1] else None
           for i, e in enumerate(elements, start=1)]
    return out, lam[0], [], None, None, None, None


def _operator_scan(elements, g, algorithm, threads, check_finite):
    """The plain scan s_0 = g, s_i = A_i s_(i-1) of dense elements through the operator."""
    return torch.ops.bppsa.affine_scan(list(elements), g, [], False, algorithm, _ops.encode_threads(threads),
                                       check_finite)


if _ops.AVAILABLE:
    _affine_scan = torch.library.custom_op(
        "bppsa::affine_scan", _affine_scan_impl, mutates_args=(),
        schema="(Tensor[] elements, Tensor g, Tensor[] injections, bool transpose, str algorithm, int threads, "
               "bool check_finite) -> Tensor[]")
    _affine_scan.register_fake(_affine_scan_fake)
    _affine_scan.register_autograd(_scan_backward_formula, setup_context=_scan_setup)
