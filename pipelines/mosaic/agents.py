"""MOSAIC's two roles — manager and actor — and the baseline actor, as protocols plus LLM versions.

- The **manager** returns a navigation card ``{guide, stage, mode}`` (:class:`NavigationCard`)
  from the problem, the reference solution, the history and the steps left. ``LLMManager``
  asks for it with ``LLMClient.chat_json`` (JSON schema, one repair round) and our prompt
  ``prompts/mosaic_manager.md``.
- The **actor** writes one step's text from the problem, the history and the card (never the
  reference). ``LLMActor`` uses ``prompts/mosaic_actor.md``; ``LLMBaselineActor`` plays the
  baseline synthesizer in a plain multi-turn conversation (``prompts/mosaic_baseline.md``).
- :func:`parse_actor_reply` turns an actor's text into a ``pipelines.tir.Step``: strictly when
  it already follows the schema, otherwise leniently (an unclosed last tag, a fenced code block,
  a bare ``\\boxed{}``), always returning the canonical step and whether repair was needed.
- :func:`enforce_card` applies the rules of DeepTool §2.1 (Listing 1, "Analysis Logic") that
  the loop never leaves to the model: Correction after a failed observation (rule 1, checked
  by the loop itself) or when the manager's verdict is an execution error or a logical
  deviation from the reference (rule 2); otherwise Progress ("If valid: Set
  reasoning_mode=Progress": the verdict decides, whatever mode the manager wrote); Correction
  means stage Intermediate, since the actor
  must fix the error before answering (rule 3, "Correction -> Intermediate"), except on the very
  last step, where Final wins (Listing 1's urgency rule; Algorithm 1 stops at T_max).
  :func:`redact_answer` removes a gold answer that the manager's guide gives away.

Departures from the paper, on purpose: the card carries two more fields than Listing 1's
``{navigational_guide, solution_stage, reasoning_mode}``: ``verdict`` (``on_track``,
``execution_error`` or ``logical_deviation``: which analysis rule fired) and ``reason`` (one
sentence: what went wrong), so every Correction is recorded with why it happened; the field
names are shorter (``guide``, ``stage``, ``mode``).

Prompt files are read at every call, so they can be edited between runs. Not guaranteed: that
the models follow their instructions (small ones do not); every reply is checked, and what
cannot be used comes back as an error, never an exception (``EndpointUnreachable`` excepted).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pipelines.prompts import PromptFile, fill, load_prompt, prompt_path, render
from pipelines.text import last_boxed
from pipelines.tir import (
    ANSWER,
    CODE,
    KIND_ANSWER,
    KIND_CODE,
    THINK,
    Step,
    TIRFormatError,
    interpreter_message,
    neutralize_tags,
    parse_output,
    serialize_output,
    serialize_step,
)

if TYPE_CHECKING:  # imported lazily: the pure parts need no LLM client
    from pipelines.llm import LLMClient, SamplingParams

MANAGER_PROMPT = prompt_path("mosaic_manager")
ACTOR_PROMPT = prompt_path("mosaic_actor")
BASELINE_PROMPT = prompt_path("mosaic_baseline")

STAGE_INTERMEDIATE = "Intermediate"
STAGE_FINAL = "Final"
STAGES = (STAGE_INTERMEDIATE, STAGE_FINAL)
MODE_PROGRESS = "Progress"
MODE_CORRECTION = "Correction"
MODES = (MODE_PROGRESS, MODE_CORRECTION)
VERDICT_ON_TRACK = "on_track"
VERDICT_EXECUTION_ERROR = "execution_error"
VERDICT_LOGICAL_DEVIATION = "logical_deviation"
VERDICTS = (VERDICT_ON_TRACK, VERDICT_EXECUTION_ERROR, VERDICT_LOGICAL_DEVIATION)
# Why a card is in Correction mode (recorded per step): the loop saw the interpreter fail, or
# the manager judged an error or a deviation (its verdict names which).
CORRECTION_OBSERVED_ERROR = "observed_error"

FORCED_FINAL = "forced_final"
FORCED_CORRECTION = "forced_correction"  # a failed observation, whatever the manager said
VERDICT_CORRECTION = "verdict_correction"  # the manager's own verdict named a problem
VERDICT_PROGRESS = "verdict_progress"  # on_track and nothing failed: Progress, not Correction
CORRECTION_INTERMEDIATE = "correction_intermediate"  # Correction asks for code, not the answer

MAX_GUIDE_CHARS = 300  # guided decoding closes the string here; small models ramble
MAX_REASON_CHARS = 200
# room for a full-length reason and guide even at one character per token, plus the JSON
MANAGER_MAX_TOKENS = 640
REDACTED = "[result withheld]"
NO_HISTORY = "(no steps yet)"
CODE_INSTRUCTION = ("Now write this step: <think>...</think> followed by <code>...</code>. "
                    "Do not give the final answer yet.")
ANSWER_INSTRUCTION = ("This is the final step: write <think>...</think> followed by "
                      "<answer>\\boxed{your final answer}</answer>. Do not write code.")
EITHER_INSTRUCTION = ("Now write this step: <think>...</think> followed by <code>...</code>, or, "
                      "if the work already gives the result, <answer>\\boxed{...}</answer>.")
ACTOR_STOP = ("</code>", "</answer>", "<interpreter>")

_FENCE_RE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)
_ANY_TAG_RE = re.compile(r"</?(?:think|code|interpreter|answer)>")


# ---------------------------------------------------------------------------------------------
# Prompt values


def render_history(steps: Sequence[Step]) -> str:
    """Earlier steps in the TIR tag format, labelled ``Step k:``, or a note when empty."""
    if not steps:
        return NO_HISTORY
    return "\n\n".join(f"Step {i}:\n{serialize_step(s)}" for i, s in enumerate(steps, start=1))


# ---------------------------------------------------------------------------------------------
# Navigation cards


@dataclass(frozen=True)
class NavigationCard:
    """The manager's intent I_t (DeepTool eq. 1). ``verdict``/``reason``: the manager's check of
    the last step against the interpreter output and the reference (see the module docstring)."""

    guide: str
    stage: str
    mode: str
    verdict: str = VERDICT_ON_TRACK
    reason: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"guide": self.guide, "stage": self.stage, "mode": self.mode,
                "verdict": self.verdict, "reason": self.reason}


def card_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {  # the check first, so a model decodes its verdict before the mode
            "verdict": {"type": "string", "enum": list(VERDICTS)},
            "reason": {"type": "string", "maxLength": MAX_REASON_CHARS},
            "guide": {"type": "string", "minLength": 1, "maxLength": MAX_GUIDE_CHARS},
            "stage": {"type": "string", "enum": list(STAGES)},
            "mode": {"type": "string", "enum": list(MODES)},
        },
        "required": ["verdict", "reason", "guide", "stage", "mode"],
        "additionalProperties": False,
    }


def parse_card(value: Any) -> NavigationCard:
    """A card from a decoded JSON value; ValueError (TypeError for a non-object) naming the bad
    field. ``reason`` may be missing or empty (then it is "")."""
    if not isinstance(value, dict):
        raise TypeError(f"a navigation card is a JSON object, got {type(value).__name__}")
    guide, stage, mode = value.get("guide"), value.get("stage"), value.get("mode")
    verdict, reason = value.get("verdict"), value.get("reason", "")
    if not isinstance(guide, str) or not guide.strip():
        raise ValueError('"guide" must be a non-empty string')
    if stage not in STAGES:
        raise ValueError(f'"stage" must be one of {list(STAGES)}, got {stage!r}')
    if mode not in MODES:
        raise ValueError(f'"mode" must be one of {list(MODES)}, got {mode!r}')
    if verdict not in VERDICTS:
        raise ValueError(f'"verdict" must be one of {list(VERDICTS)} (your check of the last '
                         f'step), got {verdict!r}')
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        raise TypeError(f'"reason" must be a string (what went wrong, or ""), got {reason!r}')
    return NavigationCard(guide.strip()[:MAX_GUIDE_CHARS], stage, mode, verdict,
                          reason.strip()[:MAX_REASON_CHARS])


def enforce_card(card: NavigationCard, steps_left: int, last_failed: bool) -> tuple[NavigationCard, list[str]]:
    """The card with DeepTool's Listing 1 rules applied, and which rules changed it, in order:

    1. after a failed observation the mode is Correction (``forced_correction``);
    2. a verdict that names a problem (execution error, logical deviation) means Correction
       (``verdict_correction``); an ``on_track`` verdict with no failed observation means
       Progress (``verdict_progress``): Listing 1's "If valid: Set reasoning_mode=Progress",
       so a Correction the verdict does not support never turns a Final stage into
       Intermediate;
    3. with one step left the stage is Final (``forced_final``): the last step must answer;
       otherwise Correction means Intermediate (``correction_intermediate``): the actor fixes
       the error before it answers.
    """
    overrides: list[str] = []
    if last_failed and card.mode != MODE_CORRECTION:
        card = replace(card, mode=MODE_CORRECTION)
        overrides.append(FORCED_CORRECTION)
    if card.verdict != VERDICT_ON_TRACK and card.mode != MODE_CORRECTION:
        card = replace(card, mode=MODE_CORRECTION)
        overrides.append(VERDICT_CORRECTION)
    if not last_failed and card.verdict == VERDICT_ON_TRACK and card.mode != MODE_PROGRESS:
        card = replace(card, mode=MODE_PROGRESS)
        overrides.append(VERDICT_PROGRESS)
    if steps_left <= 1:
        if card.stage != STAGE_FINAL:
            card = replace(card, stage=STAGE_FINAL)
            overrides.append(FORCED_FINAL)
    elif card.mode == MODE_CORRECTION and card.stage != STAGE_INTERMEDIATE:
        card = replace(card, stage=STAGE_INTERMEDIATE)
        overrides.append(CORRECTION_INTERMEDIATE)
    return card, overrides


def correction_reason(card: NavigationCard, last_failed: bool) -> str | None:
    """Why a card enforced by :func:`enforce_card` is in Correction mode, None when it is not:
    ``observed_error`` when the loop saw the last interpreter output fail, else the manager's
    verdict (``execution_error`` / ``logical_deviation``; an enforced Correction always has
    one of the two causes)."""
    if card.mode != MODE_CORRECTION:
        return None
    if last_failed:
        return CORRECTION_OBSERVED_ERROR
    if card.verdict == VERDICT_ON_TRACK:
        raise ValueError("a Correction card with an on_track verdict and no failed observation "
                         "was not enforced: call enforce_card first")
    return card.verdict


def redact_answer(guide: str, gold: str, problem: str) -> tuple[str, bool]:
    """Replace a gold answer that the guide states but the problem does not with
    ``[result withheld]``: numbers as whole tokens (with or without thousands separators),
    other answers of 2+ characters verbatim. Returns (guide, whether anything was replaced)."""
    answer = (gold or "").strip().strip("$").strip()
    if not answer:
        return guide, False
    plain = answer.replace(",", "")
    if re.fullmatch(r"-?\d+(?:\.\d+)?", plain):
        forms = {plain, answer}
        if "." not in plain:
            forms.add(f"{int(plain):,}")
        patterns = [re.compile(rf"(?<![\d.,]){re.escape(f)}(?!\d|[.,]\d)") for f in forms]
    elif len(answer) >= 2:
        patterns = [re.compile(re.escape(answer))]
    else:
        return guide, False
    if any(p.search(problem) for p in patterns):
        return guide, False
    new = guide
    for pattern in patterns:
        new = pattern.sub(REDACTED, new)
    return new, new != guide


# ---------------------------------------------------------------------------------------------
# Parsing actor replies


@dataclass(frozen=True)
class ActorReply:
    """A usable step (observation None) or an error. ``strict``: the text already followed the
    schema exactly; otherwise it was repaired (what was done is in ``repairs``)."""

    step: Step | None
    strict: bool = False
    error: str | None = None
    repairs: tuple[str, ...] = ()


def _close_dangling(text: str) -> tuple[str, list[str]]:
    """Close a last tag left open (a stop sequence ends the reply before its closing tag)."""
    repairs = []
    for tag in (ANSWER, CODE, THINK):
        if text.rfind(f"<{tag}>") > text.rfind(f"</{tag}>"):
            text = text.rstrip() + f"\n</{tag}>"
            repairs.append(f"closed <{tag}>")
            break
    return text, repairs


def _first(tag: str, text: str) -> re.Match[str] | None:
    return re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)


def clean_code(code: str) -> str:
    """Newlines normalised, trailing spaces and surrounding blank lines removed, common
    indentation removed, and a Markdown fence wrapped around the whole code dropped."""
    code = code.replace("\r\n", "\n").replace("\r", "\n")
    fenced = _FENCE_RE.fullmatch(code.strip())
    if fenced:
        code = fenced.group(1)
    code = "\n".join(line.rstrip() for line in code.split("\n"))
    return textwrap.dedent(code).strip("\n")


def canonical_answer(text: str) -> str | None:
    """``\\boxed{X}`` for the last boxed X in ``text``; a short one-line bare answer is boxed;
    None when there is no usable answer."""
    boxed = last_boxed(text)
    if boxed:
        return f"\\boxed{{{boxed}}}"
    bare = text.strip().strip("$").strip()
    if bare and "\n" not in bare and len(bare) <= 80:
        return f"\\boxed{{{bare}}}"
    return None


def parse_actor_reply(text: str, *, allow_code: bool = True, allow_answer: bool = True) -> ActorReply:
    """Turn an actor's reply into a canonical step (see the module docstring)."""
    if not (allow_code or allow_answer):
        raise ValueError("allow at least one of code and answer")
    if not isinstance(text, str) or not text.strip():
        return ActorReply(None, error="the reply is empty")
    try:
        step = parse_output(text)
        if ((step.kind == KIND_CODE and allow_code) or (step.kind == KIND_ANSWER and allow_answer)):
            if step.kind == KIND_CODE:
                code = clean_code(step.action)
                if code:
                    return ActorReply(Step(step.thought.strip(), KIND_CODE, code),
                                      strict=code == step.action and step.thought == step.thought.strip())
            else:
                answer = canonical_answer(step.action)
                if answer:
                    return ActorReply(Step(step.thought.strip(), KIND_ANSWER, answer),
                                      strict=answer == step.action.strip())
    except TIRFormatError:
        pass
    fixed, repairs = _close_dangling(text)
    candidates: list[tuple[str, int, int, str]] = []  # (kind, start, end, action); first wins
    for tag, allowed in ((CODE, allow_code), (ANSWER, allow_answer)):
        match = _first(tag, fixed) if allowed else None
        if match:
            candidates.append((tag, match.start(), match.end(), match.group(1)))
    if allow_code and not any(c[0] == CODE for c in candidates):
        fence = _FENCE_RE.search(fixed)
        if fence:
            candidates.append((CODE, fence.start(), fence.end(), fence.group(1)))
            repairs.append("code taken from a Markdown fence")
    if allow_answer and not candidates:
        boxed = last_boxed(fixed)
        if boxed:
            at = fixed.rfind("\\boxed")
            candidates.append((ANSWER, at, len(fixed), f"\\boxed{{{boxed}}}"))
            repairs.append("answer taken from a bare \\boxed{}")
    if not candidates:
        wanted = " or ".join(t for t, ok in (("<code>", allow_code), ("<answer>", allow_answer)) if ok)
        return ActorReply(None, error=f"no {wanted} block found (write <think>...</think> then "
                                      f"{wanted}...)", repairs=tuple(repairs))
    kind, start, _, action = min(candidates, key=lambda c: c[1])
    think = _first(THINK, fixed[:start])
    if think:
        thought = think.group(1)
    else:
        thought = _ANY_TAG_RE.sub("", fixed[:start])
        repairs.append("no <think> block: text before the action used as the thought")
    thought = neutralize_tags(thought.strip())
    if kind == CODE:
        code = neutralize_tags(clean_code(action))
        if not code:
            return ActorReply(None, error="the <code> block is empty", repairs=tuple(repairs))
        return ActorReply(Step(thought, KIND_CODE, code), repairs=tuple(repairs))
    answer = canonical_answer(action)
    if not answer:
        return ActorReply(None, error="the <answer> block holds no usable answer (use "
                                      "<answer>\\boxed{...}</answer>)", repairs=tuple(repairs))
    return ActorReply(Step(thought, KIND_ANSWER, neutralize_tags(answer)), repairs=tuple(repairs))


