"""Tests for pipelines.ingest.sources and pipelines.ingest.adapters: real shared files, bad input,
dedup, stable ids, offline hub behaviour and the reasoning-gym generator."""

from __future__ import annotations

import ast
import gzip
import json
import math
import socket
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from pipelines.ingest import (
    REDACTED,
    SOURCES,
    HubUnavailableError,
    IngestError,
    Problem,
    Registry,
    load_file,
    load_hf_records,
    load_source,
    probe_endpoint,
    problem_id,
)
from pipelines.ingest import adapters as ad
from pipelines.settings import data_dir
from pipelines.text import normalize_problem_text


@pytest.fixture(scope="module")
def shared() -> Path:
    found = data_dir()
    if found is None or not (found / "benchmarks").is_dir():
        pytest.skip("no shared data directory: set WEFT_DATA_DIR to a copy of ../shared/data")
    return found


_CACHE: dict[str, object] = {}


def _load(name: str, **kwargs):
    key = f"{name}:{sorted(kwargs.items())}"
    if key not in _CACHE:
        _CACHE[key] = load_source(name, **kwargs)
    return _CACHE[key]


# ----------------------------------------------------------------------------- real files

# (problems, rejects, duplicates, excluded) observed on the shared files. Rejects in DAPO and
# DeepScaleR are later copies of a problem whose answer differs from the first copy.
EXPECTED_COUNTS = {
    "gsm8k": (1319, 0, 0, 0),
    "math500": (500, 0, 0, 0),
    "minerva_math": (272, 0, 0, 0),
    "amc23": (40, 0, 0, 0),
    "aime24": (30, 0, 0, 0),
    "aime25": (30, 0, 0, 0),
    "olympiadbench": (675, 0, 0, 0),
    "gpqa_diamond": (198, 0, 0, 0),
    "humaneval": (164, 0, 0, 0),
    "mbppplus": (378, 0, 0, 0),
    "livecodebench": (279, 0, 0, 0),
    "gsm8k_train": (7473, 0, 0, 0),
    "math_train": (4500, 0, 0, 500),
    "dapo_math_17k": (17183, 12, 722, 0),
    "deepscaler": (1877, 8, 115, 0),
}


def test_every_file_source_is_covered_by_the_count_table():
    file_sources = {name for name, spec in SOURCES.items() if spec.local_path}
    assert file_sources == set(EXPECTED_COUNTS)


@pytest.mark.parametrize("name", sorted(EXPECTED_COUNTS))
def test_shared_file_loads_with_expected_counts(shared, name):
    result = _load(name)
    counts = (len(result.problems), len(result.rejects), result.duplicates, result.excluded)
    assert counts == EXPECTED_COUNTS[name]
    assert result.origin == str(shared / SOURCES[name].local_path)
    spec = SOURCES[name]
    ids = [p.problem_id for p in result.problems]
    assert len(set(ids)) == len(ids)
    for p in result.problems:
        assert p.answer.strip() and p.problem.strip()
        assert p.source == spec.source and p.split == spec.split
        assert p.problem_id == problem_id(spec.source, p.problem)
        assert isinstance(json.loads(p.meta), dict)
    for r in result.rejects:
        assert "different answer" in r.reason and r.line > 0


def test_row_shapes(shared):
    p = _load("gsm8k").problems[0]
    row = p.to_row()
    assert list(row) == [
        "problem_id",
        "source",
        "split",
        "problem",
        "answer",
        "solution",
        "answer_type",
        "meta",
    ]
    reject = _load("dapo_math_17k").rejects[0].to_row()
    assert list(reject) == ["source", "origin", "line", "reason", "raw"]
    assert len(reject["raw"]) <= 500


def test_gsm8k_answers_and_solutions(shared):
    first = _load("gsm8k").problems[0]
    assert first.answer == "18"
    assert "<<" not in first.solution and "####" not in first.solution
    assert first.solution.endswith("$18 every day at the farmer’s market.")
    train = _load("gsm8k_train").problems
    assert train[0].answer == "72"
    answers = {p.answer for p in train}
    assert "1080" in answers and "850000" in answers  # written "1,080" / "850,000" in the file
    assert "2125" in {p.answer for p in _load("gsm8k").problems}
    assert all(a.lstrip("-").isdigit() for a in answers)
    # test and train share the "gsm8k" id namespace
    assert train[0].source == first.source == "gsm8k"


