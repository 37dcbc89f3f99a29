#!/usr/bin/env bash
# One command on a GPU machine (H100/H200, no package registry, no internet):
#   scripts/gpu_check.sh OUT_DIR [--lease [--plan] | --quick | --checks | --bench | --wheel]
# prints the GPU, driver, toolchains and commit (and whether the tree is the one scripts/pack_deps.sh
# packed); builds bppsa with CUDA against the dependencies packed into .deps/ (carried with the
# tree); runs the steps of the mode, each in a session of its own with a time limit, into OUT_DIR;
# writes OUT_DIR/summary.{txt,json} and, at the end, the archive OUT_DIR.tgz beside OUT_DIR (every
# log, XML, JSON and figure of the run, no .safetensors).
#   --lease   one call of a 15-minute GPU window (budget 420 s, about 450 s in all): in this order,
#             build (configure, then the GPU tests, the CLI, the Python extension and bench_fused_scan
#             in one build invocation), gpu_tests (every GPU test), racecheck (the small set), memcheck
#             (the quick set), python_cuda (tests/python/test_cuda.py only: CI runs the CPU suites),
#             headline (bench/headline/headline.py: OUT_DIR/headline/headline.{json,md}), profile (Nsight
#             Compute on one launch each of the forward kernel and the fused scan's reduce, carry and
#             push at T 30000), then with the time left fused_plans (bench/gpu/fused_plans.py: the
#             fitted cost model's plans against the defaults') and cli_gpu (check_cli_gpu.py --quick).
#             Each step's limit is in lease_plan below; their sum fits the budget. The measurements
#             are gated on the extension having built, never on a test. `--lease --plan` is the
#             rehearsal: it prints each step's planned limit and their sum, runs nothing, and exits 1
#             when the sum exceeds the budget (CI runs it).
#   --checks  configure, build, host-side tests, GPU tests, the CLI on the GPU, compute-sanitizer
#             memcheck and racecheck on the small cases, the Python package, a PyTorch training step
#             against cuDNN (bench/pytorch_step/pytorch_step.py), the persistent kernels' profile
#             (bench/kernel_profile/kernel_profile.py, Nsight Compute) and, with the time left, packed batches
#             (bench/pytorch/pytorch_packed.py --device cuda --quick): not the C++ benchmarks
#   --bench   configure with the benchmark programs, build them, then bench/gpu/run.sh and
#             bench/cpu_scaling/run.sh (each given the time the run has left): no tests
#   (none)    everything: the checks, the Python package, then the two benchmarks with the time left
#   --quick   the small GPU cases only, fewer of them under the sanitizers, no benchmarks
#   --wheel   a user's pip install with the CUDA backend (docs/pytorch.md), offline, and nothing else
#             (no CMake build of its own; the build folder is not touched): a new virtual environment
#             OUT_DIR/wheel/venv (python3 -m venv --system-site-packages: the machine's PyTorch,
#             pybind11 and pytest), scikit-build-core from the wheels scripts/pack_deps.sh packed
#             (.deps/wheels/), `pip install --no-index --no-build-isolation --no-deps` of the tree with
#             BPPSA_WITH_CUDA=ON (steps wheel_venv, wheel_build: at most 360 s), then, from a folder
#             outside the tree, `import bppsa` (the installed package: bppsa.__file__ in the venv;
#             bppsa._C.cuda_built(); one GRU on CUDA against torch.nn: wheel_import) and
#             tests/python/test_cuda.py with pytest against it (wheel_tests). pip's log is
#             OUT_DIR/wheel_build.log. The venv and the pip build folder (OUT_DIR/wheel/) are removed at
#             the end unless BPPSA_GPU_WHEEL_KEEP=1; never archived. Fits one 10-minute command.
# The whole run has a budget (BPPSA_GPU_CHECK_BUDGET seconds, default 540; --lease 420) so that it ends inside a
# 10-minute command: a step gets at most the time left; a step not started for lack of time is
# listed as skipped; the benchmarks get budgets (BPPSA_GPU_BENCH_BUDGET, BPPSA_CPU_SCALING_BUDGET)
# from the time left, less a margin for their plots, so they end by themselves. At a step's limit
# every process of its session is killed (TERM, KILL 5 s later), nested `timeout`s' included, and
# after every step nothing of it is left running. A failed step does not stop the independent ones
# after it. --checks and --bench each fit one 10-minute command: run them in two calls.
# Exit status: 0 when every step that ran passed, 1 otherwise, 2 on bad arguments.
# Environment: BPPSA_GPU_BUILD_DIR (build-gpu in the tree), BPPSA_GPU_CHECK_JOBS (nproc),
# BPPSA_CUDA_ARCHITECTURES (the GPU's compute capability), BPPSA_GPU_CHECK_LIMITS ("STEP=SECONDS …":
# overrides steps' limits, to test this script or to fit a short lease), BPPSA_GPU_CHECK_SKIP ("STEP …":
# steps left out, listed as skipped), BPPSA_GPU_SANITIZER_FILTER (the GoogleTest filter of the tests run
# under compute-sanitizer; default GpuSmall.*, and in quick mode the smaller set below),
# BPPSA_GPU_WHEEL_KEEP (1: --wheel keeps its venv and build folder), BPPSA_GPU_WHEEL_CUDA (ON; OFF tests
# --wheel's mechanics on a machine without a GPU: built without CUDA, cuda_built() must be False, the
# CUDA tests skip).
# shellcheck disable=SC2317  # the gc_* step functions and on_signal are called indirectly
set -uo pipefail
set +m  # no job control: a step started in the background is no group leader, so setsid makes it
# the leader of a new session in place (its PID is the session's ID)

usage() { echo "usage: scripts/gpu_check.sh OUT_DIR [--lease [--plan] | --quick | --checks | --bench | --wheel]" >&2; exit 2; }
[ $# -ge 1 ] || usage
out=$1
shift
case $out in -*) usage ;; esac
mode=full
plan_only=0
for a in "$@"; do
  case $a in
    --lease | --quick | --checks | --bench | --wheel) [ "$mode" = full ] || usage; mode=${a#--} ;;
    --plan) plan_only=1 ;;
    *) usage ;;
  esac
done
[ $plan_only = 1 ] && [ "$mode" != lease ] && usage

# --lease: the steps in their order and each one's limit in seconds (BPPSA_GPU_CHECK_LIMITS overrides
# them); a GPU window is 15 minutes with the machine's start, so they must fit the budget together.
lease_plan=(build:130 gpu_tests:55 racecheck:50 memcheck:20 python_cuda:40 headline:75 profile:50)
lease_after=(fused_plans cli_gpu)  # with the time left
default_budget=540
[ "$mode" = lease ] && default_budget=420
budget=${BPPSA_GPU_CHECK_BUDGET:-$default_budget}
# Limits given in BPPSA_GPU_CHECK_LIMITS ("NAME=SECONDS …") replace a step's own, to test this script.
limit_override() {
  local kv
  for kv in ${BPPSA_GPU_CHECK_LIMITS:-}; do
    [ "${kv%%=*}" = "$1" ] && echo "${kv#*=}"
  done | tail -n 1
}
lease_limit() {  # lease_limit STEP: its planned limit
  local e over
  over=$(limit_override "$1")
  [ -n "$over" ] && { echo "$over"; return; }
  for e in "${lease_plan[@]}"; do [ "${e%%:*}" = "$1" ] && echo "${e#*:}"; done
}
if [ $plan_only = 1 ]; then  # the rehearsal: nothing runs, nothing is written
  total=0
  echo "gpu_check --lease plan (budget ${budget}s):"
  for e in "${lease_plan[@]}"; do
    lim=$(lease_limit "${e%%:*}")
    total=$((total + lim))
    printf '  %-12s %4ss  (sum %4ss)\n' "${e%%:*}" "$lim" "$total"
  done
  printf '  %-12s then with the time left (%ss if every step above used its limit)\n' "${lease_after[*]}" $((budget - total))
  if [ $total -gt "$budget" ]; then
    echo "gpu_check: the lease's planned limits add up to ${total}s, over its budget of ${budget}s" >&2
    exit 1
  fi
  echo "sum of the planned limits: ${total}s of a ${budget}s budget: fits"
  exit 0
