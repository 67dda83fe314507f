"""Benchmark: DUET vs GRPO at matched budget, side by side in one run (DUET paper §4.3, Fig. 9).

Runs real GRPO steps (TRL through ``training.grpo.run_grpo``) on the embedded model with the
built-in arithmetic prompts and the boxed outcome reward, in a temporary WEFT_HOME: first plain
GRPO with ``full`` rollouts per prompt, then DUET (``training.duet.trainer``) at budget fraction
``b`` of that (``full`` rollouts per prompt; ``2 x full`` slots), same prompts, seed and length
cap. Reported per step (first step left out as warm-up when more than one runs): tokens
generated (GRPO: all completion tokens; DUET: allocated rollouts only), wall seconds, the
DUET controller's own time (allocation, the gate inside generation, weights and Phase-4
updates, ``duet/overhead_s``) as a share of its step, and DUET's realised tokens over its
budget (``duet/budget_used``). Ratios are GRPO / DUET (> 1: DUET is cheaper). The paper reports 1.62x
(full) and 2.51x (half budget) wall clock on 8 H100s with vLLM and 3,072-token rollouts; on a
CPU with a 135M model and short rollouts the abort gate has much less tail to cut.

    python bench/duet.py [--steps 3] [--prompts 2] [--full 4] [--budget 1.0] [--tokens 64]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def run_once(model_dir: Path, *, label: str, steps: int, prompts: int, full: int, tokens: int,
             duet: dict | None) -> dict:
    from training.config import build_config
    from training.grpo import run_grpo
    from warehouse import Warehouse

    slots = 2 * full if duet else full
    config = build_config("grpo", {
        "recipe": f"bench-duet-{label}", "model_name_or_path": str(model_dir),
        "dataset": "builtin:arith", "dataset_limit": 64,
        "rewards": [{"name": "outcome", "answer_format": "boxed"}],
        "num_generations": slots, "per_device_train_batch_size": slots * prompts,
        "max_completion_length": tokens, "max_steps": steps, "learning_rate": 1e-6,
        "temperature": 0.9, "top_p": 0.95, "loss_type": "dapo", "use_cpu": True,
        "bf16": False, "gradient_checkpointing": False, "torch_threads": 1, "seed": 0,
        "logging_steps": 1, "save_strategy": "no", "report_to": "none", "disable_tqdm": True,
        "duet": duet,
    })
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # transformers prints its logs to stdout
        result = run_grpo(config)
    total = time.perf_counter() - started
    rows = sorted(Warehouse().read("train_metrics", partition=result.checkpoint_id).to_pylist(),
                  key=lambda r: r["step"])
    measured = rows[1:] if len(rows) > 1 else rows
    logs = [json.loads(r["logs_json"] or "{}") for r in measured]

    def mean(values: list) -> float | None:
        values = [float(v) for v in values if v is not None]
        return round(sum(values) / len(values), 4) if values else None

    seconds = mean([r["seconds_per_step"] for r in measured])
    if duet:
        tokens_step = mean([g.get("duet/tokens_generated") for g in logs])
    else:
        tokens_step = mean([r["tokens_generated"] for r in measured])
    out = {"seconds_per_step": seconds, "tokens_per_step": tokens_step,
           "generation_s": mean([r["generation_s"] for r in measured]),
           "steps_measured": len(measured), "run_seconds": round(total, 1)}
    if duet:
        overhead = mean([g.get("duet/overhead_s") for g in logs])
        out.update({
            "controller_s_per_step": overhead,
            "controller_share": round(overhead / seconds, 5) if overhead and seconds else None,
            "n_q_mean": mean([g.get("duet/n_q_mean") for g in logs]),
            "abort_rate": mean([g.get("duet/abort_rate") for g in logs]),
            "marker_rate": mean([g.get("duet/marker_rate") for g in logs]),
            "token_budget": mean([g.get("duet/token_budget") for g in logs]),
            "budget_used": mean([g.get("duet/budget_used") for g in logs]),
            "k_refits": sum(1 for g in logs if g.get("duet/k_refit")),
        })
    print(f"[duet] {label}: {out}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--full", type=int, default=4, help="GRPO rollouts per prompt")
    parser.add_argument("--budget", type=float, default=1.0, help="DUET budget fraction b")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

    from pipelines.models import convert

    model_dir = convert()  # the project's WEFT_HOME, before switching to a temporary one
    duet = {"budget_fraction": args.budget, "full_rollouts": args.full, "n_min": 2,
            "grace": max(1, args.tokens // 8), "poll_every": 4, "tail_tokens": args.tokens,
            "window": 256, "refit_every": 1, "eps_abort": 0.05}
    with tempfile.TemporaryDirectory(prefix="weft-bench-duet-") as home:
        os.environ["WEFT_HOME"] = home
        common = {"steps": args.steps, "prompts": args.prompts, "full": args.full,
                  "tokens": args.tokens}
        grpo = run_once(model_dir, label="grpo", duet=None, **common)
        duet_run = run_once(model_dir, label="duet", duet=duet, **common)

    def ratio(key: str) -> float | None:
        a, b = grpo[key], duet_run[key]
        return round(a / b, 3) if a and b else None

    print(json.dumps({
        "bench": "duet", "device": "cpu", "machine": platform.machine(),
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
        "model": model_dir.name, "prompts_per_step": args.prompts, "full_rollouts": args.full,
        "budget_fraction": args.budget, "max_completion_length": args.tokens,
        "grpo": grpo, "duet": duet_run,
        "ratio_grpo_over_duet_tokens_per_step": ratio("tokens_per_step"),
        "ratio_grpo_over_duet_seconds_per_step": ratio("seconds_per_step"),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
