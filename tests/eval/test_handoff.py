"""Handoff evaluation mode (eval/handoff_team.py, Tandem RL §4.3 / App. B.3).

Scripted endpoints (one fake server per model, through the real LLM client) write known steps,
so who wrote what, where the turns change, the shared token cap, the request fields and the
rows/scores are checked exactly; one test runs the real local vLLM server with the embedded
model as both partners.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from eval.benchmarks import get
from eval.handoff_team import (
    HandoffServerError,
    HandoffTeam,
    Schedule,
    handoff_generate,
    handoff_label,
    step_ended,
)
from eval.modes import build_mode
from eval.runner import EvalConfig, evaluate
from pipelines.llm import LLMClient, SamplingParams
from pipelines.llm.testing import FakeLLMServer

PROBLEMS = [
    {"problem_id": "p1", "source": "gsm8k", "problem": "What is 6 times 7?", "answer": "42",
     "meta": "{}"},
    {"problem_id": "p2", "source": "gsm8k", "problem": "What is 10 plus 5?", "answer": "15",
     "meta": "{}"},
]


def _partial(body) -> str:
    """The assistant text a continuation request carries ("" for the first step)."""
    last = body["messages"][-1]
    return last["content"] if last["role"] == "assistant" else ""


def scripted(name: str, steps: int, final: str):
    """A responder that writes `name-step-i` steps ending in "\\n\\n" (the stop string kept,
    as vLLM's include_stop_str_in_output returns it) until the shared text has `steps` steps,
    then the final line with no "\\n\\n" (the answer ended: EOS)."""

    def respond(body, index):
        done = _partial(body).count("\n\n")
        if done + 1 >= steps:
            return final
        return f"{name} step {done}\n\n"

    return respond


def is_check(body) -> bool:
    """The endpoint check of a handoff run: a forced JSON object, stopped at its key."""
    return bool(body.get("response_format"))


def vllm_like(respond, reply='{"k": "hello"}'):
    """`respond`, but the endpoint check is answered as vLLM answers it: the forced JSON reply
    cut after its stop string, which include_stop_str_in_output keeps ('{"k"')."""

    def answer(body, index):
        if not is_check(body):
            return respond(body, index)
        assert body["include_stop_str_in_output"] is True and body["temperature"] == 0
        assert body["response_format"]["type"] == "json_schema"
        (stop,) = body["stop"]
        return reply[:reply.index(stop) + len(stop)]

    return answer


def _team(tmp_path, senior_server, junior_server):
    senior = LLMClient(senior_server.base_url, "senior", cache_path=tmp_path / "s.sqlite")
    junior = LLMClient(junior_server.base_url, "junior", cache_path=tmp_path / "j.sqlite")
    return HandoffTeam(senior, junior)


def _generate(tmp_path, senior_fn, junior_fn, *, max_tokens=200, seed=3, **kw):
    with FakeLLMServer(models=("senior",), responder=senior_fn) as s, \
            FakeLLMServer(models=("junior",), responder=junior_fn) as j:
        async def go():
            team = _team(tmp_path, s, j)
            try:
                params = SamplingParams(temperature=0.7, max_tokens=max_tokens, seed=seed)
                return await handoff_generate(team, [{"role": "user", "content": "Q?"}], params,
                                              **kw)
            finally:
                await team.senior.aclose()
                await team.junior.aclose()

        out = asyncio.run(go())
        return out, list(s.requests), list(j.requests)


def test_alternate_schedule_strictly_takes_turns_from_the_starter(tmp_path):
    final = "So \\boxed{42}."
    out, s_req, j_req = _generate(tmp_path, scripted("senior", 5, final),
                                  scripted("junior", 5, final), starts="junior")
    # steps 0..4 by J S J S J; the fifth (J) ends the answer
    assert out["segment_authors"] == "JSJSJ"
    assert out["output"] == ("junior step 0\n\nsenior step 1\n\njunior step 2\n\n"
                             "senior step 3\n\n" + final)
    assert out["segments"] == 5 and out["handoffs"] == 4
    assert len(j_req) == 3 and len(s_req) == 2
    assert out["gen_error"] is None and out["finish_reason"] == "stop"


def test_requests_ask_for_one_step_and_continue_the_shared_message(tmp_path):
    final = "Done."
    _, s_req, j_req = _generate(tmp_path, scripted("senior", 3, final),
                                  scripted("junior", 3, final), starts="senior")
    first, second, third = s_req[0], j_req[0], s_req[1]
    for body in (first, second, third):
        assert body["stop"] == ["\n\n"] and body["include_stop_str_in_output"] is True
    # the first step is a fresh reply; later steps continue the partial assistant message
    assert first["messages"][-1]["role"] == "user" and "continue_final_message" not in first
    assert second["continue_final_message"] is True and second["add_generation_prompt"] is False
    assert second["messages"][-1] == {"role": "assistant", "content": "senior step 0\n\n"}
    assert third["messages"][-1]["content"] == "senior step 0\n\njunior step 1\n\n"
    # each step gets its own seed, derived from the sample's
    assert len({first["seed"], second["seed"], third["seed"]}) == 3


def test_team_shares_one_token_cap(tmp_path):
    # the fake counts whitespace words: every step "x step i\n\n" is 3 tokens
    endless = scripted("x", 10_000, "never")
    out, s_req, j_req = _generate(tmp_path, endless, endless, max_tokens=10)
    assert out["completion_tokens"] >= 10 and out["segments"] == 4  # 3 + 3 + 3 + (3 >= 1 left)
    asked = [r["max_tokens"] for r in sorted(s_req + j_req, key=lambda r: len(_partial(r)))]
    assert asked == [10, 7, 4, 1]  # what is left of the shared cap
    assert out["senior_tokens"] + out["junior_tokens"] == out["completion_tokens"]


def test_an_answer_that_ends_without_a_step_boundary_is_not_handed_over(tmp_path):
    out, _, j_req = _generate(tmp_path, lambda b, i: "Just \\boxed{42}",
                                  scripted("junior", 3, "x"), starts="senior")
    assert out["segment_authors"] == "S" and not j_req and out["handoffs"] == 0
    assert out["senior_share"] == 1.0


def test_a_failed_step_fails_the_sample_with_its_error(tmp_path):
    final = "end"
    with FakeLLMServer(models=("senior",), responder=scripted("senior", 4, final)) as s, \
            FakeLLMServer(models=("junior",)) as j:
        j.plan.extend(["400"])  # the junior's first request is rejected (4xx: not retried)

        async def go():
            team = _team(tmp_path, s, j)
            try:
                return await handoff_generate(team, [{"role": "user", "content": "Q?"}],
                                              SamplingParams(max_tokens=50, seed=1))
            finally:
                await team.senior.aclose()
                await team.junior.aclose()

        out = asyncio.run(go())
    assert out["gen_error"] and out["output"] == "senior step 0\n\n"
    assert out["segment_authors"] == "S"


def test_bernoulli_schedule_replays_from_the_seed():
    # independent transcription of App. B.3: a draw per boundary from random.Random(seed)
    for seed, p in ((0, 0.5), (7, 0.2), (123, 0.9)):
        rng = random.Random(seed)
        expected = ["S" if rng.random() < p else "J" for _ in range(40)]
        sched = Schedule("bernoulli", "junior", p=p, seed=seed)
        assert sched.current == "J"
        assert [sched.next() for _ in range(40)] == expected
    assert [Schedule("bernoulli", "senior", p=1.0, seed=4).next() for _ in range(3)] == ["S"] * 3
    assert [Schedule("alternate", "senior").next() for _ in range(1)] == ["J"]


def test_step_end_needs_the_boundary_and_a_stop():
    assert step_ended("a\n\n", "stop")
    assert not step_ended("a\n\n", "length")      # cut by the cap
    assert not step_ended("a", "stop")            # EOS: the answer ended


@pytest.mark.parametrize("field, value", [("handoff_schedule", "random"),
                                          ("handoff_starts", "both"), ("handoff_p", 1.5)])
def test_bad_handoff_settings_are_rejected_with_the_field_name(field, value):
    with pytest.raises(ValueError, match=field):
        build_mode(mode="handoff", **{field: value})


def test_handoff_mode_needs_a_team_client(tmp_path):
    with FakeLLMServer(models=("m",)) as s:
        async def go():
            client = LLMClient(s.base_url, "m", cache_path=tmp_path / "c.sqlite")
            try:
                return await evaluate(client, get("gsm8k"), PROBLEMS,
                                      EvalConfig(mode=build_mode(mode="handoff")), model_label="m")
            finally:
                await client.aclose()

        with pytest.raises(TypeError, match="HandoffTeam"):
            asyncio.run(go())


def test_runner_writes_graded_rows_and_scores_for_the_team(tmp_path):
    answers = {"6 times 7": "42", "10 plus 5": "15"}

    def senior(body, index):  # writes the first step; if it gets the last word, it answers
        question = body["messages"][0]["content"]
        if _partial(body):
            return f"So \\boxed{{{next(a for q, a in answers.items() if q in question)}}}."
        return "Let me compute.\n\n"

    def junior(body, index):  # always hands back after one step
        return "I agree, keep going.\n\n"

    with FakeLLMServer(models=("senior",), responder=vllm_like(senior)) as s, \
            FakeLLMServer(models=("junior",), responder=vllm_like(junior)) as j:
        mode = build_mode(mode="handoff", handoff_partner="junior-model")
        cfg = EvalConfig(k=2, temperature=0.6, max_tokens=64, seed=5, mode=mode)
        label = handoff_label("senior-model", "junior-model", "senior")

        async def go():
            team = _team(tmp_path, s, j)
            try:
                return await evaluate(team, get("gsm8k"), PROBLEMS, cfg, model_label=label)
            finally:
                await team.senior.aclose()
                await team.junior.aclose()

        result = asyncio.run(go())
        # one endpoint check per server, before the jobs
        assert is_check(s.requests[0]) and is_check(j.requests[0])
        assert sum(map(is_check, s.requests + j.requests)) == 2
    assert label == "senior-model:handoff:junior-model:senior-first"
    assert len(result.samples) == 4
    for row in result.samples:
        assert row["mode"] == "handoff" and row["model"] == label
        assert row["partner"] == "junior-model" and row["handoff_starts"] == "senior"
        assert row["segment_authors"] == "SJS" and row["correct"] is True
        assert row["output"].startswith("Let me compute.\n\nI agree, keep going.\n\nSo \\boxed{")
    metrics = {(sc["metric"], sc["k"]): sc["value"] for sc in result.scores}
    assert metrics[("pass@k", 1)] == 1.0 and metrics[("pass@k", 2)] == 1.0


def _run_team(tmp_path, senior_fn, junior_fn):
    with FakeLLMServer(models=("senior",), responder=senior_fn) as s, \
            FakeLLMServer(models=("junior",), responder=junior_fn) as j:
        cfg = EvalConfig(k=1, max_tokens=64, seed=5, mode=build_mode(mode="handoff"))

        async def go():
            team = _team(tmp_path, s, j)
            try:
                return await evaluate(team, get("gsm8k"), PROBLEMS, cfg, model_label="team")
            finally:
                await team.senior.aclose()
                await team.junior.aclose()

        try:
            return asyncio.run(go())
        finally:
            answered = [b for b in s.requests + j.requests if not is_check(b)]
            assert not answered, "no job may run after a failed endpoint check"


@pytest.mark.parametrize("check_reply, found", [
    ('{', "returned '{'"),                                  # the stop string dropped
    ('{"k": "hello"}', """returned '{"k": "hello"}'"""),    # the stop string ignored
])
def test_a_server_without_the_continuation_fields_is_refused_before_any_job(
        tmp_path, check_reply, found):
    steps = scripted("step", 3, "\\boxed{42}")
    junior = vllm_like(steps)

    def senior(body, index):
        return check_reply if is_check(body) else steps(body, index)

    with pytest.raises(HandoffServerError) as err:
        _run_team(tmp_path, senior, junior)
    message = str(err.value)
    assert "senior's server" in message and found in message
    assert "include_stop_str_in_output" in message and "continue_final_message" in message
    assert "vllm serve" in message and "mode single" in message   # what to do


def test_a_refused_endpoint_check_names_the_junior_and_the_error(tmp_path):
    with FakeLLMServer(models=("senior",), responder=vllm_like(scripted("s", 2, "x"))) as s, \
            FakeLLMServer(models=("junior",)) as j:
        j.plan.extend(["400"])

        async def go():
            team = _team(tmp_path, s, j)
            try:
                await team.check_endpoints()
            finally:
                await team.senior.aclose()
                await team.junior.aclose()

        with pytest.raises(HandoffServerError, match=r"junior's server .* refused the check"):
            asyncio.run(go())


def test_a_step_that_runs_past_a_blank_line_is_refused(tmp_path):
    # a server that ignores `stop` returns several steps at once: refuse, do not grade
    with pytest.raises(HandoffServerError, match="ignored the stop string"):
        _generate(tmp_path, lambda b, i: "one\n\ntwo\n\n", scripted("j", 3, "x"))


@pytest.mark.server
def test_handoff_on_the_real_server_continues_the_partners_text(tmp_path, local_server):
    """The embedded model as both partners on the local vLLM server: steps end at "\\n\\n"
    (kept in the text), the second model continues the first one's partial message."""
    problems = [
        {"problem_id": "r1", "source": "gsm8k", "answer": "12", "meta": "{}",
         "problem": "List three steps, one paragraph each, to add 5 and 7."},
        {"problem_id": "r2", "source": "gsm8k", "answer": "6", "meta": "{}",
         "problem": "Explain in two short paragraphs how to compute 2 times 3."},
    ]
    mode = build_mode(mode="handoff", handoff_partner="embedded", handoff_starts="junior")
    cfg = EvalConfig(k=2, temperature=0.8, max_tokens=80, seed=2, mode=mode)

    async def go():
        base = local_server.base_url
        team = HandoffTeam(
            LLMClient(base, local_server.served_name, cache_path=tmp_path / "s.sqlite",
                      max_concurrency=2, timeout_s=900),
            LLMClient(base, local_server.served_name, cache_path=tmp_path / "j.sqlite",
                      max_concurrency=2, timeout_s=900))
        try:
            return await evaluate(team, get("gsm8k"), problems, cfg, model_label="team")
        finally:
            await team.senior.aclose()
            await team.junior.aclose()

    result = asyncio.run(go())
    rows = result.samples
    assert len(rows) == 4 and all(r["gen_error"] is None for r in rows)
    assert all(r["segment_authors"].startswith("J") for r in rows)
    multi = [r for r in rows if r["segments"] > 1]
    assert multi, [r["output"] for r in rows]  # the model did write "\n\n" somewhere
    for r in multi:
        assert r["segment_authors"][:2] == "JS" and r["handoffs"] == r["segments"] - 1
        assert r["output"].count("\n\n") >= r["segments"] - 1
        assert r["senior_tokens"] > 0 and r["junior_tokens"] > 0
        assert r["completion_tokens"] <= cfg.max_tokens + 1
    assert {s["metric"] for s in result.scores} >= {"avg@k", "pass@k"}