def test_competition_answers(shared):
    assert _load("amc23").problems[0].answer == "27"
    assert not any(a.endswith(".0") for a in (p.answer for p in _load("amc23").problems))
    aime24 = [p.answer for p in _load("aime24").problems]
    raw = [json.loads(line)["answer"] for line in (shared / "benchmarks/aime24.jsonl").open()]
    assert raw[24] == "033" and aime24[24] == "33"
    assert raw[7] == "025" and aime24[7] == "25"
    assert _load("aime25").problems[0].answer == "70"


def test_aime25_latex_escapes_repaired(shared):
    problems = _load("aime25").problems
    assert not any(ch in p.problem for p in problems for ch in "\x0c\x08")
    assert any("\\frac{\\log" in p.problem for p in problems)
    assert any("$\\triangle" in p.problem for p in problems)


def test_math_and_minerva_answers(shared):
    math500 = _load("math500").problems
    raw = [json.loads(line) for line in (shared / "benchmarks/math500.jsonl").open()]
    assert [p.answer for p in math500] == [r["answer"] for r in raw]
    assert math500[0].meta_dict() == {
        "level": 2,
        "subject": "Precalculus",
        "unique_id": "test/precalculus/807.json",
    }
    assert _load("minerva_math").problems[0].answer == "1.6"
    train = _load("math_train").problems
    assert train[0].answer == "2" and train[0].meta_dict() == {
        "level": 3,
        "subject": "Algebra",
        "original_id": 0,
        "decontaminated_against": ["math500"],
    }
    held_out = {normalize_problem_text(p.problem) for p in math500}
    assert not any(normalize_problem_text(p.problem) in held_out for p in train)


def test_math_train_without_decontamination_keeps_all(shared):
    result = load_source("math_train", decontaminate=False)
    assert len(result.problems) == 5000 and result.excluded == 0
    assert "decontaminated_against" not in result.problems[0].meta_dict()


def test_olympiadbench_list_answers(shared):
    problems = _load("olympiadbench").problems
    assert problems[0].answer == "2" and problems[0].answer_type == "math"
    assert problems[1].answer == "\\frac{1}{2 n+2}"
    assert problems[13].answer == "69,84" and problems[13].answer_type == "list"
    assert problems[5].answer == "(1,8,19), (2,7,13), (4,5,7)"
    assert not any("$" in p.answer for p in problems)
    assert Counter(p.answer_type for p in problems) == {"math": 581, "list": 94}
    units = [p.meta_dict().get("unit") for p in problems if p.meta_dict().get("unit")]
    assert "km/h" in units and len(units) == 8


def test_gpqa_letters_and_no_plain_text_leaks(shared):
    problems = _load("gpqa_diamond").problems
    assert Counter(p.answer for p in problems) == {"A": 53, "C": 52, "D": 51, "B": 42}
    assert all(p.answer_type == "multiple_choice" for p in problems)
    assert all("\nA) " in p.problem and "\nD) " in p.problem for p in problems)
    # repr must not carry question text into logs or assertion messages
    assert problems[0].problem[:30] not in repr(problems[0])


def test_code_sources_keep_what_grading_needs(shared):
    he = _load("humaneval").problems[0]
    meta = he.meta_dict()
    assert meta["entry_point"] == "has_close_elements" and "def check(candidate)" in meta["test"]
    assert he.answer.lstrip().startswith("for idx, elem in enumerate(numbers)")
    assert he.answer_type == "code"
    mb = _load("mbppplus").problems[0].meta_dict()
    assert mb["entry_point"] == "similar_elements" and mb["atol"] == 0
    assert mb["base_input"][0] == [[3, 4, 5, 6], [5, 7, 4, 10]] and len(mb["plus_input"]) > 10
    lcb = _load("livecodebench").problems
    assert all(p.answer == ad.LCB_ANSWER_SENTINEL for p in lcb)
    modes = Counter(p.meta_dict()["mode"] for p in lcb)
    assert modes == {"stdin": 175, "functional": 104}
    first = lcb[0].meta_dict()
    assert first["n_tests"] == len(first["tests"]) == 14
    assert first["tests"][0] == {"input": "4\n8 2 5 1\n", "output": "3\n", "testtype": "stdin"}


