"""Benchmark: seconds per GRPO step on CPU, split into generation, reward, scoring, optimisation.

Runs real GRPO steps (TRL through ``training.grpo.run_grpo``) on the embedded model with the
built-in arithmetic prompts and the boxed outcome reward, in a temporary WEFT_HOME. The split
comes from ``training.grpo_trainer.WeftGRPOTrainer``'s timers (generation = ``_generate``,
reward = reward functions, scoring = the rest of ``_generate_and_score_completions``: old and
reference log-probabilities) and the step wall time measured by ``training.callbacks``
(optimisation = step time minus those: forward, backward and the optimizer). The first step is
a warm-up and is left out when more than one step runs. Process CPU seconds per step are
reported too: on a shared machine wall time depends on load, CPU time much less.

Comparisons (``ratio`` = variant / baseline):

- ``--compare trl`` (default): weft's GRPO (``training.grpo.run_grpo``: its grading pool,
  recorder, degenerate-group filter, checkpoint bookkeeping) against a bare TRL script written
  here (``run_trl_peer``): ``trl.GRPOTrainer`` with the very same ``GRPOConfig`` fields as
  weft's resolved config, the same prompts, and a plain in-process boxed-answer reward.
  Both are timed by one callback from ``on_train_begin`` to each ``on_step_end``, so the first
  step (which pays for whatever starts lazily) is reported apart and the ratio covers every
  step; ``--rounds`` alternates the order (weft, TRL, then TRL, weft, ...) so load changes
  hit both. The goal: weft within 1.05x of the bare script over all steps.
- ``threads``: ``torch_threads=1`` (baseline, what the CPU recipes use) against torch's
  default thread count; ``gradient_checkpointing``: checkpointing off against on.

Prints one JSON line.

    python bench/grpo_step.py [--steps 4] [--generations 8] [--tokens 32] [--rounds 2]
                              [--compare trl|threads|gradient_checkpointing|none]
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
# GRPOConfig fields TRL derives from others when the config is built; copying them would set both
DERIVED = ("generation_batch_size", "logging_dir")


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def step_clock():
    """A TrainerCallback (made on first use: transformers loads lazily) that notes the wall
    time at ``on_train_begin`` and at every ``on_step_end``: ``seconds`` lists each step's
    wall time, the first one measured from the start of training."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.marks = [time.perf_counter()]

        def on_step_end(self, args, state, control, **kwargs):
            self.marks.append(time.perf_counter())

        @property
        def seconds(self) -> list[float]:
            return [b - a for a, b in itertools.pairwise(self.marks)]

    return StepClock()


def clock_figures(seconds: list[float]) -> dict:
    """First step, mean of the later ones and mean over all steps (None where there are none)."""
    later = seconds[1:]
    return {"first_step_s": round(seconds[0], 3) if seconds else None,
            "steady_step_s": round(sum(later) / len(later), 3) if later else None,
            "all_steps_mean_s": round(sum(seconds) / len(seconds), 3) if seconds else None,
            "steps_timed": len(seconds)}


def weft_config(model_dir: Path, *, steps: int, generations: int, tokens: int,
                threads: int | None, checkpointing: bool, label: str):
    from training.config import build_config

    return build_config("grpo", {
        "recipe": f"bench-{label}", "model_name_or_path": str(model_dir),
        "dataset": "builtin:arith", "dataset_limit": 64,
        "rewards": [{"name": "outcome", "answer_format": "boxed"}],
        "num_generations": generations, "per_device_train_batch_size": generations,
        "max_completion_length": tokens, "max_steps": steps, "learning_rate": 1e-6,
        "temperature": 1.0, "use_cpu": True, "bf16": False,
        "gradient_checkpointing": checkpointing, "torch_threads": threads,
        "logging_steps": 1, "save_strategy": "no", "report_to": "none", "disable_tqdm": True,
    })


def _boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{") - 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j].strip()
    return None


def run_trl_peer(model_dir: Path, *, steps: int, generations: int, tokens: int,
                 threads: int | None, label: str) -> dict:
    """The bare TRL script: ``trl.GRPOTrainer`` with the ``GRPOConfig`` fields of weft's
    resolved config for the same settings (so nothing but the wrapper differs), weft's prompts
    for ``builtin:arith`` and an in-process reward (1 when the last boxed answer equals the
    gold answer as text, else 0)."""
    import dataclasses

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from training.data import grpo_examples, load_dataset

    weft = weft_config(model_dir, steps=steps, generations=generations, tokens=tokens,
                       threads=threads, checkpointing=False, label=label)
    if threads:
        torch.set_num_threads(threads)
    rows = load_dataset(weft.dataset, limit=weft.dataset_limit, seed=weft.seed).rows
    examples = [{"prompt": e["prompt"], "answer": str(e["answer"])}
                for e in grpo_examples(rows, "boxed")]

    def boxed_match(completions, answer, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [1.0 if _boxed(t) == a.strip() else 0.0 for t, a in zip(texts, answer)]

    with tempfile.TemporaryDirectory(prefix="weft-bench-trl-") as out:
        # generation_batch_size is derived from steps_per_generation when the config is
        # built (TRL refuses both set): the peer derives it the same way
        fields = {f.name: getattr(weft, f.name) for f in dataclasses.fields(GRPOConfig)
                  if f.init and hasattr(weft, f.name) and f.name not in DERIVED}
        args = GRPOConfig(**{**fields, "output_dir": out})
        clock = step_clock()
        started = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):
            trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[boxed_match], args=args,
                                  train_dataset=Dataset.from_list(examples),
                                  processing_class=AutoTokenizer.from_pretrained(model_dir),
                                  callbacks=[clock])
            trainer.train()
        total = time.perf_counter() - started
    out = {**clock_figures(clock.seconds), "run_seconds": round(total, 1)}
    print(f"[grpo_step] {label} (bare TRL): {out}", file=sys.stderr, flush=True)
    return out


