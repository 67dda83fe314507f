"""Benchmark: a 500-call LLM batch sent to a local fake server vs the same batch replayed from cache.

The fake OpenAI-compatible server (pipelines.llm.testing) answers every request after a fixed
20 ms delay, so the first run measures the client's request path under bounded concurrency
and the replay measures the SQLite response cache. Prints one JSON line with both wall times,
their ratio and the request counts (the replay must send none).

    python bench/llm_cache.py [--calls 500] [--latency-ms 20] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.llm import LLMClient, SamplingParams, run
from pipelines.llm.testing import FakeLLMServer


def batch(client: LLMClient, calls: int) -> float:
    """Wall seconds to run ``calls`` distinct chat calls through ``client.map``."""
    params = SamplingParams(max_tokens=64)

    async def go() -> None:
        async def one(i: int):
            return await client.chat(
                [{"role": "user", "content": f"problem {i}: what is {i} + {i}?"}],
                params,
                tag="bench",
            )

        results = await client.map(one, range(calls), desc="bench", log_every_s=3600)
        failed = sum(r[0].error is not None for r in results)
        if failed:
            raise RuntimeError(f"{failed} calls failed; the benchmark needs a clean run")

    started = time.perf_counter()
    run(go())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeLLMServer(latency_s=args.latency_ms / 1000) as server,
    ):
        cache_path = Path(tmp) / "llm_cache.sqlite"
        first = LLMClient(
            server.base_url, "fake-model", cache_path=cache_path, max_concurrency=args.concurrency
        )
        first_s = batch(first, args.calls)
        sent_first = server.chat_count
        first.cache.close()
        replay = LLMClient(
            server.base_url, "fake-model", cache_path=cache_path, max_concurrency=args.concurrency
        )
        replay_s = batch(replay, args.calls)
        sent_replay = server.chat_count - sent_first
        cached = sum(r["cached"] for r in replay.drain_records())
    print(
        json.dumps(
            {
                "bench": "llm_cache",
                "calls": args.calls,
                "server_latency_ms": args.latency_ms,
                "max_concurrency": args.concurrency,
                "first_run_s": round(first_s, 3),
                "replay_s": round(replay_s, 3),
                "speedup_first_over_replay": round(first_s / replay_s, 1),
                "requests_first": sent_first,
                "requests_replay": sent_replay,
                "replayed_from_cache": cached,
                "python": platform.python_version(),
                "machine": f"{platform.machine()} {platform.node()}",
            }
        )
    )


if __name__ == "__main__":
    main()