def test_dapo_and_deepscaler(shared):
    dapo = _load("dapo_math_17k").problems
    assert dapo[0].answer == "34" and dapo[0].problem.startswith("In triangle $ABC$")
    assert not any(ch in p.problem for p in dapo for ch in "\x0c\x0b\x08\x01")
    assert sum("\\frac{m}{n}" in p.problem for p in dapo) > 500
    assert dapo[0].meta_dict()["original_id"] == 0
    deep = _load("deepscaler").problems
    assert deep[0].answer == "-\\frac{2}{3}"
    # bracketed answers are intervals, not lists: kept as written
    assert {p.answer for p in deep if p.answer.startswith("[")} == {
        "[\\frac{5}{12},\\frac{2}{3}]",
        "[201,400]",
    }


def test_limit_caps_records(shared):
    result = load_source("gsm8k", limit=7)
    assert len(result.problems) == 7
    assert [p.problem_id for p in result.problems] == [
        p.problem_id for p in _load("gsm8k").problems[:7]
    ]
    assert len(load_source("dapo_math_17k", limit=5).problems) == 5
    assert len(load_source("livecodebench", limit=3).problems) == 3


def test_problem_ids_are_stable_across_runs(shared):
    assert problem_id("gsm8k", "What is 1+1?") == "a4310ac5a38a7e37"
    assert problem_id("gsm8k", "  what IS   1+1? ") == "a4310ac5a38a7e37"
    assert problem_id("math500", "What is 1+1?") != "a4310ac5a38a7e37"
    assert _load("gsm8k").problems[0].problem_id == "3b81fd8c5709ac48"
    again = load_source("gsm8k")
    assert [p.to_row() for p in again.problems] == [p.to_row() for p in _load("gsm8k").problems]


# ----------------------------------------------------------------------------- bad input


def _write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_malformed_lines_become_rejects_and_good_lines_load(tmp_path):
    path = _write_lines(
        tmp_path / "mixed.jsonl",
        [
            json.dumps({"problem": "What is 2+2?", "answer": "4"}).encode(),
            b'{"problem": "broken", "answer": ',
            json.dumps({"problem": "No answer here", "solution": "none"}).encode(),
            b"",
            '{"problem": "Caf\xe9 problem", "answer": "1"}'.encode("latin-1"),
            b"[1, 2, 3]",
            json.dumps(
                {"problem": "What is 3+3?", "answer": "", "solution": "so \\boxed{6}"}
            ).encode(),
            json.dumps({"problem": "  ", "answer": "5"}).encode(),
        ],
    )
    result = load_file(path, ad.adapt_math, source="toy", split="test", answer_type="math")
    assert [(p.problem, p.answer) for p in result.problems] == [
        ("What is 2+2?", "4"),
        ("What is 3+3?", "6"),
    ]
    reasons = {r.line: r.reason for r in result.rejects}
    assert set(reasons) == {2, 3, 5, 6, 8}
    assert reasons[2].startswith("line 2 is not valid JSON")
    assert reasons[3].startswith("missing answer")
    assert "not valid UTF-8" in reasons[5] and "0xe9" in reasons[5]
    assert "JSON list" in reasons[6]
    assert reasons[8] == "missing problem text"
    assert all(r.origin == str(path) and r.source == "toy" for r in result.rejects)
    assert "broken" in next(r.raw for r in result.rejects if r.line == 2)


