"""Tests for pipelines/ingest/trajectories.py: adapters on hand-made records, and the real TIR files."""

from __future__ import annotations

import json

import pytest

from pipelines.ingest import TIR_SOURCES, RawRecord, build_rows, load_tir, problem_id
from pipelines.ingest import adapters as ad
from pipelines.ingest.trajectories import adapt_mathcoder, adapt_tora
from pipelines.tir import KIND_ANSWER, KIND_CODE, Step, parse_trajectory, validate_steps


def _mathcoder(*turns, completion="4", answer="4"):
    return {
        "id": "test/x.json",
        "debug_result": [{"role": "system", "content": "sys"},
                         {"role": "user", "content": "What is 2+2?"},
                         *[{"role": r, "content": c} for r, c in turns]],
        "ground_truth": {"solution": "2+2=\\boxed{4}", "answer": answer},
        "completion": completion,
    }


def test_mathcoder_turns_become_steps_and_the_bare_answer_turn_is_dropped():
    parsed = adapt_mathcoder(_mathcoder(
        ("text", "Add them."), ("code", "x = 2 + 2\r\nx"), ("execution", "4"),
        ("code", "print(x)"), ("execution", "4\n"),
        ("text", "So the sum is \\(\\boxed{4}\\)."), ("text", "4")))
    assert parsed.problem == "What is 2+2?" and parsed.answer == "4"
    assert parsed.steps == [
        Step("Add them.", KIND_CODE, "x = 2 + 2\nx", "4"),
        Step("", KIND_CODE, "print(x)", "4"),  # consecutive code turns: empty thought
        Step("So the sum is \\(\\boxed{4}\\).", KIND_ANSWER, "\\boxed{4}"),
    ]
    assert validate_steps(parsed.steps) == []


def test_mathcoder_without_boxed_falls_back_to_the_completion():
    parsed = adapt_mathcoder(_mathcoder(("code", "2+2"), ("execution", "4"),
                                        ("text", "The answer is four."), ("text", "4")))
    assert parsed.steps[-1] == Step("The answer is four.", KIND_ANSWER, "\\boxed{4}")


@pytest.mark.parametrize("turns, fragment", [
    ([("code", "x=1"), ("execution", "")], "ends with a code step"),
    ([("code", "x=1"), ("text", "t"), ("execution", "1")], "no execution turn"),
    ([("execution", "1"), ("text", "\\boxed{1}")], "does not follow a code turn"),
    ([("image", "x")], "unknown turn role"),
])
def test_mathcoder_bad_structures_are_refused(turns, fragment):
    with pytest.raises(ad.RowError, match=fragment):
        adapt_mathcoder(_mathcoder(*turns, completion="zzz"))


def _tora(content, gt="8"):
    return {"id": "math-train-1", "gt": gt, "gt_cot": "ref", "level": "Level 1",
            "messages": [{"role": "user", "content": "How many flags?"},
                         {"role": "assistant", "content": content}]}


def test_tora_markdown_becomes_steps():
    parsed = adapt_tora(_tora("Let's count.\n```python\nprint(2**3)\n```\n```output\n8\n```\n"
                              "So there are $\\boxed{8}$ flags."))
    assert parsed.steps == [Step("Let's count.", KIND_CODE, "print(2**3)", "8"),
                            Step("So there are $\\boxed{8}$ flags.", KIND_ANSWER, "\\boxed{8}")]
    text_only = adapt_tora(_tora("Two colours, three stripes: $\\boxed{8}$."))
    assert [s.kind for s in text_only.steps] == [KIND_ANSWER]


@pytest.mark.parametrize("content, fragment", [
    ("```python\nx=1\n```\nThe answer is $\\boxed{1}$.", "no output block"),
    ("```output\n1\n```\n$\\boxed{1}$", "does not follow a python block"),
    ("```python\nx=1\n```\nsee:\n```output\n1\n```\n$\\boxed{1}$", "prose between"),
    ("```python\nx=1\n```\n```output\n1\n```\nSo it is one.", "no final answer"),
])
def test_tora_bad_structures_are_refused(content, fragment):
    with pytest.raises(ad.RowError, match=fragment):
        adapt_tora(_tora(content))


def test_build_rows_of_tir_rejects_dedups_excludes_and_neutralizes_tags():
    good = _mathcoder(("code", "print('<code>')"), ("execution", "<code>"),
                      ("text", "Done: \\boxed{4}"), ("text", "4"))
    records = [RawRecord(1, good, "raw1"), RawRecord(2, good, "raw1"),
               RawRecord(3, ["not", "an", "object"], "raw3"),
               RawRecord(4, _mathcoder(("code", "x"), ("execution", "")), "raw4"),
               RawRecord(5, {**good, "id": "test/y.json",  # its own id: not an id conflict
                             "debug_result": good["debug_result"][:1] + [
                   {"role": "user", "content": "Excluded problem"}] + good["debug_result"][2:]}, "raw5")]
    spec = TIR_SOURCES["mathcoder"]
    result = build_rows(spec, records, "mem", exclude_texts=frozenset({"excluded problem"}))
    assert result.counts() == {"trajectories": 1, "rejects": 2, "duplicates": 1, "excluded": 1,
                               "id_conflicts": 0, "control_chars_stripped": 0,
                               "control_char_rows": 0}
    assert sorted(r.line for r in result.rejects) == [3, 4]
    traj = result.trajectories[0]
    assert traj.problem_id == problem_id("math", "What is 2+2?")
    assert traj.steps[0].action == "print('‹code›')" and traj.steps[0].observation == "‹code›"
    assert json.loads(traj.meta)["neutralized_tags"] is True
    assert parse_trajectory(traj.text()) == list(traj.steps)


def test_real_tir_files_ingest_into_valid_trajectories(shared_data):
    mathcoder = load_tir("mathcoder", data_dir=shared_data)
    # 1179 records: 110 are MATH-500 problems (excluded), 4 end without a final text
    assert mathcoder.counts() == {"trajectories": 1065, "rejects": 4, "duplicates": 0,
                                  "excluded": 110, "id_conflicts": 0,
                                  "control_chars_stripped": 0, "control_char_rows": 0}
    assert all("ends with a code step" in r.reason for r in mathcoder.rejects)
    tora = load_tir("tora", data_dir=shared_data)
    assert tora.counts()["trajectories"] == 30 and not tora.rejects
    for traj in mathcoder.trajectories + tora.trajectories:
        assert validate_steps(traj.steps) == []
        assert parse_trajectory(traj.text()) == list(traj.steps)
        assert traj.steps[-1].action.startswith("\\boxed{")
    multi = [t for t in mathcoder.trajectories if len(t.steps) >= 3]
    assert len(multi) > 500  # the file's point: many use two or more code rounds
    without_decontamination = load_tir("mathcoder", data_dir=shared_data, decontaminate=False, limit=50)
    assert without_decontamination.excluded == 0


def test_missing_file_and_unknown_source_give_clear_errors(tmp_path, monkeypatch):
    from pipelines.ingest import IngestError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # MATH-500 must not come from the hub here

    with pytest.raises(IngestError, match="WEFT_DATA_DIR"):
        load_tir("tora", data_dir=tmp_path, decontaminate=False)
    with pytest.raises(KeyError, match="known"):
        load_tir("nope")
    (tmp_path / "tir").mkdir()
    (tmp_path / "tir" / "tora_examples.jsonl").write_text("{}\n")
    with pytest.raises(IngestError, match="decontaminate=False"):
        load_tir("tora", data_dir=tmp_path)
