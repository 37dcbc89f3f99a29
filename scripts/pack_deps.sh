#!/usr/bin/env bash
# Packs what a machine without a package registry (the GPU machine) needs to configure bppsa into
# .deps/ (git-ignored; it travels with the working tree): the header-only libraries Eigen, CLI11
# and nlohmann-json with their CMake package files, GoogleTest's sources with a GTestConfig.cmake
# that builds them inside the project, the commit the tree was packed at (.deps/COMMIT: the copy
# may arrive without a usable .git) and a manifest of the tree as packed (.deps/MANIFEST.sha256,
# .deps/UNTRACKED), zlib's headers, and from PyPI the pure-Python wheels that a
# `pip install --no-build-isolation` of bppsa needs beyond what the GPU machine has (.deps/wheels/:
# scikit-build-core, its dependencies for Python 3.12 and pip; not pybind11 or torch, which it has;
# for scripts/gpu_check.sh --wheel; without a network it warns and packs the rest, reusing the wheels
# an earlier run packed where there are some). Run it here, on the development machine
# (Debian packages libeigen3-dev libcli11-dev nlohmann-json3-dev googletest zlib1g-dev), as the last
# thing before the tree is carried: after every change of a file (scripts/gpu_check.sh reports files
# changed after packing).
# Use: cmake -DCMAKE_PREFIX_PATH=$PWD/.deps -DBPPSA_WITH_MPI=OFF -DBPPSA_WITH_AUDIO=OFF ...
# (scripts/gpu_check.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."

out=.deps
tmp=$out.tmp
rm -rf "$tmp"
mkdir -p "$tmp"

copy() {  # copy SOURCE DEST-UNDER-.deps
  [ -e "$1" ] || { echo "pack_deps: $1 is missing; install the Debian package that provides it" >&2; exit 1; }
  mkdir -p "$tmp/$(dirname "$2")"
  cp -a "$1" "$tmp/$2"
}

# The CMake package files of these three compute their prefix from their own location (three
# folders up), so the Debian layout below the prefix is kept as it is.
copy /usr/include/eigen3 include/eigen3
copy /usr/share/eigen3/cmake share/eigen3/cmake
copy /usr/include/CLI include/CLI
copy /usr/share/cmake/CLI11 share/cmake/CLI11
copy /usr/include/nlohmann include/nlohmann
copy /usr/share/cmake/nlohmann_json share/cmake/nlohmann_json
copy /usr/src/googletest src/googletest
# zlib's headers (gzip-compressed IDX files), for an image without zlib1g-dev; scripts/gpu_check.sh
# links the system's runtime libz.so.1 (Debian's static libz.a is not position-independent code,
# which the Python extension, a shared object, would need).
copy /usr/include/zlib.h include/zlib.h
copy /usr/include/zconf.h include/zconf.h
rm -rf "$tmp/src/googletest/googletest/test" "$tmp/src/googletest/googlemock/test" "$tmp/src/googletest/googletest/samples"
# The sources' own CMakeLists still add the test folders only under gtest_build_tests/gmock_build_tests (off).

mkdir -p "$tmp/lib/cmake/GTest"
cat >"$tmp/lib/cmake/GTest/GTestConfig.cmake" <<'EOF'
# GoogleTest built from the sources packed beside this file by bppsa's scripts/pack_deps.sh:
# find_package(GTest) (CMake's FindGTest looks for this config first) gets the targets the
# system package gives, GTest::gtest and GTest::gtest_main (googletest ≥ 1.11 defines them).
if(NOT TARGET GTest::gtest)
  get_filename_component(_bppsa_gtest_src "${CMAKE_CURRENT_LIST_DIR}/../../../src/googletest" ABSOLUTE)
  set(INSTALL_GTEST OFF CACHE BOOL "GoogleTest is built inside bppsa's build, not installed" FORCE)
  set(BUILD_GMOCK ON CACHE BOOL "" FORCE)
  add_subdirectory("${_bppsa_gtest_src}" "${CMAKE_BINARY_DIR}/_deps/googletest" EXCLUDE_FROM_ALL)
  foreach(_t gtest gtest_main gmock gmock_main)
    if(NOT TARGET GTest::${_t})
      add_library(GTest::${_t} ALIAS ${_t})
    endif()
  endforeach()
  # Debian's package puts gmock's headers beside gtest's, and some tests use its matchers.
  target_include_directories(gtest SYSTEM INTERFACE "${_bppsa_gtest_src}/googlemock/include")
  message(STATUS "GTest: built from ${_bppsa_gtest_src}")
