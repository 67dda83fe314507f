import dagster as dg
import pytest

from eval.reports import (
    pairwise_rows,
    per_problem_scores,
    plot_budget_curves,
    plot_latency_pareto,
    plot_leaderboard,
    plot_thinking_sweep,
)


def _samples():
    rows = []
    # model a: right on p0..p7 (both samples); model b: right only on p0..p3
    for i in range(8):
        for s in range(2):
            rows.append({"model": "a", "benchmark": "gsm8k", "problem_id": f"p{i}", "sample_index": s,
                         "correct": True})
            rows.append({"model": "b", "benchmark": "gsm8k", "problem_id": f"p{i}", "sample_index": s,
                         "correct": i < 4})
    rows.append({"model": "a", "benchmark": "gsm8k", "problem_id": "p0", "sample_index": 0,
                 "correct": False, "budget": 100})  # budgeted rows are not part of the comparison
    return rows


def test_per_problem_scores_and_pairwise():
    scores = per_problem_scores(_samples())
    assert scores[("gsm8k", "a")]["p0"] == 1.0 and scores[("gsm8k", "b")]["p5"] == 0.0
    (row,) = pairwise_rows(_samples(), n_boot=2000)
    assert (row["model_a"], row["model_b"], row["n"]) == ("a", "b", 8)
    assert row["diff"] == pytest.approx(0.5) and row["mean_a"] == 1.0 and row["mean_b"] == 0.5
    assert row["ci_low"] <= 0.5 <= row["ci_high"] and row["p_ttest"] < 0.05


def test_pairwise_skips_models_without_shared_problems():
    rows = [{"model": "a", "benchmark": "x", "problem_id": "p1", "sample_index": 0, "correct": True},
            {"model": "b", "benchmark": "x", "problem_id": "p2", "sample_index": 0, "correct": True}]
    assert pairwise_rows(rows) == []


