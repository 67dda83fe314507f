"""Per-format adapters: one raw dataset record in, one normalised :class:`Parsed` out.

Each adapter is a small pure function ``adapter(record) -> Parsed`` for one dataset layout
(the local copies under ``WEFT_DATA_DIR`` and, where it was cheap, the matching Hugging Face
layout). An adapter raises :class:`RowError` with a specific, human-readable reason when a
record cannot become a canonical problem; the caller turns that into a ``rejects`` row.

What this guarantees: answers are strings in a normalised form (no thousands separators in
GSM8K answers, integer-valued floats written as integers, AIME answers without leading zeros,
OlympiadBench answers without ``$`` delimiters). What it does not: it does not check that an
answer is mathematically correct or parseable by a grader, and ``meta`` keeps source fields
as given (MBPP+ test inputs may contain non-finite floats, which ``json.dumps`` writes as
``Infinity``; Python's ``json.loads`` reads them back, strict JSON parsers do not).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines.text import last_boxed, strip_control_chars

# Problem-text repairs for files whose LaTeX backslashes were once decoded as escapes
# ("\frac" -> form feed + "rac", "\triangle" -> tab + "riangle"); seen in DAPO-17k and AIME25.
_ESCAPE_REPAIRS = (
    (re.compile(r"\x0c(?=rac)"), r"\\f"),
    (re.compile(r"\t(?=riangle|imes|heta|ext\{|ilde)"), r"\\t"),
    (re.compile(r"\x08(?=inom|eta|egin|oxed)"), r"\\b"),
    (re.compile(r"\x0b(?=ec\{|arepsilon|arphi)"), r"\\v"),
)
_GSM8K_CALC_RE = re.compile(r"<<[^<>]*>>")
_DIGIT_COMMA_RE = re.compile(r"(?<=\d),(?=\d{3}\b)")
_UNESCAPED_DOLLAR_RE = re.compile(r"(?<!\\)\$")
_IMAGE_REF_RE = re.compile(r"<image_\d+>|!\[[^\]]*\]\(|<img\b", re.IGNORECASE)
_LETTER_RE = re.compile(r"^\(?([A-Za-z])\)?[.:]?$")
_DAPO_HEAD = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem."
)
_DAPO_TAIL_RE = re.compile(r'\s*Remember to put your answer on its own line after "Answer:"\.?\s*$')
LCB_ANSWER_SENTINEL = "<tests>"
GPQA_LETTERS = "ABCD"


class RowError(ValueError):
    """One record cannot become a canonical row; the message is the reject reason."""


@dataclass(frozen=True)
class Parsed:
    """What an adapter extracts from one record; the caller adds source, split and id."""

    problem: str
    answer: str
    solution: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


Adapter = Callable[[Mapping[str, Any]], Parsed]


# ----------------------------------------------------------------------------- helpers


def pick(record: Mapping[str, Any], *names: str) -> Any:
    """Value of the first of ``names`` present (and not None) in ``record``, else None."""
    for name in names:
        value = record.get(name)
        if value is not None:
            return value
    return None


def as_text(value: Any, what: str) -> str:
    """A field as a string: None -> "", numbers -> str; containers are an error."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RowError(f"field {what!r} should be text, got {type(value).__name__}")
    return format_number(value)


def repair_latex_escapes(text: str) -> str:
    """Repair LaTeX escapes mangled into control characters (``"\x0crac"`` -> ``"\\frac"``).

    Other control characters are left in place: ``pipelines.ingest`` strips them from every
    source's problem text and counts them, so adapters must not remove them silently first.
    """
    for pattern, replacement in _ESCAPE_REPAIRS:
        text = pattern.sub(replacement, text)
    return text


def clean_math_text(text: str) -> str:
    """Repair mangled LaTeX escapes, then drop the remaining control characters (not tab or
    newline; see ``pipelines.text.strip_control_chars``) and outer whitespace."""
    return strip_control_chars(repair_latex_escapes(text))[0].strip()


