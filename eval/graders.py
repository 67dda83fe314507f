"""Graders shared by evaluation and RL rewards: one grader per answer kind, plus a kill-safe pool.

A grader takes ``(prediction, gold)`` and returns a :class:`GradeResult` that records what was
extracted, how (``method``), what both sides parsed to, and any error. Kinds:

- ``"math"`` (:func:`grade_math`): the final answer is extracted from the prediction by an
  explicit :class:`ExtractionPolicy` (last ``\\boxed{}`` first, then "the answer is X" phrases,
  then — only when the policy says so — the last number in the text) and compared with the gold
  answer by math-verify (symbolic and numeric equality, gold first: math-verify is asymmetric).
  Evaluations select a policy by name (:data:`EXTRACTION_RULES`): ``strict`` (the default: a
  stated final answer, boxed or after an answer phrase) or ``flexible`` (the last number in the
  text, lm-evaluation-harness's GSM8K "flexible-extract"). An answer phrase yields the right
  side of an arithmetic equation ("25 + 50 = 55 kilograms" -> 55), a number without the words
  after it, and nothing when only prose follows it ("the answer is unclear"), in which case an
  earlier phrase is used.
- ``"choice"`` (:func:`grade_choice`): a multiple-choice letter, see :func:`extract_choice`.
- more kinds (``"code"``) are added with one :func:`register_grader` call.

:func:`grade_output` grades a model's whole output: the format's answer region
(``pipelines.formats.answer_region``), then a registered grader; RL rewards call it (in a pool)
so that they grade exactly as evaluation does. Answer extraction (boxes, answer phrases, math
delimiters, choice letters) is linear in the length of the text: no rescans from every opener,
no regex with two adjacent runs of ``\\s*`` around an optional part; a megabyte of degenerate
output is extracted in about a second.

math-verify bounds each of its calls with ``signal.alarm``: whole seconds only, and only on a
process's main thread. :func:`grade_math` therefore runs math-verify without its own timeouts
when called from another thread. ``eval.grading_pool.GradingPool`` grades in worker processes
(each on its own main thread, so inner timeouts work) and adds an outer wall-clock kill per
item, which also catches work that ignores signals. A killed item is recorded as incorrect with
error ``"grading timed out"`` and the pool goes on; extraction happens inside the worker too, so
one limit covers extraction and verification. In this process (no pool) extraction is bounded
only by its linear cost and verification by math-verify's alarms. The pool depends on this
module (its registry and result type), never the other way round.

Not guaranteed: that math-verify judges every equivalent pair equal (units written as plain
words, e.g. "18 dollars", do not parse; answers with several parts need the same shape on both
sides); that an answer-phrase or last-number extraction is the answer the model meant; timing of
a single inner timeout finer than one second.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from pipelines.text import last_boxed

METHODS = ("boxed", "answer_phrase", "last_number", "choice_marker", "none")
DEFAULT_TIMEOUT_S = 5
MAX_PARSED_CHARS = 200
# math-verify rounds floats to 6 decimal places, so 2.88e-19 "equals" 3.88e-19. Below this
# magnitude we also require agreement to TINY_REL_TOL relative difference (about 6 digits).
TINY_MAGNITUDE = 1e-3
TINY_REL_TOL = 2e-6

Grader = Callable[..., "GradeResult"]


# ---------------------------------------------------------------------------------------------
# Result and policy


@dataclass(frozen=True)
class GradeResult:
    """The grade of one (prediction, gold) pair; ``method`` is one of :data:`METHODS`."""

    correct: bool
    extracted: str | None
    method: str
    gold_parsed: str | None = None
    pred_parsed: str | None = None
    error: str | None = None


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


# ---------------------------------------------------------------------------------------------
# Answer extraction (pure string work, no math-verify)

# "answer is", "Answer:", "**Final Answer**:", "final answer =", gsm8k-style "####".
_ANSWER_ANCHOR_RE = re.compile(
    r"(?i)(?:\b(?:final\s+)?answer\b(?:\s*\*\*)?\s*(?:is\b|:|=)(?:\s*\*\*)?|####)"
)
_SENTENCE_END_RE = re.compile(r"\.(?:\s|$)|\bI hope\b")
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?![\d])")
# a number followed by a word ("18 dollars", "55 kilograms of flour", "18 because ..."): the number
# ("3 x + 2" is no such case: the word is followed by an operator)
_NUMBER_THEN_WORDS_RE = re.compile(
    r"^(-?\$?\d+(?:,\d{3})*(?:\.\d+)?)\s+[A-Za-z]+\b(?!\s*[=+\-*/^(])")
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


def _sentence_end(text: str, start: int, end: int) -> int:
    """Where the first sentence ends in ``text[start:end]`` (``end`` if it does not), found
    without copying the slice: as if ``_SENTENCE_END_RE`` searched the slice itself, in which
    "I hope" at ``start`` always follows a word boundary."""
    if text.startswith("I hope", start) and start + 6 <= end and \
            not (start + 6 < end and (text[start + 6].isalnum() or text[start + 6] == "_")):
        return start
    cut = _SENTENCE_END_RE.search(text, start, end)
    return cut.start() if cut else end


def _clean_phrase_answer(text: str, start: int = 0, end: int | None = None) -> str:
    """The answer part of ``text[start:end]``, the text after an answer phrase (cut at the
    sentence end). Only the part before the cut is copied, so trying many phrases on one long
    line stays linear."""
    end = len(text) if end is None else end
    s = _strip_wrappers(text[start:_sentence_end(text, start, end)].lstrip(" :"))
    inner = last_boxed(s)
    if inner:
        return inner
    env = _first_math_env(s)
    if env is not None:  # "$5$ apples" -> "5"
        s = env
    s = _right_of_arithmetic(s)
    words = _NUMBER_THEN_WORDS_RE.match(s)
    if words:  # "18 dollars" -> "18"
        s = words.group(1)
    s = s.strip()
    return "" if _is_prose(s) else s


def _right_of_arithmetic(s: str) -> str:
    """``"25 + 50 = 55 kilograms"`` -> ``"55 kilograms"``: the part after the last ``=`` when
    everything before it is arithmetic on numbers (``"x = 5"`` stays as it is)."""
    if "=" not in s:
        return s
    left, _, right = s.rpartition("=")
    right = _strip_wrappers(right)
    if not right or not any(c.isdigit() for c in left):
        return s
    if not _ARITHMETIC_RE.fullmatch(_LATEX_OPERATOR_RE.sub("*", left)):
        return s
    env = _first_math_env(right)
    return env if env is not None else right


def _is_prose(s: str) -> bool:
    """True for answer-phrase text that holds no answer: words without a digit or anything
    mathematical, three or more of them ("unclear to me") or a known non-answer ("below")."""
    if not s or _MATH_CHARS_RE.search(s):
        return False
    return len(s.split()) >= 3 or s.lower() in _NON_ANSWERS


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
        boxed = last_boxed(text)
        if boxed:
            return boxed, "boxed"
    if policy.answer_phrase:
        anchors = list(_ANSWER_ANCHOR_RE.finditer(text))
        # The answer is on the rest of the anchor's line. Anchors are visited last to first and
        # each stretch of text is searched for a newline once: [scanned, line_end) holds none.
        line_end = scanned = len(text)
        for anchor in reversed(anchors):
            newline = text.find("\n", anchor.end(), scanned)
            if newline >= 0:
                line_end = newline
            scanned = anchor.end()
            answer = _clean_phrase_answer(text, anchor.end(), line_end)
            if answer:
                return answer, "answer_phrase"
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


# ---------------------------------------------------------------------------------------------
# Math grader (math-verify)


def _mv():
    """math-verify, imported on first use (keeps ``import eval.graders`` cheap)."""
    import math_verify

    return math_verify


@lru_cache(maxsize=1)
def _extraction_config() -> tuple:
    mv = _mv()
    return (mv.LatexExtractionConfig(boxed_match_priority=0), mv.ExprExtractionConfig())


def _short(value: Any) -> str | None:
    """A bounded printable form of a parsed value (printing huge sympy numbers can fail)."""
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - e.g. int too large to print
        return "<unprintable>"
    return text if len(text) <= MAX_PARSED_CHARS else text[: MAX_PARSED_CHARS - 3] + "..."


def _parse(latex: str, timeout_s: int) -> list:
    mv = _mv()
    return mv.parse(f"\\boxed{{{latex}}}", _extraction_config(), parsing_timeout=timeout_s,
                    raise_on_error=True)


@lru_cache(maxsize=4096)
def _parse_gold(latex: str, timeout_s: int) -> tuple:
    # Golds repeat (k samples per problem, RL groups): parse each once per process.
    return tuple(_parse(latex, timeout_s))


def _tiny_numbers_differ(gold: Any, pred: Any) -> bool:
    """True when both are small nonzero real numbers that differ beyond :data:`TINY_REL_TOL`."""
    try:
        if not (getattr(gold, "is_number", False) and getattr(pred, "is_number", False)):
            return False
        g, p = float(gold), float(pred)
    except Exception:  # noqa: BLE001 - complex, huge or symbolic: leave it to math-verify
        return False
    if g == 0.0 or p == 0.0 or max(abs(g), abs(p)) >= TINY_MAGNITUDE:
        return False
    return abs(g - p) > TINY_REL_TOL * max(abs(g), abs(p))


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _check_timeout(timeout_s: int) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int) or timeout_s < 1:
        raise ValueError(
            f"timeout_s must be a whole number of seconds >= 1 (math-verify uses signal.alarm; "
            f"fractions silently grade as wrong), got {timeout_s!r}"
        )


def grade_math(prediction: str, gold: str, policy: ExtractionPolicy = DEFAULT_POLICY,
               timeout_s: int = DEFAULT_TIMEOUT_S) -> GradeResult:
    """Grade a math answer in this process with math-verify.

    ``gold`` is a plain answer string ("18", "\\frac{1}{2}", "(3, \\frac{\\pi}{2})",
    "$69$,$84$", "27.0"); it is normalised with :func:`to_latex` and parsed as ``\\boxed{gold}``.
    ``timeout_s`` bounds each math-verify call (parse gold, parse prediction, each comparison),
    so one call can take a few times ``timeout_s``. On a thread other than the main thread the
    math-verify timeouts are disabled (signal.alarm would raise) and a pathological answer can
    run unbounded: grade from the main thread or through ``eval.grading_pool.GradingPool``
    for a hard limit.
    Numbers smaller than :data:`TINY_MAGNITUDE` must also agree to about 6 significant digits
    (math-verify alone rounds them to 6 decimal places, i.e. to zero).
    Raises TypeError/ValueError for a non-string or empty gold, or a bad ``timeout_s``.
    """
    _check_timeout(timeout_s)
    if not isinstance(gold, str) or not isinstance(prediction, str):
        raise TypeError(
            f"prediction and gold must be str, got {type(prediction).__name__} and "
            f"{type(gold).__name__}"
        )
    gold_latex = to_latex(gold)
    if not gold_latex:
        raise ValueError(f"gold answer is empty ({gold!r}); fix the dataset row")
    from math_verify.errors import TimeoutException

    limit = timeout_s if _in_main_thread() else 0  # 0 disables math-verify's signal.alarm
    extracted, method = extract_answer(prediction, policy)
    gold_text = pred_text = None
    stage = "parsing the gold answer"
    try:
        gold_parsed = _parse_gold(gold_latex, limit)
        if not gold_parsed:
            return GradeResult(False, extracted, method, None, None,
                               f"math-verify could not parse the gold answer {gold!r}")
        gold_text = _short(gold_parsed[0])
        if extracted is None:
            return GradeResult(False, None, "none", gold_text, None, None)
        stage = "parsing the prediction"
        pred_parsed = _parse(to_latex(extracted), limit)
        if not pred_parsed:
            return GradeResult(False, extracted, method, gold_text, None, None)
        pred_text = _short(pred_parsed[0])
    except TimeoutException:
        return GradeResult(False, extracted, method, gold_text, pred_text,
                           f"math-verify timed out after {timeout_s}s while {stage}")
    except Exception as exc:  # noqa: BLE001 - a parser crash is a wrong answer, recorded
        return GradeResult(False, extracted, method, gold_text, pred_text,
                           f"{type(exc).__name__} while {stage}: {exc}"[:300])
    verify = _mv().verify
    first_error = None
    # Pairwise (gold first: math-verify is asymmetric) so one failure does not hide the others.
    for g in gold_parsed:
        for p in pred_parsed:
            try:
                if verify(g, p, timeout_seconds=limit, raise_on_error=True) \
                        and not _tiny_numbers_differ(g, p):
                    return GradeResult(True, extracted, method, gold_text, pred_text, None)
            except TimeoutException:
                first_error = first_error or f"math-verify timed out after {timeout_s}s while comparing"
            except Exception as exc:  # noqa: BLE001 - sympy raises anything
                first_error = first_error or f"{type(exc).__name__} while comparing: {exc}"[:300]
    return GradeResult(False, extracted, method, gold_text, pred_text, first_error)


# ---------------------------------------------------------------------------------------------
# Multiple choice

# Each run of whitespace has exactly one place to go (no two \s* side by side around an optional
# part): with adjacent ones, a phrase followed by n spaces made the matcher try O(n^3) splits.
_CHOICE_PHRASE = (
    r"(?i:\b(?:final\s+answer|answer|correct\s+(?:answer|option|choice)))"
    r"\s*(?:\*\*\s*)?(?:(?P<sep>is\b(?:\s*:)?|:|=)\s*)?"
    r"(?:(?:\*\*|\$|\\text\{{|\\textbf\{{|\\boxed\{{)\s*)?"
    r"(?:\(\s*(?P<paren>{both})\s*\)|(?P<letter>{both})(?![A-Za-z])(?P<tail>[ \t.)*}}$]*$)?)"
)
_CHOICE_MARKER = r"\(({up})\)|(?<![A-Za-z(])({up})\)|\*\*({up})\*\*|^[ \t>*]*({up})[.:)]?[ \t*]*$"


@lru_cache(maxsize=32)
def _choice_patterns(letters: str) -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    up = "[" + re.escape(letters.upper()) + "]"
    both = "[" + re.escape(letters.upper() + letters.lower()) + "]"
    boxed = re.compile(rf"\s*(?:\\text(?:bf)?\{{\s*)?(?:\(\s*)?({both})\s*\)?(?![A-Za-z])")
    phrase = re.compile(_CHOICE_PHRASE.format(both=both), re.MULTILINE)
    marker = re.compile(_CHOICE_MARKER.format(up=up), re.MULTILINE)
    return boxed, phrase, marker


def _find_choice(text: str, letters: str) -> tuple[str | None, str]:
    if not isinstance(text, str):
        raise TypeError(f"prediction must be a str, got {type(text).__name__}")
    if not isinstance(letters, str) or not letters.isalpha() or not letters.isascii():
        raise ValueError(f"letters must be a non-empty string of ASCII letters, got {letters!r}")
    boxed_re, phrase_re, marker_re = _choice_patterns(letters)
    boxed = last_boxed(text)
    if boxed is not None:
        m = boxed_re.match(boxed)
        if m:
            return m.group(1).upper(), "boxed"
    found = None
    for m in phrase_re.finditer(text):
        if m.group("paren"):
            found = m.group("paren")
        elif m.group("letter"):
            letter, sep = m.group("letter"), m.group("sep")
            # upper case needs "is"/":"; lower case only right after a colon, alone on its line
            if (letter.isupper() and sep) or (sep == ":" and m.group("tail") is not None):
                found = letter
    if found:
        return found.upper(), "answer_phrase"
    last = None
    for m in marker_re.finditer(text):
        last = next(g for g in m.groups() if g)
    return (last, "choice_marker") if last else (None, "none")


def extract_choice(text: str, letters: str = "ABCD") -> str | None:
    """The chosen option letter in ``text`` (upper case), or None.

    Tried in order: the last ``\\boxed{B}`` (also ``\\boxed{(B)}``, ``\\boxed{\\text{B}}``);
    the last answer phrase ("The answer is (B).", "Answer: B", "**Answer:** C"; a lower-case
    letter only right after "answer:" and alone to the end of its line, as in "answer: b"); the
    last decorated letter ("(B)", "B)", "**B**", or a line holding only the letter). Letters
    inside words ("Because", "Answer: a detailed ...") are never taken.
    """
    return _find_choice(text, letters)[0]


def grade_choice(prediction: str, gold: str, letters: str = "ABCD") -> GradeResult:
    """Grade a multiple-choice answer; ``gold`` is one of ``letters`` (also "(B)" or " b ")."""
    if not isinstance(gold, str):
        raise TypeError(f"gold must be a str letter, got {type(gold).__name__}")
    gold_letter = gold.strip().strip("()").strip().upper()
    if len(gold_letter) != 1 or gold_letter not in letters.upper():
        raise ValueError(f"gold {gold!r} is not one of the option letters {letters!r}")
    letter, method = _find_choice(prediction, letters)
    return GradeResult(letter == gold_letter, letter, method, gold_letter, letter, None)


# ---------------------------------------------------------------------------------------------
# Registry and dispatch

GRADERS: dict[str, Grader] = {}


def register_grader(name: str, fn: Grader) -> Grader:
    """Add a grader kind; ``fn(prediction, gold, **kw) -> GradeResult``. Raises on duplicates.

    To be usable in ``eval.grading_pool.GradingPool``, ``fn`` must be a module-level function
    in a module that registers it when imported (workers import it by name).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"grader name must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise TypeError(f"grader {name!r} must be callable, got {type(fn).__name__}")
    if name in GRADERS:
        raise ValueError(f"grader {name!r} is already registered; choose another name")
    GRADERS[name] = fn
    return fn


