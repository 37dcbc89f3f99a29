# Which build of the native engine this process loads. The package holds one extension per CPU level
# (bppsa/_C_<level>, CMake's BPPSA_PYTHON_ISAS); exactly one is imported per process (two would register
# the same C++ types with pybind11): the best this CPU runs, or the one $BPPSA_CPU_ISA names.
import importlib
import importlib.machinery
import os
import sys

ENV = "BPPSA_CPU_ISA"
# Preference, lowest first. native (built for the machine that built it) and generic (the compiler's
# default target) are taken to run wherever they are installed; the x86-64 levels only where the CPU has them.
LEVELS = ("generic", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "native")
_ALWAYS_RUN = ("generic", "native")


def module_name(level):
    """The extension module of `level`: x86-64-v3 → _C_x86_64_v3."""
    return "_C_" + level.replace("-", "_")


def _describe(levels):
    return ", ".join(levels) if levels else "none"


def choose(installed, supported, override=None):
    """The level to load, from the levels `installed` (variants present), the x86-64 levels the CPU runs
    (`supported`) and $BPPSA_CPU_ISA's value (`override`, None or "" when unset). ImportError when nothing
    fits, naming the variable, its value, what the CPU runs and what is installed."""
    installed = [lv for lv in LEVELS if lv in installed]
    runnable = [lv for lv in installed if lv in _ALWAYS_RUN or lv in supported]
    facts = (f"this CPU runs x86-64 levels: {_describe([lv for lv in LEVELS if lv in supported])}; "
             f"this install has variants: {_describe(installed)}")
    if override:
        if override not in LEVELS:
            raise ImportError(f"bppsa: {ENV}={override} is not a CPU level; expected one of {', '.join(LEVELS)} "
                              f"({facts}), or unset it to choose the best")
        if override not in installed:
            raise ImportError(f"bppsa: {ENV}={override}: this install has no variant for that level ({facts}); "
                              f"unset {ENV}, or rebuild with BPPSA_PYTHON_ISAS including {override}")
        if override not in runnable:
            raise ImportError(f"bppsa: {ENV}={override}: this CPU cannot run it ({facts}); unset {ENV} or name "
                              f"one of: {_describe(runnable)}")
        return override
    if not runnable:
        raise ImportError(f"bppsa: no native extension this CPU can run ({facts}); reinstall bppsa with "
                          "BPPSA_PYTHON_ISAS including x86-64 (pip's default) or built on this machine")
    return runnable[-1]


def installed_levels(folder):
    """The levels whose extension module lies in `folder`."""
    names = set()
    for entry in os.listdir(folder):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if entry.endswith(suffix):
                names.add(entry[: -len(suffix)])
    return [lv for lv in LEVELS if module_name(lv) in names]


def supported_levels():
    """The x86-64 levels this CPU and its OS run (the baseline-compiled bppsa._cpu asks the CPU)."""
    from . import _cpu
    return tuple(_cpu.supported_levels())


class Loaded:
    """The variant this process imported: `module`, its `level`, what was `installed`, what the CPU
    `supported`, and `override` ($BPPSA_CPU_ISA, None when unset)."""

    def __init__(self, module, level, installed, supported, override):
        self.module, self.level, self.installed, self.supported, self.override = (
            module, level, installed, supported, override)


def load():
    """Imports the chosen variant (once per process; it is also bppsa._C) and returns it as a Loaded."""
    package = __name__.rpartition(".")[0]
    installed = installed_levels(os.path.dirname(os.path.abspath(__file__)))
    supported = supported_levels()
    override = os.environ.get(ENV) or None
    level = choose(installed, supported, override)
    module = importlib.import_module(f"{package}.{module_name(level)}")
    sys.modules[f"{package}._C"] = module
    return Loaded(module, level, installed, supported, override)
