"""Tests for eval/latency.py: the content-latency metrics (the tagged format's parser is tested
in tests/pipelines/test_formats.py).

Hand-built sequences with a whitespace tokenizer (one token per word) have hand-computed
values; one test uses the real SmolLM2 tokenizer when the converted model folder exists.
"""

from __future__ import annotations

import pytest

from eval.latency import (
    LatencyMetrics,
    WhitespaceTokenizer,
    is_filler,
    latency_metrics,
    latency_metrics_from_text,
    summarize_latency,
    summarize_variants,
)
from pipelines.formats import SPEAK, THINK, render_tagged
from pipelines.settings import models_dir

WS = WhitespaceTokenizer()


# ------------------------------------------------------------------ metrics on hand-built sequences

def test_interleaved_sequence_hand_computed():
    # positions: think 1-3 | speak 4-5 | think 6 | speak 7 | think 8-9
    segments = [(THINK, "a b c"), (SPEAK, "x y"), (THINK, "d"), (SPEAK, "z"), (THINK, "e f")]
    m = latency_metrics(segments, WS)
    assert (m.total_tokens, m.reasoning_tokens, m.response_tokens) == (9, 6, 3)
    assert m.n_speak_blocks == 2
    assert m.ari == pytest.approx((4 + 5 + 7) / 3)
    assert m.abo == pytest.approx((4 + 7) / 2)
    assert m.airw == pytest.approx((3 + 1) / 2)  # trailing think (8-9) does not count
    assert m.first_disclosure == 4
    assert m.filler_rate == 0.0


def test_airw_between_is_the_literal_reading_of_section_4_2():
    # "Between two consecutive speak blocks, the model generates a think span": only the spans
    # separating speak blocks count, not the wait before the first one nor trailing reasoning.
    # think 1-3 | speak 4-5 | think 6 | speak 7 | think 8-11 | speak 12 | think 13-14
    segments = [(THINK, "a b c"), (SPEAK, "x y"), (THINK, "d"), (SPEAK, "z"),
                (THINK, "e f g h"), (SPEAK, "w"), (THINK, "i j")]
    m = latency_metrics(segments, WS)
    assert m.airw_between == pytest.approx((1 + 4) / 2)
    assert m.airw == pytest.approx((3 + 1 + 4) / 3)  # the tables' reading, initial wait in
    # one speak block: no span between two blocks, so no value (and no mean contribution)
    one = latency_metrics([(THINK, "r1 r2 r3"), (SPEAK, "s")], WS)
    assert one.airw_between is None and one.airw == 3
    out = summarize_latency([m, one])
    assert out["mean_airw_between"] == pytest.approx(2.5)
    assert out["mean_airw"] == pytest.approx((8 / 3 + 3) / 2)


def test_plain_reason_then_answer_is_the_special_case():
    m = latency_metrics([(THINK, "r1 r2 r3 r4 r5"), (SPEAK, "s1 s2")], WS)
    assert m.n_speak_blocks == 1
    assert m.ari == pytest.approx(6.5)
    assert m.abo == 6
    assert m.airw == 5 == m.reasoning_tokens
    assert m.first_disclosure == 6


def test_speak_first_has_zero_initial_wait():
    m = latency_metrics([(SPEAK, "x"), (THINK, "a b"), (SPEAK, "y")], WS)
    assert m.airw == pytest.approx((0 + 2) / 2)
    assert m.abo == pytest.approx((1 + 4) / 2)
    assert m.ari == pytest.approx((1 + 4) / 2)


def test_adjacent_speak_segments_form_one_block_and_empty_segments_are_ignored():
    m = latency_metrics([(THINK, "a"), (SPEAK, "b c"), (THINK, "   "), (SPEAK, "d")], WS)
    assert m.n_speak_blocks == 1
    assert m.abo == 2
    assert m.ari == pytest.approx((2 + 3 + 4) / 3)
    assert m.airw == 1


def test_filler_block_delays_first_substantive_disclosure():
    segments = [(THINK, "a b"), (SPEAK, "Sure, let me think."), (THINK, "c d e"),
                (SPEAK, "The total is 5.")]
    m = latency_metrics(segments, WS)
    # "Sure, let me think." = 4 words at positions 3-6; think 7-9; second block starts at 10
    assert m.first_disclosure == 10
    assert m.filler_rate == 0.5
    assert m.abo == pytest.approx((3 + 10) / 2)


