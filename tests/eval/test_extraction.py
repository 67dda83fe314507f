"""Answer extraction is linear in the output's length and keeps its exact results.

Property tests compare the linear implementations with literal transcriptions of the old ones
(a rescan per ``\\boxed{``, the lazy regexes) on small strings drawn from the characters that
matter. Work is bounded without timing: a count of the Python lines executed while finding the
last box of n unterminated ones grows linearly in n (the old rescan executed ~n^2/2 lines).
Regex work is invisible to a line count, so every adversarial 1 MB output also runs in a child
process under a hard kill limit: a liveness check (each of them used to take minutes).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval import extraction
from pipelines import formats
from pipelines.text import boxed_contents, last_boxed

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ references (old semantics)


def brute_boxed_contents(text: str) -> list[str]:
    """For every ``\\boxed{`` (or ``\\fbox{``, spaces allowed before the brace), scan ahead
    to its matching brace; unterminated ones are skipped."""
    found = []
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                found.append(text[start:i].strip())
                break
    return found


OLD_MATH_ENV = re.compile(r"(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
OLD_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def old_math_env(text: str) -> str | None:
    m = OLD_MATH_ENV.search(text)
    return None if m is None else next(g for g in m.groups() if g is not None)


def old_last_answer_block(text: str) -> str:
    blocks = OLD_ANSWER_BLOCK.findall(text)
    return blocks[-1] if blocks else ""


def pieces(*alphabet: str, max_size: int = 14):
    return st.lists(st.sampled_from(alphabet), max_size=max_size).map("".join)


BOX_TEXT = pieces("\\boxed{", "\\fbox {", "\\boxed", "{", "}", "a", " ", "\\", "\n")
ENV_TEXT = pieces("$", "\\$", "\\(", "\\)", "\\[", "\\]", "\\", "(", ")", "x", " ", "\n")
BLOCK_TEXT = pieces("<answer>", "</answer>", "<answer", "</", "a", "\n")


# ------------------------------------------------------------------ exact results


@settings(max_examples=1500, deadline=None)
@given(BOX_TEXT)
def test_boxed_contents_equal_the_rescan_per_box(text):
    expected = brute_boxed_contents(text)
    assert boxed_contents(text) == expected
    assert last_boxed(text) == (expected[-1] if expected else None)


@settings(max_examples=1500, deadline=None)
@given(ENV_TEXT)
def test_first_math_env_equals_the_lazy_regex(text):
    assert extraction._first_math_env(text) == old_math_env(text)


@settings(max_examples=1000, deadline=None)
@given(BLOCK_TEXT)
def test_last_answer_block_equals_the_lazy_regex(text):
    assert formats._last_answer_block(text) == old_last_answer_block(text)


@pytest.mark.parametrize("text, expected", [
    ("\\boxed{a \\boxed{b}}", ["a \\boxed{b}", "b"]),  # nested: parent first
    ("\\boxed{ \\boxed{ x }", ["x"]),  # the outer box is never closed
    ("}} \\boxed{1} }{", ["1"]),  # stray braces outside boxes change nothing
    ("\\fbox {2} and \\boxed{{3}}", ["2", "{3}"]),
    ("\\boxed{}", [""]),
])
def test_boxed_contents_table(text, expected):
    assert boxed_contents(text) == expected == brute_boxed_contents(text)


@pytest.mark.parametrize("text, answer", [
    ("The answer is I hope 5.", None),  # "I hope" right after the phrase ends the sentence
    ("answer: 1\nanswer: . \nnothing", "1"),  # an empty later phrase falls back to an earlier
    ("final answer: $7$ apples", "7"),
    ("The answer is \\(\\frac{1}{2}\\) so", "\\frac{1}{2}"),
])
def test_answer_phrase_edges(text, answer):
    assert extraction.extract_answer(text)[0] == answer


# ------------------------------------------------------------------ work bounds


def _lines_executed(fn, *args) -> int:
    """Python line events executed inside pipelines/text.py while running ``fn(*args)``."""
    count = 0
    target = str(ROOT / "pipelines" / "text.py")

    def tracer(frame, event, arg):
        nonlocal count
        if frame.f_code.co_filename != target:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return count


def test_last_boxed_work_is_linear_in_unterminated_boxes():
    small = _lines_executed(last_boxed, "\\boxed{" * 300)
    large = _lines_executed(last_boxed, "\\boxed{" * 1200)
    # the old rescan ran ~4 lines per character after each box: ~190,000 lines for 300 boxes
    assert small <= 10 * 300
    assert large <= 4.5 * small  # 4x the boxes, about 4x the work (quadratic would be 16x)


ADVERSARIAL = {  # ~1 MB each; every one took over 60 s before extraction became linear
    # (the last three came later: phrases with no full stop were quadratic until each phrase
    # read only up to the next)
    "unclosed boxes": ("'\\\\boxed{' * 150_000", "extraction.extract_answer(text)"),
    "nested boxes": ("'\\\\boxed{' * 70_000 + '}' * 70_000", "extraction.extract_answer(text)"),
    "unclosed \\( after a phrase": ("'The answer is ' + '\\\\(' * 500_000",
                                    "extraction.extract_answer(text)"),
    "phrases on one line": ("'answer: . ' * 100_000", "extraction.extract_answer(text)"),
    "spaces after answer": ("'answer' + ' ' * 1_000_000 + '!'", "graders.extract_choice(text)"),
    "spaces in a text box": ("'\\\\boxed{\\\\text{' + ' ' * 1_000_000 + '!}'",
                             "graders.extract_choice(text)"),
    "unclosed boxes, choice": ("'\\\\boxed{' * 150_000", "graders.extract_choice(text)"),
    "unclosed answer tags": ("'<answer>' * 125_000", "formats.answer_region(text, 'tir')"),
    "phrases without a full stop": ("'answer is foo bar baz ' * 45_000",
                                    "extraction.extract_answer(text)"),
    "boxes joined by or": ("'\\\\boxed{1} or ' * 77_000", "extraction.extract_answer(text)"),
    "one-value check": ("'x = ' + '41 \\\\lor {42} = ' * 60_000",
                        "answer_relations.not_one_value(text, answer_relations.gold_shape('4'))"),
}


def test_adversarial_megabyte_outputs_finish_under_a_hard_limit():
    """Liveness check, not a timing assertion: the child is killed after 20 s."""
    body = "\n".join(f"text = {build}\n{call}\nprint({name!r}, flush=True)"
                     for name, (build, call) in ADVERSARIAL.items())
    code = "from eval import answer_relations, extraction, graders\nfrom pipelines import formats\n" + body
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                              capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired as exc:
        finished = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(f"extraction did not finish within 20 s; finished: {finished!r}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("\n") == len(ADVERSARIAL)
