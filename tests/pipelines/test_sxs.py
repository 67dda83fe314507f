"""Tests for pipelines/sxs_align.py and pipelines/sxs_judge.py.

A scripted fake client (``chat_json`` answering per prefix length, with delays so cancellation
is observable) drives the real ``LLMJudge`` for the algorithm tests; the judge also runs over
the real ``LLMClient`` against the in-process fake HTTP server, and against the real local
model server when one is available (marker ``server``). Round trips are checked on random
block lists and on every row of the shared trace files.
"""

from __future__ import annotations

import ast
import asyncio
import itertools
import json
import random
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from eval.latency import WhitespaceTokenizer, summarize_variants
from pipelines.formats import SPEAK, SXS_SYSTEM_PROMPT, THINK, parse_tagged
from pipelines.settings import data_dir
from pipelines.sxs_align import (
    BLOCK_SEP,
    CANCELLED,
    FAILED,
    NOT_NEEDED,
    OK,
    PREFILTERED,
    TERMINAL,
    AlignConfig,
    Segment,
    align_blocks,
    align_sample,
    apply_terminal_safeguard,
    interleave,
    join_blocks,
    monotone_repair,
    normalize_whitespace,
    projection,
    segment,
    sft_row,
    sft_rows,
    standard_segments,
    summarize_alignments,
    to_tagged,
    validate_alignment,
    validate_tagged,
    variant_segments,
)
from pipelines.sxs_judge import (
    JUDGE_PROMPT_PATH,
    EvidenceJudge,
    LLMJudge,
    coverage_schema,
    evidence,
    load_judge_prompt,
    parse_coverage,
    prefilter_skips,
    render_judge_messages,
    unsupported_disclosures,
)

_STEP_RE = re.compile(r"(?m)^\[R(\d+)\] ")


def run(coro):
    return asyncio.run(coro)


class ScriptedClient:
    """Stands in for LLMClient.chat_json: the reply depends on the prefix length k.

    ``values[k]`` is the covered count (``"invalid"`` makes the call fail as the real client
    reports it: value None with an error); ``delays[k]`` seconds pass before replying.
    """

    def __init__(self, values: dict[int, Any], delays: dict[int, float] | None = None,
                 raise_at: int | None = None) -> None:
        self.values, self.delays, self.raise_at = values, delays or {}, raise_at
        self.started: list[int] = []
        self.finished: list[int] = []
        self.cancelled: list[int] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.schemas: list[dict] = []

    async def chat_json(self, messages, schema, params=None, *, validate=None, tag="", sample_index=0):
        k = max(int(n) for n in _STEP_RE.findall(messages[-1]["content"]))
        self.started.append(k)
        self.schemas.append(schema)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delays.get(k, 0.0))
        except asyncio.CancelledError:
            self.cancelled.append(k)
            raise
        finally:
            self.in_flight -= 1
        self.finished.append(k)
        if k == self.raise_at:
            raise RuntimeError("endpoint exploded")
        value = self.values.get(k, 0)
        if value == "invalid":
            return SimpleNamespace(value=None, raw=["nonsense"], attempts=2, error="not valid JSON")
        reply = {"covered": value}
        if validate is not None:
            try:
                checked = validate(reply)
            except ValueError as exc:
                return SimpleNamespace(value=None, raw=[json.dumps(reply)], attempts=2, error=str(exc))
            reply = reply if checked is None else checked
        return SimpleNamespace(value=reply, raw=[json.dumps(reply)], attempts=1, error=None)


def blocks(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i} text" for i in range(1, n + 1)]


def scripted_judge(values, delays=None, **kw) -> tuple[LLMJudge, ScriptedClient]:
    client = ScriptedClient(values, delays, **kw)
    return LLMJudge(client, params=SimpleNamespace()), client


# ------------------------------------------------------------------ segmentation

def test_segment_normalises_whitespace_and_drops_empty_blocks():
    text = "\r\nfirst line  \nsecond\r\n\r\n\r\n   \t \n\n  indented\n\n\n"
    assert segment(text) == ["first line\nsecond", "  indented"]
    assert normalize_whitespace("a\n \n \nb") == "a\n\nb"
    assert segment("") == [] and segment(" \n\n \n") == []


