"""Paper claims as rows with a verdict: the rule that decides whether a run reproduces a claim.

A claim compares two arms on the same units (problems, training steps, episodes; same prompts,
seeds and step counts): a *reference* arm and a *treatment* arm, named so that the paper says the
treatment comes out ahead on that part, or keeps the reference's level (usually the paper's
method against its baseline; SxS's accuracy after SFT is the other way round). Each
arm gives one score per unit; the difference is ``treatment − reference`` per unit, and its 95%
CI and one-sided p-value come from the paired bootstrap (:func:`eval.compare.paired_bootstrap`,
units resampled together). A rate that is a ratio of aggregates (recovering / erroring samples)
is compared the same way by :func:`judge_ratio`: both arms' rates are recomputed from the same
resampled units (:func:`eval.compare.paired_ratio_bootstrap`).

The verdict is computed from that CI, in the units of the metric, after turning the difference
so that positive means "the direction the paper claims" (for a lower-is-better metric such as
tokens or latency, ``d' = −d``). With ``[lo, hi]`` the turned CI:

``better`` — the paper says the treatment beats the reference:
    - ``reproduced``      when ``lo > 0``: the CI excludes no effect, on the claimed side;
    - ``not reproduced``  when ``hi <= 0``: the CI holds no effect in the claimed direction
      (zero or the opposite direction);
    - ``inconclusive``    otherwise (the CI straddles 0).

``no_worse`` — the paper says the treatment keeps the reference's level ("matches", "no
significant drop", "within run-to-run variance"). Such a claim needs a margin ``δ > 0``, fixed
before the run (the largest drop that still counts as "keeps"), because "not significantly
worse" alone is met by any run too small to see anything:
    - ``not reproduced``  when ``hi < 0``: the treatment is significantly worse;
    - ``reproduced``      when ``lo > −δ`` (and not significantly worse): the CI rules out a
      drop of ``δ`` or more;
    - ``inconclusive``    otherwise (the CI still admits a drop of ``δ`` or more).

Before the CI rule, a comparison that cannot inform the claim is ``inconclusive`` whatever its
kind, and the row says why in ``inconclusive_reason`` (:func:`uninformative`; checked in this
order):

0. ``invalid_arm``: the experiment found an arm unfit for this part and named it in the row's
   ``invalid_arm`` column (Tandem RL: an arm whose solo accuracy collapsed below half of its
   start's is no evidence about drift from the junior; the rule is the experiment's, fixed
   before its runs). Whatever the CI says, the part is not evidence.
1. ``no_variation``: every unit scores one and the same value in both arms (both arms' CIs are
   that single point, e.g. accuracy 0 against 0 with a model too small to solve anything).
2. ``no_discordant_units``: the arms score the same on every unit (``n_discordant == 0``). The
   difference's CI is then ``[0, 0]``, which alone would read "not reproduced" for ``better``
   and "reproduced" for ``no_worse``; the same model evaluated twice gives exactly this.
3. ``floor`` / ``ceiling`` (``no_worse`` only, when the claim states the metric's ``bounds``):
   both arms' values lie within ``δ`` (at most ``δ`` away) of the metric's lower bound, or
   both within ``δ`` of its upper bound. At the floor a drop of ``δ`` is impossible (1/40 against 0/40 under ``δ =
   0.10`` "rules out" a drop of 0.10 that no run could show); at the ceiling the metric has no
   room left to tell the arms apart.
4. ``few_discordant_units``: fewer than :data:`MIN_DISCORDANT` (6) units where the arms
   differ. Only discordant units carry information about which arm is better; with ``m`` of
   them the most extreme outcome (all ``m`` one way) has exact two-sided sign-test p-value
   ``2 · 0.5^m``, which first reaches 5% at ``m = 6`` (``2 · 0.5^5 = 0.0625``,
   ``2 · 0.5^6 = 0.03125``). With 5 or fewer, no outcome could be significant at the level the
   95% CI stands for, while the percentile bootstrap can still exclude 0 (4 of 40 units moving
   one way gives a CI above 0): that verdict would rest on too few units.

Rules 2 and 4 need ``n_discordant`` (the units where the arms differ, :func:`judge` and
:func:`judge_ratio` count it); rule 3 needs ``bound_low`` / ``bound_high``. A row stored before
those columns existed has them null, and those rules are then not applied to it (rule 1 needs
only the arms' CIs). :func:`row_verdict` applies the whole rule to a ``claims`` row, and
``python -m eval.claims --rejudge`` re-applies it to the rows stored.

Claims and checks. A row's ``role`` is ``claim`` (a statement of the paper that the run can
support or contradict) or ``check`` (a setup check: a comparison that holds by construction of
the experiment, such as half the rollouts giving fewer generated tokens, or a scripted policy
that never misses a deadline because the script handles every email at once). A check is judged
by the same rule and stores its verdict the same way, but it is shown apart (under "Setup
checks", its verdict read as ``check passed`` / ``check failed`` / ``check inconclusive``,
:func:`shown_verdict`) and never counted in a claim's overall verdict (:func:`combine`). Rows
without a role (written before it existed) read as claims.

Plumbing runs. A third role, ``plumbing``, marks a part whose run at this scale exercises the
pipeline but cannot test the paper's statement, because the statement needs a capable model
the scale does not have (a 135M model as the synthesizer, the kitchen's controller, the
assistant's policy, or a model that must first learn to solve the benchmark). Its figures are
stored like any row's, but it is shown apart (under "Plumbing runs", its verdict read as
``plumbing run``, :func:`shown_verdict`) and never counted, exactly like a check: it says the
path runs end to end, not what the paper claims. Which parts are plumbing at which scale is
part of the experiment's definition (``assets.results.experiments.Experiment.plumbing``).

A claim with several parts (DUET: accuracy no worse *and* less wall clock) is ``reproduced`` when
every claim part is, ``not reproduced`` when any claim part is not, and ``inconclusive``
otherwise (:func:`combine`; checks left out).

One run's CIs cover the units it evaluated, not the randomness of training its arms again: a
re-run of the same experiment and config can move a verdict. ``claims`` keeps the newest run of
each experiment; ``claim_history`` keeps every run (:func:`eval.claims.readers.keep_history`),
and ``python -m eval.claims --history`` lists them part by part and names the verdicts that
moved. Runs of one design drawn with different seeds are pooled by :mod:`eval.replicates`
(``python -m eval.claims --seeds``), whose CI covers the seed as well.

This module is the rule; beside it: :mod:`eval.claims.paper_reports` (what each paper reports
for each part, quoted with its table or section), :mod:`eval.claims.draw` (a claim row as an SVG
for the Dagster UI), :mod:`eval.claims.readers` (the warehouse reads and writes of claims, and
their text tables) and ``python -m eval.claims`` (:mod:`eval.claims.__main__`, the command).
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
CLAIM = "claim"
CHECK = "check"
PLUMBING = "plumbing"
ROLES = (CLAIM, CHECK, PLUMBING)

# why a comparison is uninformative (the ``inconclusive_reason`` column), in the order checked
INVALID_ARM = "invalid_arm"
NO_VARIATION = "no_variation"
NO_DISCORDANT = "no_discordant_units"
FLOOR = "floor"
CEILING = "ceiling"
FEW_DISCORDANT = "few_discordant_units"
REASONS = (INVALID_ARM, NO_VARIATION, NO_DISCORDANT, FLOOR, CEILING, FEW_DISCORDANT)

# The fewest discordant units (units where the arms differ) a comparison needs. With m of them,
# the exact two-sided paired sign test's smallest p-value is 2 * 0.5**m (all m in one direction):
# 0.0625 for m = 5, 0.03125 for m = 6. Below 6 no outcome can be significant at 5%, the level
# of the 95% CIs the verdict reads, so the CI alone would speak for too few units.
MIN_DISCORDANT = 6


class ClaimError(ValueError):
    """A claim that cannot be judged as stated (unknown kind, missing margin, bad CI)."""


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One measurable statement of a paper.

    ``section`` is the table, figure or section (``"Table 2"``, ``"§4.4"``); ``statement`` the
    direction the paper states, in words; ``metric`` the per-unit score compared;
    ``higher_is_better`` the metric's direction; ``kind`` ``better`` or ``no_worse``; ``margin``
    the non-inferiority margin δ in the metric's units (``no_worse`` only); ``reference`` and
    ``treatment`` the arm names (the paper says the treatment comes out ahead or keeps the
    reference's level); ``paper_value``
    what the paper reports, quoted with its table or section
    (:mod:`eval.claims.paper_reports`); ``role`` ``claim``, ``check`` (a setup check that
    holds by construction: shown apart, never counted in a verdict; its ``statement`` says why
    it holds) or ``plumbing`` (a run that cannot test the statement at its scale; usually set
    by the experiment, module docstring); ``bounds`` the metric's ``(lowest, highest)`` possible values (``(0.0, 1.0)``
    for accuracies, pass@k, shares), None when unbounded: a ``no_worse`` part whose arms both
    sit within δ of one bound is inconclusive (module docstring, rule 3), and :func:`judge`
    refuses scores outside them.
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
    role: str = CLAIM
    bounds: tuple[float, float] | None = None

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
        if self.role not in ROLES:
            raise ClaimError(f"claim {self.statement!r}: role must be one of {ROLES} (a setup "
                             f"check holds by construction), got {self.role!r}")
        if self.bounds is not None:
            if (not isinstance(self.bounds, tuple) or len(self.bounds) != 2
                    or not all(isinstance(b, int | float) and not isinstance(b, bool)
                               and math.isfinite(b) for b in self.bounds)
                    or self.bounds[0] >= self.bounds[1]):
                raise ClaimError(f"claim {self.statement!r}: bounds must be (lowest, highest), "
                                 f"two finite numbers with lowest < highest, or None for an "
                                 f"unbounded metric; got {self.bounds!r}")
            if self.margin is not None and self.margin >= self.bounds[1] - self.bounds[0]:
                raise ClaimError(f"claim {self.statement!r}: margin {self.margin!r} is not "
                                 f"smaller than the metric's whole range {self.bounds!r}")


def verdict(claim: Claim, ci_low: float, ci_high: float) -> str:
    """The verdict of ``claim`` from the 95% CI ``[ci_low, ci_high]`` of ``treatment −
    reference`` in the metric's own units (the CI rule in the module docstring; the checks for
    uninformative comparisons are :func:`uninformative`'s)."""
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