fi
# OUT_DIR relative to the caller's folder: resolved before the cd below.
mkdir -p -- "$out" || { echo "gpu_check: cannot create $out" >&2; exit 2; }
out=$(cd -- "$out" && pwd -P) || exit 2
cd "$(dirname "$0")/.." || exit 2
root=$(pwd -P)
if [ "$out" = "$root" ] || [ "$out" = / ]; then
  echo "gpu_check: OUT_DIR must be a folder of its own (not the tree, not /)" >&2
  exit 2
fi
archive=$out.tgz
earlier=$(find "$out" -mindepth 1 -maxdepth 1 | wc -l)  # files of an earlier run go into the archive too
for tool in setsid timeout tar; do
  command -v $tool >/dev/null || { echo "gpu_check: $tool is missing" >&2; exit 2; }
done
build=${BPPSA_GPU_BUILD_DIR:-$root/build-gpu}
jobs=${BPPSA_GPU_CHECK_JOBS:-$(nproc)}
start=$SECONDS
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
# The GPU machine's own Python (3.12 with PyTorch 2.x, no registry to make the project's environment
# from): every Python step, and the benchmark scripts (scripts/lib/python_env.sh), run it.
export BPPSA_PYTHON=${BPPSA_PYTHON:-$(command -v python3 || echo python3)}
# The toolkit's tools (nvcc, compute-sanitizer) where PATH may not have them.
[ -d /usr/local/cuda/bin ] && case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) PATH=$PATH:/usr/local/cuda/bin ;; esac
nvcc_path=$(command -v nvcc || true)

# --- the commit, and the tree against what scripts/pack_deps.sh packed ------------------------------
git_here() { git -c safe.directory='*' -C "$root" "$@" 2>/dev/null; }
commit_line="unknown (no usable .git and no .deps/COMMIT)"
top=$(git_here rev-parse --show-toplevel || true)
if [ -n "$top" ] && [ "$(cd "$top" 2>/dev/null && pwd -P)" = "$root" ] && head=$(git_here rev-parse HEAD); then
  dirty=$(git_here status --porcelain --untracked-files=no | wc -l)
  commit_line="$head$([ "$dirty" -gt 0 ] && echo " + $dirty modified tracked files")"
elif [ -f .deps/COMMIT ]; then
  commit_line="$(sed -n '1s/^commit //p' .deps/COMMIT) (recorded by scripts/pack_deps.sh: no usable .git here)"
fi
packed_field() { sed -n "s/^$1 //p" .deps/COMMIT 2>/dev/null | awk 'NR == 1'; }
if [ -f .deps/MANIFEST.sha256 ]; then
  differ=$(sha256sum -c --quiet .deps/MANIFEST.sha256 2>/dev/null | sed -n 's/: FAILED.*//p')
  if [ -z "$differ" ]; then
    untracked=$(packed_field untracked)
    tree_line="as packed (commit $(packed_field commit | cut -d' ' -f1), $(packed_field modified) modified files at packing$(
      [ "${untracked:-0}" -gt 0 ] 2>/dev/null && echo ", $untracked untracked"))"
  else
    tree_line="$(echo "$differ" | wc -l) files differ from what pack_deps.sh packed ($(echo "$differ" | head -n 5 |
      paste -sd' ' -)$([ "$(echo "$differ" | wc -l)" -gt 5 ] && echo " …")): run scripts/pack_deps.sh after the last change"
  fi
elif [ -f .deps/COMMIT ]; then
  tree_line="unknown: .deps/ has no MANIFEST.sha256 (packed by an older scripts/pack_deps.sh)"
else
  tree_line="unknown: no .deps/"
fi
# The tree is exactly what pack_deps.sh packed at a commit, but the copy's .git says otherwise (a
# device copy may carry an older .git): the packed commit is the one that ran.
packed_commit=$(packed_field commit | cut -d' ' -f1)
if [ "${tree_line#as packed}" != "$tree_line" ] && [ -n "$packed_commit" ] && [ "${commit_line%% *}" != "$packed_commit" ]; then
  commit_line="$packed_commit (as packed by scripts/pack_deps.sh; this copy's .git says $commit_line)"
fi
export BPPSA_TREE_COMMIT="$commit_line; tree: $tree_line"  # what bench/common/machine.py records

# --- header: the first lines say what ran where --------------------------------------------------
first_line() { "$@" 2>&1 | awk 'NR == 1'; }  # awk reads it all: no SIGPIPE under pipefail
{
  echo "== bppsa gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) (mode: $mode)"
  if command -v nvidia-smi >/dev/null; then
    timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap,clocks.max.sm \
      --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  else
    echo "gpu: nvidia-smi not found"
  fi
  echo "nvcc: $(timeout 20 nvcc --version 2>&1 | grep -i release || echo 'not found')"
  echo "cmake: $(first_line timeout 20 cmake --version)"
  echo "ninja: $(first_line timeout 20 ninja --version)"
  echo "c++: $(first_line timeout 20 c++ --version)"
  echo "python: $(first_line timeout 20 "$BPPSA_PYTHON" --version) ($BPPSA_PYTHON)"
  echo "torch: $(timeout 60 "$BPPSA_PYTHON" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.is_available())' 2>&1 | tail -n 1)"
  echo "commit: $commit_line"
  echo "tree: $tree_line"
  echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
  [ "$mode" = wheel ] && echo "wheels: $(packed_field wheels | grep . || echo 'not recorded in .deps/COMMIT')"
  echo "run: budget ${budget}s, build $([ "$mode" = wheel ] && echo "$out/wheel/build (pip)" || echo "$build"), out $out$([ "$earlier" -gt 0 ] &&
    echo " (not empty: $earlier entries of an earlier run)"), archive $archive"
} 2>&1 | tee "$out/header.txt"
command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi >"$out/nvidia-smi.txt" 2>&1

# --- steps: each a function below, run in a session of its own -----------------------------------
names=()
declare -A result seconds
failed=0
cur_sid='' cur_name='' cur_t0=0 stopped=''
: >"$out/steps.tsv"
left() { echo $((budget - (SECONDS - start))); }

record() {  # record NAME STATUS SECONDS
  names+=("$1")
  result[$1]=$2
  seconds[$1]=$3
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$out/steps.tsv"
}
skip() {  # skip NAME WHY
  record "$1" "skipped: $2" 0
  printf '%-14s %s\n' "$1" "${result[$1]}"
}

