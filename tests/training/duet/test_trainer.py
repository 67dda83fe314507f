"""DUET trainer end to end on the embedded model (CPU, real TRL): variable n_q per prompt,
Eq. 6 weights reaching the loss, all-aborted batches giving no gradient, resume of the
controller state, and the diagnostics in train_metrics."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from training.config import build_config, load_config
from training.config_recipes import RecipeError
from training.data import grpo_examples, load_dataset


def coin_reward(completions, **kwargs):
    """A reward that varies within groups (a hash of the text), so advantages are non-zero."""
    out = []
    for c in completions:
        text = c if isinstance(c, str) else json.dumps(c)
        out.append(float(int(hashlib.sha1(text.encode()).hexdigest(), 16) % 2))
    return out


def _config(model_dir: Path, tag: str, **overrides):
    values = {
        "model_name_or_path": str(model_dir), "dataset": "builtin:arith", "dataset_limit": 2,
        "answer_format": "tir", "rewards": [{"name": "outcome", "answer_format": "tir"}],
        "loss_type": "dapo", "num_generations": 4, "per_device_train_batch_size": 8,
        "max_completion_length": 16, "max_steps": 3, "learning_rate": 1e-4, "use_cpu": True,
        "bf16": False, "gradient_checkpointing": False, "torch_threads": 1,
        "logging_steps": 1, "save_strategy": "no", "report_to": "none", "recipe": f"duet-{tag}",
        "duet": {"budget_fraction": 1.0, "full_rollouts": 3, "n_min": 1, "eps_abort": 0.3,
                 "grace": 2, "poll_every": 2, "tail_tokens": 32, "window": 64,
                 "refit_every": 1},
    }
    values.update(overrides)
    return build_config("grpo", values)


def _trainer(config, reward):
    from datasets import Dataset
    from transformers import AutoTokenizer

    from training.duet.trainer import DuetGRPOTrainer

    data = load_dataset(config.dataset, limit=config.dataset_limit, seed=config.seed)
    examples = grpo_examples(data.rows, config.answer_format)
    tokenizer = AutoTokenizer.from_pretrained(config.model_name_or_path)
    return DuetGRPOTrainer(model=config.model_name_or_path, reward_funcs=[reward], args=config,
                           train_dataset=Dataset.from_list(examples), processing_class=tokenizer,
                           **config.trainer_kwargs(config.model_name_or_path))


class Recorder:
    """Wraps the trainer's scoring to keep, per generation batch, what went into the loss."""

    def __init__(self, trainer):
        self.batches = []
        inner = trainer._generate_and_score_completions

        def wrapped(inputs):
            out = inner(inputs)
            pending = trainer._pending
            self.batches.append({
                "advantages": out["advantages"].tolist(),
                "mask_rows": out["completion_mask"].sum(dim=1).tolist(),
                "rewards": trainer._rewards[:, 0].tolist(),
                "plan": pending["plan"], "adv_raw": list(pending["adv"]),
            })
            return out

        trainer._generate_and_score_completions = wrapped


def _expected_advantages(batch, slots):
    """Algorithm 1 lines 38-42, transcribed: per-prompt (r - mean) / (std + 1e-4) over the
    allocated rollouts, aborted ones included; zero for aborted and unallocated rows; times
    1 / (s_pre * p_abort)."""
    plan, rewards = batch["plan"], batch["rewards"]
    gates = plan["gates"]
    out = [0.0] * len(rewards)
    for g, n in enumerate(plan["counts"]):
        group = [rewards[g * slots + j] for j in range(n)]
        if n < 2:
            continue
        mean = sum(group) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in group) / (n - 1))
        for j in range(n):
            i = g * slots + j
            gate = gates[i]
            if gate.aborted:
                continue
            a = (group[j] - mean) / (std + 1e-4)
            out[i] = a / (plan["s_pre"][g] * gate.p_abort)
    return out