def _number(row: Mapping[str, Any], key: str) -> float | None:
    """``row[key]`` as a float; None when missing, null or NaN (a column a row predates)."""
    value = row.get(key)
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def no_variation(row: Mapping[str, Any]) -> bool:
    """True when both arms of a ``claims`` row are one and the same point: each arm's 95% CI
    has zero width and both sit at the same value (every unit scored the same in both)."""
    points = [_number(row, k) for k in ("reference_ci_low", "reference_ci_high",
                                        "treatment_ci_low", "treatment_ci_high")]
    if any(p is None or not math.isfinite(p) for p in points):
        return False
    return max(points) - min(points) <= 1e-12 * max(1.0, abs(points[0]))


def row_margin(row: Mapping[str, Any]) -> float | None:
    """A ``claims`` row's non-inferiority margin, None when it has none (null or NaN)."""
    return _number(row, "margin")


def row_role(row: Mapping[str, Any]) -> str:
    """A ``claims`` row's role: ``claim``, ``check`` or ``plumbing`` (``claim`` also for rows
    stored before roles existed). ClaimError for any other value."""
    role = row.get("role")
    if role is None or role == "":
        return CLAIM
    if role not in ROLES:
        raise ClaimError(f"claims row {row.get('claim')!r}: role must be one of {ROLES}, got "
                         f"{role!r}")
    return str(role)


