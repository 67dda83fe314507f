"""Real tiny TRL runs on the embedded model (CPU): SFT with an interrupted-then-resumed run, and
GRPO showing that degenerate groups are dropped before the backward pass."""

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file
from transformers import TrainerCallback

from training.config import build_config, load_config
from training.grpo import run_grpo
from training.run import FINAL_MARKER
from training.sft import run_sft
from warehouse import Warehouse


def weights_differ(a: Path, b: Path) -> bool:
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys()
    return any(not wa[k].equal(wb[k]) for k in wa)


class Crash(RuntimeError):
    pass


class CrashAfterFirstSave(TrainerCallback):
    """Simulates a killed run: raises right after the first checkpoint is written."""

    def on_save(self, args, state, control, **kwargs):
        raise Crash(f"simulated crash after saving step {state.global_step}")


def test_sft_interrupted_run_resumes_and_changes_parameters(weft_home, embedded_model_dir):
    overrides = {"model_name_or_path": str(embedded_model_dir), "max_steps": 2,
                 "per_device_train_batch_size": 2, "max_length": 96, "dataset": "builtin:arith_sft",
                 "dataset_limit": 8, "save_steps": 1, "save_total_limit": 1}
    config = load_config("sxs_sft.cpu", overrides)
    with pytest.raises(Crash):
        run_sft(config, extra_callbacks=[CrashAfterFirstSave()])
    out = Path(config.output_dir)
    assert (out / "checkpoint-1").is_dir()
    assert not (weft_home / "models" / config.checkpoint_id).exists()
    wh = Warehouse()
    (partial,) = wh.read("checkpoints", partition=config.checkpoint_id).to_pylist()
    assert partial["status"] == "partial" and partial["global_step"] == 1

    config = load_config("sxs_sft.cpu", overrides)  # same config: same id, so it resumes
    result = run_sft(config)
    assert result.global_step == 2 and not result.reused
    assert weights_differ(Path(result.path), embedded_model_dir)
    rows = wh.read("train_metrics", partition=config.checkpoint_id).to_pylist()
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["loss"] is not None and r["loss"] > 0 and r["kind"] == "sft" for r in rows)
    (done,) = wh.read("checkpoints", partition=config.checkpoint_id).to_pylist()
    assert done["status"] == "complete" and done["path"] == result.path
    assert json.loads(done["dataset_fingerprints"])["train"]["spec"] == "builtin:arith_sft"
    assert Path(result.path) == weft_home / "models" / config.checkpoint_id
    assert (Path(result.path) / FINAL_MARKER).is_file()
    assert (Path(result.path) / "tokenizer.json").is_file()

    again = run_sft(load_config("sxs_sft.cpu", overrides))  # complete: reused, not retrained
    assert again.reused and again.path == result.path and again.global_step == 2


def _all_wrong_grpo(model_dir: Path, drop: bool):
    # A TIR <answer> block never appears in 8 tokens of an untrained model: the outcome verifier
    # says every rollout is wrong, so every group is degenerate. The entropy bonus is the only
    # thing that could move weights.
    return build_config("grpo", {
        "model_name_or_path": str(model_dir), "dataset": "builtin:arith", "dataset_limit": 8,
        "rewards": [{"name": "outcome", "answer_format": "tir"}], "drop_degenerate_groups": drop,
        "entropy_coef": 0.1, "num_generations": 2, "per_device_train_batch_size": 2,
        "max_completion_length": 8, "max_steps": 1, "learning_rate": 1e-4, "use_cpu": True,
        "bf16": False, "gradient_checkpointing": False, "torch_threads": 1, "logging_steps": 1,
        "save_strategy": "no", "report_to": "none", "recipe": f"test-drop-{drop}"})


def test_grpo_drops_degenerate_groups_before_backward(weft_home, embedded_model_dir):
    kept = run_grpo(_all_wrong_grpo(embedded_model_dir, drop=False))
    dropped = run_grpo(_all_wrong_grpo(embedded_model_dir, drop=True))
    assert weights_differ(Path(kept.path), embedded_model_dir)  # entropy bonus on kept rows
    assert not weights_differ(Path(dropped.path), embedded_model_dir)  # nothing left to train on
    wh = Warehouse()
    for result in (kept, dropped):
        (row,) = wh.read("train_metrics", partition=result.checkpoint_id).to_pylist()
        assert row["kind"] == "grpo" and row["step"] == 1
        assert row["filtered_group_share"] == 1.0 and row["reward_mean"] == 0.0
        assert row["tokens_generated"] > 0 and row["generation_s"] > 0
        assert row["seconds_per_step"] >= row["generation_s"]
        logs = json.loads(row["logs_json"])
        assert logs["frac_reward_zero_std"] == 1.0
        (ck,) = wh.read("checkpoints", partition=result.checkpoint_id).to_pylist()
        assert ck["status"] == "complete" and ck["kind"] == "grpo"
