#!/usr/bin/env bash
# Regenerates every CPU figure of the paper reproduction (bench/paper.py, then
# bench/plot_paper.py): ours and PyTorch's numbers from the same run, the machine in every file.
#   scripts/bench_paper.sh            full run (about 10 minutes on the 2-core dev VM):
#                                     bench/results/cpu/{rnn_T,rnn_B,curves,gru,simulate}.{json,csv} + *.png
#   scripts/bench_paper.sh --quick    smoke test (about a minute) into build/bench-quick; not for figures
# Other arguments go to bench/paper.py (--threads N, --reps N, --only SECTION…, --irmas-dir DIR, --out DIR).
# Run on a quiet machine: any other busy process stalls the OpenMP barriers of both sides.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/python_env.sh
. scripts/lib/python_env.sh
py=$(bppsa_python)
build=${BUILD_DIR:-build}
out=bench/results/cpu
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --quick) out=$build/bench-quick ;;
    --out) out=${args[i + 1]} ;;
  esac
done
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target bppsa_cli bench_paper
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$py" bench/paper.py --build "$build" --out "$out" "$@"
"$py" bench/plot_paper.py "$out"
