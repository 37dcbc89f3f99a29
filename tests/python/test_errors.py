# What bppsa.nn refuses, with an exception that names the problem (never a crash).
import re

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import bppsa


def test_constructor_errors():
    for bad in (8, 9, -1):  # torch's own checks and messages for proj_size
        with pytest.raises(ValueError) as want:
            torch.nn.LSTM(3, 8, proj_size=bad)
        with pytest.raises(ValueError, match=re.escape(str(want.value))):
            bppsa.nn.LSTM(3, 8, proj_size=bad)
    with pytest.raises(ValueError, match="dropout"):
        bppsa.nn.GRU(3, 8, dropout=1.5)
    with pytest.raises(ValueError) as want:  # torch's own check and message
        torch.nn.GRU(3, 0)
    with pytest.raises(ValueError, match=re.escape(str(want.value))):
        bppsa.nn.GRU(3, 0)
    with pytest.raises(TypeError) as want:  # torch's own check and message
        torch.nn.GRU(3, 4, num_layers=1.5)
    with pytest.raises(TypeError, match=re.escape(str(want.value))):
        bppsa.nn.GRU(3, 4, num_layers=1.5)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'sigmoid'"):
        bppsa.nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="unknown backward method 'scan'"):
        bppsa.nn.RNN(3, 4, backward="scan")
    with pytest.raises(ValueError, match="threads"):
        bppsa.nn.RNN(3, 4, threads=-2)
    with pytest.raises(NotImplementedError, match="float16"):
        bppsa.nn.GRU(3, 4, dtype=torch.float16)
    with pytest.raises(NotImplementedError, match="device mps is not supported"):  # refused before torch allocates
        bppsa.nn.GRU(3, 4, device="mps")
    with pytest.warns(UserWarning, match="dropout"):
        bppsa.nn.GRU(3, 4, dropout=0.5)


def test_forward_errors():
    m = bppsa.nn.GRU(3, 4, num_layers=2)
    packed = pack_padded_sequence(torch.randn(5, 2, 5), torch.tensor([5, 3]))  # torch's checks, as unpacked
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 3, got 5"):
        m(packed)
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(2, 2, 4\), got \[2, 3, 4\]"):
        m(pack_padded_sequence(torch.randn(5, 2, 3), torch.tensor([5, 3])), torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D, got 4D"):
        m(torch.randn(2, 2, 2, 3))
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 3, got 5"):
        m(torch.randn(4, 2, 5))
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(2, 2, 4\), got \[1, 2, 4\]"):
        m(torch.randn(4, 2, 3), torch.randn(1, 2, 4))
    with pytest.raises(NotImplementedError, match="torch.float16"):
        m(torch.randn(4, 2, 3).half())
    with pytest.raises(NotImplementedError, match="torch.int64"):
        m(torch.ones(4, 2, 3, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="input is torch.float64 but the parameters are torch.float32"):
        m(torch.randn(4, 2, 3, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match="meta"):  # any non-CPU device, CUDA included
        m(torch.empty(4, 2, 3, device="meta"))
    with pytest.raises(RuntimeError, match="hx must be a tuple"):
        bppsa.nn.LSTM(3, 4)(torch.randn(4, 2, 3), torch.randn(1, 2, 4))
    with pytest.raises(RuntimeError, match="hx must be a Tensor"):
        m(torch.randn(4, 2, 3), (torch.randn(2, 2, 4), torch.randn(2, 2, 4)))
    with pytest.raises(RuntimeError, match="hx should also be 2-D"):
        m(torch.randn(4, 3), torch.randn(2, 1, 4))
    with pytest.raises(RuntimeError, match="Expected sequence length to be larger than 0"):  # as torch
        m(torch.randn(0, 2, 3))


@pytest.mark.parametrize("cls", ["RNN", "GRU", "LSTM"])
def test_dtype_errors_are_torchs_type(cls):
    """An input dtype the module does not take raises an exception of the type torch.nn raises for
    the same call (ValueError: the input is not the weights' dtype), batched, unbatched or packed,
    with bppsa's own message."""
    for module_dtype, dtype in [(torch.float32, torch.float16), (torch.float32, torch.bfloat16),
                                (torch.float32, torch.int64), (torch.float32, torch.complex64),
                                (torch.float32, torch.float64), (torch.float64, torch.float32)]:
        x = torch.zeros(2, 5, 3, dtype=dtype)
        for form, inp in [("batched", x), ("unbatched", x[0]),
                          ("packed", pack_padded_sequence(x, torch.tensor([5, 3]), batch_first=True))]:
            with pytest.raises(Exception) as want:
                getattr(torch.nn, cls)(3, 4, batch_first=True, dtype=module_dtype)(inp)
            with pytest.raises(Exception) as got:
                getattr(bppsa.nn, cls)(3, 4, batch_first=True, dtype=module_dtype)(inp)
            assert isinstance(got.value, type(want.value)), \
                f"{form} {dtype} into {module_dtype}: torch.nn raises {type(want.value).__name__}, " \
                f"bppsa.nn {type(got.value).__name__}: {got.value}"
            assert "bppsa" in str(got.value)


def test_non_finite_values_are_reported_when_checked():
    m = bppsa.nn.RNN(3, 4, backward="blelloch", check_finite=True)
    x = torch.randn(6, 2, 3)
    out, _ = m(x)
    bad = torch.full_like(out, float("nan"))
    with pytest.raises(FloatingPointError, match="NaN"):
        torch.autograd.backward(out, bad)


def test_non_contiguous_inputs_and_gradients_are_fine():
    torch.manual_seed(0)
    ref = torch.nn.GRU(3, 4, batch_first=True)
    torch.manual_seed(0)
    ours = bppsa.nn.GRU(3, 4, batch_first=True, backward="blelloch")
    x = torch.randn(3, 6, 6)[:, :, ::2].detach().requires_grad_(True)  # a strided view
    assert not x.is_contiguous()
    go = torch.randn(6, 3, 4).transpose(0, 1)  # a non-contiguous output gradient
    (ga,) = torch.autograd.grad(ref(x)[0], [x], go)
    (gb,) = torch.autograd.grad(ours(x)[0], [x], go)
    assert torch.allclose(ga, gb, rtol=1e-5, atol=1e-6)