@pytest.mark.slow
def test_duet_run_variable_counts_weights_reach_loss_and_state_resumes(
        weft_home, embedded_model_dir, tmp_path):
    from training.duet.trainer import prompt_key

    out = tmp_path / "run"
    config = _config(embedded_model_dir, "vary", max_steps=2, save_strategy="steps",
                     save_steps=2, output_dir=str(out))
    trainer = _trainer(config, coin_reward)
    # Two prompts with very different observed sigma: Eq. 4 must give them different counts
    # (cold L_hat equal, n ~ s: continuous 10:1, capped at 4 slots, budget 3 x 2 prompts).
    keys = sorted({prompt_key(x["prompt"]) for x in trainer.train_dataset})
    assert len(keys) == 2
    trainer.prompt_state.observe_sigma(keys[0], 1.0)
    trainer.prompt_state.observe_sigma(keys[1], 0.1)
    rec = Recorder(trainer)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    after = trainer.model.state_dict()
    assert any(not before[k].equal(after[k]) for k in before)  # it trained
    assert len(rec.batches) == 2
    first = rec.batches[0]["plan"]
    assert dict(zip(first["keys"], first["counts"], strict=True)) == {keys[0]: 4, keys[1]: 2}
    assert first["s_pre"] == pytest.approx([min(1.0, c / 3) for c in first["counts"]])
    for batch in rec.batches:
        np.testing.assert_allclose(batch["advantages"], _expected_advantages(batch, 4),
                                   rtol=1e-5, atol=1e-6)
        for i, n in enumerate(batch["mask_rows"]):
            allocated = i % 4 < batch["plan"]["counts"][i // 4]
            gate = batch["plan"]["gates"].get(i)
            if not allocated or (gate is not None and gate.aborted):
                assert n == 0  # unallocated slots and aborted rollouts: no tokens in the loss
    assert trainer.prompt_state.length, "Phase 4 records kept lengths (L_hat)"
    logs = [h for h in trainer.state.log_history if "duet/lambda" in h]
    assert logs and all(h["duet/token_budget"] > 0 for h in logs)
    assert {"duet/k1", "duet/k2", "duet/n_q_min", "duet/n_q_max", "duet/marker_rate",
            "duet/abort_rate", "duet/eps_kept", "duet/is_weight_mean",
            "duet/tokens_generated", "duet/reward_mean"} <= set(logs[0])
    # duet/reward_mean: the mean over the allocated rollouts only (TRL's own reward also
    # averages the placeholder slots), transcribed from the recorded batch.
    for log, batch in zip(logs, rec.batches, strict=True):
        allocated = [batch["rewards"][g * 4 + j] for g, n in enumerate(batch["plan"]["counts"])
                     for j in range(n)]
        assert log["duet/reward_mean"] == pytest.approx(sum(allocated) / len(allocated))
    # The controller state is in the checkpoint and a resumed trainer reads it back.
    saved = json.loads((out / "checkpoint-2" / "duet_state.json").read_text())
    assert saved == json.loads(json.dumps(trainer.duet_state_dict()))
    resumed = _trainer(config, coin_reward)
    assert json.loads(json.dumps(resumed.duet_state_dict())) != saved  # starts cold
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-2"))  # already at max_steps
    assert json.loads(json.dumps(resumed.duet_state_dict())) == saved


@pytest.mark.slow
def test_all_aborted_batch_leaves_parameters_unchanged(weft_home, embedded_model_dir):
    # The entropy bonus would move the weights through any token left in the loss mask.
    config = _config(embedded_model_dir, "abort", max_steps=1, entropy_coef=0.1,
                     duet={"budget_fraction": 1.0, "full_rollouts": 3, "n_min": 1,
                           "eps_abort": 1e-9, "grace": 0, "poll_every": 1})
    trainer = _trainer(config, coin_reward)
    trainer.quantiles.k1 = trainer.quantiles.k2 = 1  # no TIR answer by token 1: abort all
    rec = Recorder(trainer)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    gates = rec.batches[0]["plan"]["gates"].values()
    assert gates and all(g.aborted for g in gates)
    after = trainer.model.state_dict()
    assert all(before[k].equal(after[k]) for k in before)


def test_duet_recipe_loads_and_bad_settings_are_refused():
    config = load_config("duet_grpo.cpu")
    assert config.duet.budget_fraction == 1.0 and config.loss_type == "dapo"
    with pytest.raises(RecipeError, match="duet"):
        load_config("duet_grpo.cpu", {"duet": {"budget_fraction": 0}})
    with pytest.raises(RecipeError, match="unknown duet settings"):
        load_config("duet_grpo.cpu", {"duet": {"budgit": 0.5}})
    with pytest.raises(RecipeError, match="loss_type"):
        load_config("duet_grpo.cpu", {"loss_type": "grpo"})


def test_kept_rows_drops_fully_masked_rows_only():
    import torch

    from training.duet.trainer import DuetGRPOTrainer

    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0]])
    inputs = {"completion_mask": mask, "advantages": torch.tensor([1.0, 2.0, 3.0, 4.0]),
              "completion_ids": torch.arange(12).view(4, 3), "num_items_in_batch": mask.sum(),
              "old_per_token_logps": None}
    out = DuetGRPOTrainer._kept_rows(inputs)
    assert out["advantages"].tolist() == [1.0, 3.0]
    assert out["completion_ids"].tolist() == [[0, 1, 2], [6, 7, 8]]
    assert int(out["num_items_in_batch"]) == 3 and out["old_per_token_logps"] is None
    empty = DuetGRPOTrainer._kept_rows({"completion_mask": torch.zeros((2, 3), dtype=torch.long),
                                        "advantages": torch.tensor([5.0, 6.0])})
    assert empty["advantages"].tolist() == [5.0]  # one all-masked row keeps the loss a graph


