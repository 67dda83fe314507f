"""The `duet_budget_claim` page shows what DUET's gate did beside the verdict: per compared arm
the mean abort rate, marker rate, K1, K2, rollouts per prompt, share cut by the cap and spend
against the budget; the DUET arm's abort rate per step; and the same figures are read back with
SQL (the `duet_steps` view joined to `duet_sweep`). The CPU scale trains on the chains from
`chain_sft_checkpoint`, which its job materializes first."""

from __future__ import annotations

import dagster as dg
import numpy as np
import pytest

from assets.resources import GraderResource, LLMResource, WarehouseResource
from training.callbacks import metrics_row
from warehouse import Lineage, Warehouse

STEPS = range(1, 7)
ABORT = [0.0, 0.25, 0.5, 0.125, 0.375, 0.25]
MARKER = [0.5, 0.625, 0.375, 0.75, 0.5, 0.625]
K1 = [29, 29, 40, 40, 42, 42]
K2 = [67, 67, 61, 61, 63, 63]
SPENT = [800, 700, 650, 720, 690, 600]
BUDGET = [1000, 720, 700, 700, 700, 650]
GRPO_TOKENS = [1500, 1480, 1460, 1490, 1400, 1380]
GRPO_CLIPPED = [0.1, 0.05, 0.0, 0.05, 0.1, 0.0]


def _warehouse() -> Warehouse:
    wh = Warehouse()
    duet, grpo = [], []
    for i, step in enumerate(STEPS):
        duet.append(metrics_row({
            "duet/lambda": 0.1, "duet/abort_rate": ABORT[i], "duet/marker_rate": MARKER[i],
            "duet/k1": K1[i], "duet/k2": K2[i], "duet/abort_at": K2[i] + 8,
            "duet/n_q_mean": 3.0, "duet/cap_cut_rate": 0.0,
            "duet/tokens_generated": SPENT[i], "duet/token_budget": BUDGET[i],
            "duet/budget_used": SPENT[i] / BUDGET[i], "tokens_generated": SPENT[i] + 40},
            checkpoint_id="ck-duet", kind="grpo", step=step, epoch=None, step_seconds=5.0,
            steps=1))
        grpo.append(metrics_row({"tokens_generated": GRPO_TOKENS[i],
                                 "completions/clipped_ratio": GRPO_CLIPPED[i]},
                                checkpoint_id="ck-grpo", kind="grpo", step=step, epoch=None,
                                step_seconds=9.0, steps=1))
    wh.write("train_metrics", duet, partition="ck-duet")
    wh.write("train_metrics", grpo, partition="ck-grpo")
    wh.write("duet_sweep", [
        {"arm": "grpo", "method": "grpo", "budget_fraction": 1.0, "checkpoint_id": "ck-grpo",
         "benchmark": "gsm8k", "sweep": "s1", "seed": 0},
        {"arm": "duet-b0.5", "method": "duet", "budget_fraction": 0.5,
         "checkpoint_id": "ck-duet", "benchmark": "gsm8k", "sweep": "s1", "seed": 0}],
        partition="s1")
    rng = np.random.default_rng(1)
    for model in ("ck-grpo", "ck-duet"):
        rows = [{"model": model, "benchmark": "gsm8k", "problem_id": f"p{p}", "sample_index": 0,
                 "correct": bool(rng.integers(0, 2))} for p in range(20)]
        wh.write("eval_samples", rows, lineage=Lineage(run_id=f"r-{model}", asset="eval_samples",
                                                       partition=f"gsm8k@{model}"))
    return wh


def _records(meta, key):
    return [dict(r.data) for r in meta[key].value.records]


def test_the_claim_page_shows_each_arm_s_abort_and_budget_figures(weft_home):
    from assets.results.budget_results import duet_budget_claim

    _warehouse()
    result = dg.materialize(
        [duet_budget_claim],
        resources={"warehouse": WarehouseResource(), "llm": LLMResource(),
                   "grader": GraderResource(processes=1)},
        run_config={"ops": {"duet_budget_claim": {"config": {"heldout_arith": 0}}}},
        instance=dg.DagsterInstance.ephemeral())
    assert result.success
    meta = result.asset_materializations_for_node("duet_budget_claim")[0].metadata
    assert meta["verdict"].value  # the claim's own page is still there

    arms = {r["arm"]: r for r in _records(meta, "duet_arms")}
    assert list(arms) == ["grpo", "duet-b0.5"]
    duet, grpo = arms["duet-b0.5"], arms["grpo"]
    assert duet["steps"] == grpo["steps"] == len(STEPS)
    # means over the steps, computed here from the constructed logs
    assert duet["abort rate"] == f"{sum(ABORT) / 6:.3g}"
    assert duet["marker rate"] == f"{sum(MARKER) / 6:.3g}"
    assert duet["K1"] == f"{sum(K1) / 6:.3g}" and duet["K2"] == f"{sum(K2) / 6:.3g}"
    assert duet["abort at K2+G"] == f"{sum(K2) / 6 + 8:.3g}"
    assert duet["tokens/step"] == f"{sum(SPENT) / 6:.3g}"
    assert duet["spend/budget"] == f"{sum(SPENT) / sum(BUDGET):.3g}"
    # GRPO has no gate: no abort, marker, K1/K2 or budget; its tokens and clipped share
    assert grpo["abort rate"] == grpo["K1"] == grpo["spend/budget"] == "—"
    assert grpo["tokens/step"] == f"{sum(GRPO_TOKENS) / 6:.3g}"
    assert grpo["cut by cap"] == f"{sum(GRPO_CLIPPED) / 6:.3g}"

    steps = _records(meta, "duet_abort_per_step")
    assert [r["step"] for r in steps] == list(STEPS)
    assert [r["abort rate"] for r in steps] == [f"{a:.3g}" for a in ABORT]
    assert [r["spend/budget"] for r in steps] == [f"{s / b:.3g}" for s, b in zip(SPENT, BUDGET)]
    assert [r["tokens grpo"] for r in steps] == [f"{t:.3g}" for t in GRPO_TOKENS]
    assert meta["duet_mean_abort_rate"].value == pytest.approx(sum(ABORT) / 6)
    assert meta["duet_mean_k2"].value == pytest.approx(sum(K2) / 6)
    assert meta["duet_mean_spend_over_budget"].value == pytest.approx(sum(SPENT) / sum(BUDGET))


