"""Format failures in eval/latency.py: outputs that show nothing score a block after their
whole generation (SxS §2.3's k* = K+1), untagged text is not shown, output shapes are counted
apart, and the per-problem pairing keeps every problem.

Every expectation is counted by hand with the whitespace tokenizer (one token per word; the
tags are not counted)."""

from __future__ import annotations

import pytest

from eval.latency import (
    ARM_FORMATS,
    SHAPES,
    WhitespaceTokenizer,
    arm_latency,
    disclosure_latency,
    follows_arm_format,
    latency_metrics,
    latency_metrics_from_text,
    output_shape,
    paired_latency,
    shown_segments,
)
from pipelines.formats import SPEAK, THINK, has_sxs_format

WS = WhitespaceTokenizer()


# ------------------------------------------------------------------ nothing shown: full length

def test_a_sequence_with_no_speak_token_scores_one_past_its_end():
    # 3 think tokens and nothing shown: the virtual block starts at token 4, after a wait of 3
    m = latency_metrics([(THINK, "a b c")], WS, missing_speak="end")
    assert (m.abo, m.ari, m.airw) == (4.0, 4.0, 3.0)
    assert (m.total_tokens, m.n_speak_blocks, m.first_disclosure, m.airw_between) == (3, 0, None,
                                                                                       None)
    # the descriptive default is unchanged: no speak token, no value
    assert latency_metrics([(THINK, "a b c")], WS).abo is None


def test_the_full_length_rule_leaves_sequences_that_show_something_alone():
    segments = [(THINK, "a b"), (SPEAK, "c"), (THINK, "d e f"), (SPEAK, "g h")]
    # blocks start at tokens 3 and 7; waits 2 and 3
    for policy in ("none", "end"):
        m = latency_metrics(segments, WS, missing_speak=policy)
        assert (m.abo, m.airw) == (5.0, 2.5)


def test_an_empty_output_shows_nothing_at_position_one():
    m = disclosure_latency("", WS)
    assert (m.abo, m.airw, m.total_tokens) == (1.0, 0.0, 0)
    assert output_shape("") == "untagged"


# ------------------------------------------------------------------ untagged text is not shown

@pytest.mark.parametrize("text, segments, abo, airw", [
    # no tags at all: 4 generated words, none shown -> block at 5 after a wait of 4
    ("x y z w", [(THINK, "x y z w")], 5.0, 4.0),
    # a stray answer outside the tags is generated, not shown: 3 hidden, then "c d" at 4
    ("<think>a b</think>stray<speak>c d</speak>",
     [(THINK, "a b"), (THINK, "stray"), (SPEAK, "c d")], 4.0, 3.0),
    # reason-then-answer without a speak tag: nothing is shown -> 2 generated, block at 3
    ("r</think>answer", [(THINK, "r"), (THINK, "answer")], 3.0, 2.0),
    # truncated inside a speak block: what streamed so far was shown, at token 2
    ("<think>a</think><speak>b c", [(THINK, "a"), (SPEAK, "b c")], 2.0, 1.0),
    # a closing tag of the other kind is dropped; the speak block stays open
    ("<speak>a</think>b</speak>", [(SPEAK, "a"), (SPEAK, "b")], 1.0, 0.0),
    # truncated while thinking: 3 generated, nothing shown
    ("<think>a b c", [(THINK, "a b c")], 4.0, 3.0),
])
def test_only_explicit_speak_blocks_are_shown(text, segments, abo, airw):
    assert shown_segments(text) == segments
    m = disclosure_latency(text, WS)
    assert (m.abo, m.airw) == (abo, airw)


def test_the_tolerant_default_still_reads_untagged_text_as_speak():
    # the same outputs under the default parameters: untagged text is speak at position 1
    assert latency_metrics_from_text("x y z w", WS).abo == 1.0
    assert latency_metrics_from_text("<think>a b</think>stray<speak>c d</speak>", WS).abo == 3.0
    # and the explicit choices equal disclosure_latency
    explicit = latency_metrics_from_text("x y z w", WS, untagged="hidden", missing_speak="end")
    assert explicit == disclosure_latency("x y z w", WS)


def test_bad_choices_are_refused_with_the_options():
    with pytest.raises(ValueError, match="missing_speak must be one of"):
        latency_metrics([(THINK, "a")], WS, missing_speak="drop")
    with pytest.raises(ValueError, match="untagged must be one of"):
        latency_metrics_from_text("a", WS, untagged="visible")
    with pytest.raises(ValueError, match="cannot be strict"):
        latency_metrics_from_text("<speak>a</speak>", WS, strict=True, untagged="hidden")


# ------------------------------------------------------------------ output shapes

