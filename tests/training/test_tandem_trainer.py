"""TandemGRPOTrainer (training/tandem/trainer.py): the senior-only loss of Tandem RL §3.4 (Eq. 1).

The property: the GRPO loss and its gradient do not depend on the log-probabilities at
junior-written positions. Checked by rescaling and shifting exactly those log-probabilities
(keeping them differentiable, so a leak would show in the gradient) and comparing loss and
gradients with the unchanged run; a negative control without the authorship mask shows the same
change does move the loss. Embedded model on CPU; the junior is a seeded perturbed copy.
"""

from __future__ import annotations

import pytest
import torch

from training.tandem.core import JUNIOR


def length_reward(completions, **_):
    """Varies inside a group, so advantages are non-zero."""
    return [float(len(c) % 7) for c in completions]


@pytest.fixture(scope="module")
def trainer(embedded_model_dir, tmp_path_factory):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from training.tandem.trainer import TandemGRPOTrainer

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(embedded_model_dir)
    junior = AutoModelForCausalLM.from_pretrained(embedded_model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in junior.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.02)
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("tandem_out")), use_cpu=True,
                      per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=10, max_steps=1, report_to="none", beta=0.0,
                      logging_steps=1, seed=5, bf16=False)
    data = Dataset.from_list([{"prompt": "The sum of 17 and 25 is"},
                              {"prompt": "Name three colours of the rainbow:"}])
    tr = TandemGRPOTrainer(model=str(embedded_model_dir), reward_funcs=[length_reward],
                           args=args, train_dataset=data, processing_class=tok,
                           junior_model=junior, senior_prob=0.5, span_cap=4)
    yield tr
    torch.set_num_threads(old)


def loss_and_grads(trainer, inputs, change_junior: bool):
    model = trainer.model
    model.zero_grad(set_to_none=True)
    junior_at = inputs["junior_positions"]
    original = trainer._get_per_token_logps_and_entropies

    def changed(*args, **kwargs):
        logps, entropies, aux = original(*args, **kwargs)
        if change_junior:
            logps = torch.where(junior_at, 3.0 * logps - 1.5, logps)
        return logps, entropies, aux

    trainer._get_per_token_logps_and_entropies = changed
    try:
        loss = trainer.compute_loss(model, {k: v for k, v in inputs.items()
                                            if k != "junior_positions"})
    finally:
        del trainer._get_per_token_logps_and_entropies
    loss.backward()
    names = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.29.mlp.down_proj.weight")
    params = dict(model.named_parameters())
    return loss.detach().clone(), [params[n].grad.detach().clone() for n in names]


def test_junior_logprobs_do_not_move_loss_or_gradient(trainer):
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1   # set by the training loop normally
    rows = [{"prompt": "The sum of 17 and 25 is"}] * 2 + \
        [{"prompt": "Name three colours of the rainbow:"}] * 2
    inputs = trainer._generate_and_score_completions(rows)
    mask = inputs["completion_mask"]
    # junior positions from the rollout's authorship stream, not from the trainer's mask
    junior_positions = torch.zeros_like(mask, dtype=torch.bool)
    for row, authors in enumerate(trainer.tandem_last_authorship):
        junior_positions[row, :len(authors)] = torch.tensor(authors) == JUNIOR
    assert junior_positions.any() and ((mask == 1) & ~junior_positions).any()
    assert inputs["advantages"].abs().sum() > 0
    # the normaliser counts senior tokens only (independent count from the stats)
    assert int(inputs["num_items_in_batch"]) == sum(s.senior_tokens
                                                    for s in trainer.tandem_last_stats)
    inputs["junior_positions"] = junior_positions

    base_loss, base_grads = loss_and_grads(trainer, inputs, change_junior=False)
    new_loss, new_grads = loss_and_grads(trainer, inputs, change_junior=True)
    assert torch.equal(base_loss, new_loss)
    for a, b in zip(base_grads, new_grads):
        assert torch.equal(a, b)
    assert any(g.abs().sum() > 0 for g in base_grads)

    # negative control: without the authorship mask (plain GRPO), the same change matters
    plain = {k: v for k, v in inputs.items() if k != "tool_mask"}
    plain["num_items_in_batch"] = mask.sum()
    plain_loss, plain_grads = loss_and_grads(trainer, plain, change_junior=False)
    moved_loss, moved_grads = loss_and_grads(trainer, plain, change_junior=True)
    assert not torch.equal(plain_loss, moved_loss) or \
        any(not torch.equal(a, b) for a, b in zip(plain_grads, moved_grads))


