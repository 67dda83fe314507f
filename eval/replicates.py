"""A claim across independent runs: one claim part pooled over runs that differ only in seed.

One run's CI resamples the units it evaluated (problems, steps, episodes); it does not cover
training the arms again. Runs of the same experiment, scale and design (the run config with the
seed left out) drawn with different seeds are replicates, and their per-run differences say how
far the seed moves a result. :func:`pool` combines per-run estimates with a random-effects
model; :func:`pooled_rows` applies it to every claim part in ``claim_history`` and returns rows of
the ``claims`` shape, judged by the same verdict rule (:func:`eval.claims.row_judgement`).

The estimator (for ``k >= 2`` runs with estimates ``y_i`` and standard errors ``s_i``):

- each run's standard error comes from its stored 95% CI: ``s_i = (high_i - low_i) / (2 z)``,
  ``z = 1.959964`` (the runs' intervals are percentile bootstrap intervals, so this is the
  normal approximation of their width);
- between-run variance by DerSimonian and Laird: with ``w_i = 1 / s_i^2``,
  ``Q = sum w_i (y_i - ybar_w)^2``, ``tau^2 = max(0, (Q - (k - 1)) / (sum w - sum w^2 / sum w))``;
- the pooled estimate ``mu = sum W_i y_i / sum W`` with ``W_i = 1 / (s_i^2 + tau^2)``;
- its variance by Hartung and Knapp, ``v = sum W_i (y_i - mu)^2 / ((k - 1) sum W)``, never
  below the random-effects variance ``1 / sum W`` (the "ad hoc" correction: with few runs that
  happen to agree, ``v`` alone can be narrower than any single run's interval);
- the 95% CI ``mu +- t_{k-1, 0.975} sqrt(v)`` (Student's t with ``k - 1`` degrees of freedom),
  and the one-sided p-value from the same t.

With two runs the t quantile is 12.7: two seeds rarely settle a claim, which is the point.
A run whose CI has zero width (every unit scored the same difference) is given the smallest
positive standard error among the runs; when every run's CI has zero width the runs are
weighted equally (``v = sd(y)^2 / k``).

Not guaranteed: the runs are taken as independent draws of the same experiment. Runs recorded
with the same seed are one draw (re-running a job in the same ``WEFT_HOME`` replays it), so only
the newest run of each seed is pooled; runs made with different code are not told apart.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eval.claims import is_plumbing, row_judgement, row_margin, shown_verdict

Z_975 = 1.959963984540054  # the standard normal's 0.975 quantile


@dataclass(frozen=True)
class Pooled:
    """The pooled estimate of ``k`` runs with its 95% CI, standard error and ``tau^2``."""

    value: float
    ci_low: float
    ci_high: float
    se: float
    k: int
    tau2: float


def se_from_ci(low: float, high: float) -> float:
    """The standard error a 95% CI ``[low, high]`` stands for (normal approximation)."""
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"CI [{low}, {high}] is not an interval of finite numbers")
    return (high - low) / (2.0 * Z_975)


def pool(estimates: Sequence[float], ses: Sequence[float]) -> Pooled:
    """Random-effects pooling of ``k >= 2`` estimates with their standard errors (DerSimonian
    and Laird's ``tau^2``, Hartung and Knapp's t interval; the module docstring has the
    formulas)."""
    from eval.compare import student_t_ppf

    y = [float(v) for v in estimates]
    s = [float(v) for v in ses]
    k = len(y)
    if k < 2 or len(s) != k:
        raise ValueError(f"pooling needs at least 2 runs with one standard error each, got "
                         f"{k} estimates and {len(s)} standard errors")
    if any(not math.isfinite(v) for v in y) or any(not math.isfinite(v) or v < 0 for v in s):
        raise ValueError("estimates must be finite and standard errors finite and >= 0")
    t = student_t_ppf(0.975, k - 1)
    positive = [v for v in s if v > 0]
    if not positive:  # every run exact: the runs themselves are the only spread
        mu = sum(y) / k
        var = sum((v - mu) ** 2 for v in y) / (k - 1) / k
        half = t * math.sqrt(var)
        return Pooled(mu, mu - half, mu + half, math.sqrt(var), k, 0.0)
    floor = min(positive)
    s = [max(v, floor) for v in s]
    w = [1.0 / v ** 2 for v in s]
    sw = sum(w)
    fixed = sum(wi * yi for wi, yi in zip(w, y)) / sw
    q = sum(wi * (yi - fixed) ** 2 for wi, yi in zip(w, y))
    tau2 = max(0.0, (q - (k - 1)) / (sw - sum(wi * wi for wi in w) / sw))
    big_w = [1.0 / (v ** 2 + tau2) for v in s]
    sbw = sum(big_w)
    mu = sum(wi * yi for wi, yi in zip(big_w, y)) / sbw
    hk = sum(wi * (yi - mu) ** 2 for wi, yi in zip(big_w, y)) / ((k - 1) * sbw)
    var = max(hk, 1.0 / sbw)
    half = t * math.sqrt(var)
    return Pooled(mu, mu - half, mu + half, math.sqrt(var), k, tau2)


def design_hash(settings: Mapping[str, Any]) -> str:
    """12 hex characters naming a run's design: the SHA-256 of its settings as sorted JSON
    (runs with the same design and different seeds are replicates)."""
    import hashlib

    text = json.dumps(dict(settings), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def as_seed(value: Any) -> int | None:
    """``value`` when it is an int seed (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_seed(row: Mapping[str, Any]) -> int | None:
    """The seed of the run a ``claims`` row comes from: its ``seed`` column, else the ``seed``
    of its recorded config (rows written before the column existed), else None."""
    seed = as_seed(row.get("seed"))
    if seed is not None:
        return seed
    try:
        config = json.loads(row.get("config_json") or "{}")
    except ValueError:
        return None
    return as_seed(config.get("seed")) if isinstance(config, dict) else None


def _p_value(claim_kind: str, higher_is_better: bool, margin: float | None, mu: float,
             se: float, k: int) -> float:
    """One-sided p-value in the claimed direction from Student's t with ``k - 1`` df (for
    ``no_worse``: against a drop of the margin), as :func:`eval.claims.judge` states it."""
    from eval.compare import student_t_sf

    shift = float(margin) if claim_kind == "no_worse" else 0.0
    turned = (mu if higher_is_better else -mu) + shift
    if se == 0.0:
        return 0.0 if turned > 0 else 1.0
    return student_t_sf(turned / se, k - 1)


def pooled_rows(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One pooled row per claim part that ``claim_history`` holds for at least two seeds of the
    same experiment, scale and design: the newest run of each seed, each arm's value and the
    difference pooled by :func:`pool`, the verdict and its reason by
    :func:`eval.claims.row_judgement`. A row carries the ``claims`` columns plus ``k`` (seeds
    pooled), ``seeds`` and ``run_ids``; role and bounds are the newest run's.

    ``n`` is the units of one run (the largest), not their sum over seeds: the seeds of one
    design evaluate the same held-out problems (or steps, episodes), so summing would count
    each problem once per seed as if it were a new one; the evidence across seeds is ``k``,
    which sets the t interval's degrees of freedom. ``n_discordant`` is likewise the most units
    that differ in any one run (null when a run did not count them): rules 2 and 4 of the
    verdict (:mod:`eval.claims`) then ask whether at least one run could tell the arms apart,
    never crediting k runs of 2 discordant units with 6.

    A run with an ``invalid_arm`` (the experiment found an arm unfit for the part: rule 0 of
    the verdict) is left out of the pool when at least two valid runs remain
    (``seeds_left_out`` names it); with fewer, the pooled part carries every left-out run's
    ``invalid_arm`` and is inconclusive for that reason."""
    parts: dict[tuple[Any, ...], dict[int, Mapping[str, Any]]] = {}
    for row in history:
        seed = run_seed(row)
        if seed is None:
            continue
        key = (row.get("experiment"), row.get("scale"), row.get("design"), row.get("section"),
               row.get("claim"), row.get("metric"))
        newest = parts.setdefault(key, {})
        if seed not in newest or _stamp(row) > _stamp(newest[seed]):
            newest[seed] = row
    out: list[dict[str, Any]] = []
    for by_seed in parts.values():
        if len(by_seed) < 2:
            continue
        seeds = sorted(by_seed)
        # a run whose experiment found an arm unfit for this part (``invalid_arm``) is no
        # evidence: pooled without it when two valid runs remain, else the part is invalid
        left_out = [s for s in seeds if by_seed[s].get("invalid_arm")]
        valid = [s for s in seeds if s not in left_out]
        if len(valid) >= 2:
            seeds = valid
        runs = [by_seed[s] for s in seeds]
        first = runs[-1]
        pooled: dict[str, Any] = {c: first.get(c) for c in (
            "experiment", "scale", "design", "paper", "section", "claim", "metric", "kind",
            "higher_is_better", "margin", "reference", "treatment", "paper_value", "role",
            "bound_low", "bound_high")}
        for prefix in ("reference", "treatment"):
            arm = pool([float(r[f"{prefix}_value"]) for r in runs],
                       [se_from_ci(float(r[f"{prefix}_ci_low"]), float(r[f"{prefix}_ci_high"]))
                        for r in runs])
            pooled.update({f"{prefix}_value": arm.value, f"{prefix}_ci_low": arm.ci_low,
                           f"{prefix}_ci_high": arm.ci_high})
        diff = pool([float(r["diff"]) for r in runs],
                    [se_from_ci(float(r["diff_ci_low"]), float(r["diff_ci_high"])) for r in runs])
        margin = row_margin(pooled)
        pooled.update({
            "diff": diff.value, "diff_ci_low": diff.ci_low, "diff_ci_high": diff.ci_high,
            "p_value": _p_value(str(pooled["kind"]), bool(pooled["higher_is_better"]), margin,
                                diff.value, diff.se, diff.k),
            "n": max(int(r["n"]) for r in runs),
            # units that differ in one run; unknown when a run did not count them
            "n_discordant": (None if any(r.get("n_discordant") is None for r in runs)
                             else max(int(r["n_discordant"]) for r in runs)),
            "k": diff.k, "tau2": diff.tau2,
            "seeds": ", ".join(str(s) for s in seeds),
            "run_ids": ", ".join(str(r.get("run_id")) for r in runs),
            "per_seed": [(s, float(r["diff"]), str(r["verdict"])) for s, r in zip(seeds, runs)],
            "seeds_left_out": ", ".join(str(s) for s in left_out if s not in seeds),
            "invalid_arm": ("; ".join(f"seed {s}: {by_seed[s]['invalid_arm']}" for s in left_out)
                            if len(valid) < 2 and left_out else None)})
        pooled["verdict"], pooled["inconclusive_reason"] = row_judgement(pooled)
        out.append(pooled)
    out.sort(key=lambda r: (str(r["paper"]), str(r["experiment"]), str(r["scale"]),
                            str(r["design"]), str(r["section"]), str(r["claim"]),
                            str(r["metric"])))
    return out


def _stamp(row: Mapping[str, Any]) -> tuple[str, str]:
    return (str(row.get("created_at")), str(row.get("run_id")))


def seeds_table(rows: Sequence[Mapping[str, Any]], digits: int = 3) -> str:
    """Markdown: one line per pooled claim part: its design (``not recorded`` for rows written
    before designs were), the seeds, each seed's difference and verdict,
    the pooled difference with its 95% CI (t with k - 1 df), the units summed and the pooled
    verdict (:func:`eval.claims.shown_verdict`: a setup check reads ``check passed`` / ``check
    failed``, an inconclusive part says why)."""
    header = ("| paper | where | metric | design | seeds (Δ, verdict each) | pooled Δ [95% CI] "
              "| n | verdict across seeds |")
    lines = [header, "|" + "---|" * 8]
    fmt = f"{{:+.{digits}f}}"
    for row in rows:
        each = "; ".join(f"{s}: {fmt.format(d)}" + ("" if is_plumbing(row) else f" {v}")
                         for s, d, v in row["per_seed"])
        pooled = (f"{fmt.format(row['diff'])} [{fmt.format(row['diff_ci_low'])}, "
                  f"{fmt.format(row['diff_ci_high'])}]")
        design = row.get("design") or "not recorded"
        cells = [row["paper"], row["section"], row["metric"], design, each, pooled, row["n"],
                 f"**{shown_verdict(row)}** (k = {row['k']})"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
