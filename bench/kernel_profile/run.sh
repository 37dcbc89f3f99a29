#!/usr/bin/env bash
# Where the persistent recurrent kernels' time goes (bench/kernel_profile/kernel_profile.py): Nsight
# Compute (ncu) on one launch of each kernel of a bppsa.nn layer on CUDA. Needs a GPU and ncu.
# scripts/gpu_check.sh runs the driver itself (--checks: the kernel_profile step; --lease: profile).
#   bench/kernel_profile/run.sh --out DIR    the forward and BP kernels of the paper's RNN (H 20, B 16,
#                                            T 1000): DIR/kernel_profile.{json,md}, DIR/<label>.ncu-rep, …
# Other arguments go to kernel_profile.py (--cell, --hidden, --features, --batch, --steps,
# --backward bp|auto, --kernels SPEC,…, --ncu PATH, --timeout SECONDS); it has no --quick.
# bppsa: BUILD_DIR's Python extension (built now) when that folder builds one, else the installed package
# (scripts/lib/bench.sh's bench_bppsa_python); on the GPU machine BUILD_DIR=build-gpu, the folder
# scripts/gpu_check.sh built with CUDA. Environment: BUILD_DIR (build), BPPSA_PYTHON (the project's
# environment's python), BPPSA_BENCH_PREBUILT (1: the extension is built already; not built again).
# Exit: 0 every kernel profiled; 77 no CUDA device or no ncu (nothing measured); 1 a kernel could not be
# profiled; 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_out "" kernel-profile "$@"
[ -n "$out" ] || { echo "usage: bench/kernel_profile/run.sh --out DIR [kernel_profile.py's options]" >&2; exit 2; }
# ncu where kernel_profile.py looks for it (--ncu PATH, PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute/*).
ncu=''
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --ncu) ncu=${args[i + 1]:-} ;;
    --ncu=*) ncu=${args[i]#--ncu=} ;;
  esac
done
if [ -z "$ncu" ]; then
  ncu=$(PATH=$PATH:/usr/local/cuda/bin command -v ncu || true)
  if [ -z "$ncu" ]; then
    for f in /opt/nvidia/nsight-compute/*/ncu; do  # the last in sorted order, as kernel_profile.py takes
      [ -x "$f" ] && ncu=$f
    done
  fi
fi
if [ -z "$ncu" ] || [ ! -x "$ncu" ]; then
  echo "bench_kernel_profile: Nsight Compute's ncu not found (--ncu PATH, PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute/*): nothing was measured (exit 77)" >&2
  exit 77
fi
bench_need_gpu bench_kernel_profile
bench_bppsa_python
bench_load
"$py" bench/kernel_profile/kernel_profile.py --out "$out" "$@"
