"""Budgeted evaluation (Engagement Process §5.3, App. F) and thinking-cap cost-effectiveness
(DeepTool §3.5, Eq. 12): one decoding limit for every budget, Acc@B regardless of length,
budget tokens without the EOS (evaluation and RL reward), Eq. 12 on the shared problems.

Expected values are worked out by hand in the comments (closed forms), not taken from the code.
"""

import asyncio
import json
import logging
import math

import pytest

from eval import runner
from eval.benchmarks import get
from eval.budget import (
    accuracy_at_b,
    budget_curve,
    budget_score_rows,
    eff_curve,
    eff_score_rows,
    thinking_budget_sweep,
)
from eval.modes import budget_generation_limit, budget_limit_warning, budget_tokens_used, build_mode
from eval.runner import EvalConfig, evaluate
from pipelines.llm import LLMClient
from pipelines.llm.testing import FakeLLMServer

PROBLEMS = [
    {"problem_id": "p1", "source": "gsm8k", "problem": "What is 6 times 7?", "answer": "42",
     "meta": "{}"},
    {"problem_id": "p2", "source": "gsm8k", "problem": "What is 10 plus 5?", "answer": "15",
     "meta": "{}"},
]
ANSWERS = {"6 times 7": "42", "10 plus 5": "15"}


def _answer(body):
    text = " ".join(m["content"] for m in body["messages"])
    return next(a for q, a in ANSWERS.items() if q in text)


def _run(server, cfg, tmp_path):
    async def go():
        client = LLMClient(server.base_url, "scripted", cache_path=tmp_path / "cache.sqlite",
                           max_concurrency=4)
        try:
            return await evaluate(client, get("gsm8k"), PROBLEMS, cfg, model_label="scripted")
        finally:
            await client.aclose()

    return asyncio.run(go())


# ================================================================ item 12: one decoding limit


@pytest.mark.parametrize("budgets, limit, context, prompt, expected", [
    ((1000, 2000, 4000, 8000), None, None, 0, 32000),  # 4 x 8000 (the paper decodes to 32,768)
    ((100, 400), None, None, 0, 1600),
    ((100, 400), 5000, None, 0, 5000),  # explicit limit
    ((1000, 8000), None, 4096, 596, 3500),  # the room the context leaves: 4096 - 596
    ((100, 400), 300, 4096, 96, 300),  # explicit and below the context room
])
def test_budget_generation_limit_closed_forms(budgets, limit, context, prompt, expected):
    mode = build_mode(mode="budgeted", budgets=budgets, budget_limit=limit)
    assert budget_generation_limit(mode, context, prompt) == expected


def test_budget_generation_limit_rejects_a_full_context_and_bad_limits():
    with pytest.raises(ValueError, match="longer context"):
        budget_generation_limit(build_mode(mode="budgeted", budgets=(100,)), 512, 600)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="budget_limit must be a positive token count"):
            build_mode(mode="budgeted", budgets=(100,), budget_limit=bad)


def test_warning_only_when_the_limit_is_below_the_largest_budget():
    mode = build_mode(mode="budgeted", budgets=(100, 400))
    assert budget_limit_warning(mode, 400) is None
    assert budget_limit_warning(mode, 1600) is None
    text = budget_limit_warning(mode, 399)
    assert "399" in text and "400" in text and "budget_limit" in text


def _truncating_responder(seen, words_before_answer):
    """Like a server: the reply is cut at max_tokens words (the fake counts words as tokens).
    Each answer is `words_before_answer` filler words and then the boxed answer."""

    def responder(body, index):
        seen.append((body["messages"][-1]["content"], body["max_tokens"]))
        words = ["step"] * words_before_answer + [f"\\boxed{{{_answer(body)}}}"]
        return " ".join(words[:body["max_tokens"]])

    return responder


