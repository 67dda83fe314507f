"""`eval_reports`: the leaderboard with CIs, pairwise model tests, and plots (PNG + in the UI).

Reads every evaluation result in the warehouse, writes the paired comparisons of all model
pairs to ``eval_pairwise`` (view ``pairwise``), the budget curves of budgeted runs to
``budget_scores`` (view ``budget_curve``: BS@B, Acc@B, Tok@B with bootstrap CIs, computed by
``eval.budget`` so SQL and Python agree) and the thinking-cap cost-effectiveness (DeepTool
Eq. 12, accuracy gained per 1,000 tokens against the no-thinking baseline on the same problems)
to ``eff_scores`` (view ``eff_curve``); draws the plots of ``eval.reports`` into
``WEFT_HOME/reports/<run id>/`` (and ``reports/latest/``), and shows the leaderboard table and
the images in the asset's metadata: ``plot_<name>`` is a small copy the UI shows directly on
the asset page, ``plot_<name>_full`` the full-size image (behind "Show Markdown": Dagster 1.13
renders only short Markdown inline), and ``plots_skipped`` says which plots were not drawn and
why. The leaderboard plot compares the models of a benchmark on the problems all of them were
scored on and labels every bar with its problem count. The budget and Eff views reflect the
last run of this asset. Each run replaces the single ``all`` partition of the tables it writes.
"""

import base64
import shutil
from collections import defaultdict

import dagster as dg

from assets.common import lineage, md_table, now
from assets.evaluation import eval_scores
from assets.resources import WarehouseResource
from warehouse.runs import record_run


