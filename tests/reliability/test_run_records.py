"""Every call's record survives re-runs (`llm_calls` is partitioned
by run), and a crash cannot leave `eval_samples`, `llm_calls` and `runs` disagreeing unnoticed
(the `runs` row is written last and is the commit marker; a check flags partitions whose
rows come from an uncommitted run)."""

from __future__ import annotations

import pytest

from assets.common import runs_disagreements
from warehouse import Warehouse


def test_a_cached_rerun_keeps_the_records_of_real_calls(eval_env):
    first = eval_env.evaluate(selection=("eval_samples",))
    assert first.success
    real_calls = eval_env.server.chat_count
    second = eval_env.evaluate(selection=("eval_samples",))
    assert second.success
    assert eval_env.server.chat_count == real_calls  # fully cached
    wh = Warehouse()
    calls = wh.read("llm_calls").to_pylist()
    by_run = {}
    for c in calls:
        by_run.setdefault(c["run_id"], []).append(c)
    assert set(by_run) == {first.run_id, second.run_id}
    assert sum(not c["cached"] for c in by_run[first.run_id]) == real_calls == 12
    assert all(c["cached"] for c in by_run[second.run_id]) and len(by_run[second.run_id]) == 12
    # cost accounting over the table counts every request the endpoint really served
    sent = wh.sql("SELECT count(*) AS n FROM llm_calls WHERE NOT cached").to_pylist()[0]["n"]
    assert sent == eval_env.server.chat_count
    checks = eval_env.checks(second)
    assert checks["check_eval_samples_runs_agree"].passed is True


def test_a_crash_while_recording_calls_leaves_the_previous_run_intact(eval_env, monkeypatch):
    first = eval_env.evaluate(selection=("eval_samples",))
    assert first.success
    from warehouse import store

    real_write = store.Warehouse.write

    def crash_on_calls(self, table, data, **kwargs):
        if table == "llm_calls":
            raise OSError("disk full")
        return real_write(self, table, data, **kwargs)

    monkeypatch.setattr(store.Warehouse, "write", crash_on_calls)
    crashed = eval_env.evaluate(selection=("eval_samples",), seed=5)
    assert not crashed.success
    monkeypatch.setattr(store.Warehouse, "write", real_write)
    wh = Warehouse()
    # the samples are still those of the first run, which is committed
    assert {r["run_id"] for r in wh.read("eval_samples").to_pylist()} == {first.run_id}
    check = eval_env.evaluate(selection=("eval_samples",), seed=3)  # cached, re-checks
    assert eval_env.checks(check)["check_eval_samples_runs_agree"].passed is True


def test_samples_from_an_uncommitted_run_are_flagged(eval_env, monkeypatch):
    from assets import evaluation
    from assets.resources import WarehouseResource
    from warehouse import runs

    assert eval_env.evaluate(selection=("eval_samples",)).success

    def crash(*args, **kwargs):
        raise RuntimeError("killed before the runs row")

    real_record_run = runs.record_run
    monkeypatch.setattr(runs, "record_run", crash)
    crashed = eval_env.evaluate(selection=("eval_samples",), seed=9)
    assert not crashed.success
    monkeypatch.setattr(runs, "record_run", real_record_run)
    wh = Warehouse()
    assert {r["run_id"] for r in wh.read("eval_samples").to_pylist()} == {crashed.run_id}
    assert crashed.run_id not in {r["run_id"] for r in wh.read("runs").to_pylist()}
    flagged = evaluation.check_eval_samples_runs_agree(warehouse=WarehouseResource())
    assert flagged.passed is False
    assert crashed.run_id in flagged.metadata["problems"].value
    # a run that completes rewrites the partition and commits it: the check passes again
    result = eval_env.evaluate(selection=("eval_samples",), seed=3)
    assert eval_env.checks(result)["check_eval_samples_runs_agree"].passed is True


def _runs(*rows):
    return [dict(zip(("asset", "partition", "run_id", "status"), r)) for r in rows]


@pytest.mark.parametrize("data, runs, calls, expected", [
    # consistent: one run, committed, with calls (run records name the data partition)
    ([("p", "A")], _runs(("a", "p", "A", "success")),
     [{"asset": "a", "partition": "p", "run_id": "A"}], []),
    # the samples' run crashed before its runs row (only an older run is committed)
    ([("p", "B")], _runs(("a", "p", "A", "success")), None, ["no successful `runs` row"]),
    # the samples' run is recorded as failed
    ([("p", "B")], _runs(("a", "p", "B", "failed")), None, ["no successful `runs` row"]),
    # a success row of another asset or partition does not count
    ([("p", "B")], _runs(("x", "p", "B", "success"), ("a", "q", "B", "success")), None,
     ["no successful `runs` row"]),
    # rows from two runs in one partition
    ([("p", "A"), ("p", "B")], _runs(("a", "p", "A", "success")), None, ["rows from 2 runs"]),
    # committed but no calls recorded by that run (calls from another run, or another partition)
    ([("p", "B")], _runs(("a", "p", "B", "success")),
     [{"asset": "a", "partition": "p", "run_id": "A"},
      {"asset": "a", "partition": "q", "run_id": "B"}], ["recorded no llm_calls"]),
])
def test_runs_disagreements_table(data, runs, calls, expected):
    rows = [{"partition": p, "run_id": r} for p, r in data]
    problems = runs_disagreements("a", rows, runs, calls)
    assert len(problems) == len(expected)
    for problem, fragment in zip(problems, expected):
        assert fragment in problem and problem.startswith("a p:")
