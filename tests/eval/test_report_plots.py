"""One run of the evaluation report (eval/report_plots.py): the tables computed from samples,
which plots are drawn and why the others are skipped, the thinking-cap sweeps, the pairwise
check and the published folder."""

import pytest

from eval.report_plots import (
    draw_plots,
    invalid_pairs,
    png_md,
    publish_latest,
    report_tables,
    skip_reasons,
    skipped_plots,
    thinking_sweeps,
)


def _sample(model, pid, correct, **kw):
    return {"model": model, "benchmark": "gsm8k", "problem_id": pid, "sample_index": 0,
            "correct": correct, "budget": None, "thinking_cap": None, "completion_tokens": 10,
            "tokens_used": None, "generation_limit": None, "checkpoint_id": None, **kw}


SAMPLES = ([_sample("a", f"p{i}", True) for i in range(6)]
           + [_sample("b", f"p{i}", i < 3) for i in range(6)]
           + [_sample("a", "p0", c, thinking_cap=cap, completion_tokens=t)
              for cap, c, t in ((0, False, 5), (32, True, 40))]
           + [_sample("a", "p9", None, thinking_cap=32)])  # ungraded: no sweep point


def test_tables_from_samples():
    tables = report_tables(SAMPLES, {})
    (pair,) = tables.pairs
    assert (pair["model_a"], pair["model_b"], pair["n"]) == ("a", "b", 6)
    assert pair["diff"] == pytest.approx(0.5)
    assert tables.budget_rows == []  # no budgeted sample
    assert tables.rows_written == len(tables.pairs) + len(tables.eff_rows)
    assert {r["model"] for r in tables.shared} == {"a", "b"}


def test_thinking_sweeps_keep_graded_capped_samples():
    assert thinking_sweeps(SAMPLES) == {"a gsm8k": [
        {"cap": 0, "problem_id": "p0", "correct": False, "tokens": 5},
        {"cap": 32, "problem_id": "p0", "correct": True, "tokens": 40}]}


def test_skip_reasons_say_what_to_run():
    reasons = skip_reasons([_sample("a", "p0", True)], [], [], [], [])
    assert set(reasons) == {"latency_pareto", "budget_curves", "thinking_sweep", "eff_curve"}
    assert "mode 'interleaved'" in reasons["latency_pareto"]
    assert reasons["eff_curve"] == "no thinking-cap sweep with a no-thinking run (cap 0) yet"
    some = skip_reasons(SAMPLES, [{"x": 1}], [{"x": 1}], [], ["a gsm8k"])
    assert set(some) == {"eff_curve"} and "['a gsm8k']" in some["eff_curve"]
    assert skipped_plots({"eff_curve": None, "latency_pareto": "drawn.png"},
                         {"eff_curve": "why", "latency_pareto": "why"}) == {"eff_curve": "why"}


def test_plots_are_drawn_into_the_run_folder_and_published(tmp_path):
    board = [{"benchmark": "gsm8k", "model": m, "accuracy": a, "ci_low": a - 0.1,
              "ci_high": a + 0.1, "n_problems": 6} for m, a in (("a", 1.0), ("b", 0.5))]
    tables = report_tables(SAMPLES, {})
    plots = draw_plots(tmp_path / "run", board=board, shared=tables.shared, samples=SAMPLES,
                       latency=[], curve=[], eff=[])
    assert set(plots) == {"leaderboard", "latency_pareto", "budget_curves", "thinking_sweep",
                          "eff_curve"}
    assert plots["leaderboard"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots["thinking_sweep"] is not None and plots["latency_pareto"] is None
    assert png_md(plots["leaderboard"]).startswith("![leaderboard](data:image/png;base64,")
    (tmp_path / "latest").mkdir()
    (tmp_path / "latest" / "stale.png").write_bytes(b"old")
    publish_latest(tmp_path / "run", tmp_path / "latest")
    assert sorted(p.name for p in (tmp_path / "latest").iterdir()) == sorted(
        p.name for p in plots.values() if p is not None)


def test_invalid_pairs():
    good = {"p_bootstrap": 0.5, "p_ttest": 0.0, "diff": 0.2, "ci_low": 0.1, "ci_high": 0.3}
    outside = dict(good, diff=0.4)
    zero_bootstrap = dict(good, p_bootstrap=0.0)
    assert invalid_pairs([good, outside, zero_bootstrap]) == [outside, zero_bootstrap]
