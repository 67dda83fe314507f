"""The rules that make a comparison inconclusive before the CI rule (eval.claims, rules 1-4):
each case built by hand, its verdict and reason worked out here from the units themselves, and
informative comparisons left to the CI rule."""

import math

import pytest

from eval.claims import (
    INCONCLUSIVE,
    MIN_DISCORDANT,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    ClaimError,
    judge,
    judge_ratio,
    reason_text,
    row_judgement,
    shown_verdict,
    verdict,
)


def better(bounds=None, higher=True):
    return Claim(paper="P", section="Table 1", statement="method beats baseline", metric="acc",
                 reference="base", treatment="method", bounds=bounds, higher_is_better=higher)


def no_worse(margin=0.10, bounds=(0.0, 1.0), higher=True):
    return Claim(paper="P", section="§4", statement="method keeps accuracy", metric="acc",
                 reference="base", treatment="method", kind="no_worse", margin=margin,
                 bounds=bounds, higher_is_better=higher)


def test_the_minimum_is_where_an_exact_two_sided_sign_test_first_reaches_five_percent():
    # with m discordant units the most extreme outcome (all m one way) has p = 2 * 0.5**m
    p = {m: 2 * 0.5 ** m for m in range(1, 10)}
    assert p[5] == 0.0625 and p[6] == 0.03125
    assert MIN_DISCORDANT == min(m for m in p if p[m] <= 0.05) == 6


# ---- rule 2: no discordant unit ---------------------------------------------------------------

@pytest.mark.parametrize("claim, ci_rule_alone", [(better(), NOT_REPRODUCED),
                                                   (no_worse(bounds=None), REPRODUCED)],
                         ids=["better", "no_worse"])
def test_arms_that_score_the_same_on_every_unit_are_inconclusive(claim, ci_rule_alone):
    # 40 problems, half solved, the same half in both arms: the arms vary, no unit differs
    scores = [1.0 if i % 2 else 0.0 for i in range(40)]
    row = judge(claim, scores, list(scores), n_boot=300)
    assert row["reference_ci_low"] < row["reference_ci_high"]  # not rule 1: the arms vary
    assert (row["diff_ci_low"], row["diff_ci_high"]) == (0.0, 0.0)
    assert verdict(claim, 0.0, 0.0) == ci_rule_alone  # what the CI alone would have said
    assert row["n_discordant"] == 0
    assert (row["verdict"], row["inconclusive_reason"]) == (INCONCLUSIVE, "no_discordant_units")
    assert shown_verdict(row) == "inconclusive (the arms score the same on every unit)"


# ---- rule 3: both arms within δ of a bound (no_worse only) ------------------------------------

def test_one_of_forty_against_none_under_a_margin_of_ten_points_is_inconclusive():
    # 1/40 against 0/40 with δ = 0.10: the CI [-0.075, 0] "rules out" a drop of 0.10, which
    # no run could show, since the reference is only 0.025 above the floor
    ref, treat = [1.0] + [0.0] * 39, [0.0] * 40
    row = judge(no_worse(), ref, treat, n_boot=2000)
    assert verdict(no_worse(), row["diff_ci_low"], row["diff_ci_high"]) == REPRODUCED
    assert (row["reference_value"], row["treatment_value"]) == (0.025, 0.0)
    assert (row["verdict"], row["inconclusive_reason"]) == (INCONCLUSIVE, "floor")
    assert reason_text(row) == "both arms within δ = 0.1 of the metric's floor 0"
    # the same run without the metric's bounds: one unit that differs is still too few
    unbounded = judge(no_worse(bounds=None), ref, treat, n_boot=2000)
    assert (unbounded["verdict"], unbounded["inconclusive_reason"]) == (
        INCONCLUSIVE, "few_discordant_units")


def test_both_arms_near_the_floor_with_many_discordant_units():
    # avg@8 scores: the reference solves 2 of 8 on units 0-7 (mean 0.05), the treatment 1 of 8
    # on units 8-15 (mean 0.025); 16 units differ, both means are under 0.10 from 0
    ref = [0.25] * 8 + [0.0] * 32
    treat = [0.0] * 8 + [0.125] * 8 + [0.0] * 24
    assert (sum(ref) / 40, sum(treat) / 40) == (0.05, 0.025)
    row = judge(no_worse(), ref, treat, n_boot=2000)
    assert row["n_discordant"] == 16
    assert verdict(no_worse(), row["diff_ci_low"], row["diff_ci_high"]) == REPRODUCED
    assert (row["verdict"], row["inconclusive_reason"]) == (INCONCLUSIVE, "floor")


