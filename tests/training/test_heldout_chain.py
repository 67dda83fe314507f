"""training.heldout's held-out multi-step chains (``heldout_chain``, benchmark ``chain_heldout``):
disjoint from every chain a lineage trained on (the SFT start's and the GRPO arm's, read back
from `checkpoints`), deterministic, and the one-digit path unchanged."""

from __future__ import annotations

import json
import re

import pytest

from training.data import builtin_arith1, builtin_chain
from training.heldout import (
    HELDOUT_BENCHMARK,
    HELDOUT_CHAIN_BENCHMARK,
    HELDOUT_TASKS,
    checkpoint_chain,
    checkpoint_problems,
    heldout_arith,
    heldout_benchmark,
    heldout_chain,
    heldout_problems,
)
from warehouse import Lineage, Warehouse

_CHAIN_RE = re.compile(r"Start with (\d)\. (.*)\. What number do you get\?")


def _chain_key(problem: str) -> tuple:
    """The chain a problem text states, parsed from the words (not from training.data): (start,
    ((op, operand), ...)); two texts state the same problem iff their keys are equal."""
    match = _CHAIN_RE.fullmatch(problem)
    assert match, problem
    ops = []
    for part in match.group(2).split(", then "):
        word, number = part.lower().rsplit(" ", 1)
        ops.append(({"add": "+", "subtract": "-", "multiply by": "*"}[word], int(number)))
    return int(match.group(1)), tuple(ops)


def _value(key: tuple) -> int:
    value, ops = key
    for op, x in ops:
        value = value + x if op == "+" else value - x if op == "-" else value * x
    return value


def _row(ck: str, parent: str, config: dict) -> dict:
    return {"checkpoint_id": ck, "kind": "sft" if not parent else "grpo", "status": "complete",
            "path": f"/m/{ck}", "base_model": "", "recipe": ck, "parent_checkpoint": parent,
            "config_json": json.dumps(config)}


def test_heldout_chains_leave_out_every_chain_the_lineage_trained_on(weft_home):
    wh = Warehouse()
    # the claim's lineage: chain SFT (chain_sft.cpu: 128 rows, seed 0), then a DUET arm on
    # builtin:chain?seed=2 (40 prompts, training seed 3, which the spec's seed overrides)
    sft = {"dataset": "builtin:chain_sft", "dataset_limit": 128, "seed": 0}
    arm = {"dataset": "builtin:chain?seed=2", "dataset_limit": 40, "seed": 3}
    wh.write("checkpoints", [_row("sft", "", sft)], lineage=Lineage(partition="sft"))
    wh.write("checkpoints", [_row("arm", "sft", arm)], lineage=Lineage(partition="arm"))
    seen = checkpoint_problems(checkpoint_chain(wh, "arm"))
    # what they trained on, recomputed here from the generator and compared by parsed chain
    trained = ({_chain_key(r["problem"]) for r in builtin_chain(128, 0)}
               | {_chain_key(r["problem"]) for r in builtin_chain(40, 2)})
    assert {_chain_key(p) for p in seen} == trained

    rows = heldout_chain(96, exclude=seen)
    keys = [_chain_key(r["problem"]) for r in rows]
    assert len(rows) == 96 and len(set(keys)) == 96
    assert not set(keys) & trained
    # each row's gold answer is the chain's value and its id names the chain
    for r, key in zip(rows, keys, strict=True):
        assert r["answer"] == str(_value(key)) and r["steps"] == len(key[1]) in range(2, 6)
        assert r["problem_id"] == f"chain-{key[0]}" + "".join(f"{o}{x}" for o, x in key[1])
    # deterministic, and a larger exclusion only skips more of the same sequence
    assert heldout_chain(96, exclude=seen) == rows
    unexcluded = heldout_chain(96 + len(seen))
    assert rows == [r for r in unexcluded if r["problem"] not in seen][:96]


def test_heldout_chain_excludes_chains_drawn_with_its_own_seed():
    # a lineage trained on the held-out draw's own first chains: they are all skipped
    first = builtin_chain(30, 1)
    rows = heldout_chain(20, seed=1, exclude={r["problem"] for r in first})
    assert not {r["problem"] for r in rows} & {r["problem"] for r in first}
    assert rows == builtin_chain(50, 1)[30:]
    with pytest.raises(ValueError, match="at least 2"):
        heldout_chain(1)


def test_each_task_has_its_own_benchmark_and_the_one_digit_path_is_unchanged():
    bench, rows = heldout_problems("chain", 4)
    assert bench.name == HELDOUT_CHAIN_BENCHMARK == "chain_heldout" and bench.grader == "math"
    assert rows == heldout_chain(4)
    prompt = bench.render(rows[0])
    assert prompt.endswith("\n\n" + rows[0]["problem"]) and "\\boxed{}" in prompt
    # the one-digit task: the same problems and benchmark as before
    bench1, rows1 = heldout_problems("arith1", 10, exclude={"What is 1 plus 1?"})
    assert bench1.name == HELDOUT_BENCHMARK == heldout_benchmark().name == "arith1_heldout"
    assert rows1 == heldout_arith(10, exclude={"What is 1 plus 1?"})
    assert rows1 == [r for r in builtin_arith1(207, 1) if r["problem"] != "What is 1 plus 1?"][:10]
    assert set(HELDOUT_TASKS) == {"arith1", "chain"}
    with pytest.raises(ValueError, match="no held-out task 'arith2'"):
        heldout_problems("arith2", 4)
