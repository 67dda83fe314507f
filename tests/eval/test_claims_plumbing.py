"""Plumbing runs: parts whose run at a scale cannot test the paper's statement (it needs a
capable model the scale lacks) are stored with role ``plumbing``, shown apart with no verdict and
never counted; which parts are plumbing at which scale belongs to the experiment."""

import pytest

from eval.claims import (
    CHECK,
    CLAIM,
    NOT_REPRODUCED,
    PLUMBING,
    REPRODUCED,
    Claim,
    ClaimError,
    combine,
    counts,
    is_plumbing,
    judge,
    shown_verdict,
)
from eval.claims.readers import CHECKS_HEADING, PLUMBING_HEADING, results_table


def _judged(metric, shift, role=CLAIM):
    claim = Claim(paper="P", section="§1", statement=f"{metric} part", metric=metric,
                  reference="r", treatment="t", role=role)
    ref = [float(i % 5) for i in range(30)]
    return judge(claim, ref, [r + shift for r in ref], n_boot=200)


def test_a_plumbing_row_shows_no_verdict_and_never_counts():
    plumbing = dict(_judged("utility", -1.0), role=PLUMBING)
    assert plumbing["verdict"] == NOT_REPRODUCED  # the figures are kept as computed
    assert is_plumbing(plumbing) and not counts(plumbing)
    assert shown_verdict(plumbing) == "plumbing run"
    assert combine([_judged("accuracy", 1.0), plumbing]) == REPRODUCED
    with pytest.raises(ClaimError, match="plumbing run"):
        combine([plumbing])


def test_results_table_puts_plumbing_runs_under_their_own_heading():
    rows = [_judged("accuracy", 1.0), dict(_judged("utility", -1.0), role=PLUMBING),
            _judged("tokens", 1.0, role=CHECK)]
    text = results_table(rows)
    claims, rest = text.split(CHECKS_HEADING)
    checks, plumbing = rest.split(PLUMBING_HEADING)
    assert "| accuracy |" in claims and "| utility |" not in claims
    assert "| tokens |" in checks and "**check passed**" in checks
    assert "| utility |" in plumbing and "**plumbing run**" in plumbing
    assert "not reproduced" not in text
    only = results_table([dict(_judged("utility", 1.0), role=PLUMBING)])
    assert only.startswith(PLUMBING_HEADING) and "reproduced" not in only


def test_experiment_marks_its_plumbing_parts_at_that_scale_only():
    from assets.results.experiments import PLUMBING_ONLY, Experiment, claims_metadata

    def make(plumbing, limits):
        return Experiment(name="x_claim", paper="P", description="d",
                          scales={"cpu": {}, "paper": {}}, plumbing=plumbing, limits=limits)

    exp = make({"cpu": ("utility",)}, {"cpu": "a 135M controller cannot play the paper's"})
    rows = [_judged("utility", 1.0), _judged("accuracy", 1.0), _judged("utility", 1.0, CHECK)]
    cpu = exp.mark_plumbing(rows, "cpu")
    assert [r["role"] for r in cpu] == [PLUMBING, CLAIM, CHECK]  # a check stays a check
    assert [r["role"] for r in exp.mark_plumbing(rows, "paper")] == [CLAIM, CLAIM, CHECK]
    assert [r["role"] for r in make({"cpu": ("*",)}, {"cpu": "why"}).mark_plumbing(
        rows, "cpu")] == [PLUMBING, PLUMBING, CHECK]
    assert rows[0]["role"] == CLAIM  # the input is not changed
    meta = claims_metadata(cpu)
    assert meta["verdict"] == REPRODUCED and "plumbing" in meta and "checks" in meta
    assert claims_metadata([cpu[0]])["verdict"] == PLUMBING_ONLY
    assert any(k.startswith("plumbing_") for k in claims_metadata([cpu[0]]))
    with pytest.raises(ValueError, match="say\\s+in `limits` why"):
        make({"cpu": ("utility",)}, {})
    with pytest.raises(ValueError, match="plumbing scales must be among"):
        make({"gpu": ("utility",)}, {"gpu": "why"})


# What needs a capable model (kept here, independently of the experiments' definitions): the
# synthesizer, the kitchen's controller, the assistant's LLM policy and SxS's accuracy after
# SFT (near zero for the embedded model on GSM8K in both arms)
NEEDS_A_CAPABLE_MODEL = {"mosaic_synthesis_claim": ("*",), "ep_kitchen_claim": ("*",),
                         "ep_assistant_claim": ("*",), "sxs_latency_claim": ("accuracy",)}


def test_what_needs_a_capable_model_is_plumbing_at_cpu_scale_only():
    from assets.results import EXPERIMENTS

    for exp in EXPERIMENTS:
        assert tuple(exp.plumbing.get("cpu", ())) == NEEDS_A_CAPABLE_MODEL.get(exp.name, ()), (
            exp.name)
        assert not exp.plumbing.get("paper"), exp.name


def test_every_cpu_page_says_what_limits_it():
    """record_claims shows limits["cpu"] as `what_limits_it` on every CPU run's page."""
    from assets.results import EXPERIMENTS

    missing = [e.name for e in EXPERIMENTS if not e.limits.get("cpu")]
    assert missing == []
