#!/usr/bin/env bash
# A whole training step from PyTorch on one CUDA GPU (bench/pytorch_step/pytorch_step.py): bppsa.nn's
# layer on CUDA against torch.nn (cuDNN), eager and compiled, and JAX (lax.scan, lax.associative_scan);
# one process, same weights and data. Needs a GPU unless given --device cpu.
#   bench/pytorch_step/run.sh --out DIR          full run: DIR/pytorch_step.{jsonl,md} (the GPU
#                                                machine's copy goes to bench/results/gpu/<gpu-name>/)
#   bench/pytorch_step/run.sh --quick            the quick configurations into build/pytorch-step-quick
#   bench/pytorch_step/run.sh --device cpu --quick    the same on the CPU (about a minute on 2 cores): a
#                                                check of the script where there is no GPU, not a GPU figure
# Other arguments go to pytorch_step.py (--budget SECONDS, --max-steps T, --reps N, --warmup N, --no-jax,
# --no-compile). DIR's pytorch_step.jsonl is appended to: give a fresh DIR.
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
bench_out "" pytorch-step-quick "$@"
[ -n "$out" ] || { echo "usage: bench/pytorch_step/run.sh (--out DIR | --quick) [--device cpu] [pytorch_step.py's options]" >&2; exit 2; }
bench_need_gpu_for_device bench_pytorch_step "$@"
bench_bppsa_python
bench_load
"$py" bench/pytorch_step/pytorch_step.py --out "$out" "$@"
