"""The scripted MOSAIC agents: equation extraction against hand-worked references, and whole
trajectories through the real loop and the real local sandbox, with and without injection."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from pipelines.mosaic import MosaicConfig, ProblemInput, session_factory, synthesize_mosaic
from pipelines.mosaic.agents import MODE_CORRECTION, ActorView, NavigationCard
from pipelines.mosaic.scripted import (
    ScriptedActor,
    ScriptedManager,
    format_number,
    reference_calculations,
    safe_value,
)
from pipelines.tir import KIND_ANSWER, KIND_CODE


@pytest.mark.parametrize("reference, expected", [
    ("He spends 3*25=$75 each time he plays\nSo he spends 75*3=$225", ["3 * 25", "75 * 3"]),
    # a percent, a thousands separator, an implicit product, a unicode minus sign
    ("The interest is $220 * 10% = $22", ["220 * (10 / 100)"]),
    ("Together 1,000 + 500 = 1,500 cranes", ["1000 + 500"]),
    ("Black Copper Marans: 100(.20)=20", ["100 * 0.2"]),
    ("Amy has $100 − $3 = $97 left.", ["100 - 3"]),
    ("Each portion is 16/(3+1) = 4m", ["16 / (3 + 1)"]),
    # rounded on the right: 10/3 = 3.33
    ("Each gets 10/3 = 3.33 cups", ["10 / 3"]),
    # LaTeX operators, as the built-in arithmetic's worked solutions write products
    ("We compute $15 \\times 35 = 525$.\n\nThe answer is $\\boxed{525}$.", ["15 * 35"]),
    ("So $3 \\cdot 4 = 12$ and $8 \\div 2 = 4$", ["3 * 4", "8 / 2"]),
])
def test_reference_calculations_reads_checked_equations(reference, expected):
    assert reference_calculations(reference) == expected


@pytest.mark.parametrize("reference", [
    "So 2+2=5 apples",            # does not check out
    "He runs 3*4m = 12m",         # units inside the left side
    "Let x = 5 and y = 7",        # not a calculation
    "The answer is 42 = 42",      # no operator
    "No equation at all.",
])
def test_reference_calculations_skips_what_does_not_check_out(reference):
    assert reference_calculations(reference) == []


def test_safe_value_is_plain_arithmetic_only():
    assert safe_value("(3 + 1) * 2 / 4 - -1") == 3.0
    for bad in ("__import__('os')", "2 ** 10", "a + 1", "1 / 0", "print(1)"):
        with pytest.raises(ValueError):
            safe_value(bad)


@pytest.mark.parametrize("text, expected", [("75.0", "75"), ("225", "225"), ("3.3333333333", "3.333333"),
                                            ("-2.50", "-2.5"), ("1e3", "1000")])
def test_format_number(text, expected):
    assert format_number(text) == expected


def test_the_actor_never_sees_the_reference_and_codes_the_cards_calculations():
    card = NavigationCard(guide="Compute `3 * 25`, then `75 * 3`.", stage="Intermediate",
                          mode="Progress")
    reply = asyncio.run(ScriptedActor().act(ActorView("A problem.", (), card)))
    assert "value_1 = 3 * 25\nprint(value_1)\nvalue_2 = 75 * 3\nprint(value_2)" in reply.value
    # a calculation the redaction cut is not computed: no code block at all
    cut = NavigationCard(guide="Compute `[result withheld] * 2`.", stage="Intermediate",
                         mode="Progress")
    assert "<code>" not in asyncio.run(ScriptedActor().act(ActorView("P", (), cut))).value


# A gsm8k training problem with its reference as ingested (calculator annotations removed).
PROBLEM = ProblemInput(
    problem_id="p1", source="gsm8k",
    problem="Tom plays a game 3 times a week and spends $25 each time. How much does he spend "
            "in 3 weeks?",
    answer="225",
    reference="He spends 3*25=$75 each week\nIn 3 weeks he spends 75*3=$225\n#### 225")


def _synthesize(rho: float, seed: int = 0, max_steps: int = 6):
    config = MosaicConfig(max_steps=max_steps, rho=rho, seed=seed)
    return asyncio.run(synthesize_mosaic(PROBLEM, ScriptedManager(), ScriptedActor(),
                                         session_factory(timeout_s=10.0), config))


def test_without_injection_the_trajectory_runs_each_calculation_then_answers():
    record = _synthesize(rho=0.0)
    assert record.status == "complete", record.failure_detail
    kinds = [s.step.kind for s in record.steps]
    assert kinds == [KIND_CODE, KIND_CODE, KIND_ANSWER]
    # the interpreter really ran the cells: 3*25 and 75*3 (worked by hand)
    assert record.steps[0].step.observation.strip() == "75"
    assert record.steps[1].step.observation.strip() == "225"
    assert record.steps[2].step.action == "\\boxed{225}"
    assert not any(s.perturbation for s in record.steps)


def test_with_every_cell_injected_each_failure_is_followed_by_a_correction_of_the_same_cell():
    # rho = 1 injects into every cell; the correction cell is injected too, so 6 steps run out
    # before the answer: the record fails at the step limit, each failure answered by Correction
    record = _synthesize(rho=1.0)
    steps = record.steps
    assert steps and all(s.perturbation is not None for s in steps if s.step.kind == KIND_CODE)
    assert record.status != "complete" and record.failure_reason == "max_steps"
    assert all(s.error_observed for s in steps if s.step.kind == KIND_CODE)
    for before, after in itertools.pairwise(steps):
        if before.error_observed:
            assert after.card.mode == MODE_CORRECTION
            # the same calculation is asked for again: the first line's right side matches
            assert after.card.guide.split("`")[1] == before.card.guide.split("`")[1]


def test_injected_failures_at_the_sft_rate_are_recovered_from_in_the_trajectory():
    # over several seeds at rho = 0.5 some cells fail and the trajectory still ends on the
    # right answer, with a Correction cell after each failure
    recovered = 0
    for seed in range(8):
        record = _synthesize(rho=0.5, seed=seed, max_steps=6)
        failures = [i for i, s in enumerate(record.steps) if s.error_observed]
        if record.status != "complete" or not failures:
            continue
        for i in failures:
            assert record.steps[i + 1].card.mode == MODE_CORRECTION
        # the answer is the last value a cell really printed (75 if the steps ran out before
        # 75 * 3 ran, as a forced Final step must answer with what it has)
        printed = [s.step.observation.strip() for s in record.steps
                   if s.step.kind == KIND_CODE and not s.error_observed]
        assert record.steps[-1].step.action == f"\\boxed{{{printed[-1]}}}"
        recovered += printed == ["75", "225"]
    assert recovered >= 1


def test_a_reference_with_no_calculation_fails_the_record_with_the_reason():
    bare = ProblemInput("p2", "gsm8k", "What is the capital of France?", "Paris",
                        "The capital is Paris.")
    record = asyncio.run(synthesize_mosaic(bare, ScriptedManager(), ScriptedActor(),
                                           session_factory(timeout_s=10.0), MosaicConfig()))
    assert record.status == "failed"
    assert record.failure_reason == "manager_invalid_json"
    assert "states no calculation" in record.failure_detail
