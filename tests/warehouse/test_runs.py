"""warehouse.runs.RunRecord: the write order (llm_calls, data, runs) and the failed and
canceled records, checked on a real warehouse against the rows written by hand here."""

from __future__ import annotations

import pytest

from warehouse import Lineage, Warehouse
from warehouse.runs import RunRecord, run_partition


class OrderedWarehouse(Warehouse):
    """A real warehouse that also notes the order of the tables written."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def write(self, table, data, **kwargs):
        self.order.append(table)
        return super().write(table, data, **kwargs)


class Client:
    """Holds call records the way pipelines.llm.LLMClient does until drained."""

    def __init__(self) -> None:
        self.pending: list[dict] = []

    def call(self, n: int) -> None:
        self.pending += [{"call_id": f"c{len(self.pending) + i}", "tag": "t", "status": "ok"}
                         for i in range(n)]

    def drain_records(self) -> list[dict]:
        out, self.pending = self.pending, []
        return out


LIN = Lineage(run_id="r1", asset="a", partition="p")


def _rows(wh: Warehouse, table: str) -> list[dict]:
    return wh.read(table).to_pylist()


def test_success_writes_calls_then_data_then_the_runs_row(weft_home):
    wh, client = OrderedWarehouse(), Client()
    with RunRecord(wh, LIN, config={"x": 1}) as rec:
        rec.track(client)
        client.call(2)
        rec.write("rejects", [{"source": "s", "origin": "o", "line": 1, "reason": "r",
                               "raw": "x"}], counted=False)
        client.call(1)  # a call after the first data write is kept too
        rec.write("traces", [], counted=True)
    # the run's first heartbeat at its start, the `runs` row last; then, the first time, the
    # heartbeat table's empty idle partition (before the run's heartbeat is removed)
    assert wh.order == ["run_heartbeats", "llm_calls", "rejects", "llm_calls", "traces", "runs",
                        "run_heartbeats"]
    assert wh.partitions("run_heartbeats") == ["idle"]
    assert wh.read("run_heartbeats").num_rows == 0
    (run,) = _rows(wh, "runs")
    assert run["status"] == "success" and run["error"] is None and run["rows_written"] == 0
    # the row names the run's partition (it joins the data on it); its folder is the run's own
    assert run["partition"] == "p"
    assert wh.partitions("runs") == wh.partitions("llm_calls") == [run_partition(LIN)] == ["a/p/r1"]
    assert {c["partition"] for c in _rows(wh, "llm_calls")} == {"p"}
    assert len(_rows(wh, "llm_calls")) == 3


@pytest.mark.parametrize("exc, status", [(RuntimeError("endpoint down"), "failed"),
                                         (KeyboardInterrupt(), "canceled")])
def test_a_stopped_run_writes_its_calls_and_why(weft_home, exc, status):
    wh, client = OrderedWarehouse(), Client()
    with pytest.raises(type(exc)), RunRecord(wh, LIN) as rec:
        rec.track(client)
        client.call(4)
        raise exc
    assert wh.order == ["run_heartbeats", "llm_calls", "runs", "run_heartbeats"]
    assert len(_rows(wh, "llm_calls")) == 4
    (run,) = _rows(wh, "runs")
    assert run["status"] == status
    assert run["error"] == f"{type(exc).__name__}: {exc}"


def test_a_failed_calls_write_still_leaves_a_failed_runs_row(weft_home):
    class NoCalls(OrderedWarehouse):
        def write(self, table, data, **kwargs):
            if table == "llm_calls":
                raise OSError("disk full")
            return super().write(table, data, **kwargs)

    wh, client = NoCalls(), Client()
    with pytest.raises(ValueError, match="bad"), RunRecord(wh, LIN) as rec:
        rec.track(client)
        client.call(1)
        raise ValueError("bad")
    (run,) = _rows(wh, "runs")
    assert run["status"] == "failed" and run["error"] == "ValueError: bad"


def test_a_second_interrupt_while_recording_a_canceled_run_does_not_cut_the_record(weft_home):
    # An orchestrator that forwards its own interrupt to a run already stopping (Dagster's
    # multiprocess executor does) sends a second SIGINT while the record is being written.
    import os
    import signal

    class InterruptedWrites(OrderedWarehouse):
        armed = False

        def write(self, table, data, **kwargs):
            if self.armed:
                os.kill(os.getpid(), signal.SIGINT)  # delivered at once to this (main) thread
            return super().write(table, data, **kwargs)

    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN under nohup
    wh, client = InterruptedWrites(), Client()
    with pytest.raises(KeyboardInterrupt, match="first"), RunRecord(wh, LIN) as rec:
        rec.track(client)
        client.call(2)
        wh.armed = True  # every write of the record interrupted from here on
        raise KeyboardInterrupt("first")
    assert wh.order == ["run_heartbeats", "llm_calls", "runs", "run_heartbeats"]
    assert len(_rows(wh, "llm_calls")) == 2
    (run,) = _rows(wh, "runs")
    assert run["status"] == "canceled" and run["error"] == "KeyboardInterrupt: first"
    assert signal.getsignal(signal.SIGINT) is before  # restored