SHAPE_TABLE = [
    ("", "untagged"),
    ("The answer is 4.", "untagged"),
    ("<think>a</think>answer", "malformed"),          # text outside the blocks
    ("<think>a b", "malformed"),                       # never closed
    ("<think>a<speak>b</speak></think>", "malformed"),  # nested
    ("<think>a b</think>", "no_speak"),
    ("<think>a</think><speak> </speak>", "no_speak"),  # an empty speak block shows nothing
    ("<speak>a</speak>", "speak_only"),
    ("<think>a</think>\n<speak>b</speak>\n", "think_then_speak"),
    ("<think>a</think><think>b</think><speak>c</speak>", "think_then_speak"),
    ("<think>a</think><speak>b</speak><think>c</think>", "interleaved"),  # trailing reasoning
    ("<speak>a</speak><think>b</think><speak>c</speak>", "interleaved"),
    ("<think>a</think><speak>b</speak><think>c</think><speak>d</speak>", "interleaved"),
]


@pytest.mark.parametrize("text, shape", SHAPE_TABLE)
def test_output_shapes(text, shape):
    assert shape in SHAPES and output_shape(text) == shape


@pytest.mark.parametrize("text, shape", SHAPE_TABLE)
def test_arm_formats(text, shape):
    # standard CoT: exactly one think block, then one speak block
    assert follows_arm_format(text, "standard") is (shape == "think_then_speak")
    # SxS: the format reward's own test (pipelines.formats.has_sxs_format)
    assert follows_arm_format(text, "sxs") is has_sxs_format(text)
    assert set(ARM_FORMATS) == {"standard", "sxs"}
    with pytest.raises(ValueError, match="arm must be one of"):
        follows_arm_format(text, "base")


# ------------------------------------------------------------------ per-problem pairing

def _row(pid, output, error=None):
    return {"problem_id": pid, "output": output, "gen_error": error}


def test_arm_latency_keeps_every_problem_and_counts_shapes():
    rows = [
        _row("p1", "<think>a b</think><speak>c</speak>"),  # ABO 3, AIRW 2
        _row("p1", "x y z w"),                             # untagged: ABO 5, AIRW 4
        _row("p2", "<think>a</think>"),                    # nothing shown: ABO 2, AIRW 1
        _row("p3", "", error="timeout"),                   # failed generation: left out
        _row("p4", "<think>a</think>b<speak>c d</speak>"),  # malformed: ABO 3, AIRW 2
    ]
    arm = arm_latency(rows, WS)
    assert arm.abo == {"p1": 4.0, "p2": 2.0, "p4": 3.0}
    assert arm.airw == {"p1": 3.0, "p2": 1.0, "p4": 2.0}
    assert (arm.samples, arm.errored, arm.without_shown_block) == (5, 1, 2)
    assert arm.shapes == {"untagged": 1, "malformed": 1, "no_speak": 1, "think_then_speak": 1}
    # one of the 4 measured outputs is in the standard format (and in SxS's)
    assert arm.format_following("standard") == 0.25
    assert arm.format_following("sxs") == 0.25
    summary = arm.summary("standard")
    assert (summary["untagged"], summary["malformed"], summary["problems"]) == (1, 1, 3)


def test_pairing_keeps_problems_that_show_nothing():
    # the reference arm shows nothing on p2 and writes untagged text on p3; both stay paired
    reference = arm_latency([_row("p1", "<think>a b c</think><speak>d</speak>"),
                             _row("p2", "<think>a b c d e</think>"),
                             _row("p3", "just words here")], WS)
    treatment = arm_latency([_row("p1", "<speak>a</speak><think>b</think><speak>c</speak>"),
                             _row("p2", "<think>a</think><speak>b</speak>"),
                             _row("p3", "<think>a b</think>")], WS)
    ref, treat = paired_latency(reference, treatment, "abo")
    assert ref == {"p1": 4.0, "p2": 6.0, "p3": 4.0}
    # p1: blocks at 1 and 3 -> 2; p2: block at 2; p3: nothing shown after 2 tokens -> 3
    assert treat == {"p1": 2.0, "p2": 2.0, "p3": 3.0}
    ref, treat = paired_latency(reference, treatment, "airw")
    assert ref == {"p1": 3.0, "p2": 5.0, "p3": 3.0}
    assert treat == {"p1": 0.5, "p2": 1.0, "p3": 2.0}
    # a problem missing from one arm (every sample failed) is the only one not paired
    partial = arm_latency([_row("p1", "<speak>a</speak>"), _row("p2", "", error="x")], WS)
    assert sorted(paired_latency(reference, partial, "abo")[0]) == ["p1"]
    with pytest.raises(ValueError, match="metric must be"):
        paired_latency(reference, treatment, "ari")
