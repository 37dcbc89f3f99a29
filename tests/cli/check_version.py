#!/usr/bin/env python3
"""`bppsa --version` names the version and the CPU level CMake was configured with, and the SIMD that
the compiler enables for that level's flag (read from the compiler's own predefined macros, not from
bppsa).

Usage: check_version.py BPPSA_BINARY WORK_DIR VERSION LEVEL CXX_COMPILER [FLAG]."""
import subprocess
import sys

BIN, _WORK, VERSION, LEVEL, CXX = sys.argv[1:6]
FLAG = sys.argv[6] if len(sys.argv) > 6 else ""


def expected_vectorization():
    """What Eigen vectorises with under FLAG, from the compiler's macros (Eigen keys on the same ones)."""
    out = subprocess.run([CXX, *([FLAG] if FLAG else []), "-dM", "-E", "-x", "c++", "/dev/null"],
                         capture_output=True, text=True, check=True).stdout
    macros = {line.split()[1] for line in out.splitlines() if line.startswith("#define ")}
    if "__AVX512F__" in macros:
        return "AVX-512"
    if "__AVX2__" in macros:
        return "AVX2+FMA" if "__FMA__" in macros else "AVX2"
    for macro, name in (("__AVX__", "AVX"), ("__SSE4_2__", "SSE4.2"), ("__SSE2__", "SSE2"), ("__ARM_NEON", "NEON")):
        if macro in macros:
            return name
    return None


r = subprocess.run([BIN, "--version"], capture_output=True, text=True)
lines = r.stdout.splitlines()
print(r.stdout, end="")
failures = []
if r.returncode != 0:
    failures.append(f"exit {r.returncode}")
if not lines or lines[0] != f"bppsa {VERSION}":
    failures.append(f"first line is not 'bppsa {VERSION}'")
facts = lines[1] if len(lines) > 1 else ""
if f"cpu {LEVEL} " not in facts + " ":
    failures.append(f"the CPU level is not {LEVEL}")
if FLAG and f"({FLAG})" not in facts:
    failures.append(f"the flag is not {FLAG}")
if not FLAG and "no -march" not in facts:
    failures.append("a flag is named where CMake set none")
vec = expected_vectorization()
if vec and f"Eigen vectorises with {vec};" not in facts:
    failures.append(f"the compiler enables {vec} under '{FLAG}', the report says otherwise")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
