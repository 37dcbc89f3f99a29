# shellcheck shell=bash
# The project's one Python: a virtual environment outside the checkout, made from requirements.txt
# and shared by every clone on the machine, at
#   $BPPSA_VENV, else ${XDG_CACHE_HOME:-~/.cache}/bppsa/venv-py<X.Y>-<sha256 of requirements.txt, 16 hex>
# Source this file from the repository root, then:
#   bppsa_make_venv     makes that environment unless it is complete for this requirements.txt
#   bppsa_install_here  installs this checkout's bppsa package into it (`pip install .`)
#   bppsa_python        prints the interpreter every script runs: $BPPSA_PYTHON when set (a machine with
#                       its own PyTorch, e.g. scripts/gpu_check.sh's), else the environment's python;
#                       fails with the fix when the environment was not made.
# The environment is built from Debian's python3 (or $BPPSA_BASE_PYTHON). Markers tell a complete
# environment (.bppsa-complete, written last, holding the requirements' hash) from one a killed or
# failed set-up left (.bppsa-partial); only a folder holding one of them is ever deleted. One lock
# per environment serialises whatever writes into it, so set-ups from several clones may run at once.

bppsa_base_python() { echo "${BPPSA_BASE_PYTHON:-/usr/bin/python3}"; }

bppsa_requirements_hash() { sha256sum requirements.txt | cut -d' ' -f1; }

bppsa_venv_path() {
  if [ -n "${BPPSA_VENV:-}" ]; then
    echo "$BPPSA_VENV"
    return
  fi
  local base ver
  base=$(bppsa_base_python)
  ver=$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || return 1
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/bppsa/venv-py$ver-$(bppsa_requirements_hash | cut -c1-16)"
}

# bppsa_venv_complete VENV: made by bppsa_make_venv from this requirements.txt.
bppsa_venv_complete() { [ "$(cat "$1/.bppsa-complete" 2>/dev/null)" = "$(bppsa_requirements_hash)" ]; }

bppsa_python() {
  if [ -n "${BPPSA_PYTHON:-}" ]; then
    echo "$BPPSA_PYTHON"
    return
  fi
  local venv
  venv=$(bppsa_venv_path) || return 1
  if ! bppsa_venv_complete "$venv"; then
    echo "no Python environment at $venv for this requirements.txt: run scripts/setup.sh, or set BPPSA_PYTHON" \
      "to an interpreter that has PyTorch" >&2
    return 1
  fi
  echo "$venv/bin/python"
}

# bppsa_locked VENV COMMAND…: runs COMMAND holding VENV's lock, saying so when it must wait.
bppsa_locked() {
  local venv=$1
  shift
  mkdir -p "$(dirname "$venv")"
  (
    if ! flock -n 9; then
      echo "setup: waiting for another set-up that holds $venv.lock" >&2
      flock 9
    fi
    "$@"
  ) 9>"$venv.lock"
}

_bppsa_make_venv_locked() {
  local base=$1 venv=$2
  bppsa_venv_complete "$venv" && return 0
  if [ -e "$venv" ] && [ ! -f "$venv/.bppsa-partial" ] && [ ! -f "$venv/.bppsa-complete" ]; then
    echo "setup: $venv exists but was not made by scripts/setup.sh: remove it, or point BPPSA_VENV elsewhere" >&2
    return 1
  fi
  rm -rf "$venv"
  echo "setup: making the Python environment $venv (requirements.txt: PyTorch, JAX, … from PyPI; once per machine)"
  "$base" -m venv "$venv" || { echo "setup: '$base -m venv' failed: install python3-venv" >&2; return 1; }
  : >"$venv/.bppsa-partial"
  "$venv/bin/python" -m pip install --quiet --requirement requirements.txt ||
    { echo "setup: pip could not install requirements.txt into $venv (is PyPI reachable?); rerun scripts/setup.sh" >&2
      return 1; }
  bppsa_requirements_hash >"$venv/.bppsa-complete"
  rm -f "$venv/.bppsa-partial"
}

bppsa_make_venv() {
  local base venv
  base=$(bppsa_base_python)
  [ -x "$base" ] || { echo "setup: $base not found: install Debian's python3 and python3-venv" >&2; return 1; }
  venv=$(bppsa_venv_path) || return 1
  bppsa_venv_complete "$venv" || bppsa_locked "$venv" _bppsa_make_venv_locked "$base" "$venv" || return 1
  touch "$venv/.bppsa-complete"  # its time: when a set-up last used this environment
  bppsa_prune_venvs "$venv"
}

# bppsa_prune_venvs KEEP: removes the other environments under ~/.cache/bppsa (6 GB each) that no
# set-up has used for 14 days and that no set-up holds now.
bppsa_prune_venvs() {
  local keep=$1 dir=${XDG_CACHE_HOME:-$HOME/.cache}/bppsa old
  [ -n "${BPPSA_VENV:-}" ] && return 0
  for old in "$dir"/venv-py*-*; do
    [ -d "$old" ] && [ "$old" != "$keep" ] || continue
    [ -n "$(find "$old" -maxdepth 1 \( -name .bppsa-complete -o -name .bppsa-partial \) -mtime -14)" ] && continue
    (flock -n 9 && echo "setup: removing $old (unused for 14 days)" && rm -rf "$old") 9>"$old.lock" || true
  done
}

# bppsa_cpu_level: the best x86-64 level this CPU and its OS run (x86-64-v4, -v3 or x86-64), asked of
# libgcc's CPU model as bppsa._cpu asks it; nothing on another processor or without GCC 12's level names.
bppsa_cpu_level() {
  [ "$(uname -m)" = x86_64 ] || return 0
  local tmp level
  tmp=$(mktemp -d) || return 0
  if printf '%s\n' 'int main() { __builtin_cpu_init();' \
      '  return __builtin_cpu_supports("x86-64-v4") ? 4 : __builtin_cpu_supports("x86-64-v3") ? 3 : 1; }' |
      c++ -x c++ - -o "$tmp/level" 2>/dev/null; then
    level=0; "$tmp/level" || level=$?
    case $level in 4) echo x86-64-v4 ;; 3) echo x86-64-v3 ;; 1) echo x86-64 ;; esac
  fi
  rm -rf "$tmp"
}

# bppsa_install_here PYTHON: this checkout's package into PYTHON's environment, under its lock. A set-up
# is for this machine: one variant, the best x86-64 level it runs (a third of pip's default build, which
# holds all three; docs/pytorch.md#cpu-variants-avx2-and-avx-512). $BPPSA_PYTHON_ISAS names others.
bppsa_install_here() {
  local py=$1 isas=${BPPSA_PYTHON_ISAS:-$(bppsa_cpu_level)} cs=()
  [ -n "$isas" ] && cs=(--config-settings=cmake.define.BPPSA_PYTHON_ISAS="$isas")
  echo "setup: pip install . into $(dirname "$(dirname "$py")") (CPU variants: ${isas:-as pip builds them})"
  bppsa_locked "$(dirname "$(dirname "$py")")" "$py" -m pip install --quiet --no-build-isolation --no-deps \
    "${cs[@]}" . ||
    { echo "setup: 'pip install .' failed (rerun it without --quiet for the build log)" >&2; return 1; }
}
