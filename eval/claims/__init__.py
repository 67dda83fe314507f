"""Paper claims as rows with a verdict: the rule that decides whether a run reproduces a claim.

A claim compares two arms on the same problems (same prompts, seeds and step counts): a
*reference* arm (plain GRPO, SFT on think-then-answer traces, ...) and a *treatment* arm (the
paper's method). Each arm gives one score per problem; the difference is ``treatment −
reference`` per problem, and its 95% CI and one-sided p-value come from the paired bootstrap
(:func:`eval.compare.paired_bootstrap`, problems resampled together). A rate that is a ratio of
aggregates (recovering / erroring samples) is compared the same way by :func:`judge_ratio`:
both arms' rates are recomputed from the same resampled problems
(:func:`eval.compare.paired_ratio_bootstrap`).

The verdict is computed from that CI only, in the units of the metric, after turning the
difference so that positive means "the direction the paper claims" (for a lower-is-better
metric such as tokens or latency, ``d' = −d``). With ``[lo, hi]`` the turned CI:

``better`` — the paper says the method beats the reference:
    - ``reproduced``      when ``lo > 0``: the CI excludes no effect, on the claimed side;
    - ``not reproduced``  when ``hi <= 0``: the CI holds no effect in the claimed direction
      (zero or the opposite direction);
    - ``inconclusive``    otherwise (the CI straddles 0).

``no_worse`` — the paper says the method keeps the reference's level ("no significant drop",
"within the CI of", "at accuracy not significantly lower"). Such a claim needs a margin
``δ > 0``, fixed before the run (the largest drop that still counts as "keeps"), because "not
significantly worse" alone is met by any run too small to see anything:
    - ``not reproduced``  when ``hi < 0``: the method is significantly worse;
    - ``reproduced``      when ``lo > −δ`` (and not significantly worse): the CI rules out a
      drop of ``δ`` or more;
    - ``inconclusive``    otherwise (the CI still admits a drop of ``δ`` or more).

Before either rule: when every problem scores the same value in both arms (both arms' CIs are
that single point, e.g. accuracy 0 against 0 with a model too small to solve any problem), the
run has no variation to compare and the verdict is ``inconclusive``, whatever the kind: a floor
or a ceiling says nothing about the claim. :func:`row_verdict` applies the whole rule to a
``claims`` row, and ``python -m eval.claims --rejudge`` re-applies it to the rows stored.

A claim with several parts (DUET: accuracy no worse *and* fewer tokens *and* less wall clock)
is ``reproduced`` when every part is, ``not reproduced`` when any part is not, and
``inconclusive`` otherwise (:func:`combine`).

One run's CIs cover the units it evaluated, not the randomness of training its arms again: a
re-run of the same experiment and config can move a verdict. ``claims`` keeps the newest run of
each experiment; ``claim_history`` keeps every run (:func:`eval.claims.readers.keep_history`),
and ``python -m eval.claims --history`` lists them part by part and names the verdicts that
moved. Runs of one design drawn with different seeds are pooled by :mod:`eval.replicates`
(``python -m eval.claims --seeds``), whose CI covers the seed as well.

This module is the rule; beside it: :mod:`eval.claims.draw` (a claim row as an SVG for the
Dagster UI), :mod:`eval.claims.readers` (the warehouse reads and writes of claims, and their
text tables) and ``python -m eval.claims`` (:mod:`eval.claims.__main__`, the command).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
KINDS = ("better", "no_worse")


class ClaimError(ValueError):
    """A claim that cannot be judged as stated (unknown kind, missing margin, bad CI)."""


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One measurable statement of a paper.

    ``section`` is the table, figure or section (``"Table 2"``, ``"§4.4"``); ``statement`` the
    direction the paper states, in words; ``metric`` the per-problem score compared;
    ``higher_is_better`` the metric's direction; ``kind`` ``better`` or ``no_worse``; ``margin``
    the non-inferiority margin δ in the metric's units (``no_worse`` only); ``reference`` and
    ``treatment`` the arm names; ``paper_value`` what the paper reports, as text, for the
    table of the latest verdicts (docs/results.md).
    """

    paper: str
    section: str
    statement: str
    metric: str
    reference: str
    treatment: str
    kind: str = "better"
    higher_is_better: bool = True
    margin: float | None = None
    paper_value: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ClaimError(f"claim {self.statement!r}: kind must be one of {KINDS}, got "
                             f"{self.kind!r}")
        if self.kind == "no_worse":
            if self.margin is None or not math.isfinite(self.margin) or self.margin <= 0:
                raise ClaimError(
                    f"claim {self.statement!r}: a no_worse claim needs a margin > 0 (the largest "
                    f"drop in {self.metric} that still counts as keeping the level), fixed before "
                    f"the run; got {self.margin!r}")
        elif self.margin is not None:
            raise ClaimError(f"claim {self.statement!r}: margin applies to no_worse claims only; "
                             "drop it or set kind: no_worse")
        if self.reference == self.treatment:
            raise ClaimError(f"claim {self.statement!r}: reference and treatment are both "
                             f"{self.reference!r}; a claim compares two different arms")


