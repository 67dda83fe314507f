"""Content-latency metrics of think/speak sequences (SxS paper §4.2, Tables 1, 2, 6, 7).

A sequence is a list of ``(kind, content)`` segments, each hidden reasoning (think) or visible
answer text (speak). Model text is split into segments by the tolerant parser of
``pipelines.formats`` (the one home of the tagged format): SxS outputs
``<think>…</think><speak>…</speak>…`` give many blocks; a reason-then-answer output
``<think>r</think>a`` gives one think and one speak block; text with no tags at all is speak
(the user sees all of it). So the same metrics describe both modes of the paper's Table 1: the
interleaved models and the single-mode baselines (base model, standard CoT).

Metrics (positions are 1-indexed over the whole sequence; think and speak tokens both count):

- ARI  -- mean position of all speak tokens.
- ABO  -- mean position of the first token of each maximal speak block (a run of consecutive
  speak segments with no think tokens between them).
- AIRW -- mean length, in tokens, of the think span immediately before each speak block,
  **including the initial wait** (the think span before the first speak block); think tokens
  after the last speak block (SxS's trailing reasoning) do not count. A reason-then-answer
  sequence therefore has AIRW == its reasoning length == ABO - 1.
- AIRW (between) -- §4.2's literal reading, ``airw_between``: the mean length of the think
  spans between two consecutive speak blocks only (n_blocks - 1 spans; the initial wait and
  trailing reasoning are left out). None for a sequence with fewer than two speak blocks, so a
  standard-CoT answer (one block) has no value and is left out of dataset means.
- First substantive disclosure -- position of the first token of the first speak block that
  is not filler (a generic acknowledgement such as "Sure." or "Let me think."), and the filler
  rate: the share of speak blocks that are filler.
- Length breakdown -- total, reasoning (think) and response (speak) tokens.

Why AIRW includes the initial wait: §4.2 words AIRW as the think span "between two consecutive
speak blocks", which read literally leaves a single-block (standard CoT) answer with no AIRW at
all. The paper's Table 1 gives those rows an AIRW equal to their ABO (e.g. Qwen3-4B Standard
CoT SFT: ABO 20,542, AIRW 20,542), which only holds when the wait before the first block is
counted. We follow the tables for ``airw``, so those figures are comparable with them, and
report the literal reading beside it as ``airw_between``: on interleaved outputs the two differ
by how much of the wait is spent before anything is shown.

Tokenisation decision: each segment's *content* is tokenised on its own with
``tokenizer.encode(content, add_special_tokens=False)`` and the tag strings are not counted.
The metrics describe where content appears, not how a particular tokenizer spells the
markup, so they are comparable between the SxS and the standard variant of the same data.
Tokenising segments separately may differ by a token or so at segment boundaries from
tokenising the whole stream; that is accepted. (SxS §4.3 notes that tagging adds a small
overhead in total tokens; here the tags are left out of every count.)

Outputs that show nothing, and outputs that ignore the format. Two choices, both explicit
parameters of :func:`latency_metrics` / :func:`latency_metrics_from_text` whose defaults keep
the descriptive behaviour above (no value without a speak token; untagged text is speak, as
the tolerant parser reads it):

- ``missing_speak="end"``: a sequence with no speak token gets the latency of a block shown
  only after the whole generation. SxS §2.3 defines the first public emission time with "the
  convention k* = K+1 if no A action occurs": the virtual block starts one past the last
  generated token, so ABO = ARI = T + 1 and AIRW = T (the full generated length, every token
  of it waited through), which keeps a reason-then-answer stream's AIRW = ABO - 1.
  ``first_disclosure``, ``airw_between`` and ``filler_rate`` stay ``None``.
- ``untagged="hidden"``: only text opened by an explicit ``<speak>`` tag is shown (SxS Eq. 8:
  the public stream receives only speak actions); think text and any text outside the tags
  count as generated but not shown (:func:`shown_segments`). With the default ``"speak"`` an
  output that ignores the format entirely reads as one speak block at position 1, the best
  latency there is.

:func:`disclosure_latency` applies both (what SxS's latency claim measures, the same for every
arm), and :func:`output_shape` classifies an output for the format counts: ``untagged`` (no
think/speak tag at all, the empty output included), ``malformed`` (tags, but not a clean
stream by the strict parser), ``no_speak``, ``speak_only``, ``think_then_speak`` (the
standard-CoT format) and ``interleaved`` (every other clean stream with both kinds).
:func:`arm_latency` and :func:`paired_latency` give per-problem means over an evaluation's
samples, keeping every problem (one with no shown block scores the full length).

What is not guaranteed: the filler test is a heuristic (a phrase stoplist plus a list of
generic words); with the default ``missing_speak="none"`` metrics that need a speak token are
``None`` for a sequence with none (e.g. a generation truncated while thinking). A generation
cut at the decoding limit has T = the limit, so ``missing_speak="end"`` gives a lower bound on
its latency, never an overstatement.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from pipelines.formats import KINDS, SPEAK, THINK, parse_tagged

# what a sequence with no speak token scores (module docstring)
MISSING_SPEAK = ("none", "end")
# what untagged text is: speak (the tolerant parser's reading) or hidden (only <speak> shows)
UNTAGGED = ("speak", "hidden")
_TAG = re.compile(r"<(/?)(think|speak)>")

# Generic acknowledgements that disclose nothing about the task. Matched case-insensitively as
# whole phrases; what is left after removing them is checked against GENERIC_WORDS.
FILLER_PHRASES: tuple[str, ...] = (
    "sure", "okay", "ok", "alright", "all right", "of course", "certainly", "got it",
    "great question", "good question", "hmm", "well", "let me think", "let me see",
    "let's see", "let us see", "let's think", "let me work this out", "let me solve this",
    "i'll solve this", "i will solve this", "thinking", "one moment", "here we go",
    "step by step", "no problem", "absolutely", "yes", "right",
)
GENERIC_WORDS: frozenset[str] = frozenset(
    ["a", "an", "the", "and", "or", "so", "now", "first", "then", "this", "that", "it", "its", "is", "to", "of", "about", "on", "for", "with", "we", "i", "me", "us", "let", "let's", "lets", "will", "i'll", "need", "carefully", "problem", "question", "task", "solve", "solving", "work", "through", "think", "see", "look", "at", "here", "go", "start", "begin", "answer's"]
)


class Tokenizer(Protocol):
    """Anything with a Hugging Face style ``encode``; only this method is used."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


