"""Handoff evaluation (Tandem RL §4.3, App. B.3): two models write one answer step by step.

At inference the senior and a partner (the junior) take turns at reasoning steps: the active
model writes until its next ``"\\n\\n"`` (one reasoning step, stop string kept in the text),
the step is appended to the shared assistant message, and the other model continues that same
message; the team's whole response is graded like a solo answer (format ``boxed``). Schedules:

- ``alternate`` (§4.3, the paper's main protocol): strict round-robin at every ``"\\n\\n"``.
- ``bernoulli`` (App. B.3): at every ``"\\n\\n"`` an independent draw makes the senior active
  with probability ``p``, from ``random.Random(sample seed)``, so a sample's authorship is
  reproducible from its seed.

``starts`` says who writes the first step ("senior" or "junior"); pass@k with each is what
§4.3 reports. Both models are reached through weft's LLM client (any OpenAI-compatible
endpoint; locally one ``LocalModelServer`` per model, or one endpoint per model). The first step
is an ordinary chat request; every later step continues the partial assistant message with
vLLM's chat-completions fields ``continue_final_message`` (the chat template is applied to the
conversation and the last assistant turn is left open) and ``add_generation_prompt: false``;
``include_stop_str_in_output`` keeps the ``"\\n\\n"`` in the returned text, which is how an
ended step is told apart from an ended answer (vLLM 0.32's ``ChatCompletionRequest`` has all
three fields). The team shares one token cap (``max_tokens`` of the run): each request asks
for what is left.

The result of one sample is an ordinary ``eval_samples`` row (mode ``handoff``, run by
``eval.modes.handoff.HandoffMode``) plus ``partner``, ``handoff_starts``, ``handoff_schedule``, ``segments``, ``handoffs``,
``segment_authors`` (one letter per step: ``S`` senior, ``J`` junior), ``senior_tokens``,
``junior_tokens`` and ``senior_share`` (senior tokens / all completion tokens).

Servers without these vLLM fields ignore them: the stop string would be dropped, every first
step would look like the end of the answer and every row would show one segment. So a
handoff run checks each HTTP endpoint first (:meth:`HandoffTeam.check_endpoints`, called by
``eval.modes.handoff.HandoffMode.prepare``): one greedy request whose output is forced to be a
JSON object ``{"k": ...}`` (``response_format`` json_schema, vLLM's structured outputs) and
whose stop string is its key ``"k"``, with ``include_stop_str_in_output``. A server that
honours the field returns the text up to and including the key (``{"k"``, whatever the model);
one that drops the stop string returns ``{``, one that ignores it returns the whole object; a
refused request (vLLM accepts at most four stop strings, OpenAI-style servers refuse unknown
values) fails too. Each failure raises :class:`HandoffServerError` naming the endpoint, what
is missing and what to do. During the run, a step whose text holds ``"\\n\\n"`` anywhere but
at its end (the server ignored ``stop``) raises it too.

Not guaranteed: the partner sees the text, not the tokens, of the other model's steps (the
prefix is re-tokenized by the server, as in any text-level handoff); the endpoint check
verifies ``include_stop_str_in_output`` and trusts ``continue_final_message`` /
``add_generation_prompt`` to come with it (all three are vLLM chat-completions fields); the
check goes through the client's response cache (its prompt names the endpoint, so another
server's answer is not reused, but a server swapped behind the same URL is not re-checked);
in-process clients without a ``base_url`` are not checked; token counts come from each
server's ``usage`` and include a stopping EOS.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from dataclasses import dataclass
from typing import Any

STEP_MARKER = "\n\n"
HANDOFF_SCHEDULES = ("alternate", "bernoulli")
HANDOFF_STARTS = ("senior", "junior")
SENIOR, JUNIOR = "S", "J"
# Request fields of each step (vLLM chat completions): keep the stop string in the text.
FIRST_STEP = {"include_stop_str_in_output": True}
NEXT_STEP = {"continue_final_message": True, "add_generation_prompt": False,
             "include_stop_str_in_output": True}
# Sampling seed of step i is the sample's seed + i * SEGMENT_SEED_STRIDE (distinct per step).
SEGMENT_SEED_STRIDE = 100_003
# The endpoint check: a forced JSON object {"k": ...}; stop at its key and keep it.
CHECK_KEY = '"k"'
CHECK_BODY = {
    "include_stop_str_in_output": True,
    "response_format": {"type": "json_schema", "json_schema": {
        "name": "handoff_check", "strict": True, "schema": {
            "type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"],
            "additionalProperties": False}}},
}
NEEDED_FIELDS = "include_stop_str_in_output, continue_final_message and add_generation_prompt"


class HandoffServerError(RuntimeError):
    """A team member's server cannot run step handoffs; the message says what is missing."""


