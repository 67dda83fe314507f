"""The SxS data chain's rows (pipelines/sxs_dataset.py): the trace slice, the judge's request
bounds, alignment rows and quarantined samples, both SFT variants with the token cap, the
latency table and the two tables' checks, on hand-made traces with the scripted evidence judge."""

import json
from types import SimpleNamespace

import pytest

from pipelines.sxs_align import AlignConfig, segment
from pipelines.sxs_dataset import (
    LATENCY_COLUMNS,
    align_traces,
    alignment_from_row,
    alignment_problems,
    alignment_rows,
    check_judge,
    check_max_example_tokens,
    example_tokens,
    judge_bounds,
    latency_table,
    make_judge,
    round_trip_problems,
    rounded,
    select_traces,
    sft_dataset_rows,
)
from pipelines.sxs_judge import JUDGE_PROMPT_PATH, EvidenceJudge

TRACES = [
    {"trace_id": "t2", "problem_id": "p2", "source": "s", "problem": "What is 6 * 7?",
     "reasoning": "Multiply.\n\nIt is 42.", "response": "So 42.\n\nAnswer: 42"},
    {"trace_id": "t1", "problem_id": "p1", "source": "s", "problem": "What is 2 + 3?",
     "reasoning": "Add them.\n\nWe get 5.\n\nCheck.", "response": "The sum is 5.\n\nDone."},
]


class Words:
    """A tokenizer stand-in: one token per whitespace-separated word."""

    def encode(self, text, add_special_tokens=False):
        assert add_special_tokens is False
        return text.split()


def test_the_slice_is_ordered_by_trace_id():
    assert [r["trace_id"] for r in select_traces(TRACES, None)] == ["t1", "t2"]
    assert [r["trace_id"] for r in select_traces(TRACES, 1)] == ["t1"]
    with pytest.raises(ValueError, match="no traces: materialize `traces` first"):
        select_traces([], 3)
    check_judge("llm")
    check_judge("evidence")
    with pytest.raises(ValueError, match="judge must be one of"):
        check_judge("oracle")


def test_judge_bounds_count_one_call_and_one_repair_per_prefix():
    calls, chars = judge_bounds(TRACES)
    # t2: 2 reasoning blocks -> 1 prefix; t1: 3 blocks -> 2 prefixes; 2 requests each
    assert calls == 2 * 1 + 2 * 2
    template = len(JUDGE_PROMPT_PATH.read_text(encoding="utf-8"))
    longest = max(len(t["problem"]) + len(t["reasoning"]) + len(t["response"]) for t in TRACES)
    assert chars == template + longest
    one_block = [dict(TRACES[0], reasoning="Only one block.")]
    assert judge_bounds(one_block)[0] == 2  # never fewer than one call


def test_the_judges_and_their_names():
    judge, name = make_judge("evidence")
    assert isinstance(judge, EvidenceJudge) and name == EvidenceJudge.name
    judge, name = make_judge("llm", SimpleNamespace(model="m"), max_tokens=64)
    assert name == "m" and (judge.params.temperature, judge.params.max_tokens) == (0.0, 64)


def _aligned():
    judge, model = make_judge("evidence")
    broken = dict(TRACES[0], trace_id="t3", response="")  # nothing to interleave
    results = align_traces([*TRACES, broken], judge, AlignConfig())
    return alignment_rows(results, model)


def test_alignment_rows_keep_every_aligned_sample_and_quarantine_the_rest():
    out, rejects, alignments = _aligned()
    assert [r["trace_id"] for r in out] == ["t2", "t1"] and len(alignments) == 2
    assert {r["judge_model"] for r in out} == {EvidenceJudge.name}
    (reject,) = rejects
    assert (reject["origin"], reject["line"]) == ("traces/t3", -1)
    assert reject["reason"].startswith("sxs alignment: ")
    for row, alignment in zip(out, alignments):
        again = alignment_from_row(row)
        assert (again.repaired, again.k_r, again.k_a) == (alignment.repaired, alignment.k_r,
                                                          alignment.k_a)
    assert alignment_problems(out) == {}
    bad = dict(out[1], repaired=list(reversed(out[1]["repaired"])))
    assert list(alignment_problems([bad])) == ["t1"]


def test_both_variants_and_the_token_cap():
    out, _, _ = _aligned()
    problems = {t["trace_id"]: t["problem"] for t in TRACES}
    rows, alignments, too_long = sft_dataset_rows(out, problems, style="chat",
                                                  max_example_tokens=None, tokenizer=Words())
    assert too_long == 0 and len(alignments) == 2
    assert sorted((r["trace_id"], r["variant"]) for r in rows) == [
        ("t1", "standard"), ("t1", "sxs"), ("t2", "standard"), ("t2", "sxs")]
    assert all(isinstance(json.loads(r["completion"]), list) for r in rows)  # chat: JSON
    assert {r["n_visible_segments"] for r in rows if r["variant"] == "standard"} == {1}
    originals = {t["trace_id"]: t for t in TRACES}
    assert round_trip_problems(rows, originals) == {}
    assert round_trip_problems(rows, {"t1": originals["t1"]}) == {
        "t2/sxs": ["trace no longer exists"], "t2/standard": ["trace no longer exists"]}
    sizes = {}
    for r in rows:  # the cap counts every message's words, prompt and completion
        n = sum(len(m["content"].split()) for m in json.loads(r["prompt"]) + json.loads(
            r["completion"]))
        sizes[r["trace_id"]] = max(n, sizes.get(r["trace_id"], 0))
    cut = min(sizes.values())
    kept, _, too_long = sft_dataset_rows(out, problems, style="chat",
                                         max_example_tokens=cut, tokenizer=Words())
    assert too_long == 1 and {r["trace_id"] for r in kept} == {min(sizes, key=sizes.get)}
    text, _, _ = sft_dataset_rows(out, problems, style="text", max_example_tokens=None,
                                  tokenizer=Words())
    assert len(text) == 4 and all(r["completion"].startswith("<think>") for r in text)  # raw
    with pytest.raises(ValueError, match="all 2 traces have more than max_example_tokens=1"):
        sft_dataset_rows(out, problems, style="chat", max_example_tokens=1, tokenizer=Words())


def test_example_tokens_and_the_cap_setting():
    chat = {"prompt": [{"role": "user", "content": "a b c"}],
            "completion": [{"role": "assistant", "content": "d e"}]}
    assert example_tokens(chat, Words()) == 5
    assert example_tokens({"prompt": "a b", "completion": "c"}, Words()) == 3
    check_max_example_tokens(None)
    check_max_example_tokens(10)
    with pytest.raises(ValueError, match="positive token count or None, got 0"):
        check_max_example_tokens(0)


def test_latency_table_and_rounded_figures():
    summary = {f"latency_{v}": {f"mean_{k}": float(i) for i, k in enumerate(LATENCY_COLUMNS[1:])}
               for v in ("sxs", "standard")}
    table = latency_table(summary)
    assert [r["variant"] for r in table] == ["sxs", "standard"]
    assert list(table[0]) == LATENCY_COLUMNS and table[1]["abo"] == 1.0
    assert rounded({"a": 0.123456, "b": 3, "c": None}) == {"a": 0.1235, "b": 3}
    assert segment("x\n\ny") == ["x", "y"]  # the blocks the bounds above count
