"""Generation modes end to end through the real client, grader and sandbox, with a scripted
endpoint (exact expectations) — and reproducibility against the real local server."""

import asyncio
import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from eval.benchmarks import Benchmark, get
from eval.modes import (
    BudgetedMode,
    Job,
    Mode,
    Run,
    SingleMode,
    ThinkingCaps,
    ToolMode,
    build_mode,
    register_mode,
)
from eval.runner import EvalConfig, evaluate
from pipelines.llm import LLMClient, SamplingParams
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
        cfg = EvalConfig(mode=build_mode(mode="interleaved", tokenizer_path=str(embedded_model_dir)))
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
        cfg = EvalConfig(mode=build_mode(mode="interleaved", tokenizer_path=str(embedded_model_dir)))
        result = _run(server, "gsm8k", cfg, tmp_path=tmp_path)
    assert [r["correct"] for r in result.samples] == [False, False]


def test_budgeted_mode_asks_each_budget_and_scores_per_budget(tmp_path):
    seen = []

    def responder(body, index):
        seen.append((body["messages"][-1]["content"], body["max_tokens"]))
        return f"\\boxed{{{_answer(body)}}}"

    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        cfg = EvalConfig(max_tokens=4096, mode=build_mode(mode="budgeted", budgets=(100, 400)))
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
        cfg = EvalConfig(mode=build_mode(mode="tool", context_policy=policy, max_turns=4))
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
        cfg = EvalConfig(mode=build_mode(mode="tool", max_turns=3))
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
        cfg = EvalConfig(max_tokens=512, mode=build_mode(thinking_caps=(32, 128)))
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
        cfg = EvalConfig(mode=build_mode(mode="single", tokenizer_path=str(embedded_model_dir)))
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


def test_latency_tokenizer_counts_like_transformers_without_importing_it(embedded_model_dir):
    """The evaluation reads the model folder's tokenizer.json with the tokenizers library (no
    transformers import, which costs more than a cached evaluation); its counts must equal
    transformers' own tokenizer's on every kind of text an answer holds."""
    from transformers import AutoTokenizer

    from eval.modes import load_tokenizer
    from eval.modes.single import FastTokenizer

    fast = load_tokenizer(str(embedded_model_dir))
    assert isinstance(fast, FastTokenizer)
    reference = AutoTokenizer.from_pretrained(str(embedded_model_dir))
    texts = ["Six sevens are forty-two.", "  leading and trailing spaces  ", "",
             "The result is \\boxed{\\frac{3}{4}} and $x^2 + y^2 = z^2$.",
             "<|im_start|>assistant\n<think>tags</think>", "naïve café — 42 × 7 ≈ 294 🙂",
             "line one\n\n\tline two\r\n", "def f(x):\n    return x ** 2\n" * 3]
    for text in texts:
        for special in (False, True):
            assert fast.encode(text, add_special_tokens=special) == reference.encode(
                text, add_special_tokens=special), (text, special)


def test_latency_columns_hand_computed_with_whitespace_tokens():
    from eval.latency import WhitespaceTokenizer
    from eval.modes import BudgetedMode, Job, Run, SingleMode

    run = Run(client=None, state={"tokenizer": WhitespaceTokenizer()})
    job = Job(PROBLEMS[0], 0)
    text = "<think>r1 r2 r3</think>The answer is 5"
    # think tokens 1-3, speak tokens 4-7: AIRW 3, ABO 4, ARI the mean of 4..7
    out = SingleMode(tokenizer_path="tok").sample_fields(run, job, {"output": text})
    assert (out["airw"], out["abo"], out["ari"]) == (3, 4, (4 + 5 + 6 + 7) / 4)
    assert (out["reasoning_tokens"], out["response_tokens"]) == (3, 4)
    assert SingleMode().graded_text(text) == text  # boxed format: the whole text is read
    assert SingleMode().sample_fields(Run(client=None), job, {"output": text}) == {}  # no tokenizer
    assert "ari" not in BudgetedMode().sample_fields(
        Run(client=None, state={"tokenizer": WhitespaceTokenizer(), "generation_limit": 9}), job,
        {"output": text, "completion_tokens": 4, "finish_reason": "stop"})