def format_number(value: float) -> str:
    """27 -> "27", 27.0 -> "27", 0.5 -> "0.5"; non-finite floats are an error."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RowError(f"numeric answer is not finite: {value!r}")
        if value.is_integer():
            return str(int(value))
        return repr(value)
    return str(value)


def normalize_numeric_answer(value: Any) -> str:
    """Numbers and numeric strings to a canonical decimal string; other text only stripped.

    ``"27.0" -> "27"``, ``"033" -> "33"``, ``"1,234" -> "1234"``, ``"-0.50" -> "-0.5"``;
    ``"\\frac{1}{2}"`` is returned unchanged (stripped).
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_number(value)
    text = as_text(value, "answer").strip()
    compact = _DIGIT_COMMA_RE.sub("", text)
    if re.fullmatch(r"[-+]?\d+", compact):
        return str(int(compact))
    if re.fullmatch(r"[-+]?\d*\.\d+|[-+]?\d+\.\d*", compact):
        number = float(compact)
        if number.is_integer():
            return str(int(number))
        return compact.lstrip("+").rstrip("0").rstrip(".") if "." in compact else compact
    return text


def strip_math_delimiters(text: str) -> str:
    """Remove unescaped ``$`` delimiters and outer space: ``"$x^2$"`` -> ``"x^2"``."""
    return _UNESCAPED_DOLLAR_RE.sub("", text).strip()


def parse_level(value: Any) -> int | str | None:
    """``"Level 3"`` or ``3`` -> 3; anything else is returned unchanged ("" -> None)."""
    if value is None or value == "":
        return None
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*(?:level\s*)?(\d+)\s*", str(value), re.IGNORECASE)
    return int(match.group(1)) if match else value


def literal_list(value: Any, what: str) -> list[Any]:
    """A list, or a Python/JSON list written as text, parsed safely (no eval)."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        try:
            parsed = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise RowError(f"field {what!r} is not a list literal ({type(exc).__name__})") from exc
        if isinstance(parsed, (list, tuple)):
            return list(parsed)
        raise RowError(f"field {what!r} should be a list, got {type(parsed).__name__}")
    raise RowError(f"field {what!r} should be a list, got {type(value).__name__}")


def _require(text: str, what: str) -> str:
    if not text.strip():
        raise RowError(f"missing {what}")
    return text


def _meta(**items: Any) -> dict[str, Any]:
    return {k: v for k, v in items.items() if v is not None and v != ""}


# ----------------------------------------------------------------------------- math


def adapt_gsm8k(record: Mapping[str, Any]) -> Parsed:
    """GSM8K: the final answer follows ``####``; calculator ``<<…>>`` notes are removed."""
    question = as_text(pick(record, "question", "problem"), "question")
    full = as_text(record.get("answer"), "answer")
    if not full.strip():
        raise RowError("missing answer: field 'answer' is empty")
    if "####" not in full:
        raise RowError("missing answer: gsm8k 'answer' has no '#### <number>' final line")
    worked, final = full.rsplit("####", 1)
    final = final.strip().replace(",", "")
    if not final:
        raise RowError("missing answer: nothing after '####' in gsm8k 'answer'")
    return Parsed(
        problem=question,
        answer=normalize_numeric_answer(final),
        solution=_GSM8K_CALC_RE.sub("", worked).strip(),
    )


def adapt_math(record: Mapping[str, Any]) -> Parsed:
    """MATH / MATH-500: the ``answer`` field when present, else the last ``\\boxed{}``."""
    problem = as_text(pick(record, "problem", "question"), "problem")
    solution = as_text(record.get("solution"), "solution")
    answer = as_text(record.get("answer"), "answer").strip()
    if not answer:
        answer = (last_boxed(solution) or "").strip()
    if not answer:
        raise RowError("missing answer: no 'answer' field and no \\boxed{} in the solution")
    meta = _meta(
        level=parse_level(record.get("level")),
        subject=pick(record, "subject", "type"),
        unique_id=record.get("unique_id"),
        original_id=pick(record, "idx", "id"),
    )
    return Parsed(problem=problem, answer=answer, solution=solution, meta=meta)


def adapt_minerva(record: Mapping[str, Any]) -> Parsed:
    """Minerva-Math: answer is the last ``\\boxed{}`` of the solution (or an ``answer`` field)."""
    problem = as_text(pick(record, "problem", "question"), "problem")
    solution = as_text(record.get("solution"), "solution")
    answer = (last_boxed(solution) or "").strip() or as_text(record.get("answer"), "answer").strip()
    if not answer:
        raise RowError("missing answer: no \\boxed{} in the Minerva solution")
    meta = _meta(subject=record.get("type"), original_id=pick(record, "idx", "id"))
    return Parsed(problem=problem, answer=answer, solution=solution, meta=meta)


