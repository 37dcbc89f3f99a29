#!/usr/bin/env bash
# The CNN benchmark (bench/cnn/cnn.py, then bench/cnn/plot_cnn.py): the paper's Table 1, its Fig. 10
# (scan FLOPs per product vs BP), and retraining a pruned VGG-11-shaped network on Fashion-MNIST with BPPSA,
# BP and PyTorch at 0 / 90 / 99 % sparsity.
#   bench/cnn/run.sh            full run (about 15 minutes on the 2-core dev VM) into bench/results/cpu/cnn
#   bench/cnn/run.sh --quick    smoke test (about 30 s) into build/bench-cnn-quick; not for figures
# Other arguments go to bench/cnn/cnn.py (--threads N, --arch A, --epochs N, --levels 0,0.9,0.99, --out DIR).
# Run on a quiet machine: any other busy process stalls the OpenMP barriers of both sides.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_out bench/results/cpu/cnn bench-cnn-quick "$@"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target bppsa_cli bench_cnn
bench_load
"$py" bench/cnn/cnn.py --build "$build" --out "$out" "$@"
"$py" bench/cnn/plot_cnn.py "$out"
