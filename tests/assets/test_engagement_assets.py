"""`ep_episodes` / `ep_scores` (assets/engagement.py) with Dagster's `materialize`, the scripted
policies, a temp warehouse and the real DuckDB catalog (view `ep_leaderboard`)."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.engagement import EP_PARTITIONS, ep_episodes, ep_scores, score_rows
from assets.resources import LLMResource, WarehouseResource
from warehouse import Warehouse

SMALL = {"n_seeds": 3, "episodes_per_seed": 2, "cases_per_cell": 1, "timeline_episodes": 1}


def _materialize(asset, partition=None, config=None):
    run_config = {"ops": {"ep_episodes": {"config": config}}} if config is not None else None
    result = dg.materialize([asset], partition_key=partition, run_config=run_config,
                            resources={"llm": LLMResource(), "warehouse": WarehouseResource()})
    assert result.success
    return result


def test_episodes_scores_and_leaderboard(weft_home):
    for key in EP_PARTITIONS:
        _materialize(ep_episodes, key, dict(SMALL, setting="single" if key.startswith(
            "assistant") else "multi"))
    result = _materialize(ep_scores)
    meta = result.asset_materializations_for_node("ep_scores")[0].metadata
    assert "data:image/png;base64," in meta["plot"].value
    assert "data:image/png;base64," in meta["timeline"].value

    wh = Warehouse()
    episodes = wh.sql("SELECT environment, method, count(*) AS n FROM ep_episodes "
                      "GROUP BY ALL ORDER BY ALL").to_pylist()
    assert {(r["environment"], r["method"]) for r in episodes} == {
        tuple(k.split(".")) for k in EP_PARTITIONS}
    assert all(r["n"] == (6 if r["environment"] == "assistant" else 24) for r in episodes)
    board = wh.sql("SELECT environment, method, rank, utility, utility_low, utility_high, "
                   "timeout_rate, critical_success FROM ep_leaderboard").to_pylist()
    assistant = {r["method"]: r for r in board if r["environment"] == "assistant"}
    assert assistant["ep"]["rank"] == 1 and assistant["agentloop"]["rank"] == 3
    assert assistant["ep"]["timeout_rate"] < assistant["agentloop"]["timeout_rate"]
    kitchen = {r["method"]: r for r in board if r["environment"] == "kitchen"}
    assert kitchen["agentloop"]["rank"] == 4
    assert kitchen["ep"]["critical_success"] > kitchen["agentloop"]["critical_success"]
    for r in board:
        assert r["utility_low"] <= r["utility"] <= r["utility_high"]
    # the stored cells equal an independent recomputation from the stored episode rows
    stored = wh.sql("SELECT * FROM ep_scores WHERE metric = 'utility'").to_pylist()
    rows = wh.read("ep_episodes").to_pylist()
    for s in stored:
        values = [r["utility"] for r in rows if r["environment"] == s["environment"]
                  and r["method"] == s["method"]]
        assert s["value"] == pytest.approx(sum(values) / len(values))
    timeline = wh.sql("SELECT DISTINCT partition FROM ep_timelines").to_pylist()
    assert len(timeline) == len(EP_PARTITIONS)


def test_rematerializing_a_partition_replaces_its_rows(weft_home):
    _materialize(ep_episodes, "kitchen.ep", dict(SMALL, setting="one"))
    _materialize(ep_episodes, "kitchen.ep", dict(SMALL, setting="one"))
    n = Warehouse().sql("SELECT count(*) AS n FROM ep_episodes").to_pylist()[0]["n"]
    assert n == 16  # 4 dish families x 4 tutor families x 1 case, once


def test_bad_policy_fails_with_a_clear_message(weft_home):
    with pytest.raises(dg.Failure, match="policy must be"):
        dg.materialize([ep_episodes], partition_key="assistant.ep",
                       run_config={"ops": {"ep_episodes": {"config": {"policy": "gpt"}}}},
                       resources={"llm": LLMResource(), "warehouse": WarehouseResource()})


def test_score_rows_group_by_configuration():
    rows = [{"environment": "kitchen", "setting": "one", "policy": "scripted", "method": "ep",
             "utility": u, "dish_success": 1, "dishes": 1, "critical_success": 1,
             "criticals": 1, "soft_quality": 0, "softs": 0, "visibility_delay": 0,
             "finish_delay": 2, "fired": 1} for u in (1.0, 3.0)]
    cells = {s["metric"]: s for s in score_rows(rows)}
    assert cells["utility"]["value"] == 2.0 and cells["finish_delay"]["value"] == 2.0