def verdict(claim: Claim, ci_low: float, ci_high: float) -> str:
    """The verdict of ``claim`` from the 95% CI ``[ci_low, ci_high]`` of ``treatment −
    reference`` in the metric's own units (the rule in the module docstring)."""
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)) or ci_low > ci_high:
        raise ClaimError(f"claim {claim.statement!r}: CI [{ci_low}, {ci_high}] is not an interval "
                         "of finite numbers with low <= high")
    lo, hi = (ci_low, ci_high) if claim.higher_is_better else (-ci_high, -ci_low)
    if claim.kind == "better":
        if lo > 0:
            return REPRODUCED
        return NOT_REPRODUCED if hi <= 0 else INCONCLUSIVE
    if hi < 0:
        return NOT_REPRODUCED
    return REPRODUCED if lo > -float(claim.margin) else INCONCLUSIVE


def no_variation(row: Mapping[str, Any]) -> bool:
    """True when both arms of a ``claims`` row are one and the same point: each arm's 95% CI
    has zero width and both sit at the same value (every problem scored the same in both)."""
    points = [row.get(k) for k in ("reference_ci_low", "reference_ci_high",
                                   "treatment_ci_low", "treatment_ci_high")]
    if any(p is None or not math.isfinite(float(p)) for p in points):
        return False
    return max(points) - min(points) <= 1e-12 * max(1.0, abs(float(points[0])))


def row_margin(row: Mapping[str, Any]) -> float | None:
    """A ``claims`` row's non-inferiority margin, None when it has none (null or NaN)."""
    margin = row.get("margin")
    if margin is None or (isinstance(margin, float) and math.isnan(margin)):
        return None
    return float(margin)


def row_verdict(row: Mapping[str, Any]) -> str:
    """The verdict of one ``claims`` row (as :func:`judge` returns and the warehouse stores it)
    under the rule in the module docstring: ``inconclusive`` when the arms show no variation,
    else :func:`verdict` on the row's difference CI."""
    if no_variation(row):
        return INCONCLUSIVE
    margin = row_margin(row)
    claim = Claim(paper=str(row["paper"]), section=str(row["section"]),
                  statement=str(row["claim"]), metric=str(row["metric"]),
                  reference=str(row["reference"]), treatment=str(row["treatment"]),
                  kind=str(row["kind"]), higher_is_better=bool(row["higher_is_better"]),
                  margin=margin if row["kind"] == "no_worse" else None)
    return verdict(claim, float(row["diff_ci_low"]), float(row["diff_ci_high"]))


def combine(verdicts: Iterable[str]) -> str:
    """One verdict for a claim of several parts: all reproduced, any not, else inconclusive."""
    parts = list(verdicts)
    if not parts:
        raise ClaimError("combine needs at least one part's verdict")
    unknown = [v for v in parts if v not in VERDICTS]
    if unknown:
        raise ClaimError(f"unknown verdicts {unknown}; expected one of {VERDICTS}")
    if NOT_REPRODUCED in parts:
        return NOT_REPRODUCED
    return REPRODUCED if all(v == REPRODUCED for v in parts) else INCONCLUSIVE