@dataclass(frozen=True)
class LatencyMetrics:
    """Metrics of one tagged sequence (see the module docstring for definitions)."""

    total_tokens: int
    reasoning_tokens: int
    response_tokens: int
    n_speak_blocks: int
    ari: float | None
    abo: float | None
    airw: float | None
    airw_between: float | None
    first_disclosure: int | None
    filler_rate: float | None

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


class WhitespaceTokenizer:
    """A trivial tokenizer (one token per whitespace-separated word) for tests and quick looks."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [len(word) for word in text.split()]


# ---------------------------------------------------------------------------------------------
# Metrics


def is_filler(text: str, phrases: Sequence[str] = FILLER_PHRASES,
              generic_words: frozenset[str] = GENERIC_WORDS) -> bool:
    """True when ``text`` is only a generic acknowledgement (no task content).

    Removes the stoplist phrases (whole words, case-insensitive), then calls the text filler
    when every remaining word is a generic word and no digit or math symbol is left.
    """
    lowered = text.lower().replace("\u2019", "'")
    for phrase in sorted(phrases, key=len, reverse=True):
        lowered = re.sub(rf"(?<![\w']){re.escape(phrase.lower())}(?![\w'])", " ", lowered)
    if re.search(r"[0-9=+\-*/^\\$<>()\[\]{}|]", lowered):
        return False
    words = re.findall(r"[a-z']+", lowered)
    return all(word in generic_words for word in words)


def _token_count(tokenizer: Tokenizer, content: str) -> int:
    return len(tokenizer.encode(content, add_special_tokens=False))


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def latency_metrics(segments: Sequence[tuple[str, str]], tokenizer: Tokenizer, *,
                    filler_phrases: Sequence[str] = FILLER_PHRASES,
                    missing_speak: str = "none") -> LatencyMetrics:
    """Compute the metrics of one sequence given as ``(kind, content)`` segments.

    Segments whose content has no tokens are ignored (they neither separate nor form blocks).
    ``missing_speak``: ``"none"`` leaves the speak metrics of a sequence without a speak token
    ``None``; ``"end"`` scores it as a block shown after the whole generation (SxS §2.3's
    k* = K+1: ABO = ARI = T + 1, AIRW = T; module docstring).
    """
    _check_choice("missing_speak", missing_speak, MISSING_SPEAK)
    # Collapse into maximal runs: (kind, n_tokens, text of the run).
    runs: list[list[Any]] = []
    for kind, content in segments:
        if kind not in KINDS:
            raise ValueError(f"segment kind must be 'think' or 'speak', got {kind!r}")
        n = _token_count(tokenizer, content)
        if n == 0:
            continue
        if runs and runs[-1][0] == kind:
            runs[-1][1] += n
            runs[-1][2].append(content)
        else:
            runs.append([kind, n, [content]])

    position = 0  # tokens emitted so far
    think_since_speak = 0
    speak_tokens = think_tokens = 0
    speak_position_sum = 0.0
    block_starts: list[int] = []
    waits: list[int] = []
    filler_flags: list[bool] = []
    first_disclosure: int | None = None
    for kind, n, texts in runs:
        if kind == THINK:
            think_tokens += n
            think_since_speak += n
        else:
            start = position + 1
            block_starts.append(start)
            waits.append(think_since_speak)
            think_since_speak = 0
            speak_tokens += n
            # positions start .. start+n-1, their sum is n*start + n(n-1)/2
            speak_position_sum += n * start + n * (n - 1) / 2
            filler = is_filler(" ".join(texts), filler_phrases)
            filler_flags.append(filler)
            if not filler and first_disclosure is None:
                first_disclosure = start
        position += n

    n_blocks = len(block_starts)
    if n_blocks == 0 and missing_speak == "end":
        end = float(position + 1)  # the block a user would see once generation stops
        return LatencyMetrics(total_tokens=position, reasoning_tokens=think_tokens,
                              response_tokens=0, n_speak_blocks=0, ari=end, abo=end,
                              airw=float(position), airw_between=None, first_disclosure=None,
                              filler_rate=None)
    return LatencyMetrics(
        total_tokens=position,
        reasoning_tokens=think_tokens,
        response_tokens=speak_tokens,
        n_speak_blocks=n_blocks,
        ari=speak_position_sum / speak_tokens if speak_tokens else None,
        abo=sum(block_starts) / n_blocks if n_blocks else None,
        airw=sum(waits) / n_blocks if n_blocks else None,
        airw_between=sum(waits[1:]) / (n_blocks - 1) if n_blocks > 1 else None,
        first_disclosure=first_disclosure,
        filler_rate=sum(filler_flags) / n_blocks if n_blocks else None,
    )


def shown_segments(text: str) -> list[tuple[str, str]]:
    """``(kind, content)`` segments of model text where only text opened by an explicit
    ``<speak>`` tag is speak; think text and text outside any tag are think (generated, not
    shown). A tag opening while another is open switches to it, a closing tag of the open kind
    closes it, any other closing tag is dropped (as the tolerant parser does), an unclosed
    last block runs to the end. Whitespace-only pieces are dropped. Never raises."""
    if not isinstance(text, str):
        raise TypeError(f"shown_segments needs a str, got {type(text).__name__}")
    segments: list[tuple[str, str]] = []
    pos, open_kind = 0, None

    def add(chunk: str) -> None:
        if chunk.strip():
            segments.append((SPEAK if open_kind == SPEAK else THINK, chunk))

    for match in _TAG.finditer(text):
        add(text[pos:match.start()])
        closing, kind = match.group(1) == "/", match.group(2)
        if not closing:
            open_kind = kind
        elif kind == open_kind:
            open_kind = None
        pos = match.end()
    add(text[pos:])
    return segments


def latency_metrics_from_text(text: str, tokenizer: Tokenizer, *, strict: bool = False,
                              filler_phrases: Sequence[str] = FILLER_PHRASES,
                              untagged: str = "speak",
                              missing_speak: str = "none") -> LatencyMetrics:
    """Parse a tagged string (tolerantly by default: model output) and compute its metrics.

    ``untagged="speak"`` (default) parses with ``pipelines.formats.parse_tagged`` (``strict``
    or tolerant), where untagged text is speak; ``untagged="hidden"`` shows only explicit
    ``<speak>`` blocks (:func:`shown_segments`; ``strict`` must then be False).
    ``missing_speak`` as in :func:`latency_metrics`.
    """
    _check_choice("untagged", untagged, UNTAGGED)
    if untagged == "hidden":
        if strict:
            raise ValueError("untagged='hidden' reads model output and cannot be strict; pass "
                             "strict=False, or untagged='speak' to parse built data strictly")
        segments = shown_segments(text)
    else:
        segments = parse_tagged(text, strict=strict)
    return latency_metrics(segments, tokenizer, filler_phrases=filler_phrases,
                           missing_speak=missing_speak)


METRIC_FIELDS = ("total_tokens", "reasoning_tokens", "response_tokens", "n_speak_blocks",
                 "ari", "abo", "airw", "airw_between", "first_disclosure", "filler_rate")


def summarize_latency(metrics: Iterable[LatencyMetrics]) -> dict[str, float | int | None]:
    """Dataset-level means of every metric (a ``None`` value is left out of its own mean).

    Adds ``n`` (sequences) and ``n_without_speak`` (sequences whose speak metrics are None).
    """
    items = list(metrics)
    out: dict[str, float | int | None] = {"n": len(items)}
    for name in METRIC_FIELDS:
        values = [getattr(m, name) for m in items if getattr(m, name) is not None]
        out[f"mean_{name}"] = sum(values) / len(values) if values else None
    out["n_without_speak"] = sum(1 for m in items if m.ari is None)
    return out


def summarize_variants(samples: Iterable[Mapping[str, Sequence[tuple[str, str]]]],
                       tokenizer: Tokenizer) -> dict[str, dict[str, float | int | None]]:
    """Dataset-level latency of several renderings of the same samples, one summary per name.

    Each item maps a variant name to that sample's ``(kind, content)`` segments (e.g.
    ``pipelines.sxs_align.variant_segments``: ``{"sxs": …, "standard": …}``); the result maps
    ``"latency_<name>"`` to :func:`summarize_latency` of that variant over all samples.
    Every sample must have the same variant names.
    """
    per_variant: dict[str, list[LatencyMetrics]] = {}
    names: tuple[str, ...] | None = None
    for index, variants in enumerate(samples):
        if names is None:
            names = tuple(variants)
        elif tuple(variants) != names:
            raise ValueError(f"sample {index} has variants {sorted(variants)}, the first sample "
                             f"has {sorted(names)}; give every sample the same variants")
        for name, segments in variants.items():
            per_variant.setdefault(name, []).append(latency_metrics(segments, tokenizer))
    return {f"latency_{name}": summarize_latency(items) for name, items in per_variant.items()}


# ---------------------------------------------------------------------------------------------
# Format failures and per-problem latency of an evaluation (SxS's latency claim)

SHAPE_UNTAGGED = "untagged"
SHAPE_MALFORMED = "malformed"
SHAPE_NO_SPEAK = "no_speak"
SHAPE_SPEAK_ONLY = "speak_only"
SHAPE_THINK_THEN_SPEAK = "think_then_speak"
SHAPE_INTERLEAVED = "interleaved"
SHAPES = (SHAPE_UNTAGGED, SHAPE_MALFORMED, SHAPE_NO_SPEAK, SHAPE_SPEAK_ONLY,
          SHAPE_THINK_THEN_SPEAK, SHAPE_INTERLEAVED)
# the shapes that follow each SFT arm's format: standard CoT is one think block, then one speak
# block (the ``standard`` rows of ``sxs_sft_dataset``); SxS is a clean think/speak stream with
# both kinds (``pipelines.formats.has_sxs_format``; a trace the judge collapsed is
# think-then-speak, so that shape follows it too)
ARM_FORMATS: dict[str, frozenset[str]] = {
    "standard": frozenset({SHAPE_THINK_THEN_SPEAK}),
    "sxs": frozenset({SHAPE_THINK_THEN_SPEAK, SHAPE_INTERLEAVED}),
}


def output_shape(text: str) -> str:
    """The shape of one model output (one of :data:`SHAPES`, module docstring): ``untagged``
    when it has no think/speak tag (the empty output too), ``malformed`` when the strict parser
    rejects it, else the clean stream's shape from its non-empty blocks."""
    if not _TAG.search(text or ""):
        return SHAPE_UNTAGGED
    try:
        segments = parse_tagged(text, strict=True)
    except ValueError:
        return SHAPE_MALFORMED
    runs: list[str] = []
    for kind, content in segments:
        if content.strip() and (not runs or runs[-1] != kind):
            runs.append(kind)
    if SPEAK not in runs:
        return SHAPE_NO_SPEAK
    if THINK not in runs:
        return SHAPE_SPEAK_ONLY
    return SHAPE_THINK_THEN_SPEAK if runs == [THINK, SPEAK] else SHAPE_INTERLEAVED


