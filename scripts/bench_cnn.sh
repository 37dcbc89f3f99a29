#!/usr/bin/env bash
# The CNN benchmark (bench/cnn_prune.py, then bench/plot_cnn.py): the paper's Table 1, its Fig. 10
# (scan FLOPs per product vs BP), and retraining a pruned VGG-11-shaped network on Fashion-MNIST with BPPSA,
# BP and PyTorch at 0 / 90 / 99 % sparsity.
#   scripts/bench_cnn.sh            full run (about 15 minutes on the 2-core dev VM) into bench/results/cpu/cnn
#   scripts/bench_cnn.sh --quick    smoke test (about 30 s) into build/bench-cnn-quick; not for figures
# Other arguments go to bench/cnn_prune.py (--threads N, --arch A, --epochs N, --levels 0,0.9,0.99, --out DIR).
# Run on a quiet machine: any other busy process stalls the OpenMP barriers of both sides.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/python_env.sh
. scripts/lib/python_env.sh
py=$(bppsa_python)
build=${BUILD_DIR:-build}
out=bench/results/cpu/cnn
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --quick) out=$build/bench-cnn-quick ;;
    --out) out=${args[i + 1]} ;;
  esac
done
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target bppsa_cli bench_cnn
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$py" bench/cnn_prune.py --build "$build" --out "$out" "$@"
"$py" bench/plot_cnn.py "$out"
