#!/usr/bin/env bash
# torch.nn vs bppsa.nn in one process (bench/pytorch_nn.py), then its figure (bench/plot_pytorch_nn.py).
#   scripts/bench_pytorch.sh            full run (a few minutes on the 2-core dev VM):
#                                       bench/results/cpu/pytorch/{nn.jsonl,nn.md,fig_nn.png}
#   scripts/bench_pytorch.sh --quick    smoke test into build/bench-pytorch-quick; not for figures
# Other arguments go to bench/pytorch_nn.py (--threads N, --reps N, --warmup N, --batch B, --out DIR).
# Needs the Python package built (scripts/setup.sh builds it into build/python).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
out=bench/results/cpu/pytorch
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --quick) out=$build/bench-pytorch-quick ;;
    --out) out=${args[i + 1]} ;;
  esac
done
cmake --build "$build" -j"$(nproc)" --target bppsa_python
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
PYTHONPATH="$build/python" /usr/bin/python3 bench/pytorch_nn.py --out "$out" "$@"
/usr/bin/python3 bench/plot_pytorch_nn.py "$out"