register_grader("math", grade_math)
register_grader("choice", grade_choice)


def get_grader(kind: str) -> Grader:
    """The registered grader for ``kind``; ValueError naming the known kinds otherwise."""
    try:
        return GRADERS[kind]
    except KeyError:
        raise ValueError(
            f"unknown grader kind {kind!r}; registered: {', '.join(sorted(GRADERS))}"
        ) from None


def grade(kind: str, prediction: str, gold: str, **kw: Any) -> GradeResult:
    """Grade with the registered grader ``kind`` (``"math"``, ``"choice"``, ...)."""
    return get_grader(kind)(prediction, gold, **kw)


def grade_output(output: str, gold: str, *, kind: str = "math", answer_format: str = "boxed",
                 **kw: Any) -> GradeResult:
    """Grade a model's whole output the way evaluation does: its answer region
    (``pipelines.formats.answer_region`` for ``answer_format``: the whole text, the speak
    projection, or the last ``<answer>`` block), then the registered grader ``kind`` with ``kw``.

    Region-finding is part of extraction, so run inside a ``GradingPool`` worker it is bounded by
    the same per-item limit as the rest of the grading. An output with no answer region is graded
    as the empty prediction, so a gold the grader cannot use raises here whatever the output.
    """
    from pipelines.formats import answer_region

    fn = get_grader(kind)
    region = answer_region(output, answer_format)
    return fn("" if region is None else region, gold, **kw)


