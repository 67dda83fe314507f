"""Value types of the LLM client: sampling settings, results, and the stored payload format.

``SamplingParams`` (validated on construction), ``ChatResult`` and ``JsonResult`` are what
callers pass and get back; ``Usage`` is a client's running count of generated and replayed
(cached) calls and tokens, and of the time spent generating; ``payload_from_completion`` turns an OpenAI ``ChatCompletion`` into
the plain dict kept in the response cache and ``results_from_payload`` turns it back into
results, so a fresh response and a replayed one take the same path.

``empty_choices`` names the choices of a payload where the server produced nothing: content
null, or empty while the server reports no completion tokens at all, and no reasoning text.
The client treats such a reply as a failed request (retried, never cached as a success). An
empty answer the model did generate (completion tokens > 0, e.g. an immediate end-of-sequence)
is an answer, and is graded like any other.
``default_timeout_s`` is the per-request deadline scaled to the prompt's length and
``max_tokens`` that callers use when they configure none.

Not guaranteed: per-choice completion token counts for n > 1 (servers report only the total,
which is spread evenly); the server-split reasoning text is read from ``reasoning_content`` or
``reasoning``, whichever the server sends. The default timeout assumes floors of
``MIN_PREFILL_TOKENS_PER_S`` and ``MIN_TOKENS_PER_S`` per request; a slower server needs an
explicit ``timeout_s``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

MAX_ERROR_CHARS = 500
# Default per-request deadline (``default_timeout_s``): a fixed allowance for connecting and
# queueing, plus the prompt processed at no less than MIN_PREFILL_TOKENS_PER_S, plus n *
# max_tokens generated at no less than MIN_TOKENS_PER_S. The prompt term replaces what used to
# be a flat 180 s allowance sized for the longest prompts: eight concurrent SxS judge calls with
# 2-4k-token prompts took 1.5-3 minutes each on a loaded 2-core CPU server (~25 prompt tokens/s
# per request), while a one-line question needs no such wait. Prompt tokens are estimated from
# characters at PROMPT_CHARS_PER_TOKEN (a low figure, so the estimate errs long: English and
# LaTeX run 3.5-4.5 characters per token with the embedded model's tokenizer).
TIMEOUT_BASE_S = 60.0
MIN_PREFILL_TOKENS_PER_S = 25.0
PROMPT_CHARS_PER_TOKEN = 3.0
MIN_TOKENS_PER_S = 4.0


def prompt_chars(messages: list[dict]) -> int:
    """Characters of text in chat ``messages`` (string contents and text parts), the input of
    the prompt term of ``default_timeout_s``."""
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(part.get("text") or "") for part in content
                         if isinstance(part, dict) and isinstance(part.get("text"), str))
    return total


def default_timeout_s(max_tokens: int, n: int = 1, prompt_chars: int = 0) -> float:
    """Request deadline for a prompt of ``prompt_chars`` characters and up to ``max_tokens`` per
    choice for ``n`` choices generated in one request::

        TIMEOUT_BASE_S + prompt_chars / PROMPT_CHARS_PER_TOKEN / MIN_PREFILL_TOKENS_PER_S
                       + n * max_tokens / MIN_TOKENS_PER_S

    (no prompt and 512 tokens: 188 s; a 12,000-character judge prompt and 32 tokens: 228 s)."""
    if not (isinstance(max_tokens, int) and max_tokens >= 1):
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not (isinstance(prompt_chars, int) and prompt_chars >= 0):
        raise ValueError(f"prompt_chars must be an int >= 0, got {prompt_chars!r}")
    prefill_s = prompt_chars / PROMPT_CHARS_PER_TOKEN / MIN_PREFILL_TOKENS_PER_S
    return TIMEOUT_BASE_S + prefill_s + n * max_tokens / MIN_TOKENS_PER_S


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings; all of them are part of the cache key."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None
    n: int = 1
    stop: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif self.stop is not None:
            object.__setattr__(self, "stop", tuple(self.stop))
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not (isinstance(self.max_tokens, int) and self.max_tokens >= 1):
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        if not (isinstance(self.n, int) and self.n >= 1):
            raise ValueError(f"n must be a positive int, got {self.n!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")
        if self.stop is not None and not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be non-empty strings, got {self.stop!r}")


@dataclass
class ChatResult:
    """One choice of a chat call. ``latency_s`` is the generating request's latency (stored with
    the cache entry, so a replay reports the original figure); ``error`` is set when the request
    failed, and then ``text`` is empty. ``reasoning`` holds a server-split reasoning trace, if any.
    For n > 1, servers report only total completion tokens; they are spread evenly over choices.
    ``cache_key`` is the request's cache key (None when the request was not keyed)."""

    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cached: bool
    error: str | None = None
    reasoning: str | None = None
    cache_key: str | None = None


