# shellcheck shell=bash
# The start the CPU benchmarks' run.sh scripts share (bench/<name>/run.sh; the GPU machine's two
# have scripts/lib/gpu_bench_common.sh). From the repository root:
#   . scripts/lib/bench.sh
# sets py (scripts/lib/python_env.sh's bppsa_python: $BPPSA_PYTHON, else the project's environment;
# a missing environment fails now, not after the run) and build (BUILD_DIR, else build). Then
#   bench_out DEFAULT QUICK_NAME "$@"
# sets out: DEFAULT; $build/QUICK_NAME when the arguments hold --quick; the value of --out when they
# hold one, before or after --quick (the driver is given the same arguments and reads --out itself,
# the last one given). And
#   bench_load
# prints the load average before the run on stderr (a benchmark wants a quiet machine: any other
# busy process stalls the OpenMP barriers). For the drivers that import bppsa (PyTorch's side):
#   bench_bppsa_python
# exports PYTHONPATH=$build/python when the build folder builds the Python package (its target
# bppsa_python, built now unless BPPSA_BENCH_PREBUILT=1), else leaves the package scripts/setup.sh
# installed into the environment (`pip install .`); it says which on stderr. And
#   bench_need_gpu NAME
# exits 77 with a message when PyTorch sees no CUDA device (nothing measured), 1 when torch does
# not import; bench_need_gpu_for_device NAME "$@" does so unless the arguments say --device cpu.

# shellcheck disable=SC2034  # py, build and out are the caller's
# shellcheck source=scripts/lib/python_env.sh
. scripts/lib/python_env.sh
py=$(bppsa_python)
build=${BUILD_DIR:-build}

bench_out() {
  out=$1
  local quick_name=$2
  shift 2
  local args=("$@") i given=''
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
      --quick) out=$build/$quick_name ;;
      --out) given=${args[i + 1]:-} ;;
    esac
  done
  [ -z "$given" ] || out=$given  # --out wins over --quick in either order, as in the driver
}

bench_load() {
  echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}

bench_bppsa_python() {
  if grep -Eiqs '^BPPSA_BUILD_PYTHON:BOOL=(on|true|yes|y|1)$' "$build/CMakeCache.txt" &&
    [ -d "$build/python/CMakeFiles/bppsa_python_cpu.dir" ]; then
    if [ "${BPPSA_BENCH_PREBUILT:-0}" != 1 ]; then
      cmake --build "$build" -j"$(nproc)" --target bppsa_python
    fi
    PYTHONPATH=$(cd "$build/python" && pwd)${PYTHONPATH:+:$PYTHONPATH}
    export PYTHONPATH
    echo "bppsa: from $build/python" >&2
  else
    echo "bppsa: the package installed for $py ($build builds no Python extension: BPPSA_BUILD_PYTHON off or no pybind11)" >&2
  fi
}

bench_need_gpu() {
  local rc=0
  "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' || rc=$?
  case $rc in
    0) ;;
    3)
      echo "$1: no CUDA device (torch.cuda.is_available() is False): nothing was measured (exit 77)" >&2
      exit 77
      ;;
    *)
      echo "$1: $py cannot import torch (exit $rc)" >&2
      exit 1
      ;;
  esac
}

# bench_need_gpu_for_device NAME ARGS...: bench_need_gpu NAME unless ARGS hold --device cpu (the
# drivers that run on the CPU too default to cuda).
bench_need_gpu_for_device() {
  local name=$1 device=cuda i
  shift
  local args=("$@")
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
      --device) device=${args[i + 1]:-} ;;
      --device=*) device=${args[i]#--device=} ;;
    esac
  done
  [ "$device" = cpu ] || bench_need_gpu "$name"
}
