"""LLM policies and comparisons of §5.2 (eval/engagement/llm_policies.py, llm_runs.py).

Fake clients check the structured-output handling and the failure count; one test runs both
environments against the real local model server (tiny: one episode, short generations).
"""

from __future__ import annotations

import pytest

from eval.engagement import assistant as A
from eval.engagement import kitchen as K
from eval.engagement.llm_policies import LLMController, LLMTriage, render
from eval.engagement.llm_runs import run_comparison, score_table
from eval.engagement.texts import TaskSpec
from pipelines.llm import ChatResult, JsonResult
from pipelines.prompts import load_prompt


class FakeClient:
    """Answers ``chat_json`` from a list of values (None = unusable reply) and ``chat`` with a
    fixed text of ``tokens`` completion tokens; records the prompts it saw."""

    model = "fake"

    def __init__(self, values=(), tokens: int = 7) -> None:
        self.values, self.tokens, self.seen = list(values), tokens, []

    async def chat_json(self, messages, schema, params, **kw):
        self.seen.append(messages)
        value = self.values.pop(0) if self.values else None
        return JsonResult(value, ["{}"], 1, None if value is not None else "invalid")

    async def chat(self, messages, params, **kw):
        self.seen.append(messages)
        return [ChatResult("some text", "stop", 10, self.tokens, 0.1, False)]


EMAIL = {"id": 0, "urgency": "low", "deadline": 900, "subject": "s", "body": "b",
         "reminded": False}
CONTEXT = {"slack_units": 30.0, "main_progress": 1, "target_steps": 4, "waiting": 0}


def test_triage_uses_the_model_decision_and_counts_unusable_replies():
    triage = LLMTriage(FakeClient([{"action": "handle"}, None, {"action": "fly"}]))
    assert triage(EMAIL, CONTEXT) == A.Decision("handle")
    # unusable replies fall back to the scripted rule (low urgency, 30 units: remind at 25)
    assert triage(EMAIL, CONTEXT) == A.scripted_triage(EMAIL, CONTEXT) == A.Decision("remind", 25)
    assert triage(EMAIL, CONTEXT).action == "remind"
    assert (triage.calls, triage.failures) == (3, 2)
    prompt = triage.client.seen[0][1]["content"]
    assert "Urgency: low" in prompt and "30.0 units" in prompt


def test_controller_choice_is_bounds_checked():
    opts = [{"action": "tutor", "left": 5, "max_tokens": None}, {"action": "wait", "ticks": 10}]
    ctl = LLMController(FakeClient([{"choice": 1}, {"choice": 7}]), K.EP)
    state = {"tick": 3, "capacity": 1, "dishes": {}, "tutors": [5]}
    assert ctl(state, opts)[0] == 1
    assert ctl(state, opts)[0] == 0  # out of range: scripted rule (tutor), counted
    assert (ctl.calls, ctl.failures) == (2, 1)


def test_prompts_fill_every_placeholder():
    prompt = load_prompt("ep_assistant_triage")
    assert "{{" in prompt.user and "{{" not in prompt.system
    with pytest.raises(ValueError, match="unknown placeholder"):
        render("ep_assistant_triage", subject="x")


def test_llm_comparison_shares_main_outputs_across_methods():
    cfg = A.AssistantConfig(horizon_units=10.0, n_seeds=1, episodes_per_seed=1)
    client = FakeClient([{"action": "handle"}] * 100, tokens=9)
    comp = run_comparison("assistant", config=cfg, client=client, main_tokens=9)
    triage_calls = comp.llm["calls"] - 4 * 4  # 4 tasks x 4 milestones, generated once
    assert triage_calls >= 1 and comp.llm["failures"] == 0
    assert {r["method"] for r in comp.episodes} == set(A.METHODS)
    assert len({r["task_id"] for r in comp.episodes}) == 1
    assert [r["method"] for r in score_table(comp)] == list(A.METHODS)


class PromptClient:
    """A controller client whose choice is a fixed function of the prompt it is sent (so any
    order of calls gives the same answers); records the threads that called it."""

    model = "prompt-fn"

    def __init__(self) -> None:
        import threading

        self.threads: set[str] = set()
        self._lock = threading.Lock()

    async def chat_json(self, messages, schema, params, **kw):
        import hashlib
        import threading

        with self._lock:
            self.threads.add(threading.current_thread().name)
        text = "".join(m["content"] for m in messages)
        n = schema["properties"]["choice"]["maximum"] + 1
        choice = int(hashlib.sha256(text.encode()).hexdigest(), 16) % n
        return JsonResult({"choice": choice}, [f'{{"choice": {choice}}}'], 5, None)


