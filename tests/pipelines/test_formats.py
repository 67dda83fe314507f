"""Tests for pipelines/formats.py: the think/speak parser, answer regions, format checks, system
prompts and budget instructions — and that evaluation and the RL rewards give the same verdict
on the same outputs (one extraction, one grader).
"""

from __future__ import annotations

import pytest

from pipelines import formats as F
from pipelines.formats import SPEAK, THINK, parse_tagged, render_tagged

# ------------------------------------------------------------------ strict parse (our own data)


def test_strict_parse_round_trips_rendered_segments():
    segments = [(THINK, "a\n\nb"), (SPEAK, " x "), (THINK, "")]
    assert parse_tagged(render_tagged(segments)) == segments


def test_strict_parse_accepts_whitespace_between_and_around_blocks():
    text = "\n<think>a</think>\n\n<speak> b </speak>  \n<think>c</think>\n"
    assert parse_tagged(text, strict=True) == [(THINK, "a"), (SPEAK, " b "), (THINK, "c")]


@pytest.mark.parametrize("text,fragment", [
    ("<think>a", "never closed"),
    ("<think>a<speak>b</speak></think>", "still open"),
    ("hello<think>a</think>", "outside any tag"),
    ("<think>a</think>tail", "after the last closing tag"),
    ("<think>a</think> x <speak>b</speak>", "outside any tag"),
    ("</speak>", "no opening tag"),
    ("<think>a</speak>", "still open"),
])
def test_strict_parse_rejects_malformed_streams(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_tagged(text, strict=True)


def test_render_rejects_unknown_kind():
    with pytest.raises(ValueError, match="think' or 'speak"):
        render_tagged([("shout", "x")])


def test_parse_rejects_non_string():
    with pytest.raises(TypeError, match="str"):
        parse_tagged(None)  # type: ignore[arg-type]


# ------------------------------------------------------------------ tolerant parse (model output)


@pytest.mark.parametrize("text,expected", [
    # unclosed last tag: runs to the end (truncated generation)
    ("<think>a</think><speak>b", [(THINK, "a"), (SPEAK, "b")]),
    # untagged text counts as speak
    ("<think>a</think>the answer", [(THINK, "a"), (SPEAK, "the answer")]),
    ("no tags at all", [(SPEAK, "no tags at all")]),
    # a closing tag with no opening tag: the text before it was that kind
    ("reasoning here</think>answer", [(THINK, "reasoning here"), (SPEAK, "answer")]),
    # an opening tag closes the open one
    ("<think>a<speak>b</speak>", [(THINK, "a"), (SPEAK, "b")]),
    # a stray closing tag of the other kind is dropped
    ("<think>a</speak>b</think>", [(THINK, "a"), (THINK, "b")]),
    # whitespace-only pieces are dropped
    ("<think>a</think>\n\n<speak>b</speak>\n", [(THINK, "a"), (SPEAK, "b")]),
    ("", []),
])
def test_tolerant_parse_decisions(text, expected):
    assert parse_tagged(text, strict=False) == expected


# ------------------------------------------------------------------ answer regions


@pytest.mark.parametrize("text, fmt, expected", [
    ("x \\boxed{4}", "boxed", "x \\boxed{4}"),
    ("", "boxed", ""),
    ("<think>a</think><speak>b</speak><think>c</think><speak>d</speak>", "sxs", "b\n\nd"),
    ("<think>a</think><speak>b</speak><think>trailing check</think>", "sxs", "b"),
    ("untagged answer", "sxs", "untagged answer"),
    ("<think>only thinking</think>", "sxs", None),
    ("<think>t</think><answer>\\boxed{7}</answer>", "tir", "\\boxed{7}"),
    ("<think>t</think><answer>\n7\n</answer>", "tir", "\\boxed{7}"),
    ("<answer>1</answer> then <answer>2</answer>", "tir", "\\boxed{2}"),
    ("<think>t</think><code>print(1)</code>", "tir", None),
    ("<answer>   </answer>", "tir", None),
    ("<think>t</think><answer>7", "tir", None),  # unclosed: no complete block
])
def test_answer_region(text, fmt, expected):
    assert F.answer_region(text, fmt) == expected


def test_answer_region_rejects_unknown_format_and_non_text():
    with pytest.raises(ValueError, match="answer_format must be one of"):
        F.answer_region("x", "xml")
    with pytest.raises(TypeError, match="str"):
        F.answer_region(None, "boxed")  # type: ignore[arg-type]


# ------------------------------------------------------------------ format checks


def test_sxs_check_accepts_what_algorithm_1_writes_with_trailing_reasoning():
    """SxS Algorithm 1 lines 28-30: the whole answer is supported after reasoning block 2 of 4,
    so blocks 3-4 become a trailing think block; the stream must pass the format check."""
    from pipelines.sxs_align import interleave, to_tagged

    levels = [1, 2, 2, 2]  # l_k for k = 1..4 (K_A = 2 reached at k = 2 < K_R)
    segments = interleave(["r1", "r2", "r3", "r4"], ["a1", "a2"], levels)
    tagged = to_tagged(segments)
    kinds = [k for k, _ in parse_tagged(tagged)]
    assert kinds == [THINK, SPEAK, THINK, SPEAK, THINK]  # really ends in a trailing think
    assert F.has_sxs_format(tagged)
    assert F.has_sxs_format("\n".join(render_tagged([s]) for s in parse_tagged(tagged)))


@pytest.mark.parametrize("schema, text, expected", [
    ("sxs", "<think>a</think><speak>b</speak>", True),
    ("sxs", "<think>a</think><speak>b</speak><think>c</think>", True),  # trailing think
    ("sxs", " <think>a</think>\n<speak>b</speak>\n<think>c</think>\n", True),  # whitespace
    ("sxs", "<speak>b</speak>", False),  # no thinking
    ("sxs", "<think>a</think>", False),  # nothing said
    ("sxs", "<think>a</think><speak> </speak>", False),  # nothing said
    ("sxs", "<think>a</think>stray<speak>b</speak>", False),
    ("sxs", "<think>a<speak>b</speak>", False),
    ("tir", "<think>\nplan\n</think>\n<code>\nprint(1)\n</code>", True),
    ("tir", "<think>\ndone\n</think>\n<answer>\n\\boxed{1}\n</answer>", True),
    ("tir", "<think>x</think><code> </code>", False),
    ("tir", "just text", False),
    ("boxed", "answer \\boxed{x}", True),
    ("boxed", "answer \\boxed{}", False),
    ("boxed", "answer x", False),
])
def test_follows_format(schema, text, expected):
    assert F.follows_format(text, schema) is expected


# ------------------------------------------------------------------ system prompts


def test_system_prompts_have_one_home():
    from pipelines.tir import TIR_SYSTEM_PROMPT

    assert F.system_prompt("tir") is TIR_SYSTEM_PROMPT
    assert "<think>" in F.system_prompt("sxs") and "<speak>" in F.system_prompt("sxs")
    assert "\\boxed{}" in F.system_prompt("boxed")
    with pytest.raises(ValueError, match="answer_format must be one of"):
        F.system_prompt("json")


# ------------------------------------------------------------------ budget instructions

# Engagement Process, App. F: "Each budget is paired with a natural-language time instruction"
# (transcribed from the Engagement Process paper, most urgent budget first).
PAPER_INSTRUCTIONS = [
    "Now time is urgent, please give me an answer immediately.",
    "Now there is a little time for you to think, but please think simply and give me an answer.",
    "Now there is more time for you to think, please think carefully and give me an answer.",
    "Now there is a lot of time for you to think, please think carefully and give me an answer.",
]


def test_default_budget_prompts_are_the_papers_four_instructions_without_numbers():
    texts = [F.budget_instruction(b) for b in F.DEFAULT_BUDGETS]
    assert texts == PAPER_INSTRUCTIONS
    assert not any(ch.isdigit() for t in texts for ch in t)


def test_numeric_budget_prompts_state_the_budget():
    texts = [F.budget_instruction(b, style="numeric") for b in F.DEFAULT_BUDGETS]
    assert len(set(texts)) == 4
    assert all(str(b) in t for b, t in zip(F.DEFAULT_BUDGETS, texts))


@pytest.mark.parametrize("budget, budgets, level", [
    (7, [7], 3),                     # a single budget: least urgent
    (100, [100, 200], 0),
    (200, [100, 200], 3),
    (2, [1, 2, 3], 2),               # round(1 * 3 / 2) = round(1.5) = 2 (banker's rounding)
    (500, [8000, 500, 1000, 4000, 2000], 0),
    (1000, [8000, 500, 1000, 4000, 2000], 1),  # round(1 * 3 / 4) = 1
    (2000, [8000, 500, 1000, 4000, 2000], 2),  # round(2 * 3 / 4) = round(1.5) = 2
    (4000, [8000, 500, 1000, 4000, 2000], 2),  # round(3 * 3 / 4) = round(2.25) = 2
])
def test_budget_level_spreads_ranks_over_the_four_levels(budget, budgets, level):
    assert F.budget_level(budget, budgets) == level
    assert F.budget_instruction(budget, budgets) == PAPER_INSTRUCTIONS[level]


def test_budget_instruction_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="not one of the configured budgets"):
        F.budget_instruction(1500)
    with pytest.raises(ValueError, match="style must be one of"):
        F.budget_instruction(1000, style="loud")