def test_every_budget_is_decoded_with_the_same_limit_and_acc_ignores_length(tmp_path):
    # Each answer is 200 words: 199 filler words, then the boxed answer. Budgets 100 and 400;
    # the one limit is 4 x 400 = 1600, so nothing is cut. By hand, per budget:
    #   Acc@100 = 1 (both correct, length ignored), BS@100 = 0 (200 > 100), Tok@100 = 200
    #   Acc@400 = 1, BS@400 = 1 (200 <= 400), Tok@400 = 200
    # The old per-budget cap (1.5 x B = 150 at B=100) cut the answer off: Acc@100 was 0.
    seen = []
    with FakeLLMServer(models=("scripted",),
                       responder=_truncating_responder(seen, 199)) as server:
        cfg = EvalConfig(mode=build_mode(mode="budgeted", budgets=(100, 400),
                                         usage_counts_eos=False))
        result = _run(server, cfg, tmp_path)
    assert sorted(m for _, m in seen) == [1600] * 4
    assert {r["generation_limit"] for r in result.samples} == {1600}
    assert {r["tokens_used"] for r in result.samples} == {200}
    assert result.extra["budget_generation_limit"] == 1600
    assert result.extra["budget_limit_warning"] is None
    rows = [(r["problem_id"], r["budget"], r["correct"], r["tokens_used"]) for r in result.samples]
    curve = {p.budget: p for p in budget_curve(rows, n_boot=200)}
    assert (curve[100].accuracy, curve[100].success, curve[100].mean_tokens) == (1.0, 0.0, 200.0)
    assert (curve[400].accuracy, curve[400].success, curve[400].mean_tokens) == (1.0, 1.0, 200.0)
    avg = {s["metric"]: s["value"] for s in result.scores if s["metric"].startswith("avg@k")}
    assert avg == {"avg@k|budget=100": 1.0, "avg@k|budget=400": 1.0}  # Acc@B in eval_scores


def test_a_limit_below_the_largest_budget_is_used_for_all_budgets_and_warned(tmp_path, caplog):
    seen = []
    with FakeLLMServer(models=("scripted",), responder=_truncating_responder(seen, 0)) as server:
        cfg = EvalConfig(mode=build_mode(mode="budgeted", budgets=(100, 400), budget_limit=300))
        with caplog.at_level(logging.WARNING, logger="eval.runner"):
            result = _run(server, cfg, tmp_path)
    assert sorted(m for _, m in seen) == [300] * 4
    assert "below the largest budget 400" in result.extra["budget_limit_warning"]
    assert any("below the largest budget" in r.getMessage() for r in caplog.records)


def test_the_models_context_caps_the_limit(tmp_path, monkeypatch):
    # a server reporting a 1000-token context: limit = 1000 - (longest prompt's UTF-8 bytes
    # + 128 template tokens), the same for both budgets
    monkeypatch.setattr(runner, "served_context_window", lambda client: 1000)
    seen = []
    with FakeLLMServer(models=("scripted",), responder=_truncating_responder(seen, 0)) as server:
        cfg = EvalConfig(mode=build_mode(mode="budgeted", budgets=(100, 400)))
        _run(server, cfg, tmp_path)
    longest = max(len(text.encode()) for text, _ in seen)  # one user message per request
    assert {m for _, m in seen} == {1000 - longest - 128}


def test_served_context_window_reads_vllms_max_model_len(monkeypatch):
    import pipelines.llm as endpoint

    body = {"object": "list", "data": [{"id": "other", "max_model_len": 99},
                                       {"id": "m", "object": "model", "max_model_len": 4096}]}
    monkeypatch.setattr(endpoint, "get_models", lambda url, key, timeout_s=5.0: (
        200, json.dumps(body).encode()))
    client = LLMClient("http://127.0.0.1:9/v1", "m")
    assert runner.served_context_window(client) == 4096
    body["data"][1].pop("max_model_len")  # an OpenAI-style listing without it
    assert runner.served_context_window(client) is None
    monkeypatch.setattr(endpoint, "get_models", lambda url, key, timeout_s=5.0: (404, b""))
    assert runner.served_context_window(client) is None


def test_accuracy_at_b_counts_long_correct_answers():
    # p1 correct with 5000 tokens under budget 1000 counts for Acc@1000 (not for BS@1000)
    rows = [("p1", 1000, True, 5000), ("p2", 1000, False, 10)]
    assert accuracy_at_b(rows)[1000].value == 0.5


# ============================================================ item 13: tokens without the EOS


@pytest.mark.parametrize("completion, finish, counts_eos, expected", [
    (10, "stop", True, 9),  # ended on EOS, which vLLM counts in usage
    (10, "length", True, 10),  # cut off: no EOS was generated
    (10, "stop", False, 10),  # a server that does not count it
    (0, "stop", True, 0),
    (None, None, True, 0),  # a failed request
])
def test_budget_tokens_used(completion, finish, counts_eos, expected):
    assert budget_tokens_used(completion, finish, counts_eos) == expected


