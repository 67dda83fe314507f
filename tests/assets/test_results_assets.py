"""The `results` group: jobs configured by scale, claims rows written and replaced per
experiment, the UI page's inline plots, and the claim computations of the training experiments
on warehouse rows whose differences are known by construction."""

import json

import dagster as dg
import numpy as np
import pytest

from assets.results import EXPERIMENTS, RESULT_ASSETS, RESULT_JOBS
from assets.results.experiments import Experiment
from cli.results import main as results_main
from eval.claims import VERDICTS
from eval.claims.draw import INLINE_MARKDOWN_LIMIT
from eval.claims.readers import latest_claims
from training.duet.budget_claim import DUET_ACCURACY_MARGIN, duet_claims
from training.ep_budget_claims import table5_claims
from warehouse import Lineage, Warehouse

TINY = {"training_seeds": 2, "train_episodes": 1500, "eval_episodes": 60, "n_boot": 500}


def test_every_experiment_has_an_asset_a_job_and_both_scales():
    names = {e.name for e in EXPERIMENTS}
    assert names == {a.key.to_user_string() for a in RESULT_ASSETS}
    assert {f"{n}_job" for n in names} == {j.name for j in RESULT_JOBS}
    for e in EXPERIMENTS:
        # a paper's claim runs at both scales; weft's own check (no paper setup) at cpu only
        expected = ("cpu",) if e.paper == "weft demo" else ("cpu", "paper")
        assert tuple(e.scale_names) == expected, e.name
        for scale in expected:
            ops = e.run_config(scale)["ops"]
            assert ops[e.name]["config"]["scale"] == scale
            assert set(e.upstream) <= set(ops)  # every upstream asset is configured per scale
        if expected == ("cpu",):
            with pytest.raises(ValueError, match="scale must be one of"):
                e.run_config("paper")


def test_run_config_merges_overrides_and_refuses_an_unknown_scale():
    e = Experiment(name="x_claim", paper="P", description="d", upstream=("up",),
                   scales={"cpu": {"up": {"config": {"a": 1, "b": {"c": 2}}}},
                           "paper": {"up": {"config": {"a": 100}}}})
    merged = e.run_config("cpu", {"up": {"config": {"b": {"d": 3}}}})
    assert merged["ops"]["up"]["config"] == {"a": 1, "b": {"c": 2, "d": 3}}
    assert e.scales["cpu"]["up"]["config"]["b"] == {"c": 2}  # the preset is not mutated
    with pytest.raises(ValueError, match="scale must be one of"):
        e.run_config("gpu")
    with pytest.raises(ValueError, match="no run config for scale"):
        Experiment(name="y", paper="P", description="d", scales={"cpu": {}})
    with pytest.raises(ValueError, match="must include cpu"):
        Experiment(name="z", paper="P", description="d", scales={"paper": {}},
                   scale_names=("paper",))


def test_print_config_shows_both_scales(capsys):
    assert results_main(["--print-config", "duet_budget_claim"]) == 0
    out = capsys.readouterr().out
    assert "cpu:" in out and "paper:" in out and "max_steps: 232" in out
    assert results_main(["--print-config", "nope"]) == 2
    assert "duet_budget_claim" in capsys.readouterr().err


def _run_job(name: str, config: dict) -> dg.ExecuteInProcessResult:
    from assets.definitions import defs

    job = defs.resolve_job_def(name)
    return job.execute_in_process(run_config=config, instance=dg.DagsterInstance.ephemeral(),
                                  resources=None)


