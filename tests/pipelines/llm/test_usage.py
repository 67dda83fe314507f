"""Generation throughput counts only what the server generated; cache hits are counted apart.

A real in-process fake server (``pipelines.llm.testing.FakeLLMServer``) answers after a fixed
latency with a reply of known length (its token count is the reply's whitespace word count).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipelines.llm import LLMClient, Usage, run
from pipelines.llm.testing import FakeLLMServer

REPLY = "one two three four five six seven eight nine ten"  # 10 tokens for the fake server
LATENCY_S = 0.3


def _prompts(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"question {i}"}] for i in range(n)]


def _batch(client: LLMClient, prompts: list[list[dict]], lines: list[str]) -> float:
    """Send the prompts concurrently through ``map``; returns the batch's wall-clock seconds."""
    client.progress = lines.append
    started = time.perf_counter()
    run(client.map(lambda messages: client.chat(messages), prompts, desc="batch"))
    return time.perf_counter() - started


def test_concurrent_generation_is_timed_once_and_cache_hits_apart(tmp_path: Path):
    with FakeLLMServer(responder=lambda body, i: REPLY, latency_s=LATENCY_S) as server:
        client = LLMClient(server.base_url, "fake-model", cache_path=tmp_path / "c.sqlite",
                           max_concurrency=4)
        lines: list[str] = []
        wall = _batch(client, _prompts(4), lines)
        first = client.usage()
        assert (first.generated_calls, first.generated_tokens) == (4, 40)
        assert (first.cache_hits, first.cached_tokens, first.failed_calls) == (0, 0, 0)
        # four requests in flight together: about one latency, not four, and never more than
        # the batch took
        assert LATENCY_S <= first.generating_s <= wall
        assert first.generating_s < 3 * LATENCY_S
        assert first.tokens_per_s == pytest.approx(40 / first.generating_s)
        assert "tokens/s generated, 0 cache hits" in lines[-1]

        # the cached re-run: no request, no throughput, four hits replaying 40 tokens
        lines.clear()
        _batch(client, _prompts(4), lines)
        rerun = client.usage() - first
        assert server.chat_count == 4
        assert rerun == Usage(cache_hits=4, cached_tokens=40)
        assert rerun.tokens_per_s is None
        assert "0 tokens generated, 4 cache hits" in lines[-1]
        assert "tokens/s generated" not in lines[-1]
        assert "4 cache hits (40 tokens replayed)" in rerun.describe()
        assert rerun.describe().startswith("nothing generated")


def test_a_mixed_run_counts_only_the_generated_part(tmp_path: Path):
    with FakeLLMServer(responder=lambda body, i: REPLY, latency_s=LATENCY_S) as server:
        client = LLMClient(server.base_url, "fake-model", cache_path=tmp_path / "c.sqlite",
                           max_concurrency=1)
        _batch(client, _prompts(2), [])
        before = client.usage()
        _batch(client, _prompts(3), [])  # two hits, one new prompt
        used = client.usage() - before
        assert server.chat_count == 3
        assert (used.generated_calls, used.generated_tokens) == (1, 10)
        assert (used.cache_hits, used.cached_tokens) == (2, 20)
        assert LATENCY_S <= used.generating_s < 3 * LATENCY_S


def test_failed_requests_are_counted_and_generate_nothing(tmp_path: Path):
    with FakeLLMServer() as server:
        client = LLMClient(server.base_url, "fake-model", cache_path=tmp_path / "c.sqlite",
                           max_retries=0)
        server.plan.append("400")
        assert run(client.chat([{"role": "user", "content": "x"}]))[0].error is not None
        used = client.usage()
        assert (used.failed_calls, used.generated_calls, used.generated_tokens) == (1, 0, 0)
        assert used.generating_s > 0  # the time was spent asking


def test_usage_arithmetic():
    a = Usage(generated_calls=2, generated_tokens=30, generating_s=1.5, cache_hits=1,
              cached_tokens=7, failed_calls=1)
    b = Usage(generated_calls=1, generated_tokens=10, generating_s=0.5)
    assert a - b == Usage(1, 20, 1.0, 1, 7, 1)
    assert a + b == Usage(3, 40, 2.0, 1, 7, 1)
    assert (a - b).tokens_per_s == 20.0
    assert Usage().tokens_per_s is None
