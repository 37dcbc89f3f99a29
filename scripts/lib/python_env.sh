# shellcheck shell=bash
# The project's one Python: a virtual environment outside the checkout, made from requirements.txt
# and shared by every clone on the machine, at
#   $BPPSA_VENV, else ${XDG_CACHE_HOME:-~/.cache}/bppsa/venv-py<X.Y>-<sha256 of requirements.txt, 16 hex>
# Source this file from the repository root, then:
#   bppsa_make_venv   makes that environment unless it is complete already (scripts/setup.sh calls it)
#   bppsa_python      prints the interpreter every script runs: $BPPSA_PYTHON when set (a machine with
#                     its own PyTorch, e.g. scripts/gpu_check.sh's), else the environment's python;
#                     fails with the fix when the environment was not made.
# The environment is built from Debian's python3 (or $BPPSA_BASE_PYTHON). A marker written last
# (.bppsa-complete) tells a complete environment from one a killed or failed set-up left; a lock
# lets two set-ups on one machine run at once.

bppsa_base_python() { echo "${BPPSA_BASE_PYTHON:-/usr/bin/python3}"; }

bppsa_venv_path() {
  if [ -n "${BPPSA_VENV:-}" ]; then
    echo "$BPPSA_VENV"
    return
  fi
  local base ver hash
  base=$(bppsa_base_python)
  ver=$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || return 1
  hash=$(sha256sum requirements.txt | cut -c1-16)
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/bppsa/venv-py$ver-$hash"
}

bppsa_python() {
  if [ -n "${BPPSA_PYTHON:-}" ]; then
    echo "$BPPSA_PYTHON"
    return
  fi
  local venv
  venv=$(bppsa_venv_path) || return 1
  if [ ! -f "$venv/.bppsa-complete" ]; then
    echo "no Python environment at $venv (for this requirements.txt): run scripts/setup.sh, or set BPPSA_PYTHON" \
      "to an interpreter that has PyTorch" >&2
    return 1
  fi
  echo "$venv/bin/python"
}

bppsa_make_venv() {
  local base venv
  base=$(bppsa_base_python)
  [ -x "$base" ] || { echo "setup: $base not found: install Debian's python3 and python3-venv" >&2; return 1; }
  venv=$(bppsa_venv_path) || return 1
  [ -f "$venv/.bppsa-complete" ] && return 0
  mkdir -p "$(dirname "$venv")"
  (
    flock 9
    [ -f "$venv/.bppsa-complete" ] && exit 0
    rm -rf "$venv"
    echo "setup: making the Python environment $venv (requirements.txt: PyTorch, JAX, … from PyPI; once per machine)"
    "$base" -m venv "$venv" || { echo "setup: '$base -m venv' failed: install python3-venv" >&2; exit 1; }
    "$venv/bin/python" -m pip install --quiet --requirement requirements.txt ||
      { echo "setup: pip could not install requirements.txt into $venv (is PyPI reachable?); rerun scripts/setup.sh" >&2
        exit 1; }
    sha256sum requirements.txt >"$venv/.bppsa-complete"
  ) 9>"$venv.lock"
}
