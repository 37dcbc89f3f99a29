#!/usr/bin/env bash
# Fuzzes bppsa's file parsers with libFuzzer (clang, ASan + UBSan): installs the missing
# packages, builds the targets in build-fuzz, runs each one for N seconds over a working copy
# of its seed corpus (fuzz/corpus/<target>/ is never written), and exits 1 if any target
# crashed, leaked, hung, ran out of memory or broke an invariant, naming the reproducer.
#
#   scripts/fuzz.sh [--seconds N] [--jobs J] [--fresh] [TARGET...]
#     --seconds N  time per target (30)            --jobs J  targets run at once (1)
#     --fresh      start from the seeds only, dropping the inputs earlier runs kept in
#                  build-fuzz/fuzz-corpus/<target>/
#     TARGET       any of fuzz/corpus/*/ (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=30 jobs=1 fresh=0 targets=()
usage() { sed -n '7,12s/^# \{0,1\}//p' "$0"; exit 2; }
while (($#)); do
  case "$1" in
    --seconds) [[ "${2-}" =~ ^[1-9][0-9]*$ ]] || usage; seconds=$2; shift 2 ;;
    --jobs) [[ "${2-}" =~ ^[1-9][0-9]*$ ]] || usage; jobs=$2; shift 2 ;;
    --fresh) fresh=1; shift ;;
    -h|--help) usage ;;
    -*) echo "fuzz: unknown option $1" >&2; usage ;;
    *) [ -d "fuzz/corpus/$1" ] || { echo "fuzz: no target '$1' (targets: $(ls fuzz/corpus | xargs))" >&2; exit 2; }
       targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || mapfile -t targets < <(ls fuzz/corpus)

packages=(clang libclang-rt-14-dev libomp-14-dev cmake make pkg-config libeigen3-dev nlohmann-json3-dev zlib1g-dev
  libsndfile1-dev libaubio-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fuzz: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# -O1: fast enough to fuzz, quick to build; only the library and the fuzz targets.
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DBPPSA_BUILD_FUZZERS=ON -DBPPSA_ENABLE_SANITIZERS=ON -DBPPSA_BUILD_TESTS=OFF -DBPPSA_BUILD_TOOLS=OFF \
  -DBPPSA_BUILD_BENCH=OFF -DBPPSA_BUILD_PYTHON=OFF -DBPPSA_WITH_MPI=OFF -DBPPSA_WITH_CUDA=OFF >/dev/null
if ! log=$(cmake --build build-fuzz -j2 --target "${targets[@]/#/bppsa_fuzz_}" 2>&1); then
  echo "$log"
  echo "fuzz: the build failed" >&2
  exit 1
fi

# One target: a working corpus seeded from fuzz/corpus, artifacts (crash-*, leak-*, timeout-*,
# oom-*) in build-fuzz/fuzz-runs/<target>/. A hang is an input over 10 s; an OOM is a process
# over 2 GiB or a single allocation over 512 MiB (inputs are at most a few KiB).
run_target() {
  local t=$1 run=build-fuzz/fuzz-runs/$1 corpus=build-fuzz/fuzz-corpus/$1
  rm -rf "$run" && mkdir -p "$run"
  ((fresh)) && rm -rf "$corpus"
  mkdir -p "$corpus" && cp -n fuzz/corpus/"$t"/* "$corpus"/
  local rc=0
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    OMP_NUM_THREADS=1 build-fuzz/fuzz/bppsa_fuzz_"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="$run"/ "$corpus" >"$run/log.txt" 2>&1 || rc=$?
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$run/log.txt" | grep -o '[0-9]*$' || true)
  if ((rc == 0)); then
    echo "fuzz: $t: ok, ${execs:-?} inputs in ${seconds} s, corpus $(ls "$corpus" | wc -l) files"
    return 0
  fi
  echo "fuzz: $t: FAILED (exit $rc) — last lines of $run/log.txt:"
  tail -n 40 "$run/log.txt" | sed 's/^/  | /'
  local a
  for a in "$run"/crash-* "$run"/leak-* "$run"/timeout-* "$run"/oom-* "$run"/slow-unit-*; do
    [ -e "$a" ] || continue
    echo "fuzz: $t: reproducer saved in $a"
    echo "fuzz:   rerun: build-fuzz/fuzz/bppsa_fuzz_$t $a"
    echo "fuzz:   once fixed, keep it: cp $a tests/fuzz_regressions/$t/<name> and write <name>.expect"
  done
  return 1
}

for t in "${targets[@]}"; do
  # Each run records its result in a file: the order in which `wait -n` reaps them is not ours.
  (if run_target "$t"; then r=ok; else r=failed; fi; echo "$r" >"build-fuzz/fuzz-status-$t") &
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
done
wait
failed=()
for t in "${targets[@]}"; do
  [ "$(cat "build-fuzz/fuzz-status-$t" 2>/dev/null)" = ok ] || failed+=("$t")
  rm -f "build-fuzz/fuzz-status-$t"
done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds} s each without a finding"
