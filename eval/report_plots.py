"""One run of the evaluation report's plots and tables: what ``eval_reports`` reads from the
warehouse, the plots it draws (``eval.reports``: leaderboard, latency Pareto, budget curves,
thinking-cap sweeps, DeepTool Eq. 12's Eff curve) into a run folder, why a plot that has
nothing to draw was skipped, and the columns of the tables it shows.

:func:`draw_plots` writes PNG files under the given folder (and nothing else);
:func:`inline_figures` gives the same plots as text the Dagster UI shows inline;
:func:`publish_latest` copies a run's folder to ``reports/latest``; :func:`png_md` embeds a PNG
as Markdown. Not guaranteed: that a plot exists (a plot without data is skipped and
:func:`skip_reasons` says why).
"""

from __future__ import annotations

import base64
import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.budget import budget_score_rows, eff_score_rows, thinking_budget_sweep
from eval.report_text import (
    budget_text,
    eff_text,
    fit,
    latency_text,
    leaderboard_text,
    sweep_text,
)
from eval.reports import (
    comparable_board,
    pairwise_rows,
    plot_budget_curves,
    plot_eff_curve,
    plot_latency_pareto,
    plot_leaderboard,
    plot_thinking_sweep,
    shared_problem_leaderboard,
)

LEADERBOARD_QUERY = "SELECT * FROM leaderboard ORDER BY benchmark, accuracy DESC"
SAMPLES_QUERY = ("SELECT model, benchmark, problem_id, sample_index, correct, budget, "
                 "thinking_cap, completion_tokens, tokens_used, generation_limit, "
                 "checkpoint_id FROM eval_samples")
LEADERBOARD_COLUMNS = ["benchmark", "model", "accuracy", "ci_low", "ci_high", "pass_at_1",
                       "n_problems"]
SHARED_COLUMNS = ["benchmark", "model", "n_problems", "n_shared", "accuracy", "ci_low",
                  "ci_high"]
PAIRWISE_COLUMNS = ["benchmark", "model_a", "model_b", "n", "diff", "ci_low", "ci_high",
                    "p_bootstrap", "p_ttest"]
BUDGET_COLUMNS = ["benchmark", "model", "budget", "budgeted_success", "accuracy", "mean_tokens",
                  "n_problems", "generation_limit"]
EFF_COLUMNS = ["benchmark", "model", "thinking_cap", "accuracy", "baseline_accuracy",
               "mean_tokens", "eff", "eff_ci_low", "eff_ci_high"]
EFF_UNITS = "accuracy gained (fraction of problems) per 1,000 tokens"


@dataclass(frozen=True)
class ReportTables:
    """The tables one report computes from the samples: the paired comparisons of every model
    pair (``eval_pairwise``), the budget curves (``budget_scores``), the Eff rows
    (``eff_scores``: DeepTool Eq. 12), the leaderboard on each benchmark's shared problems,
    and the thinking-cap sweeps that lack a no-thinking baseline."""

    pairs: list[dict[str, Any]]
    budget_rows: list[dict[str, Any]]
    eff_rows: list[dict[str, Any]]
    shared: list[dict[str, Any]]
    no_baseline: list[Any]

    @property
    def rows_written(self) -> int:
        return len(self.pairs) + len(self.budget_rows) + len(self.eff_rows)


def report_tables(samples: Sequence[Mapping[str, Any]],
                  eff_baselines: Mapping[str, str]) -> ReportTables:
    """The report's tables from ``eval_samples`` rows (:data:`SAMPLES_QUERY`);
    ``eff_baselines`` maps a model to the model whose no-thinking run is its Eff baseline."""
    eff_rows, no_baseline = eff_score_rows(samples, dict(eff_baselines))
    return ReportTables(pairwise_rows(samples), budget_score_rows(samples), eff_rows,
                        shared_problem_leaderboard(samples), list(no_baseline))


def png_md(path: Path) -> str:
    """The PNG at ``path`` as a Markdown image (base64 data URI), alt text its stem."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"![{Path(path).stem}](data:image/png;base64,{data})"


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


def thinking_sweeps(samples: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The graded thinking-cap samples per ``<model> <benchmark>``: cap, problem, correct and
    completion tokens."""
    sweeps: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        if s["thinking_cap"] is not None and s["correct"] is not None:
            sweeps[f"{s['model']} {s['benchmark']}"].append(
                {"cap": s["thinking_cap"], "problem_id": s["problem_id"],
                 "correct": bool(s["correct"]), "tokens": s["completion_tokens"] or 0})
    return dict(sweeps)