def test_plots_write_png_files_or_nothing(tmp_path):
    from eval.budget import thinking_budget_sweep

    board = [{"benchmark": "gsm8k", "model": "a", "accuracy": 0.5, "ci_low": 0.3, "ci_high": 0.7}]
    assert plot_leaderboard(board, tmp_path / "l.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_leaderboard([], tmp_path / "e.png") is None and not (tmp_path / "e.png").exists()
    assert plot_latency_pareto([{"model": "a", "benchmark": "g", "ari": 10.0, "accuracy": 0.4}],
                               tmp_path / "p.png").stat().st_size > 1000
    assert plot_latency_pareto([], tmp_path / "p2.png") is None
    curve = [{"model": "a", "benchmark": "g", "budget": b, "budgeted_success": 0.2, "accuracy": 0.3}
             for b in (100, 200)]
    assert plot_budget_curves(curve, tmp_path / "b.png").stat().st_size > 1000
    sweep = thinking_budget_sweep([(32, "p1", True, 10), (64, "p1", True, 20), (32, "p2", False, 30),
                                   (64, "p2", True, 40)])
    assert plot_thinking_sweep({"a": sweep}, tmp_path / "s.png").stat().st_size > 1000


def test_eval_reports_asset_writes_pairwise_and_plots(weft_home):
    from assets import eval_reports, evaluation
    from assets.resources import WarehouseResource
    from eval.runner import score
    from warehouse import Warehouse

    wh = Warehouse()
    samples = _samples()
    for model in ("a", "b"):
        rows = [r for r in samples if r["model"] == model and r.get("budget") is None]
        wh.write("eval_samples", rows, partition=f"gsm8k|{model}")
        wh.write("eval_scores", score(rows, model_label=model, benchmark="gsm8k"), partition=f"gsm8k|{model}")
    result = dg.materialize([evaluation.eval_scores, eval_reports.eval_reports, eval_reports.check_eval_reports_pairwise_valid],
                            selection=["eval_reports"], resources={"warehouse": WarehouseResource()},
                            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    pair = wh.sql("SELECT model_a, model_b, n, diff FROM pairwise").to_pylist()
    assert pair == [{"model_a": "a", "model_b": "b", "n": 8, "diff": 0.5}]
    assert (weft_home / "reports" / "latest" / "leaderboard.png").stat().st_size > 1000
    mat = result.asset_materializations_for_node("eval_reports")[0]
    # the plot as text the UI renders on the asset page (Markdown under 1,000 characters): one
    # line per model with its accuracy written out, and the full-size image behind "Show
    # Markdown"
    inline = mat.metadata["plot_leaderboard"].value
    assert len(inline) < 1000 and "data:image" not in inline
    board = {r["model"]: r["accuracy"] for r in wh.sql(
        "SELECT model, accuracy FROM leaderboard").to_pylist()}
    for model, accuracy in board.items():
        (line,) = [x for x in inline.splitlines() if x.startswith(f"gsm8k {model} ")]
        assert f" {accuracy:.3f} [" in line
    full = mat.metadata["plot_leaderboard_full"].value
    assert full.startswith("![leaderboard](data:image/png;base64,") and len(full) > 1000
    # the plots that had nothing to draw are named with the reason
    skipped = mat.metadata["plots_skipped"].value
    for name in ("latency_pareto", "budget_curves", "thinking_sweep", "eff_curve"):
        assert name in skipped and f"plot_{name}_full" not in mat.metadata
    assert "no interleaved samples yet" in skipped and "leaderboard |" not in skipped


def test_plot_eff_curve(tmp_path):
    from eval.reports import plot_eff_curve

    rows = [{"model": "a", "benchmark": "g", "thinking_cap": c, "mean_tokens": t, "eff": e,
             "eff_ci_low": e - 0.5, "eff_ci_high": e + 0.5, "baseline_mean_tokens": 40.0}
            for c, t, e in ((32, 100.0, 1.0), (64, 200.0, 2.0))]
    assert plot_eff_curve(rows, tmp_path / "eff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_eff_curve([], tmp_path / "none.png") is None


def test_eval_reports_writes_budget_and_eff_curves(weft_home):
    from assets import eval_reports, evaluation
    from assets.resources import WarehouseResource
    from eval.runner import score
    from warehouse import Warehouse

    wh = Warehouse()
    plain = [r for r in _samples() if r["model"] == "a" and r.get("budget") is None]
    # budget 100 -- p0: (correct, 80 tokens), (correct, 150); p1: (wrong, 20)
    #   -> BS@100 = (1/2 + 0)/2 = 1/4, Acc@100 = 1/2, Tok@100 = (115 + 20)/2 = 67.5
    budgeted = [{"model": "a", "benchmark": "gsm8k", "problem_id": p, "sample_index": i,
                 "budget": 100, "correct": c, "completion_tokens": t + 1, "tokens_used": t,
                 "generation_limit": 400}
                for p, i, c, t in (("p0", 0, True, 80), ("p0", 1, True, 150), ("p1", 0, False, 20))]
    # no-thinking baseline (cap 0): p0 right, p1 wrong -> 1/2; cap 32: both right with 100 and
    # 300 tokens -> Eff = (1 - 1/2) / 200 * 1000 = 2.5
    capped = [{"model": "a", "benchmark": "gsm8k", "problem_id": p, "sample_index": 0,
               "thinking_cap": cap, "correct": c, "completion_tokens": t}
              for cap, p, c, t in ((0, "p0", True, 10), (0, "p1", False, 10),
                                   (32, "p0", True, 100), (32, "p1", True, 300))]
    wh.write("eval_samples", plain + budgeted + capped, partition="gsm8k@a")
    wh.write("eval_scores", score(plain, model_label="a", benchmark="gsm8k"), partition="gsm8k@a")
    result = dg.materialize([evaluation.eval_scores, eval_reports.eval_reports],
                            selection=["eval_reports"],
                            resources={"warehouse": WarehouseResource()},
                            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    (curve,) = wh.sql("SELECT * FROM budget_curve").to_pylist()
    assert (curve["budget"], curve["budgeted_success"], curve["accuracy"], curve["mean_tokens"],
            curve["generation_limit"]) == (100, 0.25, 0.5, 67.5, 400)
    (eff,) = wh.sql("SELECT thinking_cap, eff FROM eff_curve").to_pylist()
    assert eff["thinking_cap"] == 32 and eff["eff"] == pytest.approx(2.5)
    latest = weft_home / "reports" / "latest"
    assert (latest / "budget_curves.png").stat().st_size > 1000
    assert (latest / "eff_curve.png").stat().st_size > 1000
    meta = result.asset_materializations_for_node("eval_reports")[0].metadata
    assert "+2.5@" in meta["plot_eff_curve"].value and len(meta["plot_eff_curve"].value) < 1000
    assert meta["plot_eff_curve_full"].value.startswith("![eff_curve](data:image/png;base64,")
    assert "per 1,000 tokens" in meta["eff_units"].value


def _mixed_samples():
    """Model a scored on p0..p19 (wrong on p0..p4, right on the rest: 15/20 overall), model b
    only on p0..p4 (right on all): on their 5 shared problems a scores 0 and b scores 1."""
    rows = [{"model": "a", "benchmark": "g", "problem_id": f"p{i}", "sample_index": 0,
             "correct": i >= 5} for i in range(20)]
    rows += [{"model": "b", "benchmark": "g", "problem_id": f"p{i}", "sample_index": 0,
              "correct": True} for i in range(5)]
    rows.append({"model": "c", "benchmark": "other", "problem_id": "q0", "sample_index": 0,
                 "correct": True})
    return rows


def test_shared_problem_leaderboard_compares_on_common_problems():
    from eval.reports import shared_problem_leaderboard

    rows = {(r["benchmark"], r["model"]): r for r in shared_problem_leaderboard(_mixed_samples())}
    a, b, c = rows[("g", "a")], rows[("g", "b")], rows[("other", "c")]
    assert (a["n_problems"], a["n_shared"], a["accuracy"]) == (20, 5, 0.0)
    assert (b["n_problems"], b["n_shared"], b["accuracy"]) == (5, 5, 1.0)
    assert (c["n_problems"], c["n_shared"], c["models_compared"]) == (1, 1, 1)


def test_leaderboard_plot_rows_use_shared_problems_and_show_counts(tmp_path):
    from eval.reports import _board_label, comparable_board, shared_problem_leaderboard

    board = [{"benchmark": "g", "model": "a", "accuracy": 0.75, "ci_low": 0.5, "ci_high": 0.9,
              "n_problems": 20},
             {"benchmark": "g", "model": "b", "accuracy": 1.0, "ci_low": 1.0, "ci_high": 1.0,
              "n_problems": 5},
             {"benchmark": "other", "model": "c", "accuracy": 1.0, "ci_low": 1.0,
              "ci_high": 1.0, "n_problems": 1}]
    drawn = {r["model"]: r for r in comparable_board(board, shared_problem_leaderboard(
        _mixed_samples()))}
    assert drawn["a"]["accuracy"] == 0.0 and drawn["a"]["n_shared"] == 5  # not 0.75 on 20
    assert drawn["b"]["accuracy"] == 1.0 and drawn["b"]["n_shared"] == 5
    assert drawn["c"]["n_shared"] is None and drawn["c"]["accuracy"] == 1.0  # alone: as is
    assert _board_label(drawn["a"]) == "g · a (n=5 shared of 20)"
    assert _board_label(drawn["c"]) == "other · c (n=1)"
    path = plot_leaderboard(list(drawn.values()), tmp_path / "l.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