session_pids() {  # the processes of session $1, from /proc (procps may be missing)
  local f line fields
  for f in /proc/[0-9]*/stat; do
    { read -r line <"$f"; } 2>/dev/null || continue
    read -r -a fields <<<"${line##*) }"  # after "pid (command)": state ppid pgrp session …
    [ "${fields[3]:-}" = "$1" ] && echo "${f//[^0-9]/}"
  done
}
kill_session() {  # kill_session SID: TERM to every process of the session; KILL to what is left after 5 s
  local sid=$1 pids
  pids=$(session_pids "$sid")
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086  # a list of PIDs
  kill -TERM $pids 2>/dev/null
  for _ in $(seq 10); do
    sleep 0.5
    pids=$(session_pids "$sid")
    [ -n "$pids" ] || return 0
  done
  for _ in 1 2 3; do
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    sleep 0.2
    pids=$(session_pids "$sid")
    [ -n "$pids" ] || return 0
  done
  return 1
}

# step NAME LIMIT FUNCTION [ARGS…]: runs FUNCTION (one of the gc_* below) with its output in
# OUT/NAME.log, in a session of its own, for at most min(LIMIT, the budget left) seconds; at the
# limit every process of the session is killed, and after the step whatever it left running is.
# Status 0 when it passed. A failed step's reason in the summary is its log's last "gpu_check: " line.
step() {
  local name=$1 limit=$2
  shift 2
  local left over cut=0
  case " ${BPPSA_GPU_CHECK_SKIP:-} " in *" $name "*)
    skip "$name" "left out by BPPSA_GPU_CHECK_SKIP"
    return 1
    ;;
  esac
  left=$(left)
  if [ "$left" -le 10 ]; then
    skip "$name" "time budget spent"
    return 1
  fi
  if [ "$limit" -gt "$left" ]; then
    limit=$left
    cut=1
  fi
  over=$(limit_override "$name")
  [ -n "$over" ] && { limit=$over; cut=0; }
  local log=$out/$name.log t0=$SECONDS rc=0 why
  printf '%-14s running (limit %ss) → %s\n' "$name" "$limit" "$log"
  local deadline=$((SECONDS + limit))
  setsid bash -c '"$@"' "$name" "$@" >"$log" 2>&1 </dev/null &
  local sid=$!
  cur_sid=$sid cur_name=$name cur_t0=$t0
  echo "$sid" >"$sid_file"
  while kill -0 "$sid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
  if kill -0 "$sid" 2>/dev/null; then
    kill_session "$sid"
    wait "$sid" 2>/dev/null
    rc=124
    echo "== gpu_check: $name stopped at its limit of ${limit}s (every process of its session killed)" >>"$log"
  else
    wait "$sid"
    rc=$?
  fi
  # What the step left running in the background (its session outlives its first process).
  if [ -n "$(session_pids "$sid")" ]; then
    echo "== gpu_check: killing what $name left running: $(session_pids "$sid" | paste -sd' ' -)" >>"$log"
    kill_session "$sid" || echo "== gpu_check: processes of $name survive: $(session_pids "$sid" | paste -sd' ' -)" >>"$log"
  fi
  cur_sid=
  : >"$sid_file"
  case $rc in
    0) why=ok ;;
    77) why="FAILED: no usable GPU, nothing checked (see the log)" ;;
    124)
      if [ $cut = 1 ]; then
        why="FAILED: stopped after ${limit}s, the run's time budget spent"
      else
        why="FAILED: timed out after ${limit}s"
      fi
      ;;
    *)
      why=$(grep '^gpu_check: ' "$log" | tail -n 1 | cut -c12-160)
      why="FAILED (exit $rc)${why:+: $why}"
      ;;
  esac
  [ "$rc" = 0 ] || failed=1
  record "$name" "$why" $((SECONDS - t0))
  printf '%-14s %s (%ss)\n' "$name" "$why" "${seconds[$name]}"
  [ "$rc" = 0 ]
}