def test_both_arms_near_the_ceiling():
    # the reference misses 1 of 8 samples on units 0-7 (mean 0.975), the treatment 2 of 8 on
    # units 8-15 (mean 0.95): both within 0.10 of the ceiling 1
    ref = [0.875] * 8 + [1.0] * 32
    treat = [1.0] * 8 + [0.75] * 8 + [1.0] * 24
    row = judge(no_worse(), ref, treat, n_boot=2000)
    assert row["n_discordant"] == 16
    assert (row["verdict"], row["inconclusive_reason"]) == (INCONCLUSIVE, "ceiling")
    assert reason_text(row) == "both arms within δ = 0.1 of the metric's ceiling 1"


def test_one_arm_away_from_the_bound_is_judged_by_the_ci():
    # the treatment (0.5) is far from the floor although the reference (0.05) is near it
    ref = [0.25] * 8 + [0.0] * 32
    treat = [0.5] * 40
    row = judge(no_worse(), ref, treat, n_boot=2000)
    assert row["inconclusive_reason"] is None
    assert row["verdict"] == verdict(no_worse(), row["diff_ci_low"], row["diff_ci_high"])
    assert row["verdict"] == REPRODUCED


def test_the_bound_rule_is_for_no_worse_claims_only():
    # a `better` claim near the floor: 8 of 40 units gain 0.25, none lose; every resample that
    # draws one of them is positive, and P(none drawn) = (32/40)**40 ~ 1e-4 < 2.5%
    ref, treat = [0.0] * 40, [0.25] * 8 + [0.0] * 32
    assert (32 / 40) ** 40 < 0.025
    row = judge(better(bounds=(0.0, 1.0)), ref, treat, n_boot=2000)
    assert (row["verdict"], row["inconclusive_reason"]) == (REPRODUCED, None)


# ---- rule 4: too few discordant units ---------------------------------------------------------

@pytest.mark.parametrize("moved, expected, reason", [
    (4, INCONCLUSIVE, "few_discordant_units"),
    (5, INCONCLUSIVE, "few_discordant_units"),
    (6, REPRODUCED, None),
])
def test_units_that_move_one_way_need_six_of_them(moved, expected, reason):
    # `moved` of 40 problems go from wrong to right, none the other way. The percentile CI
    # already excludes 0 at 4 (a resample misses all 4 with probability (36/40)**40 ~ 1.5%,
    # under 2.5%), while the exact two-sided sign test gives 2 * 0.5**4 = 0.125
    ref, treat = [0.0] * 40, [1.0] * moved + [0.0] * (40 - moved)
    assert (36 / 40) ** 40 < 0.025
    row = judge(better(), ref, treat, n_boot=10_000)
    assert row["diff_ci_low"] > 0  # the CI rule alone says reproduced in all three cases
    assert row["n_discordant"] == moved
    assert (row["verdict"], row["inconclusive_reason"]) == (expected, reason)
    if reason:
        assert reason_text(row) == f"{moved} units differ between the arms, fewer than 6"


def test_an_informative_comparison_is_left_to_the_ci_rule():
    # 40 problems, 14 gained and 2 lost (16 discordant), arms far from both bounds: the
    # differences have mean 0.3 and standard error sqrt((16/40 - 0.3**2) / 40) ~ 0.088, so the
    # CI sits about 3.4 standard errors above 0
    ref = [0.0] * 14 + [1.0] * 2 + [0.0] * 12 + [1.0] * 12
    treat = [1.0] * 14 + [0.0] * 2 + [0.0] * 12 + [1.0] * 12
    for claim in (better(bounds=(0.0, 1.0)), better(), no_worse(), no_worse(bounds=None)):
        row = judge(claim, ref, treat, n_boot=2000)
        assert row["n_discordant"] == 16 and row["inconclusive_reason"] is None
        assert row["verdict"] == verdict(claim, row["diff_ci_low"], row["diff_ci_high"])
        assert row["verdict"] == REPRODUCED
        assert shown_verdict(row) == REPRODUCED


