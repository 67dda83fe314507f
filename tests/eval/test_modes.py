"""Generation modes end to end through the real client, grader and sandbox, with a scripted
endpoint (exact expectations) — and reproducibility against the real local server."""

import asyncio
import json

import pytest

from eval.benchmarks import get
from eval.modes import ModeConfig
from eval.runner import EvalConfig, evaluate
from pipelines.llm import LLMClient
from pipelines.llm.testing import FakeLLMServer

PROBLEMS = [
    {"problem_id": "p1", "source": "gsm8k", "problem": "What is 6 times 7?", "answer": "42", "meta": "{}"},
    {"problem_id": "p2", "source": "gsm8k", "problem": "What is 10 plus 5?", "answer": "15", "meta": "{}"},
]
ANSWERS = {"6 times 7": "42", "10 plus 5": "15"}


def _answer(body):
    text = " ".join(m["content"] for m in body["messages"])
    return next(a for q, a in ANSWERS.items() if q in text)


def _run(server, bench, cfg, problems=PROBLEMS, sandbox=None, tmp_path=None, **kw):
    async def go():
        client = LLMClient(server.base_url, "scripted", cache_path=tmp_path / "cache.sqlite",
                           max_concurrency=4)
        try:
            return await evaluate(client, get(bench), problems, cfg, model_label="scripted",
                                  sandbox=sandbox, **kw)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_interleaved_grades_the_speak_projection_and_measures_latency(tmp_path, embedded_model_dir):
    def responder(body, index):
        return (f"<think>Multiply or add the numbers.</think><speak>The result is "
                f"\\boxed{{{_answer(body)}}}.</speak><think>Check: fine.</think>")

    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        cfg = EvalConfig(mode=ModeConfig(mode="interleaved", tokenizer_path=str(embedded_model_dir)))
        result = _run(server, "gsm8k", cfg, tmp_path=tmp_path)
        assert "<think>" in server.requests[0]["messages"][0]["content"]  # the SxS instruction
    assert [r["correct"] for r in result.samples] == [True, True]
    row = result.samples[0]
    assert row["mode"] == "interleaved" and row["ari"] > 0 and row["abo"] > 0
    # one speak block after one think block: AIRW is the length of that first think span
    assert row["airw"] == row["abo"] - 1
    assert row["reasoning_tokens"] > 0 and row["response_tokens"] > 0


def test_interleaved_does_not_grade_a_boxed_answer_left_in_the_think_channel(tmp_path, embedded_model_dir):
    def responder(body, index):
        return f"<think>It is \\boxed{{{_answer(body)}}}.</think><speak>I am not sure.</speak>"

    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        cfg = EvalConfig(mode=ModeConfig(mode="interleaved", tokenizer_path=str(embedded_model_dir)))
        result = _run(server, "gsm8k", cfg, tmp_path=tmp_path)
    assert [r["correct"] for r in result.samples] == [False, False]


def test_budgeted_mode_asks_each_budget_and_scores_per_budget(tmp_path):
    seen = []

    def responder(body, index):
        seen.append((body["messages"][-1]["content"], body["max_tokens"]))
        return f"\\boxed{{{_answer(body)}}}"

    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        cfg = EvalConfig(max_tokens=4096, mode=ModeConfig(mode="budgeted", budgets=(100, 400)))
        result = _run(server, "gsm8k", cfg, tmp_path=tmp_path)
    assert sorted(r["budget"] for r in result.samples) == [100, 100, 400, 400]
    # every budget is decoded with the same limit: 4 x the largest budget (eval.modes)
    assert [m for _, m in seen] == [1600] * 4
    texts = {t for t, _ in seen if "6 times 7" in t}
    assert len(texts) == 2  # different urgency instructions per budget
    metrics = {r["metric"] for r in result.scores}
    assert {"avg@k|budget=100", "avg@k|budget=400"} <= metrics


