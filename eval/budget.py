"""Metrics for answers under token limits: budgeted (time-aware) evaluation and tool-integrated
reasoning (accuracy per thinking-token cap, token cost-effectiveness).

Budgeted evaluation asks the same problems under several token budgets B (the prompt carries
an urgency instruction; the model may still overrun). From rows
``(problem_id, budget, correct, tokens_used)``:

- Budgeted Success@B -- share of answers that are correct AND used ``tokens_used <= B``
  tokens (an answer exactly at the budget counts as within it).
- Accuracy@B -- share of correct answers under budget B, however long they were.
- mean tokens@B -- mean ``tokens_used`` under budget B, correct or not.

Tool-integrated reasoning:

- token cost-effectiveness ``Eff = (acc - acc_baseline) / mean_tokens * 1000``: accuracy gained
  over a baseline run per thousand tokens the evaluated run spends on average.
- thinking-budget sweep: rows ``(cap, problem_id, correct, tokens)`` from runs with a per-step
  thinking-token cap; one curve point per cap (accuracy with CI, mean tokens).

Aggregation: repeated rows of the same (problem, budget) are samples of that problem; they are
averaged per problem first (like avg@k), then over problems, and the 1 - alpha CI is the
percentile bootstrap over problems (``eval.metrics.bootstrap_ci``; problems ordered by
``repr(problem_id)`` so the result does not depend on row order). Each budget is scored on the
problems that have rows for it; ``n_problems`` says how many. ``math.inf`` is a valid budget or
cap (no limit).

Rows may be tuples in the documented field order or mappings with those field names (e.g.
DuckDB ``fetchall()`` tuples or ``df.to_dict("records")``).

Warehouse rows: :func:`budget_score_rows` turns ``eval_samples`` rows of budgeted runs into
``budget_scores`` rows (one per model, benchmark and budget; the ``budget_curve`` view, migration
003), computed by :func:`budget_curve` so the view and this module agree exactly, CIs included.
The tokens counted against a budget are the row's ``tokens_used`` (completion tokens without
the end-of-sequence token, ``eval.modes.budgeted.budget_tokens_used``); rows written before that column
existed fall back to ``completion_tokens``. Every budget of a run is decoded with the same
generation limit (``eval.modes.budgeted``), so Acc@B is accuracy regardless of length, as in the paper.

Cost-effectiveness of thinking caps (DeepTool §3.5, Eq. 12): :func:`eff_curve` compares each
cap's run with a no-thinking baseline run ON THE SAME PROBLEMS (those both have):
``Eff = (A_cap - A_base) / C_cap * 1000`` where A are per-problem-averaged accuracies (fractions
in [0, 1]) and ``C_cap`` the capped run's mean completion tokens per problem (thinking, actions
and answer, every turn). Unit: accuracy gained, as a fraction of problems, per 1,000 tokens;
x100 gives percentage points per 1k tokens, the scale of the paper's Figure 5 (its accuracies
are percentages). The CI is a paired percentile bootstrap over the shared problems.
Departure from the paper: the paper's baseline is a separately trained w/o-thinking model;
weft's default baseline is the same model with thinking cap 0 (thinking closed before it
starts), and ``eval_reports`` can name another model as the baseline instead.

Not guaranteed: budgets are compared on whatever problems each has -- if some problems are
missing under some budgets, the points of a curve are not on the same problem set (check
``n_problems``). The CI ignores the noise of the samples inside a problem. Token counts are
taken as given; nothing here tokenises text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import asdict, dataclass
from numbers import Real
from typing import Any

import numpy as np

from eval.metrics import bootstrap_ci
from warehouse.partitions import eval_partition

BUDGET_FIELDS = ("problem_id", "budget", "correct", "tokens_used")
SWEEP_FIELDS = ("cap", "problem_id", "correct", "tokens")
BASELINE_FIELDS = ("problem_id", "correct", "tokens")
TOKENS_PER_EFF_UNIT = 1000.0  # Eff is accuracy gained per this many tokens


@dataclass(frozen=True)
class Estimate:
    """A metric's value with its ``1 - alpha`` bootstrap CI over ``n_problems`` problems."""

    value: float
    ci_low: float
    ci_high: float
    n_problems: int
    n_samples: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BudgetPoint:
    """All budget metrics at one budget (one row of the ``budget_curve`` view)."""

    budget: float
    n_problems: int
    n_samples: int
    success: float
    success_ci_low: float
    success_ci_high: float
    accuracy: float
    accuracy_ci_low: float
    accuracy_ci_high: float
    mean_tokens: float
    mean_tokens_ci_low: float
    mean_tokens_ci_high: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SweepPoint:
    """Accuracy (with CI) and mean tokens at one thinking-token cap."""

    cap: float
    accuracy: float
    ci_low: float
    ci_high: float
    mean_tokens: float
    n_problems: int
    n_samples: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# one parsed sample: (correct as 0.0/1.0, tokens used)
