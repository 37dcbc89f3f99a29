#!/usr/bin/env bash
# Builds bench_scan (Release) and runs the scan benchmark; writes
#   bench/results/scan_cpu.json  (Google Benchmark JSON, machine-readable)
#   bench/results/scan_cpu.md    (Markdown summary: medians and speedups over linear)
# Extra arguments go to bench_scan, e.g.
#   bench/scan/run.sh --benchmark_filter='dense_d20_n2000'     # some cases only
#   bench/scan/run.sh --bppsa_tiny                              # smoke run, seconds
#   bench/scan/run.sh --benchmark_repetitions=7
# Environment: BUILD_DIR (default build), RESULTS (default bench/results/scan_cpu).
# Run on a quiet machine: with 2 threads on 2 cores, any other busy process stalls the
# OpenMP barriers by a scheduler time slice (milliseconds) and ruins the 2-thread numbers.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh  # py and build
start=$(date +%s)
results=${RESULTS:-bench/results/scan_cpu}

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j2 --target bench_scan

mkdir -p "$(dirname "$results")"
bench_load
"$build/bench_scan" --benchmark_out="$results.json.tmp" --benchmark_out_format=json "$@"
mv "$results.json.tmp" "$results.json"
end=$(date +%s)

cmd="bench/scan/run.sh${*:+ $*}"
"$py" bench/scan/summarize_scan.py "$results.json" --out "$results.md" --command "$cmd" --wall-seconds $((end - start)) \
  --note "bppsa source: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- include src 2>/dev/null || echo ' with uncommitted changes in include/ or src/')" \
  --note "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrote $results.json and $results.md" >&2