def is_check(row: Mapping[str, Any]) -> bool:
    """True for a setup check's row (never counted in a claim's verdict)."""
    return row_role(row) == CHECK


def is_plumbing(row: Mapping[str, Any]) -> bool:
    """True for a plumbing run's row (never counted in a claim's verdict)."""
    return row_role(row) == PLUMBING


def counts(row: Mapping[str, Any]) -> bool:
    """True for a row that counts in its claim's verdict: a claim part, not a setup check or a
    plumbing run."""
    return row_role(row) == CLAIM


def _n_discordant(row: Mapping[str, Any]) -> int | None:
    value = _number(row, "n_discordant")
    if value is None:
        return None
    if value < 0 or value != int(value):
        raise ClaimError(f"claims row {row.get('claim')!r}: n_discordant must be a count >= 0, "
                         f"got {row.get('n_discordant')!r}")
    return int(value)


def _at_bound(row: Mapping[str, Any]) -> str | None:
    """``floor`` / ``ceiling`` when a ``no_worse`` row's arms both lie within its margin of the
    metric's lower / upper bound (rule 3), else None (also when the row has no bounds)."""
    margin = row_margin(row)
    values = [_number(row, "reference_value"), _number(row, "treatment_value")]
    if row.get("kind") != "no_worse" or margin is None or None in values:
        return None
    low, high = _number(row, "bound_low"), _number(row, "bound_high")
    if low is not None and all(v - low <= margin for v in values):
        return FLOOR
    if high is not None and all(high - v <= margin for v in values):
        return CEILING
    return None