# zlib: its headers from .deps (pack_deps.sh carries them), its library the system's runtime
# libz.so.1, which every Debian/Ubuntu image has, also where the development link libz.so is not.
zlib_lib=$(ldconfig -p 2>/dev/null | awk '/libz\.so\.1 .*x86-64/ && !n++ {print $NF}')
# The steps' commands (exported: each runs in `bash -c` in its own session).
export GC_ROOT=$root GC_OUT=$out GC_BUILD=$build GC_JOBS=$jobs GC_NVCC=$nvcc_path GC_ZLIB=${zlib_lib:+-DZLIB_LIBRARY=$zlib_lib}
gc_configure() {  # gc_configure BENCH(ON|OFF)
  cmake -S "$GC_ROOT" -B "$GC_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$GC_ROOT/.deps" -DCMAKE_CUDA_COMPILER="$GC_NVCC" \
    -DBPPSA_WITH_CUDA=ON -DBPPSA_CUDA_ARCHITECTURES="$GC_ARCH" \
    -DBPPSA_WITH_MPI=OFF -DBPPSA_WITH_AUDIO=OFF -DBPPSA_BUILD_BENCH="$1" -DBPPSA_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v "$BPPSA_PYTHON")" \
    -DBPPSA_BUILD_FUZZERS=OFF -DBPPSA_BUILD_TESTS=ON -DBPPSA_BUILD_TOOLS=ON ${GC_ZLIB:+"$GC_ZLIB"} &&
    grep -E '^(Eigen3|CLI11|nlohmann_json|GTest)_DIR|^ZLIB_(INCLUDE_DIR|LIBRARY)' "$GC_BUILD/CMakeCache.txt"
}
gc_build() { cmake --build "$GC_BUILD" -j"$GC_JOBS" --target "$@"; }
# The benchmark programs, every one that builds; one that does not is removed (never timed stale)
# and named. The benchmark scripts then neither configure nor build (BPPSA_BENCH_PREBUILT=1).
gc_bench_build() {
  local t rc=0
  cmake --build "$GC_BUILD" -j"$GC_JOBS" --target bench_gpu_programs -- -k 0 && return 0
  for t in bench_cpu_scaling bench_paper bench_gpu_step bench_fused_scan; do
    cmake --build "$GC_BUILD" --target "$t" -- -n 2>/dev/null | grep 'no work to do' >/dev/null && continue
    rm -f "${GC_BUILD:?}/$t"
    echo "gpu_check: $t did not build (see above): left out"
    rc=1
  done
  return "$rc"
}
gc_host_tests() { "$GC_BUILD/tests/bppsa_test_cuda_host" --gtest_output=xml:"$GC_OUT/host_tests.xml"; }
gc_gpu_tests() { "$GC_BUILD/bppsa_test_gpu" --gtest_filter="$1" --gtest_output=xml:"$GC_OUT/gpu_tests.xml"; }
gc_cli_gpu() { "$BPPSA_PYTHON" "$GC_ROOT/tests/cli/check_cli_gpu.py" "$GC_BUILD/bppsa" "$GC_OUT/cli_gpu_work" "$@"; }
gc_sanitizer() {  # gc_sanitizer memcheck|racecheck FILTER
  local extra=()
  [ "$1" = memcheck ] && extra=(--leak-check full)
  # racecheck reports shared-memory hazards inside cuSPARSE's own SpGEMM-reuse kernels
  # (load_balancing_kernel, seen on an H100 with CUDA 13.0): not bppsa's code, which is still checked.
  if [ "$1" = racecheck ] && "$GC_SANITIZER" --help 2>&1 | grep -q -- --kernel-name-exclude; then
    extra=(--kernel-name-exclude kns=cusparse)
  fi
  # API errors the tests provoke on purpose (a 4 EiB cudaMalloc) are not memory errors.
  BPPSA_GPU_TESTS_REDUCED=1 "$GC_SANITIZER" --tool "$1" "${extra[@]}" --report-api-errors no --error-exitcode 1 \
    "$GC_BUILD/bppsa_test_gpu" --gtest_filter="$2"
}
# The Python package for this machine's $BPPSA_PYTHON (3.12 + PyTorch 2.x on the GPU machine; CI covers
# Debian's 3.11 + PyTorch from PyPI, installed with `pip install .`), built in the CUDA build (pybind11
# from pip): bppsa.nn on CUDA tensors against torch.nn (cuDNN) and the CPU engine (tests/python/test_cuda.py,
# BPPSA_REQUIRE_CUDA=1: a skip is a failure), and the CPU suites of the modules and their errors.
gc_python() {
  local py ver
  py=$(command -v "$BPPSA_PYTHON") || { echo "gpu_check: $BPPSA_PYTHON not found"; return 1; }
  ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  # python/CMakeLists.txt creates bppsa_python only when it finds Python.h and pybind11.
  if ! grep -q '^build bppsa_python:' "$GC_BUILD/build.ninja"; then
    if grep -q 'no Python interpreter with development headers' "$GC_OUT/configure.log"; then
      echo "gpu_check: Python.h not found for python3 ($py, $ver): its development headers (python$ver-dev) are missing"
    elif grep -q 'pybind11 not found' "$GC_OUT/configure.log"; then
      echo "gpu_check: pybind11 not found for python3 ($py, $ver): pip install pybind11"
    else
      echo "gpu_check: CMake did not create the bppsa_python target (see configure.log)"
    fi
    return 1
  fi
  cmake --build "$GC_BUILD" -j"$GC_JOBS" --target bppsa_python ||
    { echo "gpu_check: building the Python package failed"; return 1; }
  if "$py" -c 'import pytest' 2>/dev/null; then
    BPPSA_REQUIRE_CUDA=1 PYTHONPATH="$GC_BUILD/python" "$py" -m pytest -q -p no:cacheprovider -rs \
      --junitxml="$GC_OUT/python_tests.xml" "$GC_ROOT/tests/python/test_cuda.py" \
      "$GC_ROOT/tests/python/test_errors.py" "$GC_ROOT/tests/python/test_modules.py"
  else
    echo 'pytest is not installed: the standalone comparison only'
    PYTHONPATH="$GC_BUILD/python" "$py" "$GC_ROOT/tests/python/smoke_vs_torch.py"
  fi
}
# A whole training step with bppsa.nn on CUDA against torch.nn (cuDNN, eager and compiled) and JAX (lax.scan,
# lax.associative_scan): bench/pytorch_step/pytorch_step.py, its quick configurations.
gc_torch_step() {  # gc_torch_step BUDGET
  PYTHONPATH="$GC_BUILD/python" "$BPPSA_PYTHON" "$GC_ROOT/bench/pytorch_step/pytorch_step.py" --out "$GC_OUT/torch_step" \
    --quick --budget "$1"
}
# Packed batches (lengths spread 10×) on CUDA: torch.nn (cuDNN) and bppsa.nn, packed and padded, eager and
# compiled: bench/pytorch/pytorch_packed.py --device cuda, its quick settings; no side started past BUDGET seconds.
gc_torch_packed() {  # gc_torch_packed BUDGET [--no-compile]
  PYTHONPATH="$GC_BUILD/python" "$BPPSA_PYTHON" "$GC_ROOT/bench/pytorch/pytorch_packed.py" --device cuda --quick \
    --out "$GC_OUT/torch_packed" --budget "$@"
}
# Where the persistent kernels' time goes (Nsight Compute, one launch each): bench/kernel_profile/kernel_profile.py.
gc_kernel_profile() {
  PYTHONPATH="$GC_BUILD/python" "$BPPSA_PYTHON" "$GC_ROOT/bench/kernel_profile/kernel_profile.py" --out "$GC_OUT/kernel_profile" \
    --timeout 60
}
gc_benchmark() {  # gc_benchmark BUDGET
  BPPSA_BUILD_DIR="$GC_BUILD" BPPSA_BENCH_PREBUILT=1 BPPSA_GPU_BENCH_BUDGET=$1 \
    bash "$GC_ROOT/bench/gpu/run.sh" "$GC_OUT/benchmark"
}
gc_cpu_scaling() {  # gc_cpu_scaling BUDGET
  BPPSA_BUILD_DIR="$GC_BUILD" BPPSA_BENCH_PREBUILT=1 BPPSA_CPU_SCALING_BUDGET=$1 \
    bash "$GC_ROOT/bench/cpu_scaling/run.sh" "$GC_OUT/cpu_scaling"
}
export -f gc_configure gc_build gc_bench_build gc_host_tests gc_gpu_tests gc_cli_gpu gc_sanitizer gc_python gc_torch_step \
  gc_torch_packed gc_kernel_profile gc_benchmark gc_cpu_scaling

