"""LLM parts of the §5.2 experiments, over weft's client (:class:`pipelines.llm.LLMClient`).

- :func:`generate_main_outputs`: the digital assistant's main-task outputs, one chat call per
  milestone, generated once and then shared by every method (App. D: "Main-task text
  generation is replayed from a cached output database"). Generated tokens are the ticks.
- :class:`LLMTriage`: the email-triage policy (handle / remind / ignore) as structured JSON.
- :func:`generate_tutor_segment`: one segment of online tutoring text for the kitchen task
  (App. E, "Online tutor-generation subsystem"), from :func:`.texts.tutor_messages`.
- :class:`LLMController`: the kitchen controller, choosing one numbered admissible option as
  structured JSON; its reply's length (about 4 characters per token, since ``chat_json``
  returns text) is returned as think ticks (App. E: the controller's tokens consume ticks).

Prompts are our own texts in ``pipelines/prompts/ep_*.md``, read at every call. Every call goes
through the client's content-addressed cache, so a re-run, and a second method meeting the same
decision, replays the stored answer. Guarantees: a reply that is unusable after the client's
repair round never stops an episode; it is counted in ``failures`` and the scripted rule's
choice is used in its place. A failed main-task milestone keeps the token budget as its length
and an empty text, and is counted in ``failures`` of the returned outputs.
Not guaranteed: sensible choices from small models (the embedded 135M model mostly picks the
first option); identical decisions across methods when the visible state differs.
"""

from __future__ import annotations

from typing import Any

from eval.engagement.assistant import Decision, MainOutput, scripted_triage
from eval.engagement.kitchen import scripted_policy
from eval.engagement.texts import MAIN_TASKS, TaskSpec, TutorProblem, tutor_messages
from pipelines.llm import LLMClient, SamplingParams, run
from pipelines.prompts import load_prompt
from pipelines.prompts import render as render_prompt

TRIAGE_SCHEMA = {"type": "object", "properties": {
    "action": {"type": "string", "enum": ["handle", "remind", "ignore"]},
    "after": {"type": "number"}}, "required": ["action"]}


def render(name: str, **values: Any) -> list[dict[str, str]]:
    """The messages of the shipped prompt ``name`` with ``values`` filled in (an unknown
    placeholder is an error)."""
    return render_prompt(load_prompt(name), values, f"prompt {name}")


def generate_main_outputs(client: LLMClient, max_tokens: int = 300,
                          specs: tuple[TaskSpec, ...] = MAIN_TASKS,
                          seed: int = 0) -> tuple[list[MainOutput], int]:
    """One output per task (one chat call per milestone, greedy); returns (outputs, failures)."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=seed)

    async def one(spec: TaskSpec) -> tuple[MainOutput, int]:
        units: list[tuple[str, int]] = []
        failures = 0
        for i, milestone in enumerate(spec.milestones):
            previous = ", ".join(spec.milestones[:i]) or "none"
            messages = render("ep_assistant_main", title=spec.title, brief=spec.brief,
                              milestone=milestone, index=i + 1, count=len(spec.milestones),
                              previous=previous)
            result = (await client.chat(messages, params, tag="ep_main"))[0]
            if result.error is not None or result.completion_tokens < 1:
                failures += 1
                units.append(("", max_tokens))
            else:
                units.append((result.text, result.completion_tokens))
        return MainOutput(spec.task_id, tuple(units)), failures

    async def main() -> list[tuple[MainOutput, int]]:
        return [await one(spec) for spec in specs]

    pairs = run(main())
    return [p[0] for p in pairs], sum(p[1] for p in pairs)


def generate_tutor_segment(client: LLMClient, problem: TutorProblem, max_tokens: int,
                           transcript: str = "", context: str = "",
                           seed: int = 0) -> tuple[str, int]:
    """One tutoring segment of at most ``max_tokens`` tokens, continuing ``transcript`` (empty:
    a fresh explanation); returns ``(text, completion tokens)``. A failed call returns
    ``("", 0)``, so the caller keeps the problem's remaining length and can retry."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=seed)
    messages = tutor_messages(problem, max_tokens, transcript, context)
    result = run(client.chat(messages, params, tag="ep_tutor"))[0]
    if result.error is not None:
        return "", 0
    return result.text, int(result.completion_tokens)