def uninformative(row: Mapping[str, Any]) -> str | None:
    """Why a ``claims`` row's comparison cannot inform its claim (one of :data:`REASONS`, rules
    1-4 of the module docstring in order), or None when the CI rule decides. Rules whose
    columns the row lacks (null) are not applied."""
    if row.get("invalid_arm"):
        return INVALID_ARM
    if no_variation(row):
        return NO_VARIATION
    discordant = _n_discordant(row)
    if discordant == 0:
        return NO_DISCORDANT
    bound = _at_bound(row)
    if bound is not None:
        return bound
    if discordant is not None and discordant < MIN_DISCORDANT:
        return FEW_DISCORDANT
    return None


def mark_invalid_arm(row: dict[str, Any], text: str | None) -> dict[str, Any]:
    """``row`` (a :func:`judge` row) with its ``invalid_arm`` column set to ``text``: the
    experiment's own validity rule found an arm unfit for this part and says which and why
    (rule 0 of the verdict: the part is ``inconclusive`` for :data:`INVALID_ARM`, whatever its
    CI says); None leaves the verdict as judged."""
    row["invalid_arm"] = text
    if text:
        row["verdict"], row["inconclusive_reason"] = row_judgement(row)
    return row


def row_judgement(row: Mapping[str, Any]) -> tuple[str, str | None]:
    """``(verdict, inconclusive_reason)`` of one ``claims`` row (as :func:`judge` returns and
    the warehouse stores it) under the rule in the module docstring: ``inconclusive`` with the
    reason when :func:`uninformative` finds one, else :func:`verdict` on the row's difference
    CI with no reason."""
    reason = uninformative(row)
    if reason is not None:
        return INCONCLUSIVE, reason
    margin = row_margin(row)
    claim = Claim(paper=str(row["paper"]), section=str(row["section"]),
                  statement=str(row["claim"]), metric=str(row["metric"]),
                  reference=str(row["reference"]), treatment=str(row["treatment"]),
                  kind=str(row["kind"]), higher_is_better=bool(row["higher_is_better"]),
                  margin=margin if row["kind"] == "no_worse" else None)
    return verdict(claim, float(row["diff_ci_low"]), float(row["diff_ci_high"])), None


def row_verdict(row: Mapping[str, Any]) -> str:
    """The verdict of one ``claims`` row (:func:`row_judgement` without the reason)."""
    return row_judgement(row)[0]


def reason_text(row: Mapping[str, Any]) -> str:
    """The row's ``inconclusive_reason`` in words, with its figures ("" when it has none)."""
    reason = row.get("inconclusive_reason")
    if not reason:
        return ""
    if reason == INVALID_ARM:
        return f"an arm is not valid for this part: {row.get('invalid_arm') or 'see the run'}"
    if reason == NO_VARIATION:
        return "both arms score one value on every unit"
    if reason == NO_DISCORDANT:
        return "the arms score the same on every unit"
    if reason in (FLOOR, CEILING):
        bound = row.get("bound_low" if reason == FLOOR else "bound_high")
        return (f"both arms within δ = {row_margin(row):g} of the metric's "
                f"{'floor' if reason == FLOOR else 'ceiling'} {float(bound):g}")
    if reason == FEW_DISCORDANT:
        return (f"{row.get('n_discordant')} units differ between the arms, fewer than "
                f"{MIN_DISCORDANT}")
    return str(reason)


def shown_verdict(row: Mapping[str, Any], with_reason: bool = True) -> str:
    """The verdict as tables print it: ``reproduced``, ``not reproduced`` or ``inconclusive
    (why)`` for a claim; ``check passed``, ``check failed`` or ``check inconclusive (why)`` for
    a setup check; ``plumbing run`` (no verdict) for a plumbing run."""
    if is_plumbing(row):
        return "plumbing run"
    word = str(row.get("verdict"))
    if is_check(row):
        word = {REPRODUCED: "check passed", NOT_REPRODUCED: "check failed",
                INCONCLUSIVE: "check inconclusive"}.get(word, f"check {word}")
    why = reason_text(row) if with_reason else ""
    return f"{word} ({why})" if why else word


def combine(parts: Iterable[str | Mapping[str, Any]]) -> str:
    """One verdict for a claim of several parts: all reproduced, any not, else inconclusive.

    ``parts`` are verdicts or ``claims`` rows; a row that is a setup check or a plumbing run
    (:func:`counts` is False) is left out. ClaimError when no claim part is left (none given,
    or only checks and plumbing runs)."""
    given = list(parts)
    verdicts = [str(p["verdict"]) if isinstance(p, Mapping) else p for p in given
                if not (isinstance(p, Mapping) and not counts(p))]
    if not verdicts:
        raise ClaimError("combine needs at least one claim part's verdict"
                         + (" (every part given is a setup check or a plumbing run, which "
                            "never count)" if given else ""))
    unknown = [v for v in verdicts if v not in VERDICTS]
    if unknown:
        raise ClaimError(f"unknown verdicts {unknown}; expected one of {VERDICTS}")
    if NOT_REPRODUCED in verdicts:
        return NOT_REPRODUCED
    return REPRODUCED if all(v == REPRODUCED for v in verdicts) else INCONCLUSIVE


