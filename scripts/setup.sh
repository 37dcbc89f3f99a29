#!/usr/bin/env bash
# Installs what bppsa needs on Debian 12 (only the missing packages; safe to rerun) and
# builds it in Release into build/. Extra arguments are passed to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake make pkg-config libeigen3-dev libcli11-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBPPSA_BUILD_TESTS=ON -DBPPSA_BUILD_TOOLS=ON -DBPPSA_BUILD_BENCH=ON \
  "$@" >/dev/null
cmake --build build -j"$(nproc)"