def test_budgeted_prompts_use_the_papers_urgency_words_by_default():
    from eval.modes import Job, messages_for

    bench = get("gsm8k")
    job = Job(PROBLEMS[0], 0, budget=1000)
    text = messages_for(bench, job, build_mode(mode="budgeted"))[-1]["content"]
    assert text.endswith("\n\nNow time is urgent, please give me an answer immediately.")
    numeric = messages_for(bench, job, build_mode(mode="budgeted", budget_prompt="numeric"))
    assert "1000 tokens" in numeric[-1]["content"]
    with pytest.raises(ValueError, match="budget_prompt must be one of"):
        build_mode(mode="budgeted", budget_prompt="shout")


class _ScriptedClient:
    """Answers each chat call with the next scripted reply (tool mode without a server)."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []

    async def chat(self, messages, params, **kwargs):
        from pipelines.llm import ChatResult

        self.requests.append((messages, params, kwargs.get("extra_body")))
        return [ChatResult(self.replies.pop(0), "stop", 1, 1, 0.0, False)]


@pytest.mark.parametrize("reply, correct", [
    ("<think>Done.</think><answer>42</answer>", True),  # no box: read as the tir reward reads it
    ("<think>Done.</think><answer>\\boxed{42}</answer>", True),
    ("The answer is \\boxed{42}", False),  # off-schema: no answer block, as in the reward
])
def test_tool_mode_grades_the_answer_block_like_the_tir_reward(reply, correct):
    from eval.modes import Run
    from eval.runner import grade
    from pipelines.llm import SamplingParams
    from training.rewards import get_outcome_reward

    out = asyncio.run(build_mode(mode="tool").solve(Run(_ScriptedClient([reply]), tag="t"), None,
                                                    "q", SamplingParams(max_tokens=64),
                                                    sample_index=0))
    row = {"problem_id": "p", "gold": "42", "gen_error": None, **out}
    grade([row], get("math500"))
    assert row["correct"] is correct
    assert (get_outcome_reward("tir")(completions=[reply], answer=["42"]) == [1.0]) is correct


@pytest.mark.server
def test_same_seed_reproduces_rows_and_scores_on_the_real_server(tmp_path, local_server, shared_data):
    from pipelines.ingest import load_source

    problems = [p.to_row() for p in load_source("gsm8k", limit=3).problems]
    cfg = EvalConfig(k=2, temperature=0.8, max_tokens=24, seed=11)

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


# ------------------------------------------------------------------ one class per mode, by hand
# Each mode's plan, messages, limit, graded text and own columns against values written out
# here (a toy benchmark whose prompt is "Q: <problem>").

TOY_BENCH = Benchmark("toy", "toy", "math", "Q: {problem}")
ASK_P1 = {"role": "user", "content": "Q: What is 6 times 7?"}


def _ids(jobs):
    return [(j.problem["problem_id"], j.index, j.budget, j.cap) for j in jobs]


def test_single_mode_class():
    mode = build_mode()
    assert isinstance(mode, SingleMode) and mode.mode == "single"
    assert _ids(mode.plan(PROBLEMS, 2)) == [("p1", 0, None, None), ("p1", 1, None, None),
                                            ("p2", 0, None, None), ("p2", 1, None, None)]
    assert mode.messages(TOY_BENCH, Job(PROBLEMS[0], 0)) == [ASK_P1]
    assert mode.max_tokens(Run(None), Job(PROBLEMS[0], 0), 300) == 300
    text = "<think>maybe \\boxed{1}</think>so \\boxed{4}"
    assert mode.graded_text(text) == text  # boxed: the grader reads the whole text
    assert mode.sample_fields(Run(None), Job(PROBLEMS[0], 0), {"output": text}) == {}


def test_interleaved_mode_class():
    from eval.latency import WhitespaceTokenizer
    from pipelines.formats import SXS_SYSTEM_PROMPT

    mode = build_mode(mode="interleaved")
    assert _ids(mode.plan(PROBLEMS, 1)) == [("p1", 0, None, None), ("p2", 0, None, None)]
    assert mode.messages(TOY_BENCH, Job(PROBLEMS[0], 0)) == [
        {"role": "system", "content": SXS_SYSTEM_PROMPT}, ASK_P1]
    text = "<think>a b</think><speak>c</speak><think>d</think><speak>e f</speak>"
    assert mode.graded_text(text) == "c\n\ne f"  # the speak projection
    assert mode.graded_text("<think>only \\boxed{4}</think>") == ""
    # think 1-2, speak 3, think 4, speak 5-6: ARI (3+5+6)/3, ABO (3+5)/2, AIRW (2+1)/2
    out = mode.sample_fields(Run(None, state={"tokenizer": WhitespaceTokenizer()}),
                             Job(PROBLEMS[0], 0), {"output": text})
    assert (out["ari"], out["abo"], out["airw"], out["airw_between"]) == (14 / 3, 4, 1.5, 1)
    assert (out["reasoning_tokens"], out["response_tokens"]) == (3, 3)


def test_budgeted_mode_class():
    mode = build_mode(mode="budgeted", budgets=[400, 100])
    assert mode.budgets == (400, 100)
    assert _ids(mode.plan(PROBLEMS[:1], 2)) == [("p1", 0, 400, None), ("p1", 1, 400, None),
                                                ("p1", 0, 100, None), ("p1", 1, 100, None)]
    urgent = "Q: What is 6 times 7?\n\nNow time is urgent, please give me an answer immediately."
    relaxed = ("Q: What is 6 times 7?\n\nNow there is a lot of time for you to think, please "
               "think carefully and give me an answer.")
    job100, job400 = Job(PROBLEMS[0], 0, budget=100), Job(PROBLEMS[0], 0, budget=400)
    assert mode.messages(TOY_BENCH, job100) == [{"role": "user", "content": urgent}]
    assert mode.messages(TOY_BENCH, job400) == [{"role": "user", "content": relaxed}]
    # one limit for every budget: 4 x 400 = 1600, capped by a 1000-token context minus the
    # longest prompt (its UTF-8 bytes + 128 template tokens)
    run = Run(None, bench=TOY_BENCH, context_window=lambda: 1000)
    asyncio.run(mode.prepare(run, mode.plan(PROBLEMS[:1], 1)))
    limit = 1000 - (len(relaxed.encode()) + 128)
    assert mode.max_tokens(run, job100, 5) == mode.max_tokens(run, job400, 5) == limit
    fields = mode.sample_fields(run, job100, {"completion_tokens": 10, "finish_reason": "stop"})
    assert fields == {"generation_limit": limit, "tokens_used": 9}  # the EOS is not counted
    assert mode.run_extra([]) == {}
    extra = mode.run_extra([{"generation_limit": 300}, {"generation_limit": None}])
    assert extra["budget_generation_limit"] == 300
    assert "below the largest budget 400" in extra["budget_limit_warning"]


def test_tool_mode_class():
    mode = build_mode(mode="tool", context_policy="state_discarded", max_turns=2)
    assert isinstance(mode, ToolMode) and (mode.context_policy, mode.max_turns) == (
        "state_discarded", 2)
    assert _ids(mode.plan(PROBLEMS[:1], 1)) == [("p1", 0, None, None)]
    assert mode.messages(TOY_BENCH, Job(PROBLEMS[0], 0)) == [ASK_P1]  # the row's prompt
    assert mode.graded_text("<answer>1</answer> then <answer>7</answer>") == "\\boxed{7}"
    assert mode.graded_text("<answer>\\boxed{3}</answer>") == "\\boxed{3}"
    assert mode.graded_text("\\boxed{3} without a block") == ""
    assert mode.sample_fields(Run(None), Job(PROBLEMS[0], 0), {}) == {
        "context_policy": "state_discarded"}
    with pytest.raises(ValueError, match="tool mode needs a sandbox"):
        asyncio.run(mode.prepare(Run(None), []))
    # two code turns and no answer: the turn limit ends the sample; the session keeps x
    from pipelines.sandbox import SandboxPool

    replies = ["<think>a</think><code>x = 1", "<think>b</think><code>x += 1\nprint(x)"]
    with SandboxPool(workers=1) as pool:
        session = pool.session()
        try:
            out = asyncio.run(mode.solve(Run(_ScriptedClient(replies)), session, "q",
                                         SamplingParams(max_tokens=64), sample_index=0))
        finally:
            session.close()
    assert out["turns"] == 2 and out["graded_text"] == "" and out["tool_errors"] == 0
    assert out["output"].count("</code>") == 2  # the stopped blocks were closed
    assert out["output"].endswith("<interpreter>\n2\n</interpreter>")


def test_thinking_caps_class():
    from eval.modes import NO_THINKING

    mode = build_mode(mode="single", thinking_caps=[0, 64])
    assert isinstance(mode, ThinkingCaps) and mode.inner == SingleMode() and mode.mode == "single"
    assert mode.thinking_caps == (0, 64)
    assert _ids(mode.plan(PROBLEMS, 1)) == [("p1", 0, None, 0), ("p2", 0, None, 0),
                                            ("p1", 0, None, 64), ("p2", 0, None, 64)]
    assert Job(PROBLEMS[0], 1, cap=64).variant == 1 + 7 * 64  # its own cache entry
    assert mode.messages(TOY_BENCH, Job(PROBLEMS[0], 0, cap=0)) == [ASK_P1]
    # cap 0: the answer continues an empty, closed thinking block
    client = _ScriptedClient(["\\boxed{42}"])
    out = asyncio.run(mode.generate(Run(client), Job(PROBLEMS[0], 0, cap=0), [ASK_P1],
                                    SamplingParams(max_tokens=64)))
    assert out["output"] == "<think>\n\n</think>\n\\boxed{42}" == NO_THINKING + "\\boxed{42}"
    ((messages, params, body),) = client.requests  # one request: the continuation
    assert messages == [ASK_P1, {"role": "assistant", "content": "<think>\n\n</think>\n"}]
    assert body["continue_final_message"] is True and params.max_tokens == 64
    assert build_mode(mode="tool", thinking_caps=(16,)).max_turns == 6  # the inner mode's
    with pytest.raises(ValueError, match="thinking caps apply to the modes"):
        build_mode(mode="handoff", thinking_caps=(16,))


def test_handoff_mode_class(tmp_path):
    from eval.handoff_team import HandoffTeam

    mode = build_mode(mode="handoff", handoff_partner="jr", handoff_starts="junior")
    assert _ids(mode.plan(PROBLEMS[:1], 2)) == [("p1", 0, None, None), ("p1", 1, None, None)]
    assert mode.messages(TOY_BENCH, Job(PROBLEMS[0], 0)) == [ASK_P1]
    assert mode.graded_text("a\n\n\\boxed{2}") == "a\n\n\\boxed{2}"
    team = HandoffTeam(_ScriptedClient(["So \\boxed{42}"]), _ScriptedClient(["J step\n\n"]))
    run = Run(team, tag="t")
    asyncio.run(mode.prepare(run, []))
    out = asyncio.run(mode.generate(run, Job(PROBLEMS[0], 0), [ASK_P1],
                                    SamplingParams(max_tokens=64, seed=0)))
    assert out["output"] == "J step\n\nSo \\boxed{42}" and out["segment_authors"] == "JS"
    assert out["partner"] == "jr" and out["handoff_starts"] == "junior"
    with pytest.raises(TypeError, match="HandoffTeam"):
        asyncio.run(mode.prepare(Run(_ScriptedClient([])), []))


def test_a_setting_of_another_mode_is_refused_with_the_mode_that_takes_it():
    with pytest.raises(ValueError, match="budgets is a setting of mode 'budgeted', not of mode "
                                         "'single'"):
        build_mode(budgets=(100,))
    with pytest.raises(ValueError, match="handoff_p is a setting of mode 'handoff', not of "
                                         "mode 'budgeted'"):
        build_mode(mode="budgeted", handoff_p=0.2)
    with pytest.raises(ValueError, match="context_policy is a setting of mode 'tool'"):
        build_mode(mode="interleaved", context_policy="state_discarded")
    with pytest.raises(TypeError, match="unknown mode setting 'temperature'"):
        build_mode(mode="single", temperature=0.5)
    with pytest.raises(ValueError, match="mode must be one of"):
        build_mode(mode="beam")
    # what the eval_samples asset passes: every field, those of other modes at their defaults,
    # and the model's folder as tokenizer_path (ignored by modes without latency metrics)
    flat = {"budgets": (1000, 2000, 4000, 8000), "budget_limit": None, "thinking_caps": (),
            "context_policy": "state_preserved", "max_turns": 6, "tokenizer_path": "/m",
            "budget_prompt": "urgency"}
    assert build_mode(mode="tool", **flat) == ToolMode()
    assert build_mode(mode="budgeted", **flat) == BudgetedMode()
    assert build_mode(mode="single", **flat) == SingleMode(tokenizer_path="/m")


def test_greedy_decoding_uses_top_p_one(tmp_path):
    assert EvalConfig(temperature=0.0, top_p=0.95).top_p == 1.0
    assert EvalConfig(temperature=0, top_p=0.5).top_p == 1.0
    assert EvalConfig(k=2, temperature=0.6, top_p=0.95).top_p == 0.95
    with FakeLLMServer(models=("scripted",), responder=lambda b, i: "\\boxed{1}") as server:
        _run(server, "gsm8k", EvalConfig(temperature=0.0, top_p=0.95), tmp_path=tmp_path)
        greedy = [r["top_p"] for r in server.requests]
    with FakeLLMServer(models=("scripted",), responder=lambda b, i: "\\boxed{1}") as server:
        _run(server, "gsm8k", EvalConfig(temperature=0.7, top_p=0.9), tmp_path=tmp_path)
        sampled = [r["top_p"] for r in server.requests]
    assert greedy == [1.0, 1.0] and sampled == [0.9, 0.9]


# ------------------------------------------------------------------ a new mode is one class


@register_mode
@dataclass(frozen=True)
class ShoutMode(Mode):
    """A toy mode: the prompt in capitals with a suffix, two samples per problem whatever k
    is, the text after the last "ANSWER:" graded, the suffix and the run's size recorded."""

    name: ClassVar[str] = "shout"
    suffix: str = "!"

    def plan(self, problems, k):
        return [Job(p, i) for p in problems for i in range(2)]

    def messages(self, bench, job):
        return [{"role": "user", "content": bench.render(job.problem).upper() + self.suffix}]

    def graded_text(self, output):
        return "\\boxed{" + output.rpartition("ANSWER:")[2].strip() + "}"

    def sample_fields(self, run, job, row):
        return {"suffix": self.suffix}

    def run_extra(self, rows):
        return {"shouted": len(rows)}


