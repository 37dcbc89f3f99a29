#!/usr/bin/env bash
# torch.nn vs bppsa.nn in one process (bench/pytorch_nn.py), then its figure (bench/plot_pytorch_nn.py).
#   scripts/bench_pytorch.sh            full run (a few minutes on the 2-core dev VM):
#                                       bench/results/cpu/pytorch/{nn.jsonl,nn.md,fig_nn.png}
#   scripts/bench_pytorch.sh --quick    smoke test into build/bench-pytorch-quick; not for figures
# Other arguments go to bench/pytorch_nn.py (--threads N, --reps N, --warmup N, --batch B, --out DIR).
# Runs the bppsa package scripts/setup.sh installed (`pip install .`) in the project's Python environment.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/python_env.sh
. scripts/lib/python_env.sh
py=$(bppsa_python)
build=${BUILD_DIR:-build}
out=bench/results/cpu/pytorch
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --quick) out=$build/bench-pytorch-quick ;;
    --out) out=${args[i + 1]} ;;
  esac
done
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$py" bench/pytorch_nn.py --out "$out" "$@"
"$py" bench/plot_pytorch_nn.py "$out"
