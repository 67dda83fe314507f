"""What an evaluation records about how it was scored and what its generation cost.

``eval.runner.evaluate`` against a real in-process fake server (``pipelines.llm.testing``)
whose replies show their working but never state a final answer: the strict rule credits none
of them, the flexible rule (last number) credits all. The client's response cache is a real
SQLite file; the re-run replays from it and must report no generation speed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eval.benchmarks import get
from eval.runner import EvalConfig, evaluate, grade, score
from pipelines.llm import LLMClient, run
from pipelines.llm.testing import FakeLLMServer

PROBLEMS = [{"problem_id": f"p{i}", "problem": f"What is {i} + 40?", "answer": str(i + 40),
             "source": "gsm8k"} for i in range(3)]


def _reply(body: dict, index: int) -> str:
    i = int(re.search(r"What is (\d+) \+ 40\?", body["messages"][-1]["content"]).group(1))
    return f"Adding the two numbers: {i} + 40 = {i + 40}"


def _evaluate(client: LLMClient, extraction: str, lines: list[str]):
    return run(evaluate(client, get("gsm8k"), PROBLEMS, EvalConfig(extraction=extraction),
                        model_label="m", progress=lines.append))


def test_rule_is_recorded_and_a_cached_rerun_reports_no_throughput(tmp_path: Path):
    # by hand: "Adding the two numbers: 0 + 40 = 40" is 9 whitespace words, the fake
    # server's token count
    reply_tokens = [len(_reply({"messages": [{"content": p["problem"]}]}, 0).split())
                    for p in PROBLEMS]
    assert reply_tokens == [9, 9, 9]
    with FakeLLMServer(responder=_reply) as server:
        client = LLMClient(server.base_url, "fake-model", cache_path=tmp_path / "c.sqlite")
        lines: list[str] = []
        first = _evaluate(client, "flexible", lines)
        assert [r["correct"] for r in first.samples] == [True, True, True]
        assert {r["extraction_rule"] for r in first.samples} == {"flexible"}
        assert {s["extraction_rule"] for s in first.scores} == {"flexible"}
        avg = next(s for s in first.scores if s["metric"] == "avg@k")
        assert avg["value"] == 1.0
        assert first.usage.generated_tokens == 27 and first.usage.cache_hits == 0
        assert first.usage.generated_calls == 3 and first.usage.generating_s > 0
        generated = next(m for m in lines if m.startswith("generated 3 samples"))
        assert "27 tokens generated in" in generated and "0 cache hits" in generated

        lines.clear()
        again = _evaluate(client, "strict", lines)
        assert server.chat_count == 3  # every answer replayed
        assert [r["correct"] for r in again.samples] == [False, False, False]
        assert {r["extraction_rule"] for r in again.samples} == {"strict"}
        assert {s["extraction_rule"] for s in again.scores} == {"strict"}
        assert again.usage.generated_tokens == 0 and again.usage.tokens_per_s is None
        assert (again.usage.cache_hits, again.usage.cached_tokens) == (3, 27)
        generated = next(m for m in lines if m.startswith("generated 3 samples"))
        assert "nothing generated" in generated and "3 cache hits (27 tokens replayed)" in generated
        assert "tokens/s)" not in generated


def test_unknown_rule_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="strict, flexible"):
        EvalConfig(extraction="last-number")


def test_rows_of_two_rules_are_not_scored_together():
    rows = [{"problem_id": "p", "sample_index": 0, "correct": True, "extracted": "1",
             "extraction_rule": "strict"},
            {"problem_id": "q", "sample_index": 0, "correct": True, "extracted": "1",
             "extraction_rule": "flexible"}]
    with pytest.raises(ValueError, match="different extraction rules"):
        score(rows, model_label="m", benchmark="gsm8k")


def test_the_rule_applies_to_math_only():
    rows = [{"problem_id": "p", "gold": "B", "output": "The answer is 3. \\boxed{B}",
             "gen_error": None}]
    grade(rows, get("gpqa_diamond"), extraction="flexible")
    assert rows[0]["correct"] is True and rows[0]["extraction_rule"] is None


def test_an_evaluation_is_planned_once(monkeypatch):
    """``plan_evaluation`` makes the plan (limit applied, one job per problem x sample) and
    ``evaluate`` given that plan generates exactly its jobs without planning again."""
    from eval.modes.single import SingleMode
    from eval.runner import plan_evaluation

    calls = []
    original = SingleMode.plan

    def counted(self, problems, k):
        calls.append(len(problems))
        return original(self, problems, k)

    monkeypatch.setattr(SingleMode, "plan", counted)
    cfg = EvalConfig(k=2, temperature=0.7, limit=2)
    plan = plan_evaluation(PROBLEMS, cfg)
    assert [p["problem_id"] for p in plan.problems] == ["p0", "p1"]
    assert [(j.problem["problem_id"], j.index) for j in plan.jobs] == [
        ("p0", 0), ("p0", 1), ("p1", 0), ("p1", 1)]
    assert calls == [2]
    with FakeLLMServer(responder=_reply) as server:
        client = LLMClient(server.base_url, "fake-model")
        result = run(evaluate(client, get("gsm8k"), PROBLEMS, cfg, model_label="m", plan=plan))
        assert server.chat_count == 4
    assert calls == [2]  # not planned a second time
    assert sorted((r["problem_id"], r["sample_index"]) for r in result.samples) == [
        ("p0", 0), ("p0", 1), ("p1", 0), ("p1", 1)]