_Sample = tuple[float, float]
# limit (budget or cap) -> problem id -> samples
_Grouped = dict[float, dict[Hashable, list[_Sample]]]


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _row_values(row: Any, fields: tuple[str, ...], index: int) -> tuple[Any, ...]:
    if isinstance(row, Mapping):
        missing = [f for f in fields if f not in row]
        if missing:
            raise ValueError(f"row {index} lacks field(s) {missing}; each row needs {list(fields)}")
        return tuple(row[f] for f in fields)
    if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
        raise TypeError(f"row {index} must be a tuple {fields} or a mapping with those keys, "
                        f"got {type(row).__name__}")
    if len(row) != len(fields):
        raise ValueError(f"row {index} has {len(row)} values; expected {len(fields)}: {fields}")
    return tuple(row)


def _check_limit(value: Any, name: str, index: int) -> float:
    if value is None:
        raise ValueError(f"row {index}: {name} is None; use math.inf for 'no limit'")
    # a thinking cap of 0 is the no-thinking run; a budget must be positive
    too_small = value < 0 if name == "cap" else value <= 0
    if not _is_real(value) or math.isnan(value) or too_small:
        kind = "a number of tokens >= 0" if name == "cap" else "a positive number of tokens"
        raise ValueError(f"row {index}: {name} must be {kind} "
                         f"(math.inf for no limit), got {value!r}")
    return value


def _check_correct(value: Any, index: int) -> float:
    # bool, numpy.bool_ and the integers 0/1 are accepted; 0.5 or "yes" are not
    if isinstance(value, bool) or (hasattr(value, "dtype") and value.dtype == bool):
        return float(bool(value))
    if _is_real(value) and value in (0, 1):
        return float(value)
    raise ValueError(f"row {index}: correct must be a bool (or 0/1), got {value!r}")


