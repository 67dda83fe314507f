"""DUET, token-budget-aware GRPO ("DUET: Optimize Token-Budget Allocation for RLVR", §3 and
Algorithm 1 in App. A.10), as one package:

- :mod:`training.duet.core`: the controller, plain functions and small state objects (numpy
  only): Neyman rollout allocation, stratification factors, per-prompt state, K1/K2 length
  quantiles, the marker-gated abort gate, importance weights, Phase 3's advantages and loss
  weights, Phase 4's per-rollout updates, each step's marker, abort and cap-cut rates, and
  :class:`DuetSettings` (a recipe's ``duet`` mapping). Its public names are this package's
  API, importable as ``from training.duet import ...``.
- :mod:`training.duet.config`: ``DuetGRPOConfig``, the GRPO config of a ``duet`` recipe (its
  ``duet`` field is a :class:`DuetSettings`) and the checks of those settings against the GRPO
  fields (imported from its module: it builds on TRL's config).
- :mod:`training.duet.trainer`: ``DuetGRPOTrainer``, the small subclass of weft's GRPO trainer
  that allocates rollouts, applies the gate during generation and weights the update.
- :mod:`training.duet.generate`: generation with the gate on transformers' decoding loop and the
  vLLM plugin registration check.
- :mod:`training.duet.vllm`: the gate as a vLLM V1 logits processor (the
  ``vllm.logits_processors`` entry point ``duet_abort``).
- :mod:`training.duet.dist`: one allocation across data-parallel processes.
- :mod:`training.duet.sweep`: the GRPO vs DUET budget sweep (arms, summaries), used by the
  ``duet_sweep`` asset.

- :mod:`training.duet.budget_claim`: DUET's budget claim (§4.3), judged from the newest sweep.

The config, trainer, generation and vLLM modules import torch/TRL/vLLM, so they are imported
from their own modules, never from here: importing this package (as vLLM does for the
``duet_abort`` entry point) loads numpy and the controller only.
"""


from training.duet.core import (
    BISECTION_STEPS,
    COLD_K1,
    COLD_K2,
    EPS_ABORT,
    EPS_PRE,
    FLOOR_PERCENTILE,
    GRACE,
    POLL_EVERY,
    Q_ABORT,
    Q_POLL,
    REFIT_EVERY,
    S_FLOOR,
    TAIL_TOKENS,
    WINDOW,
    Allocation,
    DuetSettings,
    GateParams,
    LengthQuantiles,
    LossWeights,
    PromptState,
    RolloutGate,
    RolloutOutcome,
    answer_marker,
    calibration_chi2,
    coin_draws,
    group_advantages,
    is_weight,
    loss_weights,
    marker_reached,
    neyman_allocation,
    observe_step,
    step_rates,
    stratification_factors,
    within_step_sigma,
)

__all__ = [
    "BISECTION_STEPS", "COLD_K1", "COLD_K2", "EPS_ABORT", "EPS_PRE", "FLOOR_PERCENTILE", "GRACE",
    "POLL_EVERY", "Q_ABORT", "Q_POLL", "REFIT_EVERY", "S_FLOOR", "TAIL_TOKENS", "WINDOW",
    "Allocation", "DuetSettings", "GateParams", "LengthQuantiles",
    "LossWeights", "PromptState", "RolloutGate", "RolloutOutcome",
    "answer_marker", "calibration_chi2", "coin_draws", "group_advantages", "is_weight",
    "loss_weights", "marker_reached", "neyman_allocation", "observe_step", "step_rates",
    "stratification_factors", "within_step_sigma",
]
