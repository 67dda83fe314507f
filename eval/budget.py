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

from eval.metrics import bootstrap_ci

BUDGET_FIELDS = ("problem_id", "budget", "correct", "tokens_used")
SWEEP_FIELDS = ("cap", "problem_id", "correct", "tokens")
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
    if not _is_real(value) or math.isnan(value) or value <= 0:
        raise ValueError(f"row {index}: {name} must be a positive number of tokens "
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
