"""Engagement Process assets (the paper's §5.2, App. D-E): LLM-workflow comparisons.

- ``ep_episodes`` (group ``evaluate``), Dagster partitions ``<environment>.<method>``: every
  episode of one interface in the digital-assistant (§5.2.1) or embodied-scheduling (§5.2.2)
  environment, one row each in ``ep_episodes``, and the event timelines of the first
  ``timeline_episodes`` episodes in ``ep_timelines`` (tick, kind, name, payload). Rows are
  stored per experiment: warehouse partition ``<environment>.<method>|<experiment>`` and column
  ``experiment``, where the experiment id (``eval.engagement.experiments.experiment_id``, e.g.
  ``milestones-scripted-20x5-seed42-1a2b3c4d``) names the setting, the policy, the episode
  counts and the seed and ends with a hash of every setting that defines the episodes (the
  model for ``policy: llm``). Materializing a partition replaces only the rows of the same
  experiment; other settings, seeds or episode counts keep theirs. Rows written before
  experiments were stored (partition ``<environment>.<method>``, no ``experiment`` column) stay
  readable as experiment ``legacy-<config hash>`` (``experiment_of``); one experiment per
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

The computation (experiment ids, score cells, the leaderboard) lives in
``eval.engagement.experiments``; this module wires it to the ``llm`` resource and the warehouse.

Not guaranteed: the paper's numbers (our configurations, see ``eval.engagement``).
"""


from typing import Any

import dagster as dg

from assets.common import lineage, md_table, now, run_record
from assets.resources import LLMResource, WarehouseResource
from eval.engagement.experiments import (
    DEFAULT_SETTING,
    LEADERBOARD_COLUMNS,
    SCORE_COLUMNS,
    assistant_overrides,
    by_experiment,
    check_policy,
    episode_rows,
    experiment_id,
    experiments_in,
    first_timeline,
    leaderboard_rows,
    score_cells,
    score_rows,
    timeline_rows,
)
from eval.report_plots import png_md
from warehouse.partitions import partition_key
from warehouse.runs import record_run

EP_PARTITIONS = ["assistant.agentloop", "assistant.poll", "assistant.ep", "kitchen.agentloop",
                 "kitchen.poll", "kitchen.reflexpatch", "kitchen.ep"]
ep_partitions = dg.StaticPartitionsDefinition(EP_PARTITIONS)


class EpEpisodesConfig(dg.Config):
    """An ``ep_episodes`` configuration (``eval.engagement.experiments.EpisodeSettings``).
    With ``policy: llm`` the decisions and main-task outputs are the policies' greedy replies
    (``eval.engagement.llm_policies``); ``main_tokens`` is the main task's length per
    milestone, a setting of the task rather than of sampling."""

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


def _comparison(environment: str, method: str, config: EpEpisodesConfig, client: Any,
                sizes: dict[str, Any]) -> Any:
    """``eval.engagement.llm_runs.run_comparison`` of one method, its errors as failures."""
    from eval.engagement.llm_runs import run_comparison

    try:
        return run_comparison(environment, [method], setting=config.setting or None,
                              client=client, n_seeds=config.n_seeds,
                              episodes_per_seed=config.episodes_per_seed,
                              cases_per_cell=config.cases_per_cell,
                              main_tokens=config.main_tokens, seed=config.seed, log=True,
                              **sizes)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc


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
    environment, method = context.partition_key.split(".")
    try:
        check_policy(config.policy)
        started = now()
        sizes = assistant_overrides(config, environment)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc
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
        comp = _comparison(environment, method, config, client, sizes)
        rec.write("ep_episodes", episode_rows(comp, experiment))  # after the run's llm_calls
        timeline = timeline_rows(comp, method, environment, experiment,
                                 config.timeline_episodes)
        rec.write("ep_timelines", timeline, counted=False)
    return dg.MaterializeResult(metadata={
        "experiment": experiment, "warehouse_partition": partition,
        "episodes": len(comp.episodes), "setting": comp.setting, "policy": comp.policy,
        "llm_calls": comp.llm["calls"], "llm_unusable_replies": comp.llm["failures"],
        "timeline_rows": len(timeline),
        "scores": md_table(score_cells(comp.scores), SCORE_COLUMNS),
    })


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
    meta: dict[str, Any] = {"rows": len(scores), "episodes": len(episodes),
                            "experiments": experiments_in(scores)}
    meta["plot"] = dg.MetadataValue.md(png_md(plot_scores(by_experiment(scores),
                                                          folder / "scores.png")))
    meta["leaderboard"] = md_table(leaderboard_rows(scores), LEADERBOARD_COLUMNS)
    shown = first_timeline(wh.read("ep_timelines").to_pylist()) \
        if "ep_timelines" in wh.tables() else None
    if shown is not None:
        one, title = shown
        meta["timeline"] = dg.MetadataValue.md(
            png_md(plot_timeline(one, folder / "timeline.png", title)))
    return dg.MaterializeResult(metadata=meta)


EP_ASSETS = [ep_episodes, ep_scores]