# ---------------------------------------------------------------------------------------------
# Protocols and views


@dataclass(frozen=True)
class ManagerView:
    problem: str
    reference: str
    answer: str
    history: tuple[Step, ...]
    step: int
    max_steps: int
    last_failed: bool

    @property
    def steps_left(self) -> int:
        return self.max_steps - self.step + 1


@dataclass(frozen=True)
class ActorView:
    problem: str
    history: tuple[Step, ...]
    card: NavigationCard | None  # None for the baseline
    allow_code: bool = True
    allow_answer: bool = True
    previous_reply: str | None = None  # set on the one repair round
    feedback: str | None = None


@dataclass
class AgentResult:
    """What an agent call produced: ``value`` (a card, or reply text) or ``error``;
    ``endpoint_error`` marks failures of the request itself (not of the model's output)."""

    value: Any = None
    error: str | None = None
    endpoint_error: bool = False
    raw: list[str] = field(default_factory=list)


class Manager(Protocol):
    async def navigate(self, view: ManagerView) -> AgentResult: ...


class Actor(Protocol):
    async def act(self, view: ActorView) -> AgentResult: ...


def _default_params(max_tokens: int, temperature: float = 0.0, seed: int | None = 0,
                    stop: tuple[str, ...] | None = None) -> SamplingParams:
    from pipelines.llm import SamplingParams

    return SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed, stop=stop)


