"""Stored Engagement Process experiments (eval/engagement/experiments.py): the size knobs and
the settings each environment accepts, legacy rows' experiment, one run's rows and score cells,
the leaderboard ranked within an experiment and the timeline chosen to draw. Experiment ids and
score recomputation are also tested through the assets (tests/assets/test_engagement_assets.py)."""

from types import SimpleNamespace

import pytest

from eval.engagement import assistant as A
from eval.engagement.experiments import (
    assistant_overrides,
    by_experiment,
    check_kitchen_settings,
    check_policy,
    episode_rows,
    experiment_of,
    experiments_in,
    first_timeline,
    leaderboard_rows,
    score_cells,
    timeline_rows,
)
from eval.engagement.texts import MAIN_TASKS


def _settings(**kw):
    base = {"policy": "scripted", "setting": "", "n_seeds": 20, "episodes_per_seed": 5,
            "cases_per_cell": 5, "main_tokens": 300, "main_tasks": 0, "horizon_units": None,
            "arrival_rate": None, "seed": 42}
    return SimpleNamespace(**{**base, **kw})


def test_size_knobs_belong_to_the_assistant():
    assert assistant_overrides(_settings(), "assistant") == {}
    assert assistant_overrides(_settings(), "kitchen") == {}
    assert assistant_overrides(_settings(main_tasks=1), "assistant") == {
        "main_tasks": MAIN_TASKS[:1]}
    out = assistant_overrides(_settings(horizon_units=6.0, n_seeds=2), "assistant")
    assert out["config"] == A.AssistantConfig(setting=A.MILESTONES, seed=42, n_seeds=2,
                                              episodes_per_seed=5, horizon_units=6.0)
    with pytest.raises(ValueError, match="assistant settings; unset them for kitchen"):
        assistant_overrides(_settings(arrival_rate=0.5), "kitchen")
    with pytest.raises(ValueError, match=f"main_tasks must be 0 .all. to {len(MAIN_TASKS)}"):
        assistant_overrides(_settings(main_tasks=len(MAIN_TASKS) + 1), "assistant")


def test_policies_and_kitchen_settings_that_can_run():
    check_policy("scripted")
    check_policy("llm")
    with pytest.raises(ValueError, match="policy must be 'scripted' or 'llm', got 'gpt'"):
        check_policy("gpt")
    check_kitchen_settings(["multi", "one"])
    for bad in ([], ["one", "one"], ["two"]):
        with pytest.raises(ValueError, match="distinct Table 4 settings"):
            check_kitchen_settings(bad)


def test_rows_written_before_experiments_get_a_legacy_experiment():
    assert experiment_of({"experiment": "one-scripted-c5-seed42-abcd1234"}) == (
        "one-scripted-c5-seed42-abcd1234")
    assert experiment_of({"experiment": None, "config_hash": "0123456789"}) == "legacy-01234567"
    assert experiment_of({}) == "legacy-unknown"


def test_one_runs_rows_and_score_cells():
    comp = SimpleNamespace(
        setting="one", policy="scripted", episodes=[{"episode": 0}, {"episode": 1}],
        timelines={"ep": [[{"tick": 0}, {"tick": 1}], [{"tick": 0}], [{"tick": 5}]]},
        scores=[{"metric": "utility", "value": 1.0, "low": 0.5, "high": 1.5},
                {"metric": "fired", "value": 2.0, "low": 2.0, "high": 2.0}])
    assert episode_rows(comp, "x") == [{"episode": 0, "experiment": "x"},
                                       {"episode": 1, "experiment": "x"}]
    rows = timeline_rows(comp, "ep", "kitchen", "x", 2)  # the first two episodes only
    assert [r["tick"] for r in rows] == [0, 1, 0]
    assert rows[0] == {"tick": 0, "environment": "kitchen", "setting": "one",
                       "policy": "scripted", "experiment": "x"}
    assert score_cells(comp.scores) == [
        {"metric": "utility", "value": 1.0, "ci_low": 0.5, "ci_high": 1.5},
        {"metric": "fired", "value": 2.0, "ci_low": 2.0, "ci_high": 2.0}]


def test_the_leaderboard_ranks_within_each_experiment():
    scores = [{"environment": "kitchen", "experiment": e, "metric": m, "method": meth,
               "value": v, "setting": "one"}
              for e, m, meth, v in (("b", "utility", "ep", 1.0), ("a", "utility", "poll", 0.2),
                                    ("a", "utility", "ep", 0.9), ("a", "fired", "ep", 9.0))]
    ranked = [(s["experiment"], s["method"]) for s in leaderboard_rows(scores)]
    assert ranked == [("a", "ep"), ("a", "poll"), ("b", "ep")]
    assert experiments_in(scores) == 2
    assert {s["setting"] for s in by_experiment(scores)} == {"a", "b"}


def test_the_timeline_drawn_is_one_episode_ep_first():
    rows = [{"method": "poll", "partition": "k.poll", "episode": 0, "tick": 0},
            {"method": "ep", "partition": "k.ep", "episode": 1, "tick": 0},
            {"method": "ep", "partition": "k.ep", "episode": 1, "tick": 3},
            {"method": "ep", "partition": "k.ep", "episode": 2, "tick": 0}]
    one, title = first_timeline(rows)
    assert [r["tick"] for r in one] == [0, 3] and title == "k.ep episode 1"
    assert first_timeline(rows[:1])[1] == "k.poll episode 0"  # no EP rows: any method
    assert first_timeline([]) is None
