"""Stored Engagement Process experiments (the paper's §5.2, App. D-E): how a configuration of
the LLM-workflow comparisons is named, which settings define its episodes, and the scores
recomputed from stored episode rows, never pooling two experiments.

- :func:`experiment_settings` / :func:`experiment_id`: every setting that defines the
  episodes of one environment, and the readable id
  ``<setting>-<scripted|llm>-<size>-seed<seed>-<hash8>`` whose hash covers them, so equal ids
  mean equal episodes; :func:`experiment_of` reads a stored row's experiment (rows written
  before experiments were stored are ``legacy-<config hash>``).
- :func:`assistant_overrides`: ``run_comparison`` arguments for the assistant's size knobs.
- :func:`episode_rows`, :func:`timeline_rows`, :func:`score_cells`: the rows of one run.
- :func:`score_rows`, :func:`leaderboard_rows`, :func:`first_timeline`: Tables 3 / 18 and
  20 / 22 cells (mean and bootstrap 95% interval per metric) per (environment, experiment,
  setting, policy, method), ranked within an experiment, and one episode's timeline to draw.
- :func:`check_kitchen_settings`: Table 4's settings a claim may run.

Settings that cannot run raise ValueError saying which. Not guaranteed: the paper's numbers
(our configurations, see ``eval.engagement``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from eval.engagement import assistant as A
from eval.engagement.assistant import AssistantResult
from eval.engagement.kitchen import KitchenResult
from eval.engagement.texts import MAIN_TASKS
from warehouse import config_hash

POLICIES = ("scripted", "llm")
LEGACY = "legacy"
DEFAULT_SETTING = {"assistant": "milestones", "kitchen": "one"}  # as eval.engagement.llm_runs
KITCHEN_SETTINGS = ("one", "multi")  # Table 4: one dish, several dishes
SCORE_COLUMNS = ["metric", "value", "ci_low", "ci_high"]
LEADERBOARD_COLUMNS = ["environment", "experiment", "policy", "method", "value", "low", "high",
                       "episodes"]


class EpisodeSettings(Protocol):
    """The settings of one ``ep_episodes`` configuration: the ``policy`` (scripted or llm),
    the environment's ``setting`` ("" for its default), the assistant's ``n_seeds`` x
    ``episodes_per_seed`` episodes, ``main_tokens`` per milestone, the first ``main_tasks``
    main tasks (0: all), ``horizon_units`` and ``arrival_rate`` (None: Table 17's), the
    kitchen's ``cases_per_cell``, and the ``seed``."""

    policy: str
    setting: str
    n_seeds: int
    episodes_per_seed: int
    cases_per_cell: int
    main_tokens: int
    main_tasks: int
    horizon_units: float | None
    arrival_rate: float | None
    seed: int


def check_policy(policy: str) -> None:
    """ValueError unless ``policy`` is one of :data:`POLICIES`."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be 'scripted' or 'llm', got {policy!r}")


def assistant_overrides(settings: EpisodeSettings, environment: str) -> dict[str, Any]:
    """``run_comparison`` keyword arguments for the assistant's size knobs (small runs: fewer
    main tasks, a shorter horizon, fewer emails); ValueError for knobs the environment lacks."""
    knobs = {"horizon_units": settings.horizon_units, "arrival_rate": settings.arrival_rate}
    changed = {k: v for k, v in knobs.items() if v is not None}
    if environment != "assistant":
        if changed or settings.main_tasks:
            raise ValueError(f"main_tasks, horizon_units and arrival_rate are assistant "
                             f"settings; unset them for {environment}")
        return {}
    if not 0 <= settings.main_tasks <= len(MAIN_TASKS):
        raise ValueError(f"main_tasks must be 0 (all) to {len(MAIN_TASKS)}, got "
                         f"{settings.main_tasks}")
    out: dict[str, Any] = {}
    if settings.main_tasks:
        out["main_tasks"] = MAIN_TASKS[: settings.main_tasks]
    if changed:
        try:
            out["config"] = A.AssistantConfig(
                setting=settings.setting or A.MILESTONES, seed=settings.seed,
                n_seeds=settings.n_seeds, episodes_per_seed=settings.episodes_per_seed,
                **changed)
        except ValueError as exc:
            raise ValueError(f"bad assistant settings: {exc}") from exc
    return out


def experiment_settings(settings: EpisodeSettings, environment: str,
                        policy: str) -> dict[str, Any]:
    """Every setting that defines the episodes of ``environment`` (the other environment's
    knobs and the timeline count are left out: they change nothing in the episode rows).
    ``policy`` is ``scripted`` or the model id."""
    shared = {"environment": environment, "policy": policy, "setting": settings.setting,
              "seed": settings.seed}
    if environment == "kitchen":
        return shared | {"cases_per_cell": settings.cases_per_cell}
    out = shared | {"n_seeds": settings.n_seeds, "episodes_per_seed": settings.episodes_per_seed,
                    "main_tasks": settings.main_tasks, "horizon_units": settings.horizon_units,
                    "arrival_rate": settings.arrival_rate}
    if policy != "scripted":
        out["main_tokens"] = settings.main_tokens
    return out


def experiment_id(settings: EpisodeSettings, environment: str, policy: str,
                  setting: str) -> str:
    """Readable id of one experiment: ``<setting>-<scripted|llm>-<size>-seed<seed>-<hash8>``
    (size ``<seeds>x<episodes>`` for the assistant, ``c<cases per cell>`` for the kitchen);
    the hash covers :func:`experiment_settings`, so equal ids mean equal episodes."""
    size = (f"c{settings.cases_per_cell}" if environment == "kitchen"
            else f"{settings.n_seeds}x{settings.episodes_per_seed}")
    kind = "scripted" if policy == "scripted" else "llm"
    digest = config_hash(experiment_settings(settings, environment, policy))[:8]
    return f"{setting}-{kind}-{size}-seed{settings.seed}-{digest}"


def experiment_of(row: Mapping[str, Any]) -> str:
    """A stored row's experiment; rows from before experiments were stored get
    ``legacy-<config hash>`` (all methods of one old configuration share it)."""
    if row.get("experiment"):
        return str(row["experiment"])
    return f"{LEGACY}-{str(row.get('config_hash') or 'unknown')[:8]}"


def episode_rows(comp: Any, experiment: str) -> list[dict[str, Any]]:
    """A comparison's episode rows, each with its experiment."""
    return [dict(row, experiment=experiment) for row in comp.episodes]