def adapt_competition(record: Mapping[str, Any]) -> Parsed:
    """AIME24/25, AMC23 and similar: problem + short numeric answer (floats, leading zeros)."""
    problem = repair_latex_escapes(
        as_text(pick(record, "problem", "Problem", "question"), "problem")
    ).strip()
    raw_answer = pick(record, "answer", "Answer")
    if raw_answer is None or (isinstance(raw_answer, str) and not raw_answer.strip()):
        raise RowError("missing answer: field 'answer' is empty")
    meta = _meta(original_id=pick(record, "id", "ID"), url=record.get("url"))
    solution = as_text(pick(record, "solution", "Solution"), "solution")
    return Parsed(
        problem=problem, answer=normalize_numeric_answer(raw_answer), solution=solution, meta=meta
    )


def _has_image_fields(record: Mapping[str, Any]) -> str | None:
    for key, value in record.items():
        if re.fullmatch(r"image_\d+", str(key)) and value not in (None, ""):
            return str(key)
    return None


def adapt_olympiadbench(record: Mapping[str, Any]) -> Parsed:
    """OlympiadBench: ``final_answer`` is a list (or list text); ``$`` stripped, joined by ", ".

    Rows whose question or context refers to an image (``<image_1>``, markdown/HTML images)
    or that carry ``image_N`` fields are rejected: the problems table is text only. The local
    file is the text-only subset (no such rows); the Hugging Face layout has them.
    """
    question = as_text(record.get("question"), "question")
    context = as_text(record.get("context"), "context")
    image_field = _has_image_fields(record)
    image_ref = _IMAGE_REF_RE.search(question + "\n" + context)
    if image_ref or image_field:
        where = image_ref.group(0) if image_ref else image_field
        raise RowError(
            f"question needs an image ({where}) and the problems table holds text only; "
            "use a text-only subset"
        )
    problem = f"{context.strip()}\n\n{question.strip()}" if context.strip() else question
    items = literal_list(record.get("final_answer"), "final_answer")
    parts = [strip_math_delimiters(as_text(item, "final_answer")) for item in items]
    parts = [p for p in parts if p]
    if not parts:
        raise RowError("missing answer: 'final_answer' is an empty list")
    solution_value = record.get("solution")
    if isinstance(solution_value, (list, tuple)):
        solution = "\n\n".join(as_text(s, "solution") for s in solution_value)
    else:
        solution = as_text(solution_value, "solution")
    meta = _meta(
        original_id=record.get("id"),
        subfield=record.get("subfield"),
        unit=record.get("unit"),
        ob_answer_type=record.get("answer_type"),
        is_multiple_answer=record.get("is_multiple_answer"),
        tolerance=record.get("error"),
        has_context=bool(context.strip()) or None,
    )
    return Parsed(problem=problem, answer=", ".join(parts), solution=solution, meta=meta)


def olympiadbench_answer_type(parsed: Parsed) -> str:
    """ "list" when OlympiadBench marks the answer as several answers, else "math"."""
    return "list" if parsed.meta.get("is_multiple_answer") else "math"


def _strip_dapo_template(text: str) -> str:
    if text.startswith(_DAPO_HEAD):
        text = _DAPO_TAIL_RE.sub("", text[len(_DAPO_HEAD) :])
    return text.strip()


def adapt_dapo(record: Mapping[str, Any]) -> Parsed:
    """DAPO-17k in verl layout: prompt = chat messages, gold = ``reward_model.ground_truth``.

    The problem is the last user message, with DAPO's answer-format instructions removed when
    present and mangled LaTeX escapes repaired (see :func:`repair_latex_escapes`).
    """
    prompt = record.get("prompt")
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, (list, tuple)):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        if not users:
            raise RowError("DAPO 'prompt' has no user message")
        text = as_text(users[-1].get("content"), "prompt.content")
    else:
        raise RowError(
            f"DAPO 'prompt' should be a list of chat messages, got {type(prompt).__name__}"
        )
    reward = record.get("reward_model")
    truth = reward.get("ground_truth") if isinstance(reward, Mapping) else None
    if truth is None or not as_text(truth, "reward_model.ground_truth").strip():
        raise RowError("missing answer: 'reward_model.ground_truth' is empty")
    extra = record.get("extra_info") if isinstance(record.get("extra_info"), Mapping) else {}
    meta = _meta(
        data_source=record.get("data_source"),
        original_id=extra.get("index"),
        ability=record.get("ability"),
    )
    return Parsed(
        problem=repair_latex_escapes(_strip_dapo_template(text)).strip(),
        answer=as_text(truth, "reward_model.ground_truth").strip(),
        meta=meta,
    )


