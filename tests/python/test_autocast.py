# bppsa.nn under autocast: torch.nn's recurrent layers run in autocast's lower precision and return
# it; bppsa.nn computes in float32 and returns the same dtypes (outputs, h_n, c_n, packed or not),
# with gradients flowing back to float32 parameters. Oracle: torch.nn (its dtypes under autocast,
# and its float32 values rounded to the lower precision).
import pytest
import torch

import bppsa.nn


@pytest.mark.parametrize("name", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("packed", [False, True])
def test_autocast_returns_torch_nn_dtypes_and_float32_values(name, dtype, packed):
    try:
        with torch.autocast("cpu", dtype=dtype):
            pass
    except RuntimeError as e:  # PyTorch < 2.x: CPU autocast takes bfloat16 only
        pytest.skip(f"this PyTorch's CPU autocast refuses {dtype}: {e}")
    torch.manual_seed(0)
    ref = getattr(torch.nn, name)(4, 5, num_layers=2)
    mod = getattr(bppsa.nn, name)(4, 5, num_layers=2)
    mod.load_state_dict(ref.state_dict())
    lin = torch.nn.Linear(3, 4)
    x = torch.randn(7, 3, 3)

    with torch.autocast("cpu", dtype=dtype):
        xi = lin(x).detach()  # what autocast hands the layer: the lower precision
    assert xi.dtype == dtype

    def run(m, inp, autocast):
        with torch.autocast("cpu", dtype=dtype, enabled=autocast):
            if packed:
                inp = torch.nn.utils.rnn.pack_padded_sequence(inp, [7, 5, 2], enforce_sorted=True)
            out, state = m(inp)
        out = out.data if packed else out
        h = state[0] if isinstance(state, tuple) else state
        return out, h, state

    o_ref, h_ref, s_ref = run(ref, xi, True)
    o_mod, h_mod, s_mod = run(mod, xi, True)
    assert o_mod.dtype == o_ref.dtype == dtype and h_mod.dtype == h_ref.dtype
    if name == "LSTM":
        assert s_mod[1].dtype == s_ref[1].dtype
    # Computed in float32: torch.nn's float32 result on the same input, rounded to the lower
    # precision (a value on a rounding boundary may land one unit either side).
    o32, h32, _ = run(ref, xi.float(), False)
    eps = torch.finfo(dtype).eps
    assert ((o_mod.float() - o32).abs() <= eps * o32.abs() + 1e-6).all()
    assert ((h_mod.float() - h32).abs() <= eps * h32.abs() + 1e-6).all()
    # Gradients reach the float32 parameters, equal to torch.nn's float32 ones through the casts.
    mod.zero_grad()
    ref.zero_grad()
    o_mod.float().sum().backward()
    o32.to(dtype).float().sum().backward()
    for p, q in zip(mod.parameters(), ref.parameters()):
        assert p.grad.dtype == torch.float32
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def test_float64_modules_are_left_to_autocast():
    # autocast converts float32 only: a float64 module sees float64 and returns it, as torch.nn.
    m = bppsa.nn.GRU(3, 4, dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, h = m(torch.randn(5, 2, 3, dtype=torch.float64))
    assert out.dtype == torch.float64 and h.dtype == torch.float64
