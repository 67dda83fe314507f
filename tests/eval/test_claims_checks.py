"""Setup checks (rows that hold by construction): marked where they are built, shown apart in
every table and never counted in a claim's verdict."""

import pytest

from eval.claims import (
    CHECK,
    CLAIM,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    ClaimError,
    combine,
    is_check,
    judge,
    shown_verdict,
)
from eval.claims.readers import CHECKS_HEADING, history_table, results_table


def _claim(role=CLAIM, statement="t beats r"):
    return Claim(paper="P", section="§1", statement=statement, metric="m", reference="r",
                 treatment="t", role=role)


def _judged(role, shift):
    ref = [float(i % 5) for i in range(30)]
    return judge(_claim(role, f"{role} part"), ref, [r + shift for r in ref], n_boot=200)


def test_role_is_claim_or_check():
    assert _claim().role == CLAIM
    with pytest.raises(ClaimError, match="role must be one of"):
        _claim(role="sanity")
    assert not is_check({"verdict": REPRODUCED})  # a row stored before roles: a claim
    assert not is_check({"role": None}) and is_check({"role": "check"})
    with pytest.raises(ClaimError, match="role must be one of"):
        is_check({"role": "sanity"})


def test_a_check_is_judged_like_a_claim_and_read_as_passed_or_failed():
    passed, failed = _judged(CHECK, 1.0), _judged(CHECK, -1.0)
    assert (passed["role"], passed["verdict"]) == (CHECK, REPRODUCED)
    assert shown_verdict(passed) == "check passed" and shown_verdict(failed) == "check failed"
    flat = judge(_claim(CHECK), [1.0] * 10, [1.0] * 10, n_boot=100)
    assert shown_verdict(flat) == "check inconclusive (both arms score one value on every unit)"
    assert shown_verdict(_judged(CLAIM, 1.0)) == REPRODUCED


def test_combine_never_counts_a_check():
    claim_ok, check_bad = _judged(CLAIM, 1.0), _judged(CHECK, -1.0)
    assert check_bad["verdict"] == NOT_REPRODUCED
    assert combine([claim_ok, check_bad]) == REPRODUCED
    assert combine([claim_ok, _judged(CLAIM, -1.0), _judged(CHECK, 1.0)]) == NOT_REPRODUCED
    assert combine([REPRODUCED, INCONCLUSIVE]) == INCONCLUSIVE  # plain verdicts still work
    with pytest.raises(ClaimError, match="every part given is a setup check"):
        combine([check_bad])


def test_results_table_shows_checks_under_their_own_heading():
    rows = [dict(_judged(CLAIM, 1.0), paper_value="+1"), dict(_judged(CHECK, 1.0)),
            dict(_judged(CHECK, -1.0))]
    lines = results_table(rows).splitlines()
    assert lines[0].endswith("| n | verdict |") and "claim part" in lines[2]
    heading = lines.index(CHECKS_HEADING)
    assert heading == 4 and lines[3] == "" and lines[5] == ""
    assert lines[6].endswith("| n | check |")
    assert "**check passed**" in lines[8] and "**check failed**" in lines[9]
    assert all("check part" not in line for line in lines[:heading])
    assert "| 30 (30 differ) |" in lines[2]
    # only checks: the table starts with the heading
    assert results_table(rows[1:]).splitlines()[0] == CHECKS_HEADING
    assert "**check passed**" in history_table(rows[1:2])


@pytest.mark.parametrize("budget, tokens_role", [(0.5, CHECK), (0.25, CHECK), (1.0, CLAIM)])
def test_duet_tokens_are_a_check_below_full_budget(budget, tokens_role):
    from training.duet.budget_claim import claim_parts

    parts = claim_parts(budget)
    assert parts["tokens"].role == tokens_role
    assert parts["accuracy"].role == parts["wall"].role == CLAIM
    assert parts["accuracy"].kind == "no_worse" and parts["accuracy"].bounds == (0.0, 1.0)
    if tokens_role == CHECK:
        assert "setup check" in parts["tokens"].statement
        assert "halves the per-step generated-token cost" in parts["tokens"].paper_value


def test_duet_refuses_a_budget_the_paper_does_not_report():
    from training.duet.budget_claim import claim_parts

    with pytest.raises(ClaimError, match="the paper reports budgets 1, 0.5, 0.25"):
        claim_parts(0.3)


@pytest.mark.parametrize("policy, role", [("scripted", CHECK), ("llm", CLAIM)])
def test_table3_parts_are_checks_only_with_scripted_policies(policy, role):
    from eval.engagement.claims import assistant_parts

    for part in assistant_parts("milestones", policy):
        assert part.role == role
        assert ("setup check" in part.statement) == (role == CHECK)
    with pytest.raises(ValueError, match="EP against AgentLoop"):
        assistant_parts("single", policy, reference="poll")


def test_every_other_part_is_a_claim():
    from eval.engagement.claims import (
        PATROL_SETTINGS,
        deliberation_parts,
        kitchen_part,
        patrol_part,
    )
    from eval.mosaic_claims import recovery_claim, synthesis_parts
    from eval.sxs_claims import ACCURACY_PART, LATENCY_PARTS
    from training.ep_budget_claims import table5_part
    from training.tandem.study import claim_parts as tandem_parts

    parts = [*deliberation_parts("single"), *deliberation_parts("sequential"),
             *(patrol_part(s) for s in PATROL_SETTINGS), kitchen_part("one", "llm"),
             kitchen_part("multi", "llm"), *synthesis_parts("gsm8k"), recovery_claim(),
             ACCURACY_PART, *(c for _, c in LATENCY_PARTS), table5_part("rlvr", "BS@16"),
             table5_part("rlvr_x2", "BS@16"), *tandem_parts(4).values()]
    assert all(p.role == CLAIM for p in parts)
