"""What `weft materialize` / `weft job` print after a run: each materialization with its rows,
an evaluation's scores, and the run's page on the UI that is actually serving."""

import json
import os
import subprocess
import sys

import dagster as dg

from cli.instance import UI_STATE, ensure_dagster_home, runs_summary


@dg.asset
def scored() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"rows": 3, "avg@2": 0.5, "pass@1": 0.25,
                                          "pass@2": 0.75, "model": "m"})


def _summary(instance) -> list[str]:
    result = dg.materialize([scored], instance=instance)
    return runs_summary(instance, [instance.get_run_by_id(result.run_id)])


def test_the_summary_prints_rows_scores_and_the_serving_ui(weft_home):
    instance = dg.DagsterInstance.ephemeral()
    lines = _summary(instance)
    assert "[weft]   materialized scored: 3 rows" in lines
    assert "[weft]     scores: avg@2 0.500, pass@1 0.250, pass@2 0.750" in lines
    (ui,) = [line for line in lines if "UI: " in line]
    assert "http://127.0.0.1:3000/runs/" in ui and "start it with `make ui`" in ui
    # a UI serving on another port, whose process is alive
    state = ensure_dagster_home() / UI_STATE
    state.write_text(json.dumps({"host": "127.0.0.1", "port": 3111, "pid": os.getpid()}))
    (ui,) = [line for line in _summary(instance) if "UI: " in line]
    assert "http://127.0.0.1:3111/runs/" in ui and "make ui" not in ui
    # ... and one that has stopped
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    state.write_text(json.dumps({"host": "127.0.0.1", "port": 3111, "pid": gone.pid}))
    (ui,) = [line for line in _summary(instance) if "UI: " in line]
    assert "http://127.0.0.1:3000/runs/" in ui