def judge(claim: Claim, reference: Mapping[Hashable, float] | Sequence[float],
          treatment: Mapping[Hashable, float] | Sequence[float], *, n_boot: int = 10_000,
          seed: int = 0) -> dict[str, Any]:
    """Compare the arms' per-problem scores (paired by problem id when mappings) and return a
    ``claims`` row: each arm's mean with its 95% bootstrap CI, the paired difference
    ``treatment − reference`` with its CI and the one-sided p-value in the claimed direction
    (for ``no_worse``: against a drop of the margin), ``n`` and the verdict."""
    from eval.compare import align_paired_scores, paired_bootstrap
    from eval.metrics import bootstrap_ci

    ref, treat = align_paired_scores(reference, treatment)
    if claim.kind == "better":
        alternative = "greater" if claim.higher_is_better else "less"
        shifted = treat
    else:  # H0: the treatment is worse by the margin or more
        alternative = "greater" if claim.higher_is_better else "less"
        step = float(claim.margin) if claim.higher_is_better else -float(claim.margin)
        shifted = treat + step
    paired = paired_bootstrap(treat, ref, n_boot=n_boot, seed=seed)
    p_value = paired_bootstrap(shifted, ref, n_boot=n_boot, seed=seed,
                               alternative=alternative).p_value
    return _claim_row(claim, bootstrap_ci(ref, n_boot=n_boot, seed=seed),
                      bootstrap_ci(treat, n_boot=n_boot, seed=seed), paired, p_value)


def _claim_row(claim: Claim, reference: tuple[float, float, float],
               treatment: tuple[float, float, float], paired: Any,
               p_value: float) -> dict[str, Any]:
    """A ``claims`` row from each arm's ``(value, ci_low, ci_high)``, the paired difference
    (an :class:`eval.compare.PairedResult`) and the one-sided p-value, with its verdict."""
    row = {
        "paper": claim.paper, "section": claim.section, "claim": claim.statement,
        "metric": claim.metric, "kind": claim.kind, "higher_is_better": claim.higher_is_better,
        "margin": claim.margin, "reference": claim.reference, "treatment": claim.treatment,
        "reference_value": reference[0], "reference_ci_low": reference[1],
        "reference_ci_high": reference[2], "treatment_value": treatment[0],
        "treatment_ci_low": treatment[1], "treatment_ci_high": treatment[2],
        "diff": paired.diff, "diff_ci_low": paired.ci_low, "diff_ci_high": paired.ci_high,
        "p_value": p_value, "n": paired.n, "paper_value": claim.paper_value,
    }
    row["verdict"] = row_verdict(row)
    return row


def judge_ratio(claim: Claim, reference: Mapping[Hashable, tuple[float, float]],
                treatment: Mapping[Hashable, tuple[float, float]], *, n_boot: int = 10_000,
                seed: int = 0) -> dict[str, Any]:
    """A ``claims`` row for a rate that is a ratio of aggregates over the same units: each arm
    maps a unit (problem) to ``(numerator, denominator)`` and its rate is ``sum(num) /
    sum(den)`` (e.g. erroring samples that still end correct / erroring samples). Both arms
    must list the same units; a unit may have denominator 0 in one arm (it then weighs nothing
    in that arm's rate but is still resampled with the others). The difference's CI and
    one-sided p-value come from :func:`eval.compare.paired_ratio_bootstrap` (units resampled
    together), each arm's CI from :func:`eval.metrics.bootstrap_ratio_ci` with the same
    resamples; the verdict from :func:`row_verdict`. Only ``better`` claims: a margin on a rate
    of aggregates has no additive shift to test against, so ``no_worse`` raises ClaimError."""
    from eval.compare import paired_ratio_bootstrap
    from eval.metrics import bootstrap_ratio_ci

    if claim.kind != "better":
        raise ClaimError(f"claim {claim.statement!r}: judge_ratio judges `better` claims only, "
                         f"got kind {claim.kind!r}")
    if set(reference) != set(treatment):
        missing = sorted(set(reference) ^ set(treatment), key=repr)[:5]
        raise ClaimError(f"claim {claim.statement!r}: both arms must list the same units; these "
                         f"are in one arm only (first 5): {missing}")
    units = sorted(reference, key=repr)
    ref_num = [float(reference[u][0]) for u in units]
    ref_den = [float(reference[u][1]) for u in units]
    treat_num = [float(treatment[u][0]) for u in units]
    treat_den = [float(treatment[u][1]) for u in units]
    alternative = "greater" if claim.higher_is_better else "less"
    try:
        paired = paired_ratio_bootstrap(treat_num, treat_den, ref_num, ref_den, n_boot=n_boot,
                                        seed=seed, alternative=alternative)
    except ValueError as exc:
        raise ClaimError(f"claim {claim.statement!r}: {exc}") from None
    return _claim_row(claim, bootstrap_ratio_ci(ref_num, ref_den, n_boot=n_boot, seed=seed),
                      bootstrap_ratio_ci(treat_num, treat_den, n_boot=n_boot, seed=seed),
                      paired, paired.p_value)


# ---- the claim as a picture small enough for the UI's inline Markdown -------------------------
