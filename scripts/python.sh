#!/usr/bin/env bash
# Runs the project's Python (the environment scripts/setup.sh made, with PyTorch, JAX, numpy,
# matplotlib, pytest and the installed bppsa package) with the given arguments, from the caller's
# folder:   scripts/python.sh bench/pytorch/pytorch.py --quick      scripts/python.sh -m pytest tests/python
# $BPPSA_PYTHON, when set, is run instead.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/python_env.sh
py=$(cd "$here" && . scripts/lib/python_env.sh && bppsa_python)
exec "$py" "$@"
