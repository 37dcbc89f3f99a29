#!/usr/bin/env python3
"""Writes the hand-made regression inputs of tests/fuzz_regressions/ (the ones found by reading
the parsers rather than by libFuzzer; see the README's Fuzzing paragraph): scripts/python.sh tests/fuzz_regressions/craft.py"""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEPARATOR = b"\n--bppsa-fuzz-next-file--\n"  # fuzz/targets.hpp kSeparator


def put(target, name, data, expect):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    with open(os.path.join(HERE, target, name), "wb") as f:
        f.write(data)
    with open(os.path.join(HERE, target, name + ".expect"), "w") as f:
        f.write(expect + "\n")


def safetensors(tensors, metadata=None, raw_header=None):
    """tensors: {name: (dtype, shape, bytes)} -> the file (header built as the format says)."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(*values):
    return struct.pack("<%df" % len(values), *values)


DEPTH = 32000  # deep enough to overflow the stack of a recursive dump in the ASan build

# A shape nested 32,000 lists deep: the error message dumped it recursively (stack overflow).
put("safetensors", "deep_nested_shape.safetensors",
    safetensors({}, raw_header=b'{"t":{"dtype":"F32","shape":' + b"[" * DEPTH + b"]" * DEPTH +
                b',"data_offsets":[0,0]}}'),
    "shape (a nested JSON array) is not a list of non-negative integers")



def idx(dims, data=b""):
    """An IDX file of unsigned bytes: 00 00 08 <ndims>, the big-endian sizes, the data."""
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data


# Headers whose claim no file backs: 2^31 x 2^31 x 2^31 bytes in a 40-byte file, and 2^32 - 1 squared
# x 28 behind a few bytes of gzip. Refused from the sizes alone, before anything is allocated.
put("idx", "claims_2e93_bytes.idx3-ubyte", idx([1 << 31] * 3, b"\0" * 24),
    "is truncated: its header declares 2147483648 × 2147483648 × 2147483648 = 9.9e+27 bytes of data but only 24 "
    "follow it")
put("idx", "claims_5e20_bytes.idx3-ubyte.gz", gzip.compress(idx([(1 << 32) - 1, (1 << 32) - 1, 28], b"\0" * 64),
                                                          mtime=0),
    "bytes of gzip can inflate to (deflate compresses at most 1032:1)")
# A zip bomb: 10 labels declared, 16 MiB of zeros behind them in 16 KiB of gzip. Inflating stops
# after the 10.
put("idx", "zip_bomb.idx1-ubyte.gz", gzip.compress(idx([10], bytes(16 << 20)), 9, mtime=0),
    "inflates to more than its header declares (10 = 10 bytes of data after the header)")

# A FLAC stream whose STREAMINFO claims 2^36 - 1 samples (it holds 400): read_audio sized its
# buffer from the claim (256 GiB: std::bad_alloc).
seed = open(os.path.join(HERE, "..", "..", "fuzz", "corpus", "wav", "flac.wav"), "rb").read()
info = bytearray(seed[8:8 + 34])
bits = int.from_bytes(info, "big")
shift = 34 * 8 - 108 - 36
bits = (bits & ~(((1 << 36) - 1) << shift)) | (((1 << 36) - 1) << shift)
put("wav", "flac_claims_2e36_frames.wav", seed[:8] + bits.to_bytes(34, "big") + seed[8 + 34:],
    "is truncated: its header announces 68719476735 frames but only 400 could be read")

# A convolution of 2^24 channels with a 2^24 x 2^24 kernel, padded by 2^24: 2^72 weights; the layer was
# allocated (std::bad_alloc) before anything checked its size.
put("arch", "huge_conv.txt", b"conv:16777216:16777216:1:16777216,flatten,linear:10", "")
# 100 convolutions padded by 2^24 grow the activation to 2 x (100 * 2^25)^2 elements: C*H*W
# overflowed int64 at flatten (UBSan), long before any allocation.
put("arch", "many_padded_convs.txt", b",".join([b"conv:2:1:1:16777216"] * 100) + b",flatten,linear:2", "")

RNN = {"bppsa.model": "rnn", "bppsa.epoch": "1", "bppsa.step": "3"}

# An RNN checkpoint whose head.weight is [2^40, 0] (0 bytes) and weight_hh_l0 [0, 0]: the
# config said 2^40 classes and the model allocated them (std::bad_alloc).
put("checkpoint", "rnn_classes_without_bytes.safetensors",
    safetensors({"rnn.weight_ih_l0": ("F32", [2, 1], f32(0.1, 0.2)), "rnn.weight_hh_l0": ("F32", [0, 0], b""),
                 "rnn.bias_ih_l0": ("F32", [2], f32(0, 0)), "rnn.bias_hh_l0": ("F32", [2], f32(0, 0)),
                 "head.weight": ("F32", [1 << 40, 0], b""), "head.bias": ("F32", [0], b"")}, RNN),
    "tensor 'rnn.weight_hh_l0' in fuzz.safetensors has shape [0, 0], expected [2, 2]")

# A GRU checkpoint whose weight_hh_l0 is [0, 2^62]: 3 * 2^62 overflowed int64 (UBSan).
put("checkpoint", "gru_weight_hh_overflow.safetensors",
    safetensors({"rnn.weight_ih_l0": ("F32", [6, 1], f32(*[0.1] * 6)),
                 "rnn.weight_hh_l0": ("F32", [0, 1 << 62], b"")}, dict(RNN, **{"bppsa.model": "gru"})),
    "tensor 'rnn.weight_hh_l0' in fuzz.safetensors has shape [0, 4611686018427387904], expected [6, 2]")


def rnn_weights(metadata):
    return safetensors({"rnn.weight_ih_l0": ("F32", [2, 1], f32(0.1, 0.2)),
                        "rnn.weight_hh_l0": ("F32", [2, 2], f32(0.3, 0.4, 0.5, 0.6)),
                        "rnn.bias_ih_l0": ("F32", [2], f32(0, 0)), "rnn.bias_hh_l0": ("F32", [2], f32(0, 0)),
                        "head.weight": ("F32", [2, 2], f32(1, 2, 3, 4)), "head.bias": ("F32", [2], f32(0, 0))},
                       metadata)


def adam(step, first=0.5):
    names = ["rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0", "rnn.bias_hh_l0", "head.weight", "head.bias"]
    shapes = [[2, 1], [2, 2], [2], [2], [2, 2], [2]]
    t = {}
    for n, s in zip(names, shapes):
        count = 1
        for e in s:
            count *= e
        t[n + ".exp_avg"] = ("F64", s, struct.pack("<%dd" % count, *([first] + [0.25] * (count - 1))))
        t[n + ".exp_avg_sq"] = ("F64", s, struct.pack("<%dd" % count, *([0.125] * count)))
    return safetensors(t, {"optimizer": "adam", "step": step})


# `bppsa train --resume` added 1 to the epoch: 2^63 - 1 + 1 overflowed int64.
put("checkpoint", "epoch_int64_max.safetensors", rnn_weights(dict(RNN, **{"bppsa.epoch": "9223372036854775807"})),
    "metadata 'bppsa.epoch' = '9223372036854775807' is not a whole number in [0, 2^53]")
# The optimizer's step count 2^63 - 1: its next step overflowed int64 (UBSan).
put("checkpoint", "optimizer_step_int64_max.safetensors",
    rnn_weights(RNN) + SEPARATOR + adam("9223372036854775807"),
    "metadata 'step' = '9223372036854775807' is not a whole number in [0, 2^53]")
# Adam's moments with a NaN: loaded as they were, the first step made every weight NaN.
put("checkpoint", "optimizer_nan_moment.safetensors", rnn_weights(RNN) + SEPARATOR + adam("3", float("nan")),
    "tensor 'rnn.weight_ih_l0.exp_avg' in fuzz.optim.safetensors holds NaN/Inf; the optimizer state is corrupt")
