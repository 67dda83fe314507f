"""One synthesis run's plain parts (pipelines/mosaic/synthesis_runs.py): the settings it
refuses, where its rows go, the problem slice, the summary row's fixed types, the figures shown
and the side-by-side of MOSAIC and the baseline, and that a run closes its clients once."""

from types import SimpleNamespace

import pyarrow as pa
import pytest

from pipelines.mosaic import FAILURE_REASONS, METHOD_BASELINE, METHOD_MOSAIC
from pipelines.mosaic.scripted import SCRIPTED_LABEL
from pipelines.mosaic.synthesis_runs import (
    TABLE_BASELINE,
    TABLE_MOSAIC,
    TABLE_SUMMARY,
    SourceSynthesis,
    mosaic_partition,
    mosaic_vs_baseline,
    problem_inputs,
    run_synthesis,
    summary_figures,
    summary_table,
    trajectory_rows,
)
from warehouse import Lineage, Warehouse


def test_rows_go_to_the_table_and_partition_of_their_method_and_rho():
    assert mosaic_partition("gsm8k", 0.1) == "gsm8k/rho=0.1" and mosaic_partition("m", 1) == "m/rho=1"
    mosaic = SourceSynthesis(METHOD_MOSAIC, "gsm8k", rho=0.2, partition_suffix="|claim")
    assert (mosaic.table, mosaic.partition) == (TABLE_MOSAIC, "gsm8k/rho=0.2|claim")
    assert mosaic.mosaic_config(exec_timeout_s=3.0).rho == 0.2
    baseline = SourceSynthesis(METHOD_BASELINE, "gsm8k", rho=0.2, seed=5, max_steps=3)
    assert (baseline.table, baseline.partition) == (TABLE_BASELINE, "gsm8k")
    cfg = baseline.mosaic_config(exec_timeout_s=3.0)  # the baseline never injects
    assert (cfg.rho, cfg.seed, cfg.max_steps, cfg.exec_timeout_s) == (0.0, 5, 3, 3.0)


@pytest.mark.parametrize("settings, message", [
    ({"actor_base_url": "http://x/v1"}, "set actor_model together with actor_base_url"),
    ({"agents": "human"}, "agents must be 'llm' or 'scripted'"),
    ({"agents": "scripted", "method": METHOD_BASELINE}, "baseline synthesizer needs agents: llm"),
])
def test_settings_that_cannot_run_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        SourceSynthesis(**{"method": METHOD_MOSAIC, "source": "gsm8k", **settings})


def test_labels_name_the_models_that_played_each_role():
    assert SourceSynthesis(METHOD_MOSAIC, "s", agents="scripted").labels(None) == (
        SCRIPTED_LABEL, SCRIPTED_LABEL)
    assert SourceSynthesis(METHOD_MOSAIC, "s").labels("m") == ("m", "m")
    plan = SourceSynthesis(METHOD_MOSAIC, "s", actor_base_url="http://a/v1", actor_model="a")
    assert plan.labels("m") == ("m", "a")
    records = [SimpleNamespace(to_row=lambda: {"trajectory_id": "t1"})]
    assert trajectory_rows(records, plan, "m", "a") == [
        {"trajectory_id": "t1", "manager_model": "m", "actor_model": "a"}]
    baseline = SourceSynthesis(METHOD_BASELINE, "s")
    assert trajectory_rows(records, baseline, "m", "a")[0]["manager_model"] is None


def test_problem_inputs_are_a_deterministic_slice_of_one_split(weft_home):
    wh = Warehouse()
    rows = [{"problem_id": f"p{i}", "source": "gsm8k", "split": split, "problem": f"q{i}",
             "answer": str(i), "solution": f"s{i}"}
            for i, split in ((3, "train"), (1, "train"), (2, "test"), (0, "train"))]
    wh.write("problems", rows, lineage=Lineage(run_id="r", asset="problems"), partition="gsm8k")
    assert [p.problem_id for p in problem_inputs(wh, "gsm8k", "train", None)] == ["p0", "p1", "p3"]
    assert [p.problem_id for p in problem_inputs(wh, "gsm8k", "train", 2)] == ["p0", "p1"]
    with pytest.raises(ValueError, match="no `train` problems for source 'math'"):
        problem_inputs(wh, "math", "train", 2)


