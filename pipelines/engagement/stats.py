"""Bootstrap confidence intervals for toy-experiment tables (paper App. C).

Cells in the paper's CI tables are "mean ± half-width of the bootstrap 95% interval" over the
evaluation episodes of one training seed. Rates are recomputed in every resample from
aggregate counts (e.g. resolved alarms / all alarms), not averaged per episode (App. C,
patrol CI paragraph); :func:`ratio_ci` does that, :func:`mean_ci` handles per-episode means.

Kept here rather than imported from ``eval.metrics`` because ``pipelines`` may not import
``eval`` (the layer rules of ``tests/test_layers.py``). Percentile intervals; not guaranteed accurate for a handful of
episodes (too narrow), and the intervals ignore training-seed variability, as in the paper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CI:
    value: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def fmt(self, scale: float = 1.0, digits: int = 2, suffix: str = "") -> str:
        """``"value ± half-width"``, both multiplied by ``scale`` (100 for percentages)."""
        return f"{self.value * scale:.{digits}f}{suffix} ± {self.half_width * scale:.{digits}f}"


def _indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    if n < 1:
        raise ValueError("cannot bootstrap an empty sample: evaluate at least one episode")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def mean_ci(values: Sequence[float], n_boot: int = 1000, alpha: float = 0.05,
            seed: int = 42) -> CI:
    """Mean of ``values`` with a percentile bootstrap interval."""
    x = np.asarray(values, dtype=float)
    boots = x[_indices(x.size, n_boot, seed)].mean(axis=1)
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return CI(float(x.mean()), float(lo), float(hi))


def ratio_ci(numerators: Sequence[float], denominators: Sequence[float], n_boot: int = 1000,
             alpha: float = 0.05, seed: int = 42) -> CI:
    """``sum(num) / sum(den)`` over episodes, resampling episodes (ratio of aggregates)."""
    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    if num.shape != den.shape:
        raise ValueError(f"numerators and denominators differ in length: {num.size} vs {den.size}")
    if den.sum() <= 0:
        return CI(float("nan"), float("nan"), float("nan"))
    idx = _indices(num.size, n_boot, seed)
    bden = den[idx].sum(axis=1)
    boots = np.where(bden > 0, num[idx].sum(axis=1) / np.where(bden > 0, bden, 1), np.nan)
    lo, hi = np.nanquantile(boots, [alpha / 2, 1 - alpha / 2])
    return CI(float(num.sum() / den.sum()), float(lo), float(hi))
