"""Engagement Process assets (the paper's §5.2, App. D-E): LLM-workflow comparisons.

- ``ep_episodes`` (group ``evaluate``), partitioned by ``<environment>.<method>``: every episode
  of one interface in the digital-assistant (§5.2.1) or embodied-scheduling (§5.2.2)
  environment, one row each in ``ep_episodes``, and the event timelines of the first
  ``timeline_episodes`` episodes in ``ep_timelines`` (tick, kind, name, payload). With
  ``policy: scripted`` (default; fast, no model) the scripted policies decide; with
  ``policy: llm`` the ``llm`` resource (the embedded model unless configured) writes the main-task
  outputs and makes every triage / controller decision, cached, its calls in ``llm_calls``.
  Every partition of one configuration uses the same seeds, so methods share episodes, email
  streams and main-task outputs (generated once per model and cached). For small runs the
  assistant takes ``main_tasks`` (the first N built-in tasks), ``horizon_units`` and
  ``arrival_rate`` (None: the Table 17 values).
- ``ep_scores`` (group ``report``): the Table 3 / 18 and 20 / 22 cells (mean and bootstrap 95%
  interval per metric) for every (environment, setting, policy, method) in ``ep_episodes``, in
  table ``ep_scores`` and view ``ep_leaderboard`` (``warehouse/views/ep_leaderboard.sql``),
  with plots of utility and timeout / critical-failure rate per method and a timeline picture
  of one episode in the metadata.

Not guaranteed: the paper's numbers (our configurations, see ``eval.engagement``).
"""


import base64
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import lineage, md_table, now, run_record
from assets.resources import LLMResource, WarehouseResource
from warehouse.runs import record_run

EP_PARTITIONS = ["assistant.agentloop", "assistant.poll", "assistant.ep", "kitchen.agentloop",
                 "kitchen.poll", "kitchen.reflexpatch", "kitchen.ep"]
ep_partitions = dg.StaticPartitionsDefinition(EP_PARTITIONS)


class EpEpisodesConfig(dg.Config):
    policy: str = "scripted"  # scripted | llm
    setting: str = ""  # assistant: single|milestones (default milestones); kitchen: one|multi
    n_seeds: int = 20  # assistant
    episodes_per_seed: int = 5  # assistant
    cases_per_cell: int = 5  # kitchen
    main_tokens: int = 300  # assistant, LLM main-task tokens per milestone
    main_tasks: int = 0  # assistant: the first N built-in main tasks; 0 = all
    horizon_units: float | None = None  # assistant: episode horizon; None = Table 17's
    arrival_rate: float | None = None  # assistant: email arrival rate; None = Table 17's
    timeline_episodes: int = 2
    seed: int = 42


def assistant_overrides(config: EpEpisodesConfig, environment: str) -> dict[str, Any]:
    """``run_comparison`` keyword arguments for the assistant's size knobs (small runs: fewer
    main tasks, a shorter horizon, fewer emails); a dg.Failure for knobs the environment lacks."""
    from eval.engagement import assistant as A
    from eval.engagement.texts import MAIN_TASKS

    knobs = {"horizon_units": config.horizon_units, "arrival_rate": config.arrival_rate}
    changed = {k: v for k, v in knobs.items() if v is not None}
    if environment != "assistant":
        if changed or config.main_tasks:
            raise dg.Failure(f"main_tasks, horizon_units and arrival_rate are assistant settings; "
                             f"unset them for {environment}")
        return {}
    if not 0 <= config.main_tasks <= len(MAIN_TASKS):
        raise dg.Failure(f"main_tasks must be 0 (all) to {len(MAIN_TASKS)}, got "
                         f"{config.main_tasks}")
    out: dict[str, Any] = {}
    if config.main_tasks:
        out["main_tasks"] = MAIN_TASKS[: config.main_tasks]
    if changed:
        try:
            out["config"] = A.AssistantConfig(
                setting=config.setting or A.MILESTONES, seed=config.seed, n_seeds=config.n_seeds,
                episodes_per_seed=config.episodes_per_seed, **changed)
        except ValueError as exc:
            raise dg.Failure(f"bad assistant settings: {exc}") from exc
    return out


def _image_md(path: Path) -> str:
    return f"![{path.stem}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"


