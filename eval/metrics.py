"""Scores over graded samples: avg@k, unbiased pass@k, maj@k and bootstrap confidence intervals.

Inputs are plain Python/numpy values (correctness flags, extracted answers); nothing here
grades or reads files. Definitions:

- avg@k: mean correctness over the k samples of a problem, then the mean over problems.
- pass@k: the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` of "at least one of k samples is
  correct" from n samples with c correct, computed as a product (no huge binomials).
- maj@k: the most frequent extracted answer among k samples (ties go to the answer seen first)
  is graded; samples without an answer do not vote.
- bootstrap CI: percentile interval of the mean from resampling problems with replacement.
- ratio CI: ``sum(num) / sum(den)`` (a rate over units, e.g. resolved / all alarms over
  episodes) with the percentile interval from resampling units; :class:`CI` holds a value
  with its interval and renders a "value ± half-width" table cell.

Comparisons of two models on the same problems (paired bootstrap, paired t-test) live in
``eval/compare.py``; token-budget and tool-integrated-reasoning metrics in ``eval/budget.py``.

Not guaranteed: the bootstrap CI ignores the sampling noise of the k samples inside a problem
and is too narrow for a handful of problems; maj@k compares answers as normalised strings, so
"1/2" and "0.5" are different votes unless ``normalize`` maps them together.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_BOOT_CELLS = 2_000_000  # resampled indices held in memory at once


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _rows_as_floats(correct_matrix: Sequence[Sequence[Any]]) -> list[np.ndarray]:
    rows = [np.asarray(row, dtype=float) for row in correct_matrix]
    if not rows:
        raise ValueError("no problems: the correctness matrix is empty")
    for i, row in enumerate(rows):
        if row.ndim != 1 or row.size == 0:
            raise ValueError(f"problem {i} has no samples (each row needs at least one flag)")
        if np.isnan(row).any() or (row < 0).any() or (row > 1).any():
            raise ValueError(f"problem {i}: correctness values must be in [0, 1], got {row.tolist()}")
    return rows


def avg_at_k(correct_matrix: Sequence[Sequence[Any]]) -> float:
    """Mean over problems of the mean correctness of each problem's samples (rows may differ in length)."""
    return float(np.mean([row.mean() for row in _rows_as_floats(correct_matrix)]))


