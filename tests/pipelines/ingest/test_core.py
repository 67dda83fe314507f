"""The one ingestion front end (pipelines.ingest.core): the three kinds (problems, traces, TIR
trajectories) run the same checks in the same order and give the same reject reasons.

Each kind gets a tiny spec whose adapter reads the same hand-made records, so the only thing
that differs is the kind; expected reasons, ids and counts are written out here (ids from
sha1 over the text normalised by hand), not taken from the code under test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from pipelines.ingest import (
    SOURCES,
    IngestError,
    RawRecord,
    RecordLimits,
    SourceSpec,
    TIRSpec,
    TraceSpec,
    build_rows,
    load_source,
    load_tir,
    load_traces,
)
from pipelines.ingest import adapters as ad
from pipelines.ingest.traces import ParsedTrace
from pipelines.ingest.trajectories import ParsedTIR
from pipelines.tir import KIND_ANSWER, Step


def _fields(record):
    if record.get("refuse"):
        raise ad.RowError("refused by the adapter")
    return record["q"], record["a"], record.get("id")


def _problem(record):
    q, a, rid = _fields(record)
    return ad.Parsed(problem=q, answer=a, meta={} if rid is None else {"original_id": rid})


def _trace(record):
    q, a, rid = _fields(record)
    return ParsedTrace(q, "reasoning", "response", a, {} if rid is None else {"original_id": rid})


def _tir(record):
    q, a, rid = _fields(record)
    return ParsedTIR(q, a, [Step("so", KIND_ANSWER, f"\\boxed{{{a}}}")],
                     {} if rid is None else {"id": rid})


SPECS = {
    "problems": SourceSpec(name="toy", split="test", answer_type="math", adapter=_problem),
    "traces": TraceSpec(name="toy", adapter=_trace),
    "tir": TIRSpec(name="toy", adapter=_tir, exclude_sources=()),
}
RECORDS = [
    {"q": "What is 1+1?", "a": "2", "id": "x1"},      # 1 kept
    ["not", "an", "object"],                           # 2
    {"q": "big", "a": "1", "pad": "y" * 50},           # 3 over max_field_chars=40
    {"refuse": True},                                  # 4 the adapter's own reason
    {"q": "\x00\x07", "a": "3"},                       # 5 nothing left after cleaning
    {"q": "What is 2+2?", "a": "  "},                  # 6
    {"q": "What is 5+5?", "a": "10", "id": "x1"},      # 7 id of line 1, other text
    {"q": "Excluded one", "a": "1"},                   # 8 decontaminated
    {"q": "  what IS 1+1? ", "a": "2"},                # 9 copy of line 1
    {"q": "Cl\x00ean", "a": "4"},                      # 10 kept, one control char
]
SHARED_REASONS = {
    2: "record is a JSON list, expected an object",
    3: "field 'pad' is too large: 50 characters, limit 40 (max_field_chars); shorten it or "
       "raise the limit",
    4: "refused by the adapter",
    5: "missing problem text",
    6: "missing answer",
}


def _sha16(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _build(kind: str):
    records = [RawRecord(i, r, json.dumps(r)) for i, r in enumerate(RECORDS, start=1)]
    return build_rows(SPECS[kind], records, "mem", exclude_texts=frozenset({"excluded one"}),
                      limits=RecordLimits(max_field_chars=40))


@pytest.mark.parametrize("kind", ["problems", "tir"])
def test_kinds_with_record_ids_share_every_check_and_reason(kind):
    result = _build(kind)
    family = "math" if kind == "tir" else "toy"  # TIR problem ids are MATH's
    id_key = "id" if kind == "tir" else "original_id"
    reasons = {r.line: r.reason for r in result.rejects}
    assert reasons == {**SHARED_REASONS, 7: (
        f"duplicate source id: {id_key}='x1' was already used by line 1 (problem "
        f"{_sha16(family + chr(31) + 'what is 1+1?')}) with different problem text; the first "
        "record is kept, check which one is right")}
    assert [r.problem for r in result.rows] == ["What is 1+1?", "Clean"]
    assert [r.problem_id for r in result.rows] == [
        _sha16(f"{family}\x1fwhat is 1+1?"), _sha16(f"{family}\x1fclean")]
    assert (result.duplicates, result.excluded, result.id_conflicts) == (1, 1, 1)
    assert (result.control_chars_stripped, result.control_char_rows) == (1, 1)
    assert all(r.source == "toy" and r.origin == "mem" for r in result.rejects)


def test_traces_share_the_checks_and_have_no_record_ids():
    result = _build("traces")
    assert {r.line: r.reason for r in result.rejects} == SHARED_REASONS
    assert [t.problem for t in result.rows] == ["What is 1+1?", "What is 5+5?", "Clean"]
    assert (result.duplicates, result.excluded, result.id_conflicts) == (1, 1, 0)
    assert result.counts() == {"traces": 3, "rejects": 5, "duplicates": 1,
                               "control_chars_stripped": 1, "control_char_rows": 1}


def test_each_kind_names_its_rows_and_counts():
    assert list(_build("problems").counts()) == [
        "problems", "rejects", "duplicates", "excluded", "id_conflicts",
        "control_chars_stripped", "control_char_rows"]
    assert next(iter(_build("tir").counts())) == "trajectories"
    problems = _build("problems")
    assert problems.problems is problems.rows
    tir = _build("tir")
    assert tir.trajectories is tir.rows and len(tir.trajectories) == 2


def test_a_kind_that_refuses_its_row_rejects_it_before_decontamination():
    # a TIR record whose steps are not a valid trajectory: rejected with the kind's reason
    def bad_steps(record):
        return ParsedTIR(record["q"], "1", [Step("t", "code", "x = 1", None)], {})

    spec = TIRSpec(name="toy", adapter=bad_steps, exclude_sources=())
    record = {"q": "Excluded one"}
    result = build_rows(spec, [RawRecord(1, record, "raw")], "mem",
                        exclude_texts=frozenset({"excluded one"}))
    assert result.rows == [] and result.excluded == 0
    assert result.rejects[0].reason.startswith("invalid trajectory: ")


def test_specs_take_keyword_arguments_only():
    with pytest.raises(TypeError):
        SourceSpec("toy", "test", "math", _problem)  # type: ignore[misc]
    with pytest.raises(TypeError):
        TraceSpec("toy", _trace)  # type: ignore[misc]
    spec = SourceSpec(name="toy", split="test", answer_type="math", adapter=_problem)
    assert (spec.benchmark, spec.default_ingest, spec.hf_configs) == (None, True, (None,))


def test_the_three_loaders_give_the_same_errors(tmp_path):
    for load, kind, name in ((load_source, "source", "gsm8k"),
                             (load_traces, "trace source", "limo"),
                             (load_tir, "TIR source", "tora")):
        with pytest.raises(KeyError, match=f"unknown {kind} 'nope'; known {kind}s: "):
            load("nope")
        with pytest.raises(ValueError, match="prefer must be 'local' or 'hf'"):
            load(name, data_dir=tmp_path, prefer="cloud")
        with pytest.raises(ValueError, match="limit must be >= 0"):
            load(name, data_dir=tmp_path, limit=-1)


def test_a_missing_local_file_without_a_hub_id_says_what_to_do(tmp_path):
    for load, kind, name, path in ((load_traces, "trace source", "limo",
                                    "traces/limo_v2_subset40.jsonl"),
                                   (load_tir, "TIR source", "tora", "tir/tora_examples.jsonl"),
                                   (load_source, "source", "livecodebench",
                                    "benchmarks/livecodebench_279.json")):
        with pytest.raises(IngestError) as info:
            load(name, data_dir=tmp_path, decontaminate=False)
        assert str(info.value) == (
            f"could not load {kind} {name!r}. Tried: local: {tmp_path / path} not found; hub: "
            f"this {kind} has no Hugging Face id. Put the file {path} under a data folder and "
            "set WEFT_DATA_DIR to that folder.")


def test_decontamination_failure_names_the_source_and_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # MATH-500 must not come from the hub here
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "math_test5000.jsonl").write_text(
        json.dumps({"problem": "p", "answer": "1"}) + "\n")
    with pytest.raises(IngestError, match="cannot decontaminate 'math_train' against 'math500'"
                                          r".*pass decontaminate=False"):
        load_source("math_train", data_dir=tmp_path)
    kept = load_source("math_train", data_dir=tmp_path, decontaminate=False)
    assert [p.answer for p in kept.problems] == ["1"]


def test_an_absolute_local_path_is_read_without_a_data_folder(tmp_path):
    path = tmp_path / "elsewhere.jsonl"
    path.write_text(json.dumps({"problem": "What is 3+4?", "answer": "7"}) + "\n")
    spec = dataclasses.replace(SOURCES["math500"], name="abs_toy", local_path=str(path))
    SOURCES[spec.name] = spec
    try:
        result = load_source("abs_toy", data_dir=tmp_path / "no_such_folder")
    finally:
        del SOURCES[spec.name]
    assert [(p.problem, p.answer) for p in result.problems] == [("What is 3+4?", "7")]
    assert result.origin == str(path)