def test_a_new_mode_registered_as_one_class_runs_end_to_end(tmp_path):
    asks = []

    def responder(body, index):
        ask = body["messages"][-1]["content"]
        asks.append(ask)
        # p1: the box is right and so is the shouted answer; p2: the box is right but the
        # text after ANSWER: (what this mode grades) is wrong
        return "\\boxed{41} ANSWER: 42" if "6 TIMES 7" in ask else "\\boxed{15} ANSWER: 16"

    cfg = EvalConfig(mode=build_mode(mode="shout", suffix="?"))
    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        result = _run(server, "gsm8k", cfg, tmp_path=tmp_path)
    # capitals plus the configured suffix (the problems end with "?" of their own)
    assert sorted(a.rpartition("\n\n")[2] for a in asks) == [
        "WHAT IS 10 PLUS 5??", "WHAT IS 10 PLUS 5??", "WHAT IS 6 TIMES 7??", "WHAT IS 6 TIMES 7??"]
    rows = sorted(result.samples, key=lambda r: (r["problem_id"], r["sample_index"]))
    assert [(r["problem_id"], r["sample_index"], r["correct"]) for r in rows] == [
        ("p1", 0, True), ("p1", 1, True), ("p2", 0, False), ("p2", 1, False)]
    assert all(r["mode"] == "shout" and r["suffix"] == "?" for r in rows)
    assert result.extra["shouted"] == 4
    avg = next(s for s in result.scores if s["metric"] == "avg@k")
    assert (avg["value"], avg["k"]) == (0.5, 2)
