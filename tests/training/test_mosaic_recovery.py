"""The training side of the MOSAIC recovery experiment (training/mosaic_recovery.py): both arms
train on the same problems, the treatment's data must hold an injected failure, and the arms'
overrides and data files differ in the data only."""

import json
from types import SimpleNamespace

import pytest

from eval.claims import ClaimError
from pipelines.tir import KIND_ANSWER, KIND_CODE, STATE_PRESERVED, Step, Trajectory
from training.mosaic_recovery import (
    RecoveryDesignError,
    arm_data_file,
    arm_overrides,
    check_same_start,
    check_settings,
    injected_steps,
    paired_sft_rows,
    training_data,
)


def _row(pid: str, *, arm: str, correct: bool = True, perturbed: int = 0, n_code: int = 1):
    """A stored MOSAIC trajectory row of problem ``pid`` (the arm's own code in each step)."""
    steps = [Step(f"{arm} thought {i}", KIND_CODE, f"x = {i}\nprint(x)", str(i))
             for i in range(1, n_code + 1)]
    steps.append(Step(f"{arm} done", KIND_ANSWER, "\\boxed{1}"))
    trajectory = Trajectory(f"{arm}-{pid}", pid, "gsm8k", f"problem {pid}", "1", tuple(steps))
    return dict(trajectory.to_row(), valid=True, correct=correct, perturbed_steps=perturbed)


def test_settings_must_give_a_treatment_with_injection():
    check_settings("state_preserved", 0.1)
    check_settings("state_discarded", 1.0)
    for rendering, rho, message in (("chat", 0.1, "rendering must be"),
                                    ("state_preserved", 0.0, r"rho must be in \(0, 1\]"),
                                    ("state_preserved", 1.5, r"rho must be in \(0, 1\]")):
        with pytest.raises(RecoveryDesignError, match=message):
            check_settings(rendering, rho)


def test_both_arms_train_on_the_problems_both_synthesized_usably():
    treatment = [_row("a", arm="t"), _row("b", arm="t"), _row("c", arm="t", correct=False)]
    reference = [_row("b", arm="r"), _row("c", arm="r"), _row("d", arm="r")]
    treat_rows, ref_rows, shared = paired_sft_rows(treatment, reference,
                                                   rendering=STATE_PRESERVED, only_correct=True)
    assert shared == ["b"]  # a: treatment only, c: wrong in the treatment, d: reference only
    assert len(treat_rows) == len(ref_rows) == 2  # one row per step of b's trajectory
    assert all(set(r) == {"prompt", "completion"} for r in treat_rows + ref_rows)
    assert "t thought 1" in json.dumps(treat_rows) and "t thought" not in json.dumps(ref_rows)
    _, _, both = paired_sft_rows(treatment, reference, rendering=STATE_PRESERVED,
                                 only_correct=False)
    assert both == ["b", "c"]
    with pytest.raises(ClaimError, match="no problem has a usable trajectory in both arms"):
        paired_sft_rows(treatment[:1], reference, rendering=STATE_PRESERVED, only_correct=True)


def test_the_treatments_data_must_hold_an_injected_failure_on_the_shared_problems():
    treatment = [_row("a", arm="t", perturbed=3), _row("b", arm="t", perturbed=1),
                 _row("c", arm="t", perturbed=0)]
    reference = [_row("b", arm="r"), _row("c", arm="r")]
    assert injected_steps(treatment, ["b", "c"]) == 1  # a's three are not shared
    data = training_data(treatment, reference, rho=0.1, rendering=STATE_PRESERVED,
                         only_correct=True)
    assert (data.shared, data.injected) == (["b", "c"], 1)
    assert len(data.treatment_rows) == len(data.reference_rows) == 4
    with pytest.raises(RecoveryDesignError, match=r"rho=0.1 trajectories of the 1 shared "
                                                  "problems hold no injected failure"):
        training_data(treatment, reference[1:], rho=0.1, rendering=STATE_PRESERVED,
                      only_correct=True)


def test_the_arms_differ_in_their_data_only(weft_home):
    rows = [{"prompt": [{"role": "user", "content": "é"}], "completion": "x"}]
    path = arm_data_file(rows, "mosaic_recovery_claim", "rho0.1")
    assert path.parent == weft_home / "experiments" / "mosaic_recovery_claim"
    assert path.name.startswith("rho0.1-") and path.suffix == ".jsonl"
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == rows
    assert arm_data_file(rows, "mosaic_recovery_claim", "rho0.1") == path  # named by content
    other = arm_data_file(rows + rows, "mosaic_recovery_claim", "rho0")
    treat = arm_overrides(["lr=1"], path, train_steps=8, seed=3)
    ref = arm_overrides(["lr=1"], other, train_steps=8, seed=3)
    assert treat == ["lr=1", f"dataset=jsonl:{path}", "dataset_fallback=''",
                     "dataset_limit=null", "max_steps=8", "seed=3"]
    assert [(a, b) for a, b in zip(treat, ref) if a != b] == [
        (f"dataset=jsonl:{path}", f"dataset=jsonl:{other}")]
    check_same_start({"a": SimpleNamespace(model_name_or_path="m"),
                      "b": SimpleNamespace(model_name_or_path="m")})
    with pytest.raises(RecoveryDesignError, match="start from different models"):
        check_same_start({"a": SimpleNamespace(model_name_or_path="m"),
                          "b": SimpleNamespace(model_name_or_path="n")})
