#!/usr/bin/env bash
# Sets bppsa up on Debian 12; safe to rerun, and quick when nothing changed:
#   1. Debian's packages (only the missing ones): the compiler and C++ libraries, Python, MPI,
#      and Fashion-MNIST (dataset-fashion-mnist: IDX files in /usr/share/datasets/fashion-mnist).
#   2. The Python environment from requirements.txt (PyTorch, JAX, numpy, matplotlib, pytest, onnx and
#      onnxruntime), made once per machine outside the checkout, at ~/.cache/bppsa/venv-<…> (scripts/lib/python_env.sh).
#   3. A Release build of the library, the CLI, the tests and the benchmarks into build/.
#   4. The Python package bppsa installed into that environment with `pip install .` (pyproject.toml).
# Extra arguments go to CMake's configure step of build/.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/python_env.sh
. scripts/lib/python_env.sh
# shellcheck source=lib/debian.sh
. scripts/lib/debian.sh

packages=(g++ cmake make pkg-config libeigen3-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libgtest-dev
  libbenchmark-dev libsndfile1-dev libaubio-dev python3 python3-dev python3-venv libopenmpi-dev openmpi-bin iproute2
  util-linux dataset-fashion-mnist)
bppsa_apt_install "${packages[@]}"

bppsa_make_venv
py=$(bppsa_venv_path)/bin/python  # the environment's, even where BPPSA_PYTHON names another for running

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_TESTS=ON -DBPPSA_BUILD_TOOLS=ON -DBPPSA_BUILD_BENCH=ON \
  -DBPPSA_BUILD_PYTHON=OFF -DPython_EXECUTABLE="$py" "$@" >/dev/null
cmake --build build -j"$(nproc)"

# The package from this checkout, built by scikit-build-core in build/python-<tag>/ (kept between
# runs, so only what changed is rebuilt) with the environment's own scikit-build-core and pybind11.
bppsa_install_here "$py"