# ---------------------------------------------------------------------------------------------
# LLM implementations


class LLMManager:
    """The manager over ``LLMClient.chat_json`` (schema-constrained where the server can)."""

    def __init__(self, client: LLMClient, *, params: SamplingParams | None = None,
                 prompt_path: str | Path | None = None, tag: str = "mosaic/manager") -> None:
        self.client, self.tag = client, tag
        self.params = params or _default_params(max_tokens=MANAGER_MAX_TOKENS)
        self.prompt_path = prompt_path or MANAGER_PROMPT

    def messages(self, view: ManagerView) -> list[dict[str, str]]:
        prompt = load_prompt(self.prompt_path)
        last = view.history[-1] if view.history else None
        if last is None:
            status = "No step has been run yet."
        elif view.last_failed:
            status = "The last interpreter output shows a failure: use Correction mode."
        else:
            status = ("The last step ran without an error; check that its logic still follows "
                      "the reference solution.")
        if view.steps_left <= 1:
            status += " Only this step is left: the stage must be Final."
        values = {"problem": view.problem.strip(), "reference": view.reference.strip() or "(none)",
                  "history": render_history(view.history), "step": str(view.step),
                  "max_steps": str(view.max_steps), "steps_left": str(view.steps_left),
                  "last_status": status}
        return render(prompt, values, "a MOSAIC prompt")

    async def navigate(self, view: ManagerView) -> AgentResult:
        result = await self.client.chat_json(self.messages(view), card_schema(), self.params,
                                             validate=parse_card, tag=self.tag)
        if result.value is None:
            failed = (result.error or "").startswith("request failed")
            return AgentResult(error=result.error, endpoint_error=failed, raw=result.raw)
        card = result.value  # the client returns what ``validate`` (parse_card) returned
        return AgentResult(value=card if isinstance(card, NavigationCard) else parse_card(card),
                           raw=result.raw)