def test_non_utf8_files(tmp_path):
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(
        "\n".join(
            json.dumps(
                {"problem": f"Combien font {i}+{i} ? é", "answer": str(2 * i)}, ensure_ascii=False
            )
            for i in range(3)
        ).encode("latin-1")
    )
    result = load_file(latin, ad.adapt_math, source="toy", split="test", answer_type="math")
    assert result.problems == [] and [r.line for r in result.rejects] == [1, 2, 3]
    assert all("not valid UTF-8" in r.reason for r in result.rejects)

    whole = tmp_path / "latin.json"
    whole.write_bytes(
        json.dumps([{"problem": "é", "answer": "1"}], ensure_ascii=False).encode("latin-1")
    )
    result = load_file(whole, ad.adapt_math, source="toy", split="test", answer_type="math")
    assert result.problems == [] and len(result.rejects) == 1
    assert (
        result.rejects[0].line == -1 and "the file is not valid UTF-8" in result.rejects[0].reason
    )


def test_other_local_formats(tmp_path):
    rows = [{"problem": f"What is {i}*2?", "answer": str(2 * i)} for i in range(4)]
    (tmp_path / "a.json").write_text(json.dumps({"data": rows}))
    with gzip.open(tmp_path / "b.json.gz", "wt") as handle:
        json.dump(rows, handle)
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as handle:
        handle.write("\n".join(json.dumps(r) for r in rows))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    for name in ("a.json", "b.json.gz", "c.jsonl.gz", "d.parquet"):
        result = load_file(
            tmp_path / name, ad.adapt_math, source="toy", split="train", answer_type="math"
        )
        assert [p.answer for p in result.problems] == ["0", "2", "4", "6"], name
        assert result.rejects == []
    (tmp_path / "e.json").write_text(json.dumps({"rows": rows}))
    result = load_file(
        tmp_path / "e.json", ad.adapt_math, source="toy", split="train", answer_type="math"
    )
    assert result.problems == [] and "expected a JSON list" in result.rejects[0].reason


def test_whole_file_damage_raises_clear_errors(tmp_path):
    (tmp_path / "bad.jsonl.gz").write_bytes(b"this is not gzip data")
    with pytest.raises(IngestError, match="could not be read.*re-download"):
        load_file(
            tmp_path / "bad.jsonl.gz", ad.adapt_math, source="t", split="test", answer_type="math"
        )
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 nope")
    with pytest.raises(IngestError, match="not a readable Parquet file"):
        load_file(
            tmp_path / "bad.parquet", ad.adapt_math, source="t", split="test", answer_type="math"
        )
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(IngestError, match="unsupported file type"):
        load_file(
            tmp_path / "data.csv", ad.adapt_math, source="t", split="test", answer_type="math"
        )
    with pytest.raises(IngestError, match="does not exist"):
        load_file(
            tmp_path / "missing.jsonl", ad.adapt_math, source="t", split="test", answer_type="math"
        )


def test_deduplication_keeps_first_and_flags_conflicts(tmp_path):
    path = _write_lines(
        tmp_path / "dups.jsonl",
        [
            json.dumps({"problem": "What is 2+2?", "answer": "4"}).encode(),
            json.dumps({"problem": "  what IS 2+2? ", "answer": "4"}).encode(),
            json.dumps({"problem": "What is 2+2?", "answer": "5"}).encode(),
            json.dumps({"problem": "What is 3+3?", "answer": "6"}).encode(),
        ],
    )
    result = load_file(path, ad.adapt_math, source="toy", split="test", answer_type="math")
    assert [p.answer for p in result.problems] == ["4", "6"]
    assert result.duplicates == 1
    assert len(result.rejects) == 1 and result.rejects[0].line == 3
    assert (
        "different answer" in result.rejects[0].reason
        and result.problems[0].problem_id in result.rejects[0].reason
    )


def test_gpqa_rejects_are_redacted(tmp_path):
    path = tmp_path / "benchmarks" / "gpqa_diamond.jsonl.gz"
    path.parent.mkdir()
    with gzip.open(path, "wt") as handle:
        handle.write(
            json.dumps({"question": "SECRET QUESTION\nA) 1\nB) 2\nC) 3\nD) 4", "answer": "E"})
            + "\n"
        )
        handle.write("{not json SECRET\n")
    result = load_source("gpqa_diamond", data_dir=tmp_path)
    assert result.problems == [] and len(result.rejects) == 2
    assert all(r.raw == REDACTED for r in result.rejects)
    assert "one letter A-D" in result.rejects[1].reason
    assert not any("SECRET" in r.reason for r in result.rejects)