# --wheel: a user's `pip install . --config-settings=cmake.define.BPPSA_WITH_CUDA=ON` (docs/pytorch.md),
# offline: in a virtual environment of its own ($GC_WHEEL/venv) that sees the machine's packages
# (PyTorch, pybind11, pytest), with scikit-build-core from .deps/wheels (scripts/pack_deps.sh).
gc_wheel_venv() {
  local venv=$GC_WHEEL/venv wheels=$GC_ROOT/.deps/wheels py f pipwhl='' skb='' ver
  rm -rf "$venv"
  mkdir -p "$GC_WHEEL"
  if ! "$BPPSA_PYTHON" -m venv --system-site-packages "$venv"; then
    # No ensurepip (Debian's python3-venv missing): a venv without pip, then pip from .deps/wheels, or
    # the machine's own pip (it installs into the venv it runs in).
    echo "'$BPPSA_PYTHON -m venv' failed (no ensurepip?): a venv without pip, pip from .deps/wheels or the machine's"
    rm -rf "$venv"
    "$BPPSA_PYTHON" -m venv --without-pip --system-site-packages "$venv" ||
      { echo "gpu_check: $BPPSA_PYTHON -m venv --without-pip failed"; return 1; }
    for f in "$wheels"/pip-*.whl; do [ -f "$f" ] && pipwhl=$f; done
    if [ -n "$pipwhl" ]; then
      "$venv/bin/python" "$pipwhl/pip" install --no-index --find-links "$wheels" pip ||
        { echo "gpu_check: installing pip from $pipwhl failed"; return 1; }
    fi
  fi
  py=$venv/bin/python
  "$py" -m pip --version || { echo "gpu_check: no pip in the venv (no ensurepip, no pip wheel in .deps/wheels, no pip on the machine)"; return 1; }
  "$py" -c 'import torch, pybind11; print("torch", torch.__version__, torch.__file__); print("pybind11", pybind11.__version__, pybind11.__file__)' ||
    { echo "gpu_check: torch or pybind11 is not importable in the venv: $BPPSA_PYTHON lacks them"; return 1; }
  for f in "$wheels"/scikit_build_core-*.whl; do [ -f "$f" ] && skb=$f; done
  if [ -n "$skb" ]; then
    ver=${skb##*/scikit_build_core-}
    ver=${ver%%-*}
    "$py" -m pip install --no-index --find-links "$wheels" "scikit-build-core==$ver" ||
      { echo "gpu_check: pip could not install scikit-build-core $ver from .deps/wheels"; return 1; }
  else
    echo "no scikit-build-core wheel in .deps/wheels: the machine's own"
  fi
  "$py" -c 'import scikit_build_core as s; print("scikit-build-core", s.__version__, s.__file__)' ||
    { echo "gpu_check: scikit-build-core is not importable in the venv"; return 1; }
  "$py" -m pip list 2>/dev/null | grep -iE '^(pip|scikit[-_]build[-_]core|packaging|pathspec|pybind11|torch|pytest) '
  return 0
}
# pip's own build: scikit-build-core runs the project's CMake with these settings (gc_configure's for
# this machine: the packed dependencies, no MPI, no audio, nvcc, the GPU's architecture, the system's
# libz.so.1), Ninja, every core; its build folder $GC_WHEEL/build.
gc_wheel_build() {
  local py=$GC_WHEEL/venv/bin/python cs=() t0=$SECONDS
  cs=(--config-settings=build-dir="$GC_WHEEL/build"
    --config-settings=cmake.define.BPPSA_WITH_CUDA="$GC_WHEEL_CUDA"
    --config-settings=cmake.define.CMAKE_PREFIX_PATH="$GC_ROOT/.deps"
    --config-settings=cmake.define.BPPSA_WITH_MPI=OFF
    --config-settings=cmake.define.BPPSA_WITH_AUDIO=OFF)
  if [ "$GC_WHEEL_CUDA" = ON ]; then
    cs+=(--config-settings=cmake.define.CMAKE_CUDA_COMPILER="$GC_NVCC"
      --config-settings=cmake.define.BPPSA_CUDA_ARCHITECTURES="$GC_ARCH")
  fi
  [ -n "$GC_ZLIB_LIB" ] && cs+=(--config-settings=cmake.define.ZLIB_LIBRARY="$GC_ZLIB_LIB")
  echo "pip install $GC_ROOT ${cs[*]}"
  if command -v ninja >/dev/null; then export CMAKE_GENERATOR=Ninja; fi
  CMAKE_BUILD_PARALLEL_LEVEL=$GC_JOBS "$py" -m pip install -v --no-index --no-build-isolation --no-deps \
    --check-build-dependencies "${cs[@]}" "$GC_ROOT" ||
    { echo "gpu_check: pip install of the tree failed after $((SECONDS - t0))s (see above)"; return 1; }
  echo "== gpu_check: built and installed in $((SECONDS - t0))s"
  grep -E '^(Eigen3|CLI11|nlohmann_json|pybind11)_DIR|^ZLIB_(INCLUDE_DIR|LIBRARY)|^BPPSA_WITH_CUDA|^CMAKE_CUDA_COMPILER:|^BPPSA_CUDA_ARCHITECTURES|^CMAKE_GENERATOR:' \
    "$GC_WHEEL/build/CMakeCache.txt"
  "$py" -m pip show -f bppsa | grep -E '^(Name|Version|Location)|/_C_|/_cpu\.'
  return 0
}
# The installed package, imported from a folder outside the tree: where it came from, its CUDA backend,
# and one GRU on CUDA against torch.nn (cuDNN, TF32 off) with the same weights: outputs and input
# gradients within 1e-4. Its lines go to OUT/wheel_import.txt (the summary shows them).
gc_wheel_import() {
  local run rc
  run=$(mktemp -d "${TMPDIR:-/tmp}/bppsa-wheel-import.XXXXXX") && cd "$run" || return 1
  "$GC_WHEEL/venv/bin/python" - "$GC_ROOT" "$GC_WHEEL_CUDA" <<'PY' 2>&1 | tee "$GC_OUT/wheel_import.txt"
import os, subprocess, sys, sysconfig
root, want = os.path.realpath(sys.argv[1]), sys.argv[2] == "ON"
import torch
import bppsa
from bppsa import _native
where = os.path.realpath(bppsa.__file__)
site = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
print("bppsa %s from %s (cwd %s)" % (bppsa.__version__, bppsa.__file__, os.getcwd()))
ok = True
if not any(where.startswith(s + os.sep) for s in site):
    print("gpu_check: bppsa was imported from %s, not from the venv's site-packages (%s)" % (where, " ".join(sorted(site))))
    ok = False
ext = os.path.realpath(_native._C.__file__)
libs = subprocess.run(["ldd", ext], capture_output=True, text=True).stdout.split("\n")
print("extension %s; %s" % (ext, "; ".join(l.strip() for l in libs if "cuda" in l or "cusparse" in l or "cublas" in l) or "no CUDA library linked"))
built = bool(_native._C.cuda_built())
print("cuda_built %s (expected %s); %s" % (built, want, _native._C.cuda_summary()))
print("torch %s from %s, CUDA %s, %d devices; bppsa cuda_available %s"
      % (torch.__version__, os.path.dirname(torch.__file__), torch.version.cuda, torch.cuda.device_count(), _native.cuda_available()))
if built != want:
    print("gpu_check: bppsa._C.cuda_built() is %s, expected %s" % (built, want))
    ok = False
if want and not _native.cuda_available():
    print("gpu_check: bppsa built with CUDA sees no CUDA device")
    ok = False
if want and ok:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    ref = torch.nn.GRU(3, 16, batch_first=True).cuda()
    ours = bppsa.nn.GRU(3, 16, batch_first=True).cuda()
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(4, 200, 3, device="cuda")
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    outs = [m(xi)[0] for m, xi in zip((ref, ours), xs)]
    w = torch.randn_like(outs[0])
    for o in outs:
        (o * w).sum().backward()
    torch.cuda.synchronize()
    rel = lambda a, b: float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
    e_out, e_grad = rel(outs[1], outs[0]), rel(xs[1].grad, xs[0].grad)
    print("GRU on CUDA against torch.nn: output %.1e, input gradient %.1e relative (output on %s)" % (e_out, e_grad, outs[1].device))
    if outs[1].device.type != "cuda" or max(e_out, e_grad) > 1e-4:
        print("gpu_check: bppsa.nn.GRU on CUDA differs from torch.nn by more than 1e-4")
        ok = False
sys.exit(0 if ok else 1)
PY
  rc=$?
  cd / && rm -rf "$run"
  return "$rc"
}
# tests/python/test_cuda.py (its conftest.py refuses a bppsa imported from the tree, or installed from
# another checkout) against the installed package, from a folder outside the tree; BPPSA_REQUIRE_CUDA=1:
# a skip is a failure.
gc_wheel_tests() {
  local run rc require=0
  [ "$GC_WHEEL_CUDA" = ON ] && require=1
  run=$(mktemp -d "${TMPDIR:-/tmp}/bppsa-wheel-tests.XXXXXX") && cd "$run" || return 1
  BPPSA_REQUIRE_CUDA=$require "$GC_WHEEL/venv/bin/python" -m pytest -q -p no:cacheprovider -rs \
    --junitxml="$GC_OUT/wheel_tests.xml" "$GC_ROOT/tests/python/test_cuda.py"
  rc=$?
  cd / && rm -rf "$run"
  return "$rc"
}
export -f gc_wheel_venv gc_wheel_build gc_wheel_import gc_wheel_tests
export GC_WHEEL=$out/wheel GC_WHEEL_CUDA=${BPPSA_GPU_WHEEL_CUDA:-ON} GC_ZLIB_LIB=$zlib_lib

# compute-sanitizer: on PATH or in the toolkit.
sanitizer=$(command -v compute-sanitizer || true)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$sanitizer" ] && [ -x "$c" ] && sanitizer=$c
done
# Kernels for the GPU that is here (compute capability 9.0 → 90), unless told otherwise.
arch=${BPPSA_CUDA_ARCHITECTURES:-$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
  head -n 1 | tr -d ' .')}