@dg.asset(
    group_name="evaluate",
    partitions_def=ep_partitions,
    kinds={"python"},
    description="Engagement Process episodes of one environment x interface (§5.2): one row per "
                "episode, plus event timelines of the first episodes.",
)
def ep_episodes(context: dg.AssetExecutionContext, config: EpEpisodesConfig,
                llm: LLMResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from eval.engagement.llm_runs import run_comparison

    environment, method = context.partition_key.split(".")
    if config.policy not in ("scripted", "llm"):
        raise dg.Failure(f"policy must be 'scripted' or 'llm', got {config.policy!r}")
    started = now()
    sizes = assistant_overrides(config, environment)
    wh = warehouse.get()
    with run_record(context, wh, config.model_dump(), started_at=started) as rec:
        client = (rec.track(llm.client(max_tokens=max(config.main_tokens, 64)))
                  if config.policy == "llm" else None)
        try:
            comp = run_comparison(environment, [method], setting=config.setting or None,
                                  client=client, n_seeds=config.n_seeds,
                                  episodes_per_seed=config.episodes_per_seed,
                                  cases_per_cell=config.cases_per_cell,
                                  main_tokens=config.main_tokens, seed=config.seed, log=True,
                                  **sizes)
        except ValueError as exc:
            raise dg.Failure(description=str(exc)) from exc
        rec.write("ep_episodes", comp.episodes)  # after the run's llm_calls
        timeline = [dict(row, environment=environment, setting=comp.setting, policy=comp.policy)
                    for episode in comp.timelines[method][: config.timeline_episodes]
                    for row in episode]
        rec.write("ep_timelines", timeline, counted=False)
    cells = {s["metric"]: s for s in comp.scores}
    return dg.MaterializeResult(metadata={
        "episodes": len(comp.episodes), "setting": comp.setting, "policy": comp.policy,
        "llm_calls": comp.llm["calls"], "llm_unusable_replies": comp.llm["failures"],
        "timeline_rows": len(timeline),
        "scores": md_table([{"metric": k, "value": v["value"], "ci_low": v["low"],
                             "ci_high": v["high"]} for k, v in cells.items()],
                           ["metric", "value", "ci_low", "ci_high"]),
    })


def score_rows(episodes: list[dict[str, Any]], seed: int = 42) -> list[dict[str, Any]]:
    """Recompute the CIs from stored episode rows, per (environment, setting, policy, method)."""
    from eval.engagement.assistant import AssistantResult
    from eval.engagement.kitchen import KitchenResult

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in episodes:
        key = (row["environment"], row["setting"], row["policy"], row["method"])
        groups.setdefault(key, []).append(row)
    out = []
    for (env, setting, policy, method), rows in sorted(groups.items()):
        result = (AssistantResult if env == "assistant" else KitchenResult)(method, rows)
        for metric, ci in result.summary(seed=seed).items():
            out.append({"environment": env, "setting": setting, "policy": policy,
                        "method": method, "metric": metric, "value": ci.value, "low": ci.low,
                        "high": ci.high, "episodes": len(rows)})
    return out


@dg.asset(
    group_name="report",
    deps=[ep_episodes],
    kinds={"duckdb"},
    description="Engagement Process scores with bootstrap CIs per environment x method (Tables "
                "3, 18, 20, 22 layout), plots of utility and timeout rate, one episode timeline.",
)
def ep_scores(context: dg.AssetExecutionContext,
              warehouse: WarehouseResource) -> dg.MaterializeResult:
    from eval.engagement.plots import plot_scores, plot_timeline
    from pipelines.settings import weft_home

    wh = warehouse.get()
    if "ep_episodes" not in wh.tables():
        raise dg.Failure("no ep_episodes rows yet: materialize ep_episodes partitions first")
    started = now()
    episodes = wh.read("ep_episodes").to_pylist()
    scores = score_rows(episodes)
    lin = lineage(context, {})
    wh.write("ep_scores", scores, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(scores))
    folder = weft_home() / "reports" / "ep_scores"
    meta: dict[str, Any] = {"rows": len(scores), "episodes": len(episodes)}
    meta["plot"] = dg.MetadataValue.md(_image_md(plot_scores(scores, folder / "scores.png")))
    meta["leaderboard"] = md_table(
        sorted((s for s in scores if s["metric"] == "utility"),
               key=lambda s: (s["environment"], s["setting"], -s["value"])),
        ["environment", "setting", "policy", "method", "value", "low", "high", "episodes"])
    if "ep_timelines" in wh.tables():
        rows = wh.read("ep_timelines").to_pylist()
        ep_rows = [r for r in rows if r["method"] == "ep"] or rows
        if ep_rows:
            first = ep_rows[0]
            one = [r for r in ep_rows if r["partition"] == first["partition"]
                   and r["episode"] == first["episode"]]
            title = f"{first['partition']} episode {first['episode']}"
            meta["timeline"] = dg.MetadataValue.md(
                _image_md(plot_timeline(one, folder / "timeline.png", title)))
    return dg.MaterializeResult(metadata=meta)


EP_ASSETS = [ep_episodes, ep_scores]
