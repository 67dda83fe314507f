"""Is model A really better than model B? Paired tests on per-problem scores of the same problems.

Both models are scored on the same problems (a per-problem score is whatever the caller
chooses: a 0/1 grade, avg@k, pass@k, tokens used ...). Scores are paired by problem, so the
problem-to-problem difficulty spread cancels and only the per-problem differences
``d_i = a_i - b_i`` matter. Three tests are offered:

- :func:`paired_bootstrap` -- resamples problems with replacement (the same problems for both
  models) and looks at the distribution of the mean difference.
  * CI: the ``alpha/2`` and ``1 - alpha/2`` percentiles of the resampled mean differences.
  * p-value, *shift method*: the resampled mean differences are centred at zero
    (``boot - observed``) to stand in for the null distribution "no difference"; the p-value is
    the share of that null distribution at least as extreme as the observed difference:
    two-sided ``|null| >= |observed|``, ``greater`` ``null >= observed``, ``less``
    ``null <= observed``; ties (within ``TIE_TOL``, against float rounding) count as extreme.
    It is reported as ``(1 + count) / (1 + n_boot)`` so a Monte-Carlo p-value is never
    exactly 0 (its resolution is ``1 / (1 + n_boot)``).
- :func:`paired_ratio_bootstrap` -- the same resampling for a rate that is a ratio of
  aggregates in each arm (``sum(num) / sum(den)``, e.g. recovering / erroring samples): both
  arms' rates are recomputed from the resampled totals; CI and p-value as above.
- :func:`paired_t_test` -- Student's t on the differences: ``t = mean(d) / (sd(d) / sqrt(n))``,
  ``df = n - 1``, p from the t distribution, CI ``mean(d) +- t_{1-alpha/2, df} * se``.

``alternative`` is about ``diff = mean_a - mean_b``: ``"greater"`` tests "A scores higher than
B", ``"less"`` "A scores lower", ``"two-sided"`` "they differ". The CI is always the two-sided
``1 - alpha`` interval of the difference, whichever alternative is tested.

Degenerate cases, decided explicitly:

- fewer than 2 problems: ValueError (there is no spread to test against).
- every difference is zero (e.g. identical scores): diff 0, CI (0, 0), p = 1.0 for every
  alternative -- no evidence of any difference. The t statistic is reported as 0.0 (it is 0/0).
- every difference is the same non-zero value c (zero variance): the t-test gives
  ``t = +-inf``, p = 0.0 in the direction of c (and two-sided), 1.0 against it, CI (c, c);
  the bootstrap gives CI (c, c) and p = ``1 / (1 + n_boot)`` toward c, 1.0 against it.

The Student t distribution is computed here (no scipy): the tail probability is a regularized
incomplete beta function, evaluated with a continued fraction (modified Lentz method).

Not guaranteed: both tests treat problems as an i.i.d. sample and ignore the sampling noise
of the k generations inside a problem; with few problems (say < 20) the bootstrap CI is too
narrow and the t-test leans on normality of the differences. No multiple-comparison
correction is applied when many pairs of models are compared.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from eval.metrics import _check_count, bootstrap_means, resample_indices

ALTERNATIVES = ("two-sided", "greater", "less")
CF_MAX_ITER = 100_000  # continued-fraction terms; large df needs O(sqrt(df)) of them
CF_EPS = 1e-15  # relative change at which the continued fraction counts as converged
CF_TINY = 1e-300  # stands in for a zero denominator in the Lentz recurrence
STIRLING_MIN = 10.0  # from here on, Stirling's series gives lgamma to ~1e-13
TIE_TOL = 1e-9  # bootstrap: a resampled difference this close to the boundary counts as a tie
PPF_TOL = 1e-12  # bisection tolerance of student_t_ppf (absolute on t, relative when large)
DF_NORMAL = 1e9  # beyond this df the standard normal is closer than the continued fraction


# ------------------------------------------------------------------ Student t distribution


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction ``1 / (1 + d1 / (1 + d2 / (1 + ...)))`` of I_x(a, b).

    ``I_x(a, b) = x^a (1-x)^b / (a B(a, b)) * fraction``; the fraction converges quickly
    for ``x < (a + 1) / (a + b + 2)``. Coefficients: for m >= 0,
    ``d_{2m+1} = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1))`` and, for m >= 1,
    ``d_{2m} = m (b-m) x / ((a+2m-1)(a+2m))``.
    """
    value = 1.0  # running value of the denominator 1 + d1 / (1 + ...)
    c_ratio = 1.0  # Lentz's C_j
    d_ratio = 0.0  # Lentz's D_j
    for j in range(1, CF_MAX_ITER + 1):
        m = j // 2
        if j % 2:
            coef = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        else:
            coef = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d_ratio = 1.0 + coef * d_ratio
        d_ratio = 1.0 / (d_ratio if abs(d_ratio) > CF_TINY else CF_TINY)
        c_ratio = 1.0 + coef / c_ratio
        if abs(c_ratio) < CF_TINY:
            c_ratio = CF_TINY
        step = c_ratio * d_ratio
        value *= step
        if abs(step - 1.0) < CF_EPS:
            return 1.0 / value
    raise ArithmeticError(  # pragma: no cover - not reached for the parameters we use
        f"incomplete beta continued fraction did not converge (x={x}, a={a}, b={b})"
    )


