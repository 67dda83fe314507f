"""DUET over weft's GRPO trainer: a small subclass of ``WeftGRPOTrainer`` that runs the
controller of ``training.duet`` each step (DUET paper, §3,
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
- ``_generate_single_turn``: the allocated rows only (Phase 2, lines 11-33), each rollout with
  its own eps-keep coin, drawn per slot of the global generation batch from
  ``(seed, global_step)`` (distinct per rollout, the same on any number of processes). On
  transformers: ``model.generate`` with :class:`training.duet.generate.MarkerAbortProcessor`,
  through :func:`training.duet.generate.generate_compacting`, so rollouts that have ended
  (aborted by the gate, or at their own EOS) leave the decoding batch instead of being decoded
  until the batch's longest row ends (the same tokens as the plain call; set the class
  attribute ``compact_min_rows`` to None for the plain call).
  On TRL's vLLM engine: one ``n=1`` request per allocated rollout carrying its gate in
  ``SamplingParams.extra_args`` (``training.duet.vllm``); colocated, straight to TRL's
  in-process ``vllm.LLM``; server mode, through TRL's ``VLLMClient`` from the main process
  (gate as ``vllm_xargs``). The engine runs ``DuetAbortLogitsProcessor``; each outcome is
  recovered by replaying the gate over the returned tokens, and a rollout that runs past its
  forced stop is an error (the engine has no processor loaded).
- ``_calculate_rewards``: keeps the rewards (TRL gathers them over all processes) for the
  advantages above.
- ``_compute_loss`` / ``_get_per_token_logps_and_entropies``: fully masked rows (unallocated
  slots, aborted rollouts) are left out of the forward/backward pass (exact for the token-mean
  loss, whose normaliser is counted before), and the loss pass's own log-probs give
  ``sum_l log pi(y_l)`` for Eq. 3 at no extra forward pass.
- ``_save_checkpoint`` / ``_load_optimizer_and_scheduler``: the controller state (per-prompt
  estimates, K1/K2 window, lam) is saved as ``duet_state.json`` in every checkpoint (by the
  main process) and read back on resume by every process.

Data parallelism (``training.duet.dist``): each process holds a share of the generation batch,
but Eq. 4 is one allocation over all of the step's prompts. Each process sends
``(key, s_hat, L_hat)`` for its rows; the main process allocates once on the gathered list (one
budget B, one lam*) and broadcasts the plan, and each process generates its own rows' share of
the ``n_q``. TRL gathers the rewards, so advantages stay per prompt over all its ``n_q``
rollouts wherever they were generated; rollout outcomes (aborted, eps-kept, marker, lengths)
and the loss pass's ``sum log pi`` are gathered too, so Phase 4 updates the same state on every
process and the main process's ``duet_state.json`` resumes all of them.

Phase 4 (lines 45-56: sigma_obs, L_hat, K1/K2, lam warm start; ``training.duet.observe_step``)
runs in ``training_step`` right after the generation batch's last micro-batch has passed
through the loss, before the optimizer step is logged, so the step's ``duet/*`` diagnostics
(calibration chi2, K refit, controller overhead) are logged with the step they belong to
(where a batch spans optimizer steps otherwise, it runs when the next batch starts, and before
a checkpoint is written). ``duet/overhead_s`` is the controller's wall time in the step:
allocation, the gate inside generation (the transformers processor's own time: every gate
check, marker decode and poll, forced EOS; on vLLM the replay of each rollout's gate, the
engine-side checks are not measurable here), the Phase 3 weights and Phase 4. The gate's part
is also logged alone as ``duet/gate_s``, and ``duet/decode_row_share`` is the share of the
plain call's decode rows that the compacting generation computed (transformers only).

What the gate did is logged per step over the allocated rollouts
(``training.duet.step_rates``): ``duet/marker_rate``, the share whose text reached the answer
marker by the abort gate (``p_marker`` of Theorem 3, ``training.duet.marker_reached``: seen at
a poll, or in the text of a rollout that ended before the gate polled it; never a rollout whose
coin was drawn); ``duet/marker_seen_rate``, the share the gate saw at a poll before any coin
(those it may trim); ``duet/abort_rate``, the share aborted and masked out; ``duet/eps_kept``;
``duet/cap_cut_rate``, the share cut by ``max_completion_length`` (no EOS of their own, not
stopped by the gate); and the thresholds the gates ran with: ``duet/k1`` (the polling
threshold), ``duet/k2`` (the abort threshold) and ``duet/abort_at`` = K2 + G (at or past the
cap, the cap cuts a marker-less rollout before the gate can abort it).

Departures, and why:

- The forced EOS token of a trimmed rollout (marker + G) is masked out of the loss: it was not
  sampled from the policy, and Theorem 3's argument is about the prefix ``Z_{m+G}``.
- Budget: ``B = b * full_rollouts * sum_q L_hat_q`` over the step's prompts, the paper's
  "fraction b of full GRPO's per-step token cost" with full = 8 rollouts per prompt (§4.1,
  App. A.3), estimated with the same ``L_hat`` the allocator uses. ``L_hat_q`` is the mean
  generated length of *every* rollout of q, aborted ones included (Algorithm 1 line 51 says
  kept-not-aborted; the budget is on tokens generated, §2 and Proposition 1, and aborted
  rollouts are generated). B caps the expected count ``sum_q n_q L_hat_q`` (logged as
  ``duet/tokens_planned``), not the realised count of one step, which the paper leaves free
  (no fixed length cap, §3.2); the realised count is logged as ``duet/tokens_generated`` and
  ``duet/budget_used`` = generated / B. A never-seen batch is priced at the length cap, so the
  first step spends at most B (unless ``n_min`` rollouts per prompt alone exceed it).
- The K1/K2 window takes the kept-not-aborted lengths of Algorithm 1 line 51 minus rollouts cut
  by the length cap (they have no natural stopping length; counting them pinned K1 = K2 =
  the cap in a CPU run).
- ``n_min`` defaults to 2 (the paper does not give its value): a single rollout has a zero
  group-normalised advantage and spends tokens for no gradient. ``n_max`` = ``num_generations``.
- vLLM rollouts send one request per rollout (``n=1``) instead of TRL's one request per
  prompt with ``n`` samples: vLLM gives all ``n`` samples of a request one ``SamplingParams``,
  and each rollout needs its own coin. Colocated rollouts need the processor registered as a
  vLLM plugin: TRL 1.16's ``VLLMGeneration`` builds ``vllm.LLM`` with a fixed argument list and
  no ``logits_processors``, and vLLM loads plugins (entry point group
  ``vllm.logits_processors``) into every engine it builds. Without the plugin, colocated
  rollouts are refused at construction (before TRL builds the engine) with what to add;
  server mode needs the server started with ``--logits-processors`` (weft's rollout server
  does). Refused for DUET: colocated tensor parallelism and sleep mode, structured outputs,
  transformers continuous batching.

Not guaranteed: unbiasedness under group-normalised advantages (paper, App. A.2.6); the
``tokens_generated`` metric of ``WeftGRPOTrainer`` counts one placeholder token per unallocated
slot (``duet/tokens_generated`` does not); TRL's sequence-level vLLM importance-sampling modes
see the forced EOS token's engine log-prob (0: the processor left it the only finite logit) —
the token-level default masks it with the loss mask; DeepSpeed ZeRO-3 with
``ds3_gather_for_generation: false`` when a process has no allocated row (it then skips
``generate``, whose sharded forward passes are collective).
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

from training.duet import core as duet
from training.duet.core import DuetSettings
from training.duet.dist import TorchGroup, gather_rows, global_plan
from training.duet.generate import (
    GATE_ARGS_KEY,
    MIN_ROWS,
    VLLM_PLUGIN_GROUP,
    VLLM_PROCESSOR,
    MarkerAbortProcessor,
    engine_outcome,
    gate_request_args,
    generate_compacting,
    processor_plugin_registered,
)
from training.grpo_trainer import WeftGRPOTrainer
from training.rewards import degenerate_groups, verdicts

STATE_FILE = "duet_state.json"
log = logging.getLogger(__name__)


def prompt_key(prompt: Any) -> str:
    """A stable id for a prompt (string or chat messages): the per-prompt state's key."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def vllm_problem(args: Any) -> str | None:
    """Why DUET cannot roll out on the vLLM settings of ``args`` (None when it can)."""
    if not getattr(args, "use_vllm", False):
        return None
    if getattr(args, "vllm_structured_outputs_regex", None):
        return "vllm_structured_outputs_regex is not passed on DUET's per-rollout requests"
    if args.vllm_mode != "colocate":
        return None
    if args.vllm_tensor_parallel_size != 1:
        return ("colocated tensor parallelism (vllm_tensor_parallel_size > 1) needs every rank "
                "of a group to send the same prompts, but DUET's allocated rows differ by rank")
    if args.vllm_enable_sleep_mode:
        return "vllm_enable_sleep_mode is not supported by DUET's colocated rollouts"
    if not processor_plugin_registered():
        return (f"the vLLM engine TRL builds for colocated rollouts takes no logits_processors "
                f"argument, so {VLLM_PROCESSOR} reaches it only as a vLLM plugin, and none is "
                f"registered: add the entry point `duet_abort = \"{VLLM_PROCESSOR}\"` under "
                f"[project.entry-points.\"{VLLM_PLUGIN_GROUP}\"] in pyproject.toml and reinstall "
                "(pip install -e .), or use vllm_mode: server (weft's rollout server loads it "
                "with --logits-processors)")
    return None