class LLMActor:
    """The MOSAIC actor: one single-turn request per step (history inside the prompt)."""

    def __init__(self, client: LLMClient, *, params: SamplingParams | None = None,
                 prompt_path: str | Path | None = None, tag: str = "mosaic/actor") -> None:
        self.client, self.tag = client, tag
        self.params = params or _default_params(max_tokens=384, stop=ACTOR_STOP)
        self.prompt_path = prompt_path or ACTOR_PROMPT

    def messages(self, view: ActorView) -> list[dict[str, str]]:
        prompt = load_prompt(self.prompt_path, need_repair=True)
        card = view.card or NavigationCard("Take the next step towards the answer.",
                                           STAGE_INTERMEDIATE, MODE_PROGRESS)
        if not view.allow_code:
            instruction = ANSWER_INSTRUCTION
        elif not view.allow_answer:
            instruction = CODE_INSTRUCTION
        else:
            instruction = ANSWER_INSTRUCTION if card.stage == STAGE_FINAL else EITHER_INSTRUCTION
        values = {"problem": view.problem.strip(), "history": render_history(view.history),
                  "guide": card.guide, "mode": card.mode, "instruction": instruction}
        messages = render(prompt, values, "a MOSAIC prompt")
        return _with_repair(messages, prompt, view)

    async def act(self, view: ActorView) -> AgentResult:
        return await _chat_text(self.client, self.messages(view), self.params, self.tag)


