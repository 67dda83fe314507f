"""GRPO (RL with verifiable rewards) with TRL's GRPOTrainer, from a YAML recipe plus overrides.

``python -m training.grpo --recipe sxs_grpo.cpu [key=value ...]`` (also under ``accelerate
launch``, or launched by the ``grpo_checkpoint`` asset through Dagster Pipes, which points
``model_name_or_path`` at the SFT checkpoint). Prompts come from a dataset spec (a ``prompt``
column, or a ``problem`` column rendered with the system prompt of ``answer_format``); the
other columns (gold ``answer``, ``budget``, step-instance references) reach the reward
functions. Rewards are built from the recipe's ``rewards`` list (``training.rewards.REWARDS``);
their required columns are checked against the data before the model is loaded.

The config's class picks the trainer (``config.trainer_class()``, built with
``config.trainer_kwargs(base_model)``): ``training.grpo_trainer.WeftGRPOTrainer`` (TRL's loop
plus the degenerate-group filter and phase timings) for plain GRPO, its DUET subclass
``training.duet.trainer.DuetGRPOTrainer`` for a ``training.duet.config.DuetGRPOConfig`` (token-budget
control), ``training.tandem.trainer.TandemGRPOTrainer`` for a
``training.tandem.config.TandemGRPOConfig`` (Tandem RL rollouts, senior-only loss). Rollouts run on the engine
``training.rollouts`` chose (vLLM on CUDA machines, transformers otherwise; logged); in vLLM
server mode without ``vllm_server_base_url`` the main process starts the vLLM server on GPUs of
its own before the trainer connects, and stops it when training ends or fails.
Not guaranteed: that the tiny CPU recipes improve accuracy.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from training.data import add_budgets, grpo_examples, load_dataset
from training.errors import DatasetError
from training.pipes import Reporter, process_rank
from training.rewards import build_rewards, correctness_reward_index, warm_rewards
from training.rollouts import local_processes, start_rollout_server

if TYPE_CHECKING:  # TRL's config classes: imported when a run starts (training.precheck)
    from training.config_base import WeftGRPOConfig
    from training.run import RunResult

log = logging.getLogger(__name__)


def check_reward_columns(funcs: list, columns: set[str]) -> None:
    """DatasetError naming each reward whose dataset column is missing."""
    missing = [f"{fn.__name__} needs `{c}`" for fn in funcs
               for c in getattr(fn, "required_columns", ()) if c not in columns]
    if missing:
        raise DatasetError("the GRPO data lacks columns the rewards read: " + "; ".join(missing)
                           + f" (columns: {sorted(columns)})")


def run_grpo(config: WeftGRPOConfig, reporter: Reporter | None = None,
             extra_callbacks: list | None = None) -> RunResult:
    """Train (or resume, or reuse a finished run) and return the final checkpoint."""
    from training.callbacks import SaveOnSignal
    from training.run import finish, make_recorder, prepare_run, reuse_completed

    reporter = reporter or Reporter()
    data = load_dataset(config.dataset, fallback=config.dataset_fallback,
                        limit=config.dataset_limit, seed=config.seed)
    config.bind_data({"train": data.fingerprint})
    if data.fallback_from:
        reporter.log(f"dataset {data.fallback_from} has no data; using {data.spec} instead")
    examples = grpo_examples(data.rows, config.answer_format)
    if config.budgets:
        examples = add_budgets(examples, config.budgets, seed=config.seed)
    specs = config.reward_specs()
    # Checked with tokenizer-free rewards first, so bad data fails before anything is loaded.
    check_reward_columns(build_rewards(specs, num_generations=config.num_generations)[0],
                         set(examples[0]))
    done = reuse_completed(config, "grpo", reporter)
    if done is not None:
        return done
    resume_from, base_model = prepare_run(config)

    from datasets import Dataset
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model)
    funcs, _weights = build_rewards(specs, num_generations=config.num_generations,
                                    tokenizer=tokenizer)
    warmed = warm_rewards(funcs)  # pools start while the trainer loads the model
    if warmed:
        log.info("started early: %s", ", ".join(warmed))
    try:  # the verifier that defines correctness (degenerate-group filter, its logged share)
        correctness = funcs[correctness_reward_index(specs, config.correctness_reward)].__name__
    except ValueError:  # none: the config already rejected this when the filter is on
        correctness = None
    recorder = make_recorder(config, "grpo", reporter, base_model, {"train": data})
    reporter.log(f"GRPO {config.checkpoint_id}: {len(examples)} prompts from {data.spec}, model "
                 f"{base_model}, rewards {[f.__name__ for f in funcs]}, {config.max_steps} steps")
    choice = getattr(config, "_weft_rollouts", None)
    if choice is not None:  # in the shell's log and, under Dagster, the run's
        log.info("rollout engine: %s (%s)", choice.engine, choice.reason)
        reporter.log(f"rollout engine: {choice.engine} ({choice.reason})")
    server = None
    if process_rank() == 0:  # TRL's server mode: weft's vLLM server on GPUs of its own
        server = start_rollout_server(config, base_model, local_processes())
        if server is not None:
            reporter.log(f"vLLM rollout server {server.base_url} on CUDA devices {server.devices}")
    try:
        trainer = config.trainer_class()(
            model=base_model, reward_funcs=funcs, args=config,
            train_dataset=Dataset.from_list(examples), processing_class=tokenizer,
            callbacks=[recorder, SaveOnSignal(reporter), *(extra_callbacks or [])],
            drop_degenerate_groups=config.drop_degenerate_groups,
            correctness_reward=correctness, **config.trainer_kwargs(base_model))
        trainer.train(resume_from_checkpoint=resume_from)
        return finish(trainer, recorder, config, "grpo", base_model, data, reporter)
    finally:
        if server is not None:
            server.stop()
        for fn in funcs:  # rewards holding resources (the code reward's warm sandbox pool)
            close = getattr(fn, "close", None)
            if callable(close):
                close()


def main(argv: list[str] | None = None) -> int:
    from training.precheck import bad_command_line

    status = bad_command_line("grpo", argv)  # before TRL is imported
    if status is not None:
        return status
    from training.run import command_line

    return command_line("grpo", run_grpo, argv)


if __name__ == "__main__":
    sys.exit(main())