class LLMTriage:
    """The triage policy of :class:`~eval.engagement.assistant.AssistantAgent` as LLM calls."""

    def __init__(self, client: LLMClient, max_tokens: int = 48) -> None:
        self.client = client
        self.params = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=0)
        self.calls = self.failures = 0

    def __call__(self, email: dict[str, Any], context: dict[str, Any]) -> Decision:
        self.calls += 1
        messages = render("ep_assistant_triage", subject=email["subject"], body=email["body"],
                          urgency=email["urgency"], slack=context["slack_units"],
                          progress=context["main_progress"], steps=context["target_steps"],
                          waiting=context["waiting"],
                          reminded="yes" if email.get("reminded") else "no")
        result = run(self.client.chat_json(messages, TRIAGE_SCHEMA, self.params, tag="ep_triage"))
        value = result.value if isinstance(result.value, dict) else None
        if value is None or value.get("action") not in ("handle", "remind", "ignore"):
            self.failures += 1
            return scripted_triage(email, context)
        if value["action"] != "remind":
            return Decision(value["action"])
        after = value.get("after", 5.0)  # a missing or non-positive delay means 5 units
        after = float(after) if isinstance(after, (int, float)) and after > 0 else 5.0
        return Decision("remind", min(after, context["slack_units"]))


RULES = {
    "agentloop": "Cooking signals are shown only when a tutoring segment ends.",
    "poll": "During tutoring the kitchen is checked every 40 ticks; a new signal stops tutoring.",
    "reflexpatch": "A cooking signal stops tutoring and the kitchen reacts by itself first.",
    "ep": "A cooking signal stops tutoring when it fires; you decide what to do next.",
}


def describe_state(state: dict[str, Any]) -> str:
    lines = [f"Tick {state['tick']}. Stove slots: {state['capacity']}."]
    for did, d in sorted(state["dishes"].items()):
        info = d["info"]
        kind = "critical" if info["critical"] else f"soft (keep-warm {info['keepwarm']} ticks)"
        extra = f", signal fired at tick {d['fired']}" if d["fired"] is not None else ""
        lines.append(f"Dish {did}: {kind}, window {info['window']} ticks, state {d['state']}{extra}.")
    left = [n for n in state["tutors"] if n > 0]
    lines.append(f"Tutoring problems left: {len(left)}" +
                 (f", current one needs {left[0]} more tokens." if left else "."))
    return "\n".join(lines)


def describe_option(i: int, opt: dict[str, Any]) -> str:
    if opt["action"] in ("finish", "prep"):
        kind = "critical" if opt["critical"] else "soft"
        return f"{i}: {opt['action']} dish {opt['dish']} ({kind})"
    if opt["action"] == "tutor":
        return f"{i}: tutor ({opt['left']} tokens left on this problem)"
    return f"{i}: wait {opt.get('ticks', 10)} ticks"


class LLMController:
    """The kitchen controller (:data:`~eval.engagement.kitchen.Policy`) as LLM calls."""

    def __init__(self, client: LLMClient, method: str, max_tokens: int = 24) -> None:
        if method not in RULES:
            raise ValueError(f"method must be one of {sorted(RULES)}, got {method!r}")
        self.client, self.method = client, method
        self.params = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=0)
        self.calls = self.failures = 0

    @property
    def name(self) -> str:
        """``llm:<model>``: how results label the controller (see ``kitchen.controller_name``)."""
        return f"llm:{self.client.model}"

    def __call__(self, state: dict[str, Any], options: list[dict[str, Any]]) -> tuple[int, int]:
        self.calls += 1
        schema = {"type": "object", "properties": {
            "choice": {"type": "integer", "minimum": 0, "maximum": len(options) - 1}},
            "required": ["choice"]}
        messages = render("ep_kitchen_controller", rule=RULES[self.method],
                          state=describe_state(state),
                          options="\n".join(describe_option(i, o) for i, o in enumerate(options)))
        result = run(self.client.chat_json(messages, schema, self.params, tag="ep_controller"))
        value = result.value if isinstance(result.value, dict) else None
        think = sum(max(len(r) // 4, 1) for r in result.raw)  # ~4 characters per token
        choice = value.get("choice") if value else None
        if not isinstance(choice, int) or not 0 <= choice < len(options):
            self.failures += 1
            return scripted_policy(state, options)[0], think
        return choice, think
