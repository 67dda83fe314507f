"""One process of the two-process DUET tests (launched by ``torch.distributed.run``, gloo on
CPU; used by tests/training/duet/test_dist.py). Each process writes what it saw as JSON to
``<out>/rank<r>.json`` for the test to compare.

``plain <out>``: the gather/allocate logic of ``training.duet.dist`` on plain values.
``train <out> <model_dir>``: a tiny DUET run on the embedded model (four prompts, two per
process, as weft's config requires whole groups per process; two steps, a checkpoint at step 2),
then a fresh trainer resumed from that checkpoint.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SLOTS = 4
PROMPTS = [("A", 1.0, 10.0), ("B", 0.5, 20.0), ("C", 0.05, 30.0)]  # key, s_hat, L_hat


def plain(out: Path) -> None:
    import torch.distributed as dist

    from training.duet import DuetSettings
    from training.duet.dist import TorchGroup, gather_rows, global_plan

    dist.init_process_group("gloo")
    group = TorchGroup.current()
    rows = [p for p in PROMPTS for _ in range(SLOTS)]  # 12 rows, prompt B straddles the ranks
    share = len(rows) // group.world
    local = rows[group.rank * share:(group.rank + 1) * share]
    settings = DuetSettings(budget_fraction=1.0, full_rollouts=2, n_min=1)
    plan = global_plan(group, local, SLOTS, settings, lam0=None)
    gathered = gather_rows(group, [(group.rank, i) for i in range(len(local))])
    # A process whose estimate of the straddling prompt differs: every process must refuse.
    bad = [(k, s * 2 if (k == "B" and group.rank == 1) else s, length)
           for k, s, length in local]
    try:
        global_plan(group, bad, SLOTS, settings, lam0=None)
        error = None
    except RuntimeError as exc:
        error = str(exc)
    dist.destroy_process_group()
    record = {"rank": group.rank, "world": group.world, "local": local, "plan": plan,
              "gathered": gathered, "error": error}
    (out / f"rank{group.rank}.json").write_text(json.dumps(record))


def _trainer(model_dir: str, out: Path):
    from datasets import Dataset
    from transformers import AutoTokenizer

    from training.config import build_config
    from training.data import grpo_examples, load_dataset
    from training.duet import DuetSettings
    from training.duet.trainer import DuetGRPOTrainer

    values = {
        "model_name_or_path": model_dir, "dataset": "builtin:arith", "dataset_limit": 4,
        "answer_format": "tir", "rewards": [{"name": "outcome", "answer_format": "tir"}],
        "loss_type": "dapo", "num_generations": SLOTS, "per_device_train_batch_size": 8,
        "max_completion_length": 12, "max_steps": 2, "learning_rate": 1e-4, "use_cpu": True,
        "bf16": False, "gradient_checkpointing": False, "torch_threads": 1,
        "logging_steps": 1, "save_strategy": "steps", "save_steps": 2, "report_to": "none",
        "recipe": "duet-ddp", "output_dir": str(out / "run"),
        # eps_abort = 1: every coin drawn keeps its rollout, so each prompt keeps >= n_min
        # rollouts and Phase 4 observes sigma (Eq. 3) from both processes' log-probs.
        "duet": {"budget_fraction": 1.0, "full_rollouts": 3, "n_min": 2, "eps_abort": 1.0,
                 "grace": 2, "poll_every": 2, "tail_tokens": 32, "window": 64,
                 "refit_every": 1},
    }
    config = build_config("grpo", values)
    data = load_dataset(config.dataset, limit=config.dataset_limit, seed=config.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def varied_reward(completions, **kwargs):  # varies within groups: non-zero advantages
        return [float(len(str(c)) % 2) for c in completions]

    return DuetGRPOTrainer(model=model_dir, reward_funcs=[varied_reward], args=config,
                           train_dataset=Dataset.from_list(grpo_examples(data.rows, "tir")),
                           processing_class=tokenizer,
                           duet_settings=DuetSettings.from_mapping(config.duet))


def train(out: Path, model_dir: str) -> None:
    from training.duet.trainer import prompt_key

    trainer = _trainer(model_dir, out)
    keys = sorted({prompt_key(x["prompt"]) for x in trainer.train_dataset})
    for key, sigma in zip(keys, (1.0, 0.3, 0.1, 0.05), strict=True):  # same on every process
        trainer.prompt_state.observe_sigma(key, sigma)
    steps: list[dict] = []
    allocate, apply = trainer._allocate, trainer._apply_update_weights

    def record_allocate(inputs):
        local = []
        for x in inputs:
            k = prompt_key(x["prompt"])
            local.append([k, trainer.prompt_state.s_hat(k), trainer.prompt_state.l_hat(k)])
        lam0 = trainer.lam
        plan = allocate(inputs)
        steps.append({"local": local, "lam0": lam0, "step": trainer.state.global_step,
                      "plan": {k: plan[k] for k in ("keys", "counts", "lam", "budget",
                                                    "allocated", "offset", "local_rows")}})
        return plan

    def record_apply(out_batch, plan):
        apply(out_batch, plan)
        steps[-1]["coins"] = {str(i): g.u for i, g in plan["gates"].items()}
        steps[-1]["advantages"] = out_batch["advantages"].tolist()
        steps[-1]["adv_global"] = list(trainer._pending["adv"])

    trainer._allocate, trainer._apply_update_weights = record_allocate, record_apply
    trainer.train()
    state = json.loads(json.dumps(trainer.duet_state_dict()))
    rank = trainer.accelerator.process_index
    resumed = _trainer(model_dir, out)
    cold = json.loads(json.dumps(resumed.duet_state_dict()))
    resumed.train(resume_from_checkpoint=str(out / "run" / "checkpoint-2"))  # at max_steps
    record = {"rank": rank, "world": trainer.accelerator.num_processes, "steps": steps,
              "state": state, "cold": cold, "seed": trainer.args.seed,
              "resumed": json.loads(json.dumps(resumed.duet_state_dict()))}
    (out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    if mode == "plain":
        plain(folder)
    else:
        train(folder, sys.argv[3])
