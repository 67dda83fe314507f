"""Graders shared by evaluation and RL rewards: one grader per answer kind, plus a kill-safe pool.

A grader takes ``(prediction, gold)`` and returns a :class:`GradeResult` that records what was
extracted, how (``method``), what both sides parsed to, and any error. Kinds:

- ``"math"`` (:func:`grade_math`): the final answer is extracted from the prediction by an
  explicit ``ExtractionPolicy`` (``eval.extraction``: the last ``\\boxed{}``, then "the answer
  is X" phrases, then, only when the policy says so, the last number in the text) and compared
  with the gold answer by math-verify (symbolic and numeric equality, gold first: math-verify is
  asymmetric). An answer is right only when it states one value equal to the gold
  (``eval.answer_relations``): a relation, a hedge or an equation that does not name the value
  (``\\ge 42``, ``42 \\text{ or more}``, ``41 \\to 42``, ``x + 1 = 41``, ``x = 41 = 42``) is
  wrong against a gold that is one value before math-verify sees it, with ``error`` saying why
  (math-verify alone reads such answers by their last part or right side); alternatives
  (``41 \\lor 42``, ``42 \\text{ or } 43``) are each compared and must all equal the gold. An
  equation counts when its left side names the value (``x = 42``, ``n_0 = 42``, ``f(3) = 42``)
  or is arithmetic (``3 \\times 4 = 12``).
- ``"choice"`` (:func:`grade_choice`): a multiple-choice letter, see :func:`extract_choice`.
- more kinds (``"code"``) are added with one :func:`register_grader` call.

:func:`grade_output` grades a model's whole output: the format's answer region
(``pipelines.formats.answer_region``), then a registered grader; RL rewards call it (in a pool)
so that they grade exactly as evaluation does. Answer extraction (boxes, answer phrases, math
delimiters, choice letters) and the one-value check are linear in the length of the text.

Time limits, per entry point:

- ``eval.grading_pool.GradingPool`` (evaluation and RL rewards): worker processes, each on its
  own main thread so math-verify's ``signal.alarm`` limits work, and an outer wall-clock kill
  per item that also catches work ignoring signals. A killed item is incorrect with error
  :data:`TIMED_OUT`; extraction runs inside the worker, so one limit covers everything.
- :func:`grade_many_serial` (and the in-process paths built on it: grading in a daemonic
  process, which cannot start workers): the same per-item wall-clock limit as the pool, in this
  process, enforced with ``SIGALRM`` (math-verify's own alarms are off meanwhile, so they cannot
  cancel it); main thread only, and it raises RuntimeError elsewhere rather than run unbounded.
  Work inside one C call (a huge integer power) finishes before the signal is handled.
- :func:`grade_math` called directly: extraction and the one-value check are bounded by
  construction (linear); each math-verify call by its ``timeout_s`` on the main thread, and not
  at all on another thread (``signal.alarm`` is main-thread only): use the pool there.

The pool depends on this module (its registry and result type), never the other way round.

Not guaranteed: that math-verify judges every equivalent pair equal (units written as plain
words, e.g. "18 dollars", do not parse; answers with several parts need the same shape on both
sides); that an answer-phrase or last-number extraction is the answer the model meant; that
every spelling of a hedge is caught (see ``eval.answer_relations``), nor any hedge under the
``flexible`` rule (it takes the last number, as lm-evaluation-harness does: ``41 \\lor 42``
yields 42); timing of a single inner timeout finer than one second.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from eval.answer_relations import GoldShape, gold_shape, read_answer
from eval.extraction import (
    DEFAULT_POLICY,
    ExtractionPolicy,
    extract_answer,
    to_latex,
)
from pipelines.text import last_boxed

DEFAULT_TIMEOUT_S = 5
# Wall-clock seconds one item may take in a GradingPool (its default) and in grade_many_serial
DEFAULT_ITEM_LIMIT_S = 10.0
TIMED_OUT = "grading timed out"
MAX_PARSED_CHARS = 200
# math-verify rounds floats to 6 decimal places, so 2.88e-19 "equals" 3.88e-19. Below this
# magnitude we also require agreement to TINY_REL_TOL relative difference (about 6 digits).
TINY_MAGNITUDE = 1e-3
TINY_REL_TOL = 2e-6

Grader = Callable[..., "GradeResult"]


# ---------------------------------------------------------------------------------------------
# Result


@dataclass(frozen=True)
class GradeResult:
    """The grade of one (prediction, gold) pair; ``method`` is one of :data:`METHODS`."""

    correct: bool
    extracted: str | None
    method: str
    gold_parsed: str | None = None
    pred_parsed: str | None = None
    error: str | None = None


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


@lru_cache(maxsize=4096)
def _gold_shape(latex: str, timeout_s: int) -> GoldShape:
    """What the gold allows in a prediction (``eval.answer_relations``): its LaTeX, and whether
    math-verify parses it to a relation, several values or a set."""
    from sympy import Set, Tuple
    from sympy.core.relational import Relational
    from sympy.logic.boolalg import BooleanFunction
    from sympy.matrices import MatrixBase

    parsed = _parse_gold(latex, timeout_s)[0]
    return gold_shape(latex, relational=isinstance(parsed, (Relational, BooleanFunction)),
                      several=isinstance(parsed, (Set, Tuple, MatrixBase)),
                      is_set=isinstance(parsed, Set))


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
    A prediction that states a relation, a hedge, or an equation that does not name its value
    is wrong against a gold that is one value, without asking math-verify; alternatives are
    each compared and must all match (``eval.answer_relations``; ``error`` starts with
    ``"not one value: "``).
    ``timeout_s`` bounds each math-verify call (parse gold, parse prediction, each comparison),
    so one call can take a few times ``timeout_s``. On a thread other than the main thread, and
    under :func:`grade_many_serial`'s own limit, the math-verify timeouts are off
    (signal.alarm would raise, or cancel that limit): off the main thread a pathological answer
    can run unbounded, so grade through ``eval.grading_pool.GradingPool`` there.
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

    # 0 disables math-verify's signal.alarm: off the main thread, and under an outer limit
    limit = timeout_s if _in_main_thread() and not _limit.active else 0
    extracted, method = extract_answer(prediction, policy)
    gold_text = None
    try:
        gold_parsed = _parse_gold(gold_latex, limit)
        if not gold_parsed:
            return GradeResult(False, extracted, method, None, None,
                               f"math-verify could not parse the gold answer {gold!r}")
        gold_text = _short(gold_parsed[0])
        if extracted is None:
            return GradeResult(False, None, "none", gold_text, None, None)
        reading = read_answer(to_latex(extracted), _gold_shape(gold_latex, limit))
    except TimeoutException:
        return GradeResult(False, extracted, method, gold_text, None,
                           f"math-verify timed out after {timeout_s}s while parsing the gold answer")
    except Exception as exc:  # noqa: BLE001 - a parser crash is a wrong answer, recorded
        return GradeResult(False, extracted, method, gold_text, None,
                           f"{type(exc).__name__} while parsing the gold answer: {exc}"[:300])
    if reading.problem is not None:
        return GradeResult(False, extracted, method, gold_text, None,
                           f"not one value: {reading.problem}"[:300])
    texts: list[str] = []
    for value in reading.values:  # one value; or each alternative, all of which must match
        matched, pred_text, error = _matches(gold_parsed, value, limit, timeout_s)
        texts.append(pred_text or "?")
        if not matched:
            if error is None and len(reading.values) > 1:
                error = f"not one value: {len(reading.values)} values, not all the gold's"
            return GradeResult(False, extracted, method, gold_text,
                               _short(" | ".join(texts)) if pred_text else None, error)
    return GradeResult(True, extracted, method, gold_text, _short(" | ".join(texts)), None)


def _matches(gold_parsed: tuple, latex: str, limit: int,
             timeout_s: int) -> tuple[bool, str | None, str | None]:
    """Whether ``latex`` parses to something math-verify finds equal to one of ``gold_parsed``:
    ``(equal, what it parsed to, error)``."""
    from math_verify.errors import TimeoutException

    try:
        pred_parsed = _parse(latex, limit)
    except TimeoutException:
        return False, None, f"math-verify timed out after {timeout_s}s while parsing the prediction"
    except Exception as exc:  # noqa: BLE001 - a parser crash is a wrong answer, recorded
        return False, None, f"{type(exc).__name__} while parsing the prediction: {exc}"[:300]
    if not pred_parsed:
        return False, None, None
    pred_text = _short(pred_parsed[0])
    verify = _mv().verify
    first_error = None
    # Pairwise (gold first: math-verify is asymmetric) so one failure does not hide the others.
    for g in gold_parsed:
        for p in pred_parsed:
            try:
                if verify(g, p, timeout_seconds=limit, raise_on_error=True) \
                        and not _tiny_numbers_differ(g, p):
                    return True, pred_text, None
            except TimeoutException:
                first_error = first_error or f"math-verify timed out after {timeout_s}s while comparing"
            except Exception as exc:  # noqa: BLE001 - sympy raises anything
                first_error = first_error or f"{type(exc).__name__} while comparing: {exc}"[:300]
    return False, pred_text, first_error


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


class _OutOfTime(BaseException):
    """Raised by the item limit's SIGALRM handler; a BaseException so that no grader's
    ``except Exception`` (nor math-verify's own handlers) can swallow it."""


class _ItemLimit:
    """State of :func:`grade_many_serial`'s per-item limit (main thread only)."""

    active = False  # grade_math turns math-verify's own alarms off while set
    armed = False  # the handler raises only while set (a late signal is ignored)


_limit = _ItemLimit()


def _on_alarm(signum: int, frame: Any) -> None:
    if _limit.armed:
        _limit.armed = False
        raise _OutOfTime


def _grade_within(fn: Grader, prediction: str, gold: str, kw: dict[str, Any],
                  limit_s: float) -> GradeResult:
    """``grade_recorded`` under a wall-clock limit of ``limit_s`` seconds (``SIGALRM`` via
    ``setitimer``); a timer the caller had set is put back with the time it has left."""
    previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
    previous_delay, previous_interval = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    _limit.active = _limit.armed = True
    try:
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        try:
            return grade_recorded(fn, prediction, gold, kw)
        finally:
            _limit.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _OutOfTime:
        return GradeResult(False, None, "none", None, None, TIMED_OUT)
    finally:
        _limit.active = _limit.armed = False
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            left = previous_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), previous_interval)