def _check_tokens(value: Any, name: str, index: int) -> float:
    if not _is_real(value) or not math.isfinite(value) or value < 0:
        raise ValueError(f"row {index}: {name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _group_rows(rows: Iterable[Any], fields: tuple[str, ...]) -> _Grouped:
    """Parse and validate rows into ``limit -> problem_id -> [(correct, tokens), ...]``.

    ``fields`` names the row layout; it must contain ``problem_id``, ``correct``, one of
    ``budget``/``cap`` and one of ``tokens_used``/``tokens``.
    """
    limit_field = "budget" if "budget" in fields else "cap"
    tokens_field = "tokens_used" if "tokens_used" in fields else "tokens"
    position = {name: i for i, name in enumerate(fields)}
    grouped: _Grouped = {}
    for index, row in enumerate(rows):
        values = _row_values(row, fields, index)
        problem_id = values[position["problem_id"]]
        try:
            hash(problem_id)
        except TypeError:
            raise TypeError(
                f"row {index}: problem_id must be hashable, got {problem_id!r}") from None
        limit = _check_limit(values[position[limit_field]], limit_field, index)
        correct = _check_correct(values[position["correct"]], index)
        tokens = _check_tokens(values[position[tokens_field]], tokens_field, index)
        grouped.setdefault(limit, {}).setdefault(problem_id, []).append((correct, tokens))
    if not grouped:
        raise ValueError(f"no rows: expected rows of {fields}")
    return grouped


def _per_problem_means(problems: dict[Hashable, list[_Sample]], limit: float,
                       score: Callable[[float, float, float], float]) -> tuple[list[float], int]:
    """Per-problem means of ``score(limit, correct, tokens)`` (problems ordered by repr) and
    the number of samples."""
    means = []
    n_samples = 0
    for problem_id in sorted(problems, key=repr):
        samples = problems[problem_id]
        n_samples += len(samples)
        means.append(sum(score(limit, c, t) for c, t in samples) / len(samples))
    return means, n_samples


def _estimate(problems: dict[Hashable, list[_Sample]], limit: float,
              score: Callable[[float, float, float], float],
              n_boot: int, alpha: float, seed: int) -> Estimate:
    """Mean over problems of the per-problem mean of ``score(limit, correct, tokens)``, with CI."""
    per_problem, n_samples = _per_problem_means(problems, limit, score)
    value, low, high = bootstrap_ci(per_problem, n_boot=n_boot, alpha=alpha, seed=seed)
    return Estimate(value, low, high, len(per_problem), n_samples)


def _success(budget: float, correct: float, tokens: float) -> float:
    return correct if tokens <= budget else 0.0


def _accuracy(budget: float, correct: float, tokens: float) -> float:
    return correct


def _tokens(budget: float, correct: float, tokens: float) -> float:
    return tokens


def _per_budget(rows: Iterable[Any], score: Callable[[float, float, float], float],
                n_boot: int, alpha: float, seed: int) -> dict[float, Estimate]:
    grouped = _group_rows(rows, BUDGET_FIELDS)
    return {budget: _estimate(grouped[budget], budget, score, n_boot, alpha, seed)
            for budget in sorted(grouped)}


def budgeted_success_at_b(rows: Iterable[Any], n_boot: int = 2000, alpha: float = 0.05,
                          seed: int = 0) -> dict[float, Estimate]:
    """Budgeted Success@B per budget: correct AND ``tokens_used <= B``; keys in ascending order.

    ``rows``: ``(problem_id, budget, correct, tokens_used)`` tuples or mappings.
    """
    return _per_budget(rows, _success, n_boot, alpha, seed)


def accuracy_at_b(rows: Iterable[Any], n_boot: int = 2000, alpha: float = 0.05,
                  seed: int = 0) -> dict[float, Estimate]:
    """Accuracy@B per budget: correct regardless of length; keys in ascending order."""
    return _per_budget(rows, _accuracy, n_boot, alpha, seed)


def mean_tokens_at_b(rows: Iterable[Any], n_boot: int = 2000, alpha: float = 0.05,
                     seed: int = 0) -> dict[float, Estimate]:
    """Mean ``tokens_used`` per budget (all answers, per-problem means first); CI in tokens."""
    return _per_budget(rows, _tokens, n_boot, alpha, seed)


PER_PROBLEM_METRICS = {"success": _success, "accuracy": _accuracy, "tokens": _tokens}


def per_problem_at_b(rows: Iterable[Any], budget: float,
                     metric: str = "success") -> dict[Hashable, float]:
    """``problem_id -> `` the problem's mean ``metric`` under ``budget`` (its samples averaged):
    ``success`` (correct and ``tokens_used <= budget``), ``accuracy`` or ``tokens``. These are
    the per-problem scores a paired comparison of two models on the same problems uses
    (``eval.compare``). Raises when no row has that budget."""
    if metric not in PER_PROBLEM_METRICS:
        raise ValueError(f"metric must be one of {sorted(PER_PROBLEM_METRICS)}, got {metric!r}")
    grouped = _group_rows(rows, BUDGET_FIELDS)
    if budget not in grouped:
        raise ValueError(f"no rows with budget {budget!r}; the rows have budgets {sorted(grouped)}")
    score = PER_PROBLEM_METRICS[metric]
    return {pid: sum(score(budget, c, t) for c, t in samples) / len(samples)
            for pid, samples in grouped[budget].items()}


def budget_curve(rows: Iterable[Any], n_boot: int = 2000, alpha: float = 0.05,
                 seed: int = 0) -> list[BudgetPoint]:
    """One :class:`BudgetPoint` per budget, ascending: Success@B, Accuracy@B, tokens@B with CIs."""
    grouped = _group_rows(rows, BUDGET_FIELDS)
    points = []
    for budget in sorted(grouped):
        success, accuracy, tokens = (
            _estimate(grouped[budget], budget, score, n_boot, alpha, seed)
            for score in (_success, _accuracy, _tokens)
        )
        points.append(BudgetPoint(
            budget=budget, n_problems=success.n_problems, n_samples=success.n_samples,
            success=success.value, success_ci_low=success.ci_low,
            success_ci_high=success.ci_high,
            accuracy=accuracy.value, accuracy_ci_low=accuracy.ci_low,
            accuracy_ci_high=accuracy.ci_high,
            mean_tokens=tokens.value, mean_tokens_ci_low=tokens.ci_low,
            mean_tokens_ci_high=tokens.ci_high,
        ))
    return points


def token_cost_effectiveness(acc: float, acc_baseline: float, mean_tokens: float) -> float:
    """``(acc - acc_baseline) / mean_tokens * 1000``: accuracy gained per 1000 tokens spent.

    Accuracies are fractions in [0, 1]; ``mean_tokens`` is the evaluated run's mean tokens per
    answer and must be > 0. Negative when the run is worse than the baseline.
    """
    for name, value in (("acc", acc), ("acc_baseline", acc_baseline)):
        if not _is_real(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a fraction in [0, 1] (divide percentages by 100), "
                             f"got {value!r}")
    if not _is_real(mean_tokens) or math.isnan(mean_tokens) or math.isinf(mean_tokens):
        raise ValueError(f"mean_tokens must be a finite number, got {mean_tokens!r}")
    if mean_tokens <= 0:
        raise ValueError(f"mean_tokens must be > 0 to divide by it, got {mean_tokens!r}; "
                         "a run that used no tokens has no cost-effectiveness")
    return float((acc - acc_baseline) / mean_tokens * TOKENS_PER_EFF_UNIT)


def thinking_budget_sweep(rows: Iterable[Any], n_boot: int = 2000, alpha: float = 0.05,
                          seed: int = 0) -> list[SweepPoint]:
    """Curve of accuracy vs per-step thinking-token cap, ascending by cap.

    ``rows``: ``(cap, problem_id, correct, tokens)`` tuples or mappings. Accuracy counts correct
    answers regardless of tokens (the cap was enforced during generation); ``mean_tokens`` is
    the mean over problems of each problem's mean tokens.
    """
    grouped = _group_rows(rows, SWEEP_FIELDS)
    points = []
    for cap in sorted(grouped):
        accuracy = _estimate(grouped[cap], cap, _accuracy, n_boot, alpha, seed)
        tokens, _ = _per_problem_means(grouped[cap], cap, _tokens)
        points.append(SweepPoint(cap=cap, accuracy=accuracy.value, ci_low=accuracy.ci_low,
                                 ci_high=accuracy.ci_high, mean_tokens=sum(tokens) / len(tokens),
                                 n_problems=accuracy.n_problems, n_samples=accuracy.n_samples))
    return points


# ---------------------------------------------------------------------------------------------
# Warehouse rows: budget_scores (view budget_curve) and eff_scores (view eff_curve)


def _sample_tokens(row: Mapping[str, Any]) -> float:
    used = row.get("tokens_used")
    return float(used if used is not None else (row.get("completion_tokens") or 0))


def budget_score_rows(samples: Iterable[Mapping[str, Any]], n_boot: int = 2000,
                      alpha: float = 0.05, seed: int = 0) -> list[dict[str, Any]]:
    """``budget_scores`` rows from ``eval_samples`` rows: one per (model, benchmark, budget).

    Only graded rows of budgeted runs count (``budget`` set, ``correct`` not None); values are
    :func:`budget_curve` of ``(problem_id, budget, correct, tokens_used)``.
    """
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in samples:
        if s.get("budget") is None or s.get("correct") is None:
            continue
        groups.setdefault((s["model"], s["benchmark"]), []).append(s)
    out = []
    for (model, benchmark), rows in sorted(groups.items()):
        limits = [r["generation_limit"] for r in rows if r.get("generation_limit") is not None]
        checkpoints = {r.get("checkpoint_id") for r in rows} - {None}
        curve = budget_curve([(r["problem_id"], r["budget"], bool(r["correct"]), _sample_tokens(r))
                              for r in rows], n_boot=n_boot, alpha=alpha, seed=seed)
        for p in curve:
            out.append({
                "model": model, "benchmark": benchmark, "budget": int(p.budget),
                "n_problems": p.n_problems, "n_samples": p.n_samples,
                "budgeted_success": p.success, "budgeted_success_ci_low": p.success_ci_low,
                "budgeted_success_ci_high": p.success_ci_high,
                "accuracy": p.accuracy, "accuracy_ci_low": p.accuracy_ci_low,
                "accuracy_ci_high": p.accuracy_ci_high,
                "mean_tokens": p.mean_tokens, "mean_tokens_ci_low": p.mean_tokens_ci_low,
                "mean_tokens_ci_high": p.mean_tokens_ci_high,
                "generation_limit": max(limits) if limits else None,
                "checkpoint_id": min(checkpoints) if len(checkpoints) == 1 else None,
            })
    return out


@dataclass(frozen=True)
class EffPoint:
    """DeepTool Eq. 12 at one thinking cap, on the ``n_problems`` problems shared with the
    baseline; ``eff`` in accuracy (fraction) gained per 1,000 tokens, with a paired CI."""

    cap: float
    n_problems: int
    accuracy: float
    baseline_accuracy: float
    mean_tokens: float
    baseline_mean_tokens: float
    eff: float
    eff_ci_low: float
    eff_ci_high: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _problem_means(samples: dict[Hashable, list[_Sample]], ids: list[Hashable]) -> np.ndarray:
    """Rows: problems in ``ids`` order; columns: mean correctness, mean tokens."""
    return np.array([[sum(c for c, _ in samples[p]) / len(samples[p]),
                      sum(t for _, t in samples[p]) / len(samples[p])] for p in ids], dtype=float)


def eff_curve(capped_rows: Iterable[Any], baseline_rows: Iterable[Any], n_boot: int = 2000,
              alpha: float = 0.05, seed: int = 0) -> list[EffPoint]:
    """Eq. 12 cost-effectiveness per thinking cap against a no-thinking baseline, ascending.

    ``capped_rows``: ``(cap, problem_id, correct, tokens)``; ``baseline_rows``:
    ``(problem_id, correct, tokens)`` (or mappings with those names). Each cap is compared with
    the baseline on the problems both have (per-problem means first); a cap sharing none with
    the baseline is left out. Raises when a cap's shared problems used no tokens at all.
    """
    grouped = _group_rows(capped_rows, SWEEP_FIELDS)
    baseline = [(math.inf, *_row_values(r, BASELINE_FIELDS, i))
                for i, r in enumerate(baseline_rows)]
    if not baseline:
        raise ValueError(f"no baseline rows: Eq. 12 needs the no-thinking run's "
                         f"{BASELINE_FIELDS} on the same problems")
    base = _group_rows(baseline, SWEEP_FIELDS)[math.inf]
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), e.g. 0.05 for a 95% interval; got {alpha}")
    points = []
    for cap in sorted(grouped):
        ids = sorted(set(grouped[cap]) & set(base), key=repr)
        if not ids:
            continue
        run, ref = _problem_means(grouped[cap], ids), _problem_means(base, ids)
        acc, acc_base, tokens = run[:, 0].mean(), ref[:, 0].mean(), run[:, 1].mean()
        if tokens <= 0:
            raise ValueError(f"thinking cap {cap}: the capped run used no tokens on its "
                             f"{len(ids)} shared problems, so Eq. 12 divides by zero")
        eff = float((acc - acc_base) / tokens * TOKENS_PER_EFF_UNIT)
        low = high = eff
        if len(ids) > 1:
            rng = np.random.default_rng(seed)
            idx = rng.integers(0, len(ids), size=(n_boot, len(ids)))
            boot_tokens = run[idx, 1].mean(axis=1)
            gain = run[idx, 0].mean(axis=1) - ref[idx, 0].mean(axis=1)
            # a resample whose problems used no tokens has no Eff; leave it out
            ok = boot_tokens > 0
            values = gain[ok] / boot_tokens[ok] * TOKENS_PER_EFF_UNIT
            if values.size:
                low, high = (float(v) for v in np.quantile(values, [alpha / 2, 1 - alpha / 2]))
        points.append(EffPoint(cap=cap, n_problems=len(ids), accuracy=float(acc),
                               baseline_accuracy=float(acc_base), mean_tokens=float(tokens),
                               baseline_mean_tokens=float(ref[:, 1].mean()), eff=eff,
                               eff_ci_low=low, eff_ci_high=high))
    return points


