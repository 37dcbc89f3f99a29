# shellcheck shell=bash
# The start both GPU-machine benchmark scripts share (bench/gpu/run.sh,
# bench/cpu_scaling/run.sh): source it from the script, then call
#   gpu_bench_args NAME "$@"
# from the repository root. It parses OUT_DIR [--quick] (usage and exit 2 otherwise), creates
# OUT_DIR and sets out, quick (the array (--quick) or empty), build (BPPSA_BUILD_DIR, else build)
# and py (scripts/lib/python_env.sh's bppsa_python: $BPPSA_PYTHON, else the project's environment). Then
#   bench_build LOG TARGET…
# builds the programs: nothing when BPPSA_BENCH_PREBUILT=1 (scripts/gpu_check.sh built them in its
# bench_build step, leaving out what does not build); otherwise BPPSA_BUILD_BENCH turned on in the
# build folder's cache, unless it is on already (no second configure of a folder gpu_check.sh or an
# earlier run configured so), and the targets built. CMake's output goes to LOG.

# shellcheck disable=SC2034  # out, quick, build and py are the caller's
gpu_bench_args() {
  local name=$1
  shift
  local usage="usage: $0 OUT_DIR [--quick]"
  [ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
  out=$1
  shift
  quick=()
  local a
  for a in "$@"; do
    case $a in
      --quick) quick=(--quick) ;;
      *) echo "$usage" >&2; exit 2 ;;
    esac
  done
  mkdir -p "$out" || { echo "$name: cannot create $out" >&2; exit 2; }
  build=${BPPSA_BUILD_DIR:-build}
  # shellcheck source=scripts/lib/python_env.sh
  . scripts/lib/python_env.sh
  py=$(bppsa_python) || exit 2
}

# bench_configure LOG: BPPSA_BUILD_BENCH on in $build (see above); status 0 when it is.
bench_configure() {
  if grep -Eiqs '^BPPSA_BUILD_BENCH:BOOL=(on|true|yes|y|1)$' "$build/CMakeCache.txt"; then
    echo "$build has BPPSA_BUILD_BENCH=ON already: not configured again" >>"$1"
    return 0
  fi
  timeout 120 cmake -S . -B "$build" -DBPPSA_BUILD_BENCH=ON >>"$1" 2>&1
}

# bench_build LOG TARGET…: status 0 when the targets are there (built now, or by gpu_check.sh).
bench_build() {
  local log=$1
  shift
  : >"$log"
  if [ "${BPPSA_BENCH_PREBUILT:-0}" = 1 ]; then
    echo "BPPSA_BENCH_PREBUILT=1: the programs in $build were built by scripts/gpu_check.sh; not built again" >>"$log"
    return 0
  fi
  bench_configure "$log" && timeout 400 cmake --build "$build" -j"$(nproc)" --target "$@" >>"$log" 2>&1
}