def grade_many_serial(items: Sequence[tuple[str, str]], kind: str = "math", *,
                      answer_format: str | None = None,
                      item_limit_s: float = DEFAULT_ITEM_LIMIT_S, **kw: Any) -> list[GradeResult]:
    """Grade pairs one after another in this process (errors recorded per item, not raised).

    Bounded by the same limit as the pool: each item (region, extraction, verification) runs
    under a wall-clock limit of ``item_limit_s`` seconds (``GradingPool``'s default), enforced
    with ``SIGALRM``; an item past it is incorrect with error :data:`TIMED_OUT` and the batch
    goes on. math-verify's own per-call alarms are off meanwhile (they would cancel the limit).
    With ``answer_format`` the predictions are whole outputs, graded by :func:`grade_output`
    as ``GradingPool.grade_many(..., answer_format=...)`` grades them. Signals reach only the
    main thread, so elsewhere this raises RuntimeError instead of grading without a limit.
    Not guaranteed: stopping inside one long C call (it ends before the signal is handled).
    """
    if isinstance(item_limit_s, bool) or not isinstance(item_limit_s, (int, float)) \
            or not item_limit_s > 0:
        raise ValueError(f"item_limit_s must be > 0 seconds, got {item_limit_s!r}")
    if not _in_main_thread():
        raise RuntimeError(
            "grade_many_serial enforces its time limit with SIGALRM, which only the main thread "
            "receives; from another thread grade through eval.grading_pool.GradingPool")
    if _limit.active:
        raise RuntimeError("grade_many_serial cannot run inside another grade_many_serial item")
    fn = get_grader(kind)
    if answer_format is not None:
        from pipelines.formats import check_format

        check_format(answer_format)
        fn, kw = grade_output, {**kw, "kind": kind, "answer_format": answer_format}
    return [_grade_within(fn, p, g, kw, float(item_limit_s)) for p, g in check_pairs(items)]