def test_toy_claim_job_writes_claims_and_a_rerun_replaces_them_keeping_history(weft_home):
    result = _run_job("ep_deliberation_claim_job", {
        "scale": "cpu", "ops": {"ep_deliberation_claim": {"config": TINY}}})
    assert result.success
    rows = Warehouse().sql("SELECT * FROM claims").to_pylist()
    assert {r["section"] for r in rows} == {"Table 1 (single task)", "Table 1 (sequential task)"}
    assert all(r["experiment"] == "ep_deliberation_claim" and r["scale"] == "cpu" for r in rows)
    assert all(r["verdict"] in VERDICTS for r in rows)
    assert json.loads(rows[0]["config_json"])["training_seeds"] == 2
    meta = result.asset_materializations_for_node("ep_deliberation_claim")[0].metadata
    table = meta["claims"]  # a table: the UI renders it on the page at any length
    assert isinstance(table, dg.TableMetadataValue) and len(table.records) == len(rows)
    assert {r.data["verdict"] for r in table.records} == {r["verdict"] for r in rows}
    plots = [k for k in meta if k.startswith("plot_")]
    assert len(plots) == len(rows)
    for key in plots:  # short enough for the UI to render on the asset page itself
        md = meta[key].value
        assert md.startswith("![") and len(md) <= INLINE_MARKDOWN_LIMIT
    again = _run_job("ep_deliberation_claim_job", {
        "scale": "paper", "ops": {"ep_deliberation_claim": {"config": TINY}}})
    assert again.success
    rows = Warehouse().sql("SELECT * FROM claims").to_pylist()
    assert len(rows) == 4 and {r["scale"] for r in rows} == {"paper"}
    # both runs stay in the history, each under its own run id
    kept = Warehouse().sql("SELECT run_id, scale FROM claim_history").to_pylist()
    assert len(kept) == 8 and {r["run_id"] for r in kept} == {result.run_id, again.run_id}
    assert {r["scale"] for r in kept if r["run_id"] == result.run_id} == {"cpu"}


def _write_samples(wh, model, bench, scores, run_id, budget=None, tokens=None, partition=None):
    rows = [{"model": model, "benchmark": bench, "problem_id": pid, "sample_index": i,
             "correct": bool(c), "budget": budget,
             "tokens_used": None if tokens is None else tokens[pid]}
            for pid, cs in scores.items() for i, c in enumerate(cs)]
    wh.write("eval_samples", rows, lineage=Lineage(run_id=run_id, asset="eval_samples",
                                                   partition=partition or f"{bench}@{model}"))


def test_duet_claims_from_sweep_rows(weft_home):
    wh = Warehouse()
    rng = np.random.default_rng(0)
    pids = [f"p{i}" for i in range(30)]
    grpo = {p: [int(x) for x in rng.integers(0, 2, 2)] for p in pids}
    duet = {p: [int(x) for x in rng.integers(0, 2, 2)] for p in pids}
    # an older evaluation of the GRPO checkpoint (another partition) that must not be read
    _write_samples(wh, "ck-grpo", "gsm8k", {p: [1, 1] for p in pids}, "r0", partition="old")
    _write_samples(wh, "ck-grpo", "gsm8k", grpo, "r1")
    _write_samples(wh, "ck-duet", "gsm8k", duet, "r2")
    steps = range(1, 9)
    metrics = [{"checkpoint_id": "ck-grpo", "step": s, "tokens_generated": 1000.0 + s,
                "seconds_per_step": 10.0, "logs_json": "{}"} for s in steps]
    metrics += [{"checkpoint_id": "ck-duet", "step": s, "tokens_generated": 5000.0,
                 "seconds_per_step": 6.0 + 0.1 * s,
                 "logs_json": json.dumps({"duet/tokens_generated": 400.0 + s})} for s in steps]
    wh.write("train_metrics", metrics, partition="m")
    wh.write("duet_sweep", [
        {"arm": "grpo", "method": "grpo", "budget_fraction": 1.0, "checkpoint_id": "ck-grpo",
         "benchmark": "gsm8k", "sweep": "s1"},
        {"arm": "duet-b0.5", "method": "duet", "budget_fraction": 0.5,
         "checkpoint_id": "ck-duet", "benchmark": "gsm8k", "sweep": "s1"}], partition="s1")
    acc, tok, wall = duet_claims(wh, 0.5)
    expected = np.mean([np.mean(duet[p]) - np.mean(grpo[p]) for p in pids])
    assert acc["diff"] == pytest.approx(expected) and acc["n"] == 30
    assert acc["kind"] == "no_worse" and acc["margin"] == DUET_ACCURACY_MARGIN
    # DUET's own token count (logs), not the column, is compared: 400+s vs 1000+s; at half
    # budget fewer tokens hold by construction (half the rollouts): a setup check
    assert tok["diff"] == pytest.approx(-600.0) and tok["verdict"] == "reproduced"
    assert tok["role"] == "check" and acc["role"] == wall["role"] == "claim"
    assert wall["diff"] == pytest.approx(np.mean([6.0 + 0.1 * s - 10.0 for s in steps]))
    assert wall["verdict"] == "reproduced"
    with pytest.raises(ValueError, match="no GRPO arm or no DUET arm at budget 0.25"):
        duet_claims(wh, 0.25)
    # a newer sweep (another seed's job, running beside this one) with the arms' checkpoints
    # swapped: the newest reads -expected, while sweep s1, named, still reads as above
    wh.write("duet_sweep", [
        {"arm": "grpo", "method": "grpo", "budget_fraction": 1.0, "checkpoint_id": "ck-duet",
         "benchmark": "gsm8k", "sweep": "s2"},
        {"arm": "duet-b0.5", "method": "duet", "budget_fraction": 0.5,
         "checkpoint_id": "ck-grpo", "benchmark": "gsm8k", "sweep": "s2"}], partition="s2")
    assert duet_claims(wh, 0.5)[0]["diff"] == pytest.approx(-expected)
    assert duet_claims(wh, 0.5, sweep="s1")[0]["diff"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="no duet_sweep rows of sweep 's9'; stored: s2, s1"):
        duet_claims(wh, 0.5, sweep="s9")