[[ "$arch" =~ ^[0-9]+$ ]] || arch=90
export GC_SANITIZER=$sanitizer GC_ARCH=$arch

# --- the summary and the archive (also when the run is stopped by a signal) ------------------------
finish() {
  [ "$mode" = wheel ] && wheel_cleanup
  {
    echo
    echo "== summary, mode $mode ($((SECONDS - start))s of a ${budget}s budget; logs in $out, archive $archive)"
    sed -n '2p' "$out/header.txt"
    grep -E '^(commit|tree): ' "$out/header.txt"
    for n in "${names[@]}"; do printf '%-14s %-68s %5ss\n' "$n" "${result[$n]}" "${seconds[$n]}"; done
    if [ -f "$out/gpu_tests.xml" ]; then
      "$BPPSA_PYTHON" - "$out/gpu_tests.xml" <<'PY' 2>/dev/null || true
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
print("gpu tests: %s run, %s failed, %s disabled, %.1fs" % (r.get("tests"), r.get("failures"), r.get("disabled"), float(r.get("time", 0))))
for case in r.iter("testcase"):
    for f in case.findall("failure"):
        print("  FAILED %s.%s: %s" % (case.get("classname"), case.get("name"), ((f.get("message") or "").splitlines() or [""])[0][:200]))
PY
    fi
    [ -f "$out/wheel_import.txt" ] && grep -E '^(bppsa|cuda_built|torch|GRU|extension) ' "$out/wheel_import.txt" | cut -c1-240 |
      sed 's/^/wheel: /'
    for x in python_tests:python wheel_tests:wheel; do
      [ -f "$out/${x%%:*}.xml" ] || continue
      "$BPPSA_PYTHON" - "$out/${x%%:*}.xml" "${x#*:}" <<'PY' 2>/dev/null || true
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
s = r if r.tag == "testsuite" else r.find("testsuite")
print("%s tests: %s run, %s failed, %s errors, %s skipped, %.1fs" % (sys.argv[2], s.get("tests"), s.get("failures"), s.get("errors"), s.get("skipped"), float(s.get("time", 0))))
for case in s.iter("testcase"):
    for f in case.findall("failure") + case.findall("error"):
        print("  FAILED %s: %s" % (case.get("name"), ((f.get("message") or "").splitlines() or [""])[0][:200]))
PY
    done
    [ -f "$out/torch_step/pytorch_step.md" ] && grep '^|' "$out/torch_step/pytorch_step.md" | sed 's/^/torch_step: /'
    [ -f "$out/torch_packed/packed_cuda.md" ] && grep '^|' "$out/torch_packed/packed_cuda.md" | sed 's/^/torch_packed: /'
    [ -f "$out/headline/headline.md" ] && grep '^|' "$out/headline/headline.md" | sed 's/^/headline: /'
    [ -f "$out/fused_plans/fused_fit.md" ] && grep '^|' "$out/fused_plans/fused_fit.md" | sed 's/^/fused_plans: /'
    [ -f "$out/kernel_profile/kernel_profile.md" ] &&
      grep -E '^\| (kernel|[a-z_]+) \| ([0-9]|launch)' "$out/kernel_profile/kernel_profile.md" | sed 's/^/kernel_profile: /'
    for s in memcheck racecheck; do
      [ -f "$out/$s.log" ] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY" "$out/$s.log" | sed "s/^/$s: /" | head -n 3
    done
    for f in benchmark/gpu_bench.md cpu_scaling/cpu_scaling.md; do
      [ -f "$out/$f" ] && sed -n '/^### Skipped or failed\|^Skipped or failed:/,$p' "$out/$f" | head -n 12 | sed "s|^|${f%%/*}: |"
    done
    [ -n "$stopped" ] && echo "$stopped"
    if [ $failed = 0 ]; then echo "RESULT: every step that ran passed"; else echo "RESULT: FAILED (see the logs above)"; fi
  } 2>&1 | tee "$out/summary.txt"
  "$BPPSA_PYTHON" - "$out" "$failed" "$mode" "$budget" "$((SECONDS - start))" "$archive" <<'PY' || true
import json, os, sys
out, failed, mode, budget, secs, archive = sys.argv[1], sys.argv[2] != "0", sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
steps = []
for line in open(os.path.join(out, "steps.tsv")):
    name, status, s = line.rstrip("\n").split("\t")
    steps.append({"step": name, "status": status, "seconds": int(s)})
header = open(os.path.join(out, "header.txt")).read().splitlines()
doc = {"mode": mode, "budget_s": budget, "seconds": secs, "archive": archive, "header": header, "steps": steps,
       "passed": not failed}
with open(os.path.join(out, "summary.json.tmp"), "w") as f:
    json.dump(doc, f, indent=1)
os.replace(os.path.join(out, "summary.json.tmp"), os.path.join(out, "summary.json"))
PY
  # Every log, XML, JSON and figure of the run in one file beside OUT_DIR (no weights or batches).
  if tar -czf "$archive.tmp" --exclude='*.safetensors' --exclude='*.tmp' --exclude=wheel/venv --exclude=wheel/build \
    -C "$(dirname "$out")" "$(basename "$out")" &&
    mv -f "$archive.tmp" "$archive"; then
    echo "archive: $archive ($(du -h "$archive" | cut -f1))"
  else
    rm -f "$archive.tmp"
    echo "archive: writing $archive failed"
  fi
}
on_signal() {
  trap - TERM INT HUP
  stop_watchdog
  stopped="gpu_check was stopped by a signal after $((SECONDS - start))s"
  echo "$stopped"
  if [ -n "$cur_sid" ]; then
    kill_session "$cur_sid"
    echo "== gpu_check: stopped by a signal (every process of the step's session killed)" >>"$out/$cur_name.log"
    record "$cur_name" "FAILED: stopped by a signal" $((SECONDS - cur_t0))
  fi
  failed=1
  finish
  exit 1
}
trap on_signal TERM INT HUP
# A watchdog in a session of its own: should gpu_check.sh itself be killed outright (SIGKILL, which no
# trap sees, e.g. by the 10-minute limit of the command that started it), it kills the running step's
# session, which would otherwise outlive it.
sid_file=$out/.step_sid
: >"$sid_file"
export GC_PID=$$ GC_SID_FILE=$sid_file
export -f session_pids kill_session
# shellcheck disable=SC2016  # expanded by the watchdog's shell
setsid bash -c 'while kill -0 "$GC_PID" 2>/dev/null; do sleep 1; done
  sid=$(cat "$GC_SID_FILE" 2>/dev/null); [ -n "$sid" ] && kill_session "$sid"' </dev/null >/dev/null 2>&1 &
watchdog=$!
stop_watchdog() { kill_session "$watchdog"; wait "$watchdog" 2>/dev/null; rm -f "$sid_file"; }

