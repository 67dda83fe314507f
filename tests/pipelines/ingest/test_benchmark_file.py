"""Local JSONL benchmarks from a config file (pipelines.ingest.benchmark_file): what an entry
becomes, the field-mapping adapter, and a clear error for every kind of bad entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.ingest import (
    SOURCES,
    BenchmarkFileError,
    RawRecord,
    benchmark_file,
    build_rows,
    read_benchmark_file,
    register_benchmark_file,
)
from pipelines.ingest import adapters as ad


def _write(folder: Path, text: str) -> Path:
    path = folder / "benchmarks.yaml"
    path.write_text(text)
    return path


GOOD = """
benchmarks:
  - name: toy
    path: data/toy.jsonl
    fields: {problem: question, answer: gold, id: qid}
    grader: choice
    k: 3
"""


def test_an_entry_becomes_a_source_row_with_its_benchmark(tmp_path):
    (spec,) = read_benchmark_file(_write(tmp_path, GOOD))
    assert (spec.name, spec.split, spec.answer_type) == ("toy", "test", "multiple_choice")
    assert spec.local_path == str(tmp_path / "data" / "toy.jsonl")  # relative to the file
    assert spec.default_ingest is True and spec.hf_id is None
    use = spec.benchmark
    assert (use.grader, use.prompt, use.k, use.normalizer) == ("choice", "choice", 3, None)
    assert use.declared_in == f"{tmp_path / 'benchmarks.yaml'}, entry 1 ('toy')"
    assert spec.adapter == ad.FieldMap(problem="question", answer="gold", id="qid")
    assert "toy" not in SOURCES  # reading registers nothing


def test_field_map_reads_nested_fields_numbers_and_ids():
    fields = ad.FieldMap(problem="q.text", answer="gold", id="meta.id", solution="why")
    parsed = fields({"q": {"text": "Two plus two?"}, "gold": 4.0, "meta": {"id": 7}, "why": "2+2"})
    assert parsed == ad.Parsed(problem="Two plus two?", answer="4", solution="2+2",
                               meta={"original_id": 7})
    with pytest.raises(ad.RowError, match="missing answer: field 'gold' is absent or empty"):
        fields({"q": {"text": "x"}})
    with pytest.raises(ad.RowError, match="missing problem text: field 'q.text'"):
        fields({"q": "not an object", "gold": "1"})
    with pytest.raises(ad.RowError, match="field 'meta.id' .*should be text or a number"):
        fields({"q": {"text": "x"}, "gold": "1", "meta": {"id": [1]}})


def test_field_map_ids_take_part_in_the_id_conflict_check(tmp_path):
    (spec,) = read_benchmark_file(_write(tmp_path, GOOD))
    rows = [{"question": "A?", "gold": "A", "qid": "q1"}, {"question": "B?", "gold": "B", "qid": "q1"}]
    result = build_rows(spec, [RawRecord(i, r, "") for i, r in enumerate(rows, 1)], "mem")
    assert [p.problem for p in result.problems] == ["A?"] and result.id_conflicts == 1
    assert result.rejects[0].reason.startswith("duplicate source id: original_id='q1'")


@pytest.mark.parametrize("entry, field, fragment", [
    ("{name: toy, path: t.jsonl, fields: {problem: q}, grader: math}", "fields.answer",
     "missing; name the record's field"),
    ("{name: toy, path: t.jsonl, fields: {problem: q, answer: a, gold: g}, grader: math}",
     "fields.gold", "unknown key; use problem, answer, id, solution"),
    ("{name: toy, path: t.jsonl, fields: [q, a], grader: math}", "fields", "not a mapping"),
    ("{name: toy, path: t.jsonl, fields: {problem: q, answer: a}, grader: math, k: 0}", "k",
     "should be a whole number >= 1, got 0"),
    ("{name: toy, path: t.jsonl, fields: {problem: q, answer: a}, grader: math, k: true}", "k",
     "should be a whole number >= 1, got True"),
    ("{name: toy, path: t.jsonl, fields: {problem: q, answer: a}, grader: maths}", "grader",
     "'maths' cannot be declared in a config file; use one of math, choice"),
    ("{name: toy, path: t.jsonl, fields: {problem: q, answer: a}, grader: code}", "grader",
     "code benchmarks need an adapter that keeps their tests"),
    ("{name: toy, path: t.jsonl, fields: {problem: q, answer: a}}", "grader", "missing"),
    ("{name: toy, path: t.csv, fields: {problem: q, answer: a}, grader: math}", "path",
     "'t.csv' is not one of .jsonl"),
    ("{name: toy, path: t.jsonl, fields: {problem: q, answer: a}, grader: math, prompts: x}",
     "prompts", "unknown field; the fields are name, path"),
    ("{name: toy, path: t.jsonl, fields: {problem: q, answer: a}, grader: math, k: 1, default_ingest: 2}",
     "default_ingest", "should be true or false"),
    ("{name: toy, path: t.jsonl, fields: {problem: q, answer: a}, grader: math, prompt: ''}",
     "prompt", "should be non-empty text"),
])
def test_a_bad_entry_names_the_file_the_entry_and_the_field(tmp_path, entry, field, fragment):
    path = _write(tmp_path, f"benchmarks:\n  - {entry}\n")
    with pytest.raises(BenchmarkFileError) as info:
        read_benchmark_file(path)
    assert str(info.value).startswith(f"{path}, entry 1 ('toy'), field {field!r}: ")
    assert fragment in str(info.value)


@pytest.mark.parametrize("name, fragment", [
    ("bad-name", "'bad-name' is not a name of letters, digits and _"),
    ("gsm8k|x", "is not a name of letters"),
])
def test_names_must_make_asset_and_partition_keys(tmp_path, name, fragment):
    path = _write(tmp_path, f"benchmarks:\n  - {{name: '{name}', path: t.jsonl, "
                            "fields: {problem: q, answer: a}, grader: math}\n")
    with pytest.raises(BenchmarkFileError, match="field 'name': ") as info:
        read_benchmark_file(path)
    assert fragment in str(info.value)


@pytest.mark.parametrize("text, fragment", [
    ("benchmarks: [\n", "not valid YAML"),
    ("- name: toy\n", "should hold one key, 'benchmarks'"),
    ("benchmarks: {name: toy}\n", "'benchmarks' should be a list of entries"),
    ("benchmarks:\n  - just text\n", "entry 1: should be a mapping"),
])
def test_a_bad_file_names_the_file(tmp_path, text, fragment):
    path = _write(tmp_path, text)
    with pytest.raises(BenchmarkFileError) as info:
        read_benchmark_file(path)
    assert str(info.value).startswith(str(path)) and fragment in str(info.value)


def test_names_are_unique_and_nothing_is_registered_from_a_bad_file(tmp_path):
    twice = GOOD + "  - {name: toy, path: u.jsonl, fields: {problem: q, answer: a}, grader: math}\n"
    with pytest.raises(BenchmarkFileError, match=r"entry 2 \('toy'\), field 'name': also used "
                                                 "by entry 1"):
        read_benchmark_file(_write(tmp_path, twice))
    taken = GOOD + "  - {name: gsm8k, path: u.jsonl, fields: {problem: q, answer: a}, grader: math}\n"
    with pytest.raises(BenchmarkFileError, match=r"entry 2 \('gsm8k'\), field 'name': 'gsm8k' is "
                                                 "already a registered source"):
        register_benchmark_file(_write(tmp_path, taken))
    assert "toy" not in SOURCES  # the good first entry was not registered either


def test_which_file_is_read(tmp_path, monkeypatch):
    monkeypatch.delenv("WEFT_BENCHMARKS", raising=False)
    monkeypatch.setenv("WEFT_HOME", str(tmp_path / "home"))
    assert benchmark_file() is None
    (tmp_path / "home").mkdir()
    default = _write(tmp_path / "home", GOOD)
    assert benchmark_file() == default
    other = tmp_path / "mine.yaml"
    other.write_text(GOOD)
    monkeypatch.setenv("WEFT_BENCHMARKS", str(other))
    assert benchmark_file() == other
    monkeypatch.setenv("WEFT_BENCHMARKS", str(tmp_path / "missing.yaml"))
    with pytest.raises(BenchmarkFileError, match="WEFT_BENCHMARKS=.*missing.yaml does not name a "
                                                 "file; create it .* or unset WEFT_BENCHMARKS"):
        benchmark_file()


def test_an_empty_file_declares_nothing(tmp_path):
    assert read_benchmark_file(_write(tmp_path, "")) == []
    assert read_benchmark_file(_write(tmp_path, json.dumps({"benchmarks": []}))) == []