def _table5_rows(wh):
    from training.ep_budget import ARM_EP, HELDOUT_BENCHMARK

    pids = [f"q{i}" for i in range(12)]
    # EP: right and short on every problem; RLVR: right but over the 100-token budget on half
    _write_samples(wh, "ck-ep", HELDOUT_BENCHMARK, {p: [1] for p in pids}, "e1", budget=100,
                   tokens={p: 50 for p in pids})
    _write_samples(wh, "ck-rl", HELDOUT_BENCHMARK, {p: [1] for p in pids}, "e2", budget=100,
                   tokens={p: (50 if i % 2 else 300) for i, p in enumerate(pids)})
    wh.write("ep_budget_scores", [
        {"arm": ARM_EP, "model": "ck-ep", "budget": 100, "table_id": "t1"},
        {"arm": "rlvr", "model": "ck-rl", "budget": 100, "table_id": "t1"}], partition="t1")


def test_table5_claims_score_budgeted_success(weft_home):
    from training.ep_budget import ARM_EP

    wh = Warehouse()
    _table5_rows(wh)
    (row,) = table5_claims(wh)
    assert row["reference"] == "rlvr" and row["treatment"] == ARM_EP
    assert row["diff"] == pytest.approx(0.5) and row["reference_value"] == pytest.approx(0.5)
    assert row["metric"] == "BS@100"


def test_claims_read_back_newest_run_per_experiment(weft_home):
    from eval.claims import Claim, judge

    wh = Warehouse()
    claim = Claim(paper="P", section="S", statement="t beats r", metric="m", reference="r",
                  treatment="t")
    for run, shift in (("old", 0.0), ("new", 1.0)):
        row = dict(judge(claim, [0.0, 0.5, 1.0], [shift, 0.5 + shift, 1.0 + shift], n_boot=200),
                   experiment="x", scale="cpu", config_json="{}")
        wh.write("claims", [row], lineage=Lineage(run_id=run, asset="x", partition=f"x-{run}"))
    (latest,) = latest_claims(wh)
    assert latest["diff"] == pytest.approx(1.0)


