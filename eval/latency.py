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

What is not guaranteed: the filler test is a heuristic (a phrase stoplist plus a list of
generic words); metrics that need a speak token are ``None`` for a sequence with none (e.g. a
generation truncated while thinking).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from pipelines.formats import KINDS, THINK, parse_tagged

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


def latency_metrics(segments: Sequence[tuple[str, str]], tokenizer: Tokenizer, *,
                    filler_phrases: Sequence[str] = FILLER_PHRASES) -> LatencyMetrics:
    """Compute the metrics of one sequence given as ``(kind, content)`` segments.

    Segments whose content has no tokens are ignored (they neither separate nor form blocks).
    """
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


def latency_metrics_from_text(text: str, tokenizer: Tokenizer, *, strict: bool = False,
                              filler_phrases: Sequence[str] = FILLER_PHRASES) -> LatencyMetrics:
    """Parse a tagged string (tolerantly by default: model output) and compute its metrics."""
    return latency_metrics(parse_tagged(text, strict=strict), tokenizer, filler_phrases=filler_phrases)


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
