#!/usr/bin/env bash
# Regenerates every CPU figure of the paper reproduction (bench/paper/paper.py, then
# bench/paper/plot_paper.py): ours and PyTorch's numbers from the same run, the machine in every file.
#   bench/paper/run.sh            full run (about 10 minutes on the 2-core dev VM):
#                                     bench/results/cpu/{rnn_T,rnn_B,curves,gru,simulate}.{json,csv} + *.png
#   bench/paper/run.sh --quick    smoke test (about a minute) into build/bench-quick; not for figures
# Other arguments go to bench/paper/paper.py (--threads N, --reps N, --only SECTION…, --irmas-dir DIR, --out DIR).
# Run on a quiet machine: any other busy process stalls the OpenMP barriers of both sides.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_out bench/results/cpu bench-quick "$@"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target bppsa_cli bench_paper
bench_load
"$py" bench/paper/paper.py --build "$build" --out "$out" "$@"
"$py" bench/paper/plot_paper.py "$out"