def test_no_speak_tokens_gives_none_metrics():
    m = latency_metrics([(THINK, "a b c")], WS)
    assert (m.ari, m.abo, m.airw, m.airw_between, m.first_disclosure, m.filler_rate) == \
        (None,) * 6
    assert m.total_tokens == m.reasoning_tokens == 3


def test_bad_kind_is_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="think' or 'speak"):
        latency_metrics([("answer", "x")], WS)


def test_summarize_latency_means_and_none_handling():
    a = latency_metrics([(THINK, "a b"), (SPEAK, "c")], WS)       # ari 3, airw 2
    b = latency_metrics([(THINK, "a b c d"), (SPEAK, "e")], WS)   # ari 5, airw 4
    c = latency_metrics([(THINK, "a")], WS)                       # no speak
    out = summarize_latency([a, b, c])
    assert out["n"] == 3 and out["n_without_speak"] == 1
    assert out["mean_ari"] == pytest.approx(4.0)
    assert out["mean_airw"] == pytest.approx(3.0)
    assert out["mean_total_tokens"] == pytest.approx((3 + 5 + 1) / 3)
    assert isinstance(a, LatencyMetrics) and a.to_row()["ari"] == 3


def test_summarize_variants_hand_computed():
    samples = [
        {"sxs": [(THINK, "a b"), (SPEAK, "x"), (THINK, "c"), (SPEAK, "y")],   # abo (3+5)/2, airw 1.5
         "standard": [(THINK, "a b c"), (SPEAK, "x y")]},                     # abo 4, airw 3
        {"sxs": [(THINK, "a"), (SPEAK, "x")],                                 # abo 2, airw 1
         "standard": [(THINK, "a"), (SPEAK, "x")]},                           # abo 2, airw 1
    ]
    out = summarize_variants(samples, WS)
    assert set(out) == {"latency_sxs", "latency_standard"}
    assert out["latency_sxs"]["mean_abo"] == pytest.approx((4 + 2) / 2)
    assert out["latency_sxs"]["mean_airw"] == pytest.approx((1.5 + 1) / 2)
    assert out["latency_standard"]["mean_abo"] == pytest.approx((4 + 2) / 2)
    assert out["latency_standard"]["mean_airw"] == pytest.approx((3 + 1) / 2)
    assert out["latency_standard"]["n"] == 2


def test_summarize_variants_rejects_samples_with_different_variants():
    with pytest.raises(ValueError, match="same variants"):
        summarize_variants([{"sxs": [(SPEAK, "x")]}, {"standard": [(SPEAK, "x")]}], WS)


@pytest.mark.parametrize("text,expected", [
    ("Sure.", True),
    ("Okay, let me think about this problem.", True),
    ("Hmm, let's see...", True),
    ("Alright! Let me work this out step by step.", True),
    ("Sure, the answer is 5.", False),
    ("We have $x^2 = 4$.", False),
    ("Okay, so Jenifer has 17 pennies.", False),
    ("The triangle is isosceles.", False),
])
def test_is_filler_table(text, expected):
    assert is_filler(text) is expected


# ------------------------------------------------------------------ model text

def test_metrics_from_model_text_use_tolerant_parse():
    m = latency_metrics_from_text("x y</think>The answer is 3", WS)
    assert (m.reasoning_tokens, m.response_tokens, m.abo, m.airw) == (2, 4, 3, 2)


# ------------------------------------------------------------------ real tokenizer

def test_real_smollm2_tokenizer_counts_content_not_tags():
    folder = models_dir() / "smollm2-135m-instruct"
    if not (folder / "tokenizer_config.json").is_file():
        pytest.skip(f"no converted model at {folder} (python -m pipelines.models convert makes it)")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    segments = [(THINK, "First, 3 + 4 = 7."), (SPEAK, "The sum is 7."),
                (THINK, "Check: 7 - 4 = 3, fine."), (SPEAK, "So the answer is \\boxed{7}.")]
    counts = [len(tok.encode(c, add_special_tokens=False)) for _, c in segments]
    m = latency_metrics(segments, tok)
    assert m.total_tokens == sum(counts)
    assert m.reasoning_tokens == counts[0] + counts[2]
    assert m.abo == pytest.approx(((counts[0] + 1) + (counts[0] + counts[1] + counts[2] + 1)) / 2)
    assert m.airw == pytest.approx((counts[0] + counts[2]) / 2)
    whole = len(tok.encode(render_tagged(segments), add_special_tokens=False))
    assert whole > m.total_tokens  # the tags themselves are not counted
    plain = latency_metrics([(THINK, segments[0][1]), (SPEAK, segments[1][1])], tok)
    assert plain.airw == plain.reasoning_tokens == counts[0]
