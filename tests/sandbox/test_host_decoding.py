"""The host decodes, renders and compares a candidate's values within fixed bounds.

Adversarial shapes: ints past CPython's int-to-str digit limit (positive, negative, nested),
sets, frozensets, dict keys and tuples whose members share one hash value (ints that differ by
multiples of 2**61 - 1, the floats equal to them, tuples of them). Each is a failed item,
never an exception and never ``ungradable``; legitimate large values still decode.
"""

from __future__ import annotations

import pytest

from eval.code_grader import grade_code, grade_code_many, load_benchmark
from pipelines.sandbox import SandboxPool
from pipelines.sandbox.harness import (
    MAX_EQUAL_HASHES,
    MAX_INT_DIGITS,
    CallResult,
    call_result,
    plain_decode,
    plain_encode,
    safe_repr,
)

M = 2 ** 61 - 1  # ints that differ by a multiple of this hash alike


def encoded(value):
    kind, enc = plain_encode(value)
    assert kind == "ok"
    return enc


@pytest.mark.parametrize("value", [
    10 ** MAX_INT_DIGITS,
    -(10 ** MAX_INT_DIGITS),
    2 ** (10 ** MAX_INT_DIGITS).bit_length(),
    [1, 2, {"k": 3 ** 20000}],
    {i * M for i in range(MAX_EQUAL_HASHES + 1)},
    frozenset(i * M for i in range(100)),
    {float(2 ** (61 * k)): 0 for k in range(MAX_EQUAL_HASHES + 1)},  # each hashes to 1
    {(i * M, "x") for i in range(50)},
    [{i * M: i for i in range(1000)}],
], ids=["int", "negative int", "power of two past the bound", "nested int", "set", "frozenset", "float keys", "tuples",
        "nested dict"])
def test_values_the_host_cannot_handle_cheaply_are_unreadable_results(value):
    with pytest.raises(ValueError):
        plain_decode(encoded(value))
    result = call_result(["ok", encoded(value)])
    assert result.kind == "invalid" and not result.ok
    assert result.describe()


@pytest.mark.parametrize("value", [
    10 ** (MAX_INT_DIGITS - 1),
    -(10 ** (MAX_INT_DIGITS - 2)),
    10 ** MAX_INT_DIGITS - 1,  # the bound's own bit length: compared with the power itself
    -(10 ** MAX_INT_DIGITS - 1),
    2 ** ((10 ** MAX_INT_DIGITS).bit_length() - 1),
    set(range(20000)),
    {i * M for i in range(MAX_EQUAL_HASHES)},
    {str(i): i for i in range(5000)},
    frozenset((i, i + 1) for i in range(1000)),
], ids=["int", "negative int", "largest int", "most negative int", "power of two at the bound",
        "set", "few equal hashes", "dict", "frozenset of tuples"])
def test_legitimate_large_values_still_decode(value):
    assert plain_decode(encoded(value)) == value


def test_rendering_never_raises():
    big = 10 ** 5000 - 1
    assert "int" in safe_repr(big)
    assert CallResult("ok", big).describe().startswith("returned <a int")


TASK = "HumanEval/53"  # add(x, y): the test compares with ==


@pytest.fixture(scope="module")
def humaneval(shared_data):
    return {p["task_id"]: p for p in load_benchmark("humaneval")}


@pytest.mark.parametrize("body", [
    "    return 10 ** 5000\n",
    "    return -(7 ** 6000)\n",
    "    return {i * (2 ** 61 - 1) for i in range(2000)}\n",
    "    return {float(2 ** (61 * k)): 0 for k in range(16)}\n",
], ids=["int", "negative int", "set", "float keys"])
def test_a_value_the_host_cannot_handle_is_a_failed_item(body, humaneval, jail):
    problem = humaneval[TASK]
    candidate = f"def {problem['entry_point']}(x, y):\n{body}"
    with SandboxPool(jail, workers=2) as pool:
        alone = grade_code(candidate, problem, pool)
        group = grade_code_many([candidate, problem["canonical_solution"]] * 2,
                                [problem] * 4, pool=pool)
    for verdict in (alone, group[0], group[2]):
        assert not verdict.passed and not verdict.ungradable, verdict
    assert group[1].passed and group[3].passed


def test_the_decoders_own_copies_of_its_bounds_match_the_module():
    import inspect

    from pipelines.sandbox import harness

    source = inspect.getsource(harness.plain_decode)
    assert (f"max_int_digits, max_int_hex, max_equal_hashes = {harness.MAX_INT_DIGITS}, "
            f"{harness.MAX_INT_HEX}, {harness.MAX_EQUAL_HASHES}") in source
