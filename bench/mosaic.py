"""Benchmark: MOSAIC vs the baseline synthesizer on N GSM8K train problems with a real model.

Runs MOSAIC (manager + actor + failure injection at rate ρ) and the baseline (one actor, plain
multi-turn loop) over the same N problems against one OpenAI-compatible endpoint — the one given
by ``--base-url/--model``, or a local vLLM server over the embedded model started here — with
the real sandbox and no response cache, grades both with the shared grader and prints one JSON
line: per method accuracy, average turns, realized perturbation rate, recovery rate, failure
counts and seconds per trajectory, plus MOSAIC/baseline ratios. ``--dump`` writes every
trajectory row as JSON Lines for inspection.

    python bench/mosaic.py [--n 50] [--rho 0.1] [--max-steps 6] [--concurrency 4]
                           [--base-url URL --model NAME] [--dump rows.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eval.grading_pool import GradingPool
from pipelines.ingest import load_source
from pipelines.llm import LLMClient, SamplingParams
from pipelines.mosaic import (
    ACTOR_STOP,
    MANAGER_MAX_TOKENS,
    LLMActor,
    LLMBaselineActor,
    LLMManager,
    MosaicConfig,
    ProblemInput,
    label_records,
    session_factory,
    summarize_records,
    synthesize_baseline,
    synthesize_many,
    synthesize_mosaic,
)

FIGURES = ("trajectories", "complete", "valid", "accuracy", "avg_turns", "perturbation_rate",
           "recovery_rate", "error_steps", "seconds_per_trajectory", "failures")


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def _ratio(a, b):
    return round(a / b, 3) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--source", default="gsm8k_train")
    parser.add_argument("--rho", type=float, default=0.1)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--actor-temperature", type=float, default=0.7)
    parser.add_argument("--base-url", default="")
    parser.add_argument("--model", default="")
    parser.add_argument("--dump", default="")
    args = parser.parse_args()

    server = None
    if args.base_url:
        if not args.model:
            parser.error("--model is required with --base-url")
        base_url, model = args.base_url, args.model
    else:
        from pipelines.serving import LocalModelServer, free_port

        server = LocalModelServer(port=free_port()).start()
        base_url, model = server.base_url, str(server.served_name)
    try:
        problems = [ProblemInput.from_row(p.to_row())
                    for p in load_source(args.source, limit=args.n).problems[: args.n]]
        cfg = MosaicConfig(max_steps=args.max_steps, rho=args.rho, seed=args.seed,
                           concurrency=args.concurrency)
        client = LLMClient(base_url, model, use_cache=False, max_concurrency=args.concurrency * 2,
                           timeout_s=600)
        client.check_reachable()
        sessions = session_factory(timeout_s=cfg.exec_timeout_s)
        actor_params = SamplingParams(temperature=args.actor_temperature, max_tokens=384,
                                      seed=args.seed, stop=ACTOR_STOP)
        manager = LLMManager(client, params=SamplingParams(temperature=0.0, max_tokens=MANAGER_MAX_TOKENS, seed=args.seed))
        actor = LLMActor(client, params=actor_params)
        baseline_actor = LLMBaselineActor(client, params=actor_params)

        async def run(method: str):
            if method == "mosaic":
                return await synthesize_many(problems, lambda p: synthesize_mosaic(
                    p, manager, actor, sessions, cfg), concurrency=args.concurrency)
            return await synthesize_many(problems, lambda p: synthesize_baseline(
                p, baseline_actor, sessions, cfg), concurrency=args.concurrency)

        results, wall = {}, {}
        for method in ("mosaic", "baseline"):
            started = time.perf_counter()
            records = asyncio.run(run(method))
            wall[method] = time.perf_counter() - started
            with GradingPool(processes=2) as pool:
                label_records(records, lambda pairs: pool.grade_many(pairs, kind="math"))
            results[method] = records
        if args.dump:
            with open(args.dump, "w", encoding="utf-8") as out:
                for records in results.values():
                    out.writelines(json.dumps(r.to_row(), default=str) + "\n" for r in records)
        summaries = {m: summarize_records(r) for m, r in results.items()}
        line = {
            "bench": "mosaic", "n": len(problems), "source": args.source, "model": model,
            "rho": args.rho, "max_steps": args.max_steps, "concurrency": args.concurrency,
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "mosaic": {k: summaries["mosaic"][k] for k in FIGURES},
            "baseline": {k: summaries["baseline"][k] for k in FIGURES},
            "wall_s": {m: round(w, 1) for m, w in wall.items()},
            "llm_calls": len(client.drain_records()),
            "ratio_mosaic_over_baseline": {
                k: _ratio(summaries["mosaic"][k], summaries["baseline"][k])
                for k in ("accuracy", "avg_turns", "seconds_per_trajectory")
            },
        }
        print(json.dumps(_rounded(line), default=str))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
