"""DUET over weft's GRPO trainer: a small subclass of ``WeftGRPOTrainer`` that runs the
controller of ``training.duet`` each step (DUET paper, ``../shared/papers/duet.txt``: §3,
Algorithm 1 in App. A.10).

How variable group sizes fit TRL's fixed shapes: TRL's sampler gives every prompt
``num_generations`` rows; here those rows are *slots* and ``num_generations`` is the cap
``n_max``. Each step the allocator (Eq. 4) gives prompt q ``n_q <= n_max`` rollouts; only the
first ``n_q`` slots are generated, the others get a one-token EOS placeholder, no reward in the
baseline, zero advantage and an all-zero mask, so they contribute nothing.

Hooks overridden, and why:

- ``_generate_and_score_completions``: Phase 1 (Algorithm 1 lines 2-10: s_hat, lam* by
  bisection warm-started from the previous step, n_q, s_pre) before TRL generates and scores;
  afterwards Phase 3 (lines 35-43): group-normalised advantages per prompt over its ``n_q``
  rollouts with aborted rewards in the baseline (line 38), zeroed advantages and masks for
  aborted rollouts (lines 39-41), and the weight ``w = (1 - I_abort) / (s_pre p_abort)`` of
  Eq. 6 folded into the advantage (exact for TRL's clipped surrogate too, since w > 0 scales
  both branches of the min). Groups whose allocated rollouts are all correct or all wrong are
  masked when ``drop_degenerate_groups`` is on (weft's filter, judged on allocated rollouts).
  The loss aggregation should be token-mean over kept tokens (``loss_type: dapo``, Eq. 6).
- ``_generate_single_turn``: transformers generation of the allocated rows only, with
  :class:`training.duet_generate.MarkerAbortProcessor` (Phase 2, lines 11-33); coins are drawn
  from ``(seed, global_step)``.
- ``_calculate_rewards``: keeps the rewards for the advantages above.
- ``_compute_loss`` / ``_get_per_token_logps_and_entropies``: fully masked rows (unallocated
  slots, aborted rollouts) are left out of the forward/backward pass (exact for the token-mean
  loss, whose normaliser is counted before), and the loss pass's own log-probs give
  ``sum_l log pi(y_l)`` for Eq. 3 at no extra forward pass.
- ``_save_checkpoint`` / ``_load_optimizer_and_scheduler``: the controller state (per-prompt
  estimates, K1/K2 window, lam) is saved as ``duet_state.json`` in every checkpoint and read
  back on resume.

Phase 4 (lines 45-56: sigma_obs, L_hat, K1/K2, lam warm start) runs when the next generation
batch starts (and before a checkpoint is written), once all of the step's micro-batches have
passed through the loss.

Departures, and why:

- The forced EOS token of a trimmed rollout (marker + G) is masked out of the loss: it was not
  sampled from the policy, and Theorem 3's argument is about the prefix ``Z_{m+G}``.
- Budget: ``B = b * full_rollouts * sum_q L_hat_q`` over the step's prompts, the paper's
  "fraction b of full GRPO's per-step token cost" with full = 8 rollouts per prompt (§4.1,
  App. A.3), estimated with the same ``L_hat`` the allocator uses.
- The K1/K2 window takes the kept-not-aborted lengths of Algorithm 1 line 51 minus rollouts cut
  by the length cap (they have no natural stopping length; counting them pinned K1 = K2 =
  the cap in a CPU run).
- ``n_min`` defaults to 2 (the paper does not give its value): a single rollout has a zero
  group-normalised advantage and spends tokens for no gradient. ``n_max`` = ``num_generations``.
- Single process only, transformers generation only (vLLM and multi-process runs are refused
  at construction with what to change). The vLLM form of the abort rule is ready in
  ``training.duet_vllm`` (processor) and ``training.duet_generate`` (``gate_request_args``,
  ``replay_gate``, ``vllm_logits_processors``) for when TRL's vLLM rollouts are wired here.

Not guaranteed: unbiasedness under group-normalised advantages (paper, App. A.2.6); the
``tokens_generated`` metric of ``WeftGRPOTrainer`` counts one placeholder token per unallocated
slot (``duet/tokens_generated`` does not).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from trl.models import unwrap_model_for_generation

from training import duet
from training.duet import DuetSettings
from training.duet_generate import MarkerAbortProcessor
from training.grpo_trainer import WeftGRPOTrainer
from training.rewards import degenerate_groups, verdicts

STATE_FILE = "duet_state.json"
log = logging.getLogger(__name__)


def prompt_key(prompt: Any) -> str:
    """A stable id for a prompt (string or chat messages): the per-prompt state's key."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


