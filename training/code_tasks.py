"""Code RL training problems in MBPP+ shape: a built-in generator and MBPP-style loaders.

Every row this module makes has a chat ``prompt`` (the one evaluation renders for MBPP+: the
``mbppplus`` benchmark's template, as a single user message), a ``problem_id``, and a
``code_problem`` column: one JSON object in the MBPP+ file's shape that the ``code`` reward
(``training.rewards.get_code_reward``) hands to ``eval.code_grader``::

    {"benchmark": "mbppplus", "task_id": ..., "entry_point": "f",
     "canonical_solution": "def f(...): ...", "base_input": [[args...], ...],
     "plus_input": [], "atol": 0, "assertion": ""}

The grader calls the candidate's ``entry_point`` on every input and compares its return values
on the host with the canonical solution's, then runs ``assertion`` (if any) in the sandbox.
Keeping the problem in one JSON string column lets a ``datasets.Dataset`` hold problems whose
inputs have different types from row to row.

- :func:`builtin_code_tasks` (``builtin:code_tasks``): small function-writing tasks from
  parameterised families (list arithmetic, string edits, counting, base conversion, ...), each
  with a canonical solution, edge-case and random inputs, and one worked example in the
  prompt. Ids (``code-<family>-<parameter>``) and tests do not depend on the seed, which only
  picks the order, like ``builtin:arith1``. They need no download and no benchmark.
- :func:`load_code_rows` (``mbpp:<hub id or file>``): MBPP rows (``text``/``prompt``,
  ``code``, ``test_list``, ``test_setup_code``/``test_imports``; e.g. the ``train`` split of
  ``google-research-datasets/mbpp``) or rows already in MBPP+ shape (``canonical_solution``
  or ``code``, ``entry_point``, ``base_input``, ...). An MBPP assertion of the form
  ``assert f(<JSON-exact literals>) == <literal>`` becomes a host-compared input; any other
  assertion stays in the sandbox-run ``assertion`` block. Rows are decontaminated against
  MBPP+ (the evaluation benchmark, drawn from all MBPP splits) by task number and by task text
  unless the spec says ``decontaminate=none``.

Not guaranteed: that a loaded row's canonical solution is right (the reward returns None for
a row whose canonical solution does not run); that an MBPP row whose assertions all stay in the
``assertion`` block can be graded (the grader leaves out an assertion block it cannot replay;
with no input either, nothing is tested and the reward returns None).
"""

from __future__ import annotations

import ast
import json
import logging
import math
import random
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.errors import DatasetError, DatasetMissing

log = logging.getLogger(__name__)

CODE_PROBLEM_KEY = "code_problem"
BASE_INPUTS = 6  # inputs per generated problem (edge cases first, then random ones)
LOCAL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet")


class CodeTaskError(ValueError):
    """A row that cannot become a code problem; the message says why."""


# ---------------------------------------------------------------------------------------------
# Prompts and rows


def code_prompt(problem_text: str) -> list[dict[str, str]]:
    """The GRPO prompt: the user message evaluation sends for an MBPP+ task."""
    from eval.benchmarks import get

    return [{"role": "user", "content": get("mbppplus").render(problem_text)}]


def task_text(description: str, example: str) -> str:
    """An MBPP+-style problem: the task in a docstring, with one example assertion."""
    return f'"""\n{description.strip()}\n{example.strip()}\n"""\n'


def code_row(problem_id: str, text: str, problem: Mapping[str, Any]) -> dict[str, Any]:
    return {"problem_id": problem_id, "prompt": code_prompt(text),
            CODE_PROBLEM_KEY: json.dumps(dict(problem), sort_keys=True)}


# ---------------------------------------------------------------------------------------------
# Built-in generator


@dataclass(frozen=True)
class Family:
    """A parameterised task: ``entry(p)`` names the function, ``describe(p)`` states the task,
    ``source(p)`` is the canonical solution, ``edges(p)`` fixed inputs and ``draw(rng, p)`` one
    random input (each input is the argument list)."""

    key: str
    params: tuple
    entry: Callable[[Any], str]
    describe: Callable[[Any], str]
    source: Callable[[Any], str]
    draw: Callable[[random.Random, Any], list]
    edges: Callable[[Any], list[list]] = lambda p: []


