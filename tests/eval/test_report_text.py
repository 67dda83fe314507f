"""The report's inline text figures (eval/report_text.py): bars and sparklines checked against
cell counts worked out by hand, and the UI's inline limit."""

from __future__ import annotations

import pytest

from eval.budget import SweepPoint
from eval.report_text import (
    UI_INLINE_LIMIT,
    bar,
    budget_text,
    eff_text,
    fit,
    latency_text,
    leaderboard_text,
    spark,
    sweep_text,
)


def test_a_bar_fills_the_share_of_its_scale():
    assert bar(0.5) == "█" * 6 + "·" * 6  # 12 cells by default
    assert bar(0.583, width=20) == "█" * 12 + "·" * 8  # 0.583 x 20 = 11.66 cells
    assert bar(0.583) == "█" * 7 + "·" * 5  # 0.583 x 12 = 7.0 cells
    assert bar(0.021) == "·" * 12  # 0.25 of a cell
    assert bar(-0.3) == "·" * 12 and bar(1.4) == "█" * 12  # drawn at the scale's ends
    assert bar(15, lo=10, hi=20, width=4) == "██··"
    with pytest.raises(ValueError, match="hi > lo"):
        bar(0.5, lo=1.0, hi=1.0)


def test_a_sparkline_puts_each_value_on_eight_levels():
    # levels round((v - lo) / (hi - lo) * 7): 0, 1, 7 and 3.5 -> 4 (round half to even: 4)
    assert spark([0.0, 1 / 7, 1.0], 0.0, 1.0) == "▁▂█"
    assert spark([2.0, 4.0, 3.0]) == "▁█▅"  # own range [2, 4]: 0, 7, 3.5 -> 4
    assert spark([0.3, 0.3]) == "▄▄"  # flat: the middle level
    assert spark([]) == ""


def test_fit_keeps_what_fits_and_counts_the_rest():
    lines = [f"line {i:02d} " + "x" * 60 for i in range(30)]
    md = fit("leaderboard", "title", lines)
    assert md is not None and len(md) <= UI_INLINE_LIMIT
    kept = [line for line in md.splitlines() if line.startswith("line ")]
    assert kept == lines[:len(kept)] and 0 < len(kept) < 30
    assert f"… {30 - len(kept)} more: the full plot is plot_leaderboard_full" in md
    short = fit("x", "t", ["a", "b"])
    assert short == "**t**\n```text\na\nb\n```"
    assert fit("x", "t", ["y" * 2000]) is None


def test_leaderboard_lines_write_out_each_value_and_ci():
    board = [{"benchmark": "gsm8k", "model": "sft+grpo", "accuracy": 0.583, "ci_low": 0.42,
              "ci_high": 0.73},
             {"benchmark": "gsm8k", "model": "base", "accuracy": 0.021, "ci_low": 0.0,
              "ci_high": 0.06},
             {"benchmark": "gsm8k", "model": "unscored", "accuracy": None}]
    base, tuned = leaderboard_text(board)  # the plot's order: benchmark, then model
    assert base.startswith("gsm8k base") and base.endswith(" 0.021 [0, 0.06]")
    assert tuned.startswith("gsm8k sft+grpo") and tuned.endswith(" 0.583 [0.42, 0.73]")
    assert tuned.count("█") == 7 and base.count("█") == 0
    assert max(len(line) for line in (base, tuned)) <= 58  # the value column at 1,600 px


def test_curve_lines_follow_the_x_axis():
    curve = [{"model": "m", "benchmark": "b", "budget": 48, "budgeted_success": 0.5,
              "accuracy": 0.75},
             {"model": "m", "benchmark": "b", "budget": 16, "budgeted_success": 0.0,
              "accuracy": 0.5}]
    assert budget_text(curve) == ["m b  B = 16,48", "  BS@B  ▁▅ 0.00 0.50",
                                  "  Acc@B ▅▆ 0.50 0.75"]
    sweep = {"m b": [SweepPoint(0, 0.25, 0.1, 0.4, 10.0, 8, 8),
                     SweepPoint(64, 1.0, 0.9, 1.0, 70.0, 8, 8)]}
    assert sweep_text(sweep) == ["m b  cap = 0,64", "  acc ▃█ 0.25 1.00"]
    eff = [{"model": "m", "benchmark": "b", "thinking_cap": 32, "eff": 2.5, "mean_tokens": 80.0}]
    # the scale includes 0 (the no-thinking baseline): [0, 2.5], so 2.5 is the top level
    assert eff_text(eff) == ["m b  cap = 32", "  Eff █ +2.5@80tok"]
    latency = [{"model": "slow", "benchmark": "b", "ari": 40.0, "accuracy": 0.5},
               {"model": "fast", "benchmark": "b", "ari": 12.5, "accuracy": 0.3},
               {"model": "none", "benchmark": "b", "ari": None, "accuracy": 0.9}]
    fast, slow = latency_text(latency)
    assert fast.startswith("fast b") and "ARI 12.5" in fast and fast.endswith("██······ 0.3")
    assert slow.startswith("slow b") and "ARI 40" in slow
