"""One comparison of the §5.2 experiments, scripted or with an LLM, as plain rows.

:func:`run_comparison` runs the chosen methods of one environment (``assistant`` or
``kitchen``) on the same episodes and returns a :class:`Comparison`: per-episode rows, event
timelines, score rows with bootstrap CIs (Tables 3/18 and 20/22 columns) and LLM accounting
(calls and unusable replies). With ``client=None`` the scripted policies run (no model); with a
client, the assistant's main-task outputs are generated once by that model and shared by all
methods, and every decision goes through the same model and cache (App. D, App. E: same
outputs, streams, model and scoring for every method).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eval.engagement import assistant as A
from eval.engagement import kitchen as K
from eval.engagement.texts import MAIN_TASKS, TaskSpec

ENVIRONMENTS = ("assistant", "kitchen")
SCORE_COLUMNS = {
    "assistant": ("utility", "balanced", "timeout", "latency", "main"),
    "kitchen": ("utility", "dish", "critical", "soft_quality", "visibility_delay",
                "finish_delay"),
}


@dataclass
class Comparison:
    environment: str
    setting: str
    policy: str  # "scripted" or the model id
    episodes: list[dict[str, Any]] = field(default_factory=list)
    timelines: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)
    scores: list[dict[str, Any]] = field(default_factory=list)
    llm: dict[str, int] = field(default_factory=lambda: {"calls": 0, "failures": 0})


def methods_for(environment: str) -> tuple[str, ...]:
    if environment == "assistant":
        return A.METHODS
    if environment == "kitchen":
        return K.METHODS
    raise ValueError(f"environment must be one of {ENVIRONMENTS}, got {environment!r}")


def run_comparison(environment: str, methods: Sequence[str] | None = None, *,
                   setting: str | None = None, client: Any = None, n_seeds: int | None = None,
                   episodes_per_seed: int | None = None, cases_per_cell: int | None = None,
                   main_tokens: int = 300, log: bool = True, seed: int = 42,
                   config: A.AssistantConfig | K.KitchenConfig | None = None,
                   main_tasks: tuple[TaskSpec, ...] = MAIN_TASKS,
                   more_clients: Sequence[Any] = ()) -> Comparison:
    """Run ``methods`` (default: all of the environment's) and score them (see module doc).
    ``main_tasks`` are the assistant's main tasks (the built-in four by default).
    ``more_clients`` (kitchen, with ``client``): further clients of the same server, so that
    kitchen cases run concurrently, one LLM controller per client (same results, in case
    order; see ``kitchen.run_method``)."""
    allowed = methods_for(environment)
    methods = tuple(methods or allowed)
    bad = [m for m in methods if m not in allowed]
    if bad:
        raise ValueError(f"unknown method(s) {bad} for {environment}; choose from {allowed}")
    policy = "scripted" if client is None else str(client.model)
    if environment == "assistant":
        cfg = config if isinstance(config, A.AssistantConfig) else A.AssistantConfig(
            setting=setting or A.MILESTONES, seed=seed,
            n_seeds=n_seeds or A.AssistantConfig.n_seeds,
            episodes_per_seed=episodes_per_seed or A.AssistantConfig.episodes_per_seed)
        comp = Comparison(environment, cfg.setting, policy)
        if client is None:
            outputs, triage = A.scripted_outputs(cfg, main_tasks), A.scripted_triage
        else:
            from eval.engagement.llm_policies import LLMTriage, generate_main_outputs

            outputs, failed = generate_main_outputs(client, main_tokens, main_tasks, seed=seed)
            comp.llm["calls"] += sum(len(o.units) for o in outputs)
            comp.llm["failures"] += failed
            triage = LLMTriage(client)
        results: dict[str, Any] = {m: A.run_method(cfg, outputs, m, triage, log) for m in methods}
        if client is not None:
            comp.llm["calls"] += triage.calls
            comp.llm["failures"] += triage.failures
    else:
        cfg = config if isinstance(config, K.KitchenConfig) else K.KitchenConfig(
            setting=setting or K.ONE, seed=seed,
            cases_per_cell=cases_per_cell or K.KitchenConfig.cases_per_cell)
        comp = Comparison(environment, cfg.setting, policy)
        cases = K.make_cases(cfg)
        results = {}
        if more_clients and client is None:
            raise ValueError("more_clients needs client: they add LLM controllers to it")
        for m in methods:
            controllers: list[Any] = [K.scripted_policy]
            if client is not None:
                from eval.engagement.llm_policies import LLMController

                controllers = [LLMController(c, m) for c in (client, *more_clients)]
            results[m] = K.run_method(cfg, m, controllers[0], cases, log,
                                      more_policies=controllers[1:])
            if client is not None:
                comp.llm["calls"] += sum(c.calls for c in controllers)
                comp.llm["failures"] += sum(c.failures for c in controllers)
    for m, res in results.items():
        comp.episodes.extend({"environment": environment, "policy": policy, **row}
                             for row in res.rows)
        comp.timelines[m] = res.timelines
        for metric, ci in res.summary(seed=seed).items():
            comp.scores.append({"environment": environment, "setting": cfg.setting,
                                "policy": policy, "method": m, "metric": metric,
                                "value": ci.value, "low": ci.low, "high": ci.high,
                                "episodes": len(res.rows)})
    return comp


def score_table(comp: Comparison) -> list[dict[str, Any]]:
    """One row per method, cells ``"mean ± half-width"``, for printing."""
    rows: dict[str, dict[str, Any]] = {}
    for s in comp.scores:
        row = rows.setdefault(s["method"], {"method": s["method"], "episodes": s["episodes"]})
        half = (s["high"] - s["low"]) / 2
        row[s["metric"]] = f"{s['value']:.3f} ± {half:.3f}"
    return list(rows.values())
