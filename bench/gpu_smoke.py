"""GPU smoke check: a few SFT steps, then a few GRPO steps with vLLM rollouts and with
transformers rollouts, side by side on the same model, data and settings.

    python bench/gpu_smoke.py [--model DIR] [--sft-steps 3] [--grpo-steps 3]
                              [--generations 32] [--tokens 1024] [--vllm-mode colocate]

Runs weft's own entry points (``training.sft.run_sft``, ``training.grpo.run_grpo``, recipes
``sxs_sft`` and ``rlvr_grpo`` with overrides) in a temporary ``WEFT_HOME`` on the built-in
data sets, so it needs nothing from the internet. ``--model`` is a model folder; without one,
a random-init copy of the embedded model's architecture (its ``config.json`` and tokenizer,
new weights) is built: wrong answers, real shapes and timings. The GRPO figures come from
``training.grpo_trainer.WeftGRPOTrainer``'s timers (generation, rewards, scoring) and the step
times of ``training.callbacks``; the first GRPO step (engine warm-up, the first weight sync) is
left out when more than one runs. Generation time includes TRL's weight sync into vLLM
(it happens inside generation), so vLLM's tokens/s is what a GRPO step gets. Prints one JSON line: per engine tokens/s of generation,
seconds per step and the share of the step spent generating, and the ratio of vLLM to
transformers generation throughput (goal: >= 10, with generation < half the step).

On a machine without a CUDA GPU it exits with status 2 and says so (nothing is run). When vLLM
cannot be used (not installed, or a version TRL does not support) the vLLM entry says why and
the status is 3. Not guaranteed: figures from a shared or throttled GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja", "generation_config.json")
NO_GPU = ("gpu_smoke needs a CUDA GPU and none is visible (torch.cuda.is_available() is False); "
          "run it on a GPU machine: make gpu-check (see README, 'Training on GPUs')")


def random_init_copy(source: Path, target: Path) -> Path:
    """``source``'s architecture and tokenizer with freshly initialised weights, in ``target``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)
    config = AutoConfig.from_pretrained(source)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(target)
    return target


def _mean(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def grpo_figures(rows: list[dict]) -> dict:
    """Per-step means over the measured steps (the first left out when there are more)."""
    measured = rows[1:] if len(rows) > 1 else rows
    step = _mean(measured, "seconds_per_step")
    gen = _mean(measured, "generation_s")
    tokens = _mean(measured, "tokens_generated")
    return {
        "seconds_per_step": None if step is None else round(step, 3),
        "generation_s_per_step": None if gen is None else round(gen, 3),
        "generation_share": round(gen / step, 3) if gen is not None and step else None,
        "tokens_per_step": None if tokens is None else round(tokens, 1),
        "generation_tokens_per_s": round(tokens / gen, 1) if tokens and gen else None,
        "steps_measured": len(measured),
    }


def run_sft(model: Path, steps: int) -> dict:
    from training.config import load_config
    from training.sft import run_sft as train
    from warehouse import Warehouse

    config = load_config("sxs_sft", [f"model_name_or_path={model}", f"max_steps={steps}",
                                     "dataset=builtin:sxs_sft", "dataset_limit=64",
                                     "save_strategy=no", "logging_steps=1", "disable_tqdm=true",
                                     "recipe=gpu-smoke-sft"])
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        result = train(config)
    rows = Warehouse().read("train_metrics", partition=result.checkpoint_id).to_pylist()
    step = _mean(sorted(rows, key=lambda r: r["step"])[1:] or rows, "seconds_per_step")
    return {"steps": result.global_step, "run_seconds": round(time.perf_counter() - started, 1),
            "seconds_per_step": None if step is None else round(step, 3)}


def run_grpo(model: Path, engine: str, args: argparse.Namespace) -> dict:
    from training.config import load_config
    from training.config_recipes import RecipeError
    from training.grpo import run_grpo as train
    from warehouse import Warehouse

    overrides = [f"model_name_or_path={model}", f"max_steps={args.grpo_steps}",
                 "dataset=builtin:arith", "dataset_limit=256",
                 f"num_generations={args.generations}",
                 f"per_device_train_batch_size={args.generations}",
                 "gradient_accumulation_steps=1", f"max_completion_length={args.tokens}",
                 "drop_degenerate_groups=false", "save_strategy=no", "logging_steps=1",
                 "disable_tqdm=true", f"recipe=gpu-smoke-{engine}",
                 "rewards=[{name: outcome, answer_format: boxed}]", "answer_format=boxed"]
    if engine == "vllm":
        overrides += ["use_vllm=true", f"vllm_mode={args.vllm_mode}",
                      f"vllm_gpu_memory_utilization={args.vllm_memory}"]
    else:
        overrides += ["use_vllm=false"]
    try:
        config = load_config("rlvr_grpo", overrides)
    except RecipeError as exc:
        return {"error": str(exc)}
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        result = train(config)
    rows = sorted(Warehouse().read("train_metrics", partition=result.checkpoint_id).to_pylist(),
                  key=lambda r: r["step"])
    return {"engine": config._weft_rollouts.engine, "steps": result.global_step,
            "run_seconds": round(time.perf_counter() - started, 1), **grpo_figures(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None,
                        help="model folder (default: random-init copy of the embedded model)")
    parser.add_argument("--sft-steps", type=int, default=3)
    parser.add_argument("--grpo-steps", type=int, default=3)
    parser.add_argument("--generations", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--vllm-mode", choices=("colocate", "server"), default="colocate")
    parser.add_argument("--vllm-memory", type=float, default=0.3,
                        help="vllm_gpu_memory_utilization (colocate)")
    parser.add_argument("--engines", default="vllm,transformers")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

    import torch

    if not torch.cuda.is_available():
        print(f"error: {NO_GPU}", file=sys.stderr)
        return 2
    from training.rollouts import vllm_problem, vllm_version

    home = Path(tempfile.mkdtemp(prefix="weft-gpu-smoke-"))
    os.environ["WEFT_HOME"] = str(home)
    try:
        if args.model is None:
            from pipelines.models import convert

            model = random_init_copy(convert(), home / "random-init")
            model_label = "random-init (embedded architecture)"
        else:
            if not (args.model / "config.json").is_file():
                print(f"error: {args.model} is not a model folder (no config.json)",
                      file=sys.stderr)
                return 2
            model, model_label = args.model, str(args.model)
        out: dict = {"bench": "gpu_smoke", "device": torch.cuda.get_device_name(0),
                     "gpus": torch.cuda.device_count(), "torch": torch.__version__,
                     "vllm": vllm_version(), "model": model_label,
                     "generations": args.generations, "max_completion_length": args.tokens,
                     "sft": run_sft(model, args.sft_steps)}
        engines = [e.strip() for e in args.engines.split(",") if e.strip()]
        for engine in engines:
            if engine == "vllm" and vllm_problem(vllm_version()):
                out["vllm_rollouts"] = {"error": vllm_problem(vllm_version())}
                continue
            out[f"{engine}_rollouts"] = run_grpo(model, engine, args)
        fast = out.get("vllm_rollouts", {}).get("generation_tokens_per_s")
        slow = out.get("transformers_rollouts", {}).get("generation_tokens_per_s")
        out["ratio_vllm_over_transformers_tokens_per_s"] = (round(fast / slow, 2)
                                                            if fast and slow else None)
        print(json.dumps(out))
        return 3 if "error" in out.get("vllm_rollouts", {}) else 0
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
