"""SxS: align a reasoning trace with its answer and interleave them as think/speak data.

From a (problem x, reasoning r, answer a) triple this module builds one tagged stream
``<think>…</think><speak>…</speak>…`` in which each piece of the answer appears right after the
reasoning block that first supports it. Steps:

1. ``segment``: normalise whitespace and split r and a into blocks on blank lines.
2. A coverage judge (``CoverageJudge``; ``LLMJudge`` asks an LLM with the prompt in
   ``prompts/sxs_judge.md``) says, for each reasoning prefix R[1..k], how many leading answer
   blocks it already supports. All prefixes are judged concurrently; as soon as a prefix k
   reports full coverage, pending calls for prefixes after k are cancelled (pending calls for
   earlier prefixes are not). ``mode="sequential"`` judges one prefix at a time instead and
   stops at the first full coverage (the baseline of ``bench/sxs_alignment.py``).
3. ``monotone_repair`` (ℓ_k = max(ℓ_{k-1}, raw_k), a failed call is no new coverage) and the
   terminal safeguard ℓ_{K_R} = K_A.
4. ``interleave`` emits the segments; ``to_tagged`` writes the stream; ``validate_tagged``
   checks that the think projection gives back R and the speak projection gives back A.

Separator decision: blocks never contain a blank line, and the blocks inside one segment are
joined with ``BLOCK_SEP`` ("\\n\\n"), so splitting a segment's content on ``BLOCK_SEP`` gives
its blocks back exactly, and joining all think (speak) contents with ``BLOCK_SEP`` gives the
normalised reasoning (answer) text. The prefix for K_R is not sent to the judge by default:
the safeguard overrides it anyway (``AlignConfig.judge_terminal=True`` asks it, for studies).

Not guaranteed: that the judge is right (a small model judges badly; the output is still a
valid stream), and the optional pre-filter is a heuristic whose agreement with the judge is
measured by the benchmark, not assumed. Blocks containing the tag strings themselves cannot be
represented; ``validate_tagged`` reports them.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pipelines.formats import (
    RESERVED_TAGS,
    SPEAK,
    SXS_SYSTEM_PROMPT,
    THINK,
    parse_tagged,
    render_tagged,
)
from pipelines.sxs_judge import BLOCK_SEP, CoverageJudge, evidence, parse_coverage, prefilter_skips

# Per-prefix status in an alignment record.
OK = "ok"                  # judge answered with a valid count
FAILED = "failed"          # judge call finished without a valid count (no new coverage)
CANCELLED = "cancelled"    # call launched, cancelled after an earlier prefix reached K_A
NOT_NEEDED = "not_needed"  # sequential mode: never called, full coverage already reached
PREFILTERED = "prefiltered"  # pre-filter decided "nothing new" without calling the judge
TERMINAL = "terminal"      # last prefix: set to K_A by the safeguard, not judged
STATUSES = (OK, FAILED, CANCELLED, NOT_NEEDED, PREFILTERED, TERMINAL)


# ---------------------------------------------------------------------------------------------
# Segmentation


def normalize_whitespace(text: str) -> str:
    """CRLF/CR to LF, trailing spaces removed from every line, blank-line runs to one blank line."""
    if not isinstance(text, str):
        raise TypeError(f"expected text as str, got {type(text).__name__}")
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return re.sub(r"\n{2,}", BLOCK_SEP, "\n".join(lines)).strip("\n")


def segment(text: str) -> list[str]:
    """Blocks of ``text``: split on blank lines after ``normalize_whitespace``; empty ones dropped.

    Deterministic and idempotent: ``segment(join_blocks(segment(t))) == segment(t)``. Leading
    indentation of a block's first line is kept.
    """
    return [block for block in normalize_whitespace(text).split(BLOCK_SEP) if block.strip()]


def join_blocks(blocks: Sequence[str]) -> str:
    return BLOCK_SEP.join(blocks)


@dataclass(frozen=True)
class Segment:
    """One think or speak segment: consecutive blocks, joined by ``BLOCK_SEP`` in the stream."""

    kind: str
    blocks: tuple[str, ...]

    @property
    def text(self) -> str:
        return join_blocks(self.blocks)


# ---------------------------------------------------------------------------------------------
# Alignment


@dataclass(frozen=True)
class AlignConfig:
    mode: Literal["parallel", "sequential"] = "parallel"
    prefilter: bool = False
    judge_terminal: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("parallel", "sequential"):
            raise ValueError(f"AlignConfig.mode must be 'parallel' or 'sequential', got {self.mode!r}")


@dataclass
class Alignment:
    """Per-sample record. Lists are indexed by prefix k = 1..K_R (position k-1)."""

    k_r: int
    k_a: int
    raw: list[int | None]          # judge outputs; None where there is none (see status)
    status: list[str]
    repaired: list[int]            # monotone, with the terminal safeguard
    segments: list[Segment]
    mode: str
    prefilter: bool
    rounds: int                    # judge calls on the critical path (unbounded concurrency)
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def _count(self, *which: str) -> int:
        return sum(1 for s in self.status if s in which)

    @property
    def calls_made(self) -> int:
        return self._count(OK, FAILED)

    @property
    def calls_failed(self) -> int:
        return self._count(FAILED)

    @property
    def calls_cancelled(self) -> int:
        return self._count(CANCELLED)

    @property
    def calls_saved(self) -> int:
        """Judge calls avoided because full coverage was already known (cancelled or never made)."""
        return self._count(CANCELLED, NOT_NEEDED)

    @property
    def calls_prefiltered(self) -> int:
        return self._count(PREFILTERED)

    @property
    def n_visible_segments(self) -> int:
        return sum(1 for s in self.segments if s.kind == SPEAK)

    @property
    def collapsed(self) -> bool:
        """True when the result is plain reason-then-answer (one speak segment, at the end)."""
        return self.n_visible_segments == 1 and self.segments[-1].kind == SPEAK

    @property
    def tagged(self) -> str:
        return to_tagged(self.segments)

    def to_row(self) -> dict[str, Any]:
        return {
            "k_r": self.k_r, "k_a": self.k_a, "raw": list(self.raw), "status": list(self.status),
            "repaired": list(self.repaired), "calls_made": self.calls_made,
            "calls_saved": self.calls_saved, "calls_cancelled": self.calls_cancelled,
            "calls_failed": self.calls_failed, "calls_prefiltered": self.calls_prefiltered,
            "n_segments": len(self.segments), "n_visible_segments": self.n_visible_segments,
            "collapsed": self.collapsed, "mode": self.mode, "prefilter": self.prefilter,
            "rounds": self.rounds, "elapsed_s": self.elapsed_s, "tagged": self.tagged,
        }


def monotone_repair(raw: Sequence[int | None], k_a: int) -> list[int]:
    """ℓ_k = max(ℓ_{k-1}, raw_k) with ℓ_0 = 0; None (no valid answer) means no new coverage."""
    levels: list[int] = []
    level = 0
    for value in raw:
        if value is not None:
            level = max(level, min(max(int(value), 0), k_a))
        levels.append(level)
    return levels


def apply_terminal_safeguard(levels: Sequence[int], k_a: int) -> list[int]:
    """ℓ_{K_R} = K_A whatever the judge said."""
    out = list(levels)
    if out:
        out[-1] = k_a
    return out


def interleave(reasoning: Sequence[str], answer: Sequence[str], levels: Sequence[int]) -> list[Segment]:
    """Segments from repaired coverage levels (``levels[k-1]`` = ℓ_k, ending at K_A)."""
    if len(levels) != len(reasoning):
        raise ValueError(f"need one coverage level per reasoning block: {len(levels)} levels for "
                         f"{len(reasoning)} blocks")
    if reasoning and levels[-1] != len(answer):
        raise ValueError(f"last level must equal K_A={len(answer)} (terminal safeguard), got {levels[-1]}")
    segments: list[Segment] = []
    open_blocks: list[str] = []
    previous = 0
    for k, (block, level) in enumerate(zip(reasoning, levels), start=1):
        if level < previous:
            raise ValueError(f"levels must be non-decreasing; ℓ_{k}={level} < ℓ_{k - 1}={previous}")
        open_blocks.append(block)
        if level > previous:
            segments.append(Segment(THINK, tuple(open_blocks)))
            segments.append(Segment(SPEAK, tuple(answer[previous:level])))
            open_blocks, previous = [], level
            if previous == len(answer) and k < len(reasoning):
                segments.append(Segment(THINK, tuple(reasoning[k:])))  # trailing self-checks
                break
    return segments


def standard_segments(reasoning: Sequence[str], answer: Sequence[str]) -> list[Segment]:
    """The baseline: all reasoning, then all answer."""
    return [s for s in (Segment(THINK, tuple(reasoning)), Segment(SPEAK, tuple(answer))) if s.blocks]


def to_tagged(segments: Sequence[Segment]) -> str:
    return render_tagged((s.kind, s.text) for s in segments)


def projection(tagged: str, kind: str) -> str:
    """All ``kind`` text of a stream, contents joined with ``BLOCK_SEP`` (strict parse)."""
    return BLOCK_SEP.join(content for k, content in parse_tagged(tagged, strict=True) if k == kind)


def _check_blocks(name: str, blocks: Sequence[str]) -> list[str]:
    problems = []
    for i, block in enumerate(blocks, 1):
        for tag in RESERVED_TAGS:
            if tag in block:
                problems.append(f"{name} block {i} contains the reserved tag {tag}; such a sample "
                                "cannot be written in the tagged format (drop or escape it)")
        if not block.strip() or BLOCK_SEP in block:
            problems.append(f"{name} block {i} is empty or contains a blank line; blocks must "
                            "come from segment()")
    return problems


async def _gather_cancelled(tasks: Sequence[asyncio.Task[Any]]) -> None:
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


def _prefix_evidence(problem: str, reasoning: Sequence[str]) -> list[frozenset[str]]:
    """Evidence of problem + R[1..k] for k = 1..K_R, grown block by block (linear, not quadratic)."""
    have, out = set(evidence(problem)), []
    for block in reasoning:
        have |= evidence(block)
        out.append(frozenset(have))
    return out


def _valid(value: Any, k_a: int) -> int | None:
    try:
        return parse_coverage(value, k_a) if value is not None else None
    except ValueError:
        return None


async def _judge_parallel(judge: CoverageJudge, problem: str, reasoning: Sequence[str],
                          answer: Sequence[str], prefixes: Sequence[int], prefilter: bool,
                          raw: dict[int, int | None], status: dict[int, str]) -> int:
    k_a = len(answer)
    tasks: dict[asyncio.Task[Any], int] = {}
    have = _prefix_evidence(problem, reasoning) if prefilter else []
    for k in prefixes:
        # At launch nothing is known to be covered, so the pre-filter looks at A[1].
        if prefilter and prefilter_skips(have[k - 1], answer, 0):
            raw[k], status[k] = 0, PREFILTERED
        else:
            tasks[asyncio.create_task(judge.judge(problem, reasoning[:k], answer))] = k
    pending = set(tasks)
    cancelled: list[asyncio.Task[Any]] = []
    cutoff: int | None = None
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=tasks.__getitem__):
                k = tasks[task]
                raw[k] = _valid(task.result(), k_a)  # a raising judge aborts the sample
                status[k] = OK if raw[k] is not None else FAILED
                if raw[k] == k_a and (cutoff is None or k < cutoff):
                    cutoff = k
            if cutoff is not None:  # later prefixes are covered too: stop asking about them
                for task in [t for t in pending if tasks[t] > cutoff]:
                    task.cancel()
                    cancelled.append(task)
                    pending.discard(task)
    except BaseException:
        for task in pending:
            task.cancel()
        await _gather_cancelled([*pending, *cancelled])
        raise
    await _gather_cancelled(cancelled)
    for task in cancelled:  # a judge that ignored the cancellation still made its call
        k = tasks[task]
        if task.cancelled() or task.exception() is not None:
            raw[k], status[k] = None, CANCELLED
        else:
            raw[k] = _valid(task.result(), k_a)
            status[k] = OK if raw[k] is not None else FAILED
    return 1 if tasks else 0


async def _judge_sequential(judge: CoverageJudge, problem: str, reasoning: Sequence[str],
                            answer: Sequence[str], prefixes: Sequence[int], prefilter: bool,
                            raw: dict[int, int | None], status: dict[int, str]) -> int:
    k_a, level, rounds = len(answer), 0, 0
    have = _prefix_evidence(problem, reasoning) if prefilter else []
    for k in prefixes:
        if level >= k_a:
            raw[k], status[k] = None, NOT_NEEDED
        elif prefilter and prefilter_skips(have[k - 1], answer, level):
            raw[k], status[k] = level, PREFILTERED
        else:
            rounds += 1
            raw[k] = _valid(await judge.judge(problem, reasoning[:k], answer), k_a)
            status[k] = OK if raw[k] is not None else FAILED
            level = max(level, raw[k] or 0)
    return rounds


async def align_blocks(problem: str, reasoning: Sequence[str], answer: Sequence[str],
                       judge: CoverageJudge, config: AlignConfig = AlignConfig()) -> Alignment:
    """Judge every prefix, repair, and interleave. Blocks must come from ``segment``.

    Raises ValueError for a sample with no reasoning or no answer blocks (quarantine it).
    Exceptions raised by the judge itself (e.g. an unreachable endpoint) propagate after the
    sample's pending calls are cancelled; a judge returning None or an invalid count is a
    counted failure, not an exception.
    """
    if not reasoning:
        raise ValueError("sample has no reasoning blocks after segmentation; nothing to interleave "
                         "(drop the sample or fix its reasoning field)")
    if not answer:
        raise ValueError("sample has no answer blocks after segmentation; nothing to speak "
                         "(drop the sample or fix its response field)")
    k_r, k_a = len(reasoning), len(answer)
    prefixes = list(range(1, k_r + (1 if config.judge_terminal else 0)))
    raw: dict[int, int | None] = {}
    status: dict[int, str] = {k_r: TERMINAL}
    run = _judge_parallel if config.mode == "parallel" else _judge_sequential
    started = time.perf_counter()
    rounds = await run(judge, problem, reasoning, answer, prefixes, config.prefilter, raw, status)
    elapsed = time.perf_counter() - started
    raw_list = [raw.get(k) for k in range(1, k_r + 1)]
    repaired = apply_terminal_safeguard(monotone_repair(raw_list, k_a), k_a)
    return Alignment(
        k_r=k_r, k_a=k_a, raw=raw_list, status=[status[k] for k in range(1, k_r + 1)],
        repaired=repaired, segments=interleave(reasoning, answer, repaired), mode=config.mode,
        prefilter=config.prefilter, rounds=rounds, elapsed_s=elapsed,
    )


async def align_sample(problem: str, reasoning: str, response: str, judge: CoverageJudge,
                       config: AlignConfig = AlignConfig()) -> Alignment:
    """``align_blocks`` on the segmented reasoning and response texts."""
    return await align_blocks(problem, segment(reasoning), segment(response), judge, config)


# ---------------------------------------------------------------------------------------------
# Validators (pure; used as asset checks): each returns a list of problems, empty when fine.


def validate_tagged(tagged: str, reasoning: Sequence[str], answer: Sequence[str]) -> list[str]:
    """Round trip: the stream parses, and its projections give back exactly R and A."""
    problems = _check_blocks("reasoning", reasoning) + _check_blocks("answer", answer)
    try:
        segments = parse_tagged(tagged, strict=True)
    except ValueError as exc:
        return problems + [f"not a well-formed tagged stream: {exc}"]
    for i, (kind, content) in enumerate(segments):
        if not content.strip():
            problems.append(f"segment {i} ({kind}) is empty")
        if i and segments[i - 1][0] == kind:
            problems.append(f"segments {i - 1} and {i} are both {kind}; they should be one segment")
    if segments and reasoning and segments[0][0] != THINK:
        problems.append("stream does not start with a think segment")
    for kind, name, blocks in ((THINK, "think", reasoning), (SPEAK, "speak", answer)):
        got = [b for k, c in segments if k == kind for b in c.split(BLOCK_SEP)]
        if got != list(blocks):
            first = next((i for i, (a, b) in enumerate(zip(got, blocks)) if a != b), min(len(got), len(blocks)))
            problems.append(f"{name} projection differs from the original blocks: {len(got)} blocks "
                            f"vs {len(blocks)}, first difference at block {first + 1}")
    return problems


def validate_alignment(alignment: Alignment) -> list[str]:
    """Internal consistency of a record: lengths, monotone levels, safeguard, statuses, segments."""
    a, problems = alignment, []
    for name in ("raw", "status", "repaired"):
        if len(getattr(a, name)) != a.k_r:
            problems.append(f"{name} has {len(getattr(a, name))} entries for K_R={a.k_r}")
    if any(y < x for x, y in zip(a.repaired, a.repaired[1:])):
        problems.append(f"repaired levels are not monotone: {a.repaired}")
    if any(not 0 <= v <= a.k_a for v in a.repaired):
        problems.append(f"repaired levels outside 0..{a.k_a}")
    if a.repaired and a.repaired[-1] != a.k_a:
        problems.append(f"terminal safeguard violated: ℓ_K_R={a.repaired[-1]} != K_A={a.k_a}")
    if any(s not in STATUSES for s in a.status):
        problems.append(f"unknown statuses: {sorted(set(a.status) - set(STATUSES))}")
    if a.repaired != apply_terminal_safeguard(monotone_repair(a.raw, a.k_a), a.k_a):
        problems.append("repaired levels do not follow from the raw judge outputs")
    think = [b for s in a.segments if s.kind == THINK for b in s.blocks]
    speak = [b for s in a.segments if s.kind == SPEAK for b in s.blocks]
    if len(think) != a.k_r or len(speak) != a.k_a:
        problems.append(f"segments hold {len(think)} reasoning / {len(speak)} answer blocks, "
                        f"expected {a.k_r} / {a.k_a}")
    if a.n_visible_segments < 1:
        problems.append("no visible (speak) segment")
    return problems


# ---------------------------------------------------------------------------------------------
# SFT rows and the dataset summary


def sft_row(problem: str, segments: Sequence[Segment], *, style: Literal["chat", "text"] = "chat",
            system_prompt: str = SXS_SYSTEM_PROMPT) -> dict[str, Any]:
    """A TRL prompt-completion row whose completion is the tagged stream.

    ``chat``: prompt = [system, user] messages, completion = [assistant message] (TRL's
    conversational prompt-completion format). ``text``: both are plain strings.
    """
    completion = to_tagged(segments)
    if style == "chat":
        return {"prompt": [{"role": "system", "content": system_prompt},
                           {"role": "user", "content": problem}],
                "completion": [{"role": "assistant", "content": completion}]}
    if style == "text":
        return {"prompt": f"{system_prompt}\n\nProblem:\n{problem}\n\nResponse:\n",
                "completion": completion}
    raise ValueError(f"style must be 'chat' or 'text', got {style!r}")


def sft_rows(problem: str, alignment: Alignment, *, style: Literal["chat", "text"] = "chat",
             system_prompt: str = SXS_SYSTEM_PROMPT) -> dict[str, dict[str, Any]]:
    """Both variants of one sample: ``{"sxs": row, "standard": row}`` (same prompt)."""
    reasoning = [b for s in alignment.segments if s.kind == THINK for b in s.blocks]
    answer = [b for s in alignment.segments if s.kind == SPEAK for b in s.blocks]
    return {
        "sxs": sft_row(problem, alignment.segments, style=style, system_prompt=system_prompt),
        "standard": sft_row(problem, standard_segments(reasoning, answer), style=style,
                            system_prompt=system_prompt),
    }


def variant_segments(alignment: Alignment) -> dict[str, list[tuple[str, str]]]:
    """The ``(kind, content)`` segments of both SFT variants of one sample, ``sxs`` and
    ``standard`` (what ``eval.latency.summarize_variants`` measures)."""
    reasoning = [b for s in alignment.segments if s.kind == THINK for b in s.blocks]
    answer = [b for s in alignment.segments if s.kind == SPEAK for b in s.blocks]
    return {variant: [(s.kind, s.text) for s in segments] for variant, segments in
            (("sxs", alignment.segments), ("standard", standard_segments(reasoning, answer)))}


def summarize_alignments(alignments: Sequence[Alignment]) -> dict[str, Any]:
    """Dataset-level alignment figures (content latency is measured in ``eval.latency``:
    ``summarize_variants(map(variant_segments, alignments), tokenizer)``)."""
    n = len(alignments)

    def mean(values: Sequence[float]) -> float | None:
        return sum(values) / len(values) if values else None

    made = sum(a.calls_made for a in alignments)
    saved = sum(a.calls_saved for a in alignments)
    out: dict[str, Any] = {
        "samples": n,
        "mean_reasoning_blocks": mean([a.k_r for a in alignments]),
        "mean_answer_blocks": mean([a.k_a for a in alignments]),
        "mean_visible_segments": mean([a.n_visible_segments for a in alignments]),
        "share_collapsed": mean([float(a.collapsed) for a in alignments]),
        "calls_made": made,
        "calls_saved": saved,
        "calls_cancelled": sum(a.calls_cancelled for a in alignments),
        "calls_failed": sum(a.calls_failed for a in alignments),
        "calls_prefiltered": sum(a.calls_prefiltered for a in alignments),
        "share_calls_saved": saved / (made + saved) if made + saved else None,
        "mean_rounds": mean([a.rounds for a in alignments]),
    }
    return out


def hf_tokenizer(path: str) -> Any:
    """The transformers tokenizer of the model folder at ``path`` (the token counts of SFT rows
    and the latency metrics of alignments are taken with it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)