def test_segment_is_idempotent_on_random_texts():
    rng = random.Random(7)
    pieces = ["word", "x = 1", "  ", "\n", "\n\n", "\n \n", "\t", "\r\n", "$\\frac{1}{2}$", "é"]
    for _ in range(500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        once = segment(text)
        assert segment(join_blocks(once)) == once
        assert all(b.strip() and BLOCK_SEP not in b for b in once)


def test_segment_rejects_non_text():
    with pytest.raises(TypeError, match="str"):
        segment(None)  # type: ignore[arg-type]


# ------------------------------------------------------------------ repair, safeguard, interleave

@pytest.mark.parametrize("raw,k_a,expected", [
    ([None, 2, 1, None, 3], 3, [0, 2, 2, 2, 3]),
    ([0, 0, 0], 2, [0, 0, 0]),
    ([5, -1], 3, [3, 3]),   # clamped to 0..K_A
    ([], 3, []),
])
def test_monotone_repair(raw, k_a, expected):
    assert monotone_repair(raw, k_a) == expected


def test_terminal_safeguard_sets_last_level():
    assert apply_terminal_safeguard([0, 1, 1], 4) == [0, 1, 4]
    assert apply_terminal_safeguard([], 4) == []


def test_interleave_merges_quiet_blocks_and_emits_trailing_reasoning():
    r, a = blocks("R", 6), blocks("A", 3)
    segs = interleave(r, a, [0, 0, 1, 1, 3, 3])
    assert segs == [
        Segment(THINK, tuple(r[0:3])), Segment(SPEAK, (a[0],)),
        Segment(THINK, tuple(r[3:5])), Segment(SPEAK, tuple(a[1:3])),
        Segment(THINK, (r[5],)),  # trailing: the answer was out before the last block
    ]


def test_interleave_stops_at_full_coverage_and_keeps_the_rest_as_one_segment():
    r, a = blocks("R", 5), blocks("A", 2)
    segs = interleave(r, a, [2, 2, 2, 2, 2])
    assert segs == [Segment(THINK, (r[0],)), Segment(SPEAK, tuple(a)), Segment(THINK, tuple(r[1:]))]


def test_interleave_rejects_bad_levels():
    r, a = blocks("R", 3), blocks("A", 2)
    with pytest.raises(ValueError, match="non-decreasing"):
        interleave(r, a, [1, 0, 2])
    with pytest.raises(ValueError, match="terminal safeguard"):
        interleave(r, a, [0, 0, 1])
    with pytest.raises(ValueError, match="one coverage level"):
        interleave(r, a, [0, 2])


# ------------------------------------------------------------------ alignment with a scripted judge

def test_alignment_monotone_repair_and_statuses():
    judge, client = scripted_judge({1: 1, 2: 0, 3: 2, 4: 1})
    r, a = blocks("R", 5), blocks("A", 3)
    al = run(align_blocks("P", r, a, judge))
    assert al.raw == [1, 0, 2, 1, None]
    assert al.repaired == [1, 1, 2, 2, 3]
    assert al.status == [OK, OK, OK, OK, TERMINAL]
    assert sorted(client.started) == [1, 2, 3, 4]  # the last prefix is not judged by default
    assert al.calls_made == 4 and al.calls_saved == 0 and al.calls_failed == 0
    assert [s.kind for s in al.segments] == [THINK, SPEAK, THINK, SPEAK, THINK, SPEAK]
    assert al.n_visible_segments == 3 and not al.collapsed
    assert validate_alignment(al) == []
    assert validate_tagged(al.tagged, r, a) == []


def test_terminal_safeguard_when_judge_never_sees_coverage():
    judge, _ = scripted_judge({})  # always 0
    r, a = blocks("R", 4), blocks("A", 2)
    al = run(align_blocks("P", r, a, judge))
    assert al.repaired == [0, 0, 0, 2]
    assert al.segments == standard_segments(r, a)
    assert al.collapsed and al.n_visible_segments == 1


def test_judge_terminal_option_asks_the_last_prefix_but_safeguard_wins():
    judge, client = scripted_judge({4: 0})
    al = run(align_blocks("P", blocks("R", 4), blocks("A", 2), judge, AlignConfig(judge_terminal=True)))
    assert 4 in client.started
    assert al.raw[-1] == 0 and al.status[-1] == OK and al.repaired[-1] == 2


def test_cancellation_cancels_only_later_pending_prefixes():
    # prefix 2 reaches K_A first; prefix 1 is still pending and must NOT be cancelled.
    values = {1: 1, 2: 3, 3: 3, 4: 3, 5: 3}
    delays = {1: 0.3, 2: 0.01, 3: 10.0, 4: 10.0, 5: 10.0}
    judge, client = scripted_judge(values, delays)
    al = run(align_blocks("P", blocks("R", 6), blocks("A", 3), judge))
    assert sorted(client.cancelled) == [3, 4, 5]
    assert sorted(client.finished) == [1, 2]
    assert al.status == [OK, OK, CANCELLED, CANCELLED, CANCELLED, TERMINAL]
    assert al.raw == [1, 3, None, None, None, None]
    assert al.repaired == [1, 3, 3, 3, 3, 3]
    assert (al.calls_made, al.calls_cancelled, al.calls_saved) == (2, 3, 3)
    assert al.segments[-1] == Segment(THINK, tuple(blocks("R", 6)[2:]))
    assert validate_alignment(al) == []


def test_cancellation_cutoff_moves_earlier_when_an_earlier_prefix_finishes_later():
    # prefix 4 reaches K_A first (cancels 5); then prefix 2 does (cancels 3, still pending).
    values = {1: 0, 2: 2, 3: 2, 4: 2, 5: 2}
    delays = {1: 0.05, 2: 0.15, 3: 10.0, 4: 0.01, 5: 10.0}
    judge, client = scripted_judge(values, delays)
    al = run(align_blocks("P", blocks("R", 6), blocks("A", 2), judge))
    assert sorted(client.cancelled) == [3, 5]
    assert al.status == [OK, OK, CANCELLED, OK, CANCELLED, TERMINAL]
    assert al.repaired == [0, 2, 2, 2, 2, 2]
    assert al.calls_saved == 2 and al.calls_made == 3


def test_parallel_mode_launches_all_prefixes_at_once():
    judge, client = scripted_judge({}, {k: 0.05 for k in range(1, 8)})
    al = run(align_blocks("P", blocks("R", 8), blocks("A", 2), judge))
    assert client.max_in_flight == 7 and al.rounds == 1


def test_failures_are_counted_and_treated_as_no_new_coverage():
    # k=2 garbage, k=3 out of range (schema max is K_A=2) -> both failed
    judge, client = scripted_judge({1: 1, 2: "invalid", 3: 7, 4: 1})
    al = run(align_blocks("P", blocks("R", 5), blocks("A", 2), judge))
    assert al.status == [OK, FAILED, FAILED, OK, TERMINAL]
    assert al.raw == [1, None, None, 1, None]
    assert al.repaired == [1, 1, 1, 1, 2]
    assert al.calls_failed == 2 and al.calls_made == 4
    assert client.schemas[0]["properties"]["covered"] == {"type": "integer", "minimum": 0, "maximum": 2}
    assert validate_tagged(al.tagged, blocks("R", 5), blocks("A", 2)) == []


class DirectJudge:
    """A CoverageJudge (protocol level) returning scripted raw values, valid or not."""

    def __init__(self, values: dict[int, Any]) -> None:
        self.values = values

    async def judge(self, problem, reasoning_prefix, answer_blocks):
        return self.values.get(len(reasoning_prefix), 0)


def test_out_of_range_or_non_integer_from_any_judge_is_a_failure():
    judge = DirectJudge({1: 9, 2: True, 3: "2", 4: -1})
    al = run(align_blocks("P", blocks("R", 5), blocks("A", 2), judge))
    assert al.status[:4] == [FAILED] * 4 and al.repaired == [0, 0, 0, 0, 2]


def test_judge_exception_propagates_and_cancels_pending_calls():
    judge, client = scripted_judge({}, {1: 0.01, 2: 10.0, 3: 10.0}, raise_at=1)
    with pytest.raises(RuntimeError, match="exploded"):
        run(align_blocks("P", blocks("R", 4), blocks("A", 2), judge))
    assert sorted(client.cancelled) == [2, 3]


def test_sequential_mode_one_call_at_a_time_stopping_at_full_coverage():
    values = {1: 0, 2: 1, 3: 3, 4: 3, 5: 3}
    judge, client = scripted_judge(values, {k: 0.01 for k in range(1, 6)})
    al = run(align_blocks("P", blocks("R", 6), blocks("A", 3), judge, AlignConfig(mode="sequential")))
    assert client.started == [1, 2, 3] and client.max_in_flight == 1
    assert al.status == [OK, OK, OK, NOT_NEEDED, NOT_NEEDED, TERMINAL]
    assert al.rounds == 3 and al.calls_saved == 2 and al.calls_cancelled == 0
    judge2, _ = scripted_judge(values, {k: 0.01 for k in range(1, 6)})
    parallel = run(align_blocks("P", blocks("R", 6), blocks("A", 3), judge2))
    assert parallel.repaired == al.repaired and parallel.segments == al.segments


def test_parallel_and_sequential_agree_on_random_monotone_judges():
    rng = random.Random(11)
    for _ in range(40):
        k_r, k_a = rng.randint(1, 12), rng.randint(1, 6)
        levels = sorted(rng.randint(0, k_a) for _ in range(k_r))
        values = {k: levels[k - 1] for k in range(1, k_r + 1)}
        r, a = blocks("R", k_r), blocks("A", k_a)
        par = run(align_blocks("P", r, a, DirectJudge(values)))
        seq = run(align_blocks("P", r, a, DirectJudge(values), AlignConfig(mode="sequential")))
        assert par.repaired == seq.repaired == apply_terminal_safeguard(levels, k_a)
        assert par.segments == seq.segments
        assert seq.calls_made <= par.calls_made + par.calls_saved


def test_single_reasoning_block_needs_no_call_and_empty_inputs_are_rejected():
    judge, client = scripted_judge({})
    al = run(align_blocks("P", ["only"], blocks("A", 2), judge))
    assert client.started == [] and al.calls_made == 0 and al.rounds == 0 and al.collapsed
    with pytest.raises(ValueError, match="no answer blocks"):
        run(align_sample("P", "some reasoning", "  \n\n ", judge))
    with pytest.raises(ValueError, match="no reasoning blocks"):
        run(align_sample("P", "", "answer", judge))
    with pytest.raises(ValueError, match="mode"):
        AlignConfig(mode="fast")  # type: ignore[arg-type]


# ------------------------------------------------------------------ pre-filter

def test_evidence_normalises_numbers_and_symbols():
    assert evidence("x = 1,000 and 27.0 and 033 and 0.50") == {"1000", "27", "33", "0.5"}
    assert evidence(r"$\sqrt{2}\pi$") == {"2", "sqrt", "pi"}
    assert evidence("the square root of pi") == {"sqrt", "pi"}
    assert evidence("The logical step") == frozenset()


def test_prefilter_skips_only_when_the_next_block_has_new_evidence():
    answer = ["We set up P + 5N = 82.", "So N = 13.", "Therefore the answer follows."]
    context = "Jenifer has 82 cents. Let P pennies and N nickels, P + 5N = 82."
    assert not prefilter_skips(context, answer, 0)           # 5, 82 present
    assert prefilter_skips(context, answer, 1)               # 13 not derived yet
    assert not prefilter_skips(context + " N = 13", answer, 1)
    assert not prefilter_skips(context, answer, 2)           # no evidence -> never skipped
    assert not prefilter_skips(context, answer, 3)           # nothing left


def test_evidence_judge_covers_blocks_once_their_numbers_are_written():
    problem = "Jenifer has 82 cents in pennies and nickels; counted as dimes it is 147."
    r = ["Let P pennies, N nickels.", "P + 5N = 82 and P + 10N = 147.", "So 5N = 65, N = 13.",
         "P = 82 - 65 = 17.", "Check: 17 + 65 = 82."]
    a = ["Set up P + 5N = 82 and P + 10N = 147.", "Subtracting gives N = 13.",
         "The answer is 17."]
    judge = EvidenceJudge()
    # by hand: a block is covered once every number in it is in the problem or the prefix
    # (A1 needs 5 and 10, first written in R2; A2 needs 13, R3; A3 needs 17, R4)
    assert [run(judge.judge(problem, r[:k], a)) for k in range(1, 6)] == [0, 1, 2, 3, 3]
    assert run(judge.judge(problem, r[:1], ["No numbers here.", "Then 99."])) == 1
    al = run(align_blocks(problem, r, a, judge))
    assert al.repaired == [0, 1, 2, 3, 3]
    assert [s.kind for s in al.segments] == [THINK, SPEAK, THINK, SPEAK, THINK, SPEAK, THINK]


def test_unsupported_disclosures_counts_values_shown_too_early():
    problem = "What is 6 * 7?"
    r, a = ["Multiply.", "It is 42.", "Done."], ["6 * 7 = 42.", "So 42."]
    assert unsupported_disclosures(problem, r, a, [0, 2, 2]) == (2, 0)  # both after R2
    assert unsupported_disclosures(problem, r, a, [1, 2, 2]) == (2, 1)  # 42 shown after R1
    assert unsupported_disclosures(problem, r, a, [0, 0, 2]) == (0, 0)  # terminal only
    with pytest.raises(ValueError, match="one level per reasoning prefix"):
        unsupported_disclosures(problem, r, a, [0, 2])


def test_prefilter_in_sequential_and_parallel_modes():
    problem = "Compute 6 * 7."
    r = ["Let me multiply.", "Six sevens.", "That is 42.", "Check: 42 / 7 = 6."]
    a = ["6 * 7 = 42.", "The answer is 42."]
    judge, client = scripted_judge({3: 2})
    seq = run(align_blocks(problem, r, a, judge, AlignConfig(mode="sequential", prefilter=True)))
    assert seq.status == [PREFILTERED, PREFILTERED, OK, TERMINAL]
    assert client.started == [3] and seq.calls_prefiltered == 2
    assert seq.raw[:2] == [0, 0]
    judge, client = scripted_judge({3: 2})
    par = run(align_blocks(problem, r, a, judge, AlignConfig(prefilter=True)))
    assert par.status == seq.status and par.repaired == seq.repaired == [0, 0, 2, 2]
    assert client.started == [3]


def test_incremental_prefix_evidence_equals_evidence_of_the_joined_text():
    from pipelines.sxs_align import _prefix_evidence

    for _, problem, reasoning, _ in _load_traces()[::7]:
        r = segment(reasoning)
        grown = _prefix_evidence(problem, r)
        for k in sorted({1, len(r) // 2 or 1, len(r)}):
            assert grown[k - 1] == evidence(problem + "\n" + join_blocks(r[:k]))


# ------------------------------------------------------------------ format, projections, validators

def _random_blocks(rng: random.Random, n: int) -> list[str]:
    words = ["x", "=", "3", "\\frac{a}{b}", "Let", "so", "é", "∑", "**bold**", "<b>", "  indent",
             "line\nbreak", "{}", "$", "\\boxed{7}"]
    out = []
    for _ in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        out.extend(segment(text) or ["y"])
    return out[:n] if len(out) >= n else out + ["z"] * (n - len(out))


def test_round_trip_property_on_random_blocks_and_monotone_coverage():
    rng = random.Random(2024)
    for _ in range(400):
        r = _random_blocks(rng, rng.randint(1, 15))
        a = _random_blocks(rng, rng.randint(1, 8))
        levels = apply_terminal_safeguard(sorted(rng.randint(0, len(a)) for _ in r), len(a))
        segs = interleave(r, a, levels)
        tagged = to_tagged(segs)
        assert validate_tagged(tagged, r, a) == []
        assert projection(tagged, THINK) == join_blocks(r)
        assert projection(tagged, SPEAK) == join_blocks(a)
        assert segment(projection(tagged, THINK)) == r and segment(projection(tagged, SPEAK)) == a
        kinds = [k for k, _ in parse_tagged(tagged)]
        assert all(x != y for x, y in itertools.pairwise(kinds))  # merged: kinds alternate
        assert kinds.count(SPEAK) == len(set(levels) - {0})  # one speak per increase
        std = to_tagged(standard_segments(r, a))
        assert validate_tagged(std, r, a) == []


def test_validate_tagged_reports_what_is_wrong():
    r, a = blocks("R", 3), blocks("A", 2)
    good = to_tagged(interleave(r, a, [1, 1, 2]))
    assert validate_tagged(good, r, a) == []
    assert any("think projection" in p for p in validate_tagged(good, r + ["R4 text"], a))
    swapped = to_tagged([Segment(THINK, (r[0],)), Segment(SPEAK, (a[1], a[0])), Segment(THINK, tuple(r[1:]))])
    assert any("speak projection" in p and "block 1" in p for p in validate_tagged(swapped, r, a))
    assert any("well-formed" in p for p in validate_tagged(good[:-3], r, a))
    doubled = to_tagged([Segment(THINK, (r[0],)), Segment(THINK, tuple(r[1:])), Segment(SPEAK, tuple(a))])
    assert any("both think" in p for p in validate_tagged(doubled, r, a))
    speak_first = to_tagged([Segment(SPEAK, tuple(a)), Segment(THINK, tuple(r))])
    assert any("start with a think" in p for p in validate_tagged(speak_first, r, a))
    tagged_block = ["uses <speak> literally"]
    bad = to_tagged(interleave(tagged_block, a, [2]))
    assert any("reserved tag <speak>" in p for p in validate_tagged(bad, tagged_block, a))


def test_validate_alignment_catches_tampering():
    judge, _ = scripted_judge({1: 1, 2: 2})
    al = run(align_blocks("P", blocks("R", 3), blocks("A", 2), judge))
    assert validate_alignment(al) == []
    al.repaired = [2, 1, 2]
    problems = validate_alignment(al)
    assert any("not monotone" in p for p in problems)
    assert any("do not follow" in p for p in problems)
    al2 = run(align_blocks("P", blocks("R", 3), blocks("A", 2), judge))
    al2.repaired = [0, 0, 1]
    assert any("terminal safeguard" in p for p in validate_alignment(al2))


def test_alignment_row_is_flat_and_complete():
    judge, _ = scripted_judge({1: 1})
    row = run(align_blocks("P", blocks("R", 3), blocks("A", 2), judge)).to_row()
    for key in ("k_r", "k_a", "raw", "repaired", "status", "calls_made", "calls_saved",
                "calls_failed", "n_visible_segments", "collapsed", "tagged"):
        assert key in row
    assert row["k_r"] == 3 and row["raw"] == [1, 0, None] and row["tagged"].startswith("<think>")


# ------------------------------------------------------------------ SFT rows and summary

def test_sft_rows_chat_and_text_formats():
    judge, _ = scripted_judge({1: 1})
    r, a = blocks("R", 3), blocks("A", 2)
    al = run(align_blocks("What is 2+2?", r, a, judge))
    rows = sft_rows("What is 2+2?", al)
    sxs, std = rows["sxs"], rows["standard"]
    assert sxs["prompt"] == std["prompt"] == [
        {"role": "system", "content": SXS_SYSTEM_PROMPT}, {"role": "user", "content": "What is 2+2?"}]
    assert sxs["completion"] == [{"role": "assistant", "content": al.tagged}]
    assert std["completion"][0]["content"] == f"<think>{join_blocks(r)}</think><speak>{join_blocks(a)}</speak>"
    text = sft_row("Q?", al.segments, style="text")
    assert isinstance(text["prompt"], str) and "Q?" in text["prompt"] and text["completion"] == al.tagged
    with pytest.raises(ValueError, match="style"):
        sft_row("Q?", al.segments, style="xml")  # type: ignore[arg-type]


def test_sft_row_is_recognised_by_trl_as_conversational_prompt_completion():
    data_utils = pytest.importorskip("trl.data_utils")
    row = sft_row("Q?", [Segment(THINK, ("r",)), Segment(SPEAK, ("a",))])
    assert data_utils.is_conversational(row)


def test_summarize_alignments_figures():
    ws = WhitespaceTokenizer()
    judge, _ = scripted_judge({1: 1, 2: 2})
    al1 = run(align_blocks("P", ["r1 r1", "r2", "r3"], ["a1", "a2"], judge))   # think|speak|think|speak|think
    al2 = run(align_blocks("P", ["r1", "r2"], ["a1"], DirectJudge({})))        # collapsed
    out = {**summarize_alignments([al1, al2]),
           **summarize_variants(map(variant_segments, [al1, al2]), ws)}
    assert out["samples"] == 2 and out["share_collapsed"] == 0.5
    assert out["mean_reasoning_blocks"] == 2.5 and out["mean_visible_segments"] == 1.5
    assert out["calls_made"] == 3 and out["calls_saved"] == 0
    # al1 sxs tokens: think "r1 r1"(1-2) speak a1(3) think r2(4) speak a2(5) think r3(6)
    # al2: think r1 r2 (1-2) speak a1 (3)
    assert out["latency_sxs"]["mean_abo"] == pytest.approx(((3 + 5) / 2 + 3) / 2)
    # standard al1: think 4 tokens, speak "a1\n\na2" at 5-6 -> abo 5; al2 -> 3
    assert out["latency_standard"]["mean_abo"] == pytest.approx((5 + 3) / 2)
    assert out["latency_standard"]["mean_airw"] == pytest.approx((4 + 2) / 2)


# ------------------------------------------------------------------ the judge prompt

def test_prompt_file_loads_and_renders_numbered_blocks():
    prompt = load_judge_prompt()
    msgs = render_judge_messages(prompt, "Find {{reasoning}} x.", ["r one", "r two"], ["a one"])
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert "Find {{reasoning}} x." in user  # inserted text is not re-substituted
    assert "[R1] r one\n\n[R2] r two" in user and "[A1] a one" in user
    assert "{{" not in msgs[0]["content"] and '"covered"' in msgs[0]["content"]
    assert JUDGE_PROMPT_PATH.is_file()


def test_prompt_is_read_at_call_time(tmp_path: Path):
    path = tmp_path / "judge.md"
    path.write_text("# system\nVersion one.\n# user\n{{reasoning}}\n")
    client = ScriptedClient({})
    seen: list[str] = []
    original = client.chat_json

    async def spy(messages, schema, params=None, **kw):
        seen.append(messages[0]["content"])
        return await original(messages, schema, params, **kw)

    client.chat_json = spy  # type: ignore[method-assign]
    judge = LLMJudge(client, params=SimpleNamespace(), prompt_path=path)
    run(judge.judge("P", ["r"], ["a"]))
    path.write_text("# system\nVersion two.\n# user\n{{reasoning}}\n")
    run(judge.judge("P", ["r"], ["a"]))
    assert seen == ["Version one.", "Version two."]


def test_bad_prompt_files_give_clear_errors(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="prompt"):
        load_judge_prompt(tmp_path / "missing.md")
    (tmp_path / "one.md").write_text("# system\nonly a system part\n")
    with pytest.raises(ValueError, match="# user"):
        load_judge_prompt(tmp_path / "one.md")
    (tmp_path / "ph.md").write_text("# system\nhi\n# user\n{{nope}}\n")
    with pytest.raises(ValueError, match="unknown placeholder"):
        render_judge_messages(load_judge_prompt(tmp_path / "ph.md"), "P", ["r"], ["a"])


@pytest.mark.parametrize("value,ok", [
    ({"covered": 2}, 2), (1, 1), ({"covered": 0}, 0), ({"covered": 2.0}, 2),
    ({"covered": 3}, None), ({"covered": -1}, None), ({"covered": True}, None),
    ({"covered": "2"}, None), ({}, None),
])
def test_parse_coverage_table(value, ok):
    if ok is None:
        with pytest.raises(ValueError):
            parse_coverage(value, 2)
    else:
        assert parse_coverage(value, 2) == ok


def test_coverage_schema_bounds():
    assert coverage_schema(4)["properties"]["covered"]["maximum"] == 4
    assert coverage_schema(4)["required"] == ["covered"]


# ------------------------------------------------------------------ the judge over the real client

def _llm_module():
    return pytest.importorskip("pipelines.llm")


def test_llm_judge_over_real_client_and_fake_http_server():
    llm = _llm_module()
    fake_mod = pytest.importorskip("pipelines.llm.testing")

    def responder(body: dict, index: int) -> str:
        k = max(int(n) for n in _STEP_RE.findall(body["messages"][-1]["content"]))
        return {1: '{"covered": 0}', 2: "I think maybe two?", 3: '{"covered": 2}'}.get(k, '{"covered": 9}')

    async def go(base_url: str):
        client = llm.LLMClient(base_url, "fake-model", use_cache=False, max_retries=0)
        try:
            al = await align_blocks("P", blocks("R", 5), blocks("A", 2), LLMJudge(client),
                                    AlignConfig(mode="sequential"))
            return al, client.drain_records()
        finally:
            await client.aclose()

    with fake_mod.FakeLLMServer(responder=responder) as server:
        al, records = run(go(server.base_url))
    assert al.status == [OK, FAILED, OK, NOT_NEEDED, TERMINAL]
    assert al.repaired == [0, 0, 2, 2, 2]
    assert al.calls_failed == 1
    assert all(rec["tag"] == "sxs/judge" for rec in records)
    assert validate_tagged(al.tagged, blocks("R", 5), blocks("A", 2)) == []


# ------------------------------------------------------------------ real traces

def _load_traces() -> list[tuple[str, str, str, str]]:
    """(source, problem, reasoning, response) for every row of the shared trace files."""
    root = data_dir()
    if root is None or not (root / "traces").is_dir():
        pytest.skip("no shared data directory with traces/ (set WEFT_DATA_DIR)")
    rows = []
    for path in sorted((root / "traces").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            if "thinking_trajectories" in d:  # s1K: a Python list written as text
                reasoning = "\n\n".join(ast.literal_eval(d["thinking_trajectories"]))
                rows.append((path.stem, d["question"], reasoning, d["attempt"]))
            else:
                text = d.get("output") or d.get("generated_solution")
                reasoning, _, response = text.partition("</think>")
                rows.append((path.stem, d.get("instruction") or d.get("problem"),
                             reasoning.replace("<think>", ""), response))
    return rows


class HashJudge:
    """Deterministic pseudo-random coverage that grows with the prefix (not monotone per call)."""

    def __init__(self) -> None:
        self.calls = 0

    async def judge(self, problem: str, reasoning_prefix: Sequence[str], answer_blocks: Sequence[str]):
        self.calls += 1
        k, k_a = len(reasoning_prefix), len(answer_blocks)
        rng = random.Random(zlib.crc32(f"{problem[:50]}|{k}".encode()))
        for _ in range(min(k, 64)):  # longer prefixes finish later, without wall-clock waits
            await asyncio.sleep(0)
        if rng.random() < 0.05:
            return None  # a failed call
        return min(k_a, int(k_a * (k / (k + 20)) * 2 * rng.random()))


def test_round_trips_hold_on_every_shared_trace():
    rows = _load_traces()
    assert len(rows) == 162
    judge = HashJudge()

    async def go():
        return [await align_sample(p, r, a, judge) for _, p, r, a in rows]

    alignments = run(go())
    for (source, _, reasoning, response), al in zip(rows, alignments):
        r, a = segment(reasoning), segment(response)
        assert validate_tagged(al.tagged, r, a) == [], source
        assert validate_alignment(al) == [], source
        assert projection(al.tagged, THINK) == normalize_whitespace(reasoning)
        assert projection(al.tagged, SPEAK) == normalize_whitespace(response)
    summary = summarize_alignments(alignments)
    assert summary["samples"] == 162
    assert summary["calls_made"] + summary["calls_saved"] == sum(al.k_r - 1 for al in alignments)
    assert summary["calls_saved"] > 0 and summary["calls_failed"] > 0


# ------------------------------------------------------------------ the real local model server

@pytest.fixture
def real_client(local_server):
    """An LLMClient on the session's real vLLM server (fixture ``local_server``, tests/conftest.py)."""
    llm = _llm_module()
    return llm.LLMClient(local_server.base_url, local_server.served_name, use_cache=False,
                         max_concurrency=4, timeout_s=120)


# slow: the asset-level real-judge test (tests/assets/test_sxs_assets.py) runs in every suite
@pytest.mark.slow
@pytest.mark.server
def test_real_server_judge_keeps_the_pipeline_correct(real_client):
    # the two shortest real traces with at least 3 reasoning blocks: a few short judge prompts
    # (the CPU server prefills long ones slowly; the asset-level real-server test covers more)
    rows = sorted((row for row in _load_traces() if row[0].startswith("openmathreasoning")
                   and len(segment(row[2])) >= 3), key=lambda row: len(row[2]) + len(row[3]))[:2]
    assert len(rows) == 2

    async def go():
        try:
            return [await align_sample(p, r, a, LLMJudge(real_client)) for _, p, r, a in rows]
        finally:
            await real_client.aclose()

    alignments = run(go())
    for (_, _, reasoning, response), al in zip(rows, alignments):
        assert validate_tagged(al.tagged, segment(reasoning), segment(response)) == []
        assert validate_alignment(al) == []
        assert al.calls_made + al.calls_saved + al.calls_prefiltered == al.k_r - 1
        assert al.calls_failed <= al.calls_made
    assert sum(al.calls_made for al in alignments) > 0