def adapt_deepscaler(record: Mapping[str, Any]) -> Parsed:
    """DeepScaleR: ``ground_truth`` (or ``answer``) as text.

    A JSON array of strings (``'["1", "2"]'``) is joined with ", "; anything else is kept
    as written, because bracketed answers such as ``[201,400]`` are intervals, not lists.
    """
    problem = as_text(pick(record, "question", "problem"), "question")
    truth = pick(record, "ground_truth", "answer")
    if isinstance(truth, list):
        answer = ", ".join(as_text(t, "ground_truth").strip() for t in truth)
    else:
        answer = as_text(truth, "ground_truth").strip()
        if answer.startswith("[") and answer.endswith("]"):
            try:
                items = json.loads(answer)
            except ValueError:
                items = None
            if isinstance(items, list) and items and all(isinstance(i, str) for i in items):
                answer = ", ".join(i.strip() for i in items)
    if not answer:
        raise RowError("missing answer: 'ground_truth' is empty")
    meta = _meta(level=parse_level(record.get("level")), subject=record.get("type"))
    return Parsed(
        problem=repair_latex_escapes(problem).strip(),
        answer=answer,
        solution=as_text(record.get("solution"), "solution"),
        meta=meta,
    )


# ----------------------------------------------------------------------------- multiple choice


def _gpqa_from_columns(record: Mapping[str, Any]) -> Parsed:
    """Hugging Face GPQA layout: options shuffled by a fixed hash of the question."""
    question = as_text(record.get("Question"), "Question").strip()
    correct = as_text(record.get("Correct Answer"), "Correct Answer").strip()
    wrong = [
        as_text(record.get(f"Incorrect Answer {i}"), "Incorrect Answer").strip() for i in (1, 2, 3)
    ]
    if not correct or not all(wrong):
        raise RowError("missing answer: GPQA row lacks 'Correct Answer' or an 'Incorrect Answer N'")
    options = [correct, *wrong]
    digest = hashlib.sha1(question.encode("utf-8")).digest()
    order = sorted(range(4), key=lambda i: (digest[i], i))
    shuffled = [options[i] for i in order]
    letter = GPQA_LETTERS[shuffled.index(correct)]
    body = "\n".join(f"{GPQA_LETTERS[i]}) {text}" for i, text in enumerate(shuffled))
    meta = _meta(original_id=record.get("Record ID"), subject=record.get("High-level domain"))
    return Parsed(problem=f"{question}\n\n{body}", answer=letter, meta=meta)


def adapt_gpqa(record: Mapping[str, Any]) -> Parsed:
    """GPQA-Diamond: question text with lettered options; answer is one letter A-D."""
    if "Correct Answer" in record:
        return _gpqa_from_columns(record)
    question = as_text(record.get("question"), "question")
    raw = as_text(record.get("answer"), "answer").strip()
    if not raw:
        raise RowError("missing answer: GPQA 'answer' is empty")
    match = _LETTER_RE.match(raw)
    if not match or match.group(1).upper() not in GPQA_LETTERS:
        raise RowError(f"GPQA answer should be one letter A-D, got {raw[:20]!r}")
    return Parsed(problem=question, answer=match.group(1).upper())


# ----------------------------------------------------------------------------- code


def adapt_humaneval(record: Mapping[str, Any]) -> Parsed:
    """HumanEval: prompt is the problem; canonical solution is the answer; tests in meta."""
    prompt = as_text(record.get("prompt"), "prompt")
    solution = as_text(record.get("canonical_solution"), "canonical_solution")
    if not solution.strip():
        raise RowError("missing answer: 'canonical_solution' is empty")
    entry_point = as_text(record.get("entry_point"), "entry_point")
    test = as_text(record.get("test"), "test")
    if not entry_point or not test.strip():
        raise RowError("HumanEval row lacks 'entry_point' or 'test': it could not be graded")
    meta = {"task_id": record.get("task_id"), "entry_point": entry_point, "test": test}
    return Parsed(problem=prompt, answer=solution, solution=solution, meta=meta)