def test_kitchen_cases_on_several_controllers_give_the_sequential_result():
    cfg = K.KitchenConfig(setting=K.ONE, cases_per_cell=1, time_budget=400)
    sequential = run_comparison("kitchen", [K.EP, K.REFLEX], config=cfg,
                                client=PromptClient())
    clients = [PromptClient() for _ in range(3)]
    concurrent = run_comparison("kitchen", [K.EP, K.REFLEX], config=cfg,
                                client=clients[0], more_clients=clients[1:])
    assert len(sequential.episodes) == 2 * len(K.make_cases(cfg)) > 6
    assert concurrent.episodes == sequential.episodes          # same rows, in case order
    assert concurrent.llm == sequential.llm and sequential.llm["calls"] > 0
    assert concurrent.scores == sequential.scores
    used = set().union(*(c.threads for c in clients))
    assert len(used) >= 2 and all(name.startswith("kitchen-") for name in used)
    with pytest.raises(ValueError, match="more_clients needs client"):
        run_comparison("kitchen", [K.EP], config=cfg, more_clients=clients)


def test_kitchen_controllers_of_different_kinds_are_refused():
    cfg = K.KitchenConfig(setting=K.ONE, cases_per_cell=1, time_budget=100)
    with pytest.raises(ValueError, match="of one kind"):
        K.run_method(cfg, K.EP, K.scripted_policy,
                     more_policies=[LLMController(PromptClient(), K.EP)])


@pytest.fixture
def real_client(local_server, weft_home):
    from pipelines.llm import LLMClient

    return LLMClient(local_server.base_url, local_server.served_name,
                     cache_path=weft_home / "ep_cache.sqlite", json_mode="schema")


def test_real_server_runs_both_experiments_and_replays_from_cache(real_client):
    # one main task of two milestones, one email (this seed), a short kitchen case
    task = TaskSpec("memo", "Short memo", "Announce the new office hours.", ("Change", "Reason"))
    cfg = A.AssistantConfig(horizon_units=6.0, arrival_rate=0.6, n_seeds=1, episodes_per_seed=1)
    first = run_comparison("assistant", [A.EP], config=cfg, client=real_client, main_tokens=12,
                           main_tasks=(task,))
    assert first.policy == real_client.model
    assert first.llm["calls"] >= 3 and 0 <= first.llm["failures"] <= first.llm["calls"]
    assert first.episodes[0]["main"] > 0 and first.episodes[0]["emails"] >= 1
    again = run_comparison("assistant", [A.EP], config=cfg, client=real_client, main_tokens=12,
                           main_tasks=(task,))
    assert again.episodes == first.episodes  # cached decisions replay identically
    dish = K.Dish(0, "critical_wide", True, prep=5, offset=20, finish=3, window=80, keepwarm=0)
    kcfg = K.KitchenConfig(jitter_std=0.0, time_budget=150)
    case = K.Case("tiny", "critical_wide", 1, (dish,), (30,))
    from eval.engagement.llm_policies import LLMController

    ctl = LLMController(real_client, K.EP)
    res = K.run_method(kcfg, K.EP, ctl, [case])
    row = res.rows[0]
    assert ctl.calls >= 2 and 0 <= ctl.failures <= ctl.calls
    assert row["ticks"] > 5 + 3  # the controller's reply tokens spend ticks too
    # two cases at once on two clients of the same server: each case is the one-client run's
    from pipelines.llm import LLMClient

    other = LLMClient(real_client.base_url, real_client.model, json_mode="schema")
    both = K.run_method(kcfg, K.EP, LLMController(real_client, K.EP), [case, case],
                        more_policies=[LLMController(other, K.EP)])
    assert [r["case_id"] for r in both.rows] == ["tiny", "tiny"]
    assert both.rows[0]["ticks"] > 5 + 3 and both.rows[1]["ticks"] > 5 + 3


def test_tutor_segment_sends_the_tutor_messages_and_returns_text_and_tokens():
    from eval.engagement.llm_policies import generate_tutor_segment
    from eval.engagement.texts import TUTOR_PROBLEMS

    client = FakeClient(tokens=11)
    text, tokens = generate_tutor_segment(client, TUTOR_PROBLEMS[1], 30, "so far we", "dish 1")
    assert (text, tokens) == ("some text", 11)
    system, user = client.seen[0]
    assert "Do not mention any simulation" in system["content"]
    assert "Status: continuation" in user["content"] and "so far we" in user["content"]
    assert "about 30 tokens" in user["content"]