@pytest.fixture(scope="module")
def tiny_model_dir(embedded_model_dir, tmp_path_factory):
    """A one-layer random model with the embedded model's tokenizer: real TRL steps in
    seconds."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(embedded_model_dir)
    config.num_hidden_layers, config.hidden_size, config.intermediate_size = 1, 64, 128
    config.num_attention_heads, config.num_key_value_heads = 2, 1
    config.head_dim = 32
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-duet")
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(embedded_model_dir).save_pretrained(path)
    return path


def test_each_step_logs_its_own_overhead_with_the_gate_time_and_its_phase4(
        weft_home, tiny_model_dir, monkeypatch):
    from training.duet.generate import MarkerAbortProcessor

    made = []
    real = MarkerAbortProcessor.for_batch.__func__

    def recording(cls, *args, **kwargs):
        proc = real(cls, *args, **kwargs)
        made.append(proc)
        return proc

    monkeypatch.setattr(MarkerAbortProcessor, "for_batch", classmethod(recording))
    config = _config(tiny_model_dir, "overhead", max_steps=2, max_completion_length=12,
                     duet={"budget_fraction": 1.0, "full_rollouts": 3, "n_min": 1,
                           "eps_abort": 0.3, "grace": 2, "poll_every": 2, "tail_tokens": 8,
                           "window": 64, "refit_every": 1})
    trainer = _trainer(config, coin_reward)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "duet/lambda" in h]
    assert [h["step"] for h in logs] == [1, 2] and len(made) == 2
    for h, proc in zip(logs, made, strict=True):
        # the step's own overhead, logged at that step, including the gate inside generation
        assert h["duet/overhead_s"] >= proc.seconds > 0
        # ... and the gate's part alone: the processor's own time (marker checks included)
        assert h["duet/gate_s"] == pytest.approx(proc.seconds)
        # the compacting generation computed at most the plain call's decode rows
        assert 0 < h["duet/decode_row_share"] <= 1
        # Phase 4 ran within the step: its refit flag and window size are on the same line
        assert "duet/k_refit" in h and "duet/k_window" in h
        assert h["duet/tokens_generated"] / h["duet/token_budget"] == pytest.approx(
            h["duet/budget_used"])
    assert trainer._pending is None  # nothing left over for a later step