def follows_arm_format(text: str, arm: str) -> bool:
    """Whether ``text`` follows the format the SFT arm ``arm`` (``standard`` or ``sxs``) was
    trained on (:data:`ARM_FORMATS`)."""
    if arm not in ARM_FORMATS:
        raise ValueError(f"arm must be one of {sorted(ARM_FORMATS)}, got {arm!r}")
    return output_shape(text) in ARM_FORMATS[arm]


def disclosure_latency(text: str, tokenizer: Tokenizer) -> LatencyMetrics:
    """The latency an output shows its user, the same rule for every arm: only explicit
    ``<speak>`` blocks are shown, and an output that shows nothing scores a block after its
    whole generation (ABO = T + 1, AIRW = T; module docstring)."""
    return latency_metrics_from_text(text or "", tokenizer, untagged="hidden",
                                     missing_speak="end")


@dataclass(frozen=True)
class ArmLatency:
    """One arm's evaluation under :func:`disclosure_latency`: per-problem means of ABO and
    AIRW over its samples, and how its outputs were formed."""

    abo: dict[str, float]
    airw: dict[str, float]
    samples: int
    errored: int  # samples whose generation failed: left out (no model output to measure)
    without_shown_block: int  # samples scored as the full length (no explicit speak block)
    shapes: dict[str, int] = field(default_factory=dict)  # output_shape counts

    def format_following(self, arm: str) -> float | None:
        """Share of the measured samples in ``arm``'s format (None with no sample)."""
        if arm not in ARM_FORMATS:
            raise ValueError(f"arm must be one of {sorted(ARM_FORMATS)}, got {arm!r}")
        measured = self.samples - self.errored
        if measured == 0:
            return None
        return sum(self.shapes.get(s, 0) for s in ARM_FORMATS[arm]) / measured

    def summary(self, arm: str) -> dict[str, Any]:
        """The figures a claim page shows for this arm."""
        return {"samples": self.samples, "errored": self.errored,
                "problems": len(self.abo), "without_shown_block": self.without_shown_block,
                "untagged": self.shapes.get(SHAPE_UNTAGGED, 0),
                "malformed": self.shapes.get(SHAPE_MALFORMED, 0),
                "shapes": dict(self.shapes), "format_following": self.format_following(arm)}


