"""Tests for pipelines/decompose.py: T steps -> T instances with the right histories and targets,
on hand-made trajectories and on every real TIR trajectory in the shared data."""

from __future__ import annotations

import json

import pytest

from pipelines.mosaic import StepInstance, decompose, decompose_many, summarize_instances
from pipelines.tir import (
    KIND_ANSWER,
    KIND_CODE,
    STATE_DISCARDED,
    STATE_PRESERVED,
    Step,
    TIRFormatError,
    Trajectory,
    action_process_reward,
    parse_output,
    steps_from_dicts,
)


def _trajectory(n_code: int, tid: str = "t1") -> Trajectory:
    steps = [Step(f"thought {i}", KIND_CODE, f"v{i} = {i}\nprint(v{i})", str(i)) for i in range(1, n_code + 1)]
    steps.append(Step("final thought", KIND_ANSWER, f"\\boxed{{{n_code}}}"))
    return Trajectory(tid, "p1", "tora", "What is the count?", str(n_code), tuple(steps))


@pytest.mark.parametrize("n_code", [0, 1, 2, 5])
def test_t_steps_give_t_instances_with_ground_truth_histories(n_code):
    traj = _trajectory(n_code)
    instances = decompose(traj)
    assert len(instances) == len(traj.steps) == n_code + 1
    for t, inst in enumerate(instances, start=1):
        assert inst.step_index == t and inst.num_steps == n_code + 1
        assert inst.history == traj.steps[: t - 1]  # H*_{t-1}, observations included
        expected = traj.steps[t - 1]
        assert inst.target == Step(expected.thought, expected.kind, expected.action)
        assert inst.target.observation is None
        assert inst.is_last_step == (t == n_code + 1)
        assert (inst.target.kind == KIND_ANSWER) == inst.is_last_step
    assert len({i.instance_id for i in instances}) == len(instances)


def test_rows_carry_the_reward_columns_and_the_prompt_holds_exactly_the_history():
    traj = _trajectory(2)
    rows = [i.to_row() for i in decompose(traj)]
    assert [r["reference_kind"] for r in rows] == ["code", "code", "answer"]
    assert [r["is_last_step"] for r in rows] == [False, False, True]
    third = rows[2]
    roles = [m["role"] for m in third["prompt"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "thought 1" in third["prompt"][2]["content"] and "<interpreter>\n2\n</interpreter>" == third["prompt"][5]["content"]
    assert steps_from_dicts(json.loads(third["history_json"])) == list(traj.steps[:2])
    # the reference output is a valid step output and earns the full process reward
    for row in rows:
        assert parse_output(row["reference_output"]).action == row["reference_action"]
        assert action_process_reward(row["reference_output"], row["reference_action"],
                                     row["reference_kind"], row["is_last_step"]) == 1.0
    first = rows[0]
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]


def test_state_discarded_prompt_drops_earlier_thoughts():
    inst = decompose(_trajectory(2))[2]
    preserved = json.dumps(inst.prompt(STATE_PRESERVED))
    discarded = json.dumps(inst.prompt(STATE_DISCARDED))
    assert "thought 1" in preserved and "thought 1" not in discarded
    assert inst.to_row(STATE_DISCARDED)["rendering"] == STATE_DISCARDED


def test_invalid_trajectories_are_refused_with_the_reason():
    bad = Trajectory("bad", "p", "s", "q", "1", (Step("t", KIND_CODE, "x", "1"),))
    with pytest.raises(TIRFormatError, match="must end with an answer"):
        decompose(bad)
    result = decompose_many([_trajectory(1, "good"), bad])
    assert [i.trajectory_id for i in result.instances] == ["good", "good"]
    assert result.refused and result.refused[0][0] == "bad" and "answer" in result.refused[0][1]


def test_summary_counts():
    instances = decompose(_trajectory(1, "a")) + decompose(_trajectory(3, "b"))
    summary = summarize_instances(instances)
    assert summary["instances"] == 6 and summary["trajectories"] == 2
    assert summary["answer_targets"] == 2 and summary["code_targets"] == 4
    assert summary["by_num_steps"] == {"2": 2, "4": 4}
    assert summary["mean_history_steps"] == pytest.approx((0 + 1 + 0 + 1 + 2 + 3) / 6)


def test_every_real_tir_trajectory_decomposes(shared_data):
    from pipelines.ingest import load_tir

    trajectories = load_tir("mathcoder", data_dir=shared_data).trajectories + \
        load_tir("tora", data_dir=shared_data).trajectories
    result = decompose_many(trajectories)
    assert not result.refused
    assert len(result.instances) == sum(len(t.steps) for t in trajectories)
    by_traj: dict[str, list[StepInstance]] = {}
    for inst in result.instances:
        by_traj.setdefault(inst.trajectory_id, []).append(inst)
    for traj in trajectories[:200]:
        insts = by_traj[traj.trajectory_id]
        assert [i.step_index for i in insts] == list(range(1, len(traj.steps) + 1))
        assert insts[-1].history == traj.steps[:-1]
