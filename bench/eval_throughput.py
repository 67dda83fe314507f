"""Pipeline tokens/s during evaluation vs the server's raw tokens/s on the same requests.

Starts (or reuses) the local vLLM server with the embedded model, takes N GSM8K problems, and
runs the same chat requests twice, side by side in one process: (1) raw — plain concurrent
HTTP POSTs with httpx, nothing else; (2) pipeline — ``eval.runner.generate`` through
``LLMClient`` (semaphore, retries, cache writes, accounting), with the cache in a fresh folder
so nothing is replayed. Prints one JSON line with both throughputs and their ratio.

    .venv/bin/python bench/eval_throughput.py --n 24 --max-tokens 128 --concurrency 8
"""

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import httpx

    from eval.benchmarks import get
    from eval.runner import EvalConfig, build_messages, generate
    from pipelines.ingest import load_source
    from pipelines.llm import LLMClient
    from pipelines.serving import LocalModelServer, free_port

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--model", default=None)
    args = ap.parse_args()

    bench = get("gsm8k")
    problems = [p.to_row() for p in load_source("gsm8k", limit=args.n).problems]
    server = None
    if args.base_url:
        base_url, model = args.base_url, args.model
    else:
        server = LocalModelServer(port=free_port()).start()
        base_url, model = server.base_url, str(server.served_name)
    try:
        # warm-up so neither side pays first-request costs
        httpx.post(f"{base_url}/chat/completions", json={"model": model, "messages": [
            {"role": "user", "content": "hi"}], "max_tokens": 8}, timeout=120)

        async def raw() -> tuple[float, int]:
            sem = asyncio.Semaphore(args.concurrency)
            async with httpx.AsyncClient(timeout=600) as http:
                async def one(p):
                    async with sem:
                        r = await http.post(f"{base_url}/chat/completions", json={
                            "model": model, "messages": build_messages(bench, p["problem"]),
                            "max_tokens": args.max_tokens, "temperature": 0.0, "seed": 0})
                        return r.json()["usage"]["completion_tokens"]
                t0 = time.perf_counter()
                toks = await asyncio.gather(*(one(p) for p in problems))
                return time.perf_counter() - t0, sum(toks)

        async def pipeline(cache: Path) -> tuple[float, int]:
            client = LLMClient(base_url, model, max_concurrency=args.concurrency, cache_path=cache)
            cfg = EvalConfig(k=1, temperature=0.0, max_tokens=args.max_tokens, seed=0)
            t0 = time.perf_counter()
            rows = await generate(client, bench, problems, cfg, model_label=model)
            elapsed = time.perf_counter() - t0
            await client.aclose()
            return elapsed, sum(r["completion_tokens"] for r in rows)

        with tempfile.TemporaryDirectory() as tmp:
            raw_s, raw_tok = asyncio.run(raw())
            pipe_s, pipe_tok = asyncio.run(pipeline(Path(tmp) / "cache.sqlite"))
    finally:
        if server is not None:
            server.stop()
    out = {
        "bench": "eval_throughput", "requests": len(problems), "max_tokens": args.max_tokens,
        "concurrency": args.concurrency,
        "raw_s": round(raw_s, 2), "raw_tokens": raw_tok, "raw_tok_per_s": round(raw_tok / raw_s, 1),
        "pipeline_s": round(pipe_s, 2), "pipeline_tokens": pipe_tok,
        "pipeline_tok_per_s": round(pipe_tok / pipe_s, 1),
        "pipeline_over_raw": round((pipe_tok / pipe_s) / (raw_tok / raw_s), 3),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
