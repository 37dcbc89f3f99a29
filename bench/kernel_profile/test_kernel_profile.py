#!/usr/bin/env python3
"""Checks of bench/kernel_profile/kernel_profile.py's parsing and per-step arithmetic on excerpts of real ncu
output (ncu 2025.3, an H200, 2026-11-27) and a hand-made SASS table whose sums are worked out here by
hand. Standard library only; exit 0 or an AssertionError.   scripts/python.sh bench/kernel_profile/test_kernel_profile.py"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_profile  # noqa: E402

# `ncu --import R --print-details all`, cut down (the launch line and two of its tables, as printed).
DETAILS = """[2074] python3.12@127.0.0.1
  void unnamed>::forward_kernel<float>(LayerArgs<T1>) (16, 1, 1)x(32, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Warning: Data collection happened without fixed GPU frequencies. Profiling results may be inconsistent.
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    DRAM Frequency                  Ghz         3.20
    SM Frequency                    Ghz         1.98
    Elapsed Cycles                cycle      940,875
    Duration                         us       475.20
    Waves Per SM                                0.01
    ----------------------- ----------- ------------
    Section: Warp State Statistics
    ---------------------------------------- ----------- ------------
    Metric Name                              Metric Unit Metric Value
    ---------------------------------------- ----------- ------------
    Warp Cycles Per Issued Instruction             cycle         3.78
    ---------------------------------------- ----------- ------------
    Table Name : Warp State (All Cycles)
    Stall Wait                      inst         1.72
    Stall Long Scoreboard           inst         0.39
    Stall Branch Resolving          inst         0.29
    Stall GMMA                      inst            0
"""

# `ncu --import R --page source --csv --print-source sass`: the kernel line, the header (a subset of
# the real columns, in the real order) and four instructions.
SASS = '''"Kernel Name","void forward_kernel<float>(LayerArgs<T1>)",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","# Samples","Instructions Executed"
"0x7f00","      LDC R1, c[0x0][0x28]","2","2","2","16"
"0x7f10","      FADD R12, R12, R19","2,846","2,800","2,846","16,000"
"0x7f20","      BAR.SYNC.DEFER_BLOCKING 0x0","4","4","4","16,000"
"0x7f30","      MOV R0, R22","715","700","715","16,000"
'''


def test_details():
    d = kernel_profile.parse_details(DETAILS)
    assert d["grid"] == 16 and d["block"] == 32, d
    m = d["metrics"]
    assert m["Elapsed Cycles"] == (940875, "cycle") and m["Duration"] == (475.2, "us"), m
    assert m["SM Frequency"] == (1.98, "Ghz") and m["Waves Per SM"] == (0.01, "")
    assert m["Warp Cycles Per Issued Instruction"] == (3.78, "cycle")
    assert m["Stall Wait"] == (1.72, "inst") and m["Stall GMMA"] == (0, "inst")
    assert "Metric Name" not in m and not any(k.startswith("---") for k in m)


def test_units():
    # ncu scales a launch of a millisecond or more to ms (and clocks to Mhz): the figures stay in µs and GHz.
    text = DETAILS.replace("Duration                         us       475.20",
                           "Duration                         ms         2.46").replace(
        "SM Frequency                    Ghz         1.98", "SM Frequency                    Mhz       1,755.00")
    r = kernel_profile.summarize("backward_kernel", kernel_profile.parse_details(text),
                                 {"executed": 0, "samples": 0, "top": []}, steps=1000)
    assert abs(r["duration_us"] - 2460.0) < 1e-9 and abs(r["sm_ghz"] - 1.755) < 1e-12, r
    assert kernel_profile.scaled((3.0, "furlong"), kernel_profile.TIME_US) is None


def test_sass_and_summary():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sass.csv")
        with open(path, "w") as f:
            f.write(SASS)
        s = kernel_profile.parse_sass(path, top=2)
    # 16 + 16,000 × 3 executed; 2 + 2,846 + 4 + 715 samples.
    assert s["executed"] == 48016 and s["samples"] == 3567, s
    assert [t["sass"] for t in s["top"]] == ["FADD R12, R12, R19", "MOV R0, R22"], s["top"]
    r = kernel_profile.summarize("forward_kernel", kernel_profile.parse_details(DETAILS), s, steps=1000)
    # 16 blocks of one warp, 1000 steps: 48,016 / 16,000 warp-steps; 940,875 cycles / 1000 steps.
    assert abs(r["instructions_per_warp_step"] - 3.001) < 1e-9, r
    assert abs(r["cycles_per_step"] - 940.875) < 1e-9
    assert list(r["stalls_per_instruction"]) == ["Wait", "Long Scoreboard", "Branch Resolving"]  # zeros left out
    md = kernel_profile.table([r], "RNN I1 H20 B16 T1000")
    assert "| forward_kernel | 16×32 | 940,875 | 475.2 | 941 | 3.0 | 3.78 |" in md, md
    assert "79.8%" in md  # 2,846 of 3,567 samples


if __name__ == "__main__":
    test_details()
    test_units()
    test_sass_and_summary()
    print("kernel_profile: 3 checks passed")
