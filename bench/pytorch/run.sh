#!/usr/bin/env bash
# torch.nn vs bppsa.nn in one process (bench/pytorch/pytorch.py), then its figure (bench/pytorch/plot_pytorch.py).
#   bench/pytorch/run.sh            full run (a few minutes on the 2-core dev VM):
#                                       bench/results/cpu/pytorch/{nn.jsonl,nn.md,fig_nn.png}
#   bench/pytorch/run.sh --quick    smoke test into build/bench-pytorch-quick; not for figures
# Other arguments go to bench/pytorch/pytorch.py (--threads N, --reps N, --warmup N, --batch B, --out DIR).
# Runs the bppsa package scripts/setup.sh installed (`pip install .`) in the project's Python environment.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_out bench/results/cpu/pytorch bench-pytorch-quick "$@"
bench_load
"$py" bench/pytorch/pytorch.py --out "$out" "$@"
"$py" bench/pytorch/plot_pytorch.py "$out"