def run_once(model_dir: Path, *, steps: int, generations: int, tokens: int, threads: int | None,
             checkpointing: bool, label: str) -> dict:
    from transformers import TrainerCallback

    from training.grpo import run_grpo
    from warehouse import Warehouse

    cpu_marks: list[float] = []

    class CpuClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            cpu_marks.append(_cpu_seconds())

        def on_step_end(self, args, state, control, **kwargs):
            cpu_marks.append(_cpu_seconds())

    config = weft_config(model_dir, steps=steps, generations=generations, tokens=tokens,
                         threads=threads, checkpointing=checkpointing, label=label)
    clock = step_clock()
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # transformers prints its logs to stdout
        result = run_grpo(config, extra_callbacks=[CpuClock(), clock])
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
           "steps_measured": len(measured), "run_seconds": round(total, 1),
           **clock_figures(clock.seconds)}
    print(f"[grpo_step] {label}: {out}", file=sys.stderr, flush=True)
    return out


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def compare_trl(model_dir: Path, common: dict, rounds: int) -> dict:
    """weft and the bare TRL script, alternated over ``rounds`` (weft first in even rounds),
    with the ratios of their per-step means over all steps and of their first steps."""
    runs: dict[str, list[dict]] = {"weft": [], "trl": []}
    for r in range(rounds):
        order = ("weft", "trl") if r % 2 == 0 else ("trl", "weft")
        for side in order:
            if side == "weft":
                runs[side].append(run_once(model_dir, threads=1, checkpointing=False,
                                           label=f"weft-r{r}", **common))
            else:
                runs[side].append(run_trl_peer(model_dir, threads=1, label=f"trl-r{r}",
                                               **common))
    figures = {side: {key: _mean([x[key] for x in rs if x.get(key) is not None])
                      for key in ("first_step_s", "steady_step_s", "all_steps_mean_s")}
               for side, rs in runs.items()}

    def ratio(key: str) -> float | None:
        a, b = figures["weft"][key], figures["trl"][key]
        return round(a / b, 3) if a and b else None

    return {"rounds": rounds, "weft": figures["weft"], "trl": figures["trl"],
            "per_round": runs,
            "ratio_weft_over_trl_all_steps": ratio("all_steps_mean_s"),
            "ratio_weft_over_trl_steady": ratio("steady_step_s"),
            "ratio_weft_over_trl_first_step": ratio("first_step_s"),
            "weft_first_over_steady": (round(figures["weft"]["first_step_s"]
                                             / figures["weft"]["steady_step_s"], 3)
                                       if figures["weft"]["steady_step_s"] else None)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternated rounds of the trl comparison (default 2)")
    parser.add_argument("--compare", choices=("trl", "threads", "gradient_checkpointing", "none"),
                        default="trl")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.rounds < 1:
        parser.error("--steps must be at least 2 (the first step is reported apart) and "
                     "--rounds at least 1")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

    from pipelines.models import convert

    model_dir = convert()  # the project's WEFT_HOME, before switching to a temporary one
    import torch

    default_threads = torch.get_num_threads()
    head = {"bench": "grpo_step", "device": "cpu", "machine": platform.machine(),
            "cpus": os.cpu_count(), "load_avg_1m_start": round(os.getloadavg()[0], 2),
            "model": model_dir.name, "generations": args.generations,
            "max_completion_length": args.tokens, "steps": args.steps,
            "compare": args.compare}
    with tempfile.TemporaryDirectory(prefix="weft-bench-grpo-") as home:
        os.environ["WEFT_HOME"] = home
        common = {"steps": args.steps, "generations": args.generations, "tokens": args.tokens}
        if args.compare == "trl":
            body = compare_trl(model_dir, common, args.rounds)
        else:
            baseline = run_once(model_dir, threads=1, checkpointing=False, label="baseline",
                                **common)
            variant = None
            if args.compare == "threads":
                variant = run_once(model_dir, threads=default_threads, checkpointing=False,
                                   label="variant", **common)
            elif args.compare == "gradient_checkpointing":
                variant = run_once(model_dir, threads=1, checkpointing=True, label="variant",
                                   **common)
            ratio = (round(variant["seconds_per_step"] / baseline["seconds_per_step"], 3)
                     if variant and variant["seconds_per_step"] and baseline["seconds_per_step"]
                     else None)
            body = {"baseline": baseline, "variant": variant,
                    "ratio_variant_over_baseline_seconds_per_step": ratio}
    print(json.dumps({**head, **body, "load_avg_1m_end": round(os.getloadavg()[0], 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
