"""The PyTorch twin of bppsa's SequenceClassifier (nn.RNN/GRU/LSTM, batch_first, then a
Linear head on the last step), with the same state_dict names: shared by the gradient
cross-check (tests/pytorch) and the benchmark driver (bench/)."""
import torch.nn as nn

CELLS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


class Model(nn.Module):
    def __init__(self, cell, i, h, layers, c, proj=0):
        super().__init__()
        extra = {"proj_size": proj} if proj else {}  # lstm only, as in torch
        self.rnn = CELLS[cell](i, h, layers, batch_first=True, **extra)
        self.head = nn.Linear(proj or h, c)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def _pair(s):
    a, _, b = s.lower().partition("x")
    return (int(a), int(b or a))


def vgg11_arch(divisor=1):
    """VGG-11, CIFAR-10 variant, as bppsa names it (no batch norm): 8 convs 3×3 pad 1 + ReLU,
    5 max-pools 2×2, flatten, Linear to 10; channel widths divided by `divisor`."""
    layers = []
    for c in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        layers += ["maxpool:2:2"] if c == "M" else [f"conv:{max(1, c // divisor)}:3:1:1", "relu"]
    return ",".join(layers + ["flatten", "linear:10"])


def sequential(arch, in_shape):
    """nn.Sequential for a bppsa architecture string (written here independently of bppsa's
    parser): conv:OUT:K:S:P[:D], maxpool:K:S[:P], avgpool:K:S[:P], relu, tanh, flatten,
    linear:OUT, or vgg11 / vgg11/N. in_shape = (C, H, W)."""
    if arch == "vgg11" or arch.startswith("vgg11/"):
        arch = vgg11_arch(int(arch[6:]) if "/" in arch else 1)
    import torch
    mods, shape = [], (1,) + tuple(in_shape)
    for tok in arch.split(","):
        f = tok.strip().split(":")
        if f[0] == "conv":
            d = _pair(f[5]) if len(f) > 5 else (1, 1)
            m = nn.Conv2d(shape[1], int(f[1]), _pair(f[2]), _pair(f[3]), _pair(f[4]), d)
        elif f[0] == "maxpool":
            m = nn.MaxPool2d(_pair(f[1]), _pair(f[2]), _pair(f[3]) if len(f) > 3 else 0)
        elif f[0] == "avgpool":
            m = nn.AvgPool2d(_pair(f[1]), _pair(f[2]), _pair(f[3]) if len(f) > 3 else 0)
        elif f[0] == "relu":
            m = nn.ReLU()
        elif f[0] == "tanh":
            m = nn.Tanh()
        elif f[0] == "flatten":
            m = nn.Flatten()
        elif f[0] == "linear":
            m = nn.Linear(shape[1], int(f[1]))
        else:
            raise ValueError(f"unknown layer {tok}")
        mods.append(m)
        with torch.no_grad():
            shape = tuple(m(torch.zeros(shape)).shape)
    return nn.Sequential(*mods)
