"""Two vLLM CPU servers side by side: both on vLLM's default pinning vs weft's core split.

Starts server A (vLLM's ``auto`` pinning), then server B twice, one configuration after the
other in one run: (1) ``auto`` as well (what happened before weft chose the binding: both pin
their compute threads to the same cores), (2) the binding ``choose_cpu_bind`` picks. For each,
it times B's start-up and then sends the same chat requests to A and B at once and reports the
combined tokens/s. Prints one JSON line with both configurations and the throughput ratio.

    .venv/bin/python bench/serving_bind.py --requests 8 --max-tokens 96
"""

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import httpx

    from pipelines.serving import BIND_ENV, LocalModelServer, free_port

    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=8, help="requests per server")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--startup-timeout", type=float, default=420.0)
    args = ap.parse_args()
    prompt = [{"role": "user", "content": "Explain step by step why the sum of two odd numbers is even."}]

    async def load(servers) -> tuple[float, int]:
        async with httpx.AsyncClient(timeout=900) as http:
            async def one(server):
                r = await http.post(f"{server.base_url}/chat/completions", json={
                    "model": server.served_name, "messages": prompt, "max_tokens": args.max_tokens,
                    "temperature": 0.0, "seed": 0, "ignore_eos": True})
                r.raise_for_status()
                return r.json()["usage"]["completion_tokens"]
            start = time.perf_counter()
            tokens = await asyncio.gather(*[one(s) for s in servers for _ in range(args.requests)])
            return time.perf_counter() - start, sum(tokens)

    saved = os.environ.pop(BIND_ENV, None)
    a = LocalModelServer(port=free_port(), served_name="bench-a")
    os.environ[BIND_ENV] = "auto"
    a.start()
    os.environ.pop(BIND_ENV)
    results = {}
    try:
        for label, forced in (("both_auto", "auto"), ("weft_split", None)):
            if forced:
                os.environ[BIND_ENV] = forced
            b = LocalModelServer(port=free_port(), served_name="bench-b",
                                 startup_timeout_s=args.startup_timeout)
            started = time.perf_counter()
            try:
                b.start()
            except Exception as err:  # noqa: BLE001 — a start-up that never finishes is the result itself
                results[label] = {"bind_b": forced or "?", "startup_s": None, "error": str(err)[:200]}
                continue
            finally:
                os.environ.pop(BIND_ENV, None)
            startup = time.perf_counter() - started
            try:
                asyncio.run(load([a, b]))  # warm-up
                wall, tokens = asyncio.run(load([a, b]))
            finally:
                b.stop()
            results[label] = {"bind_a": a.cpu_bind, "bind_b": b.cpu_bind, "startup_s": round(startup, 1),
                              "wall_s": round(wall, 2), "tokens": tokens,
                              "tok_per_s": round(tokens / wall, 1)}
    finally:
        a.stop()
        if saved is not None:
            os.environ[BIND_ENV] = saved
    both, split = results.get("both_auto", {}), results.get("weft_split", {})
    if both.get("tok_per_s") and split.get("tok_per_s"):
        results["throughput_ratio_split_over_auto"] = round(split["tok_per_s"] / both["tok_per_s"], 2)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