def test_budget_rows_do_not_count_the_eos(tmp_path):
    # the fake reports 3 words as 3 completion tokens with finish_reason "stop"; with the vLLM
    # convention (EOS counted in usage) the answer used 3 - 1 = 2 tokens
    def responder(body, index):
        return f"so it's \\boxed{{{_answer(body)}}}"

    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        result = _run(server, EvalConfig(mode=build_mode(mode="budgeted", budgets=(2,))), tmp_path)
    assert [(r["completion_tokens"], r["tokens_used"]) for r in result.samples] == [(3, 2)] * 2
    rows = [(r["problem_id"], r["budget"], r["correct"], r["tokens_used"]) for r in result.samples]
    assert budget_curve(rows)[0].success == 1.0  # 2 tokens <= budget 2


class _Tok:
    eos_token_id = 0
    pad_token_id = 99


@pytest.mark.parametrize("ids, budget, expected", [
    ([5, 6, 7, 0], 3, 1.0),  # 3 solution tokens + EOS: within a budget of 3
    ([5, 6, 7, 8, 0], 3, 0.0),  # 4 solution tokens: over
    ([5, 6, 7], 3, 1.0),  # cut off, no EOS
    ([5, 6, 7, 99], 3, 1.0),  # the pad id ends a completion too (Qwen's <|endoftext|>)
])
def test_budget_reward_does_not_count_the_eos(ids, budget, expected):
    from training import rewards as R

    fn = R.get_budget_reward("boxed", tokenizer=_Tok())
    assert fn(completions=["\\boxed{9}"], completion_ids=[ids], answer=["9"],
              budget=[budget]) == [expected]
    by_arg = R.get_budget_reward("boxed", eos_token_ids=[0, 99])
    assert by_arg(completions=["\\boxed{9}"], completion_ids=[ids], answer=["9"],
                  budget=[budget]) == [expected]


def test_budget_reward_with_a_real_tokenizer_injected_by_build_rewards(embedded_model_dir):
    from transformers import AutoTokenizer

    from training import rewards as R

    tok = AutoTokenizer.from_pretrained(embedded_model_dir)
    text = "The answer is \\boxed{9}."
    solution = tok(text, add_special_tokens=False)["input_ids"]
    ids = solution + [tok.eos_token_id]  # what TRL passes for a completion that stopped
    (fn,), _ = R.build_rewards(R.parse_reward_specs(["budget"]), num_generations=2, tokenizer=tok)
    kwargs = {"completions": [text], "completion_ids": [ids], "answer": ["9"]}
    assert fn(**kwargs, budget=[len(solution)]) == [1.0]
    assert fn(**kwargs, budget=[len(solution) - 1]) == [0.0]


# =================================================== item 14: budget_scores rows (view source)

# budget 100 -- problem a: (correct, 80), (correct, 150); problem b: (wrong, 20)
#   per problem: a: BS 1/2, Acc 1, Tok 115; b: BS 0, Acc 0, Tok 20
#   BS@100 = 1/4, Acc@100 = 1/2, Tok@100 = 67.5 (per sample it would be 1/3, 2/3, 83.33)
# budget 200 -- a: (correct, 180); b: (correct, 250)  ->  BS 1/2, Acc 1, Tok 215
BUDGET_SAMPLES = [
    {"model": "m", "benchmark": "gsm8k", "problem_id": "a", "sample_index": 0, "budget": 100,
     "correct": True, "completion_tokens": 81, "tokens_used": 80, "generation_limit": 800},
    {"model": "m", "benchmark": "gsm8k", "problem_id": "a", "sample_index": 1, "budget": 100,
     "correct": True, "completion_tokens": 151, "tokens_used": 150, "generation_limit": 800},
    {"model": "m", "benchmark": "gsm8k", "problem_id": "b", "sample_index": 0, "budget": 100,
     "correct": False, "completion_tokens": 21, "tokens_used": 20, "generation_limit": 800},
    {"model": "m", "benchmark": "gsm8k", "problem_id": "a", "sample_index": 0, "budget": 200,
     "correct": True, "completion_tokens": 181, "tokens_used": 180, "generation_limit": 800},
    {"model": "m", "benchmark": "gsm8k", "problem_id": "b", "sample_index": 0, "budget": 200,
     "correct": True, "completion_tokens": 251, "tokens_used": 250, "generation_limit": 800},
    # not budgeted, and ungraded: ignored
    {"model": "m", "benchmark": "gsm8k", "problem_id": "a", "sample_index": 0, "budget": None,
     "correct": True, "completion_tokens": 5},
    {"model": "m", "benchmark": "gsm8k", "problem_id": "c", "sample_index": 0, "budget": 100,
     "correct": None, "completion_tokens": 5, "tokens_used": 4},
]


