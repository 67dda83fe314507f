"""Numeric ranges of the training configs, checked before anything else is derived or loaded.

Every numeric field of both configs, TRL's and transformers' included, has a range in
:data:`CONFIG_RANGES` or is listed in :data:`UNRANGED_FIELDS`; NaN and infinities never pass.
:func:`check_ranges` raises a :class:`RecipeError` that names the field, the value and the
allowed range. The ranges follow TRL's and transformers' documented meanings: ``max_steps`` is
>= 1 or -1 (transformers trains for ``num_train_epochs`` whenever ``max_steps`` is not
positive, so -1 is the one sentinel allowed and 0 is refused), step counts that may be ratios
(``logging_steps``, ``save_steps``, ``eval_steps``, ``warmup_steps``) are a fraction below 1 or
a whole number, and a few deliberately loose ones are noted in the table (``entropy_coef`` may
be negative). ``training.config_base`` runs the check first in the configs' ``__post_init__``.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any

from training.config_recipes import RecipeError, _type_hints


@dataclass(frozen=True)
class Range:
    """Allowed values of one numeric field: ``low``..``high`` (an end is excluded when marked
    open), always finite; ``also``: sentinels allowed outside it; ``whole_from_one``: values
    of 1 or more must be whole numbers (transformers' "steps, or below 1 a ratio of the total
    steps"); ``note``: what a sentinel or an odd bound means."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    also: tuple[float, ...] = ()
    whole_from_one: bool = False
    note: str = ""

    def allows(self, value: float) -> bool:
        if value in self.also:
            return True
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high
                                      or (self.high_open and value == self.high)):
            return False
        return not (self.whole_from_one and value >= 1 and value != int(value))

    def describe(self, integer: bool) -> str:
        kind = "an integer" if integer else "a finite number"
        lo, hi = _num(self.low), _num(self.high)
        if self.low is not None and self.high is not None:
            text = (f"{kind} in {'(' if self.low_open else '['}{lo}, {hi}"
                    f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"{kind} {'>' if self.low_open else '>='} {lo}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.high_open else '<='} {hi}"
        else:
            text = kind
        if self.whole_from_one:
            text += ", whole when 1 or more"
        if self.also:
            text += "".join(f" or {_num(a)}" for a in self.also)
        return text + (f" ({self.note})" if self.note else "")


def _num(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


_POSITIVE_INT = Range(1)
_NON_NEGATIVE = Range(0)
_POSITIVE = Range(0, low_open=True)
_UNIT = Range(0, 1)
_STEPS_OR_RATIO = Range(0, low_open=True, whole_from_one=True,
                        note="below 1: a ratio of the total steps")
_PORT = Range(1, 65535)
_SEED = Range(0, 2**32 - 1, note="numpy's seed range")

# transformers' TrainingArguments fields and weft's own, shared by both configs. Null is
# allowed wherever the field's type allows it; these ranges apply to numbers.
COMMON_RANGES: dict[str, Range] = {
    "per_device_train_batch_size": _POSITIVE_INT,
    "per_device_eval_batch_size": _POSITIVE_INT,
    "gradient_accumulation_steps": _POSITIVE_INT,
    "num_train_epochs": _POSITIVE,
    "max_steps": Range(1, also=(-1,), note="-1: train for num_train_epochs instead"),
    "learning_rate": _POSITIVE,
    "warmup_steps": Range(0, whole_from_one=True, note="below 1: a ratio of the total steps"),
    "weight_decay": _NON_NEGATIVE,
    "adam_beta1": Range(0, 1, high_open=True),
    "adam_beta2": Range(0, 1, high_open=True),
    "adam_epsilon": _POSITIVE,
    "max_grad_norm": Range(0, note="0 disables clipping"),
    "label_smoothing_factor": Range(0, 1, high_open=True),
    "neftune_noise_alpha": _POSITIVE,
    "torch_empty_cache_steps": _POSITIVE_INT,
    "logging_steps": _STEPS_OR_RATIO,
    "eval_steps": _STEPS_OR_RATIO,
    "save_steps": _STEPS_OR_RATIO,
    "eval_delay": _NON_NEGATIVE,
    "eval_accumulation_steps": _POSITIVE_INT,
    "save_total_limit": _POSITIVE_INT,
    "seed": _SEED,
    "data_seed": _SEED,
    "dataloader_num_workers": Range(0, note="0 loads data in the main process"),
    "dataloader_prefetch_factor": _POSITIVE_INT,
    "ddp_bucket_cap_mb": _POSITIVE_INT,
    "ddp_timeout": _POSITIVE_INT,
    "local_rank": Range(-1, note="-1: not distributed; set by the launcher"),
    "router_aux_loss_coef": _NON_NEGATIVE,
    "pad_to_multiple_of": _POSITIVE_INT,
    "dataset_limit": _POSITIVE_INT,
    "torch_threads": _POSITIVE_INT,
}
SFT_RANGES: dict[str, Range] = {
    **COMMON_RANGES,
    "max_length": _POSITIVE_INT,
    "dataset_num_proc": _POSITIVE_INT,
}
GRPO_RANGES: dict[str, Range] = {
    **COMMON_RANGES,
    "num_generations": Range(2, note="a group needs two rollouts to have an advantage"),
    "num_generations_eval": _POSITIVE_INT,
    "max_completion_length": _POSITIVE_INT,
    "generation_batch_size": _POSITIVE_INT,
    "steps_per_generation": _POSITIVE_INT,
    "temperature": _POSITIVE,
    "top_p": Range(0, 1, low_open=True),
    "top_k": Range(0, note="0 disables top-k filtering"),
    "min_p": _UNIT,
    "repetition_penalty": _POSITIVE,
    "vllm_server_port": _PORT,
    "vllm_group_port": _PORT,
    "vllm_server_timeout": _POSITIVE,
    "vllm_gpu_memory_utilization": Range(0, 1, low_open=True),
    "vllm_max_model_length": _POSITIVE_INT,
    "vllm_tensor_parallel_size": _POSITIVE_INT,
    "beta": Range(0, note="0 loads no reference model"),
    "num_iterations": _POSITIVE_INT,
    "epsilon": _POSITIVE,
    "epsilon_high": _POSITIVE,
    "delta": Range(1, low_open=True, note="an upper bound on the ratio; TRL advises > 1 + epsilon"),
    "sapo_temperature_neg": _POSITIVE,
    "sapo_temperature_pos": _POSITIVE,
    "vespo_k_pos": _NON_NEGATIVE,
    "vespo_lambda_pos": _NON_NEGATIVE,
    "vespo_k_neg": _NON_NEGATIVE,
    "vespo_lambda_neg": _NON_NEGATIVE,
    "ref_model_mixup_alpha": _UNIT,
    "ref_model_sync_steps": _POSITIVE_INT,
    "top_entropy_quantile": _UNIT,
    "entropy_coef": Range(note="negative values penalise entropy"),
    "entropy_coef_min": _NON_NEGATIVE,
    "entropy_coef_max": _NON_NEGATIVE,
    "entropy_coef_delta": _POSITIVE,
    "entropy_target": _NON_NEGATIVE,
    "max_tool_calling_iterations": Range(0),
    "vllm_importance_sampling_clip_max": _POSITIVE,
    "vllm_importance_sampling_clip_min": _NON_NEGATIVE,
    "vllm_importance_sampling_cap": _POSITIVE,
    "off_policy_mask_threshold": _POSITIVE,
    "num_completions_to_print": Range(0),
}
CONFIG_RANGES: dict[str, dict[str, Range]] = {"sft": SFT_RANGES, "grpo": GRPO_RANGES}
# Numeric fields with no range entry, and why (a test keeps this and the tables complete).
UNRANGED_FIELDS: dict[str, str] = {
    "reward_weights": "refused: weights go inside `rewards`",
    "budgets": "checked with the budget reward (positive integers)",
    "vllm_server_gpus": "checked as distinct CUDA device indices (>= 0)",
}
# (lower, upper) pairs that must be ordered when both are set.
ORDERED_PAIRS: tuple[tuple[str, str], ...] = (
    ("entropy_coef_min", "entropy_coef_max"),
    ("vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max"),
)


def _integer_field(annotation: Any) -> bool:
    """True when the field's numeric type is int only (``int``, ``int | None``, ``int | str``)."""
    args = set(typing.get_args(annotation)) or {annotation}
    return int in args and float not in args


def check_ranges(config: Any, kind: str) -> None:
    """Raise RecipeError for the first numeric field outside its range (field, value, range)."""
    hints = _type_hints(type(config))
    for name, allowed in CONFIG_RANGES[kind].items():
        value = getattr(config, name, None)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # null, 'auto' and wrong types are the type check's business
        if not allowed.allows(value):
            raise RecipeError(f"field `{name}` must be "
                              f"{allowed.describe(_integer_field(hints.get(name)))}, "
                              f"got {value!r}")
    for low, high in ORDERED_PAIRS:
        a, b = getattr(config, low, None), getattr(config, high, None)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > b:
            raise RecipeError(f"field `{low}` ({a!r}) must not exceed `{high}` ({b!r})")