def _server_error(who: str, client: Any, found: str) -> HandoffServerError:
    url, model = getattr(client, "base_url", "?"), getattr(client, "model", "?")
    return HandoffServerError(
        f"handoff mode needs the {who}'s server to honour vLLM's chat-completions fields "
        f"{NEEDED_FIELDS}, but the server at {url} (model {model!r}) {found}. Without them "
        f"every step's \"\\n\\n\" is dropped, each first step reads as the end of the answer and "
        f"every team answer has one segment. Serve the {who} with vLLM (weft's local server or "
        f"`vllm serve`), or evaluate the model alone (mode single).")


async def check_step_fields(client: Any, *, who: str = "senior",
                            tag: str = "eval/handoff-check") -> None:
    """Raise :class:`HandoffServerError` unless ``client``'s server keeps a matched stop string
    in the text (``include_stop_str_in_output``); see the module docstring."""
    from pipelines.llm import SamplingParams

    url = getattr(client, "base_url", None)
    messages = [{"role": "user", "content": f'Reply with {{"k": "hello"}}. (endpoint check '
                                            f"of {url})"}]
    params = SamplingParams(temperature=0.0, max_tokens=24, stop=(CHECK_KEY,), seed=0, n=1)
    result = (await client.chat(messages, params, tag=tag, extra_body=CHECK_BODY))[0]
    if result.error:
        raise _server_error(who, client, f"refused the check request ({result.error})")
    text = result.text or ""
    kept = text.lstrip().startswith("{") and text.endswith(CHECK_KEY) and text.count('"') == 2
    if not kept:
        raise _server_error(who, client, f"returned {text!r} to a greedy request forced to write "
                                         f"a JSON object {{{CHECK_KEY}: ...}} (response_format "
                                         f"json_schema) that must stop at its key {CHECK_KEY} "
                                         f"and keep it in the text")


@dataclass
class HandoffTeam:
    """The two clients of a handoff run, passed to ``eval.runner.evaluate`` as its client.

    ``senior`` and ``junior`` are LLM clients (``pipelines.llm.LLMClient`` or anything with its
    ``chat``/``map``); batching (``map``) and the endpoint probes use the senior's client."""

    senior: Any
    junior: Any

    def __post_init__(self) -> None:
        for name in ("senior", "junior"):
            if not hasattr(getattr(self, name), "chat"):
                raise TypeError(f"HandoffTeam.{name} must be an LLM client with a `chat` method "
                                f"(pipelines.llm.LLMClient), got {type(getattr(self, name))!r}")

    @property
    def base_url(self) -> str | None:
        return getattr(self.senior, "base_url", None)

    @property
    def model(self) -> str | None:
        return getattr(self.senior, "model", None)

    def client(self, author: str) -> Any:
        return self.senior if author == SENIOR else self.junior

    def clients(self) -> list[Any]:
        """The team's distinct clients (one when senior and junior share it); the runner sums
        their ``usage()`` to report generation speed (``eval.runner.client_usage``)."""
        return [self.senior] if self.junior is self.senior else [self.senior, self.junior]

    async def map(self, fn, items, **kwargs):
        return await self.senior.map(fn, items, **kwargs)

    async def check_endpoints(self, tag: str = "eval/handoff-check") -> None:
        """Check each HTTP endpoint of the team once (:func:`check_step_fields`); clients with
        no ``base_url`` (in-process) are not checked."""
        seen: set[tuple[Any, Any]] = set()
        for who in ("senior", "junior"):
            client = getattr(self, who)
            key = (getattr(client, "base_url", None), getattr(client, "model", None))
            if key[0] is None or key in seen:
                continue
            seen.add(key)
            await check_step_fields(client, who=who, tag=tag)


def check_handoff_settings(schedule: str, starts: str, p: float) -> None:
    """ValueError naming the bad field of a handoff configuration."""
    if schedule not in HANDOFF_SCHEDULES:
        raise ValueError(f"handoff_schedule must be one of {HANDOFF_SCHEDULES} (alternate: strict "
                         f"round-robin, §4.3; bernoulli: a draw per step, App. B.3), got {schedule!r}")
    if starts not in HANDOFF_STARTS:
        raise ValueError(f"handoff_starts must be one of {HANDOFF_STARTS}, got {starts!r}")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"handoff_p (the senior's probability per step, bernoulli schedule) "
                         f"must be in [0, 1], got {p!r}")


