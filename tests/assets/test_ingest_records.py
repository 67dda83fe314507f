"""The ingest assets record their runs (``failed`` with the error when they fail), and
``problems`` never merges from part of its sources: with a `source_problems` partition that
cannot be read it fails naming the file and leaves every `problems` partition as it was.
Real Dagster materializations over the local copies of AIME 2024 and 2025 (30 problems each)."""

from __future__ import annotations

import errno
import os

import dagster as dg
import pytest

from assets import ingest
from assets.resources import WarehouseResource
from warehouse import Warehouse

SOURCES = ["aime24", "aime25"]


def _materialize(selection: list[str]) -> dg.ExecuteInProcessResult:
    return dg.materialize([*ingest.SOURCE_ASSETS, ingest.problems], selection=selection,
                          resources={"warehouse": WarehouseResource()},
                          instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)


def _runs(wh: Warehouse, asset: str) -> list[dict]:
    return wh.sql("SELECT status, error FROM runs WHERE asset = $a ORDER BY finished_at",
                  {"a": asset}).to_pylist()


def _failure(result: dg.ExecuteInProcessResult) -> str:
    return "\n".join(str(e.event_specific_data.error) for e in result.all_events
                     if e.event_type_value == "STEP_FAILURE")


def _truncate(path, monkeypatch):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _deny_folder(path, monkeypatch):
    # root reads every folder whatever its mode: the denial another user meets is simulated
    # where Python looks inside the folder (DuckDB is never asked to read it)
    folder = str(path.parent)
    for name in ("stat", "lstat"):
        real = getattr(os, name)

        def denied(p, *args, _real=real, **kwargs):
            if os.path.dirname(os.fspath(p)) == folder:
                raise PermissionError(errno.EACCES, "Permission denied", os.fspath(p))
            return _real(p, *args, **kwargs)

        monkeypatch.setattr(os, name, denied)


@pytest.mark.parametrize("damage", [_truncate, _deny_folder], ids=["truncated", "unreadable"])
def test_problems_fails_and_keeps_its_partitions_when_a_source_cannot_be_read(
        weft_home, shared_data, monkeypatch, damage):
    assert _materialize([f"{s}_problems" for s in SOURCES] + ["problems"]).success
    wh = Warehouse()
    before = {p: sorted(wh.read("problems", partition=p).column("problem_id").to_pylist())
              for p in SOURCES}
    assert {p: len(ids) for p, ids in before.items()} == {"aime24": 30, "aime25": 30}
    files = {p: (wh.root / "problems" / p / "data.parquet").stat() for p in SOURCES}
    bad = wh.root / "source_problems" / "aime24" / "data.parquet"
    damage(bad, monkeypatch)

    result = _materialize(["problems"])
    assert not result.success
    assert str(bad) in _failure(result)
    monkeypatch.undo()
    # nothing replaced, nothing deleted
    for p in SOURCES:
        st = (wh.root / "problems" / p / "data.parquet").stat()
        assert (st.st_ino, st.st_mtime_ns) == (files[p].st_ino, files[p].st_mtime_ns)
    assert wh.partitions("problems") == SOURCES
    runs = _runs(wh, "problems")
    assert [r["status"] for r in runs] == ["success", "failed"]
    assert "UnreadablePartitionError" in runs[-1]["error"] and str(bad) in runs[-1]["error"]


def test_a_failing_ingest_asset_writes_a_failed_runs_row(weft_home, monkeypatch):
    import pipelines.ingest

    def unavailable(source, **kwargs):
        raise ConnectionError(f"{source}: no local copy and the hub cannot be reached")

    monkeypatch.setattr(pipelines.ingest, "load_source", unavailable)
    result = _materialize(["aime24_problems"])
    assert not result.success
    (run,) = _runs(Warehouse(), "aime24_problems")
    assert run["status"] == "failed"
    assert run["error"] == "ConnectionError: aime24: no local copy and the hub cannot be reached"