def _check_bounds(claim: Claim, arm: str, values: Any) -> None:
    """ClaimError when a score of ``arm`` lies outside the claim's bounds."""
    if claim.bounds is None:
        return
    low, high = claim.bounds
    tol = 1e-9 * max(1.0, abs(low), abs(high))
    bad = [float(v) for v in values if not (low - tol <= float(v) <= high + tol)]
    if bad:
        raise ClaimError(f"claim {claim.statement!r}: {len(bad)} {arm} score(s) of "
                         f"{claim.metric} lie outside its bounds {claim.bounds} (e.g. {bad[0]!r}); "
                         "fix the scores or the claim's bounds")


def judge(claim: Claim, reference: Mapping[Hashable, float] | Sequence[float],
          treatment: Mapping[Hashable, float] | Sequence[float], *, n_boot: int = 10_000,
          seed: int = 0) -> dict[str, Any]:
    """Compare the arms' per-unit scores (paired by unit id when mappings) and return a
    ``claims`` row: each arm's mean with its 95% bootstrap CI, the paired difference
    ``treatment − reference`` with its CI and the one-sided p-value in the claimed direction
    (for ``no_worse``: against a drop of the margin), ``n``, ``n_discordant`` (units whose
    scores differ), the claim's role and bounds, the verdict and ``inconclusive_reason``."""
    from eval.compare import align_paired_scores, paired_bootstrap
    from eval.metrics import bootstrap_ci

    ref, treat = align_paired_scores(reference, treatment)
    _check_bounds(claim, "reference", ref)
    _check_bounds(claim, "treatment", treat)
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
    # the same test compare.paired_bootstrap uses for "every difference is zero"
    discordant = int((treat - ref != 0.0).sum())
    return _claim_row(claim, bootstrap_ci(ref, n_boot=n_boot, seed=seed),
                      bootstrap_ci(treat, n_boot=n_boot, seed=seed), paired, p_value, discordant)


def _claim_row(claim: Claim, reference: tuple[float, float, float],
               treatment: tuple[float, float, float], paired: Any,
               p_value: float, n_discordant: int) -> dict[str, Any]:
    """A ``claims`` row from each arm's ``(value, ci_low, ci_high)``, the paired difference
    (an :class:`eval.compare.PairedResult`), the one-sided p-value and the count of discordant
    units, with its verdict and reason."""
    bounds = claim.bounds or (None, None)
    row = {
        "paper": claim.paper, "section": claim.section, "claim": claim.statement,
        "metric": claim.metric, "kind": claim.kind, "higher_is_better": claim.higher_is_better,
        "margin": claim.margin, "reference": claim.reference, "treatment": claim.treatment,
        "reference_value": reference[0], "reference_ci_low": reference[1],
        "reference_ci_high": reference[2], "treatment_value": treatment[0],
        "treatment_ci_low": treatment[1], "treatment_ci_high": treatment[2],
        "diff": paired.diff, "diff_ci_low": paired.ci_low, "diff_ci_high": paired.ci_high,
        "p_value": p_value, "n": paired.n, "paper_value": claim.paper_value,
        "role": claim.role, "n_discordant": int(n_discordant),
        "bound_low": None if bounds[0] is None else float(bounds[0]),
        "bound_high": None if bounds[1] is None else float(bounds[1]),
    }
    row["verdict"], row["inconclusive_reason"] = row_judgement(row)
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
    resamples; a unit is discordant when its ``(numerator, denominator)`` differs between the
    arms; the verdict from :func:`row_judgement`. Only ``better`` claims: a margin on a rate of
    aggregates has no additive shift to test against, so ``no_worse`` raises ClaimError."""
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
    ref_ci = bootstrap_ratio_ci(ref_num, ref_den, n_boot=n_boot, seed=seed)
    treat_ci = bootstrap_ratio_ci(treat_num, treat_den, n_boot=n_boot, seed=seed)
    _check_bounds(claim, "reference", [ref_ci[0]])
    _check_bounds(claim, "treatment", [treat_ci[0]])
    discordant = sum((rn, rd) != (tn, td)
                     for rn, rd, tn, td in zip(ref_num, ref_den, treat_num, treat_den))
    return _claim_row(claim, ref_ci, treat_ci, paired, paired.p_value, discordant)