# ----------------------------------------------------------------------------- adapters


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (27.0, "27"),
        ("27.0", "27"),
        (0.5, "0.5"),
        ("033", "33"),
        ("0", "0"),
        ("1,234", "1234"),
        ("-0.50", "-0.5"),
        (" 12 ", "12"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),
        (-1.0, "-1"),
        (7, "7"),
    ],
)
def test_normalize_numeric_answer(value, expected):
    assert ad.normalize_numeric_answer(value) == expected


def test_normalize_numeric_answer_rejects_non_finite():
    with pytest.raises(ad.RowError, match="not finite"):
        ad.normalize_numeric_answer(float("nan"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the form \x0crac{m}{n}", "the form \\frac{m}{n}"),
        ("$\triangle ABC$", "$\\triangle ABC$"),
        ("fi\x0cve women", "five women"),
        ("a\tb", "a\tb"),
        ("$a \x14\\le b$", "$a \\le b$"),
    ],
)
def test_clean_math_text(text, expected):
    assert ad.clean_math_text(text) == expected


def test_olympiadbench_adapter_list_text_and_images():
    parsed = ad.adapt_olympiadbench(
        {
            "question": "Q?",
            "final_answer": "['$\\\\frac{1}{2}$', '$3$']",
            "is_multiple_answer": True,
            "unit": "cm",
        }
    )
    assert parsed.answer == "\\frac{1}{2}, 3"
    assert ad.olympiadbench_answer_type(parsed) == "list" and parsed.meta["unit"] == "cm"
    with_context = ad.adapt_olympiadbench(
        {"question": "Find x.", "context": "Let x=2.", "final_answer": ["2"]}
    )
    assert (
        with_context.problem == "Let x=2.\n\nFind x." and with_context.meta["has_context"] is True
    )
    with pytest.raises(ad.RowError, match="needs an image"):
        ad.adapt_olympiadbench({"question": "See <image_1>. Find x.", "final_answer": ["1"]})
    with pytest.raises(ad.RowError, match="needs an image"):
        ad.adapt_olympiadbench(
            {"question": "Find x.", "final_answer": ["1"], "image_1": "<png bytes>"}
        )
    with pytest.raises(ad.RowError, match="not a list literal"):
        ad.adapt_olympiadbench({"question": "Find x.", "final_answer": "['unclosed"})
    with pytest.raises(ad.RowError, match="missing answer"):
        ad.adapt_olympiadbench({"question": "Find x.", "final_answer": []})


def test_gsm8k_adapter_rejections():
    with pytest.raises(ad.RowError, match="no '#### <number>'"):
        ad.adapt_gsm8k({"question": "q", "answer": "just text"})
    with pytest.raises(ad.RowError, match="missing answer"):
        ad.adapt_gsm8k({"question": "q", "answer": ""})
    assert ad.adapt_gsm8k({"question": "q", "answer": "a <<1+1=2>>2\n#### 1,000"}).answer == "1000"


def test_gpqa_hub_layout_is_deterministic_and_correct():
    record = {
        "Question": "Which is right?",
        "Correct Answer": "right",
        "Incorrect Answer 1": "w1",
        "Incorrect Answer 2": "w2",
        "Incorrect Answer 3": "w3",
    }
    first, second = ad.adapt_gpqa(record), ad.adapt_gpqa(dict(record))
    assert first == second and first.answer in "ABCD"
    assert f"\n{first.answer}) right" in first.problem
    with pytest.raises(ad.RowError, match="one letter"):
        ad.adapt_gpqa({"question": "q", "answer": "maybe"})
    assert ad.adapt_gpqa({"question": "q", "answer": "(c)"}).answer == "C"