def _ints(rng: random.Random, lo: int = -30, hi: int = 30, n_max: int = 9) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(1, n_max))]


def _with_multiple(rng: random.Random, k: int) -> list[int]:
    nums = _ints(rng) + [k * rng.randint(1, 9)]
    rng.shuffle(nums)
    return nums


def _maybe_palindrome(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return _mixed_text(rng)
    half = _word(rng, 0, 5)
    return half + rng.choice(["", "x", " "]) + half[::-1]


def _word(rng: random.Random, lo: int = 1, hi: int = 8) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(lo, hi)))


def _sentence(rng: random.Random) -> str:
    return " ".join(_word(rng) for _ in range(rng.randint(1, 6)))


def _mixed_text(rng: random.Random) -> str:
    alphabet = string.ascii_letters + "  ,.!?"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(3, 16)))


_BASE_DIGITS = "0123456789"

FAMILIES: tuple[Family, ...] = (
    Family(
        "sum_multiples", (2, 3, 4, 5, 7),
        lambda k: f"sum_multiples_of_{k}",
        lambda k: f"Write a function that returns the sum of the numbers in a list that are "
                  f"divisible by {k}.",
        lambda k: f"def sum_multiples_of_{k}(nums):\n"
                  f"    return sum(x for x in nums if x % {k} == 0)\n",
        lambda rng, k: [_with_multiple(rng, k)],
        lambda k: [[[]], [[k, k + 1, 2 * k]]]),
    Family(
        "count_longer", (2, 3, 4, 5),
        lambda k: f"count_longer_than_{k}",
        lambda k: f"Write a function that counts the strings in a list that have more than {k} "
                  f"characters.",
        lambda k: f"def count_longer_than_{k}(words):\n"
                  f"    return sum(1 for w in words if len(w) > {k})\n",
        lambda rng, k: [[_word(rng) for _ in range(rng.randint(1, 7))]],
        lambda k: [[[]], [["a" * k, "b" * (k + 1)]]]),
    Family(
        "rotate_left", (1, 2, 3),
        lambda k: f"rotate_left_by_{k}",
        lambda k: f"Write a function that rotates a list to the left by {k} positions, wrapping "
                  f"around as many times as needed; an empty list stays empty.",
        lambda k: f"def rotate_left_by_{k}(items):\n"
                  f"    if not items:\n        return []\n"
                  f"    s = {k} % len(items)\n    return items[s:] + items[:s]\n",
        lambda rng, k: [_ints(rng, 0, 9)],
        lambda k: [[[]], [[1]], [[1, 2]]]),
    Family(
        "count_letter", tuple("aeost"),
        lambda c: f"count_letter_{c}",
        lambda c: f"Write a function that counts how many times the letter '{c}' occurs in a "
                  f"string, ignoring case.",
        lambda c: f"def count_letter_{c}(text):\n    return text.lower().count({c!r})\n",
        lambda rng, c: [_mixed_text(rng) + c * rng.randint(0, 2) + c.upper() * rng.randint(0, 1)],
        lambda c: [[""], [c.upper() + c]]),
    Family(
        "digit_power_sum", (1, 2, 3),
        lambda p: f"digit_power_sum_{p}",
        lambda p: f"Write a function that takes a non-negative integer and returns the sum of "
                  f"its decimal digits, each raised to the power {p}.",
        lambda p: f"def digit_power_sum_{p}(n):\n"
                  f"    return sum(int(d) ** {p} for d in str(n))\n",
        lambda rng, p: [rng.randint(0, 10 ** rng.randint(1, 7))],
        lambda p: [[0], [9]]),
    Family(
        "kth_largest", (1, 2, 3),
        lambda k: f"kth_largest_distinct_{k}",
        lambda k: f"Write a function that returns the {k}-th largest distinct value of a list of "
                  f"numbers, or None when the list has fewer than {k} distinct values.",
        lambda k: f"def kth_largest_distinct_{k}(nums):\n"
                  f"    values = sorted(set(nums), reverse=True)\n"
                  f"    return values[{k - 1}] if len(values) >= {k} else None\n",
        lambda rng, k: [_ints(rng, -9, 9)],
        lambda k: [[[]], [[5] * (k + 1)]]),
    Family(
        "running", ("sum", "max", "min"),
        lambda op: f"running_{op}",
        lambda op: f"Write a function that returns a list whose i-th element is the {op} of the "
                   f"first i+1 elements of the input list.",
        lambda op: (f"def running_{op}(nums):\n    out = []\n    for x in nums:\n"
                    + ("        out.append(x + out[-1] if out else x)\n" if op == "sum" else
                       f"        out.append({op}(x, out[-1]) if out else x)\n")
                    + "    return out\n"),
        lambda rng, op: [_ints(rng)],
        lambda op: [[[]], [[4]]]),
    Family(
        "dedupe", ("first", "last"),
        lambda keep: f"dedupe_keep_{keep}",
        lambda keep: f"Write a function that removes repeated elements from a list, keeping only "
                     f"the {keep} occurrence of each value, in the order those occurrences appear.",
        lambda keep: ("def dedupe_keep_first(items):\n    seen, out = set(), []\n"
                      "    for x in items:\n        if x not in seen:\n"
                      "            seen.add(x)\n            out.append(x)\n    return out\n")
        if keep == "first" else
        ("def dedupe_keep_last(items):\n    seen, out = set(), []\n"
         "    for x in reversed(items):\n        if x not in seen:\n"
         "            seen.add(x)\n            out.append(x)\n    return out[::-1]\n"),
        lambda rng, keep: [_ints(rng, 0, 5, 10)],
        lambda keep: [[[]], [[1, 2, 1]]]),
    Family(
        "palindrome", ("exact", "letters"),
        lambda mode: "is_palindrome" if mode == "exact" else "is_letter_palindrome",
        lambda mode: ("Write a function that tells whether a string reads the same forwards and "
                      "backwards, character for character." if mode == "exact" else
                      "Write a function that tells whether a string reads the same forwards and "
                      "backwards when only its letters are kept and case is ignored."),
        lambda mode: ("def is_palindrome(text):\n    return text == text[::-1]\n"
                      if mode == "exact" else
                      "def is_letter_palindrome(text):\n"
                      "    kept = [c.lower() for c in text if c.isalpha()]\n"
                      "    return kept == kept[::-1]\n"),
        lambda rng, mode: [_maybe_palindrome(rng)],
        lambda mode: [[""], ["Ab, ba"], ["abca"], ["abba"]]),
    Family(
        "caesar", (1, 2, 3, 5),
        lambda k: f"shift_letters_{k}",
        lambda k: f"Write a function that shifts every lowercase letter of a string {k} places "
                  f"forward in the alphabet (wrapping from z to a) and leaves every other "
                  f"character unchanged.",
        lambda k: f"def shift_letters_{k}(text):\n"
                  f"    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' "
                  f"else c for c in text)\n",
        lambda rng, k: [_mixed_text(rng).lower() + rng.choice(["", "xyz", "Z!"])],
        lambda k: [[""], ["xyz"]]),
    Family(
        "chunk_sums", (2, 3, 4),
        lambda k: f"chunk_sums_{k}",
        lambda k: f"Write a function that splits a list of numbers into consecutive chunks of "
                  f"{k} elements (the last chunk may be shorter) and returns the list of the "
                  f"chunks' sums.",
        lambda k: f"def chunk_sums_{k}(nums):\n"
                  f"    return [sum(nums[i:i + {k}]) for i in range(0, len(nums), {k})]\n",
        lambda rng, k: [_ints(rng, -9, 9, 11)],
        lambda k: [[[]], [[1] * (k + 1)]]),
    Family(
        "pairs_summing", (0, 5, 10),
        lambda t: f"count_pairs_summing_to_{t}",
        lambda t: f"Write a function that counts the pairs of positions i < j in a list of "
                  f"integers whose elements add up to {t}.",
        lambda t: f"def count_pairs_summing_to_{t}(nums):\n"
                  f"    return sum(1 for i in range(len(nums)) for j in range(i + 1, len(nums))\n"
                  f"               if nums[i] + nums[j] == {t})\n",
        lambda rng, t: [_ints(rng, t - 6, 6, 10)],
        lambda t: [[[]], [[t, 0, 0]]]),
    Family(
        "longest_run", ("equal", "increasing"),
        lambda kind: f"longest_{kind}_run",
        lambda kind: ("Write a function that returns the length of the longest stretch of equal "
                      "adjacent elements in a list (0 for an empty list)." if kind == "equal" else
                      "Write a function that returns the length of the longest stretch of "
                      "strictly increasing adjacent elements in a list (0 for an empty list)."),
        lambda kind: (f"def longest_{kind}_run(nums):\n"
                      "    best = run = 0\n    for i, x in enumerate(nums):\n"
                      f"        run = run + 1 if i and nums[i - 1] {'==' if kind == 'equal' else '<'}"
                      " x else 1\n"
                      "        best = max(best, run)\n    return best\n"),
        lambda rng, kind: [_ints(rng, 0, 4, 12)],
        lambda kind: [[[]], [[3]], [[1, 2, 2, 3]]]),
    Family(
        "words", ("lengths", "capitalized", "reversed"),
        lambda how: {"lengths": "word_lengths", "capitalized": "capitalize_words",
                     "reversed": "reverse_each_word"}[how],
        lambda how: {"lengths": "Write a function that returns the list of the lengths of the "
                                "words of a sentence (words are separated by whitespace).",
                     "capitalized": "Write a function that upper-cases the first letter of every "
                                    "word of a sentence and joins the words with single spaces.",
                     "reversed": "Write a function that reverses the letters of every word of a "
                                 "sentence, keeps the word order, and joins the words with "
                                 "single spaces."}[how],
        lambda how: {"lengths": "def word_lengths(text):\n"
                                "    return [len(w) for w in text.split()]\n",
                     "capitalized": "def capitalize_words(text):\n"
                                    "    return ' '.join(w[:1].upper() + w[1:] for w in "
                                    "text.split())\n",
                     "reversed": "def reverse_each_word(text):\n"
                                 "    return ' '.join(w[::-1] for w in text.split())\n"}[how],
        lambda rng, how: [_sentence(rng)],
        lambda how: [[""], ["  two   spaces "]]),
    Family(
        "fold", ("gcd", "lcm"),
        lambda op: f"{op}_of_list",
        lambda op: f"Write a function that returns the {'greatest common divisor' if op == 'gcd' else 'least common multiple'} "
                   f"of a non-empty list of positive integers.",
        lambda op: ("def gcd_of_list(nums):\n    from math import gcd\n    out = nums[0]\n"
                    "    for x in nums[1:]:\n        out = gcd(out, x)\n    return out\n")
        if op == "gcd" else
        ("def lcm_of_list(nums):\n    from math import gcd\n    out = nums[0]\n"
         "    for x in nums[1:]:\n        out = out * x // gcd(out, x)\n    return out\n"),
        lambda rng, op: [[rng.choice([2, 3, 4, 6, 9, 12]) * rng.randint(1, 6)
                          for _ in range(rng.randint(1, 5))]],
        lambda op: [[[7]], [[4, 6]]]),
    Family(
        "interleave", ("",),
        lambda _: "interleave",
        lambda _: "Write a function that interleaves two lists, starting with the first list's "
                  "first element; the leftover elements of the longer list go at the end.",
        lambda _: "def interleave(a, b):\n    out = []\n    for i in range(max(len(a), len(b))):\n"
                  "        if i < len(a):\n            out.append(a[i])\n"
                  "        if i < len(b):\n            out.append(b[i])\n    return out\n",
        lambda rng, _: [_ints(rng, 0, 9, 5), _ints(rng, 10, 19, 5)],
        lambda _: [[[], []], [[1], []], [[], [2, 3]]]),
    Family(
        "clamp", ((0, 10), (-5, 5), (1, 100)),
        lambda r: f"clamp_{'m' if r[0] < 0 else ''}{abs(r[0])}_to_{r[1]}",
        lambda r: f"Write a function that clamps every number of a list into the range "
                  f"[{r[0]}, {r[1]}]: smaller numbers become {r[0]}, larger ones {r[1]}.",
        lambda r: f"def clamp_{'m' if r[0] < 0 else ''}{abs(r[0])}_to_{r[1]}(nums):\n"
                  f"    return [min({r[1]}, max({r[0]}, x)) for x in nums]\n",
        lambda rng, r: [_ints(rng, r[0] - 20, r[1] + 20)],
        lambda r: [[[]], [[r[0], r[1]]]]),
    Family(
        "to_base", (2, 3, 5, 8),
        lambda b: f"to_base_{b}",
        lambda b: f"Write a function that returns the base-{b} representation of a non-negative "
                  f"integer as a string of digits, without a prefix ('0' for zero).",
        lambda b: f"def to_base_{b}(n):\n    if n == 0:\n        return '0'\n    digits = ''\n"
                  f"    while n:\n        digits = '{_BASE_DIGITS}'[n % {b}] + digits\n"
                  f"        n //= {b}\n    return digits\n",
        lambda rng, b: [rng.randint(1, 5000)],
        lambda b: [[0], [b]]),
    Family(
        "char_counts", ("",),
        lambda _: "char_counts",
        lambda _: "Write a function that returns a dictionary mapping each character of a "
                  "string to the number of times it occurs.",
        lambda _: "def char_counts(text):\n    out = {}\n    for c in text:\n"
                  "        out[c] = out.get(c, 0) + 1\n    return out\n",
        lambda rng, _: [_word(rng, 1, 10)],
        lambda _: [[""], ["aab"]]),
)


