"""Bad input rows never stop an ingestion.

Each test writes a small file by hand and checks the property against values computed here
independently of the code under test: nesting depths and JSON sizes known by construction,
control characters found with ``unicodedata.category``, expected texts written out literally.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from pathlib import Path

import pytest

from pipelines.ingest import (
    TIR_SOURCES,
    TRACE_SOURCES,
    RawRecord,
    RecordLimits,
    SourceSpec,
    build_rows,
    check_record,
    load_file,
    load_traces,
    problem_id,
)
from pipelines.ingest import adapters as ad
from pipelines.ingest.io import nesting_depth
from pipelines.text import strip_control_chars

# Deeper than the stdlib JSON parser can go at the default recursion limit (it raises
# RecursionError, not ValueError, which is what used to abort the whole source).
TOO_DEEP = 20 * sys.getrecursionlimit()


def _jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _ok(i: int) -> str:
    return json.dumps({"problem": f"What is {i}+{i}?", "answer": str(2 * i)})


def _load(path: Path, **kwargs):
    return load_file(path, ad.adapt_math, source="toy", split="test", answer_type="math", **kwargs)


# ----------------------------------------------------------------------------- deep nesting


def test_a_line_too_deep_to_parse_is_a_reject_and_the_rest_loads(tmp_path):
    deep = '{"problem": "deep", "answer": "1", "x": ' + "[" * TOO_DEEP + "]" * TOO_DEEP + "}"
    path = _jsonl(tmp_path / "deep.jsonl", [_ok(1), deep, _ok(2), "[" * TOO_DEEP])
    result = _load(path)
    assert [p.answer for p in result.problems] == ["2", "4"]
    assert sorted(r.line for r in result.rejects) == [2, 4]
    for r in result.rejects:
        assert f"line {r.line} is nested too deeply" in r.reason
        assert len(r.raw) <= 500


def test_a_json_document_too_deep_to_parse_is_one_whole_file_reject(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" + _ok(1) + ", " + "[" * TOO_DEEP + "]" * TOO_DEEP + "]")
    result = _load(path)
    assert result.problems == []
    assert [(r.line, "the file is nested too deeply" in r.reason) for r in result.rejects] == [
        (-1, True)
    ]


@pytest.mark.parametrize("depth", [1, 2, 7, 100, 101, 300])
def test_nesting_depth_matches_construction(depth):
    value: object = 0
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    assert nesting_depth(value) == depth
    assert nesting_depth("text") == 0 and nesting_depth([]) == 1


def test_records_deeper_than_max_depth_are_rejected_and_the_limit_is_configurable(tmp_path):
    # depth of the record = 1 (the object) + 150 (the lists)
    nested = {"problem": "Nested?", "answer": "1", "x": json.loads("[" * 150 + "]" * 150)}
    path = _jsonl(tmp_path / "nested.jsonl", [_ok(1), json.dumps(nested)])
    result = _load(path)
    assert [p.answer for p in result.problems] == ["2"]
    assert len(result.rejects) == 1 and result.rejects[0].line == 2
    assert "nested more than 100 levels" in result.rejects[0].reason
    relaxed = _load(path, limits=RecordLimits(max_depth=151))
    assert [p.answer for p in relaxed.problems] == ["2", "1"] and relaxed.rejects == []
    strict = _load(path, limits=RecordLimits(max_depth=150))
    assert len(strict.problems) == 1 and len(strict.rejects) == 1


# ----------------------------------------------------------------------------- field size


def test_fields_over_the_size_limit_are_rejected_at_the_exact_boundary(tmp_path):
    limit = 1000
    at_limit = {"problem": "p" * limit, "answer": "1"}
    over = {"problem": "q" * (limit + 1), "answer": "2"}
    # A list field is measured by its compact JSON text: "[" + "1,"*(n-1) + "1]" = 2n + 1 chars.
    n = (limit - 1) // 2  # 2n + 1 == 999 <= 1000
    list_ok = {"problem": "list ok", "answer": "3", "tests": [1] * n}
    list_over = {"problem": "list over", "answer": "4", "tests": [1] * (n + 1)}  # 1001 chars
    path = _jsonl(tmp_path / "sizes.jsonl",
                  [json.dumps(r) for r in (at_limit, over, list_ok, list_over)])
    result = _load(path, limits=RecordLimits(max_field_chars=limit))
    assert [p.answer for p in result.problems] == ["1", "3"]
    reasons = {r.line: r.reason for r in result.rejects}
    assert set(reasons) == {2, 4}
    assert "field 'problem' is too large: 1,001 characters, limit 1,000" in reasons[2]
    assert "field 'tests' is too large: 1,001 characters" in reasons[4]
    assert _load(path).rejects == []  # the default limit is far above these


def test_check_record_measures_strings_and_containers_independently():
    limits = RecordLimits(max_field_chars=10)
    assert check_record({"a": "x" * 10}, limits) is None
    assert "field 'a'" in check_record({"a": "x" * 11}, limits)
    # {"k":"vvvvv"} is 13 characters of compact JSON
    assert "13 characters" in check_record({"m": {"k": "vvvvv"}}, limits)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"max_field_chars": 0}, "max_field_chars must be a positive integer, got 0"),
    ({"max_field_chars": 1.5}, "max_field_chars must be a positive integer"),
    ({"max_depth": -1}, "max_depth must be a positive integer, got -1"),
    ({"max_depth": True}, "max_depth must be a positive integer"),
    ({"max_depth": 501}, "max_depth must be at most 500"),
])
def test_record_limits_refuse_bad_values(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        RecordLimits(**kwargs)


# ----------------------------------------------------------------------------- source ids


def _math_rows(rows: list[dict]) -> list[RawRecord]:
    return [RawRecord(i + 1, r, json.dumps(r)) for i, r in enumerate(rows)]


def test_same_source_id_with_different_text_keeps_the_first_and_rejects_the_rest():
    spec = SourceSpec(name="toy", split="test", answer_type="math", adapter=ad.adapt_math)
    rows = [
        {"problem": "What is 1+1?", "answer": "2", "unique_id": "u1"},
        {"problem": "What is 5+5?", "answer": "10", "unique_id": "u1"},  # conflict
        {"problem": "  what IS 1+1? ", "answer": "2", "unique_id": "u1"},  # same text: duplicate
        {"problem": "What is 3+3?", "answer": "6", "unique_id": "u2"},
        {"problem": "What is 4+4?", "answer": "8", "id": "u2"},  # other key: no conflict
        {"problem": "What is 7+7?", "answer": "14", "unique_id": "u2"},  # conflict
    ]
    result = build_rows(spec, _math_rows(rows), "mem")
    assert [p.answer for p in result.problems] == ["2", "6", "8"]
    assert result.duplicates == 1
    assert result.id_conflicts == 2 and result.counts()["id_conflicts"] == 2
    reasons = {r.line: r.reason for r in result.rejects}
    assert set(reasons) == {2, 6}
    first_id = problem_id("toy", "What is 1+1?")
    assert reasons[2].startswith("duplicate source id: unique_id='u1'")
    assert f"line 1 (problem {first_id})" in reasons[2]
    assert "line 4" in reasons[6]


def test_tir_records_with_the_same_id_and_different_problems_conflict():
    def record(problem: str, rid: str) -> dict:
        return {
            "id": rid,
            "debug_result": [{"role": "system", "content": "sys"},
                             {"role": "user", "content": problem},
                             {"role": "code", "content": "print(2+2)"},
                             {"role": "execution", "content": "4"},
                             {"role": "text", "content": "So \\boxed{4}"}],
            "ground_truth": {"answer": "4"},
            "completion": "4",
        }

    rows = [record("What is 2+2?", "a"), record("What is 2*2?", "a"), record("What is 2*2?", "b")]
    result = build_rows(TIR_SOURCES["mathcoder"], _math_rows(rows), "mem")
    assert [t.problem for t in result.trajectories] == ["What is 2+2?", "What is 2*2?"]
    assert result.id_conflicts == 1 and [r.line for r in result.rejects] == [2]
    assert "duplicate source id: id='a'" in result.rejects[0].reason


# ----------------------------------------------------------------------------- control chars


def _oracle_strip(text: str) -> tuple[str, int]:
    """Independent definition: CRLF/CR -> LF, then drop category Cc except tab and newline."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    kept = [ch for ch in text if unicodedata.category(ch) != "Cc" or ch in "\t\n"]
    return "".join(kept), len(text) - len(kept)


