"""Content-latency metrics for think/speak sequences, and the parser for the tagged format.

A *tagged sequence* is one stream of segments, each either hidden reasoning or visible answer
text: ``<think>…</think><speak>…</speak><think>…</think>…``. SxS training data (see
``pipelines/sxs.py``) is written in this format, and models trained on it answer in it.

Metrics (positions are 1-indexed over the whole sequence; think and speak tokens both count):

- ARI  -- mean position of all speak tokens.
- ABO  -- mean position of the first token of each maximal speak block (a run of consecutive
  speak segments with no think tokens between them).
- AIRW -- mean length, in tokens, of the think span immediately before each speak block. The
  span before the first speak block counts (the initial wait); think tokens after the last speak
  block do not. A plain reason-then-answer sequence therefore has AIRW == its reasoning length.
- First substantive disclosure -- position of the first token of the first speak block that
  is not filler (a generic acknowledgement such as "Sure." or "Let me think."), and the filler
  rate: the share of speak blocks that are filler.
- Length breakdown -- total, reasoning (think) and response (speak) tokens.

Tokenisation decision: each segment's *content* is tokenised on its own with
``tokenizer.encode(content, add_special_tokens=False)`` and the tag strings are not counted.
The metrics describe where content appears, not how a particular tokenizer spells the
markup, so they are comparable between the SxS and the standard variant of the same data.
Tokenising segments separately may differ by a token or so at segment boundaries from
tokenising the whole stream; that is accepted.

Parsing decisions (``parse_tagged``):

- strict mode (for data we generate ourselves): anything but a clean sequence of complete
  ``<think>…</think>`` / ``<speak>…</speak>`` pairs with nothing between them raises
  ``ValueError`` naming the offset and what was found.
- tolerant mode (for text a *model* produced): an unclosed last tag runs to the end of the text
  (a truncated generation); an opening tag while another is open closes the open one; a
  closing tag with no open tag turns the untagged text just before it into that kind (covers
  models whose chat template already injected ``<think>``); a stray closing tag of the wrong
  kind is dropped; any other untagged text counts as **speak** -- text outside the think tags is
  what the user sees. Whitespace-only pieces are dropped.

What is not guaranteed: the filler test is a heuristic (a phrase stoplist plus a list of
generic words); metrics that need a speak token are ``None`` for a sequence with none.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Protocol, Sequence

THINK = "think"
SPEAK = "speak"
KINDS = (THINK, SPEAK)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SPEAK_OPEN, SPEAK_CLOSE = "<speak>", "</speak>"
RESERVED_TAGS = (THINK_OPEN, THINK_CLOSE, SPEAK_OPEN, SPEAK_CLOSE)

_TAG_RE = re.compile(r"<(/?)(think|speak)>")

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
    "a an the and or so now first then this that it its is to of about on for with we i me "
    "us let let's lets will i'll need carefully problem question task solve solving work "
    "through think see look at here go start begin answer's".split()
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
    first_disclosure: int | None
    filler_rate: float | None

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


class WhitespaceTokenizer:
    """A trivial tokenizer (one token per whitespace-separated word) for tests and quick looks."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [len(word) for word in text.split()]


# ---------------------------------------------------------------------------------------------
# The format


def render_tagged(segments: Iterable[tuple[str, str]]) -> str:
    """Write ``(kind, content)`` segments as one tagged stream (content verbatim, no separators)."""
    parts: list[str] = []
    for kind, content in segments:
        if kind not in KINDS:
            raise ValueError(f"segment kind must be 'think' or 'speak', got {kind!r}")
        parts.append(f"<{kind}>{content}</{kind}>")
    return "".join(parts)


def parse_tagged(text: str, *, strict: bool = True) -> list[tuple[str, str]]:
    """Split a tagged stream into ``(kind, content)`` segments, in order.

    ``strict=True`` is for data we built (raises ``ValueError`` on anything malformed; contents
    come back verbatim, empty ones included). ``strict=False`` is for model output and never
    raises; its rules are in the module docstring.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_tagged needs a str, got {type(text).__name__}")
    return _parse_strict(text) if strict else _parse_tolerant(text)


def _parse_strict(text: str) -> list[tuple[str, str]]:
    segments: list[tuple[str, str]] = []
    pos = 0
    open_kind: str | None = None
    open_at = 0
    for match in _TAG_RE.finditer(text):
        closing, kind = match.group(1) == "/", match.group(2)
        if open_kind is None:
            if closing:
                raise ValueError(f"closing tag </{kind}> at offset {match.start()} has no opening tag")
            if text[pos:match.start()]:
                raise ValueError(
                    f"text outside any tag at offset {pos}: {text[pos:match.start()][:40]!r}; "
                    "every character must be inside <think>…</think> or <speak>…</speak>"
                )
            open_kind, open_at = kind, match.end()
        else:
            if not closing or kind != open_kind:
                raise ValueError(
                    f"found {match.group(0)} at offset {match.start()} while <{open_kind}> "
                    f"(opened at offset {open_at - len(open_kind) - 2}) is still open; tags "
                    "cannot nest and must be closed in order"
                )
            segments.append((open_kind, text[open_at:match.start()]))
            open_kind, pos = None, match.end()
    if open_kind is not None:
        raise ValueError(f"<{open_kind}> opened at offset {open_at - len(open_kind) - 2} is never closed")
    if text[pos:]:
        raise ValueError(f"text after the last closing tag at offset {pos}: {text[pos:][:40]!r}")
    return segments


def _parse_tolerant(text: str) -> list[tuple[str, str]]:
    segments: list[tuple[str, str]] = []

    def add(kind: str, content: str) -> None:
        if content.strip():
            segments.append((kind, content))

    pos = 0
    open_kind: str | None = None
    for match in _TAG_RE.finditer(text):
        closing, kind = match.group(1) == "/", match.group(2)
        chunk = text[pos:match.start()]
        if open_kind is None:
            # Untagged text: speak, unless a closing tag right after it says what it was.
            add(kind if closing else SPEAK, chunk)
            open_kind = None if closing else kind
        elif closing and kind != open_kind:
            add(open_kind, chunk)  # stray closing tag of the other kind: dropped, stay open
            pos = match.end()
            continue
        else:
            add(open_kind, chunk)
            open_kind = None if closing else kind
        pos = match.end()
    add(open_kind or SPEAK, text[pos:])
    return segments


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
        first_disclosure=first_disclosure,
        filler_rate=sum(filler_flags) / n_blocks if n_blocks else None,
    )


def latency_metrics_from_text(text: str, tokenizer: Tokenizer, *, strict: bool = False,
                              filler_phrases: Sequence[str] = FILLER_PHRASES) -> LatencyMetrics:
    """Parse a tagged string (tolerantly by default: model output) and compute its metrics."""
    return latency_metrics(parse_tagged(text, strict=strict), tokenizer, filler_phrases=filler_phrases)


METRIC_FIELDS = ("total_tokens", "reasoning_tokens", "response_tokens", "n_speak_blocks",
                 "ari", "abo", "airw", "first_disclosure", "filler_rate")


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