def correct_by_problem(samples: Iterable[Any]) -> dict[Hashable, float]:
    """avg@k per problem from graded sample rows (``problem_id``, ``correct``): the share of a
    problem's samples that are right; a sample with no grade (its generation failed, or it
    could not be graded) counts as wrong: a failure is not a right answer."""
    right: dict[Hashable, list[float]] = {}
    for s in samples:
        right.setdefault(s["problem_id"], []).append(1.0 if s.get("correct") else 0.0)
    return {p: sum(v) / len(v) for p, v in right.items()}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct; ``1 <= k <= n``."""
    n = _check_count("n", n, 1)
    c = _check_count("c", c, 0)
    k = _check_count("k", k, 1)
    if c > n:
        raise ValueError(f"c (correct samples) = {c} exceeds n (samples) = {n}")
    if k > n:
        raise ValueError(f"k = {k} exceeds the number of samples n = {n}; draw more samples or lower k")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=float)))


def dataset_pass_at_k(n_per_problem: Sequence[int], c_per_problem: Sequence[int], k: int) -> float:
    """Mean of :func:`pass_at_k` over problems (each problem needs at least k samples)."""
    if len(n_per_problem) != len(c_per_problem):
        raise ValueError(
            f"{len(n_per_problem)} sample counts but {len(c_per_problem)} correct counts"
        )
    if len(n_per_problem) == 0:
        raise ValueError("no problems: cannot compute pass@k of an empty dataset")
    scores = []
    for i, (n, c) in enumerate(zip(n_per_problem, c_per_problem)):
        try:
            scores.append(pass_at_k(n, c, k))
        except ValueError as exc:
            raise ValueError(f"problem {i}: {exc}") from None
    return float(np.mean(scores))


def _default_normalize(answer: str) -> str:
    return " ".join(answer.split())


def majority_vote(answers: Sequence[str | None],
                  normalize: Callable[[str], str] = _default_normalize) -> str | None:
    """The most frequent answer (first raw spelling of its class); ties: the class seen first.

    ``None`` and empty answers do not vote; returns None when nothing voted.
    """
    counts: dict[str, int] = {}
    first_raw: dict[str, str] = {}
    for answer in answers:
        if answer is None:
            continue
        key = normalize(answer)
        if not key:
            continue
        counts[key] = counts.get(key, 0) + 1
        first_raw.setdefault(key, answer)
    if not counts:
        return None
    best = max(counts.values())
    winner = next(key for key in counts if counts[key] == best)  # dicts keep first-seen order
    return first_raw[winner]


def majority_correct(answers: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """maj@k of one problem: whether its majority answer (:func:`majority_vote` over the
    extracted answers) was graded correct. The grader's verdict on the first sample that gave
    that answer stands for every sample with the same answer; no answer at all is wrong."""
    if len(answers) != len(correct):
        raise ValueError(f"{len(answers)} answers but {len(correct)} verdicts")
    voted = majority_vote(list(answers))
    if voted is None:
        return False
    return bool(next(c for a, c in zip(answers, correct) if a == voted))


def maj_at_k(answers_per_problem: Sequence[Sequence[str | None]],
             correct_per_problem: Sequence[Sequence[bool]], k: int | None = None) -> float:
    """Fraction of problems whose majority answer over the first ``k`` samples (all when None)
    was graded correct (:func:`majority_correct`: the one definition ``eval_scores`` stores)."""
    if len(answers_per_problem) == 0:
        raise ValueError("no problems: cannot compute maj@k of an empty dataset")
    if len(correct_per_problem) != len(answers_per_problem):
        raise ValueError(f"{len(answers_per_problem)} problems but {len(correct_per_problem)} "
                         "lists of verdicts")
    if k is not None:
        k = _check_count("k", k, 1)
    hits = 0
    for i, (answers, correct) in enumerate(zip(answers_per_problem, correct_per_problem)):
        if k is not None and len(answers) < k:
            raise ValueError(f"problem {i} has {len(answers)} samples, fewer than k = {k}")
        hits += majority_correct(list(answers)[:k], list(correct)[:k])
    return hits / len(answers_per_problem)


def bootstrap_means(values: Sequence[float] | np.ndarray, n_boot: int, seed: int = 0) -> np.ndarray:
    """``n_boot`` means of ``values`` resampled with replacement (``default_rng(seed)``).

    The building block of :func:`bootstrap_ci` and the paired tests in ``eval/compare.py``;
    resampled indices are drawn in chunks of at most ``MAX_BOOT_CELLS`` so memory stays bounded.
    ``values`` must be a non-empty 1-D array of finite numbers (callers validate).
    """
    values = np.asarray(values, dtype=float)
    n_boot = _check_count("n_boot", n_boot, 1)
    boot = np.empty(n_boot, dtype=float)
    for start, stop, idx in resample_indices(values.size, n_boot, seed):
        boot[start:stop] = values[idx].mean(axis=1)
    return boot


def resample_indices(n: int, n_boot: int, seed: int = 0):
    """``(start, stop, idx)`` chunks of ``n_boot`` resamples of ``n`` units with replacement
    (``default_rng(seed)``): ``idx`` holds rows ``start:stop``, each ``n`` unit indices, and at
    most ``MAX_BOOT_CELLS`` indices at once. Every bootstrap here draws through it, so the same
    ``n``, ``n_boot`` and ``seed`` give the same resamples."""
    rng = np.random.default_rng(seed)
    chunk = max(1, MAX_BOOT_CELLS // n)
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        yield start, stop, rng.integers(0, n, size=(stop - start, n))


def bootstrap_ci(per_problem_scores: Sequence[float], n_boot: int = 2000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean score and a ``1 - alpha`` percentile bootstrap interval.

    Problems are resampled with replacement ``n_boot`` times with ``numpy.random.default_rng(seed)``,
    so the result is deterministic for a seed.
    """
    scores = np.asarray(per_problem_scores, dtype=float)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError("bootstrap_ci needs a non-empty 1-D sequence of per-problem scores")
    if np.isnan(scores).any():
        raise ValueError("per-problem scores contain NaN; drop or fill those problems first")
    n_boot = _check_count("n_boot", n_boot, 1)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), e.g. 0.05 for a 95% interval; got {alpha}")
    mean = float(scores.mean())
    if scores.size == 1 or np.all(scores == scores[0]):
        return mean, mean, mean
    boot = bootstrap_means(scores, n_boot, seed)
    low, high = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    return mean, float(low), float(high)


@dataclass(frozen=True)
class SampleSummary:
    """Scores of a set of (problem, sample) grades; ``pass_at_k`` has k = 1..min samples."""

    n_problems: int
    min_samples: int
    max_samples: int
    avg_at_k: float
    pass_at_k: dict[int, float] = field(default_factory=dict)
    ci_low: float = 0.0
    ci_high: float = 0.0
    alpha: float = 0.05

    def as_dict(self) -> dict[str, float | int]:
        """Flat form for a table row or Dagster metadata: ``avg@k``, ``pass@1``, ..., CI bounds."""
        out: dict[str, float | int] = {
            "n_problems": self.n_problems, "min_samples": self.min_samples,
            "max_samples": self.max_samples, "avg@k": self.avg_at_k,
            "avg@k_ci_low": self.ci_low, "avg@k_ci_high": self.ci_high,
        }
        out.update({f"pass@{k}": v for k, v in self.pass_at_k.items()})
        return out