def _stirling_remainder(x: float) -> float:
    """``lgamma(x) - ((x - 0.5) log x - x + 0.5 log(2 pi))`` for ``x >= STIRLING_MIN``."""
    inv2 = 1.0 / (x * x)
    return (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 / 1680.0))) / x


def _log_beta(a: float, b: float) -> float:
    """``log B(a, b)``. When one argument is large, ``lgamma(big) - lgamma(big + small)`` is
    taken from Stirling's series instead of subtracting two huge lgamma values (which would
    lose ~1e-16 * lgamma(big) of absolute accuracy, 1e-6 at df = 1e12)."""
    small, big = min(a, b), max(a, b)
    if big < STIRLING_MIN:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    # lgamma(big) - lgamma(big + small), expanded with Stirling's formula and regrouped
    gamma_ratio = (-(big - 0.5) * math.log1p(small / big) - small * math.log(big + small)
                   + small + _stirling_remainder(big) - _stirling_remainder(big + small))
    return math.lgamma(small) + gamma_ratio


def _incomplete_beta(x: float, y: float, a: float, b: float,
                     log_x: float | None = None, log_y: float | None = None) -> float:
    """I_x(a, b) with ``y = 1 - x`` (and optionally ``log x``, ``log y``) passed in separately,
    so a caller can compute them without cancellation: with ``a`` around 1e12 the rounding of
    ``x`` itself would otherwise cost 1e-4 of relative accuracy."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_x = math.log(x) if log_x is None else log_x
    log_y = math.log(y) if log_y is None else log_y
    log_front = a * log_x + b * log_y - _log_beta(a, b)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(x, a, b) / a
    # symmetry I_x(a, b) = 1 - I_{1-x}(b, a): the fraction converges fast on the other side
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(y, b, a) / b


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) = B(x; a, b) / B(a, b) for ``0 <= x <= 1`` and ``a, b > 0``."""
    x, a, b = float(x), float(a), float(b)
    if not (a > 0.0 and b > 0.0 and math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"incomplete beta needs finite a > 0 and b > 0, got a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"incomplete beta needs 0 <= x <= 1, got x={x}")
    return _incomplete_beta(x, 1.0 - x, a, b)


def _check_df(df: float) -> float:
    df = float(df)
    if not df > 0.0:  # also rejects NaN
        raise ValueError(f"degrees of freedom must be > 0 (use n - 1 for n pairs), got {df}")
    return df


def student_t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom (``df = inf``: standard normal).

    Uses ``P(|T| > |t|) = I_{df/(df+t^2)}(df/2, 1/2)``; for ``df > DF_NORMAL`` the standard
    normal tail. Checked against mpmath at 60 digits for |t| <= 10: relative error below 1e-11
    up to df = 1e5, 1e-9 up to df = 1e7, 1e-8 up to df = 1e8; past ``DF_NORMAL`` the normal
    tail's relative error is about ``t^4 / (4 df)``.
    """
    df = _check_df(df)
    t = float(t)
    if math.isnan(t):
        raise ValueError("t statistic is NaN")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if df > DF_NORMAL:
        return 0.5 * math.erfc(t / math.sqrt(2.0))
    t2 = t * t
    if t2 == 0.0:
        return 0.5
    # x = df / (df + t^2), y = t^2 / (df + t^2), their logs without rounding x near 1
    log_x = -math.log1p(t2 / df)
    log_y = -math.log1p(df / t2)
    both_tails = _incomplete_beta(math.exp(log_x), math.exp(log_y), df / 2.0, 0.5, log_x, log_y)
    return 0.5 * both_tails if t >= 0 else 1.0 - 0.5 * both_tails


def student_t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom."""
    return student_t_sf(-float(t), df)  # the distribution is symmetric


def student_t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (``0 < q < 1``), by bisection on :func:`student_t_sf`.

    Results are memoised (a t-test asks for the same few quantiles over and over).
    """
    df = _check_df(df)
    q = float(q)
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    if q == 0.5:
        return 0.0
    if q < 0.5:  # pass the small tail itself: 1 - q would round tiny q away
        return -_t_for_upper_tail(q, df)
    return _t_for_upper_tail(1.0 - q, df)


@functools.lru_cache(maxsize=1024)
def _t_for_upper_tail(tail: float, df: float) -> float:
    """The t > 0 with ``student_t_sf(t, df) == tail``, for ``0 < tail < 0.5``."""
    low, high = 0.0, 1.0
    while student_t_sf(high, df) > tail:  # bracket: sf(low) > tail >= sf(high)
        low, high = high, high * 2.0
    while high - low > PPF_TOL * max(1.0, high):
        mid = 0.5 * (low + high)
        if student_t_sf(mid, df) > tail:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


# ------------------------------------------------------------------ paired comparisons


@dataclass(frozen=True)
class PairedResult:
    """Outcome of a paired comparison; ``diff = mean_a - mean_b`` with its ``1 - alpha`` CI.

    ``statistic`` is the t statistic for the t-test and the observed mean difference for the
    bootstrap; ``df`` is ``n - 1`` for the t-test and None for the bootstrap.
    """

    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    method: str
    alternative: str = "two-sided"
    alpha: float = 0.05
    statistic: float = 0.0
    df: int | None = None

    def significant(self, level: float | None = None) -> bool:
        """Whether ``p_value < level`` (default: this result's ``alpha``)."""
        return self.p_value < (self.alpha if level is None else level)

    def as_dict(self) -> dict[str, Any]:
        """Flat form for a warehouse row (the ``pairwise`` view) or Dagster metadata."""
        return asdict(self)


def _as_score_array(values: Any, name: str) -> np.ndarray:
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of numbers or a dict problem_id -> score, "
                        "not a string")
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must hold numbers (per-problem scores): {exc}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one score per problem), got shape {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{name} has {bad.size} non-finite score(s) (NaN/inf), first at "
                         f"position {int(bad[0])}; drop or fill those problems in both models")
    return array