class DuetGRPOTrainer(WeftGRPOTrainer):
    """``WeftGRPOTrainer`` with the DUET controller (see the module docstring)."""

    SUPPORTS_VLLM = True  # rollouts on TRL's vLLM path, colocate and server (module docstring)
    # Transformers rollouts: ended rows leave the batch, which keeps at least this many rows
    # (training.duet.generate.generate_compacting); None: plain model.generate.
    compact_min_rows: int | None = MIN_ROWS

    def __init__(self, *args: Any, duet_settings: DuetSettings | None = None,
                 drop_degenerate_groups: bool = False, correctness_reward: str | None = None,
                 **kwargs: Any):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        problem = vllm_problem(config)  # before TRL builds a vLLM engine for nothing
        if problem:
            raise ValueError(f"DUET cannot roll out on vLLM here: {problem}; or set "
                             "use_vllm: false (transformers generation)")
        # The parent's filter works on fixed groups; DUET's groups vary, so it runs here.
        super().__init__(*args, **kwargs)
        if self.use_transformers_continuous_batching:
            raise ValueError("DUET generates with transformers' generate and its batched abort "
                             "processor, or on vLLM; set use_transformers_continuous_batching: "
                             "false")
        if correctness_reward is None and drop_degenerate_groups:
            raise ValueError("drop_degenerate_groups needs correctness_reward")
        self.settings = duet_settings or DuetSettings()
        if self.settings.n_min > self.num_generations:
            raise ValueError(f"duet.n_min={self.settings.n_min} exceeds num_generations="
                             f"{self.num_generations} (the slots per prompt, n_max)")
        self.duet_drop = drop_degenerate_groups
        self.duet_correct_col = (None if correctness_reward is None
                                 else self.reward_func_names.index(correctness_reward))
        # A never-seen batch is priced at the cap: every rollout costs at most L_max tokens,
        # so the first step's spend is within its budget whatever the lengths turn out to be.
        self.prompt_state = duet.PromptState(s_floor=self.settings.s_floor,
                                             l_cold=float(self.max_completion_length))
        self.quantiles = duet.LengthQuantiles(self.max_completion_length, self.settings.window,
                                              self.settings.refit_every)
        self.lam: float | None = None
        self.group = TorchGroup.current()  # the data-parallel processes (one: a plain run)
        self._plan: dict[str, Any] | None = None  # this generation batch's allocation and gates
        self._pending: dict[str, Any] | None = None  # awaiting Phase 4
        self._rewards: torch.Tensor | None = None
        self._capture: tuple[Any, torch.Tensor] | None = None
        self._seq_logps: dict[int, float] = {}
        self._overhead_s = 0.0

    # -- Phase 1 ---------------------------------------------------------------------------

    def _allocate(self, inputs: list[dict]) -> dict[str, Any]:
        rows = []
        for x in inputs:
            key = prompt_key(x["prompt"])
            rows.append((key, self.prompt_state.s_hat(key), self.prompt_state.l_hat(key)))
        plan = global_plan(self.group, rows, self.num_generations, self.settings, self.lam)
        # The 1-based step this batch trains (Phase 4 may run before or after the optimizer
        # step has advanced global_step).
        plan.update(k1=self.quantiles.k1, k2=self.quantiles.k2,
                    step=self.state.global_step + 1)
        return plan

    # -- Phase 2 ---------------------------------------------------------------------------

    def _gate_params(self, plan: dict[str, Any]) -> duet.GateParams:
        b = self.settings
        k1, k2 = (plan["k1"], plan["k2"]) if b.abort else (self.max_completion_length,) * 2
        return duet.GateParams(k1=k1, k2=k2, grace=b.grace, poll_every=b.poll_every,
                               eps_abort=b.eps_abort, tail_tokens=b.tail_tokens)

    def _decode(self, toks: list[int]) -> str:
        return self._tokenizer.decode(toks, skip_special_tokens=False)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                              has_tool_images=False):
        plan = self._plan
        if plan is None or not self.model.training:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                 num_generations, has_tool_images)
        if images or multimodal_fields:
            raise ValueError("DUET supports text-only prompts")
        offset = plan["offset"]
        rows = [i for i in range(len(prompt_ids)) if plan["allocated"][offset + i]]
        params = self._gate_params(plan)
        # One coin per slot of the global batch: distinct per rollout, the same on any number
        # of processes, reproducible from (seed, step).
        coins = duet.coin_draws(self.args.seed, self.state.global_step, len(plan["allocated"]))
        mine = [coins[offset + i] for i in rows]
        eos = self.eos_token_ids
        plan["gate_s"] = self._overhead_s
        if self.use_vllm:
            generated, logprobs, gates = self._generate_vllm(prompt_ids, rows, params, mine)
        else:
            generated, gates = self._generate_transformers(prompt_ids, rows, params, mine)
            logprobs = None
        plan["gate_s"] = self._overhead_s - plan["gate_s"]  # the gate's part of the overhead
        completions: list[list[int]] = [[eos[0]] for _ in prompt_ids]
        row_logprobs = [[0.0] for _ in prompt_ids] if logprobs is not None else None
        for j, row in enumerate(rows):
            completions[row] = generated[j]
            if row_logprobs is not None:
                row_logprobs[row] = logprobs[j]
        plan["gates"] = {offset + row: g for row, g in zip(rows, gates, strict=True)}
        return completions, row_logprobs

    def _generate_transformers(self, prompt_ids, rows, params, coins):
        """The allocated rows through ``model.generate`` with the batched abort processor. A
        process with no allocated row still enters the unwrap context (collective under
        ZeRO-3 and FSDP), and skips ``generate``."""
        eos, pad_id = self.eos_token_ids, self._tokenizer.pad_token_id
        width = max([len(prompt_ids[i]) for i in rows], default=0)
        ids = torch.tensor([[pad_id] * (width - len(prompt_ids[i])) + list(prompt_ids[i])
                            for i in rows])
        mask = torch.tensor([[0] * (width - len(prompt_ids[i])) + [1] * len(prompt_ids[i])
                             for i in rows])
        marker = duet.answer_marker(self.args.answer_format)
        processor = MarkerAbortProcessor.for_batch(params, [marker] * len(rows), coins, width,
                                                   eos, self._decode)
        device = self.accelerator.device
        with (unwrap_model_for_generation(
                self.model_wrapped, self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs) as model,
              torch.no_grad(), self._dist.summon_full_params(self.model_wrapped, recurse=False)):
            if not rows:
                return [], []
            try:
                if self.compact_min_rows is None:
                    out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                         generation_config=self.generation_config,
                                         logits_processor=[processor])
                else:
                    out, stats = generate_compacting(
                        model, ids.to(device), mask.to(device), self.generation_config,
                        [processor], min_rows=self.compact_min_rows)
                    self._plan["decode_row_share"] = stats.row_share
            finally:
                self._overhead_s += processor.seconds  # the gate inside generation
        completions = []
        for j in range(len(rows)):
            gen = out[j, width:].tolist()
            ends = [n for n, tok in enumerate(gen) if tok in eos]
            completions.append(gen[: ends[0] + 1] if ends else gen)
        return completions, processor.gates

    def _generate_vllm(self, prompt_ids, rows, params, coins):
        """The allocated rows on TRL's vLLM engine, one request per rollout with its own gate
        (``training.duet.vllm``); outcomes replayed from the returned tokens."""
        from training.duet import vllm as duet_vllm

        if self.state.global_step != self._last_loaded_step:  # as TRL's own vLLM path
            self.vllm_generation.sync_weights()
            self._last_loaded_step = self.state.global_step
        eos = self.eos_token_ids
        specs = [gate_request_args(params, self.args.answer_format, eos_token_id=eos[0],
                                   coin=c)[GATE_ARGS_KEY] for c in coins]
        base = {"repetition_penalty": self.repetition_penalty, "temperature": self.temperature,
                "top_p": self.top_p, "top_k": self.top_k,
                "min_p": 0.0 if self.min_p is None else self.min_p,
                "max_tokens": self.max_completion_length, "logprobs": 0}
        extra = dict(self.args.generation_kwargs or {})
        prompts = [list(prompt_ids[i]) for i in rows]
        if self.vllm_mode == "colocate":
            completions, logprobs = duet_vllm.colocate_generate(
                self.vllm_generation.llm, prompts, {**base, **extra}, specs)
        else:  # server: the main process sends every process's rollouts, then hands them back
            parts = self.group.all_gather(list(zip(prompts, specs, strict=True)))
            result = None
            if self.accelerator.is_main_process:
                flat = [r for p in parts for r in p]
                result = duet_vllm.server_generate(
                    self.vllm_generation.vllm_client, [p for p, _ in flat], base, extra,
                    [s for _, s in flat])
            all_completions, all_logprobs = self.group.broadcast(result)
            start = sum(len(p) for p in parts[: self.group.rank])
            mine = slice(start, start + len(rows))
            completions = all_completions[mine]
            logprobs = None if all_logprobs is None else all_logprobs[mine]
        started = time.perf_counter()
        gates = [engine_outcome(spec, c, eos, self._decode)
                 for spec, c in zip(specs, completions, strict=True)]
        self._overhead_s += time.perf_counter() - started  # the gate, replayed here
        return completions, logprobs, gates

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rewards = rewards  # gathered by TRL: every process's rows, in global order
        return rewards

    # -- Phase 3 ---------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        self._finish_step()  # a previous batch whose Phase 4 has not run yet (see training_step)
        started = time.perf_counter()
        self._overhead_s = 0.0
        self._plan = self._allocate(inputs)
        self._overhead_s += time.perf_counter() - started
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            plan, self._plan = self._plan, None
        started = time.perf_counter()
        self._apply_update_weights(out, plan)
        self._overhead_s += time.perf_counter() - started
        return out

    def training_step(self, model, inputs, num_items_in_batch):
        """TRL's micro-step; once the generation batch's last micro-batch has passed through
        the loss (every micro-step of the batch done, on every process alike), Phase 4 runs
        here, so its diagnostics and the step's controller overhead are logged with the step
        they belong to. Where the batch spans optimizer steps differently, Phase 4 runs when
        the next batch starts instead."""
        out = super().training_step(model, inputs, num_items_in_batch)
        every = self.args.steps_per_generation * self.num_iterations
        if self._pending is not None and self._step % every == 0:
            self._finish_step()
        return out

    def _apply_update_weights(self, out: dict[str, Any], plan: dict[str, Any]) -> None:
        """Lines 35-43 over the global batch (every process computes the same arrays), then
        this process's rows of advantages and masks."""
        slots = self.num_generations
        gates: dict[int, duet.RolloutGate] = plan.get("gates", {})
        raw = self._rewards.cpu().double()
        rewards = (raw * self.reward_weights.to(raw).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(raw).all(dim=1)] = float("nan")
        rows, offset, local = len(rewards), plan["offset"], plan["local_rows"]
        allocated = np.asarray(plan["allocated"])
        lengths_local = out["completion_mask"].sum(dim=1).tolist()
        reached, cap_cut = self._marker_and_cap(out["completion_ids"], lengths_local, gates,
                                                offset)
        # Each rollout's outcome, from the process that generated it, to every process.
        outcome = gather_rows(self.group, [
            (offset + i, int(n) if allocated[offset + i] else 0)
            + ((gates[offset + i].aborted, gates[offset + i].marker_seen,
                gates[offset + i].coin_drawn, gates[offset + i].p_abort)
               if offset + i in gates else (False, False, False, 1.0))
            + (reached[i], cap_cut[i])
            for i, n in enumerate(lengths_local)])
        if [o[0] for o in outcome] != list(range(rows)):
            raise RuntimeError("DUET's gathered rollout outcomes are not in global row order")
        lengths = [o[1] for o in outcome]
        aborted = np.array([o[2] for o in outcome], dtype=bool)
        dropped = None
        if self.duet_drop:
            correct = verdicts(raw[:, self.duet_correct_col].tolist())
            dropped = [degenerate_groups(correct[g * slots: g * slots + n], n)[0]
                       for g, n in enumerate(plan["counts"])]
        phase3 = duet.loss_weights(rewards.numpy(), plan["counts"], slots, aborted,
                                   [o[5] for o in outcome], plan["s_pre"],
                                   scale={True: "group", False: "none"}.get(
                                       self.scale_rewards, self.scale_rewards),
                                   dropped=dropped)
        adv, keep, weights = phase3.advantages, phase3.keep, phase3.weights
        mine = slice(offset, offset + local)
        device = out["advantages"].device
        out["advantages"] = torch.tensor(phase3.loss_advantages[mine],
                                         dtype=out["advantages"].dtype, device=device)
        mask = out["completion_mask"] * torch.tensor(keep[mine], device=device).unsqueeze(1)
        for i, gate in gates.items():  # the forced EOS was not sampled: out of the loss
            if gate.stopped_at is not None and gate.stopped_at < mask.shape[1]:
                mask[i - offset, gate.stopped_at] = 0
        out["completion_mask"] = mask
        loss_mask = mask if out.get("tool_mask") is None else mask * out["tool_mask"]
        out["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        out["duet_row"] = torch.arange(offset, offset + local, device=device)
        self._log_step(plan, outcome, allocated, aborted, keep, weights, lengths,
                       rewards.numpy())
        self._pending = {"plan": plan, "adv": adv, "keep": keep.tolist(), "lengths": lengths,
                         "aborted": aborted.tolist(), "allocated": allocated.tolist()}
        self._seq_logps = {}

    def _marker_and_cap(self, completion_ids: torch.Tensor, lengths: list[int],
                        gates: dict[int, duet.RolloutGate], offset: int
                        ) -> tuple[list[bool], list[bool]]:
        """Per local row: whether its text reached the answer marker by the abort gate
        (``training.duet.marker_reached``; decodes only rows the gate saw no marker in and drew
        no coin for) and whether the length cap cut it (``max_completion_length`` tokens, no
        EOS of its own, not stopped by the gate). Unallocated rows: False, False."""
        marker = duet.answer_marker(self.args.answer_format)
        eos = set(self.eos_token_ids)
        reached, cut = [], []
        for i, n in enumerate(lengths):
            gate = gates.get(offset + i)
            if gate is None:
                reached.append(False)
                cut.append(False)
                continue
            ids = completion_ids[i, : int(n)].tolist()
            reached.append(duet.marker_reached(gate, lambda ids=ids: self._decode(ids), marker))
            cut.append(gate.stopped_at is None and len(ids) >= self.max_completion_length
                       and (not ids or ids[-1] not in eos))
        return reached, cut

    def _log_step(self, plan, outcome, allocated, aborted, keep, weights, lengths,
                  rewards) -> None:
        m = self._metrics["train"]
        # TRL's ``reward`` averages every slot, so unallocated placeholders count as 0 there;
        # this is the mean over the rollouts DUET actually generated (aborted ones included).
        allocated_rewards = np.asarray(rewards, dtype=float)[allocated]
        finite = allocated_rewards[~np.isnan(allocated_rewards)]
        if finite.size:
            m["duet/reward_mean"].append(float(finite.mean()))
        counts = plan["counts"]
        rates = duet.step_rates([
            duet.RolloutOutcome(length=int(o[1]), marker=bool(o[6]), marker_seen=bool(o[3]),
                                coin_drawn=bool(o[4]), aborted=bool(o[2]), cap_cut=bool(o[7]))
            for o in outcome if allocated[o[0]]])
        m["duet/lambda"].append(float(plan["lam"]))
        m["duet/gate_s"].append(float(plan.get("gate_s", 0.0)))
        if "decode_row_share" in plan:
            m["duet/decode_row_share"].append(float(plan["decode_row_share"]))
        # K1 (polling start) and K2 (abort threshold) this step's gates ran with (§3.2), and
        # the token at which a marker-less rollout is aborted, K2 + G (Eq. 5): past the length
        # cap, the cap cuts rollouts before any abort can
        params = self._gate_params(plan)
        m["duet/k1"].append(float(plan["k1"]))
        m["duet/k2"].append(float(plan["k2"]))
        m["duet/abort_at"].append(float(params.k2 + params.grace))
        m["duet/n_q_min"].append(float(min(counts)))
        m["duet/n_q_mean"].append(float(np.mean(counts)))
        m["duet/n_q_max"].append(float(max(counts)))
        # p_marker (Theorem 3): the text reached the marker by the abort gate; the gate's own
        # sightings at its polls apart (those are the rollouts it may trim G tokens later)
        m["duet/marker_rate"].append(rates["marker_rate"])
        m["duet/marker_seen_rate"].append(rates["marker_seen_rate"])
        m["duet/abort_rate"].append(rates["abort_rate"])
        m["duet/eps_kept"].append(rates["eps_kept"])
        m["duet/cap_cut_rate"].append(rates["cap_cut_rate"])
        kept_w = weights[keep]
        m["duet/is_weight_mean"].append(float(kept_w.mean()) if kept_w.size else 0.0)
        spent = float(sum(lengths))  # every generated token of the step, aborted rollouts too
        m["duet/tokens_generated"].append(spent)
        m["duet/token_budget"].append(float(plan["budget"]))
        m["duet/tokens_planned"].append(float(plan["planned"]))
        m["duet/budget_used"].append(spent / plan["budget"] if plan["budget"] else 0.0)
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
        started = time.perf_counter()
        plan = pending["plan"]
        # Every process's loss-pass sums (keyed by global row), so all update the same state.
        seq_logps: dict[int, float] = {}
        for part in self.group.all_gather(self._seq_logps):
            seq_logps.update(part)
        # Prompts with a running sigma_obs before this step: the surrogate App. A.4 compares.
        warm = [str(k) in self.prompt_state.sigma for k in plan["keys"]]
        sigmas = duet.observe_step(
            self.prompt_state, self.quantiles, plan["keys"], plan["counts"],
            self.num_generations, lengths=pending["lengths"], aborted=pending["aborted"],
            keep=pending["keep"], advantages=pending["adv"], seq_logps=seq_logps,
            max_len=self.max_completion_length)
        refit = self.quantiles.end_step(plan.get("step", max(1, self.state.global_step)))
        if self.state.epoch is not None and self.state.epoch >= 1:
            self.prompt_state.refloor()
        self.lam = plan["lam"] if plan["lam"] else self.lam
        pairs = [(s, sigmas[str(k)]) for k, s, w in zip(plan["keys"], plan["s_hat"], warm,
                                                         strict=True) if w and str(k) in sigmas]
        chi2 = duet.calibration_chi2([p[0] for p in pairs], [p[1] for p in pairs],
                                     floor=self.settings.s_floor)
        m = self._metrics["train"]
        if chi2 is not None:
            m["duet/calibration_chi2"].append(chi2)
        m["duet/k_refit"].append(float(refit))
        m["duet/k_window"].append(float(len(self.quantiles.window)))
        m["duet/s_floor"].append(float(self.prompt_state.s_floor))
        self._overhead_s += time.perf_counter() - started
        m["duet/overhead_s"].append(self._overhead_s)
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
        if self.args.should_save and folder.is_dir():  # every process holds the same state
            (folder / STATE_FILE).write_text(json.dumps(self.duet_state_dict()))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = Path(checkpoint) / STATE_FILE if checkpoint else None
        if path is not None and path.is_file():
            self.load_duet_state_dict(json.loads(path.read_text()))
