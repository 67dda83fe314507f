"""Benchmark: SxS prefix checks, sequential vs parallel with cancellation, on the shared traces.

For the same samples and the same real OpenAI-compatible judge, runs
  1. sequential mode (one judge call at a time, stop at the first full coverage),
  2. parallel mode with aggressive cancellation (all prefixes at once),
  3. and 4. both again with the cheap pre-filter on,
one sample after another (so wall time measures the within-sample method), each mode with its
own client and no response cache (a cache would make the second run free); the order of the
modes rotates per sample, and ``--serve`` turns vLLM's prefix caching off, so that repeating a
prompt in a later mode is not cheaper (an external server should be started the same way). Prints ONE JSON line:
calls made (ratio), sequential rounds on the critical path, wall time (ratio), pre-filter
calls saved and its agreement with the judge (judged on the sequential run's own decisions),
and the dataset-level ARI/ABO/AIRW of the SxS data vs its standard variant.

Usage:
  python bench/sxs_alignment.py --base-url http://127.0.0.1:8000/v1 --model NAME --limit 6
  python bench/sxs_alignment.py --serve --limit 6     # starts the embedded model on vLLM
Defaults come from WEFT_LLM_BASE_URL / WEFT_LLM_MODEL. Samples are taken round-robin from the
three trace files, skipping those with more than --max-blocks reasoning blocks.

Not guaranteed: figures depend on the server, the model and the machine; a small model judges
badly, so the agreement and latency figures describe this judge, not the method's ceiling.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eval.latency import WhitespaceTokenizer, summarize_variants
from pipelines.settings import models_dir, require_data_dir
from pipelines.sxs_align import (
    OK,
    AlignConfig,
    Alignment,
    align_blocks,
    join_blocks,
    segment,
    summarize_alignments,
    validate_alignment,
    validate_tagged,
    variant_segments,
)
from pipelines.sxs_judge import LLMJudge, prefilter_skips


def load_traces(data: Path) -> dict[str, list[tuple[str, str, str]]]:
    """(problem, reasoning, response) per trace file, parsed minimally (not pipelines.ingest)."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for path in sorted((data / "traces").glob("*.jsonl")):
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            if "thinking_trajectories" in d:
                rows.append((d["question"], "\n\n".join(ast.literal_eval(d["thinking_trajectories"])),
                             d["attempt"]))
            else:
                text = d.get("output") or d.get("generated_solution") or ""
                reasoning, _, response = text.partition("</think>")
                rows.append((d.get("instruction") or d.get("problem"), reasoning.replace("<think>", ""),
                             response))
        out[path.stem] = rows
    return out


def pick_samples(traces: dict[str, list[tuple[str, str, str]]], limit: int,
                 max_blocks: int) -> list[tuple[str, str, list[str], list[str]]]:
    """Round-robin over the files: (source, problem, R, A) with 2 <= K_R <= max_blocks, K_A >= 1."""
    queues = {name: [(p, segment(r), segment(a)) for p, r, a in rows] for name, rows in traces.items()}
    queues = {name: [q for q in rows if 2 <= len(q[1]) <= max_blocks and q[2]] for name, rows in queues.items()}
    picked: list[tuple[str, str, list[str], list[str]]] = []
    index = 0
    while len(picked) < limit and any(index < len(rows) for rows in queues.values()):
        for name, rows in queues.items():
            if index < len(rows) and len(picked) < limit:
                picked.append((name, *rows[index]))
        index += 1
    return picked


