"""Benchmark: tandem rollout time vs solo rollouts of the same batch and length, side by side.

Tandem RL (App. A.1 of the paper) pays two forwards per generated token (senior, then junior), so
the architectural bound on tandem/solo time is 2.0; the issue asks for <= 2.1x. Three rollouts of
``--batch`` prompts x ``--tokens`` new tokens each (EOS disabled, so every run generates exactly
the same number of tokens) are timed in one process, interleaved, ``--repeats`` times after a
warm-up, and their medians compared:

- ``tandem``: ``training.tandem.core.tandem_generate`` (senior + junior, one forward of each per
  token, both KV caches in lockstep); the junior is a copy of the senior (self-pairing, §3.2);
- ``solo_loop``: the same decoder with one model (``training.tandem.core.solo_generate``): the
  ratio ``tandem / solo_loop`` isolates the cost of the second model;
- ``solo_generate``: transformers' ``model.generate`` (sampling, KV cache), the solo baseline
  TRL's GRPO uses without vLLM.

Also reported: tokens/s of each, and the bytes held by the KV caches after a full rollout
(tandem: both caches; solo: one), plus peak CUDA memory when on a GPU. ``--random-init``
builds the model from the embedded model's ``config.json`` with random weights (for a GPU
machine that cannot carry the weights; timings are the same). Prints one JSON line.

    python bench/tandem.py [--batch 8] [--tokens 64] [--repeats 3] [--device auto]
                           [--dtype float32|bfloat16] [--threads N] [--random-init]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS = ["Compute 37 * 43 and explain each step.",
           "What is the capital of Australia? Answer in one sentence.",
           "Write the first ten prime numbers.",
           "Solve for x: 3x + 7 = 22."]


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--random-init", action="store_true")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from training.tandem.core import (
        boundary_ids,
        boundary_mask,
        cache_bytes,
        solo_generate,
        tandem_generate,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu")
                          if args.device == "auto" else args.device)
    dtype = getattr(torch, args.dtype)
    path = args.model
    if path == "embedded":   # imported only here: the GPU machine may lack weft's other deps
        from training.model_path import resolve_model

        path = resolve_model(path)
    tok = AutoTokenizer.from_pretrained(path)
    if args.random_init:
        torch.manual_seed(0)
        senior = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=dtype)
    else:
        senior = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    senior = senior.to(device).eval()
    junior = copy.deepcopy(senior).eval()
    vocab = int(senior.get_output_embeddings().weight.shape[0])
    mask = boundary_mask(boundary_ids(tok), vocab)
    prompts = [tok.apply_chat_template([{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                                       add_generation_prompt=True, tokenize=False)
               for i in range(args.batch)]
    prompt_ids = [tok.encode(p, add_special_tokens=False) for p in prompts]
    seeds = list(range(args.batch))
    common = {"seeds": seeds, "boundary": mask, "max_new_tokens": args.tokens,
              "eos_token_ids": [], "pad_token_id": tok.pad_token_id}

    def run_tandem():
        caches: list = []
        out = tandem_generate(senior, junior, prompt_ids, caches=caches, **common)
        return out, sum(cache_bytes(c) for c in caches)

    def run_solo_loop():
        caches: list = []
        out = solo_generate(senior, prompt_ids, caches=caches, **common)
        return out, sum(cache_bytes(c) for c in caches)

    padded = tok.pad([{"input_ids": p} for p in prompt_ids], padding=True, return_tensors="pt",
                     padding_side="left")

    def run_generate():
        with torch.no_grad():
            out = senior.generate(input_ids=padded["input_ids"].to(device),
                                  attention_mask=padded["attention_mask"].to(device),
                                  do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                  max_new_tokens=args.tokens, min_new_tokens=args.tokens,
                                  pad_token_id=tok.pad_token_id)
        return out, None

    runs = {"tandem": run_tandem, "solo_loop": run_solo_loop, "solo_generate": run_generate}
    times: dict[str, list[float]] = {k: [] for k in runs}
    memory: dict[str, int | None] = {}
    peak: dict[str, int] = {}
    produced: dict[str, int] = {}
    for fn in runs.values():   # warm-up
        fn()
    for _ in range(args.repeats):
        for name, fn in runs.items():
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
            _sync(device)
            started = time.perf_counter()
            out, cache_mem = fn()
            _sync(device)
            times[name].append(time.perf_counter() - started)
            memory[name] = cache_mem
            if device.type == "cuda":
                peak[name] = torch.cuda.max_memory_allocated(device) - base
            if name == "solo_generate":
                produced[name] = int(out.shape[0] * (out.shape[1] - padded["input_ids"].shape[1]))
            else:
                produced[name] = sum(len(c) for c in out.completion_ids)
    median = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "bench": "tandem",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
        else platform.processor() or platform.machine(),
        "dtype": args.dtype, "batch": args.batch, "new_tokens": args.tokens,
        "repeats": args.repeats, "random_init": args.random_init,
        "threads": torch.get_num_threads(),
        "tokens_generated": produced,
        "seconds": {k: round(v, 4) for k, v in median.items()},
        "tokens_per_s": {k: round(produced[k] / median[k], 1) for k in median},
        "ratio_tandem_vs_solo_loop": round(median["tandem"] / median["solo_loop"], 3),
        "ratio_tandem_vs_solo_generate": round(median["tandem"] / median["solo_generate"], 3),
        "bound": 2.0, "target": 2.1,
        "kv_cache_bytes": {"tandem_both": memory.get("tandem"), "solo": memory.get("solo_loop")},
    }
    if peak:
        result["cuda_peak_bytes_above_weights"] = peak
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
