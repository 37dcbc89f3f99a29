#!/usr/bin/env bash
# One command on a GPU machine (H100/H200, no package registry, no internet):
#   scripts/gpu_check.sh OUT_DIR [--quick]
# prints the GPU, driver, toolchain and commit; builds bppsa with CUDA against the dependencies
# packed by scripts/pack_deps.sh (.deps/, carried with the tree); runs the CPU-side CUDA tests,
# the GPU tests, compute-sanitizer memcheck and racecheck on the small cases, then the benchmark
# hooks; writes every log and result into OUT_DIR and a summary at the end. Every step has a
# timeout and the whole run a budget (BPPSA_GPU_CHECK_BUDGET seconds, default 540), so it never
# hangs and ends inside 10 minutes; a failed step does not stop the independent ones after it.
# Exit status: 0 when every step that ran passed, 1 otherwise. --quick: the small GPU cases only,
# shorter sanitizer runs, no benchmarks (about 3 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() { echo "usage: scripts/gpu_check.sh OUT_DIR [--quick]" >&2; exit 2; }
[ $# -ge 1 ] || usage
out=$1
shift
quick=0
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    *) usage ;;
  esac
done
mkdir -p "$out" || { echo "gpu_check: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
build=${BPPSA_GPU_BUILD_DIR:-$root/build-gpu}
budget=${BPPSA_GPU_CHECK_BUDGET:-540}
jobs=${BPPSA_GPU_CHECK_JOBS:-$(nproc)}
start=$SECONDS
export OMP_WAIT_POLICY=PASSIVE
# The toolkit's tools (nvcc, compute-sanitizer) where PATH may not have them.
[ -d /usr/local/cuda/bin ] && case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) PATH=$PATH:/usr/local/cuda/bin ;; esac
nvcc_path=$(command -v nvcc || true)

# --- header: the first lines say what ran where --------------------------------------------------
first_line() { "$@" 2>&1 | head -n 1; }
{
  echo "== bppsa gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) $([ $quick = 1 ] && echo '(quick)')"
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
  echo "python: $(first_line timeout 20 python3 --version)"
  echo "torch: $(timeout 60 python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.is_available())' 2>&1 | tail -n 1)"
  if git rev-parse --git-dir >/dev/null 2>&1; then
    dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)
    echo "commit: $(git rev-parse HEAD)$([ "$dirty" -gt 0 ] && echo " + $dirty modified tracked files")"
  elif [ -f .deps/COMMIT ]; then
    echo "commit: $(sed -n 's/^commit //p' .deps/COMMIT) (recorded by scripts/pack_deps.sh: no .git here)"
  else
    echo "commit: unknown (no .git and no .deps/COMMIT)"
  fi
  echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
} 2>&1 | tee "$out/header.txt"
command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi >"$out/nvidia-smi.txt" 2>&1

# --- steps ------------------------------------------------------------------------------------------
names=()
declare -A result seconds
failed=0
: >"$out/steps.tsv"

# step NAME TIMEOUT COMMAND…: runs COMMAND (bash) into OUT/NAME.log within min(TIMEOUT, budget left).
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - (SECONDS - start)))
  names+=("$name")
  if [ "$left" -le 10 ]; then
    result[$name]="skipped: time budget spent"
    seconds[$name]=0
    printf '%-12s %s\n' "$name" "${result[$name]}"
    printf '%s\t%s\t0\n' "$name" "${result[$name]}" >>"$out/steps.tsv"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  printf '%-12s running (timeout %ss) → %s\n' "$name" "$limit" "$out/$name.log"
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" bash -c "$*" >"$out/$name.log" 2>&1 || rc=$?
  seconds[$name]=$((SECONDS - t0))
  case $rc in
    0) result[$name]=ok ;;
    77) result[$name]="FAILED: no usable GPU, nothing checked (see the log)"; failed=1 ;;
    124 | 137) result[$name]="FAILED: timed out after ${limit}s"; failed=1 ;;
    *) result[$name]="FAILED (exit $rc)"; failed=1 ;;
  esac
  printf '%-12s %s (%ss)\n' "$name" "${result[$name]}" "${seconds[$name]}"
  printf '%s\t%s\t%s\n' "$name" "${result[$name]}" "${seconds[$name]}" >>"$out/steps.tsv"
  [ "$rc" = 0 ]
}
skip() {  # skip NAME WHY
  names+=("$1")
  result[$1]="skipped: $2"
  seconds[$1]=0
  printf '%-12s %s\n' "$1" "${result[$1]}"
  printf '%s\t%s\t0\n' "$1" "${result[$1]}" >>"$out/steps.tsv"
}

