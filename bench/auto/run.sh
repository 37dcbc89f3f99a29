#!/usr/bin/env bash
# Refits the cost model behind `auto` on this machine (bench/auto/, docs/benchmarks.md): runs
# bench/peers/peers.py on the cost model's grid (torch.nn and bppsa.nn bp/blelloch/hybrid, a fresh
# worker per shape and peer) and bench_newton on its forward grid (the sequential forward against
# Newton's, for forward='auto') at every thread count from 1 to the cores, then bench/auto/fit_auto.py.
#   bench/auto/run.sh                  the full grid on a quiet machine (about 1 h on 2 cores):
#                                      bench/results/cpu/auto/{threads-N/peers.json,model.json,fit.md}
#   bench/auto/run.sh --quick          smoke test (CI, about a minute) into build/auto-quick: 4 tiny
#                                      shapes, 1 thread; not for fitting
#   bench/auto/run.sh --builtin        also make the fit the library's built-in model (src/nn/cost_model_fit.inc)
#   bench/auto/run.sh --steps 1        a partial sweep: only the grid's shapes of these step counts (comma-
#                                      separated), into threads-N/steps-1/; the fit joins it with the whole
#                                      sweeps already in threads-N/ (of this machine: the same --out)
#   bench/auto/run.sh --forward        only the forward grid (threads-N/newton.jsonl, a few minutes), fitted
#                                      with the step sweeps already in threads-N/
#   bench/auto/run.sh --fit            no measurement: the fit of the sweeps already in threads-N/
#   --with SWEEP.json                  (repeatable) one more sweep for the fit, of this machine: the large
#                                      states' peers sweep (bench/results/cpu/peers_large/peers.json, 2 threads)
#   --compare MODEL                    fit.md also says what another model (a model.json, or the built-in
#                                      src/nn/cost_model_fit.inc as committed) runs on the same sweeps
# The fit reads the sweeps of the thread counts measured in this run only; a whole run first removes
# those counts' partial sweeps (threads-N/steps-*/), which it measures again.
# Other arguments: --out DIR, --threads "1 2" (the counts to measure). Use the fit elsewhere with
# BPPSA_COST_MODEL=OUT/model.json (bppsa.nn, the CLI, the C++ library).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh
bench_out bench/results/cpu/auto auto-quick "$@"
quick=() builtin=() threads="" steps="" forward_only=0 fit_only=0 extra=() compare=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=(--quick) ;;
    --builtin) builtin=(--write-builtin src/nn/cost_model_fit.inc) ;;
    --forward) forward_only=1 ;;
    --fit) fit_only=1 ;;
    --with)
      extra+=("${2:?--with needs a peers.json}")
      [ -f "$2" ] || { echo "bench/auto/run.sh: --with $2: no such file (a peers.json of bench/peers/peers.py or merge.py)" >&2; exit 2; }
      shift
      ;;
    --compare)
      [ -f "${2:-}" ] || { echo "bench/auto/run.sh: --compare ${2:-}: no such file (a model.json or cost_model_fit.inc)" >&2; exit 2; }
      compare=(--compare "$2")
      shift
      ;;
    --out) shift ;;
    --threads)
      threads=${2:?--threads needs a list such as "1 2"}
      shift
      ;;
    --steps)
      steps=${2:?--steps needs step counts such as 1 or 1,30}
      shift
      ;;
    *)
      echo "bench/auto/run.sh: unknown argument '$1' (use --quick, --builtin, --forward, --fit, --with SWEEP.json, --compare MODEL, --out DIR, --threads \"1 2\", --steps 1)" >&2
      exit 2
      ;;
  esac
  shift
done
if [ -z "$threads" ]; then
  if [ ${#quick[@]} -eq 0 ]; then threads=$(seq 1 "$(nproc)"); else threads=1; fi
fi
bench_bppsa_python
if [ "$fit_only" = 0 ]; then
  cmake -S . -B "$build" -DBPPSA_BUILD_BENCH=ON >/dev/null
  cmake --build "$build" -j"$(nproc)" --target bench_newton >/dev/null
fi
bench_load
mkdir -p "$out"
out=${out%/}

# The forward grid at $1 threads into $2 (bench_newton's JSON lines): H 16 and 64, B 1 and 16, T 30,
# 300 and 3000, I 8, where the Newton forward's dense Jacobians (T·B·S² values) fit in 160 MB.
forward_grid() {
  local part=$2.part cell h b t s
  local cells=(rnn gru lstm) hs=(16 64) bs=(1 16) ts=(30 300 3000) reps=3
  if [ ${#quick[@]} -gt 0 ]; then cells=(gru) hs=(8) bs=(2) ts=(10 20) reps=1; fi
  : >"$2"
  for cell in "${cells[@]}"; do
    for h in "${hs[@]}"; do
      s=$h
      [ "$cell" != lstm ] || s=$((2 * h))
      for b in "${bs[@]}"; do
        local run=()
        for t in "${ts[@]}"; do [ $((t * b * s * s)) -gt 40000000 ] || run+=("$t"); done
        [ ${#run[@]} -gt 0 ] || continue
        "$build/bench_newton" --cells "$cell" --hidden "$h" --batch "$b" --input 8 --steps "${run[@]}" \
          --threads "$1" --reps "$reps" --out "$part" >/dev/null
        cat "$part" >>"$2"
      done
    done
  done
  rm -f "$part"
}

for t in $threads; do
  [ "$fit_only" = 0 ] || break
  dir=$out/threads-$t partial=()
  if [ "$forward_only" = 0 ]; then
    if [ -n "$steps" ]; then
      dir=$dir/steps-${steps//,/-} partial=(--steps "$steps")
    else
      rm -rf "$dir"/steps-*
    fi
    "$py" bench/peers/peers.py --grid cost-model --threads "$t" --out "$dir" \
      --only "torch.nn,bppsa.nn bp,bppsa.nn blelloch,bppsa.nn hybrid" "${partial[@]}" "${quick[@]}"
  fi
  if [ -z "$steps" ]; then
    mkdir -p "$out/threads-$t"
    forward_grid "$t" "$out/threads-$t/newton.jsonl"
  fi
done
# The measured thread counts' sweeps: whole grids and partial ones (--steps) alike.
sweeps=()
shopt -s nullglob
for t in $threads; do
  sweeps+=("$out/threads-$t/peers.json" "$out/threads-$t"/steps-*/peers.json)
done
shopt -u nullglob
sweeps+=(${extra[@]+"${extra[@]}"})
for s in "${sweeps[@]}"; do
  [ -f "$s" ] || {
    echo "bench/auto/run.sh: $s is missing: run the whole grid first (without --steps) into $out" >&2
    exit 1
  }
done
# The quick grid is too small to hold auto to the limit: its fit is only checked to run.
limit=()
[ ${#quick[@]} -eq 0 ] || limit=(--max-regret 1e9)
newton=()
for t in $threads; do
  [ ! -f "$out/threads-$t/newton.jsonl" ] || newton+=("$out/threads-$t/newton.jsonl")
done
"$py" bench/auto/fit_auto.py "${sweeps[@]}" --out "$out" "${builtin[@]}" "${limit[@]}" ${compare[@]+"${compare[@]}"} \
  ${newton[@]:+--newton "${newton[@]}"}
