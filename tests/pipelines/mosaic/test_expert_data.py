"""The expert data of TIR SFT and process-supervised GRPO (pipelines/mosaic/expert_data.py):
which trajectories are chosen, that a step kept out of training is never a target (neither an
SFT completion nor a step instance) while staying in later steps' context, and the checks."""

from types import SimpleNamespace

import pytest

from pipelines.mosaic.expert_data import (
    expert_items,
    masked_steps,
    origins,
    sft_dataset_rows,
    sft_rendering_problems,
    step_instance_rows,
    steps_histogram,
    tir_text_problems,
)
from pipelines.tir import KIND_ANSWER, KIND_CODE, STATE_DISCARDED, STATE_PRESERVED, Step, Trajectory


def _trajectory(tid: str, n_code: int, source: str = "tora") -> Trajectory:
    steps = [Step(f"thought {i}", KIND_CODE, f"v{i} = {i}\nprint(v{i})", str(i))
             for i in range(1, n_code + 1)]
    steps.append(Step("final thought", KIND_ANSWER, f"\\boxed{{{n_code}}}"))
    return Trajectory(tid, f"p-{tid}", source, f"What is {tid}?", str(n_code), tuple(steps))


class Tables:
    """A warehouse stand-in holding whole tables."""

    def __init__(self, **tables):
        self.tables = tables

    def read(self, table):
        rows = self.tables.get(table, [])
        return SimpleNamespace(to_pylist=lambda: [dict(r) for r in rows])


def _selection(**kw):
    base = {"include_mosaic": False, "include_real": True, "only_correct": True,
            "mosaic_rho": None, "mosaic_run_ids": [], "train_on_injected": True,
            "real_limit": None}
    return SimpleNamespace(**{**base, **kw})


def test_real_trajectories_are_capped_per_source_in_id_order():
    real = [_trajectory(t, 1, src).to_row() for t, src in
            (("c", "tora"), ("a", "tora"), ("b", "tora"), ("z", "mathcoder"))]
    items = expert_items(Tables(tir_trajectories=real), _selection(real_limit=2))
    assert [(t.trajectory_id, origin) for t, _, origin in items] == [
        ("a", "real"), ("b", "real"), ("z", "real")]
    assert all(mask == [True, True] for _, mask, _ in items)
    assert origins(items) == {"real": 3} and masked_steps(items) == 0


def test_an_empty_selection_says_what_was_asked_for():
    with pytest.raises(ValueError, match=r"no expert trajectories.*mosaic_rho=0.3, "
                                         r"mosaic_run_ids=\['r1'\]"):
        expert_items(Tables(), _selection(include_mosaic=True, mosaic_rho=0.3,
                                          mosaic_run_ids=["r1"]))


def test_a_masked_step_is_no_target_but_stays_in_the_context():
    t = _trajectory("m", 2)
    items = [(t, [True, False, True], "mosaic"), (_trajectory("r", 1), [True, True], "real")]
    assert masked_steps(items) == 1 and origins(items) == {"mosaic": 1, "real": 1}
    for rendering in (STATE_PRESERVED, STATE_DISCARDED):
        rows = sft_dataset_rows(items, rendering)
        mine = [r for r in rows if r["trajectory_id"] == "m"]
        assert [r["step_index"] for r in mine] == [1, 3]  # step 2 is not a completion ...
        assert "v2 = 2" in str(mine[1]["prompt"])  # ... but the last step still sees it
        assert {(r["origin"], r["source"], r["rendering"]) for r in mine} == {
            ("mosaic", "tora", rendering)}
        assert len(rows) == 2 + 2
    instances = step_instance_rows(items, STATE_PRESERVED)
    assert instances.masked == 1 and not instances.refused
    assert sorted((r["trajectory_id"], r["step_index"]) for r in instances.rows) == [
        ("m", 1), ("m", 3), ("r", 1), ("r", 2)]
    assert {r["origin"] for r in instances.rows if r["trajectory_id"] == "r"} == {"real"}
    assert len(instances.kept) == len(instances.rows)


def test_the_checks_name_bad_trajectories_and_unequal_renderings():
    good = _trajectory("g", 1).to_row()
    bad = dict(good, trajectory_id="bad", text="no tags at all")
    found = tir_text_problems([good, bad])
    assert found and all(p.startswith("bad: ") for p in found)
    assert steps_histogram([good, _trajectory("h", 3).to_row(), good]) == {"2": 2, "4": 1}
    items = [(_trajectory("g", 1), [True, True], "real")]
    rows = sft_dataset_rows(items, STATE_PRESERVED) + sft_dataset_rows(items, STATE_DISCARDED)
    assert sft_rendering_problems(rows) == []
    assert sft_rendering_problems(rows[:-1]) == [
        "renderings have different row counts: {'state_preserved': 2, 'state_discarded': 1}"]
