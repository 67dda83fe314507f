"""``TandemGRPOTrainer``: GRPO whose rollouts are tandem rollouts, with the senior-only loss.

Tandem RL (the Tandem RL paper) changes only the rollout structure of GRPO: each
response is co-written by the trainable senior (the policy) and a frozen junior
(``training.tandem.core``: §3.3, App. A.1); the verifier scores the whole response; and the GRPO
loss is taken over senior-written tokens only (§3.4, Eq. 1: "the response mask set to select
only senior-emitted positions"; App. A.1.1: the authorship stream is multiplied elementwise
into the per-token response mask). Junior tokens shape the reward but get no gradient, and
there is no junior-imitation term (§3.4 sets its coefficient to 0).

Hooks overridden on :class:`training.grpo_trainer.WeftGRPOTrainer` (everything else is TRL's
loop, rewards, advantages and loss, unchanged):

- ``_generate_single_turn``: instead of ``model.generate``, a batched lockstep tandem rollout of
  the (unwrapped) policy and the junior (``training.tandem.core.tandem_generate``), with the trainer's
  temperature / top-k / top-p and ``max_completion_length``. Per-rollout seeds come from
  ``args.seed``, the global step, the process and a per-step call counter
  (``training.tandem.core.RolloutSeeder``), so every step draws fresh rollouts and a run's
  authorship is reproducible. Per-step means of senior share, handoffs, span-cap redraws and boundary draws
  are logged as ``tandem/*`` (they land in ``train_metrics`` with the other logged figures);
  each rollout's senior share and seed go beside its completion in TRL's completions log
  (``log_completions``). The last batch's stats and authorship stay on the trainer
  (``tandem_last_stats``, ``tandem_last_authorship``).
- ``_generate_and_score_completions``: the authorship stream (1 = senior) becomes TRL's
  ``tool_mask`` (TRL multiplies it into the completion mask wherever the loss, its normaliser
  and the logged token statistics are taken, but not into the attention mask), and
  ``num_items_in_batch`` is recounted over senior tokens.

Guarantees: the loss and its gradient do not depend on the log-probabilities at junior-written
positions (tested); with ``senior_prob = 1`` rollouts are the policy's own samples.
Departures: generation is the plain-HF dual decoder (no vLLM, App. A.1's fast path); vLLM,
continuous batching, tools/environments, images, ``min_p`` and repetition penalties are refused
at construction. The junior is loaded on the policy's device in the policy's dtype.
Not guaranteed: that the tandem rollouts are as fast as TRL's ``generate`` (see bench/tandem.py).
"""

from __future__ import annotations

from typing import Any

import torch

from training.grpo_trainer import WeftGRPOTrainer
from training.tandem.core import (
    HandoffParams,
    RolloutSeeder,
    SamplingParams,
    TandemError,
    boundary_ids,
    boundary_mask,
    summarize,
    tandem_generate,
)


def load_junior(junior: Any, like: torch.nn.Module) -> torch.nn.Module:
    """The frozen junior: a model, or a path/hub id loaded in ``like``'s dtype and device."""
    if isinstance(junior, str):
        from transformers import AutoModelForCausalLM

        param = next(like.parameters())
        junior = AutoModelForCausalLM.from_pretrained(junior, dtype=param.dtype)
        junior = junior.to(param.device)
    if not isinstance(junior, torch.nn.Module):
        raise TandemError(f"junior_model must be a path, a hub id or a model, got "
                          f"{type(junior).__name__}")
    junior.eval()
    junior.requires_grad_(False)
    return junior