def adapt_mbppplus(record: Mapping[str, Any]) -> Parsed:
    """MBPP+ (EvalPlus): prompt, canonical solution; base/plus inputs, atol, assertion in meta.

    Also accepts the Hugging Face ``evalplus/mbppplus`` layout (``code``, ``test``,
    ``test_list``).
    """
    prompt = as_text(record.get("prompt"), "prompt")
    solution = as_text(pick(record, "canonical_solution", "code"), "canonical_solution")
    if not solution.strip():
        raise RowError("missing answer: 'canonical_solution' is empty")
    grading = {
        k: record[k]
        for k in (
            "base_input",
            "plus_input",
            "atol",
            "assertion",
            "contract",
            "test",
            "test_list",
            "test_imports",
        )
        if record.get(k) is not None
    }
    if not any(k in grading for k in ("base_input", "assertion", "test", "test_list")):
        raise RowError("MBPP+ row has no tests (base_input/assertion/test): it could not be graded")
    meta = {"task_id": record.get("task_id"), "entry_point": record.get("entry_point"), **grading}
    return Parsed(problem=prompt, answer=solution, solution=solution, meta=_meta(**meta))


def adapt_livecodebench(record: Mapping[str, Any]) -> Parsed:
    """LiveCodeBench: no reference solution, so ``answer`` is a sentinel and tests go to meta.

    ``mode`` is "functional" when there is starter code (LeetCode-style class), else "stdin".
    """
    problem = as_text(pick(record, "problem", "question_content"), "problem")
    tests = record.get("tests")
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except ValueError as exc:
            raise RowError("LiveCodeBench 'tests' is text but not JSON") from exc
    if not isinstance(tests, list) or not tests:
        raise RowError("missing answer: LiveCodeBench row has no tests to grade against")
    for i, test in enumerate(tests):
        if not isinstance(test, Mapping) or "input" not in test or "output" not in test:
            raise RowError(f"LiveCodeBench test {i} lacks 'input'/'output'")
    starter = as_text(record.get("starter_code"), "starter_code")
    meta = {
        "starter_code": starter,
        "mode": "functional" if starter.strip() else "stdin",
        "tests": tests,
        "n_tests": len(tests),
    }
    return Parsed(problem=problem, answer=LCB_ANSWER_SENTINEL, meta=meta)


# ----------------------------------------------------------------------------- field mapping


def _field(record: Mapping[str, Any], path: str) -> Any:
    """The value at ``path`` (``"a.b"`` walks nested objects), or None when any step is absent."""
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


@dataclass(frozen=True, kw_only=True)
class FieldMap:
    """An adapter declared as a field mapping, for files already shaped as problem/answer rows
    (a local JSONL benchmark from a config file). Each value names the record's field; a dotted
    name (``"reward_model.ground_truth"``) reads a nested object.

    ``problem`` and ``answer`` are required and become text (numbers as in
    :func:`format_number`); ``solution`` is optional; ``id`` goes to meta as ``original_id``,
    so two records with one id and different problems are an id conflict."""

    problem: str
    answer: str
    id: str | None = None
    solution: str | None = None

    def __call__(self, record: Mapping[str, Any]) -> Parsed:
        problem = as_text(_field(record, self.problem), self.problem)
        if not problem.strip():
            raise RowError(f"missing problem text: field {self.problem!r} is absent or empty")
        answer = as_text(_field(record, self.answer), self.answer).strip()
        if not answer:
            raise RowError(f"missing answer: field {self.answer!r} is absent or empty")
        solution = as_text(_field(record, self.solution), self.solution) if self.solution else ""
        record_id = _field(record, self.id) if self.id else None
        if isinstance(record_id, (Mapping, list, tuple)):
            raise RowError(f"field {self.id!r} (the record id) should be text or a number, "
                           f"got {type(record_id).__name__}")
        meta = {} if record_id is None else {"original_id": record_id}
        return Parsed(problem=problem, answer=answer, solution=solution, meta=meta)


# ----------------------------------------------------------------------------- built-in


def adapt_reasoning_gym(record: Mapping[str, Any]) -> Parsed:
    """A reasoning-gym item: question, exact answer, task/seed/index and task metadata."""
    question = as_text(record.get("question"), "question")
    answer = as_text(record.get("answer"), "answer").strip()
    if not answer:
        raise RowError("missing answer: reasoning-gym item has no answer")
    meta = {"task": record.get("task"), "seed": record.get("seed"), "index": record.get("index")}
    meta["rg_answer"] = answer  # as reasoning-gym wrote it, for its own score_answer()
    meta["task_metadata"] = json.loads(json.dumps(record.get("metadata") or {}, default=str))
    return Parsed(problem=question, answer=strip_math_delimiters(answer), meta=meta)
