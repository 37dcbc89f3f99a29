"""A tiny MNIST-format data set for the CLI checks: the four IDX files (LeCun's format: 00 00 08
<ndims>, big-endian uint32 sizes, unsigned bytes) with random 28×28 images and labels 0..9, so
that `--data mnist*` runs without Debian's dataset-fashion-mnist."""
import os
import struct

import numpy as np


def write_idx(path, array):
    """`array` (integers 0..255) as an IDX file of unsigned bytes."""
    array = np.asarray(array)
    header = bytes([0, 0, 8, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    with open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def fake_mnist(folder, train=96, test=24, seed=0):
    """train-*/t10k-* images (train × 28 × 28, test × 28 × 28) and labels in `folder`."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    for prefix, n in (("train", train), ("t10k", test)):
        write_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte"), rng.integers(0, 256, size=(n, 28, 28)))
        write_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte"), np.arange(n) % 10)
    return folder
