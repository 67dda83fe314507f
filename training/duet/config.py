"""``DuetGRPOConfig``: the GRPO config of DUET ("DUET: Optimize Token-Budget Allocation for
RLVR", §3), trained by ``training.duet.trainer.DuetGRPOTrainer``.

A recipe of kind ``duet`` (or, as recipes were written before kinds named methods, ``grpo``
with a ``duet`` mapping) builds this class; its ``duet`` field is the controller's
:class:`training.duet.DuetSettings`, given in the recipe as a mapping (deep-merged over the
recipe it extends and by overrides such as ``duet.budget_fraction=0.5``).

Checked before any model is loaded, each refusal naming the numbers and what to change:

- the settings themselves (``DuetSettings``: ranges, unknown keys, types);
- ``n_min <= num_generations`` (the slots per prompt are the allocator's cap ``n_max``);
- ``budget_fraction x full_rollouts <= num_generations``: otherwise the mean rollouts per
  prompt the budget pays for cannot fit in the slots and the budget cannot be spent;
- with the abort on, ``grace < max_completion_length`` (a rollout without a marker is aborted
  only past K2 + grace tokens, §3.2); where the cold-start threshold ``K2 + grace`` is past
  the cap, a warning says no rollout is aborted until K2 is refitted below ``cap - grace``;
- ``loss_type: dapo`` (Eq. 6 is a token mean over kept tokens), group or no reward scaling
  (per-prompt group normalisation), no transformers continuous batching (the gate runs inside
  ``generate`` or vLLM's sampler).

Not guaranteed: that TRL accepts every combination these checks let through (its own checks
run afterwards).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from training.config_base import WeftGRPOConfig, method_settings, register_kind
from training.config_recipes import RecipeError
from training.duet.core import COLD_K2, DuetSettings

log = logging.getLogger(__name__)


@register_kind("duet")
@dataclass
class DuetGRPOConfig(WeftGRPOConfig):
    """weft's GRPO config plus the DUET controller's settings (token-budgeted GRPO)."""

    method: ClassVar[str] = "duet"

    duet: DuetSettings = field(
        default_factory=DuetSettings,
        metadata={"help": "DUET token-budget controller settings (DUET §3, defaults App. A.3): "
                          "Neyman rollout counts, marker-gated abort, importance-weighted "
                          "update."})

    def __post_init__(self) -> None:
        self.duet = method_settings(DuetSettings, self.duet, "duet")
        super().__post_init__()

    @classmethod
    def trainer_class(cls) -> type:
        from training.duet.trainer import DuetGRPOTrainer

        return DuetGRPOTrainer

    def trainer_kwargs(self, base_model: str) -> dict[str, Any]:
        return {"duet_settings": self.duet}

    def _engine_hooks(self) -> dict[str, bool]:
        """Whether DUET's trainer sends its gates to vLLM, and whether vLLM loads DUET's
        processor by itself (``training.rollouts.choose_engine`` reads both)."""
        from training.duet.generate import processor_plugin_registered
        from training.rollouts import duet_vllm_hook

        return {"duet_hook": duet_vllm_hook() is not None,
                "duet_plugin": processor_plugin_registered()}

    def _check_method(self) -> None:
        settings, slots, cap = self.duet, self.num_generations, self.max_completion_length
        _require(settings.n_min <= slots, "duet", f"n_min={settings.n_min} exceeds "
                 f"num_generations={slots} (the slots per prompt, n_max); lower duet.n_min or "
                 "raise num_generations")
        mean = settings.budget_fraction * settings.full_rollouts
        _require(mean <= slots, "duet", f"budget_fraction x full_rollouts = "
                 f"{settings.budget_fraction:g} x {settings.full_rollouts} = {mean:g} rollouts "
                 f"per prompt on average, but num_generations={slots} caps a prompt at {slots}: "
                 f"the budget cannot be spent. Raise num_generations to at least "
                 f"{math.ceil(mean)} or lower duet.budget_fraction / duet.full_rollouts")
        if settings.abort and cap:
            _require(settings.grace < cap, "duet", f"grace={settings.grace} is not below "
                     f"max_completion_length={cap}: a rollout without an answer marker is "
                     "aborted only past K2 + grace tokens, so no abort could ever fire. Lower "
                     f"duet.grace below {cap} or set duet.abort: false")
            start = round(COLD_K2 * cap) + settings.grace
            if start >= cap:
                log.warning("duet: the abort threshold starts at K2 + grace = %d + %d = %d "
                            "tokens, past max_completion_length=%d: no rollout is aborted until "
                            "the refitted K2 (p80 of kept lengths) falls below %d",
                            round(COLD_K2 * cap), settings.grace, start, cap,
                            cap - settings.grace)
        _require(self.loss_type == "dapo", "loss_type", "must be 'dapo' with duet (Eq. 6 of "
                 f"the DUET paper is a token mean over kept tokens), got {self.loss_type!r}")
        _require(not self.use_transformers_continuous_batching,
                 "use_transformers_continuous_batching", "DUET generates with transformers' "
                 "generate or, where training.rollouts finds its hook, vLLM: set it to false")
        scale = {True: "group", False: "none"}.get(self.scale_rewards, self.scale_rewards)
        _require(scale in ("group", "none"), "scale_rewards",
                 "must be 'group' or 'none' with duet (per-prompt group normalisation)")


def _require(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise RecipeError(f"field `{name}` {message}")
