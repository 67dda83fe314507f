"""The tool-integrated reasoning (TIR) schema: one serialization for every TIR trajectory in weft.

A trajectory is a list of steps. Every step but the last is an *intermediate* step
``<think>…</think> <code>…</code> <interpreter>…</interpreter>`` (a thought, Python code, and
what the interpreter printed); the last step is a *final* step ``<think>…</think>
<answer>…</answer>``. This module holds:

- :class:`Step`, the serializer (:func:`serialize_trajectory`, :func:`serialize_output`), the
  strict parser (:func:`parse_trajectory`, :func:`parse_output`) and the validator
  (:func:`validate_steps`);
- the two SFT renderings, one row per step in TRL's conversational prompt/completion format:
  ``state_preserved`` (earlier thoughts stay in the context) and ``state_discarded`` (earlier
  thoughts dropped, only code and interpreter outputs kept);
- the action-centric process reward :func:`action_process_reward`: a format gate (the output
  has the form its position requires) times the Ratcliff–Obershelp similarity of the action
  alone (code or answer, never the thought) to the reference action.

Serialization puts every block's content on its own lines (``<tag>\\ncontent\\n</tag>``); the
parser removes exactly one newline after an opening tag and one before a closing tag, so
``parse_trajectory(serialize_trajectory(steps)) == steps`` for any content that does not
itself contain one of the four tag strings (the validator rejects such content).

Not guaranteed: that a parsed trajectory is sensible (a valid trajectory may hold wrong code or
a wrong answer); similarity is a surface measure of the action text, not of what it computes.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.text import normalize_problem_text

THINK = "think"
CODE = "code"
INTERPRETER = "interpreter"
ANSWER = "answer"
TAGS = (THINK, CODE, INTERPRETER, ANSWER)

KIND_CODE = "code"
KIND_ANSWER = "answer"
KINDS = (KIND_CODE, KIND_ANSWER)

STATE_PRESERVED = "state_preserved"
STATE_DISCARDED = "state_discarded"
RENDERINGS = (STATE_PRESERVED, STATE_DISCARDED)

_TAG_RE = re.compile(r"<(/?)(think|code|interpreter|answer)>")

TIR_SYSTEM_PROMPT = (
    "Solve the math problem step by step with the help of a Python interpreter. Write one step "
    "per reply. A step starts with your reasoning inside <think>...</think>. Then either write "
    "Python code inside <code>...</code>; it is run, variables persist between steps, and you "
    "see what it printed inside <interpreter>...</interpreter>. Or, once you know the result, "
    "give the final answer inside <answer>\\boxed{...}</answer>, which ends the solution."
)


class TIRFormatError(ValueError):
    """Text or steps that do not follow the TIR schema; the message says where and what."""


# ---------------------------------------------------------------------------------------------
# Steps


@dataclass(frozen=True)
class Step:
    """One step: a thought and an action. ``kind="code"``: ``action`` is Python source and
    ``observation`` the interpreter output (None while not executed yet); ``kind="answer"``:
    ``action`` is the final answer (conventionally ``\\boxed{...}``), ``observation`` is None."""

    thought: str
    kind: str
    action: str
    observation: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TIRFormatError(f"Step.kind must be one of {KINDS}, got {self.kind!r}")
        for name in ("thought", "action"):
            if not isinstance(getattr(self, name), str):
                raise TIRFormatError(
                    f"Step.{name} must be a str, got {type(getattr(self, name)).__name__}")
        if self.observation is not None and not isinstance(self.observation, str):
            raise TIRFormatError(
                f"Step.observation must be a str or None, got {type(self.observation).__name__}")
        if self.kind == KIND_ANSWER and self.observation is not None:
            raise TIRFormatError("an answer step has no interpreter observation; pass observation=None")

    def with_observation(self, observation: str) -> Step:
        return dataclasses.replace(self, observation=observation)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        try:
            return cls(thought=data["thought"], kind=data["kind"], action=data["action"],
                       observation=data.get("observation"))
        except KeyError as exc:
            raise TIRFormatError(f"step dict is missing {exc.args[0]!r}: {sorted(data)}") from exc


def trajectory_id(source: str, problem: str, text: str) -> str:
    """First 16 hex chars of sha1 over source, normalised problem text and the trajectory text."""
    key = "\x1f".join((source, normalize_problem_text(problem), text))
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Trajectory:
    """A complete trajectory with its problem: the unit that decomposition and SFT consume.
    ``answer`` is the gold answer of the problem; ``meta`` is a JSON string."""

    trajectory_id: str
    problem_id: str
    source: str
    problem: str
    answer: str
    steps: tuple[Step, ...]
    meta: str = "{}"

    def text(self) -> str:
        return serialize_trajectory(self.steps)

    def to_row(self) -> dict[str, Any]:
        return {
            "trajectory_id": self.trajectory_id, "problem_id": self.problem_id,
            "source": self.source, "problem": self.problem, "answer": self.answer,
            "num_steps": len(self.steps), "text": self.text(),
            "steps_json": json.dumps(steps_to_dicts(self.steps), ensure_ascii=False),
            "meta": self.meta,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Trajectory:
        """From a row written by :meth:`to_row` (``steps_json``) or one holding only ``text``."""
        if row.get("steps_json"):
            steps = steps_from_dicts(json.loads(row["steps_json"]))
        elif row.get("text"):
            steps = parse_trajectory(row["text"])
        else:
            raise TIRFormatError("row has neither steps_json nor text; cannot rebuild its steps")
        return cls(str(row["trajectory_id"]), str(row["problem_id"]), str(row["source"]),
                   str(row["problem"]), str(row["answer"]), tuple(steps), row.get("meta") or "{}")

    def __repr__(self) -> str:
        return (f"Trajectory(trajectory_id={self.trajectory_id!r}, source={self.source!r}, "
                f"steps={len(self.steps)}, answer={self.answer[:40]!r})")


def steps_to_dicts(steps: Iterable[Step]) -> list[dict[str, Any]]:
    return [s.to_dict() for s in steps]


def steps_from_dicts(items: Iterable[dict[str, Any]]) -> list[Step]:
    return [Step.from_dict(d) for d in items]


# ---------------------------------------------------------------------------------------------
# Serializer


def block(tag: str, content: str) -> str:
    """``<tag>\\ncontent\\n</tag>``."""
    if tag not in TAGS:
        raise TIRFormatError(f"unknown tag {tag!r}; the schema has {TAGS}")
    return f"<{tag}>\n{content}\n</{tag}>"


def serialize_output(step: Step, *, with_thought: bool = True) -> str:
    """What a model writes for one step: the thought and the action, no interpreter block.
    ``with_thought=False`` gives the action alone (the state-discarded history form)."""
    parts = [block(THINK, step.thought)] if with_thought else []
    parts.append(block(CODE if step.kind == KIND_CODE else ANSWER, step.action))
    return "\n".join(parts)


def serialize_step(step: Step) -> str:
    """A whole step; a code step must have its observation."""
    text = serialize_output(step)
    if step.kind == KIND_CODE:
        if step.observation is None:
            raise TIRFormatError("cannot serialize a code step without its interpreter observation")
        text += "\n" + block(INTERPRETER, step.observation)
    return text


def serialize_trajectory(steps: Sequence[Step]) -> str:
    """All steps, one after the other, separated by a newline."""
    return "\n".join(serialize_step(s) for s in steps)


# ---------------------------------------------------------------------------------------------
# Strict parser


def _content(raw: str) -> str:
    raw = raw.removeprefix("\n")
    raw = raw.removesuffix("\n")
    return raw


def parse_blocks(text: str) -> list[tuple[str, str]]:
    """``[(tag, content), ...]`` for a text made only of tag blocks separated by whitespace.

    Raises :class:`TIRFormatError` naming the character offset for text outside a block, a
    closing tag that does not match, a block opened inside another one, or an unclosed block.
    """
    if not isinstance(text, str):
        raise TIRFormatError(f"expected the trajectory as a str, got {type(text).__name__}")
    blocks: list[tuple[str, str]] = []
    pos = 0
    open_tag: str | None = None
    open_end = 0
    for match in _TAG_RE.finditer(text):
        closing, tag = match.group(1) == "/", match.group(2)
        if open_tag is None:
            between = text[pos:match.start()]
            if between.strip():
                raise TIRFormatError(
                    f"text outside any block at offset {pos}: {between.strip()[:60]!r}; every "
                    "piece of a step must be inside <think>, <code>, <interpreter> or <answer>")
            if closing:
                raise TIRFormatError(f"</{tag}> at offset {match.start()} closes a block that "
                                     "was never opened")
            open_tag, open_end = tag, match.end()
        else:
            if not closing:
                raise TIRFormatError(
                    f"<{tag}> at offset {match.start()} opens inside <{open_tag}>; blocks "
                    "cannot nest (and their content cannot contain the tag strings)")
            if tag != open_tag:
                raise TIRFormatError(f"</{tag}> at offset {match.start()} does not close "
                                     f"<{open_tag}>")
            blocks.append((tag, _content(text[open_end:match.start()])))
            open_tag, pos = None, match.end()
    if open_tag is not None:
        raise TIRFormatError(f"<{open_tag}> opened at offset {open_end - len(open_tag) - 2} "
                             "is never closed")
    if text[pos:].strip():
        raise TIRFormatError(f"text after the last block at offset {pos}: "
                             f"{text[pos:].strip()[:60]!r}")
    return blocks


def _steps_from_blocks(blocks: list[tuple[str, str]], *, complete: bool) -> list[Step]:
    steps: list[Step] = []
    i = 0
    while i < len(blocks):
        number = len(steps) + 1
        if steps and steps[-1].kind == KIND_ANSWER:
            raise TIRFormatError(f"step {number} follows the final <answer>; nothing may come "
                                 "after the answer")
        tag = blocks[i][0]
        if tag != THINK:
            raise TIRFormatError(f"step {number} starts with <{tag}>; every step starts with "
                                 "<think>")
        if i + 1 >= len(blocks):
            raise TIRFormatError(f"step {number} has a <think> block but no <code> or <answer>")
        thought, (tag2, action) = blocks[i][1], blocks[i + 1]
        if tag2 == ANSWER:
            steps.append(Step(thought, KIND_ANSWER, action))
            i += 2
        elif tag2 == CODE:
            if i + 2 >= len(blocks) or blocks[i + 2][0] != INTERPRETER:
                found = f"<{blocks[i + 2][0]}>" if i + 2 < len(blocks) else "the end"
                raise TIRFormatError(f"step {number}: <code> must be followed by "
                                     f"<interpreter>, found {found}")
            steps.append(Step(thought, KIND_CODE, action, blocks[i + 2][1]))
            i += 3
        else:
            raise TIRFormatError(f"step {number}: <think> must be followed by <code> or "
                                 f"<answer>, found <{tag2}>")
    if not steps:
        raise TIRFormatError("no steps: the text holds no <think> block")
    if complete and steps[-1].kind != KIND_ANSWER:
        raise TIRFormatError(f"the trajectory ends with a code step (step {len(steps)}); a "
                             "complete trajectory ends with <think>…</think><answer>…</answer>")
    return steps


def parse_trajectory(text: str, *, complete: bool = True) -> list[Step]:
    """Parse a serialized trajectory strictly. ``complete=False`` accepts a prefix that ends
    with a code step (a trajectory still being written)."""
    return _steps_from_blocks(parse_blocks(text), complete=complete)


def parse_output(text: str) -> Step:
    """Parse one model output for a step: ``<think>…</think>`` then ``<code>…</code>`` or
    ``<answer>…</answer>``, nothing else (no interpreter block). Returned observation is None."""
    blocks = parse_blocks(text)
    tags = [t for t, _ in blocks]
    if tags not in ([THINK, CODE], [THINK, ANSWER]):
        shown = "".join(f"<{t}>" for t in tags) or "no blocks"
        raise TIRFormatError(f"a step output is <think> then <code> or <answer>; found {shown}")
    kind = KIND_CODE if tags[1] == CODE else KIND_ANSWER
    return Step(blocks[0][1], kind, blocks[1][1])


# ---------------------------------------------------------------------------------------------
# Validator


def _tag_problem(where: str, text: str | None) -> str | None:
    found = _TAG_RE.search(text) if text is not None else None
    if found:
        return (f"{where} contains the tag string {found.group(0)}, which the parser cannot "
                "tell apart from a block boundary (see neutralize_tags)")
    return None


def neutralize_tags(text: str) -> str:
    """Rewrite tag strings inside content (``<code>`` -> ``‹code›``) so that text such as an
    interpreter output that prints a tag cannot end a block early."""
    return _TAG_RE.sub(lambda m: f"‹{m.group(1)}{m.group(2)}›", text)


def validate_steps(steps: Sequence[Step]) -> list[str]:
    """Problems with a complete trajectory (empty list: valid). Intermediate steps must be code
    steps with an observation, the last step an answer step; actions must not be blank; no
    content may contain a tag string. Empty thoughts are allowed."""
    problems: list[str] = []
    if not steps:
        return ["the trajectory has no steps"]
    for number, step in enumerate(steps, start=1):
        if not isinstance(step, Step):
            problems.append(f"step {number} is a {type(step).__name__}, not a Step")
            continue
        last = number == len(steps)
        if not last and step.kind != KIND_CODE:
            problems.append(f"step {number} is an answer step but is not the last step; only "
                            "the last step may answer")
        if not last and step.observation is None:
            problems.append(f"step {number} has no interpreter observation")
        if last and step.kind != KIND_ANSWER:
            problems.append(f"the last step ({number}) is a code step; a trajectory must end "
                            "with an answer")
        if not step.action.strip():
            problems.append(f"step {number} has an empty {step.kind}")
        for where, text in (("thought", step.thought), (step.kind, step.action),
                            ("observation", step.observation)):
            found = _tag_problem(f"step {number} {where}", text)
            if found:
                problems.append(found)
    return problems


def check_steps(steps: Sequence[Step]) -> list[Step]:
    """``steps`` as a list if valid, else :class:`TIRFormatError` listing every problem."""
    problems = validate_steps(steps)
    if problems:
        raise TIRFormatError("invalid trajectory: " + "; ".join(problems))
    return list(steps)


def validate_text(text: str) -> list[str]:
    """Problems with a serialized complete trajectory (parse errors included)."""
    try:
        steps = parse_trajectory(text)
    except TIRFormatError as exc:
        return [str(exc)]
    return validate_steps(steps)


# ---------------------------------------------------------------------------------------------
# SFT renderings


def interpreter_message(observation: str) -> dict[str, str]:
    """The turn that feeds an interpreter output back to the model."""
    return {"role": "user", "content": block(INTERPRETER, observation)}


def context_messages(problem: str, history: Sequence[Step], rendering: str = STATE_PRESERVED,
                     system_prompt: str = TIR_SYSTEM_PROMPT) -> list[dict[str, str]]:
    """The conversation a model sees before writing the next step: system, problem, then for
    every earlier (code) step an assistant turn and an interpreter turn. ``state_preserved``
    keeps each earlier thought in its assistant turn; ``state_discarded`` keeps only the code."""
    if rendering not in RENDERINGS:
        raise ValueError(f"rendering must be one of {RENDERINGS}, got {rendering!r}")
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError("problem must be a non-empty str")
    messages = [{"role": "system", "content": system_prompt},
                {"role": "user", "content": problem.strip()}]
    for number, step in enumerate(history, start=1):
        if step.kind != KIND_CODE or step.observation is None:
            raise TIRFormatError(f"history step {number} must be an executed code step; an "
                                 "answer ends a trajectory and cannot be history")
        messages.append({"role": "assistant",
                         "content": serialize_output(step, with_thought=rendering == STATE_PRESERVED)})
        messages.append(interpreter_message(step.observation))
    return messages


def sft_rows(problem: str, steps: Sequence[Step], rendering: str,
             system_prompt: str = TIR_SYSTEM_PROMPT,
             train_on: Sequence[bool] | None = None) -> list[dict[str, Any]]:
    """One TRL prompt/completion row per step of a valid trajectory. The completion is always
    the step's thought and action (the interpreter output is never a training target); the
    prompt is :func:`context_messages` of the steps before it in the given rendering.
    ``train_on[i] = False`` leaves out the row whose target is step i+1 (it still appears in
    later rows' context), e.g. a deliberately mutated step that must not be imitated."""
    check_steps(steps)
    if train_on is not None and len(train_on) != len(steps):
        raise ValueError(f"train_on has {len(train_on)} flags for {len(steps)} steps")
    rows = []
    for index, step in enumerate(steps):
        if train_on is not None and not train_on[index]:
            continue
        rows.append({
            "prompt": context_messages(problem, steps[:index], rendering, system_prompt),
            "completion": [{"role": "assistant", "content": serialize_output(step)}],
            "rendering": rendering,
            "step_index": index + 1,
            "num_steps": len(steps),
        })
    return rows


def validate_sft_rows(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Problems with SFT rows (empty: fine): the completion must be one assistant step output
    (``parse_output``), the prompt a system turn, the problem, then alternating assistant and
    interpreter turns; ``rendering`` must be known and state-discarded history holds no thought."""
    problems: list[str] = []
    for number, row in enumerate(rows, start=1):
        where = f"row {number} ({row.get('trajectory_id', '?')} step {row.get('step_index', '?')})"
        if row.get("rendering") not in RENDERINGS:
            problems.append(f"{where}: unknown rendering {row.get('rendering')!r}")
        completion = row.get("completion") or []
        if len(completion) != 1 or completion[0].get("role") != "assistant":
            problems.append(f"{where}: completion must be one assistant message")
        else:
            try:
                parse_output(completion[0].get("content") or "")
            except TIRFormatError as exc:
                problems.append(f"{where}: completion is not a step output: {exc}")
        prompt = list(row.get("prompt") or [])
        roles = [m.get("role") for m in prompt]
        expected = ["system", "user"] + ["assistant", "user"] * ((len(roles) - 2) // 2)
        if len(roles) < 2 or roles != expected:
            problems.append(f"{where}: prompt roles {roles} are not system, user, then "
                            "assistant/interpreter pairs")
            continue
        for turn in prompt[3::2]:
            if not (turn.get("content") or "").startswith(f"<{INTERPRETER}>"):
                problems.append(f"{where}: a history user turn is not an <interpreter> block")
                break
        if row.get("rendering") == STATE_DISCARDED and any(
                f"<{THINK}>" in (m.get("content") or "") for m in prompt[2::2]):
            problems.append(f"{where}: state-discarded history still holds a <think> block")
    return problems


# ---------------------------------------------------------------------------------------------
# Action-centric process reward


def action_similarity(action: str, reference: str) -> float:
    """Ratcliff–Obershelp ("Gestalt") ratio 2·M/(|a|+|b|) of the stripped texts, where M is
    the number of characters in matching blocks found recursively (difflib, autojunk off so
    no character is ever ignored). 1.0 for two empty strings."""
    a, b = action.strip(), reference.strip()
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def format_gate(completion: str, is_last_step: bool) -> Step | None:
    """The parsed step when ``completion`` has the form its position requires (a final step
    at the last position, a code step before it, non-empty action), else None."""
    try:
        step = parse_output(completion)
    except TIRFormatError:
        return None
    wanted = KIND_ANSWER if is_last_step else KIND_CODE
    if step.kind != wanted or not step.action.strip():
        return None
    return step


def action_process_reward(completion: str, reference_action: str, reference_kind: str,
                          is_last_step: bool) -> float:
    """r = format_gate × similarity(action, reference_action), in [0, 1].

    ``completion`` is the model's text for one step; ``reference_kind`` must agree with the
    position (``"answer"`` exactly when ``is_last_step``). Raises ValueError/TypeError for
    inconsistent or mistyped reference columns (a bad dataset row, not a bad completion).
    """
    if not isinstance(completion, str):
        raise TypeError(f"completion must be the completion text (str), got "
                        f"{type(completion).__name__}; for conversational completions pass the "
                        "assistant message's content")
    if not isinstance(reference_action, str) or not reference_action.strip():
        raise ValueError("reference_action must be a non-empty str (the step's reference code "
                         "or answer)")
    if reference_kind not in KINDS:
        raise ValueError(f"reference_kind must be one of {KINDS}, got {reference_kind!r}")
    if (reference_kind == KIND_ANSWER) != bool(is_last_step):
        raise ValueError(f"reference_kind={reference_kind!r} contradicts is_last_step="
                         f"{is_last_step!r}: the last step answers, earlier steps run code")
    step = format_gate(completion, bool(is_last_step))
    if step is None:
        return 0.0
    return action_similarity(step.action, reference_action)
