"""The embedded model on the reference evaluation suite: scores with CIs, throughput, time split.

Runs ``eval.runner.evaluate`` (the code path of the ``eval_samples`` asset) against the local
vLLM server for each benchmark of the suite and prints one JSON line per benchmark, then one
summary line: avg@k / pass@k with bootstrap 95% CIs, samples/s, and the share of wall time
spent generating vs grading.

    .venv/bin/python bench/eval_suite.py                      # the reference suite (long on CPU)
    .venv/bin/python bench/eval_suite.py --scale 0.1          # a tenth of every benchmark
"""

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SUITE = (("math500", 100, 4), ("gsm8k", 100, 4), ("gpqa_diamond", None, 1), ("humaneval", None, 1))


def main() -> int:
    from eval.benchmarks import get
    from eval.grading_pool import GradingPool
    from eval.runner import EvalConfig, evaluate
    from pipelines.ingest import load_source
    from pipelines.llm import LLMClient
    from pipelines.sandbox import SandboxPool
    from pipelines.serving import LocalModelServer, free_port

    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of each benchmark's problems")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated benchmark names")
    args = ap.parse_args()

    server = LocalModelServer(port=free_port()).start()
    totals = {"samples": 0, "generation_s": 0.0, "grading_s": 0.0}
    try:
        with GradingPool(processes=2) as pool, SandboxPool(workers=2) as sandbox, \
                tempfile.TemporaryDirectory() as tmp:
            for name, limit, k in SUITE:
                if args.only and name not in args.only.split(","):
                    continue
                bench = get(name)
                problems = [p.to_row() for p in load_source(bench.source).problems]
                n = limit or len(problems)
                n = max(1, round(n * args.scale))
                cfg = EvalConfig(k=k, temperature=0.6 if k > 1 else 0.0, top_p=0.95 if k > 1 else 1.0,
                                 max_tokens=args.max_tokens, seed=0, limit=n)

                async def run(bench=bench, problems=problems, cfg=cfg):
                    client = LLMClient(server.base_url, str(server.served_name), timeout_s=1800,
                                       max_concurrency=args.concurrency, cache_path=Path(tmp) / "c.sqlite")
                    try:
                        return await evaluate(client, bench, problems, cfg, model_label="smollm2-135m-instruct",
                                              pool=pool, sandbox=sandbox)
                    finally:
                        await client.aclose()

                t0 = time.perf_counter()
                result = asyncio.run(run())
                wall = time.perf_counter() - t0
                scores = {f"{s['metric']}@{s['k']}".replace("@k@", "@"): [round(s["value"], 4),
                          round(s["ci_low"], 4), round(s["ci_high"], 4)] for s in result.scores}
                samples = len(result.samples)
                totals["samples"] += samples
                totals["generation_s"] += result.generation_s
                totals["grading_s"] += result.grading_s
                print(json.dumps({
                    "bench": "eval_suite", "benchmark": name, "problems": n, "k": k, "samples": samples,
                    "scores_value_ci": scores, "wall_s": round(wall, 1),
                    "generation_s": round(result.generation_s, 1), "grading_s": round(result.grading_s, 1),
                    "samples_per_s": round(samples / wall, 3),
                    "generation_share": round(result.generation_s / (result.generation_s + result.grading_s), 3),
                    "mean_completion_tokens": round(result.completion_tokens / samples, 1),
                    "generation_errors": result.errors,
                }), flush=True)
    finally:
        server.stop()
    busy = totals["generation_s"] + totals["grading_s"]
    print(json.dumps({"bench": "eval_suite", "summary": True, "samples": totals["samples"],
                      "samples_per_s": round(totals["samples"] / busy, 3) if busy else None,
                      "generation_share": round(totals["generation_s"] / busy, 3) if busy else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
