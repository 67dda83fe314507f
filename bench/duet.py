"""Benchmark: DUET vs GRPO at matched budget, side by side in one run (DUET paper §4.3, Fig. 9).

Runs real GRPO steps (TRL through ``training.grpo.run_grpo``) on the embedded model with the
built-in arithmetic prompts and the boxed outcome reward, in a temporary WEFT_HOME, three arms
alternated over ``--rounds`` rounds (grpo, duet, duet_plain, grpo, duet, ...) so that a change
in the machine's load falls on every arm alike: plain GRPO with ``full`` rollouts per prompt;
DUET (``training.duet.trainer``) at budget fraction ``b`` of that (``full`` rollouts per
prompt; ``2 x full`` slots), same prompts, seed and length cap, whose ended rollouts leave the
decoding batch (``training.duet.generate.generate_compacting``); and ``duet_plain``, the same
DUET run on plain ``model.generate`` (every allocated row decoded until the longest ends).

Reported per arm, per step (first step of each run left out as warm-up when more than one
runs), averaged over rounds: tokens generated (GRPO: all completion tokens; DUET: allocated
rollouts only), generation seconds (``timing/generation_s``: the rollouts alone), whole-step
wall seconds, the DUET controller's own time (allocation, the gate inside generation, weights
and Phase-4 updates, ``duet/overhead_s``; the gate's part ``duet/gate_s``) as a share of its
step, the share of the plain call's decode rows computed (``duet/decode_row_share``) and DUET's
realised tokens over its budget (``duet/budget_used``). Ratios are GRPO / DUET (> 1: DUET is
cheaper), the mean of the per-round ratios and each round's; ``compaction`` is duet_plain /
duet generation seconds. The paper reports 1.62x (full) and 2.51x (half budget) wall clock on
8 H100s with vLLM and 3,072-token rollouts; on a CPU with a 135M model and short rollouts the
abort gate has much less tail to cut, and a decode step costs about as much for one row as
for several (the weights are read once per step), so generation time follows the number of
steps (the longest row) more than the tokens.

    python bench/duet.py [--steps 3] [--prompts 2] [--full 4] [--budget 1.0] [--tokens 64]
                         [--rounds 2] [--arms grpo,duet,duet_plain]

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

ARMS = ("grpo", "duet", "duet_plain")


def run_once(model_dir: Path, *, label: str, steps: int, prompts: int, full: int, tokens: int,
             duet: dict | None, compact: bool = True) -> dict:
    from training.config import build_config
    from training.duet.generate import MIN_ROWS
    from training.duet.trainer import DuetGRPOTrainer
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
    DuetGRPOTrainer.compact_min_rows = MIN_ROWS if compact else None
    try:
        with contextlib.redirect_stdout(sys.stderr):  # transformers prints its logs to stdout
            result = run_grpo(config)
    finally:
        DuetGRPOTrainer.compact_min_rows = MIN_ROWS
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
            "gate_s_per_step": mean([g.get("duet/gate_s") for g in logs]),
            "decode_row_share": mean([g.get("duet/decode_row_share") for g in logs]),
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
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the arms")
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"comma-separated arms to run, from {', '.join(ARMS)}")
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown or not arms or args.rounds < 1:
        parser.error(f"--arms takes a comma-separated subset of {', '.join(ARMS)} (got "
                     f"{args.arms!r}) and --rounds at least 1 (got {args.rounds})")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

    from pipelines.models import convert

    model_dir = convert()  # the project's WEFT_HOME, before switching to a temporary one
    duet = {"budget_fraction": args.budget, "full_rollouts": args.full, "n_min": 2,
            "grace": max(1, args.tokens // 8), "poll_every": 4, "tail_tokens": args.tokens,
            "window": 256, "refit_every": 1, "eps_abort": 0.05}
    load_start = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="weft-bench-duet-") as home:
        os.environ["WEFT_HOME"] = home
        common = {"steps": args.steps, "prompts": args.prompts, "full": args.full,
                  "tokens": args.tokens}
        for round_ in range(args.rounds):
            for arm in arms:
                runs[arm].append(run_once(
                    model_dir, label=f"{arm}-{round_}", duet=None if arm == "grpo" else duet,
                    compact=arm != "duet_plain", **common))

    def average(arm: str) -> dict:
        keys = runs[arm][0].keys()
        out = {}
        for k in keys:
            values = [r[k] for r in runs[arm] if isinstance(r.get(k), (int, float))]
            out[k] = round(sum(values) / len(values), 4) if values else None
        return out

    def ratios(a: str, b: str, key: str) -> dict | None:
        """Per-round ``a / b`` of ``key`` (the arms ran back to back in each round), and their
        mean."""
        if a not in runs or b not in runs:
            return None
        per_round = [round(x[key] / y[key], 3) if x.get(key) and y.get(key) else None
                     for x, y in zip(runs[a], runs[b], strict=True)]
        known = [r for r in per_round if r is not None]
        return {"mean": round(sum(known) / len(known), 3) if known else None,
                "rounds": per_round}

    print(json.dumps({
        "bench": "duet", "device": "cpu", "machine": platform.machine(),
        "cpus": os.cpu_count(), "load_avg_1m_start": round(load_start, 2),
        "load_avg_1m_end": round(os.getloadavg()[0], 2),
        "date": time.strftime("%Y-%m-%d"), "model": model_dir.name,
        "prompts_per_step": args.prompts, "full_rollouts": args.full,
        "budget_fraction": args.budget, "max_completion_length": args.tokens,
        "rounds": args.rounds, **{arm: average(arm) for arm in arms},
        "ratio_grpo_over_duet_tokens_per_step": ratios("grpo", "duet", "tokens_per_step"),
        "ratio_grpo_over_duet_generation_s": ratios("grpo", "duet", "generation_s"),
        "ratio_grpo_over_duet_seconds_per_step": ratios("grpo", "duet", "seconds_per_step"),
        "ratio_grpo_over_duet_plain_generation_s": ratios("grpo", "duet_plain",
                                                           "generation_s"),
        "compaction_duet_plain_over_duet_generation_s": ratios("duet_plain", "duet",
                                                                "generation_s"),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