def summarize(rows: Iterable[tuple[Hashable, int, Any]], n_boot: int = 2000, alpha: float = 0.05,
              seed: int = 0) -> SampleSummary:
    """Summarise ``(problem_id, sample_index, correct)`` rows: avg@k with CI, pass@k for k = 1..n.

    Problems may have different numbers of samples; pass@k is reported for k up to the
    smallest count. A repeated ``(problem_id, sample_index)`` raises ValueError. Problems are
    ordered by ``repr(problem_id)`` so the CI does not depend on row order.
    """
    grades: dict[Hashable, dict[int, bool]] = {}
    for row in rows:
        if len(row) != 3:
            raise ValueError(f"rows must be (problem_id, sample_index, correct), got {row!r}")
        problem_id, sample_index, correct = row
        samples = grades.setdefault(problem_id, {})
        if sample_index in samples:
            raise ValueError(
                f"duplicate grade for problem {problem_id!r} sample {sample_index!r}; "
                "deduplicate the rows (e.g. keep the latest run) first"
            )
        samples[sample_index] = bool(correct)
    if not grades:
        raise ValueError("no rows to summarise")
    ordered = [grades[p] for p in sorted(grades, key=repr)]
    ns = [len(s) for s in ordered]
    cs = [sum(s.values()) for s in ordered]
    per_problem = [c / n for c, n in zip(cs, ns)]
    mean, low, high = bootstrap_ci(per_problem, n_boot=n_boot, alpha=alpha, seed=seed)
    return SampleSummary(
        n_problems=len(ordered), min_samples=min(ns), max_samples=max(ns), avg_at_k=mean,
        pass_at_k={k: dataset_pass_at_k(ns, cs, k) for k in range(1, min(ns) + 1)},
        ci_low=low, ci_high=high, alpha=alpha,
    )


def bootstrap_ratio_ci(numerators: Sequence[float], denominators: Sequence[float],
                       n_boot: int = 2000, alpha: float = 0.05,
                       seed: int = 0) -> tuple[float, float, float]:
    """``(ratio, low, high)``: ``sum(numerators) / sum(denominators)`` with a percentile bootstrap
    interval that resamples units (a numerator with its denominator) with replacement.

    This is the ratio of aggregates -- the ratio of the two means -- not the mean of per-unit
    ratios: a rate such as "resolved alarms / all alarms" over episodes is recomputed from the
    resampled totals in every resample (Engagement paper App. C, the CI paragraph), so units
    with larger denominators weigh more. Resamples use ``numpy.random.default_rng(seed)`` and
    draw exactly the index sets :func:`bootstrap_ci` draws for the same ``n_boot``, ``seed`` and
    number of units, so a mean and a rate of the same units share their resamples; the result
    is deterministic for a seed.

    Denominators must be non-negative (counts or totals). A resample whose denominators sum to
    0 has no ratio and is left out of the percentiles; if every unit's denominator is 0 the
    ratio is undefined and ``(nan, nan, nan)`` is returned (a table shows it as ``nan``); if no
    resample has a ratio the bounds are ``nan``.

    Not guaranteed: like :func:`bootstrap_ci`, the interval is too narrow for a handful of units
    and says nothing about variability the units do not sample (e.g. training seeds).
    """
    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    if num.ndim != 1 or den.ndim != 1 or num.size == 0:
        raise ValueError("bootstrap_ratio_ci needs two non-empty 1-D sequences "
                         "(one numerator and one denominator per unit)")
    if num.size != den.size:
        raise ValueError(f"numerators and denominators differ in length: {num.size} vs {den.size}; "
                         "pass one of each per unit")
    if np.isnan(num).any() or np.isnan(den).any():
        raise ValueError("numerators or denominators contain NaN; drop or fill those units first")
    if (den < 0).any():
        raise ValueError(f"denominators must be >= 0 (counts or totals), got {den.min()}")
    n_boot = _check_count("n_boot", n_boot, 1)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), e.g. 0.05 for a 95% interval; got {alpha}")
    total = den.sum()
    if total == 0:
        nan = float("nan")
        return nan, nan, nan
    ratios = np.empty(n_boot, dtype=float)
    for start, stop, idx in resample_indices(num.size, n_boot, seed):
        bnum, bden = num[idx].sum(axis=1), den[idx].sum(axis=1)
        ratios[start:stop] = np.divide(bnum, bden, out=np.full(stop - start, np.nan),
                                       where=bden > 0)
    ratio = float(num.sum() / total)
    defined = ratios[~np.isnan(ratios)]
    if defined.size == 0:
        return ratio, float("nan"), float("nan")
    low, high = np.quantile(defined, [alpha / 2.0, 1.0 - alpha / 2.0])
    return ratio, float(low), float(high)


@dataclass(frozen=True)
class CI:
    """A point estimate with its confidence interval ``[low, high]``, e.g. one table cell.

    ``CI(*bootstrap_ci(scores))`` and ``CI(*bootstrap_ratio_ci(num, den))`` wrap the tuple
    forms. Fields may be NaN where the estimate is undefined (see :func:`bootstrap_ratio_ci`).
    """

    value: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        """``(high - low) / 2``: the "±" of a "value ± half-width" cell (the interval need not
        be symmetric about ``value``)."""
        return (self.high - self.low) / 2

    def fmt(self, scale: float = 1.0, digits: int = 2, suffix: str = "") -> str:
        """``"value ± half-width"`` with both multiplied by ``scale`` (100 for percentages),
        ``digits`` decimals, and ``suffix`` after the value (e.g. ``"%"``)."""
        return f"{self.value * scale:.{digits}f}{suffix} ± {self.half_width * scale:.{digits}f}"