def _param_id(param: Any) -> str:
    if isinstance(param, tuple):
        return "_".join(_param_id(p) for p in param)
    return re.sub(r"[^A-Za-z0-9]", "m", str(param)) or "x"


def _reference(source: str, entry: str) -> Callable:
    """The canonical solution as a callable. Only our own constant sources are run this way,
    to write the prompt's example; model-written code only ever runs in the sandbox."""
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<{entry}>", "exec"), namespace)  # noqa: S102 - our own source text
    return namespace[entry]


def _call_text(entry: str, args: Sequence[Any]) -> str:
    return f"{entry}({', '.join(repr(a) for a in args)})"


def generated_problem(family: Family, param: Any) -> tuple[str, str, dict[str, Any]]:
    """``(problem_id, problem text, code_problem)`` of one family member; deterministic."""
    problem_id = f"code-{family.key}-{_param_id(param)}"
    entry, source = family.entry(param), family.source(param)
    rng = random.Random(problem_id)
    edges = [list(e) for e in family.edges(param)]
    inputs = edges + [family.draw(rng, param) for _ in range(max(2, BASE_INPUTS - len(edges)))]
    reference = _reference(source, entry)
    example = inputs[len(edges)]  # the first random input
    expected = reference(*json.loads(json.dumps(example)))
    text = task_text(family.describe(param), f"assert {_call_text(entry, example)} == {expected!r}")
    problem = {"benchmark": "mbppplus", "task_id": problem_id, "entry_point": entry,
               "canonical_solution": source, "base_input": inputs, "plus_input": [],
               "atol": 0, "assertion": ""}
    return problem_id, text, problem


