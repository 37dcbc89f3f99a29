#!/usr/bin/env bash
# Fashion-MNIST under its published protocol (60,000 / 10,000), trained with BPPSA, against the
# benchmark table of Fashion-MNIST's own README (bench/fashion_mnist/fashion_mnist.py): a GRU over rows (hybrid
# scan, with BP beside it), VGG-11 (hybrid scan), and VGG-11 pruned to 90 % and retrained with BPPSA.
#   bench/fashion_mnist/run.sh            full run into bench/results/cpu/fashion (hours on 2 cores)
#   bench/fashion_mnist/run.sh --quick    smoke test (a minute) into build/bench-fashion-quick; not for figures
# Other arguments go to bench/fashion_mnist/fashion_mnist.py (--only gru|vgg, --threads N, --gru-hidden H, --vgg-div N, …).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_out bench/results/cpu/fashion bench-fashion-quick "$@"
cmake --build "$build" -j"$(nproc)" --target bppsa_cli
bench_load
"$py" bench/fashion_mnist/fashion_mnist.py --build "$build" --out "$out" "$@"