# ------------------------------------------------------------------ eval and RL agree
# One table of outputs, each with the verdict a careful reader gives it (gold 42). For every
# answer format, evaluation's path (eval.modes' graded text of one sample, then eval.runner's
# grading) and the RL outcome reward must both give that verdict.

AGREEMENT_CASES = [
    # boxed (single, budgeted)
    ("boxed", "So the answer is \\boxed{42}.", True),
    ("boxed", "\\boxed{41}", False),
    ("boxed", "The answer is 42.", True),  # answer phrase
    ("boxed", "", False),
    ("boxed", "no answer here", False),
    ("boxed", "\\boxed{42", False),  # unterminated box
    ("boxed", "<think>maybe \\boxed{41}</think> so \\boxed{42}", True),  # last box wins
    ("boxed", "\\boxed{\\frac{84}{2}}", True),
    ("boxed", "First \\boxed{42}, then \\boxed{7}", False),
    ("boxed", "3 + 39 = 42", False),  # no final answer given
    # sxs (interleaved)
    ("sxs", "<think>t</think><speak>\\boxed{42}</speak>", True),
    ("sxs", "<think>t</think><speak>\\boxed{42}</speak><think>check</think>", True),
    ("sxs", "<think>t</think>\n<speak>The answer is \\boxed{42}.</speak>\n<think>ok</think>\n",
     True),
    ("sxs", "<think>\\boxed{42}</think><speak>not sure</speak>", False),
    ("sxs", "<think>only thinking \\boxed{42}</think>", False),
    ("sxs", "", False),
    ("sxs", "untagged \\boxed{42}", True),
    ("sxs", "<think>a</think><speak>\\boxed{42}", True),  # truncated inside speak
    ("sxs", "reasoning</think>\\boxed{42}", True),  # template injected <think>
    ("sxs", "<think>t</think><speak>\\boxed{41}</speak><think>it is \\boxed{42}</think>", False),
    ("sxs", "<think>x</think><speak>part</speak><think>y</think><speak>\\boxed{42}</speak>", True),
    ("sxs", "<speak>\\boxed{42}</speak><think>", True),
    # tir (tool)
    ("tir", "<think>t</think><answer>42</answer>", True),  # eval graded this wrong before
    ("tir", "<think>t</think><answer>\\boxed{42}</answer>", True),
    ("tir", "<think>t</think><answer>\n42\n</answer>", True),
    ("tir", "<answer>41</answer>", False),
    ("tir", "<think>t</think><code>print(42)</code>", False),
    ("tir", "<answer>  </answer>", False),
    ("tir", "The answer is \\boxed{42}", False),  # off-schema: eval graded this right before
    ("tir", "<answer>1</answer> then <answer>42</answer>", True),
    ("tir", "", False),
    ("tir", "<think>t</think><answer>$42$</answer>", True),
    ("tir", "<answer>\\frac{84}{2}</answer>", True),
    ("tir", "<think>t</think><answer>42", False),  # no complete answer block
]