async def run_modes(base_url: str, model: str, samples: list, modes: dict[str, AlignConfig],
                    concurrency: int, timeout_s: float) -> tuple[dict[str, list[Alignment]], dict[str, float]]:
    """Every sample under every mode, one sample at a time; the order of the modes rotates from
    sample to sample so that server-side warm-up and prefix caching favour none of them. Each
    mode has its own client (no response cache) and its summed wall time."""
    from pipelines.llm import LLMClient

    clients = {name: LLMClient(base_url, model, use_cache=False, max_concurrency=concurrency,
                               timeout_s=timeout_s, max_retries=1) for name in modes}
    judges = {name: LLMJudge(client) for name, client in clients.items()}
    runs: dict[str, list[Alignment]] = {name: [] for name in modes}
    wall = dict.fromkeys(modes, 0.0)
    names = list(modes)
    try:
        # warm-up: one judge call outside the measurement
        await judges[names[0]].judge("What is 1+1?", ["1+1=2."], ["The answer is 2."])
        for i, (_, problem, r, a) in enumerate(samples):
            for name in names[i % len(names):] + names[:i % len(names)]:
                started = time.perf_counter()
                runs[name].append(await align_blocks(problem, r, a, judges[name], modes[name]))
                wall[name] += time.perf_counter() - started
    finally:
        for client in clients.values():
            await client.aclose()
    return runs, wall


def prefilter_agreement(samples: list, alignments: list[Alignment]) -> dict[str, Any]:
    """Replays the pre-filter over the sequential run's judged prefixes (state = level before k)."""
    would_skip = agree = judged = no_new = 0
    for (_, problem, r, a), al in zip(samples, alignments):
        level = 0
        for k, (raw, status) in enumerate(zip(al.raw, al.status), start=1):
            if status == OK:
                judged += 1
                new = raw is not None and raw > level
                no_new += not new
                if prefilter_skips(problem + "\n" + join_blocks(r[:k]), a, level):
                    would_skip += 1
                    agree += not new
            level = al.repaired[k - 1]
    return {
        "judged_prefixes": judged,
        "judge_no_new_coverage": no_new,
        "prefilter_would_skip": would_skip,
        "prefilter_agreement": agree / would_skip if would_skip else None,
        "prefilter_recall_of_no_new": agree / no_new if no_new else None,
    }


def totals(alignments: list[Alignment]) -> dict[str, Any]:
    """Sums over samples; ``rounds`` counts judge calls on the critical path assuming unbounded
    concurrency (parallel: 1 per sample that needed the judge; sequential: every call)."""
    return {
        "calls_launched": sum(a.calls_made + a.calls_cancelled for a in alignments),
        "calls_made": sum(a.calls_made for a in alignments),
        "calls_saved": sum(a.calls_saved for a in alignments),
        "calls_cancelled": sum(a.calls_cancelled for a in alignments),
        "calls_failed": sum(a.calls_failed for a in alignments),
        "calls_prefiltered": sum(a.calls_prefiltered for a in alignments),
        "rounds": sum(a.rounds for a in alignments),
        "invalid_outputs": sum(bool(validate_alignment(a)) for a in alignments),
    }


def tokenizer_for(path: str | None):
    folder = Path(path) if path else models_dir() / "smollm2-135m-instruct"
    if (folder / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(folder)), str(folder)
    return WhitespaceTokenizer(), f"whitespace (no model folder at {folder})"


