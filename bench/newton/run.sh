#!/usr/bin/env bash
# The Newton forward against the sequential one on the CPU (docs/method.md §9): builds bench_newton
# and writes OUT/newton.jsonl and OUT/newton.md (a table per thread count and one with W_hh scaled
# to spectral radius 1.5, and H 256), then the same shapes with DEER in JAX (deer_jax.py, against
# jax.lax.scan) into OUT/deer.jsonl and the same page, and the convergence study (convergence.py:
# iterations against T and the spectral norm of W_hh, three models untrained and trained) into
# OUT/convergence.{jsonl,md,png}. OUT: bench/results/cpu/newton, or --out DIR;
# --quick: one short case of each, into build/newton-quick. Run on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_out bench/results/cpu/newton newton-quick "$@"
quick=0
for a in "$@"; do [ "$a" = --quick ] && quick=1; done
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j2 --target bench_newton
mkdir -p "$out"
bench_bppsa_python  # convergence.py imports bppsa
bench_load
{
  echo "# Newton forward against the sequential forward (CPU)"
  echo
  echo "bppsa $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- include src 2>/dev/null || echo ' (uncommitted changes)'), $(nproc) cores, command: bench/newton/run.sh${*:+ $*}; forward only, float, median of the timed runs"
  echo
  rm -f "$out/deer.jsonl"
  if [ "$quick" = 1 ]; then
    "$build/bench_newton" --cells gru --steps 100 --batch 4 --reps 1 --out "$out/newton.jsonl"
    echo
    echo "DEER in JAX (bench/newton/deer_jax.py), the same shape:"
    echo
    "$py" bench/newton/deer_jax.py --cells gru --steps 100 --batch 4 --reps 1 --out "$out/deer.jsonl"
    echo
    "$py" bench/newton/convergence.py --models bitstream-rnn --steps 10 --norms 1 3 --norm-steps 50 \
      --train-steps 5 --reps 1 --out "$out" >/dev/null
    cat "$out/convergence.md"
  else
    for t in 1 2; do
      echo "threads $t:"
      echo
      "$build/bench_newton" --threads "$t" --out "$out/newton-t$t.jsonl"
      echo
    done
    echo "W_hh scaled to spectral radius 1.5 (expanding dynamics), 1 thread:"
    echo
    "$build/bench_newton" --steps 100 1000 --spectral-radius 1.5 --out "$out/newton-radius.jsonl"
    echo
    echo "H 256, 1 thread (dense S × S elements: the LSTM's S = 512 at T 1000 would need about 17 GB):"
    echo
    "$build/bench_newton" --hidden 256 --steps 100 1000 --cells rnn gru --reps 1 --out "$out/newton-h256.jsonl"
    "$build/bench_newton" --hidden 256 --steps 100 --cells lstm --reps 1 --out "$out/newton-h256-lstm.jsonl" | tail -n 1
    cat "$out"/newton-t*.jsonl "$out/newton-radius.jsonl" "$out"/newton-h256*.jsonl >"$out/newton.jsonl"
    echo
    echo "## DEER in JAX on the same shapes (bench/newton/deer_jax.py)"
    echo
    echo "Dense Jacobians by jax.jacfwd, jax.lax.associative_scan, stopping when no state changes by more"
    echo "than 1e-4 (the reference code's float32 rule); its time against jax.lax.scan's sequential forward"
    echo "of the same cell, the largest difference from it, and the memory XLA's compiled program needs."
    "$py" -c 'import jax; print("jax", jax.__version__)'
    echo
    for t in 1 2; do
      echo "threads $t:"
      echo
      "$py" bench/newton/deer_jax.py --threads "$t" --out "$out/deer.jsonl"
      echo
    done
    echo "W_hh scaled to spectral norm 1.5, 1 thread:"
    echo
    "$py" bench/newton/deer_jax.py --steps 100 1000 --spectral-radius 1.5 --out "$out/deer.jsonl"
    echo
    echo "H 256, 1 thread (DEER's dense Jacobians: T·B·S² values):"
    echo
    "$py" bench/newton/deer_jax.py --hidden 256 --steps 100 1000 10000 --reps 1 --out "$out/deer.jsonl"
    echo
    "$py" bench/newton/convergence.py --out "$out" >/dev/null
    cat "$out/convergence.md"
    echo
    echo "![iterations against T and the spectral norm](convergence.png)"
  fi
} | tee "$out/newton.md"
echo "wrote $out/newton.md and newton.jsonl" >&2