# --- --wheel: a user's pip install with the CUDA backend ------------------------------------------
wheel_cleanup() {  # the venv and pip's build folder: large, and never archived
  [ "${BPPSA_GPU_WHEEL_KEEP:-0}" = 1 ] && return 0
  [ -d "$out/wheel" ] || return 0
  rm -rf "$out/wheel/venv" "$out/wheel/build"
  rmdir "$out/wheel" 2>/dev/null
  return 0
}
run_wheel() {
  local why='' f skb='' py=$out/wheel/venv/bin/python room
  for f in .deps/wheels/scikit_build_core-*.whl; do [ -f "$f" ] && skb=$f; done
  if [ "$GC_WHEEL_CUDA" = ON ] && [ -z "$nvcc_path" ]; then
    why="nvcc not found (PATH, /usr/local/cuda/bin)"
  elif [ ! -f .deps/COMMIT ]; then
    why="no .deps/: run scripts/pack_deps.sh on the development machine and carry .deps with the tree"
  elif [ -z "$skb" ] && ! "$BPPSA_PYTHON" -c 'import scikit_build_core' 2>/dev/null; then
    why="no wheels in .deps/wheels (.deps/COMMIT: wheels $(packed_field wheels | cut -c1-100)) and no scikit-build-core here: rerun scripts/pack_deps.sh where PyPI is reachable"
  fi
  # pip as on a bare machine: no configuration file's or environment's index, links or options.
  export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
  unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_REQUIRE_VIRTUALENV PIP_USER PIP_TARGET PIP_PREFIX
  if [ -n "$why" ]; then
    skip wheel_venv "$why"
    for f in wheel_build wheel_import wheel_tests; do skip $f "no environment to build in"; done
    failed=1
    return
  fi
  if ! step wheel_venv 90 gc_wheel_venv; then
    for f in wheel_build wheel_import wheel_tests; do skip $f "no environment to build in"; done
    return
  fi
  if ! step wheel_build 360 gc_wheel_build; then
    skip wheel_import "not installed"
    skip wheel_tests "not installed"
    return
  fi
  if ! step wheel_import 90 gc_wheel_import; then
    skip wheel_tests "the import check did not pass (wheel_import.txt)"
    return
  fi
  room=$(($(left) - 15))  # the summary and the archive
  [ $room -gt 300 ] && room=300
  if ! "$py" -c 'import pytest' 2>/dev/null; then
    skip wheel_tests "pytest is not installed for $BPPSA_PYTHON (test_cuda.py is pytest's; the import check ran a GRU on CUDA)"
  elif [ $room -lt 30 ]; then
    skip wheel_tests "time budget spent ($(left)s left)"
  else
    step wheel_tests $room gc_wheel_tests
  fi
}

# --- --lease: one call of a GPU window ------------------------------------------------------------
# The sanitizers' quick set: the scan, the recurrent model's and the fused scan's kernels.
quick_set='GpuSmall.SmallIntegerChains*:GpuSmall.DeviceResident*:GpuSmall.Errors*:GpuSmall.HostChanges*:GpuSmall.RecurrentApi*:GpuSmall.FusedScanIsExactOnSmallIntegers*'
# Configure (the benchmark programs on: bench_fused_scan), then one build invocation of what the lease
# runs; ninja keeps going past a target that fails, so that the others are still there.
gc_lease_build() {
  local targets=(bppsa_test_gpu bppsa_cli) t t0 rc
  gc_configure ON || { echo "gpu_check: configuring failed (see above)"; return 1; }
  for t in bppsa_python bench_fused_scan; do
    if grep -q "^build $t:" "$GC_BUILD/build.ninja"; then targets+=("$t"); else echo "== no target $t in this configuration (see above)"; fi
  done
  t0=$SECONDS
  cmake --build "$GC_BUILD" -j"$GC_JOBS" --target "${targets[@]}" -- -k 0
  rc=$?
  echo "== gpu_check: built ${targets[*]} in $((SECONDS - t0))s (exit $rc)"
  [ "$rc" = 0 ] || echo "gpu_check: the build failed (exit $rc; the steps whose programs built still run)"
  return "$rc"
}
# tests/python/test_cuda.py only (BPPSA_REQUIRE_CUDA=1: a skip is a failure); the CPU suites run in CI.
gc_python_cuda() {
  if "$BPPSA_PYTHON" -c 'import pytest' 2>/dev/null; then
    BPPSA_REQUIRE_CUDA=1 PYTHONPATH="$GC_BUILD/python" "$BPPSA_PYTHON" -m pytest -q -p no:cacheprovider -rs \
      --junitxml="$GC_OUT/python_tests.xml" "$GC_ROOT/tests/python/test_cuda.py"
  else
    echo 'pytest is not installed: the standalone comparison only'
    PYTHONPATH="$GC_BUILD/python" "$BPPSA_PYTHON" "$GC_ROOT/tests/python/smoke_vs_torch.py"
  fi
}
gc_headline() {  # gc_headline BUDGET: bench/headline/headline.py into OUT/headline
  PYTHONPATH="$GC_BUILD/python" "$BPPSA_PYTHON" "$GC_ROOT/bench/headline/headline.py" --out "$GC_OUT/headline" --budget "$1"
}
# Nsight Compute on one launch each: the fused scan's reduce, the forward kernel, the push, the carry (in
# the order they matter, each written as it is done), the paper's RNN at T 30000 with backward 'auto'.
gc_lease_profile() {  # gc_lease_profile SECONDS_PER_KERNEL
  PYTHONPATH="$GC_BUILD/python" "$BPPSA_PYTHON" "$GC_ROOT/bench/kernel_profile/kernel_profile.py" --out "$GC_OUT/kernel_profile" \
    --steps 30000 --backward auto --timeout "$1" \
    --kernels reduce=fused_columns_kernel@2,forward=forward_kernel,push=fused_columns_kernel@3,carry=fused_carry_kernel
}
gc_fused_plans() {  # gc_fused_plans BUDGET
  "$BPPSA_PYTHON" "$GC_ROOT/bench/gpu/fused_plans.py" --build "$GC_BUILD" --out "$GC_OUT/fused_plans" --budget "$1"
}
export -f gc_lease_build gc_python_cuda gc_headline gc_lease_profile gc_fused_plans
# gc_built TARGET: a target of the build folder, and up to date (a step whose program did not build
# is skipped, never run on a stale copy). grep without -q: under pipefail an early exit is a SIGPIPE.
gc_built() {
  [ -f "$build/build.ninja" ] && grep -q "^build $1:" "$build/build.ninja" &&
    cmake --build "$build" --target "$1" -- -n 2>/dev/null | grep 'no work to do' >/dev/null
}
# Why nothing can be configured here (no nvcc, no packed dependencies); nothing when it can.
build_blocker() {
  if [ -z "$nvcc_path" ]; then
    echo "nvcc not found (PATH, /usr/local/cuda/bin)"
  elif [ ! -f .deps/COMMIT ]; then
    echo "no .deps/: run scripts/pack_deps.sh on the development machine and carry .deps with the tree"
  fi
}
run_lease() {
  local s room lim why
  why=$(build_blocker)
  if [ -n "$why" ]; then
    skip build "$why"
    failed=1
  else
    step build "$(lease_limit build)" gc_lease_build
  fi
  if gc_built bppsa_test_gpu; then
    step gpu_tests "$(lease_limit gpu_tests)" gc_gpu_tests '*'
    if [ -n "$sanitizer" ]; then
      step racecheck "$(lease_limit racecheck)" gc_sanitizer racecheck "${BPPSA_GPU_SANITIZER_FILTER:-GpuSmall.*}"
      step memcheck "$(lease_limit memcheck)" gc_sanitizer memcheck "${BPPSA_GPU_SANITIZER_FILTER:-$quick_set}"
    else
      skip racecheck "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"
      skip memcheck "compute-sanitizer not found"
      failed=1
    fi
  else
    for s in gpu_tests racecheck memcheck; do skip $s "bppsa_test_gpu did not build"; done
  fi
  # The measurements: gated on the extension, never on a test.
  if gc_built bppsa_python; then
    step python_cuda "$(lease_limit python_cuda)" gc_python_cuda
    lim=$(lease_limit headline)
    step headline "$lim" gc_headline $((lim - 15))
    lim=$(lease_limit profile)
    step profile "$lim" gc_lease_profile $((lim / 3))
  else
    for s in python_cuda headline profile; do skip $s "the Python extension did not build"; done
  fi
  room=$(($(left) - 15))  # the summary and the archive
  lim=$((room < 120 ? room : 120))
  if ! gc_built bench_fused_scan; then
    skip fused_plans "bench_fused_scan did not build"
  elif [ $lim -lt 40 ]; then
    skip fused_plans "time budget spent ($(left)s left)"
  else
    step fused_plans $lim gc_fused_plans $((lim - 10))
  fi
  room=$(($(left) - 15))
  lim=$((room < 150 ? room : 150))
  if ! gc_built bppsa_cli; then
    skip cli_gpu "the CLI did not build"
  elif [ $lim -lt 40 ]; then
    skip cli_gpu "time budget spent ($(left)s left)"
  else
    step cli_gpu $lim gc_cli_gpu --quick
  fi
}