def test_dapo_template_is_stripped_and_deepscaler_arrays_joined():
    head = ad._DAPO_HEAD
    record = {
        "prompt": [
            {
                "role": "user",
                "content": f"{head}\n\nWhat is 1+1?\n\n"
                'Remember to put your answer on its own line after "Answer:".',
            }
        ],
        "reward_model": {"ground_truth": "2"},
    }
    assert ad.adapt_dapo(record).problem == "What is 1+1?"
    with pytest.raises(ad.RowError, match="missing answer"):
        ad.adapt_dapo(
            {"prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": ""}}
        )
    with pytest.raises(ad.RowError, match="no user message"):
        ad.adapt_dapo(
            {"prompt": [{"role": "system", "content": "x"}], "reward_model": {"ground_truth": "1"}}
        )
    assert ad.adapt_deepscaler({"question": "q", "ground_truth": '["1", "2"]'}).answer == "1, 2"
    assert ad.adapt_deepscaler({"question": "q", "ground_truth": "[0,1)"}).answer == "[0,1)"


# ----------------------------------------------------------------------------- registry


def test_registry_refuses_duplicates():
    registry = Registry()
    registry["a"] = 1
    with pytest.raises(KeyError, match="already registered"):
        registry["a"] = 2


def test_registry_files_exist_and_hub_ids_are_named(shared):
    for name, spec in SOURCES.items():
        if spec.local_path:
            assert (shared / spec.local_path).is_file(), name
    assert SOURCES["gsm8k"].hf_id == "openai/gsm8k" and SOURCES["gsm8k"].hf_configs == ("main",)
    assert SOURCES["gpqa_diamond"].hf_configs == ("gpqa_diamond",)
    assert SOURCES["math_train"].exclude_sources == ("math500",)
    with pytest.raises(KeyError, match="unknown source 'nope'"):
        load_source("nope")
    with pytest.raises(ValueError, match="prefer"):
        load_source("gsm8k", prefer="cloud")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- hub (offline)


def _import_datasets_first() -> None:
    """Import `datasets` before HF_HUB_OFFLINE is set, so this test does not switch the
    library's import-time offline flag for every later test in the session."""
    import datasets  # noqa: F401


def test_hf_loader_fails_fast_offline(monkeypatch, tmp_path):
    _import_datasets_first()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WEFT_HOME", str(tmp_path / "home"))
    with pytest.raises(HubUnavailableError) as info:
        load_hf_records("openai/gsm8k", "main", "test")
    message = str(info.value)
    assert "openai/gsm8k" in message and "WEFT_DATA_DIR" in message
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.arrow"))


def test_hf_loader_in_library_offline_mode_uses_only_the_cache(monkeypatch, tmp_path):
    import datasets
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("WEFT_HOME", str(tmp_path / "home"))
    with pytest.raises(HubUnavailableError, match="offline mode.*not in the local cache"):
        load_hf_records("openai/gsm8k", "main", "test")


def test_hf_probe_blocks_unreachable_endpoint(monkeypatch, tmp_path):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WEFT_HOME", str(tmp_path / "home"))
    with pytest.raises(HubUnavailableError, match=f"127.0.0.1:{port} did not answer"):
        load_hf_records("openai/gsm8k", "main", "test")


def test_probe_endpoint_sees_a_listening_socket():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert probe_endpoint(f"http://127.0.0.1:{port}") is None
    assert probe_endpoint(f"http://127.0.0.1:{port}") is not None
    assert "not a URL" in probe_endpoint("nonsense")


def test_load_source_fallback_error_names_the_file(monkeypatch, tmp_path):
    _import_datasets_first()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WEFT_HOME", str(tmp_path / "home"))
    with pytest.raises(IngestError) as info:
        load_source("gsm8k", data_dir=tmp_path)
    message = str(info.value)
    assert "benchmarks/gsm8k_test.jsonl" in message and "WEFT_DATA_DIR" in message
    assert "hub:" in message
    with pytest.raises(IngestError, match="no Hugging Face id"):
        load_source("livecodebench", data_dir=tmp_path)


