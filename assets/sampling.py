"""The one sampling config of every asset that generates.

``SamplingConfig`` is nested in each asset config that samples from a model
(``sampling: {k, temperature, top_p, max_tokens, seed}`` in a run config) and has the one
conversion to ``eval.runner.EvalConfig``: :meth:`SamplingConfig.eval_config`. An asset picks
its own defaults by giving its field a default instance, e.g.
``sampling: SamplingConfig = SamplingConfig(k=2, temperature=1.0, top_p=1.0, max_tokens=32)``.

Bad settings (``k < 1``, ``k > 1`` at temperature 0, ``max_tokens < 1``, an unknown extraction
rule) raise ``dg.Failure`` naming the setting.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from eval.runner import EvalConfig

GREEDY_TEMPERATURE = 0.0
SAMPLED_TEMPERATURE = 0.6  # the temperature used when k > 1 and none is given


class SamplingConfig(dg.Config):
    """How an asset samples: ``k`` samples per problem (None: the benchmark's default k, or
    1), ``temperature`` (None: 0.0 for k = 1, else 0.6), nucleus ``top_p`` (ignored at
    temperature 0), ``max_tokens`` per answer (per turn in tool mode) and the sampling
    ``seed``."""

    k: int | None = None
    temperature: float | None = None
    top_p: float = 0.95
    max_tokens: int = 512
    seed: int = 0

    def resolved_k(self, default_k: int = 1) -> int:
        return self.k or default_k

    def resolved_temperature(self, default_k: int = 1) -> float:
        if self.temperature is not None:
            return self.temperature
        return GREEDY_TEMPERATURE if self.resolved_k(default_k) == 1 else SAMPLED_TEMPERATURE

    def eval_config(self, *, default_k: int = 1, mode: Any = None, limit: int | None = None,
                    extraction: str = "strict") -> EvalConfig:
        """The ``EvalConfig`` of these settings with generation ``mode`` (None: single),
        ``limit`` problems and the math ``extraction`` rule; ``dg.Failure`` on bad settings."""
        from eval.modes import build_mode

        try:
            return EvalConfig(k=self.resolved_k(default_k),
                              temperature=self.resolved_temperature(default_k),
                              top_p=self.top_p, max_tokens=self.max_tokens, seed=self.seed,
                              limit=limit, mode=mode if mode is not None else build_mode(),
                              extraction=extraction)
        except (TypeError, ValueError) as exc:
            raise dg.Failure(description=f"bad sampling settings: {exc}") from exc
