"""A run killed outright leaves its LLM calls (flushed as it runs) and shows as `crashed` in the
view run_status; finished runs show as they recorded themselves. A real process killed with
SIGKILL, a real warehouse."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
import textwrap
import time

from warehouse import Lineage, Warehouse
from warehouse.runs import RunRecord, record_run, run_partition, write_llm_calls

LIN = Lineage(run_id="r1", asset="a", partition="p")

_RUN = textwrap.dedent("""
    import sys, time
    from warehouse import Lineage, Warehouse
    from warehouse.runs import RunRecord

    class Client:  # records calls the way pipelines.llm.LLMClient does
        def __init__(self):
            self.pending, self.n = [], 0
        def call(self):
            self.n += 1
            self.pending.append({"call_id": f"c{self.n}", "tag": "t", "status": "ok"})
        def drain_records(self):
            out, self.pending = self.pending, []
            return out

    wh = Warehouse(sys.argv[1])
    client = Client()
    with RunRecord(wh, Lineage(run_id="killed", asset="a", partition="p"),
                   flush_every_s=0.2) as rec:
        rec.track(client)
        while True:  # calls complete; no data written yet
            client.call()
            time.sleep(0.01)
""")


def _status(wh: Warehouse) -> dict[str, dict]:
    return {r["run_id"]: r for r in wh.sql(
        "SELECT run_id, status, error, last_seen_at FROM run_status").to_pylist()}


def test_a_run_killed_with_sigkill_keeps_its_calls_and_shows_as_crashed(tmp_path, weft_home):
    wh = Warehouse(tmp_path / "wh")
    proc = subprocess.Popen([sys.executable, "-c", _RUN, str(wh.root)])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if len(wh.read("llm_calls", strict=False)) >= 20:
                break
            time.sleep(0.1)
        assert _status(wh)["killed"]["status"] == "running"  # heartbeats go on
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    calls = wh.read("llm_calls")
    assert calls.num_rows >= 20 and set(calls.column("run_id").to_pylist()) == {"killed"}
    assert wh.read("runs").num_rows == 0  # no final row
    (beat,) = wh.read("run_heartbeats").to_pylist()
    time.sleep(max(0.0, (beat["alive_until"] - dt.datetime.now(dt.UTC)).total_seconds()) + 0.2)
    row = _status(wh)["killed"]
    assert row["status"] == "crashed" and "without recording its end" in row["error"]
    assert row["last_seen_at"] == beat["heartbeat_at"]


def test_finished_runs_show_as_recorded_and_calls_without_a_runs_row_as_crashed(weft_home):
    wh = Warehouse()
    started = dt.datetime.now(dt.UTC)
    for run_id, status in [("ok", "success"), ("bad", "failed"), ("stop", "canceled")]:
        record_run(wh, Lineage(run_id=run_id, asset="a", partition="p"), started_at=started,
                   rows_written=1, status=status, error=None if status == "success" else "why")
    # a run (of code that starts no heartbeat) that wrote its calls, then was killed
    write_llm_calls(wh, [{"call_id": "c", "tag": "t", "status": "ok"}],
                    Lineage(run_id="gone", asset="a", partition="p"))
    status = {k: v["status"] for k, v in _status(wh).items()}
    assert status == {"ok": "success", "bad": "failed", "stop": "canceled", "gone": "crashed"}


def test_a_started_record_flushes_calls_and_heartbeats_until_it_ends(weft_home):
    wh = Warehouse()

    class Client:
        def __init__(self):
            self.pending = []

        def drain_records(self):
            out, self.pending = self.pending, []
            return out

    client = Client()
    with RunRecord(wh, LIN, flush_every_s=0.1, config={"x": 1}) as rec:
        rec.track(client)
        (first,) = wh.read("run_heartbeats", partition=run_partition(LIN)).to_pylist()
        assert first["alive_until"] > first["heartbeat_at"] and first["partition"] == "p"
        assert _status(wh)["r1"]["status"] == "running"
        client.pending.append({"call_id": "c1", "tag": "t", "status": "ok"})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not wh.read("llm_calls").num_rows:
            time.sleep(0.05)
        assert wh.read("llm_calls").num_rows == 1  # written before any data write
        time.sleep(0.3)
        (later,) = wh.read("run_heartbeats").to_pylist()
        assert later["heartbeat_at"] > first["heartbeat_at"]
    (final,) = wh.read("runs").to_pylist()
    assert final["status"] == "success"
    # the heartbeat ends with the run; the table keeps only its empty idle partition
    assert wh.partitions("run_heartbeats") == ["idle"]
    assert wh.read("run_heartbeats").num_rows == 0
    time.sleep(0.3)  # the flusher has stopped: nothing is written any more
    assert wh.partitions("run_heartbeats") == ["idle"]
    assert wh.read("run_heartbeats").num_rows == 0
    assert wh.read("runs").to_pylist() == [final]
    assert _status(wh)["r1"]["status"] == "success"


def test_runs_after_the_first_start_and_end_without_rebuilding_the_catalog(weft_home):
    """The heartbeat table keeps its empty idle partition, so a run's heartbeat appearing and
    going leaves every view as it was: the catalog file is not rewritten, and run_status
    still shows the run going on, then finished."""
    wh = Warehouse()
    with RunRecord(wh, LIN):  # the first run leaves the idle partition
        pass
    assert _status(wh)["r1"]["status"] == "success"
    built = wh.catalog_path.stat()
    second = Lineage(run_id="r2", asset="a", partition="p")
    with RunRecord(wh, second):
        assert _status(wh)["r2"]["status"] == "running"
        assert sorted(wh.partitions("run_heartbeats")) == sorted(["idle", run_partition(second)])
    assert _status(wh)["r2"]["status"] == "success"
    assert wh.partitions("run_heartbeats") == ["idle"]
    after = wh.catalog_path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (built.st_ino, built.st_mtime_ns)