def test_agreement_table_covers_every_format_and_mode():
    from eval.modes import MODE_FORMATS

    assert len(AGREEMENT_CASES) >= 30
    assert {fmt for fmt, _, _ in AGREEMENT_CASES} == set(F.ANSWER_FORMATS)
    assert set(MODE_FORMATS.values()) == set(F.ANSWER_FORMATS)


def _eval_verdict(mode: str, text: str, gold: str, benchmark: str = "math500") -> bool:
    from eval.benchmarks import get
    from eval.modes import build_mode
    from eval.runner import grade

    row = {"problem_id": "p", "gold": gold, "output": text, "gen_error": None,
           "graded_text": build_mode(mode=mode).graded_text(text)}
    grade([row], get(benchmark))  # the benchmark grader, no normaliser
    return row["correct"]


def _reward_verdict(fmt: str, text: str, gold: str, grader: str = "math") -> bool:
    from training.rewards import get_outcome_reward

    chat = [{"role": "assistant", "content": text}]
    values = get_outcome_reward(fmt, grader=grader)(completions=[text, chat], answer=[gold, gold])
    assert values[0] == values[1]  # plain and conversational completions agree
    return values[0] == 1.0


@pytest.mark.parametrize("fmt, text, expected", AGREEMENT_CASES)
def test_evaluation_and_reward_give_the_same_verdict(fmt, text, expected):
    from eval.modes import MODE_FORMATS

    modes = [m for m, f in MODE_FORMATS.items() if f == fmt]
    verdicts = {m: _eval_verdict(m, text, "42") for m in modes}
    assert verdicts == {m: expected for m in modes}, "evaluation"
    assert _reward_verdict(fmt, text, "42") is expected, "reward"


