"""The string stage of grading is linear in the output's length, measured as work, not time.

Work is counted with a trace hook over the modules that do the string work (answer regions,
answer extraction, choice letters, the one-value check): every Python line executed there
counts 1 (loops written in Python), and every call into them counts the length of each str it
receives (what its C-level scans, slices and regex passes can read: each of these functions
makes a fixed number of linear passes over its arguments). Old extraction handed the whole text
to one cleaning call per answer phrase, so this count grew with the square of the length; it
now must grow about 4x for 4x the input, and stay within a fixed multiple of the length.
Wall-clock time is never asserted; ``bench/grading.py --adversarial`` prints it side by side.
What a single regex pass does inside the engine is invisible here: the patterns are written so
that no two runs can trade characters (possessive runs, one anchored attempt), and
``test_extraction.py`` runs the megabyte shapes in a child process under a hard kill limit.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from eval.answer_relations import gold_shape, read_answer
from eval.extraction import FLEXIBLE_POLICY, extract_answer, to_latex
from eval.graders import extract_choice
from pipelines.formats import answer_region

ROOT = Path(__file__).resolve().parents[2]
MEASURED = {str(ROOT / p) for p in ("eval/extraction.py", "eval/answer_relations.py",
                                    "eval/graders.py", "pipelines/text.py", "pipelines/formats.py")}
GOLD = gold_shape("42")
# a fixed multiple of the length that the work of the whole stage stays within (measured 35-90)
WORK_PER_CHAR = 150
GROWTH_4X = 4.6  # linear work grows ~4x for 4x the input; quadratic would be ~16x


def work(fn, *args) -> int:
    """Lines executed plus str characters handed to calls, inside :data:`MEASURED` files."""
    total = 0

    def tracer(frame, event, arg):
        nonlocal total
        if frame.f_code.co_filename not in MEASURED:
            return None
        if event == "call":
            code = frame.f_code
            for name in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]:
                value = frame.f_locals.get(name)
                if isinstance(value, str):
                    total += len(value)
        elif event == "line":
            total += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return total


def string_stage(text: str) -> None:
    """Everything grading does to an output before math-verify sees it."""
    for fmt in ("boxed", "sxs", "tir"):
        region = answer_region(text, fmt)
        if region is None:
            continue
        for policy in (None, FLEXIBLE_POLICY):
            answer, _ = extract_answer(region) if policy is None else extract_answer(region, policy)
            if answer is not None:
                read_answer(to_latex(answer), GOLD)
    extract_choice(text)
    read_answer(text, GOLD)  # the check itself on the raw text: any shape, any length


def _repeat(unit: str, chars: int) -> str:
    return unit * max(1, chars // len(unit))


# degenerate shapes: each is one unit repeated (the prefix/suffix ones are built below)
UNITS = {
    "phrase without a full stop": "answer is foo bar baz ",
    "phrase then prose": "The answer is unclear to me ",
    "final answer, colon": "final answer: ",
    "phrase then an equation": "the answer is 1 = ",
    "phrase then a dollar": "answer: $ ",
    "phrase then a box": "answer is \\boxed{ ",
    "phrase then \\(": "answer is \\( ",
    "gsm8k marks": "#### ",
    "unclosed boxes": "\\boxed{",
    "boxes joined by or": "\\boxed{1} or ",
    "boxes joined by commas": "\\boxed{1}, ",
    "dollars": "$",
    "open braces": "{",
    "close braces": "}",
    "equals": "= ",
    "an equation chain": "x = 1 + ",
    "digit groups": "1,",
    "words, no punctuation": "foo ",
    "hedge words": "42 or ",
    "connectives": "41 \\lor ",
    "text groups": "\\text{ or } ",
    "scripts": "x_{",
    "left delimiters": "\\left( ",
    "choice letters": "(E) ",
    "answer then spaces": "answer    ",
    "think tags": "<think><speak>",
    "answer tags": "<answer>",
}
BUILT = {
    "nested boxes": lambda c: "\\boxed{" * (c // 8) + "}" * (c // 8),
    "phrase then one long line": lambda c: "The answer is " + "x " * (c // 2),
    "phrase then long arithmetic": lambda c: "The answer is " + "1 + " * (c // 4) + "= 5",
    "one box around everything": lambda c: "\\boxed{" + "41 \\lor 42, " * (c // 12) + "}",
}


def _shape(name: str, chars: int) -> str:
    return BUILT[name](chars) if name in BUILT else _repeat(UNITS[name], chars)


def test_every_degenerate_shape_costs_linear_work():
    failures = {}
    for name in [*UNITS, *BUILT]:
        small, large = _shape(name, 2_000), _shape(name, 8_000)
        w_small, w_large = work(string_stage, small), work(string_stage, large)
        growth = w_large / w_small
        if growth > GROWTH_4X or w_large > WORK_PER_CHAR * len(large):
            failures[name] = (w_small, w_large, round(growth, 2))
    assert not failures, failures


def test_the_measure_sees_quadratic_work():
    """A literal transcription of the old answer-phrase loop (the whole text handed to one
    cleaning call per phrase) grows ~16x under the same measure."""
    from eval.extraction import _ANSWER_ANCHOR_RE, _phrase_answer

    def old_shape(text: str) -> None:
        for anchor in reversed(list(_ANSWER_ANCHOR_RE.finditer(text))):
            cleaned = _phrase_answer(text[anchor.end():])
            if cleaned:
                return

    small, large = _shape("phrase without a full stop", 2_000), _shape(
        "phrase without a full stop", 8_000)
    assert work(old_shape, large) / work(old_shape, small) > 12


PIECES = ["answer is ", "Answer: ", "####", "\\boxed{", "{", "}", "$", "\\(", "\\)", " = ",
          "1", "42", ",", ".", " ", "\n", "or ", "\\lor ", "\\text{", "x", "_", "^", "(", ")",
          "\\left(", "\\right)", "<think>", "</speak>", "<answer>", "</answer>", "I hope",
          "\\ge ", "foo "]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=12))
def test_generated_shapes_cost_linear_work(pieces):
    unit = "".join(pieces)
    small, large = _repeat(unit, 1_500), _repeat(unit, 6_000)
    w_small, w_large = work(string_stage, small), work(string_stage, large)
    assert w_large <= WORK_PER_CHAR * len(large) + 2_000, (unit, w_large)
    assert w_large <= GROWTH_4X * w_small + 2_000, (unit, w_small, w_large)
