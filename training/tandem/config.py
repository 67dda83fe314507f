"""``TandemGRPOConfig``: the GRPO config of Tandem RL ("Tandem Reinforcement Learning with
Verifiable Rewards", §3), trained by ``training.tandem.trainer.TandemGRPOTrainer``.

A recipe of kind ``tandem`` (or, as recipes were written before kinds named methods, ``grpo``
with a ``tandem`` mapping) builds this class; its ``tandem`` field is a
:class:`training.tandem.core.TandemSettings` (the handoff coin ``senior_prob``, the subword
``span_cap`` and the ``junior``), given in the recipe as a mapping.

Checked before any model is loaded: the settings (``TandemSettings``: ranges, unknown keys,
types), and the GRPO fields weft's dual decoder (``training.tandem.core``) cannot honour: transformers
continuous batching, ``min_p`` and a repetition penalty. vLLM is refused by
``training.rollouts.choose_engine`` (lockstep decoding switches models token by token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from training.config_base import WeftGRPOConfig, method_settings, register_kind
from training.config_recipes import RecipeError
from training.model_path import resolve_model
from training.tandem.core import TandemSettings


@register_kind("tandem")
@dataclass
class TandemGRPOConfig(WeftGRPOConfig):
    """weft's GRPO config plus Tandem RL's rollout settings (senior-only loss, §3.4)."""

    method: ClassVar[str] = "tandem"

    tandem: TandemSettings = field(
        default_factory=TandemSettings,
        metadata={"help": "Tandem RL rollouts (Tandem RL §3, App. A.1): the trained senior and "
                          "a frozen junior co-write each response in lockstep, handing over at "
                          "word boundaries; the loss covers senior-written tokens only."})

    def __post_init__(self) -> None:
        self.tandem = method_settings(TandemSettings, self.tandem, "tandem")
        super().__post_init__()

    @classmethod
    def trainer_class(cls) -> type:
        from training.tandem.trainer import TandemGRPOTrainer

        return TandemGRPOTrainer

    def trainer_kwargs(self, base_model: str) -> dict[str, Any]:
        """The junior (resolved like ``model_name_or_path``; empty: the starting checkpoint
        ``base_model``) and the handoff schedule."""
        junior = resolve_model(self.tandem.junior) if self.tandem.junior else base_model
        return {"junior_model": junior, "senior_prob": self.tandem.senior_prob,
                "span_cap": self.tandem.span_cap}

    def _check_method(self) -> None:
        if self.use_transformers_continuous_batching:
            raise RecipeError("field `use_transformers_continuous_batching` tandem rollouts use "
                              "weft's dual decoder: set it to false")
        if self.min_p or self.repetition_penalty not in (None, 1.0):
            raise RecipeError("field `min_p` and repetition_penalty are not supported by the "
                              "tandem sampler; leave them unset")
