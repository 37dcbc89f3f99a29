# shellcheck shell=bash
# The start the CPU benchmarks' run.sh scripts share (bench/<name>/run.sh; the GPU machine's two
# have scripts/lib/gpu_bench_common.sh). From the repository root:
#   . scripts/lib/bench.sh
# sets py (scripts/lib/python_env.sh's bppsa_python: $BPPSA_PYTHON, else the project's environment;
# a missing environment fails now, not after the run) and build (BUILD_DIR, else build). Then
#   bench_out DEFAULT QUICK_NAME "$@"
# sets out: DEFAULT; $build/QUICK_NAME when the arguments hold --quick; the value of --out when they
# hold one (the driver is given the same arguments and reads --out itself). And
#   bench_load
# prints the load average before the run on stderr (a benchmark wants a quiet machine: any other
# busy process stalls the OpenMP barriers).

# shellcheck disable=SC2034  # py, build and out are the caller's
# shellcheck source=scripts/lib/python_env.sh
. scripts/lib/python_env.sh
py=$(bppsa_python)
build=${BUILD_DIR:-build}

bench_out() {
  out=$1
  local quick_name=$2
  shift 2
  local args=("$@") i
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
      --quick) out=$build/$quick_name ;;
      --out) out=${args[i + 1]} ;;
    esac
  done
}

bench_load() {
  echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}
