#!/usr/bin/env bash
# bppsa against today's peers in one run (issue 25; bench/peers/, docs/peers.md): torch.nn eager,
# torch.compile, PyTorch's prototype scan, JAX BPTT (lax.scan), a JAX BPPSA (lax.associative_scan),
# and bppsa.nn with backward bp/blelloch/hybrid/auto. Same weights, data and loss; the run stops when a
# first loss differs from torch.nn's or the JAX BPPSA's gradients differ from jax.grad's.
#   scripts/bench_peers.sh            full sweep on a quiet machine (about 30-45 min on 2 cores):
#                                     bench/results/cpu/peers/{peers.json,peers.csv,fig_peers.png,README.md}
#   scripts/bench_peers.sh --quick    smoke test (CI) into build/bench-peers-quick; not for comparisons
# Other arguments go to bench/peers/run.py (--threads N, --reps N, --only PEER,…, --out DIR,
# --perturb-jax-bppsa X to see the gradient check stop the run).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/python_env.sh
. scripts/lib/python_env.sh
py=$(bppsa_python)
build=${BUILD_DIR:-build}
out=bench/results/cpu/peers
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --quick) out=$build/bench-peers-quick ;;
    --out) out=${args[i + 1]} ;;
  esac
done
echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$py" bench/peers/run.py --out "$out" "$@"