def test_the_per_step_figures_are_sql_readable_per_arm_and_seed(weft_home):
    wh = _warehouse()
    rows = wh.sql(
        "SELECT s.arm, s.seed, count(*) AS steps, avg(d.abort_rate) AS abort_rate, "
        "avg(d.marker_rate) AS marker_rate, avg(d.k1) AS k1, avg(d.k2) AS k2, "
        "sum(d.tokens_generated) / sum(d.token_budget) AS spend_over_budget "
        "FROM duet_steps d JOIN duet_sweep s USING (checkpoint_id) GROUP BY s.arm, s.seed"
    ).to_pylist()
    assert len(rows) == 1  # plain GRPO logs no DUET step
    (row,) = rows
    assert row["arm"] == "duet-b0.5" and row["seed"] == 0 and row["steps"] == len(STEPS)
    assert row["abort_rate"] == pytest.approx(np.mean(ABORT))
    assert row["marker_rate"] == pytest.approx(np.mean(MARKER))
    assert (row["k1"], row["k2"]) == (pytest.approx(np.mean(K1)), pytest.approx(np.mean(K2)))
    assert row["spend_over_budget"] == pytest.approx(sum(SPENT) / sum(BUDGET))
    per_step = wh.sql("SELECT step, abort_rate, budget_used FROM duet_steps "
                      "WHERE checkpoint_id = 'ck-duet' ORDER BY step").to_pylist()
    assert [r["abort_rate"] for r in per_step] == pytest.approx(ABORT)


def test_the_cpu_scale_trains_on_chains_from_the_chain_start_which_its_job_materializes():
    from assets.definitions import defs
    from assets.results.budget_results import DUET

    job = defs.resolve_job_def("duet_budget_claim_job")
    assert {"chain_sft_checkpoint", "duet_sweep", "duet_budget_claim"} <= {
        k.to_user_string() for k in job.asset_layer.executable_asset_keys}
    config = dg.validate_run_config(job, {"scale": "cpu"})["ops"]
    sweep = config["duet_sweep"]["config"]
    assert sweep["start_from"] == "chain_sft_checkpoint"
    assert any(o.startswith("dataset=builtin:chain") for o in sweep["overrides"])
    claim = config["duet_budget_claim"]["config"]
    assert claim["heldout_chain"] > 0 and claim["heldout_arith"] == 0
    # the abort can act before the cap: K2 + G below it at the cold start (K2 = 0.7 cap)
    cap = sweep["max_completion_length"]
    grace = int(next(s for s in sweep["duet_settings"] if s.startswith("grace=")).split("=")[1])
    assert round(0.7 * cap) + grace < cap
    assert claim["sampling"]["max_tokens"] == cap
    # the start is ordered before the sweep (an edge), so the job trains it first
    graph = defs.resolve_asset_graph()
    assert dg.AssetKey("chain_sft_checkpoint") in graph.get(dg.AssetKey("duet_sweep")).parent_keys
    assert DUET.upstream[0] == "chain_sft_checkpoint"


def test_a_missing_start_fails_naming_it_and_the_command(weft_home):
    from assets.duet import duet_sweep
    from assets.training import TrainerLauncher

    result = dg.materialize(
        [duet_sweep], resources={"trainer": TrainerLauncher(), "warehouse": WarehouseResource(),
                                 "llm": LLMResource(), "grader": GraderResource(processes=1)},
        run_config={"ops": {"duet_sweep": {"config": {"start_from": "chain_sft_checkpoint"}}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = str(failure.event_specific_data.error)
    assert "chain_sft_checkpoint has no materialization" in message
    assert "weft materialize --select chain_sft_checkpoint" in message
