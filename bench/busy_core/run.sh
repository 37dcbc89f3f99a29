#!/usr/bin/env bash
# The CPU engine's backward pass (the paper's RNN, H 20) idle and with one core kept busy by another
# process, interleaved in one run (bench/busy_core/busy_core.py; docs/busy_core.md).
#   bench/busy_core/run.sh            full run into bench/results/cpu/busy/{busy.json,busy.md}
#   bench/busy_core/run.sh --quick    smoke test (CI; two configurations, one round, seconds) into
#                                     build/busy-quick; not for figures
# Other arguments go to bench/busy_core/busy_core.py (--baseline OTHER_BUILD, --rounds N, --out DIR).
# Environment: BUILD_DIR (build), BPPSA_PYTHON (the project's environment's python),
# BPPSA_BENCH_PREBUILT (1: bench_paper is in BUILD_DIR already; neither configure nor build).
# Needs 2 cores or more; run on an otherwise quiet machine (the busy process is the only load wanted).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_out bench/results/cpu/busy busy-quick "$@"
if [ "${BPPSA_BENCH_PREBUILT:-0}" != 1 ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_BENCH=ON >/dev/null
  cmake --build "$build" -j"$(nproc)" --target bench_paper
fi
bench_load
"$py" bench/busy_core/busy_core.py --build "$build" --out "$out" "$@"
