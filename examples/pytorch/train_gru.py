#!/usr/bin/env python3
"""A plain PyTorch training script: a GRU reads Fashion-MNIST images row by row (T = 28) and
classifies them (the official split: 60,000 training images, 10,000 test). Change its import line from

    from torch import nn

to

    from bppsa import nn

and its GRU's backward pass through time becomes a BPPSA scan; nothing else changes (the rest
of torch.nn — Linear, CrossEntropyLoss — comes through bppsa.nn unchanged). Prints one JSON line
per logged step: {"step", "loss"} and a final {"test_accuracy"}.

    scripts/python.sh examples/pytorch/train_gru.py [--data-dir /usr/share/datasets/fashion-mnist] [--steps 300] [--batch 32]

--data-dir is any folder of MNIST-format IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte,
t10k-…, gzip-compressed or not): Debian's dataset-fashion-mnist by default, or MNIST itself.
"""
import argparse
import gzip
import json
import os
import struct
import time

import torch
from torch import nn


def read_idx(path):
    """An IDX file of unsigned bytes (magic 0 0 8 ndims, big-endian dims), gzip-compressed or not."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08":
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndims = raw[3]
    dims = struct.unpack(f">{ndims}I", raw[4:4 + 4 * ndims])
    data = torch.frombuffer(bytearray(raw[4 + 4 * ndims:]), dtype=torch.uint8)
    return data.view(*dims)


def idx_file(data_dir, name):
    for candidate in (name, name + ".gz"):
        if os.path.exists(os.path.join(data_dir, candidate)):
            return os.path.join(data_dir, candidate)
    return None


def load_split(data_dir, prefix):
    """Images as floats in [0, 1] (N × 28 × 28) and labels, of the train or t10k files."""
    x = read_idx(idx_file(data_dir, f"{prefix}-images-idx3-ubyte")).float() / 255
    y = read_idx(idx_file(data_dir, f"{prefix}-labels-idx1-ubyte")).long()
    return x, y


class RowClassifier(nn.Module):
    def __init__(self, hidden=64, layers=1):
        super().__init__()
        self.rnn = nn.GRU(28, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    names = [f"{s}-{k}-idx{d}-ubyte" for s in ("train", "t10k") for k, d in (("images", 3), ("labels", 1))]
    missing = [n for n in names if idx_file(args.data_dir, n) is None]
    if missing:
        p.error(f"{args.data_dir} lacks {', '.join(missing)} (or .gz): install Debian's dataset-fashion-mnist "
                "(scripts/setup.sh does) or pass --data-dir with MNIST-format IDX files")

    x_train, y_train = load_split(args.data_dir, "train")
    x_test, y_test = load_split(args.data_dir, "t10k")
    torch.manual_seed(args.seed)
    model = RowClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, x_train.shape[0], (args.batch,))
        loss = loss_fn(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % args.log_every == 0 or step == 1:
            print(json.dumps({"step": step, "loss": loss.item(), "seconds": time.perf_counter() - start}), flush=True)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(json.dumps({"test_accuracy": accuracy, "seconds": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