def _id_examples(ids: set[Hashable], limit: int = 5) -> str:
    shown = sorted(ids, key=repr)[:limit]
    more = f", ... ({len(ids) - limit} more)" if len(ids) > limit else ""
    return ", ".join(repr(i) for i in shown) + more


def align_paired_scores(scores_a: Mapping[Hashable, float] | Sequence[float],
                        scores_b: Mapping[Hashable, float] | Sequence[float],
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Two aligned float arrays from two dicts ``problem_id -> score`` or two equal-length
    sequences (already in the same problem order).

    Dicts must have exactly the same problem ids (they are ordered by ``repr(id)``, so the
    result does not depend on insertion order); otherwise ValueError says how many ids each
    side lacks, with examples.
    """
    a_is_map, b_is_map = isinstance(scores_a, Mapping), isinstance(scores_b, Mapping)
    if a_is_map != b_is_map:
        raise TypeError("pass both scores as dicts problem_id -> score, or both as sequences in "
                        "the same problem order; got one of each")
    if a_is_map and b_is_map:
        ids_a, ids_b = set(scores_a), set(scores_b)
        only_a, only_b = ids_a - ids_b, ids_b - ids_a
        if only_a or only_b:
            parts = []
            if only_a:
                parts.append(f"{len(only_a)} problem id(s) of scores_a are missing from scores_b "
                             f"({_id_examples(only_a)})")
            if only_b:
                parts.append(f"{len(only_b)} problem id(s) of scores_b are missing from scores_a "
                             f"({_id_examples(only_b)})")
            raise ValueError("paired scores must cover the same problems: " + "; ".join(parts)
                             + ". Restrict both to the shared ids (or re-run the missing "
                             "problems) before comparing.")
        order = sorted(ids_a, key=repr)
        a = _as_score_array([scores_a[i] for i in order], "scores_a")
        b = _as_score_array([scores_b[i] for i in order], "scores_b")
    else:
        a = _as_score_array(scores_a, "scores_a")
        b = _as_score_array(scores_b, "scores_b")
        if a.size != b.size:
            raise ValueError(f"paired scores need one score per problem for both models: "
                             f"scores_a has {a.size}, scores_b has {b.size}")
    if a.size < 2:
        raise ValueError(f"a paired comparison needs at least 2 problems, got {a.size}")
    return a, b


def _check_test_args(alternative: str, alpha: float) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), e.g. 0.05 for a 95% interval; got {alpha}")


def _shift_p_value(boot: np.ndarray, observed: float, alternative: str, tie: float) -> float:
    """The shift-method p-value of ``observed`` against the resampled differences ``boot``
    (module docstring); differences within ``tie`` of the boundary count as extreme."""
    null = boot - observed
    if alternative == "two-sided":
        extreme = np.count_nonzero(np.abs(null) >= abs(observed) - tie)
    elif alternative == "greater":
        extreme = np.count_nonzero(null >= observed - tie)
    else:
        extreme = np.count_nonzero(null <= observed + tie)
    return (1.0 + float(extreme)) / (1.0 + boot.size)


def paired_bootstrap(scores_a: Mapping[Hashable, float] | Sequence[float],
                     scores_b: Mapping[Hashable, float] | Sequence[float],
                     n_boot: int = 10_000, seed: int = 0, alternative: str = "two-sided",
                     alpha: float = 0.05) -> PairedResult:
    """Paired bootstrap of ``mean(a) - mean(b)`` over problems (see the module docstring for
    the CI and the shift-method p-value). Deterministic for a given ``seed``."""
    _check_test_args(alternative, alpha)
    n_boot = _check_count("n_boot", n_boot, 1)
    a, b = align_paired_scores(scores_a, scores_b)
    d = a - b
    observed = float(d.mean())
    mean_a, mean_b, n = float(a.mean()), float(b.mean()), int(d.size)
    if np.all(d == 0.0):
        return PairedResult(mean_a, mean_b, 0.0, 0.0, 0.0, 1.0, n, "paired_bootstrap",
                            alternative, alpha, 0.0, None)
    if np.all(d == d[0]):  # every resample has the same mean; skip the resampling
        boot = np.full(n_boot, observed)
    else:
        boot = bootstrap_means(d, n_boot, seed)
    # resampled means of 0/1 grades hit the boundary exactly; rounding must not drop those ties
    p_value = _shift_p_value(boot, observed, alternative,
                             TIE_TOL * max(1.0, float(np.abs(d).max())))
    low, high = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    return PairedResult(mean_a, mean_b, observed, float(low), float(high), p_value, n,
                        "paired_bootstrap", alternative, alpha, observed, None)


def paired_ratio_bootstrap(num_a: Sequence[float], den_a: Sequence[float],
                           num_b: Sequence[float], den_b: Sequence[float], n_boot: int = 10_000,
                           seed: int = 0, alternative: str = "two-sided",
                           alpha: float = 0.05) -> PairedResult:
    """Paired bootstrap of ``R_a - R_b`` where each arm's rate is a ratio of aggregates,
    ``R = sum(num) / sum(den)`` over the same units (problems), e.g. "erroring samples that
    end correct / erroring samples" per arm.

    Unit ``i`` carries ``(num_a[i], den_a[i], num_b[i], den_b[i])``; a resample draws units with
    replacement and recomputes both arms' rates from the resampled totals, so the arms share
    their resamples (the pairing) and units with larger denominators weigh more (the ratio of
    the means, not the mean of per-unit ratios; a unit whose denominator is 0 in one arm still
    counts in the other). A resample in which either arm's denominators sum to 0 has no
    difference and is left out of the percentiles and of the p-value's count
    (``n`` stays the number of units). CI and shift-method p-value as in
    :func:`paired_bootstrap`. When every resample gives the observed difference (e.g. both
    arms' numerators are all 0) the CI is that single point and p is 1.0, or
    ``1 / (1 + resamples)`` toward a non-zero difference, as :func:`paired_bootstrap` does.

    Raises ValueError when the arms differ in length, a count is negative or not finite, an
    arm's denominators sum to 0 (its rate is undefined: nothing to divide), or there are fewer
    than 2 units.
    """
    _check_test_args(alternative, alpha)
    n_boot = _check_count("n_boot", n_boot, 1)
    arrays = []
    for name, values in (("num_a", num_a), ("den_a", den_a), ("num_b", num_b),
                         ("den_b", den_b)):
        array = _as_score_array(values, name)
        if (array < 0).any():
            raise ValueError(f"{name} must hold counts or totals >= 0, got {array.min()}")
        arrays.append(array)
    na, da, nb, db = arrays
    if len({a.size for a in arrays}) != 1:
        raise ValueError("paired_ratio_bootstrap needs one numerator and one denominator per "
                         f"unit in both arms; got lengths {[a.size for a in arrays]}")
    if na.size < 2:
        raise ValueError(f"a paired comparison needs at least 2 units, got {na.size}")
    for arm, den in (("a", da), ("b", db)):
        if den.sum() == 0:
            raise ValueError(f"arm {arm}'s denominators sum to 0, so its rate is undefined "
                             "(nothing to divide); there is no rate to compare")
    rate_a, rate_b = float(na.sum() / da.sum()), float(nb.sum() / db.sum())
    observed = rate_a - rate_b
    n = int(na.size)
    boot = np.empty(n_boot, dtype=float)
    for start, stop, idx in resample_indices(n, n_boot, seed):
        sa, sb = da[idx].sum(axis=1), db[idx].sum(axis=1)
        defined = (sa > 0) & (sb > 0)
        ra = np.divide(na[idx].sum(axis=1), sa, out=np.zeros(stop - start), where=defined)
        rb = np.divide(nb[idx].sum(axis=1), sb, out=np.zeros(stop - start), where=defined)
        boot[start:stop] = np.where(defined, ra - rb, np.nan)
    boot = boot[~np.isnan(boot)]
    if boot.size == 0:
        raise ValueError("no resample had a defined rate in both arms; too few units have a "
                         "non-zero denominator to bootstrap (add units)")
    p_value = _shift_p_value(boot, observed, alternative, TIE_TOL * max(1.0, abs(observed)))
    low, high = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    return PairedResult(rate_a, rate_b, observed, float(low), float(high), p_value, n,
                        "paired_ratio_bootstrap", alternative, alpha, observed, None)


def paired_t_test(scores_a: Mapping[Hashable, float] | Sequence[float],
                  scores_b: Mapping[Hashable, float] | Sequence[float],
                  alternative: str = "two-sided", alpha: float = 0.05) -> PairedResult:
    """Paired Student t-test of ``mean(a) - mean(b)``; ``df = n - 1``; CI from the t quantile.

    Zero-variance differences are handled as the module docstring says (p = 1.0 when all
    differences are 0; t = +-inf otherwise).
    """
    _check_test_args(alternative, alpha)
    a, b = align_paired_scores(scores_a, scores_b)
    d = a - b
    n = int(d.size)
    df = n - 1
    mean_a, mean_b, diff = float(a.mean()), float(b.mean()), float(d.mean())
    if np.all(d == 0.0):
        return PairedResult(mean_a, mean_b, 0.0, 0.0, 0.0, 1.0, n, "paired_t_test",
                            alternative, alpha, 0.0, df)
    if np.all(d == d[0]):
        t = math.copysign(math.inf, diff)
        low = high = diff
    else:
        se = float(d.std(ddof=1)) / math.sqrt(n)
        t = diff / se
        half_width = student_t_ppf(1.0 - alpha / 2.0, df) * se
        low, high = diff - half_width, diff + half_width
    if alternative == "two-sided":
        p_value = min(1.0, 2.0 * student_t_sf(abs(t), df))
    elif alternative == "greater":
        p_value = student_t_sf(t, df)
    else:
        p_value = student_t_cdf(t, df)
    return PairedResult(mean_a, mean_b, diff, low, high, p_value, n, "paired_t_test",
                        alternative, alpha, t, df)
