"""`python -m warehouse samples` and the sample previews, on a real warehouse (Parquet + DuckDB)."""

import pytest

from warehouse import Lineage, Warehouse
from warehouse.__main__ import main as warehouse_main
from warehouse.samples import (
    eval_samples_preview,
    excerpt,
    pick_eval_samples,
    preview_markdown,
    read_samples,
)

LONG_OUTPUT = ("Let me think step by step. " * 12) + "So the answer is \\boxed{42}."


def _sample(pid, idx, correct, output=LONG_OUTPUT, extracted="42", gold="42"):
    return {"model": "m1", "benchmark": "gsm8k", "problem_id": pid, "sample_index": idx,
            "prompt": f"Question {pid}: what is six times seven? | pipes | and\nnewlines",
            "gold": gold, "seed": idx, "mode": "single", "budget": None, "thinking_cap": None,
            "output": output, "prompt_tokens": 10, "completion_tokens": 50, "latency_s": 0.1,
            "finish_reason": "stop", "gen_error": None, "extracted": extracted,
            "extraction_method": "boxed", "correct": correct, "grade_error": None}


@pytest.fixture
def wh(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    rows = [_sample("p1", 0, True), _sample("p1", 1, False, extracted="41"),
            _sample("p2", 0, False, output="I give up: 7", extracted="7"), _sample("p3", 0, True)]
    wh.write("eval_samples", rows, lineage=Lineage(run_id="r1", asset="eval_samples",
                                                   partition="gsm8k|m1"))
    return wh


def test_excerpt_keeps_both_ends_and_the_width():
    text = "A" * 100 + " middle " + "Z" * 100
    out = excerpt(text, 60)
    assert len(out) == 60 and out.startswith("A") and out.endswith("Z") and " … " in out
    assert excerpt("short\n\n text", 60) == "short text"
    with pytest.raises(ValueError, match="at least 5"):
        excerpt("x", 2)


def test_preview_escapes_pipes_and_folds_newlines():
    md = preview_markdown([{"a": "x | y\nz", "b": True}], [("A", "a", 40), ("B", "b", 5)])
    lines = md.splitlines()
    assert lines[0] == "| A | B |"
    assert lines[2] == "| x \\| y z | yes |"


def test_pick_eval_samples_mixes_wrong_and_right():
    rows = [_sample(f"p{i}", 0, i % 3 != 0) for i in range(9)]  # 3 wrong, 6 right
    picked = pick_eval_samples(rows, 5)
    assert [r["correct"] for r in picked] == [False, False, False, True, True]
    only_right = [_sample(f"p{i}", 0, True) for i in range(9)]
    assert len(pick_eval_samples(only_right, 5)) == 5


def test_eval_preview_shows_answer_gold_and_correctness(wh):
    rows = wh.read("eval_samples").to_pylist()
    md = eval_samples_preview(rows, n=3)
    assert "4 samples (2 wrong)" in md
    table = [line for line in md.splitlines() if line.startswith("| p") and "problem" not in line]
    assert len(table) == 3
    assert table[0].startswith("| p1 |") and "| 41 | 42 | no |" in table[0]
    assert "\\boxed{42}" in md  # the end of a long output survives the excerpt
    with_text = eval_samples_preview(rows, n=1, problems={"p1": "Six times seven?"})
    assert "| p1 | Six times seven? |" in with_text


def test_samples_command_prints_whole_outputs(wh, capsys):
    assert warehouse_main(["--root", str(wh.root), "samples", "--benchmark", "gsm8k",
                           "--model", "m1"]) == 0
    out = capsys.readouterr().out
    assert out.count("── output") == 4
    assert LONG_OUTPUT[:90] in out.replace("\n", "") and "\\boxed{42}" in out
    assert "problem p1 | sample 1 | WRONG" in out and "extracted: 41   gold: 42" in out


def test_samples_command_wrong_and_limit(wh, capsys):
    assert warehouse_main(["--root", str(wh.root), "samples", "--benchmark", "gsm8k",
                           "--model", "m1", "--wrong", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("── output") == 1 and "problem p1 | sample 1 | WRONG" in out
    assert "CORRECT" not in out and "raise --limit" in out
    rows = read_samples(wh, "gsm8k", "m1", wrong=True, limit=None)
    assert [(r["problem_id"], r["sample_index"]) for r in rows] == [("p1", 1), ("p2", 0)]


def test_samples_command_names_what_exists_for_a_typo(wh, capsys):
    assert warehouse_main(["--root", str(wh.root), "samples", "--benchmark", "gsm8kk",
                           "--model", "m1"]) == 1
    err = capsys.readouterr().err
    assert "Did you mean gsm8k?" in err and "gsm8k|m1" in err
    assert "Traceback" not in err
    empty = Warehouse(wh.root.parent / "empty")
    assert warehouse_main(["--root", str(empty.root), "samples", "--benchmark", "gsm8k",
                           "--model", "m1"]) == 1
    assert "no eval_samples yet" in capsys.readouterr().err


def test_synthesis_previews_show_the_columns_of_their_tables():
    from warehouse.samples import mosaic_preview, sxs_preview

    trajectory = {"problem": "How many legs do 3 spiders have?", "text": "<think>8 each</think>"
                  "<code>print(3*8)</code><interpreter>24</interpreter><answer>24</answer>",
                  "status": "complete", "num_turns": 3, "final_answer": "\\boxed{24}",
                  "answer": "24", "correct": True}
    md = mosaic_preview([trajectory] * 7, "mosaic_trajectories")
    assert "| problem | trajectory | status | turns | answer | gold | correct |" in md
    assert "| How many legs do 3 spiders have? |" in md and "| \\boxed{24} | 24 | yes |" in md
    assert "(5 of 7 rows)" in md and "SELECT * FROM mosaic_trajectories" in md
    alignment = {"problem_id": "p9", "tagged": "<think>a</think><speak>b</speak>", "k_r": 4,
                 "k_a": 2, "n_segments": 2, "collapsed": False}
    md = sxs_preview([alignment])
    assert "| p9 | <think>a</think><speak>b</speak> | 4 | 2 | 2 | no |" in md


def test_samples_show_the_benchmarks_own_id_beside_the_hash(wh, capsys):
    import json

    problem = {"problem_id": "p1", "source": "gsm8k", "split": "test", "problem": "q",
               "answer": "42", "solution": None, "answer_type": "number",
               "meta": json.dumps({"original_id": "gsm8k-test-0017"}), "dataset_version": "v"}
    other = dict(problem, problem_id="p2", meta=json.dumps({"subject": "x"}))
    wh.write("problems", [problem, other], lineage=Lineage(run_id="r0", asset="problems",
                                                           partition="gsm8k"))
    assert warehouse_main(["--root", str(wh.root), "samples", "--benchmark", "gsm8k",
                           "--model", "m1"]) == 0
    out = capsys.readouterr().out
    assert "problem p1 (gsm8k-test-0017 in the benchmark) | sample 0" in out
    assert "problem p2 | sample 0" in out  # no original id: the hash alone
    rows = read_samples(wh, "gsm8k", "m1", limit=None)
    assert {r["problem_id"]: r["source_id"] for r in rows} == {
        "p1": "gsm8k-test-0017", "p2": None, "p3": None}