async def bench(args: argparse.Namespace, base_url: str, model: str) -> dict[str, Any]:
    samples = pick_samples(load_traces(require_data_dir()), args.limit, args.max_blocks)
    if not samples:
        raise SystemExit("no trace samples matched; raise --max-blocks or check WEFT_DATA_DIR")
    modes = {
        "sequential": AlignConfig(mode="sequential"),
        "parallel": AlignConfig(mode="parallel"),
        "parallel_prefilter": AlignConfig(mode="parallel", prefilter=True),
        "sequential_prefilter": AlignConfig(mode="sequential", prefilter=True),
    }
    runs, wall = await run_modes(base_url, model, samples, modes, args.concurrency, args.timeout)
    results = {name: {"wall_s": round(wall[name], 3), **totals(runs[name])} for name in modes}
    for name, alignments in runs.items():
        bad = [p for (_, _, r, a), al in zip(samples, alignments) for p in validate_tagged(al.tagged, r, a)]
        results[name]["round_trip_problems"] = len(bad)
    seq, par = results["sequential"], results["parallel"]
    tokenizer, tok_name = tokenizer_for(args.tokenizer)
    summary = {**summarize_alignments(runs["parallel"]),
               **summarize_variants(map(variant_segments, runs["parallel"]), tokenizer)}
    same = sum(s.repaired == p.repaired for s, p in zip(runs["sequential"], runs["parallel"]))

    def ratio(x: float, y: float) -> float | None:
        return round(x / y, 3) if y else None

    def pick(d: dict[str, Any]) -> dict[str, Any]:
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in d.items()
                if k in ("n", "mean_ari", "mean_abo", "mean_airw", "mean_first_disclosure",
                         "mean_total_tokens", "mean_reasoning_tokens", "n_without_speak")}

    return {
        "bench": "sxs_alignment",
        "base_url": base_url, "model": model, "samples": len(samples),
        "sources": sorted({s[0] for s in samples}),
        "mean_reasoning_blocks": round(summary["mean_reasoning_blocks"], 2),
        "mean_answer_blocks": round(summary["mean_answer_blocks"], 2),
        "concurrency": args.concurrency,
        **results,
        "calls_ratio_seq_over_par": ratio(seq["calls_made"], par["calls_made"]),
        "rounds_ratio_seq_over_par": ratio(seq["rounds"], par["rounds"]),
        "wall_ratio_seq_over_par": ratio(seq["wall_s"], par["wall_s"]),
        "prefilter_calls_saved_sequential": seq["calls_made"] - results["sequential_prefilter"]["calls_made"],
        "prefilter_calls_saved_parallel": par["calls_made"] - results["parallel_prefilter"]["calls_made"],
        **prefilter_agreement(samples, runs["sequential"]),
        "same_levels_seq_vs_par": f"{same}/{len(samples)}",
        "share_collapsed": round(summary["share_collapsed"], 3),
        "mean_visible_segments": round(summary["mean_visible_segments"], 3),
        "tokenizer": tok_name,
        "latency_sxs": pick(summary["latency_sxs"]),
        "latency_standard": pick(summary["latency_standard"]),
        "ari_ratio_sxs_over_standard": ratio(summary["latency_sxs"]["mean_ari"] or 0,
                                             summary["latency_standard"]["mean_ari"] or 0),
        "airw_ratio_sxs_over_standard": ratio(summary["latency_sxs"]["mean_airw"] or 0,
                                              summary["latency_standard"]["mean_airw"] or 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("WEFT_LLM_BASE_URL"))
    parser.add_argument("--model", default=os.environ.get("WEFT_LLM_MODEL"))
    parser.add_argument("--serve", action="store_true",
                        help="start the embedded model on a local vLLM server for the run")
    parser.add_argument("--limit", type=int, default=6, help="number of trace samples")
    parser.add_argument("--max-blocks", type=int, default=40, help="skip samples with more reasoning blocks")
    parser.add_argument("--concurrency", type=int, default=8, help="client concurrency")
    parser.add_argument("--timeout", type=float, default=120.0, help="per-request timeout, seconds")
    parser.add_argument("--tokenizer", default=None, help="model folder for the latency tokenizer")
    args = parser.parse_args(argv)
    if args.limit < 1:
        parser.error("--limit must be at least 1")
    server = None
    if args.serve:
        from pipelines.serving import LocalModelServer, free_port

        # prefix caching off: repeated prompts across modes must not get cheaper
        server = LocalModelServer(port=free_port(), extra_args=("--no-enable-prefix-caching",)).start()
        args.base_url, args.model = server.base_url, server.served_name
    if not (args.base_url and args.model):
        parser.error("give --base-url and --model (or set WEFT_LLM_BASE_URL / WEFT_LLM_MODEL), "
                     "or pass --serve to start the embedded model locally")
    try:
        print(json.dumps(asyncio.run(bench(args, args.base_url, args.model))))
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
