#!/usr/bin/env bash
# The CPU scan engine at 1, 2, 4, 8 and 16 threads (capped at the cores present) against
# `bppsa simulate`'s predictions (issue 14, item 9): written for the GPU machine's 16 cores, runs
# anywhere (here: 1 and 2 threads).
#   bench/cpu_scaling/run.sh OUT_DIR [--quick]
# Chains (batch 1, N = 10^5, diagonal 256 and dense 20) with linear (BP), blelloch and hybrid, and
# the paper's RNN (H 20, T 1000) at batch 1 and 16 with bp, blelloch and hybrid; then simulate's
# prediction for each. Writes OUT_DIR/cpu_scaling.{json,md} and, where matplotlib is, .png
# (bench/cpu_scaling/cpu_scaling.py and plot_cpu_scaling.py say what exactly). Full: about 3 minutes on
# 16 cores; --quick (N 10^4, T 300, 3 repetitions): well under a minute.
# Environment: BPPSA_BUILD_DIR (build; scripts/gpu_check.sh passes its own), BPPSA_PYTHON (the project's environment's python),
# BPPSA_CPU_SCALING_BUDGET (seconds for the measurements: 150, quick 45; what does not fit is
# skipped and listed, not failed; scripts/gpu_check.sh sets it from the time its run has left),
# BPPSA_BENCH_PREBUILT (1: scripts/gpu_check.sh built the programs; neither configure nor build).
# Exit 0 when everything that ran passed, 1 otherwise, 2 on bad arguments.
# Run on a quiet machine: any other busy process stalls the OpenMP barriers.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

# shellcheck source=scripts/lib/gpu_bench_common.sh
. scripts/lib/gpu_bench_common.sh
gpu_bench_args bench_gpu_cpu_scaling "$@"
budget=${BPPSA_CPU_SCALING_BUDGET:-$([ ${#quick[@]} = 1 ] && echo 45 || echo 150)}
export OMP_WAIT_POLICY=PASSIVE

# The programs (nothing to do when scripts/gpu_check.sh built them already; no second configure of
# a build folder that has BPPSA_BUILD_BENCH on).
if ! bench_build "$out/cpu_scaling_build.log" bench_paper bench_cpu_scaling ||
  [ ! -x "$build/bench_paper" ] || [ ! -x "$build/bench_cpu_scaling" ]; then
  echo "bench_gpu_cpu_scaling: building bench_paper and bench_cpu_scaling in $build failed:" >&2
  tail -n 20 "$out/cpu_scaling_build.log" >&2
  exit 1
fi

echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores" >&2
rc=0
timeout --kill-after=10 $((budget + 30)) "$py" bench/cpu_scaling/cpu_scaling.py --build "$build" --out "$out" \
  --budget "$budget" "${quick[@]}" || rc=$?
case $rc in
  0) ;;
  124 | 137) echo "bench_gpu_cpu_scaling: cpu_scaling.py timed out (what it measured is in $out)" >&2 ;;
  *) echo "bench_gpu_cpu_scaling: cpu_scaling.py failed (exit $rc)" >&2 ;;
esac
if [ -f "$out/cpu_scaling.json" ]; then
  timeout 120 "$py" bench/cpu_scaling/plot_cpu_scaling.py "$out" || echo "bench_gpu_cpu_scaling: the figure failed" >&2
  cat "$out/cpu_scaling.md"
fi
[ "$rc" = 0 ] || exit 1