# compute-sanitizer: on PATH or in the toolkit.
sanitizer=$(command -v compute-sanitizer || true)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$sanitizer" ] && [ -x "$c" ] && sanitizer=$c
done
# Kernels for the GPU that is here (compute capability 9.0 → 90), unless told otherwise.
arch=${BPPSA_CUDA_ARCHITECTURES:-$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
  head -n 1 | tr -d ' .')}
[[ "$arch" =~ ^[0-9]+$ ]] || arch=90

configured=0
if [ -z "$nvcc_path" ]; then
  skip configure "nvcc not found (PATH, /usr/local/cuda/bin)"
  failed=1
elif [ ! -f .deps/COMMIT ]; then
  skip configure "no .deps/: run scripts/pack_deps.sh on the development machine and carry .deps with the tree"
  failed=1
elif step configure 180 "cmake -S '$root' -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH='$root/.deps' -DCMAKE_CUDA_COMPILER='$nvcc_path' \
    -DBPPSA_WITH_CUDA=ON -DBPPSA_CUDA_ARCHITECTURES=$arch \
    -DBPPSA_WITH_MPI=OFF -DBPPSA_WITH_AUDIO=OFF -DBPPSA_BUILD_BENCH=OFF -DBPPSA_BUILD_PYTHON=OFF \
    -DBPPSA_BUILD_FUZZERS=OFF -DBPPSA_BUILD_TESTS=ON -DBPPSA_BUILD_TOOLS=ON \
  && grep -E '^(Eigen3|CLI11|nlohmann_json|GTest)_DIR' '$build/CMakeCache.txt'"; then
  configured=1
fi

# Only what the checks need: the library, the CUDA test programs, the CLI (GPU CLI checks, benchmarks).
targets="bppsa_test_gpu bppsa_test_cuda_host bppsa_test_cuda_recurrent_host bppsa_cli"
built=0
if [ $configured = 1 ]; then
  step build 420 "cmake --build '$build' -j$jobs --target $targets" && built=1
else
  skip build "configure failed"
fi

gpu_tests=$build/bppsa_test_gpu
host_tests=$build/tests/bppsa_test_cuda_host
small='GpuSmall.*'
# Under the sanitizers (10–100× slower): the small cases, fewer of them in quick mode.
[ $quick = 1 ] && small='GpuSmall.SmallIntegerChains*:GpuSmall.DeviceResident*:GpuSmall.Errors*'
[ $quick = 1 ] && small="$small:GpuSmall.HostChanges*:GpuSmall.RecurrentApi*"  # the recurrent model's kernels
if [ $built = 1 ]; then
  if [ $quick = 0 ]; then
    step host_tests 180 "'$host_tests' --gtest_output=xml:'$out/host_tests.xml' \
      && '$build/tests/bppsa_test_cuda_recurrent_host' --gtest_output=xml:'$out/host_tests_recurrent.xml'"
  else
    skip host_tests "quick mode (they run in CI on every commit)"
  fi
  filter='*'
  [ $quick = 1 ] && filter='GpuSmall.*'
  step gpu_tests 400 "'$gpu_tests' --gtest_filter='$filter' --gtest_output=xml:'$out/gpu_tests.xml'"
  # The CLI on the GPU: grad --device cuda vs the CPU engine vs PyTorch, train --device cuda --check.
  step cli_gpu $([ $quick = 1 ] && echo 120 || echo 200) "python3 '$root/tests/gpu/check_cli_gpu.py' '$build/bppsa' \
    '$out/cli_gpu_work' $([ $quick = 1 ] && echo --quick)"
  if [ -n "$sanitizer" ]; then
    # API errors the tests provoke on purpose (a 4 EiB cudaMalloc) are not memory errors.
    step memcheck 300 "BPPSA_GPU_TESTS_REDUCED=1 '$sanitizer' --tool memcheck --leak-check full --report-api-errors no --error-exitcode 1 \
      '$gpu_tests' --gtest_filter='$small'"
    step racecheck 300 "BPPSA_GPU_TESTS_REDUCED=1 '$sanitizer' --tool racecheck --report-api-errors no --error-exitcode 1 \
      '$gpu_tests' --gtest_filter='$small'"
  else
    skip memcheck "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"
    skip racecheck "compute-sanitizer not found"
    failed=1
  fi
