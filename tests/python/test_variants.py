# The choice of the one native variant a process loads (bppsa/_variants.py's choose(), a pure function
# of the installed levels, the CPU's levels and $BPPSA_CPU_ISA), with fake CPUs and installs; and that
# the loaded variant is the one build_info() reports.
import importlib.machinery
import os

import pytest

import bppsa
from bppsa import _variants
from bppsa._variants import choose

ALL = ["x86-64", "x86-64-v3", "x86-64-v4"]  # pip's default BPPSA_PYTHON_ISAS
V4_CPU = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")
V3_CPU = ("x86-64", "x86-64-v2", "x86-64-v3")
V2_CPU = ("x86-64", "x86-64-v2")
OLD_CPU = ("x86-64",)


@pytest.mark.parametrize("cpu, want", [(V4_CPU, "x86-64-v4"), (V3_CPU, "x86-64-v3"), (V2_CPU, "x86-64"),
                                       (OLD_CPU, "x86-64")])
def test_the_best_variant_the_cpu_runs(cpu, want):
    assert choose(ALL, cpu) == want
    assert choose(list(reversed(ALL)), cpu) == want  # the order of the listing does not matter


def test_a_missing_variant_falls_back_to_the_next_best():
    assert choose(["x86-64", "x86-64-v3"], V4_CPU) == "x86-64-v3"
    assert choose(["x86-64", "x86-64-v4"], V3_CPU) == "x86-64"
    assert choose(["x86-64-v2"], V4_CPU) == "x86-64-v2"


def test_native_and_generic_builds_run_anywhere_and_native_is_preferred():
    assert choose(["native"], ()) == "native"  # a plain CMake build, or a processor that is not x86-64
    assert choose(["generic"], ()) == "generic"
    assert choose(["native", "x86-64-v4"], V4_CPU) == "native"
    assert choose(["generic", "x86-64-v3"], V3_CPU) == "x86-64-v3"


def test_nothing_the_cpu_runs():
    with pytest.raises(ImportError, match=r"no native extension this CPU can run \(this CPU runs x86-64 levels: "
                                          r"x86-64, x86-64-v2, x86-64-v3; this install has variants: x86-64-v4\)"):
        choose(["x86-64-v4"], V3_CPU)
    with pytest.raises(ImportError, match=r"this install has variants: none"):
        choose([], V4_CPU)


@pytest.mark.parametrize("level", ALL)
def test_override_names_a_variant_the_cpu_runs(level):
    assert choose(ALL, V4_CPU, level) == level


def test_override_unset_or_empty_chooses():
    assert choose(ALL, V4_CPU, None) == choose(ALL, V4_CPU, "") == "x86-64-v4"


def test_override_the_cpu_cannot_run():
    with pytest.raises(ImportError, match=r"BPPSA_CPU_ISA=x86-64-v4: this CPU cannot run it \(this CPU runs x86-64 "
                                          r"levels: x86-64, x86-64-v2, x86-64-v3; this install has variants: "
                                          r"x86-64, x86-64-v3, x86-64-v4\); unset BPPSA_CPU_ISA or name one of: "
                                          r"x86-64, x86-64-v3"):
        choose(ALL, V3_CPU, "x86-64-v4")


def test_override_not_installed():
    with pytest.raises(ImportError, match=r"BPPSA_CPU_ISA=x86-64-v2: this install has no variant for that level "
                                          r"\(this CPU runs x86-64 levels: x86-64, x86-64-v2, x86-64-v3, x86-64-v4; "
                                          r"this install has variants: x86-64, x86-64-v3, x86-64-v4\)"):
        choose(ALL, V4_CPU, "x86-64-v2")


@pytest.mark.parametrize("bad", ["avx512", "x86_64_v3", "V3", "x86-64-v5"])
def test_override_that_is_no_level(bad):
    with pytest.raises(ImportError, match=rf"BPPSA_CPU_ISA={bad} is not a CPU level; expected one of generic, "
                                          r"x86-64, x86-64-v2, x86-64-v3, x86-64-v4, native"):
        choose(ALL, V4_CPU, bad)


def test_installed_levels_reads_the_extension_files(tmp_path):
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in ["_C_x86_64", "_C_x86_64_v4", "_cpu", "_C_unknown", "_C_x86_64_v3.txt"]:
        (tmp_path / (name + suffix)).write_text("")
    assert _variants.installed_levels(tmp_path) == ["x86-64", "x86-64-v4"]


def test_build_info_reports_the_variant_loaded():
    info = bppsa.build_info()
    assert info["variant"] == "bppsa." + _variants.module_name(info["cpu_isa"]) == bppsa._C.__name__
    assert info["version"] == bppsa.__version__
    assert info["cpu_isa"] in info["installed"]
    assert info["cpu_supports"] == list(_variants.supported_levels())
    assert info["cpu_best"] == (info["cpu_supports"][-1] if info["cpu_supports"] else None)
    assert info["override"] == (os.environ.get("BPPSA_CPU_ISA") or None)
    if info["override"] is None:
        assert info["cpu_isa"] == choose(info["installed"], info["cpu_supports"])
    assert isinstance(info["cuda"], bool) and info["cuda"] == bppsa._C.cuda_built()
