#!/usr/bin/env bash
# The Python package on the oldest PyTorch it claims: 1.13 (Debian 12's python3-torch, with Debian's
# own Python 3.11). Runs tests/python/ there: eager mode must pass everything; what needs a newer
# PyTorch (torch.export, custom operators behind torch.compile) skips, saying so. The package is the
# one scripts/setup.sh installed into the project's environment (same Python ABI), copied out.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/python_env.sh
. scripts/lib/python_env.sh

# shellcheck source=lib/debian.sh
. scripts/lib/debian.sh
# python3-onnx: the ONNX export tests read the files (Debian has no onnxruntime to run them).
bppsa_apt_install python3-torch python3-pytest python3-onnx

pkg=$("$(bppsa_python)" -c "import bppsa, os; print(os.path.dirname(bppsa.__file__))")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$pkg" "$tmp/bppsa"
root=$PWD
cd "$tmp"
/usr/bin/python3 -c "import sys, torch; print('oldest claimed PyTorch:', torch.__version__, 'on Python', sys.version.split()[0])"
PYTHONPATH="$tmp:$root/tests/python" /usr/bin/python3 -m pytest -q -p no:cacheprovider "$root/tests/python"