def timeline_rows(comp: Any, method: str, environment: str, experiment: str,
                  episodes: int) -> list[dict[str, Any]]:
    """The event rows of ``method``'s first ``episodes`` episodes, each with the environment,
    setting, policy and experiment."""
    return [dict(row, environment=environment, setting=comp.setting, policy=comp.policy,
                 experiment=experiment)
            for episode in comp.timelines[method][:episodes] for row in episode]


def score_cells(scores: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per metric (:data:`SCORE_COLUMNS`: value and CI) of one method's scores."""
    cells = {s["metric"]: s for s in scores}
    return [{"metric": k, "value": v["value"], "ci_low": v["low"], "ci_high": v["high"]}
            for k, v in cells.items()]


def score_rows(episodes: list[dict[str, Any]], seed: int = 42) -> list[dict[str, Any]]:
    """Recompute the CIs from stored episode rows, per (environment, experiment, setting,
    policy, method); rows of different experiments (:func:`experiment_of`) are never pooled.

    Raises ValueError when one experiment's methods hold different episode counts (a partial
    or mixed write: re-materialize that experiment's partitions)."""
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


def experiments_in(scores: Sequence[Mapping[str, Any]]) -> int:
    """How many (environment, experiment) pairs the scores cover."""
    return len({(s["environment"], s["experiment"]) for s in scores})


def by_experiment(scores: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The scores with the experiment as their ``setting`` (the score plot groups its bars by
    setting: one bar group per experiment)."""
    return [dict(s, setting=s["experiment"]) for s in scores]


def leaderboard_rows(scores: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The utility cells, ranked within each (environment, experiment), best first."""
    return sorted((s for s in scores if s["metric"] == "utility"),
                  key=lambda s: (s["environment"], s["experiment"], -s["value"]))


def first_timeline(rows: Sequence[Mapping[str, Any]]
                   ) -> tuple[list[Mapping[str, Any]], str] | None:
    """The events of one stored episode to draw (the first EP episode, else the first of any
    method) and its title; None without rows."""
    ep_rows = [r for r in rows if r["method"] == "ep"] or list(rows)
    if not ep_rows:
        return None
    first = ep_rows[0]
    one = [r for r in ep_rows if r["partition"] == first["partition"]
           and r["episode"] == first["episode"]]
    return one, f"{first['partition']} episode {first['episode']}"


def check_kitchen_settings(settings: Sequence[str]) -> None:
    """ValueError unless ``settings`` is a non-empty list of distinct Table 4 settings."""
    if (not settings or set(settings) - set(KITCHEN_SETTINGS)
            or len(set(settings)) != len(settings)):
        raise ValueError(f"settings must be a non-empty list of distinct Table 4 settings, one "
                         f"and/or multi; got {list(settings)}")
