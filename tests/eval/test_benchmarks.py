"""The benchmark registry (eval.benchmarks) is read from the ingestion source rows, and a local
JSONL benchmark declared in a config file runs end to end: the registry and the default ingest
assets see it, its ``<name>_problems`` asset ingests it and ``eval.runner.evaluate`` grades it
against the fake LLM server, with scores computed here by hand."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eval import benchmarks
from pipelines.ingest import SOURCES, register_benchmark_file

ROOT = Path(__file__).resolve().parents[2]

ROWS = [
    {"qid": "t1", "question": "What is 6 times 7?", "gold": 42},
    {"qid": "t2", "question": "What is 1000 plus 234?", "gold": "1234"},
    {"qid": "t3", "question": "What is 2 minus 5?", "gold": "-3"},
    {"qid": "t4", "question": "", "gold": "0"},  # no problem text: a reject
]
CONFIG = """
benchmarks:
  - name: toy_arith
    path: toy_arith.jsonl
    fields: {problem: question, answer: gold, id: qid}
    grader: math
    prompt: "Compute: {problem} Put the result in \\\\boxed{{}}."
    k: 2
    normalizer: thousands
"""


@pytest.fixture
def config_file(tmp_path) -> Path:
    (tmp_path / "toy_arith.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    path = tmp_path / "benchmarks.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def registered(config_file):
    specs = register_benchmark_file(config_file)
    yield specs
    for spec in specs:  # leave the process-wide registries as they were
        del SOURCES[spec.name]
        benchmarks.BENCHMARKS.pop(spec.name, None)


def test_builtin_benchmarks_are_the_source_rows_that_declare_one():
    declared = {name for name, spec in SOURCES.items() if spec.benchmark is not None}
    assert declared == set(benchmarks.BENCHMARKS) == {
        "gsm8k", "math500", "minerva_math", "amc23", "aime24", "aime25", "olympiadbench",
        "gpqa_diamond", "humaneval", "mbppplus", "livecodebench"}
    expected = {  # name: (grader, default k, instruction, normaliser, private text)
        "gsm8k": ("math", 1, benchmarks.MATH_INSTRUCTION, True, False),
        "aime24": ("math", 8, benchmarks.MATH_INSTRUCTION, False, False),
        "amc23": ("math", 4, benchmarks.MATH_INSTRUCTION, False, False),
        "gpqa_diamond": ("choice", 1, benchmarks.CHOICE_INSTRUCTION, False, True),
        "humaneval": ("code", 1, benchmarks.FUNCTION_INSTRUCTION, False, False),
        "mbppplus": ("code", 1, benchmarks.TASK_INSTRUCTION, False, False),
        "livecodebench": ("code", 1, benchmarks.CONTEST_INSTRUCTION, False, False),
    }
    for name, (grader, k, template, normalised, private) in expected.items():
        bench = benchmarks.get(name)
        assert (bench.source, bench.grader, bench.default_k) == (name, grader, k), name
        assert bench.prompt_template == template and bench.private_text is private, name
        assert (bench.normalizer is not None) is normalised, name
    assert benchmarks.get("gsm8k").normalizer("It is 1,234,567.") == "It is 1234567."


def test_unknown_names_in_a_declaration_name_the_file_entry_and_field(config_file, tmp_path):
    from pipelines.ingest import read_benchmark_file

    (spec,) = read_benchmark_file(config_file)
    where = f"{config_file}, entry 1 ('toy_arith')"
    cases = [
        ({"prompt": "mathy"}, "prompt", "'mathy' is neither a named instruction"),
        ({"prompt": "Q {problem} {answer}"}, "prompt", "placeholder other than {problem}"),
        ({"normalizer": "commas"}, "normalizer",
         "unknown normaliser 'commas'; use one of thousands or none"),
        ({"grader": "regex"}, "grader", "unknown grader kind 'regex'"),
    ]
    for change, field, fragment in cases:
        bad = dataclasses.replace(spec, benchmark=dataclasses.replace(spec.benchmark, **change))
        with pytest.raises(ValueError) as info:
            benchmarks.from_source(bad)
        assert str(info.value).startswith(f"benchmark 'toy_arith' ({where}), field {field!r}: ")
        assert fragment in str(info.value)


def test_the_configured_file_reaches_the_registry_and_the_default_ingest_assets(config_file,
                                                                                 tmp_path):
    code = textwrap.dedent("""
        import json
        from assets import ingest
        from eval.benchmarks import BENCHMARKS
        bench = BENCHMARKS["toy_arith"]
        print(json.dumps({"k": bench.default_k, "grader": bench.grader,
                          "assets": [a.key.to_user_string() for a in ingest.SOURCE_ASSETS]}))
    """)
    env = {**os.environ, "WEFT_BENCHMARKS": str(config_file), "WEFT_HOME": str(tmp_path / "h")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert (seen["k"], seen["grader"]) == (2, "math")
    assert "toy_arith_problems" in seen["assets"] and "gsm8k_problems" in seen["assets"]


def test_a_bad_configured_file_registers_nothing_and_says_why(tmp_path):
    """The import goes on (the UI and every command still load) with a warning naming the
    problem; none of the file's benchmarks is registered (`weft` refuses to run, see
    tests/cli/test_benchmark_file_errors.py)."""
    path = tmp_path / "benchmarks.yaml"
    path.write_text("benchmarks:\n  - {name: toy, path: t.jsonl, fields: {problem: q}, "
                    "grader: math}\n")
    env = {**os.environ, "WEFT_BENCHMARKS": str(path)}
    code = "import pipelines.ingest as i; print(len(i.CONFIG_PROBLEMS), 'toy' in i.SOURCES)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "False"]
    assert f"{path}, entry 1 ('toy'), field 'fields.answer': missing" in done.stderr


def _responder(body, index):
    prompt = body["messages"][-1]["content"]
    assert prompt.startswith("Compute: ") and prompt.endswith(" Put the result in \\boxed{}.")
    if "6 times 7" in prompt:
        return "The product is \\boxed{42}."
    if "1000 plus 234" in prompt:
        return "The sum is \\boxed{1,234}."  # right only after the thousands normaliser
    return "\\boxed{-3}" if body.get("seed") == 0 else "\\boxed{3}"  # second sample wrong


def test_a_configured_benchmark_ingests_and_evaluates_end_to_end(registered, weft_home):
    import dagster as dg

    from assets.ingest import build_source_assets
    from assets.resources import WarehouseResource
    from eval.runner import EvalConfig, evaluate
    from pipelines.llm import LLMClient
    from pipelines.llm.testing import FakeLLMServer
    from warehouse import Warehouse

    (asset,) = build_source_assets(("toy_arith",))
    result = dg.materialize([asset], resources={"warehouse": WarehouseResource()},
                            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    rows = Warehouse().read("source_problems", partition="toy_arith").to_pylist()
    assert [(r["problem"], r["answer"], r["source"]) for r in rows] == [
        ("What is 6 times 7?", "42", "toy_arith"), ("What is 1000 plus 234?", "1234", "toy_arith"),
        ("What is 2 minus 5?", "-3", "toy_arith")]
    assert [json.loads(r["meta"])["original_id"] for r in rows] == ["t1", "t2", "t3"]
    rejects = Warehouse().read("rejects", partition="toy_arith").to_pylist()
    assert [(r["line"], r["reason"]) for r in rejects] == [
        (4, "missing problem text: field 'question' is absent or empty")]

    bench = benchmarks.get("toy_arith")
    cfg = EvalConfig(k=bench.default_k, temperature=0.5)

    async def go(server):
        client = LLMClient(server.base_url, "scripted", cache_path=weft_home / "cache.sqlite",
                           max_concurrency=4)
        try:
            return await evaluate(client, bench, rows, cfg, model_label="scripted")
        finally:
            await client.aclose()

    with FakeLLMServer(models=("scripted",), responder=_responder) as server:
        out = asyncio.run(go(server))
    correct = {(r["gold"], r["sample_index"]): r["correct"] for r in out.samples}
    assert correct == {("42", 0): True, ("42", 1): True, ("1234", 0): True, ("1234", 1): True,
                       ("-3", 0): True, ("-3", 1): False}
    scores = {(s["metric"], s["k"]): s["value"] for s in out.scores}
    assert scores[("avg@k", 2)] == pytest.approx((1 + 1 + 0.5) / 3)
    assert scores[("pass@k", 1)] == pytest.approx((1 + 1 + 0.5) / 3)
    assert scores[("pass@k", 2)] == pytest.approx(1.0)
