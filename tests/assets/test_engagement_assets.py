"""`ep_episodes` / `ep_scores` (assets/engagement.py) with Dagster's `materialize`, the scripted
policies, a temp warehouse and the real DuckDB catalog (view `ep_leaderboard`)."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.engagement import EP_PARTITIONS, EpEpisodesConfig, ep_episodes, ep_scores
from assets.resources import LLMResource, WarehouseResource
from eval.engagement.experiments import DEFAULT_SETTING, experiment_id, score_rows
from warehouse import Lineage, Warehouse

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


def test_assistant_size_knobs_shrink_a_run(weft_home):
    config = dict(SMALL, setting="single", n_seeds=1, episodes_per_seed=2, main_tasks=1,
                  horizon_units=6.0, arrival_rate=0.6)
    _materialize(ep_episodes, "assistant.ep", config)
    rows = Warehouse().read("ep_episodes").to_pylist()
    assert len(rows) == 2 and len({r["task_id"] for r in rows}) == 1
    # the horizon reaches the episodes: none runs past 6 units' worth of emails
    full = dict(SMALL, setting="single", n_seeds=1, episodes_per_seed=2, main_tasks=1)
    _materialize(ep_episodes, "assistant.ep", full)
    both = Warehouse().read("ep_episodes").to_pylist()
    longer = [r for r in both if r["experiment"] != rows[0]["experiment"]]
    assert len(both) == 4 and len(longer) == 2  # a different experiment: both kept
    assert sum(r["emails"] for r in rows) < sum(r["emails"] for r in longer)
    with pytest.raises(dg.Failure, match="assistant settings"):
        dg.materialize([ep_episodes], partition_key="kitchen.ep",
                       run_config={"ops": {"ep_episodes": {"config": {"main_tasks": 1}}}},
                       resources={"llm": LLMResource(), "warehouse": WarehouseResource()})


@pytest.mark.slow
@pytest.mark.server
def test_llm_policy_partition_on_the_real_server(weft_home, embedded_model_dir):
    """``policy: llm`` through the asset: the embedded model on the default local server
    (reused when running, else started here and stopped after), one short episode; most of the
    time on a busy CPU is the server's start."""
    from pipelines.models import EMBEDDED_SERVED_NAME
    from pipelines.serving import DEFAULT_PORT, LocalModelServer

    with LocalModelServer(model_path=embedded_model_dir, port=DEFAULT_PORT) as server:
        _llm_policy_partition(server.base_url, server.served_name, EMBEDDED_SERVED_NAME)


def _llm_policy_partition(base_url: str, served: str, expected_policy: str) -> None:
    resources = {"llm": LLMResource(base_url=base_url, model=served),
                 "warehouse": WarehouseResource()}
    config = {"policy": "llm", "setting": "single", "n_seeds": 1, "episodes_per_seed": 1,
              "main_tasks": 1, "main_tokens": 12, "horizon_units": 6.0, "arrival_rate": 0.6,
              "timeline_episodes": 1}
    run_config = {"ops": {"ep_episodes": {"config": config}}}
    first = dg.materialize([ep_episodes], partition_key="assistant.ep", run_config=run_config,
                           resources=resources)
    assert first.success
    meta = first.asset_materializations_for_node("ep_episodes")[0].metadata
    calls, unusable = meta["llm_calls"].value, meta["llm_unusable_replies"].value
    assert calls >= 3 and 0 <= unusable <= calls and meta["policy"].value == expected_policy
    wh = Warehouse()
    episode = wh.read("ep_episodes").to_pylist()
    assert len(episode) == 1 and episode[0]["policy"] == expected_policy
    assert episode[0]["main"] > 0 and episode[0]["emails"] >= 1
    # every decision and main-task unit is a recorded call of this run
    count = ("SELECT count(*) AS n, sum(CASE WHEN cached THEN 1 ELSE 0 END) AS hits "
             "FROM llm_calls WHERE asset = 'ep_episodes' AND run_id = ?")
    recorded = wh.sql(count, [first.run_id]).to_pylist()[0]
    assert recorded["n"] >= calls and recorded["hits"] == 0  # retried replies add records
    kinds = {r["kind"] for r in wh.read("ep_timelines").to_pylist()}
    assert len(kinds) >= 2
    again = dg.materialize([ep_episodes], partition_key="assistant.ep", run_config=run_config,
                           resources=resources)
    assert again.success
    assert wh.read("ep_episodes").to_pylist()[0]["utility"] == episode[0]["utility"]
    replay = wh.sql(count, [again.run_id]).to_pylist()[0]
    assert replay["n"] == recorded["n"] and replay["hits"] == replay["n"]  # all from the cache


