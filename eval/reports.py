"""Evaluation reports: pairwise model comparisons and the plots researchers look at.

Pure functions over rows read from the warehouse: ``pairwise_rows`` runs the paired bootstrap
and the paired t-test for every pair of models evaluated on the same problems of a benchmark
(single-turn samples; per-problem score = mean correctness over its samples); the ``plot_*``
functions draw PNG files with matplotlib's non-interactive backend: the leaderboard with 95%
CIs, accuracy vs content latency (Pareto view for interleaved outputs), budget curves (rows of
the ``budget_curve`` view: Budgeted Success@B and Acc@B with their bootstrap CIs), the
thinking-budget sweep, and the token cost-effectiveness curve (DeepTool Eq. 12, rows of the
``eff_curve`` view; y in accuracy gained per 1,000 tokens, accuracy as a fraction). A plot
function returns None when there is nothing to draw.

The leaderboard compares models of a benchmark only on the problems all of them were scored on
(``shared_problem_leaderboard``; the same pairing as the paired tests), and each bar says how
many problems it covers. The Dagster UI shows each plot inline as text (``eval.report_text``:
it renders Markdown metadata inline only below 1,000 characters, too few for a readable PNG).

Not guaranteed: corrections for multiple comparisons (see ``eval.compare``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from eval.compare import paired_bootstrap, paired_t_test
from eval.metrics import bootstrap_ci


def per_problem_scores(samples: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    """{(benchmark, model): {problem_id: mean correctness}} over plain samples (no budget/cap)."""
    sums: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        if s.get("budget") is not None or s.get("thinking_cap") is not None or s.get("correct") is None:
            continue
        sums[(s["benchmark"], s["model"])][s["problem_id"]].append(float(bool(s["correct"])))
    return {key: {p: sum(v) / len(v) for p, v in probs.items()} for key, probs in sums.items()}


def pairwise_rows(samples: Iterable[Mapping[str, Any]], *, n_boot: int = 5000, seed: int = 0,
                  min_shared: int = 2) -> list[dict[str, Any]]:
    """One row per (benchmark, model A, model B) sharing at least ``min_shared`` problems."""
    scores = per_problem_scores(samples)
    by_bench: dict[str, list[str]] = defaultdict(list)
    for bench, model in sorted(scores):
        by_bench[bench].append(model)
    out = []
    for bench, models in sorted(by_bench.items()):
        for a, b in combinations(sorted(models), 2):
            shared = sorted(set(scores[(bench, a)]) & set(scores[(bench, b)]))
            if len(shared) < min_shared:
                continue
            sa = {p: scores[(bench, a)][p] for p in shared}
            sb = {p: scores[(bench, b)][p] for p in shared}
            boot = paired_bootstrap(sa, sb, n_boot=n_boot, seed=seed)
            ttest = paired_t_test(sa, sb)
            out.append({"benchmark": bench, "metric": "accuracy", "model_a": a, "model_b": b,
                        "n": boot.n, "mean_a": boot.mean_a, "mean_b": boot.mean_b, "diff": boot.diff,
                        "ci_low": boot.ci_low, "ci_high": boot.ci_high, "p_bootstrap": boot.p_value,
                        "p_ttest": ttest.p_value, "alternative": "two-sided"})
    return out


def shared_problem_leaderboard(samples: Iterable[Mapping[str, Any]], *, n_boot: int = 2000,
                               seed: int = 0) -> list[dict[str, Any]]:
    """Per benchmark, each model's accuracy on the problems every model of that benchmark was
    scored on (plain samples; per-problem score = mean correctness, as in ``pairwise_rows``),
    with a percentile-bootstrap 95% CI over those problems. ``n_problems``: problems the model
    was scored on; ``n_shared``: problems in the comparison (0: nothing to compare on, then
    accuracy and CI are None)."""
    scores = per_problem_scores(samples)
    by_bench: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (bench, model), probs in scores.items():
        by_bench[bench][model] = probs
    out = []
    for bench, models in sorted(by_bench.items()):
        shared = sorted(set.intersection(*(set(p) for p in models.values())))
        for model, probs in sorted(models.items()):
            row: dict[str, Any] = {"benchmark": bench, "model": model, "n_problems": len(probs),
                                   "n_shared": len(shared), "models_compared": len(models),
                                   "accuracy": None, "ci_low": None, "ci_high": None}
            if shared:
                mean, low, high = bootstrap_ci([probs[p] for p in shared], n_boot=n_boot,
                                               seed=seed)
                row.update(accuracy=mean, ci_low=low, ci_high=high)
            out.append(row)
    return out


def comparable_board(board: Sequence[Mapping[str, Any]],
                     shared: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Leaderboard rows to draw: where a benchmark has several models with shared problems,
    their accuracy and CI on the shared problems (``n_shared`` set); otherwise the row as the
    leaderboard view has it (``n_shared`` None), always with ``n_problems``."""
    by_key = {(r["benchmark"], r["model"]): r for r in shared}
    out = []
    for r in board:
        row = dict(r)
        s = by_key.get((r["benchmark"], r["model"]))
        row["n_shared"] = None
        if s is not None:
            row["n_problems"] = row.get("n_problems") or s["n_problems"]
            if s["models_compared"] > 1 and s["n_shared"] > 0:
                row.update(accuracy=s["accuracy"], ci_low=s["ci_low"], ci_high=s["ci_high"],
                           n_shared=s["n_shared"])
        out.append(row)
    return out


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _board_label(r: Mapping[str, Any]) -> str:
    n, shared = r.get("n_problems"), r.get("n_shared")
    if shared is not None:
        count = f"n={shared} shared of {n}"
    else:
        count = f"n={n}" if n is not None else "n=?"
    return f"{r['benchmark']} · {r['model']} ({count})"