def test_hub_path_with_a_fake_hub(monkeypatch, tmp_path):
    """The hub branch of load_source: configs concatenated, limit, origin, decontamination."""
    calls = []

    def fake_hub(dataset_id, config, split, *, limit=None):
        calls.append((dataset_id, config, split, limit))
        if dataset_id == "HuggingFaceH4/MATH-500":
            return [{"problem": "Shared problem", "answer": "1", "solution": ""}]
        rows = [
            {"problem": f"{config} problem", "solution": "so \\boxed{7}", "level": "Level 2"},
            {"problem": "Shared problem", "solution": "\\boxed{1}", "level": "Level 1"},
        ]
        return rows[:limit] if limit is not None else rows

    monkeypatch.setattr("pipelines.ingest.core.load_hf_records", fake_hub)
    result = load_source("math_train", prefer="hf", data_dir=tmp_path)
    assert result.origin == "hf://EleutherAI/hendrycks_math/test"
    assert [p.problem for p in result.problems][:2] == [
        "algebra problem",
        "counting_and_probability problem",
    ]
    # every copy of the MATH-500 problem is excluded, before deduplication
    assert len(result.problems) == 7 and result.excluded == 7 and result.duplicates == 0
    assert {p.answer for p in result.problems} == {"7"}
    assert calls[0] == ("EleutherAI/hendrycks_math", "algebra", "test", None)
    limited = load_source(
        "math_train", prefer="hf", data_dir=tmp_path, limit=3, decontaminate=False
    )
    assert [p.problem for p in limited.problems] == [
        "algebra problem",
        "Shared problem",
        "counting_and_probability problem",
    ]
    assert [c[3] for c in calls[-2:]] == [3, 1]


@pytest.mark.network
def test_hf_loader_real_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("WEFT_HOME", str(tmp_path / "home"))
    result = load_source("gsm8k", prefer="hf", limit=5)
    assert len(result.problems) == 5 and result.origin.startswith("hf://openai/gsm8k")
    assert result.problems[0].answer == "18"


# ----------------------------------------------------------------------------- reasoning-gym


def _exact(expr: str) -> Fraction:
    """Evaluate + - * / on integer literals exactly (independent check of the generator)."""

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp):
            left, right = walk(node.left), walk(node.right)
            ops = {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}
            if isinstance(node.op, ast.Div):
                return left / right
            return ops[type(node.op)]
        raise ValueError(f"unexpected node {ast.dump(node)}")

    return walk(ast.parse(expr, mode="eval"))


def test_reasoning_gym_is_deterministic_and_exact():
    first = load_source("reasoning_gym", limit=60, seed=3)
    again = load_source("reasoning_gym", limit=60, seed=3)
    other = load_source("reasoning_gym", limit=60, seed=4)
    assert [p.to_row() for p in first.problems] == [p.to_row() for p in again.problems]
    assert [p.problem for p in first.problems] != [p.problem for p in other.problems]
    assert len(first.problems) == 60 and first.rejects == []
    tasks = Counter(p.meta_dict()["task"] for p in first.problems)
    assert tasks == {
        t: 10
        for t in (
            "basic_arithmetic",
            "chain_sum",
            "gcd",
            "lcm",
            "fraction_simplification",
            "products",
        )
    }
    for p in first.problems:
        meta = p.meta_dict()
        md = meta["task_metadata"]
        if meta["task"] == "gcd":
            assert p.answer == str(math.gcd(*md["numbers"]))
        elif meta["task"] == "lcm":
            assert p.answer == str(math.lcm(*md["numbers"]))
        elif meta["task"] == "fraction_simplification":
            frac = Fraction(md["numerator"], md["denominator"])
            assert f"{frac.numerator}" in p.answer and f"{frac.denominator}" in p.answer
            assert "$" not in p.answer
        else:
            value = _exact(md["expression"])
            assert value.denominator == 1 and p.answer == str(value.numerator)
        assert p.source == "reasoning_gym" and p.split == "train"


def test_reasoning_gym_default_count_is_unique():
    result = load_source("reasoning_gym")
    assert len(result.problems) == 1000
    assert len({normalize_problem_text(p.problem) for p in result.problems}) == 1000


def test_problem_repr_hides_text():
    p = Problem("id", "s", "test", "a very secret question", "A", "", "multiple_choice")
    assert "secret" not in repr(p) and "22 chars" in repr(p)