@pytest.mark.parametrize("policy", ["state_preserved", "state_discarded"])
def test_tool_mode_runs_code_in_a_session_and_feeds_the_output_back(tmp_path, policy):
    from pipelines.sandbox import SandboxPool

    def responder(body, index):
        last = body["messages"][-1]["content"]
        if "<interpreter>" in last:
            value = last.split("<interpreter>")[1].split("</interpreter>")[0].strip()
            return f"<think>The interpreter says {value}.</think><answer>\\boxed{{{value}}}</answer>"
        a, b = (6, 7) if "6 times 7" in last else (10, 5)
        op = "*" if a == 6 else "+"
        return f"<think>Compute it SECRET-THOUGHT.</think><code>x = {a} {op} {b}\nprint(x)</code>"

    with FakeLLMServer(models=("scripted",), responder=responder) as server, SandboxPool(workers=1) as pool:
        cfg = EvalConfig(mode=ModeConfig(mode="tool", context_policy=policy, max_turns=4))
        result = _run(server, "gsm8k", cfg, sandbox=pool, tmp_path=tmp_path)
        second_turns = [r for r in server.requests if len(r["messages"]) > 2]
    assert [r["correct"] for r in result.samples] == [True, True]
    assert all(r["turns"] == 2 and r["tool_errors"] == 0 for r in result.samples)
    assert all(r["context_policy"] == policy for r in result.samples)
    assistant = [m["content"] for r in second_turns for m in r["messages"] if m["role"] == "assistant"]
    assert assistant and all(("SECRET-THOUGHT" in a) == (policy == "state_preserved") for a in assistant)


def test_tool_mode_counts_errors_and_survives_nonsense(tmp_path):
    from pipelines.sandbox import SandboxPool

    def responder(body, index):
        if len(body["messages"]) <= 2:
            return "<think>Try.</think><code>print(undefined_name)</code>"
        return "I give up without any tags"

    with FakeLLMServer(models=("scripted",), responder=responder) as server, SandboxPool(workers=1) as pool:
        cfg = EvalConfig(mode=ModeConfig(mode="tool", max_turns=3))
        result = _run(server, "gsm8k", cfg, problems=PROBLEMS[:1], sandbox=pool, tmp_path=tmp_path)
    row = result.samples[0]
    assert row["tool_errors"] == 1 and row["format_errors"] == 1 and row["correct"] is False
    assert "NameError" in row["output"]


def test_code_benchmark_graded_in_the_sandbox(tmp_path, shared_data):
    from pipelines.ingest import load_source
    from pipelines.sandbox import SandboxPool

    problems = [p.to_row() for p in load_source("humaneval", limit=3).problems]
    canonical = {p["problem"]: p["problem"] + p["solution"] for p in problems}
    entry = {p["problem"]: json.loads(p["meta"])["entry_point"] for p in problems}

    def responder(body, index):
        prompt = body["messages"][-1]["content"]
        question = next(q for q in canonical if q in prompt)
        code = canonical[question]
        if body.get("seed") == 1:  # the second sample is deliberately wrong
            code += f"\n\ndef {entry[question]}(*args, **kwargs):\n    return None\n"
        return f"Here it is:\n```python\n{code}```"

    with FakeLLMServer(models=("scripted",), responder=responder) as server, SandboxPool(workers=2) as pool:
        cfg = EvalConfig(k=2, temperature=0.5)
        result = _run(server, "humaneval", cfg, problems=problems, sandbox=pool, tmp_path=tmp_path)
    by_index = {(r["problem_id"], r["sample_index"]): r for r in result.samples}
    assert all(by_index[(p["problem_id"], 0)]["correct"] for p in problems)
    assert not any(by_index[(p["problem_id"], 1)]["correct"] for p in problems)
    pass2 = next(s for s in result.scores if s["metric"] == "pass@k" and s["k"] == 2)
    assert pass2["value"] == 1.0


def test_thinking_caps_sweep_caps_each_generation(tmp_path):
    caps = []

    def responder(body, index):
        caps.append(body["max_tokens"])
        return f"\\boxed{{{_answer(body)}}}"

    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        cfg = EvalConfig(max_tokens=512, mode=ModeConfig(thinking_caps=(32, 128)))
        result = _run(server, "gsm8k", cfg, tmp_path=tmp_path)
    assert sorted(caps) == [32, 32, 128, 128]
    assert {r["thinking_cap"] for r in result.samples} == {32, 128}
    assert {"avg@k|thinking_cap=32", "avg@k|thinking_cap=128"} <= {s["metric"] for s in result.scores}


def test_single_mode_measures_latency_of_reason_then_answer(tmp_path, embedded_model_dir):
    """SxS Table 1 has single-mode rows too: <think>r</think>a is one think and one speak block,
    so AIRW (initial wait included) = reasoning tokens = ABO - 1, counted with the tokenizer."""
    from transformers import AutoTokenizer

    reasoning, said = "Six sevens are forty-two.", "The result is \\boxed{42}."

    def responder(body, index):
        return f"<think>{reasoning}</think>{said}" if "6 times 7" in str(body) else said

    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        cfg = EvalConfig(mode=ModeConfig(mode="single", tokenizer_path=str(embedded_model_dir)))
        result = _run(server, "gsm8k", cfg, tmp_path=tmp_path)
    tok = AutoTokenizer.from_pretrained(str(embedded_model_dir))
    r_len = len(tok.encode(reasoning, add_special_tokens=False))
    s_len = len(tok.encode(said, add_special_tokens=False))
    rows = {r["problem_id"]: r for r in result.samples}
    assert rows["p1"]["correct"] is True
    assert rows["p1"]["airw"] == r_len == rows["p1"]["reasoning_tokens"]
    assert rows["p1"]["abo"] == r_len + 1
    assert rows["p1"]["ari"] == pytest.approx(r_len + (s_len + 1) / 2)
    # no think tags: everything is visible from the first token
    assert (rows["p2"]["airw"], rows["p2"]["abo"]) == (0, 1)