def _summary(**figures):
    base = {"trajectories": 4, "complete": 3, "accuracy": 0.5, "avg_turns": 2.5,
            "avg_turns_complete": 3.0, "early_answers": 0, "deviation_corrections": 1,
            "perturbation_rate": 0.25, "recovery_rate": None, "seconds_per_trajectory": 1.5,
            "failures": {"max_steps": 1}, "correct": 2}
    return {**base, **figures}


def test_the_summary_row_has_fixed_column_types():
    table = summary_table(METHOD_MOSAIC, "gsm8k", _summary(), "m", 0.1)
    assert table.num_rows == 1
    assert table.schema.field("recovery_rate").type == pa.float64()  # null, yet typed
    assert table.schema.field("accuracy").type == pa.float64()
    assert table.schema.field("trajectories").type == pa.int64()
    row = table.to_pylist()[0]
    assert (row["method"], row["source"], row["model"], row["rho"]) == ("mosaic", "gsm8k", "m", 0.1)
    assert row["recovery_rate"] is None and row["failures_json"] == '{"max_steps": 1}'
    assert {f"failed_{r}" for r in FAILURE_REASONS} <= set(row)
    assert row["failed_max_steps"] == 1
    assert sum(row[f"failed_{r}"] for r in FAILURE_REASONS) == 1


def test_the_figures_shown_leave_out_missing_rates():
    figures = summary_figures(METHOD_MOSAIC, _summary(accuracy=1), 7)
    assert list(figures) == ["method", "trajectories", "complete", "accuracy", "avg_turns",
                             "avg_turns_complete", "early_answers", "deviation_corrections",
                             "perturbation_rate", "seconds_per_trajectory", "failures",
                             "llm_calls"]  # recovery_rate is None: left out
    assert figures["llm_calls"] == 7
    assert figures["failures"] == {"max_steps": 1} and "correct" not in figures
    assert figures["accuracy"] == 1 and isinstance(figures["avg_turns"], float)


def test_mosaic_and_the_baseline_side_by_side_once_both_ran(weft_home):
    wh = Warehouse()
    assert mosaic_vs_baseline(wh, METHOD_MOSAIC, "gsm8k", _summary()) is None
    for run, accuracy in (("r1", 0.1), ("r2", 0.2)):  # the newest baseline run is shown
        wh.write(TABLE_SUMMARY, summary_table(METHOD_BASELINE, "gsm8k", _summary(
            accuracy=accuracy, failures={"sandbox": 2}), "m", 0.0),
            lineage=Lineage(run_id=run, asset=TABLE_SUMMARY), partition=f"baseline/{run}")
    rows = {r["metric"]: r for r in mosaic_vs_baseline(wh, METHOD_MOSAIC, "gsm8k", _summary())}
    assert (rows["accuracy"]["mosaic"], rows["accuracy"]["baseline"]) == (0.5, 0.2)
    assert (rows["failed:sandbox"]["mosaic"], rows["failed:sandbox"]["baseline"]) == (0, 2)
    assert mosaic_vs_baseline(wh, METHOD_MOSAIC, "math", _summary()) is None


def test_a_run_keeps_input_order_and_closes_each_client_once():
    import asyncio

    closed = []

    class Client:
        async def aclose(self):
            closed.append(self)

    async def make(problem):
        await asyncio.sleep(0.01 * (3 - problem))  # later problems finish first
        return problem * 10

    client = Client()
    assert run_synthesis([1, 2, 3], make, 2, (client, client, None)) == [10, 20, 30]
    assert closed == [client]

    async def broken(problem):
        raise RuntimeError("endpoint gone")

    with pytest.raises(RuntimeError, match="endpoint gone"):
        run_synthesis([1], broken, 1, (client,))
    assert closed == [client, client]  # closed however the run ends
