"""A Slurm time-limit warning (SIGUSR1, forwarded by the job's batch script) makes the training
run save a checkpoint at the end of the step it is in, so it can resume from there."""

import os
import signal
from pathlib import Path

import pytest
from transformers import TrainerCallback, TrainerControl, TrainerState

from training.callbacks import SaveOnSignal


def test_the_signal_sets_a_save_at_the_next_step_end_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGUSR1)
    cb = SaveOnSignal()
    state, control = TrainerState(), TrainerControl()
    cb.on_train_begin(None, state, control)
    state.global_step = 3
    assert cb.on_step_end(None, state, control).should_save is False
    os.kill(os.getpid(), signal.SIGUSR1)
    assert cb.on_step_end(None, state, TrainerControl()).should_save is True
    assert cb.on_step_end(None, state, TrainerControl()).should_save is False  # once
    assert cb.saves == 1
    cb.on_train_end(None, state, control)
    assert signal.getsignal(signal.SIGUSR1) is before


class SignalAtStep(TrainerCallback):
    """Sends SIGUSR1 to this process at the end of step ``step`` (as the batch script would)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGUSR1)


@pytest.mark.slow  # a real 3-step SFT run: about a minute on 2 loaded cores
def test_a_real_run_saves_the_step_after_the_signal(weft_home, embedded_model_dir):
    from training.config import load_config
    from training.sft import run_sft

    overrides = {"model_name_or_path": str(embedded_model_dir), "max_steps": 3,
                 "per_device_train_batch_size": 2, "max_length": 96,
                 "dataset": "builtin:arith_sft", "dataset_limit": 8, "save_steps": 100,
                 "save_total_limit": 3}
    config = load_config("sxs_sft.cpu", overrides)
    # the signal lands at the end of step 1, after SaveOnSignal looked: step 2 saves it
    run_sft(config, extra_callbacks=[SignalAtStep(1)])
    saved = sorted(p.name for p in Path(config.output_dir).glob("checkpoint-*"))
    assert "checkpoint-2" in saved and "checkpoint-1" not in saved, saved
