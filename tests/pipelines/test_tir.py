"""Tests for pipelines/tir.py: serializer, strict parser, validator, SFT renderings, process reward.

Table tests for every parser error and reward case; property tests (hypothesis) for the
serialize/parse round trip and for the reward's similarity against an independent
Ratcliff–Obershelp implementation written here from the definition.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.tir import (
    KIND_ANSWER,
    KIND_CODE,
    STATE_DISCARDED,
    STATE_PRESERVED,
    TIR_SYSTEM_PROMPT,
    Step,
    TIRFormatError,
    Trajectory,
    action_process_reward,
    action_similarity,
    check_steps,
    context_messages,
    format_gate,
    neutralize_tags,
    parse_blocks,
    parse_output,
    parse_trajectory,
    serialize_output,
    serialize_step,
    serialize_trajectory,
    sft_rows,
    validate_steps,
    validate_text,
)

STEPS = [
    Step("Count the apples first.", KIND_CODE, "apples = 3 + 4\nprint(apples)", "7"),
    Step("Now the pears.", KIND_CODE, "pears = 2 * apples\nprint(pears)", "14"),
    Step("Both outputs are in; add them.", KIND_ANSWER, "\\boxed{21}"),
]

CANONICAL = """<think>
Count the apples first.
</think>
<code>
apples = 3 + 4
print(apples)
</code>
<interpreter>
7
</interpreter>
<think>
Now the pears.
</think>
<code>
pears = 2 * apples
print(pears)
</code>
<interpreter>
14
</interpreter>
<think>
Both outputs are in; add them.
</think>
<answer>
\\boxed{21}
</answer>"""


# ---------------------------------------------------------------------------------------------
# Serializer and parser


def test_serializer_writes_the_canonical_text_and_the_parser_reads_it_back():
    assert serialize_trajectory(STEPS) == CANONICAL
    assert parse_trajectory(CANONICAL) == STEPS


def test_parser_accepts_compact_blocks_and_surrounding_whitespace():
    text = "  <think>a</think><code>x=1</code>\n\n<interpreter></interpreter>\t<think>b</think><answer>1</answer>\n"
    assert parse_trajectory(text) == [Step("a", KIND_CODE, "x=1", ""), Step("b", KIND_ANSWER, "1")]


def test_parser_removes_exactly_one_newline_at_each_side():
    text = "<think>\n\nkeep the blank line\n\n</think>\n<answer>\n1\n</answer>"
    assert parse_trajectory(text)[0].thought == "\nkeep the blank line\n"


@pytest.mark.parametrize("text, fragment", [
    ("", "no steps"),
    ("hello <think>a</think><answer>1</answer>", "text outside any block"),
    ("<think>a</think><answer>1</answer> bye", "text after the last block"),
    ("<think>a</think> middle <answer>1</answer>", "text outside any block"),
    ("<think>a<code>x</code></think><answer>1</answer>", "cannot nest"),
    ("<think>a</code>", "does not close <think>"),
    ("</think>", "never opened"),
    ("<think>a</think><answer>1", "never closed"),
    ("<code>x</code><interpreter>1</interpreter>", "starts with <code>"),
    ("<think>a</think><code>x</code><think>b</think><answer>1</answer>", "must be followed by <interpreter>"),
    ("<think>a</think><code>x</code>", "must be followed by <interpreter>, found the end"),
    ("<think>a</think><interpreter>1</interpreter>", "followed by <code> or <answer>"),
    ("<think>a</think>", "no <code> or <answer>"),
    ("<think>a</think><answer>1</answer><think>b</think><answer>2</answer>", "follows the final <answer>"),
    ("<think>a</think><code>x</code><interpreter>1</interpreter>", "ends with a code step"),
])
def test_parser_rejects_malformed_text_and_says_why(text, fragment):
    with pytest.raises(TIRFormatError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        parse_trajectory(text)


def test_a_prefix_ending_in_a_code_step_parses_when_incomplete_is_allowed():
    prefix = serialize_trajectory(STEPS[:2])
    assert parse_trajectory(prefix, complete=False) == STEPS[:2]
    with pytest.raises(TIRFormatError, match="ends with a code step"):
        parse_trajectory(prefix)


def test_parse_blocks_reports_offsets():
    with pytest.raises(TIRFormatError, match="offset 0"):
        parse_blocks("oops<think>a</think>")


_content = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40).map(neutralize_tags)


@st.composite
def _trajectories(draw):
    n = draw(st.integers(min_value=0, max_value=4))
    steps = [Step(draw(_content), KIND_CODE, draw(_content), draw(_content)) for _ in range(n)]
    steps.append(Step(draw(_content), KIND_ANSWER, draw(_content)))
    return steps


@settings(max_examples=300, deadline=None)
@given(_trajectories())
def test_round_trip_for_any_content_without_tag_strings(steps):
    assert parse_trajectory(serialize_trajectory(steps)) == steps


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_neutralize_tags_leaves_no_tag_string(text):
    cleaned = neutralize_tags(text)
    step = Step(cleaned, KIND_ANSWER, "x" + cleaned)
    assert parse_trajectory(serialize_trajectory([step])) == [step]


def test_parse_output_accepts_one_step_without_interpreter():
    assert parse_output("<think>t</think>\n<code>\nprint(1)\n</code>") == Step("t", KIND_CODE, "print(1)")
    assert parse_output("<think>t</think><answer>\\boxed{2}</answer>") == Step("t", KIND_ANSWER, "\\boxed{2}")


@pytest.mark.parametrize("text", [
    "<code>print(1)</code>",
    "<think>t</think><code>x</code><interpreter>1</interpreter>",
    "<think>t</think><think>u</think><code>x</code>",
    "<think>t</think><code>x</code><answer>1</answer>",
    "<think>t</think>",
    "just text",
])
def test_parse_output_rejects_anything_but_think_then_action(text):
    with pytest.raises(TIRFormatError):
        parse_output(text)


def test_serialize_output_without_thought_is_the_action_alone():
    assert serialize_output(STEPS[0], with_thought=False) == "<code>\napples = 3 + 4\nprint(apples)\n</code>"
    with pytest.raises(TIRFormatError, match="without its interpreter"):
        serialize_step(Step("t", KIND_CODE, "x"))


def test_step_rejects_bad_fields():
    with pytest.raises(TIRFormatError, match="kind"):
        Step("t", "tool", "x")
    with pytest.raises(TIRFormatError, match="no interpreter observation"):
        Step("t", KIND_ANSWER, "1", "output")
    with pytest.raises(TIRFormatError, match="thought must be a str"):
        Step(None, KIND_CODE, "x")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Validator


@pytest.mark.parametrize("steps, fragment", [
    ([], "no steps"),
    ([Step("a", KIND_ANSWER, "1"), Step("b", KIND_ANSWER, "2")], "only the last step may answer"),
    ([Step("a", KIND_CODE, "x=1", "")], "must end with an answer"),
    ([Step("a", KIND_CODE, "x=1"), Step("b", KIND_ANSWER, "1")], "no interpreter observation"),
    ([Step("a", KIND_CODE, "  ", "out"), Step("b", KIND_ANSWER, "1")], "empty code"),
    ([Step("a", KIND_ANSWER, " ")], "empty answer"),
    ([Step("a <answer>", KIND_ANSWER, "1")], "tag string <answer>"),
    ([Step("a", KIND_CODE, "x", "printed </interpreter>"), Step("b", KIND_ANSWER, "1")], "observation contains"),
])
def test_validator_names_each_problem(steps, fragment):
    problems = validate_steps(steps)
    assert problems and any(fragment in p for p in problems), problems


def test_validator_accepts_valid_trajectories_including_empty_thoughts():
    assert validate_steps(STEPS) == []
    assert validate_steps([Step("", KIND_CODE, "x=1", ""), Step("", KIND_ANSWER, "1")]) == []
    assert validate_text(CANONICAL) == []
    assert validate_text(CANONICAL + "junk") and "text after" in validate_text(CANONICAL + "junk")[0]
    with pytest.raises(TIRFormatError, match="invalid trajectory"):
        check_steps([Step("a", KIND_CODE, "x", "1")])


def test_trajectory_row_round_trip():
    traj = Trajectory("t1", "p1", "tora", "What is 21?", "21", tuple(STEPS), '{"k": 1}')
    row = traj.to_row()
    assert row["text"] == CANONICAL and row["num_steps"] == 3
    assert Trajectory.from_row(row) == traj
    assert Trajectory.from_row({**row, "steps_json": None}) == traj
    assert json.loads(row["steps_json"])[0]["observation"] == "7"
    with pytest.raises(TIRFormatError, match="neither"):
        Trajectory.from_row({**row, "steps_json": None, "text": None})


# ---------------------------------------------------------------------------------------------
# SFT renderings


@pytest.mark.parametrize("rendering", [STATE_PRESERVED, STATE_DISCARDED])
def test_sft_rows_one_per_step_with_the_step_as_completion(rendering):
    rows = sft_rows("What is 21?", STEPS, rendering)
    assert [r["step_index"] for r in rows] == [1, 2, 3] and {r["num_steps"] for r in rows} == {3}
    for row, step in zip(rows, STEPS):
        completion = row["completion"][0]["content"]
        assert row["completion"][0]["role"] == "assistant"
        assert parse_output(completion) == Step(step.thought, step.kind, step.action)
        assert "<interpreter>" not in completion
    last_prompt = rows[2]["prompt"]
    assert [m["role"] for m in last_prompt] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert last_prompt[0]["content"] == TIR_SYSTEM_PROMPT and last_prompt[1]["content"] == "What is 21?"
    assert last_prompt[3]["content"] == "<interpreter>\n7\n</interpreter>"
    assert "pears = 2 * apples" in last_prompt[4]["content"]


def test_state_preserved_keeps_earlier_thoughts_and_state_discarded_drops_them():
    kept = sft_rows("What is 21?", STEPS, STATE_PRESERVED)[2]["prompt"]
    dropped = sft_rows("What is 21?", STEPS, STATE_DISCARDED)[2]["prompt"]
    kept_text = json.dumps(kept)
    dropped_text = json.dumps(dropped)
    for thought in ("Count the apples first.", "Now the pears."):
        assert thought in kept_text and thought not in dropped_text
    assert not any("<think>" in m["content"] for m in dropped[2:])
    assert [m["role"] for m in kept] == [m["role"] for m in dropped]
    assert dropped[2]["content"] == "<code>\napples = 3 + 4\nprint(apples)\n</code>"


def test_renderings_refuse_invalid_input():
    with pytest.raises(TIRFormatError):
        sft_rows("q", STEPS[:2], STATE_PRESERVED)
    with pytest.raises(ValueError, match="rendering"):
        context_messages("q", [], "everything")
    with pytest.raises(TIRFormatError, match="history step 1"):
        context_messages("q", [STEPS[2]])


# ---------------------------------------------------------------------------------------------
# Action-centric process reward


CODE_OUT = "<think>any thought</think><code>x = 1\nprint(x)</code>"
ANSWER_OUT = "<think>done</think><answer>\\boxed{21}</answer>"


@pytest.mark.parametrize("completion, reference, kind, last, expected", [
    (CODE_OUT, "x = 1\nprint(x)", KIND_CODE, False, 1.0),
    (ANSWER_OUT, "\\boxed{21}", KIND_ANSWER, True, 1.0),
    ("<think>other thought entirely</think>\n<code>\nx = 1\nprint(x)\n</code>", "x = 1\nprint(x)", KIND_CODE, False, 1.0),
    ("<think>t</think><code>abcd</code>", "abce", KIND_CODE, False, 0.75),
    ("<think>t</think><answer>\\boxed{12}</answer>", "\\boxed{21}", KIND_ANSWER, True, 2 * 9 / 20),
    ("<think>t</think><code>zzzz</code>", "abce", KIND_CODE, False, 0.0),
    # format gate closes:
    (ANSWER_OUT, "x = 1", KIND_CODE, False, 0.0),              # answer at an intermediate position
    (CODE_OUT, "\\boxed{21}", KIND_ANSWER, True, 0.0),          # code at the last position
    ("<code>x = 1\nprint(x)</code>", "x = 1\nprint(x)", KIND_CODE, False, 0.0),  # no think
    (CODE_OUT + "<interpreter>1</interpreter>", "x = 1\nprint(x)", KIND_CODE, False, 0.0),
    ("x = 1\nprint(x)", "x = 1\nprint(x)", KIND_CODE, False, 0.0),
    ("<think>t</think><code>  </code>", "x", KIND_CODE, False, 0.0),
    ("", "x", KIND_CODE, False, 0.0),
])
def test_action_process_reward_table(completion, reference, kind, last, expected):
    assert action_process_reward(completion, reference, kind, last) == pytest.approx(expected)


def test_reward_ignores_the_thought_and_uses_only_the_action():
    a = action_process_reward("<think>short</think><code>print(2)</code>", "print(1)", KIND_CODE, False)
    b = action_process_reward("<think>a very long and different thought</think><code>print(2)</code>",
                              "print(1)", KIND_CODE, False)
    assert a == b == pytest.approx(14 / 16)


@pytest.mark.parametrize("args, error", [
    (("c", "x", "answer", False), "contradicts"),
    (("c", "x", "code", True), "contradicts"),
    (("c", "x", "tool", False), "reference_kind"),
    (("c", "", "code", False), "reference_action"),
    ((["c"], "x", "code", False), "completion must be"),
])
def test_reward_rejects_bad_reference_columns(args, error):
    with pytest.raises((ValueError, TypeError), match=error):
        action_process_reward(*args)


def test_format_gate_returns_the_parsed_step_only_for_the_right_position():
    assert format_gate(CODE_OUT, is_last_step=False) == Step("any thought", KIND_CODE, "x = 1\nprint(x)")
    assert format_gate(CODE_OUT, is_last_step=True) is None


def _ratcliff_obershelp_matches(a: str, b: str) -> int:
    """Independent implementation from the definition: find the longest common substring
    (leftmost in a, then in b), count it, recurse on both sides."""
    if not a or not b:
        return 0
    best, best_i, best_j = 0, 0, 0
    for i in range(len(a)):
        for j in range(len(b)):
            k = 0
            while i + k < len(a) and j + k < len(b) and a[i + k] == b[j + k]:
                k += 1
            if k > best:
                best, best_i, best_j = k, i, j
    if best == 0:
        return 0
    return (best + _ratcliff_obershelp_matches(a[:best_i], b[:best_j])
            + _ratcliff_obershelp_matches(a[best_i + best:], b[best_j + best:]))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abc xy=()\n", max_size=25), st.text(alphabet="abc xy=()\n", max_size=25))
def test_similarity_is_the_ratcliff_obershelp_ratio(a, b):
    a, b = a.strip(), b.strip()
    expected = 1.0 if not a and not b else 2 * _ratcliff_obershelp_matches(a, b) / (len(a) + len(b))
    assert action_similarity(a, b) == pytest.approx(expected)


def test_similarity_does_not_ignore_frequent_characters_in_long_code():
    # difflib's autojunk would treat characters in >1% of a 200+ char text as junk.
    long_a = "x = 1\n" * 60
    long_b = "x = 1\n" * 59 + "x = 2\n"
    assert action_similarity(long_a, long_b) > 0.99