def test_weft_job_runs_a_claim_job_from_the_shell_with_json_config(weft_home):
    import subprocess
    import sys

    config = json.dumps({"scale": "cpu", "ops": {"ep_patrol_claim": {"config": {
        **TINY, "train_episodes": 40, "eval_episodes": 10}}}})
    done = subprocess.run([sys.executable, "-m", "cli.instance", "job", "ep_patrol_claim_job",
                           "--config-json", config], check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = Warehouse().sql("SELECT section, scale FROM claims ORDER BY section").to_pylist()
    assert [r["section"] for r in rows] == sorted(
        ["Table 2a (module level)", "Table 2b (state level, depth 2)",
         "Table 2b (state level, depth 3)"])
    bad = subprocess.run([sys.executable, "-m", "cli.instance", "job", "ep_patrol_claim_job",
                          "--config-json", "{scale: cpu"], check=False, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0 and "not valid JSON" in bad.stderr


class _CallsClient:
    """Holds LLM call records the way pipelines.llm.LLMClient does until drained."""

    def __init__(self) -> None:
        self.pending: list[dict] = []

    def call(self) -> None:
        self.pending.append({"call_id": f"c{len(self.pending)}", "tag": "ep_controller",
                             "status": "ok"})

    def drain_records(self) -> list[dict]:
        out, self.pending = self.pending, []
        return out


def test_a_stopped_claim_keeps_its_llm_calls_and_a_canceled_runs_row(weft_home):
    from assets.results.engagement_results import KITCHEN
    from assets.results.experiments import record_claims

    client = _CallsClient()

    @dg.asset(name="ep_kitchen_claim")
    def stopped(context: dg.AssetExecutionContext):
        def compute():
            client.call()
            client.call()
            raise KeyboardInterrupt("stopped by the user")

        return record_claims(context, Warehouse(), KITCHEN, "cpu", compute, {}, clients=[client])

    with pytest.raises(KeyboardInterrupt):
        stopped(dg.build_asset_context())
    wh = Warehouse()
    (run,) = wh.read("runs").to_pylist()
    assert run["status"] == "canceled" and run["asset"] == "ep_kitchen_claim"
    assert run["error"] == "KeyboardInterrupt: stopped by the user"
    assert [c["call_id"] for c in wh.read("llm_calls").to_pylist()] == ["c0", "c1"]
    assert wh.read("claims").num_rows == 0


def _preference_reply(body: dict, index: int) -> str:
    """The fake server's answer to the kitchen controller: the first listed option whose text
    has the earliest of prep, tutor, finish, wait (the rule of the in-process PreferenceClient)."""
    content = body["messages"][-1]["content"]
    options = [ln for ln in content.split("Options:\n")[1].splitlines() if ln[:1].isdigit()]
    for word in ("prep", "tutor", "finish", "wait"):
        hit = [ln for ln in options if word in ln]
        if hit:
            return f'{{"choice": {int(hit[0].split(":")[0])}}}'
    return "?"


@pytest.mark.slow
def test_kitchen_claim_asset_over_http_matches_the_controller_run_in_process(weft_home,
                                                                             monkeypatch):
    """The Table 4 asset end to end (its job, the `llm` resource over HTTP, several clients at
    once, the claims rows) on two cases per setting, against the same controller rule run
    in-process through the kitchen simulator directly."""
    from assets.resources import LLMResource, WarehouseResource
    from assets.results.engagement_results import KITCHEN, ep_kitchen_claim
    from assets.results.experiments import claim_job
    from eval.engagement import kitchen as K
    from eval.engagement.llm_policies import LLMController
    from pipelines.llm.testing import FakeLLMServer
    from tests.eval.engagement.test_kitchen import PreferenceClient

    make_cases = K.make_cases
    monkeypatch.setattr(K, "make_cases", lambda cfg: make_cases(cfg)[:2])
    with FakeLLMServer(responder=_preference_reply, models=("preference",)) as server:
        defs = dg.Definitions(
            assets=[ep_kitchen_claim], jobs=[claim_job(KITCHEN)],
            resources={"llm": LLMResource(base_url=server.base_url, model="preference",
                                          max_concurrency=4, timeout_s=60),
                       "warehouse": WarehouseResource()})
        result = defs.resolve_job_def("ep_kitchen_claim_job").execute_in_process(
            run_config={"scale": "cpu", "ops": {"ep_kitchen_claim": {"config": {
                "workers": 2, "n_boot": 300}}}},
            instance=dg.DagsterInstance.ephemeral())
        assert result.success
        rows = {r["section"]: r for r in Warehouse().sql("SELECT * FROM claims").to_pylist()}
        calls = server.chat_count
        # one setting alone: its row only, every call replayed from the response cache
        alone = defs.resolve_job_def("ep_kitchen_claim_job").execute_in_process(
            run_config={"scale": "cpu", "ops": {"ep_kitchen_claim": {"config": {
                "workers": 2, "n_boot": 300, "settings": ["multi"]}}}},
            instance=dg.DagsterInstance.ephemeral())
        assert alone.success and server.chat_count == calls
    assert set(rows) == {"Table 4 (one, preference)", "Table 4 (multi, preference)"}
    (only,) = latest_claims(Warehouse())
    assert only["section"] == "Table 4 (multi, preference)"
    assert only["diff"] == rows["Table 4 (multi, preference)"]["diff"]
    for setting in (K.ONE, "multi"):
        cfg = K.KitchenConfig(setting=setting, cases_per_cell=1)
        cases = K.make_cases(cfg)
        utility = {m: [r["utility"] for r in K.run_method(cfg, m, LLMController(
            PreferenceClient(), m), cases).rows] for m in ("reflexpatch", "ep")}
        row = rows[f"Table 4 ({setting}, preference)"]
        assert row["n"] == 2 and row["experiment"] == "ep_kitchen_claim"
        assert row["reference_value"] == pytest.approx(np.mean(utility["reflexpatch"]))
        assert row["diff"] == pytest.approx(
            np.mean(utility["ep"]) - np.mean(utility["reflexpatch"]))


def test_kitchen_claim_refuses_unknown_or_repeated_settings_before_any_llm_call(weft_home):
    from assets.resources import LLMResource, WarehouseResource
    from assets.results.engagement_results import ep_kitchen_claim
    from eval.engagement.experiments import check_kitchen_settings

    for bad in ([], ["one", "nope"], ["one", "one"]):
        with pytest.raises(ValueError, match="distinct Table 4 settings"):
            check_kitchen_settings(bad)
    check_kitchen_settings(["multi"])
    check_kitchen_settings(["one", "multi"])
    result = dg.materialize(  # the asset checks first: the endpoint here answers nothing
        [ep_kitchen_claim],
        resources={"llm": LLMResource(base_url="http://127.0.0.1:9/v1", model="unreachable"),
                   "warehouse": WarehouseResource()},
        run_config={"ops": {"ep_kitchen_claim": {"config": {"settings": ["one", "nope"]}}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    assert "settings must be a non-empty list of distinct Table 4 settings" in str(
        result.failure_data_for_node("ep_kitchen_claim").error)


def test_runs_of_one_design_with_other_seeds_are_pooled_on_the_result_page(weft_home):
    from assets.resources import WarehouseResource
    from assets.results.experiments import ResultConfig, record_claims
    from eval.claims import Claim, judge

    experiment = Experiment(name="seeded_claim", paper="P", description="d",
                            scales={"cpu": {}, "paper": {}})
    claim = Claim(paper="P", section="S", statement="t beats r", metric="m", reference="r",
                  treatment="t")

    class SeededConfig(ResultConfig):
        seed: int = 0
        steps: int = 4
        shift: float = 0.5

    @dg.asset(name="seeded_claim")
    def seeded(context: dg.AssetExecutionContext, config: SeededConfig,
               warehouse: WarehouseResource) -> dg.MaterializeResult:
        rng = np.random.default_rng(config.seed)
        ref = rng.normal(0.0, 1.0, 30)

        def compute():
            return [judge(claim, ref, ref + config.shift + rng.normal(0.0, 0.3, 30), n_boot=300)]

        return record_claims(context, warehouse.get(), experiment, config.scale, compute,
                             config.model_dump(), derived=("shift",))

    def run(**cfg):
        result = dg.materialize([seeded], resources={"warehouse": WarehouseResource()},
                                run_config={"ops": {"seeded_claim": {"config": cfg}}},
                                instance=dg.DagsterInstance.ephemeral())
        assert result.success
        return result.asset_materializations_for_node("seeded_claim")[0].metadata

    first = run(seed=0)
    assert "across_seeds" not in first  # one seed: nothing to pool
    rows = Warehouse().sql("SELECT seed, design FROM claims").to_pylist()
    assert rows[0]["seed"] == 0 and len(rows[0]["design"]) == 12
    # what the run found (`derived`) is not part of its design; its settings are
    second = run(seed=1, shift=0.6)
    table = second["across_seeds"]
    assert isinstance(table, dg.TableMetadataValue) and len(table.records) == 1
    assert table.records[0].data["seeds"] == "0, 1"
    assert second["verdict_across_seeds"].value in VERDICTS
    other = run(seed=2, steps=8)  # another design: pooled with nothing
    assert "across_seeds" not in other
    designs = Warehouse().sql("SELECT seed, design FROM claim_history ORDER BY seed").to_pylist()
    assert designs[0]["design"] == designs[1]["design"] != designs[2]["design"]


def test_duet_and_table5_rows_take_their_seed_and_design_from_the_upstream_run(weft_home):
    from eval.claims.readers import upstream_draw

    wh = Warehouse()

    def draw(run_id, partition, **settings):
        wh.write("runs", [{"status": "success", "config_json": json.dumps(settings)}],
                 lineage=Lineage(run_id=run_id, asset="duet_sweep", partition=partition))
        return upstream_draw(wh, "duet_sweep", partition, {"scale": "cpu", "budget": 0.5})

    a = draw("r1", "s1", seed=3, max_steps=20)
    b = draw("r2", "s2", seed=4, max_steps=20)
    c = draw("r3", "s3", seed=4, max_steps=40)
    assert (a["seed"], b["seed"], c["seed"]) == (3, 4, 4)
    assert a["design"] == b["design"] != c["design"]
    assert upstream_draw(wh, "duet_sweep", "s1", {"scale": "paper"})["design"] != a["design"]
    assert upstream_draw(wh, "duet_sweep", "never-ran", {})["seed"] is None


def test_the_table5_result_asset_stamps_the_seed_of_the_table_it_judged(weft_home):
    from assets.resources import WarehouseResource
    from assets.results.budget_results import ep_budget_claim

    wh = Warehouse()
    _table5_rows(wh)
    wh.write("runs", [{"status": "success", "config_json": json.dumps({"seed": 5})}],
             lineage=Lineage(run_id="t", asset="ep_budget_table", partition="t1"))
    result = dg.materialize([ep_budget_claim], resources={"warehouse": WarehouseResource()},
                            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    (row,) = Warehouse().sql("SELECT seed, design, metric FROM claims").to_pylist()
    assert row["seed"] == 5 and row["metric"] == "BS@100" and len(row["design"]) == 12


def _table5_seed(wh, seed, budget, over):
    """An ep_budget_table run ``t<seed>`` of ``seed`` whose budget is the start's 25th
    answer-length percentile, ``budget`` tokens: both arms right on 12 problems, EP-aware always
    within the budget, RLVR over it on the first ``over``."""
    from training.ep_budget import ARM_EP, HELDOUT_BENCHMARK

    pids = [f"q{i}" for i in range(12)]
    table, ep, rl = f"t{seed}", f"ck-ep{seed}", f"ck-rl{seed}"
    _write_samples(wh, ep, HELDOUT_BENCHMARK, {p: [1] for p in pids}, f"e{seed}",
                   budget=budget, tokens={p: budget - 5 for p in pids})
    _write_samples(wh, rl, HELDOUT_BENCHMARK, {p: [1] for p in pids}, f"r{seed}", budget=budget,
                   tokens={p: (budget + 9 if i < over else budget - 1)
                           for i, p in enumerate(pids)})
    wh.write("ep_budget_scores", [
        {"arm": arm, "model": model, "budget": budget, "table_id": table,
         "budget_source": "start_percentiles", "budget_percentile": 25.0}
        for arm, model in ((ARM_EP, ep), ("rlvr", rl))], partition=table)
    wh.write("runs", [{"status": "success", "config_json": json.dumps(
        {"seed": seed, "max_steps": 8})}],
        lineage=Lineage(run_id=f"run{seed}", asset="ep_budget_table", partition=table))


def test_table5_seeds_with_their_own_measured_budgets_pool_as_one_part(weft_home):
    # three ep_budget_table runs (seeds 0, 1, 2) whose budgets are the start's 25th answer-length
    # percentile, measured per run: 39, 47 and 35 tokens. Judged one table at a time (table_id),
    # every seed names the part BS@p25, so the seeds pool into one part (a name with the token
    # budget in it, BS@39 / BS@47 / BS@35, gave three single-seed parts that never pooled)
    from assets.resources import WarehouseResource
    from assets.results.budget_results import ep_budget_claim
    from eval.claims.readers import claim_history
    from eval.replicates import pooled_rows

    wh = Warehouse()
    over = {0: 6, 1: 4, 2: 8}  # problems where RLVR's answer is over the budget
    for seed, budget in ((0, 39), (1, 47), (2, 35)):
        _table5_seed(wh, seed, budget, over[seed])
    for seed in (2, 0, 1):  # any order: each table is judged as itself
        result = dg.materialize(
            [ep_budget_claim], resources={"warehouse": WarehouseResource()},
            instance=dg.DagsterInstance.ephemeral(),
            run_config={"ops": {"ep_budget_claim": {"config": {"table_id": f"t{seed}"}}}})
        assert result.success
    rows = claim_history(Warehouse(), ["ep_budget_claim"])
    assert sorted((r["seed"], r["metric"], round(r["diff"], 6)) for r in rows) == [
        (s, "BS@p25", round(over[s] / 12, 6)) for s in (0, 1, 2)]
    assert len({r["design"] for r in rows}) == 1
    (pooled,) = pooled_rows(rows)
    assert pooled["metric"] == "BS@p25" and pooled["k"] == 3 and pooled["seeds"] == "0, 1, 2"
    assert pooled["diff"] == pytest.approx(np.mean([6 / 12, 4 / 12, 8 / 12]), abs=0.02)
    # a table that was never stored: the error names the ones that were
    failed = dg.materialize(
        [ep_budget_claim], resources={"warehouse": WarehouseResource()},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
        run_config={"ops": {"ep_budget_claim": {"config": {"table_id": "t9"}}}})
    assert not failed.success
    (event,) = [e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "no ep_budget_table run with table_id 't9'" in str(event.event_specific_data.error)
    assert "t0" in str(event.event_specific_data.error)


def test_a_claim_job_judges_the_table_its_own_run_made_not_the_newest(weft_home):
    # two claim jobs side by side (seeds 0 and 1): seed 1's table lands while seed 0's claim is
    # still to run. Seed 0's run judges t0, the table its own ep_budget_table materialized
    # (read from the run's event log), not t1, the newest in the warehouse
    from assets.resources import WarehouseResource
    from assets.results.budget_results import ep_budget_claim

    wh = Warehouse()
    _table5_seed(wh, 0, 39, 6)
    _table5_seed(wh, 1, 47, 2)  # written later: the newest table

    @dg.asset(name="ep_budget_table")
    def seed0_table():  # stands for the run's own ep_budget_table (its rows are stored above)
        return dg.MaterializeResult(metadata={"table_id": "t0"})

    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([seed0_table, ep_budget_claim],
                          resources={"warehouse": WarehouseResource()}, instance=instance).success
    (row,) = Warehouse().sql("SELECT seed, diff FROM claims").to_pylist()
    assert row["seed"] == 0 and row["diff"] == pytest.approx(6 / 12)
    # the claim materialized alone (no table in its run) judges the newest stored table
    assert dg.materialize([ep_budget_claim], resources={"warehouse": WarehouseResource()},
                          instance=instance).success
    (row,) = Warehouse().sql("SELECT seed, diff FROM claims").to_pylist()
    assert row["seed"] == 1 and row["diff"] == pytest.approx(2 / 12)


def test_the_result_page_keeps_setup_checks_out_of_the_verdict():
    from assets.results.experiments import NO_CLAIM_PART, claims_metadata
    from eval.claims import Claim, judge

    def part(role, shift, metric):
        claim = Claim(paper="P", section="S", statement=f"{role} {metric}", metric=metric,
                      reference="r", treatment="t", role=role)
        ref = [float(i % 4) for i in range(20)]
        return judge(claim, ref, [r + shift for r in ref], n_boot=200)

    inconclusive = part("claim", 0.0, "flat")  # no unit differs: inconclusive, with the reason
    rows = [part("claim", 1.0, "up"), part("check", -1.0, "down"), inconclusive]
    meta = claims_metadata(rows)
    assert meta["verdict"] == "inconclusive"  # the failed check does not make it "not reproduced"
    assert len(meta["claims"].records) == 2 and len(meta["checks"].records) == 1
    assert meta["checks"].records[0].data["check"] == "check failed"
    assert meta["checks_passed"] == "0 of 1"
    # parts numbered as the tables list them (claims, then checks), with short keys
    assert meta["verdict_1"] == "reproduced" and meta["check_3"] == "check failed"
    assert meta["verdict_2"].startswith("inconclusive")
    assert [r.data["part"] for r in meta["claims"].records] == ["1", "2"]
    assert meta["checks"].records[0].data["part"] == "3"
    assert {k for k in meta if k.startswith("plot_")} == {"plot_1", "plot_2", "plot_3"}
    # the verdict comes right after the part number, ahead of the long cells
    assert [c.name for c in meta["claims"].schema.columns][:2] == ["part", "verdict"]
    assert max(len(k) for k in meta) <= len("verdict_across_seeds")
    flat = meta["claims"].records[1].data
    assert flat["verdict"] == "inconclusive"
    assert flat["why inconclusive"] == "the arms score the same on every unit"
    assert flat["differ"] == "0"
    only_checks = claims_metadata(rows[1:2])
    assert only_checks["verdict"] == NO_CLAIM_PART and "claims" not in only_checks