@pytest.mark.parametrize("text", [
    "plain text",
    "nul\x00inside",
    "bell\x07 and escape\x1b[31m",
    "keep\ttab\nand newline",
    "crlf\r\nand lone\rcr",
    "del\x7f and c1 \x80\x85\x9f",
    "not controls: \u200b\u202e\u00ad\u2028",
    "".join(chr(c) for c in range(0xA0)),
])
def test_strip_control_chars_matches_the_unicode_category(text):
    assert strip_control_chars(text) == _oracle_strip(text)


def test_control_characters_are_stripped_from_problem_text_and_counted(tmp_path):
    rows = [
        {"problem": "Wh\x00at is 2+2?\x07\n\tShow work.", "answer": "4"},  # 2 removed
        {"problem": "Clean problem", "answer": "1"},
        {"problem": "\x1bZero\x7f\x85 sum?", "answer": "0"},  # 3 removed
        {"problem": "Windows\r\nline ends", "answer": "5"},  # CR: line end, not counted
        {"problem": "\x00\x01\x02", "answer": "9"},  # nothing left: a reject
    ]
    path = _jsonl(tmp_path / "ctrl.jsonl", [json.dumps(r) for r in rows])
    result = _load(path)
    assert [p.problem for p in result.problems] == [
        "What is 2+2?\n\tShow work.", "Clean problem", "Zero sum?", "Windows\nline ends"]
    assert result.control_chars_stripped == 5 and result.control_char_rows == 2
    assert result.counts()["control_chars_stripped"] == 5
    assert [(r.line, r.reason) for r in result.rejects] == [(5, "missing problem text")]
    assert result.problems[0].problem_id == problem_id("toy", "What is 2+2?\n\tShow work.")


