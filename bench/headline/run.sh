#!/usr/bin/env bash
# The headline of a GPU lease (bench/headline/headline.py; docs/gpu.md, "The headline file"): a whole
# training step at the paper's shapes, bppsa.nn against torch.nn + cuDNN, eager and captured in one
# CUDA graph, one file per run. scripts/gpu_check.sh --lease runs the driver itself (its headline step).
#   bench/headline/run.sh                  into bench/results/gpu/<gpu-name>/headline.{json,md}
#   bench/headline/run.sh --out DIR        into DIR
#   bench/headline/run.sh --device cpu --out DIR    on the CPU: a check of the script, not a GPU figure
#                                          (CI runs bench/headline/test_headline.py, which does this and
#                                          reads the file back)
# Other arguments go to headline.py (--budget SECONDS, --max-steps T, --reps N, --warmup N); it has no
# --quick (--max-steps 1000 keeps the short configurations).
# bppsa: BUILD_DIR's Python extension (built now) when that folder builds one, else the installed package
# (scripts/lib/bench.sh's bench_bppsa_python); on the GPU machine BUILD_DIR=build-gpu, the folder
# scripts/gpu_check.sh built with CUDA. Environment: BUILD_DIR (build), BPPSA_PYTHON (the project's
# environment's python), BPPSA_BENCH_PREBUILT (1: the extension is built already; not built again).
# Exit: 0 done; 77 no CUDA device (nothing measured); 1 a first loss differs from torch.nn's, or a failure;
# 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_need_gpu_for_device bench_headline "$@"
bench_bppsa_python
bench_load
"$py" bench/headline/headline.py "$@"