def test_a_ratio_counts_the_units_whose_counts_differ():
    claim = Claim(paper="P", section="§1", statement="recovers more often", metric="rate",
                  reference="r", treatment="t", bounds=(0.0, 1.0))
    # (recovering, erroring) per problem; they differ on b and c only
    ref = {"a": (0, 2), "b": (1, 1), "c": (0, 0), "d": (1, 3)}
    treat = {"a": (0, 2), "b": (0, 1), "c": (1, 1), "d": (1, 3)}
    row = judge_ratio(claim, ref, treat, n_boot=300)
    assert row["n_discordant"] == 2
    assert (row["reference_value"], row["treatment_value"]) == (2 / 6, 2 / 7)
    assert (row["verdict"], row["inconclusive_reason"]) == (INCONCLUSIVE, "few_discordant_units")


# ---- stored rows ------------------------------------------------------------------------------

def _stored(**extra):
    """A row as an older writer stored it: no n_discordant, bounds, role or reason."""
    row = {"paper": "P", "section": "§4", "claim": "c", "metric": "acc", "kind": "no_worse",
           "higher_is_better": True, "margin": 0.1, "reference": "r", "treatment": "t",
           "reference_value": 0.025, "reference_ci_low": 0.0, "reference_ci_high": 0.075,
           "treatment_value": 0.0, "treatment_ci_low": 0.0, "treatment_ci_high": 0.0,
           "diff": -0.025, "diff_ci_low": -0.075, "diff_ci_high": 0.0, "n": 40,
           "verdict": REPRODUCED}
    return dict(row, **extra)


def test_a_stored_row_is_judged_on_the_columns_it_has():
    # written before the columns existed: only the CI rule (and rule 1) can apply
    assert row_judgement(_stored()) == (REPRODUCED, None)
    # NaN reads as missing, as Parquet nulls can come back through pandas
    assert row_judgement(_stored(n_discordant=math.nan, bound_low=math.nan)) == (REPRODUCED,
                                                                                 None)
    assert row_judgement(_stored(bound_low=0.0, bound_high=1.0)) == (INCONCLUSIVE, "floor")
    assert row_judgement(_stored(n_discordant=1)) == (INCONCLUSIVE, "few_discordant_units")
    assert row_judgement(_stored(n_discordant=0)) == (INCONCLUSIVE, "no_discordant_units")
    assert row_judgement(_stored(n_discordant=6)) == (REPRODUCED, None)
    with pytest.raises(ClaimError, match="n_discordant must be a count"):
        row_judgement(_stored(n_discordant=-1))


def test_bounds_are_checked():
    with pytest.raises(ClaimError, match="bounds must be"):
        better(bounds=(1.0, 0.0))
    with pytest.raises(ClaimError, match="bounds must be"):
        better(bounds=(0.0, math.inf))
    with pytest.raises(ClaimError, match="bounds must be"):
        better(bounds=[0.0, 1.0])
    with pytest.raises(ClaimError, match="whole range"):
        no_worse(margin=2.0, bounds=(0.0, 1.0))
    with pytest.raises(ClaimError, match=r"outside its bounds \(0.0, 1.0\) \(e.g. 1.5\)"):
        judge(better(bounds=(0.0, 1.0)), [0.5] * 10, [1.5] + [0.5] * 9, n_boot=100)


def test_an_invalid_arm_makes_the_part_inconclusive_whatever_its_ci():
    from eval.claims import (
        INCONCLUSIVE,
        INVALID_ARM,
        REPRODUCED,
        Claim,
        judge,
        reason_text,
        row_judgement,
    )

    claim = Claim(paper="P", section="S", statement="t drifts less", metric="drift",
                  reference="r", treatment="t", higher_is_better=False)
    ref = [float(i % 5) + 1.0 for i in range(40)]
    row = judge(claim, ref, [r - 1.0 for r in ref], n_boot=300)
    assert row["verdict"] == REPRODUCED
    marked = dict(row, invalid_arm="t collapsed (solo pass@1 0.1 < 0.5 x the start's 0.8)")
    assert row_judgement(marked) == (INCONCLUSIVE, INVALID_ARM)
    shown = dict(marked, verdict=INCONCLUSIVE, inconclusive_reason=INVALID_ARM)
    assert reason_text(shown).startswith("an arm is not valid for this part: t collapsed")
