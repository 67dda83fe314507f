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
The plots, their skip reasons and the tables' columns are ``eval.report_plots``.
"""

import dagster as dg

from assets.common import lineage, md_table, now
from assets.evaluation import eval_scores
from assets.resources import WarehouseResource
from eval.report_plots import (
    BUDGET_COLUMNS,
    EFF_COLUMNS,
    EFF_UNITS,
    LEADERBOARD_COLUMNS,
    LEADERBOARD_QUERY,
    PAIRWISE_COLUMNS,
    SAMPLES_QUERY,
    SHARED_COLUMNS,
    ReportTables,
    draw_inputs,
    figures_of,
    invalid_pairs,
    plot_inputs,
    png_md,
    publish_latest,
    report_tables,
    skip_reasons,
    skipped_plots,
)
from warehouse.runs import record_run


class EvalReportsConfig(dg.Config):
    # model -> the model whose no-thinking run is its Eff baseline (default: the model's own
    # thinking_cap=0 rows); the baseline model's cap-0 rows, else its plain rows, are used
    eff_baselines: dict[str, str] = {}


def _plot_metadata(plots: dict, figures: dict, skipped: dict[str, str]) -> dict:
    """``plot_<name>`` (the plot as a text figure the UI shows inline on the asset page,
    ``eval.report_text``) and ``plot_<name>_full`` (the PNG, behind "Show Markdown") for every
    drawn plot, and ``plots_skipped`` with the reasons."""
    meta = {}
    for name, path in plots.items():
        if path is not None:
            if figures.get(name):
                meta[f"plot_{name}"] = dg.MetadataValue.md(figures[name])
            meta[f"plot_{name}_full"] = dg.MetadataValue.md(png_md(path))
    meta["plots_skipped"] = (md_table([{"plot": k, "reason": v} for k, v in skipped.items()],
                                      ["plot", "reason"]) if skipped else "none")
    return meta


def _tables_metadata(board: list[dict], tables: ReportTables, out_dir) -> dict:
    return {
        "leaderboard": md_table(board, LEADERBOARD_COLUMNS),
        "leaderboard_shared_problems": md_table(tables.shared, SHARED_COLUMNS),
        "pairwise": md_table(tables.pairs, PAIRWISE_COLUMNS),
        "report_dir": dg.MetadataValue.path(str(out_dir)),
        "budget_curve": md_table(tables.budget_rows, BUDGET_COLUMNS),
        "eff_curve": md_table(tables.eff_rows, EFF_COLUMNS),
        "eff_units": EFF_UNITS,
        "sweeps_without_baseline": len(tables.no_baseline),
    }


@dg.asset(deps=[eval_scores], group_name="report", kinds={"python", "duckdb"},
          description="Leaderboard with CIs, pairwise paired tests, budget curves, Eff curve, "
                      "latency/budget/sweep/Eff plots.")
def eval_reports(context: dg.AssetExecutionContext, config: EvalReportsConfig,
                 warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipelines.settings import weft_home

    started = now()
    wh = warehouse.get()
    board = wh.sql(LEADERBOARD_QUERY).to_pylist()
    if not board:
        raise dg.Failure("no scores yet: materialize eval_samples and eval_scores first")
    samples = wh.sql(SAMPLES_QUERY).to_pylist()
    tables = report_tables(samples, config.eff_baselines)
    lin = lineage(context, config.model_dump())
    for table, rows in (("eval_pairwise", tables.pairs), ("budget_scores", tables.budget_rows),
                        ("eff_scores", tables.eff_rows)):
        wh.write(table, rows, lineage=lin)
    if tables.no_baseline:
        context.log.warning(f"thinking-cap sweeps without a no-thinking baseline (add "
                            f"thinking_cap 0 or set eff_baselines): {tables.no_baseline}")
    out_dir = weft_home() / "reports" / context.run_id
    views = {v: wh.sql(f"SELECT * FROM {v}").to_pylist()
             for v in ("latency", "budget_curve", "eff_curve")}  # the rows just written
    inputs = {"board": board, "shared": tables.shared, "samples": samples,
              "latency": views["latency"], "curve": views["budget_curve"],
              "eff": views["eff_curve"]}
    prepared = plot_inputs(**inputs)  # the thinking sweeps once, for the PNGs and the text
    plots = draw_inputs(out_dir, prepared)
    figures = figures_of(prepared)
    skipped = skipped_plots(plots, skip_reasons(samples, views["latency"], views["budget_curve"],
                                                views["eff_curve"], tables.no_baseline))
    for name, reason in skipped.items():
        context.log.info(f"plot {name} skipped: {reason}")
    publish_latest(out_dir, weft_home() / "reports" / "latest")
    record_run(wh, lin, started_at=started, rows_written=tables.rows_written)
    return dg.MaterializeResult(metadata={**_tables_metadata(board, tables, out_dir),
                                          **_plot_metadata(plots, figures, skipped)})


@dg.asset_check(asset=eval_reports, description="Pairwise p-values lie in [0, 1] and CIs contain the difference.")
def check_eval_reports_pairwise_valid(warehouse: WarehouseResource) -> dg.AssetCheckResult:
    rows = warehouse.get().sql("SELECT * FROM pairwise").to_pylist()
    bad = invalid_pairs(rows)
    return dg.AssetCheckResult(passed=not bad, metadata={"pairs": len(rows), "invalid": len(bad)})