def test_control_characters_are_counted_per_source(tmp_path):
    a = _jsonl(tmp_path / "a.jsonl", [json.dumps({"problem": "A\x00\x00", "answer": "1"})])
    b = _jsonl(tmp_path / "b.jsonl", [json.dumps({"problem": "B", "answer": "1"})])
    assert (_load(a).control_chars_stripped, _load(b).control_chars_stripped) == (2, 0)


def test_latex_repairs_still_happen_and_only_stray_controls_are_counted():
    spec = SourceSpec(name="toy", split="test", answer_type="math",
                      adapter=ad.adapt_competition)
    rows = [{"problem": "Find \x0crac{1}{2} of fi\x0cve\x00 apples.", "answer": "2.5"}]
    result = build_rows(spec, _math_rows(rows), "mem")
    assert [p.problem for p in result.problems] == ["Find \\frac{1}{2} of five apples."]
    assert result.control_chars_stripped == 2  # the \x0c in "fi\x0cve" and the NUL


def test_trace_problem_text_is_cleaned_and_counted(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    row = {"instruction": "Comp\x00ute 1+1.", "output": "<think>1+1=2</think> \\boxed{2}"}
    deep = '{"instruction": ' + "[" * TOO_DEEP + "]" * TOO_DEEP + "}"
    _jsonl(folder / Path(TRACE_SOURCES["limo"].local_path).name, [json.dumps(row), deep])
    result = load_traces("limo", data_dir=tmp_path)
    assert [t.problem for t in result.traces] == ["Compute 1+1."]
    assert result.control_chars_stripped == 1 and result.control_char_rows == 1
    assert [r.line for r in result.rejects] == [2]
    assert "nested too deeply" in result.rejects[0].reason
    big = build_rows(TRACE_SOURCES["limo"], _math_rows([row]), "mem",
                     limits=RecordLimits(max_field_chars=5))
    assert big.traces == [] and "field 'instruction' is too large" in big.rejects[0].reason
