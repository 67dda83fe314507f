"""training.heldout: the held-out arithmetic benchmark, which problems a checkpoint's lineage
trained on (read back from `checkpoints`), and avg@k per problem from graded samples."""

from __future__ import annotations

import json

import pytest

from eval.metrics import correct_by_problem
from training.data import load_dataset
from training.heldout import (
    HELDOUT_BENCHMARK,
    checkpoint_chain,
    checkpoint_problems,
    heldout_arith,
    heldout_benchmark,
)
from warehouse import Lineage, Warehouse


def _row(ck: str, parent: str, config: dict) -> dict:
    return {"checkpoint_id": ck, "kind": "grpo", "status": "complete", "path": f"/m/{ck}",
            "base_model": "", "recipe": ck, "parent_checkpoint": parent,
            "config_json": json.dumps(config)}


def test_the_chain_walks_parents_and_the_problems_are_every_link_s_data(weft_home):
    wh = Warehouse()
    grpo = {"dataset": "builtin:arith1?seed=2", "dataset_limit": 40, "seed": 3}
    sft = {"dataset": "builtin:arith1?seed=5", "dataset_limit": 30, "seed": 0}
    for ck, parent, cfg in (("a", "", sft), ("b", "a", grpo)):
        wh.write("checkpoints", [_row(ck, parent, cfg)], lineage=Lineage(partition=ck))
    chain = checkpoint_chain(wh, "b")
    assert [r["checkpoint_id"] for r in chain] == ["b", "a"]
    expected = ({r["problem"] for r in load_dataset("builtin:arith1?seed=2", limit=40,
                                                    seed=3).rows}
                | {r["problem"] for r in load_dataset("builtin:arith1?seed=5", limit=30,
                                                      seed=0).rows})
    seen = checkpoint_problems(chain)
    assert seen == expected and 40 <= len(seen) <= 70
    rows = heldout_arith(50, exclude=seen)
    assert not {r["problem"] for r in rows} & expected
    wh.write("checkpoints", [_row("c", "missing", grpo)], lineage=Lineage(partition="c"))
    with pytest.raises(ValueError, match="'missing' is not in the `checkpoints` table"):
        checkpoint_chain(wh, "c")
    wh.write("checkpoints", [_row("d", "", {})], lineage=Lineage(partition="d"))
    with pytest.raises(ValueError, match="records no dataset"):
        checkpoint_problems(checkpoint_chain(wh, "d"))


def test_the_benchmark_asks_for_a_boxed_answer_in_one_user_turn():
    bench = heldout_benchmark()
    (row,) = heldout_arith(2)[:1]
    prompt = bench.render(row)
    assert bench.name == HELDOUT_BENCHMARK and bench.grader == "math"
    assert prompt.endswith("\n\n" + row["problem"]) and "\\boxed{}" in prompt


def test_avg_at_k_per_problem_counts_an_ungraded_sample_as_wrong():
    samples = [{"problem_id": "a", "correct": True}, {"problem_id": "a", "correct": None},
               {"problem_id": "b", "correct": False}, {"problem_id": "b", "correct": True},
               {"problem_id": "b", "correct": True}, {"problem_id": "c", "correct": None}]
    assert correct_by_problem(samples) == {"a": 0.5, "b": pytest.approx(2 / 3), "c": 0.0}
