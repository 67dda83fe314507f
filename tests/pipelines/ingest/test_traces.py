"""Tests for pipelines.ingest.traces on the shared trace files and on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.ingest import TRACE_SOURCES, IngestError, load_traces, problem_id
from pipelines.ingest import adapters as ad
from pipelines.ingest.traces import split_think, trace_id
from pipelines.settings import data_dir


@pytest.fixture(scope="module")
def shared() -> Path:
    found = data_dir()
    if found is None or not (found / "traces").is_dir():
        pytest.skip("no shared data directory: set WEFT_DATA_DIR to a copy of ../shared/data")
    return found


@pytest.mark.parametrize(
    ("name", "expected"), [("s1k", 50), ("limo", 40), ("openmathreasoning", 72)]
)
def test_trace_files_load(shared, name, expected):
    result = load_traces(name)
    assert result.counts() == {"traces": expected, "rejects": 0, "duplicates": 0,
                               "control_chars_stripped": 0, "control_char_rows": 0}
    assert result.origin == str(shared / TRACE_SOURCES[name].local_path)
    for t in result.traces:
        assert t.reasoning and t.response and t.answer and t.problem
        assert "<think>" not in t.reasoning and "</think>" not in t.reasoning
        assert "</think>" not in t.response
        assert t.problem_id == problem_id(name, t.problem)
        assert t.trace_id == trace_id(name, t.problem, t.reasoning, t.response)
        assert isinstance(json.loads(t.meta), dict)
    assert len({t.trace_id for t in result.traces}) == expected


def test_s1k_fields(shared):
    first = load_traces("s1k").traces[0]
    raw = json.loads((shared / "traces/s1k_sample50.jsonl").open().readline())
    assert first.answer == "173" == raw["solution"]
    assert first.response == raw["attempt"].strip()
    assert first.reasoning.startswith("The problem describes a geometric configuration")
    assert not first.reasoning.startswith("['")  # the list text was parsed, not kept verbatim
    meta = first.meta_dict()
    assert meta["original_metadata"] == {
        "ID": "2020-I-6",
        "Year": 2020,
        "Problem Number": 6,
        "Part": "I",
    }
    traces = load_traces("s1k").traces
    # a gold solution without \boxed{} is the answer as a whole ...
    assert traces[1].answer.startswith("Applying \\partial{\\nu}")
    assert "gold_solution" not in traces[1].meta_dict()
    # ... one with \boxed{} gives the boxed answer and keeps the full text in meta
    assert traces[7].answer == "82" and "\\boxed{82}" in traces[7].meta_dict()["gold_solution"]
    assert sum("gold_solution" in t.meta_dict() for t in traces) == 11


def test_limo_and_openmathreasoning_fields(shared):
    limo = load_traces("limo").traces
    assert limo[0].answer == "27" and limo[0].response == "\\boxed{27}"
    assert limo[0].reasoning.startswith("Okay, so I need to find angle FDE")
    omr = load_traces("openmathreasoning").traces
    assert [t.answer for t in omr[:4]] == ["17", "4", "20", "120"]
    assert omr[0].response.endswith("Jenifer has \\(\\boxed{17}\\) pennies.")


def test_limit_and_stable_ids(shared):
    first = load_traces("limo", limit=3)
    again = load_traces("limo", limit=3)
    assert len(first.traces) == 3
    assert [t.to_row() for t in first.traces] == [t.to_row() for t in again.traces]
    assert list(first.traces[0].to_row()) == [
        "trace_id",
        "problem_id",
        "source",
        "problem",
        "reasoning",
        "response",
        "answer",
        "meta",
    ]


def test_split_think():
    assert split_think("<think>\nstep 1\n</think>\nfinal") == ("step 1", "final")
    assert split_think("no opening tag</think> ok") == ("no opening tag", "ok")
    with pytest.raises(ad.RowError, match="no </think>"):
        split_think("just an answer")
    with pytest.raises(ad.RowError, match="2 </think> tags"):
        split_think("<think>a</think>b</think>c")


def test_bad_trace_rows_become_rejects(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    good = {"instruction": "What is 1+1?", "input": "", "output": "<think>1+1=2</think> \\boxed{2}"}
    rows = [
        json.dumps(good),
        json.dumps({"instruction": "Q2", "output": "no tags at all \\boxed{3}"}),
        json.dumps({"instruction": "Q3", "output": "<think>thinking</think> no box"}),
        json.dumps({"instruction": "Q4", "output": "<think>  </think> \\boxed{4}"}),
        "{broken",
        json.dumps(good),
    ]
    (folder / "limo_v2_subset40.jsonl").write_text("\n".join(rows) + "\n")
    result = load_traces("limo", data_dir=tmp_path)
    assert [t.answer for t in result.traces] == ["2"] and result.duplicates == 1
    reasons = {r.line: r.reason for r in result.rejects}
    assert set(reasons) == {2, 3, 4, 5}
    assert "no </think>" in reasons[2]
    assert reasons[3].startswith("missing answer")
    assert reasons[4] == "empty reasoning"
    assert "not valid JSON" in reasons[5]


def test_bad_s1k_trajectory_text_is_rejected(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    row = {"question": "q", "thinking_trajectories": "['unclosed", "attempt": "a", "solution": "1"}
    (folder / "s1k_sample50.jsonl").write_text(json.dumps(row) + "\n")
    result = load_traces("s1k", data_dir=tmp_path)
    assert result.traces == [] and "not a list literal" in result.rejects[0].reason


def test_missing_trace_file_says_what_to_do(tmp_path):
    with pytest.raises(IngestError, match="limo_v2_subset40.jsonl.*WEFT_DATA_DIR"):
        load_traces("limo", data_dir=tmp_path)
    with pytest.raises(KeyError, match="unknown trace source"):
        load_traces("nope")


def _gsm8k_folder(tmp_path: Path, rows: list) -> Path:
    folder = tmp_path / "train"
    folder.mkdir()
    (folder / "gsm8k_train.jsonl").write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return tmp_path


def test_gsm8k_worked_puts_calculator_notes_in_the_reasoning_and_lines_in_the_answer(tmp_path):
    record = {"question": "Ann has 3 boxes of 4 pens and gives away 5. How many are left?",
              "answer": "Ann has 3 boxes.\n"
                        "She has 3*4=<<3*4=12>>12 pens, so 12-5=<<12-5=7>>7 are left.\n"
                        "#### 7"}
    no_notes = {"question": "Q2", "answer": "It is 2 + 2 = 4.\n#### 4"}
    no_answer = {"question": "Q3", "answer": "3*3=<<3*3=9>>9"}
    result = load_traces("gsm8k_worked", data_dir=_gsm8k_folder(
        tmp_path, [record, no_notes, no_answer, "{broken"]))
    [trace] = result.traces
    # written out by hand: one reasoning block per line with notes (its notes, one per line),
    # one answer block per line (notes removed, spaces collapsed), then the stated result
    assert trace.reasoning == "3*4=12\n12-5=7"
    assert trace.response == ("Ann has 3 boxes.\n\n"
                              "She has 3*4=12 pens, so 12-5=7 are left.\n\n"
                              "The answer is $\\boxed{7}$.")
    assert trace.answer == "7"
    # problem ids join the gsm8k problem sources (one id namespace for train and test)
    assert trace.problem_id == problem_id("gsm8k", record["question"])
    reasons = {r.line: r.reason for r in result.rejects}
    assert set(reasons) == {2, 3, 4}
    assert "no calculator notes" in reasons[2]
    assert reasons[3].startswith("missing answer")
    assert "not valid JSON" in reasons[4]


def test_gsm8k_worked_file_gives_short_traces_that_interleave(shared):
    from pipelines.sxs_align import AlignConfig, segment
    from pipelines.sxs_dataset import align_traces, make_judge

    result = load_traces("gsm8k_worked")
    raw = [json.loads(line) for line in (shared / "train/gsm8k_train.jsonl").open()]
    with_notes = [r for r in raw if "<<" in r["answer"]]
    assert (len(result.traces), len(result.rejects)) == (len(with_notes), len(raw) - len(with_notes))
    for t in result.traces:
        assert "<<" not in t.reasoning + t.response and "####" not in t.response
        assert t.response.endswith(f"The answer is $\\boxed{{{t.answer}}}$.")
    first = result.traces[0]  # Natalia's clips
    assert segment(first.reasoning) == ["48/2=24", "48+24=72"]
    judge, _ = make_judge("evidence")
    [(_, alignment, error)] = align_traces([first.to_row()], judge, AlignConfig())
    assert error is None
    # each line is shown once the note that computed it has been thought
    assert alignment.tagged == (
        "<think>48/2=24</think><speak>Natalia sold 48/2 = 24 clips in May.</speak>"
        "<think>48+24=72</think><speak>Natalia sold 48+24 = 72 clips altogether in April and "
        "May.\n\nThe answer is $\\boxed{72}$.</speak>")