def plot_leaderboard(board: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Horizontal bars: accuracy per (benchmark, model) with its 95% CI, labelled with the
    number of problems; rows with ``n_shared`` (see :func:`comparable_board`) are scored on
    the problems all models of their benchmark share."""
    board = [r for r in board if r.get("accuracy") is not None]
    if not board:
        return None
    plt = _pyplot()
    rows = sorted(board, key=lambda r: (r["benchmark"], r["model"]))
    labels = [_board_label(r) for r in rows]
    values = [r["accuracy"] for r in rows]
    err = [[r["accuracy"] - r["ci_low"] for r in rows], [r["ci_high"] - r["accuracy"] for r in rows]]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
    ax.barh(range(len(rows)), values, xerr=err, color="#4C72B0", capsize=3)
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("accuracy (avg@k) with bootstrap 95% CI")
    paired = any(r.get("n_shared") is not None for r in rows)
    ax.set_title("weft leaderboard" + (" (models compared on their shared problems)"
                                       if paired else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_latency_pareto(latency: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Accuracy vs mean ARI (lower = answer content revealed earlier), one point per model."""
    points = [r for r in latency if r.get("ari") is not None]
    if not points:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in points:
        ax.scatter(r["ari"], r["accuracy"], s=40)
        ax.annotate(f"{r['model']} ({r['benchmark']})", (r["ari"], r["accuracy"]), fontsize=8,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("ARI: mean position of answer tokens (lower is earlier)")
    ax.set_ylabel("accuracy")
    ax.set_title("accuracy vs content latency")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_budget_curves(curve: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Budgeted success and accuracy vs requested token budget, one line pair per model."""
    if not curve:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    lines: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in curve:
        lines[(r["model"], r["benchmark"])].append(r)
    for (model, bench), pts in sorted(lines.items()):
        pts = sorted(pts, key=lambda r: r["budget"])
        xs = [p["budget"] for p in pts]
        for key, marker, style, name in (("budgeted_success", "o", "-", "BS@B"),
                                         ("accuracy", "x", "--", "Acc@B")):
            ys = [p[key] for p in pts]
            line = ax.plot(xs, ys, marker=marker, linestyle=style, label=f"{model} {bench}: {name}")
            low, high = f"{key}_ci_low", f"{key}_ci_high"
            if all(p.get(low) is not None and p.get(high) is not None for p in pts):
                ax.fill_between(xs, [p[low] for p in pts], [p[high] for p in pts],
                                color=line[0].get_color(), alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("requested token budget B")
    ax.set_ylabel("share of problems")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    ax.set_title("budget curves")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_thinking_sweep(curves: Mapping[str, Sequence[Any]], path: Path) -> Path | None:
    """Accuracy (with CI) vs per-step thinking cap; ``curves``: label -> SweepPoints."""
    if not any(curves.values()):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label, pts in sorted(curves.items()):
        xs = [p.cap for p in pts]
        ax.errorbar(xs, [p.accuracy for p in pts],
                    yerr=[[p.accuracy - p.ci_low for p in pts], [p.ci_high - p.accuracy for p in pts]],
                    marker="o", capsize=3, label=label)
    if any(p.cap <= 0 for pts in curves.values() for p in pts):
        ax.set_xscale("symlog", base=2, linthresh=1)  # cap 0: the no-thinking run
    else:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("thinking-token cap per step")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    ax.set_title("thinking-budget sweep")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_eff_curve(rows: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """DeepTool Fig. 5 view: Eff (Eq. 12) vs mean tokens per problem, one line per model and
    benchmark, caps annotated, the no-thinking baseline as a star at Eff = 0."""
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    lines: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        lines[(r["model"], r["benchmark"])].append(r)
    for (model, bench), pts in sorted(lines.items()):
        pts = sorted(pts, key=lambda r: r["thinking_cap"])
        xs, ys = [p["mean_tokens"] for p in pts], [p["eff"] for p in pts]
        err = [[max(0.0, p["eff"] - p["eff_ci_low"]) for p in pts],
               [max(0.0, p["eff_ci_high"] - p["eff"]) for p in pts]]
        bar = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"{model} {bench}")
        for p in pts:
            ax.annotate(str(p["thinking_cap"]), (p["mean_tokens"], p["eff"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
        ax.scatter([pts[0]["baseline_mean_tokens"]], [0.0], marker="*", s=140,
                   color=bar[0].get_color(), zorder=3)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("mean tokens per problem (labels: thinking cap; star: no-thinking baseline)")
    ax.set_ylabel("Eff: accuracy gained per 1k tokens (fraction)")
    ax.legend(fontsize=7)
    ax.set_title("token cost-effectiveness (DeepTool Eq. 12)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