class Schedule:
    """Who writes each step: the starter first, then round-robin or seeded Bernoulli draws."""

    def __init__(self, schedule: str, starts: str, p: float = 0.5, seed: int | None = 0):
        check_handoff_settings(schedule, starts, p)
        self.schedule, self.p = schedule, float(p)
        self.current = SENIOR if starts == "senior" else JUNIOR
        self._rng = random.Random(0 if seed is None else seed)

    def next(self) -> str:
        """The author of the next step, after a ``"\\n\\n"`` boundary."""
        if self.schedule == "alternate":
            self.current = JUNIOR if self.current == SENIOR else SENIOR
        else:
            self.current = SENIOR if self._rng.random() < self.p else JUNIOR
        return self.current


def handoff_label(model: str, partner: str, starts: str, schedule: str = "alternate",
                  p: float = 0.5) -> str:
    """The ``model`` value of a team's rows, so the leaderboard and the paired tests keep each
    (senior, partner, who starts, schedule) apart from the senior's solo rows."""
    label = f"{model}:handoff:{partner}:{starts}-first"
    return label if schedule == "alternate" else f"{label}:bernoulli-{float(p):g}"


def step_ended(text: str, finish_reason: str | None) -> bool:
    """Whether a step stopped at the ``"\\n\\n"`` boundary (so the partner takes over), as
    opposed to the end of the answer (EOS) or the token cap."""
    return finish_reason == "stop" and text.endswith(STEP_MARKER)


async def handoff_generate(team: HandoffTeam, messages: list[dict[str, Any]], params: Any, *,
                           schedule: str = "alternate", starts: str = "senior", p: float = 0.5,
                           tag: str = "eval/handoff", sample_index: int = 0) -> dict[str, Any]:
    """One team answer to ``messages``; ``params.max_tokens`` caps the whole answer.

    Returns the fields of an ``eval_samples`` row: ``output`` (the joined steps),
    ``prompt_tokens`` (of the first request), ``completion_tokens`` (summed), ``latency_s``
    (summed), ``finish_reason`` and ``gen_error`` of the last request, and the authorship
    fields listed in the module docstring. A failed request ends the answer with its error
    (the row is then a failed generation, not a wrong answer)."""
    if not isinstance(team, HandoffTeam):
        raise TypeError("handoff mode needs a HandoffTeam(senior=client, junior=client) as the "
                        f"client (eval.handoff_team), got {type(team).__name__}")
    turns = Schedule(schedule, starts, p, seed=params.seed)
    author = turns.current
    limit = int(params.max_tokens)
    text, authors = "", []
    tokens = {SENIOR: 0, JUNIOR: 0}
    prompt_tokens, latency, finish, error = 0, 0.0, None, None
    while True:
        step = len(authors)
        seed = None if params.seed is None else int(params.seed) + SEGMENT_SEED_STRIDE * step
        step_params = dataclasses.replace(params, max_tokens=max(1, limit - sum(tokens.values())),
                                          stop=(STEP_MARKER,), seed=seed, n=1)
        if step == 0:
            conversation, body = list(messages), FIRST_STEP
        else:
            conversation, body = [*messages, {"role": "assistant", "content": text}], NEXT_STEP
        result = (await team.client(author).chat(conversation, step_params, tag=tag,
                                                 sample_index=sample_index, extra_body=body))[0]
        latency += float(result.latency_s or 0.0)
        finish, error = result.finish_reason, result.error
        if step == 0:
            prompt_tokens = int(result.prompt_tokens or 0)
        if error:
            break
        piece = result.text or ""
        if STEP_MARKER in piece[:-len(STEP_MARKER)]:
            raise _server_error("senior" if author == SENIOR else "junior", team.client(author),
                                f"returned a step with {STEP_MARKER!r} before its end, so it "
                                f"ignored the stop string")
        text += piece
        authors.append(author)
        tokens[author] += int(result.completion_tokens or 0)
        if not step_ended(piece, finish) or sum(tokens.values()) >= limit:
            break
        author = turns.next()
    total = sum(tokens.values())
    return {
        "output": text, "prompt_tokens": prompt_tokens, "completion_tokens": total,
        "latency_s": latency, "finish_reason": finish, "gen_error": error,
        "handoff_starts": starts, "handoff_schedule": schedule, "segments": len(authors),
        "handoffs": sum(1 for a, b in itertools.pairwise(authors) if a != b),
        "segment_authors": "".join(authors), "senior_tokens": tokens[SENIOR],
        "junior_tokens": tokens[JUNIOR],
        "senior_share": tokens[SENIOR] / total if total else None,
    }
