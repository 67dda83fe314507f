"""Arms of a training comparison: train several runs, then serve and evaluate each checkpoint.

Shared by the DUET budget sweep (``training.duet.sweep``) and the Engagement paper's Table 5
job (``training.ep_budget``); no Dagster here (``assets/`` launches the runs through the
trainer resource and writes the rows).

- :class:`Arm`: one run of a comparison, a recipe plus ``key=value`` overrides
  (:meth:`Arm.override_args` formats them for ``python -m training.grpo``).
- :func:`metrics_logs`, :func:`finite_mean`, :func:`train_summary`: figures of a run from its
  ``train_metrics`` rows (steps, training wall clock, reward, completion length).
- :func:`evaluate_served`: serve a model (``eval.models.ModelSpec.serve``: a local vLLM server
  for a folder, reused when the default port already serves it) and run ``eval.runner.evaluate``
  on it, the code path of the ``eval_samples`` asset; the LLM call records are handed back even
  when the evaluation fails.

Not guaranteed: anything about the figures' comparability across machines; arms of one
comparison should run on one machine under one load.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
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


def evaluate_served(spec: Any, bench: Any, problems: Sequence[Mapping[str, Any]], cfg: Any, *,
                    label: str, client_settings: Mapping[str, Any], pool: Any | None = None,
                    checkpoint_id: str | None = None, calls: list[dict[str, Any]] | None = None,
                    progress: Callable[[str], None] | None = None) -> Any:
    """Serve ``spec`` (an ``eval.models.ModelSpec``) and evaluate it on ``problems`` with
    ``cfg`` (an ``eval.runner.EvalConfig``); returns the ``EvalResult``. The client's call
    records are appended to ``calls`` (also when the evaluation raises), so the caller can
    write ``llm_calls`` either way."""
    import asyncio

    from eval.runner import evaluate
    from pipelines.llm import LLMClient

    with spec.serve() as (base_url, served, api_key):
        client = LLMClient(base_url, served, api_key=api_key, **dict(client_settings))
        try:
            client.check_reachable()

            async def run() -> Any:
                try:
                    return await evaluate(client, bench, problems, cfg, model_label=label,
                                          pool=pool, checkpoint_id=checkpoint_id,
                                          progress=progress)
                finally:
                    await client.aclose()

            return asyncio.run(run())
        finally:
            if calls is not None:
                calls.extend(client.drain_records())
