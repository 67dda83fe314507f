"""Migration 009: a warehouse written with the old partition spelling (``gsm8k@m`` in the
``partition`` column, ``gsm8k%40m`` as the folder, per-run keys in `runs` / `llm_calls`) is
respelled on open, once, and an interrupted migration completes with nothing lost.

The old layout is written here by hand, file by file, the way an older weft wrote it."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from warehouse import Warehouse
from warehouse.migrations.partition_spelling import run_row_partition

REPO = Path(__file__).resolve().parents[3]
NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _old_folder(key: str) -> str:
    """How an older weft named a partition's folder."""
    return quote(key, safe="-_.=")


def _write_old(root: Path, table: str, folder_key: str, rows: list[dict], *, partition: str,
               asset: str, run_id: str) -> None:
    folder = root / table / _old_folder(folder_key)
    folder.mkdir(parents=True)
    stamped = [dict(r, run_id=run_id, asset=asset, partition=partition, config_hash="h",
                    created_at=NOW) for r in rows]
    pq.write_table(pa.Table.from_pylist(stamped), folder / "data.parquet", compression="zstd")


def _samples(model: str, n: int) -> list[dict]:
    return [{"benchmark": "gsm8k", "model": model, "problem_id": f"{model}-p{i}",
             "sample_index": 0, "correct": i % 2 == 0} for i in range(n)]


def _old_warehouse(root: Path) -> dict[tuple[str, str], list[str]]:
    """An old warehouse; returns {(table, new key): row ids} as they must read back."""
    expected: dict[tuple[str, str], list[str]] = {}

    def data(table, old_key, new_key, rows, asset, run_id, id_field):
        _write_old(root, table, old_key, rows, partition=old_key, asset=asset, run_id=run_id)
        expected[(table, new_key)] = sorted(r[id_field] for r in rows)

    for model, n in (("m1", 3), ("m2", 2)):
        data("eval_samples", f"gsm8k@{model}", f"gsm8k|{model}", _samples(model, n),
             "eval_samples", f"run-{model}", "problem_id")
        data("eval_scores", f"gsm8k@{model}", f"gsm8k|{model}",
             [{"metric": "avg@k", "k": 1, "value": 0.5, "score_id": f"s-{model}"}],
             "eval_scores", f"run-{model}", "score_id")
    # a handoff team's label (":" was quoted in folder names) and a Tandem RL legibility row
    team = "m1:handoff:j:senior-first"
    data("eval_samples", f"gsm8k@{team}", f"gsm8k|{team}", _samples(team, 2), "tandem_eval",
         "run-t", "problem_id")
    data("tandem_legibility", "gsm8k@m1@j", "gsm8k|m1|j", [{"model": "m1", "leg_id": "l1"}],
         "tandem_legibility", "run-l", "leg_id")
    # a partition that was never spelled with "@" keeps its folder and rows
    data("problems", "gsm8k", "gsm8k", [{"problem_id": "q1"}, {"problem_id": "q2"}],
         "gsm8k_problems", "run-i", "problem_id")
    # run records: one folder per run whose rows held the folder key in `partition`
    for asset, model in (("eval_samples", "m1"), ("eval_scores", "m1"), ("eval_samples", "m2"),
                         ("eval_scores", "m2")):
        run_key = f"{asset}/gsm8k@{model}/run-{model}"
        _write_old(root, "runs", run_key, [{"status": "success", "record": run_key}],
                   partition=run_key, asset=asset, run_id=f"run-{model}")
        expected[("runs", f"{asset}/gsm8k|{model}/run-{model}")] = [run_key]
    calls_key = "eval_samples/gsm8k@m1/run-m1"
    _write_old(root, "llm_calls", calls_key, [{"call_id": "c1"}, {"call_id": "c2"}],
               partition=calls_key, asset="eval_samples", run_id="run-m1")
    expected[("llm_calls", "eval_samples/gsm8k|m1/run-m1")] = ["c1", "c2"]
    # calls stored before records were kept per run: the data partition itself
    _write_old(root, "llm_calls", "gsm8k@m0", [{"call_id": "c0"}], partition="gsm8k@m0",
               asset="eval_samples", run_id="run-m0")
    expected[("llm_calls", "gsm8k|m0")] = ["c0"]
    # a run of another asset, under a calls name of its own: folder unchanged, rows respelled
    key = "mosaic_trajectories/gsm8k/rho=0.1/run-x"
    _write_old(root, "llm_calls", key, [{"call_id": "cx"}], partition=key,
               asset="mosaic_trajectories", run_id="run-x")
    expected[("llm_calls", key)] = ["cx"]
    return expected


ID_FIELDS = {"eval_samples": "problem_id", "eval_scores": "score_id", "problems": "problem_id",
             "tandem_legibility": "leg_id", "runs": "record", "llm_calls": "call_id"}
# the partition each stored key's rows must name after the migration
ROW_PARTITION = {"eval_samples/gsm8k|m1/run-m1": "gsm8k|m1",
                 "eval_scores/gsm8k|m1/run-m1": "gsm8k|m1",
                 "eval_samples/gsm8k|m2/run-m2": "gsm8k|m2",
                 "eval_scores/gsm8k|m2/run-m2": "gsm8k|m2",
                 "mosaic_trajectories/gsm8k/rho=0.1/run-x": "gsm8k/rho=0.1"}