def test_budget_score_rows_hand_example():
    rows = {r["budget"]: r for r in budget_score_rows(BUDGET_SAMPLES, n_boot=300)}
    assert sorted(rows) == [100, 200]
    r = rows[100]
    assert (r["budgeted_success"], r["accuracy"], r["mean_tokens"]) == (0.25, 0.5, 67.5)
    assert (r["n_problems"], r["n_samples"], r["generation_limit"]) == (2, 3, 800)
    assert r["budgeted_success_ci_low"] <= 0.25 <= r["budgeted_success_ci_high"]
    r = rows[200]
    assert (r["budgeted_success"], r["accuracy"], r["mean_tokens"]) == (0.5, 1.0, 215.0)


def test_budget_score_rows_fall_back_to_completion_tokens_for_old_rows():
    old = [{k: v for k, v in s.items() if k != "tokens_used"} for s in BUDGET_SAMPLES[:3]]
    (row,) = budget_score_rows(old, n_boot=100)
    assert row["mean_tokens"] == ((81 + 151) / 2 + 21) / 2


# ========================================================= item 15: Eq. 12 cost-effectiveness

# baseline (no thinking): p1 right, p2 wrong, p3 wrong            -> A_base = 1/3
# cap 64: p1 right (100 tok), p2 right (200), p3 wrong (300), p4 right (50, not in the baseline)
#   shared problems p1..p3: A = 2/3, C = 200  ->  Eff = (2/3 - 1/3) / 200 * 1000 = 5/3
# cap 128: p1 right (400), p2 wrong (400), p3 wrong (400)  ->  A = 1/3 = A_base, Eff = 0
BASELINE = [("p1", True, 20), ("p2", False, 30), ("p3", False, 40)]
CAPPED = [(64, "p1", True, 100), (64, "p2", True, 200), (64, "p3", False, 300),
          (64, "p4", True, 50), (128, "p1", True, 400), (128, "p2", False, 400),
          (128, "p3", False, 400)]


def test_eff_curve_closed_form_on_shared_problems():
    p64, p128 = eff_curve(CAPPED, BASELINE, n_boot=500)
    assert (p64.cap, p64.n_problems) == (64, 3)
    assert p64.accuracy == pytest.approx(2 / 3) and p64.baseline_accuracy == pytest.approx(1 / 3)
    assert p64.mean_tokens == 200 and p64.baseline_mean_tokens == 30
    assert p64.eff == pytest.approx(5 / 3)
    assert p64.eff_ci_low <= p64.eff <= p64.eff_ci_high
    # the same per-problem correctness as the baseline: every paired resample gains exactly 0,
    # so the paired CI is [0, 0] (an unpaired bootstrap would not be)
    assert (p128.eff, p128.eff_ci_low, p128.eff_ci_high) == (0.0, 0.0, 0.0)


def test_eff_curve_rejects_bad_input():
    with pytest.raises(ValueError, match="no baseline rows"):
        eff_curve(CAPPED, [])
    with pytest.raises(ValueError, match="used no tokens"):
        eff_curve([(64, "p1", True, 0)], [("p1", False, 10)])
    with pytest.raises(ValueError, match="alpha"):
        eff_curve(CAPPED, BASELINE, alpha=1.5)


def _sweep_samples(model, caps_rows, base_rows, base_cap=0, base_model=None):
    rows = [{"model": model, "benchmark": "gsm8k", "problem_id": p, "sample_index": 0,
             "thinking_cap": cap, "budget": None, "correct": c, "completion_tokens": t}
            for cap, p, c, t in caps_rows]
    rows += [{"model": base_model or model, "benchmark": "gsm8k", "problem_id": p,
              "sample_index": 0, "thinking_cap": base_cap, "budget": None, "correct": c,
              "completion_tokens": t} for p, c, t in base_rows]
    return rows


