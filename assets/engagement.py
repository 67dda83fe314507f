"""Engagement Process assets (the paper's §5.2, App. D-E): LLM-workflow comparisons.

- ``ep_episodes`` (group ``evaluate``), Dagster partitions ``<environment>.<method>``: every
  episode of one interface in the digital-assistant (§5.2.1) or embodied-scheduling (§5.2.2)
  environment, one row each in ``ep_episodes``, and the event timelines of the first
  ``timeline_episodes`` episodes in ``ep_timelines`` (tick, kind, name, payload). Rows are
  stored per experiment: warehouse partition ``<environment>.<method>|<experiment>`` and column
  ``experiment``, where the experiment id (:func:`experiment_id`, e.g.
  ``milestones-scripted-20x5-seed42-1a2b3c4d``) names the setting, the policy, the episode
  counts and the seed and ends with a hash of every setting that defines the episodes (the
  model for ``policy: llm``). Materializing a partition replaces only the rows of the same
  experiment; other settings, seeds or episode counts keep theirs. Rows written before
  experiments were stored (partition ``<environment>.<method>``, no ``experiment`` column) stay
  readable as experiment ``legacy-<config hash>`` (:func:`experiment_of`); one experiment per
  configuration they were run with. With
  ``policy: scripted`` (default; fast, no model) the scripted policies decide; with
  ``policy: llm`` the ``llm`` resource (the embedded model unless configured) writes the main-task
  outputs and makes every triage / controller decision, cached, its calls in ``llm_calls``.
  Every partition of one configuration uses the same seeds, so methods share episodes, email
  streams and main-task outputs (generated once per model and cached). For small runs the
  assistant takes ``main_tasks`` (the first N built-in tasks), ``horizon_units`` and
  ``arrival_rate`` (None: the Table 17 values).
- ``ep_scores`` (group ``report``): the Table 3 / 18 and 20 / 22 cells (mean and bootstrap 95%
  interval per metric) for every (environment, experiment, setting, policy, method) in
  ``ep_episodes``, in table ``ep_scores`` (column ``experiment``) and view ``ep_leaderboard``
  (``warehouse/views/ep_leaderboard.sql``), with plots of utility and timeout /
  critical-failure rate per method and experiment and a timeline picture of one episode in the
  metadata. Methods are compared only within one experiment: rows of different experiments
  are never pooled into one cell, and the metadata leaderboard ranks within an experiment.

Not guaranteed: the paper's numbers (our configurations, see ``eval.engagement``).
"""


import base64
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import lineage, md_table, now, run_record
from assets.resources import LLMResource, WarehouseResource
from warehouse import config_hash
from warehouse.partitions import partition_key
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


LEGACY = "legacy"
DEFAULT_SETTING = {"assistant": "milestones", "kitchen": "one"}  # as eval.engagement.llm_runs


def experiment_settings(config: EpEpisodesConfig, environment: str, policy: str) -> dict[str, Any]:
    """Every setting that defines the episodes of ``environment`` under ``config`` (the
    other environment's knobs and ``timeline_episodes`` are left out: they change nothing in
    the episode rows). ``policy`` is ``scripted`` or the model id."""
    shared = {"environment": environment, "policy": policy, "setting": config.setting,
              "seed": config.seed}
    if environment == "kitchen":
        return shared | {"cases_per_cell": config.cases_per_cell}
    out = shared | {"n_seeds": config.n_seeds, "episodes_per_seed": config.episodes_per_seed,
                    "main_tasks": config.main_tasks, "horizon_units": config.horizon_units,
                    "arrival_rate": config.arrival_rate}
    if policy != "scripted":
        out["main_tokens"] = config.main_tokens
    return out


def experiment_id(config: EpEpisodesConfig, environment: str, policy: str,
                  setting: str) -> str:
    """Readable id of one experiment: ``<setting>-<scripted|llm>-<size>-seed<seed>-<hash8>``
    (size ``<seeds>x<episodes>`` for the assistant, ``c<cases per cell>`` for the kitchen);
    the hash covers :func:`experiment_settings`, so equal ids mean equal episodes."""
    size = (f"c{config.cases_per_cell}" if environment == "kitchen"
            else f"{config.n_seeds}x{config.episodes_per_seed}")
    kind = "scripted" if policy == "scripted" else "llm"
    digest = config_hash(experiment_settings(config, environment, policy))[:8]
    return f"{setting}-{kind}-{size}-seed{config.seed}-{digest}"


def experiment_of(row: dict[str, Any]) -> str:
    """A stored row's experiment; rows from before experiments were stored get
    ``legacy-<config hash>`` (all methods of one old configuration share it)."""
    if row.get("experiment"):
        return str(row["experiment"])
    return f"{LEGACY}-{str(row.get('config_hash') or 'unknown')[:8]}"


def _image_md(path: Path) -> str:
    return f"![{path.stem}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"


