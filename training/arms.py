"""Arms of a training comparison: the runs to train and the figures of each run.

Shared by the DUET budget sweep (``training.duet.sweep``) and the Engagement paper's Table 5
job (``training.ep_budget``); no Dagster here (``assets/`` launches the runs through the
trainer resource and evaluates each checkpoint with ``eval.recorded.evaluate_recorded``, the
path of every stored evaluation).

- :class:`Arm`: one run of a comparison, a recipe plus ``key=value`` overrides
  (:meth:`Arm.override_args` formats them for ``python -m training.grpo``).
- :func:`metrics_logs`, :func:`finite_mean`, :func:`train_summary`: figures of a run from its
  ``train_metrics`` rows (steps, training wall clock, reward, completion length).

Not guaranteed: anything about the figures' comparability across machines; arms of one
comparison should run on one machine under one load.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Arm:
    """One training run of a comparison: ``recipe`` plus ``overrides``."""

    label: str
    recipe: str
    overrides: dict[str, Any] = field(default_factory=dict)

    def override_args(self) -> list[str]:
        return override_args(self.overrides)


def override_args(overrides: Mapping[str, Any]) -> list[str]:
    """``key=value`` arguments for ``python -m training.grpo`` (values parse back as YAML)."""
    from training.launch import format_override

    return [format_override(k, v) for k, v in overrides.items()]


def metrics_logs(row: Mapping[str, Any]) -> dict[str, Any]:
    """The log dict a ``train_metrics`` row keeps in ``logs_json`` ({} when unreadable)."""
    try:
        return json.loads(row.get("logs_json") or "{}")
    except (TypeError, ValueError):
        return {}


def finite_mean(values: Sequence[float | None]) -> float | None:
    """Mean of the finite values, None when there are none."""
    kept = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(kept) / len(kept) if kept else None


def train_summary(metrics_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A run's ``steps`` (logged rows), ``train_wall_s`` (sum of ``seconds_per_step``),
    ``seconds_per_step``, ``rollout_tokens`` / ``tokens_per_step`` (``tokens_generated``),
    ``reward_mean`` and ``completion_length`` (means over the logged steps); None where no step
    logged the value."""
    rows = sorted(metrics_rows, key=lambda r: r["step"])
    wall = [float(r["seconds_per_step"]) for r in rows if r.get("seconds_per_step") is not None]
    tokens = [float(r["tokens_generated"]) for r in rows if r.get("tokens_generated") is not None]
    return {
        "steps": len(rows),
        "train_wall_s": sum(wall) if wall else None,
        "seconds_per_step": finite_mean(wall),
        "rollout_tokens": sum(tokens) if tokens else None,
        "tokens_per_step": finite_mean(tokens),
        "reward_mean": finite_mean([r.get("reward_mean") for r in rows]),
        "completion_length": finite_mean([r.get("completion_length") for r in rows]),
    }