def _check_migrated(root: Path, expected: dict[tuple[str, str], list[str]]) -> None:
    wh = Warehouse(root)
    for (table, key), ids in expected.items():
        rows = wh.read(table, partition=key).to_pylist()
        assert sorted(r[ID_FIELDS[table]] for r in rows) == ids, (table, key)
        assert {r["partition"] for r in rows} == {ROW_PARTITION.get(key, key)}, (table, key)
    tables = {t for t, _ in expected}
    for table in tables:
        assert sorted(wh.partitions(table)) == sorted(k for t, k in expected if t == table)
        # every row exactly once: no folder left behind in the old spelling
        assert wh.read(table).num_rows == sum(len(v) for (t, _), v in expected.items()
                                              if t == table)
    # the folders are the keys themselves where the file system allows it
    assert sorted(p.name for p in (root / "eval_samples").iterdir()) == [
        "gsm8k|m1", "gsm8k|m1:handoff:j:senior-first", "gsm8k|m2"]
    assert (root / "runs" / "eval_scores%2Fgsm8k|m2%2Frun-m2" / "data.parquet").is_file()


def test_an_old_warehouse_is_respelled_on_open_and_reads_back_every_row(tmp_path):
    root = tmp_path / "wh"
    expected = _old_warehouse(root)
    # the first read, by the new key, finds the rows: opening applied the migration
    wh = Warehouse(root)
    assert sorted(r["problem_id"] for r in wh.read("eval_samples", partition="gsm8k|m1")
                  .to_pylist()) == ["m1-p0", "m1-p1", "m1-p2"]
    _check_migrated(root, expected)
    # scores join their runs on the partition, which is Dagster's key
    joined = wh.sql("SELECT s.partition, s.score_id, r.status FROM eval_scores s JOIN runs r "
                    "USING (partition, run_id) WHERE r.asset = 'eval_scores' ORDER BY 1"
                    ).to_pylist()
    assert joined == [{"partition": "gsm8k|m1", "score_id": "s-m1", "status": "success"},
                      {"partition": "gsm8k|m2", "score_id": "s-m2", "status": "success"}]
    assert wh.sql("SELECT version, name FROM weft_migrations").to_pylist() == [
        {"version": 9, "name": "009_partition_spelling"}]
    # recorded: it never runs again (an old folder written now stays as it is)
    _write_old(root, "eval_samples", "gsm8k@late", _samples("late", 1), partition="gsm8k@late",
               asset="eval_samples", run_id="run-late")
    assert Warehouse(root).refresh_catalog() is True
    assert (root / "eval_samples" / "gsm8k%40late" / "data.parquet").is_file()
    assert "gsm8k@late" in Warehouse(root).partitions("eval_samples")


# Runs the catalog refresh (hence the migration) and dies, as a crash would, right after the
# n-th partition file was moved into place by the migration, before its old folder is removed.
_DYING_MIGRATION = """
import os, sys
from warehouse import Warehouse
real_replace, moved = os.replace, []
def replace(src, dst):
    real_replace(src, dst)
    if str(dst).endswith("data.parquet"):
        moved.append(dst)
        if len(moved) == int(sys.argv[2]):
            os._exit(17)
os.replace = replace
Warehouse(sys.argv[1]).refresh_catalog()
"""


@pytest.mark.parametrize("crash_after", [1, 5])
def test_an_interrupted_migration_completes_on_the_next_open_with_nothing_lost(tmp_path,
                                                                             crash_after):
    root = tmp_path / "wh"
    expected = _old_warehouse(root)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", _DYING_MIGRATION, str(root), str(crash_after)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 17, done.stderr
    # half-way: nothing recorded, every row still on disk, the partition caught between its
    # two folders in both, and old folders left
    tables = sorted({t for t, _ in expected})
    duplicated = 0
    for table in tables:
        ids = [i for f in (root / table).glob("*/data.parquet")
               for i in pq.read_table(f).column(ID_FIELDS[table]).to_pylist()]
        assert sorted(set(ids)) == sorted(i for (t, _), v in expected.items() if t == table
                                          for i in v), table
        duplicated += len(ids) - len(set(ids))
    assert duplicated > 0
    assert any("%40" in p.name for t in tables for p in (root / t).iterdir())
    # the next open completes it: every row once, under its new key, and records it
    _check_migrated(root, expected)
    assert Warehouse(root).sql("SELECT name FROM weft_migrations").to_pylist() == [
        {"name": "009_partition_spelling"}]


@pytest.mark.parametrize("value, asset, run_id, expected", [
    ("eval_samples/gsm8k@m/R", "eval_samples", "R", "gsm8k|m"),
    # a calls name other than the asset
    ("mosaic_trajectories/gsm8k/rho=0.1/R", "mosaic_claim", "R", "gsm8k/rho=0.1"),
    # the data partition itself (calls stored before they were kept per run)
    ("gsm8k@m", "eval_samples", "R", "gsm8k|m"),
    # already respelled: unchanged (the migration is idempotent)
    ("gsm8k|m", "eval_samples", "R", "gsm8k|m"),
    (None, "eval_samples", "R", None),
])
def test_run_rows_get_the_partition_of_their_run(value, asset, run_id, expected):
    assert run_row_partition(value, asset, run_id) == expected