@dg.asset(
    group_name="evaluate",
    partitions_def=ep_partitions,
    kinds={"python"},
    description="Engagement Process episodes of one environment x interface (§5.2): one row per "
                "episode, plus event timelines of the first episodes; stored per experiment "
                "(settings, policy, episode counts, seed), so other experiments keep their rows.",
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
    client = (llm.client(max_tokens=max(config.main_tokens, 64))
              if config.policy == "llm" else None)
    policy = "scripted" if client is None else str(client.model)
    setting = config.setting or DEFAULT_SETTING[environment]
    experiment = experiment_id(config, environment, policy, setting)
    partition = partition_key(context.partition_key, experiment)
    with run_record(context, wh, config.model_dump(), partition=partition,
                    started_at=started) as rec:
        if client is not None:
            rec.track(client)
        try:
            comp = run_comparison(environment, [method], setting=config.setting or None,
                                  client=client, n_seeds=config.n_seeds,
                                  episodes_per_seed=config.episodes_per_seed,
                                  cases_per_cell=config.cases_per_cell,
                                  main_tokens=config.main_tokens, seed=config.seed, log=True,
                                  **sizes)
        except ValueError as exc:
            raise dg.Failure(description=str(exc)) from exc
        rows = [dict(row, experiment=experiment) for row in comp.episodes]
        rec.write("ep_episodes", rows)  # after the run's llm_calls
        timeline = [dict(row, environment=environment, setting=comp.setting, policy=comp.policy,
                         experiment=experiment)
                    for episode in comp.timelines[method][: config.timeline_episodes]
                    for row in episode]
        rec.write("ep_timelines", timeline, counted=False)
    cells = {s["metric"]: s for s in comp.scores}
    return dg.MaterializeResult(metadata={
        "experiment": experiment, "warehouse_partition": partition,
        "episodes": len(comp.episodes), "setting": comp.setting, "policy": comp.policy,
        "llm_calls": comp.llm["calls"], "llm_unusable_replies": comp.llm["failures"],
        "timeline_rows": len(timeline),
        "scores": md_table([{"metric": k, "value": v["value"], "ci_low": v["low"],
                             "ci_high": v["high"]} for k, v in cells.items()],
                           ["metric", "value", "ci_low", "ci_high"]),
    })


def score_rows(episodes: list[dict[str, Any]], seed: int = 42) -> list[dict[str, Any]]:
    """Recompute the CIs from stored episode rows, per (environment, experiment, setting,
    policy, method); rows of different experiments (:func:`experiment_of`) are never pooled.

    Raises ValueError when one experiment's methods hold different episode counts (a partial
    or mixed write: re-materialize that experiment's partitions)."""
    from eval.engagement.assistant import AssistantResult
    from eval.engagement.kitchen import KitchenResult

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in episodes:
        key = (row["environment"], experiment_of(row), row["setting"], row["policy"],
               row["method"])
        groups.setdefault(key, []).append(row)
    sizes: dict[tuple, dict[str, int]] = {}
    for (env, experiment, _, _, method), rows in groups.items():
        sizes.setdefault((env, experiment), {})[method] = len(rows)
    for (env, experiment), counts in sorted(sizes.items()):
        if len(set(counts.values())) > 1:
            raise ValueError(f"{env} experiment {experiment}: methods hold different episode "
                             f"counts {counts}; re-materialize its ep_episodes partitions with "
                             "the same config")
    out = []
    for (env, experiment, setting, policy, method), rows in sorted(groups.items()):
        result = (AssistantResult if env == "assistant" else KitchenResult)(method, rows)
        for metric, ci in result.summary(seed=seed).items():
            out.append({"environment": env, "experiment": experiment, "setting": setting,
                        "policy": policy, "method": method, "metric": metric,
                        "value": ci.value, "low": ci.low, "high": ci.high,
                        "episodes": len(rows)})
    return out


@dg.asset(
    group_name="report",
    deps=[ep_episodes],
    kinds={"duckdb"},
    description="Engagement Process scores with bootstrap CIs per environment x experiment x "
                "method (Tables 3, 18, 20, 22 layout), plots of utility and timeout rate, one "
                "episode timeline.",
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
    try:
        scores = score_rows(episodes)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc
    lin = lineage(context, {})
    wh.write("ep_scores", scores, lineage=lin)
    record_run(wh, lin, started_at=started, rows_written=len(scores))
    folder = weft_home() / "reports" / "ep_scores"
    experiments = sorted({(s["environment"], s["experiment"]) for s in scores})
    meta: dict[str, Any] = {"rows": len(scores), "episodes": len(episodes),
                            "experiments": len(experiments)}
    # one bar group per experiment (the plot groups by its "setting" field)
    by_experiment = [dict(s, setting=s["experiment"]) for s in scores]
    meta["plot"] = dg.MetadataValue.md(_image_md(plot_scores(by_experiment,
                                                             folder / "scores.png")))
    meta["leaderboard"] = md_table(
        sorted((s for s in scores if s["metric"] == "utility"),
               key=lambda s: (s["environment"], s["experiment"], -s["value"])),
        ["environment", "experiment", "policy", "method", "value", "low", "high", "episodes"])
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