def test_eff_score_rows_baselines():
    # the model's own cap-0 run
    rows, missing = eff_score_rows(_sweep_samples("m", CAPPED, BASELINE), n_boot=200)
    assert missing == [] and [r["thinking_cap"] for r in rows] == [64, 128]
    assert rows[0]["eff"] == pytest.approx(5 / 3) and rows[0]["baseline"] == "m@thinking_cap=0"
    # another model's plain run, named as the baseline
    samples = _sweep_samples("m", CAPPED, BASELINE, base_cap=None, base_model="w/o-thinking")
    rows, missing = eff_score_rows(samples, {"m": "w/o-thinking"}, n_boot=200)
    assert rows[0]["eff"] == pytest.approx(5 / 3) and rows[0]["baseline"] == "w/o-thinking"
    # no baseline: reported, not guessed
    rows, missing = eff_score_rows(_sweep_samples("m", CAPPED, []), n_boot=200)
    assert rows == [] and missing == ["gsm8k|m"]  # the evaluation partition, benchmark first


def test_thinking_sweep_accepts_the_no_thinking_cap_zero():
    curve = thinking_budget_sweep([(0, "p1", False, 5), (64, "p1", True, 50)], n_boot=50)
    assert [(p.cap, p.accuracy) for p in curve] == [(0, 0.0), (64, 1.0)]
    with pytest.raises(ValueError, match="cap must be a number of tokens >= 0"):
        thinking_budget_sweep([(-1, "p1", True, 5)])
    assert math.isinf(thinking_budget_sweep([(math.inf, "p1", True, 5)])[0].cap)


# ====================================================== item 15: caps limit only the thinking


def _thinking_responder(calls, answer_words=("\\boxed{{{a}}}",)):
    """Phase 1: thinks without end, cut at max_tokens words (like a server at its limit);
    a continuation (continue_final_message) writes the answer."""

    def responder(body, index):
        calls.append(body)
        if body.get("continue_final_message"):
            return " ".join(w.format(a=_answer(body)) for w in answer_words)
        return " ".join(["<think>hmm"] + ["hmm"] * (body["max_tokens"] - 1))

    return responder


def test_a_thinking_cap_limits_the_thinking_not_the_answer(tmp_path):
    # cap 32 of a 512-token answer: phase 1 asks for 32 tokens and is cut inside <think>; the
    # thinking is closed and the same assistant message continued with 512 - 32 = 480 tokens.
    # The old code capped the whole answer at 32 tokens: only thinking, nothing graded right.
    calls = []
    with FakeLLMServer(models=("scripted",), responder=_thinking_responder(calls)) as server:
        cfg = EvalConfig(max_tokens=512, mode=build_mode(thinking_caps=(32,)))
        result = _run(server, cfg, tmp_path)
    firsts = [c for c in calls if not c.get("continue_final_message")]
    seconds = [c for c in calls if c.get("continue_final_message")]
    assert len(firsts) == len(seconds) == 2
    assert {c["max_tokens"] for c in firsts} == {32} and {c["max_tokens"] for c in seconds} == {480}
    for c in seconds:
        assert c["add_generation_prompt"] is False
        prefix = c["messages"][-1]
        assert prefix["role"] == "assistant" and prefix["content"].startswith("<think>hmm")
        assert prefix["content"].endswith("</think>\n") and len(prefix["content"].split()) == 33
    assert [r["correct"] for r in result.samples] == [True, True]
    assert {r["completion_tokens"] for r in result.samples} == {32 + 1}  # both phases
    assert {r["thinking_cap"] for r in result.samples} == {32}


def test_thinking_cap_zero_answers_without_thinking(tmp_path):
    calls = []
    with FakeLLMServer(models=("scripted",), responder=_thinking_responder(calls)) as server:
        cfg = EvalConfig(max_tokens=512, mode=build_mode(thinking_caps=(0,)))
        result = _run(server, cfg, tmp_path)
    assert all(c.get("continue_final_message") for c in calls) and len(calls) == 2
    assert {c["max_tokens"] for c in calls} == {512}
    assert {c["messages"][-1]["content"] for c in calls} == {"<think>\n\n</think>\n"}
    assert [r["correct"] for r in result.samples] == [True, True]