def is_input_error(result: GradeResult) -> bool:
    """True when :func:`grade_recorded` caught the grader rejecting its input (ValueError or
    TypeError: an empty or unusable gold, a wrong type), as opposed to grading it wrong."""
    return (result.error or "").startswith(("ValueError: ", "TypeError: "))


def grade_recorded(fn: Grader, prediction: str, gold: str, kw: dict[str, Any]) -> GradeResult:
    """Call ``fn``; an exception becomes an incorrect result carrying the error (batch use)."""
    try:
        return fn(prediction, gold, **kw)
    except Exception as exc:  # noqa: BLE001 - one bad row must not end a batch
        return GradeResult(False, None, "none", None, None, f"{type(exc).__name__}: {exc}"[:300])


def check_pairs(items: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Validate ``(prediction, gold)`` string pairs up front; TypeError names the bad item."""
    checked = []
    for i, item in enumerate(items):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError(f"item {i} must be a (prediction, gold) pair, got {item!r:.80}")
        prediction, gold = item
        if not isinstance(prediction, str) or not isinstance(gold, str):
            raise TypeError(
                f"item {i}: prediction and gold must be str, got {type(prediction).__name__} "
                f"and {type(gold).__name__} (use '' for a missing prediction)"
            )
        checked.append((prediction, gold))
    return checked


def grade_many_serial(items: Sequence[tuple[str, str]], kind: str = "math",
                      **kw: Any) -> list[GradeResult]:
    """Grade pairs one after another in this process (errors recorded per item, not raised)."""
    fn = get_grader(kind)
    return [grade_recorded(fn, p, g, kw) for p, g in check_pairs(items)]


