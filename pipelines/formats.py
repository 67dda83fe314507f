"""Response formats: one home for the tags, parsing, answer regions, system prompts and budget
instructions that synthesis, evaluation and RL rewards share.

Three answer formats (:data:`ANSWER_FORMATS`), each with the *answer region* that the grader
reads (:func:`answer_region`); evaluation (``eval.modes``) and every RL reward
(``training.rewards``) call :func:`answer_region` and then the same grader
(``eval.graders.grade_math``), so one output is never right in one and wrong in the other:

- ``boxed``: reason, then put the final answer in ``\\boxed{}``. Region: the whole text (the
  grader takes the last ``\\boxed{}``, then an answer phrase).
- ``sxs``: a think/speak stream ``<think>…</think><speak>…</speak>…`` (SxS paper, §3.1 and
  Algorithm 1). Region: the speak projection, i.e. the text left after removing the
  think-tagged tokens (Eq. 11, ``a_i = P(y^(i))``), speak contents joined with a blank line.
- ``tir``: the DeepTool schema (§2.2): intermediate steps ``<think>…</think><code>…</code>
  <interpreter>…</interpreter>`` and a terminal step ``<think>…</think><answer>ans</answer>``.
  Region: the content of the last complete ``<answer>`` block. The TIR serializer and strict
  parser live in ``pipelines.tir``; this module only reads the answer and checks one step.

Parsing a think/speak stream (:func:`parse_tagged`) has two modes:

- strict (data we build ourselves): only complete ``<think>…</think>`` / ``<speak>…</speak>``
  pairs, no nesting; text between, before or after the blocks must be whitespace, which is
  ignored (a model's chat template or a writer often puts newlines between blocks). Anything
  else raises ``ValueError`` naming the offset and what was found.
- tolerant (text a model produced; never raises): an unclosed last tag runs to the end (a
  truncated generation); an opening tag while another is open closes the open one; a closing
  tag with no open tag turns the untagged text just before it into that kind (chat templates
  that inject ``<think>`` into the prompt); a stray closing tag of the other kind is dropped;
  any other untagged text is speak (what the user sees). Whitespace-only pieces are dropped.
  A reason-then-answer output ``<think>r</think>a`` parses as one think and one speak block.

Paper rules implemented:

- SxS Algorithm 1 lines 28-30: once the whole answer has been spoken, the remaining reasoning
  is appended as an optional *trailing* think block. :func:`has_sxs_format` therefore accepts a
  stream that ends in think after its last speak block, and the speak projection ignores it.
- Engagement Process §5.3 and App. F (the budget experiment behind Table 5): each requested
  token budget is paired with a natural-language time instruction; :data:`URGENCY_LEVELS`
  quotes the paper's four instructions verbatim (a fact of the method), most urgent first.
  They carry no numbers; :func:`budget_instruction` uses them by default.

Departures, and why:

- Whitespace between blocks is accepted in strict mode; the paper's streams have none, but
  models and hand-written data add newlines, and they change no content.
- The set of four budgets is lost in our copy of the paper (only the 1K and 8K ends survive in
  Table 5), so :data:`DEFAULT_BUDGETS` = 1000, 2000, 4000, 8000 is our choice. With a number of
  budgets other than four, a budget's rank among them picks the level (spread evenly, rounded).
- ``numeric`` budget prompts (our own wording, stating the token budget) stay an option for
  studies; the paper's instructions do not mention the number.
- A TIR answer without its own ``\\boxed{}`` is wrapped in one, so the grader reads the whole
  answer block as the answer (DeepTool writes ``<answer>ans</answer>`` with no box required).

Not guaranteed: that a model follows any format; malformed text still gets an answer region
by the rules above (possibly none). Content that itself contains a tag string cannot be
written in the tagged format (``pipelines.sxs_align.validate_tagged`` reports it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pipelines.text import last_boxed
from pipelines.tir import TIR_SYSTEM_PROMPT, TIRFormatError, parse_output

# ---------------------------------------------------------------------------------------------
# Tags and formats

THINK = "think"
SPEAK = "speak"
KINDS = (THINK, SPEAK)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SPEAK_OPEN, SPEAK_CLOSE = "<speak>", "</speak>"
RESERVED_TAGS = (THINK_OPEN, THINK_CLOSE, SPEAK_OPEN, SPEAK_CLOSE)

BOXED, SXS, TIR = "boxed", "sxs", "tir"
ANSWER_FORMATS = (BOXED, SXS, TIR)

_TAG_RE = re.compile(r"<(/?)(think|speak)>")
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")

# ---------------------------------------------------------------------------------------------
# System prompts (our own wording)

BOXED_SYSTEM_PROMPT = (
    "Solve the problem. Work through it step by step, then write the final answer inside "
    "\\boxed{}."
)
SXS_SYSTEM_PROMPT = (
    "Solve the user's problem using two channels. Write private working inside "
    "<think>...</think> and everything meant for the user inside <speak>...</speak>. You may "
    "switch between them as often as you like: once your thinking has settled part of the "
    "answer, you may say that part in a <speak> block and then go on thinking. Only say what "
    "your thinking so far supports, and make sure the whole answer has been said by the end."
)
# TIR_SYSTEM_PROMPT is defined next to the TIR schema in pipelines.tir and re-exported here.
SYSTEM_PROMPTS = {BOXED: BOXED_SYSTEM_PROMPT, SXS: SXS_SYSTEM_PROMPT, TIR: TIR_SYSTEM_PROMPT}


def check_format(answer_format: str) -> str:
    """``answer_format`` if it is one of :data:`ANSWER_FORMATS`; ValueError naming them if not."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
    return answer_format


