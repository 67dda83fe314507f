"""Benchmark: seconds per GRPO step on CPU, split into generation, reward, scoring, optimisation.

Runs real GRPO steps (TRL through ``training.grpo.run_grpo``) on the embedded model with the
built-in arithmetic prompts and the boxed outcome reward, in a temporary WEFT_HOME. The split
comes from ``training.grpo_trainer.WeftGRPOTrainer``'s timers (generation = ``_generate``,
reward = reward functions, scoring = the rest of ``_generate_and_score_completions``: old and
reference log-probabilities) and the step wall time measured by ``training.callbacks``
(optimisation = step time minus those: forward, backward and the optimizer). The first step is
a warm-up and is left out when more than one step runs. Process CPU seconds per step are
reported too: on a shared machine wall time depends on load, CPU time much less.

Two configurations run one after the other and are compared (``ratio`` = variant / baseline):
by default ``torch_threads=1`` (baseline, what the CPU recipes use) against torch's default
thread count; ``--compare gradient_checkpointing`` compares checkpointing off against on.
Prints one JSON line.

    python bench/grpo_step.py [--steps 4] [--generations 8] [--tokens 32]
                              [--compare threads|gradient_checkpointing|none]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("generation_s", "reward_s", "scoring_s", "optimisation_s")


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def run_once(model_dir: Path, *, steps: int, generations: int, tokens: int, threads: int | None,
             checkpointing: bool, label: str) -> dict:
    from transformers import TrainerCallback

    from training.config import build_config
    from training.grpo import run_grpo
    from warehouse import Warehouse

    cpu_marks: list[float] = []

    class CpuClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            cpu_marks.append(_cpu_seconds())

        def on_step_end(self, args, state, control, **kwargs):
            cpu_marks.append(_cpu_seconds())

    config = build_config("grpo", {
        "recipe": f"bench-{label}", "model_name_or_path": str(model_dir),
        "dataset": "builtin:arith", "dataset_limit": 64,
        "rewards": [{"name": "outcome", "answer_format": "boxed"}],
        "num_generations": generations, "per_device_train_batch_size": generations,
        "max_completion_length": tokens, "max_steps": steps, "learning_rate": 1e-6,
        "temperature": 1.0, "use_cpu": True, "bf16": False,
        "gradient_checkpointing": checkpointing, "torch_threads": threads,
        "logging_steps": 1, "save_strategy": "no", "report_to": "none", "disable_tqdm": True,
    })
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # transformers prints its logs to stdout
        result = run_grpo(config, extra_callbacks=[CpuClock()])
    total = time.perf_counter() - started
    rows = sorted(Warehouse().read("train_metrics", partition=result.checkpoint_id).to_pylist(),
                  key=lambda r: r["step"])
    measured = rows[1:] if len(rows) > 1 else rows
    cpu_steps = [b - a for a, b in itertools.pairwise(cpu_marks)]
    cpu_measured = cpu_steps[1:] if len(cpu_steps) > 1 else cpu_steps

    def mean(key: str) -> float | None:
        values = [r[key] for r in measured if r.get(key) is not None]
        return round(sum(values) / len(values), 3) if values else None

    out = {"seconds_per_step": mean("seconds_per_step"), **{k: mean(k) for k in PHASES},
           "tokens_per_step": mean("tokens_generated"),
           "cpu_seconds_per_step": round(sum(cpu_measured) / len(cpu_measured), 3)
           if cpu_measured else None,
           "torch_threads": threads, "gradient_checkpointing": checkpointing,
           "steps_measured": len(measured), "run_seconds": round(total, 1)}
    print(f"[grpo_step] {label}: {out}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--compare", choices=("threads", "gradient_checkpointing", "none"),
                        default="threads")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

    from pipelines.models import convert

    model_dir = convert()  # the project's WEFT_HOME, before switching to a temporary one
    import torch

    default_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="weft-bench-grpo-") as home:
        os.environ["WEFT_HOME"] = home
        common = {"steps": args.steps, "generations": args.generations, "tokens": args.tokens}
        baseline = run_once(model_dir, threads=1, checkpointing=False, label="baseline", **common)
        variant = None
        if args.compare == "threads":
            variant = run_once(model_dir, threads=default_threads, checkpointing=False,
                               label="variant", **common)
        elif args.compare == "gradient_checkpointing":
            variant = run_once(model_dir, threads=1, checkpointing=True, label="variant", **common)
    ratio = (round(variant["seconds_per_step"] / baseline["seconds_per_step"], 3)
             if variant and variant["seconds_per_step"] and baseline["seconds_per_step"] else None)
    print(json.dumps({
        "bench": "grpo_step", "device": "cpu", "machine": platform.machine(),
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
        "model": model_dir.name, "generations": args.generations,
        "max_completion_length": args.tokens, "compare": args.compare,
        "baseline": baseline, "variant": variant,
        "ratio_variant_over_baseline_seconds_per_step": ratio,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
