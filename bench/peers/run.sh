#!/usr/bin/env bash
# bppsa against today's peers in one run (issue 25; bench/peers/, docs/peers.md): torch.nn eager,
# torch.compile, PyTorch's prototype scan, JAX BPTT (lax.scan), a JAX BPPSA (lax.associative_scan),
# and bppsa.nn with backward bp/blelloch/hybrid/auto. Same weights, data and loss; the run stops when a
# first loss differs from torch.nn's or the JAX BPPSA's gradients differ from jax.grad's.
#   bench/peers/run.sh            full sweep on a quiet machine (hours on 2 cores; --steps T runs a slice,
#                                 bench/peers/merge.py merges slices):
#                                     bench/results/cpu/peers/{peers.json,peers.csv,fig_peers.png,README.md}
#   bench/peers/run.sh --quick    smoke test (CI) into build/bench-peers-quick; not for comparisons
# Other arguments go to bench/peers/peers.py (--threads N, --reps N, --only PEER,…, --out DIR, a slice
# of the grid by --steps T,… --cells RNN,… --hidden H,… --batch B,…,
# --perturb-jax-bppsa X to see the gradient check stop the run).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_out bench/results/cpu/peers bench-peers-quick "$@"
bench_load
"$py" bench/peers/peers.py --out "$out" "$@"