endif()
set(GTest_FOUND TRUE)
EOF

# The wheels of a `pip install --no-index --no-build-isolation --no-deps .` on the GPU machine (Python
# 3.12, PyTorch and pybind11 installed, no registry): scikit-build-core within pyproject.toml's
# [build-system] requires, its dependencies for Python 3.12 (its metadata: packaging >= 23.2 and
# pathspec >= 0.12.0 there; exceptiongroup, tomli and typing-extensions only below 3.11) and pip itself,
# for an interpreter whose venv comes without it (no ensurepip). All pure Python (py3-none-any). The
# check below reads the packed scikit-build-core's requirements, so a newer one with other
# dependencies is caught here, not on the GPU machine.
wheel_python=3.12
wheel_reqs=("scikit-build-core>=0.10" "packaging>=23.2" "pathspec>=0.12.0" "pip")
wheels_line="none"
pip_python() {  # the project's environment's python (scripts/lib/python_env.sh), else python3; one with pip
  local py
  # shellcheck disable=SC1091  # scripts/lib/python_env.sh, sourced from the repository root (the cd above)
  for py in "$(. scripts/lib/python_env.sh 2>/dev/null && bppsa_python 2>/dev/null)" "$(command -v python3)"; do
    [ -n "$py" ] && "$py" -m pip --version >/dev/null 2>&1 && { echo "$py"; return 0; }
  done
  return 1
}
pack_wheels() {
  local py
  py=$(pip_python) || { echo "no Python with pip (the project's environment or python3 -m pip)"; return 1; }
  mkdir -p "$tmp/wheels"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip download --quiet --only-binary=:all: --python-version "$wheel_python" \
    --no-deps --retries 1 --timeout 15 --dest "$tmp/wheels" "${wheel_reqs[@]}" >"$tmp/wheels.log" 2>&1 ||
    { echo "pip download failed: $(grep -v '^\s*$' "$tmp/wheels.log" | tail -n 1)"; return 1; }
  # Every requirement of the packed scikit-build-core (its markers for Python $wheel_python) is met by
  # a packed wheel, and every wheel is pure Python.
  "$py" - "$tmp/wheels" "$wheel_python" <<'PY' 2>&1 || return 1
import glob, os, re, sys, zipfile
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
from pip._vendor.packaging.version import Version
folder, pyver = sys.argv[1], sys.argv[2]
have = {}
for w in glob.glob(os.path.join(folder, "*.whl")):
    name, version, tag = re.match(r"([^-]+)-([^-]+)-(.+)\.whl$", os.path.basename(w)).groups()
    if not tag.endswith("-none-any"):
        sys.exit(f"{os.path.basename(w)} is not pure Python")
    have[canonicalize_name(name)] = (Version(version), w)
if "scikit-build-core" not in have:
    sys.exit("no scikit-build-core wheel")
whl = have["scikit-build-core"][1]
with zipfile.ZipFile(whl) as z:
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
env = {"python_version": pyver, "python_full_version": pyver + ".0", "extra": ""}
missing = []
for line in meta.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate(env):
        continue
    got = have.get(canonicalize_name(req.name))
    if got is None or not req.specifier.contains(got[0], prereleases=True):
        missing.append(str(req))
if missing:
    sys.exit("scikit-build-core needs for Python %s what is not packed: %s (add it to wheel_reqs)" % (pyver, ", ".join(missing)))
PY
  find "$tmp/wheels" -maxdepth 1 -name '*.whl' -printf '%f\n' | sort >"$tmp/wheels/PACKED.tmp"
  mv "$tmp/wheels/PACKED.tmp" "$tmp/wheels/PACKED"
  echo "for Python $wheel_python, $(date -u +%Y-%m-%dT%H:%M:%SZ) with $("$py" -m pip --version | cut -d' ' -f1-2)" >>"$tmp/wheels/PACKED"
  rm -f "$tmp/wheels.log"
}
if why=$(pack_wheels); then
  wheels_line=$(sed -n 's/\.whl$//p' "$tmp/wheels/PACKED" | sed 's/-py[0-9.]*-none-any$//' | paste -sd' ' -)
  wheels_line="$wheels_line (Python $wheel_python)"