def arm_latency(samples: Iterable[Mapping[str, Any]], tokenizer: Tokenizer) -> ArmLatency:
    """Per-problem ABO and AIRW (:func:`disclosure_latency`, mean over a problem's samples) of
    ``eval_samples`` rows (``problem_id``, ``output``, optional ``gen_error``). Every problem
    with a generated sample has both values; a sample whose generation failed is left out and
    counted."""
    sums: dict[str, list[float]] = {}
    shapes: Counter[str] = Counter()
    total = errored = hidden = 0
    for row in samples:
        total += 1
        if row.get("gen_error"):
            errored += 1
            continue
        text = row.get("output") or ""
        shapes[output_shape(text)] += 1
        m = disclosure_latency(text, tokenizer)
        hidden += m.n_speak_blocks == 0
        acc = sums.setdefault(str(row["problem_id"]), [0.0, 0.0, 0])
        acc[0] += float(m.abo)
        acc[1] += float(m.airw)
        acc[2] += 1
    return ArmLatency(abo={p: a / n for p, (a, _, n) in sums.items()},
                      airw={p: w / n for p, (_, w, n) in sums.items()},
                      samples=total, errored=errored, without_shown_block=hidden,
                      shapes={s: shapes[s] for s in SHAPES if shapes[s]})


def paired_latency(reference: ArmLatency, treatment: ArmLatency, metric: str
                   ) -> tuple[dict[str, float], dict[str, float]]:
    """Both arms' per-problem ``metric`` (``abo`` or ``airw``) on the problems both evaluated.
    No problem is left out for showing nothing (it scores the full length); only a problem
    whose every sample failed to generate in one arm is missing there."""
    if metric not in ("abo", "airw"):
        raise ValueError(f"metric must be 'abo' or 'airw', got {metric!r}")
    ref, treat = getattr(reference, metric), getattr(treatment, metric)
    both = sorted(set(ref) & set(treat))
    return {p: ref[p] for p in both}, {p: treat[p] for p in both}