class TandemGRPOTrainer(WeftGRPOTrainer):
    """``WeftGRPOTrainer`` with tandem rollouts and the senior-only loss (see module doc)."""

    def __init__(self, *args: Any, junior_model: Any, senior_prob: float = 0.5,
                 span_cap: int = 8, **kwargs: Any):
        super().__init__(*args, **kwargs)
        refused = {"use_vllm": self.use_vllm,
                   "use_transformers_continuous_batching":
                       self.use_transformers_continuous_batching,
                   "tools": bool(self.tools),
                   "environment_factory": self.environment_factories is not None,
                   "min_p": bool(self.min_p),
                   "repetition_penalty": self.repetition_penalty not in (None, 1.0)}
        bad = [name for name, on in refused.items() if on]
        if bad:
            raise TandemError(f"tandem rollouts use weft's own dual decoder, which does not "
                              f"support {bad}; turn them off for a tandem run")
        self.tandem_handoff = HandoffParams(senior_prob=senior_prob, span_cap=span_cap)
        self.tandem_sampling = SamplingParams(temperature=float(self.temperature),
                                              top_k=int(self.top_k or 0),
                                              top_p=float(1.0 if self.top_p is None
                                                          else self.top_p))
        self.junior = load_junior(junior_model, self.accelerator.unwrap_model(self.model))
        vocab = int(self.junior.get_output_embeddings().weight.shape[0])
        self.tandem_boundary = boundary_mask(boundary_ids(self._tokenizer), vocab)
        self.tandem_last_stats: list = []          # the last batch's RolloutStats
        self.tandem_last_authorship: list[list[int]] = []
        self._tandem_authorship: list[list[int]] | None = None
        self._tandem_seeder = RolloutSeeder(int(self.args.seed),
                                            int(self.accelerator.process_index))

    def _rollout_seeds(self, n: int) -> list[int]:
        """Seeds of this generation call (``training.tandem.core.RolloutSeeder``): the run's seed,
        the global step, the number of earlier calls at this step and the process index."""
        return self._tandem_seeder.seeds(int(self.state.global_step), n)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                              has_tool_images=False):
        if images is not None or multimodal_fields:
            raise TandemError("tandem rollouts are text-only; this batch carries images")
        from trl.models import unwrap_model_for_generation

        seeds = self._rollout_seeds(len(prompt_ids))
        with unwrap_model_for_generation(
                self.model_wrapped, self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
        ) as senior:
            was_training = senior.training
            senior.eval()
            try:
                out = tandem_generate(
                    senior, self.junior, prompt_ids, seeds=seeds,
                    boundary=self.tandem_boundary, max_new_tokens=self.max_completion_length,
                    eos_token_ids=self.eos_token_ids, pad_token_id=self._tokenizer.pad_token_id,
                    handoff=self.tandem_handoff, sampling=self.tandem_sampling)
            finally:
                senior.train(was_training)
        self._tandem_authorship = out.authorship
        self.tandem_last_stats = out.stats
        self.tandem_last_authorship = out.authorship
        # per rollout, beside each completion in TRL's completions log (log_completions)
        self._log_completion_extra("senior_share", [s.senior_share for s in out.stats])
        self._log_completion_extra("tandem_seed", [s.seed for s in out.stats])
        mode = "train" if self.model.training else "eval"
        local = torch.tensor([list(summarize([s]).values()) for s in out.stats],
                             dtype=torch.float32, device=self.accelerator.device)
        means = self.accelerator.gather(local).mean(dim=0).tolist()
        for name, value in zip(summarize(out.stats), means):
            self._metrics[mode][name].append(value)
        return out.completion_ids, None

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        authorship = self._tandem_authorship
        self._tandem_authorship = None
        mask = out["completion_mask"]
        if authorship is None or len(authorship) != mask.size(0):
            raise RuntimeError("tandem authorship is missing or does not match the batch; "
                               "_generate_single_turn must run once per scored batch")
        senior = torch.zeros_like(mask)
        for row, authors in enumerate(authorship):
            senior[row, :len(authors)] = torch.tensor(authors, dtype=mask.dtype)
        if out.get("tool_mask") is not None:
            senior = senior * out["tool_mask"]
        out["tool_mask"] = senior   # §3.4 / A.1.1: authorship multiplies the response mask
        out["num_items_in_batch"] = self.accelerator.gather((mask * senior).sum()).sum()
        return out