def eff_score_rows(samples: Iterable[Mapping[str, Any]],
                   baselines: Mapping[str, str] | None = None, n_boot: int = 2000,
                   alpha: float = 0.05, seed: int = 0) -> tuple[list[dict[str, Any]], list[str]]:
    """``eff_scores`` rows (one per model, benchmark and thinking cap > 0) from ``eval_samples``.

    The baseline of model M on a benchmark is model ``baselines.get(M, M)`` there: its rows with
    thinking cap 0 (the no-thinking run), or -- for another model only -- its rows without cap
    or budget. Returns the rows and the evaluation partitions (``<benchmark>|<model>``,
    ``warehouse.partitions.eval_partition``) of the sweeps left out for lack of a baseline. Tokens are ``completion_tokens`` (every turn, thinking included).
    """
    baselines = dict(baselines or {})
    graded = [s for s in samples if s.get("correct") is not None and s.get("budget") is None]
    by_key: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in graded:
        by_key.setdefault((s["model"], s["benchmark"]), []).append(s)

    def baseline_of(model: str, benchmark: str) -> tuple[str, list[Mapping[str, Any]]]:
        other = baselines.get(model, model)
        rows = by_key.get((other, benchmark), [])
        no_thinking = [r for r in rows if r.get("thinking_cap") == 0]
        if no_thinking:
            return f"{other}@thinking_cap=0", no_thinking
        if other != model:
            return other, [r for r in rows if r.get("thinking_cap") is None]
        return other, []

    out, missing = [], []
    for (model, benchmark), rows in sorted(by_key.items()):
        capped = [r for r in rows if r.get("thinking_cap") not in (None, 0)]
        if not capped:
            continue
        label, base = baseline_of(model, benchmark)
        if not base:
            missing.append(eval_partition(benchmark, model))
            continue
        points = eff_curve(
            [(r["thinking_cap"], r["problem_id"], bool(r["correct"]),
              float(r.get("completion_tokens") or 0)) for r in capped],
            [(r["problem_id"], bool(r["correct"]), float(r.get("completion_tokens") or 0))
             for r in base], n_boot=n_boot, alpha=alpha, seed=seed)
        out.extend({"model": model, "benchmark": benchmark, "baseline": label,
                    "thinking_cap": int(p.cap), "n_problems": p.n_problems,
                    "accuracy": p.accuracy, "baseline_accuracy": p.baseline_accuracy,
                    "mean_tokens": p.mean_tokens, "baseline_mean_tokens": p.baseline_mean_tokens,
                    "eff": p.eff, "eff_ci_low": p.eff_ci_low, "eff_ci_high": p.eff_ci_high}
                   for p in points)
    return out, missing
