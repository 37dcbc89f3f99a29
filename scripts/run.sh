#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run the main job: train the paper's RNN (spec §5: tanh RNN,
# hidden 20, Linear 20→10, T = 1000, batch 16, Adam, seed 4202) on the bitstream task with
# BPPSA (Blelloch scan) for one epoch over the 32,000 training sequences, evaluate on the
# 18,000 test sequences, then check one batch's BPPSA gradients against sequential BP and
# print the largest relative error. Extra arguments go to `bppsa train`, e.g.
#   scripts/run.sh --epochs 5 --lr 1e-3 --save rnn.safetensors
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/bppsa train --model rnn --hidden 20 --data bitstream --steps 1000 --batch 16 --backward blelloch \
  --epochs 1 --lr 3e-5 --seed 4202 --check "$@"