else
  for s in host_tests gpu_tests cli_gpu memcheck racecheck; do skip $s "build failed"; done
fi

# Hooks for later work (issue items 8 and 9): each runs when its script exists, writing into OUT_DIR.
hook() {  # hook NAME SCRIPT TIMEOUT
  if [ $quick = 1 ]; then
    skip "$1" "quick mode"
  elif [ $built = 0 ]; then
    skip "$1" "build failed"
  elif [ -x "$2" ]; then
    step "$1" "$3" "BPPSA_BUILD_DIR='$build' '$2' '$out/$1'"
  else
    skip "$1" "$2 does not exist yet (later work)"
  fi
}
# (Each turns BPPSA_BUILD_BENCH on and builds its own programs, bench/gpu/, in the same build folder:
# a failure there cannot stop the checks above.)
hook benchmark scripts/bench_gpu.sh 270
hook cpu_scaling scripts/bench_gpu_cpu_scaling.sh 210

# The Python package for this machine's python3 (3.12 + PyTorch 2.x on the GPU machine; CI covers
# Debian's 3.11 + torch 1.13): its own build folder, CUDA off (the package does not reach the GPU
# yet), pybind11 from pip; then the pytest suite, or without pytest the standalone comparison.
if [ $configured = 1 ]; then
  step python 240 "cmake -S '$root' -B '$build-python' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH='$root/.deps' -DBPPSA_WITH_CUDA=OFF -DBPPSA_WITH_MPI=OFF -DBPPSA_WITH_AUDIO=OFF \
    -DBPPSA_BUILD_BENCH=OFF -DBPPSA_BUILD_TESTS=OFF -DBPPSA_BUILD_TOOLS=OFF -DBPPSA_BUILD_FUZZERS=OFF \
    -DBPPSA_BUILD_PYTHON=ON -DPython_EXECUTABLE=\$(command -v python3) \
  && cmake --build '$build-python' -j$jobs --target bppsa_python \
  && if python3 -c 'import pytest' 2>/dev/null; then \
       PYTHONPATH='$build-python/python' python3 -m pytest -q -p no:cacheprovider '$root/tests/python'; \
     else echo 'pytest is not installed: the standalone comparison only'; \
       PYTHONPATH='$build-python/python' python3 '$root/tests/python/smoke_vs_torch.py'; fi"
else
  skip python "configure failed"
fi

# --- summary ---------------------------------------------------------------------------------------
{
  echo
  echo "== summary ($((SECONDS - start))s of a ${budget}s budget; logs in $out)"
  cat "$out/header.txt" | sed -n '2p'
  for n in "${names[@]}"; do printf '%-12s %-58s %5ss\n' "$n" "${result[$n]}" "${seconds[$n]}"; done
  if [ -f "$out/gpu_tests.xml" ]; then
    python3 - "$out/gpu_tests.xml" <<'PY' 2>/dev/null || true
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
print("gpu tests: %s run, %s failed, %s disabled, %.1fs" % (r.get("tests"), r.get("failures"), r.get("disabled"), float(r.get("time", 0))))
for case in r.iter("testcase"):
    for f in case.findall("failure"):
        print("  FAILED %s.%s: %s" % (case.get("classname"), case.get("name"), (f.get("message") or "").splitlines()[0][:200]))
PY
  fi
  for s in memcheck racecheck; do
    [ -f "$out/$s.log" ] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY" "$out/$s.log" | sed "s/^/$s: /" | head -n 3
  done
  [ $failed = 0 ] && echo "RESULT: every step that ran passed" || echo "RESULT: FAILED (see the logs above)"
} 2>&1 | tee "$out/summary.txt"
python3 - "$out" "$failed" <<'PY' || true
import json, os, sys
out, failed = sys.argv[1], sys.argv[2] != "0"
steps = []
for line in open(os.path.join(out, "steps.tsv")):
    name, status, secs = line.rstrip("\n").split("\t")
    steps.append({"step": name, "status": status, "seconds": int(secs)})
header = open(os.path.join(out, "header.txt")).read().splitlines()
with open(os.path.join(out, "summary.json.tmp"), "w") as f:
    json.dump({"header": header, "steps": steps, "passed": not failed}, f, indent=1)
os.replace(os.path.join(out, "summary.json.tmp"), os.path.join(out, "summary.json"))
PY
exit $failed