def test_output_fields_hand_computed_with_whitespace_tokens():
    from eval.latency import WhitespaceTokenizer
    from eval.modes import output_fields

    out = output_fields("single", "<think>r1 r2 r3</think>The answer is 5", WhitespaceTokenizer())
    assert (out["airw"], out["abo"], out["ari"]) == (3, 4, (4 + 5 + 6 + 7) / 4)
    assert out["graded_text"] == "<think>r1 r2 r3</think>The answer is 5"
    assert "ari" not in output_fields("single", "x", None)  # no tokenizer, no latency
    assert "ari" not in output_fields("budgeted", "x", WhitespaceTokenizer())


def test_budgeted_prompts_use_the_papers_urgency_words_by_default():
    from eval.modes import Job, messages_for

    bench = get("gsm8k")
    job = Job(PROBLEMS[0], 0, budget=1000)
    text = messages_for(bench, job, ModeConfig(mode="budgeted"))[-1]["content"]
    assert text.endswith("\n\nNow time is urgent, please give me an answer immediately.")
    numeric = messages_for(bench, job, ModeConfig(mode="budgeted", budget_prompt="numeric"))
    assert "1000 tokens" in numeric[-1]["content"]
    with pytest.raises(ValueError, match="budget_prompt must be one of"):
        ModeConfig(budget_prompt="shout")


class _ScriptedClient:
    """Answers each chat call with the next scripted reply (tool mode without a server)."""

    def __init__(self, replies):
        self.replies = list(replies)

    async def chat(self, messages, params, **kwargs):
        from types import SimpleNamespace

        return [SimpleNamespace(text=self.replies.pop(0), prompt_tokens=1, completion_tokens=1,
                                latency_s=0.0, finish_reason="stop", error=None)]


@pytest.mark.parametrize("reply, correct", [
    ("<think>Done.</think><answer>42</answer>", True),  # no box: read as the tir reward reads it
    ("<think>Done.</think><answer>\\boxed{42}</answer>", True),
    ("The answer is \\boxed{42}", False),  # off-schema: no answer block, as in the reward
])
def test_tool_mode_grades_the_answer_block_like_the_tir_reward(reply, correct):
    from eval.modes import solve_with_tools
    from eval.runner import grade
    from pipelines.llm import SamplingParams
    from training.rewards import get_outcome_reward

    out = asyncio.run(solve_with_tools(_ScriptedClient([reply]), None, "q",
                                       params=SamplingParams(max_tokens=64),
                                       mode=ModeConfig(mode="tool"), tag="t", sample_index=0))
    row = {"problem_id": "p", "gold": "42", "gen_error": None, **out}
    grade([row], get("math500"))
    assert row["correct"] is correct
    assert (get_outcome_reward("tir")(completions=[reply], answer=["42"]) == [1.0]) is correct


@pytest.mark.server
def test_same_seed_reproduces_rows_and_scores_on_the_real_server(tmp_path, local_server, shared_data):
    from pipelines.ingest import load_source

    problems = [p.to_row() for p in load_source("gsm8k", limit=3).problems]
    cfg = EvalConfig(k=2, temperature=0.8, max_tokens=48, seed=11)

    def once(cache):
        async def go():
            client = LLMClient(local_server.base_url, local_server.served_name, max_concurrency=1,
                               cache_path=tmp_path / cache)
            try:
                return await evaluate(client, get("gsm8k"), problems, cfg, model_label="m")
            finally:
                await client.aclose()
        return asyncio.run(go())

    first, second = once("a.sqlite"), once("b.sqlite")  # separate caches: both really generate
    keep = ("problem_id", "sample_index", "output", "extracted", "correct", "completion_tokens")
    assert [{k: r[k] for k in keep} for r in first.samples] == [{k: r[k] for k in keep} for r in second.samples]
    assert [(s["metric"], s["k"], s["value"]) for s in first.scores] == [
        (s["metric"], s["k"], s["value"]) for s in second.scores]
    assert len({r["output"] for r in first.samples}) > 1  # sampling really varied across samples
