#!/usr/bin/env bash
# Model-parallel backward latency against the number of ranks K (bench/mp/mp_step.cpp): the bp
# pipeline (K − 1 hops) against bppsa's scan across ranks (doubling ⌈log2 K⌉ rounds, Blelloch
# 2⌈log2 K⌉ − 1), on loopback and between emulated hosts (network namespaces joined through
# scripts/netlab.sh's delay switch: 0.1, 1 and 10 ms one-way per link). Writes
# bench/results/cpu/mp/{mp.jsonl, fig_mp.png, mp.md}.
#   bench/mp/run.sh           the full sweep (K = 1, 2, 4, 8, 12, 16; needs root for the hosts)
#   bench/mp/run.sh --quick   loopback only, K = 2 and 4, few repetitions (CI)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/bench.sh
. scripts/lib/bench.sh  # py
quick=0
[ "${1:-}" = "--quick" ] && quick=1
[ -x build/bench_mp ] || { echo "bench_mp: build/bench_mp missing (MPI not found at build time?); run scripts/setup.sh" >&2; exit 1; }
out=bench/results/cpu/mp
[ $quick = 1 ] && out=build/bench_mp_quick
mkdir -p "$out"
jsonl="$out/mp.jsonl"
: > "$jsonl.tmp"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
root_flag=()
[ "$(id -u)" -eq 0 ] && root_flag=(--allow-run-as-root)
model=(--cell rnn --hidden 16 --steps 256 --batch 4)
if [ $quick = 1 ]; then ks="2 4"; reps=3; else ks="1 2 4 8 12 16"; reps=15; fi

for k in $ks; do
  echo "bench_mp: loopback, K = $k" >&2
  mpirun "${root_flag[@]}" --oversubscribe --mca mpi_yield_when_idle 1 -np "$k" build/bench_mp "${model[@]}" \
    --reps $reps --link loopback >> "$jsonl.tmp"
done

if [ $quick = 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench_mp: emulated hosts need root (network namespaces); loopback only" >&2
  else
    trap 'scripts/netlab.sh down >/dev/null 2>&1 || true' EXIT
    for d in 0.1 1 10; do
      scripts/netlab.sh up 16 "$d" >&2
      scripts/netlab.sh rtt >&2
      margin=$("$py" -c "print(0.1 + 0.012 * $d)")
      for k in $ks; do
        echo "bench_mp: 16 hosts, $d ms links, K = $k" >&2
        # shellcheck disable=SC2046  # the mpirun arguments netlab.sh wrote: split into words on purpose
        ip netns exec bppsa-h0 mpirun --allow-run-as-root $(cat /tmp/bppsa-netlab/mpirun-args) -np "$k" \
          -x OMP_NUM_THREADS -x OMP_WAIT_POLICY "$PWD/build/bench_mp" "${model[@]}" --reps $reps \
          --start-margin "$margin" --link "${d} ms" >> "$jsonl.tmp"
      done
      scripts/netlab.sh down >&2
    done
  fi
fi
mv "$jsonl.tmp" "$jsonl"
"$py" bench/mp/plot_mp.py "$jsonl" "$out/fig_mp.png" "$out/mp.md"
echo "bench_mp: wrote $jsonl, $out/fig_mp.png and $out/mp.md" >&2