class LLMBaselineActor:
    """The baseline synthesizer: a plain multi-turn conversation, no card, no reference."""

    def __init__(self, client: LLMClient, *, params: SamplingParams | None = None,
                 prompt_path: str | Path | None = None, tag: str = "mosaic/baseline") -> None:
        self.client, self.tag = client, tag
        self.params = params or _default_params(max_tokens=384, stop=ACTOR_STOP)
        self.prompt_path = prompt_path or BASELINE_PROMPT

    def messages(self, view: ActorView) -> list[dict[str, str]]:
        prompt = load_prompt(self.prompt_path, need_repair=True)
        values = {"problem": view.problem.strip()}
        messages = render(prompt, values, "a MOSAIC prompt")
        for step in view.history:
            messages.append({"role": "assistant", "content": serialize_output(step)})
            messages.append(interpreter_message(step.observation or ""))
        if view.allow_code is False:  # not used by the plain loop; kept for symmetry
            messages.append({"role": "user", "content": ANSWER_INSTRUCTION})
        return _with_repair(messages, prompt, view)

    async def act(self, view: ActorView) -> AgentResult:
        return await _chat_text(self.client, self.messages(view), self.params, self.tag)


def _with_repair(messages: list[dict[str, str]], prompt: PromptFile,
                 view: ActorView) -> list[dict[str, str]]:
    if view.previous_reply is None:
        return messages
    return messages + [
        {"role": "assistant", "content": view.previous_reply},
        {"role": "user", "content": fill(prompt.repair, {"error": view.feedback or "wrong form"},
                                         "a MOSAIC repair prompt")},
    ]


async def _chat_text(client: LLMClient, messages: list[dict[str, str]],
                     params: SamplingParams, tag: str) -> AgentResult:
    result = (await client.chat(messages, params, tag=tag))[0]
    if result.error is not None:
        return AgentResult(error=result.error, endpoint_error=True)
    return AgentResult(value=result.text, raw=[result.text])