# --- the run ----------------------------------------------------------------------------------------
bench=OFF
case $mode in full | bench) bench=ON ;; esac
configured=0
if [ "$mode" = wheel ]; then
  run_wheel  # the wheel steps only (above)
elif [ "$mode" = lease ]; then
  run_lease  # the lease's steps only (above)
elif [ -n "$(build_blocker)" ]; then
  skip configure "$(build_blocker)"
  failed=1
elif step configure 180 gc_configure $bench; then
  configured=1
fi

# The checks (--checks, --quick and the full run).
if [ "$mode" != bench ] && [ "$mode" != wheel ] && [ "$mode" != lease ]; then
  built=0
  if [ $configured = 1 ]; then
    # Only what the checks need: the CUDA test programs and the CLI.
    step build 420 gc_build bppsa_test_gpu bppsa_test_cuda_host bppsa_cli && built=1
  else
    skip build "not configured"
  fi
  small='GpuSmall.*'
  # Under the sanitizers (10–100× slower): the small cases, fewer of them in quick mode (the scan,
  # the recurrent model's and the fused scan's kernels).
  [ "$mode" = quick ] && small=$quick_set
  small=${BPPSA_GPU_SANITIZER_FILTER:-$small}
  if [ $built = 1 ]; then
    if [ "$mode" != quick ]; then
      step host_tests 180 gc_host_tests
    else
      skip host_tests "quick mode (they run in CI on every commit)"
    fi
    if [ "$mode" = quick ]; then step gpu_tests 400 gc_gpu_tests 'GpuSmall.*'; else step gpu_tests 400 gc_gpu_tests '*'; fi
    # The CLI on the GPU: grad --device cuda vs the CPU engine vs PyTorch, train --device cuda --check.
    if [ "$mode" = quick ]; then step cli_gpu 120 gc_cli_gpu --quick; else step cli_gpu 200 gc_cli_gpu; fi
    if [ -n "$sanitizer" ]; then
      step memcheck 300 gc_sanitizer memcheck "$small"
      step racecheck 300 gc_sanitizer racecheck "$small"
    else
      skip memcheck "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"
      skip racecheck "compute-sanitizer not found"
      failed=1
    fi
  else
    for s in host_tests gpu_tests cli_gpu memcheck racecheck; do skip $s "not built"; done
  fi
  if [ $configured = 1 ]; then
    if step python 300 gc_python; then
      step kernel_profile 150 gc_kernel_profile
      # The training step measures until its budget (what is left, less a margin for one side's run
      # past it: checked before each side), then writes its table; in the full run, the benchmarks after
      # it keep most of the time.
      room=$(($(left) - 90))
      [ $room -gt 200 ] && room=200
      [ "$mode" = full ] && [ $room -gt 100 ] && room=100
      if [ $room -ge 60 ]; then
        step torch_step $((room + 80)) gc_torch_step $room
      else
        skip torch_step "time budget spent ($(left)s left)"
      fi
      # Packed batches with the time torch_step left (a margin for one side past its budget, and the
      # summary); the compiled sides (their first calls compile) only with 90 s or more. Not in the
      # full run, whose benchmarks keep that time.
      room=$(($(left) - 60))
      [ $room -gt 180 ] && room=180
      if [ "$mode" = full ]; then
        skip torch_packed "the full run keeps its time for the benchmarks (run --checks)"
      elif [ $room -ge 90 ]; then
        step torch_packed $((room + 45)) gc_torch_packed $room
      elif [ $room -ge 45 ]; then
        step torch_packed $((room + 45)) gc_torch_packed $room --no-compile
      else
        skip torch_packed "time budget spent ($(left)s left)"
      fi
    else
      skip kernel_profile "the Python step did not pass"
      skip torch_step "the Python step did not pass"
      skip torch_packed "the Python step did not pass"
    fi
  else
    skip python "not configured"
    skip kernel_profile "not configured"
    skip torch_step "not configured"
    skip torch_packed "not configured"
  fi
fi

# The benchmarks (--bench and the full run), each with a budget from the time the run has left, less
# a margin for its build check, report and plots, so that it ends by itself; not started with less
# than it needs to measure anything.
if [ "$mode" = full ] || [ "$mode" = bench ]; then
  if [ $configured = 1 ]; then
    step bench_build 420 gc_bench_build
    # The GPU benchmark first: at most 270 s, leaving cpu_scaling 45 % of the time (60–210 s) when
    # both fit (90 s and 60 s at least), else all of it; cpu_scaling then gets what is really left.
    reserve=15  # for the summary and the archive
    room=$(($(left) - reserve))
    share=$((room * 45 / 100))  # what cpu_scaling keeps
    [ $share -gt 210 ] && share=210
    [ $share -lt 60 ] && share=60
    [ $((room - share)) -lt 90 ] && share=$((room - 90))
    [ $share -lt 60 ] && share=0
    lim=$((room - share))
    [ $lim -gt 270 ] && lim=270
    if [ $lim -ge 90 ]; then
      step benchmark $lim gc_benchmark $((lim - 45))
    else
      skip benchmark "time budget spent (${room}s left)"
    fi
    room=$(($(left) - reserve))
    lim=$room
    [ $lim -gt 210 ] && lim=210
    if [ $lim -ge 60 ]; then
      step cpu_scaling $lim gc_cpu_scaling $((lim - 40))
    else
      skip cpu_scaling "time budget spent (${room}s left)"
    fi
  else
    for s in bench_build benchmark cpu_scaling; do skip $s "not configured"; done
  fi
fi

trap - TERM INT HUP
stop_watchdog
finish
exit $failed