# Multiple choice (GPQA-Diamond's grader, gold B): evaluation grades with the benchmark's
# "choice" grader, and so must a reward whose recipe says `grader: choice`.
CHOICE_AGREEMENT_CASES = [
    ("boxed", "(B).", True),
    ("boxed", "B)", True),
    ("boxed", "The answer is B", True),
    ("boxed", "\\boxed{B}", True),
    ("boxed", "\\boxed{(B)}", True),
    ("boxed", "**Answer:** B", True),
    ("boxed", "(A).", False),
    ("boxed", "A)", False),
    ("boxed", "The answer is C", False),
    ("boxed", "\\boxed{D}", False),
    ("boxed", "Because the field is uniform", False),  # letters inside words are no answer
    ("boxed", "", False),
    ("sxs", "<think>maybe (A)</think><speak>The answer is (B).</speak>", True),
    ("sxs", "<think>it is B)</think><speak>I am not sure</speak>", False),
    ("tir", "<think>t</think><answer>B</answer>", True),
    ("tir", "<think>t</think><answer>(C)</answer>", False),
]


def test_choice_agreement_table_covers_every_format():
    assert {fmt for fmt, _, _ in CHOICE_AGREEMENT_CASES} == set(F.ANSWER_FORMATS)


@pytest.mark.parametrize("fmt, text, expected", CHOICE_AGREEMENT_CASES)
def test_evaluation_and_reward_give_the_same_multiple_choice_verdict(fmt, text, expected):
    from eval.benchmarks import get
    from eval.modes import MODE_FORMATS

    grader = get("gpqa_diamond").grader
    modes = [m for m, f in MODE_FORMATS.items() if f == fmt]
    verdicts = {m: _eval_verdict(m, text, "B", "gpqa_diamond") for m in modes}
    assert verdicts == {m: expected for m in modes}, "evaluation"
    assert _reward_verdict(fmt, text, "B", grader) is expected, "reward"


# A benchmark with an answer normaliser (GSM8K drops thousands separators before grading):
# a reward that names the benchmark reads the answer exactly as that benchmark's evaluation.
GSM8K_AGREEMENT_CASES = [
    ("boxed", "\\boxed{1,000}", True),
    ("boxed", "The answer is 1,000.", True),
    ("boxed", "\\boxed{1000}", True),
    ("boxed", "\\boxed{1,001}", False),
    ("boxed", "\\boxed{10,00}", False),  # not a thousands separator
    ("sxs", "<think>t</think><speak>\\boxed{1,000}</speak>", True),
    ("tir", "<think>t</think><answer>1,000</answer>", True),
]


@pytest.mark.parametrize("fmt, text, expected", GSM8K_AGREEMENT_CASES)
def test_evaluation_and_a_benchmark_reward_agree_after_its_normaliser(fmt, text, expected):
    from eval.modes import MODE_FORMATS
    from training.rewards import get_outcome_reward

    modes = [m for m, f in MODE_FORMATS.items() if f == fmt]
    verdicts = {m: _eval_verdict(m, text, "1000", "gsm8k") for m in modes}
    assert verdicts == {m: expected for m in modes}, "evaluation"
    reward = get_outcome_reward(fmt, benchmark="gsm8k")
    assert reward(completions=[text], answer=["1000"]) == [float(expected)], "reward"
    assert reward.__name__ == f"outcome_{fmt}_gsm8k"


def test_a_benchmark_reward_applies_that_benchmarks_normaliser(monkeypatch):
    # math-verify already reads most thousands separators, so GSM8K's own normaliser rarely
    # changes a verdict; give the benchmark one that always does, and both paths must follow it
    import dataclasses

    from eval import benchmarks
    from training.rewards import get_outcome_reward

    spelled = dataclasses.replace(benchmarks.get("gsm8k"),
                                  normalizer=lambda t: t.replace("forty-two", "42"))
    monkeypatch.setitem(benchmarks.BENCHMARKS, "gsm8k", spelled)
    text = "\\boxed{forty-two}"
    assert _eval_verdict("single", text, "42", "gsm8k") is True
    assert get_outcome_reward("boxed", benchmark="gsm8k")(completions=[text],
                                                          answer=["42"]) == [1.0]
    assert get_outcome_reward("boxed")(completions=[text], answer=["42"]) == [0.0]


@pytest.mark.parametrize("kwargs, match", [
    ({"benchmark": "nope"}, "unknown benchmark"),
    ({"benchmark": "humaneval"}, "use the `code` reward"),
    ({"benchmark": "gpqa_diamond", "grader": "math"}, None),  # math is the default: no clash
])
def test_benchmark_reward_arguments(kwargs, match):
    from training.rewards import get_outcome_reward

    if match is None:
        assert get_outcome_reward("boxed", **kwargs).__name__ == "outcome_boxed_gpqa_diamond"
    else:
        with pytest.raises(ValueError, match=match):
            get_outcome_reward("boxed", **kwargs)
