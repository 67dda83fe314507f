"""Answer extraction: the final answer of a model's output, found by pure string work.

An explicit :class:`ExtractionPolicy` says which ways of finding the answer are allowed, tried in
this order: the last ``\\boxed{}``, then "the answer is X" phrases, then (only when the policy
says so) the last number in the text. Evaluations select a policy by name
(:data:`EXTRACTION_RULES`): ``strict`` (the default: a stated final answer, boxed or after an
answer phrase) or ``flexible`` (the last number in the text, lm-evaluation-harness's GSM8K
"flexible-extract"). ``eval.graders`` compares what is extracted with the gold answer.

- Boxes: the content of the last ``\\boxed{}``. Boxes with nothing between them but spacing,
  "or", "and", ``\\lor``, ``\\vee``, ``\\land``, ``\\wedge``, a comma or a semicolon
  (``\\boxed{41} or \\boxed{42}``, ``\\boxed{3}, \\boxed{5}``, ``\\boxed{41} \\boxed{42}``) are one
  answer, read together (``41 or 42``, ``3, 5``, ``41 , 42``; the same content boxed twice counts
  once), so a hedge spread over several boxes is graded as the hedge it is.
- Answer phrases ("answer is", "Answer:", "**Final Answer**:", "final answer =", "####"): the
  answer is the text after the phrase, up to the end of its line, its sentence, or the next
  answer phrase, whichever comes first. It yields the right side of an arithmetic equation
  ("25 + 50 = 55 kilograms" -> 55; every part left of the last ``=`` must show an operation,
  so "42 = 43" stays as it is), a number without the words after it ("18 dollars" -> 18, but
  "42 or more" and "42 to 43" stay whole), and nothing when only prose follows ("the answer is
  unclear"), in which case an earlier phrase is used.

Guarantees: extraction is linear in the length of the text. Each answer phrase reads only its
own stretch of text (up to the next phrase), so the stretches are disjoint; boxes come from one
left-to-right pass with a brace stack (``pipelines.text``); math delimiters are found with one
forward search per kind; no regex has two runs that can trade characters (no ``\\s*`` on both
sides of an optional part), so each regex pass is linear in what it reads. The only step above
linear is the sort of box spans (``k log k`` for ``k`` boxes). ``tests/eval/test_extraction_bound``
measures the work on generated degenerate shapes.

Not guaranteed: that an answer-phrase or last-number extraction is the answer the model meant;
that the ``flexible`` rule catches hedges (it takes the last number: ``41 \\lor 42`` yields 42,
as lm-evaluation-harness's rule does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from eval.answer_relations import HEDGE_WORDS, is_computation
from pipelines.text import boxed_spans, last_boxed

METHODS = ("boxed", "answer_phrase", "last_number", "choice_marker", "none")
# Longest text between two boxes that can join them ("\boxed{1} \text{ or } \boxed{2}")
MAX_BOX_GAP = 40


@dataclass(frozen=True)
class ExtractionPolicy:
    """Which ways of finding the final answer in a prediction are allowed, tried in this order.

    ``last_number`` is off by default: it marks "3 + 4 = 7" correct for gold 7 even though no
    final answer was given. Record :meth:`describe` next to scores so that the choice is visible.
    """

    boxed: bool = True
    answer_phrase: bool = True
    last_number: bool = False

    def __post_init__(self) -> None:
        if not (self.boxed or self.answer_phrase or self.last_number):
            raise ValueError(
                "ExtractionPolicy allows no extraction method; enable at least one of boxed, "
                "answer_phrase, last_number"
            )

    def describe(self) -> str:
        """A short stable label, e.g. ``"boxed+answer_phrase"``."""
        names = [n for n in ("boxed", "answer_phrase", "last_number") if getattr(self, n)]
        return "+".join(names)


DEFAULT_POLICY = ExtractionPolicy()
BOXED_ONLY = ExtractionPolicy(answer_phrase=False)
LENIENT_POLICY = ExtractionPolicy(last_number=True)
# The last number in the text and nothing else: lm-evaluation-harness's GSM8K
# "flexible-extract" rule (its "strict-match" rule wants "#### N", which is weft's strict
# "####" answer phrase).
FLEXIBLE_POLICY = ExtractionPolicy(boxed=False, answer_phrase=False, last_number=True)

# Named extraction rules an evaluation can select (``eval.runner.EvalConfig.extraction``); the
# name is stored with every sample and score (``eval_samples.extraction_rule``).
DEFAULT_RULE = "strict"
EXTRACTION_RULES: Mapping[str, ExtractionPolicy] = MappingProxyType({
    "strict": DEFAULT_POLICY,  # a stated final answer: the last \boxed{}, else an answer phrase
    "flexible": FLEXIBLE_POLICY,  # the last number anywhere in the text
})


def extraction_policy(rule: str) -> ExtractionPolicy:
    """The :class:`ExtractionPolicy` of a named rule (:data:`EXTRACTION_RULES`)."""
    try:
        return EXTRACTION_RULES[rule]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown answer extraction rule {rule!r}; use one of {', '.join(EXTRACTION_RULES)} "
            "(strict: a stated final answer; flexible: the last number in the text)"
        ) from None


# "answer is", "Answer:", "**Final Answer**:", "final answer =", gsm8k-style "####". The runs of
# whitespace are possessive: what one of them takes can never be given to the next.
_ANSWER_ANCHOR_RE = re.compile(
    r"(?i)(?:\b(?:final\s++)?answer\b(?:\s*+\*\*)?\s*+(?:is\b|:|=)(?:\s*+\*\*)?|####)"
)
_SENTENCE_END_RE = re.compile(r"\.(?:\s|$)|\bI hope\b")
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?![\d])")
# a number followed by a word ("18 dollars", "55 kilograms of flour", "18 because ..."): the number
# ("3 x + 2" is no such case: the word is followed by an operator)
_NUMBER_THEN_WORDS_RE = re.compile(
    r"^(-?\$?\d+(?:,\d{3})*(?:\.\d+)?)\s+([A-Za-z]+)\b(?!\s*[=+\-*/^(])")
# the left side of "25 + 50 = 55": numbers, operators, brackets, currency and spacing only
_ARITHMETIC_RE = re.compile(r"[\d\s.,+\-*/^×÷·()\[\]$=]*")
_LATEX_OPERATOR_RE = re.compile(r"\\(?:times|cdot|div)(?![A-Za-z])")
# text that is no answer: no digit and nothing mathematical ("unclear to me", "below")
_MATH_CHARS_RE = re.compile(r"[\d\\{}^_=+*/()<>|\[\]]")
_NON_ANSWERS = frozenset({"below", "above", "as follows", "follows", "unclear", "unknown",
                          "not clear", "wrong", "incorrect", "correct", "right", "that", "this",
                          "it", "there", "here", "simple", "easy", "clear", "obvious"})
_SCI_RE = re.compile(r"(?<![\w.\\])(\d+(?:\.\d+)?)[eE]([+-]?\d+)(?![\w.])")
_UNESCAPED_DOLLAR_RE = re.compile(r"(?<!\\)\$")
_MATH_ENV_DELIMITERS = (("\\(", "\\)"), ("\\[", "\\]"))
# what may stand between two boxes that form one answer, and what must (a joining word or mark)
_BOX_GAP_RE = re.compile(
    r"(?:\s|\$|\\[()\[\],;: ]|\\q?quad(?![A-Za-z])|\\(?:lor|vee|land|wedge)(?![A-Za-z])"
    r"|\\(?:text|mathrm|textrm)\{\s*+(?:or|and)\s*+\}|(?i:\b(?:or|and)\b)|[,;])*")
_BOX_JOIN_RE = re.compile(r"[,;]|(?i:\b(?:or|and)\b)|\\(?:lor|vee|land|wedge)(?![A-Za-z])")
_BOX_GAP_NOISE_RE = re.compile(r"\$|\\[()\[\]]")


def _strip_wrappers(text: str) -> str:
    """Remove markdown bold, math delimiters and trailing punctuation around an answer."""
    s = text.strip()
    for _ in range(3):
        before = s
        s = s.strip().strip("*").strip()
        s = s.rstrip(".;,").strip()
        if s.startswith("\\(") and s.endswith("\\)") or s.startswith("\\[") and s.endswith("\\]"):
            s = s[2:-2]
        if len(s) >= 2 and s.startswith("$") and s.endswith("$"):
            s = s.strip("$")
        if s == before:
            break
    return s.strip()


def _first_math_env(text: str) -> str | None:
    """Content of the leftmost complete ``$…$``, ``\\(…\\)`` or ``\\[…\\]`` (non-empty; a
    ``$`` after a backslash is no delimiter), or None. Linear time: only the FIRST opener of each
    kind can start the leftmost match (any closer that serves a later opener serves it too), so
    one forward search per kind suffices (a lazy regex rescans to the end from every opener)."""
    candidates: list[tuple[int, str]] = []
    dollars = _UNESCAPED_DOLLAR_RE.finditer(text)
    first = next(dollars, None)
    if first is not None:
        close = next((m for m in dollars if m.start() >= first.end() + 1), None)
        if close is not None:
            candidates.append((first.start(), text[first.end():close.start()]))
    for opener, closer in _MATH_ENV_DELIMITERS:
        start = text.find(opener)
        if start >= 0:
            end = text.find(closer, start + len(opener) + 1)
            if end >= 0:
                candidates.append((start, text[start + len(opener):end]))
    return min(candidates, key=lambda c: c[0])[1] if candidates else None


def _sentence_end(stretch: str) -> int:
    """Where the first sentence of ``stretch`` ends (``len(stretch)`` if it does not)."""
    cut = _SENTENCE_END_RE.search(stretch)
    return cut.start() if cut else len(stretch)


def _phrase_answer(stretch: str) -> str:
    """The answer in ``stretch``, the text after one answer phrase and before the next: its
    first line, cut at the sentence end, then cleaned. '' when it holds no answer."""
    newline = stretch.find("\n")
    line = stretch if newline < 0 else stretch[:newline]
    s = _strip_wrappers(line[:_sentence_end(line)].lstrip(" :"))
    inner = last_boxed(s)
    if inner:
        return inner
    env = _first_math_env(s)
    if env is not None:  # "$5$ apples" -> "5"
        s = env
    s = _right_of_arithmetic(s)
    words = _NUMBER_THEN_WORDS_RE.match(s)
    if words and words.group(2).lower() not in HEDGE_WORDS:  # "18 dollars" -> "18"
        s = words.group(1)
    s = s.strip()
    return "" if _is_prose(s) else s


def _right_of_arithmetic(s: str) -> str:
    """``"25 + 50 = 55 kilograms"`` -> ``"55 kilograms"``: the part after the last ``=`` when
    every part before it is arithmetic on numbers that shows an operation (``"x = 5"`` and
    ``"42 = 43"`` stay as they are)."""
    if "=" not in s:
        return s
    left, _, right = s.rpartition("=")
    right = _strip_wrappers(right)
    if not right or not any(c.isdigit() for c in left):
        return s
    if not _ARITHMETIC_RE.fullmatch(_LATEX_OPERATOR_RE.sub("*", left)):
        return s
    if not all(is_computation(part) for part in left.split("=")):
        return s
    env = _first_math_env(right)
    return env if env is not None else right


def _is_prose(s: str) -> bool:
    """True for answer-phrase text that holds no answer: words without a digit or anything
    mathematical, three or more of them ("unclear to me") or a known non-answer ("below")."""
    if not s or _MATH_CHARS_RE.search(s):
        return False
    return len(s.split()) >= 3 or s.lower() in _NON_ANSWERS


def _joining_gap(gap: str) -> str | None:
    """How the text between two boxes joins them (``" or "`` -> ``"or"``; only spacing -> a
    comma), or None when it holds anything else."""
    if not _BOX_GAP_RE.fullmatch(gap):
        return None
    if not _BOX_JOIN_RE.search(gap):
        return ","
    return " ".join(_BOX_GAP_NOISE_RE.sub(" ", gap).split())


def last_boxed_answer(text: str) -> str | None:
    """Content of the last ``\\boxed{}``, together with the boxes joined to it by spacing, "or",
    "and", a logical connective, a comma or a semicolon (``\\boxed{1} or \\boxed{2}`` ->
    ``"1 or 2"``); None when there is no box. Linear: one pass over the box spans, each gap read
    once."""
    spans = boxed_spans(text)
    if not spans:
        return None
    top: list[tuple[int, int]] = []  # boxes not inside another, in order
    for start, end in spans:
        if not top or start > top[-1][1]:
            top.append((start, end))
    if spans[-1] != top[-1]:  # the last box is inside another: read it alone
        return text[spans[-1][0]:spans[-1][1]].strip()
    last = text[top[-1][0]:top[-1][1]].strip()
    parts, seen = [last], {last}
    k = len(top) - 1
    while k > 0:
        opener = text.rfind("\\", top[k - 1][1], top[k][0])  # the backslash of "\boxed"
        if opener < 0 or opener - top[k - 1][1] - 1 > MAX_BOX_GAP:
            break
        join = _joining_gap(text[top[k - 1][1] + 1:opener])
        if join is None:
            break
        content = text[top[k - 1][0]:top[k - 1][1]].strip()
        if content not in seen:  # the same answer boxed twice is one answer
            seen.add(content)
            parts += [join, content]
        k -= 1
    return " ".join(reversed(parts))


def extract_answer(text: str, policy: ExtractionPolicy = DEFAULT_POLICY) -> tuple[str | None, str]:
    """The final answer in ``text`` and how it was found: ``(answer, method)``.

    ``method`` is ``"boxed"``, ``"answer_phrase"``, ``"last_number"`` or ``"none"`` (answer None).
    Answer phrases are tried last to first; one followed only by prose is skipped. The last
    number has its thousands separators removed and never includes a currency sign or the
    period ending a sentence.
    """
    if not isinstance(text, str):
        raise TypeError(f"prediction must be a str, got {type(text).__name__}")
    if policy.boxed:
        boxed = last_boxed_answer(text)
        if boxed:
            return boxed, "boxed"
    if policy.answer_phrase:
        # Each phrase reads only the text up to the next phrase: disjoint stretches, linear.
        stretch_end = len(text)
        for anchor in reversed(list(_ANSWER_ANCHOR_RE.finditer(text))):
            answer = _phrase_answer(text[anchor.end():stretch_end])
            if answer:
                return answer, "answer_phrase"
            stretch_end = anchor.start()
    if policy.last_number:
        numbers = _NUMBER_RE.findall(text)
        if numbers:
            return numbers[-1].replace(",", ""), "last_number"
    return None, "none"


def to_latex(answer: str) -> str:
    """Normalise an answer string (gold or extracted) into LaTeX that math-verify parses.

    Strips ``$`` delimiters (also between list items, e.g. ``"$69$,$84$"``) and an outer
    ``\\boxed{}``, and rewrites scientific ``4.5e33`` as ``4.5\\times10^{33}``.
    """
    s = answer.strip()
    inner = last_boxed(s)
    if inner:
        s = inner
    s = _UNESCAPED_DOLLAR_RE.sub("", s)
    if s.startswith("\\(") and s.endswith("\\)") or s.startswith("\\[") and s.endswith("\\]"):
        s = s[2:-2]
    s = _SCI_RE.sub(lambda m: f"{m.group(1)}\\times10^{{{m.group(2)}}}", s)
    return s.strip()