def test_other_settings_keep_their_rows_and_are_scored_apart(weft_home):
    """Materializing one setting or episode count must not delete another's rows, and
    ep_scores must never pool two experiments into one cell."""
    one, multi = dict(SMALL, setting="one"), dict(SMALL, setting="multi")
    _materialize(ep_episodes, "kitchen.ep", one)
    _materialize(ep_episodes, "kitchen.ep", multi)
    _materialize(ep_episodes, "kitchen.agentloop", one)
    small, bigger = dict(SMALL, setting="single"), dict(SMALL, setting="single", n_seeds=4)
    _materialize(ep_episodes, "assistant.ep", small)
    _materialize(ep_episodes, "assistant.ep", bigger)
    wh = Warehouse()
    rows = wh.read("ep_episodes").to_pylist()
    counts = {}
    for r in rows:
        counts[(r["environment"], r["setting"], r["method"], r["experiment"])] = counts.get(
            (r["environment"], r["setting"], r["method"], r["experiment"]), 0) + 1
    # kitchen: one-dish = 16 families x 1 case, multi = 2 x 2 x 2 sizes x 3 cases x 1 = 24;
    # assistant: 3 x 2 and 4 x 2 episodes, two experiments of the same setting
    assert sorted(counts.values()) == [6, 8, 16, 16, 24]
    assert len({e for (_, _, _, e) in counts}) == 4
    # partition = the Dagster partition, then the experiment (assets.engagement)
    assert {p.split("|")[0] for p in wh.partitions("ep_episodes")} == {
        "kitchen.ep", "kitchen.agentloop", "assistant.ep"}

    _materialize(ep_scores)
    cells = wh.sql("SELECT * FROM ep_scores WHERE metric = 'utility'").to_pylist()
    assert len(cells) == 5  # one per (experiment, method), none pooled
    for cell in cells:  # each cell is the mean over exactly its experiment's rows
        mine = [r["utility"] for r in rows if r["experiment"] == cell["experiment"]
                and r["method"] == cell["method"]]
        assert cell["episodes"] == len(mine)
        assert cell["value"] == pytest.approx(sum(mine) / len(mine))
    assistant = [c for c in cells if c["environment"] == "assistant"]
    assert sorted(c["episodes"] for c in assistant) == [6, 8]


def test_experiment_ids_are_readable_and_change_with_every_defining_setting():
    base = EpEpisodesConfig(setting="single", n_seeds=20, episodes_per_seed=5, seed=42)
    ident = experiment_id(base, "assistant", "scripted", "single")
    assert ident.startswith("single-scripted-20x5-seed42-") and len(ident.split("-")[-1]) == 8
    changed = [base.model_copy(update={k: v}) for k, v in (
        ("n_seeds", 21), ("episodes_per_seed", 4), ("seed", 1), ("main_tasks", 1),
        ("horizon_units", 30.0), ("arrival_rate", 0.5))]
    ids = {experiment_id(c, "assistant", "scripted", "single") for c in changed}
    assert len(ids) == len(changed) and ident not in ids
    # the model is part of an LLM experiment; the timeline count is not part of any
    assert experiment_id(base, "assistant", "m1", "single") != experiment_id(
        base, "assistant", "m2", "single")
    assert experiment_id(base.model_copy(update={"timeline_episodes": 9}), "assistant",
                         "scripted", "single") == ident
    kitchen = experiment_id(EpEpisodesConfig(cases_per_cell=3), "kitchen", "scripted", "one")
    assert kitchen.startswith("one-scripted-c3-seed42-")
    assert kitchen != experiment_id(EpEpisodesConfig(cases_per_cell=4), "kitchen", "scripted",
                                    "one")


def test_default_settings_match_the_environments():
    from eval.engagement import assistant as A
    from eval.engagement import kitchen as K

    assert DEFAULT_SETTING == {"assistant": A.AssistantConfig().setting,
                               "kitchen": K.KitchenConfig().setting}


def _legacy_rows(utilities, method):
    return [{"environment": "kitchen", "setting": "one", "policy": "scripted", "method": method,
             "utility": u, "dish_success": 1, "dishes": 1, "critical_success": 1,
             "criticals": 1, "soft_quality": 0.0, "softs": 0, "visibility_delay": 0,
             "finish_delay": 2, "fired": 1} for u in utilities]


def test_rows_written_before_experiments_stay_readable_and_apart(weft_home):
    """Old rows (partition <environment>.<method>, no experiment column) are scored as their
    own legacy experiment, one per configuration hash, next to new experiments."""
    wh = Warehouse()
    for method in ("ep", "agentloop"):
        wh.write("ep_episodes", _legacy_rows([1.0, 3.0], method),
                 lineage=Lineage("old-run", "ep_episodes", f"kitchen.{method}", "abcdef0123456789"))
    _materialize(ep_episodes, "kitchen.ep", dict(SMALL, setting="one"))
    new_rows = [r for r in wh.read("ep_episodes").to_pylist() if r["experiment"]]
    assert len(new_rows) == 16
    assert len(wh.read("ep_episodes").to_pylist()) == 20  # the legacy rows are still there
    _materialize(ep_scores)
    cells = wh.sql("SELECT * FROM ep_scores WHERE metric = 'utility' "
                   "ORDER BY experiment, method").to_pylist()
    legacy = [c for c in cells if c["experiment"] == "legacy-abcdef01"]
    assert [(c["method"], c["value"], c["episodes"]) for c in legacy] == [
        ("agentloop", 2.0, 2), ("ep", 2.0, 2)]
    fresh = [c for c in cells if c["experiment"] == new_rows[0]["experiment"]]
    assert len(fresh) == 1 and fresh[0]["episodes"] == 16
    assert fresh[0]["value"] == pytest.approx(sum(r["utility"] for r in new_rows) / 16)


def test_score_rows_refuse_an_experiment_with_unequal_method_sizes():
    rows = [dict(r, experiment="x") for r in _legacy_rows([1.0, 2.0], "ep")]
    rows += [dict(r, experiment="x") for r in _legacy_rows([1.0], "agentloop")]
    with pytest.raises(ValueError, match=r"experiment x: methods hold different episode counts"):
        score_rows(rows)
    # the same sizes in different experiments are fine: they are never compared
    rows[-1]["experiment"] = "y"
    assert {s["experiment"] for s in score_rows(rows)} == {"x", "y"}
