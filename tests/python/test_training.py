# Training with bppsa.nn inside ordinary PyTorch code: a model mixing torch layers and a bppsa
# layer follows the all-torch model's loss curve; the example script changed only in its import
# line trains to the same loss curve on real data (Debian's Fashion-MNIST).
import json
import os
import subprocess
import sys

import pytest
import torch

import bppsa

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FASHION_MNIST = os.environ.get("BPPSA_MNIST") or "/usr/share/datasets/fashion-mnist"


class Mixed(torch.nn.Module):
    """Linear → dropout-free recurrent layer(s) → LayerNorm → Linear, with either module family."""

    def __init__(self, rnn):
        super().__init__()
        self.inp = torch.nn.Linear(3, 8)
        self.rnn = rnn
        self.norm = torch.nn.LayerNorm(2 * 12)
        self.head = torch.nn.Linear(2 * 12, 4)

    def forward(self, x):
        out, _ = self.rnn(torch.tanh(self.inp(x)))
        return self.head(self.norm(out[:, -1]))


@pytest.mark.parametrize("kind,method", [("GRU", "blelloch"), ("LSTM", "hybrid"), ("RNN", "auto")])
def test_mixed_model_same_loss_curve(kind, method):
    def build(family, **kw):
        torch.manual_seed(42)
        rnn = getattr(family, kind)(8, 12, num_layers=2, batch_first=True, bidirectional=True, **kw)
        return Mixed(rnn)

    ref, ours = build(torch.nn), build(bppsa.nn, backward=method)
    ours.load_state_dict(ref.state_dict())
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(16, 40, 3, generator=gen), torch.randint(0, 4, (16,), generator=gen)) for _ in range(50)]
    curves = []
    for model in (ref, ours):
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        curve = []
        for x, y in data:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            curve.append(loss.item())
        curves.append(curve)
    assert curves[0][-1] < curves[0][0], "the model learns"
    for step, (a, b) in enumerate(zip(*curves)):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), f"step {step}: torch {a}, bppsa {b}"
    for (n, p), q in zip(ref.named_parameters(), ours.parameters()):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-5), n


def _run_example(source, tmp_path, name, steps):
    script = tmp_path / name
    script.write_text(source)
    # The child finds bppsa where this process did (installed, or PYTHONPATH of a build tree).
    res = subprocess.run([sys.executable, str(script), "--data-dir", FASHION_MNIST, "--steps", str(steps), "--log-every", "5"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST),
                    reason=f"no Fashion-MNIST at {FASHION_MNIST} (Debian's dataset-fashion-mnist; scripts/setup.sh installs it)")
def test_example_script_changed_only_in_its_import_line(tmp_path):
    path = os.path.join(ROOT, "examples", "pytorch", "train_gru.py")
    with open(path) as f:
        source = f.read()
    lines = source.splitlines(keepends=True)
    assert lines.count("from torch import nn\n") == 1
    swapped = "".join("from bppsa import nn\n" if line == "from torch import nn\n" else line for line in lines)
    changed = [(a, b) for a, b in zip(source.splitlines(), swapped.splitlines()) if a != b]
    assert changed == [("from torch import nn", "from bppsa import nn")]
    steps = 60
    torch_log = _run_example(source, tmp_path, "train_torch.py", steps)
    bppsa_log = _run_example(swapped, tmp_path, "train_bppsa.py", steps)
    t_losses = [r["loss"] for r in torch_log if "loss" in r]
    b_losses = [r["loss"] for r in bppsa_log if "loss" in r]
    assert len(t_losses) == len(b_losses) == steps // 5 + 1
    assert t_losses[-1] < 0.75 * t_losses[0], "the example learns"
    for step, (a, b) in enumerate(zip(t_losses, b_losses)):
        assert abs(a - b) <= 1e-3 * max(1.0, abs(a)), f"log line {step}: torch {a}, bppsa {b}"
    t_acc, b_acc = torch_log[-1]["test_accuracy"], bppsa_log[-1]["test_accuracy"]
    assert abs(t_acc - b_acc) <= 0.01