def all_generated_problems() -> list[tuple[str, str, dict[str, Any]]]:
    return [generated_problem(f, p) for f in FAMILIES for p in f.params]


CODE_TASKS_SIZE = sum(len(f.params) for f in FAMILIES)


def builtin_code_tasks(n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """The first ``n`` of the :data:`CODE_TASKS_SIZE` generated problems in a seeded order."""
    if not 1 <= n <= CODE_TASKS_SIZE:
        raise DatasetError(f"builtin:code_tasks has {CODE_TASKS_SIZE} distinct problems; ask for "
                           f"n (or dataset_limit) between 1 and {CODE_TASKS_SIZE}, got {n}")
    problems = all_generated_problems()
    random.Random(seed).shuffle(problems)
    return [code_row(pid, text, problem) for pid, text, problem in problems[:n]]


# ---------------------------------------------------------------------------------------------
# MBPP / MBPP+ rows


def _json_exact(value: Any) -> bool:
    """True when ``value`` survives a JSON round trip with its types (no tuples, sets, bytes,
    non-string keys, non-finite floats): the grader passes inputs as JSON."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_json_exact(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_exact(v) for k, v in value.items())
    return False


def _called_names(node: ast.AST) -> list[str]:
    return [n.func.id for n in ast.walk(node)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def _defined_functions(code: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise CodeTaskError(f"the reference code does not parse: {exc.msg}") from exc
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def split_assertions(tests: Sequence[str], entry: str) -> tuple[list[list], list[str]]:
    """(inputs, kept assertions): ``assert entry(<literals>) == <literal>`` with JSON-exact
    arguments becomes an input (its expected value is the canonical solution's, compared on
    the host); every other assertion is kept as it is."""
    inputs, kept = [], []
    for test in tests:
        try:
            tree = ast.parse(test.strip())
        except SyntaxError:
            kept.append(test)
            continue
        node = tree.body[0] if len(tree.body) == 1 else None
        args = None
        if (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)
                and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Eq)
                and isinstance(node.test.left, ast.Call)
                and isinstance(node.test.left.func, ast.Name)
                and node.test.left.func.id == entry and not node.test.left.keywords):
            try:
                args = [ast.literal_eval(a) for a in node.test.left.args]
                ast.literal_eval(node.test.comparators[0])
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                args = None
        if args is not None and _json_exact(args):
            inputs.append(args)
        else:
            kept.append(test)
    return inputs, kept


def code_problem_from_record(record: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(problem text, code_problem) of one MBPP or MBPP+ record; CodeTaskError says why not."""
    if not isinstance(record, Mapping):
        raise CodeTaskError(f"a record must be a JSON object, got {type(record).__name__}")
    code = record.get("canonical_solution") or record.get("code")
    if not isinstance(code, str) or not code.strip():
        raise CodeTaskError("no reference solution ('canonical_solution' or 'code')")
    task_id = record.get("task_id")
    if "base_input" in record or "plus_input" in record:  # already MBPP+ shaped
        entry = record.get("entry_point")
        text = record.get("prompt") or record.get("text")
        if not isinstance(entry, str) or not entry:
            raise CodeTaskError("an MBPP+ record needs 'entry_point'")
        if not isinstance(text, str) or not text.strip():
            raise CodeTaskError("an MBPP+ record needs 'prompt'")
        for key in ("base_input", "plus_input"):
            if not isinstance(record.get(key) or [], list):
                raise CodeTaskError(f"'{key}' must be a list of argument lists")
        problem = {"benchmark": "mbppplus", "task_id": task_id, "entry_point": entry,
                   "canonical_solution": code, "base_input": list(record.get("base_input") or []),
                   "plus_input": list(record.get("plus_input") or []),
                   "atol": record.get("atol") or 0, "assertion": record.get("assertion") or ""}
        return text, problem
    tests = record.get("test_list")
    if isinstance(tests, str):
        tests = [line for line in tests.splitlines() if line.strip()]
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise CodeTaskError("an MBPP record needs 'test_list' (assertion strings)")
    defined = _defined_functions(code)
    called = [name for t in tests for name in _called_names(_parse_or_empty(t))]
    entry = next((name for name in called if name in defined), None)
    if entry is None:
        raise CodeTaskError(f"no function of the reference code ({defined}) is called by its "
                            "tests")
    description = record.get("text") or record.get("prompt")
    if not isinstance(description, str) or not description.strip():
        raise CodeTaskError("an MBPP record needs 'text' (or 'prompt')")
    inputs, kept = split_assertions(tests, entry)
    setup = record.get("test_setup_code") or ""
    imports = record.get("test_imports") or []
    prefix = "\n".join([*(imports if isinstance(imports, list) else [str(imports)]), setup]).strip()
    assertion = "\n".join([prefix, *kept]).strip() if kept else ""
    problem = {"benchmark": "mbppplus", "task_id": task_id, "entry_point": entry,
               "canonical_solution": code, "base_input": inputs, "plus_input": [], "atol": 0,
               "assertion": assertion}
    return task_text(description, tests[0]), problem


def _parse_or_empty(text: str) -> ast.AST:
    try:
        return ast.parse(text.strip())
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def task_number(task_id: Any) -> int | None:
    """MBPP's task number: ``11`` or ``"Mbpp/11"`` -> 11."""
    if isinstance(task_id, int) and not isinstance(task_id, bool):
        return task_id
    found = re.fullmatch(r"\s*(?:mbpp/)?(\d+)\s*", str(task_id or ""), re.IGNORECASE)
    return int(found.group(1)) if found else None


def description_key(text: str) -> str:
    """The task sentence of an MBPP or MBPP+ prompt, normalised (quotes, example assertions and
    case dropped), for matching the same task across the two datasets."""
    from pipelines.text import normalize_problem_text

    lines = [ln.strip() for ln in (text or "").splitlines()]
    lines = [ln for ln in lines if ln and ln.strip('"\'') and not ln.startswith("assert ")]
    return normalize_problem_text(" ".join(lines).strip('"\' ')).rstrip(".")


def mbppplus_keys() -> tuple[set[int], set[str]]:
    """Task numbers and task sentences of MBPP+ (local copy, else the hub)."""
    from pipelines.ingest import load_source

    result = load_source("mbppplus")
    numbers, texts = set(), set()
    for problem in result.problems:
        number = task_number(problem.meta_dict().get("task_id"))
        if number is not None:
            numbers.add(number)
        texts.add(description_key(problem.problem))
    return numbers, texts


def _read_records(target: str, params: Mapping[str, str]) -> list[Any]:
    path = Path(target).expanduser()
    if target.lower().endswith(LOCAL_SUFFIXES) or path.exists():
        from pipelines.ingest import IngestError, read_local_records

        if not path.is_file():
            raise DatasetMissing(f"mbpp:{target}: no file at {path}")
        try:
            records, bad = read_local_records(path)
        except IngestError as exc:
            raise DatasetError(f"mbpp:{target}: {exc}") from exc
        for line, reason, _raw in bad:
            log.warning("mbpp:%s line %d rejected: %s", target, line, reason)
        return [r.record for r in records]
    from pipelines.ingest import HubUnavailableError, load_hf_records

    try:
        return load_hf_records(target, params.get("config") or None,
                               params.get("split") or "train")
    except HubUnavailableError as exc:
        raise DatasetMissing(f"mbpp:{target}: {exc}") from exc


def load_code_rows(target: str, params: Mapping[str, str], *,
                   limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of the ``mbpp:`` spec kind: ``target`` is a local file (.jsonl/.json/.parquet) or
    a Hugging Face dataset id (``config`` and ``split`` params; split defaults to ``train``).
    ``decontaminate`` is ``mbppplus`` (default: drop tasks MBPP+ evaluates, by MBPP task number
    when the target is an MBPP dataset, and by task sentence always) or ``none``. Records that
    cannot become problems are logged with their reason and counted; none left raises."""
    allowed = {"config", "split", "decontaminate"}
    extra = sorted(set(params) - allowed)
    if extra:
        raise DatasetError(f"mbpp:{target}: unknown parameters {extra}; use {sorted(allowed)}")
    mode = params.get("decontaminate", "mbppplus")
    if mode not in ("mbppplus", "none"):
        raise DatasetError(f"mbpp:{target}: decontaminate must be mbppplus or none, got {mode!r}")
    # Read everything: decontamination and rejects come before the limit, so `limit` usable
    # rows come back when the data has them (MBPP-sized sets are small).
    records = _read_records(target, params)
    numbers: set[int] = set()
    texts: set[str] = set()
    if mode == "mbppplus":
        try:
            numbers, texts = mbppplus_keys()
        except Exception as exc:  # any failure to read MBPP+ means: cannot check
            raise DatasetError(
                f"mbpp:{target}: cannot read MBPP+ to remove the tasks it evaluates ({exc}). "
                "Put mbppplus.jsonl under WEFT_DATA_DIR/benchmarks, go online, or add "
                "?decontaminate=none if this data is known to be disjoint from MBPP+") from exc
    by_number = "mbpp" in target.lower()
    rows, rejected, removed = [], 0, 0
    for index, record in enumerate(records):
        if limit is not None and len(rows) >= limit:
            break
        try:
            text, problem = code_problem_from_record(record)
        except CodeTaskError as exc:
            rejected += 1
            log.warning("mbpp:%s record %d rejected: %s", target, index + 1, exc)
            continue
        number = task_number(problem.get("task_id"))
        if mode == "mbppplus" and ((by_number and number in numbers)
                                   or description_key(text) in texts):
            removed += 1
            continue
        task = problem.get("task_id")
        problem_id = f"mbpp-{task if task is not None else index + 1}"
        rows.append(code_row(problem_id, text, problem))
    if rejected or removed:
        log.info("mbpp:%s: %d rows, %d records rejected, %d removed as MBPP+ tasks", target,
                 len(rows), rejected, removed)
    if not rows:
        raise DatasetMissing(f"mbpp:{target}: no usable rows ({len(records)} records, "
                             f"{rejected} rejected, {removed} removed as MBPP+ tasks)")
    return rows