else
  rm -rf "$tmp/wheels"
  if [ -f "$out/wheels/PACKED" ]; then
    cp -a "$out/wheels" "$tmp/wheels"
    wheels_line="$(sed -n 's/\.whl$//p' "$tmp/wheels/PACKED" | sed 's/-py[0-9.]*-none-any$//' | paste -sd' ' -) (reused: $(tail -n 1 "$tmp/wheels/PACKED"))"
    echo "pack_deps: WARNING: the wheels for scripts/gpu_check.sh --wheel were not downloaded ($why); the ones packed" \
      "before are reused: $wheels_line" >&2
  else
    wheels_line="none ($why)"
    echo "pack_deps: WARNING: the wheels for scripts/gpu_check.sh --wheel were not downloaded ($why): .deps/ is" \
      "packed without them, and gpu_check.sh --wheel will report itself skipped. Rerun where PyPI is reachable." >&2
  fi
  rm -f "$tmp/wheels.log"
fi

# No package file may point back into this machine's /usr: the copy must work anywhere.
if grep -rn --include='*.cmake' '/usr/' "$tmp/share" "$tmp/lib" | grep -v '^\s*#' >/dev/null; then
  echo "pack_deps: absolute /usr paths in the packed CMake files:" >&2
  grep -rn --include='*.cmake' '/usr/' "$tmp/share" "$tmp/lib" >&2
  exit 1
fi

# The commit, for a copy of the tree that has no (usable) .git, and the tree as packed: the sha256 of
# every tracked file as it is in the working tree and of every untracked file that is not ignored
# (both travel with the tree) in MANIFEST.sha256, the untracked ones' names in UNTRACKED.
# scripts/gpu_check.sh checks the copy against it (sha256sum -c), so a file changed after packing
# shows: "tree: K files differ from what pack_deps.sh packed".
{
  if git rev-parse --git-dir >/dev/null 2>&1; then
    dirty=$(git status --porcelain --untracked-files=no | wc -l)
    untracked=$(git ls-files --others --exclude-standard | wc -l)
    echo "commit $(git rev-parse HEAD)$([ "$dirty" -gt 0 ] && echo " + $dirty modified tracked files")"
    echo "subject $(git log -1 --format=%s)"
    echo "modified $dirty"
    echo "untracked $untracked"
  else
    echo "commit unknown (packed outside a git checkout)"
  fi
  echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "eigen $(sed -n 's/.*PACKAGE_VERSION "\([0-9.]*\)".*/\1/p' /usr/share/eigen3/cmake/Eigen3ConfigVersion.cmake | head -1)"
  echo "cli11 $(sed -n 's/set(PACKAGE_VERSION "\(.*\)")/\1/p' /usr/share/cmake/CLI11/CLI11ConfigVersion.cmake | head -1)"
  echo "nlohmann_json $(sed -n 's/set(PACKAGE_VERSION "\(.*\)")/\1/p' /usr/share/cmake/nlohmann_json/nlohmann_jsonConfigVersion.cmake | head -1)"
  echo "googletest $(dpkg-query -W -f='${Version}' googletest 2>/dev/null || echo unknown)"
  echo "wheels $wheels_line"
} >"$tmp/COMMIT"
if git rev-parse --git-dir >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do if [ -f "$f" ]; then printf '%s\0' "$f"; fi; done |
    xargs -0 -r sha256sum >"$tmp/MANIFEST.sha256"
  git ls-files --others --exclude-standard >"$tmp/UNTRACKED"
fi

rm -rf "$out"
mv "$tmp" "$out"
echo "pack_deps: $(du -sh "$out" | cut -f1) in $out/ ($(head -1 "$out/COMMIT")$([ -f "$out/MANIFEST.sha256" ] &&
  echo "; $(wc -l <"$out/MANIFEST.sha256") files in MANIFEST.sha256"))"
