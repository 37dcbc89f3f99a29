#!/usr/bin/env bash
# Fashion-MNIST under its published protocol (60,000 / 10,000), trained with BPPSA, against the
# benchmark table of Fashion-MNIST's own README (bench/fashion_mnist.py): a GRU over rows (hybrid
# scan, with BP beside it), VGG-11 (hybrid scan), and VGG-11 pruned to 90 % and retrained with BPPSA.
#   scripts/bench_fashion_mnist.sh            full run into bench/results/cpu/fashion (hours on 2 cores)
#   scripts/bench_fashion_mnist.sh --quick    smoke test (a minute) into build/bench-fashion-quick; not for figures
# Other arguments go to bench/fashion_mnist.py (--only gru|vgg, --threads N, --gru-hidden H, --vgg-div N, …).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/python_env.sh
. scripts/lib/python_env.sh
py=$(bppsa_python)
build=${BUILD_DIR:-build}
out=bench/results/cpu/fashion
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --quick) out=$build/bench-fashion-quick ;;
    --out) out=${args[i + 1]} ;;
  esac
done
cmake --build "$build" -j"$(nproc)" --target bppsa_cli
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$py" bench/fashion_mnist.py --build "$build" --out "$out" "$@"