def test_an_answer_that_ends_within_the_cap_is_one_request(tmp_path):
    calls = []

    def responder(body, index):
        calls.append(body)
        return f"<think>easy</think> \\boxed{{{_answer(body)}}}"

    with FakeLLMServer(models=("scripted",), responder=responder) as server:
        result = _run(server, EvalConfig(mode=build_mode(thinking_caps=(64,))), tmp_path)
    assert len(calls) == 2 and not any(c.get("continue_final_message") for c in calls)
    assert [r["correct"] for r in result.samples] == [True, True]


class _RecordingClient:
    """Scripted chat: the reply depends on whether the call continues a message."""

    def __init__(self):
        self.calls = []

    async def chat(self, messages, params, *, tag="", sample_index=0, extra_body=None):
        from pipelines.llm import ChatResult

        self.calls.append((messages, params, extra_body))
        if extra_body and extra_body.get("continue_final_message"):
            return [ChatResult("<answer>42</answer>", "stop", 10, 3, 0.0, False)]
        return [ChatResult("<think>" + "x " * 40, "length", 10, params.max_tokens, 0.0, False)]


def test_tool_mode_caps_each_turns_thinking():
    from eval.modes import Run
    from pipelines.llm import SamplingParams

    client = _RecordingClient()
    mode = build_mode(mode="tool", thinking_caps=(16,))
    run = mode.capped_run(Run(client, tag="t"), 16)  # what the sweep does for a cap-16 job
    out = asyncio.run(mode.solve(run, None, "What is 6 times 7?", SamplingParams(max_tokens=300),
                                 sample_index=0))
    (_, p1, e1), (m2, p2, e2) = client.calls
    assert (p1.max_tokens, e1) == (16, None)
    assert p2.max_tokens == 300 - 16 and e2["continue_final_message"] is True
    assert p2.stop == ("</code>", "</answer>")  # the turn's own stops apply to the action
    assert m2[-1]["role"] == "assistant" and m2[-1]["content"].endswith("</think>\n")
    assert out["graded_text"] == "\\boxed{42}" and out["format_errors"] == 0
    assert out["completion_tokens"] == 16 + 3


@pytest.mark.parametrize("kwargs, message", [
    ({"thinking_caps": (-1,)}, "thinking caps must be token counts >= 0"),
    ({"mode": "interleaved", "thinking_caps": (32,)}, "thinking caps apply to the modes"),
    ({"mode": "budgeted", "thinking_caps": (32,)}, "thinking caps apply to the modes"),
])
def test_thinking_cap_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_mode(**kwargs)


# ======================================================== against the real local vLLM server


@pytest.mark.server
def test_real_server_context_eos_count_and_continuation(local_server, embedded_model_dir, tmp_path):
    """The premises of the code above, checked on vLLM: it reports max_model_len, it counts the
    EOS that ended a reply in usage.completion_tokens, and continue_final_message continues."""
    from transformers import AutoTokenizer

    from eval.modes import CONTINUE_MESSAGE
    from pipelines.llm import SamplingParams

    tok = AutoTokenizer.from_pretrained(embedded_model_dir)
    client = LLMClient(local_server.base_url, local_server.served_name, use_cache=False)
    assert runner.served_context_window(client) == local_server.max_model_len

    async def go():
        try:
            question = [{"role": "user", "content": "Reply with the single word: yes"}]
            (a,) = await client.chat(question, SamplingParams(max_tokens=64))
            partial = [{"role": "user", "content": "Name the capital of France."},
                       {"role": "assistant", "content": "The capital of France is"}]
            (b,) = await client.chat(partial, SamplingParams(max_tokens=8),
                                     extra_body=CONTINUE_MESSAGE)
            (c,) = await client.chat(partial, SamplingParams(max_tokens=8))
            return a, b, c
        finally:
            await client.aclose()

    a, b, c = asyncio.run(go())
    assert a.error is None and a.finish_reason == "stop"
    text_tokens = len(tok(a.text, add_special_tokens=False)["input_ids"])
    assert a.completion_tokens == text_tokens + 1  # the stopping EOS is counted by vLLM
    assert budget_tokens_used(a.completion_tokens, a.finish_reason) == text_tokens
    # a continuation ends the prompt inside the assistant message: no end-of-message marker
    # and no new assistant header, so its prompt is shorter than a fresh reply's
    assert b.error is None and c.error is None
    assert b.prompt_tokens < c.prompt_tokens