def plot_inputs(*, board: Sequence[Mapping[str, Any]], shared: Sequence[Mapping[str, Any]],
                samples: Sequence[Mapping[str, Any]], latency: Sequence[Mapping[str, Any]],
                curve: Sequence[Mapping[str, Any]], eff: Sequence[Mapping[str, Any]]
                ) -> dict[str, Any]:
    """What each report plot draws, by plot name: the leaderboard compares the models of a
    benchmark on the problems all of them were scored on (``eval.reports.comparable_board``);
    the thinking sweeps are per ``<model> <benchmark>`` (``eval.budget.thinking_budget_sweep``)."""
    return {
        "leaderboard": comparable_board(board, shared),
        "latency_pareto": latency,
        "budget_curves": curve,
        "thinking_sweep": {k: thinking_budget_sweep(v) for k, v in thinking_sweeps(samples).items()},
        "eff_curve": eff,
    }


_DRAW = {"leaderboard": plot_leaderboard, "latency_pareto": plot_latency_pareto,
         "budget_curves": plot_budget_curves, "thinking_sweep": plot_thinking_sweep,
         "eff_curve": plot_eff_curve}
_TEXT = {"leaderboard": ("leaderboard: accuracy [95% CI] on shared problems", leaderboard_text),
         "latency_pareto": ("latency: ARI (lower first) and accuracy", latency_text),
         "budget_curves": ("budget curves: BS@B and Acc@B over budgets B", budget_text),
         "thinking_sweep": ("thinking-budget sweep: accuracy over caps", sweep_text),
         "eff_curve": ("Eff (accuracy gained per 1k tokens) over thinking caps", eff_text)}


def draw_plots(out_dir: Path, *, board: Sequence[Mapping[str, Any]],
               shared: Sequence[Mapping[str, Any]], samples: Sequence[Mapping[str, Any]],
               latency: Sequence[Mapping[str, Any]], curve: Sequence[Mapping[str, Any]],
               eff: Sequence[Mapping[str, Any]]) -> dict[str, Path | None]:
    """Every report plot drawn into ``out_dir`` (created) as ``<name>.png``, by name; None for
    a plot with nothing to draw (inputs: :func:`plot_inputs`)."""
    return draw_inputs(out_dir, plot_inputs(board=board, shared=shared, samples=samples,
                                            latency=latency, curve=curve, eff=eff))


def draw_inputs(out_dir: Path, inputs: Mapping[str, Any]) -> dict[str, Path | None]:
    """:func:`draw_plots` from inputs :func:`plot_inputs` already prepared."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {name: draw(inputs[name], out_dir / f"{name}.png") for name, draw in _DRAW.items()}


def inline_figures(*, board: Sequence[Mapping[str, Any]],
                   shared: Sequence[Mapping[str, Any]], samples: Sequence[Mapping[str, Any]],
                   latency: Sequence[Mapping[str, Any]], curve: Sequence[Mapping[str, Any]],
                   eff: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """Every report plot as a text figure the UI shows inline (``eval.report_text``: the
    plotted values with bars or sparklines, under the UI's inline limit), from the same inputs
    as :func:`draw_plots`; None for a plot with nothing to draw."""
    return figures_of(plot_inputs(board=board, shared=shared, samples=samples,
                                  latency=latency, curve=curve, eff=eff))


def figures_of(inputs: Mapping[str, Any]) -> dict[str, str | None]:
    """:func:`inline_figures` from inputs :func:`plot_inputs` already prepared."""
    out: dict[str, str | None] = {}
    for name, (title, text) in _TEXT.items():
        lines = text(inputs[name])
        out[name] = fit(name, title, lines) if lines else None
    return out


def skipped_plots(plots: Mapping[str, Path | None],
                  reasons: Mapping[str, str]) -> dict[str, str]:
    """The reasons of the plots that were not drawn."""
    return {name: reason for name, reason in reasons.items() if plots.get(name) is None}


def publish_latest(out_dir: Path, latest: Path) -> None:
    """Replace ``latest`` with a copy of ``out_dir``."""
    shutil.rmtree(latest, ignore_errors=True)
    shutil.copytree(out_dir, latest)


def invalid_pairs(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pairwise rows whose p-values leave [0, 1] (the bootstrap's (0, 1]) or whose CI does not
    contain the difference."""
    return [r for r in rows if not (0 < r["p_bootstrap"] <= 1 and 0 <= r["p_ttest"] <= 1
                                    and r["ci_low"] - 1e-9 <= r["diff"] <= r["ci_high"] + 1e-9)]