class DuetGRPOTrainer(WeftGRPOTrainer):
    """``WeftGRPOTrainer`` with the DUET controller (see the module docstring)."""

    def __init__(self, *args: Any, duet_settings: DuetSettings | None = None,
                 drop_degenerate_groups: bool = False, correctness_reward: str | None = None,
                 **kwargs: Any):
        # The parent's filter works on fixed groups; DUET's groups vary, so it runs here.
        super().__init__(*args, **kwargs)
        if self.use_vllm or self.use_transformers_continuous_batching:
            raise ValueError("DUET generates with transformers' generate and its batched abort "
                             "processor; set use_vllm: false and "
                             "use_transformers_continuous_batching: false")
        if self.accelerator.num_processes != 1:
            raise ValueError("DUET runs in a single process here (the allocation is per "
                             "process); launch without accelerate's multi-process mode")
        if correctness_reward is None and drop_degenerate_groups:
            raise ValueError("drop_degenerate_groups needs correctness_reward")
        self.settings = duet_settings or DuetSettings()
        if self.settings.n_min > self.num_generations:
            raise ValueError(f"duet.n_min={self.settings.n_min} exceeds num_generations="
                             f"{self.num_generations} (the slots per prompt, n_max)")
        self.duet_drop = drop_degenerate_groups
        self.duet_correct_col = (None if correctness_reward is None
                                 else self.reward_func_names.index(correctness_reward))
        self.prompt_state = duet.PromptState(s_floor=self.settings.s_floor,
                                             l_cold=0.5 * self.max_completion_length)
        self.quantiles = duet.LengthQuantiles(self.max_completion_length, self.settings.window,
                                              self.settings.refit_every)
        self.lam: float | None = None
        self._plan: dict[str, Any] | None = None  # this generation batch's allocation and gates
        self._pending: dict[str, Any] | None = None  # awaiting Phase 4
        self._rewards: torch.Tensor | None = None
        self._capture: tuple[Any, torch.Tensor] | None = None
        self._seq_logps: dict[int, float] = {}
        self._overhead_s = 0.0

    # -- Phase 1 ---------------------------------------------------------------------------

    def _allocate(self, inputs: list[dict]) -> dict[str, Any]:
        slots = self.num_generations
        keys = [prompt_key(x["prompt"]) for x in inputs[::slots]]
        if len(inputs) % slots or any(prompt_key(x["prompt"]) != keys[i // slots]
                                      for i, x in enumerate(inputs)):
            raise ValueError(f"DUET expects each prompt's {slots} slots (num_generations) to be "
                             "consecutive rows of the generation batch, as TRL's sampler gives "
                             "them; this batch is not grouped that way")
        s_hat = [self.prompt_state.s_hat(k) for k in keys]
        l_hat = [self.prompt_state.l_hat(k) for k in keys]
        b = self.settings
        budget = b.budget_fraction * b.full_rollouts * float(sum(l_hat))
        if b.allocate:
            alloc = duet.neyman_allocation(s_hat, l_hat, budget, n_min=b.n_min, lam0=self.lam,
                                           steps=b.bisection_steps, n_max=slots)
            counts, lam = alloc.counts, alloc.lam
        else:
            uniform = int(min(slots, max(b.n_min, round(b.budget_fraction * b.full_rollouts))))
            counts, lam = [uniform] * len(keys), self.lam or 0.0
        return {"keys": keys, "s_hat": s_hat, "counts": counts, "lam": lam, "budget": budget,
                "s_pre": duet.stratification_factors(counts, b.eps_pre),
                "allocated": [i % slots < counts[i // slots] for i in range(len(inputs))],
                "k1": self.quantiles.k1, "k2": self.quantiles.k2}

    # -- Phase 2 ---------------------------------------------------------------------------

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                              has_tool_images=False):
        plan = self._plan
        if plan is None or not self.model.training:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                 num_generations, has_tool_images)
        if images or multimodal_fields:
            raise ValueError("DUET supports text-only prompts")
        rows = [i for i, a in enumerate(plan["allocated"]) if a]
        eos = self.eos_token_ids
        b = self.settings
        k1, k2 = (plan["k1"], plan["k2"]) if b.abort else (self.max_completion_length,) * 2
        params = duet.GateParams(k1=k1, k2=k2, grace=b.grace, poll_every=b.poll_every,
                                 eps_abort=b.eps_abort, tail_tokens=b.tail_tokens)
        marker = duet.answer_marker(self.args.answer_format)
        coins = duet.coin_draws(self.args.seed, self.state.global_step, len(rows))
        width = max(len(prompt_ids[i]) for i in rows)
        pad_id = self._tokenizer.pad_token_id
        ids = torch.tensor([[pad_id] * (width - len(prompt_ids[i])) + list(prompt_ids[i])
                            for i in rows])
        mask = torch.tensor([[0] * (width - len(prompt_ids[i])) + [1] * len(prompt_ids[i])
                             for i in rows])
        processor = MarkerAbortProcessor.for_batch(
            params, [marker] * len(rows), coins, width, eos,
            lambda toks: self._tokenizer.decode(toks, skip_special_tokens=False))
        device = self.accelerator.device
        with (unwrap_model_for_generation(
                self.model_wrapped, self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs) as model,
              torch.no_grad()):
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                 generation_config=self.generation_config,
                                 logits_processor=[processor])
        completions: list[list[int]] = [[eos[0]] for _ in prompt_ids]
        for j, row in enumerate(rows):
            gen = out[j, width:].tolist()
            ends = [n for n, tok in enumerate(gen) if tok in eos]
            completions[row] = gen[: ends[0] + 1] if ends else gen
        plan["gates"] = dict(zip(rows, processor.gates, strict=True))
        return completions, None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rewards = rewards
        return rewards

    # -- Phase 3 ---------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        started = time.perf_counter()
        self._finish_step()
        self._plan = self._allocate(inputs)
        overhead = time.perf_counter() - started
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            plan, self._plan = self._plan, None
        started = time.perf_counter()
        self._apply_update_weights(out, plan)
        self._overhead_s += overhead + time.perf_counter() - started
        return out

    def _advantages(self, rewards: np.ndarray, plan: dict[str, Any]) -> np.ndarray:
        """Line 38: per-prompt group-normalised advantages over the allocated rollouts (aborted
        ones included); TRL's ``scale_rewards`` ('group' or 'none') and its 1e-4 guard."""
        slots, adv = self.num_generations, np.zeros(len(rewards))
        for g, n in enumerate(plan["counts"]):
            idx = np.arange(g * slots, g * slots + n)
            r = rewards[idx]
            ok = ~np.isnan(r)
            if ok.sum() < 2:
                continue
            centred = r - np.nanmean(r)
            if self.scale_rewards == "group":
                centred = centred / (np.nanstd(r, ddof=1) + 1e-4)
            elif self.scale_rewards == "batch":
                allocated = rewards[np.asarray(plan["allocated"])]
                centred = centred / (np.nanstd(allocated, ddof=1) + 1e-4)
            adv[idx] = np.nan_to_num(centred, nan=0.0)
        return adv

    def _apply_update_weights(self, out: dict[str, Any], plan: dict[str, Any]) -> None:
        slots = self.num_generations
        gates: dict[int, duet.RolloutGate] = plan.get("gates", {})
        raw = self._rewards.cpu().double()
        rewards = (raw * self.reward_weights.to(raw).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(raw).all(dim=1)] = float("nan")
        adv = self._advantages(rewards.numpy(), plan)
        rows = len(adv)
        allocated = np.asarray(plan["allocated"])
        aborted = np.array([gates[i].aborted if i in gates else False for i in range(rows)])
        keep = allocated & ~aborted
        if self.duet_drop:
            correct = verdicts(raw[:, self.duet_correct_col].tolist())
            for g, n in enumerate(plan["counts"]):
                if degenerate_groups(correct[g * slots: g * slots + n], n)[0]:
                    keep[g * slots: (g + 1) * slots] = False
        weights = np.zeros(rows)
        for i in np.flatnonzero(keep):
            p = gates[i].p_abort if i in gates else 1.0
            weights[i] = duet.is_weight(False, p, plan["s_pre"][i // slots])
        device = out["advantages"].device
        lengths = [int(n) if a else 0 for n, a in
                   zip(out["completion_mask"].sum(dim=1).tolist(), allocated, strict=True)]
        out["advantages"] = torch.tensor(adv * weights, dtype=out["advantages"].dtype,
                                         device=device)
        mask = out["completion_mask"] * torch.tensor(keep, device=device).unsqueeze(1)
        for i, gate in gates.items():  # the forced EOS was not sampled: out of the loss
            if gate.stopped_at is not None and gate.stopped_at < mask.shape[1]:
                mask[i, gate.stopped_at] = 0
        out["completion_mask"] = mask
        loss_mask = mask if out.get("tool_mask") is None else mask * out["tool_mask"]
        out["num_items_in_batch"] = loss_mask.sum()
        out["duet_row"] = torch.arange(rows, device=device)
        self._log_step(plan, gates, allocated, aborted, keep, weights, lengths)
        self._pending = {"plan": plan, "adv": adv, "keep": keep.tolist(), "lengths": lengths,
                         "aborted": aborted.tolist(), "allocated": allocated.tolist()}
        self._seq_logps = {}

    def _log_step(self, plan, gates, allocated, aborted, keep, weights, lengths) -> None:
        m = self._metrics["train"]
        counts = plan["counts"]
        n_alloc = max(1, int(allocated.sum()))
        m["duet/lambda"].append(float(plan["lam"]))
        m["duet/k1"].append(float(plan["k1"]))
        m["duet/k2"].append(float(plan["k2"]))
        m["duet/n_q_min"].append(float(min(counts)))
        m["duet/n_q_mean"].append(float(np.mean(counts)))
        m["duet/n_q_max"].append(float(max(counts)))
        m["duet/marker_rate"].append(sum(g.marker_seen for g in gates.values()) / n_alloc)
        m["duet/abort_rate"].append(float(aborted.sum()) / n_alloc)
        m["duet/eps_kept"].append(float(sum(g.coin_drawn and not g.aborted
                                            for g in gates.values())))
        kept_w = weights[keep]
        m["duet/is_weight_mean"].append(float(kept_w.mean()) if kept_w.size else 0.0)
        m["duet/tokens_generated"].append(float(sum(lengths)))
        m["duet/token_budget"].append(float(plan["budget"]))
        log.info("DUET step %d: n_q histogram %s", self.state.global_step,
                 dict(sorted(Counter(counts).items())))

    # -- Eq. 3 log-probs from the loss pass --------------------------------------------------

    def _compute_loss(self, model, inputs):
        inputs = self._kept_rows(inputs)
        self._capture = (inputs.get("duet_row"), inputs["completion_mask"])
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._capture = None

    @staticmethod
    def _kept_rows(inputs: dict[str, Any]) -> dict[str, Any]:
        """The micro-batch without its fully masked rows (unallocated slots, aborted or
        filtered rollouts): they add nothing to the token-mean loss (its normaliser
        ``num_items_in_batch`` was counted beforehand), so the forward and backward passes skip
        them. One row stays when all are masked, so the loss is still a (zero) graph."""
        keep = inputs["completion_mask"].sum(dim=1) > 0
        if bool(keep.all()):
            return inputs
        if not bool(keep.any()):
            keep[0] = True
        n = keep.numel()
        return {k: v[keep] if isinstance(v, torch.Tensor) and v.ndim > 0 and v.shape[0] == n
                else v for k, v in inputs.items()}

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._capture is not None and self._capture[0] is not None:
            rows, mask = self._capture
            seq = (result[0].detach() * mask).sum(dim=1).tolist()
            for r, v in zip(rows.tolist(), seq, strict=True):
                self._seq_logps[r] = v
            self._capture = None
        return result

    # -- Phase 4 ---------------------------------------------------------------------------

    def _finish_step(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        plan, slots = pending["plan"], self.num_generations
        s_used, sigma_step = [], []
        for g, key in enumerate(plan["keys"]):
            idx = range(g * slots, g * slots + plan["counts"][g])
            kept = [i for i in idx if pending["keep"][i] and i in self._seq_logps]
            sigma = duet.within_step_sigma([pending["adv"][i] for i in kept],
                                           [self._seq_logps[i] for i in kept], [True] * len(kept))
            if sigma is not None:
                self.prompt_state.observe_sigma(key, sigma)
                s_used.append(plan["s_hat"][g])
                sigma_step.append(sigma)
            kept_lengths = [pending["lengths"][i] for i in idx
                            if pending["allocated"][i] and not pending["aborted"][i]
                            and pending["lengths"][i] > 0]
            self.prompt_state.observe_lengths(key, kept_lengths)
            # K1/K2 track natural stopping lengths: a rollout cut by the length cap never stopped.
            self.quantiles.observe([n for n in kept_lengths if n < self.max_completion_length])
        self.quantiles.end_step(max(1, self.state.global_step))
        if self.state.epoch is not None and self.state.epoch >= 1:
            self.prompt_state.refloor()
        self.lam = plan["lam"] if plan["lam"] else self.lam
        chi2 = duet.calibration_chi2(s_used, sigma_step)
        if chi2 is not None:
            self._metrics["train"]["duet/calibration_chi2"].append(chi2)
        self._metrics["train"]["duet/overhead_s"].append(self._overhead_s)
        self._overhead_s = 0.0
        self._seq_logps = {}

    # -- resume -----------------------------------------------------------------------------

    def duet_state_dict(self) -> dict[str, Any]:
        return {"settings": asdict(self.settings), "lam": self.lam,
                "prompts": self.prompt_state.state_dict(),
                "quantiles": self.quantiles.state_dict()}

    def load_duet_state_dict(self, state: dict[str, Any]) -> None:
        self.lam = state["lam"]
        self.prompt_state.load_state_dict(state["prompts"])
        self.quantiles.load_state_dict(state["quantiles"])

    def _save_checkpoint(self, model, trial):
        self._finish_step()
        super()._save_checkpoint(model, trial)
        folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        if folder.is_dir():
            (folder / STATE_FILE).write_text(json.dumps(self.duet_state_dict()))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = Path(checkpoint) / STATE_FILE if checkpoint else None
        if path is not None and path.is_file():
            self.load_duet_state_dict(json.loads(path.read_text()))