def _image_md(path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"![{path.stem}](data:image/png;base64,{data})"


def skip_reasons(samples: list[dict], latency: list[dict], budget_curve: list[dict],
                 eff_curve: list[dict], no_baseline: list) -> dict[str, str]:
    """Why each optional plot has nothing to draw (only the plots that are skipped)."""
    reasons = {}
    if not latency:
        reasons["latency_pareto"] = ("no interleaved samples yet: evaluate with eval_samples "
                                     "mode 'interleaved' (or set tokenizer_path in 'single' "
                                     "mode) to record ARI/ABO/AIRW")
    if not budget_curve:
        reasons["budget_curves"] = ("no budgeted samples yet: evaluate with eval_samples mode "
                                    "'budgeted' and a list of budgets")
    if not any(s["thinking_cap"] is not None and s["correct"] is not None for s in samples):
        reasons["thinking_sweep"] = ("no thinking-cap samples yet: evaluate with eval_samples "
                                     "thinking_caps (e.g. [0, 64, 256])")
    if not eff_curve:
        reasons["eff_curve"] = (
            f"thinking-cap sweeps without a no-thinking baseline: {no_baseline} (add cap 0 or "
            "set eff_baselines)" if no_baseline else
            "no thinking-cap sweep with a no-thinking run (cap 0) yet")
    return reasons


class EvalReportsConfig(dg.Config):
    # model -> the model whose no-thinking run is its Eff baseline (default: the model's own
    # thinking_cap=0 rows); the baseline model's cap-0 rows, else its plain rows, are used
    eff_baselines: dict[str, str] = {}


@dg.asset(deps=[eval_scores], group_name="report", kinds={"python", "duckdb"},
          description="Leaderboard with CIs, pairwise paired tests, budget curves, Eff curve, "
                      "latency/budget/sweep/Eff plots.")
def eval_reports(context: dg.AssetExecutionContext, config: EvalReportsConfig,
                 warehouse: WarehouseResource) -> dg.MaterializeResult:
    from eval.budget import budget_score_rows, eff_score_rows, thinking_budget_sweep
    from eval.reports import (
        comparable_board,
        inline_image_md,
        pairwise_rows,
        plot_budget_curves,
        plot_eff_curve,
        plot_latency_pareto,
        plot_leaderboard,
        plot_thinking_sweep,
        shared_problem_leaderboard,
    )
    from pipelines.settings import weft_home

    started = now()
    wh = warehouse.get()
    board = wh.sql("SELECT * FROM leaderboard ORDER BY benchmark, accuracy DESC").to_pylist()
    if not board:
        raise dg.Failure("no scores yet: materialize eval_samples and eval_scores first")
    samples = wh.sql("SELECT model, benchmark, problem_id, sample_index, correct, budget, "
                     "thinking_cap, completion_tokens, tokens_used, generation_limit, "
                     "checkpoint_id FROM eval_samples").to_pylist()
    pairs = pairwise_rows(samples)
    lin = lineage(context, config.model_dump())
    wh.write("eval_pairwise", pairs, lineage=lin)
    budget_rows = budget_score_rows(samples)
    wh.write("budget_scores", budget_rows, lineage=lin)
    eff_rows, no_baseline = eff_score_rows(samples, config.eff_baselines)
    wh.write("eff_scores", eff_rows, lineage=lin)
    if no_baseline:
        context.log.warning(f"thinking-cap sweeps without a no-thinking baseline (add "
                            f"thinking_cap 0 or set eff_baselines): {no_baseline}")

    out_dir = weft_home() / "reports" / context.run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    sweeps = defaultdict(list)
    for s in samples:
        if s["thinking_cap"] is not None and s["correct"] is not None:
            sweeps[f"{s['model']} {s['benchmark']}"].append(
                {"cap": s["thinking_cap"], "problem_id": s["problem_id"], "correct": bool(s["correct"]),
                 "tokens": s["completion_tokens"] or 0})
    shared = shared_problem_leaderboard(samples)
    latency = wh.sql("SELECT * FROM latency").to_pylist()
    curve = wh.sql("SELECT * FROM budget_curve").to_pylist()
    eff = wh.sql("SELECT * FROM eff_curve").to_pylist()
    plots = {
        "leaderboard": plot_leaderboard(comparable_board(board, shared),
                                        out_dir / "leaderboard.png"),
        "latency_pareto": plot_latency_pareto(latency, out_dir / "latency_pareto.png"),
        "budget_curves": plot_budget_curves(curve, out_dir / "budget_curves.png"),
        "thinking_sweep": plot_thinking_sweep({k: thinking_budget_sweep(v) for k, v in sweeps.items()},
                                              out_dir / "thinking_sweep.png"),
        "eff_curve": plot_eff_curve(eff, out_dir / "eff_curve.png"),
    }
    skipped = {name: reason for name, reason in
               skip_reasons(samples, latency, curve, eff, no_baseline).items()
               if plots.get(name) is None}
    for name, reason in skipped.items():
        context.log.info(f"plot {name} skipped: {reason}")
    latest = weft_home() / "reports" / "latest"
    shutil.rmtree(latest, ignore_errors=True)
    shutil.copytree(out_dir, latest)
    record_run(wh, lin, started_at=started,
               rows_written=len(pairs) + len(budget_rows) + len(eff_rows))
    meta = {
        "leaderboard": md_table(board, ["benchmark", "model", "accuracy", "ci_low", "ci_high", "pass_at_1", "n_problems"]),
        "leaderboard_shared_problems": md_table(
            shared, ["benchmark", "model", "n_problems", "n_shared", "accuracy", "ci_low",
                     "ci_high"]),
        "pairwise": md_table(pairs, ["benchmark", "model_a", "model_b", "n", "diff", "ci_low", "ci_high",
                                     "p_bootstrap", "p_ttest"]),
        "report_dir": dg.MetadataValue.path(str(out_dir)),
        "budget_curve": md_table(budget_rows, ["benchmark", "model", "budget", "budgeted_success",
                                               "accuracy", "mean_tokens", "n_problems",
                                               "generation_limit"]),
        "eff_curve": md_table(eff_rows, ["benchmark", "model", "thinking_cap", "accuracy",
                                         "baseline_accuracy", "mean_tokens", "eff", "eff_ci_low",
                                         "eff_ci_high"]),
        "eff_units": "accuracy gained (fraction of problems) per 1,000 tokens",
        "sweeps_without_baseline": len(no_baseline),
    }
    for name, path in plots.items():
        if path is not None:
            inline = inline_image_md(path, name)
            if inline is not None:
                meta[f"plot_{name}"] = dg.MetadataValue.md(inline)
            meta[f"plot_{name}_full"] = dg.MetadataValue.md(_image_md(path))
    meta["plots_skipped"] = (md_table([{"plot": k, "reason": v} for k, v in skipped.items()],
                                      ["plot", "reason"]) if skipped else "none")
    return dg.MaterializeResult(metadata=meta)


@dg.asset_check(asset=eval_reports, description="Pairwise p-values lie in [0, 1] and CIs contain the difference.")
def check_eval_reports_pairwise_valid(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    rows = warehouse.get().sql("SELECT * FROM pairwise").to_pylist()
    bad = [r for r in rows if not (0 < r["p_bootstrap"] <= 1 and 0 <= r["p_ttest"] <= 1
                                   and r["ci_low"] - 1e-9 <= r["diff"] <= r["ci_high"] + 1e-9)]
    return dg.AssetCheckResult(passed=not bad, metadata={"pairs": len(rows), "invalid": len(bad)})
