"""Supervised fine-tuning with TRL's SFTTrainer, from a YAML recipe plus overrides.

``python -m training.sft --recipe sxs_sft.cpu [key=value ...]`` (also under ``accelerate
launch``, or launched by the ``sft_checkpoint`` asset through Dagster Pipes). Rows come from a
dataset spec and are turned into TRL's prompt/completion format, so the loss covers the
completion only (the embedded model's chat template has no generation markers, which rules out
``assistant_only_loss``). The data is loaded and checked before the model is.

Not guaranteed: anything about the quality of the model; CPU recipes are sized to prove the
machinery, not to teach a format well.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from training.data import load_dataset, sft_examples
from training.pipes import Reporter

if TYPE_CHECKING:  # TRL's config classes: imported when a run starts (training.precheck)
    from training.config_base import WeftSFTConfig
    from training.run import RunResult


def run_sft(config: WeftSFTConfig, reporter: Reporter | None = None,
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
    examples = sft_examples(data.rows)
    done = reuse_completed(config, "sft", reporter)
    if done is not None:
        return done
    resume_from, base_model = prepare_run(config)

    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(base_model)
    recorder = make_recorder(config, "sft", reporter, base_model, {"train": data})
    reporter.log(f"SFT {config.checkpoint_id}: {len(examples)} rows from {data.spec}, "
                 f"model {base_model}, {config.max_steps} steps")
    trainer = SFTTrainer(model=base_model, args=config, train_dataset=Dataset.from_list(examples),
                         processing_class=tokenizer,
                         callbacks=[recorder, SaveOnSignal(reporter), *(extra_callbacks or [])])
    trainer.train(resume_from_checkpoint=resume_from)
    return finish(trainer, recorder, config, "sft", base_model, data, reporter)


def main(argv: list[str] | None = None) -> int:
    from training.precheck import bad_command_line

    status = bad_command_line("sft", argv)  # before TRL is imported
    if status is not None:
        return status
    from training.run import command_line

    return command_line("sft", run_sft, argv)


if __name__ == "__main__":
    sys.exit(main())
