#!/usr/bin/env bash
# The GPU benchmark (issue 14, item 8): bppsa's GPU training step against torch.nn.RNN/GRU/LSTM on
# CUDA (cuDNN), same GPU, same run, same weights and data; the paper's sweeps (RNN H 20 against T
# at batch 16 and against the batch at T 1000, the GRU s/m/l shapes, H 64 and 256, an LSTM), the
# fused scan against the FP32 roofline. scripts/gpu_check.sh runs it on the GPU machine.
#   bench/gpu/run.sh OUT_DIR [--quick]
# Writes OUT_DIR/gpu_bench.{json,md} and, where matplotlib is, gpu_*.png (bench/gpu/gpu.py
# and plot_gpu.py say exactly what). Full: about 4 minutes; --quick: a handful of points, about a
# minute. `scripts/python.sh bench/gpu/keep_results.py OUT_DIR` copies a run into bench/results/gpu/<gpu-name>/.
# Environment: BPPSA_BUILD_DIR (build; scripts/gpu_check.sh passes its own), BPPSA_PYTHON (the project's
# environment's python, with torch), BPPSA_GPU_BENCH_BUDGET (seconds for the measurements: 180, quick 60; what does not fit is
# skipped and listed; scripts/gpu_check.sh sets it from the time its run has left),
# BPPSA_GPU_BENCH_DEVICE (cuda; cpu runs both sides on the CPU, to test the script where there is
# no GPU), BPPSA_BENCH_PREBUILT (1: scripts/gpu_check.sh built the programs; neither configure nor
# build here).
# Exit: 0 every part ran and passed; 77 no CUDA device (nothing measured); 3 a first loss differs
# from PyTorch's; 1 anything else failed (what ran is still written); 2 bad arguments.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

# shellcheck source=scripts/lib/gpu_bench_common.sh
. scripts/lib/gpu_bench_common.sh
gpu_bench_args bench_gpu "$@"
budget=${BPPSA_GPU_BENCH_BUDGET:-$([ ${#quick[@]} = 1 ] && echo 60 || echo 180)}
device=${BPPSA_GPU_BENCH_DEVICE:-cuda}

# bppsa's programs, bench_gpu_step and bench_fused_scan (nothing to do when scripts/gpu_check.sh
# built them; the configure is skipped when the build folder has BPPSA_BUILD_BENCH on already). One
# that does not build is left out (PyTorch's side still runs, and the report says why).
log=$out/gpu_bench_build.log
: >"$log"
if [ "${BPPSA_BENCH_PREBUILT:-0}" = 1 ]; then
  bench_build "$log"
elif ! bench_configure "$log"; then
  echo "bench_gpu: configuring $build with BPPSA_BUILD_BENCH=ON failed (see $log); PyTorch's side only" >&2
elif ! timeout 400 cmake --build "$build" -j"$(nproc)" --target bench_gpu_programs >>"$log" 2>&1; then
  # One program that does not build must not cost the others: each on its own.
  for t in bench_gpu_step bench_fused_scan; do
    if ! timeout 300 cmake --build "$build" -j"$(nproc)" --target $t >>"$log" 2>&1; then
      rm -f "${build:?}/$t"  # never time a stale copy
      echo "bench_gpu: $t did not build (see $log)" >&2
    fi
  done
fi
for t in bench_gpu_step bench_fused_scan; do
  [ -x "$build/$t" ] || echo "bench_gpu: $build/$t is not there: its part is left out" >&2
done

rc=0
timeout --kill-after=10 $((budget + 30)) "$py" bench/gpu/gpu.py --build "$build" --out "$out" \
  --budget "$budget" --device "$device" --python "$py" "${quick[@]}" || rc=$?
case $rc in
  0 | 1 | 3) ;;
  77)
    echo "bench_gpu: no CUDA device: nothing was measured (exit 77)" >&2
    exit 77
    ;;
  124 | 137) echo "bench_gpu: gpu.py timed out" >&2 ;;
  *) echo "bench_gpu: gpu.py failed (exit $rc)" >&2 ;;
esac
if [ -f "$out/gpu_bench.json" ]; then
  timeout 60 "$py" bench/gpu/plot_gpu.py "$out" || echo "bench_gpu: the figures failed" >&2
  cat "$out/gpu_bench.md"
fi
case $rc in
  0 | 3) exit $rc ;;
  *) exit 1 ;;
esac