@dataclass(frozen=True)
class Usage:
    """What a client's calls produced, with generation and cache replays kept apart.

    ``generated_calls`` / ``generated_tokens``: requests the server answered and their
    completion tokens. ``generating_s``: wall-clock seconds during which at least one request
    was waiting on the server (concurrent requests are not counted twice; retries, backoff and
    failed requests are included, since that time was spent asking). ``cache_hits`` /
    ``cached_tokens``: calls answered from the response cache and the completion tokens they
    replayed; they cost no generation and never enter :attr:`tokens_per_s`. ``failed_calls``:
    requests that ended without an answer. Subtract two snapshots (``LLMClient.usage()``) to get
    one stretch of work; add them to combine clients."""

    generated_calls: int = 0
    generated_tokens: int = 0
    generating_s: float = 0.0
    cache_hits: int = 0
    cached_tokens: int = 0
    failed_calls: int = 0

    @property
    def tokens_per_s(self) -> float | None:
        """Generation throughput: generated tokens per second spent generating; None when
        nothing was sent to the server (a fully cached run has no throughput)."""
        if self.generating_s <= 0:
            return None
        return self.generated_tokens / self.generating_s

    def _combine(self, other: Usage, sign: int) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(*(getattr(self, f) + sign * getattr(other, f) for f in _USAGE_FIELDS))

    def __add__(self, other: Usage) -> Usage:
        return self._combine(other, 1)

    def __sub__(self, other: Usage) -> Usage:
        return self._combine(other, -1)

    def describe(self) -> str:
        """One line for logs, e.g. ``"1200 tokens generated in 6.0s (200.0 tokens/s); 3 cache
        hits (90 tokens replayed)"``."""
        rate = self.tokens_per_s
        generated = ("nothing generated (no tokens/s: every call was a cache hit or failed)"
                     if rate is None else
                     f"{self.generated_tokens} tokens generated in {self.generating_s:.1f}s "
                     f"({rate:.1f} tokens/s)")
        return f"{generated}; {self.cache_hits} cache hits ({self.cached_tokens} tokens replayed)"


_USAGE_FIELDS = ("generated_calls", "generated_tokens", "generating_s", "cache_hits",
                 "cached_tokens", "failed_calls")


@dataclass
class JsonResult:
    """Outcome of ``chat_json``: ``value`` is None exactly when ``error`` is set."""

    value: Any | None
    raw: list[str]
    attempts: int
    error: str | None


def backoff_delay(
    retry: int, base_s: float, max_s: float, rng: random.Random | None = None
) -> float:
    """Delay before retry number ``retry`` (0-based): base * 2**retry capped at max, then
    "equal jitter" (a uniform draw from the upper half) so many clients do not retry in step."""
    ceiling = min(max_s, base_s * (2**retry))
    draw = (rng or random).random()
    return ceiling / 2 + draw * ceiling / 2


def check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for i, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("role"), str)
            or "content" not in message
        ):
            raise ValueError(
                f"messages[{i}] must be a dict with a 'role' string and 'content', got {message!r:.120}"
            )


def shorten(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"


def payload_from_completion(response: Any, n: int, latency_s: float) -> dict:
    """The cacheable payload of an OpenAI ``ChatCompletion``: choices, token counts, latency."""
    choices = sorted(response.choices or [], key=lambda c: c.index)
    usage = response.usage
    out = []
    for choice in choices:
        message = choice.message
        extra = getattr(message, "model_extra", None) or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        entry = {
            "text": message.content or "",
            "finish_reason": choice.finish_reason,
            "reasoning": reasoning if isinstance(reasoning, str) else None,
        }
        if message.content is None:
            entry["null_content"] = True
        out.append(entry)
    return {
        "choices": out,
        "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        "latency_s": latency_s,
        "n": n,
    }


def empty_choices(payload: dict) -> list[int]:
    """Indices of choices the server left empty: no reasoning text, and content null or empty
    with zero completion tokens reported for the whole response."""
    generated = int(payload.get("completion_tokens") or 0) > 0
    return [
        i
        for i, c in enumerate(payload.get("choices", []))
        if not (c.get("reasoning") or "").strip()
        and (c.get("null_content") or (not (c.get("text") or "").strip() and not generated))
    ]


def results_from_payload(
    payload: dict, cached: bool, key: str | None = None
) -> list[ChatResult]:
    """One ChatResult per stored choice; total completion tokens are spread evenly."""
    choices = payload["choices"]
    total = int(payload.get("completion_tokens", 0))
    share, extra = divmod(total, max(len(choices), 1))
    return [
        ChatResult(
            text=c.get("text") or "",
            finish_reason=c.get("finish_reason"),
            prompt_tokens=int(payload.get("prompt_tokens", 0)),
            completion_tokens=share + (1 if i < extra else 0),
            latency_s=float(payload.get("latency_s", 0.0)),
            cached=cached,
            reasoning=c.get("reasoning"),
            cache_key=key,
        )
        for i, c in enumerate(choices)
    ]
