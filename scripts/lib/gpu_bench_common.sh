# shellcheck shell=bash
# The start both GPU-machine benchmark scripts share (scripts/bench_gpu.sh,
# scripts/bench_gpu_cpu_scaling.sh): source it from the script, then call
#   gpu_bench_args NAME "$@"
# from the repository root. It parses OUT_DIR [--quick] (usage and exit 2 otherwise), creates
# OUT_DIR and sets out, quick (the array (--quick) or empty), build (BPPSA_BUILD_DIR, else build)
# and py (PYTHON, else python3).

# shellcheck disable=SC2034  # out, quick, build and py are the caller's
gpu_bench_args() {
  local name=$1
  shift
  local usage="usage: scripts/$name.sh OUT_DIR [--quick]"
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
  py=${PYTHON:-python3}
}