def test_tandem_metrics_logged(trainer):
    # drive one rollout here, so the test does not depend on another test having done it
    trainer.model.train()
    trainer._generate_and_score_completions([{"prompt": "The sum of 17 and 25 is"}] * 2)
    names = set(trainer._metrics["train"])
    assert {"tandem/senior_share", "tandem/handoffs_per_rollout",
            "tandem/span_cap_redraws_per_rollout"} <= names
    shares = trainer._metrics["train"]["tandem/senior_share"]
    stats = trainer.tandem_last_stats
    assert shares[-1] == pytest.approx(sum(s.senior_tokens / s.tokens for s in stats) / len(stats))


def test_tandem_recipe_trains_end_to_end(weft_home, embedded_model_dir):
    import json
    from pathlib import Path

    from safetensors.torch import load_file

    from training.config import load_config
    from training.grpo import run_grpo
    from warehouse import Warehouse

    config = load_config("tandem_grpo.cpu", {
        "model_name_or_path": str(embedded_model_dir), "dataset_limit": 8, "max_steps": 1,
        "max_completion_length": 12, "learning_rate": 1e-4, "entropy_coef": 0.1,
        "save_strategy": "no", "recipe": "test-tandem"})
    result = run_grpo(config)
    new = load_file(str(Path(result.path) / "model.safetensors"))
    old = load_file(str(embedded_model_dir / "model.safetensors"))
    assert any(not new[k].equal(old[k]) for k in new)
    (row,) = Warehouse().read("train_metrics", partition=result.checkpoint_id).to_pylist()
    logs = json.loads(row["logs_json"])
    assert 0.0 <= logs["tandem/senior_share"] <= 1.0
    assert logs["tandem/handoffs_per_rollout"] >= 0
    assert "tandem/span_cap_redraws_per_rollout" in logs


def test_kl_junior_recipe_is_solo_grpo_with_kl_to_the_starting_checkpoint():
    from training.config import load_config
    from training.config_base import WeftGRPOConfig
    from training.config_recipes import RecipeError

    config = load_config("kl_junior_grpo.cpu")
    assert type(config) is WeftGRPOConfig and config.beta > 0  # ref model = the starting weights
    with pytest.raises(RecipeError, match="cannot be combined with duet"):
        load_config("tandem_grpo.cpu", {"duet": {}})


@pytest.mark.parametrize("override, message", [
    ({"tandem": {"span_cap": 0}}, "span_cap must be a whole number"),
    ({"tandem": {"spancap": 3}}, "unknown tandem settings"),
    ({"tandem": {"senior_prob": 2}}, "senior_prob must be a probability"),
    ({"tandem": [0.5]}, "field `tandem` expects a mapping of TandemSettings"),
    ({"tandem": {"span_cap": "eight"}}, "field `tandem`: field `span_cap` expects"),
    ({"min_p": 0.1}, "not supported by the tandem sampler"),
    ({"use_transformers_continuous_batching": True}, "dual decoder"),
])
def test_bad_tandem_recipes_are_refused_before_any_model(override, message):
    from training.config import load_config
    from training.config_recipes import RecipeError

    with pytest.raises(RecipeError, match=message):
        load_config("tandem_grpo.cpu", override)