def system_prompt(answer_format: str) -> str:
    """The system prompt that asks for ``answer_format`` (SFT data, GRPO prompts, evaluation)."""
    return SYSTEM_PROMPTS[check_format(answer_format)]


# ---------------------------------------------------------------------------------------------
# Think/speak streams


def render_tagged(segments: Iterable[tuple[str, str]]) -> str:
    """Write ``(kind, content)`` segments as one tagged stream (content verbatim, no separators)."""
    parts: list[str] = []
    for kind, content in segments:
        if kind not in KINDS:
            raise ValueError(f"segment kind must be 'think' or 'speak', got {kind!r}")
        parts.append(f"<{kind}>{content}</{kind}>")
    return "".join(parts)


def parse_tagged(text: str, *, strict: bool = True) -> list[tuple[str, str]]:
    """Split a tagged stream into ``(kind, content)`` segments, in order.

    ``strict=True`` is for data we built (raises ``ValueError`` on anything malformed; contents
    come back verbatim, empty ones included). ``strict=False`` is for model output and never
    raises; the rules of both are in the module docstring.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_tagged needs a str, got {type(text).__name__}")
    return _parse_strict(text) if strict else _parse_tolerant(text)


def _outside(text: str, start: int, end: int, where: str) -> None:
    """Text outside the blocks may only be whitespace."""
    if text[start:end].strip():
        raise ValueError(
            f"text {where} at offset {start}: {text[start:end].strip()[:40]!r}; every character "
            "but whitespace must be inside <think>…</think> or <speak>…</speak>"
        )


def _parse_strict(text: str) -> list[tuple[str, str]]:
    segments: list[tuple[str, str]] = []
    pos = 0
    open_kind: str | None = None
    open_at = 0
    for match in _TAG_RE.finditer(text):
        closing, kind = match.group(1) == "/", match.group(2)
        if open_kind is None:
            if closing:
                raise ValueError(
                    f"closing tag </{kind}> at offset {match.start()} has no opening tag")
            _outside(text, pos, match.start(), "outside any tag")
            open_kind, open_at = kind, match.end()
        else:
            if not closing or kind != open_kind:
                raise ValueError(
                    f"found {match.group(0)} at offset {match.start()} while <{open_kind}> "
                    f"(opened at offset {open_at - len(open_kind) - 2}) is still open; tags "
                    "cannot nest and must be closed in order"
                )
            segments.append((open_kind, text[open_at:match.start()]))
            open_kind, pos = None, match.end()
    if open_kind is not None:
        raise ValueError(
            f"<{open_kind}> opened at offset {open_at - len(open_kind) - 2} is never closed")
    _outside(text, pos, len(text), "after the last closing tag")
    return segments


def _parse_tolerant(text: str) -> list[tuple[str, str]]:
    segments: list[tuple[str, str]] = []

    def add(kind: str, content: str) -> None:
        if content.strip():
            segments.append((kind, content))

    pos = 0
    open_kind: str | None = None
    for match in _TAG_RE.finditer(text):
        closing, kind = match.group(1) == "/", match.group(2)
        chunk = text[pos:match.start()]
        if open_kind is None:
            # Untagged text: speak, unless a closing tag right after it says what it was.
            add(kind if closing else SPEAK, chunk)
            open_kind = None if closing else kind
        elif closing and kind != open_kind:
            add(open_kind, chunk)  # stray closing tag of the other kind: dropped, stay open
            pos = match.end()
            continue
        else:
            add(open_kind, chunk)
            open_kind = None if closing else kind
        pos = match.end()
    add(open_kind or SPEAK, text[pos:])
    return segments


def speak_projection(text: str) -> str:
    """What the user sees of a model's think/speak output (tolerant parse; SxS Eq. 11): the
    speak contents joined with a blank line, '' when there are none."""
    return "\n\n".join(c for kind, c in parse_tagged(text, strict=False) if kind == SPEAK)


# ---------------------------------------------------------------------------------------------
# Answer regions and format checks


def answer_region(text: str, answer_format: str) -> str | None:
    """The part of an output that the grader reads the final answer from (None: there is none).

    ``boxed``: the whole text. ``sxs``: the speak projection. ``tir``: the content of the last
    complete ``<answer>`` block, wrapped in ``\\boxed{}`` when it has no box of its own.
    """
    check_format(answer_format)
    if not isinstance(text, str):
        raise TypeError(f"answer_region needs the output as a str, got {type(text).__name__}")
    if answer_format == BOXED:
        return text
    if answer_format == SXS:
        return speak_projection(text) or None
    inner = _last_answer_block(text).strip()
    if not inner:
        return None
    return inner if _BOXED_RE.search(inner) else f"\\boxed{{{inner}}}"


def _last_answer_block(text: str) -> str:
    """Content of the last complete ``<answer>…</answer>`` ('' when none), with the blocks
    paired as a non-greedy regex pairs them (each opening tag with the first closing tag after
    it, scanning on from there), but in linear time: a lazy regex rescans to the end of the
    text from every unclosed ``<answer>``."""
    last, pos = "", 0
    while (start := text.find(ANSWER_OPEN, pos)) >= 0:
        end = text.find(ANSWER_CLOSE, start + len(ANSWER_OPEN))
        if end < 0:
            break
        last, pos = text[start + len(ANSWER_OPEN):end], end + len(ANSWER_CLOSE)
    return last


def has_sxs_format(text: str) -> bool:
    """A clean think/speak stream (strict parse, whitespace between blocks allowed) with at
    least one non-empty think and one non-empty speak block. A trailing think block after the
    last speak block is allowed (SxS Algorithm 1 lines 28-30)."""
    try:
        segments = parse_tagged(text, strict=True)
    except ValueError:
        return False
    kinds = {k for k, c in segments if c.strip()}
    return kinds == {THINK, SPEAK}


def has_tir_format(text: str) -> bool:
    """One step of the TIR schema: ``<think>`` then ``<code>`` or ``<answer>`` (strict parse of
    ``pipelines.tir``) with a non-empty action."""
    try:
        step = parse_output(text.strip())
    except TIRFormatError:
        return False
    return bool(step.action.strip())


def has_boxed_format(text: str) -> bool:
    """At least one complete, non-empty ``\\boxed{…}``."""
    return bool(last_boxed(text))


FORMAT_CHECKS = {BOXED: has_boxed_format, SXS: has_sxs_format, TIR: has_tir_format}


def follows_format(text: str, answer_format: str) -> bool:
    """Whether ``text`` follows ``answer_format`` (the format rewards' test)."""
    return FORMAT_CHECKS[check_format(answer_format)](text)


# ---------------------------------------------------------------------------------------------
# Budget instructions (Engagement Process §5.3, App. F)

DEFAULT_BUDGETS = (1000, 2000, 4000, 8000)
URGENCY, NUMERIC = "urgency", "numeric"
BUDGET_PROMPT_STYLES = (URGENCY, NUMERIC)

# Quoted from the paper's App. F (one instruction per budget, most urgent first).
URGENCY_LEVELS = (
    "Now time is urgent, please give me an answer immediately.",
    "Now there is a little time for you to think, but please think simply and give me an answer.",
    "Now there is more time for you to think, please think carefully and give me an answer.",
    "Now there is a lot of time for you to think, please think carefully and give me an answer.",
)
# Our own wording, stating the budget: an option for studies, not the paper's prompt.
NUMERIC_LEVELS = (
    "Answer immediately: give the result with almost no working, in at most {budget} tokens.",
    "Be quick: keep your working short and finish within {budget} tokens.",
    "Take the time you need to check your steps, but stay within {budget} tokens.",
    "No rush: take plenty of time to think it through carefully; you have up to {budget} tokens.",
)


def budget_level(budget: int, budgets: Sequence[int] = DEFAULT_BUDGETS) -> int:
    """The urgency level (0 = most urgent) of ``budget``: its rank among the distinct
    ``budgets``, spread evenly over the four levels; a single budget gets the least urgent."""
    ordered = sorted({int(b) for b in budgets})
    if int(budget) not in ordered:
        raise ValueError(f"budget {budget} is not one of the configured budgets {ordered}; "
                         "pass the budgets the prompts are drawn from")
    top = len(URGENCY_LEVELS) - 1
    if len(ordered) == 1:
        return top
    return round(ordered.index(int(budget)) * top / (len(ordered) - 1))


def budget_instruction(budget: int, budgets: Sequence[int] = DEFAULT_BUDGETS,
                       style: str = URGENCY) -> str:
    """The instruction appended to a prompt with token budget ``budget``.

    ``style="urgency"`` (default): the paper's words, no number. ``style="numeric"``: our own
    wording that states the budget in tokens.
    """
    if style not in BUDGET_PROMPT_STYLES:
        raise ValueError(f"budget prompt style must be one of {BUDGET_PROMPT_STYLES}, "
                         f"got {style!r}")
    level = budget_level(budget, budgets)
    if style == URGENCY:
        return URGENCY_LEVELS[level]
    return NUMERIC_LEVELS[level].format(budget=int(budget))
